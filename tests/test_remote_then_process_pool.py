"""then/upon_error/upon_stopped on a ProcessPoolBackend run in the worker processes
([exec.then], [exec.par.scheduler], [exec.snd.transform]; docs/parallel.md "Running any
function remotely").

The functions are module-level so that the workers can import them; one pool of 2 workers is
shared by the module (the tests that kill a worker or check for leaks make their own).
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

import structexec as sx
from structexec.backends import (
    BackendError,
    ProcessPoolBackend,
    ThreadPoolBackend,
    UnpicklableWorkError,
    WorkerDiedError,
)
from structexec.testing import RecordingReceiver


@pytest.fixture(scope="module")
def backend() -> Iterator[ProcessPoolBackend]:
    with ProcessPoolBackend(2) as b:
        yield b


@pytest.fixture
def par(backend: ProcessPoolBackend) -> sx.parallel_scheduler:
    return sx.parallel_scheduler(backend)


def worker_pids(backend: ProcessPoolBackend) -> set[int]:
    ex = backend._executor
    assert ex is not None
    return set(ex._processes)  # type: ignore[attr-defined]


class ParseError(Exception):
    pass


def parse(blob: bytes, scale: int) -> tuple[int, int]:
    return len(blob) * scale, os.getpid()


def getpid(*_: Any) -> int:
    return os.getpid()


def fail(*_: Any) -> None:
    raise ParseError("bad blob")


def describe_error(e: BaseException) -> tuple[str, str, int]:
    return type(e).__name__, str(e), os.getpid()


def make_lock() -> Any:
    return threading.Lock()  # cannot be pickled: it must never leave the worker


def lock_kind(lock: Any) -> tuple[str, int]:
    return type(lock).__name__, os.getpid()


def touch(path: str, *_: Any) -> int:
    Path(path).touch()
    return os.getpid()


def started_then_sleep(where: str, i: int, seconds: float) -> int:
    Path(where, f"started-{i}").write_text(str(os.getpid()))
    time.sleep(seconds)
    return i


def die(code: int) -> None:
    os._exit(code)


def test_then_after_schedule_runs_in_a_worker_and_sends_the_result_back(
    par: sx.parallel_scheduler, backend: ProcessPoolBackend
) -> None:
    size, pid = sx.sync_wait(sx.schedule(par) | sx.then(functools.partial(parse, b"abc", 2)))[0]
    assert size == 6
    assert pid != os.getpid() and pid in worker_pids(backend)


def test_then_after_continues_on_and_inside_starts_on_runs_in_a_worker(
    par: sx.parallel_scheduler, backend: ProcessPoolBackend
) -> None:
    (r,) = sx.sync_wait(sx.just(b"xy", 3) | sx.continues_on(par) | sx.then(parse))
    assert r[0] == 6 and r[1] in worker_pids(backend)
    # Late customisation: the then's predecessor (just) has no completion scheduler; the
    # receiver's environment inside starts_on says the scheduler is par ([exec.starts.on]).
    (r,) = sx.sync_wait(sx.starts_on(par, sx.just(b"xyz", 1) | sx.then(parse)))
    assert r[0] == 3 and r[1] in worker_pids(backend)
    # on(par, ...) likewise ([exec.on]).
    (r,) = sx.sync_wait(sx.on(par, sx.just(b"abcd", 1) | sx.then(parse)))
    assert r[0] == 4 and r[1] in worker_pids(backend)
    # ... and after a bulk on par.
    (pid,) = sx.sync_wait(
        sx.schedule(par) | sx.bulk(sx.par, 2, lambda i: None) | sx.then(getpid)
    )
    assert pid in worker_pids(backend)


def test_upon_error_and_upon_stopped_run_in_a_worker(
    par: sx.parallel_scheduler, backend: ProcessPoolBackend
) -> None:
    (r,) = sx.sync_wait(
        sx.just_error(ParseError("boom")) | sx.continues_on(par) | sx.upon_error(describe_error)
    )
    assert r[:2] == ("ParseError", "boom") and r[2] in worker_pids(backend)
    (pid,) = sx.sync_wait(sx.just_stopped() | sx.continues_on(par) | sx.upon_stopped(getpid))
    assert pid in worker_pids(backend)
    # A then that does not match passes the completion on without a call.
    with pytest.raises(ParseError):
        sx.sync_wait(sx.just_error(ParseError("x")) | sx.continues_on(par) | sx.then(getpid))


def test_consecutive_thens_run_in_one_call_and_values_between_them_stay_in_the_worker(
    par: sx.parallel_scheduler, backend: ProcessPoolBackend
) -> None:
    # A lock cannot be pickled: two calls would fail sending it back.
    (r,) = sx.sync_wait(sx.schedule(par) | sx.then(make_lock) | sx.then(lock_kind))
    assert r[0] == "lock" and r[1] in worker_pids(backend)
    # then, upon_error and then again, fused: the error raised by fail is handled there.
    (r,) = sx.sync_wait(
        sx.schedule(par) | sx.then(fail) | sx.upon_error(describe_error) | sx.then(lambda t: t)
    )
    assert r[:2] == ("ParseError", "bad blob") and r[2] in worker_pids(backend)


async def test_then_awaited_by_a_task_on_par_runs_in_a_worker(
    par: sx.parallel_scheduler, backend: ProcessPoolBackend
) -> None:
    """A task cannot itself run on the parallel scheduler (a task's scheduler must be
    infallible, P3941R1); what it awaits on par can: the then runs in a worker."""

    @sx.task
    async def work() -> tuple[tuple[int, int], tuple[int, int]]:
        a = await sx.starts_on(par, sx.just(b"abcd", 1) | sx.then(parse))
        b = await (sx.schedule(par) | sx.then(functools.partial(parse, b"ab", 1)))
        return a, b

    (size, pid), (size2, pid2) = await work()
    assert (size, size2) == (4, 2)
    assert {pid, pid2} <= worker_pids(backend)
    with pytest.raises(TypeError, match="infallible"):
        await sx.starts_on(par, work())


def test_let_value_stays_in_this_process(par: sx.parallel_scheduler) -> None:
    (pid,) = sx.sync_wait(sx.schedule(par) | sx.let_value(lambda: sx.just(os.getpid())))
    assert pid == os.getpid()


def test_the_thread_pool_backend_still_runs_then_on_its_threads() -> None:
    with ThreadPoolBackend(2) as tp:
        sch = sx.parallel_scheduler(tp)
        (r,) = sx.sync_wait(
            sx.schedule(sch)
            | sx.then(lambda: (os.getpid(), threading.current_thread().name, make_lock()))
        )
    assert r[0] == os.getpid()
    assert r[1].startswith("structexec-pool") and r[1] != threading.current_thread().name


def test_errors_keep_their_type_with_the_remote_traceback(par: sx.parallel_scheduler) -> None:
    with pytest.raises(ParseError, match="bad blob") as info:
        sx.sync_wait(sx.schedule(par) | sx.then(fail))
    assert "in fail" in str(info.value.__cause__)


def test_unpicklable_functions_and_values_fail_before_anything_is_sent(
    par: sx.parallel_scheduler, tmp_path: Path
) -> None:
    lock = threading.Lock()
    flag = str(tmp_path / "ran")
    with pytest.raises(UnpicklableWorkError, match="the then function") as info:
        sx.sync_wait(sx.schedule(par) | sx.then(lambda: touch(flag, lock)))
    assert "the variable 'lock'" in str(info.value)
    with pytest.raises(UnpicklableWorkError, match=r"partial\(touch, \.\.\.\)") as info:
        sx.sync_wait(sx.schedule(par) | sx.then(functools.partial(touch, flag, lock)))
    assert "argument #1" in str(info.value)
    with pytest.raises(UnpicklableWorkError, match="value #1 sent by the predecessor"):
        sx.sync_wait(sx.just(flag, lock) | sx.continues_on(par) | sx.then(touch))
    assert not Path(flag).exists()
    assert isinstance(info.value, TypeError)


def test_an_unpicklable_result_is_named(par: sx.parallel_scheduler) -> None:
    with pytest.raises(UnpicklableWorkError, match="value #0 of the result") as info:
        sx.sync_wait(sx.schedule(par) | sx.then(make_lock))
    assert "lock" in str(info.value)


def test_base_exceptions_in_a_worker_become_backend_errors(par: sx.parallel_scheduler) -> None:
    with pytest.raises(BackendError, match="KeyboardInterrupt"):
        sx.sync_wait(sx.schedule(par) | sx.then(functools.partial(raise_base, KeyboardInterrupt)))


def raise_base(t: type[BaseException]) -> None:
    raise t()


def test_a_worker_that_dies_gives_worker_died_error_and_the_pool_recovers() -> None:
    with ProcessPoolBackend(1) as b:
        par = sx.parallel_scheduler(b)
        with pytest.raises(WorkerDiedError, match="died while running the call of"):
            sx.sync_wait(sx.schedule(par) | sx.then(functools.partial(die, 3)))
        (pid,) = sx.sync_wait(sx.schedule(par) | sx.then(getpid))
        assert pid != os.getpid()


def test_a_stop_cancels_queued_calls_and_lets_the_running_one_finish(tmp_path: Path) -> None:
    with ProcessPoolBackend(1) as b:
        par = sx.parallel_scheduler(b)
        sx.sync_wait(sx.schedule(par) | sx.then(getpid))  # the worker is up
        running = RecordingReceiver()
        running.run(  # it runs until the release file exists (a loaded machine cannot end it)
            sx.schedule(par) | sx.then(functools.partial(started_then_wait, str(tmp_path), 0))
        )
        queued = RecordingReceiver()
        queued.run(
            sx.schedule(par) | sx.then(functools.partial(started_then_sleep, str(tmp_path), 1, 0))
        )
        queued.request_stop()
        queued.wait(5)
        assert queued.stopped  # at once, not after the running call
        deadline = time.monotonic() + 20
        while not (tmp_path / "started-0").exists() and time.monotonic() < deadline:
            time.sleep(0.005)
        running.request_stop()
        (tmp_path / "release").touch()
        running.wait(10)
        assert running.value == (0,)  # a running call is not interrupted: its result arrives
    assert started_calls(str(tmp_path)) == [0]


async def test_request_stop_on_a_scope_with_100_queued_calls(tmp_path: Path) -> None:
    """request_stop() on a scope of 100 remote calls on 2 workers: the 98 queued calls are
    stopped within seconds and never run (no side-effect file); the 2 running calls finish
    and deliver their values; after the backend closes no worker process is left."""
    b = ProcessPoolBackend(2)
    par = sx.parallel_scheduler(b)
    await (sx.schedule(par) | sx.then(getpid))
    pids = worker_pids(b)
    where = str(tmp_path)
    futures = []
    async with sx.counting_scope() as scope:
        for i in range(100):
            fn = functools.partial(started_then_wait, where, i)
            futures.append(scope.spawn_future(sx.schedule(par) | sx.then(fn)))
        with trio.fail_after(20):
            while len(started_calls(where)) < 2:
                await trio.sleep(0.01)
        t0 = time.monotonic()
        scope.request_stop()
        with trio.fail_after(20):
            for f in futures[2:]:
                with pytest.raises(sx.Stopped):
                    await f
        stopped_in = time.monotonic() - t0
        (tmp_path / "release").touch()
    assert stopped_in < 5
    assert [await f for f in futures[:2]] == [0, 1]
    # Only the two that were running when stop was requested ever started.
    assert started_calls(where) == [0, 1]
    b.shutdown()
    assert_exited(pids)


def started_calls(where: str) -> list[int]:
    """The calls that wrote their side-effect file in ``where``."""
    return sorted(int(n.split("-")[1]) for n in os.listdir(where) if n.startswith("started-"))


def started_then_wait(where: str, i: int) -> int:
    Path(where, f"started-{i}").write_text(str(os.getpid()))
    deadline = time.monotonic() + 30
    while not Path(where, "release").exists() and time.monotonic() < deadline:
        time.sleep(0.005)
    return i


def alive(pid: int) -> bool:
    """``pid`` runs (a zombie, exited and not yet reaped by its parent, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def assert_exited(pids: set[int]) -> None:
    """Every process in ``pids`` has exited (within a few seconds: the forkserver reaps
    its children asynchronously)."""
    assert pids
    deadline = time.monotonic() + 10
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not [p for p in pids if alive(p)]


async def test_operation_tree_shows_the_worker_process_of_a_running_call(
    par: sx.parallel_scheduler, tmp_path: Path
) -> None:
    async with sx.counting_scope(name="remote") as scope:
        # The call runs until the snapshot is taken (a call that only sleeps a while could
        # have finished by then on a loaded machine).
        fut = scope.spawn_future(
            sx.schedule(par) | sx.then(functools.partial(started_then_wait, str(tmp_path), 0))
        )
        marker = tmp_path / "started-0"
        try:
            with trio.fail_after(20):
                while not marker.exists() or not marker.read_text():
                    await trio.sleep(0.01)
            pid = int(marker.read_text())
            states = [op.state for sc in sx.operation_tree() if sc.name == "remote"
                      for op in sc.operations]
        finally:
            (tmp_path / "release").touch()
        assert len(states) == 1 and states[0].startswith(
            f"running on worker process {pid} of <ProcessPoolBackend"
        ), states
        assert await fut == 0


def test_remote_calls_leave_no_cyclic_garbage(par: sx.parallel_scheduler) -> None:
    from _helpers import cyclic_garbage_of_sync

    def calls() -> None:
        assert sx.sync_wait(sx.schedule(par) | sx.then(functools.partial(parse, b"a", 1)))
        # (an error raised out of sync_wait holds its frame in a cycle, on every backend: the
        # remote error is handled by a local let_error instead)
        local = sx.let_error(lambda e: sx.just(type(e).__name__))
        assert sx.sync_wait(sx.schedule(par) | sx.then(fail) | local) == ("ParseError",)
        (r,) = sx.sync_wait(sx.just(b"ab", 1) | sx.continues_on(par) | sx.then(parse))
        assert r[0] == 2

    assert cyclic_garbage_of_sync(calls) == 0


def test_shutdown_fails_queued_calls_and_waits_for_the_running_one(tmp_path: Path) -> None:
    b = ProcessPoolBackend(1)
    par = sx.parallel_scheduler(b)
    sx.sync_wait(sx.schedule(par) | sx.then(getpid))
    running = RecordingReceiver()
    running.run(sx.schedule(par) | sx.then(functools.partial(started_then_wait, str(tmp_path), 0)))
    queued = RecordingReceiver()
    queued.run(sx.schedule(par) | sx.then(functools.partial(started_then_wait, str(tmp_path), 1)))
    deadline = time.monotonic() + 20
    while not started_calls(str(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.005)
    b.shutdown(wait=False)  # the queued call fails at once; the running one goes on
    (tmp_path / "release").touch()
    queued.wait(10)
    running.wait(10)
    assert isinstance(queued.error, BackendError) and "shut down" in str(queued.error)
    assert running.value == (0,)
    assert started_calls(str(tmp_path)) == [0]
    with pytest.raises(BackendError, match="shut down"):
        sx.sync_wait(sx.schedule(par) | sx.then(getpid))


async def test_a_trio_cancellation_cancels_a_queued_call(tmp_path: Path) -> None:
    """trio's idiom: a cancel scope around the await. The call waiting for the busy worker is
    cancelled when the deadline passes (it never runs); the await ends then, not when the
    worker is free."""
    where = str(tmp_path)
    with ProcessPoolBackend(1) as b:
        par = sx.parallel_scheduler(b)
        await (sx.schedule(par) | sx.then(getpid))
        busy = RecordingReceiver()
        busy.run(sx.schedule(par) | sx.then(functools.partial(started_then_wait, where, 0)))
        with trio.fail_after(20):
            while not started_calls(where):
                await trio.sleep(0.01)
        with trio.move_on_after(0.2) as cs:
            await (sx.schedule(par) | sx.then(functools.partial(started_then_wait, where, 1)))
        assert cs.cancelled_caught
        (tmp_path / "release").touch()
        await trio.to_thread.run_sync(busy.wait, 10)
        assert busy.value == (0,)
    assert started_calls(where) == [0]



def scaled_sum(xs: Any, scale: int = 1) -> tuple[int, int]:
    return sum(xs) * scale, os.getpid()


def test_a_call_sent_again_sends_what_its_function_holds_now(
    par: sx.parallel_scheduler, backend: ProcessPoolBackend
) -> None:
    """A chain whose functions cannot change (a partial of plain numbers and strings) is
    pickled once and reused; one whose partial holds a list, keywords or attributes is
    pickled on every run, so a change between two runs reaches the worker ([exec.then])."""
    here = os.getpid()
    fixed = sx.schedule(par) | sx.then(functools.partial(parse, b"abc", 2))
    for _ in range(3):
        size, pid = sx.sync_wait(fixed)[0]
        assert size == 6 and pid != here
    assert any(payload for _, payload in backend._call_payloads.values())
    xs = [1, 2]
    by_list = sx.schedule(par) | sx.then(functools.partial(scaled_sum, xs))
    assert sx.sync_wait(by_list)[0][0] == 3
    xs.append(10)
    assert sx.sync_wait(by_list)[0][0] == 13
    p = functools.partial(scaled_sum, [1, 2], scale=1)
    by_kw = sx.schedule(par) | sx.then(p)
    assert sx.sync_wait(by_kw)[0][0] == 3
    p.keywords["scale"] = 5
    assert sx.sync_wait(by_kw)[0][0] == 15
    q = functools.partial(parse, b"abcd", 1)
    by_attr = sx.schedule(par) | sx.then(q)
    assert sx.sync_wait(by_attr)[0][0] == 4
    q.__dict__["note"] = "set later"
    assert sx.sync_wait(by_attr)[0][0] == 4  # (pickled afresh, with its attribute)


def scaled_len(blob: bytes, scale: int = 1) -> tuple[int, int]:
    return len(blob) * scale, os.getpid()


def test_a_reused_call_whose_partial_gets_a_keyword_later_is_sent_afresh(
    par: sx.parallel_scheduler, backend: ProcessPoolBackend
) -> None:
    """A partial of plain values is pickled once and reused while it stays so; a keyword
    added to it later (its ``keywords`` dict is mutable) makes the next run pickle it again,
    so the worker runs what the partial holds now, not the bytes of the first run: whether a
    chain may be reused is decided on every call, not remembered ([exec.then])."""
    p = functools.partial(scaled_len, b"ab")
    chain = sx.schedule(par) | sx.then(p)
    assert sx.sync_wait(chain)[0][0] == 2
    assert sx.sync_wait(chain)[0][0] == 2  # (the payload of the first run, reused)
    assert any(stages[0][1] is p for stages, _ in backend._call_payloads.values())
    p.keywords["scale"] = 5
    assert sx.sync_wait(chain)[0][0] == 10
