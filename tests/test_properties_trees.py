"""Property: every random sender tree completes exactly once, with the modelled result.

[exec.async.ops] ("Rec over every algorithm, including a property test across random
compositions"), [exec.connect], [exec.recv.concepts] (no stop callback left registered),
[exec.get.compl.sched]; [exec.just], [exec.then], [exec.let], [exec.when.all],
[exec.into.variant], [exec.stopped.opt] (the algorithms the trees combine); [exec.starts.on],
[exec.continues.on] (scheduling hops, under every interleaving of the manual schedulers'
queues); [exec.as.awaitable], [exec.task] (the coroutine and task nodes in the trio run).

The example count is ``STRUCTEXEC_PROPERTY_EXAMPLES`` (default: small, for CI), e.g.
``STRUCTEXEC_PROPERTY_EXAMPLES=10000 pytest tests/test_properties_trees.py``.
"""

from __future__ import annotations

import trio
from hypothesis import HealthCheck, given, settings

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
@given(tree=sxst.sender_trees(), order=sxst.interleavings())
def test_every_tree_completes_once_with_modelled_result(
    tree: sxst.Tree, order: sxst.Interleaving
) -> None:
    """No stop request from outside: the root completes exactly once, never before start,
    with no stop callback left registered ([exec.recv.concepts]), with an outcome the model
    allows, and on the scheduler its attributes declare ([exec.get.compl.sched]); spawned work
    and scopes check out."""
    sxst.run_tree(tree, None, order, allow_gc=ALLOW_GC).check()


@settings(SETTINGS, max_examples=max(1, sxst.max_examples(300) // 2))
@given(tree=sxst.sender_trees(sxst.ALL_KINDS), order=sxst.interleavings())
def test_every_tree_completes_once_in_trio(tree: sxst.Tree, order: sxst.Interleaving) -> None:
    """The same, in a trio run, with trio hops, coroutine senders and ``task`` nodes; the
    interleaving also chooses when trio runs its tasks."""

    async def main() -> sxst.RunResult:
        return await sxst.run_tree_trio(tree, None, order, allow_gc=ALLOW_GC)

    trio.run(main).check()


@SETTINGS
@given(tree=sxst.sender_trees(max_nodes=20, max_depth=7))
def test_model_is_exact_without_stops_and_hops(tree: sxst.Tree) -> None:
    """With no stop schedule, a tree without scheduler hops or concurrency has exactly one
    modelled outcome (the model is a function there, not a relation)."""
    kinds = {n.kind for n in tree.root.walk()}
    if kinds & {
        "schedule",
        "continues_on",
        "starts_on",
        "thread_hop",
        "parallel_hop",
        "spawn",
        "spawn_future",
        "associate",
        "stop_point",
    }:
        return
    assert len(tree.model()) == 1, (tree, tree.model())


def test_model_when_all_child_made_inline_by_sibling_failure() -> None:
    """Pinned from the 10,000-example run: a child that would wait for a scheduler item on its own
    (``when_all(just(), schedule(sch))``) completes stopped *inline* when a sibling started before
    it has already failed (the stop request reaches it before it starts, [exec.when.all]), so its
    parent completes during ``start`` with the first error, and an equal-looking error of a later
    sibling must not win ([exec.when.all]: the first error to arrive)."""
    from structexec.testing._tree import Just, JustError, Let, Schedule, TreeError, WhenAll

    first, second = TreeError("e0"), TreeError("e0")
    inner = WhenAll(
        (Let(JustError(first), Just(()), which="let_stopped"), WhenAll((Just(()), Schedule(0))))
    )
    tree = sxst.Tree(Let(Just(()), WhenAll((WhenAll((inner, JustError(second))),))))
    assert tree.model() == {("error", first)}
    assert tree.root.timing(0, tree.plan()) == "inline"
    result = sxst.run_tree(tree, None, sxst.Interleaving(()))
    result.check()
    assert result.rec.error is first
