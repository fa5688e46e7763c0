"""Running a generated tree: worlds, stop schedules, interleavings.

:func:`run_tree` (no trio) and :func:`run_tree_trio` (inside ``trio.run``) build a
:class:`Tree` in a fresh world, start it on a :class:`RecordingReceiver`, make the stop
requests of a :class:`StopSchedule`, run the ``ManualScheduler`` items in the order an
:class:`Interleaving` picks, then close and join every scope. :meth:`RunResult.check` (in
``_checks``: a list of named properties) then asserts the properties of [exec.async.ops]
(exactly one completion, never before start, stop callbacks gone at completion), that the outcome
is one the model allows, that spawned work completed with a modelled outcome, that every scope
joined and released exactly the associations it granted ([exec.counting.scopes],
[exec.associate], [exec.stop.when], [exec.spawn], [exec.spawn.future],
the scopes guide "The nursery face: `async with`",
the scopes guide "Senders in a scope: `spawn`, `spawn_future`, `associate`"), and that no contract
violation reached the terminate handler.
"""

from __future__ import annotations

import gc
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .._core._env import get_env, prop
from .._core._errors import set_terminate_handler
from .._core._queries import QueryError, get_completion_scheduler, get_scheduler
from .._core._tags import set_value_t
from .._trio._trio_scheduler import trio_scheduler
from ._checks import RunResult
from ._leaks import TerminateRecorder
from ._receiver import RecordingReceiver
from ._tree import (
    ALREADY,
    MAYBE,
    NEVER,
    Hop,
    Let,
    Node,
    Outcomes,
    Plan,
    Spawn,
    SpawnFuture,
    StartsOn,
    mark_late,
)
from ._world import CountingToken, _request, _World

__all__ = [
    "CountingToken",
    "Interleaving",
    "RunResult",
    "StopEvent",
    "StopSchedule",
    "Tree",
    "run_tree",
    "run_tree_trio",
]


# --------------------------------------------------------------------------- trees


@dataclass(eq=False)
class Tree:
    """A generated sender tree and the resources it refers to.

    ``root`` is the :class:`Node`; ``schedulers`` how many ``ManualScheduler`` it uses
    (``sch[i]``), ``points`` how many stop points (``points[i]``), ``scopes`` the kind of
    each scope (``"counting"`` or ``"simple"``, ``tokens[i]``), ``counted_tokens`` whether
    scope tokens are wrapped in a :class:`CountingToken`. ``trio``/``threads``: whether the
    tree contains trio hops or coroutines (needs :func:`run_tree_trio`) or thread hops;
    ``parallel``: whether it hops onto ``sx.get_parallel_scheduler()`` (all three are also
    worked out from the nodes).
    """

    root: Node
    schedulers: int = 2
    points: int = 0
    scopes: tuple[str, ...] = ()
    counted_tokens: bool = True
    trio: bool = False
    threads: bool = False
    parallel: bool = False

    def __post_init__(self) -> None:
        mark_late(self.root)
        used = {n.kind for n in self.root.walk()}
        self.trio = self.trio or bool(used & {"trio_hop", "coroutine", "task"})
        self.threads = self.threads or "thread_hop" in used
        self.parallel = self.parallel or "parallel_hop" in used

    def stop_targets(self) -> list[tuple[str, int]]:
        """What a stop schedule can target: the root, each stop point, each counting scope."""
        t = [("root", 0)]
        t += [("point", i) for i in range(self.points)]
        t += [("scope", i) for i, k in enumerate(self.scopes) if k == "counting"]
        return t

    def plan(self, stops: StopSchedule | None = None) -> Plan:
        """The stop modes implied by ``stops`` (and by spawned work that may fail)."""
        p = Plan()
        for ev in stops.events if stops is not None else ():
            kind, i = ev.target
            mode = ALREADY if ev.at == 0 and kind != "scope" else MAYBE
            if kind == "root":
                p.root = max(p.root, mode)
            elif kind == "point":
                p.points[i] = max(p.point(i), mode)
            else:
                p.scopes[i] = MAYBE
        # An error of work given to spawn requests stop on a counting_scope, and so does the
        # error of a spawn_future's work when its future is dropped or its consumer stopped
        # before receiving it (docs/scopes.md "What happens when things fail": "or a future of
        # failed work is dropped"). Whether a consumer receives the error depends on the run
        # (a stopped root, a failing when_all sibling), so any future whose work may fail counts.
        changed = True
        while changed:
            changed = False
            for n in self.root.walk():
                if isinstance(n, Spawn) and not n.catch:
                    may_fail = self.scopes[n.scope] == "counting" and p.scope(n.scope) == NEVER
                    work = n.work_outcomes(p) if may_fail else frozenset()
                elif isinstance(n, SpawnFuture):
                    may_fail = self.scopes[n.scope] == "counting" and p.scope(n.scope) == NEVER
                    work = n.child.outcomes(n.work_mode(MAYBE, p), p) if may_fail else frozenset()
                else:
                    continue
                if any(o[0] == "error" for o in work):
                    p.scopes[n.scope] = MAYBE
                    changed = True
        return p

    def model(self, stops: StopSchedule | None = None) -> Outcomes:
        """The outcomes the root may complete with under ``stops``."""
        p = self.plan(stops)
        return self.root.outcomes(p.root, p)

    def code(self) -> str:
        return self.root.code()

    def __repr__(self) -> str:
        extra = []
        if self.scopes:
            extra.append(f"scopes={self.scopes!r}")
        if self.points:
            extra.append(f"points={self.points}")
        tail = f"  # {', '.join(extra)}" if extra else ""
        return f"Tree({self.root.code()}){tail}"


# --------------------------------------------------------------------------- schedules


@dataclass(frozen=True)
class StopEvent:
    """Request stop on ``target`` (``("root", 0)``, ``("point", i)``, ``("scope", i)``).

    ``at == 0``: after the tree is built, before the root operation is started; ``at == k``:
    after the root was started and ``k - 1`` scheduler items have run. ``from_thread``: make
    the request from a new thread (stop callbacks then run on that thread, the trio guide).
    """

    at: int
    target: tuple[str, int]
    from_thread: bool = False


@dataclass(frozen=True)
class StopSchedule:
    """A list of :class:`StopEvent` (possibly empty)."""

    events: tuple[StopEvent, ...] = ()

    def __repr__(self) -> str:
        return f"StopSchedule({list(self.events)!r})"


@dataclass
class Interleaving:
    """Which queued item runs next: ``choices[i] % n`` at step ``i``; FIFO once exhausted.

    Hypothesis shrinks the list towards zeros, i.e. towards FIFO order, so a failing
    interleaving shrinks to the fewest out-of-order steps.
    """

    choices: Sequence[int] = ()
    pos: int = 0

    def choose(self, n: int) -> int:
        if n <= 1:
            return 0
        if self.pos < len(self.choices):
            c = self.choices[self.pos] % n
            self.pos += 1
            return c
        return 0

    def __repr__(self) -> str:
        return f"Interleaving({list(self.choices)!r})"


# --------------------------------------------------------------------------- driving


class _Run:
    """Shared set-up and bookkeeping of one run (sync or trio)."""

    def __init__(
        self,
        tree: Tree,
        stops: StopSchedule | None,
        interleaving: Interleaving | None,
        trio_scheduler: object = None,
    ) -> None:
        self.tree = tree
        self.stops = stops if stops is not None else StopSchedule()
        self.inter = interleaving if interleaving is not None else Interleaving()
        self.w = _World(tree, trio_scheduler)
        self.rec = RecordingReceiver(extra_env=prop(get_scheduler, self.w.main))
        self.plan = tree.plan(self.stops)
        self.result = RunResult(
            tree=tree,
            stops=self.stops,
            model=tree.root.outcomes(self.plan.root, self.plan),
            plan=self.plan,
            rec=self.rec,
        )
        self.todo = sorted(self.stops.events, key=lambda e: e.at)
        self.step = 0
        self.terminate = TerminateRecorder()
        self.previous_handler: Callable[[str, BaseException | None], object] | None = None
        self.gc_was_enabled = True
        self.handler_set = False

    def begin(self) -> None:
        self.gc_was_enabled = gc.isenabled()
        gc.disable()  # deterministic runs: cycles are collected only by _stalled()
        self.previous_handler = set_terminate_handler(self.terminate)
        self.handler_set = True
        sndr = self.tree.root.build(self.w)
        if _attrs_reliable(self.tree.root):
            self.result.declared_value_scheduler = _query(
                get_env(sndr), get_completion_scheduler[set_value_t]
            )
        self.fire_due()  # at == 0
        self.rec.connect(sndr)
        del sndr
        self.step = 1
        self.rec.start()
        self.fire_due()  # at == 1: right after start, before any item runs

    def fire_due(self) -> None:
        while self.todo and self.todo[0].at <= self.step:
            _request(self.w, self.todo.pop(0), self.rec)

    def fire_all(self) -> None:
        while self.todo:
            _request(self.w, self.todo.pop(0), self.rec)

    def run_one(self) -> bool:
        if self.w.run_chosen(self.inter):
            self.step += 1
            self.fire_due()
            return True
        return False

    def start_joins(self) -> None:
        self.rec.op = None  # drop the root operation: no reliance on gc
        # Join without closing first: spawned work may still spawn
        # (docs/scopes.md "The nursery face: `async with`").
        for scope in self.w.scopes:
            j = RecordingReceiver(extra_env=prop(get_scheduler, self.w.main))
            self.result.joins.append(j)
            j.run(scope.join())

    def joins_done(self) -> bool:
        return all(j.done for j in self.result.joins)

    def finish(self) -> RunResult:
        if self.tree.trio or any(n.kind == "coroutine" for n in self.tree.root.walk()):
            # A coroutine sender connected but never started must be closed by the library
            # (not left for Python to warn "never awaited" when it is finally collected).
            self.rec.op = None
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", RuntimeWarning)
                gc.collect()
            self.result.unclosed_coroutines = [
                str(w.message) for w in caught if "was never awaited" in str(w.message)
            ]
        if self.gc_was_enabled:
            gc.enable()
        # Let work still running on worker threads finish (an operation that completed
        # before its children, say, leaves them running) before closing the thread
        # scheduler, and while the terminate handler is still ours: a late completion
        # then runs, and anything it reports lands in this run's result, not in the process.
        self.quiesce()
        self.w.close()
        if self.handler_set:
            set_terminate_handler(self.previous_handler)
        r = self.result
        r.terminate_calls = self.terminate.calls
        r.spawn_log = list(self.w.spawn_log)
        r.spawned = list(self.w.spawned)
        r.futures = list(self.w.futures)
        r.tokens = list(self.w.tokens)
        r.scopes = list(self.w.scopes)
        r.sources = [("the root receiver's stop source", self.rec.stop_source)] + [
            (f"points[{i}]", s) for i, s in enumerate(self.w.points)
        ]
        return r

    def quiesce(self, timeout: float = 5) -> None:
        """Wait (bounded) until no item is queued on or running in the thread scheduler and
        no parallel hop is in flight; twice in a row, since one may start the other."""
        deadline = time.monotonic() + timeout
        calm = 0
        while calm < 2 and time.monotonic() < deadline:
            if self.threads_busy() or self.w.in_flight:
                calm = 0
                time.sleep(0.0005)
            else:
                calm += 1
                time.sleep(0)

    def threads_busy(self) -> bool:
        ts = self.w.thread_scheduler
        return ts is not None and ts.busy > 0


def _attrs_reliable(n: Node) -> bool:
    """False when the root's attributes come through a ``let_*`` ([exec.let], A8).

    [D] gives ``let_*`` (and ``starts_on``, which lowers to ``let_value``) the default
    attributes, so they advertise their child's completion scheduler although the
    completion comes from the second sender: a known defect, not checked here.
    """
    while True:
        if isinstance(n, (Let, StartsOn)):
            return False
        kids = n.kids()
        if len(kids) != 1 or isinstance(n, (Hop, SpawnFuture, Spawn)):
            return True
        n = kids[0]


def _query(attrs: object, q: Callable[[object], object]) -> object:
    try:
        return q(attrs)
    except (QueryError, TypeError):
        return None


def _stalled(run: _Run, what: str, done: Callable[[], bool]) -> bool:
    """Nothing is queued or running and ``what`` has not completed: is it lost?

    The caller has just seen no queued item, no busy worker thread and no parallel hop in
    flight. Those counters drop only after the work's effects are visible, so the snapshot taken
    here includes everything tracked work did; but ``done()`` and the queues were read before
    the counters, and the last tracked completion may have landed in between (on a worker or
    pool thread): then this is progress, not a stall, and the caller drives on.

    Then collects garbage once: if that makes progress, an association or stop callback was being
    held by an unreachable cycle (the senders guide "Writing your own sender" forbids relying on it)
    and the run carries on with ``gc_needed`` set. Returns ``True`` if the run must stop
    (``result.hung`` is set).
    """
    before = (run.w.pending(), [s.count for s in run.w.scopes], run.rec.done, run.joins_done())
    if done() or before[0]:
        return False  # completed, or queued more work, after the caller looked
    # Recorded error datums keep their tracebacks, whose frames keep operations alive: drop
    # them so that only the library's own references remain.
    errs = [a[0] for k, a in run.rec.events if k == "error"]
    errs += [o[1] for _, o in run.w.spawn_log if o[0] == "error"]
    errs += [o[1] for f in run.w.futures for o in (f.work, f.consumer) if o and o[0] == "error"]
    for e in errs:
        while isinstance(e, BaseException) and e.__traceback__ is not None:
            e.__traceback__ = None
            e = e.__context__
    gc.collect()
    after = (run.w.pending(), [s.count for s in run.w.scopes], run.rec.done, run.joins_done())
    if after != before:
        run.result.gc_needed.append(what)
        return False
    run.result.hung = (
        f"{what} never completed: nothing is queued and nothing is running (a lost completion)"
    )
    return True


def _drive_sync(run: _Run, done: Callable[[], bool], what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if run.run_one():
            continue
        if run.todo:
            run.fire_all()
            continue
        ts = run.w.thread_scheduler
        if ts is not None and ts.busy:
            if ts.wait_idle(max(0.0, deadline - time.monotonic())):
                continue
            run.result.hung = f"{what}: work on the worker thread did not finish in {timeout} s"
            return
        if run.w.in_flight:
            if time.monotonic() < deadline:
                time.sleep(0.0002)  # work may be running on the parallel scheduler's threads
                continue
            run.result.hung = (
                f"{what}: work on the parallel scheduler did not finish in {timeout} s"
            )
            return
        if _stalled(run, what, done):
            return


def run_tree(
    tree: Tree,
    stops: StopSchedule | None = None,
    interleaving: Interleaving | None = None,
    *,
    timeout: float = 10,
    allow_gc: bool = False,
) -> RunResult:
    """Run ``tree`` without trio (trees with ``tree.trio`` need :func:`run_tree_trio`).

    Builds it in a fresh world, makes the stop requests of ``stops`` at their steps, runs the queued
    ``ManualScheduler`` items in the order ``interleaving`` picks until the root completes, then
    joins every scope the same way. Automatic garbage collection is off during the run, so runs are
    reproducible; if the run stalls, one ``gc.collect()`` is tried, and if that un-sticks it the
    check fails (the senders guide "Writing your own sender") unless ``allow_gc``; likewise for
    coroutine senders that were connected, never started, and not closed (trees with coroutines end
    with a ``gc.collect()`` that looks for Python's "coroutine ... was never awaited" warning).
    ``timeout`` bounds waits for worker threads. Returns the :class:`RunResult`; call its
    :meth:`~RunResult.check`.
    """
    if tree.trio:
        raise ValueError("this tree needs trio: use run_tree_trio inside trio.run")
    run = _Run(tree, stops, interleaving)
    run.result.allow_gc = allow_gc
    try:
        run.begin()
        _drive_sync(run, lambda: run.rec.done, "the root operation", timeout)
        if not run.result.hung:
            run.fire_all()
            run.start_joins()
            _drive_sync(run, run.joins_done, "a scope's join", timeout)
            while run.run_one():
                pass
    except Exception as e:  # reported by check(): start/completions must not raise
        run.result.raised = e
    finally:
        result = run.finish()
    return result


async def run_tree_trio(
    tree: Tree,
    stops: StopSchedule | None = None,
    interleaving: Interleaving | None = None,
    *,
    timeout: float = 10,
    allow_gc: bool = False,
) -> RunResult:
    """:func:`run_tree` inside a trio run: trio hops and coroutines run as trio tasks.

    At each step the interleaving chooses between the queued ``ManualScheduler`` items and
    letting trio run its runnable tasks for one checkpoint.
    """
    import trio

    run = _Run(tree, stops, interleaving, trio_scheduler=_trio_scheduler())
    run.result.allow_gc = allow_gc
    try:
        run.begin()
        await _drive_trio(run, lambda: run.rec.done, "the root operation", timeout)
        if not run.result.hung:
            run.fire_all()
            run.start_joins()
            await _drive_trio(run, run.joins_done, "a scope's join", timeout)
        while run.run_one():
            await trio.lowlevel.checkpoint()
        await trio.testing.wait_all_tasks_blocked()
    except Exception as e:  # reported by check(): start/completions must not raise
        run.result.raised = e
    finally:
        result = run.finish()
    return result


def _trio_scheduler() -> object:
    return trio_scheduler()


async def _drive_trio(run: _Run, done: Callable[[], bool], what: str, timeout: float) -> None:
    import trio

    deadline = time.monotonic() + timeout
    while not done():
        runnable = trio.lowlevel.current_statistics().tasks_runnable
        pending = run.w.pending()
        if pending or runnable:
            # Option 0..pending-1: a manual item; option `pending`: one trio checkpoint.
            choice = run.inter.choose(pending + (1 if runnable else 0))
            if choice < pending:
                _run_index(run, choice)
            else:
                await trio.lowlevel.checkpoint()
            continue
        if run.todo:
            run.fire_all()
            continue
        await trio.testing.wait_all_tasks_blocked()
        if done() or run.w.pending():
            continue
        ts = run.w.thread_scheduler
        if (
            (ts is not None and ts.busy)
            or run.w.in_flight
            or trio.lowlevel.current_statistics().tasks_runnable
        ):
            if time.monotonic() < deadline:
                await trio.sleep(0.0005)
                continue
            run.result.hung = f"{what} did not complete within {timeout} s"
            return
        # Give threads and run_sync_soon callbacks a moment before calling it lost.
        for _ in range(20):
            await trio.sleep(0.0005)
            if done() or run.w.pending():
                break
        else:
            if _stalled(run, what, done):
                return


def _run_index(run: _Run, i: int) -> None:
    for s in run.w.all_schedulers():
        n = s.pending
        if i < n:
            s.run_one(i)
            run.step += 1
            run.fire_due()
            return
        i -= n
