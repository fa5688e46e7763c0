"""``await sndr`` in a trio task ([exec.as.awaitable], docs/trio.md "Awaiting a sender",
docs/task.md 'How "stopped" unwinds a task',
docs/trio.md "trio cancellation becomes a stop request").

``Sender.__await__`` calls :func:`await_sender` (installed in ``_hooks`` when this module is
imported). In a coroutine driven by structexec's own loop (:mod:`._coroutine_driver`) the
driver takes the sender; in a trio task this module:

1. connects the sender to a small receiver whose environment provides ``get_scheduler`` (the
   run's :func:`trio_scheduler`) and ``get_stop_token``: a token that is stopped when the
   awaiting task's trio cancellation hits. Both are created only if the operation asks.
   Inside a coroutine hosted by structexec the other queries come from the hosting receiver's
   environment ([exec.connect]);
2. starts it. If it completed inside ``start`` the result is returned without yielding to
   trio at all (``await sx.just(1)`` is cheaper than a checkpoint);
3. otherwise parks the task with ``trio.lowlevel.wait_task_rescheduled``. A completion on the
   trio thread reschedules the task directly, one from another thread goes through
   ``TrioToken.run_sync_soon``. If trio cancels the task meanwhile, the abort function requests stop
   on the operation and the task *keeps waiting, shielded*, until the operation completes (an
   operation state must outlive its operation,
   docs/trio.md "trio cancellation becomes a stop request");
4. gives the result: ``None`` for no datums, the datum, or a tuple of several (docs/trio.md
   "Awaiting a sender"); raises an error datum (an exception as it is, anything else as
   ``ErrorValue``); for stopped, raises ``trio.Cancelled`` (by re-entering a checkpoint inside the
   cancelled scope) when the stop came from the task's own trio cancellation and ``sx.Stopped``
   otherwise (docs/task.md 'How "stopped" unwinds a task'). A value that arrives despite the
   cancellation is returned; the ``Cancelled`` comes at the next checkpoint
   (docs/trio.md "trio cancellation becomes a stop request").

**Fast path: ``await sx.when_all(c1(), c2(), ...)`` of coroutine objects** ([exec.when.all],
docs/trio.md "Awaiting a sender", docs/trio.md "trio cancellation becomes a stop request",
docs/trio.md "Coroutines are senders; a stop request cancels them",
docs/scopes.md "The nursery face: `async with`"; docs/trio.md "Awaiting a sender",
docs/task.md 'How "stopped" unwinds a task',
docs/trio.md "trio cancellation becomes a stop request"). In a plain trio task (not inside a
structexec-hosted coroutine), when every child is a not-yet-started ``types.CoroutineType``, no
custom domain exists and the task has no finite effective deadline, the children run as tasks of a
trio nursery opened inside the awaiting task instead of as hosted system tasks, each in its own
shielded cancel scope, behind the generic ``when_all`` operation. The observable outcome is the
general path's:

* values are concatenated in argument order with the values convention (a child returning
  ``None`` adds no datum, ``sx.values(...)`` several, anything else one); the await gives
  ``None``, the datum or a tuple ([exec.when.all], docs/trio.md "Awaiting a sender");
* the first exception wins and cancels the siblings at once (the stop request, [exec.when.all]);
  later ones become notes on it, as in the general path (``report_dropped_errors``); an exception
  also beats an earlier stopped child ([exec.when.all]); it is raised as it is, never inside an
  ``ExceptionGroup`` (the child wrappers catch everything: nothing escapes into the nursery);
* a child that ends stopped (an ``sx.Stopped`` escaping it, or a ``trio.Cancelled``, i.e. the
  when_all's own stop or the awaiting task's cancellation) cancels its siblings ([exec.when.all]);
  the await then raises ``trio.Cancelled`` if the awaiting task's cancellation hit before the last
  child finished (through a checkpoint, as the general path does), ``sx.Stopped`` otherwise;
* the await returns or raises only after every child task has finished ([exec.when.all]); a trio
  cancellation of the awaiting task cancels the children
  (docs/trio.md "trio cancellation becomes a stop request": the stop request), and a value that
  arrives despite it is returned;
* a ``BaseException`` other than ``Cancelled``/``Stopped`` (``KeyboardInterrupt``,
  ``SystemExit``) escaping a child stops the siblings and is raised from the await, as the
  general path's hosted task hands it to the await's ``raised_sink`` (so ``trio.run`` raises
  it as it raises a nursery child's); the first one wins. Difference: the general path raises
  it at once and abandons the stopped siblings, the fast path once they have finished;
* a ``KeyboardInterrupt`` that trio delivers to the awaiting (main) task while it waits stops
  the children and is raised alone once they have finished;
* group handling at the child boundary mirrors the general path's cancel scope: when the child
  is cancelled, ``trio.Cancelled`` is removed from a ``BaseExceptionGroup`` it raises;
* the child tasks carry the coroutine's ``__qualname__`` as their name, a copy of the
  awaiting task's context, and ``KeyboardInterrupt`` protection (as system tasks have);
  senders awaited inside see the trio scheduler and a stop token tied to the child task's
  own cancellation, which the when_all's stop and the awaiting task's cancellation both
  reach.

Whether the awaiting task's cancellation hit before the last child finished is read from
trio's private ``Task._cancel_status.effectively_cancelled`` of the awaiting task (read only;
without it, at the moment the task resumes); its deadline is read from the same private chain
(``_deadline_is_finite``; the public ``trio.current_effective_deadline()`` if that fails).

The remaining differences, asserted in ``tests/test_trio_when_all_fast_path.py``:

* the child tasks' ``parent_nursery`` is the new nursery (not the system nursery);
* a ``Cancelled`` seen inside a child because the awaiting task was cancelled carries that
  cancellation's trio metadata (``reason``, ``source``) rather than ``"explicit"`` with no
  reason;
* a deadline set on an enclosing scope *while* the children run is visible to them through
  ``trio.current_effective_deadline()`` (with a finite deadline at the await the general path
  is taken, so this cannot differ at the start);
* when children return values (or raise) despite a ``KeyboardInterrupt`` delivered to the
  awaiting task, the general path returns them (raises) and raises the ``KeyboardInterrupt``
  at the next checkpoint; the fast path raises the ``KeyboardInterrupt`` from the await.

``FAST_WHEN_ALL = False`` turns the fast path off (tests compare both paths).
"""

from __future__ import annotations

import inspect
import math
import sys
import threading
import types
from collections.abc import Generator
from typing import Any

import trio
import trio.lowlevel as tl

from .._algorithms._when_all import _WhenAllSender, report_dropped_errors
from .._core import _domain, _hooks
from .._core._connect import connect_unchecked as connect
from .._core._coroutine_driver import HostMark, host_mark, swallowed_stop_message
from .._core._errors import ErrorValue, Stopped
from .._core._protocol import completed_twice
from .._core._queries import _MISSING, QueryError, get_scheduler, get_stop_token, query_or
from .._core._stop_token import (
    combined_stop_token,
    inplace_stop_source,
    inplace_stop_token,
    is_unstoppable,
)
from .._core._values import values
from .._schedulers._run_loop import raised_sink
from ._coroutine_sender import name_of
from ._trio_bridge import (
    RunState,
    current_run,
    hand_to_run,
    hosted_env,
    in_trio_run,
    run_finished_error,
    runs_by_thread,
)
from ._trio_scheduler import _TrioScheduleSender

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup  # type: ignore[import-not-found, unused-ignore]

_collapse_group: Any
try:  # trio's own helper, so that the child boundary matches CancelScope.__exit__ exactly
    from trio._core._run import collapse_exception_group as _collapse_group
except ImportError:  # pragma: no cover - a trio without it: groups are kept as they are
    _collapse_group = lambda excgroup: excgroup  # noqa: E731


__all__: list[str] = []

#: ``await sx.when_all(<coroutines>)`` runs the coroutines in a nursery of the awaiting task
#: (see the module docstring). Tests set it to ``False`` to force the general path.
FAST_WHEN_ALL = True

_get_ident = threading.get_ident
_LOCK = threading.Lock()  # handshake between a parking task and an off-thread completer
_driver_state = _hooks.driver_state
_reschedule = tl.reschedule
_wait_task_rescheduled = tl.wait_task_rescheduled
_checkpoint = tl.checkpoint
_FAILED = tl.Abort.FAILED
_get_hosted = hosted_env.get
_get_mark = host_mark.get
_set_hosted = hosted_env.set
_set_mark = host_mark.set
_runs_get = runs_by_thread.get
_current_task = tl.current_task
_current_effective_deadline = trio.current_effective_deadline
_open_nursery = trio.open_nursery
_Cancelled = trio.Cancelled
_CoroutineType = types.CoroutineType
_getcoroutinestate = inspect.getcoroutinestate
_CORO_CREATED = inspect.CORO_CREATED
_INF = math.inf
_NEG_INF = -math.inf
_enable_ki_protection = tl.enable_ki_protection

_PENDING, _VALUE, _ERROR, _STOPPED = 0, 1, 2, 3
#: ``raised_sink`` took a BaseException raised while another agent completed this work.
_RAISED = 4


class _AwaitRcvr:
    """The receiver of an awaited sender; it is also its own environment
    (docs/trio.md "Awaiting a sender")."""

    __slots__ = ("_base", "_cancelled", "_kind", "_parked", "_result", "_run", "_src", "_task")

    def __init__(self, run: RunState, base: Any) -> None:
        self._run = run
        self._base = base  # env of the hosting receiver inside a hosted coroutine, else None
        self._kind = _PENDING
        self._result: Any = None
        self._src: inplace_stop_source | None = None
        self._cancelled = False  # the awaiting task's trio cancellation hit
        self._parked = False
        self._task: Any = None

    # -- environment ---------------------------------------------------------------------

    def get_env(self) -> _AwaitRcvr:
        return self

    def _sx_try(self, q: Any, default: Any) -> Any:
        if q is get_stop_token:
            return self._stop_token()
        if q is raised_sink:
            return self._take_raised
        base = self._base
        if base is not None:
            r = query_or(base, q, _MISSING)
            if r is not _MISSING:
                return r
        if q is get_scheduler:
            return self._run.sched
        return default

    def query(self, q: Any, *args: Any) -> Any:
        r = self._sx_try(q, _MISSING)
        if r is _MISSING:
            if args and self._base is not None:
                return self._base.query(q, *args)
            raise QueryError(f"the environment of an awaiting trio task does not support {q!r}")
        return r

    def _stop_token(self) -> Any:
        src = self._src
        if src is None:
            with _LOCK:
                src = self._src
                if src is None:
                    src = self._src = inplace_stop_source()
                fire = self._cancelled
            if fire:
                src.request_stop()
        # A fresh token (equal to src.get_token()) rather than the source's cached one, which
        # would make a source <-> token reference cycle that only the GC can free.
        tok = inplace_stop_token(src)
        base = self._base
        if base is not None:
            # Inside a coroutine hosted by structexec, the hosting operation's stop requests
            # must reach this token too, also after this await has returned (a coroutine
            # that reads its token once with ``await sx.read_env(sx.get_stop_token)`` and
            # polls it later, [exec.connect]).
            hosted = query_or(base, get_stop_token, None)
            if hosted is not None and not is_unstoppable(hosted):
                return combined_stop_token(tok, hosted)
        return tok

    def _abort(self, raise_cancel: Any) -> Any:
        # trio cancellation of the parked task -> stop request; keep waiting
        # (docs/trio.md "trio cancellation becomes a stop request").
        self._cancelled = True
        base = self._base
        if type(base) is _FastChildEnv:
            # A child of a fast-path when_all is cancelled only when the when_all stops or
            # its awaiting task is cancelled; either way the general path's when_all stop
            # source has fired by now ([exec.when.all]).
            base._st._request_stop()
        with _LOCK:
            src = self._src
        if src is not None:
            src.request_stop()
        return _FAILED

    # -- completions ------------------------------------------------------------------------

    def _take_raised(self, exc: BaseException) -> bool:
        # raised_sink (_run_loop): user code raised exc (KeyboardInterrupt, SystemExit) while
        # the trio scheduler or a pool thread completed this work: raise it from the await,
        # as if it had run here; the rest of the work is stopped and abandoned.
        if self._kind:
            return False
        with _LOCK:
            src = self._src
        if src is not None:
            src.request_stop()
        self._complete(_RAISED, exc, "raised")
        return True

    def _complete(self, kind: int, data: Any, how: str) -> None:
        if self._kind:
            if self._kind == _RAISED:
                return  # a late completion of abandoned work (_take_raised)
            raise completed_twice(self, how)
        run = self._run
        # Not call_in_run (_trio_bridge): the await hot path, and the trio thread does other
        # work here (no lock) than another thread (lock, then wake only a parked task).
        if _get_ident() == run.thread and not run.finished:
            # On the trio thread the awaiting task is either inside start() or parked.
            self._result = data
            self._kind = kind
            if self._parked:
                self._parked = False
                _reschedule(self._task)
            return
        with _LOCK:
            self._result = data
            self._kind = kind
            parked = self._parked
        if parked and not hand_to_run(run, self._wake):
            raise run_finished_error("complete an awaited sender")

    def _wake(self) -> None:
        if self._parked:
            self._parked = False
            _reschedule(self._task)

    def set_value(self, *vals: Any) -> None:
        self._complete(_VALUE, vals, "set_value")

    def set_error(self, err: Any) -> None:
        self._complete(_ERROR, err, "set_error")

    def set_stopped(self) -> None:
        self._complete(_STOPPED, None, "set_stopped")


def _not_in_trio() -> RuntimeError:
    return RuntimeError(
        "`await sender` needs a trio task (inside trio.run) or a coroutine driven by "
        "structexec (sx.task, a coroutine passed as a sender); it cannot be awaited from "
        "asyncio or other event loops"
    )


def await_sender(sndr: Any) -> Generator[Any, Any, Any]:
    """The generator behind ``Sender.__await__`` (see the module docstring)."""
    driver = _driver_state.driver
    if driver is not None:
        return (yield from driver.await_sender(sndr))
    tp = type(sndr)
    if tp is _WhenAllSender and FAST_WHEN_ALL:
        # when_all of coroutines: a nursery of this task (module docstring), in a plain trio
        # task or a child of another fast-path when_all. _children is _WhenAllSender's
        # private tuple of children (its public ``children`` property).
        hosted = _get_hosted()
        children = sndr._children
        st = (
            _nursery_state(children, hosted)
            if hosted is None or (type(hosted) is _FastChildEnv and not hosted.stopped())
            else None  # a stopped parent: the general path stops before starting anything
        )
        if st is not None:
            return (yield from st._run(children).__await__())
    run = _runs_get(_get_ident())
    if run is None:  # the first structexec await of this run, or not in trio at all
        try:
            run = current_run()
        except RuntimeError:
            raise _not_in_trio() from None
    if tp is _TrioScheduleSender and sndr._sch._run is run:
        # schedule(trio_scheduler()) awaited by a task of its own run: one checkpoint.
        yield from _checkpoint().__await__()
        return None
    r = _AwaitRcvr(run, _get_hosted())
    op = connect(sndr, r)
    op.start()
    if not r._kind:
        try:
            r._task = tl.current_task()
        except RuntimeError:
            raise _not_in_trio() from None
        with _LOCK:
            if not r._kind:
                r._parked = True
        if r._parked:
            try:
                yield from _wait_task_rescheduled(r._abort).__await__()
            except BaseException:
                # Only GeneratorExit can get here (the coroutine was closed while parked,
                # which trio never does to a live task): forget the task.
                with _LOCK:
                    r._parked = False
                raise
    kind = r._kind
    if kind == _VALUE:
        vals = r._result
        n = len(vals)
        if n == 1:
            return vals[0]
        return None if n == 0 else vals
    if kind == _RAISED:
        raise r._result
    if kind == _ERROR:
        err = r._result
        r._result = None
        if isinstance(err, BaseException):
            raise err
        raise ErrorValue(err)
    mark = _get_mark()
    if mark is not None and mark.task is _current_task():
        # This task hosts a coroutine run as a sender: what is raised here must not be
        # swallowed (the host checks, _coroutine_sender.TrioHostedOp._main).
        mark.stopped = True
    if r._cancelled:
        # The stop came from this task's trio cancellation: let trio raise its Cancelled.
        yield from _checkpoint().__await__()
    raise Stopped()


# --------------------------------------------------------------------------------------------
# await sx.when_all(<coroutines>) in a nursery of the awaiting task (module docstring)

_STARTED, _ERROR_D, _STOPPED_D = 0, 1, 2


def _nursery_state(children: tuple[Any, ...], parent: Any) -> _NurseryWhenAll | None:
    """The state for running ``await when_all(*children)`` in a nursery, or ``None`` if not.

    Only fresh coroutine objects (the general path raises ``TypeError`` at connect for a used
    one), no custom domain (it could transform the sender), no finite deadline (hosted
    children would not see it), and only in a trio task.
    """
    for c in children:
        if type(c) is not _CoroutineType or _getcoroutinestate(c) != _CORO_CREATED:
            return None
    if len(children) > 1 and len(set(map(id, children))) != len(children):
        return None  # one coroutine given twice: the general path's connect raises TypeError
    if _domain._domains_on:
        return None
    try:
        task = _current_task()
    except RuntimeError:  # not in a trio task: the general path says why
        return None
    # The task's innermost CancelStatus, outside the nursery (private trio state, read only):
    # tells whether *its* cancellation hit, as opposed to the when_all's own stop request.
    status = getattr(task, "_cancel_status", None)
    if _deadline_is_finite(status):
        return None
    return _NurseryWhenAll(len(children), status, parent)


def _deadline_is_finite(status: Any) -> bool:
    """Is ``trio.current_effective_deadline()`` finite (neither ``inf`` nor ``-inf``)?

    Reads trio's private ``CancelStatus`` chain of the current task (read only), which costs a
    sixth of the public call; if trio's internals look different, asks the public function.
    Never says "not finite" when the public function gives a finite deadline (a scope whose
    deadline is ``-inf`` but not yet processed counts as finite: the general path is taken).
    """
    try:
        if status.effectively_cancelled:
            return False
        s = status
        while s is not None:
            scope = s._scope
            if scope._deadline != _INF:
                return True
            if scope._shield:
                return False
            s = s._parent
        return False
    except AttributeError:
        d = _current_effective_deadline()
        return d != _INF and d != _NEG_INF


class _NurseryWhenAll:
    """Bookkeeping of one ``await when_all(<coroutines>)`` run in a nursery ([exec.when.all])."""

    __slots__ = (
        "_base",
        "_cancel_seen",
        "_count",
        "_disp",
        "_env",
        "_err",
        "_more",
        "_outer",
        "_outer_cancelled",
        "_parent",
        "_scope",
        "_src",
        "_vals",
    )

    def __init__(self, n: int, outer: Any, parent: _FastChildEnv | None = None) -> None:
        self._count = n
        self._parent = parent
        self._disp = _STARTED
        self._vals: list[Any] = [None] * n
        self._outer = outer
        # The stop source standing for the general path's when_all stop source; made only if
        # a child asks for its stop token (see _FastChildEnv).
        self._src: inplace_stop_source | None = None
        self._cancel_seen = False
        self._env = _FastChildEnv(self)
        self._more: list[tuple[int, Any]] | None = None  # errors that lost to _err
        self._base: BaseException | None = None  # a child's KeyboardInterrupt, SystemExit
        # Set when used: _scope (in _run), _err (with _disp = _ERROR_D), _outer_cancelled (by
        # the last arrival when _disp is _STOPPED_D).
        self._scope: Any
        self._err: Any
        self._outer_cancelled: bool | None

    async def _run(self, children: tuple[Any, ...]) -> Any:
        i = 0
        try:
            async with _open_nursery() as nursery:
                self._scope = nursery.cancel_scope
                start = nursery.start_soon
                child = self._child
                try:
                    for c in children:
                        start(child, i, c, name=c.__qualname__)
                        i += 1
                except BaseException:  # pragma: no cover - start_soon does not fail here
                    for c in children[i:]:
                        c.close()
                    raise
        except BaseExceptionGroup as group:
            # The child wrappers never raise: only what trio injected into this task while it
            # waited can get here, a KeyboardInterrupt (SIGINT, delivered to the main task).
            # The nursery cancelled the children; the general path's abort function takes it
            # as a cancellation (stop request) and raises it when the stopped result makes it
            # pass a checkpoint. Raise it alone once the children have finished.
            ki = _lone_keyboard_interrupt(group)
            if ki is None:
                raise
        else:
            ki = None
        if ki is not None:
            raise ki
        base = self._base
        if base is not None:  # a child raised KeyboardInterrupt, SystemExit, ... (_raised)
            self._base = None
            raise base
        disp = self._disp
        if disp == _STARTED:
            out: tuple[Any, ...] = ()
            for v in self._vals:
                if v is None:
                    continue
                if type(v) is values:
                    out += v
                else:
                    out += (v,)
            n = len(out)
            if n == 1:
                return out[0]
            return None if n == 0 else out
        if disp == _ERROR_D:
            err = self._err
            self._err = None
            more = self._more
            if more is not None:
                self._more = None
                report_dropped_errors(err, more)
            raise err
        cancelled = self._outer_cancelled
        if cancelled is None:  # a trio without CancelStatus.effectively_cancelled: look now
            cancelled = _current_effective_deadline() == _NEG_INF
        if cancelled:
            # The stop came from this task's trio cancellation: let trio raise its Cancelled.
            await _checkpoint()
        raise Stopped()

    def _request_stop(self) -> None:
        self._cancel_seen = True
        src = self._src
        if src is not None:
            src.request_stop()

    def _stopped_now(self) -> bool:
        """Whether the general path's when_all would have seen a stop request by now: a
        child failed or stopped, or the awaiting task's trio cancellation hit (the general
        path turns that into a stop request as soon as the task parks)."""
        if self._disp != _STARTED or self._cancel_seen:
            return True
        return getattr(self._outer, "effectively_cancelled", None) is True

    def _token(self) -> Any:
        src = self._src
        if src is None:
            src = self._src = inplace_stop_source()
            if self._stopped_now():
                src.request_stop()
        tok = inplace_stop_token(src)
        parent = self._parent  # nested in a child of another fast-path when_all
        return tok if parent is None else combined_stop_token(tok, parent._st._token())

    @_enable_ki_protection
    async def _child(self, i: int, coro: Any) -> None:
        _set_hosted(self._env)  # this task's context only (trio copies it per task)
        mark = HostMark(_current_task())
        _set_mark(mark)
        try:
            result = await coro
            if mark.stopped:  # the coroutine swallowed a stop (as TrioHostedOp._main)
                raise RuntimeError(swallowed_stop_message(f"the coroutine {name_of(coro)}"))
        except BaseException as exc:
            self._raised(exc, i)
        else:
            if self._disp == _STARTED:  # values kept only while nothing failed ([exec.when.all])
                self._vals[i] = result
                self._count -= 1
            else:
                self._arrive()

    def _raised(self, exc: BaseException, i: int) -> None:
        # What the general path's shielded CancelScope + ``except Stopped / Exception /
        # BaseException`` make of an exception escaping the coroutine (_coroutine_sender).
        ex: BaseException | None = exc
        if isinstance(exc, (_Cancelled, BaseExceptionGroup)) and (
            _current_effective_deadline() == _NEG_INF  # this child is cancelled
        ):
            if isinstance(exc, _Cancelled):
                ex = None
            else:
                rest = exc.split(_Cancelled)[1]
                ex = _collapse_group(rest) if rest is not None else None
        if ex is None or isinstance(ex, Stopped):
            self._stop()
            self._arrive()
            return
        if isinstance(ex, Exception):
            if self._disp != _ERROR_D:  # the first error wins, also over a stop ([exec.when.all])
                first = self._disp == _STARTED
                self._disp = _ERROR_D
                self._err = ex
                if first and self._src is not None:
                    self._src.request_stop()
                self._scope.cancel()
            else:  # reported with the error that won, as the general path does
                more = self._more
                if more is None:
                    more = self._more = []
                more.append((i, ex))
            self._arrive()
            return
        # KeyboardInterrupt, SystemExit, ...: never an error datum
        # (docs/senders.md "What happens when things fail"). Like the general path (the hosted task
        # hands it to the await's raised_sink), the siblings are stopped and the await raises it;
        # here once the children have finished.
        self._stop()
        if self._base is None:
            self._base = ex
        self._arrive()

    def _stop(self) -> None:
        if self._disp == _STARTED:  # ([exec.when.all])
            self._disp = _STOPPED_D
            if self._src is not None:
                self._src.request_stop()
            self._scope.cancel()

    def _arrive(self) -> None:
        self._count = c = self._count - 1
        if c == 0 and self._disp == _STOPPED_D:
            # The general path raises Cancelled when the awaiting task was cancelled while it
            # waited, i.e. before the last child completed: look now, not when it resumes.
            outer = self._outer
            self._outer = None
            st = getattr(outer, "effectively_cancelled", None)
            self._outer_cancelled = st if type(st) is bool else None


class _FastChildEnv:
    """What a child of the fast path hosts its awaits in (``hosted_env``), as a hosted
    coroutine of the general path does: ``get_stop_token`` is when_all's own stop token
    (stopped when a child fails or stops), so a token a child reads with ``read_env`` fires
    as the general path's does ([exec.when.all], [exec.connect]). Nothing else is answered here (the
    awaiting receiver adds the trio scheduler)."""

    __slots__ = ("_st",)

    def __init__(self, st: _NurseryWhenAll) -> None:
        self._st = st

    def _sx_try(self, q: Any, default: Any) -> Any:
        return self._st._token() if q is get_stop_token else default

    def stopped(self) -> bool:
        """Whether this when_all, or one it is nested in, has a stop request by now."""
        st = self._st
        return st._stopped_now() or (st._parent is not None and st._parent.stopped())

    def query(self, q: Any, *args: Any) -> Any:
        if q is get_stop_token and not args:
            return self._st._token()
        raise QueryError(f"the environment of a when_all child does not support {q!r}")


def _lone_keyboard_interrupt(group: BaseExceptionGroup[Any]) -> BaseException | None:
    excs = group.exceptions
    if len(excs) == 1 and isinstance(excs[0], KeyboardInterrupt):
        return excs[0]
    return None


def on_trio_thread() -> bool:
    """True on a thread that is running ``trio.run`` (``sync_wait`` refuses there,
    docs/trio.md "Threads")."""
    return in_trio_run()


_hooks.await_sender = await_sender
_hooks.on_trio_thread = on_trio_thread
