"""Hypothesis strategies for property-testing senders and cancellation.

[exec.async.ops], the testing guide (2.2: "a property test across random
compositions"). Needs ``hypothesis`` (``pip install 'structexec[testing]'``; importing this
module without it raises :class:`ModuleNotFoundError` naming the extra). Strategies, usable
together or alone:

* :func:`sender_trees` generates random sender trees (:class:`Tree`): factories,
  ``then``/``upon_*``/``let_*``, ``when_all``/``when_all_with_variant``, ``into_variant``,
  ``stopped_as_*``, hops onto ``ManualScheduler`` (``schedule``, ``continues_on``,
  ``starts_on``), stop points (``write_env`` of another stop token), ``unstoppable``,
  ``associate``/``spawn``/``spawn_future`` into counting scopes, coroutines and ``task``,
  hops onto trio and onto a worker thread. Each tree comes with a plain-Python model:
  ``tree.model(stops)`` is the set of outcomes it may complete with.
* :func:`stop_schedules` generates which operation gets a stop request, at which step
  (:class:`StopSchedule`).
* :func:`timed_trees` generates *timed* trees (timers, ``when_any``, ``stop_when``,
  ``timeout``/``stop_after``) whose model predicts the exact outcome and completion time on a
  ``ManualScheduler``'s virtual time; run them with :func:`run_timed_tree`
  (the testing guide "Timed trees"). :func:`sender_trees` never generates timed nodes.
* :func:`pipelines` generates random sequence pipelines (:class:`Pipeline`: a source,
  ``then_each``/``filter_each``/``let_each`` with random ``max_concurrency`` and ``ordered``/
  ``take`` stages, failing items, a failing source, a stop point) whose model predicts the
  outcome; run them with :func:`run_pipeline` (``sync_wait``) or :func:`run_pipeline_trio`.
* :func:`interleavings` generates the order in which queued scheduler items run
  (:class:`Interleaving`), so hypothesis explores, and shrinks, schedules.

:func:`run_tree` (or :func:`run_tree_trio` in a trio run) runs a tree under a stop schedule and
an interleaving and returns a :class:`RunResult` whose ``check()`` asserts the completion
contract, the modelled outcome and the scope invariants: the named :class:`Property` checks of
:data:`PROPERTIES`, a failure naming the property it broke. A worked example is in
``docs/testing.md``::

    from hypothesis import given
    from structexec.testing import strategies as sxst

    @given(sxst.sender_trees(), sxst.stop_schedules(), sxst.interleavings())
    def test_cancellation(tree, stops, order):
        sxst.run_tree(tree, stops, order).check()

Node kinds whose structexec implementation is not importable are left out automatically
(:func:`available_kinds`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any

try:
    from hypothesis import strategies as st
except ModuleNotFoundError as exc:  # pragma: no cover - tested in a subprocess
    if exc.name is None or exc.name.partition(".")[0] != "hypothesis":
        raise
    raise ModuleNotFoundError(
        "structexec.testing.strategies needs hypothesis, which is not installed; "
        "install it with the 'testing' extra: pip install 'structexec[testing]'",
        name=exc.name,
    ) from exc

import structexec as sx

from .._core import _hooks
from ._checks import PROPERTIES, Property
from ._driver import (
    CountingToken,
    Interleaving,
    RunResult,
    StopEvent,
    StopSchedule,
    Tree,
    run_tree,
    run_tree_trio,
)
from ._manual import ManualScheduler
from ._pipelines import (
    Outcome,
    Pipeline,
    Stage,
    StageFailure,
    run_pipeline,
    run_pipeline_trio,
)
from ._thread_sched import ThreadScheduler
from ._timed_tree import (
    TIMEOUT,
    StopWhen,
    TimedResult,
    TimedTree,
    Timeout,
    Timer,
    WhenAny,
    run_timed_tree,
    simulate,
    timed_world,
)
from ._tree import (
    ALREADY,
    MAYBE,
    NEVER,
    PARALLEL,
    STOPPED,
    THREAD,
    TRIO,
    Adaptor,
    Associate,
    Coro,
    Custom,
    Fn,
    Hop,
    IntoVariant,
    Just,
    JustError,
    JustStopped,
    Let,
    Node,
    Plan,
    Schedule,
    Spawn,
    SpawnFuture,
    StartsOn,
    StoppedAsError,
    StoppedAsOptional,
    StopPoint,
    Task,
    Then,
    TreeError,
    Unstoppable,
    WhenAll,
    apply_fn,
    error,
    mark_late,
    value,
)

__all__ = [
    "Outcome",
    "Pipeline",
    "Stage",
    "StageFailure",
    "pipelines",
    "run_pipeline",
    "run_pipeline_trio",
    "ALL_KINDS",
    "Adaptor",
    "Custom",
    "ALREADY",
    "MAYBE",
    "NEVER",
    "STOPPED",
    "SYNC_KINDS",
    "TIMED_KINDS",
    "TIMEOUT",
    "StopWhen",
    "TimedResult",
    "TimedTree",
    "Timeout",
    "Timer",
    "WhenAny",
    "run_timed_tree",
    "simulate",
    "timed_trees",
    "CountingToken",
    "Fn",
    "ThreadScheduler",
    "Interleaving",
    "Node",
    "Plan",
    "RunResult",
    "PROPERTIES",
    "Property",
    "StopEvent",
    "StopSchedule",
    "Tree",
    "TreeError",
    "apply_fn",
    "available_kinds",
    "error",
    "fns",
    "interleavings",
    "max_examples",
    "run_tree",
    "run_tree_trio",
    "sender_trees",
    "stop_schedules",
    "tree_errors",
    "trees_with_stop_schedules",
    "value",
    # node classes, for writing trees by hand
    "Associate",
    "Coro",
    "Hop",
    "IntoVariant",
    "Just",
    "JustError",
    "JustStopped",
    "Let",
    "PARALLEL",
    "Schedule",
    "Spawn",
    "SpawnFuture",
    "StartsOn",
    "StopPoint",
    "StoppedAsError",
    "StoppedAsOptional",
    "Task",
    "Then",
    "THREAD",
    "TRIO",
    "Unstoppable",
    "WhenAll",
]

#: Node kinds that run without trio.
SYNC_KINDS = frozenset(
    {
        "just",
        "just_error",
        "just_stopped",
        "then",
        "upon_error",
        "upon_stopped",
        "let_value",
        "let_error",
        "let_stopped",
        "when_all",
        "when_all_with_variant",
        "into_variant",
        "stopped_as_optional",
        "stopped_as_error",
        "schedule",
        "continues_on",
        "starts_on",
        "stop_point",
        "unstoppable",
        "associate",
        "spawn",
        "spawn_future",
        "thread_hop",
        "parallel_hop",
    }
)
#: Every node kind; ``trio_hop``, ``coroutine`` and ``task`` need :func:`run_tree_trio`.
ALL_KINDS = SYNC_KINDS | {"trio_hop", "coroutine", "task"}

_NEEDS: dict[str, tuple[str, ...]] = {
    "when_all": ("when_all",),
    "when_all_with_variant": ("when_all_with_variant",),
    "into_variant": ("into_variant",),
    "stopped_as_optional": ("stopped_as_optional",),
    "stopped_as_error": ("stopped_as_error",),
    "continues_on": ("continues_on",),
    "starts_on": ("starts_on",),
    "stop_point": ("write_env",),
    "unstoppable": ("unstoppable",),
    "associate": ("associate", "counting_scope", "simple_counting_scope"),
    "spawn": ("spawn", "counting_scope", "simple_counting_scope"),
    "spawn_future": ("spawn_future", "counting_scope", "simple_counting_scope"),
    "thread_hop": ("continues_on",),
    "parallel_hop": ("continues_on", "get_parallel_scheduler"),
    "trio_hop": ("continues_on", "trio_scheduler"),
    "task": ("task",),
}


def available_kinds() -> frozenset[str]:
    """The node kinds whose structexec implementation is importable in this build."""
    out = set()
    for k in ALL_KINDS:
        if all(callable(getattr(sx, name, None)) for name in _NEEDS.get(k, ())):
            out.add(k)
    if _hooks.connect_awaitable is _hooks._no_connect_awaitable:
        out.discard("coroutine")
    return frozenset(out)


# --------------------------------------------------------------------------- leaves


def tree_errors() -> st.SearchStrategy[TreeError]:
    """Fresh :class:`TreeError` instances labelled ``e0`` ... ``e9`` (compared by identity)."""
    return st.integers(0, 9).map(lambda i: TreeError(f"e{i}"))


def fns(which: str = "then") -> st.SearchStrategy[Fn]:
    """Functions for ``then`` (``which="then"``), ``upon_error`` or ``upon_stopped``."""
    ks = st.integers(0, 9)
    opts: list[st.SearchStrategy[Fn]] = [ks.map(Fn.mix), tree_errors().map(Fn.raise_)]
    if which == "then":
        opts += [ks.map(Fn.pack), st.just(Fn.none()), st.just(Fn.tuple())]
    else:
        opts += [st.just(Fn.none())]
    return st.one_of(*opts)


class _AllMaybe(Plan):
    def point(self, i: int) -> int:
        return MAYBE

    def scope(self, i: int) -> int:
        return MAYBE


def _needs_single(child: Node) -> bool:
    arities = {len(o[1]) for o in child.outcomes(MAYBE, _AllMaybe(MAYBE)) if o[0] == "value"}
    return arities != {1}


# --------------------------------------------------------------------------- trees


def sender_trees(
    kinds: Iterable[str] | None = None,
    *,
    schedulers: int = 2,
    points: int = 1,
    scopes: tuple[str, ...] = ("counting", "simple"),
    max_nodes: int = 12,
    max_depth: int = 5,
    max_children: int = 3,
    adaptors: Sequence[Adaptor] = (),
) -> st.SearchStrategy[Tree]:
    """Random sender trees, each with its model (``tree.model(stops)``).

    ``kinds``: the node kinds to use (default: every available kind that runs without trio,
    :data:`SYNC_KINDS`; pass :data:`ALL_KINDS` for trio hops, coroutines and ``task``, and run
    those with :func:`run_tree_trio`). Kinds that are not available in this build are
    dropped. ``schedulers``: how many ``ManualScheduler`` the hops use; ``points``: how many
    stop points (independent stop sources a subtree can be given); ``scopes``: the scopes
    that ``associate``/``spawn``/``spawn_future`` use (``"counting"`` or ``"simple"``);
    ``max_nodes``/``max_depth``/``max_children``: tree size. ``adaptors``: your own sender
    adaptors (:class:`Adaptor`: how to apply it, and a model of what it completes with) to
    mix into the trees. Trees shrink towards fewer nodes, then towards the first kinds of
    :data:`SYNC_KINDS`.
    """
    want = set(SYNC_KINDS if kinds is None else kinds)
    unknown = want - ALL_KINDS
    if unknown:
        raise ValueError(f"unknown node kinds {sorted(unknown)}; known: {sorted(ALL_KINDS)}")
    k = want & available_kinds()
    if not scopes:
        k -= {"associate", "spawn", "spawn_future"}
    if not points:
        k.discard("stop_point")
    k.add("just")
    leaf_kinds = [x for x in ("just", "just_error", "just_stopped", "schedule") if x in k]
    inner_kinds = [x for x in _INNER_ORDER if x in k]
    adaptors = tuple(adaptors)
    if adaptors:
        inner_kinds[:0] = ["custom"] * 4  # your adaptors are what you want tested
    n_sch = max(1, schedulers)
    n_scopes = len(scopes)

    @st.composite
    def node(draw: st.DrawFn, depth: int, budget: list[int]) -> Node:
        budget[0] -= 1
        # Leaves when out of depth or budget, or on a 1-in-4 draw (which shrinks to a leaf).
        if depth >= max_depth or budget[0] <= 0 or not inner_kinds or draw(st.integers(0, 3)) == 0:
            return _leaf(draw, draw(st.sampled_from(leaf_kinds)), n_sch)
        kind = draw(st.sampled_from(inner_kinds))

        def child() -> Node:
            return draw(node(depth + 1, budget))

        if kind == "custom":
            return Custom(child(), draw(st.sampled_from(adaptors)))
        if kind in ("then", "upon_error", "upon_stopped"):
            return Then(child(), draw(fns(kind)), kind)
        if kind in ("let_value", "let_error", "let_stopped"):
            c = child()
            prepend = kind == "let_value" and draw(st.booleans())
            return Let(c, child(), kind, prepend)
        if kind in ("when_all", "when_all_with_variant"):
            n = draw(st.integers(1, max_children))
            return WhenAll(tuple(child() for _ in range(n)), kind == "when_all_with_variant")
        if kind == "into_variant":
            return IntoVariant(child())
        if kind == "stopped_as_optional":
            c = child()
            return StoppedAsOptional(c, _needs_single(c))
        if kind == "stopped_as_error":
            return StoppedAsError(child(), draw(tree_errors()))
        if kind == "continues_on":
            return Hop(child(), draw(st.integers(0, n_sch - 1)))
        if kind == "starts_on":
            return StartsOn(draw(st.integers(0, n_sch - 1)), child())
        if kind == "stop_point":
            return StopPoint(child(), draw(st.integers(0, points - 1)))
        if kind == "unstoppable":
            return Unstoppable(child())
        if kind == "associate":
            return Associate(child(), draw(st.integers(0, n_scopes - 1)))
        if kind == "spawn_future":
            return SpawnFuture(child(), draw(st.integers(0, n_scopes - 1)))
        if kind == "spawn":
            return Spawn(child(), draw(st.integers(0, n_scopes - 1)), draw(st.booleans()))
        if kind == "thread_hop":
            return Hop(child(), THREAD)
        if kind == "parallel_hop":
            return Hop(child(), PARALLEL)
        if kind == "trio_hop":
            return Hop(child(), TRIO)
        if kind == "coroutine":
            return Coro(child())
        assert kind == "task", kind
        return Task(child())

    @st.composite
    def sender_trees(draw: st.DrawFn) -> Tree:
        root = draw(node(0, [max_nodes]))
        mark_late(root)
        used = {n.kind for n in root.walk()}
        return Tree(
            root,
            schedulers=n_sch,
            points=points,
            scopes=tuple(scopes),
            counted_tokens=draw(st.booleans()),
            trio=bool(used & {"trio_hop", "coroutine", "task"}),
            threads="thread_hop" in used,
            parallel="parallel_hop" in used,
        )

    return sender_trees()


_INNER_ORDER = (
    "then",
    "upon_error",
    "upon_stopped",
    "let_value",
    "let_error",
    "let_stopped",
    "when_all",
    "when_all_with_variant",
    "into_variant",
    "stopped_as_optional",
    "stopped_as_error",
    "continues_on",
    "starts_on",
    "stop_point",
    "unstoppable",
    "associate",
    "spawn",
    "spawn_future",
    "thread_hop",
    "parallel_hop",
    "trio_hop",
    "coroutine",
    "task",
)


def _leaf(draw: st.DrawFn, kind: str, n_sch: int) -> Node:
    if kind == "just_error":
        return JustError(draw(tree_errors()))
    if kind == "just_stopped":
        return JustStopped()
    if kind == "schedule":
        return Schedule(draw(st.integers(0, n_sch - 1)))
    return Just(tuple(draw(st.lists(st.integers(-5, 99), max_size=3))))


def stop_schedules(
    targets: Iterable[tuple[str, int]] | Tree | None = None,
    *,
    max_at: int = 12,
    max_events: int = 3,
    from_threads: bool = True,
) -> st.SearchStrategy[StopSchedule]:
    """Which operations get a stop request, and at which step.

    ``targets``: a :class:`Tree` (its ``stop_targets()``) or a list of targets; by default
    only the root. ``at`` runs from 0 (before the root starts) to ``max_at`` (after
    ``max_at - 1`` scheduler items ran). With ``from_threads``, some requests are made from
    another thread. The empty schedule is included (and is what failures shrink towards).
    """
    if targets is None:
        tlist = [("root", 0)]
    elif isinstance(targets, Tree):
        tlist = targets.stop_targets()
    else:
        tlist = list(targets)
    event = st.builds(
        StopEvent,
        st.integers(0, max_at),
        st.sampled_from(tlist),
        st.booleans() if from_threads else st.just(False),
    )
    return st.lists(event, max_size=max_events).map(lambda evs: StopSchedule(tuple(evs)))


def trees_with_stop_schedules(
    **kwargs: Any,
) -> st.SearchStrategy[tuple[Tree, StopSchedule]]:
    """A tree (``sender_trees(**kwargs)``) and a stop schedule over all its stop targets."""
    stop_kw = {k: kwargs.pop(k) for k in ("max_at", "max_events", "from_threads") if k in kwargs}
    return sender_trees(**kwargs).flatmap(
        lambda t: st.tuples(st.just(t), stop_schedules(t, **stop_kw))
    )


def max_examples(default: int = 100) -> int:
    """The hypothesis example count: ``STRUCTEXEC_PROPERTY_EXAMPLES`` if set, else ``default``.

    Lets one command run a property suite briefly in CI and thoroughly on demand::

        STRUCTEXEC_PROPERTY_EXAMPLES=10000 pytest tests/test_properties_trees.py
    """
    raw = os.environ.get("STRUCTEXEC_PROPERTY_EXAMPLES", "").strip()
    if not raw:
        return default
    n = int(raw)
    if n < 1:
        raise ValueError(f"STRUCTEXEC_PROPERTY_EXAMPLES must be a positive integer, got {raw!r}")
    return n


def interleavings(max_steps: int = 64) -> st.SearchStrategy[Interleaving]:
    """The order in which queued scheduler items run: at each step, which one runs next.

    Shrinks towards FIFO order (all zeros).
    """
    return st.lists(st.integers(0, 255), max_size=max_steps).map(Interleaving)


#: The node kinds of :func:`timed_trees` (in shrinking order).
TIMED_KINDS = frozenset(
    {"then", "let_value", "when_all", "when_any", "stop_when", "timeout", "stop_after"}
)
_TIMED_INNER = ("then", "let_value", "when_all", "when_any", "stop_when", "timeout", "stop_after")


def timed_trees(
    kinds: Iterable[str] | None = None,
    *,
    max_nodes: int = 10,
    max_depth: int = 4,
    max_children: int = 3,
    max_seconds: int = 4,
    stops: bool = True,
) -> st.SearchStrategy[TimedTree]:
    """Random *timed* trees (:class:`TimedTree`) for :func:`run_timed_tree`: timers
    (``sx.schedule_after(sch[0], d)``, often followed by a ``then`` so the winner of a race shows
    in the value), ``sx.when_any``, ``sx.stop_when``, ``sx.timeout``/``sx.stop_after``,
    ``when_all``, ``then``, ``let_value`` and the factories, with whole seconds from 0 to
    ``max_seconds``; with ``stops``, a stop request on the root before start or at a virtual
    time (or none). ``kinds`` narrows the inner node kinds (:data:`TIMED_KINDS`).

    ``tree.model()`` predicts the exact outcome and completion time (the testing guide "Timed
    trees"). The strategies for untimed trees (:func:`sender_trees`) never generate these
    nodes: timed trees run only on a ``ManualScheduler`` with virtual time, where the run
    is deterministic.
    """
    want = set(TIMED_KINDS if kinds is None else kinds)
    unknown = want - TIMED_KINDS
    if unknown:
        raise ValueError(
            f"unknown timed node kinds {sorted(unknown)}; known: {sorted(TIMED_KINDS)}"
        )
    inner_kinds = [x for x in _TIMED_INNER if x in want]
    secs = st.integers(0, max_seconds)

    @st.composite
    def node(draw: st.DrawFn, depth: int, budget: list[int]) -> Node:
        budget[0] -= 1
        if depth >= max_depth or budget[0] <= 0 or not inner_kinds or draw(st.integers(0, 3)) == 0:
            leaf = draw(st.sampled_from(("timer", "just", "just_error", "just_stopped")))
            if leaf == "timer":
                t: Node = Timer(draw(secs))
                if draw(st.booleans()):
                    t = Then(t, Fn.mix(draw(st.integers(0, 9))))
                return t
            return _leaf(draw, leaf, 1)
        kind = draw(st.sampled_from(inner_kinds))

        def child() -> Node:
            return draw(node(depth + 1, budget))

        if kind == "then":
            return Then(child(), draw(fns("then")))
        if kind == "let_value":
            c = child()
            return Let(c, child(), "let_value", draw(st.booleans()))
        if kind == "when_all":
            n = draw(st.integers(1, max_children))
            kids = tuple(child() for _ in range(n))
            # when_all needs at most one value signature per child ([exec.when.all]).
            return WhenAll(kids, any(_value_signatures(c) > 1 for c in kids))
        if kind == "when_any":
            n = draw(st.integers(1, max_children))
            return WhenAny(tuple(child() for _ in range(n)))
        if kind == "stop_when":
            c = child()
            return StopWhen(c, child())
        return Timeout(child(), draw(secs), kind == "stop_after")

    @st.composite
    def timed_trees(draw: st.DrawFn) -> TimedTree:
        root = draw(node(0, [max_nodes]))
        stop_at = draw(st.one_of(st.none(), st.integers(-1, 2 * max_seconds))) if stops else None
        return TimedTree(root, stop_at)

    return timed_trees()


def _value_signatures(n: Node) -> int:
    """How many ``set_value_t`` signatures the timed node ``n`` declares on ``sch[0]``."""
    sch = ManualScheduler()
    env = sx.env(
        sx.prop(sx.get_scheduler, sch),
        sx.prop(sx.get_stop_token, sx.inplace_stop_source().get_token()),
    )
    sigs = sx.get_completion_signatures(n.build(timed_world(sch)), env)
    return 2 if sigs is None else int(sigs.count_of(sx.set_value_t))


@st.composite
def _stage(draw: st.DrawFn, values: list[int]) -> Stage:
    kind = draw(st.sampled_from(("then_each", "filter_each", "let_each", "take")))
    if kind == "then_each":
        return Stage(kind, draw(st.integers(-3, 3)))
    if kind == "filter_each":
        return Stage(kind, draw(st.integers(1, 3)))
    if kind == "take":
        return Stage(kind, draw(st.integers(0, 6)))
    fail = draw(st.frozensets(st.integers(-5, 25), max_size=2))
    return Stage(kind, draw(st.integers(1, 4)), draw(st.booleans()), fail)


@st.composite
def pipelines(draw: st.DrawFn, max_items: int = 12, max_stages: int = 4) -> Pipeline:
    """Random sequence pipelines (:class:`Pipeline`, the streams guide): a source of up to
    ``max_items`` ints (sometimes failing after some of them), up to ``max_stages`` stages
    (``then_each``, ``filter_each``, ``let_each`` with a random ``max_concurrency`` and
    ``ordered`` and failing items, ``take``) and sometimes a stop request on the consumer's
    token after the k-th value. ``pipeline.model()`` is the outcome a run must have."""
    source = draw(st.lists(st.integers(0, 20), max_size=max_items))
    stages = draw(st.lists(_stage(source), max_size=max_stages))
    stop_at = draw(st.none() | st.integers(1, max(1, len(source))))
    fails_at = draw(st.none() | st.integers(0, len(source)))
    return Pipeline(tuple(source), tuple(stages), stop_at, fails_at)
