"""Property: a stop request at any step gives the modelled value or stopped, never a lost or
duplicated completion.

[exec.async.ops], [exec.recv.concepts] (stop callbacks deregistered before completion),
[stoptoken.concepts] (callbacks run on the requesting thread: some requests come from another
thread), [exec.write.env], [exec.unstoppable] (``write_env`` stop points, ``unstoppable``),
[exec.schedule.from] (the hop sees the outer token), [exec.when.all] (``when_all``),
[exec.stopped.opt], [exec.scope.counting] and [exec.stop.when] (``counting_scope.request_stop``),
[exec.spawn.future] and docs/scopes.md "Futures outlive their work" (a stopped ``spawn_future``
consumer). Hypothesis chooses which operation gets a stop request (the root, a stop
point inside the tree, a counting scope), at which step, and in which order the queued scheduler
items run; the model gives the set of acceptable outcomes.
"""

from __future__ import annotations

import trio
from hypothesis import HealthCheck, example, given, settings

import structexec as sx
from structexec.testing import strategies as sxst

# docs/scopes.md "Senders in a scope: `spawn`, `spawn_future`, `associate`": associations held by
# operations that were never started are released, and coroutine senders in that position closed, by
# ``close()`` at a defined moment; the driver fails a run that needed the garbage collector for
# either (allow_gc=False).
ALLOW_GC = False

SETTINGS = settings(
    max_examples=sxst.max_examples(300),
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
)


@SETTINGS
@given(case=sxst.trees_with_stop_schedules(), order=sxst.interleavings())
def test_stop_at_any_step_gives_modelled_outcome(
    case: tuple[sxst.Tree, sxst.StopSchedule], order: sxst.Interleaving
) -> None:
    tree, stops = case
    sxst.run_tree(tree, stops, order, allow_gc=ALLOW_GC).check()


@settings(SETTINGS, max_examples=max(1, sxst.max_examples(300) // 2))
@given(case=sxst.trees_with_stop_schedules(kinds=sxst.ALL_KINDS), order=sxst.interleavings())
def test_stop_at_any_step_in_trio(
    case: tuple[sxst.Tree, sxst.StopSchedule], order: sxst.Interleaving
) -> None:
    """In a trio run: stop requests reach trio hops, coroutines and tasks
    (docs/task.md 'How "stopped" unwinds a task', docs/trio.md "trio cancellation becomes a stop
    request") and still give a modelled outcome, exactly
    once."""
    tree, stops = case

    async def main() -> sxst.RunResult:
        return await sxst.run_tree_trio(tree, stops, order, allow_gc=ALLOW_GC)

    trio.run(main).check()


def _dropped_failed_future_tree() -> sxst.Tree:
    """A ``spawn_future`` whose work fails and also spawns work that waits for a scheduler item,
    into the same ``counting_scope``; stopping the root before start drops the future."""
    work = sxst.WhenAll(
        (
            sxst.JustError(sxst.TreeError("e0")),
            sxst.Spawn(sxst.Hop(sxst.Just(()), 0), 0, catch=False),
        )
    )
    return sxst.Tree(
        sxst.SpawnFuture(work, 0),
        schedulers=2,
        points=1,
        scopes=("counting", "simple"),
        counted_tokens=False,
    )


@SETTINGS
@given(tree=sxst.sender_trees(), order=sxst.interleavings())
@example(tree=_dropped_failed_future_tree(), order=sxst.Interleaving([]))
def test_stop_before_start_of_when_all_starts_no_child(
    tree: sxst.Tree, order: sxst.Interleaving
) -> None:
    """Wrapping any tree in ``when_all`` and stopping before start: the outcome is exactly
    stopped and nothing in the tree ran (the children were never started), except the work
    of ``spawn_future``, which starts when the tree is built."""
    wrapped = sxst.Tree(
        sxst.WhenAll((tree.root,)),
        schedulers=tree.schedulers,
        points=tree.points,
        scopes=tree.scopes,
        counted_tokens=tree.counted_tokens,
        threads=tree.threads,
        parallel=tree.parallel,
    )
    stops = sxst.StopSchedule((sxst.StopEvent(0, ("root", 0)),))
    assert wrapped.model(stops) == {sxst.STOPPED}
    r = sxst.run_tree(wrapped, stops, order, allow_gc=ALLOW_GC)
    r.check()
    # Only the work of a spawn_future, started when the tree was built ([exec.spawn.future]), may
    # spawn.
    eager = {
        id(n)
        for f in wrapped.root.walk()
        if isinstance(f, sxst.SpawnFuture)
        for n in f.child.walk()
    }
    assert all(id(n) in eager for n in r.spawned) and r.rec.stopped


def test_dropped_future_of_failed_work_stops_its_counting_scope() -> None:
    """The future of failed work is dropped unconsumed (its consumer is never started): the
    error is the scope's, which requests stop, so the sibling spawned into the same
    ``counting_scope`` and waiting for its scheduler item completes stopped, and the join
    reports the error (docs/scopes.md "What happens when things fail", [exec.spawn.future],
    [exec.scope.counting]). The model allows that stop."""
    base = _dropped_failed_future_tree()
    tree = sxst.Tree(
        sxst.WhenAll((base.root,)),
        schedulers=base.schedulers,
        points=base.points,
        scopes=base.scopes,
        counted_tokens=base.counted_tokens,
    )
    stops = sxst.StopSchedule((sxst.StopEvent(0, ("root", 0)),))
    assert tree.plan(stops).scope(0) == sxst.MAYBE
    r = sxst.run_tree(tree, stops)
    r.check()
    assert r.outcome == sxst.STOPPED
    assert [o for _, o in r.spawn_log] == [sxst.STOPPED]
    (fut,) = r.futures
    assert fut.work is not None and fut.work[0] == "error" and fut.consumer is None
    assert r.joins[0].kind == "error"
    assert [str(e) for e in r.joins[0].error.exceptions] == ["e0"]


def test_stop_from_another_thread_runs_callbacks_there() -> None:
    """A stop request made from another thread completes a stopped hop on the thread that
    runs the item, and deregisters every callback first ([exec.recv.concepts])."""
    tree = sxst.Tree(sxst.WhenAll((sxst.Hop(sxst.Just((1,)), 0), sxst.Schedule(1))))
    stops = sxst.StopSchedule((sxst.StopEvent(1, ("root", 0), from_thread=True),))
    r = sxst.run_tree(tree, stops)
    r.check()
    assert r.outcome == sxst.STOPPED
    assert r.rec.live_callbacks_at_completion == 0


def test_stop_point_is_independent_of_the_root() -> None:
    """A stop point gives its subtree another token: stopping it stops that subtree only;
    stopping the root does not reach it."""
    inner = sxst.StopPoint(sxst.Hop(sxst.Just((7,)), 0), 0)
    tree = sxst.Tree(sxst.StoppedAsOptional(inner), points=1)
    point_stop = sxst.StopSchedule((sxst.StopEvent(0, ("point", 0)),))
    root_stop = sxst.StopSchedule((sxst.StopEvent(0, ("root", 0)),))
    assert tree.model(point_stop) == {sxst.value(None)}
    assert tree.model(root_stop) == {sxst.value(7)}
    for stops in (point_stop, root_stop):
        r = sxst.run_tree(tree, stops)
        r.check()
        assert r.outcome in tree.model(stops)


def test_scope_request_stop_reaches_associated_work() -> None:
    tree = sxst.Tree(
        sxst.StoppedAsOptional(sxst.Associate(sxst.Hop(sxst.Just((3,)), 0), 0)),
        scopes=("counting",),
    )
    stops = sxst.StopSchedule((sxst.StopEvent(1, ("scope", 0)),))
    r = sxst.run_tree(tree, stops)
    r.check()
    assert r.outcome == sxst.value(None)
    assert isinstance(r.scopes[0], sx.counting_scope)


def test_nested_when_all_stopped_at_start_closes_coroutines() -> None:
    tree = sxst.Tree(sxst.WhenAll((sxst.WhenAll((sxst.Coro(sxst.Just(())),)),)))
    stops = sxst.StopSchedule((sxst.StopEvent(0, ("root", 0)),))

    async def main() -> sxst.RunResult:
        return await sxst.run_tree_trio(tree, stops)

    r = trio.run(main)
    assert r.outcome == sxst.STOPPED
    r.check()  # fails: "coroutine ... was never awaited"
