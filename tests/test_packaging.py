"""Packaging checks: the package imports, ships ``py.typed`` and every module, and the
README's code taste runs as printed (the README promises both); the project metadata
(license, URLs, extras) and the editable install that type checkers can follow."""

from __future__ import annotations

import importlib.metadata
import importlib.resources
import json
import re
import subprocess
import sys
import zipfile
from email.parser import HeaderParser
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib  # a dependency of pytest on Python 3.10

ROOT = Path(__file__).resolve().parent.parent
# [text](target) in Markdown, target not an absolute URL or an in-page anchor
_RELATIVE_LINK = re.compile(r"\[[^\]]*\]\((?!https?://|#)[^)]*\)")


def _pyproject() -> dict[str, Any]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def test_package_imports_from_this_checkout() -> None:
    """The suite tests this source tree's structexec: imported from it (a checkout, an
    editable install) or installed from it (.ci/package runs the tests of an unpacked sdist
    against the package installed from that sdist)."""
    import structexec

    assert structexec.__file__ is not None
    package = Path(structexec.__file__).resolve().parent
    source = ROOT / "structexec"
    if package == source:
        return
    # An installed copy: it must be the installed distribution's, with this tree's modules.
    installed = Path(str(importlib.metadata.distribution("structexec").locate_file("structexec")))
    assert package == installed.resolve(), f"structexec imported from {package}"
    modules = sorted(p.relative_to(source) for p in source.rglob("*.py"))
    assert modules == sorted(p.relative_to(package) for p in package.rglob("*.py"))
    changed = [m for m in modules if (package / m).read_bytes() != (source / m).read_bytes()]
    assert changed == [], f"the installed structexec differs from {source}"


def test_distribution_metadata() -> None:
    import structexec

    dist = importlib.metadata.distribution("structexec")
    # one place for the version: structexec.__version__, which the build reads
    assert dist.version == structexec.__version__
    assert "version" in _pyproject()["project"]["dynamic"]
    assert "version" not in _pyproject()["project"]
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
    # Only the package and its metadata: no tests/, docs/ or examples/ as top-level modules.
    assert {n.split("/")[0] for n in names} == {"structexec", "structexec-0.1.0.dist-info"}
    wheel_zip = zipfile.ZipFile(wheel)
    meta = HeaderParser().parsestr(
        wheel_zip.read("structexec-0.1.0.dist-info/METADATA").decode("utf-8")
    )
    assert meta["License-Expression"] == "MIT"
    assert meta.get_all("License-File") == ["LICENSE"]
    assert "structexec-0.1.0.dist-info/licenses/LICENSE" in names
    # no URL of a repository or site that does not exist (tests/test_links.py)
    assert meta.get_all("Project-URL") is None
    assert set(meta.get_all("Provides-Extra") or []) == {"test", "dask", "testing"}
    # the package index shows the long description without the repository: no relative link
    description = meta.get_payload()
    assert "pip install structexec" in description
    assert _RELATIVE_LINK.findall(description) == []
    assert "`docs/scopes.md` in the source distribution" in description
    entry_points = wheel_zip.read("structexec-0.1.0.dist-info/entry_points.txt").decode()
    assert "[pytest11]\nstructexec = structexec.testing.plugin" in entry_points


def test_project_metadata_in_pyproject() -> None:
    """SPDX license expression with its file (not the deprecated table form), the project
    URLs a package index shows, and the changelog they point to."""
    project = _pyproject()["project"]
    assert project["license"] == "MIT"
    assert project["license-files"] == ["LICENSE"]
    license_text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert license_text.startswith("MIT License")
    assert "Copyright (c) 2026 structexec developers" in license_text
    assert "urls" not in project  # no public repository or site address yet
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    # one section for what is not released yet, and no link to a tag or a comparison
    assert re.findall(r"^## .*$", changelog, re.M).count("## Unreleased") == 1
    assert not re.search(r"^\[[^\]]+\]: ", changelog, re.M), "a link reference to a tag"
    assert project["entry-points"]["pytest11"] == {"structexec": "structexec.testing.plugin"}


def test_extras_are_for_users_and_tools_are_dependency_groups() -> None:
    """The user-visible extras are dask and testing (and test, which the README's set-up
    command installs); the development tools are PEP 735 dependency groups, each tool pinned
    once and the same everywhere (.ci/run installs ruff and mypy as the lint group pins them)."""
    pyproject = _pyproject()
    extras = pyproject["project"]["optional-dependencies"]
    assert set(extras) == {"test", "dask", "testing"}
    core = {Requirement(r).name for r in pyproject["project"]["dependencies"]}
    assert not [r for r in extras["dask"] if Requirement(r).name in core], "repeats a core dep"
    groups = pyproject["dependency-groups"]
    assert {"lint", "docs", "typing", "bench"} <= set(groups)
    pins: dict[str, set[str]] = {}
    for reqs in groups.values():
        for r in reqs:
            req = Requirement(r)
            pins.setdefault(req.name, set()).add(str(req.specifier))
    assert pins["mypy"] == {"==2.4.1"}, pins["mypy"]
    ci_run = ROOT / ".ci" / "run"
    if ci_run.is_file():
        lint = {Requirement(r).name: str(Requirement(r).specifier) for r in groups["lint"]}
        for name, spec in lint.items():
            assert f"'{name}{spec}'" in ci_run.read_text(), f".ci/run does not install {name}{spec}"


def test_classifiers() -> None:
    classifiers = _pyproject()["project"]["classifiers"]
    # sys._getframe, f_lasti and gc.get_objects as CPython lays them out
    assert "Programming Language :: Python :: Implementation :: CPython" in classifiers
    assert any(c.startswith("Operating System ::") for c in classifiers)
    assert any(c.startswith("Topic ::") for c in classifiers)
    for minor in range(10, 15):
        assert f"Programming Language :: Python :: 3.{minor}" in classifiers


def test_testing_extra_brings_hypothesis() -> None:
    extras = _pyproject()["project"]["optional-dependencies"]
    (req,) = (Requirement(r) for r in extras["testing"])
    assert req.name == "hypothesis"
    # The same lower bound as the test extra's hypothesis (the suite runs the strategies).
    (test_req,) = (Requirement(r) for r in extras["test"] if Requirement(r).name == "hypothesis")
    assert req.specifier == test_req.specifier


def _run_without_hypothesis(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter in which ``import hypothesis`` fails, as it does
    where hypothesis is not installed."""
    return subprocess.run(
        [sys.executable, "-c", "import sys; sys.modules['hypothesis'] = None\n" + code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


def test_strategies_without_hypothesis_name_the_testing_extra() -> None:
    proc = _run_without_hypothesis(
        "try:\n"
        "    import structexec.testing.strategies\n"
        "except ImportError as exc:\n"
        "    print(type(exc).__name__, exc.name, exc, sep='|')\n"
    )
    assert proc.returncode == 0, proc.stderr
    kind, name, message = proc.stdout.strip().split("|")
    # A ModuleNotFoundError (an ImportError) for hypothesis, so pytest.importorskip and
    # `except ImportError` keep working, whose message says how to get it.
    assert (kind, name) == ("ModuleNotFoundError", "hypothesis")
    assert "structexec.testing.strategies needs hypothesis" in message
    assert "pip install 'structexec[testing]'" in message


def test_structexec_testing_imports_without_hypothesis() -> None:
    # Only the strategies need hypothesis; the tools and the pytest plugin do not.
    proc = _run_without_hypothesis(
        "import structexec, structexec.testing, structexec.testing.plugin\n"
        "print(structexec.testing.ManualScheduler.__name__)\n"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ManualScheduler"


def test_checkout_root_holds_no_importable_module_but_structexec() -> None:
    """An editable install puts the checkout root on ``sys.path`` (see the next test). Then
    nothing else in the root may be a regular package or a module: ``tests``, ``docs``,
    ``examples`` and ``benchmarks`` stay plain directories (no ``__init__.py``), which can
    never shadow a regular package of the same name."""
    stray = [
        p.name
        for p in ROOT.iterdir()
        if p.name != "structexec"
        and ((p.is_file() and p.suffix == ".py") or (p / "__init__.py").is_file())
    ]
    assert stray == []


def test_editable_install_is_a_plain_path_entry() -> None:
    """After the README's ``pip install -e``, mypy and pyright find structexec: the install
    is a ``.pth`` file holding the checkout root, not an import hook, which type checkers
    cannot follow (setuptools' editable install of this layout was one)."""
    dist = importlib.metadata.distribution("structexec")
    direct_url = dist.read_text("direct_url.json")
    info = json.loads(direct_url) if direct_url else {}
    if not info.get("dir_info", {}).get("editable"):
        pytest.skip("structexec is not installed in editable mode")
    if info.get("url") != ROOT.as_uri():
        pytest.skip(f"the editable install is of another checkout: {info.get('url')}")
    pth_files = [f for f in dist.files or [] if f.name.endswith(".pth")]
    assert pth_files, [str(f) for f in dist.files or []]
    lines = [
        line.strip()
        for f in pth_files
        for line in Path(str(f.locate())).read_text().splitlines()
        if line.strip()
    ]
    assert not [line for line in lines if line.startswith("import")], lines
    assert [Path(line).resolve() for line in lines] == [ROOT]
    assert not [f for f in dist.files or [] if "__editable__" in f.name], dist.files


def test_min_constraints_pin_every_declared_lower_bound() -> None:
    """.ci/min-constraints.txt (the minimum-dependency CI run) pins each dependency of the
    package and of its test and dask extras at exactly its declared lower bound."""
    constraints_file = ROOT / ".ci" / "min-constraints.txt"
    if not constraints_file.is_file():
        pytest.skip("no .ci/ here (an unpacked sdist)")
    pins = {}
    for line in constraints_file.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[name.strip().lower().replace("_", "-")] = Version(version)
    project = _pyproject()["project"]
    extras = project["optional-dependencies"]
    declared = [*project["dependencies"], *extras["test"], *extras["dask"], *extras["testing"]]
    wrong = {}
    for spec in declared:
        req = Requirement(spec)
        (lower,) = [Version(s.version) for s in req.specifier if s.operator == ">="]
        pinned = pins.get(req.name.lower().replace("_", "-"))
        if pinned != lower:
            wrong[req.name] = (str(lower), str(pinned))
    assert wrong == {}, "declared lower bound vs pin in .ci/min-constraints.txt"


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
