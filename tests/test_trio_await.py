"""``await sndr`` in a trio task.

[exec.as.awaitable], docs/trio.md "Awaiting a sender",
docs/senders.md "What happens when things fail", docs/task.md 'How "stopped" unwinds a task',
docs/trio.md "trio cancellation becomes a stop request".
"""

from __future__ import annotations

import asyncio
import gc
import threading
from typing import Any

import pytest
import trio
import trio.testing

import structexec as sx
from structexec.testing import no_leaks

# --------------------------------------------------------------------------- test senders


class Manual(sx.Sender[Any]):
    """A sender whose operation completes only when the test says so (from any thread).

    ``on_stop``: "stopped" completes set_stopped at once when stop is requested; "record" only
    records the request (the test completes later); "value" completes with a value instead.
    """

    def __init__(self, on_stop: str = "stopped") -> None:
        self.on_stop = on_stop
        self.events: list[str] = []
        self.ops: list[ManualOp] = []

    def connect(self, rcvr: Any) -> ManualOp:
        op = ManualOp(self, rcvr)
        self.ops.append(op)
        return op

    @property
    def op(self) -> ManualOp:
        return self.ops[-1]


class ManualOp:
    def __init__(self, sndr: Manual, rcvr: Any) -> None:
        self.sndr = sndr
        self.rcvr = rcvr
        self.cb: Any = None
        self.done = False
        self.env = sx.get_env(rcvr)

    def start(self) -> None:
        self.sndr.events.append("start")
        tok = sx.get_stop_token(self.env)
        self.cb = sx.stop_callback_for(tok, self._stop)

    def _stop(self) -> None:
        self.sndr.events.append("stop requested")
        if self.sndr.on_stop == "stopped":
            self.complete("stopped")
        elif self.sndr.on_stop == "value":
            self.complete("value", "ignored the stop")

    def complete(self, kind: str, *args: Any) -> None:
        assert not self.done
        self.done = True
        if self.cb is not None:
            cb, self.cb = self.cb, None
            # may run inside our own callback: close() does not wait for itself
            cb.close()
        self.sndr.events.append(f"complete {kind}")
        getattr(self.rcvr, f"set_{kind}")(*args)


# -------------------------------------------------------- values (docs/trio.md "Awaiting a sender")


async def test_await_values_convention() -> None:
    assert await sx.just() is None
    assert await sx.just(1) == 1
    assert await sx.just(1, 2) == (1, 2)
    assert await sx.just((1, 2)) == (1, 2)
    assert await sx.just(None) is None
    assert await (sx.just(1) | sx.then(lambda x: None)) is None
    assert await (sx.just(1) | sx.then(lambda x: sx.values(x, x + 1))) == (1, 2)
    assert await (sx.just(3) | sx.then(lambda x: (x, x))) == (3, 3)


async def test_inline_completion_does_not_yield_to_trio() -> None:
    with trio.testing.assert_no_checkpoints():
        assert await sx.just(7) == 7
        assert await (sx.just(1) | sx.then(lambda x: x + 1)) == 2


async def test_100000_awaits_of_inline_senders() -> None:
    total = 0
    for i in range(100_000):
        total += await sx.just(i)
    assert total == sum(range(100_000))


# --------------------------------------------------------------------------- errors


async def test_exception_raised_as_is_with_traceback() -> None:
    exc = ValueError("boom")

    def f() -> None:
        raise exc

    with pytest.raises(ValueError) as info:
        await (sx.just() | sx.then(f))
    assert info.value is exc
    names = [fr.name for fr in info.traceback]
    assert "f" in names  # the original frames are kept


async def test_non_exception_error_is_wrapped_in_error_value() -> None:
    with pytest.raises(sx.ErrorValue) as info:
        await sx.just_error(42)
    assert info.value.error == 42


async def test_connect_time_type_error_propagates() -> None:
    with pytest.raises(TypeError):
        await sx.read_env(sx.get_delegation_scheduler)


# --------------------------------------------------------------------------- stopped


async def test_stopped_not_from_trio_raises_sx_stopped() -> None:
    caught: list[str] = []
    with pytest.raises(sx.Stopped):
        try:
            await sx.just_stopped()
        except Exception:  # pragma: no cover - must not catch a stop
            caught.append("except Exception caught it")
    assert caught == []
    assert issubclass(sx.Stopped, BaseException) and not issubclass(sx.Stopped, Exception)


async def test_stopped_from_elsewhere_while_parked_raises_sx_stopped() -> None:
    m = Manual()
    async with trio.open_nursery() as n:

        async def later() -> None:
            await trio.testing.wait_all_tasks_blocked()
            m.op.complete("stopped")

        n.start_soon(later)
        with pytest.raises(sx.Stopped):
            await m


# --------------------------------------------------------------------------- env
# (docs/trio.md "Awaiting a sender")


async def test_env_provides_trio_scheduler_and_stop_token() -> None:
    sch = await sx.read_env(sx.get_scheduler)
    assert sch is sx.trio_scheduler()
    tok = await sx.read_env(sx.get_stop_token)
    assert tok.stop_possible() and not tok.stop_requested()
    with pytest.raises(TypeError):  # not provided: C++ rejects it at compile time
        await sx.read_env(sx.get_allocator)


async def test_stop_token_fires_when_trio_cancellation_hits(
    autojump_clock: trio.testing.MockClock,
) -> None:
    m = Manual()
    with trio.move_on_after(1) as cs:
        await m
    assert cs.cancelled_caught
    # The operation completed (stopped) before the await raised Cancelled.
    assert m.events == ["start", "stop requested", "complete stopped"]


async def test_token_obtained_after_cancellation_is_already_stopped(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A token created lazily after the trio cancellation hit is stopped at once."""
    toks: list[Any] = []

    class Late(sx.Sender[Any]):
        def connect(self, rcvr: Any) -> Any:
            class Op:
                def start(self) -> None:
                    async def later() -> None:
                        await trio.sleep(0.5)
                        tok = sx.get_stop_token(sx.get_env(rcvr))
                        toks.append(tok)
                        if tok.stop_requested():
                            rcvr.set_stopped()
                        else:  # pragma: no cover
                            rcvr.set_value()

                    nursery.start_soon(later)

            return Op()

    async with trio.open_nursery() as nursery:
        with trio.move_on_after(0.1) as cs:
            await Late()
    assert cs.cancelled_caught
    assert toks[0].stop_requested()


# --------------------------------------------------------------------------- trio cancellation


async def test_cancelled_task_waits_shielded_until_the_op_completes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    m = Manual(on_stop="record")
    order: list[str] = []

    async def completer() -> None:
        await trio.sleep(2)  # past the deadline: the stop was requested at t=1
        events = list(m.events)
        order.append("completing late")
        await trio.sleep(3)  # the awaiting task is still waiting, although cancelled
        m.op.complete("stopped")
        assert events == ["start", "stop requested"]

    async with trio.open_nursery() as n:
        n.start_soon(completer)
        with trio.move_on_after(1) as cs:
            try:
                await m
            finally:
                order.append("await raised")
        assert cs.cancelled_caught
    assert order == ["completing late", "await raised"]
    assert m.events == ["start", "stop requested", "complete stopped"]
    assert trio.current_time() >= 5


async def test_value_despite_cancellation_is_returned(
    autojump_clock: trio.testing.MockClock,
) -> None:
    m = Manual(on_stop="value")
    got: list[Any] = []
    with trio.move_on_after(1) as cs:
        got.append(await m)
        await trio.lowlevel.checkpoint()  # Cancelled arrives here
        pytest.fail("not reached")  # pragma: no cover
    assert got == ["ignored the stop"]
    assert cs.cancelled_caught


async def test_error_despite_cancellation_is_raised(
    autojump_clock: trio.testing.MockClock,
) -> None:
    m = Manual(on_stop="record")

    async def fail_later() -> None:
        await trio.sleep(2)  # after the cancellation at t=1
        assert m.events == ["start", "stop requested"]
        m.op.complete("error", KeyError("late"))

    async with trio.open_nursery() as n:
        n.start_soon(fail_later)
        with pytest.raises(KeyError), trio.move_on_after(1):
            await m


async def test_cancelled_comes_from_the_cancelled_scope() -> None:
    m = Manual()
    with trio.CancelScope() as outer:
        with trio.CancelScope() as inner:
            outer.cancel()
            await m
        pytest.fail("not reached")  # pragma: no cover
    assert outer.cancelled_caught and not inner.cancelled_caught


async def test_already_cancelled_before_await() -> None:
    m = Manual()
    with trio.CancelScope() as cs:
        cs.cancel()
        await m
    assert cs.cancelled_caught
    assert m.events == ["start", "stop requested", "complete stopped"]


async def test_shielded_scope_does_not_request_stop() -> None:
    m = Manual()
    with trio.CancelScope() as outer:
        outer.cancel()
        with trio.CancelScope(shield=True):

            async def finish() -> None:
                await trio.testing.wait_all_tasks_blocked()
                m.op.complete("value", 1)

            async with trio.open_nursery() as n:
                n.start_soon(finish)
                assert await m == 1
    assert m.events == ["start", "complete value"]


async def test_op_that_never_asks_for_a_token_still_completes_after_cancel(
    autojump_clock: trio.testing.MockClock,
) -> None:
    class NoToken(sx.Sender[Any]):
        def connect(self, rcvr: Any) -> Any:
            class Op:
                def start(self) -> None:
                    nursery.start_soon(self.later)

                async def later(self) -> None:
                    with trio.CancelScope(shield=True):
                        await trio.sleep(2)
                    rcvr.set_value("done")

            return Op()

    got: list[Any] = []
    async with trio.open_nursery() as nursery:
        with trio.move_on_after(1) as cs:
            got.append(await NoToken())
    # The trio cancellation at t=1 could not stop the op (it has no token); the task waited for it
    # (docs/trio.md "trio cancellation becomes a stop request") and got its value; Cancelled would
    # come at the next checkpoint.
    assert got == ["done"]
    assert trio.current_time() >= 2
    assert cs.cancel_called and not cs.cancelled_caught


# ----------------------------------------------------------------- threads (docs/trio.md "Threads")


async def test_completion_from_another_thread_resumes_on_the_trio_thread() -> None:
    m = Manual()
    trio_thread = threading.get_ident()
    seen: list[int] = []

    def worker() -> None:
        seen.append(threading.get_ident())
        m.op.complete("value", "from thread")

    async with trio.open_nursery() as n:

        async def start_thread() -> None:
            await trio.testing.wait_all_tasks_blocked()
            t = threading.Thread(target=worker)
            t.start()
            await trio.to_thread.run_sync(t.join)

        n.start_soon(start_thread)
        assert await m == "from thread"
        assert threading.get_ident() == trio_thread
    assert seen and seen[0] != trio_thread


async def test_completion_racing_with_start_from_another_thread() -> None:
    """The op completes on a thread it spawns inside start(): no lost wake-up, no double one."""

    class Racy(sx.Sender[Any]):
        def __init__(self, i: int) -> None:
            self.i = i
            self.thread: threading.Thread | None = None

        def connect(self, rcvr: Any) -> Any:
            outer = self

            class Op:
                def start(self) -> None:
                    outer.thread = threading.Thread(target=rcvr.set_value, args=(outer.i,))
                    outer.thread.start()

            return Op()

    for i in range(200):
        s = Racy(i)
        assert await s == i
        assert s.thread is not None
        s.thread.join()


async def test_stop_request_from_a_worker_thread_cancels() -> None:
    """A stop token of an awaited op fired by trio cancellation runs its callback on the
    trio thread; a request on a source from another thread goes through run_sync_soon."""
    src = sx.inplace_stop_source()
    m = Manual()

    async def stop_from_thread() -> None:
        await trio.testing.wait_all_tasks_blocked()
        t = threading.Thread(target=src.request_stop)
        t.start()
        await trio.to_thread.run_sync(t.join)

    s = sx.write_env(m, sx.prop(sx.get_stop_token, src.get_token()))
    async with trio.open_nursery() as n:
        n.start_soon(stop_from_thread)
        with pytest.raises(sx.Stopped):  # not trio's cancellation: sx.Stopped
            await s
    assert m.events == ["start", "stop requested", "complete stopped"]


# --------------------------------------------------------------------------- bad input


async def test_awaiting_a_non_sender_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        await sx.then(lambda: None)  # type: ignore[misc]  # a closure, not a sender
    with pytest.raises(TypeError):
        await sx.trio_scheduler()  # type: ignore[misc]


def test_awaiting_outside_trio_is_a_clear_runtime_error() -> None:
    async def main() -> None:
        await sx.just(1)

    with pytest.raises(RuntimeError, match="trio task"):
        asyncio.run(main())


async def test_no_task_or_scope_leaks(autojump_clock: trio.testing.MockClock) -> None:
    async with no_leaks():
        for _ in range(10):
            await sx.just(1)
            m = Manual()
            with trio.move_on_after(1):
                await m
        gc.collect()
