"""A pytest plugin that runs trio's own shipped tests with ``trio.open_nursery`` replaced by
``structexec.counting_scope``: the drop-in check that ``.ci/trio-suite`` runs.

Every call of ``trio.open_nursery`` (or ``trio._core.open_nursery``) made *from a trio test
module* gets ``sx.counting_scope(strict_exception_groups=...)`` instead; trio's own modules
(the run's system nursery, ``serve_listeners``, ``nursery.start``'s inner nursery, ...) and
structexec itself keep the real nursery. The argument is first given to trio's own
``open_nursery`` too, so that its deprecation warning and its errors are unchanged.

``--sx-expected FILE`` names the list of expected differences (``expected-differences.txt``
beside this file: one ``test id | fails, hangs or sometimes | reason`` a line). Tests listed as
``hangs`` are not run. At the end the outcome of every test is compared with the list, and
the session fails (exit status 1) on any difference: a test that fails and is not listed, a
test listed as ``fails`` that passed (the list must stay true: remove it), a listed test that
was not collected. Tests that fail as listed do not fail the session. A test listed as
``sometimes`` runs and either outcome is accepted (a difference that depends on the order in
which trio schedules a batch of tasks, which trio randomizes).

Loaded with ``-p sx_trio_suite`` (``.ci/trio-suite`` puts this directory on ``sys.path``); it
is not under ``tests/``, so the main suite never collects it.
"""

from __future__ import annotations

import gc
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


# trio's test_module_metadata_is_fixed_up checks the names of trio's public functions.
for _attr in ("__doc__", "__module__", "__name__", "__qualname__"):
    setattr(_open_nursery, _attr, getattr(_REAL, _attr))


def pytest_configure(config: Any) -> None:
    # Before the test modules are imported, so that `from trio import open_nursery` in one of
    # them binds the replacement too.
    trio.open_nursery = _open_nursery  # type: ignore[assignment]
    trio._core.open_nursery = _open_nursery  # type: ignore[assignment]


def pytest_unconfigure(config: Any) -> None:
    trio.open_nursery = _REAL
    trio._core.open_nursery = _REAL


# -- the list of expected differences, and the outcome of every test by a stable id

_RESULTS: dict[str, str] = {}
_EXPECTED: dict[str, tuple[str, str]] = {}
_COLLECTED: set[str] = set()
_STATUSES = ("fails", "hangs", "sometimes")


def test_id(item: Any) -> str:
    """``trio._core._tests.test_run::test_name[param]``: the id in the list of differences."""
    return f"{item.module.__name__}::{item.name}"


def read_expected(path: str) -> dict[str, tuple[str, str]]:
    """``{test id: (status, reason)}`` from the list (``#`` starts a comment line)."""
    out: dict[str, tuple[str, str]] = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            parts = [p.strip() for p in line.split("|")]
            if len(parts) != 3 or parts[1] not in _STATUSES or not parts[2]:
                raise pytest.UsageError(
                    f"{path}:{n}: expected 'test id | fails, hangs or sometimes | reason', "
                    f"got {line!r}"
                )
            if parts[0] in out:
                raise pytest.UsageError(f"{path}:{n}: {parts[0]} is listed twice")
            out[parts[0]] = (parts[1], parts[2])
    return out


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("sx_trio_suite")
    group.addoption("--sx-expected", help="the list of expected differences")
    group.addoption("--sx-results", help="also write each test's outcome (JSON) to this file")


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    path = config.getoption("--sx-expected")
    if path:
        _EXPECTED.update(read_expected(path))
    _COLLECTED.update(test_id(it) for it in items)
    hangs = {tid for tid, (status, _) in _EXPECTED.items() if status == "hangs"}
    skip = [it for it in items if test_id(it) in hangs]
    if skip:
        config.hook.pytest_deselected(items=skip)
        items[:] = [it for it in items if test_id(it) not in hangs]


def pytest_runtest_teardown(item: Any) -> None:
    # A coroutine a failing test left un-awaited is collected now, so that pytest blames its
    # "never awaited" warning on that test, not on whichever test runs when it is collected.
    if getattr(item, "_sx_failed", False):
        gc.collect()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: Any, call: Any) -> Any:
    report = yield
    report.sx_id = test_id(item)
    if report.failed:
        item._sx_failed = True
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


def _differences() -> tuple[list[str], list[str]]:
    """(lines that fail the session, notes)."""
    bad: list[str] = []
    notes: list[str] = []
    for tid, outcome in sorted(_RESULTS.items()):
        expected = _EXPECTED.get(tid)
        if outcome == "failed" and expected is None:
            bad.append(f"NEW DIFFERENCE: {tid} fails with counting_scope (not in the list)")
        elif expected is not None and expected[0] == "fails":
            if outcome in ("passed", "xfailed"):
                bad.append(f"NOW PASSES: {tid} is listed as a difference; remove it")
            elif outcome == "skipped":
                notes.append(f"note: {tid} (listed) was skipped here")
    for tid in sorted(_EXPECTED):
        if tid not in _COLLECTED:
            bad.append(f"NOT FOUND: {tid} is listed but was not collected; remove it")
    return bad, notes


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    path = session.config.getoption("--sx-results")
    if path:
        with open(path, "w") as f:
            json.dump(dict(sorted(_RESULTS.items())), f, indent=0)
    if not session.config.getoption("--sx-expected"):
        return
    bad, notes = _differences()
    failed = sum(1 for v in _RESULTS.values() if v == "failed")
    lines = [
        "",
        f"trio suite with counting_scope: {len(_RESULTS)} tests run, {failed} failed, "
        f"{sum(1 for s, _ in _EXPECTED.values() if s == 'fails')} differences listed, "
        f"{sum(1 for s, _ in _EXPECTED.values() if s == 'hangs')} listed hangs not run",
        *notes,
        *bad,
        "TRIO SUITE: " + ("DIFFERENCES FROM THE LIST" if bad else "as listed"),
    ]
    tr = session.config.pluginmanager.get_plugin("terminalreporter")
    for line in lines:
        if tr is not None:
            tr.write_line(line)
        else:  # pragma: no cover
            print(line)
    # Only an interrupted or broken run keeps its own status: listed failures are expected.
    if exitstatus in (0, 1):
        session.exitstatus = 1 if bad else 0
