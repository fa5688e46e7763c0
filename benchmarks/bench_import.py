"""What ``import structexec`` costs on top of ``import trio``.

Each sample starts fresh interpreters (``python -c "import trio"`` and ``python -c "import
structexec"``, alternating) and takes the median wall time of several. Bytecode caching is on
(``PYTHONPYCACHEPREFIX`` points at a private temporary directory, warmed first), as it is for
an installed wheel: with ``PYTHONDONTWRITEBYTECODE=1`` every run would recompile the package's
sources, which measures the compiler, not the import.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time

from _harness import Bench, Pair, row

_PREFIX = tempfile.mkdtemp(prefix="sx-bench-pycache-")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = _PREFIX
    return env


def _wall(module: str, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", f"import {module}"], env=env, check=True)
    return time.perf_counter() - start


def _import_times(b: Bench) -> tuple[float, float]:
    env = _env()
    for module in ("trio", "structexec"):  # warm the bytecode cache
        _wall(module, env)
    trio_t: list[float] = []
    sx_t: list[float] = []
    for _ in range(b.n(20, minimum=7)):
        trio_t.append(_wall("trio", env))
        sx_t.append(_wall("structexec", env))
    return statistics.median(sx_t), statistics.median(trio_t)


@row(
    metric="import structexec minus import trio, fresh interpreter, bytecode cached",
    unit="ms/op",
    limit=25.0,
    reps=1,
)
def import_cost(b: Bench) -> Pair:
    """The extra wall time a program pays to import structexec once trio is imported
    (a structexec-only row: the limit is absolute, in milliseconds)."""
    sx_t, trio_t = _import_times(b)
    return sx_t - trio_t, None


@row(metric="import structexec vs import trio, fresh interpreter, bytecode cached", unit="ms/op")
def import_ratio(b: Bench) -> Pair:
    """The same two timings side by side (informational)."""
    return _import_times(b)
