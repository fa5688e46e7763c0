"""Timed schedulers: ``sx.now``, ``sx.schedule_after``, ``sx.schedule_at``,
``sx.is_timed_scheduler`` on the trio scheduler, ``run_loop`` and ``ManualScheduler``
(docs/time.md "Timed schedulers")."""

from __future__ import annotations

import math
import threading
import time
from typing import Any

import pytest
import trio
import trio.testing
from _helpers import rec_on
from _subproc import run_child

import structexec as sx
from structexec.testing import ManualScheduler, RecordingReceiver, no_leaks

VALUE_Q = sx.get_completion_scheduler[sx.set_value_t]


def on_loop(f: Any) -> Any:
    """A sender that runs ``f(sch)`` with the scheduler of the receiver's environment."""
    return sx.read_env(sx.get_scheduler) | sx.let_value(f)


# --------------------------------------------------------------------------- the free functions


def test_which_schedulers_are_timed() -> None:
    loop = sx.run_loop()
    assert sx.is_timed_scheduler(loop.get_scheduler())
    assert sx.is_timed_scheduler(ManualScheduler())
    assert not sx.is_timed_scheduler(sx.inline_scheduler())
    assert sx.is_timed_scheduler(sx.get_parallel_scheduler())  # tests/test_timed_parallel.py
    assert not sx.is_timed_scheduler(42)
    assert not sx.is_timed_scheduler(sx.just())


@pytest.mark.parametrize("bad", [-1, -0.001, math.nan, -math.inf])
@pytest.mark.parametrize("kind", ["free", "method"])
def test_negative_or_nan_seconds_raise_when_built(bad: float, kind: str) -> None:
    m = ManualScheduler()
    with pytest.raises(ValueError, match="seconds"):
        if kind == "free":
            sx.schedule_after(m, bad)
        else:
            m.schedule_after(bad)
    with pytest.raises(ValueError, match="seconds"):
        sx.run_loop().get_scheduler().schedule_after(bad)


def test_nan_deadline_and_non_numbers_raise() -> None:
    m = ManualScheduler()
    with pytest.raises(ValueError, match="deadline"):
        sx.schedule_at(m, math.nan)
    with pytest.raises(TypeError, match="seconds"):
        sx.schedule_after(m, "1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="deadline"):
        sx.schedule_at(m, None)  # type: ignore[arg-type]


@pytest.mark.parametrize("fn", ["now", "schedule_after", "schedule_at"])
def test_non_timed_scheduler_is_a_clear_type_error(fn: str) -> None:
    args = () if fn == "now" else (1.0,)
    for sch in (sx.inline_scheduler(), object()):
        with pytest.raises(TypeError, match="timed scheduler") as info:
            getattr(sx, fn)(sch, *args)
        assert "trio_scheduler" in str(info.value)  # it says which schedulers are timed
        assert "run_loop" in str(info.value)


def test_attributes_and_completion_signatures() -> None:
    m = ManualScheduler()
    s = sx.schedule_after(m, 1)
    assert VALUE_Q(sx.get_env(s)) is m
    assert sx.get_completion_signatures(s) == sx.completion_signatures(
        sx.set_value_t(), sx.set_stopped_t()
    )
    loop_sch = sx.run_loop().get_scheduler()
    assert VALUE_Q(sx.get_env(sx.schedule_at(loop_sch, 0))) == loop_sch


# --------------------------------------------------------------------------- ManualScheduler


def _record(m: ManualScheduler, sndr: Any, order: list[Any], tag: Any) -> RecordingReceiver:
    r = RecordingReceiver()
    r.run(sndr | sx.then(lambda: order.append((tag, m.now()))))
    return r


def test_manual_virtual_time_deadline_order_and_fifo() -> None:
    m = ManualScheduler()
    assert sx.now(m) == 0.0
    order: list[Any] = []
    for tag, d in [("a", 3), ("b", 1), ("c", 2), ("d", 1), ("e", 0)]:
        _record(m, sx.schedule_after(m, d), order, tag)
    _record(m, sx.schedule_at(m, 1), order, "f")
    assert m.pending_timers == 6 and m.next_deadline == 0.0
    assert order == []  # nothing fires before advance()
    assert m.advance(0) == 1
    assert order == [("e", 0.0)]
    assert m.advance(1.5) == 3
    # equal deadlines fire FIFO (b, d, f); now() is the deadline while a timer completes
    assert order[1:] == [("b", 1.0), ("d", 1.0), ("f", 1.0)]
    assert sx.now(m) == 1.5
    m.advance(10)
    assert [t for t, _ in order] == ["e", "b", "d", "f", "c", "a"]
    assert m.now() == 11.5 and m.pending_timers == 0 and m.next_deadline == math.inf


def test_manual_timers_started_by_completions_fire_in_the_same_advance() -> None:
    m = ManualScheduler()
    order: list[Any] = []
    r = RecordingReceiver()
    chain = (
        sx.schedule_after(m, 1)
        | sx.let_value(lambda: sx.schedule_after(m, 1))
        | sx.then(lambda: order.append(m.now()))
    )
    r.run(chain)
    m.advance(5)
    assert order == [2.0] and r.value == ()
    assert r.scheduler is m  # completed on the scheduler's agent (advance)


def test_manual_stop_of_a_pending_timer_completes_stopped_at_once() -> None:
    m = ManualScheduler()
    r = RecordingReceiver()
    r.run(sx.schedule_after(m, math.inf))
    assert m.pending_timers == 1
    r.request_stop()
    assert r.stopped and m.pending_timers == 0
    assert r.live_callbacks_at_completion == 0
    m.advance(1e9)
    assert r.completions == 1
    r.check()


def test_manual_stop_before_start_and_past_deadline() -> None:
    m = ManualScheduler()
    m.advance(10)
    r = RecordingReceiver()
    r.request_stop()
    r.run(sx.schedule_after(m, 1))
    assert r.stopped and m.pending_timers == 0
    r2 = RecordingReceiver()
    r2.run(sx.schedule_at(m, 3))  # in the past: due at the next advance
    assert not r2.done
    m.advance(0)
    assert r2.value == ()


def test_manual_advance_rejects_bad_input() -> None:
    m = ManualScheduler()
    for bad in (-1, math.nan, math.inf):
        with pytest.raises(ValueError):
            m.advance(bad)


def test_manual_inf_never_fires() -> None:
    m = ManualScheduler()
    r = RecordingReceiver()
    r.run(sx.schedule_at(m, math.inf))
    m.advance(1e300)
    assert not r.done
    r.request_stop()
    assert r.stopped


# --------------------------------------------------------------------------- run_loop


def test_sync_wait_schedule_after_on_the_loop() -> None:
    loop = sx.run_loop()
    sch = loop.get_scheduler()
    t0 = sch.now()
    result: list[Any] = []

    def drive() -> None:
        result.append(
            sx.sync_wait(
                on_loop(
                    lambda s: (
                        sx.schedule_after(s, 0.05)
                        | sx.then(lambda: (sx.is_timed_scheduler(s), time.monotonic()))
                    )
                )
            )
        )

    th = threading.Thread(target=drive)
    th.start()
    th.join(10)
    ((timed, t1),) = result[0]
    assert timed and t1 - t0 >= 0.05


def test_sync_wait_on_the_run_loop_scheduler() -> None:
    # sync_wait(schedule_after(loop_sch, ...)) with another thread running that loop
    loop = sx.run_loop()
    th = threading.Thread(target=loop.run)
    th.start()
    try:
        t0 = time.monotonic()
        got = sx.sync_wait(
            sx.schedule_after(loop.get_scheduler(), 0.05) | sx.then(threading.get_ident)
        )
        assert got == (th.ident,)
        assert time.monotonic() - t0 >= 0.05
    finally:
        loop.finish()
        th.join(10)


def test_run_loop_many_timers_fire_in_deadline_order() -> None:
    order: list[int] = []
    delays = [((i * 7919) % 100) / 5000 for i in range(500)]  # 0 .. 0.02 s, many equal

    def timers(s: Any) -> Any:
        base = sx.now(s) + 0.3  # one base: equal delays are equal deadlines (none passed at start)
        return sx.when_all(
            *[
                sx.schedule_at(s, base + d) | sx.then(lambda i=i: order.append(i))
                for i, d in enumerate(delays)
            ]
        )

    sx.sync_wait(on_loop(timers))
    assert sorted(order) == list(range(500))
    # deadline order; among equal delays, start (FIFO) order
    assert order == sorted(range(500), key=lambda i: (delays[i], i))


def test_run_loop_stop_of_a_pending_timer_from_another_thread() -> None:
    loop = sx.run_loop()
    sch = loop.get_scheduler()
    r = RecordingReceiver()
    r.run(sx.schedule_after(sch, 3600))
    assert loop._timers is not None and len(loop._timers) == 1
    th = threading.Thread(target=r.request_stop)
    th.start()
    th.join(10)
    assert r.stopped and len(loop._timers) == 0
    assert r.thread == th.ident  # completed at once, on the requesting thread
    loop.finish()
    loop.run()  # nothing pending: returns at once


def test_run_loop_waits_for_pending_timers_after_finish() -> None:
    loop = sx.run_loop()
    r = RecordingReceiver()
    r.run(sx.schedule_after(loop.get_scheduler(), 0.02))
    loop.finish()
    loop.run()
    assert r.value == ()


# --------------------------------------------------------------------------- trio


async def test_await_schedule_after_in_trio() -> None:
    sch = sx.trio_scheduler()
    assert sx.is_timed_scheduler(sch)
    t0 = trio.current_time()
    assert t0 <= sx.now(sch) <= trio.current_time()
    async with no_leaks():
        await sx.schedule_after(sch, 0)
        t0 = trio.current_time()
        await sx.schedule_after(sch, 0.01)
        assert trio.current_time() - t0 >= 0.01
        await sx.schedule_at(sch, trio.current_time() - 5)  # in the past: at once
        assert await (sx.schedule_after(sch, 0.001) | sx.then(lambda: 7)) == 7


async def test_await_schedule_after_is_cancelled_like_trio_sleep() -> None:
    sch = sx.trio_scheduler()
    async with no_leaks():
        with trio.move_on_after(0.01) as cs:
            await sx.schedule_after(sch, math.inf)
        assert cs.cancelled_caught
        with trio.move_on_after(0.01) as cs:
            await (sx.schedule_after(sch, math.inf) | sx.then(lambda: None))  # general path
        assert cs.cancelled_caught


async def test_trio_timers_fire_in_deadline_order_fifo_on_trio_thread(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Virtual time: every timer is started before its deadline. (With the real clock, a
    # loaded machine could let the deadlines of the later ones pass during the loop; a timer
    # started after its deadline is queued like schedule(), before the pending ones fire.)
    sch = sx.trio_scheduler()
    order: list[Any] = []
    me = threading.get_ident()
    async with no_leaks(), sx.counting_scope() as scope:
        now = sx.now(sch)
        for tag, d in [("a", 0.03), ("b", 0.01), ("c", 0.02), ("d", 0.01), ("e", 0)]:
            scope.spawn(
                sx.schedule_at(sch, now + d)
                | sx.then(lambda tag=tag: order.append((tag, threading.get_ident())))
            )
    assert [t for t, _ in order] == ["e", "b", "d", "c", "a"]
    assert all(tid == me for _, tid in order)


async def test_trio_stop_of_pending_timers_leaves_nothing() -> None:
    sch = sx.trio_scheduler()
    run = sch._run
    stopped = 0

    def count() -> None:
        nonlocal stopped
        stopped += 1

    async with no_leaks(), sx.counting_scope() as scope:
        for _ in range(100):
            scope.spawn(sx.schedule_after(sch, 3600) | sx.upon_stopped(count))
        await trio.lowlevel.checkpoint()
        assert len(run.timers) == 100 and run.timer_task is not None
        scope.request_stop()
        assert stopped == 100  # at once, inside request_stop
        assert len(run.timers) == 0
    assert run.timer_task is None  # the timer server exited (no_leaks counted the tasks)


async def test_trio_stop_from_another_thread() -> None:
    sch = sx.trio_scheduler()
    async with no_leaks():
        r = RecordingReceiver()
        r.run(sx.schedule_after(sch, 3600))
        await trio.lowlevel.checkpoint()
        await trio.to_thread.run_sync(r.request_stop)
        assert r.stopped and len(sch._run.timers) == 0
        assert r.thread != threading.get_ident()  # on the requesting thread
        assert r.live_callbacks_at_completion == 0


async def test_trio_timer_started_from_another_thread() -> None:
    sch = sx.trio_scheduler()
    async with no_leaks():
        r = RecordingReceiver()
        await trio.to_thread.run_sync(lambda: r.run(sx.schedule_after(sch, 0.01)))
        with trio.fail_after(5):
            await r.wait_trio()
        assert r.value == () and r.thread == threading.get_ident()
        r2 = RecordingReceiver()
        await trio.to_thread.run_sync(lambda: r2.run(sx.schedule_after(sch, 0)))
        with trio.fail_after(5):
            await r2.wait_trio()
        assert r2.value == () and r2.thread == threading.get_ident()


async def test_trio_earlier_timer_added_later_wakes_the_server(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Virtual time: the margin below measures the library, not how long a loaded machine
    # keeps this thread from running.
    sch = sx.trio_scheduler()
    order: list[str] = []
    async with no_leaks(), sx.counting_scope() as scope:
        scope.spawn(sx.schedule_after(sch, 0.2) | sx.then(lambda: order.append("late")))
        await trio.sleep(0.01)
        t0 = trio.current_time()
        scope.spawn(sx.schedule_after(sch, 0.01) | sx.then(lambda: order.append("early")))
        while not order:
            await trio.sleep(0.005)
        assert trio.current_time() - t0 < 0.15
    assert order == ["early", "late"]


def test_mock_clock_one_hour_is_instant() -> None:
    async def main() -> float:
        sch = sx.trio_scheduler()
        await sx.schedule_after(sch, 3600)
        async with sx.counting_scope() as scope:
            scope.spawn(sx.schedule_after(sch, 3600))  # the timer server path
        return sx.now(sch)

    t0 = time.monotonic()
    assert trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0)) == 7200.0
    assert time.monotonic() - t0 < 2


def test_trio_timer_after_the_run_raises() -> None:
    sch = trio.run(lambda: _sched())
    with pytest.raises(RuntimeError, match="finished"):
        RecordingReceiver().run(sx.schedule_after(sch, 1))


async def _sched() -> Any:
    return sx.trio_scheduler()


def test_trio_timers_pending_when_the_run_ends_complete_stopped() -> None:
    """docs/time.md "Timed schedulers": a timer of the trio scheduler still pending when the
    run ends (its main task returned) never fires; it completes ``set_stopped()`` on the trio
    thread, as a stop request would, whoever started it (a trio task, another thread,
    ``schedule_after`` or ``schedule_at``, an infinite delay). The run's timer queue used to
    be dropped with the operations in it: their consumers waited forever. The stop callback
    of each is deregistered (no callback left on the consumer's token)."""
    recs: list[RecordingReceiver] = []

    async def main() -> tuple[int, Any]:
        sch = sx.trio_scheduler()
        for sndr in (
            sx.schedule_after(sch, 3600),
            sx.schedule_at(sch, sx.now(sch) + 3600),
            sx.schedule_after(sch, math.inf),
        ):
            recs.append(rec_on(sch))
            recs[-1].run(sndr)
        other = RecordingReceiver()
        recs.append(other)
        await trio.to_thread.run_sync(other.run, sx.schedule_after(sch, 3600))
        await trio.testing.wait_all_tasks_blocked()
        assert not any(r.done for r in recs)
        return threading.get_ident(), sch

    trio_thread, sch = trio.run(main, clock=trio.testing.MockClock())
    assert [r.outcome for r in recs] == [("stopped",)] * 4
    assert {r.thread for r in recs} == {trio_thread}
    assert all(r.live_callbacks_at_completion == 0 for r in recs)
    with pytest.raises(RuntimeError, match="finished"):  # a start after the end: the error
        RecordingReceiver().run(sx.schedule_after(sch, 1))


def test_trio_timer_started_while_the_run_ends_completes_stopped() -> None:
    """A coroutine hosted in a system task (shielded, so it outlives the main task) awaits a
    trio timer after the main task has returned: the timer completes stopped at once (the
    run is ending; no timer fires any more) and the coroutine ends with ``Stopped``, so
    ``trio.run`` returns. It used to wait forever (a child process guards the hang)."""
    code = """
import trio, structexec as sx
out = []
async def late():
    await trio.sleep(0.01)  # the main task has returned by now
    try:
        await (sx.schedule_after(sx.trio_scheduler(), 3600) | sx.then(lambda: 1))
    except BaseException as e:
        out.append(type(e).__name__)
        raise
async def main():
    scope = sx.simple_counting_scope()
    sx.spawn(late(), scope.get_token(), sx.prop(sx.get_scheduler, sx.trio_scheduler()))
    return scope
scope = trio.run(main)
print(out, scope.count)
"""
    r = run_child(code, timeout=30)
    assert not r.timed_out, str(r)
    assert r.stdout.split() == ["['Stopped']", "0"], str(r)
    assert r.returncode == 0, str(r)


_RUN_ENDS_CHILD = """
import threading, trio, structexec as sx
def on_stop():
    raise KeyboardInterrupt("on_stop")
results = {}
def other(name, sndr):
    try:
        results[name] = ("returned", sx.sync_wait(sndr))
    except BaseException as e:
        results[name] = ("raised", type(e).__name__)
async def main():
    sch = sx.trio_scheduler()
    cases = {
        "after": sx.schedule_after(sch, 3600),
        "at": sx.schedule_at(sch, sx.now(sch) + 3600),
        "upon_stopped": sx.schedule_after(sch, 3600) | sx.upon_stopped(on_stop),
    }
    threads = [threading.Thread(target=other, args=kv) for kv in cases.items()]
    for t in threads:
        t.start()
    while len(sch._run.timers) < len(cases):  # every timer pending
        await trio.sleep(0.001)
    return threads
for t in trio.run(main):
    t.join(10)
    assert not t.is_alive(), "a sync_wait still waits"
print(sorted(results.items()))
"""


def test_trio_timers_pending_when_the_run_ends_release_other_threads() -> None:
    """The issue's reproducer: other threads' ``sync_wait(schedule_after(trio_sch, 3600))``
    and ``schedule_at`` return (stopped: ``None``) once the run has ended, instead of waiting
    forever; a ``KeyboardInterrupt`` from an ``upon_stopped`` on that path comes out of that
    thread's ``sync_wait``."""
    r = run_child(_RUN_ENDS_CHILD, timeout=30)
    assert not r.timed_out, str(r)
    assert r.stdout.strip() == (
        "[('after', ('returned', None)), ('at', ('returned', None)), "
        "('upon_stopped', ('raised', 'KeyboardInterrupt'))]"
    ), str(r)
    assert r.returncode == 0, str(r)


_RUN_ENDS_RACE_CHILD = """
import sys, threading, trio, structexec as sx
sys.setswitchinterval(1e-5)
errors = []  # list.append: atomic across threads
stop = threading.Event()
def hammer(sch, i):
    while not stop.is_set():
        for sndr in (sx.schedule(sch), sx.schedule_after(sch, 0), sx.schedule_after(sch, 3600),
                     sx.schedule_at(sch, 0.0)):
            try:
                sx.sync_wait(sndr)
            except RuntimeError as e:
                assert "finished" in str(e), e
                errors.append(i)
                return
async def main(n):
    sch = sx.trio_scheduler()
    ts = [threading.Thread(target=hammer, args=(sch, i)) for i in range(3)]
    for t in ts:
        t.start()
    await trio.sleep(0.002 * (n % 5))
    return ts
for n in range(20):
    ts = trio.run(main, n)
    for t in ts:
        t.join(10)
        assert not t.is_alive(), f"run {n}: a sync_wait still waits"
stop.set()
print("ok", len(errors))
"""


def test_trio_scheduler_work_racing_the_end_of_the_run_never_hangs() -> None:
    """Threads keep starting ``schedule``, ``schedule_after`` (due and pending) and
    ``schedule_at`` on the trio scheduler while its run ends (a tiny switch interval): each
    operation either completes or its start raises the clear ``RuntimeError`` of a finished
    run; none waits forever."""
    r = run_child(_RUN_ENDS_RACE_CHILD, timeout=120)
    assert not r.timed_out, str(r)
    out = r.stdout.split()
    assert out[0] == "ok" and int(out[1]) == 60, str(r)
    assert r.returncode == 0, str(r)


async def test_schedule_after_inside_a_task() -> None:
    @sx.task
    async def work() -> str:
        t0 = trio.current_time()
        await sx.schedule_after(sx.trio_scheduler(), 0)
        await sx.schedule_after(sx.trio_scheduler(), 0.01)
        assert trio.current_time() - t0 >= 0.01
        return "ok"

    async with no_leaks():
        assert await work() == "ok"
        r = rec_on(sx.trio_scheduler())
        r.run(work())
        with trio.fail_after(5):
            await r.wait_trio()
        assert r.value == ("ok",)
