"""Property: scopes always join, and count exactly the associations they granted, with work
completing on worker threads.

[exec.scope.concepts] (a user token: every scope token here may be wrapped in a
:class:`~structexec.testing.strategies.CountingToken`), [exec.scope.simple.counting],
[exec.counting.scopes.general] (state machine, join), [exec.associate], [exec.spawn],
[exec.spawn.future]; docs/scopes.md "What happens when things fail" (errors are never lost: the join
reports exactly the errors nobody else received); associations are released at a defined
moment, never by the garbage collector. Trees here always use scopes, and hop onto a dedicated
worker thread and the parallel scheduler's pool.
"""

from __future__ import annotations

import threading

import trio
from hypothesis import HealthCheck, assume, given, settings

import structexec as sx
from structexec.testing import ManualScheduler, RecordingReceiver
from structexec.testing import strategies as sxst

# docs/scopes.md "Senders in a scope: `spawn`, `spawn_future`, `associate`": associations held by
# operations that were never started are released, and coroutine senders in that position closed, by
# ``close()`` at a defined moment; the driver fails a run that needed the garbage collector for
# either (allow_gc=False).
ALLOW_GC = False

SETTINGS = settings(
    max_examples=sxst.max_examples(200),
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
        HealthCheck.filter_too_much,
    ],
)

SCOPE_KINDS = {
    "just",
    "just_error",
    "just_stopped",
    "then",
    "upon_error",
    "let_value",
    "let_error",
    "when_all",
    "schedule",
    "continues_on",
    "starts_on",
    "associate",
    "spawn",
    "spawn_future",
    "thread_hop",
    "parallel_hop",
    "stop_point",
}
SCOPE_NODE_KINDS = {"associate", "spawn", "spawn_future"}
SCOPES = ("counting", "counting", "simple")


def _uses_scopes(tree: sxst.Tree) -> bool:
    return any(n.kind in SCOPE_NODE_KINDS for n in tree.root.walk())


@SETTINGS
@given(
    case=sxst.trees_with_stop_schedules(kinds=SCOPE_KINDS, scopes=SCOPES, max_nodes=14, max_at=8),
    order=sxst.interleavings(),
)
def test_scopes_join_and_count_exactly(
    case: tuple[sxst.Tree, sxst.StopSchedule], order: sxst.Interleaving
) -> None:
    """Every scope's join completes once (with ``value()``, or with exactly the unreceived
    errors), its count is back to 0, every association it granted was released (counted
    through a wrapping token), and every spawned work item completed once with a modelled
    outcome, also when it completed on a worker thread."""
    tree, stops = case
    assume(_uses_scopes(tree))
    r = sxst.run_tree(tree, stops, order, allow_gc=ALLOW_GC)
    r.check()
    for scope in r.scopes:
        assert scope.count == 0
        assert scope.state == "joined"


@settings(SETTINGS, max_examples=max(1, sxst.max_examples(200) // 2))
@given(
    case=sxst.trees_with_stop_schedules(
        kinds=SCOPE_KINDS | {"trio_hop", "task", "coroutine"}, scopes=SCOPES, max_nodes=14
    ),
    order=sxst.interleavings(),
)
def test_scopes_join_and_count_exactly_in_trio(
    case: tuple[sxst.Tree, sxst.StopSchedule], order: sxst.Interleaving
) -> None:
    tree, stops = case
    assume(_uses_scopes(tree))

    async def main() -> sxst.RunResult:
        return await sxst.run_tree_trio(tree, stops, order, allow_gc=ALLOW_GC)

    trio.run(main).check()


def test_counting_token_counts_and_forwards() -> None:
    scope = sx.counting_scope()
    tok = sxst.CountingToken(scope.get_token())
    seen: list[int] = []
    sch = ManualScheduler()
    sx.spawn(sx.schedule(sch) | sx.then(lambda: seen.append(1)), tok)
    assert (tok.granted, tok.released, scope.count) == (1, 0, 1)
    sch.drain()
    assert seen == [1]
    assert (tok.granted, tok.released, scope.count) == (1, 1, 0)
    copy = __import__("copy").copy(tok)  # copies share the counters (tokens are copied)
    assert copy.counts is tok.counts
    scope.close()
    sx.spawn(sx.just(), tok)
    assert tok.refused == 1
    rec = RecordingReceiver(extra_env=sx.prop(sx.get_scheduler, sch))
    rec.run(scope.join())
    sch.drain()
    assert rec.value == ()


def test_join_waits_for_work_on_a_worker_thread() -> None:
    """A spawned item that finishes on a worker thread: the join completes only after it, on
    the join receiver's scheduler (not on the worker thread)."""
    gate = threading.Event()
    with sxst.ThreadScheduler() as worker:
        scope = sx.counting_scope()
        tok = sxst.CountingToken(scope.get_token())
        sx.spawn(sx.schedule(worker) | sx.then(lambda: gate.wait(5) and None), tok)
        main = ManualScheduler("main")
        join = RecordingReceiver(extra_env=sx.prop(sx.get_scheduler, main))
        join.run(scope.join())
        assert not join.done and tok.released == 0
        gate.set()
        assert worker.wait_idle(5)
        assert tok.released == 1 and main.pending == 1 and not join.done
        main.drain()
        assert join.value == () and join.scheduler is main
        assert join.thread == threading.get_ident()


def test_when_all_stopped_at_start_releases_associations() -> None:
    tree = sxst.Tree(
        sxst.WhenAll((sxst.IntoVariant(sxst.Associate(sxst.Just(()), 0)),)),
        scopes=("counting",),
    )
    stops = sxst.StopSchedule((sxst.StopEvent(0, ("root", 0)),))
    r = sxst.run_tree(tree, stops)
    r.check()  # fails: "a scope's join completed only after gc.collect()"


def test_model_stop_point_inside_eager_spawn_future_work() -> None:
    """Pinned from a failing example: ``spawn_future`` starts its work while the tree is built
    ([exec.spawn.future]), before the stop requests a schedule makes "at step 0", so a stop point
    inside that work may or may not be stopped when the work reaches it; the model allows both (here
    the value arrived first, from the worker thread)."""
    from structexec.testing._tree import THREAD, Fn, Hop, Just, SpawnFuture, StopPoint, Then

    work = Then(Then(StopPoint(Hop(Just(()), THREAD), 0), Fn.mix(0)), Fn.mix(0))
    tree = sxst.Tree(SpawnFuture(work, 0), points=1, scopes=SCOPES, counted_tokens=False)
    stops = sxst.StopSchedule(
        (sxst.StopEvent(0, ("root", 0), True), sxst.StopEvent(0, ("point", 0), False))
    )
    model = tree.model(stops)
    assert sxst.STOPPED in model and any(o[0] == "value" for o in model)
    for _ in range(20):
        sxst.run_tree(tree, stops, sxst.Interleaving(()), allow_gc=ALLOW_GC).check()
