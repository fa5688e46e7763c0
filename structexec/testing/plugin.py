"""The structexec pytest plugin: fixtures for testing senders (docs/testing.md).

Registered under the ``pytest11`` entry point ``structexec``, so installing structexec makes
the fixtures available in every test suite; without the entry point, load it with
``pytest_plugins = ["structexec.testing.plugin"]`` in a top-level ``conftest.py``.

Fixtures (the test vocabulary):

* ``recording_receiver``: a fresh :class:`~structexec.testing.RecordingReceiver`; the test
  fails at teardown if it recorded a contract violation, even one the code under test
  swallowed.
* ``make_receiver``: a factory ``make_receiver(env=None, *, extra_env=None)`` of receivers
  that are all checked the same way.
* ``manual_scheduler``: a fresh :class:`~structexec.testing.ManualScheduler`.
* ``thread_scheduler``: a :class:`~structexec.testing.ThreadScheduler`, closed (its worker
  thread joined) at teardown.
* ``terminate_calls``: installs a recording terminate handler with
  ``sx.set_terminate_handler`` and restores the previous one at teardown; the fixture value
  is the :class:`~structexec.testing.TerminateRecorder` (``.calls``, ``.reasons``).
* ``no_trio_leaks`` (async, for trio tests under pytest-trio): fails the test at teardown if a
  trio task or cancel-scope deadline outlived the test, or if the terminate handler was
  called; the value is the :class:`~structexec.testing.LeakReport`.
* ``property_examples``: the hypothesis example count for property tests, from the
  environment variable ``STRUCTEXEC_PROPERTY_EXAMPLES`` (default 100); use it as
  ``settings(max_examples=...)`` through :func:`structexec.testing.strategies.max_examples`.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from .._core._errors import set_terminate_handler
from ._leaks import (
    LeakReport,
    TerminateRecorder,
    check_scopes,
    collect_scope_warnings,
    live_scopes,
    living_tasks,
)
from ._manual import ManualScheduler
from ._receiver import RecordingReceiver
from ._thread_sched import ThreadScheduler

__all__ = [
    "make_receiver",
    "manual_scheduler",
    "no_trio_leaks",
    "property_examples",
    "recording_receiver",
    "terminate_calls",
    "thread_scheduler",
]


def _check_all(receivers: list[RecordingReceiver]) -> None:
    for rec in receivers:
        if rec.violations:
            raise AssertionError(
                f"{rec!r} recorded a completion-contract violation: {rec.violations[0]}"
            ) from rec.violations[0]


@pytest.fixture
def make_receiver() -> Iterator[Callable[..., RecordingReceiver]]:
    """A factory of :class:`RecordingReceiver`; each is checked for violations at teardown."""
    made: list[RecordingReceiver] = []

    def make(env: Any = None, *, extra_env: Any = None) -> RecordingReceiver:
        rec = RecordingReceiver(env, extra_env=extra_env)
        made.append(rec)
        return rec

    yield make
    _check_all(made)


@pytest.fixture
def recording_receiver(
    make_receiver: Callable[..., RecordingReceiver],
) -> RecordingReceiver:
    """A fresh :class:`RecordingReceiver` ( ``Rec``), checked at teardown."""
    return make_receiver()


@pytest.fixture
def manual_scheduler() -> ManualScheduler:
    """A fresh :class:`ManualScheduler` ( ``ManualSched``)."""
    return ManualScheduler("manual_scheduler")


@pytest.fixture
def thread_scheduler() -> Iterator[ThreadScheduler]:
    """A :class:`ThreadScheduler`; its worker thread is joined at teardown."""
    with ThreadScheduler("thread_scheduler") as sch:
        yield sch


@pytest.fixture
def terminate_calls() -> Iterator[TerminateRecorder]:
    """Record contract violations instead of aborting
    (docs/senders.md "What happens when things fail"); restores the handler."""
    rec = TerminateRecorder()
    previous = set_terminate_handler(rec)
    try:
        yield rec
    finally:
        set_terminate_handler(previous)


@pytest.fixture
async def no_trio_leaks() -> AsyncIterator[LeakReport]:
    """Fail a trio test that leaks a trio task, a cancel-scope deadline or a violation.

    Compares the trio tasks living at setup and at teardown (walking the task tree from
    ``trio.lowlevel.current_root_task()``; the tasks pytest-trio runs the test and async
    fixtures in are not counted), checks that no deadline is pending that was not
    pending at setup, that no counting scope created by the test is left un-joined (alive,
    or garbage-collected with a ResourceWarning), and that the terminate handler was not
    called meanwhile. Needs
    pytest-trio (``trio_mode = true`` or ``@pytest.mark.trio``).
    """
    import trio

    before = living_tasks()
    scopes_before = {id(s) for s in live_scopes()}
    st = trio.lowlevel.current_statistics()
    report = LeakReport(tasks_at_entry=st.tasks_living)
    deadline = st.seconds_to_next_deadline
    rec = TerminateRecorder()
    previous = set_terminate_handler(rec)
    report.terminate_calls = rec.calls

    def leaked() -> list[Any]:
        # pytest-trio runs the test and each async fixture in tasks of their own.
        return [
            t for t in living_tasks() - before if not t.name.startswith(("<fixture ", "<test "))
        ]

    dropped: list[str] = []
    try:
        yield report
        for _ in range(10):
            if not leaked():
                break
            await trio.lowlevel.checkpoint()
        dropped = collect_scope_warnings()
    finally:
        set_terminate_handler(previous)
    st = trio.lowlevel.current_statistics()
    report.tasks_at_exit = st.tasks_living
    extra = leaked()
    if extra:
        raise AssertionError(
            f"trio task leak: {len(extra)} task(s) started by the test are still running: "
            f"{sorted(t.name for t in extra)}"
        )
    if math.isinf(deadline) and not math.isinf(st.seconds_to_next_deadline):
        raise AssertionError("trio cancel scope leak: a deadline set by the test is still pending")
    check_scopes(scopes_before, dropped)
    if rec.calls:
        reason, exc = rec.calls[0]
        raise AssertionError(f"contract violation (terminate handler called): {reason}") from exc


@pytest.fixture
def property_examples() -> int:
    """Hypothesis ``max_examples`` for property tests (env ``STRUCTEXEC_PROPERTY_EXAMPLES``)."""
    from .strategies import max_examples

    return max_examples()
