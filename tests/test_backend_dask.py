"""DaskBackend on a real dask.distributed cluster ([exec.par.scheduler],
[exec.sysctxrepl.recvproxy], [exec.sysctxrepl.psb], docs/parallel.md).

The tests start a real ``LocalCluster`` (scheduler and two single-threaded workers, in this
process, talking TCP on 127.0.0.1, no dashboard) once per module, and shut it down.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import structexec as sx
from structexec.backends import BackendError, ClusterError, DaskBackend, UnpicklableWorkError
from structexec.testing import RecordingReceiver

distributed = pytest.importorskip("distributed", reason="needs the dask extra")

pytestmark = pytest.mark.dask


def local_cluster(**kw: Any) -> Any:
    """A LocalCluster bound to 127.0.0.1 only, no dashboard, random ports."""
    return distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=False,
        protocol="tcp",
        host="127.0.0.1",
        dashboard_address=None,
        scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
        **kw,
    )


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    c = local_cluster()
    try:
        yield c
    finally:
        c.close()


@pytest.fixture(scope="module")
def backend(cluster: Any) -> Iterator[DaskBackend]:
    client = distributed.Client(cluster, set_as_default=False)
    b = DaskBackend(client)
    try:
        yield b
    finally:
        b.close()
        client.close()


@pytest.fixture
def sch(backend: DaskBackend) -> sx.parallel_scheduler:
    return sx.parallel_scheduler(backend)


class ChunkError(Exception):
    pass


CHUNKS: list[tuple[int, int]] = []


def squares(i: int, out: list[int]) -> None:
    out[i] = i * i


def record_chunk(b: int, e: int, out: list[int]) -> None:
    CHUNKS.append((b, e))  # processes=False: the workers share this module
    for i in range(b, e):
        out[i] = i


def fail_at_7(i: int) -> None:
    if i == 7:
        raise ChunkError("seven")


def slow(i: int, out: list[int]) -> None:
    time.sleep(0.02)
    out[i] = 1


def noop(i: int) -> None:
    pass


def test_bulk_results_reach_the_parent(sch: sx.parallel_scheduler) -> None:
    out = [0] * 100
    s = sx.just(out) | sx.continues_on(sch) | sx.bulk(sx.par, 100, squares)
    assert sx.sync_wait(s) == ([i * i for i in range(100)],)
    out2 = [0] * 30
    r = sx.sync_wait(
        sx.just(out2, "x")
        | sx.continues_on(sch)
        | sx.bulk_unchunked(sx.par, 30, lambda i, o, tag: o.__setitem__(i, tag * (i % 3)))
    )  # cloudpickle: lambdas ok
    assert r == ([["", "x", "xx"][i % 3] for i in range(30)], "x")


def test_bulk_chunked_covers_each_index_once_in_chunks(
    sch: sx.parallel_scheduler, backend: DaskBackend
) -> None:
    CHUNKS.clear()
    out = [-1] * 1000
    assert sx.sync_wait(
        sx.just(out) | sx.continues_on(sch) | sx.bulk_chunked(sx.par, 1000, record_chunk)
    ) == (list(range(1000)),)
    chunks = sorted(CHUNKS)
    assert len(chunks) == 8  # 4 chunks per worker thread, 2 threads
    assert [i for b, e in chunks for i in range(b, e)] == list(range(1000))


def fill_ones(b: int, e: int, buf: bytearray) -> None:
    buf[b:e] = b"\x01" * (e - b)


def test_big_work_is_scattered_once(
    sch: sx.parallel_scheduler, backend: DaskBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = backend.client
    scatters: list[int] = []
    real_scatter = client.scatter

    def scatter(data: Any, **kw: Any) -> Any:
        scatters.append(len(data))
        return real_scatter(data, **kw)

    monkeypatch.setattr(client, "scatter", scatter)
    buf = bytearray(2 << 20)  # 2 MiB travels once, not once per chunk
    r = sx.sync_wait(
        sx.just(buf) | sx.continues_on(sch) | sx.bulk_chunked(sx.par, len(buf), fill_ones)
    )
    assert r is not None and r[0] is buf
    assert buf == b"\x01" * len(buf)
    assert len(scatters) == 1 and scatters[0] > 2 << 20


def test_errors_keep_their_original_type(sch: sx.parallel_scheduler) -> None:
    with pytest.raises(ChunkError, match="seven"):
        sx.sync_wait(sx.schedule(sch) | sx.bulk(sx.par, 20, fail_at_7))
    # The backend is still usable afterwards.
    assert sx.sync_wait(sx.schedule(sch) | sx.bulk(sx.par, 20, noop)) == ()


RAN: list[int] = []  # the indices the functions below ran (processes=False: shared)
RELEASE = threading.Event()


def per_chunk(ran: list[int], size: int = 50) -> dict[int, int]:
    """How many indices of each chunk of ``size`` indices ran."""
    return {c: sum(1 for i in ran if i // size == c) for c in {i // size for i in ran}}


def slow_then_fail(i: int, out: list[int]) -> None:
    if i == 0:
        raise ChunkError("first")
    RAN.append(i)
    time.sleep(0.1)  # 5 s per chunk: a chunk that runs to its end was not stopped


def test_first_error_stops_the_other_chunks_of_a_stoppable_consumer(
    sch: sx.parallel_scheduler,
) -> None:
    RAN.clear()
    rec = RecordingReceiver()  # has a stop token
    rec.run(sx.schedule(sch) | sx.then(lambda: [0] * 400) | sx.bulk(sx.par, 400, slow_then_fail))
    rec.wait(30)
    assert isinstance(rec.error, ChunkError)
    ran = per_chunk(RAN)  # 8 chunks of 50 indices; the first one failed at its first index
    assert all(n < 50 for n in ran.values()), ran  # every other chunk that started stopped


def test_unpicklable_work_fails_before_any_chunk_runs(sch: sx.parallel_scheduler) -> None:
    CHUNKS.clear()
    lock = threading.Lock()
    with pytest.raises(UnpicklableWorkError, match=r"value #1.*lock") as info:
        sx.sync_wait(
            sx.just([0] * 10, lock)
            | sx.continues_on(sch)
            | sx.bulk_chunked(sx.par, 10, lambda b, e, o, lk: record_chunk(b, e, o))
        )
    assert isinstance(info.value, TypeError)
    assert CHUNKS == []


def test_unpicklable_results_are_a_serialization_error_not_a_lost_cluster(
    sch: sx.parallel_scheduler, backend: DaskBackend
) -> None:
    """Regression: a result that cannot travel back was reported as
    ``ClusterError("... the cluster went away ...")`` while the cluster was healthy."""
    rec = RecordingReceiver()
    rec.run(
        sx.just([0] * 10)
        | sx.continues_on(sch)
        | sx.bulk(sx.par, 10, lambda i, o: o.__setitem__(i, threading.Lock() if i == 4 else i))
    )
    rec.wait(20)
    err = rec.error
    assert isinstance(err, UnpicklableWorkError), repr(err)
    assert not isinstance(err, ClusterError)
    msg = str(err)
    assert "cannot send the results of chunk" in msg
    assert "element [4] of value #0 sent by the predecessor" in msg
    assert "store plain data" in msg and "went away" not in msg
    assert backend.client.status == "running"
    out = [0] * 10
    assert sx.sync_wait(sx.just(out) | sx.continues_on(sch) | sx.bulk(sx.par, 10, squares)) == (
        [i * i for i in range(10)],
    )


def gated(i: int, out: list[int]) -> None:
    RAN.append(i)
    RELEASE.wait(30)  # until the stop was requested (the bound only guards a broken test)
    time.sleep(0.1)  # then 5 s per chunk: a chunk that runs to its end was not stopped
    out[i] = 1


def test_stop_stops_running_chunks_and_cancels_queued_ones(sch: sx.parallel_scheduler) -> None:
    """The stop request arrives while the first indices run: the running chunks stop (the
    workers poll the stop flag between indices) and the queued ones never start."""
    RAN.clear()
    RELEASE.clear()
    out = [0] * 400  # 8 chunks of 50 indices on 2 worker threads
    rec = RecordingReceiver()
    rec.run(sx.just(out) | sx.continues_on(sch) | sx.bulk(sx.par, 400, gated))
    deadline = time.monotonic() + 30
    while not RAN and time.monotonic() < deadline:
        time.sleep(0.005)
    rec.request_stop()
    RELEASE.set()
    rec.wait(30)
    assert rec.stopped
    assert rec.live_callbacks_at_completion == 0
    # New work runs; a queued chunk that was not cancelled would have started by then.
    assert sx.sync_wait(sx.schedule(sch) | sx.bulk(sx.par, 4, noop)) == ()
    chunks = per_chunk(RAN)
    assert 1 <= len(chunks) <= 2, chunks  # only the chunks that were running
    assert all(n < 50 for n in chunks.values()), chunks  # and they stopped early


def test_completions_come_back_to_the_local_thread_pool(sch: sx.parallel_scheduler) -> None:
    rec = RecordingReceiver()
    rec.run(sx.schedule(sch) | sx.bulk(sx.par, 10, noop))
    rec.wait()
    assert rec.value == ()
    names = {t.ident: t.name for t in threading.enumerate()}
    assert names[rec.thread].startswith("structexec-parallel")
    rec2 = RecordingReceiver()
    rec2.run(sx.schedule(sch))  # schedule() stays local
    rec2.wait()
    assert names.get(rec2.thread, "structexec-parallel").startswith("structexec-parallel")


def test_set_parallel_scheduler_backend_points_everything_at_the_cluster(
    backend: DaskBackend,
) -> None:
    previous = sx.set_parallel_scheduler_backend(lambda: backend)
    try:
        sch = sx.get_parallel_scheduler()
        assert sch.backend is backend
        out = [0] * 10
        assert sx.sync_wait(
            sx.just(out) | sx.continues_on(sch) | sx.bulk(sx.par, 10, squares)
        ) == ([i * i for i in range(10)],)
    finally:
        sx.set_parallel_scheduler_backend(previous)


def test_a_cluster_that_goes_away_fails_the_operation() -> None:
    c = local_cluster()
    client = distributed.Client(c, set_as_default=False)
    b = DaskBackend(client)
    sch = sx.parallel_scheduler(b)
    try:
        rec = RecordingReceiver(sx.env())
        rec.run(sx.schedule(sch) | sx.then(lambda: [0] * 200) | sx.bulk(sx.par, 200, slow))
        time.sleep(0.2)
        c.close()
        rec.wait(10)
        assert isinstance(rec.error, ClusterError)
        assert isinstance(rec.error, BackendError)
        assert "went away" in str(rec.error)
        # New bulk work fails at once with the same kind of error; schedule() still works.
        with pytest.raises(ClusterError, match="closed"):
            sx.sync_wait(sx.schedule(sch) | sx.bulk(sx.par, 4, noop))
        assert sx.sync_wait(sx.schedule(sch)) == ()
    finally:
        b.close()
        client.close()
        c.close()


def test_address_string_creates_and_closes_its_own_client(cluster: Any) -> None:
    with DaskBackend(cluster.scheduler_address) as b:
        assert b.client.status == "running"
        out = [0] * 5
        assert sx.sync_wait(
            sx.schedule(sx.parallel_scheduler(b))
            | sx.then(lambda: out)
            | sx.bulk(sx.par, 5, squares)
        ) == ([0, 1, 4, 9, 16],)
    assert b.client.status == "closed"


def test_constructor_checks() -> None:
    with pytest.raises(TypeError, match="scheduler address"):
        DaskBackend(42)
    with pytest.raises(ValueError):
        DaskBackend("tcp://127.0.0.1:1", chunks_per_thread=0)
