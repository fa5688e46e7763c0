"""then/upon_error/upon_stopped on a DaskBackend run on the cluster's workers ([exec.then],
[exec.par.scheduler], [exec.snd.transform]; docs/parallel.md "Running any function
remotely").

One real ``LocalCluster`` per module: a scheduler in this process and two single-threaded
worker *processes* (so that where a function ran is visible as a pid), TCP on 127.0.0.1 only,
no dashboard. ``allowed-failures`` is 1 so that a function that always kills its worker is
given up on after two deaths.
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
from structexec.backends import DaskBackend, UnpicklableWorkError, WorkerDiedError

distributed = pytest.importorskip("distributed", reason="needs the dask extra")
dask = pytest.importorskip("dask")

pytestmark = pytest.mark.dask


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    # ``allowed-failures`` is read when the scheduler starts; ``lost-worker-timeout`` each
    # time a worker leaves, so it stays set for the module: when a worker has left, the
    # cluster closes its nanny for good unless a worker of the same name is back after that
    # timeout (15 s by default). The kill tests below kill a worker again within that time;
    # on a loaded machine the first removal's timer could fire while the nanny is still
    # restarting the second time, and the worker would never come back.
    config = {
        "distributed.scheduler.allowed-failures": 1,
        "distributed.deploy.lost-worker-timeout": "1h",
    }
    with dask.config.set(config):
        c = distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            protocol="tcp",
            host="127.0.0.1",
            dashboard_address=None,
        )
        try:
            yield c
        finally:
            c.close()


@pytest.fixture(scope="module")
def backend(cluster: Any) -> Iterator[DaskBackend]:
    with DaskBackend(cluster) as b:
        yield b


@pytest.fixture
def par(backend: DaskBackend) -> sx.parallel_scheduler:
    return sx.parallel_scheduler(backend)


def worker_pids(backend: DaskBackend) -> set[int]:
    return set(backend.client.run(os.getpid).values())


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
    return threading.Lock()


def lock_kind(lock: Any) -> tuple[str, int]:
    return type(lock).__name__, os.getpid()


def die_once(marker: str) -> int:
    if not os.path.exists(marker):
        Path(marker).touch()
        os._exit(3)
    return os.getpid()


def die(code: int) -> None:
    os._exit(code)


def started_then_wait(where: str, i: int) -> int:
    Path(where, f"started-{i}").write_text(str(os.getpid()))
    deadline = time.monotonic() + 30
    while not Path(where, "release").exists() and time.monotonic() < deadline:
        time.sleep(0.005)
    return i


def started_calls(where: str) -> list[int]:
    return sorted(int(n.split("-")[1]) for n in os.listdir(where) if n.startswith("started-"))


def test_then_runs_on_a_worker_after_schedule_continues_on_and_inside_starts_on(
    par: sx.parallel_scheduler, backend: DaskBackend
) -> None:
    pids = worker_pids(backend)
    assert os.getpid() not in pids
    (r,) = sx.sync_wait(sx.schedule(par) | sx.then(functools.partial(parse, b"abc", 2)))
    assert r[0] == 6 and r[1] in pids
    (r,) = sx.sync_wait(sx.just(b"xy", 3) | sx.continues_on(par) | sx.then(parse))
    assert r[0] == 6 and r[1] in pids
    (r,) = sx.sync_wait(sx.starts_on(par, sx.just(b"xyz", 1) | sx.then(parse)))
    assert r[0] == 3 and r[1] in pids
    (r,) = sx.sync_wait(sx.schedule(par) | sx.then(lambda: (os.getpid(), 42)))  # by value
    assert r == (r[0], 42) and r[0] in pids


def test_upon_error_upon_stopped_and_fusion_on_the_cluster(
    par: sx.parallel_scheduler, backend: DaskBackend
) -> None:
    pids = worker_pids(backend)
    (r,) = sx.sync_wait(
        sx.just_error(ParseError("boom")) | sx.continues_on(par) | sx.upon_error(describe_error)
    )
    assert r[:2] == ("ParseError", "boom") and r[2] in pids
    (pid,) = sx.sync_wait(sx.just_stopped() | sx.continues_on(par) | sx.upon_stopped(getpid))
    assert pid in pids
    # Two thens, one task: the lock between them never leaves the worker.
    (r,) = sx.sync_wait(sx.schedule(par) | sx.then(make_lock) | sx.then(lock_kind))
    assert r[0] == "lock" and r[1] in pids


def test_errors_keep_their_type_and_unpicklable_work_is_named(
    par: sx.parallel_scheduler,
) -> None:
    with pytest.raises(ParseError, match="bad blob"):
        sx.sync_wait(sx.schedule(par) | sx.then(fail))
    lock = threading.Lock()
    with pytest.raises(UnpicklableWorkError, match="argument #0"):
        sx.sync_wait(sx.schedule(par) | sx.then(functools.partial(lock_kind, lock)))
    with pytest.raises(UnpicklableWorkError, match="value #0 of the result"):
        sx.sync_wait(sx.schedule(par) | sx.then(make_lock))


async def test_await_in_trio_and_when_all_of_many_calls(
    par: sx.parallel_scheduler, backend: DaskBackend
) -> None:
    pids = worker_pids(backend)
    r = await sx.when_all(*[sx.schedule(par) | sx.then(functools.partial(getpid, i))
                            for i in range(50)])
    assert len(r) == 50 and set(r) <= pids


async def test_request_stop_on_a_scope_with_100_queued_calls_cancels_them_on_the_cluster(
    par: sx.parallel_scheduler, backend: DaskBackend, tmp_path: Path
) -> None:
    """The scope's stop reaches the cluster: the 98 queued tasks are cancelled with
    client.cancel and never run; the 2 running ones are abandoned (their results dropped);
    every future is stopped within seconds."""
    where = str(tmp_path)
    futures = []
    async with sx.counting_scope() as scope:
        for i in range(100):
            fn = functools.partial(started_then_wait, where, i)
            futures.append(scope.spawn_future(sx.schedule(par) | sx.then(fn)))
        with trio.fail_after(30):
            while len(started_calls(where)) < 2:
                await trio.sleep(0.01)
        t0 = time.monotonic()
        scope.request_stop()
        with trio.fail_after(20):
            for f in futures:
                with pytest.raises(sx.Stopped):
                    await f
        stopped_in = time.monotonic() - t0
    assert stopped_in < 5
    running = started_calls(where)
    assert len(running) == 2
    (tmp_path / "release").touch()
    # The cluster is idle again and nothing else ever started.
    with trio.fail_after(20):
        while backend.client.processing() and any(backend.client.processing().values()):
            await trio.sleep(0.02)
    assert started_calls(where) == running
    pid = await (sx.schedule(par) | sx.then(getpid))
    assert pid != os.getpid()


async def test_operation_tree_shows_the_dask_worker_of_a_running_call(
    par: sx.parallel_scheduler, backend: DaskBackend, tmp_path: Path
) -> None:
    where = str(tmp_path)
    addrs = set(backend.client.scheduler_info()["workers"])
    async with sx.counting_scope(name="cluster") as scope:
        fut = scope.spawn_future(
            sx.schedule(par) | sx.then(functools.partial(started_then_wait, where, 0))
        )
        with trio.fail_after(30):
            while not started_calls(where):
                await trio.sleep(0.01)
        states = [op.state for sc in sx.operation_tree() if sc.name == "cluster"
                  for op in sc.operations]
        (tmp_path / "release").touch()
        assert await fut == 0
    assert len(states) == 1 and states[0].startswith("running on dask worker tcp://127.0.0.1:")
    assert states[0].split()[4] in addrs, states


# The tests that kill workers come last: the others run on the workers the module started.


def test_a_killed_worker_call_is_rerun_by_dask(
    par: sx.parallel_scheduler, backend: DaskBackend, tmp_path: Path
) -> None:
    once = functools.partial(die_once, str(tmp_path / "m"))
    (pid,) = sx.sync_wait(sx.schedule(par) | sx.then(once))
    assert pid != os.getpid()
    backend.client.wait_for_workers(2, timeout=60)


def test_a_call_that_keeps_killing_workers_fails_with_worker_died_error(
    par: sx.parallel_scheduler, backend: DaskBackend
) -> None:
    with pytest.raises(WorkerDiedError, match="dask gave up on it"):
        sx.sync_wait(sx.schedule(par) | sx.then(functools.partial(die, 3)))
    backend.client.wait_for_workers(2, timeout=60)
    (pid,) = sx.sync_wait(sx.schedule(par) | sx.then(getpid))
    assert pid != os.getpid()


def test_remote_calls_leave_no_cyclic_garbage(par: sx.parallel_scheduler) -> None:
    from _helpers import cyclic_garbage_of_sync

    def calls() -> None:
        assert sx.sync_wait(sx.schedule(par) | sx.then(functools.partial(parse, b"a", 1)))
        # (Not the error path: the remote traceback dask rebuilds with tblib is a cycle of
        # tblib's own frame objects; the process-pool module checks that path.)
        (r,) = sx.sync_wait(sx.just(b"ab", 1) | sx.continues_on(par) | sx.then(parse))
        assert r[0] == 2

    assert cyclic_garbage_of_sync(calls) == 0


def test_no_worker_process_is_left_after_the_backend_and_cluster_close() -> None:
    cluster = distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=True, protocol="tcp",
        host="127.0.0.1", dashboard_address=None,
    )
    with cluster, DaskBackend(cluster) as b:
        pids = set(b.client.run(os.getpid).values())
        par = sx.parallel_scheduler(b)
        (pid,) = sx.sync_wait(sx.schedule(par) | sx.then(getpid))
        assert pid in pids and pid != os.getpid()
    deadline = time.monotonic() + 20
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not [p for p in pids if _alive(p)]


def _alive(pid: int) -> bool:
    """``pid`` runs (a zombie, exited and not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False
