"""Private plumbing shared by the trio bridge: per-run state, host queries, stop -> cancel.

the trio guide, the trio guide "trio cancellation becomes a stop request",
the trio guide "The trio scheduler". Nothing here is public API; the trio scheduler
(``_trio_scheduler``), ``await sndr`` (``_await``), coroutine senders (``_coroutine_sender``),
counting scopes and ``task`` build on it.

Internal API for other modules of the library:

* :func:`current_run` -- the :class:`RunState` of the trio run on this thread (created on
  first use); ``RuntimeError`` outside ``trio.run``.
* :data:`runs_by_thread` -- ``runs_by_thread.get(threading.get_ident())``: the
  :class:`RunState` of the run on this thread if one was created (hot paths use it instead of
  ``current_run()``; fall back to ``current_run()`` when it gives ``None``).
* :func:`in_trio_run` -- is this thread inside ``trio.run``? (cheap)
* :func:`call_in_run` -- ``call_in_run(run, fn, *args)``: ``fn(*args)`` now on the trio thread
  of ``run``, else handed to that run with ``TrioToken.run_sync_soon``; ``False`` when the run
  has finished. :func:`hand_to_run` is its second half (always ``run_sync_soon``).
* :func:`run_of_env` -- the live run an environment names (``host_env`` or a trio
  ``get_scheduler``), else ``None``.
* :data:`trio_host_nursery` -- a private *forwarding* query. A counting scope that owns a trio
  nursery writes ``host_env(nursery)`` into the environment of the work it spawns; coroutine
  senders started under that environment run their trio task in that nursery instead of the
  runtime-owned one (the scopes guide "The nursery face: `async with`").
* :func:`host_env` -- ``host_env(nursery)``: the environment to write (call it on the trio
  thread); it answers ``trio_host_nursery`` and remembers the run so that work started from
  another thread can still reach the nursery (through ``TrioToken.run_sync_soon``).
* :func:`cancel_scope_on_stop` -- ``cancel_scope_on_stop(token, scope)`` registers a stop
  callback on ``token`` that cancels the ``trio.CancelScope`` ``scope``, from whichever thread
  requests stop (off the trio thread through ``run_sync_soon``;
  the trio guide "Coroutines are senders; a stop request cancels them"). It returns the callback;
  ``close()`` it when the scope is done.
* :data:`hosted_env` -- a ``ContextVar`` holding the environment that senders awaited inside a
  trio-hosted coroutine see (besides their stop token, which always comes from the awaiting
  task's trio cancellation); ``None`` in plain trio tasks.
"""

from __future__ import annotations

import contextvars
import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio
import trio.lowlevel as tl

from .._algorithms._timed import TimerQueue
from .._core._env import TryEnv
from .._core._errors import terminate
from .._core._queries import Query, get_scheduler, query_or
from .._core._stop_token import stop_callback_for
from ._trio_compat import fast_in_trio_run

if TYPE_CHECKING:
    from typing import Protocol

    from .._algorithms._timed import TimerOp
    from .._core._contracts import Env, TrioSchedulerMark
    from .._core._stop_token import StopCallback, StopToken
    from ._trio_scheduler import _TrioScheduler

    class ReadyOp(Protocol):
        """An operation queued on the trio scheduler: run by ``_execute()`` on the trio thread.
        The trio scheduler's operations (``_trio_scheduler``) also have ``_raised(exc)``, which
        hands on a ``BaseException`` their completion raised."""

        def _execute(self) -> None: ...

    class HostNursery(Protocol):
        """What hosts a trio task: a ``trio.Nursery``, or a counting scope's host (which may
        also have ``interrupt(rcvr, exc)``)."""

        @property
        def start_soon(self) -> Callable[..., object]: ...

__all__: list[str] = []

_get_ident = threading.get_ident

try:
    # trio's own in_trio_run, or the same answer without its hasattr miss (_trio_compat).
    in_trio_run: Callable[[], bool] = fast_in_trio_run or tl.in_trio_run
except AttributeError:  # pragma: no cover - trio < 0.26

    def in_trio_run() -> bool:
        try:
            tl.current_trio_token()
        except RuntimeError:
            return False
        return True


#: Environment of the senders awaited inside a trio-hosted coroutine ([exec.connect]).
hosted_env: contextvars.ContextVar[Env | None] = contextvars.ContextVar(
    "structexec_hosted_env", default=None
)


class RunState:
    """What structexec keeps per ``trio.run``: token, thread, the scheduler and its queue.

    One instance per run, stored in a ``trio.lowlevel.RunVar``. ``finished`` becomes true when
    the run ends (an ``after_run`` instrument), after which every cross-thread entry raises a
    clear ``RuntimeError`` instead of touching a dead run.

    The trio scheduler's FIFO lives here (the trio guide "The trio scheduler"): ``push(op)`` (trio
    thread only) appends a ready operation and wakes the *drainer*, a system task (at most one per
    run) that runs queued operations in FIFO order (``op._execute()``) and exits when the queue has
    stayed empty for a couple of rounds; ``push_threadsafe(op)`` does the same from any thread
    through ``TrioToken.run_sync_soon``.

    The trio scheduler's timers live here too (the time guide "Timed schedulers"): ``timers``, a
    :class:`~structexec._algorithms._timed.TimerQueue` (deadline order, any thread under its
    lock), on the run's clock ``clock`` (``trio.lowlevel.current_clock()``, readable from any
    thread). One system task, the *timer server* (at most one per run, alive only while a timer
    is pending), sleeps in a cancel scope whose deadline is the earliest timer's, completes the
    due timers in deadline order and exits when none is left; ``_kick_timers`` (trio thread)
    spawns it or moves its deadline earlier, or cancels its sleep when the last timer was
    stopped. So a pending timer costs no task of its own, and trio's deadline machinery (and
    ``MockClock``'s autojump) drives the timers.
    """

    __slots__ = (
        "__weakref__",
        "clock",
        "drainer",
        "finished",
        "queue",
        "sched",
        "thread",
        "timer_cs",
        "timer_task",
        "timers",
        "token",
        "watched",
    )

    def __init__(self) -> None:
        self.token: trio.lowlevel.TrioToken = tl.current_trio_token()
        self.thread: int = _get_ident()
        self.queue: deque[ReadyOp] = deque()
        self.drainer: tl.Task | None = None
        self.finished = False
        self.clock: trio.abc.Clock = tl.current_clock()
        self.timers = TimerQueue()
        self.timer_task: tl.Task | None = None
        self.timer_cs: trio.CancelScope | None = None
        self.sched: _TrioScheduler = scheduler_class(self)  # type: ignore[misc]  # set at import
        #: The detach watch (``_detach.watch_run``) is installed in this run.
        self.watched = False

    # -- the trio scheduler's timers (the TimerOwner protocol of _algorithms._timed) ---------

    @property
    def _timer_queue(self) -> TimerQueue:
        return self.timers

    def _timer_now(self) -> float:
        if self.finished:
            raise run_finished_error("start a timer of the trio scheduler")
        t: float = self.clock.current_time()
        return t

    def _timer_ready(self, op: TimerOp) -> None:
        self.schedule(op)  # the deadline has passed: the FIFO queue, like schedule()

    def _timer_wake(self, empty: bool) -> None:
        call_in_run(self, self._kick_timers)  # a finished run: nothing to wake

    def _kick_timers(self) -> None:
        # Trio thread: the earliest deadline changed (a timer was added or stopped).
        if self.finished:
            return
        q = self.timers
        with q.lock:
            d = q.earliest()
            empty = not q.items
        if self.timer_task is None:
            if not empty:
                try:
                    self.timer_task = tl.spawn_system_task(
                        self._serve_timers, name="structexec.timers"
                    )
                except RuntimeError:  # the run is ending: its pending timers never fire
                    self.end_timers()
            return
        cs = self.timer_cs
        if cs is not None:
            if empty:
                cs.cancel()  # the last timer was stopped: the server exits
            elif d < cs.deadline:
                cs.deadline = d

    async def _serve_timers(self) -> None:
        # The timer server: completes due timers in deadline order, sleeps until the next.
        q = self.timers
        clock = self.clock
        try:
            while True:
                with q.lock:
                    due = q.pop_due(clock.current_time())
                for op in due:
                    _execute(op)
                with q.lock:
                    d = q.earliest()
                    empty = not q.items
                if empty:
                    return
                with trio.CancelScope(deadline=d) as cs:
                    self.timer_cs = cs
                    await trio.sleep_forever()
                self.timer_cs = None
        except trio.Cancelled:
            # Only the run's end cancels a system task (its main task has returned): the
            # pending timers will never fire. They complete stopped (docs/time.md "Timed
            # schedulers"), so that nobody waits for them forever.
            self.timer_cs = None
            self.timer_task = None
            self.end_timers()
            raise
        finally:
            self.timer_cs = None
            self.timer_task = None

    def end_timers(self) -> None:
        """The run is ending (or has ended): no timer of the trio scheduler fires any more.
        Every pending one completes ``set_stopped()`` now, and one started from now on at once
        (a start after the run has finished raises ``RuntimeError`` instead). Trio thread."""
        q = self.timers
        with q.lock:
            if q.closed and not q.items:
                return
            ops = q.close()
        for op in ops:
            _end_timer(op)

    # -- the trio scheduler's queue ---------------------------------------------------------

    def push(self, op: ReadyOp) -> None:
        """Queue a ready operation; trio thread only."""
        self.queue.append(op)
        if self.drainer is None:
            try:
                self.drainer = tl.spawn_system_task(self._drain, name="structexec.trio_scheduler")
            except RuntimeError:
                # The system nursery no longer accepts tasks (the run is ending): trio's own
                # FIFO entry queue runs callbacks until the last task has exited. Once that
                # queue takes no more either (this is its last batch), run them now.
                q = self.queue
                while q:
                    op = q.popleft()
                    if not hand_to_run(self, _execute, op):
                        _execute(op)

    def schedule(self, op: ReadyOp) -> None:
        """Queue a ready operation from any thread: :meth:`push` on the live run's trio thread,
        else :meth:`push_threadsafe` (the trio guide "The trio scheduler")."""
        if _get_ident() == self.thread and not self.finished:
            self.push(op)
        else:
            self.push_threadsafe(op)

    def push_threadsafe(self, op: ReadyOp, *, direct: bool = False) -> None:
        """Queue a ready operation from any thread (the trio guide "The trio scheduler")."""
        if not hand_to_run(self, _execute if direct else self.push, op):
            self.finished = True
            raise run_finished_error("schedule an operation on the trio scheduler")

    async def _drain(self) -> None:
        # Runs the queued operations in FIFO order. Between rounds it yields (uncancellable:
        # the queue must be served even while the run shuts down), so the items queued by the
        # completions run after the other trio tasks had a turn (no starvation, and the stack
        # unwinds). When the queue stays empty for LINGER rounds the task exits, so an idle
        # run has no structexec task alive (tests can count trio tasks); the next push spawns
        # a new one.
        q = self.queue
        idle = 0
        try:
            while True:
                n = len(q)
                if n:
                    idle = 0
                    for _ in range(n):
                        _execute(q.popleft())
                elif idle >= LINGER:
                    return
                else:
                    idle += 1
                await tl.cancel_shielded_checkpoint()
        finally:
            self.drainer = None


#: Rounds the drainer waits for more work before it exits.
LINGER = 2


#: The trio scheduler class (set by ``_trio_scheduler`` when it is imported).
scheduler_class: Callable[[RunState], _TrioScheduler] | None = None


def _execute(op: ReadyOp) -> None:
    try:
        op._execute()
    except Exception as exc:
        terminate(
            "a receiver's completion raised on the trio scheduler ([exec.recv.concepts]: "
            "completions must not raise; an adaptor turns a function's exception into "
            "set_error)",
            exc,
        )
    except BaseException as exc:
        # KeyboardInterrupt, SystemExit... from user code run by the completion: the drainer
        # survives and hands it on (``op._raised``, see _trio_scheduler).
        op._raised(exc)  # type: ignore[attr-defined]  # the trio scheduler's ops have it


def _end_timer(op: TimerOp) -> None:
    try:
        op._owner_ended()
    except Exception as exc:
        terminate(
            "a receiver's completion raised on the trio scheduler ([exec.recv.concepts]: "
            "completions must not raise)",
            exc,
        )
    except BaseException as exc:
        op._raised(exc)  # type: ignore[attr-defined]  # nobody took it (see _execute)


class _RunEnd(trio.abc.Instrument):
    __slots__ = ("_state",)

    def __init__(self, state: RunState) -> None:
        self._state = state

    def after_run(self) -> None:
        st = self._state
        st.finished = True
        if runs_by_thread.get(st.thread) is st:
            del runs_by_thread[st.thread]
        st.end_timers()  # any left (started on another thread as the run ended)


_RUN: tl.RunVar[RunState | None] = tl.RunVar("structexec_run_state")

#: thread ident -> the RunState of the trio run that thread is running (registered when the
#: state is created, removed when the run ends). A cheap lookup for hot paths; a missing
#: entry means "ask current_run()".
runs_by_thread: dict[int, RunState] = {}


def current_run() -> RunState:
    """The :class:`RunState` of the trio run on this thread; ``RuntimeError`` outside trio."""
    try:
        st = _RUN.get(None)
    except RuntimeError:
        raise RuntimeError(
            "this needs a running trio event loop on the calling thread (call it inside "
            "trio.run, or pass a trio scheduler obtained inside the run)"
        ) from None
    if st is None:
        st = RunState()
        _RUN.set(st)
        tl.add_instrument(_RunEnd(st))
        runs_by_thread[st.thread] = st
    return st


def hand_to_run(run: RunState, fn: Callable[..., object], *args: object) -> bool:
    """Queue ``fn(*args)`` to the trio thread of ``run`` (``TrioToken.run_sync_soon``; callable
    from any thread). ``False``, and ``fn`` is never called, when the run has finished
    (``trio.RunFinishedError``; ``OSError`` when the run crashed: trio closed its wake-up
    socket without marking the run finished, and the callback can never run). Never raises
    for a run that is gone: stop callbacks and finalizers call this."""
    try:
        run.token.run_sync_soon(fn, *args)
    except (trio.RunFinishedError, OSError):
        return False
    return True


def call_in_run(run: RunState, fn: Callable[..., object], *args: object) -> bool:
    """``fn(*args)`` now when called on the trio thread of ``run`` while it is live, else
    queued to that thread (:func:`hand_to_run`). ``False``, and ``fn`` is never called, when the
    run has finished; what ``fn`` raises when called now propagates."""
    if _get_ident() == run.thread and not run.finished:
        fn(*args)
        return True
    return hand_to_run(run, fn, *args)


def run_finished_error(what: str) -> RuntimeError:
    return RuntimeError(
        f"cannot {what}: the trio run it belongs to has finished (trio.run returned). "
        "Operations bound to a trio run must complete before the run ends."
    )


# --------------------------------------------------------------------------- host query


class trio_host_nursery_t(Query):
    """Private forwarding query: the ``trio.Nursery`` that hosts trio tasks of spawned work.

    Written by counting scopes with :func:`host_env`; coroutine senders started under it run their
    trio task in that nursery (the scopes guide "The nursery face: `async with`"). Without it,
    hosted tasks are system tasks of the current run.
    """

    forwarding = True
    __slots__ = ()


trio_host_nursery = trio_host_nursery_t()


class _trio_run_t(Query):
    forwarding = True
    __slots__ = ()


#: Private forwarding query: the :class:`RunState` whose trio thread hosts the work.
trio_run = _trio_run_t()


class _HostEnv(TryEnv):
    __slots__ = ("_nursery", "_run")
    _unsupported = "host_env does not support {q!r}"

    def __init__(self, nursery: HostNursery | None, run: RunState) -> None:
        self._nursery = nursery
        self._run = run

    def _sx_try(self, q: object, default: object) -> object:
        if q is trio_host_nursery:
            return self._nursery
        if q is trio_run:
            return self._run
        return default

    def __repr__(self) -> str:
        return f"host_env({self._nursery!r})"


def host_env(nursery: HostNursery | None) -> Env:
    """An environment answering ``trio_host_nursery`` with ``nursery`` (call on the trio thread).

    ``nursery`` may be ``None`` (then only the run is recorded: coroutine senders started from
    other threads under this env still run on this trio run, in system tasks).
    """
    return _HostEnv(nursery, current_run())


def run_of_env(e: object) -> RunState | None:
    """The live trio run an environment points at (``host_env`` or a trio ``get_scheduler``)."""
    st = query_or(e, trio_run, None)
    if st is None:
        sch = query_or(e, get_scheduler, None)
        if getattr(type(sch), "_sx_trio_scheduler", False) is True:
            tsch: TrioSchedulerMark = sch
            st = tsch._run
    if st is None or st.finished:
        return None
    r: RunState = st
    return r


# --------------------------------------------------------------------------- stop -> cancel


class _ScopeCanceller:
    __slots__ = ("_run", "_scope")

    def __init__(self, scope: trio.CancelScope, run: RunState) -> None:
        self._scope = scope
        self._run = run

    def __call__(self) -> None:
        call_in_run(self._run, self._scope.cancel)  # False: the run has ended, nothing to cancel


def cancel_scope_on_stop(
    token: StopToken, scope: trio.CancelScope, run: RunState | None = None
) -> StopCallback:
    """Cancel ``scope`` when ``token`` is stopped, from any thread
    (the trio guide "Coroutines are senders; a stop request cancels them").

    The callback runs on the thread that requests stop ([stoptoken.concepts]); on the trio thread it
    calls ``scope.cancel()`` at once, elsewhere it goes through ``TrioToken.run_sync_soon``. If stop
    was already requested the scope is cancelled now. ``run`` defaults to the current run (call on
    the trio thread then). Returns the registered callback: ``close()`` it when the scope has been
    left.
    """
    if run is None:
        run = current_run()
    return stop_callback_for(token, _ScopeCanceller(scope, run))
