"""``when_any``: an extension modelled on stdexec's exec/when_any.hpp (docs/time.md)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import trio
from _helpers import BadStart
from _subproc import run_child
from _timed import Gate, VirtualClock
from hypothesis import given, settings
from hypothesis import strategies as st

import structexec as sx
from structexec.testing import RecordingReceiver

# --------------------------------------------------------------------------- building


def test_no_senders_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="at least one sender"):
        sx.when_any()


def test_a_non_sender_is_a_type_error_naming_its_position() -> None:
    with pytest.raises(TypeError, match=r"argument #1 must be a sender, got int"):
        sx.when_any(sx.just(), 3)


def test_completion_signatures_are_the_union_plus_stopped() -> None:
    s = sx.when_any(sx.just(1), sx.just("a", "b"), sx.just_error(ValueError()))
    sigs = sx.get_completion_signatures(s, sx.env())
    assert sigs == sx.completion_signatures(
        sx.set_value_t(int),
        sx.set_value_t(str, str),
        sx.set_error_t(ValueError),
        sx.set_stopped_t(),
    )
    assert s.tag is sx.when_any and len(s.children) == 3


# --------------------------------------------------------------------------- winners


def test_the_first_inline_completion_wins_and_later_children_are_not_started() -> None:
    gate = Gate()
    r = RecordingReceiver()
    r.run(sx.when_any(sx.just(1, 2), gate.sender()))
    assert r.value == (1, 2)
    assert gate.started == 0


@pytest.mark.parametrize(
    ("first", "outcome"),
    [
        (sx.just(7), ("value", (7,))),
        (sx.just_error(KeyError("k")), ("error",)),
        (sx.just_stopped(), ("stopped",)),
    ],
)
def test_any_kind_of_completion_wins(first: Any, outcome: tuple[Any, ...]) -> None:
    clock = VirtualClock()
    r = RecordingReceiver()
    r.run(sx.when_any(clock.schedule_after(1) | sx.then(lambda: 0), first))
    # the timer (child 0) was started, got the stop request and completed stopped at once
    assert clock.stopped == 1 and clock.pending() == 0
    assert r.outcome[0] == outcome[0]
    if outcome[0] == "value":
        assert r.value == outcome[1]


def test_values_pass_through_as_the_winner_sent_them() -> None:
    clock = VirtualClock()
    r = RecordingReceiver()
    r.run(
        sx.when_any(
            clock.schedule_after(2) | sx.then(lambda: "slow"),
            clock.schedule_after(1) | sx.then(lambda: sx.values("fast", 1)),
            clock.schedule_after(1) | sx.then(lambda: None),
        )
    )
    assert not r.done
    clock.advance(1)
    assert r.value == ("fast", 1)
    assert clock.stopped == 2 and clock.pending() == 0


def test_a_tie_on_a_manual_clock_goes_to_the_first_to_complete() -> None:
    """Two children due at the same virtual instant: the clock fires them in the order they
    were started (argument order here), and the first completion wins."""
    clock = VirtualClock()
    r = RecordingReceiver()
    r.run(sx.when_any(clock.schedule_at(5) | sx.then(lambda: "a"), clock.schedule_at(5)))
    clock.advance(5)
    assert r.value == ("a",)
    # reversed argument order, reversed winner
    clock2 = VirtualClock()
    r2 = RecordingReceiver()
    r2.run(sx.when_any(clock2.schedule_at(5), clock2.schedule_at(5) | sx.then(lambda: "a")))
    clock2.advance(5)
    assert r2.value == ()


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_which_child_wins_on_a_manual_scheduler_is_the_order_the_test_chooses(
    order: tuple[int, int],
) -> None:
    """Two children that both become ready "at once" on structexec.testing.ManualScheduler
    (each a hop onto it): the test runs the queued completions in the order it chooses, and
    the first one run wins; the loser gets a stop request and completes stopped."""
    from structexec.testing import ManualScheduler

    m = ManualScheduler()
    kids = [sx.schedule(m) | sx.then(lambda i=i: f"child {i}") for i in (0, 1)]
    r = RecordingReceiver()
    r.run(sx.when_any(*kids))
    assert m.pending == 2 and r.completions == 0
    first, _ = order
    m.run_one(first)  # this child completes first ...
    assert r.completions == 0  # ... but the race waits for the other child
    m.drain()  # the loser, already asked to stop, completes stopped
    assert r.value == (f"child {first}",)


def test_equal_deadlines_on_a_manual_scheduler_fire_in_start_order() -> None:
    from structexec.testing import ManualScheduler

    m = ManualScheduler()
    r = RecordingReceiver()
    r.run(
        sx.when_any(
            sx.schedule_after(m, 1.0) | sx.then(lambda: "started first"),
            sx.schedule_after(m, 1.0) | sx.then(lambda: "started second"),
        )
    )
    m.advance(1.0)
    m.drain()
    assert r.value == ("started first",)


def test_completes_only_after_every_child_completed() -> None:
    gate = Gate()
    clock = VirtualClock()
    r = RecordingReceiver()
    r.run(sx.when_any(gate.sender(), clock.schedule_after(1) | sx.then(lambda: "timer")))
    clock.advance(1)
    assert not r.done  # the gate ignores the stop request
    (op,) = gate.ops
    assert op.stop_requested()
    op.set_value("late")
    assert r.value == ("timer",)


def test_a_loser_error_is_a_note_on_a_winning_exception() -> None:
    gate = Gate()
    err = ValueError("winner")
    r = RecordingReceiver()
    r.run(sx.when_any(gate.sender(), sx.just_error(err)))
    assert gate.started == 1  # started before the inline winner
    gate.ops[0].set_error(KeyError("loser"))
    assert r.error is err
    assert any("child #0 also failed" in n for n in err.__notes__)


def test_a_completion_racing_on_two_threads_picks_exactly_one_winner() -> None:
    for _ in range(200):
        gates = [Gate(), Gate()]
        r = RecordingReceiver()
        r.run(sx.when_any(gates[0].sender(), gates[1].sender()))
        barrier = threading.Barrier(2)

        def complete(i: int, gates: list[Gate], barrier: threading.Barrier) -> None:
            barrier.wait()
            gates[i].ops[0].set_value(i)

        ts = [threading.Thread(target=complete, args=(i, gates, barrier)) for i in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert r.completions == 1
        assert r.value in ((0,), (1,))


# --------------------------------------------------------------------------- cancellation


def test_a_stop_from_the_receiver_stops_all_children_and_completes_stopped() -> None:
    clock = VirtualClock()
    r = RecordingReceiver()
    r.run(sx.when_any(clock.schedule_after(1), clock.schedule_after(2)))
    r.request_stop()
    assert r.stopped and clock.stopped == 2 and clock.pending() == 0
    assert r.live_callbacks_at_completion == 0


def test_a_receiver_stop_after_a_winner_keeps_the_winner() -> None:
    gate = Gate()
    r = RecordingReceiver()
    r.run(sx.when_any(gate.sender(), sx.just(1) | sx.then(lambda x: x)))
    r.request_stop()
    gate.ops[0].set_stopped()
    assert r.value == (1,)


def test_a_receiver_stop_wins_over_children_that_ignore_it() -> None:
    gate = Gate()
    r = RecordingReceiver()
    r.run(sx.when_any(gate.sender()))
    r.request_stop()
    gate.ops[0].set_value(1)
    assert r.stopped


def test_a_stop_before_start_starts_nothing() -> None:
    gate = Gate()
    r = RecordingReceiver()
    r.request_stop()
    r.run(sx.when_any(gate.sender()))
    assert r.stopped and gate.started == 0


def test_a_stop_from_another_thread() -> None:
    gate = Gate()
    clock = VirtualClock()
    r = RecordingReceiver()
    r.run(sx.when_any(clock.schedule_after(10), gate.sender()))
    t = threading.Thread(target=r.request_stop)
    t.start()
    t.join()
    assert clock.stopped == 1 and not r.done
    gate.ops[0].set_stopped()
    assert r.stopped


# --------------------------------------------------------------------------- failures


def test_an_exception_from_a_childs_start_is_its_error_completion() -> None:
    clock = VirtualClock()
    r = RecordingReceiver()
    r.run(sx.when_any(clock.schedule_after(1), BadStart(ValueError("boom"))))
    assert isinstance(r.error, ValueError) and clock.stopped == 1
    with pytest.raises(ValueError, match="boom"):
        sx.sync_wait(sx.when_any(BadStart(ValueError("boom"))))


def test_a_base_exception_from_a_childs_start_propagates_and_stops_the_others() -> None:
    clock = VirtualClock()
    gate = Gate()
    r = RecordingReceiver()
    with pytest.raises(KeyboardInterrupt):
        r.run(sx.when_any(clock.schedule_after(1), BadStart(KeyboardInterrupt()), gate.sender()))
    assert clock.stopped == 1 and gate.started == 0 and not r.done


def test_a_base_exception_from_a_childs_start_reaches_sync_wait_and_trio_run() -> None:
    code = (
        "import structexec as sx, trio\n"
        "class Bad(sx.Sender):\n"
        "    def connect(self, r):\n"
        "        class Op:\n"
        "            def start(self): raise KeyboardInterrupt\n"
        "        return Op()\n"
        "def outcome(f):\n"
        "    try:\n"
        "        f()\n"
        "    except KeyboardInterrupt:\n"
        "        return 'raised'\n"
        "    return 'returned'\n"
        "async def awaited():\n"
        "    await sx.when_any(sx.schedule(sx.trio_scheduler()), Bad())\n"
        "print(outcome(lambda: sx.sync_wait(sx.when_any(Bad(), sx.just()))), flush=True)\n"
        "print(outcome(lambda: trio.run(awaited)), flush=True)\n"
    )
    r = run_child(code, timeout=60)
    assert not r.timed_out, str(r)
    assert r.stdout.split() == ["raised", "raised"], str(r)


class _RaisingReceiver:
    def __init__(self) -> None:
        self.calls = 0

    def get_env(self) -> Any:
        return sx.env()

    def set_value(self, *vals: Any) -> None:
        self.calls += 1
        raise ValueError("receiver")

    def set_error(self, err: Any) -> None:  # pragma: no cover - must not be reached
        self.calls += 1

    set_stopped = set_error


def test_a_raise_during_the_completion_propagates_and_is_not_a_second_completion() -> None:
    """[exec.recv.concepts]: a receiver whose completion raises: the exception propagates to
    whoever completed the last child (here the test, completing the gate)."""
    clock = VirtualClock()
    gate = Gate()
    rc = _RaisingReceiver()
    sx.connect(sx.when_any(clock.schedule_after(1), gate.sender()), rc).start()
    clock.advance(1)
    assert rc.calls == 0
    with pytest.raises(ValueError, match="receiver"):
        gate.ops[0].set_stopped()
    assert rc.calls == 1 and clock.pending() == 0


def test_a_child_completing_twice_raises() -> None:
    gate = Gate()
    r = RecordingReceiver()
    r.run(sx.when_any(gate.sender(), gate.sender()))
    gate.ops[0].set_value(1)
    with pytest.raises(RuntimeError, match="already completed"):
        gate.ops[0].rcvr.set_value(2)
    gate.ops[1].set_stopped()
    assert r.value == (1,)


def test_a_connected_operation_can_be_closed() -> None:
    gate = Gate()
    op = sx.connect(sx.when_any(gate.sender()), RecordingReceiver())
    op.close()
    with pytest.raises(RuntimeError):
        op.start()


# --------------------------------------------------------------------------- trio and task


async def test_awaitable_from_trio_with_a_timed_scheduler_in_the_env() -> None:
    clock = VirtualClock()
    sndr = sx.when_any(
        sx.read_env(sx.get_scheduler)
        | sx.let_value(lambda sch: sch.schedule_after(1) | sx.then(lambda: "one")),
        sx.read_env(sx.get_scheduler)
        | sx.let_value(lambda sch: sch.schedule_after(2) | sx.then(lambda: "two")),
    )
    async with trio.open_nursery() as n:
        n.start_soon(_advance_soon, clock, 1)
        assert await sx.write_env(sndr, clock.env()) == "one"
    assert clock.pending() == 0


async def _advance_soon(clock: VirtualClock, dt: float) -> None:
    await trio.sleep(0.01)
    clock.advance(dt)


async def test_a_trio_when_any_of_trio_senders() -> None:
    async def slow() -> str:
        await trio.sleep(10)
        return "slow"  # pragma: no cover

    async def fast() -> str:
        await trio.sleep(0)
        return "fast"

    with trio.fail_after(5):
        assert await sx.when_any(slow(), fast()) == "fast"


def test_awaitable_from_a_task() -> None:
    clock = VirtualClock()

    @sx.task
    async def body() -> Any:
        return await sx.write_env(
            sx.when_any(clock.schedule_after(3) | sx.then(lambda: "later"), sx.just("now")),
            clock.env(),
        )

    assert sx.sync_wait(body()) == ("now",)
    assert clock.stopped == 1


def test_children_with_different_value_signatures_need_into_variant_in_a_task() -> None:
    """A task awaits senders with one value signature ([exec.as.awaitable])."""

    @sx.task
    async def body() -> Any:
        return await sx.into_variant(sx.when_any(sx.just(1), sx.just("a", "b")))

    assert sx.sync_wait(body()) == ((1,),)


# --------------------------------------------------------------------------- property


class _Track(sx.Sender[Any]):
    """Forwards ``child``'s completion, logging it first as ``(i, kind, args)``."""

    def __init__(self, i: int, child: Any, log: list[tuple[int, str, tuple[Any, ...]]]) -> None:
        self.i, self.child, self.log = i, child, log

    def connect(self, rcvr: Any) -> Any:
        i, log = self.i, self.log

        class R:
            def get_env(self) -> Any:
                return sx.get_env(rcvr)

            def set_value(self, *v: Any) -> None:
                log.append((i, "value", v))
                rcvr.set_value(*v)

            def set_error(self, e: Any) -> None:
                log.append((i, "error", (e,)))
                rcvr.set_error(e)

            def set_stopped(self) -> None:
                log.append((i, "stopped", ()))
                rcvr.set_stopped()

        return sx.connect(self.child, R())


def _reraise(e: BaseException) -> Any:
    raise e


_KINDS = st.sampled_from(["just", "error", "stopped", "timer", "timer-error", "gate"])


@settings(deadline=None, max_examples=150)
@given(
    children=st.lists(st.tuples(_KINDS, st.integers(0, 3)), min_size=1, max_size=5),
    stop_at=st.none() | st.integers(0, 4),
    order=st.randoms(use_true_random=False),
)
def test_property_completes_exactly_once_with_a_childs_result_and_no_child_running(
    children: list[tuple[str, int]], stop_at: int | None, order: Any
) -> None:
    clock = VirtualClock()
    gate = Gate()
    log: list[tuple[int, str, tuple[Any, ...]]] = []
    errs = [ValueError(i) for i in range(len(children))]
    sndrs = []
    for i, (kind, t) in enumerate(children):
        if kind == "just":
            s: Any = sx.just(i)
        elif kind == "error":
            s = sx.just_error(errs[i])
        elif kind == "stopped":
            s = sx.just_stopped()
        elif kind == "timer":
            s = clock.schedule_after(t) | sx.then(lambda i=i: i)
        elif kind == "timer-error":
            s = clock.schedule_after(t) | sx.then(lambda i=i: _reraise(errs[i]))
        else:
            s = gate.sender()
        sndrs.append(_Track(i, s, log))
    r = RecordingReceiver()
    r.run(sx.when_any(*sndrs))
    for step in range(5):
        if stop_at == step and not r.done:
            log.append((-1, "outer stop", ()))
            r.request_stop()
        clock.advance(1)
        if gate.ops and order.random() < 0.5:
            op = gate.ops.pop(order.randrange(len(gate.ops)))
            if order.random() < 0.5:
                op.set_value(-1)
            else:
                op.set_stopped()
    while gate.ops:
        gate.ops.pop().set_value(-1)
    clock.advance(10)
    # exactly once, and nothing left running
    assert r.completions == 1
    assert clock.pending() == 0 and gate.started == gate.completed
    assert r.live_callbacks_at_completion == 0
    # the first completion (or the receiver's stop, if it came first) is the result
    i, k, v = log[0]
    assert r.kind == ("stopped" if k == "outer stop" else k)
    if k == "value":
        assert r.value == v
    elif k == "error":
        assert r.error is v[0]
