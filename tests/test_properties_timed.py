"""Property: random *timed* trees (timers, ``when_any``, ``stop_when``, ``timeout``/``stop_after``)
complete exactly once, with the outcome and at the virtual time the model predicts
(docs/testing.md "Timed trees"); fixed examples for each timed node kind, ties included.

The example count is ``STRUCTEXEC_PROPERTY_EXAMPLES`` (default: small, for CI).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

import structexec as sx
from structexec.testing import ManualScheduler, RecordingReceiver
from structexec.testing import strategies as sxst
from structexec.testing.strategies import (
    STOPPED,
    TIMEOUT,
    Fn,
    Just,
    JustError,
    JustStopped,
    Let,
    StopWhen,
    Then,
    TimedTree,
    Timeout,
    Timer,
    TreeError,
    WhenAll,
    WhenAny,
    error,
    value,
)

SETTINGS = settings(
    max_examples=sxst.max_examples(300),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@SETTINGS
@given(case=sxst.timed_trees())
def test_every_timed_tree_completes_as_modelled(case: TimedTree) -> None:
    sxst.run_timed_tree(case).check()


@SETTINGS
@given(case=sxst.timed_trees(max_nodes=16, max_depth=5, max_seconds=2))
def test_timed_trees_with_many_ties(case: TimedTree) -> None:
    # Few distinct deadlines: most races are decided by FIFO order among equal deadlines.
    sxst.run_timed_tree(case).check()


def _prepend(a: tuple[Any, ...]) -> Any:
    return sx.then(lambda *v: sx.values(*a, *v))


@settings(max_examples=sxst.max_examples(100), deadline=None)
@given(case=sxst.timed_trees())
def test_printed_timed_trees_are_python(case: TimedTree) -> None:
    """``tree.code()`` is valid Python with ``sx.`` names; run as printed, the sender
    completes as modelled."""
    sch = ManualScheduler()
    ns = {"sx": sx, "sch": [sch], "Fn": Fn, "TreeError": TreeError, "prepend": _prepend}
    sndr = eval(case.code(), ns)
    rec = RecordingReceiver(extra_env=sx.prop(sx.get_scheduler, sch))
    if case.stop_at == -1:
        rec.request_stop()
    rec.run(sndr)
    if case.stop_at is not None and case.stop_at >= 0 and not rec.done:
        sch.advance(case.stop_at)
        rec.request_stop()
    while not rec.done:
        sch.advance(sch.next_deadline - sch.now())
    want, _ = case.model()
    got = rec.outcome
    if got[0] == "error" and isinstance(got[1], TimeoutError):
        got = ("error", TIMEOUT)
    if want[0] == "error" and isinstance(want[1], TreeError):
        # Printed errors are new TreeError objects: compare their labels.
        assert got[0] == "error" and isinstance(got[1], TreeError)
        assert got[1].label == want[1].label
    else:
        assert got == want


def _t(seconds: int, k: int) -> Then:
    """A timer whose value tells which one it was."""
    return Then(Timer(seconds), Fn.mix(k))


def _v(k: int) -> Any:
    return value(Fn.mix(k)())


E1 = TreeError("e1")

FIXED = [
    # timers
    ("timer fires", Timer(3), None, value(), 3),
    ("timer 0 waits for advance(0)", Timer(0), None, value(), 0),
    ("timer stopped while pending", Timer(3), 1, STOPPED, 1),
    ("timer stopped before start", Timer(3), -1, STOPPED, 0),
    ("timer due at the stop time fires first", Timer(2), 2, value(), 2),
    ("timers in sequence add up", Let(Timer(1), Timer(2)), None, value(), 3),
    # when_any
    ("when_any: earliest wins", WhenAny((_t(2, 1), _t(1, 2))), None, _v(2), 1),
    ("when_any tie: first started wins", WhenAny((_t(1, 1), _t(1, 2))), None, _v(1), 1),
    ("when_any tie, other order", WhenAny((_t(1, 2), _t(1, 1))), None, _v(2), 1),
    ("when_any: inline error wins", WhenAny((_t(1, 1), JustError(E1))), None, error(E1), 0),
    ("when_any: stopped wins too", WhenAny((JustStopped(), _t(1, 1))), None, STOPPED, 0),
    (
        "when_any: inline value, rest not started",
        WhenAny((Just((5,)), _t(0, 1))),
        None,
        value(5),
        0,
    ),
    ("when_any: outer stop", WhenAny((_t(3, 1), _t(4, 2))), 2, STOPPED, 2),
    ("when_any: a winner before the stop", WhenAny((_t(1, 1), _t(4, 2))), 2, _v(1), 1),
    (
        "when_any inside when_all: sibling error stops it",
        WhenAll((WhenAny((_t(3, 1),)), Then(Timer(1), Fn.raise_(E1)))),
        None,
        error(E1),
        1,
    ),
    # stop_when
    ("stop_when: trigger first stops the work", StopWhen(_t(3, 1), Timer(1)), None, STOPPED, 1),
    ("stop_when: work first wins", StopWhen(_t(1, 1), Timer(3)), None, _v(1), 1),
    ("stop_when tie: work started first wins", StopWhen(_t(2, 1), Timer(2)), None, _v(1), 2),
    (
        "stop_when: the trigger's error is not delivered",
        StopWhen(_t(2, 1), Then(Timer(1), Fn.raise_(E1))),
        None,
        STOPPED,
        1,
    ),
    (
        "stop_when: inline work, trigger not started",
        StopWhen(Just((7,)), Timer(1)),
        None,
        value(7),
        0,
    ),
    ("stop_when: inline trigger", StopWhen(_t(1, 1), Just(())), None, STOPPED, 0),
    ("stop_when: outer stop", StopWhen(_t(3, 1), Timer(5)), 2, STOPPED, 2),
    # timeout / stop_after
    ("timeout: work in time", Timeout(_t(1, 1), 2), None, _v(1), 1),
    ("timeout fires", Timeout(_t(3, 1), 2), None, error(TIMEOUT), 2),
    ("timeout tie: the work was started first and wins", Timeout(_t(2, 1), 2), None, _v(1), 2),
    ("timeout 0 against inline work", Timeout(Just((1,)), 0), None, value(1), 0),
    ("timeout 0 against timer 0: tie, work wins", Timeout(Timer(0), 0), None, value(), 0),
    ("timeout: outer stop first", Timeout(_t(5, 1), 4), 2, STOPPED, 2),
    ("timeout: work error passes", Timeout(Then(Timer(1), Fn.raise_(E1)), 2), None, error(E1), 1),
    ("stop_after fires", Timeout(_t(3, 1), 2, stop=True), None, STOPPED, 2),
    ("stop_after tie: work wins", Timeout(_t(2, 1), 2, stop=True), None, _v(1), 2),
    (
        "nested timeouts: the inner one fires first",
        Timeout(Timeout(_t(5, 1), 2), 3),
        None,
        error(TIMEOUT),
        2,
    ),
    (
        "nested timeouts: the outer one fires first",
        Timeout(Timeout(_t(5, 1), 3, stop=True), 2),
        None,
        error(TIMEOUT),
        2,
    ),
    (
        "when_all: a stop_after that fires stops the sibling's timeout",
        WhenAll((Timeout(_t(5, 1), 3), Timeout(_t(5, 2), 2, stop=True))),
        None,
        STOPPED,
        2,
    ),
    (
        "when_all: the first timeout error wins",
        WhenAll((Timeout(_t(5, 1), 3), Timeout(_t(5, 2), 2))),
        None,
        error(TIMEOUT),
        2,
    ),
]


@pytest.mark.parametrize(
    ("root", "stop_at", "outcome", "time"),
    [pytest.param(r, s, o, t, id=name) for name, r, s, o, t in FIXED],
)
def test_fixed_timed_examples(root: Any, stop_at: Any, outcome: Any, time: int) -> None:
    case = TimedTree(root, stop_at)
    assert case.model() == (outcome, time)  # the model says what the docs say
    sxst.run_timed_tree(case).check()  # and the real tree agrees


def test_timed_nodes_are_not_modelled_as_sets() -> None:
    with pytest.raises(TypeError, match="timed node"):
        sxst.Tree(WhenAny((Timer(1),))).model()


def test_timed_trees_rejects_unknown_kinds() -> None:
    with pytest.raises(ValueError, match="unknown timed node kinds"):
        sxst.timed_trees(kinds={"thread_hop"})
