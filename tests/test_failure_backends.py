"""What happens when things fail on the process-pool and dask backends.

The failure matrix for the backends that run user code in other processes: the
bulk function raises an ``Exception`` or a ``BaseException`` (``KeyboardInterrupt``,
``SystemExit``) in a worker, raises an exception that cannot be pickled back, leaves results
that cannot be pickled back, kills its worker; a stop is requested from another thread. Each
ends with an error completion that says what happened and what to do, or a stopped
completion: never a hang, never a lost error, never a worker left behind, never a
``BaseException`` of a worker turned into an error datum that would interrupt or exit this
program ([exec.sysctxrepl.psb]; docs/parallel.md, "What happens when things fail").

The bulk functions are module-level so that the worker processes can import them. The dask
cases run in a child process with a hard timeout (before the fixes some of them hung, and a
``KeyboardInterrupt`` on an in-process worker broke the whole cluster), on one
``LocalCluster`` with worker processes, on 127.0.0.1 only.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _gated import gated, indices_that_ran, wait_for_an_index
from _subproc import run_child

import structexec as sx
from structexec.backends import (
    BackendError,
    ProcessPoolBackend,
    UnpicklableWorkError,
    WorkerDiedError,
)
from structexec.testing import RecordingReceiver

# --------------------------------------------------------------------------- bulk functions


def keyboard_interrupt(i: int, out: list[int]) -> None:
    if i == 3:
        raise KeyboardInterrupt("pressed in a worker")
    out[i] = i


def system_exit(i: int, out: list[int]) -> None:
    if i == 3:
        sys.exit(7)
    out[i] = i


class NeedsKeyword(Exception):
    """An exception that pickles but cannot be unpickled (a keyword-only argument)."""

    def __init__(self, msg: str, *, code: int) -> None:
        super().__init__(msg)
        self.code = code


def raise_unpicklable_exception(i: int, out: list[int]) -> None:
    if i == 3:
        raise NeedsKeyword("bad row 3", code=3)
    out[i] = i


def store_a_lock(i: int, out: list[Any]) -> None:
    out[i] = threading.Lock() if i == 5 else i


def write_pid(i: int, out: list[int]) -> None:
    time.sleep(0.01)
    out[i] = os.getpid()


def die(i: int, out: list[int]) -> None:
    if i == 2:
        os._exit(7)
    out[i] = i


def fill(i: int, out: list[int]) -> None:
    out[i] = i


# --------------------------------------------------------------------------- process pool


@pytest.fixture(scope="module")
def backend() -> Iterator[ProcessPoolBackend]:
    with ProcessPoolBackend(2) as b:
        yield b


@pytest.fixture
def sch(backend: ProcessPoolBackend) -> sx.parallel_scheduler:
    return sx.parallel_scheduler(backend)


def _bulk(sch: sx.parallel_scheduler, f: Any, n: int = 8) -> RecordingReceiver:
    """Run ``bulk(par, n, f)`` over a list of ``n`` zeros; wait (bounded) for the completion."""
    out: list[Any] = [0] * n
    rec = RecordingReceiver()
    rec.run(sx.just(out) | sx.continues_on(sch) | sx.bulk(sx.par, n, f))
    rec.wait(30)
    return rec


def _still_works(sch: sx.parallel_scheduler) -> None:
    out = [0] * 6
    assert sx.sync_wait(sx.just(out) | sx.continues_on(sch) | sx.bulk(sx.par, 6, fill)) == (
        list(range(6)),
    )


def _no_citations(msg: str) -> None:
    for doc in ("DESIGN", "REQUIREMENTS", "issue "):
        assert doc not in msg, msg


@pytest.mark.parametrize(
    ("f", "name"),
    [(keyboard_interrupt, "KeyboardInterrupt"), (system_exit, "SystemExit")],
)
def test_process_pool_base_exception_in_a_worker_is_an_error_not_an_interrupt(
    sch: sx.parallel_scheduler, f: Any, name: str
) -> None:
    # It used to come back as the error datum itself: sync_wait then raised the worker's
    # KeyboardInterrupt (or SystemExit(7): the program exited) in this process.
    rec = _bulk(sch, f)
    err = rec.error
    assert type(err) is BackendError, repr(err)
    msg = str(err)
    assert f"the bulk function raised {name}" in msg
    assert "does not interrupt or exit this program" in msg
    assert "raise an Exception" in msg and "request stop" in msg
    assert f"in {f.__name__}" in msg  # where it was raised
    _no_citations(msg)
    _still_works(sch)  # the workers survived it


def test_process_pool_exception_that_cannot_be_pickled_back_is_not_lost(
    sch: sx.parallel_scheduler,
) -> None:
    # It used to break the pool ("a worker process died"): the parent failed to unpickle it.
    rec = _bulk(sch, raise_unpicklable_exception)
    err = rec.error
    assert type(err) is BackendError, repr(err)
    msg = str(err)
    assert "raised NeedsKeyword: bad row 3" in msg
    assert "cannot be sent back to this process" in msg
    assert "Exception.__init__" in msg  # what to do
    _no_citations(msg)
    _still_works(sch)


def test_process_pool_results_that_cannot_be_pickled_name_the_element(
    sch: sx.parallel_scheduler,
) -> None:
    rec = _bulk(sch, store_a_lock)
    err = rec.error
    assert isinstance(err, UnpicklableWorkError), repr(err)
    msg = str(err)
    assert "cannot send the results of chunk" in msg
    assert "element [5] of value #0 sent by the predecessor" in msg
    assert "lock" in msg and "store plain data" in msg
    _no_citations(msg)
    _still_works(sch)


def test_process_pool_stop_from_another_thread_stops_the_work(
    sch: sx.parallel_scheduler, tmp_path: Path
) -> None:
    """The stop request comes from another thread while an index runs (each waits for a
    release file): no index but the ones that were running (one per process) ever runs."""
    _still_works(sch)  # the workers are up
    where = str(tmp_path)
    out = [0] * 400
    rec = RecordingReceiver()
    rec.run(sx.just(out, where) | sx.continues_on(sch) | sx.bulk(sx.par, 400, gated))
    wait_for_an_index(where)
    t = threading.Thread(target=rec.request_stop)
    t.start()
    t.join(10)
    (tmp_path / "release").touch()
    rec.wait(30)
    assert rec.stopped
    assert rec.live_callbacks_at_completion == 0
    assert 1 <= len(indices_that_ran(where)) <= 2, indices_that_ran(where)


def _gone(pid: int, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:  # reaped by the pool, or a zombie not yet reaped: both are gone for good
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().split(")")[-1].split()[0] == "Z":
                    return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_process_pool_leaves_no_worker_behind_after_a_death_and_a_shutdown() -> None:
    b = ProcessPoolBackend(2)
    try:
        sch = sx.parallel_scheduler(b)
        first = _bulk(sch, write_pid, 16).value[0]
        old_pids = set(first)
        assert os.getpid() not in old_pids
        rec = _bulk(sch, die)
        assert isinstance(rec.error, WorkerDiedError)
        assert "the pool has been replaced" in str(rec.error)
        # Every process of the broken pool goes away; the replacement pool works.
        assert all(_gone(p) for p in old_pids), old_pids
        new_pids = set(_bulk(sch, write_pid, 16).value[0])
        assert not new_pids & old_pids
    finally:
        b.shutdown(wait=True)
    assert all(_gone(p) for p in new_pids), new_pids


# --------------------------------------------------------------------------- dask

DASK_CHILD = r"""
import os, sys, threading, time
import dask
dask.config.set({"distributed.scheduler.allowed-failures": 0})  # give up after one death
import distributed
import structexec as sx
from structexec.backends import BackendError, DaskBackend, UnpicklableWorkError, WorkerDiedError
from structexec.testing import RecordingReceiver

# Defined in __main__: cloudpickle sends them by value to the worker processes.
def keyboard_interrupt(i, out):
    if i == 3:
        raise KeyboardInterrupt("pressed in a worker")
    out[i] = i

def system_exit(i, out):
    if i == 3:
        sys.exit(7)
    out[i] = i

class NeedsKeyword(Exception):
    def __init__(self, msg, *, code):
        super().__init__(msg)

def raise_unpicklable_exception(i, out):
    if i == 3:
        raise NeedsKeyword("bad row 3", code=3)

def store_a_lock(i, out):
    out[i] = threading.Lock() if i == 5 else i

def die(i, out):
    if i == 2:
        os._exit(7)

def slow(i, out):
    time.sleep(0.02)
    out[i] = 1

def fill(i, out):
    out[i] = i

def run(sch, f, n=8, stop_after=None):
    out = [0] * n
    rec = RecordingReceiver()
    rec.run(sx.just(out) | sx.continues_on(sch) | sx.bulk(sx.par, n, f))
    if stop_after is not None:
        time.sleep(stop_after)
        t = threading.Thread(target=rec.request_stop)
        t.start()
        t.join(10)
    rec.wait(40)
    return rec

def report(name, rec):
    if rec.kind == "error":
        e = rec.error
        print(f"{name}|error|{type(e).__name__}|{str(e)!r}", flush=True)
    else:
        print(f"{name}|{rec.kind}|{rec.outcome!r}", flush=True)

if __name__ == "__main__":
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, protocol="tcp",
        host="127.0.0.1", dashboard_address=None,
    ) as cluster, DaskBackend(cluster) as backend:
        sch = sx.parallel_scheduler(backend)
        for name, f in [
            ("keyboard_interrupt", keyboard_interrupt),
            ("system_exit", system_exit),
            ("unpicklable_exception", raise_unpicklable_exception),
            ("unpicklable_result", store_a_lock),
            ("die", die),
        ]:
            report(name, run(sch, f))
        report("stop_from_thread", run(sch, slow, n=400, stop_after=0.5))
        report("healthy", run(sch, fill, n=6))
        print("client status:", backend.client.status, flush=True)
    print("DONE", flush=True)
"""


@pytest.fixture(scope="module")
def dask_outcomes() -> dict[str, tuple[str, ...]]:
    pytest.importorskip("distributed", reason="needs the dask extra")
    r = run_child(DASK_CHILD, timeout=150)
    assert not r.timed_out, f"the dask failure matrix hung:\n{r}"
    assert r.returncode == 0 and "DONE" in r.stdout, str(r)
    out: dict[str, tuple[str, ...]] = {}
    for line in r.stdout.splitlines():
        if "|" in line:
            name, *rest = line.split("|", 3)
            out[name] = tuple(rest)
    out["_client"] = tuple(
        line for line in r.stdout.splitlines() if line.startswith("client status")
    )
    return out


@pytest.mark.dask
@pytest.mark.parametrize(
    ("case", "name"),
    [("keyboard_interrupt", "KeyboardInterrupt"), ("system_exit", "SystemExit")],
)
def test_dask_base_exception_in_a_worker_is_an_error(
    dask_outcomes: dict[str, tuple[str, ...]], case: str, name: str
) -> None:
    # It used to kill the worker: dask retried the chunk on every worker and reported
    # KilledWorker (worker processes), or the cluster broke and the operation hung
    # (in-process workers).
    kind, typ, msg = dask_outcomes[case]
    assert (kind, typ) == ("error", "BackendError"), dask_outcomes[case]
    assert f"the bulk function raised {name}" in msg
    assert "does not interrupt or exit this program" in msg
    _no_citations(msg)


@pytest.mark.dask
def test_dask_exception_that_cannot_be_pickled_back_is_not_lost(
    dask_outcomes: dict[str, tuple[str, ...]],
) -> None:
    kind, typ, msg = dask_outcomes["unpicklable_exception"]
    assert (kind, typ) == ("error", "BackendError"), dask_outcomes["unpicklable_exception"]
    assert "raised NeedsKeyword: bad row 3" in msg
    assert "cannot be sent back to this process" in msg


@pytest.mark.dask
def test_dask_unpicklable_result_is_a_serialization_error_not_a_lost_cluster(
    dask_outcomes: dict[str, tuple[str, ...]],
) -> None:
    # Regression: this was ClusterError("... the cluster went away ...").
    kind, typ, msg = dask_outcomes["unpicklable_result"]
    assert (kind, typ) == ("error", "UnpicklableWorkError"), dask_outcomes["unpicklable_result"]
    assert "element [5] of value #0 sent by the predecessor" in msg
    assert "cannot be pickled with cloudpickle" in msg and "store plain data" in msg
    assert "went away" not in msg
    _no_citations(msg)


@pytest.mark.dask
def test_dask_worker_death_is_a_worker_died_error(
    dask_outcomes: dict[str, tuple[str, ...]],
) -> None:
    kind, typ, msg = dask_outcomes["die"]
    assert (kind, typ) == ("error", "WorkerDiedError"), dask_outcomes["die"]
    # Every chunk held by the dead worker fails with it; any of them may be reported first.
    assert re.search(r"dask workers died while running chunk \[\d+, \d+\)", msg), msg
    # dask says KilledWorker (it gave up on the chunk) or reports the future lost (the worker
    # holding it died first): either way a WorkerDiedError, never a "lost cluster".
    assert "KilledWorker" in msg or "future lost" in msg, msg


@pytest.mark.dask
def test_dask_stop_from_another_thread_and_the_cluster_stays_healthy(
    dask_outcomes: dict[str, tuple[str, ...]],
) -> None:
    assert dask_outcomes["stop_from_thread"][0] == "stopped", dask_outcomes["stop_from_thread"]
    assert dask_outcomes["healthy"] == ("value", "('value', ([0, 1, 2, 3, 4, 5],))")
    assert dask_outcomes["_client"] == ("client status: running",)
