"""Bulk functions for stop tests on worker processes: each index says that it runs (a file)
and waits for a release file, so a test can request stop while indices are known to run and
count which ones ran, with no wall-clock margin."""

from __future__ import annotations

import os
import time
from pathlib import Path


def gated(i: int, out: list[int], where: str) -> None:
    """Says that index ``i`` runs (a file), then waits for the release file."""
    Path(where, f"ran-{i}").touch()
    deadline = time.monotonic() + 30  # (only a bound for a broken test)
    while not Path(where, "release").exists() and time.monotonic() < deadline:
        time.sleep(0.005)
    out[i] = 1


def indices_that_ran(where: str) -> list[int]:
    return sorted(int(n[4:]) for n in os.listdir(where) if n.startswith("ran-"))


def wait_for_an_index(where: str) -> None:
    deadline = time.monotonic() + 30
    while not indices_that_ran(where) and time.monotonic() < deadline:
        time.sleep(0.005)
