"""The direct path of ``scope.spawn(coro)`` and ``scope.spawn_future(coro)`` inside ``async
with counting_scope()``.

[exec.spawn], [exec.spawn.future], the scopes guide "The nursery face: `async with`";
the internals guide §3 (the switch ``_fastpaths.FAST.spawn_coro``).

A coroutine object given to ``spawn`` or ``spawn_future`` is a sender ([exec.connect]
connect-awaitable): its operation (``_trio/_coroutine_sender.TrioHostedOp``) runs it in a trio
task of the scope's hosted nursery, inside a shielded cancel scope of its own that the work's
stop token cancels. Inside a ``counting_scope``'s ``async with`` block, on its trio thread, this
module starts that task directly, without the sender, receiver and environment objects of the
general path and without a stop callback per task, with the same observable effects in the same
order:

* the association is taken before the task exists and released when the work completes;
* the task has the coroutine's name and runs in the hosted nursery, in a copy of the spawner's
  context, inside its own shielded cancel scope; senders awaited inside see the forwarding part
  of the work's environment (``hosted_env``: the scope's stop token, its trio scheduler and host
  nursery) and the host mark of the stopped rule;
* the scope's stop request cancels that cancel scope: the scope keeps the cancel scopes of its
  running direct tasks (``_coro_scopes``) and cancels them where it cancels its hosted nursery
  (``_hosts.CountingHost``, on the trio thread); a task that starts after the request
  cancels its own at once. ``spawn_future``'s own stop source (the future abandoned, its
  consumer stopped, or the work asking for its stop token) cancels it too; that source and its
  callback are created only when something asks for them (:class:`_CoroFutureState`);
* the outcome, as ``TrioHostedOp`` + the receiver: returning a value completes ``set_value``
  (``spawn``: returning ``None``; any other value is the ``TypeError`` of value datums); an
  ``Exception`` completes ``set_error`` (``spawn``: recorded by the scope); ``sx.Stopped`` or
  the cancellation of the task's cancel scope is stopped; a coroutine that caught the stop of an
  awaited sender and returned completes with the ``RuntimeError`` of the stopped rule; a
  ``KeyboardInterrupt`` or ``SystemExit`` completes stopped and is the scope's to raise
  (``_nursery.NurseryFace._task_raised``).

``simple_counting_scope`` does not take it (``_coro_scopes`` is ``None``: its coroutines go
the general way, which the benchmark rows of this path do not measure). ``FAST.spawn_coro = False``
sends every call through the general path (``tests/test_spawn_coro_fast_path.py`` compares
both).
"""

from __future__ import annotations

import inspect
import sys
import threading
import types
from typing import TYPE_CHECKING, Any

import trio
import trio.lowlevel as tl

from .._core._coroutine_driver import HostMark, host_mark, swallowed_stop_message
from .._core._env import fwd_env
from .._core._errors import Stopped
from .._core._fastpaths import FAST as _FP
from .._core._stop_token import stop_callback_for
from .._core._values import send_result, values
from .._trio._coroutine_sender import _connected, name_of
from .._trio._detach import DETACHED, RELEASE, undetach, watch_run
from .._trio._trio_bridge import call_in_run, hosted_env, runs_by_thread
from ._site import HOSTED_CODES, note_error
from ._spawn import value_datums_error
from ._spawn_future import _LAZY, _FutureSender, _FutureState

if TYPE_CHECKING:
    from collections.abc import Coroutine
    from types import CodeType

    from .._core._describe import Site

__all__: list[str] = []


_CoroutineType = types.CoroutineType
_get_ident = threading.get_ident
_runs_get = runs_by_thread.get
_current_task = tl.current_task
_state_of = inspect.getcoroutinestate
_CREATED = inspect.CORO_CREATED
#: ``cr_suspended`` (3.11+) answers "not started yet" without ``inspect``'s call.
_HAS_SUSPENDED = sys.version_info >= (3, 11)
_NOTHING: object = object()
_getframe = sys._getframe


def direct_ok(scope: Any, coro: Coroutine[object, object, object]) -> bool:
    """Whether ``coro`` given to ``scope`` takes the direct path: a coroutine object not yet
    started or connected, a ``counting_scope`` inside ``async with``, its trio thread."""
    run = scope._run
    return (
        _FP.spawn_coro
        and type(coro) is _CoroutineType
        and scope._coro_scopes is not None
        and run is not None
        and _runs_get(_get_ident()) is run
        and (
            (coro.cr_frame is not None and not coro.cr_running and not coro.cr_suspended)  # type: ignore[attr-defined, unused-ignore]
            if _HAS_SUSPENDED
            else _state_of(coro) == _CREATED
        )
        and id(coro) not in _connected
    )


def _env_of(scope: Any) -> Any:
    """``hosted_env`` of a directly spawned coroutine: ``FWD-ENV`` of the work's environment
    (the scope's stop token, then the scope's trio scheduler and host nursery), once per block."""
    e = scope._coro_env
    if e is None:
        from .._algorithms._stop_when import StopTokenEnv

        e = scope._coro_env = fwd_env(StopTokenEnv(scope._stop_token, fwd_env(scope._spawn_env)))
    return e


def _caller_site() -> tuple[CodeType, int]:
    """``(code, instruction offset)`` of the user's call: two frames above the direct path's
    entry (user -> ``scope.spawn``/``scope.spawn_future`` -> entry -> here is three)."""
    try:
        f = _getframe(3)
    except ValueError:  # called from a C-level thread entry: no frame above the library
        f = _getframe(0)
    return f.f_code, f.f_lasti


def spawn_coro(scope: Any, coro: Coroutine[object, object, object]) -> None:
    """``scope.spawn(coro)`` on the direct path (see the module docstring)."""
    site = _caller_site()
    if not scope._assoc.try_associate():
        coro.close()  # dropped silently ([exec.spawn]): never started
        return
    cs = trio.CancelScope(shield=True)
    if not scope._run.watched:
        watch_run(scope._run)  # a coroutine that detaches ends the work at once (_detach)
    try:
        scope._nursery.start_soon(_spawned, scope, coro, cs, site, name=name_of(coro))
    except BaseException:  # pragma: no cover - the nursery is open while the scope is entered
        scope._assoc.disassociate()
        coro.close()
        raise
    scope._wrappers += 1


async def _spawned(
    scope: Any, coro: Coroutine[object, object, object], cs: trio.CancelScope, site: Site = None
) -> None:
    # (``coro`` and ``site`` are read by sx.operation_tree(): _site.HOSTED_CODES)
    hosted_env.set(_env_of(scope))
    mark = HostMark(_current_task())
    host_mark.set(mark)
    scopes = scope._coro_scopes
    scopes.add(cs)
    if scope._source.stop_requested():
        cs.cancel()
    result: object = _NOTHING
    try:
        with cs:
            result = await coro
    except Stopped:
        pass
    except Exception as e:
        if DETACHED and undetach(coro):
            raise  # the task detached (_detach): not the scope's any more
        note_error(e, site, scope)
        scope._record_error(e)
    except BaseException as e:
        if DETACHED and undetach(coro):
            raise  # detached, then closed (GeneratorExit) or resumed elsewhere
        # KeyboardInterrupt, SystemExit, ...: the work completes stopped, then the scope
        # raises it (as TrioHostedOp and _guarded do).
        if not isinstance(e, trio.Cancelled):
            note_error(e, site, scope)
        scopes.discard(cs)
        scope._wrappers -= 1
        scope._assoc.disassociate()
        if isinstance(e, trio.Cancelled) or scope._task_raised(e):
            raise
        return
    else:
        if DETACHED and undetach(coro):
            return  # the task detached (_detach): the scope let it go then
        if result is not _NOTHING:
            if mark.stopped:
                scope._record_error(
                    RuntimeError(swallowed_stop_message(f"the coroutine {name_of(coro)}"))
                )
            elif result is not None:
                scope._record_error(
                    value_datums_error(tuple(result) if type(result) is values else (result,))
                )
    finally:
        # The coroutine is done: the mark no longer needs its task. Without this the task,
        # its context (which holds the mark) and all they reference are a reference cycle,
        # freed only by the cycle collector (7 objects of cyclic garbage a task).
        mark.task = None
    if cs.cancelled_caught:
        scope._cancel_seen = True  # cancelled by the stop: the exit may pass a Cancelled on
    if DETACHED and undetach(coro):
        return  # stopped after it detached (_detach): the scope let it go then
    scopes.discard(cs)
    scope._wrappers -= 1
    scope._assoc.disassociate()


# --------------------------------------------------------------------------- spawn_future


class _CoroFutureState(_FutureState):
    """The state of ``scope.spawn_future(coro)`` on the direct path: its own stop source,
    once something creates it (the future abandoned, its consumer stopped, or the work asking
    for its stop token), cancels the task's cancel scope."""

    __slots__ = ("_cs", "_run", "_src_cb")
    _cs: trio.CancelScope
    _run: Any
    _src_cb: Any

    def _get_source(self) -> Any:
        src = self._source
        if src is None:
            src = super()._get_source()
            with _LAZY:
                if self._src_cb is None:  # (_CLOSED once the work has completed)
                    self._src_cb = stop_callback_for(src.get_token(), self._cancel_task)
        return src

    def _cancel_task(self) -> None:
        call_in_run(self._run, self._cs.cancel)  # False: the run has ended, nothing to cancel


def spawn_future_coro(scope: Any, coro: Coroutine[object, object, object]) -> _FutureSender:
    """``scope.spawn_future(coro)`` on the direct path (see the module docstring)."""
    senv = scope._coro_fwd_env  # FWD-ENV of the scope's spawn env, made once per block
    if senv is None:
        senv = scope._coro_fwd_env = fwd_env(scope._spawn_env)
    st = _CoroFutureState(scope, True, senv, coro)
    st._code, st._lasti = _caller_site()
    st._run = scope._run
    st._src_cb = None
    cs = st._cs = trio.CancelScope(shield=True)
    if not scope._assoc.try_associate():
        coro.close()  # never runs ([exec.spawn.future])
        st.set_stopped()
        return _FutureSender(st)
    st._associated.append(None)
    if not scope._run.watched:
        watch_run(scope._run)  # a coroutine that detaches stops its future at once (_detach)
    try:
        scope._nursery.start_soon(_future_task, scope, st, coro, cs, name=name_of(coro))
    except BaseException:  # pragma: no cover - the nursery is open while the scope is entered
        coro.close()
        st._start_raised()
        raise
    scope._wrappers += 1
    return _FutureSender(st)


async def _future_task(
    scope: Any, st: _CoroFutureState, coro: Coroutine[object, object, object], cs: trio.CancelScope
) -> None:
    hosted_env.set(fwd_env(st))
    mark = HostMark(_current_task())
    host_mark.set(mark)
    scopes = scope._coro_scopes
    scopes.add(cs)
    if scope._source.stop_requested():
        cs.cancel()
    result: object = _NOTHING
    err: BaseException | None = None
    kind = 0
    try:
        with cs:
            result = await coro
    except Stopped:
        kind = 2
    except Exception as e:
        kind, err = 1, e
    except BaseException as e:
        if DETACHED and undetach(coro):
            raise  # detached (_detach), then closed (GeneratorExit) or resumed elsewhere
        # KeyboardInterrupt, SystemExit, ...: the scope raises it (as TrioHostedOp and
        # _guarded do) and the future completes stopped. The scope hears of it first, so
        # that the body awaiting the future is cancelled (as a nursery cancels its body
        # when a child raises) before the stop reaches it: the block raises the interrupt
        # alone, as for spawn, not a Stopped beside it.
        if not isinstance(e, trio.Cancelled):
            note_error(e, st._site, scope)
        scopes.discard(cs)
        scope._wrappers -= 1
        _close_cb(st)
        reraise = isinstance(e, trio.Cancelled) or scope._task_raised(e)
        st.set_stopped()
        if reraise:
            raise
        return
    finally:
        mark.task = None  # no reference cycle task -> context -> mark -> task (see _spawned)
    if DETACHED and undetach(coro):
        if kind == 1 and err is not None:
            raise err  # the task detached (_detach): its outcome is its new driver's
        return
    scopes.discard(cs)
    scope._wrappers -= 1
    if kind == 0:
        if result is _NOTHING:
            kind = 2  # the task's cancel scope caught its Cancelled: the stop request
            scope._cancel_seen = True  # (the exit may pass an enclosing Cancelled on)
        elif mark.stopped:
            kind, err = 1, RuntimeError(swallowed_stop_message(f"the coroutine {name_of(coro)}"))
    _close_cb(st)
    if kind == 0:
        send_result(st, result)
    elif kind == 1:
        st.set_error(err)
    else:
        st.set_stopped()


def _close_cb(st: _CoroFutureState) -> None:
    """Deregister the stop source's callback before completing (as ``TrioHostedOp``)."""
    with _LAZY:
        cb = st._src_cb
        st._src_cb = _CLOSED
    if cb is not None and cb is not _CLOSED:  # type: ignore[redundant-expr, unused-ignore]
        cb.close()


_CLOSED: object = object()


HOSTED_CODES[_spawned.__code__] = "spawn"
HOSTED_CODES[_future_task.__code__] = "future"


def _release_spawned(f: dict[str, Any]) -> None:
    """``scope.spawn(coro)``'s task detached its coroutine (``_detach``): the work has ended,
    as a nursery sees a detached child (its association is released now)."""
    scope = f["scope"]
    key = id(f["coro"])
    if key not in DETACHED:
        DETACHED.add(key)
        scope._coro_scopes.discard(f["cs"])
        scope._wrappers -= 1
        scope._assoc.disassociate()


def _release_future(f: dict[str, Any]) -> None:
    """``scope.spawn_future(coro)``'s task detached its coroutine: its result will never
    reach trio, so the future completes stopped now."""
    st = f["st"]
    key = id(f["coro"])
    if key not in DETACHED:
        DETACHED.add(key)
        scope = f["scope"]
        scope._coro_scopes.discard(f["cs"])
        scope._wrappers -= 1
        _close_cb(st)
        st.set_stopped()


RELEASE[_spawned.__code__] = _release_spawned
RELEASE[_future_task.__code__] = _release_future
