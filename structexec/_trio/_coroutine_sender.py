"""Coroutine objects and other awaitables as senders ([exec.connect] connect-awaitable).

[exec.connect], the trio guide "Coroutines are senders; a stop request cancels them",
the scopes guide "The nursery face: `async with`" ("Coroutine objects and other awaitables are
senders"), 2.4, 2.5. ``sx.connect(coro, rcvr)`` (and so ``when_all(coro1, coro2)``,
``spawn(coro, token)``, ...) gives an operation that, when started,

* **on the trio thread** (or from another thread when the receiver's environment names a live
  trio run: a trio ``get_scheduler`` or a host nursery) runs the awaitable in its own trio task,
  inside its own ``trio.CancelScope``. The scope is shielded from ambient trio cancellation
  (the scopes guide "The nursery face: `async with`"): only the receiver's stop token cancels it. A
  stop request, from any thread, cancels the scope (off the trio thread through
  ``TrioToken.run_sync_soon``), and the ``Cancelled`` that results completes the operation with
  ``set_stopped()``, not an error
  (the trio guide "Coroutines are senders; a stop request cancels them"). The task runs in the
  nursery named by the private ``trio_host_nursery`` query (counting scopes write it) or else as a
  system task of the current run, which the run waits for; nothing outlives the operation: the task
  ends when the awaitable finishes, right before the operation completes;
* **with no trio run on the thread and none in the environment** (for example under
  ``sync_wait``) is driven by structexec's own loop (:class:`CoroutineDriver`), on the
  starting thread; awaiting trio primitives then raises a clear error.

Outcome ([exec.connect]): the returned value ``v`` completes ``set_value(v)`` (``set_value()`` for
``None``, ``set_value(*xs)`` for ``sx.values(*xs)``; the trio guide "Awaiting a sender"); an
escaping ``Exception`` completes ``set_error(exc)``; a stop (the operation's own cancellation, or an
awaited sender that completed stopped, which raises ``sx.Stopped``) completes ``set_stopped()``. A
coroutine that catches what an awaited sender's stopped completion raised (``sx.Stopped``, or
``trio.Cancelled`` when the stop came from the hosting task's cancellation) and returns a value
completes ``set_error(RuntimeError)``, as under the coroutine driver and in ``task``: a stopped
completion cannot be caught. ``trio.Cancelled`` raised by a trio primitive (``trio.sleep``) follows
trio's rules: a value returned despite it is delivered. Senders awaited inside see the receiver's
environment (forwarding queries, [exec.as.awaitable], [exec.connect]), with the stop token of the
hosting trio task. The completion happens after the awaitable has finished.

Internal API for ``task`` and scopes::

    host_coroutine(coro, rcvr, *, env=None, nursery=None) -> TrioHostedOp  # started

runs ``coro`` in a trio task of the current run (call it on the trio thread), as above; ``env``
is what senders awaited inside see besides their stop token (default: ``FWD-ENV(get_env(
rcvr))``) and ``nursery`` the host nursery (default: a system task).
"""

from __future__ import annotations

import _thread
import contextvars
import functools
import inspect
import signal
import sys
import threading
import types
import weakref
from typing import TYPE_CHECKING, Final

import trio
import trio.lowlevel as tl

if sys.version_info < (3, 11):  # pragma: no cover - the exceptiongroup backport
    from exceptiongroup import BaseExceptionGroup  # type: ignore[import-not-found, unused-ignore]

from .._core import _hooks
from .._core._coroutine_driver import CoroutineDriver, HostMark, host_mark, swallowed_stop_message
from .._core._env import fwd_env, get_env
from .._core._errors import Stopped, terminate
from .._core._protocol import twice_started
from .._core._queries import get_stop_token, query_or
from .._core._snapshot import HOSTED, Hosted
from .._core._stop_token import stop_callback_for
from .._core._values import send_result
from .._schedulers._run_loop import sink_of
from ._detach import RELEASE, watch_run
from ._trio_bridge import (
    RunState,
    call_in_run,
    current_run,
    hand_to_run,
    hosted_env,
    in_trio_run,
    run_finished_error,
    run_of_env,
    runs_by_thread,
    trio_host_nursery,
)

if TYPE_CHECKING:
    import weakref as _weakref
    from collections.abc import Awaitable

    from .._core._contracts import Env, Rcvr
    from .._core._coroutine_driver import Steppable
    from .._core._stop_token import StopCallback
    from ._trio_bridge import HostNursery

__all__: list[str] = []

_get_ident = threading.get_ident
_runs_get = runs_by_thread.get
_NOTHING: Final = object()
_CoroutineType = types.CoroutineType
_getcoroutinestate = inspect.getcoroutinestate
_CORO_CREATED = inspect.CORO_CREATED


def name_of(aw: object) -> str:
    q = getattr(aw, "__qualname__", None)
    return q if isinstance(q, str) else type(aw).__qualname__


class TrioHostedOp:
    """Runs an awaitable in a trio task with its own cancel scope (see the module docstring).

    ``TrioHostedOp(aw, rcvr, run, env=None, nursery=None)``; ``start()`` must be called on the
    trio thread of ``run``.
    """

    __slots__ = ("_aw", "_cb", "_env", "_nursery", "_rcvr", "_run", "_scope", "_started")

    def __init__(
        self,
        aw: Awaitable[object],
        rcvr: Rcvr,
        run: RunState,
        env: Env | None = None,
        nursery: HostNursery | None = None,
    ) -> None:
        self._aw: Awaitable[object] | None = aw
        self._rcvr: Rcvr | None = rcvr
        self._run = run
        self._env = env
        self._nursery = nursery
        self._scope: trio.CancelScope | None = None
        self._cb: StopCallback | None = None
        self._started = False

    def start(self) -> None:
        if self._started:
            raise twice_started(self)
        self._started = True
        self._host(get_env(self._rcvr))

    def close(self) -> None:
        """Drop a connected, never-started operation: close the coroutine at once (no "never
        awaited" warning, no waiting for the garbage collector;
        the senders guide "Writing your own sender")."""
        if not self._started:
            self._started = True
            aw = self._aw
            self._aw = self._rcvr = None
            _close(aw)

    def _host(self, rcvr_env: Env) -> None:
        # On the trio thread of self._run.
        self._scope = trio.CancelScope(shield=True)
        if self._env is None:
            self._env = fwd_env(rcvr_env)
        tok = get_stop_token(rcvr_env)
        if tok.stop_possible():
            self._cb = stop_callback_for(tok, self._on_stop)
        name = name_of(self._aw)
        nursery = self._nursery
        if nursery is not None:
            try:
                nursery.start_soon(self._main, name=name)
                return
            except RuntimeError:
                self._nursery = None  # closed: fall back to a system task of the run
        if not self._run.watched:
            watch_run(self._run)  # a coroutine that detaches ends the operation (_detach)
        tl.spawn_system_task(self._main, name=name, context=contextvars.copy_context())

    def _on_stop(self) -> None:
        # False: the run has ended, nothing to cancel. _scope is set by _host.
        call_in_run(self._run, self._scope.cancel)  # type: ignore[union-attr]

    async def _main(self) -> None:
        hosted_env.set(self._env)
        mark = HostMark(tl.current_task())
        host_mark.set(mark)
        try:
            aw = self._aw
            self._aw = None
            result: object = _NOTHING
            kind = 0
            err: object = None
            try:
                with self._scope:  # type: ignore[union-attr]  # set by _host
                    result = await aw  # type: ignore[misc]  # set until now
            except Stopped:
                kind = 2
            except Exception as e:
                kind, err = 1, e
            except BaseException as exc:
                # KeyboardInterrupt, SystemExit, ...: never an error datum
                # (docs/senders.md "What happens when things fail").
                if self._rcvr is None:
                    raise  # completed when its task detached (detached()): not ours any more
                if (
                    self._nursery is None
                    and not isinstance(exc, trio.Cancelled)
                    and self._hand_over(exc)
                ):
                    return  # the consumer raises it where it waits
                interrupt = getattr(self._nursery, "interrupt", None)
                if interrupt is not None and not isinstance(
                    exc, (trio.Cancelled, BaseExceptionGroup)
                ):
                    # A counting scope's host: the scope takes it (and raises it at its exit)
                    # before the operation completes stopped, so that whoever awaits the
                    # result (a future in the block's body) is cancelled with the block, as
                    # a nursery's body is when a child raises.
                    interrupt(self._rcvr, exc)
                    self._finish(2, None)
                    return
                # The operation still completes (stopped) so that nobody waits forever, and the
                # exception goes on: into the host nursery (whose owner sees it, as a nursery
                # child's), or out of this system task (trio.run then raises TrioInternalError
                # caused by it; a KeyboardInterrupt is delivered as a Ctrl-C instead).
                self._finish(2, None)
                if self._nursery is None and isinstance(exc, KeyboardInterrupt) and _ki_ok():
                    _thread.interrupt_main()
                    return
                raise
            if kind == 0:
                if result is _NOTHING:
                    kind = 2  # our scope caught its Cancelled: the stop request
                elif mark.stopped:
                    # An awaited sender completed stopped, and the coroutine caught what that
                    # raised and returned: the rule of the coroutine driver (module docstring).
                    msg = swallowed_stop_message(f"the coroutine {name_of(aw)}")
                    kind, err = 1, RuntimeError(msg)
            self._finish(kind, err if kind else result)
        finally:
            # The coroutine is done: without this, the task, its context (which holds the
            # mark) and the mark are a reference cycle left to the cycle collector.
            mark.task = None

    def _hand_over(self, exc: BaseException) -> bool:
        """Give ``exc`` to the consumer that waits for this work (its ``raised_sink``: an
        ``await`` in a trio task, ``sync_wait``), which raises it where it waits; then
        complete stopped (the consumer ignores that). ``False`` if nobody took it."""
        rcvr = self._rcvr
        sink = sink_of(get_env(rcvr)) if rcvr is not None else None
        if sink is None:
            return False
        try:
            taken = sink(exc) is True
        except Exception:  # pragma: no cover - a broken sink: fall back
            taken = False
        if taken:
            self._finish(2, None)
        return taken

    def detached(self) -> None:
        """The trio task running the awaitable detached its coroutine for good
        (``trio.lowlevel.permanently_detach_coroutine_object``; a counting scope's detach
        watch calls this): its outcome will never reach trio, so the operation completes
        stopped now, and whatever the coroutine does later is no longer this operation's."""
        if self._rcvr is not None:
            self._finish(2, None)

    def _finish(self, kind: int, data: object) -> None:
        if self._rcvr is None:
            return  # completed already, when its task detached (detached())
        cb = self._cb
        if cb is not None:
            self._cb = None
            cb.close()  # after this, _on_stop is neither running nor going to run
        # Drop the references that would keep a cycle (op -> receiver -> parent op -> op)
        # alive after completion: operation graphs then die by reference counting.
        rcvr = self._rcvr
        self._rcvr = self._env = self._scope = None
        try:
            if kind == 0:
                send_result(rcvr, data)
            elif kind == 1:
                rcvr.set_error(data)
            else:
                rcvr.set_stopped()
        except Exception as exc:
            terminate(
                "a receiver's completion raised; completions must not raise ([exec.recv.concepts])",
                exc,
            )
        except BaseException as exc:
            # User code run in the completion (an upon_stopped or then function) raised a
            # KeyboardInterrupt, SystemExit, ...: the receivers between here and the consumer
            # can no longer complete. As when the trio scheduler completes work, the consumer's
            # raised_sink takes it (a scope: the work ends, the scope raises it at its exit);
            # otherwise it goes on out of this task.
            sink = sink_of(get_env(rcvr))
            if sink is None:
                raise
            try:
                taken = sink(exc) is True
            except Exception:  # pragma: no cover - a broken sink: it goes on
                taken = False
            if not taken:
                raise

    def _sx_describe(self) -> Hosted | None:
        """Once started: the work runs in a hosted trio task, for ``operation_tree()``
        (``_contracts.Describable``; the tree finds the task by its coroutine)."""
        return HOSTED if getattr(self, "_started", False) else None


def _release_main(f: dict[str, TrioHostedOp]) -> None:
    """The system task running ``TrioHostedOp._main`` detached its coroutine (``_detach``):
    the operation completes stopped (:meth:`TrioHostedOp.detached`)."""
    f["self"].detached()


RELEASE[TrioHostedOp._main.__code__] = _release_main


def _ki_ok() -> bool:
    """Does a Ctrl-C reach trio as ``KeyboardInterrupt`` (Python's SIGINT handler is on)?"""
    try:
        return callable(signal.getsignal(signal.SIGINT))
    except Exception:  # pragma: no cover - no signal support
        return False


def host_coroutine(
    coro: Awaitable[object],
    rcvr: Rcvr,
    *,
    env: Env | None = None,
    nursery: HostNursery | None = None,
) -> TrioHostedOp:
    """Run ``coro`` in a trio task of the current run and complete ``rcvr`` with its outcome.

    Call on the trio thread. Returns the started operation (keep it until ``rcvr`` completes).
    See the module docstring for ``env`` and ``nursery``.
    """
    op = TrioHostedOp(coro, rcvr, current_run(), env, nursery)
    op.start()
    return op


class _AwaitableOp(TrioHostedOp):
    """``connect(awaitable, rcvr)``: picks trio hosting or the coroutine driver at start."""

    __slots__ = ("__weakref__", "_driver")

    def __init__(self, aw: Awaitable[object], rcvr: object) -> None:
        self._aw = aw
        self._rcvr = rcvr  # type: ignore[assignment]  # what connect() was given
        self._env = None
        self._scope = None
        self._cb = None
        self._started = False
        self._driver: CoroutineDriver | None = None

    def start(self) -> None:
        if self._started:
            raise twice_started(self)
        self._started = True
        rcvr = self._rcvr
        e = get_env(rcvr)
        self._nursery = query_or(e, trio_host_nursery, None)
        run = _runs_get(_get_ident())
        if run is None and in_trio_run():
            run = current_run()
        if run is not None:
            # On a trio thread: host the awaitable in this run.
            self._run = run
            self._host(e)
            return
        run = run_of_env(e)
        if run is not None:
            # Another thread, but the environment names a live trio run: start it there.
            self._run = run
            if not hand_to_run(run, self._host, e):
                aw = self._aw
                self._aw = self._rcvr = None
                _close(aw)
                raise run_finished_error("start a coroutine sender on its trio run")
            return
        aw = self._aw
        self._aw = self._rcvr = None  # the driver holds them from now on
        coro = aw if inspect.iscoroutine(aw) else _await_iter(aw)  # type: ignore[arg-type]
        drv = self._driver = CoroutineDriver(coro, rcvr)  # type: ignore[arg-type]
        drv.start()

    def __del__(self) -> None:
        aw = getattr(self, "_aw", None)
        if aw is not None and not self._started:
            # Never started: close the coroutine quietly (an unstarted operation is not an
            # error; Python would otherwise warn that the coroutine was never awaited).
            _close(aw)


def _close(aw: object) -> None:
    close = getattr(aw, "close", None)
    if close is not None:
        try:
            close()
        except Exception:  # pragma: no cover - a broken close() on a foreign awaitable
            pass


def _await_iter(aw: Awaitable[object]) -> Steppable:
    it = aw.__await__()
    if not (hasattr(it, "send") and hasattr(it, "throw")):
        raise TypeError(
            f"{type(aw).__name__}.__await__() returned {type(it).__name__}, which has no "
            "send()/throw(); structexec can only drive generator-based awaitables off trio"
        )
    return it


#: id(coroutine) -> weak reference to the live operation it is connected to (see below).
_connected: dict[int, _weakref.ref[_AwaitableOp]] = {}


def _forget(key: int, ref: object) -> None:
    if _connected.get(key) is ref:
        del _connected[key]


def connect_awaitable(aw: Awaitable[object], rcvr: object) -> _AwaitableOp:
    """``connect`` for a coroutine or other awaitable ([exec.connect],
    the trio guide "Coroutines are senders; a stop request cancels them").

    A coroutine object runs at most once, so it can be connected once: connecting it again
    while the first operation still holds it (connected, or started but not yet running), or
    after it has started or been closed, raises ``TypeError`` naming the coroutine.
    """
    if type(aw) is _CoroutineType:
        if _getcoroutinestate(aw) != _CORO_CREATED:
            raise TypeError(
                f"the coroutine {name_of(aw)} has already been started or closed; a "
                "coroutine object can be connected and started once (call the async function "
                "again for a new coroutine)"
            )
        key = id(aw)
        ref = _connected.get(key)
        if ref is not None:
            prev = ref()
            if prev is not None and prev._aw is aw:
                raise TypeError(
                    f"the coroutine {name_of(aw)} is already connected to another operation; "
                    "a coroutine object can be connected and started once (call the async "
                    "function again for a new coroutine, or wrap a reusable piece of work in "
                    "@sx.task or a sender factory)"
                )
        op = _AwaitableOp(aw, rcvr)
        _connected[key] = weakref.ref(op, functools.partial(_forget, key))
        return op
    return _AwaitableOp(aw, rcvr)


_hooks.connect_awaitable = connect_awaitable
