"""``sx.timeout`` and ``sx.stop_after`` against a virtual-clock timed scheduler (docs/time.md)."""

from __future__ import annotations

import math
import threading
from typing import Any

import pytest
import trio
from _timed import Gate, VirtualClock

import structexec as sx
from structexec.testing import RecordingReceiver


def _rec(clock: VirtualClock) -> RecordingReceiver:
    return RecordingReceiver(extra_env=clock.env())


@pytest.mark.parametrize("alg", [sx.timeout, sx.stop_after], ids=["timeout", "stop_after"])
def test_seconds_are_checked_at_build(alg: Any) -> None:
    for bad in (-1, -0.5, math.nan):
        with pytest.raises(ValueError, match="seconds must be >= 0"):
            alg(sx.just(), bad)
        with pytest.raises(ValueError, match="seconds must be >= 0"):
            alg(bad)
    with pytest.raises(TypeError, match="seconds must be a number"):
        alg(sx.just(), "5")
    with pytest.raises(TypeError, match="sndr must be a sender"):
        alg(3, 5)
    s = sx.just(1) | alg(5)
    assert s.tag is alg and repr(s) == f"{alg!r}(just(1), 5)"


@pytest.mark.parametrize("alg", [sx.timeout, sx.stop_after], ids=["timeout", "stop_after"])
def test_no_timed_scheduler_is_a_type_error_at_connect(alg: Any) -> None:
    s = alg(sx.just(1), 5)
    with pytest.raises(TypeError, match=r"has no scheduler.*sx\.write_env\(sndr, sx\.prop"):
        sx.connect(s, RecordingReceiver())
    with pytest.raises(TypeError, match="is not timed"):
        sx.connect(s, RecordingReceiver(extra_env=sx.prop(sx.get_scheduler, sx.inline_scheduler())))


def test_work_first_passes_through_and_stops_the_timer() -> None:
    clock = VirtualClock()
    r = _rec(clock)
    r.run(clock.schedule_after(1) | sx.then(lambda: sx.values("a", 2)) | sx.timeout(5))
    clock.advance(1)
    assert r.value == ("a", 2) and clock.stopped == 1 and clock.pending() == 0


def test_timeout_fires_an_error_and_stops_the_work() -> None:
    clock = VirtualClock()
    r = _rec(clock)
    r.run(clock.schedule_after(10) | sx.then(lambda: "late") | sx.timeout(2.5))
    clock.advance(2)
    assert not r.done
    clock.advance(0.5)
    assert isinstance(r.error, TimeoutError) and "2.5 s" in str(r.error)
    assert clock.stopped == 1 and clock.pending() == 0
    assert r.live_callbacks_at_completion == 0


def test_stop_after_completes_stopped() -> None:
    clock = VirtualClock()
    r = _rec(clock)
    r.run(clock.schedule_after(10) | sx.stop_after(1))
    clock.advance(1)
    assert r.stopped and clock.pending() == 0
    r2 = _rec(clock)
    r2.run(
        clock.schedule_after(10)
        | sx.then(lambda: "x")
        | sx.stop_after(1)
        | sx.stopped_as_optional()
    )
    clock.advance(1)
    assert r2.value == (None,)


def test_zero_seconds_times_out_at_the_next_tick() -> None:
    clock = VirtualClock()
    r = _rec(clock)
    r.run(clock.schedule_after(1) | sx.timeout(0))
    clock.advance(0)
    assert isinstance(r.error, TimeoutError)


@pytest.mark.parametrize("alg", [sx.timeout, sx.stop_after], ids=["timeout", "stop_after"])
def test_a_tie_goes_to_whichever_completes_first(alg: Any) -> None:
    """The work and the timer due at the same virtual instant: the work's timer was started
    before the timeout's, and the clock fires equal deadlines in start order, so the work
    wins; work started on the clock after the timer loses."""
    clock = VirtualClock()
    r = _rec(clock)
    r.run(clock.schedule_at(3) | sx.then(lambda: "work") | alg(3))
    clock.advance(3)
    assert r.value == ("work",)
    # the work's own timer is started after the timeout's (a hop first): the timer wins
    clock2 = VirtualClock()
    r2 = _rec(clock2)
    late = clock2.schedule() | sx.let_value(lambda: clock2.schedule_at(3))
    r2.run(late | alg(3))
    clock2.advance(3)
    assert r2.kind == ("error" if alg is sx.timeout else "stopped")


def test_work_that_ignores_the_stop_delays_the_timeout_until_it_completes() -> None:
    clock = VirtualClock()
    gate = Gate()
    r = _rec(clock)
    r.run(gate.sender() | sx.timeout(1))
    clock.advance(1)
    assert not r.done and gate.ops[0].stop_requested()
    gate.ops[0].set_value("too late")  # discarded: the timer completed first
    assert isinstance(r.error, TimeoutError)


def test_an_error_of_the_work_after_the_timeout_is_a_note() -> None:
    clock = VirtualClock()
    gate = Gate()
    r = _rec(clock)
    r.run(gate.sender() | sx.timeout(1))
    clock.advance(1)
    gate.ops[0].set_error(OSError("cleanup failed"))
    assert isinstance(r.error, TimeoutError)
    assert any("cleanup failed" in n for n in r.error.__notes__)


def test_the_works_error_first_is_the_result() -> None:
    clock = VirtualClock()
    r = _rec(clock)
    r.run(sx.just_error(KeyError("k")) | sx.timeout(1))
    assert isinstance(r.error, KeyError)
    assert clock.started == 0  # the timer was never started


def test_a_stop_from_the_receiver_completes_stopped() -> None:
    clock = VirtualClock()
    r = _rec(clock)
    r.run(clock.schedule_after(10) | sx.timeout(5))
    r.request_stop()
    assert r.stopped and clock.stopped == 2 and clock.pending() == 0


def test_a_stop_from_another_thread() -> None:
    clock = VirtualClock()
    gate = Gate()
    r = _rec(clock)
    r.run(gate.sender() | sx.timeout(5))
    t = threading.Thread(target=r.request_stop)
    t.start()
    t.join()
    assert not r.done and clock.pending() == 0
    gate.ops[0].set_value(1)  # ignores the stop, but the receiver's stop decided
    assert r.stopped


def test_signatures() -> None:
    sigs = sx.get_completion_signatures(sx.just(1) | sx.timeout(1), sx.env())
    assert sigs == sx.completion_signatures(
        sx.set_value_t(int), sx.set_error_t(TimeoutError), sx.set_stopped_t()
    )
    sigs = sx.get_completion_signatures(sx.just(1) | sx.stop_after(1), sx.env())
    assert sigs == sx.completion_signatures(sx.set_value_t(int), sx.set_stopped_t())


def test_base_exception_from_starting_the_work_propagates() -> None:
    class Bad(sx.Sender[Any]):
        def connect(self, rcvr: Any) -> Any:
            class Op:
                def start(self) -> None:
                    raise KeyboardInterrupt

            return Op()

    clock = VirtualClock()
    r = _rec(clock)
    with pytest.raises(KeyboardInterrupt):
        r.run(Bad() | sx.timeout(1))
    assert clock.started == 0 and not r.done


def test_exception_from_starting_the_work_is_its_error() -> None:
    class Bad(sx.Sender[Any]):
        def connect(self, rcvr: Any) -> Any:
            class Op:
                def start(self) -> None:
                    raise ValueError("start")

            return Op()

    clock = VirtualClock()
    r = _rec(clock)
    r.run(Bad() | sx.timeout(1))
    assert isinstance(r.error, ValueError) and clock.started == 0


async def test_awaitable_from_trio_with_a_timed_scheduler_in_the_env() -> None:
    clock = VirtualClock()

    async def work() -> str:
        await trio.sleep(10)
        return "never"  # pragma: no cover

    async with trio.open_nursery() as n:
        n.start_soon(_advance_soon, clock)
        with pytest.raises(TimeoutError):
            await sx.write_env(sx.timeout(work(), 1), clock.env())


async def _advance_soon(clock: VirtualClock) -> None:
    await trio.sleep(0.01)
    clock.advance(1)


async def test_awaitable_from_trio_stop_after() -> None:
    clock = VirtualClock()

    async def work() -> str:
        await trio.sleep(10)
        return "never"  # pragma: no cover

    async with trio.open_nursery() as n:
        n.start_soon(_advance_soon, clock)
        with pytest.raises(sx.Stopped):
            await sx.write_env(sx.stop_after(work(), 1), clock.env())
    async with trio.open_nursery() as n:
        n.start_soon(_advance_soon, clock)
        got = await sx.write_env(sx.stop_after(work(), 1) | sx.stopped_as_optional(), clock.env())
        assert got is None


def test_awaitable_from_a_task() -> None:
    clock = VirtualClock()

    @sx.task
    async def body() -> Any:
        try:
            await sx.write_env(clock.schedule_after(5) | sx.timeout(1), clock.env())
        except TimeoutError:
            return "timed out"
        return "in time"  # pragma: no cover

    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(sx.sync_wait(body())))
    t.start()
    for _ in range(5000):
        if clock.pending() == 2:
            break
        threading.Event().wait(0.001)
    clock.advance(1)
    t.join(10)
    assert out == [("timed out",)]
