"""Scheduler affinity of tasks off trio: [exec.task], [exec.affine.on];
P3552R1 4.5, P3941R1 3.1-3.5; docs/task.md "What a task is", docs/task.md "Scheduler affinity".

Each test records ``threading.get_ident()`` (and ``ManualScheduler.current()``, the scheduler
whose item is running on this thread) before and after awaits of senders that complete on
other threads. The trio-scheduler counterparts are in ``test_task_trio.py``.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from _helpers import LoopThread, here, loop_thread, wait_pending

import structexec as sx
from structexec.testing import ManualScheduler, RecordingReceiver

lt = pytest.fixture(loop_thread, name="lt")


lt2 = pytest.fixture(loop_thread, name="lt2")


# --------------------------------------------------------------------------- sync_wait (run_loop)


def test_sync_wait_task_resumes_on_the_waiting_thread(lt: LoopThread, lt2: LoopThread) -> None:
    main = threading.get_ident()
    where: list[tuple[str, int]] = []

    @sx.task
    async def t() -> int:
        where.append(("start", threading.get_ident()))
        await sx.schedule(lt.sch)
        where.append(("after schedule(lt)", threading.get_ident()))
        a = await sx.starts_on(lt2.sch, sx.just(1) | sx.then(lambda x: (x, threading.get_ident())))
        where.append(("after starts_on(lt2)", threading.get_ident()))
        b = await sx.continues_on(sx.just(2), lt.sch)
        where.append(("after continues_on(lt)", threading.get_ident()))
        return a[0] + b + (a[1] == lt2.ident)

    assert sx.sync_wait(t()) == (4,)
    assert where == [
        ("start", main),
        ("after schedule(lt)", main),
        ("after starts_on(lt2)", main),
        ("after continues_on(lt)", main),
    ]


def test_errors_are_also_raised_on_the_tasks_scheduler(lt: LoopThread) -> None:
    main = threading.get_ident()
    where: list[int] = []

    def boom() -> None:
        raise ValueError("on the loop thread")

    @sx.task
    async def t() -> str:
        try:
            await (sx.schedule(lt.sch) | sx.then(boom))
        except ValueError:
            where.append(threading.get_ident())
        return "handled"

    assert sx.sync_wait(t()) == ("handled",)
    assert where == [main]


# ------------------------------------------------------------------- ManualScheduler as SCHED


def test_resume_happens_in_an_item_of_the_tasks_scheduler(lt: LoopThread) -> None:
    home = ManualScheduler("home")
    where: list[tuple[int, ManualScheduler | None]] = []

    @sx.task
    async def t() -> str:
        where.append(here())
        await sx.schedule(lt.sch)
        where.append(here())
        return "done"

    r = RecordingReceiver(extra_env=sx.prop(sx.get_scheduler, home))
    r.run(t())
    wait_pending(home)  # the loop thread completed; the hop back is queued on `home`
    assert not r.done
    home.run_one()
    assert r.value == ("done",)
    assert where == [(threading.get_ident(), None), (threading.get_ident(), home)]
    assert r.scheduler is home


def test_senders_that_complete_inline_are_not_rescheduled() -> None:
    home = ManualScheduler("home")

    @sx.task
    async def child() -> int:
        return 4

    @sx.task
    async def t() -> int:
        a = await sx.just(1)
        b = await (sx.just(2) | sx.then(lambda x: x))
        c = len(repr(await sx.read_env(sx.get_scheduler))) > 0
        d = await sx.write_env(sx.just(3), sx.prop(sx.get_allocator, None))
        try:
            await sx.just_error(ValueError())
        except ValueError:
            pass
        e = await child()  # a task on the same scheduler: no hop either
        return a + b + int(c) + d + e

    r = RecordingReceiver(extra_env=sx.prop(sx.get_scheduler, home))
    r.run(t())
    assert r.value == (11,)
    assert home.started == 0  # not a single hop


def test_sender_completing_on_the_tasks_scheduler_is_not_rescheduled() -> None:
    home = ManualScheduler("home")

    @sx.task
    async def t() -> None:
        await sx.schedule(home)
        await sx.schedule(sx.task_scheduler(home))

    r = RecordingReceiver(extra_env=sx.prop(sx.get_scheduler, home))
    r.run(t())
    home.run_one()
    home.run_one()
    assert r.value == ()
    assert home.started == 2  # the two awaited schedules, no extra hop


def test_hop_back_is_unstoppable_and_unwinding_happens_on_the_scheduler(
    lt: LoopThread,
) -> None:
    home = ManualScheduler("home")
    where: list[Any] = []
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
        finally:
            where.append(here())

    r = RecordingReceiver(extra_env=sx.prop(sx.get_scheduler, home))
    r.run(t())
    r.request_stop()
    gate.set()
    wait_pending(home)
    hop_env = home.envs[-1]
    assert sx.is_unstoppable(sx.get_stop_token(hop_env))
    home.run_one()
    assert r.stopped
    assert where == [(threading.get_ident(), home)]
    assert r.live_callbacks_at_completion == 0


def test_nested_task_on_another_scheduler_is_not_inlined(lt: LoopThread) -> None:
    home = ManualScheduler("home")
    where: list[Any] = []

    @sx.task
    async def child() -> int:
        where.append(("child", threading.get_ident()))
        return 1

    @sx.task
    async def parent() -> int:
        v = await sx.starts_on(lt.sch, child())
        where.append(("parent", here()))
        return v

    r = RecordingReceiver(extra_env=sx.prop(sx.get_scheduler, home))
    r.run(parent())
    wait_pending(home)
    home.run_one()
    assert r.value == (1,)
    assert where == [("child", lt.ident), ("parent", (threading.get_ident(), home))]


# --------------------------------------------------------------------------- inline_scheduler


def test_inline_scheduler_type_turns_affinity_off(lt: LoopThread) -> None:
    class NoAffinity:
        scheduler_type = sx.inline_scheduler

    where: list[int] = []

    @sx.task(environment=NoAffinity)
    async def t() -> None:
        where.append(threading.get_ident())
        await sx.schedule(lt.sch)
        where.append(threading.get_ident())

    assert sx.sync_wait(t()) == ()
    assert where == [threading.get_ident(), lt.ident]


# ----------------------------------------------------------------- change_coroutine_scheduler


def test_change_coroutine_scheduler_is_deprecated_and_moves_the_task(
    lt: LoopThread,
) -> None:
    main = threading.get_ident()
    where: list[Any] = []

    @sx.task
    async def t() -> None:
        with pytest.deprecated_call():
            change = sx.change_coroutine_scheduler(lt.sch)
        previous = await change
        where.append(("after change", threading.get_ident()))
        where.append(("previous is the old scheduler", isinstance(previous, sx.task_scheduler)))
        await sx.just()
        await sx.schedule(sx.inline_scheduler())
        where.append(("still on the new one", threading.get_ident()))
        now = await sx.read_env(sx.get_scheduler)
        where.append(("get_scheduler is the new one", now == lt.sch))

    assert sx.sync_wait(t()) == ()
    assert where == [
        ("after change", lt.ident),
        ("previous is the old scheduler", True),
        ("still on the new one", lt.ident),
        ("get_scheduler is the new one", True),
    ]
    assert main != lt.ident


def test_change_coroutine_scheduler_rejects_fallible_and_cross_kind() -> None:
    caught: list[str] = []

    @sx.task
    async def t() -> None:
        with pytest.deprecated_call():
            c = sx.change_coroutine_scheduler(ManualScheduler(infallible=False))
        try:
            await c
        except TypeError as e:
            caught.append(str(e))

    assert sx.sync_wait(t()) == ()
    assert "infallible" in caught[0]
    with pytest.deprecated_call(), pytest.raises(TypeError, match="scheduler"):
        sx.change_coroutine_scheduler(42)


async def test_change_coroutine_scheduler_from_trio_to_another_kind_raises() -> None:
    loop = sx.run_loop()
    caught: list[str] = []

    @sx.task
    async def t() -> None:
        with pytest.deprecated_call():
            c = sx.change_coroutine_scheduler(loop.get_scheduler())
        try:
            await c
        except TypeError as e:
            caught.append(str(e))

    await t()
    assert "starts_on" in caught[0]
