"""examples/bulk.py runs on threads, processes and a dask cluster, changing one line
(docs/parallel.md). Each run is a fresh interpreter, as a user would start it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "bulk.py"


def run(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def check(out: str, backend: str) -> list[str]:
    lines = out.splitlines()
    assert lines[0].startswith(f"backend: <{backend}")
    blocks = [ln for ln in lines if ln.strip().startswith("block ")]
    assert len(blocks) == 8
    assert "primes below 2000*i for i < 40 (last: 7662)" in out
    assert "cancelled after 0.2 s" in out
    return blocks


def test_bulk_example_on_threads() -> None:
    blocks = check(run(), "ThreadPoolBackend")
    assert all("structexec-parallel-" in b for b in blocks)


def test_bulk_example_on_processes() -> None:
    blocks = check(run("--processes"), "ProcessPoolBackend")
    assert all("MainThread" in b for b in blocks)


@pytest.mark.dask
def test_bulk_example_on_a_dask_cluster() -> None:
    pytest.importorskip("distributed", reason="needs the dask extra")
    blocks = check(run("--dask"), "DaskBackend 'tcp://127.0.0.1:")
    assert all("Dask" in b for b in blocks)
