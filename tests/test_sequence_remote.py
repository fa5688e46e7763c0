"""A sequence's items hopped to the parallel scheduler when its backend is a process pool:
``transform_each(sx.continues_on(par) | sx.then(f), max_concurrency=k)`` runs ``f`` in the
worker processes ([exec.then], [exec.par.scheduler]; docs/streams.md "Where it runs",
docs/parallel.md "Running any function remotely").

The functions are module-level so that the workers can import them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
import trio

import structexec as sx
from structexec.backends import ProcessPoolBackend


def square_and_pid(x: int) -> tuple[int, int]:
    return x * x, os.getpid()


@pytest.fixture(scope="module")
def backend() -> Iterator[ProcessPoolBackend]:
    with ProcessPoolBackend(2) as b:
        yield b


@pytest.fixture
def installed(backend: ProcessPoolBackend) -> Iterator[ProcessPoolBackend]:
    previous = sx.set_parallel_scheduler_backend(lambda: backend)
    try:
        yield backend
    finally:
        sx.set_parallel_scheduler_backend(previous)


def _pipeline() -> Any:
    par = sx.get_parallel_scheduler()
    return sx.to_list(
        sx.iterate(range(8))
        | sx.transform_each(sx.continues_on(par) | sx.then(square_and_pid), max_concurrency=2)
    )


def _check(got: list[tuple[int, int]], backend: ProcessPoolBackend) -> None:
    assert sorted(v for v, _ in got) == [i * i for i in range(8)]
    pids = {p for _, p in got}
    assert os.getpid() not in pids  # f ran in the workers, not here
    ex = backend._executor
    assert ex is not None
    assert pids <= set(ex._processes)  # type: ignore[attr-defined]


def test_items_run_in_worker_processes_under_sync_wait(installed: ProcessPoolBackend) -> None:
    (got,) = sx.sync_wait(_pipeline())
    _check(got, installed)


async def test_items_run_in_worker_processes_under_trio(installed: ProcessPoolBackend) -> None:
    with trio.fail_after(60):
        got = await _pipeline()
    _check(got, installed)
