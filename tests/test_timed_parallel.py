"""The parallel scheduler is timed (docs/time.md "Which schedulers are timed",
docs/parallel.md "The scheduler"): one process-wide timer queue and daemon thread; due timers
complete on the backend's agents."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import trio

import structexec as sx
from structexec._parallel import _timer_thread
from structexec.backends import BackendError, ThreadPoolBackend
from structexec.testing import RecordingReceiver, no_leaks

scr = sx.system_context_replaceability
VALUE_Q = sx.get_completion_scheduler[sx.set_value_t]


@pytest.fixture
def restore_backend() -> Iterator[None]:
    previous = sx.set_parallel_scheduler_backend(None)
    sx.set_parallel_scheduler_backend(previous)
    try:
        yield
    finally:
        sx.set_parallel_scheduler_backend(previous)


class RaisingBackend(scr.parallel_scheduler_backend):
    def schedule(self, r: Any, s: memoryview) -> None:
        raise OSError("no more threads")


class ErrorBackend(scr.parallel_scheduler_backend):
    def schedule(self, r: Any, s: memoryview) -> None:
        r.set_error(RuntimeError("shut down"))


def _settled() -> bool:
    """No timer pending (the thread may take a moment to notice and exit)."""
    return _timer_thread._pending() == 0


def test_parallel_scheduler_is_timed() -> None:
    par = sx.get_parallel_scheduler()
    assert sx.is_timed_scheduler(par)
    t0 = time.monotonic()
    assert t0 <= sx.now(par) <= time.monotonic()
    snd = sx.schedule_after(par, 0.01)
    assert sx.get_env(snd).query(VALUE_Q) == par
    sigs = sx.get_completion_signatures(snd, sx.env())
    assert sx.set_value_t() in sigs and sx.set_stopped_t() in sigs


@pytest.mark.parametrize("bad", [-1, math.nan])
def test_bad_arguments_raise_when_built(bad: float) -> None:
    par = sx.get_parallel_scheduler()
    with pytest.raises(ValueError, match="seconds"):
        sx.schedule_after(par, bad)
    with pytest.raises(ValueError, match="seconds"):
        par.schedule_after(bad)
    with pytest.raises(ValueError, match="deadline"):
        sx.schedule_at(par, math.nan)


def test_schedule_after_completes_on_a_pool_thread_after_the_delay() -> None:
    par = sx.get_parallel_scheduler()
    t0 = time.monotonic()
    (th,) = sx.sync_wait(sx.schedule_after(par, 0.05) | sx.then(threading.current_thread))
    assert time.monotonic() - t0 >= 0.05
    assert th is not threading.current_thread()
    assert th.name.startswith("structexec-parallel")
    assert _settled()


def test_past_deadline_completes_on_the_backend_not_inside_start() -> None:
    par = sx.get_parallel_scheduler()
    r = RecordingReceiver()
    r.run(sx.schedule_at(par, par.now() - 1) | sx.then(lambda: threading.get_ident()))
    r.wait()
    assert r.value[0] != threading.get_ident()


def test_timers_fire_in_deadline_order() -> None:
    # One pool thread: the completions run in the order the timers fired (on more threads,
    # two completions handed over 20 ms apart could finish in either order on a loaded
    # machine). Both deadlines are still ahead when the timers start, even if this thread is
    # held up for a while (a deadline already passed at start completes at once, in start
    # order).
    with ThreadPoolBackend(1) as pool:
        par = sx.parallel_scheduler(pool)
        order: list[str] = []
        t = par.now() + 0.3
        late = sx.schedule_at(par, t + 0.04) | sx.then(lambda: order.append("late"))
        early = sx.schedule_at(par, t + 0.02) | sx.then(lambda: order.append("early"))
        sx.sync_wait(sx.when_all(late, early))
    assert order == ["early", "late"]
    assert _settled()


def test_stop_of_a_pending_timer_from_another_thread() -> None:
    par = sx.get_parallel_scheduler()
    r = RecordingReceiver()
    r.run(sx.schedule_after(par, 3600))
    assert _timer_thread._pending() == 1
    th = threading.Thread(target=r.stop_source.request_stop)
    th.start()
    th.join()
    assert r.done  # at once: inside request_stop, before it returned
    assert r.stopped and r.thread == th.ident  # on the requesting thread
    assert r.live_callbacks_at_completion == 0
    assert _timer_thread._pending() == 0
    r.check()


def test_inf_never_fires_until_stopped() -> None:
    par = sx.get_parallel_scheduler()
    r = RecordingReceiver()
    r.run(sx.schedule_after(par, math.inf))
    time.sleep(0.01)
    assert not r.events and _timer_thread._pending() == 1
    r.stop_source.request_stop()
    assert r.stopped and _settled()


def test_stopped_before_start_completes_stopped_inside_start() -> None:
    par = sx.get_parallel_scheduler()
    r = RecordingReceiver()
    r.stop_source.request_stop()
    r.run(sx.schedule_after(par, 0.01))
    assert r.stopped and _settled()


@pytest.mark.usefixtures("restore_backend")
def test_a_raising_backend_completes_the_timer_with_its_error() -> None:
    sx.set_parallel_scheduler_backend(RaisingBackend)
    par = sx.get_parallel_scheduler()
    r = RecordingReceiver()
    r.run(sx.schedule_after(par, 0.01))
    r.wait()
    assert isinstance(r.error, BackendError) and isinstance(r.error.__cause__, OSError)
    assert r.live_callbacks_at_completion == 0
    # a deadline already passed: the error comes from start, as for schedule()
    with pytest.raises(BackendError, match="no more threads"):
        sx.sync_wait(sx.schedule_after(par, 0))
    assert _settled()


@pytest.mark.usefixtures("restore_backend")
def test_a_backend_completing_with_an_error_passes_it_on() -> None:
    sx.set_parallel_scheduler_backend(ErrorBackend)
    par = sx.get_parallel_scheduler()
    with pytest.raises(RuntimeError, match="shut down"):
        sx.sync_wait(sx.schedule_after(par, 0.01))
    assert _settled()


def test_await_schedule_after_from_trio() -> None:
    par = sx.get_parallel_scheduler()

    async def main() -> str:
        async with no_leaks():
            await sx.schedule_after(par, 0.01)
            th: threading.Thread = await (
                sx.schedule_after(par, 0.01) | sx.then(threading.current_thread)
            )
        return th.name

    assert trio.run(main).startswith("structexec-parallel")
    assert _settled()


def test_cancelling_the_trio_task_stops_the_timer() -> None:
    par = sx.get_parallel_scheduler()

    async def main() -> None:
        async with no_leaks():
            with trio.move_on_after(0.01):
                await sx.schedule_after(par, 3600)
        assert _timer_thread._pending() == 0

    trio.run(main)


def test_timeout_with_the_parallel_scheduler_as_clock() -> None:
    par = sx.get_parallel_scheduler()
    env = sx.prop(sx.get_scheduler, par)
    slow = sx.schedule_after(par, 3600) | sx.then(lambda: "done")
    with pytest.raises(TimeoutError):
        sx.sync_wait(sx.write_env(sx.timeout(slow, 0.02), env))
    fast = sx.just("fast") | sx.timeout(1.0)
    assert sx.sync_wait(sx.write_env(fast, env)) == ("fast",)
    assert _settled()


def test_the_timer_thread_is_a_daemon_and_exits_when_idle() -> None:
    par = sx.get_parallel_scheduler()
    sx.sync_wait(sx.schedule_after(par, 0.01))
    threads = [t for t in threading.enumerate() if t.name == "structexec-timers"]
    assert all(t.daemon for t in threads)
    for t in threads:
        t.join(1.0)
    assert not _timer_thread._thread_running()
