"""Packaging checks: the package imports, ships ``py.typed`` and every module, and the
README's code taste runs as printed (the README promises both)."""

from __future__ import annotations

import importlib.metadata
import importlib.resources
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_package_imports_from_this_checkout() -> None:
    import structexec

    assert structexec.__file__ is not None
    assert Path(structexec.__file__).resolve().parent == ROOT / "structexec"


def test_distribution_metadata() -> None:
    dist = importlib.metadata.distribution("structexec")
    assert dist.version == "0.1.0"
    assert dist.metadata["Requires-Python"] == ">=3.10"
    requires = dist.requires or []
    assert any(r.startswith("trio") for r in requires)


def test_py_typed_marker_is_present() -> None:
    marker = importlib.resources.files("structexec") / "py.typed"
    assert marker.is_file()


@pytest.mark.slow
def test_wheel_contains_every_module_and_py_typed(tmp_path: Path) -> None:
    """Build a real wheel: subpackages (backends, testing) and py.typed must all be in it."""
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (wheel,) = tmp_path.glob("structexec-0.1.0-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "structexec/py.typed" in names
    expected = {
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "structexec").rglob("*.py")
        if "__pycache__" not in p.parts
    }
    assert expected, "no modules found in the source tree"
    assert expected <= names, sorted(expected - names)


def _readme_taste() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"```python\n(.*?)```", text, re.S)
    assert match, "README.md has no ```python block"
    return match.group(1)


def test_readme_code_taste_runs_as_printed() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _readme_taste()],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    # The snippet's comment states what it prints; the output must match it.
    expected = re.search(r"# prints: (.*)", _readme_taste())
    assert expected, "README snippet must state its output in a '# prints: ...' comment"
    assert proc.stdout.strip() == expected.group(1).strip()
