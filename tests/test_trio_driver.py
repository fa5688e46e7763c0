"""The coroutine driver: coroutine senders off trio.

[exec.as.awaitable], [exec.with.awaitable.senders], [exec.connect],
docs/task.md 'How "stopped" unwinds a task', docs/task.md "What a task is".

With no trio run on the thread and none in the environment (``sync_wait``), a coroutine
sender is driven by structexec's loop on the starting thread.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import pytest
import trio
from _helpers import loop_thread_after_park

import structexec as sx
from structexec._core._coroutine_driver import CoroutineDriver
from structexec.testing import RecordingReceiver


def test_sync_wait_of_a_coroutine_values_convention() -> None:
    async def one() -> int:
        return await sx.just(20) + 1

    async def none() -> None:
        assert await sx.just() is None

    async def several() -> Any:
        a, b = await sx.just(1, 2)
        return sx.values(a, b)

    async def tup() -> tuple[int, int]:
        return (3, 4)

    assert sx.sync_wait(one()) == (21,)
    assert sx.sync_wait(none()) == ()
    assert sx.sync_wait(several()) == (1, 2)
    assert sx.sync_wait(tup()) == ((3, 4),)


def test_runs_on_the_calling_thread() -> None:
    async def body() -> int:
        return threading.get_ident()

    assert sx.sync_wait(body()) == (threading.get_ident(),)


def test_a_hundred_thousand_inline_awaits_use_constant_stack() -> None:
    async def body() -> int:
        total = 0
        for i in range(100_000):
            total += await sx.just(i)
        return total

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(200)
    try:
        assert sx.sync_wait(body()) == (sum(range(100_000)),)
    finally:
        sys.setrecursionlimit(limit)


def test_nested_coroutines_and_run_loop_hops() -> None:
    loop = sx.run_loop()
    worker = loop_thread_after_park(loop)  # the first hop then completes after start
    threads: list[int] = []

    async def inner(x: int) -> int:
        await sx.schedule(loop.get_scheduler())
        threads.append(threading.get_ident())
        return x * 2

    async def outer() -> int:
        a = await inner(1)
        b = await sx.starts_on(loop.get_scheduler(), inner(2))
        return a + b

    try:
        assert sx.sync_wait(outer()) == (6,)
    finally:
        loop.finish()
        worker.join()
    # resumed on the thread where the awaited sender completed (no affinity off-task)
    assert set(threads) == {worker.ident}


def test_error_thrown_into_the_coroutine_as_is() -> None:
    exc = ValueError("v")
    seen: list[BaseException] = []

    async def body() -> str:
        try:
            await sx.just_error(exc)
        except ValueError as e:
            seen.append(e)
        try:
            await sx.just_error("not an exception")
        except sx.ErrorValue as e:
            seen.append(e)
        return "recovered"

    assert sx.sync_wait(body()) == ("recovered",)
    assert seen[0] is exc
    assert isinstance(seen[1], sx.ErrorValue) and seen[1].error == "not an exception"


def test_escaping_exception_completes_set_error() -> None:
    async def body() -> None:
        await sx.just()
        raise KeyError("k")

    with pytest.raises(KeyError):
        sx.sync_wait(body())


def test_stopped_unwinds_runs_finally_that_awaits_and_completes_stopped() -> None:
    order: list[str] = []

    async def body() -> None:
        try:
            try:
                await sx.just_stopped()
            except Exception:  # pragma: no cover
                order.append("except Exception caught it")
            order.append("resumed")  # pragma: no cover
        finally:
            order.append("finally")
            order.append(f"awaited {await sx.just(1)}")

    assert sx.sync_wait(body()) is None  # stopped
    assert order == ["finally", "awaited 1"]


def test_swallowing_the_stop_is_an_error() -> None:
    async def body() -> str:
        try:
            await sx.just_stopped()
        except BaseException:
            return "swallowed"
        return "resumed"  # pragma: no cover

    with pytest.raises(RuntimeError, match=r"caught the sx\.Stopped"):
        sx.sync_wait(body())


def test_trio_primitives_under_sync_wait_raise_a_clear_error() -> None:
    async def body() -> None:
        await trio.sleep(0)

    with pytest.raises(RuntimeError, match="trio primitives can only be awaited"):
        sx.sync_wait(body())


def test_connect_error_is_thrown_into_the_coroutine() -> None:
    async def body() -> str:
        try:
            await sx.read_env(sx.get_allocator)
        except TypeError:
            return "caught"
        return "no"  # pragma: no cover

    assert sx.sync_wait(body()) == ("caught",)


class ForwardingQ(sx.Query):
    forwarding = True


def test_env_of_awaited_senders_is_the_receivers() -> None:
    fwd_q = ForwardingQ()

    async def body() -> Any:
        # sync_wait's env provides its run_loop's scheduler: scheduling on it works here.
        sch = await sx.read_env(sx.get_scheduler)
        await sx.schedule(sch)
        return (threading.get_ident(), await sx.read_env(fwd_q))

    got = sx.sync_wait(sx.write_env(body(), sx.prop(fwd_q, "F")))
    assert got == ((threading.get_ident(), "F"),)


def test_completion_from_another_thread_resumes_the_loop_there() -> None:
    done = threading.Event()
    holder: dict[str, Any] = {}

    class Later(sx.Sender[Any]):
        def connect(self, rcvr: Any) -> Any:
            class Op:
                def start(self) -> None:
                    holder["rcvr"] = rcvr

            return Op()

    seen: list[int] = []

    async def body() -> str:
        v = await Later()
        seen.append(threading.get_ident())
        return str(v)

    rec = RecordingReceiver()
    drv = CoroutineDriver(body(), rec)
    rec.started = True
    drv.start()
    assert not rec.done

    def complete() -> None:
        holder["rcvr"].set_value(7)
        done.set()

    t = threading.Thread(target=complete)
    t.start()
    t.join()
    assert done.is_set()
    assert rec.value == ("7",)
    assert seen == [t.ident]


def test_driver_completion_racing_with_start() -> None:
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

    threads: list[threading.Thread] = []

    async def body() -> int:
        total = 0
        for i in range(300):
            s = Racy(i)
            total += await s
            assert s.thread is not None
            threads.append(s.thread)
        return total

    rec = RecordingReceiver()
    rec.run(body())
    rec.wait(10)
    for t in threads:
        t.join()
    assert rec.value == (sum(range(300)),)


def test_completing_twice_is_rejected() -> None:
    holder: dict[str, Any] = {}

    class Keep(sx.Sender[Any]):
        def connect(self, rcvr: Any) -> Any:
            class Op:
                def start(self) -> None:
                    holder["r"] = rcvr

            return Op()

    async def body() -> Any:
        return await Keep()

    rec = RecordingReceiver()
    drv = CoroutineDriver(body(), rec)
    rec.started = True
    drv.start()
    holder["r"].set_value(1)
    with pytest.raises(RuntimeError, match="already"):
        holder["r"].set_value(2)
    assert rec.value == (1,)


def test_driver_rejects_non_coroutines() -> None:
    with pytest.raises(TypeError, match="coroutine"):
        CoroutineDriver(42, RecordingReceiver())


def test_driver_state_is_restored_and_nested_drivers_work() -> None:
    from structexec._core import _hooks
    async def inner() -> int:
        return await sx.just(2)

    async def outer() -> int:
        # sync_wait inside a driven coroutine (not on a trio thread): a nested driver.
        (x,) = sx.sync_wait(inner())  # type: ignore[misc]
        return x + await sx.just(1)

    assert sx.sync_wait(outer()) == (3,)
    assert _hooks.driver_state.driver is None


def test_generic_awaitable_under_sync_wait() -> None:
    class Aw:
        def __await__(self) -> Any:
            v = yield from sx.just(5).__await__()
            return v + 1

    assert sx.sync_wait(Aw()) == (6,)


def test_sync_wait_works_from_trio_to_thread() -> None:
    async def body() -> int:
        return await sx.just(1) + 1

    async def main() -> Any:
        with pytest.raises(RuntimeError, match="running trio"):
            sx.sync_wait(sx.just(1))
        return await trio.to_thread.run_sync(lambda: sx.sync_wait(body()))

    assert trio.run(main) == (2,)
