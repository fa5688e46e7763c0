"""The typing suite: ``mypy --strict`` and ``pyright`` over tests/typing/ (docs/typing.md).

* ``tests/typing/pass_types.py``: lines both checkers must accept, with ``assert_type`` of what
  they must infer (value types through ``then``, ``let_value``, ``when_all``, ``spawn_future``,
  ``async with`` on a scope, ``@sx.task``, ...).
* ``tests/typing/fail_types.py``: lines that must be rejected, each with the
  ``# type: ignore[code]`` (mypy, ``warn_unused_ignores``) and ``# pyright: ignore[rule]``
  (``reportUnnecessaryTypeIgnoreComment``) that silences exactly that error, so a line that
  stops failing fails this test.

The checkers come from the ``typing`` dependency group (``pip install --group typing``, pip >=
25.1); without them these
tests fail (they do not skip). They are marked ``typing`` and left out of a plain ``pytest`` run
(tests/conftest.py); run them with ``python -m pytest tests/test_typing.py`` or ``-m typing``.
Both checkers read this checkout's ``structexec``, not an installed copy: mypy through
``MYPYPATH``, pyright through ``extraPaths`` (tests/typing/pyrightconfig.json).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.typing

ROOT = Path(__file__).resolve().parent.parent
TYPING = ROOT / "tests" / "typing"
FILES = ["tests/typing/pass_types.py", "tests/typing/fail_types.py"]
INSTALL = (
    "install the typing dependency group of structexec (pip install --group typing, pip >= 25.1, "
    "which pins mypy and "
    "pyright) into the interpreter that runs pytest: {}"
)


def _require(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.fail(f"{module} is not importable: " + INSTALL.format(sys.executable))


def _run(cmd: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def test_mypy_strict(tmp_path: Path) -> None:
    _require("mypy")
    env = {**os.environ, "MYPYPATH": str(ROOT)}
    cmd = [
        sys.executable,
        "-m",
        "mypy",
        "--config-file",
        str(TYPING / "mypy.ini"),
        "--cache-dir",
        str(tmp_path / "mypy_cache"),
        *FILES,
    ]
    r = _run(cmd, env, timeout=300)
    assert r.returncode == 0, f"mypy found errors:\n{r.stdout}{r.stderr}"


def test_pyright() -> None:
    _require("pyright")
    # The PyPI package runs pyright's npm release (of its own version) with node; the first run
    # downloads it (PYRIGHT_PYTHON_CACHE_DIR or ~/.cache/pyright-python).
    env = dict(os.environ)
    cmd = [
        sys.executable,
        "-m",
        "pyright",
        "--pythonpath",
        sys.executable,
        "-p",
        str(TYPING / "pyrightconfig.json"),
    ]
    r = _run(cmd, env, timeout=300)
    assert r.returncode == 0, f"pyright found errors:\n{r.stdout}{r.stderr}"
    assert "0 errors" in r.stdout, r.stdout
