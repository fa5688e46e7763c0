"""A pytest plugin that runs trio's own shipped tests with ``trio.open_nursery`` replaced by
``structexec.counting_scope``: the drop-in check that ``.ci/trio-suite`` runs.

Every call of ``trio.open_nursery`` (or ``trio._core.open_nursery``) made *from a trio test
module* gets ``sx.counting_scope(strict_exception_groups=...)`` instead; trio's own modules
(the run's system nursery, ``serve_listeners``, ``nursery.start``'s inner nursery, ...) and
structexec itself keep the real nursery. The argument is first given to trio's own
``open_nursery`` too, so that its deprecation warning and its errors are unchanged.

Loaded with ``-p sx_trio_suite`` (``.ci/trio-suite`` puts this directory on ``sys.path``); it
is not under ``tests/``, so the main suite never collects it.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
import trio
import trio._core

import structexec as sx

_REAL = trio.open_nursery
_TEST_PACKAGES = ("trio._tests.", "trio._core._tests.")


def _open_nursery(strict_exception_groups: bool | None = None) -> Any:
    caller = sys._getframe(1).f_globals.get("__name__", "")
    real = _REAL(strict_exception_groups)  # trio's warning and errors, unchanged
    if not caller.startswith(_TEST_PACKAGES):
        return real
    return sx.counting_scope(strict_exception_groups=strict_exception_groups)


_open_nursery.__doc__ = _REAL.__doc__


def pytest_configure(config: Any) -> None:
    # Before the test modules are imported, so that `from trio import open_nursery` in one of
    # them binds the replacement too.
    trio.open_nursery = _open_nursery  # type: ignore[assignment]
    trio._core.open_nursery = _open_nursery  # type: ignore[assignment]


def pytest_unconfigure(config: Any) -> None:
    trio.open_nursery = _REAL
    trio._core.open_nursery = _REAL


# -- the outcome of every test, by a stable id, for .ci/trio-suite to compare

_RESULTS: dict[str, str] = {}


def test_id(item: Any) -> str:
    """``trio._core._tests.test_run::test_name[param]``: the id in the list of differences."""
    return f"{item.module.__name__}::{item.name}"


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("sx_trio_suite")
    group.addoption("--sx-results", help="write each test's outcome (JSON) to this file")
    group.addoption(
        "--sx-deselect",
        help="a file of test ids (one a line, '#' comments) not to run: known hangs",
    )


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    path = config.getoption("--sx-deselect")
    if not path:
        return
    with open(path) as f:
        skip = {line.split("#")[0].strip() for line in f} - {""}
    keep = [it for it in items if test_id(it) not in skip]
    config.hook.pytest_deselected(items=[it for it in items if test_id(it) in skip])
    items[:] = keep


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: Any, call: Any) -> Any:
    report = yield
    report.sx_id = test_id(item)
    return report


def pytest_runtest_logreport(report: Any) -> None:
    tid = getattr(report, "sx_id", None)
    if tid is None:
        return
    if report.failed:
        _RESULTS[tid] = "failed"
    elif report.skipped:
        if report.when != "teardown":
            _RESULTS.setdefault(tid, "xfailed" if hasattr(report, "wasxfail") else "skipped")
    elif report.when == "call":
        _RESULTS.setdefault(tid, "passed")


def pytest_sessionfinish(session: Any) -> None:
    path = session.config.getoption("--sx-results")
    if path:
        with open(path, "w") as f:
            json.dump(dict(sorted(_RESULTS.items())), f, indent=0)
