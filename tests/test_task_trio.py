"""Tasks on the trio scheduler: [exec.task], docs/trio.md,
docs/task.md 'How "stopped" unwinds a task',
docs/trio.md "trio cancellation becomes a stop request", docs/task.md "What a task is".

A task whose scheduler is ``sx.trio_scheduler()`` runs its body in a trio task: it may await
trio primitives (sleep, channels, nurseries, cancel scopes), and after every await it is on
the trio thread. Off the trio scheduler the same awaits raise a clear error. Time-based tests
use pytest-trio's ``autojump_clock`` (a ``MockClock(autojump_threshold=0)``).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
import trio
import trio.testing
from _helpers import LoopThread, loop_thread, rec_on

import structexec as sx
from structexec.testing import RecordingReceiver, no_leaks

lt = pytest.fixture(loop_thread, name="lt")


def on_trio() -> RecordingReceiver:
    return rec_on(sx.trio_scheduler())


# --------------------------------------------------------------------------- basics


async def test_await_a_task_from_trio_runs_it_in_the_awaiting_trio_task() -> None:
    caller = trio.lowlevel.current_task()
    seen: dict[str, Any] = {}

    @sx.task
    async def work(x: int) -> int:
        seen["task"] = trio.lowlevel.current_task()
        seen["sched"] = await sx.read_env(sx.get_scheduler)
        seen["token"] = await sx.read_env(sx.get_stop_token)
        await trio.lowlevel.checkpoint()
        return x + 1

    async with no_leaks():
        assert await work(1) == 2
    assert seen["task"] is caller  # like awaiting a coroutine: no new trio task
    assert seen["sched"] == sx.trio_scheduler()
    assert isinstance(seen["sched"], sx.task_scheduler)
    assert seen["token"].stop_possible()  # trio cancellation of the caller stops it


async def test_started_as_an_operation_the_body_gets_its_own_named_trio_task() -> None:
    caller = trio.lowlevel.current_task()
    seen: list[Any] = []

    @sx.task
    async def work() -> str:
        seen.append(trio.lowlevel.current_task())
        await trio.lowlevel.checkpoint()
        return "done"

    async with no_leaks():
        r = on_trio()
        r.run(work())
        assert not r.done  # start() spawned the hosting trio task; nothing ran yet
        with trio.fail_after(5):
            await r.wait_trio()
    assert r.value == ("done",)
    assert seen[0] is not caller
    assert seen[0].name.endswith("work")  # the hosting trio task is named after the function


async def test_trio_primitives_work_inside_a_task(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[Any] = []

    @sx.task
    async def producer(send: trio.MemorySendChannel[int]) -> None:
        async with send:
            for i in range(3):
                await trio.sleep(1)
                await send.send(i)

    @sx.task
    async def main() -> list[int]:
        send, recv = trio.open_memory_channel[int](0)
        got: list[int] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_drain, recv, got)
            await producer(send)
        with trio.move_on_after(5) as cs:
            await trio.sleep(10)
        log.append(cs.cancelled_caught)
        log.append(trio.current_time())
        return got

    async with no_leaks():
        assert await main() == [0, 1, 2]
    assert log == [True, 8.0]


async def _drain(recv: trio.MemoryReceiveChannel[int], got: list[int]) -> None:
    async with recv:
        async for x in recv:
            got.append(x)


def test_trio_primitives_off_the_trio_scheduler_raise_a_clear_error() -> None:
    @sx.task
    async def t() -> None:
        await trio.sleep(0)

    with pytest.raises(RuntimeError, match="trio scheduler") as ei:
        sx.sync_wait(t())
    assert "starts_on(sx.trio_scheduler()" in str(ei.value)


def test_foreign_yields_off_trio_raise_a_clear_error() -> None:
    class Foreign:
        def __await__(self) -> Any:
            yield "something that is not a structexec sender"

    caught: list[str] = []

    @sx.task
    async def t() -> str:
        try:
            await Foreign()
        except RuntimeError as e:
            caught.append(str(e))
        return "ok"

    assert sx.sync_wait(t()) == ("ok",)
    assert "trio primitive" in caught[0] and "it yielded" in caught[0]


async def test_hundred_thousand_awaits_on_trio() -> None:
    @sx.task
    async def t() -> int:
        s = 0
        for i in range(100_000):
            s += await sx.just(i)
        return s

    assert await t() == sum(range(100_000))


async def test_nested_tasks_share_the_trio_task_and_primitives_work_in_them(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tasks: list[Any] = []

    @sx.task
    async def leaf(i: int) -> int:
        tasks.append(trio.lowlevel.current_task())
        await trio.sleep(1)
        return i

    @sx.task
    async def parent() -> int:
        tasks.append(trio.lowlevel.current_task())
        return sum([await leaf(i) for i in range(4)])

    living = trio.lowlevel.current_statistics().tasks_living
    assert await parent() == 6
    assert len(set(map(id, tasks))) == 1  # no trio task per nested task
    assert trio.lowlevel.current_statistics().tasks_living == living


async def test_error_propagates_to_the_awaiting_trio_code() -> None:
    @sx.task
    async def t() -> None:
        await trio.lowlevel.checkpoint()
        raise KeyError("k")

    with pytest.raises(KeyError):
        await t()


async def test_stopped_task_raises_stopped_in_plain_trio_code() -> None:
    @sx.task
    async def t() -> None:
        await sx.just_stopped()

    with pytest.raises(sx.Stopped):
        await t()


async def test_schedule_on_the_trio_scheduler_inside_a_task() -> None:
    @sx.task
    async def t() -> int:
        await sx.schedule(sx.trio_scheduler())
        await sx.schedule(await sx.read_env(sx.get_scheduler))
        return 3

    assert await t() == 3


# --------------------------------------------------------------------------- affinity on trio


async def test_after_awaiting_a_sender_from_another_thread_the_task_is_on_trio(
    lt: LoopThread,
) -> None:
    trio_thread = threading.get_ident()
    where: list[tuple[str, int]] = []

    @sx.task
    async def t() -> None:
        where.append(("start", threading.get_ident()))
        await sx.schedule(lt.sch)
        where.append(("after schedule", threading.get_ident()))
        v = await sx.continues_on(sx.just(5), lt.sch)
        where.append((f"after continues_on {v}", threading.get_ident()))
        inner = await (sx.schedule(lt.sch) | sx.then(threading.get_ident))
        where.append(("then ran on loop" if inner == lt.ident else "?", threading.get_ident()))
        await trio.to_thread.run_sync(lambda: None)
        where.append(("after to_thread", threading.get_ident()))

    await t()
    assert where == [
        ("start", trio_thread),
        ("after schedule", trio_thread),
        ("after continues_on 5", trio_thread),
        ("then ran on loop", trio_thread),
        ("after to_thread", trio_thread),
    ]


async def test_task_started_from_another_thread_runs_on_the_trio_thread() -> None:
    trio_thread = threading.get_ident()
    sch = sx.trio_scheduler()
    seen: list[int] = []

    @sx.task
    async def t() -> str:
        seen.append(threading.get_ident())
        await trio.sleep(0)  # a trio primitive: it is a trio task
        return "ok"

    def worker() -> Any:
        return sx.sync_wait(sx.write_env(t(), sx.prop(sx.get_scheduler, sch)))

    assert await trio.to_thread.run_sync(worker) == ("ok",)
    assert seen == [trio_thread]


async def test_starts_on_another_scheduler_from_a_trio_task(lt: LoopThread) -> None:
    trio_thread = threading.get_ident()
    where: list[int] = []

    @sx.task
    async def nested() -> int:
        where.append(threading.get_ident())
        return 1

    @sx.task
    async def outer() -> int:
        v = await sx.starts_on(lt.sch, nested())
        where.append(threading.get_ident())
        return v

    assert await outer() == 1
    assert where == [lt.ident, trio_thread]


# --------------------------------------------------------------------------- stop <-> cancel


async def test_stop_request_cancels_trio_primitives_in_the_task(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[str] = []

    @sx.task
    async def t() -> None:
        try:
            await trio.sleep(100)
            log.append("slept")
        finally:
            log.append("finally")

    async with no_leaks():
        r = on_trio()
        r.run(t())
        await trio.sleep(1)
        assert not r.done
        r.request_stop()
        with trio.fail_after(5):
            await r.wait_trio()
    assert r.stopped
    assert log == ["finally"]
    assert r.live_callbacks_at_completion == 0
    assert trio.current_time() < 5


async def test_stop_request_while_awaiting_a_sender_unwinds_the_task(
    lt: LoopThread,
) -> None:
    log: list[str] = []
    gate = threading.Event()

    @sx.task
    async def t() -> None:
        try:
            # blocks on the loop thread until the gate opens; the second run_loop item then
            # sees the stop request and completes stopped there
            await (
                sx.schedule(lt.sch)
                | sx.then(gate.wait)
                | sx.let_value(lambda _: sx.schedule(lt.sch))
            )
            log.append("resumed")
        finally:
            log.append(f"finally on trio: {threading.get_ident() == trio_thread}")

    trio_thread = threading.get_ident()
    r = on_trio()
    r.run(t())
    await trio.testing.wait_all_tasks_blocked()  # the task waits for the loop thread
    assert not r.done
    r.request_stop()
    gate.set()
    with trio.fail_after(5):
        await r.wait_trio()
    assert r.stopped
    assert log == ["finally on trio: True"]


async def test_trio_cancellation_of_the_awaiting_task_stops_the_task(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[str] = []

    @sx.task
    async def t() -> None:
        try:
            await trio.sleep(100)
        finally:
            log.append("task finally")

    async with no_leaks():
        with trio.move_on_after(3) as cs:
            await t()
            log.append("not reached")
    assert cs.cancelled_caught
    assert log == ["task finally"]
    assert trio.current_time() == 3


async def test_stopped_unwinding_may_await_trio_primitives_when_shielded(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[str] = []

    @sx.task
    async def t() -> None:
        try:
            await sx.just_stopped()
        finally:
            await trio.sleep(1)  # no trio cancellation here: the stop came from a sender
            log.append(f"cleaned up at {trio.current_time()}")

    with pytest.raises(sx.Stopped):
        await t()
    assert log == ["cleaned up at 1.0"]


# --------------------------------------------------------------------------- scopes


async def test_scope_spawn_runs_tasks_on_the_trio_scheduler(
    autojump_clock: trio.testing.MockClock,
) -> None:
    trio_thread = threading.get_ident()
    seen: list[Any] = []

    @sx.task
    async def work(i: int) -> None:
        await trio.sleep(i)
        seen.append((i, threading.get_ident(), await sx.read_env(sx.get_scheduler)))

    async with no_leaks(), sx.counting_scope() as scope:
        for i in range(3):
            scope.spawn(work(i))
    assert [s[0] for s in seen] == [0, 1, 2]
    assert all(s[1] == trio_thread for s in seen)
    assert all(s[2] == sx.trio_scheduler() for s in seen)


async def test_bare_spawn_with_the_scope_token_runs_on_the_trio_scheduler() -> None:
    seen: list[int] = []

    @sx.task
    async def work() -> None:
        await trio.sleep(0)
        seen.append(threading.get_ident())

    async with sx.counting_scope() as scope:
        sx.spawn(work(), scope.get_token())
    assert seen == [threading.get_ident()]


async def test_scope_request_stop_stops_spawned_tasks(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[str] = []

    @sx.task
    async def sleeper(i: int) -> None:
        try:
            await trio.sleep(1000)
        finally:
            log.append(f"stopped {i}")

    async with no_leaks(), sx.counting_scope() as scope:
        for i in range(3):
            scope.spawn(sleeper(i))
        await trio.sleep(1)
        scope.request_stop()
    assert sorted(log) == ["stopped 0", "stopped 1", "stopped 2"]
    assert trio.current_time() < 10


async def test_spawn_future_of_a_task_gives_its_value() -> None:
    @sx.task
    async def work(x: int) -> int:
        await trio.sleep(0)
        return x * 3

    async with sx.counting_scope() as scope:
        fut = scope.spawn_future(work(4))
        assert await fut == 12


async def test_task_without_scheduler_in_a_scope_env_fails_at_connect_with_advice() -> None:
    @sx.task
    async def work() -> None:
        pass

    scope = sx.simple_counting_scope()
    with pytest.raises(TypeError, match="needs a scheduler") as ei:
        sx.spawn(work(), scope.get_token())
    assert "scope.spawn" in str(ei.value)
    scope.close()
    await scope.join()


async def test_trio_cancellation_while_awaiting_a_sender_stops_the_awaited_work(
    lt: LoopThread,
) -> None:
    """The awaiting trio task is cancelled while the task waits for work on another thread:
    the cancellation becomes a stop request, the work stops, the task unwinds, and the
    caller sees trio.Cancelled (docs/task.md 'How "stopped" unwinds a task',
    docs/trio.md "trio cancellation becomes a stop request")."""
    log: list[str] = []
    started = threading.Event()

    def wait_for_stop(token: Any) -> None:
        started.set()
        while not token.stop_requested():
            threading.Event().wait(0.001)

    @sx.task
    async def t() -> None:
        try:
            await sx.starts_on(
                lt.sch,
                sx.read_env(sx.get_stop_token)
                | sx.then(wait_for_stop)
                | sx.let_value(lambda: sx.just_stopped()),
            )
            log.append("not reached")
        finally:
            log.append(f"finally on trio: {threading.get_ident() == trio_thread}")

    trio_thread = threading.get_ident()
    with trio.CancelScope() as cs:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_cancel_when, started, cs)
            await t()
    assert cs.cancelled_caught
    assert log == ["finally on trio: True"]


async def _cancel_when(event: threading.Event, cs: trio.CancelScope) -> None:
    await trio.to_thread.run_sync(event.wait)
    cs.cancel()


async def test_an_already_cancelled_caller_stops_the_task_at_its_first_await() -> None:
    """Awaiting a task in a cancelled scope: the body starts, its first parking await sees the
    stop request (the trio scheduler honours it), the body unwinds, trio.Cancelled."""
    log: list[str] = []

    @sx.task
    async def t() -> None:
        log.append("body started")
        try:
            await (sx.schedule(sx.trio_scheduler()) | sx.then(lambda: "value"))
            log.append("not reached")
        finally:
            log.append("finally")

    with trio.CancelScope() as cs:
        cs.cancel()
        await t()
    assert cs.cancelled_caught
    assert log == ["body started", "finally"]


class get_value_t(sx.Query):
    forwarding = True


get_value = get_value_t()


async def test_trio_tasks_started_in_a_task_body_see_the_tasks_environment() -> None:
    """A nursery child started inside the body awaits senders with the task's environment."""

    class Ctx:
        def query(self, q: Any) -> Any:
            if q is get_value:
                return "from the task's Environment"
            raise sx.QueryError(q)

    seen: list[Any] = []

    async def child() -> None:
        seen.append(await sx.read_env(get_value))
        seen.append(await sx.read_env(sx.get_scheduler))

    @sx.task(environment=Ctx)
    async def t() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(child)

    await t()  # in the awaiting trio task
    r = on_trio()
    r.run(t())  # in a trio task of its own
    with trio.fail_after(5):
        await r.wait_trio()
    assert seen[0] == seen[2] == "from the task's Environment"
    assert seen[1] == seen[3] == sx.trio_scheduler()


async def test_when_all_of_tasks_an_error_stops_the_sibling_task(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Each task of when_all gets its own trio task; the error of one requests stop on the
    other, whose trio.sleep is cancelled; the caller gets the error ([exec.when.all],
    [exec.task])."""
    log: list[str] = []

    @sx.task
    async def sleeper() -> int:
        try:
            await trio.sleep(100)
            return 1
        finally:
            log.append(f"sleeper unwound at {trio.current_time()}")

    @sx.task
    async def failer() -> int:
        await trio.sleep(2)
        raise ValueError("failed")

    async with no_leaks():
        with pytest.raises(ValueError, match="failed"):
            await sx.when_all(sleeper(), failer())
    assert log == ["sleeper unwound at 2.0"]
