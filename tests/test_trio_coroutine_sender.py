"""Coroutines and other awaitables as senders ([exec.connect],
docs/trio.md "Coroutines are senders; a stop request cancels them",
docs/scopes.md "The nursery face: `async with`", docs/task.md 'How "stopped" unwinds a task',
docs/trio.md "trio cancellation becomes a stop request").

Trio-hosted path: started on the trio thread (or from another thread with a trio run in the
environment) the awaitable runs in its own trio task and cancel scope.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Generator
from typing import Any

import pytest
import trio
import trio.testing

import structexec as sx
from structexec._trio._trio_bridge import host_env, trio_host_nursery
from structexec.testing import RecordingReceiver, no_leaks

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup


class ForwardingQ(sx.Query):
    forwarding = True


class PrivateQ(sx.Query):
    forwarding = False


fwd_q = ForwardingQ()
priv_q = PrivateQ()


async def settle(n: int = 10) -> None:
    for _ in range(n):
        await trio.lowlevel.checkpoint()


# --------------------------------------------------------------------------- outcomes
# ([exec.connect])


async def test_coroutine_sender_value_none_values_and_error() -> None:
    async def val() -> int:
        await trio.lowlevel.checkpoint()
        return 5

    async def none() -> None:
        await trio.lowlevel.checkpoint()

    async def several() -> Any:
        return sx.values(1, 2)

    async def fail() -> None:
        await trio.lowlevel.checkpoint()
        raise KeyError("k")

    recs = [RecordingReceiver() for _ in range(4)]
    for rec, coro in zip(recs, [val(), none(), several(), fail()]):
        rec.run(coro)
    for rec in recs:
        await rec.wait_trio()
    assert recs[0].value == (5,)
    assert recs[1].value == ()
    assert recs[2].value == (1, 2)
    assert isinstance(recs[3].error, KeyError)


async def test_completion_happens_after_the_coroutine_finished() -> None:
    order: list[str] = []

    async def body() -> str:
        try:
            await trio.lowlevel.checkpoint()
            return "v"
        finally:
            order.append("coroutine finished")

    class Rec(RecordingReceiver):
        def set_value(self, *vals: Any) -> None:
            order.append("set_value")
            super().set_value(*vals)

    rec = Rec()
    rec.run(body())
    assert order == []  # nothing runs inside start: the coroutine runs in its own trio task
    await rec.wait_trio()
    assert order == ["coroutine finished", "set_value"]


async def test_runs_in_its_own_trio_task_on_the_trio_thread() -> None:
    me = trio.lowlevel.current_task()
    seen: list[Any] = []

    async def body() -> None:
        seen.append((trio.lowlevel.current_task(), threading.get_ident()))

    rec = RecordingReceiver()
    rec.run(body())
    await rec.wait_trio()
    task, ident = seen[0]
    assert task is not me
    assert ident == threading.get_ident()


async def test_awaited_sender_that_stops_completes_stopped_and_runs_finally() -> None:
    order: list[str] = []

    async def body() -> None:
        try:
            try:
                await sx.just_stopped()
            except Exception:  # pragma: no cover - stopped is not an Exception
                order.append("caught by except Exception")
            order.append("resumed")  # pragma: no cover
        finally:
            order.append("finally")
            assert await sx.just(1) == 1  # finally blocks may await
            order.append("awaited in finally")

    rec = RecordingReceiver()
    rec.run(body())
    await rec.wait_trio()
    assert rec.stopped
    assert order == ["finally", "awaited in finally"]


def test_connect_of_a_started_coroutine_is_a_type_error() -> None:
    async def body() -> None:
        pass

    c = body()
    c.close()
    with pytest.raises(TypeError, match="already been started or closed"):
        sx.connect(c, RecordingReceiver())


def test_never_started_op_closes_its_coroutine_quietly() -> None:
    async def body() -> None:  # pragma: no cover - never runs
        pass

    # filterwarnings=error would turn "coroutine was never awaited" into a failure.
    op = sx.connect(body(), RecordingReceiver())
    del op
    import gc

    gc.collect()


async def test_generic_awaitables_are_senders() -> None:
    class Aw:
        def __await__(self) -> Generator[Any, None, int]:
            yield from trio.lowlevel.checkpoint().__await__()  # noqa: ASYNC105
            return 9

    assert sx.is_sender(Aw())
    rec = RecordingReceiver()
    rec.run(Aw())
    await rec.wait_trio()
    assert rec.value == (9,)


# --------------------------------------------------------------------------- env
# ([exec.as.awaitable], [exec.connect])


async def test_awaited_senders_see_the_receivers_forwarding_env() -> None:
    seen: dict[str, Any] = {}

    async def body() -> None:
        seen["fwd"] = await sx.read_env(fwd_q)
        seen["sched"] = await sx.read_env(sx.get_scheduler)
        seen["token"] = await sx.read_env(sx.get_stop_token)
        with pytest.raises(TypeError):  # non-forwarding queries do not reach ([exec.as.awaitable])
            await sx.read_env(priv_q)

    rec = RecordingReceiver(extra_env=sx.env(sx.prop(fwd_q, "F"), sx.prop(priv_q, "P")))
    rec.run(body())
    await rec.wait_trio()
    rec.check()
    assert rec.value == ()
    assert seen["fwd"] == "F"
    assert seen["sched"] is sx.trio_scheduler()
    # The token of awaited senders is the hosting task's (linked to its cancel scope).
    assert seen["token"].stop_possible()


async def test_awaited_senders_get_the_receivers_scheduler_first() -> None:
    loop = sx.run_loop()
    got: list[Any] = []

    async def body() -> None:
        got.append(await sx.read_env(sx.get_scheduler))

    rec = RecordingReceiver(extra_env=sx.prop(sx.get_scheduler, loop.get_scheduler()))
    rec.run(body())
    await rec.wait_trio()
    assert got == [loop.get_scheduler()]


# --------------------------------------------------------------------------- stop -> cancel
# (docs/trio.md "Coroutines are senders; a stop request cancels them")


async def test_stop_request_cancels_the_hosted_task_and_completes_stopped(
    autojump_clock: trio.testing.MockClock,
) -> None:
    order: list[str] = []

    async def body() -> None:
        try:
            await trio.sleep(100)
        except trio.Cancelled:
            order.append("cancelled")
            raise
        finally:
            order.append("finally")

    rec = RecordingReceiver()
    rec.run(body())
    await trio.sleep(1)
    assert not rec.done
    rec.request_stop()
    await rec.wait_trio()
    assert rec.stopped  # not set_error(Cancelled)
    assert order == ["cancelled", "finally"]
    assert trio.current_time() < 100
    assert rec.live_callbacks_at_completion == 0


async def test_stop_requested_from_another_thread(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def body() -> None:
        await trio.sleep_forever()

    rec = RecordingReceiver()
    rec.run(body())
    await trio.sleep(1)
    requester: list[int] = []

    def stop() -> None:
        requester.append(threading.get_ident())
        rec.request_stop()

    t = threading.Thread(target=stop)
    t.start()
    await trio.to_thread.run_sync(t.join)
    await rec.wait_trio()
    assert rec.stopped
    assert requester[0] != threading.get_ident()
    assert rec.thread == threading.get_ident()


async def test_stop_before_start_cancels_at_first_checkpoint() -> None:
    ran: list[str] = []

    async def body() -> None:
        ran.append("started")
        await trio.lowlevel.checkpoint()
        ran.append("not reached")  # pragma: no cover

    rec = RecordingReceiver()
    rec.request_stop()
    rec.run(body())
    await rec.wait_trio()
    assert rec.stopped
    assert ran == ["started"]


async def test_coroutine_that_ignores_cancel_completes_with_its_value(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def body() -> str:
        try:
            await trio.sleep(100)
        except trio.Cancelled:
            return "swallowed"
        return "slept"  # pragma: no cover

    rec = RecordingReceiver()
    rec.run(body())
    await trio.sleep(1)
    rec.request_stop()
    await rec.wait_trio()
    assert rec.value == ("swallowed",)


async def test_hosted_task_is_shielded_from_ambient_cancellation(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def body() -> str:
        await trio.sleep(5)
        return "finished"

    rec = RecordingReceiver(env=sx.env())  # never_stop_token: nothing may cancel it
    with trio.CancelScope() as cs:  # noqa: ASYNC100  (started inside a cancelled scope)
        cs.cancel()
        rec.run(body())
    with trio.move_on_after(1):
        await rec.wait_trio()
    assert not rec.done
    await rec.wait_trio()
    assert rec.value == ("finished",)
    assert trio.current_time() >= 5


# --------------------------------------------------------------------------- hosting


async def test_host_nursery_query_runs_the_task_in_that_nursery() -> None:
    parents: list[Any] = []

    async def body() -> None:
        parents.append(trio.lowlevel.current_task().parent_nursery)

    async with trio.open_nursery() as nursery:
        rec = RecordingReceiver(extra_env=host_env(nursery))
        assert sx.get_env(rec).query(trio_host_nursery) is nursery
        rec.run(body())
        await rec.wait_trio()
    assert parents == [nursery]


async def test_without_host_nursery_runs_as_a_system_task() -> None:
    parents: list[Any] = []

    async def body() -> None:
        task = trio.lowlevel.current_task()
        parents.append((task.parent_nursery.parent_task, task.name))

    rec = RecordingReceiver()
    rec.run(body())
    await rec.wait_trio()
    # A system task: its parent nursery belongs to trio's root task, not to the test's task.
    assert parents[0][0] is trio.lowlevel.current_root_task()
    assert parents[0][1].endswith("body")


async def test_started_from_another_thread_with_trio_scheduler_in_env() -> None:
    trio_thread = threading.get_ident()
    seen: list[int] = []

    async def body() -> None:
        seen.append(threading.get_ident())
        await trio.lowlevel.checkpoint()

    rec = RecordingReceiver(extra_env=sx.prop(sx.get_scheduler, sx.trio_scheduler()))

    def start() -> None:
        rec.run(body())

    t = threading.Thread(target=start)
    t.start()
    await trio.to_thread.run_sync(t.join)
    await rec.wait_trio()
    assert seen == [trio_thread]
    assert rec.value == ()


def test_trio_scheduler_of_a_finished_run_in_env_falls_back_to_the_driver() -> None:
    async def get() -> Any:
        return sx.trio_scheduler()

    sch = trio.run(get)

    async def body() -> None:  # pragma: no cover - never runs
        pass

    rec = RecordingReceiver(extra_env=sx.prop(sx.get_scheduler, sch))
    op = sx.connect(body(), rec)
    # The scheduler's run is over: no trio in sight, so the coroutine driver runs it here.
    rec.start(op)
    assert rec.value == ()


async def test_nothing_leaks_and_run_waits_for_nothing() -> None:
    async def body(i: int) -> int:
        await trio.lowlevel.checkpoint()
        return i

    async with no_leaks():
        assert await sx.when_all(body(1), body(2), body(3)) == (1, 2, 3)
        rec = RecordingReceiver()
        rec.run(body(4))
        rec.request_stop()
        await rec.wait_trio()


async def test_when_all_of_coroutines_error_cancels_siblings(
    autojump_clock: trio.testing.MockClock,
) -> None:
    order: list[str] = []

    async def fail() -> None:
        await trio.sleep(1)
        raise ValueError("first")

    async def slow() -> None:
        try:
            await trio.sleep(100)
        finally:
            order.append("slow unwound")

    with pytest.raises(ValueError, match="first"):
        await sx.when_all(fail(), slow())
    assert order == ["slow unwound"]
    assert trio.current_time() < 100


async def test_await_when_all_of_coroutines_cancelled_by_trio(
    autojump_clock: trio.testing.MockClock,
) -> None:
    order: list[str] = []

    async def slow(i: int) -> None:
        try:
            await trio.sleep(100)
        finally:
            order.append(f"slow {i} unwound")

    with trio.move_on_after(1) as cs:
        try:
            await sx.when_all(slow(1), slow(2))
        finally:
            order.append("await raised")
    assert cs.cancelled_caught
    assert sorted(order[:2]) == ["slow 1 unwound", "slow 2 unwound"]
    assert order[2] == "await raised"  # the operation completed before the await raised


async def test_keyboard_interrupt_in_hosted_coroutine_completes_stopped() -> None:
    """A BaseException is never an error datum (docs/senders.md "What happens when things fail");
    the op still completes."""

    async def body() -> None:
        raise KeyboardInterrupt

    with pytest.raises(BaseExceptionGroup) as info:
        async with trio.open_nursery() as nursery:
            rec = RecordingReceiver(extra_env=host_env(nursery))
            rec.run(body())
            await rec.wait_trio()
    assert info.group_contains(KeyboardInterrupt)
    assert rec.stopped


@pytest.mark.parametrize("from_thread", [False, True])
async def test_token_read_inside_hosted_coroutine_fires_on_the_hosts_stop(
    from_thread: bool, autojump_clock: Any
) -> None:
    """A coroutine run as a sender reads its stop token once (``await
    sx.read_env(sx.get_stop_token)``) and keeps it: a stop request on the hosting operation
    reaches that token later, and a callback registered on it runs exactly once. (Without
    the host's token in it, the token would belong to that one finished await and never
    fire.)"""
    seen: list[Any] = []
    fired: list[int] = []

    async def work() -> None:
        tok = await sx.read_env(sx.get_stop_token)
        cb = sx.stop_callback_for(tok, lambda: fired.append(threading.get_ident()))
        seen.append(tok.stop_requested())
        try:
            await trio.sleep_forever()
        finally:
            seen.append(tok.stop_requested())
            cb.close()

    async with sx.counting_scope() as scope:
        scope.spawn(work())
        await trio.sleep(1)
        if from_thread:
            await trio.to_thread.run_sync(scope.request_stop)
        else:
            scope.request_stop()
    assert seen == [False, True]
    assert len(fired) == 1


async def test_token_of_a_plain_trio_task_await_is_the_awaits_own() -> None:
    """Outside a hosted coroutine the token is the await's own (stopped by the task's trio
    cancellation during the await), not a combination."""
    tok = await sx.read_env(sx.get_stop_token)
    assert type(tok) is sx.inplace_stop_token
    assert not tok.stop_requested()
