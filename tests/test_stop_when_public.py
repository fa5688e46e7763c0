"""The public ``sx.stop_when(sndr, trigger)`` (docs/time.md); the exposition-only
``stop-when`` of a stop token ([exec.stop.when]) the scopes use is tested in test_stop_when.py."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import trio
from _timed import Gate, VirtualClock

import structexec as sx
from structexec._algorithms._stop_when import stop_when as private_stop_when
from structexec.testing import RecordingReceiver


def test_arguments_are_checked_and_it_is_pipeable() -> None:
    with pytest.raises(TypeError, match="trigger must be a sender, got int"):
        sx.stop_when(sx.just(), 3)
    with pytest.raises(TypeError, match="trigger must be a sender"):
        sx.stop_when(3)
    with pytest.raises(TypeError, match="sndr must be a sender"):
        sx.stop_when(3, sx.just())
    s = sx.just(1) | sx.stop_when(sx.just())
    assert s.tag is sx.stop_when and len(s.children) == 2
    assert sx.stop_when is not private_stop_when  # the scopes keep the token form


def test_sndr_first_stops_the_trigger_and_gives_its_result() -> None:
    clock = VirtualClock()
    r = RecordingReceiver()
    r.run(clock.schedule_after(1) | sx.then(lambda: "work") | sx.stop_when(clock.schedule_after(5)))
    clock.advance(1)
    assert r.value == ("work",) and clock.stopped == 1 and clock.pending() == 0


def test_an_inline_sndr_does_not_start_the_trigger() -> None:
    gate = Gate()
    assert sx.sync_wait(sx.stop_when(sx.just(1), gate.sender())) == (1,)
    assert gate.started == 0


@pytest.mark.parametrize(
    "trigger", [sx.just(), sx.just_error(KeyError()), sx.just_stopped()], ids=str
)
def test_any_trigger_completion_stops_sndr_whose_result_is_the_result(trigger: Any) -> None:
    clock = VirtualClock()
    r = RecordingReceiver()
    r.run(sx.stop_when(clock.schedule_after(1) | sx.then(lambda: "work"), trigger))
    assert r.stopped and clock.stopped == 1


def test_the_result_is_sndrs_even_when_it_ignores_the_stop() -> None:
    gate = Gate()
    clock = VirtualClock()
    r = RecordingReceiver()
    r.run(sx.stop_when(gate.sender(), clock.schedule_after(2)))
    clock.advance(2)
    assert not r.done and gate.ops[0].stop_requested()
    gate.ops[0].set_value("done anyway")
    assert r.value == ("done anyway",)


def test_the_result_waits_for_the_trigger() -> None:
    gate = Gate()
    r = RecordingReceiver()
    r.run(sx.stop_when(sx.just(1) | sx.then(lambda x: x), gate.sender()))
    # sndr completed inline, so the trigger was not even started
    assert r.value == (1,) and gate.started == 0
    gate2 = Gate()
    clock = VirtualClock()
    r2 = RecordingReceiver()
    r2.run(sx.stop_when(clock.schedule_after(1), gate2.sender()))
    clock.advance(1)
    assert not r2.done and gate2.ops[0].stop_requested()
    gate2.ops[0].set_stopped()
    assert r2.value == ()


def test_a_stop_from_the_receiver_reaches_both() -> None:
    clock = VirtualClock()
    r = RecordingReceiver()
    r.run(sx.stop_when(clock.schedule_after(1), clock.schedule_after(2)))
    r.request_stop()
    assert r.stopped and clock.stopped == 2
    assert r.live_callbacks_at_completion == 0


def test_a_stop_from_another_thread() -> None:
    clock = VirtualClock()
    r = RecordingReceiver()
    r.run(sx.stop_when(clock.schedule_after(1), clock.schedule_after(2)))
    t = threading.Thread(target=r.request_stop)
    t.start()
    t.join()
    assert r.stopped and clock.pending() == 0


def test_a_stop_before_start_starts_neither() -> None:
    gate = Gate()
    r = RecordingReceiver()
    r.request_stop()
    r.run(sx.stop_when(gate.sender(), gate.sender()))
    assert r.stopped and gate.started == 0


def test_a_trigger_error_is_a_note_on_a_sndr_exception() -> None:
    gate = Gate()
    err = ValueError("work")
    r = RecordingReceiver()
    r.run(sx.stop_when(gate.sender(), sx.just_error(KeyError("trigger"))))
    gate.ops[0].set_error(err)
    assert r.error is err
    assert any("child #1 also failed" in n for n in err.__notes__)


def test_an_exception_from_starting_the_trigger() -> None:
    class Bad(sx.Sender[Any]):
        def connect(self, rcvr: Any) -> Any:
            class Op:
                def start(self) -> None:
                    raise ValueError("trigger start")

            return Op()

    clock = VirtualClock()
    r = RecordingReceiver()
    r.run(sx.stop_when(clock.schedule_after(1), Bad()))
    # the broken trigger "completed" with an error: sndr was stopped, its result delivered
    assert r.stopped and clock.stopped == 1


def test_signatures_are_sndrs_plus_stopped() -> None:
    s = sx.stop_when(sx.just(1), sx.just_error(KeyError()))
    stoppable = sx.prop(sx.get_stop_token, sx.inplace_stop_source().get_token())
    assert sx.get_completion_signatures(s, stoppable) == sx.completion_signatures(
        sx.set_value_t(int), sx.set_stopped_t()
    )
    # an unstoppable receiver adds no stopped of its own; the trigger's error is not one
    assert sx.get_completion_signatures(s, sx.env()) == sx.completion_signatures(
        sx.set_value_t(int)
    )


async def test_awaitable_from_trio_with_a_timed_scheduler_in_the_env() -> None:
    clock = VirtualClock()

    async def work() -> str:
        await trio.sleep(10)
        return "never"  # pragma: no cover

    sndr = sx.stop_when(
        work(),
        sx.read_env(sx.get_scheduler) | sx.let_value(lambda sch: sch.schedule_after(1)),
    )
    async with trio.open_nursery() as n:
        n.start_soon(_advance_soon, clock)
        with pytest.raises(sx.Stopped):
            await sx.write_env(sndr, clock.env())


async def _advance_soon(clock: VirtualClock) -> None:
    await trio.sleep(0.01)
    clock.advance(1)


def test_awaitable_from_a_task() -> None:
    clock = VirtualClock()

    @sx.task
    async def body() -> Any:
        return await sx.write_env(
            sx.just("work") | sx.stop_when(clock.schedule_after(1)), clock.env()
        )

    assert sx.sync_wait(body()) == ("work",)
