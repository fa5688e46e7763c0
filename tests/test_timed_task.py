"""Time inside ``@sx.task``: a ``task_scheduler`` forwards ``now``/``schedule_after``/
``schedule_at`` to the scheduler it wraps when that one is timed (docs/time.md "Timed
schedulers"), so ``timeout``, ``stop_after`` and ``retry`` work in a task on trio."""

from __future__ import annotations

import pytest
import trio
import trio.testing

import structexec as sx


def test_task_scheduler_is_timed_exactly_when_its_scheduler_is() -> None:
    loop_sch = sx.run_loop().get_scheduler()
    assert sx.is_timed_scheduler(sx.task_scheduler(loop_sch))
    assert not sx.is_timed_scheduler(sx.task_scheduler(sx.inline_scheduler()))
    with pytest.raises(TypeError, match="timed scheduler"):
        sx.task_scheduler(sx.inline_scheduler()).schedule_after(1.0)


def test_task_scheduler_timer_names_the_task_scheduler_as_completion_scheduler() -> None:
    ts = sx.task_scheduler(sx.run_loop().get_scheduler())
    timer = ts.schedule_after(0.0)
    assert sx.get_completion_scheduler[sx.set_value_t](sx.get_env(timer)) is ts
    # On sync_wait's own (timed) loop:
    tick = sx.read_env(sx.get_scheduler) | sx.let_value(
        lambda s: sx.task_scheduler(s).schedule_after(0.01) | sx.then(lambda: "tick")
    )
    assert sx.sync_wait(tick) == ("tick",)


async def test_timeout_inside_a_task_on_trio(autojump_clock: trio.testing.MockClock) -> None:
    @sx.task
    async def body() -> str:
        sch = await sx.read_env(sx.get_scheduler)
        assert sx.is_timed_scheduler(sch)
        slow = sx.schedule_after(sx.trio_scheduler(), 5.0) | sx.then(lambda: "late")
        r: str = await (slow | sx.timeout(1.0) | sx.upon_error(lambda e: type(e).__name__))
        return r

    t0 = trio.current_time()
    assert await body() == "TimeoutError"
    assert trio.current_time() - t0 == pytest.approx(1.0)


async def test_retry_with_delay_inside_a_task(autojump_clock: trio.testing.MockClock) -> None:
    times: list[float] = []
    t0 = trio.current_time()

    def flaky() -> str:
        times.append(trio.current_time() - t0)
        if len(times) < 3:
            raise ConnectionError
        return "ok"

    @sx.task
    async def body() -> str:
        r: str = await (
            sx.just() | sx.then(flaky) | sx.retry(attempts=3, delay=1.0, backoff=2.0)
        )
        return r

    assert await body() == "ok"
    assert times == pytest.approx([0.0, 1.0, 3.0])


async def test_stop_after_inside_a_task_completes_stopped(
    autojump_clock: trio.testing.MockClock,
) -> None:
    @sx.task
    async def body() -> str:
        await (sx.schedule_after(sx.trio_scheduler(), 10.0) | sx.stop_after(2.0))
        return "not reached"  # pragma: no cover

    with pytest.raises((sx.Stopped, trio.Cancelled)), trio.CancelScope():
        await body()
