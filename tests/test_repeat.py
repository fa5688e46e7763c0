"""``repeat_effect_until`` and ``repeat_n``: extensions modelled on stdexec's
``exec::repeat_effect_until`` / ``exec::repeat_n`` (docs/time.md)."""

from __future__ import annotations

import sys
import threading
import time
import tracemalloc
from typing import Any

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

import structexec as sx
from structexec.testing import RecordingReceiver, ThreadScheduler

# --------------------------------------------------------------------------- helpers


def _depth() -> int:
    f: Any = sys._getframe(1)
    n = 0
    while f is not None:
        n += 1
        f = f.f_back
    return n


class Script(sx.Sender[Any]):
    """A sender whose n-th run (from 1) completes as ``plan(n)`` says: ``"v"`` (value ``n``),
    ``"e"`` (error), ``"s"`` (stopped), ``"raise"`` (``start`` raises ``exc``). Counts the
    live operations, and the live ones at each connect."""

    def __init__(self, plan: Any = None, exc: BaseException | None = None) -> None:
        self.plan = plan or (lambda n: "v")
        self.exc = exc
        self.runs = 0
        self.connects = 0
        self.live = 0
        self.live_at_connect: list[int] = []
        self.log: list[Any] = []
        self.errors: list[Exception] = []

    def connect(self, rcvr: Any) -> Any:
        self.connects += 1
        self.live_at_connect.append(self.live)
        return _ScriptOp(self, rcvr)


class _ScriptOp:
    def __init__(self, s: Script, rcvr: Any) -> None:
        self.s = s
        self.rcvr = rcvr
        s.live += 1

    def __del__(self) -> None:
        self.s.live -= 1

    def start(self) -> None:
        s = self.s
        s.runs += 1
        n = s.runs
        how = s.plan(n)
        s.log.append(("run", n))
        if how == "v":
            self.rcvr.set_value(n)
        elif how == "e":
            e = ValueError(n)
            s.errors.append(e)
            self.rcvr.set_error(e)
        elif how == "s":
            self.rcvr.set_stopped()
        else:
            assert s.exc is not None
            raise s.exc


# --------------------------------------------------------------------------- repeat_n


@pytest.mark.parametrize("n", [0, 1, 2, 7])
def test_repeat_n_runs_n_times_and_discards_values(n: int) -> None:
    s = Script()
    assert sx.sync_wait(sx.repeat_n(s, n)) == ()
    assert s.runs == n
    assert s.connects == n  # n == 0: never connected
    assert sx.sync_wait(s | sx.repeat_n(n)) == ()
    assert s.runs == 2 * n


def test_repeat_n_zero_completes_at_start_not_at_connect() -> None:
    rec = RecordingReceiver()
    rec.connect(sx.repeat_n(sx.just(1), 0))
    assert not rec.done
    rec.start()
    assert rec.value == ()


def test_repeat_n_an_error_or_stop_ends_the_loop() -> None:
    s = Script(lambda n: "e" if n == 3 else "v")
    with pytest.raises(ValueError) as info:
        sx.sync_wait(sx.repeat_n(s, 10))
    assert info.value is s.errors[0]
    assert s.runs == 3
    s = Script(lambda n: "s" if n == 2 else "v")
    rec = RecordingReceiver()
    rec.run(sx.repeat_n(s, 10))
    assert rec.stopped and s.runs == 2


def test_each_iteration_is_freed_before_the_next_is_connected() -> None:
    s = Script()
    sx.sync_wait(sx.repeat_n(s, 50))
    assert s.live_at_connect == [0] * 50
    assert s.live == 0
    s = Script()
    n = [0]

    def pred() -> bool:
        n[0] += 1
        return n[0] == 20

    sx.sync_wait(sx.repeat_effect_until(s, pred))
    assert s.live_at_connect == [0] * 20


# --------------------------------------------------------------------------- repeat_effect_until


def test_repeat_effect_until_calls_the_predicate_after_each_value() -> None:
    s = Script()

    def pred() -> bool:
        s.log.append("pred")
        return s.runs == 3

    assert sx.sync_wait(s | sx.repeat_effect_until(pred)) == ()
    assert s.log == [("run", 1), "pred", ("run", 2), "pred", ("run", 3), "pred"]


def test_repeat_effect_until_error_and_stopped_end_the_loop_without_the_predicate() -> None:
    calls: list[int] = []
    s = Script(lambda n: "e" if n == 2 else "v")
    rec = RecordingReceiver()
    rec.run(sx.repeat_effect_until(s, lambda: bool(calls.append(1))))
    assert rec.error is s.errors[0]
    assert len(calls) == 1
    s = Script(lambda n: "s")
    rec = RecordingReceiver()
    rec.run(sx.repeat_effect_until(s, lambda: bool(calls.append(1))))
    assert rec.stopped and len(calls) == 1


def test_a_predicate_that_raises_an_exception_completes_with_it() -> None:
    e = KeyError("p")

    def pred() -> bool:
        raise e

    s = Script()
    rec = RecordingReceiver()
    rec.run(sx.repeat_effect_until(s, pred))
    assert rec.error is e
    assert s.runs == 1


def test_a_predicate_that_raises_keyboard_interrupt_propagates() -> None:
    def pred() -> bool:
        raise KeyboardInterrupt

    s = Script()
    with pytest.raises(KeyboardInterrupt):
        sx.sync_wait(sx.repeat_effect_until(s, pred))
    assert s.runs == 1


@pytest.mark.parametrize("exc", [RuntimeError("start"), KeyboardInterrupt()])
@pytest.mark.parametrize("at", [1, 3])
def test_a_start_that_raises_propagates_and_ends_the_loop(exc: BaseException, at: int) -> None:
    """A raising ``start()`` is a contract violation: it propagates to the caller of the
    iteration's start (here out of sync_wait), as for every adaptor; nothing runs after it."""
    s = Script(lambda n: "raise" if n == at else "v", exc)
    with pytest.raises(type(exc)):
        sx.sync_wait(sx.repeat_n(s, 10))
    assert s.runs == at
    s = Script(lambda n: "raise" if n == at else "v", exc)
    with pytest.raises(type(exc)):
        sx.sync_wait(sx.repeat_effect_until(s, lambda: False))
    assert s.runs == at


def test_a_stop_request_is_checked_between_iterations() -> None:
    rec = RecordingReceiver()
    runs = [0]

    def body() -> None:
        runs[0] += 1
        if runs[0] == 3:
            rec.request_stop()  # just() ignores it: the loop must see it

    rec.run(sx.just() | sx.then(body) | sx.repeat_effect_until(lambda: False))
    assert rec.stopped and runs[0] == 3
    runs[0] = 0
    rec = RecordingReceiver()
    rec.run(sx.just() | sx.then(body) | sx.repeat_n(100))
    assert rec.stopped and runs[0] == 3


def test_each_iteration_sees_the_stop_token() -> None:
    rec = RecordingReceiver()
    tokens: list[Any] = []
    rec.run(sx.read_env(sx.get_stop_token) | sx.then(tokens.append) | sx.repeat_n(3))
    assert rec.value == ()
    assert tokens == [rec.stop_source.get_token()] * 3


def test_stop_from_another_thread_ends_an_endless_loop() -> None:
    with ThreadScheduler() as th:
        rec = RecordingReceiver()
        runs = [0]

        def body() -> None:
            runs[0] += 1

        rec.run(sx.schedule(th) | sx.then(body) | sx.repeat_effect_until(lambda: False))
        deadline = time.monotonic() + 5
        while runs[0] < 100 and time.monotonic() < deadline:
            time.sleep(0.001)
        stopper = threading.Thread(target=rec.request_stop)
        stopper.start()
        stopper.join()
        rec.wait()
        assert rec.stopped
        assert runs[0] >= 100
        assert rec.live_callbacks_at_completion == 0


def test_iterations_that_complete_on_another_thread() -> None:
    with ThreadScheduler() as th:
        runs: list[int] = []
        s = sx.starts_on(th, sx.just() | sx.then(lambda: runs.append(threading.get_ident())))
        assert sx.sync_wait(sx.repeat_n(s, 500)) == ()
        assert runs == [th.ident] * 500
        n = [0]

        def pred() -> bool:
            n[0] += 1
            return n[0] == 300

        assert sx.sync_wait(sx.repeat_effect_until(sx.schedule(th), pred)) == ()
        assert n[0] == 300


# --------------------------------------------------------------------------- deep loops


def test_100000_inline_iterations_use_constant_stack() -> None:
    depths: list[int] = []

    def body() -> None:
        if len(depths) % 1000 == 0:
            depths.append(_depth())
        else:
            depths.append(depths[-1])

    assert sx.sync_wait(sx.just() | sx.then(body) | sx.repeat_n(100_000)) == ()
    assert len(depths) == 100_000
    assert max(depths) == min(depths)
    n = [0]
    depths.clear()

    def pred() -> bool:
        n[0] += 1
        if n[0] % 1000 == 1:
            depths.append(_depth())
        return n[0] == 100_000

    assert sx.sync_wait(sx.just() | sx.repeat_effect_until(pred)) == ()
    assert max(depths) == min(depths)
    # the child itself may be a chain that uses the trampoline
    assert sx.sync_wait(sx.repeat_n(sx.just() | sx.let_value(sx.just), 100_000)) == ()


@pytest.mark.parametrize("alg", ["repeat_n", "repeat_effect_until"])
def test_100000_iterations_do_not_hold_memory(alg: str) -> None:
    marks: dict[int, int] = {}
    n = [0]

    def body(*_: Any) -> None:
        n[0] += 1
        if n[0] in (10_000, 100_000):
            marks[n[0]] = tracemalloc.get_traced_memory()[0]

    child = sx.just(1, "x") | sx.then(body)
    s = (
        sx.repeat_n(child, 100_000)
        if alg == "repeat_n"
        else sx.repeat_effect_until(child, lambda: n[0] == 100_000)
    )
    tracemalloc.start()
    try:
        assert sx.sync_wait(s) == ()
    finally:
        tracemalloc.stop()
    # 90,000 more iterations: keeping even one small object per iteration would be megabytes;
    # what moves otherwise is interpreter noise (free lists, caches: ~3 KB on 3.11, ~15 KB on
    # 3.10), so the bound is 100 KB.
    assert marks[100_000] - marks[10_000] < 100_000, marks


def test_nested_repeats() -> None:
    runs = [0]
    body = sx.just() | sx.then(lambda: runs.__setitem__(0, runs[0] + 1))
    assert sx.sync_wait(body | sx.repeat_n(300) | sx.repeat_n(300)) == ()
    assert runs[0] == 90_000


# --------------------------------------------------------------------------- property


@settings(deadline=None, max_examples=60)
@given(
    n=st.integers(0, 12),
    plan=st.lists(st.sampled_from("vvves"), min_size=12, max_size=12),
    hop=st.booleans(),
)
def test_repeat_n_equals_an_unrolled_let_value_chain(n: int, plan: list[str], hop: bool) -> None:
    """``repeat_n(s, n)`` behaves as ``s | let_value(lambda *_: s) | ...`` (n runs) with the
    values discarded: the same runs, in the same order, and the same completion."""
    results = []
    with ThreadScheduler() as th:
        for unrolled in (False, True):
            s = Script(lambda k: plan[k - 1])
            child: Any = sx.starts_on(th, s) if hop else s
            if unrolled:
                chain: Any = sx.just()
                for _ in range(n):
                    chain = chain | sx.let_value(lambda *_, c=child: c)
                sndr = chain | sx.then(lambda *_: None)
            else:
                sndr = sx.repeat_n(child, n)
            rec = RecordingReceiver()
            rec.run(sndr)
            rec.wait()
            out = rec.outcome
            if rec.kind == "error":
                out = ("error", s.errors.index(rec.error))
            results.append((s.log, out))
    assert results[0] == results[1]


# --------------------------------------------------------------------------- trio and task


async def test_awaited_from_a_trio_task() -> None:
    runs: list[int] = []
    body = sx.just() | sx.then(lambda: runs.append(1))
    assert await (body | sx.repeat_n(5)) is None
    assert await (body | sx.repeat_effect_until(lambda: len(runs) == 8)) is None
    assert len(runs) == 8
    with pytest.raises(ValueError):
        await sx.repeat_n(sx.just_error(ValueError()), 3)

    # a trio-scheduled child: each iteration runs on the trio loop
    async def tick() -> None:
        runs.append(2)
        await trio.lowlevel.checkpoint()

    assert await sx.repeat_n(sx.let_value(sx.just(), tick), 4) is None
    assert runs.count(2) == 4


def test_awaited_from_a_task() -> None:
    runs: list[int] = []

    @sx.task
    async def t() -> int:
        await (sx.just() | sx.then(lambda: runs.append(1)) | sx.repeat_n(6))
        await sx.repeat_effect_until(sx.just(), lambda: len(runs) >= 6)
        return len(runs)

    assert sx.sync_wait(t()) == (6,)


# --------------------------------------------------------------------------- build-time checks


@pytest.mark.parametrize(
    ("build", "exc", "match"),
    [
        (lambda: sx.repeat_n(42, 3), TypeError, "sndr must be a sender"),
        (lambda: sx.repeat_n(sx.just(), -1), ValueError, "n must be >= 0"),
        (lambda: sx.repeat_n(sx.just(), 2.0), TypeError, "n must be an int"),
        (lambda: sx.repeat_n(sx.just(), True), TypeError, "n must be an int"),
        (lambda: sx.repeat_n(-3), ValueError, "n must be >= 0"),
        (lambda: sx.repeat_n("3"), TypeError, "n must be an int"),
        (lambda: sx.repeat_n(sx.just()), TypeError, "n is missing"),
        (lambda: sx.repeat_effect_until(42, lambda: True), TypeError, "sndr must be a sender"),
        (lambda: sx.repeat_effect_until(sx.just(), 3), TypeError, "predicate must be a callable"),
        (lambda: sx.repeat_effect_until(sx.just()), TypeError, "predicate must be a callable"),
        (lambda: sx.repeat_effect_until(5), TypeError, "predicate must be a callable"),
    ],
)
def test_bad_arguments_raise_at_build(build: Any, exc: type[Exception], match: str) -> None:
    with pytest.raises(exc, match=match):
        build()


def test_completion_signatures() -> None:
    cs = sx.get_completion_signatures(sx.just(1) | sx.repeat_n(3))
    assert cs == sx.completion_signatures(sx.set_value_t(), sx.set_stopped_t())
    cs = sx.get_completion_signatures(sx.just_error(KeyError()) | sx.repeat_n(0))
    assert cs == sx.completion_signatures(sx.set_value_t())
    cs = sx.get_completion_signatures(sx.just_error(KeyError()) | sx.repeat_effect_until(bool))
    assert cs == sx.completion_signatures(
        sx.set_value_t(), sx.set_error_t(KeyError), sx.set_error_t(Exception), sx.set_stopped_t()
    )
    assert sx.get_completion_signatures(Script() | sx.repeat_n(2)) is None


def test_structure_and_repr() -> None:
    j = sx.just(1)
    s = j | sx.repeat_n(3)
    assert s.tag is sx.repeat_n and s.children == (j,) and s.data == 3
    assert repr(s) == f"repeat_n({j!r}, 3)"
    u = sx.repeat_effect_until(j, bool)
    assert u.tag is sx.repeat_effect_until and u.data is bool
    c = sx.repeat_n(2) | sx.repeat_n(3)
    runs: list[int] = []
    assert sx.sync_wait(sx.just() | sx.then(lambda: runs.append(1)) | c) == ()
    assert len(runs) == 6


def test_started_twice_and_closed() -> None:
    rec = RecordingReceiver()
    op = rec.run(sx.repeat_n(sx.just(), 2))
    assert rec.value == ()
    with pytest.raises(RuntimeError, match="started twice"):
        op.start()
    s = Script()
    op = sx.connect(sx.repeat_n(s, 2), RecordingReceiver())
    op.close()
    with pytest.raises(RuntimeError):
        op.start()
    assert s.runs == 0


async def test_cancelling_the_awaiting_trio_task_stops_an_endless_loop() -> None:
    runs = [0]

    def body() -> None:
        runs[0] += 1

    loop = sx.schedule(sx.trio_scheduler()) | sx.then(body) | sx.repeat_effect_until(lambda: False)
    with trio.move_on_after(0.05) as cs:
        await loop
    assert cs.cancelled_caught
    assert runs[0] > 0
