"""``await sndr`` in a trio task ([exec.as.awaitable], the trio guide "Awaiting a sender",
the task guide 'How "stopped" unwinds a task',
the trio guide "trio cancellation becomes a stop request").

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
   the trio guide "trio cancellation becomes a stop request");
4. gives the result: ``None`` for no datums, the datum, or a tuple of several (the trio guide
   "Awaiting a sender"); raises an error datum (an exception as it is, anything else as
   ``ErrorValue``); for stopped, raises ``trio.Cancelled`` (by re-entering a checkpoint inside the
   cancelled scope) when the stop came from the task's own trio cancellation and ``sx.Stopped``
   otherwise (the task guide 'How "stopped" unwinds a task'). A value that arrives despite the
   cancellation is returned; the ``Cancelled`` comes at the next checkpoint
   (the trio guide "trio cancellation becomes a stop request").

**Fast paths.** Before connecting, ``await_sender`` asks the fast ``await`` handler that the
sender's type has in ``_fastpaths.FAST_AWAIT``, if any; a handler that does not apply returns
``None`` and the general path above runs. The handlers: ``await sx.when_all(c1(), c2(), ...)``
of coroutine objects runs the children as tasks of a nursery of the awaiting task
(``_when_all_nursery``, [exec.when.all]; switch ``FAST.when_all_nursery``);
``await sx.schedule(trio_scheduler())`` is one checkpoint and ``await
sx.schedule_after(trio_scheduler(), s)`` is ``trio.sleep(s)`` in a task of the scheduler's own
run (``_trio_scheduler``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

import trio.lowlevel as tl

from .._core import _hooks
from .._core._connect import connect_unchecked as connect
from .._core._coroutine_driver import host_mark
from .._core._domain import DISPATCH as _DS
from .._core._errors import ErrorValue, Stopped
from .._core._fastpaths import FAST_AWAIT
from .._core._protocol import Sender, completed_twice
from .._core._queries import _MISSING, QueryError, get_scheduler, get_stop_token, query_or
from .._core._stop_token import (
    combined_stop_token,
    inplace_stop_source,
    inplace_stop_token,
    is_unstoppable,
)
from .._schedulers._run_loop import raised_sink
from . import _trio_scheduler as _trio_scheduler  # registers its fast awaits
from . import _when_all_nursery as _when_all_nursery  # registers its fast await
from ._trio_bridge import (
    RunState,
    current_run,
    hand_to_run,
    hosted_env,
    in_trio_run,
    run_finished_error,
    runs_by_thread,
)
from ._when_all_nursery import _FastChildEnv

__all__: list[str] = []

if TYPE_CHECKING:

    class _Env(Protocol):
        """The hosting receiver's environment (``hosted_env``)."""

        def query(self, q: object, *args: object) -> object: ...


_get_ident = threading.get_ident
_LOCK = threading.Lock()  # handshake between a parking task and an off-thread completer
_driver_state = _hooks.driver_state
# typed for the Task | None field it is called with (set before the task parks)
_reschedule: Callable[[tl.Task | None], None] = tl.reschedule  # type: ignore[assignment]
_wait_task_rescheduled = tl.wait_task_rescheduled
_checkpoint = tl.checkpoint
_FAILED = tl.Abort.FAILED
_get_hosted = hosted_env.get
_get_mark = host_mark.get
_runs_get = runs_by_thread.get
_current_task = tl.current_task
_new = object.__new__

_PENDING, _VALUE, _ERROR, _STOPPED = 0, 1, 2, 3
#: ``raised_sink`` took a BaseException raised while another agent completed this work.
_RAISED = 4


class _AwaitRcvr:
    """The receiver of an awaited sender; it is also its own environment
    (the trio guide "Awaiting a sender")."""

    # The fields every await uses are slots; those only parking, a stop token or a trio
    # cancellation write are class-level defaults, shadowed in the instance's __dict__ when
    # written (made only then): constructing the receiver is the await hot path.
    __slots__ = ("__dict__", "_base", "_kind", "_parked", "_result", "_run")
    #: Completing only records the result and wakes the task (contracts.HandOff).
    _sx_handoff = True
    _src: inplace_stop_source | None = None
    _cancelled = False  # the awaiting task's trio cancellation hit
    _task: tl.Task | None = None

    # Built in one place, await_sender, without an __init__ (a call, class or function,
    # costs about 6% of ``await sx.just(x)``): it sets the five slots.
    _run: RunState
    _base: _Env | None  # env of the hosting receiver inside a hosted coroutine, else None
    _kind: int
    _parked: bool  # read by every completion on the trio thread
    _result: Any  # the datums tuple, the error datum or the raised BaseException, by _kind

    # -- environment ---------------------------------------------------------------------

    def get_env(self) -> _AwaitRcvr:
        return self

    def _sx_try(self, q: object, default: object) -> object:
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

    def query(self, q: object, *args: object) -> object:
        r = self._sx_try(q, _MISSING)
        if r is _MISSING:
            if args and self._base is not None:
                return self._base.query(q, *args)
            raise QueryError(f"the environment of an awaiting trio task does not support {q!r}")
        return r

    def _stop_token(self) -> inplace_stop_token | combined_stop_token:
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

    def _abort(self, raise_cancel: object) -> tl.Abort:
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

    def _complete(self, kind: int, data: object, how: str) -> None:
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

    def set_value(self, *vals: object) -> None:
        # The trio-thread branch of _complete, inlined: the hot path (await sx.just(x)).
        run = self._run
        if not self._kind and _get_ident() == run.thread and not run.finished:
            self._result = vals
            self._kind = _VALUE
            if self._parked:
                self._parked = False
                _reschedule(self._task)
            return
        self._complete(_VALUE, vals, "set_value")

    def set_error(self, err: object) -> None:
        self._complete(_ERROR, err, "set_error")

    def set_stopped(self) -> None:
        self._complete(_STOPPED, None, "set_stopped")


def _not_in_trio() -> RuntimeError:
    return RuntimeError(
        "`await sender` needs a trio task (inside trio.run) or a coroutine driven by "
        "structexec (sx.task, a coroutine passed as a sender); it cannot be awaited from "
        "asyncio or other event loops"
    )


def await_sender(sndr: Sender[object]) -> Generator[object, object, object]:
    """The generator behind ``Sender.__await__`` (see the module docstring)."""
    driver = _driver_state.driver
    if driver is not None:
        return (yield from driver.await_sender(sndr))
    run = _runs_get(_get_ident())
    if run is None:  # the first structexec await of this run, or not in trio at all
        run = _first_await_run()
    tp = type(sndr)
    if tp in FAST_AWAIT:  # a fast path its sender's module registered (_fastpaths)
        it = FAST_AWAIT[tp](sndr, run)
        if it is not None:
            return (yield from it)
    r = _new(_AwaitRcvr)  # the receiver's one constructor (see _AwaitRcvr), inlined
    r._run = run
    r._base = _get_hosted()
    r._kind = _PENDING
    r._result = None
    r._parked = False
    if _DS.on and (_DS.all or getattr(sndr, "tag", None) in _DS.tags):
        op = connect(sndr, r)
    else:  # connect(sndr, r) without the domain layer when no domain may transform sndr
        try:
            m = sndr.connect
        except AttributeError:
            op = connect(sndr, r)
        else:
            op = m(r)
    op.start()
    kind = r._kind
    if not kind:
        yield from _park(r)
        kind = r._kind
    if kind == _VALUE:
        vals = r._result
        n = len(vals)
        if n == 1:
            return vals[0]
        return None if n == 0 else vals
    return (yield from _raise_outcome(r))


def _first_await_run() -> RunState:
    try:
        return current_run()
    except RuntimeError:
        raise _not_in_trio() from None


def _park(r: _AwaitRcvr) -> Generator[object, object, None]:
    """Wait, parked, until ``r`` completes (module docstring, step 3)."""
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


def _raise_outcome(r: _AwaitRcvr) -> Generator[object, object, NoReturn]:
    """Raise what ``r`` completed with other than values (module docstring, step 4)."""
    kind = r._kind
    # This frame is in the traceback of what is raised here: no local (``r``, ``err``) may
    # keep the exception, or exception -> traceback -> frame -> exception is a cycle.
    if kind in (_RAISED, _ERROR):
        err = r._result
        r._result = None
        try:
            if kind == _RAISED or isinstance(err, BaseException):
                raise err
            raise ErrorValue(err)
        finally:
            del err
    mark = _get_mark()
    if mark is not None and mark.task is _current_task():
        # This task hosts a coroutine run as a sender: what is raised here must not be
        # swallowed (the host checks, _coroutine_sender.TrioHostedOp._main).
        mark.stopped = True
    if r._cancelled:
        # The stop came from this task's trio cancellation: let trio raise its Cancelled.
        yield from _checkpoint().__await__()
    raise Stopped()


_hooks.await_sender = await_sender  # type: ignore[assignment]  # the hook is given senders only
# ``await sndr`` calls this generator function directly (``Sender.__await__`` would only call
# the hook above: one frame less on every await of a sender in trio).
Sender.__await__ = await_sender  # type: ignore[method-assign,assignment]
# True on a thread that is running ``trio.run`` (``sync_wait`` refuses there, docs/trio.md
# "Threads"): no wrapper frame, and no hasattr miss (_trio_compat.fast_in_trio_run; sync_wait
# asks on every call).
_hooks.on_trio_thread = in_trio_run
