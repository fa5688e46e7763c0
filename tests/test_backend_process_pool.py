"""ProcessPoolBackend: bulk work in worker processes ([exec.par.scheduler],
[exec.sysctxrepl.recvproxy], [exec.sysctxrepl.psb], docs/parallel.md).

The bulk functions are module-level so that the worker processes can import them.
"""

from __future__ import annotations

import array
import os
import threading
from collections.abc import Iterator
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any, NoReturn

import pytest
from _gated import gated, indices_that_ran, wait_for_an_index

import structexec as sx
from structexec.backends import (
    BackendError,
    ProcessPoolBackend,
    UnpicklableWorkError,
    WorkerDiedError,
)
from structexec.testing import RecordingReceiver


@pytest.fixture(scope="module")
def backend() -> Iterator[ProcessPoolBackend]:
    with ProcessPoolBackend(2) as b:
        yield b


@pytest.fixture
def sch(backend: ProcessPoolBackend) -> sx.parallel_scheduler:
    return sx.parallel_scheduler(backend)


def squares(i: int, out: list[int]) -> None:
    out[i] = i * i


def write_pid(i: int, out: list[int]) -> None:
    out[i] = os.getpid()


def fill_chunk(
    b: int, e: int, buf: bytearray, arr: array.array[int], config: dict[str, int]
) -> None:
    for i in range(b, e):
        buf[i] = i % 256
        arr[i] = 2 * i
    config["touched"] = 1  # a dict is not copied back


def touch(i: int, where: str, _lock: Any) -> None:
    Path(where, str(i)).touch()


def raise_value_error(i: int) -> None:
    if i == 5:
        raise ValueError(f"bad index {i}")


def die(i: int) -> None:
    if i == 2:
        os._exit(7)


def test_results_of_the_chunks_reach_the_parent(sch: sx.parallel_scheduler) -> None:
    out = [0] * 50
    pids = [0] * 50
    s = sx.just(out) | sx.continues_on(sch) | sx.bulk(sx.par, 50, squares)
    assert sx.sync_wait(s) == ([i * i for i in range(50)],)
    sx.sync_wait(sx.just(pids) | sx.continues_on(sch) | sx.bulk_unchunked(sx.par, 50, write_pid))
    assert os.getpid() not in pids and len(set(pids)) >= 1


def test_chunked_results_of_several_sequence_types_are_merged(sch: sx.parallel_scheduler) -> None:
    buf = bytearray(300)
    arr = array.array("q", [0] * 300)
    config = {"touched": 0}
    r = sx.sync_wait(
        sx.just(buf, arr, config) | sx.continues_on(sch) | sx.bulk_chunked(sx.par, 300, fill_chunk)
    )
    assert r is not None and r[0] is buf and r[1] is arr
    assert buf == bytearray(i % 256 for i in range(300))
    assert list(arr) == [2 * i for i in range(300)]
    assert config == {"touched": 0}  # changes to other values stay in the worker


class FakeArray:
    """Quacks like a 1-D numpy array as far as the copy-back rule is concerned."""

    __array_interface__: dict[str, Any] = {}
    ndim = 1

    def __init__(self, n: int) -> None:
        self.data = [0] * n

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, k: Any) -> Any:
        return self.data[k]

    def __setitem__(self, k: Any, v: Any) -> None:
        self.data[k] = v


def cube(i: int, arr: FakeArray, short: list[int]) -> None:
    arr[i] = i**3
    short[0] = 99  # shorter than the shape: not copied back


def test_array_like_values_are_merged_and_short_lists_are_not(sch: sx.parallel_scheduler) -> None:
    arr = FakeArray(16)
    short = [0]
    sx.sync_wait(sx.just(arr, short) | sx.continues_on(sch) | sx.bulk(sx.par, 16, cube))
    assert arr.data == [i**3 for i in range(16)]
    assert short == [0]


def test_sequential_policy_runs_the_whole_range_in_one_worker(sch: sx.parallel_scheduler) -> None:
    pids = [0] * 20
    sx.sync_wait(sx.just(pids) | sx.continues_on(sch) | sx.bulk(sx.seq, 20, write_pid))
    assert len(set(pids)) == 1 and pids[0] != os.getpid()


def test_unpicklable_work_fails_before_any_chunk_runs(
    sch: sx.parallel_scheduler, tmp_path: Path
) -> None:
    lock = threading.Lock()
    s = sx.just(str(tmp_path), lock) | sx.continues_on(sch) | sx.bulk(sx.par, 10, touch)
    with pytest.raises(UnpicklableWorkError) as info:
        sx.sync_wait(s)
    assert isinstance(info.value, TypeError)
    msg = str(info.value)
    assert "value #1" in msg and "lock" in msg and "no chunk was run" in msg
    assert list(tmp_path.iterdir()) == []
    # A function that closes over something unpicklable is named as the culprit.

    def uses_lock(i: int) -> None:
        with lock:
            pass

    with pytest.raises(UnpicklableWorkError, match=r"the bulk function \(function .*uses_lock"):
        sx.sync_wait(sx.schedule(sch) | sx.bulk(sx.par, 3, uses_lock))


def test_a_lambda_runs_in_the_worker_processes(sch: sx.parallel_scheduler) -> None:
    """The work is pickled with cloudpickle: lambdas travel by value ([exec.sysctxrepl.psb])."""
    out = [0] * 40
    plus_one = sx.bulk(sx.par, 40, lambda i, o: o.__setitem__(i, i + 1))
    sx.sync_wait(sx.just(out) | sx.continues_on(sch) | plus_one)
    assert out == [i + 1 for i in range(40)]
    pids = [0] * 8
    sx.sync_wait(
        sx.just(pids)
        | sx.continues_on(sch)
        | sx.bulk(sx.par, 8, lambda i, p: p.__setitem__(i, os.getpid()))
    )
    assert os.getpid() not in pids


def test_a_closure_runs_in_the_worker_processes(sch: sx.parallel_scheduler) -> None:
    """A nested function and the values it closes over are sent by value; a chunked closure
    too. The worker's copies of the captured values are its own (nothing comes back through
    them), as with the values the predecessor sends."""
    offset = 1000
    table = {"scale": 3}

    def scaled(i: int, out: list[int]) -> None:
        out[i] = offset + table["scale"] * i

    def chunk(b: int, e: int, out: list[int]) -> None:
        for i in range(b, e):
            out[i] = -i - offset

    out = [0] * 30
    sx.sync_wait(sx.just(out) | sx.continues_on(sch) | sx.bulk(sx.par, 30, scaled))
    assert out == [1000 + 3 * i for i in range(30)]
    sx.sync_wait(sx.just(out) | sx.continues_on(sch) | sx.bulk_chunked(sx.par, 30, chunk))
    assert out == [-i - 1000 for i in range(30)]

    def fails(i: int) -> None:
        if i == offset - 997:
            raise KeyError(f"closure {i}")

    with pytest.raises(KeyError, match="closure 3"):
        sx.sync_wait(sx.schedule(sch) | sx.bulk(sx.par, 10, fails))


def test_errors_keep_their_type(sch: sx.parallel_scheduler) -> None:
    with pytest.raises(ValueError, match="bad index 5"):
        sx.sync_wait(sx.schedule(sch) | sx.bulk(sx.par, 20, raise_value_error))


def test_a_worker_that_dies_is_reported_and_the_pool_is_replaced(
    sch: sx.parallel_scheduler,
) -> None:
    with pytest.raises(WorkerDiedError, match="a worker process died") as info:
        sx.sync_wait(sx.schedule(sch) | sx.bulk(sx.par, 8, die))
    assert isinstance(info.value, BackendError)
    out = [0] * 10
    s = sx.just(out) | sx.continues_on(sch) | sx.bulk(sx.par, 10, squares)
    assert sx.sync_wait(s) == ([i * i for i in range(10)],)


def test_a_submission_the_pool_refuses_is_reported_and_the_pool_is_replaced() -> None:
    """``submit`` raising ``BrokenProcessPool`` (the pool broke after the operation took it):
    a bulk operation and a remote call each complete with a ``WorkerDiedError`` caused by it,
    and the next operation runs on a fresh pool ([exec.par.scheduler])."""
    with ProcessPoolBackend(1) as b:
        sch = sx.parallel_scheduler(b)
        cases = [
            ("a chunk", sx.just([0]) | sx.continues_on(sch) | sx.bulk(sx.par, 1, squares)),
            ("the call", sx.schedule(sch) | sx.then(os.getpid)),
        ]
        for what, sndr in cases:
            assert sx.sync_wait(sx.schedule(sch) | sx.then(os.getpid))[0] != os.getpid()
            ex = b._executor
            assert ex is not None
            broken = BrokenProcessPool("refused by the test")

            def refuse(*args: object, _exc: BaseException = broken) -> NoReturn:
                raise _exc

            ex.submit = refuse  # type: ignore[method-assign]
            match = f"could not submit {what}: refused by"
            with pytest.raises(WorkerDiedError, match=match) as info:
                sx.sync_wait(sndr)
            assert info.value.__cause__ is broken
            assert b._executor is not ex
        assert sx.sync_wait(cases[0][1]) == ([0],)
        assert sx.sync_wait(cases[1][1])[0] != os.getpid()


def test_stop_cancels_queued_chunks_and_stops_running_ones(
    sch: sx.parallel_scheduler, tmp_path: Path
) -> None:
    """The stop request arrives while an index runs (each waits for a release file): the
    running chunks stop at their next index and the queued ones never start, so no index
    but the ones that were running (one per worker process at most) ever runs."""
    sx.sync_wait(sx.schedule(sch) | sx.bulk(sx.par, 4, squares_noop))  # workers are up
    where = str(tmp_path)
    out = [0] * 400  # 8 chunks of 50 indices on 2 processes
    rec = RecordingReceiver()
    rec.run(sx.just(out, where) | sx.continues_on(sch) | sx.bulk(sx.par, 400, gated))
    wait_for_an_index(where)
    rec.request_stop()
    (tmp_path / "release").touch()
    rec.wait(30)
    assert rec.stopped
    assert rec.live_callbacks_at_completion == 0
    assert sum(out) == 0  # a stopped chunk brings nothing back
    assert 1 <= len(indices_that_ran(where)) <= 2, indices_that_ran(where)


def test_schedule_and_completions_stay_in_this_process(sch: sx.parallel_scheduler) -> None:
    """The then function runs in a worker (docs/parallel.md "Running any function
    remotely"); the completion comes back to one of the scheduler's threads here."""
    rec = RecordingReceiver()
    rec.run(sx.schedule(sch) | sx.then(lambda: os.getpid()))
    rec.wait()
    assert rec.value is not None and rec.value != (os.getpid(),)
    names = {t.ident: t.name for t in threading.enumerate()}
    assert names[rec.thread].startswith("structexec-parallel")
    rec2 = RecordingReceiver()
    rec2.run(sx.schedule(sch) | sx.bulk(sx.par, 4, squares_noop))
    rec2.wait()
    assert rec2.value == ()
    assert names.get(rec2.thread, "structexec-parallel").startswith("structexec-parallel")


def squares_noop(i: int) -> None:
    pass


def test_shape_zero_and_stop_before_start(sch: sx.parallel_scheduler) -> None:
    assert sx.sync_wait(sx.schedule(sch) | sx.bulk(sx.par, 0, squares_noop)) == ()
    rec = RecordingReceiver()
    rec.request_stop()
    rec.run(sx.just() | sx.continues_on(sch) | sx.bulk(sx.par, 4, squares_noop))
    rec.wait()
    assert rec.stopped


def test_shut_down_backend_fails_cleanly() -> None:
    b = ProcessPoolBackend(1)
    b.shutdown()
    with pytest.raises(BackendError, match="shut down"):
        sx.sync_wait(sx.schedule(sx.parallel_scheduler(b)) | sx.bulk(sx.par, 2, squares_noop))


def test_constructor_checks() -> None:
    with pytest.raises(TypeError):
        ProcessPoolBackend("2")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        ProcessPoolBackend(0)


def thread_name() -> str:
    return threading.current_thread().name


def test_a_continuation_after_the_bulk_runs_on_the_thread_pool(
    sch: sx.parallel_scheduler,
) -> None:
    """Only a hand-off consumer (sync_wait, await) is completed on the executor's result
    thread; anything else runs on the backend's own agents ([exec.sysctxrepl.psb])."""
    # (let_value runs its function in this process, where the bulk completed; a then would
    # run in a worker.)
    local = sx.let_value(lambda: sx.just(thread_name()))
    rec = RecordingReceiver()
    rec.run(sx.schedule(sch) | sx.bulk(sx.par, 4, squares_noop) | local)
    rec.wait()
    assert rec.value is not None and rec.value[0].startswith("structexec-parallel")
    res = sx.sync_wait(sx.schedule(sch) | sx.bulk(sx.par, 4, squares_noop) | local)
    assert res is not None and res[0].startswith("structexec-parallel")


async def test_await_in_trio_gets_the_results_and_cancellation_stops_the_work(
    sch: sx.parallel_scheduler, tmp_path: Path
) -> None:
    """``await`` of bulk work on the process pool from a trio task (the hand-off completion
    wakes the task directly); a trio cancellation stops the running chunks."""
    import trio

    out = [0] * 50
    res = await (sx.just(out) | sx.continues_on(sch) | sx.bulk(sx.par, 50, squares))
    assert res is out and out == [i * i for i in range(50)]
    with pytest.raises(ValueError, match="bad index 5"):
        await (sx.schedule(sch) | sx.bulk(sx.par, 20, raise_value_error))
    where = str(tmp_path)
    slow_out = [0] * 400

    async def cancel_once_an_index_runs(cs: trio.CancelScope) -> None:
        await trio.to_thread.run_sync(wait_for_an_index, where)
        cs.cancel()  # the stop request reaches the chunks now...
        (tmp_path / "release").touch()  # ...before the running indices return

    async with trio.open_nursery() as nursery:
        with trio.CancelScope() as cs:
            nursery.start_soon(cancel_once_an_index_runs, cs)
            await (sx.just(slow_out, where) | sx.continues_on(sch) | sx.bulk(sx.par, 400, gated))
    assert cs.cancelled_caught
    assert sum(slow_out) == 0  # a stopped chunk brings nothing back
    assert 1 <= len(indices_that_ran(where)) <= 2, indices_that_ran(where)


# -- one-chunk round trips and work without values (pickled once, reused by the workers)


def raise_at_zero(i: int) -> None:
    raise ValueError(f"raised at {i}")


def twin(i: int) -> None:
    raise ValueError("the first twin")


first_twin = twin


def twin(i: int) -> None:  # the module's `twin` is now this function
    raise KeyError("the second twin")


def test_one_chunk_round_trips_complete_every_way(sch: sx.parallel_scheduler) -> None:
    """``bulk(par, 1, f)`` (one chunk) under ``sync_wait`` (no stop token), repeated: the
    value, the function's error with its type, and the next round trips unharmed."""
    one = sx.schedule(sch) | sx.bulk(sx.par, 1, squares_noop)
    for _ in range(3):
        assert sx.sync_wait(one) == ()
        with pytest.raises(ValueError, match="raised at 0"):
            sx.sync_wait(sx.schedule(sch) | sx.bulk(sx.par, 1, raise_at_zero))
    out = [0]
    assert sx.sync_wait(sx.just(out) | sx.continues_on(sch) | sx.bulk(sx.par, 1, squares)) == (
        [0],
    )
    out = [5, 5]
    seq = sx.just(out) | sx.continues_on(sch) | sx.bulk(sx.seq, 2, squares)  # one chunk
    assert sx.sync_wait(seq) == ([0, 1],)


def test_work_without_values_is_sent_by_reference_only_while_the_module_binds_it(
    sch: sx.parallel_scheduler,
) -> None:
    """A function that its module no longer binds under its name (``first_twin``, whose
    name ``twin`` now means another function) is not sent by reference (that would run the
    other function in the worker): it travels by value, every time, while ``twin`` itself
    travels by reference; the pickled work kept for one is never used for the other."""
    for _ in range(2):
        with pytest.raises(ValueError, match="the first twin"):
            sx.sync_wait(sx.schedule(sch) | sx.bulk(sx.par, 1, first_twin))
        with pytest.raises(KeyError, match="the second twin"):
            sx.sync_wait(sx.schedule(sch) | sx.bulk(sx.par, 1, twin))
        with pytest.raises(ValueError, match="the first twin"):
            sx.sync_wait(sx.schedule(sch) | sx.bulk(sx.par, 3, first_twin))
