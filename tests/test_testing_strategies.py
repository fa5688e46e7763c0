"""Tests of structexec.testing.strategies: the model, the driver, and that the properties
find real bugs ([exec.async.ops]; the spec rules the model encodes are cited per test)."""

from __future__ import annotations

import gc
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis import strategies as st

import structexec as sx
from structexec.testing import strategies as sxst
from structexec.testing.strategies import (
    MAYBE,
    NEVER,
    STOPPED,
    Fn,
    Hop,
    IntoVariant,
    Just,
    JustError,
    JustStopped,
    Let,
    Schedule,
    StartsOn,
    StopEvent,
    StoppedAsError,
    StoppedAsOptional,
    StopSchedule,
    Then,
    Tree,
    TreeError,
    Unstoppable,
    WhenAll,
    error,
    value,
)

BEFORE_START = StopSchedule((StopEvent(0, ("root", 0)),))


def _run(tree: Tree, stops: StopSchedule | None = None, choices: tuple[int, ...] = ()) -> Any:
    r = sxst.run_tree(tree, stops, sxst.Interleaving(choices))
    r.check()
    return r.outcome


# --------------------------------------------------------------------------- the model


def test_fn_results_follow_the_value_convention() -> None:
    """None is no datum, values(...) several, a tuple one datum; raising is an error."""
    e = TreeError("e")
    assert sxst.apply_fn(Fn.none(), (1,)) == value()
    assert sxst.apply_fn(Fn.pack(7), (1, 2, 3)) == value(1, 2, 7)
    assert sxst.apply_fn(Fn.tuple(), (1, 2)) == value((1, 2))
    assert sxst.apply_fn(Fn.raise_(e), ()) == error(e)
    assert sxst.apply_fn(Fn.mix(3), (1,)) == sxst.apply_fn(Fn.mix(3), (1,))
    assert sxst.apply_fn(Fn.mix(3), (1,)) != sxst.apply_fn(Fn.mix(3), (2,))
    assert repr(Fn.mix(3)) == "Fn.mix(3)" and repr(Fn.raise_(e)) == "Fn.raise_(TreeError('e'))"


def test_tree_error_compares_by_identity() -> None:
    assert TreeError("e") != TreeError("e")
    e = TreeError("e")
    assert e == e and {e: 1}[e] == 1


@pytest.mark.parametrize(
    ("root", "expected"),
    [
        # [exec.when.all]: values concatenated in argument order
        (WhenAll((Just((1,)), Just((2, 3)), Just(()))), {value(1, 2, 3)}),
        # [exec.when.all]: an error beats stopped, in either order
        (WhenAll((JustStopped(), JustError(E1 := TreeError("e1")))), {error(E1)}),
        (WhenAll((JustError(E2 := TreeError("e2")), JustStopped())), {error(E2)}),
        # [exec.when.all]: the first error (inline children complete in argument order)
        (
            WhenAll((JustError(E3 := TreeError("e3")), JustError(TreeError("late")))),
            {error(E3)},
        ),
        # [exec.into.variant]: into_variant sends one datum, the tuple of datums
        (IntoVariant(Just((1, 2))), {value((1, 2))}),
        # [exec.stopped.opt]: stopped_as_optional
        (StoppedAsOptional(JustStopped(), single=True), {value(None)}),
        (StoppedAsOptional(Just((5,))), {value(5)}),
        # [exec.stopped.err]: stopped_as_error
        (StoppedAsError(JustStopped(), E4 := TreeError("e4")), {error(E4)}),
        # [exec.then]: upon_error / upon_stopped recover; [exec.then] others pass through
        (Then(JustError(TreeError("x")), Fn.none(), "upon_error"), {value()}),
        (Then(JustStopped(), Fn.none(), "then"), {STOPPED}),
        # 14: let_value with the datums prepended
        (Let(Just((1,)), Just((2,)), "let_value", prepend=True), {value(1, 2)}),
        (Let(JustError(TreeError("x")), Just((9,)), "let_error"), {value(9)}),
        (Let(JustStopped(), Just((8,)), "let_stopped"), {value(8)}),
        # [exec.continues.on]: a hop forwards what the child sent
        (Hop(JustError(E5 := TreeError("e5")), 0), {error(E5)}),
        (StartsOn(1, Just((4,))), {value(4)}),
    ],
)
def test_model_matches_spec_examples_and_library(root: sxst.Node, expected: set[Any]) -> None:
    tree = Tree(root)
    assert tree.model() == expected
    assert _run(tree) in expected


def test_model_when_all_inline_error_before_pending_child() -> None:
    """An inline error during start comes first: the pending hop later sees stop."""
    e2 = TreeError("e2")
    tree = Tree(WhenAll((Hop(JustError(TreeError("e1")), 0), JustError(e2))))
    assert tree.model() == {error(e2)}
    for order in [(), (1,), (5, 3)]:
        assert _run(tree, None, order) == error(e2)


def test_model_when_all_pending_children_any_order() -> None:
    """Two failing hops: either error may be first, depending on the interleaving."""
    e1, e2 = TreeError("e1"), TreeError("e2")
    tree = Tree(WhenAll((Hop(JustError(e1), 0), Hop(JustError(e2), 1))))
    assert tree.model() == {error(e1), error(e2)}
    assert _run(tree, None, (0,)) == error(e1)
    assert _run(tree, None, (1,)) == error(e2)


def test_model_stop_modes() -> None:
    hop = Tree(Hop(Just((1,)), 0))
    assert hop.model(BEFORE_START) == {STOPPED}  # the scheduling op sees the stop
    anytime = StopSchedule((StopEvent(2, ("root", 0)),))
    assert hop.model(anytime) == {value(1), STOPPED}
    assert _run(hop, BEFORE_START) == STOPPED
    # when_all stopped before start starts no child ([exec.when.all]), even an inline one
    wa = Tree(WhenAll((Just((1,)),)))
    assert wa.model(BEFORE_START) == {STOPPED}
    assert _run(wa, BEFORE_START) == STOPPED
    # just ignores stop; unstoppable hides it
    assert Tree(Just((1,))).model(BEFORE_START) == {value(1)}
    assert Tree(Unstoppable(Hop(Just((1,)), 0))).model(BEFORE_START) == {value(1)}
    assert _run(Tree(Unstoppable(Hop(Just((1,)), 0))), BEFORE_START) == value(1)


def test_model_outcomes_and_timing_api() -> None:
    plan = sxst.Plan()
    s = Schedule(0)
    assert s.outcomes(NEVER, plan) == {value()}
    assert s.outcomes(MAYBE, plan) == {value(), STOPPED}
    assert s.timing(NEVER, plan) == "async"
    assert Just(()).timing(NEVER, plan) == "inline"
    assert [n.kind for n in Then(Hop(Just(()), 0), Fn.none()).walk()] == [
        "then",
        "continues_on",
        "just",
    ]


def test_tree_repr_is_code() -> None:
    t = Tree(Then(Hop(Just((1,)), 0), Fn.mix(2)))
    assert t.code() == "sx.just(1) | sx.continues_on(sch[0]) | sx.then(Fn.mix(2))"
    assert "Tree(" in repr(t)


# --------------------------------------------------------------------------- strategies


@settings(max_examples=50, deadline=None)
@given(sxst.sender_trees(kinds={"just", "then", "when_all"}))
def test_sender_trees_respect_kinds(tree: Tree) -> None:
    assert {n.kind for n in tree.root.walk()} <= {"just", "then", "when_all"}
    assert not tree.trio and not tree.threads


def test_sender_trees_reject_unknown_kinds() -> None:
    with pytest.raises(ValueError, match="unknown node kinds"):
        sxst.sender_trees(kinds={"nope"})


def test_available_kinds() -> None:
    kinds = sxst.available_kinds()
    assert {"just", "then", "let_value"} <= kinds <= sxst.ALL_KINDS


@settings(max_examples=50, deadline=None)
@given(st.data())
def test_stop_schedules_target_the_tree(data: st.DataObject) -> None:
    tree = data.draw(sxst.sender_trees(points=2, scopes=("counting", "simple")))
    targets = tree.stop_targets()
    assert targets == [("root", 0), ("point", 0), ("point", 1), ("scope", 0)]
    sched = data.draw(sxst.stop_schedules(tree, max_at=4))
    assert all(ev.target in targets and 0 <= ev.at <= 4 for ev in sched.events)


def test_interleaving_choose() -> None:
    it = sxst.Interleaving([5, 7])
    assert it.choose(1) == 0  # one choice: no draw used
    assert it.choose(3) == 2
    assert it.choose(4) == 3
    assert it.choose(4) == 0  # exhausted: FIFO


# --------------------------------------------------------------------------- drivers


def test_run_tree_needs_trio_for_trio_trees() -> None:
    with pytest.raises(ValueError, match="trio"):
        sxst.run_tree(Tree(sxst.Hop(Just(()), sxst.TRIO), trio=True))


async def test_run_tree_trio_hop_completes_on_trio() -> None:
    r = await sxst.run_tree_trio(Tree(sxst.Hop(Just((1,)), sxst.TRIO), trio=True))
    r.check()
    assert r.outcome == value(1)


def test_check_reports_lost_completion() -> None:
    """A sender that never completes: the driver reports a lost completion."""

    class Never(sx.Sender[Any]):
        def connect(self, rcvr: Any) -> Any:
            class Op:
                def start(self) -> None:
                    pass

            return Op()

    tree = Tree(sxst.Custom(Just(()), sxst.Adaptor("never", lambda s: Never())))
    r = sxst.run_tree(tree)
    with pytest.raises(AssertionError, match="lost completion"):
        r.check()


@pytest.mark.parametrize("phase", ["root", "join"])
def test_a_completion_landing_while_the_driver_looks_is_not_lost(
    phase: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver reads "not done" first, then finds nothing queued and nothing in flight: a
    completion on a pool thread can land in between. That is progress, not a lost completion
    (a false report that once failed CI at random). Forced here: ``run_one`` waits until the
    parallel hop has completed before it reports "nothing to run"."""
    import time

    from structexec.testing import _driver

    orig = _driver._Run.run_one

    def run_one(self: Any) -> bool:
        if orig(self):
            return True
        deadline = time.monotonic() + 5
        while self.w.in_flight and time.monotonic() < deadline:
            time.sleep(0.0005)  # the hop completes on the pool thread meanwhile
        return False

    monkeypatch.setattr(_driver._Run, "run_one", run_one)
    if phase == "root":
        tree = Tree(Hop(Just((1,)), sxst.PARALLEL))
    else:  # the last disassociate (so the join's completion) comes from the pool thread
        tree = Tree(
            sxst.Spawn(Hop(Just((1,)), sxst.PARALLEL), 0, catch=False), scopes=("counting",)
        )
    r = sxst.run_tree(tree)
    r.check()
    assert r.hung is None


# --------------------------------------------------------------------------- finding bugs


def _finds(
    prop_kwargs: dict[str, Any],
    patch: dict[str, Callable[..., Any]] | None = None,
    *,
    examples: int = 600,
    monkeypatch: pytest.MonkeyPatch | None = None,
    shrink: bool = True,
) -> str:
    """Run the cancellation property (with ``sx`` attributes patched); return the failure."""
    if patch:
        assert monkeypatch is not None
        for k, v in patch.items():
            monkeypatch.setattr(sx, k, v)

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=True,
        verbosity=Verbosity.quiet,
        report_multiple_bugs=False,
        suppress_health_check=list(HealthCheck),
        phases=list(Phase) if shrink else [Phase.generate],
    )
    @given(sxst.trees_with_stop_schedules(**prop_kwargs), sxst.interleavings())
    def prop(case: tuple[Tree, StopSchedule], order: sxst.Interleaving) -> None:
        tree, stops = case
        sxst.run_tree(tree, stops, order, allow_gc=True).check()

    with warnings.catch_warnings():
        # Runs that failed may leave scopes un-joined; they warn when collected.
        warnings.simplefilter("ignore", ResourceWarning)
        with pytest.raises(AssertionError) as info:
            prop()
        msg = str(info.value)
        del info
        gc.collect()
    return msg


WHEN_ALL_KINDS = {"just", "just_error", "just_stopped", "then", "when_all", "continues_on"}


def test_finds_when_all_reporting_the_wrong_error(monkeypatch: pytest.MonkeyPatch) -> None:
    real = sx.when_all
    msg = _finds(
        {"scopes": (), "kinds": WHEN_ALL_KINDS},
        {"when_all": lambda *ss: real(*ss[::-1])},
        monkeypatch=monkeypatch,
    )
    assert "not one the model allows" in msg and "when_all" in msg


def test_finds_stopped_as_error_that_recovers(monkeypatch: pytest.MonkeyPatch) -> None:
    msg = _finds(
        {"scopes": (), "kinds": {"just", "just_stopped", "then", "stopped_as_error"}},
        {"stopped_as_error": lambda s, e: sx.upon_stopped(s, lambda: None)},
        monkeypatch=monkeypatch,
    )
    assert "stopped_as_error" in msg


def test_finds_a_hop_that_ignores_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    real = sx.continues_on

    def deaf(s: Any, sch: Any) -> Any:
        return sx.unstoppable(real(s, sch))

    msg = _finds(
        {"scopes": (), "kinds": {"just", "then", "when_all", "continues_on"}},
        {"continues_on": deaf},
        monkeypatch=monkeypatch,
    )
    assert "continues_on" in msg and "StopEvent" in msg


def test_finds_a_double_completion_in_a_user_adaptor() -> None:
    """A user adaptor that completes stopped from its stop callback, without waiting for the
    child (the docs/testing.md example), is found and shrunk to a one-node tree."""

    class Op:
        def __init__(self, child: Any, rcvr: Any) -> None:
            self.rcvr = rcvr
            self.cb: Any = None
            self.op = sx.connect(child, self)

        def get_env(self) -> Any:
            return sx.get_env(self.rcvr)

        def start(self) -> None:
            tok = sx.get_stop_token(sx.get_env(self.rcvr))
            self.cb = sx.stop_callback_for(tok, self.rcvr.set_stopped)
            self.op.start()

        def _close(self) -> None:
            if self.cb is not None:
                self.cb.close()

        def set_value(self, *v: Any) -> None:
            self._close()
            self.rcvr.set_value(*v)

        def set_error(self, e: Any) -> None:
            self._close()
            self.rcvr.set_error(e)

        def set_stopped(self) -> None:
            self._close()
            self.rcvr.set_stopped()

    class Quick(sx.Sender[Any]):
        def __init__(self, child: Any) -> None:
            self.child = child

        def connect(self, rcvr: Any) -> Op:
            return Op(self.child, rcvr)

    msg = _finds({"scopes": (), "adaptors": [sxst.Adaptor("quick", Quick)]}, examples=300)
    assert "second completion" in msg
    assert "tree:  quick(sx.just())" in msg


def test_a_double_completion_caught_by_a_library_operation_is_reported_as_one() -> None:
    """Regression: when a broken adaptor completes the ``then`` above it twice, the
    then-operation raises (as it must); the report says "second completion" and where to
    look, not "start() and completion functions must not raise" (which blamed the library)."""

    class Op:
        def __init__(self, child: Any, rcvr: Any) -> None:
            self.rcvr = rcvr
            self.op = sx.connect(child, self)

        def get_env(self) -> Any:
            return sx.get_env(self.rcvr)

        def start(self) -> None:
            tok = sx.get_stop_token(sx.get_env(self.rcvr))
            self.cb = sx.stop_callback_for(tok, self.rcvr.set_stopped)  # completes at once
            self.op.start()  # ... and the child completes again

        def set_value(self, *v: Any) -> None:
            self.rcvr.set_value(*v)

        def set_error(self, e: Any) -> None:
            self.rcvr.set_error(e)

        def set_stopped(self) -> None:
            self.rcvr.set_stopped()

    class Quick(sx.Sender[Any]):
        def __init__(self, child: Any) -> None:
            self.child = child

        def connect(self, rcvr: Any) -> Op:
            return Op(self.child, rcvr)

    quick = sxst.Adaptor("quick", Quick)
    # The failing sibling stops the when_all before quick(...) starts: no stop schedule.
    tree = Tree(
        WhenAll(
            (JustError(TreeError("e0")), Then(sxst.Custom(Just(()), quick), Fn.mix(0), "then"))
        )
    )
    with pytest.raises(AssertionError) as info:
        sxst.run_tree(tree, StopSchedule(), allow_gc=True).check()
    msg = str(info.value)
    assert msg.startswith(
        "second completion: _ThenOp.set_value() called after the operation had already "
        "completed"
    ), msg
    assert "completed it twice" in msg
    assert "must not raise" not in msg
    assert "tree:  sx.when_all(sx.just_error(TreeError('e0')), quick(sx.just())" in msg


def test_finds_a_leaked_stop_callback() -> None:
    """A user adaptor that never deregisters its stop callback."""

    class Op:
        def __init__(self, child: Any, rcvr: Any) -> None:
            self.rcvr = rcvr
            self.op = sx.connect(child, self)

        def get_env(self) -> Any:
            return sx.get_env(self.rcvr)

        def start(self) -> None:
            tok = sx.get_stop_token(sx.get_env(self.rcvr))
            self.cb = sx.stop_callback_for(tok, lambda: None)  # never closed
            self.op.start()

        def set_value(self, *v: Any) -> None:
            self.rcvr.set_value(*v)

        def set_error(self, e: Any) -> None:
            self.rcvr.set_error(e)

        def set_stopped(self) -> None:
            self.rcvr.set_stopped()

    class Leaky(sx.Sender[Any]):
        def __init__(self, child: Any) -> None:
            self.child = child

        def connect(self, rcvr: Any) -> Op:
            return Op(self.child, rcvr)

    msg = _finds({"scopes": (), "adaptors": [sxst.Adaptor("leaky", Leaky)]}, examples=300)
    assert "stop callback" in msg and "[exec.recv.concepts]" in msg


def test_finds_a_scope_that_loses_an_association(monkeypatch: pytest.MonkeyPatch) -> None:
    """spawn that forgets to release its association (the join never completes)."""
    real = sx.spawn

    def leaky_spawn(s: Any, token: Any, env: Any = None) -> None:
        inner = token.inner if isinstance(token, sxst.CountingToken) else token
        inner.try_associate()  # an extra association nobody releases
        real(s, token, sx.env() if env is None else env)

    msg = _finds(
        {"kinds": {"just", "then", "spawn"}, "scopes": ("counting",)},
        {"spawn": leaky_spawn},
        examples=50,
        monkeypatch=monkeypatch,
        shrink=False,  # every run fails, and each lost join costs a gc.collect()
    )
    assert "join" in msg and "never completed" in msg


def test_trio_property_finds_a_bug(monkeypatch: pytest.MonkeyPatch) -> None:
    """The trio driver: a reversed when_all is found among trio hops and coroutines too."""
    real = sx.when_all
    monkeypatch.setattr(sx, "when_all", lambda *ss: real(*ss[::-1]))
    kinds = {"just", "just_error", "then", "when_all", "trio_hop", "coroutine", "task"}

    @settings(
        max_examples=300,
        deadline=None,
        database=None,
        derandomize=True,
        verbosity=Verbosity.quiet,
        report_multiple_bugs=False,
    )
    @given(sxst.sender_trees(kinds=kinds, scopes=()), sxst.interleavings())
    def prop(tree: Tree, order: sxst.Interleaving) -> None:
        async def main() -> sxst.RunResult:
            return await sxst.run_tree_trio(tree, None, order)

        trio.run(main).check()

    with pytest.raises(AssertionError, match="not one the model allows"):
        prop()


# --------------------------------------------------------------------------- named properties


def _good_scoped_run() -> sxst.RunResult:
    # A spawn into a counting scope, hopping through a ManualScheduler: every property applies.
    tree = Tree(sxst.Spawn(Schedule(0), 0), scopes=("counting",))
    r = sxst.run_tree(tree)
    r.check()
    assert r.failure() is None
    return r


def test_run_result_properties_are_named_and_distinct() -> None:
    names = [p.name for p in sxst.PROPERTIES]
    assert len(set(names)) == len(names) >= 15
    r = _good_scoped_run()
    assert [p.check(r) for p in sxst.PROPERTIES] == [None] * len(names)


@pytest.mark.parametrize(
    ("name", "breaks", "says"),
    [
        ("no-lost-completion", lambda r: setattr(r, "hung", "the root never completed"), "never"),
        ("modelled-outcome", lambda r: setattr(r, "model", frozenset()), "not one the model"),
        ("completes-once", lambda r: r.rec.events.append(("value", ())), "completed 2 times"),
        ("spawned-work-completes-once", lambda r: r.spawned.append(r.spawned[0]), "spawn() calls"),
        ("scopes-count-zero", lambda r: setattr(r, "scopes", [_Count(1)]), "still counts 1"),
        (
            "no-terminate",
            lambda r: r.terminate_calls.append(("late completion", None)),
            "terminate handler called: late completion",
        ),
    ],
)
def test_a_broken_run_result_names_the_property_it_broke(
    name: str, breaks: Callable[[sxst.RunResult], object], says: str
) -> None:
    r = _good_scoped_run()
    breaks(r)
    found = r.failure()
    assert found is not None
    assert found[0] == name, found
    assert says in found[1]
    with pytest.raises(AssertionError) as info:
        r.check()
    lines = str(info.value).splitlines()
    assert says in lines[0]
    assert lines[1] == f"  property: {name}"
    assert lines[2].startswith("  tree:  spawn(sx.schedule(sch[0]), tokens[0]")


class _Count:
    def __init__(self, count: int) -> None:
        self.count = count


def test_the_first_broken_property_is_reported_with_its_cause() -> None:
    # Two properties broken at once: the earlier one in PROPERTIES is reported; what the run
    # raised is the cause of the AssertionError ([exec.opstate.start]).
    r = _good_scoped_run()
    r.model = frozenset()
    try:
        raise RuntimeError("start failed")
    except RuntimeError as e:
        r.raised = e
    with pytest.raises(AssertionError, match="the run raised RuntimeError: start failed") as info:
        r.check()
    assert "\n  property: nothing-raised\n" in str(info.value)
    assert info.value.__cause__ is r.raised
