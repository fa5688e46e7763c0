"""The structexec pytest plugin: fixtures for testing senders (the testing guide).

Registered under the ``pytest11`` entry point ``structexec``, so installing structexec makes
the fixtures available in every test suite; without the entry point, load it with
``pytest_plugins = ["structexec.testing.plugin"]`` in a top-level ``conftest.py``.

Fixtures (the test vocabulary), all named ``sx_...`` so that they do not shadow or collide
with a test suite's own fixtures:

* ``sx_recording_receiver``: a fresh :class:`~structexec.testing.RecordingReceiver`; the test
  fails at teardown if it recorded a contract violation, even one the code under test
  swallowed.
* ``sx_make_receiver``: a factory ``sx_make_receiver(env=None, *, extra_env=None)`` of receivers
  that are all checked the same way.
* ``sx_manual_scheduler``: a fresh :class:`~structexec.testing.ManualScheduler`.
* ``sx_thread_scheduler``: a :class:`~structexec.testing.ThreadScheduler`, closed (its worker
  thread joined) at teardown.
* ``sx_terminate_calls``: installs a recording terminate handler with
  ``sx.set_terminate_handler`` and restores the previous one at teardown; the fixture value
  is the :class:`~structexec.testing.TerminateRecorder` (``.calls``, ``.reasons``).
* ``sx_no_trio_leaks`` (async, for trio tests under pytest-trio): fails the test at teardown if a
  trio task or cancel-scope deadline outlived the test, or if the terminate handler was
  called; the value is the :class:`~structexec.testing.LeakReport`.
* ``sx_property_examples``: the hypothesis example count for property tests, from the
  environment variable ``STRUCTEXEC_PROPERTY_EXAMPLES`` (default 100); use it as
  ``settings(max_examples=...)`` through :func:`structexec.testing.strategies.max_examples`.

The unprefixed names used before (``recording_receiver``, ``make_receiver``, ``manual_scheduler``,
``thread_scheduler``, ``terminate_calls``, ``no_trio_leaks``, ``property_examples``) still work
for one release: each is a deprecated alias of its ``sx_`` fixture that emits a
``DeprecationWarning`` naming the new name. A fixture of the same name in a ``conftest.py`` or
test module takes precedence over a plugin's, so an alias never shadows a suite's own.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING

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

if TYPE_CHECKING:
    import trio

    from .._core._contracts import Env

__all__ = [
    "sx_make_receiver",
    "sx_manual_scheduler",
    "sx_no_trio_leaks",
    "sx_property_examples",
    "sx_recording_receiver",
    "sx_terminate_calls",
    "sx_thread_scheduler",
]


def _check_all(receivers: list[RecordingReceiver]) -> None:
    for rec in receivers:
        if rec.violations:
            raise AssertionError(
                f"{rec!r} recorded a completion-contract violation: {rec.violations[0]}"
            ) from rec.violations[0]


@pytest.fixture
def sx_make_receiver() -> Iterator[Callable[..., RecordingReceiver]]:
    """A factory of :class:`RecordingReceiver`; each is checked for violations at teardown."""
    made: list[RecordingReceiver] = []

    def make(env: object = None, *, extra_env: Env | None = None) -> RecordingReceiver:
        rec = RecordingReceiver(env, extra_env=extra_env)
        made.append(rec)
        return rec

    yield make
    _check_all(made)


@pytest.fixture
def sx_recording_receiver(
    sx_make_receiver: Callable[..., RecordingReceiver],
) -> RecordingReceiver:
    """A fresh :class:`RecordingReceiver` ( ``Rec``), checked at teardown."""
    return sx_make_receiver()


@pytest.fixture
def sx_manual_scheduler() -> ManualScheduler:
    """A fresh :class:`ManualScheduler` ( ``ManualSched``)."""
    return ManualScheduler("manual_scheduler")


@pytest.fixture
def sx_thread_scheduler() -> Iterator[ThreadScheduler]:
    """A :class:`ThreadScheduler`; its worker thread is joined at teardown."""
    with ThreadScheduler("thread_scheduler") as sch:
        yield sch


@pytest.fixture
def sx_terminate_calls() -> Iterator[TerminateRecorder]:
    """Record contract violations instead of aborting
    (the senders guide "What happens when things fail"); restores the handler."""
    rec = TerminateRecorder()
    previous = set_terminate_handler(rec)
    try:
        yield rec
    finally:
        set_terminate_handler(previous)


@pytest.fixture
async def sx_no_trio_leaks() -> AsyncIterator[LeakReport]:
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

    def leaked() -> list[trio.lowlevel.Task]:
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
def sx_property_examples() -> int:
    """Hypothesis ``max_examples`` for property tests (env ``STRUCTEXEC_PROPERTY_EXAMPLES``)."""
    from .strategies import max_examples

    return max_examples()


# -- deprecated aliases: the unprefixed names used before, kept for one release


def _warn_deprecated(old: str) -> None:
    warnings.warn(
        f"the structexec fixture {old!r} is deprecated; use 'sx_{old}' "
        "(the unprefixed names will be removed in the next release)",
        DeprecationWarning,
        stacklevel=3,
    )


@pytest.fixture(name="make_receiver")
def _make_receiver(
    sx_make_receiver: Callable[..., RecordingReceiver],
) -> Callable[..., RecordingReceiver]:
    """Deprecated alias of ``sx_make_receiver`` (warns ``DeprecationWarning``)."""
    _warn_deprecated("make_receiver")
    return sx_make_receiver


@pytest.fixture(name="recording_receiver")
def _recording_receiver(sx_recording_receiver: RecordingReceiver) -> RecordingReceiver:
    """Deprecated alias of ``sx_recording_receiver`` (warns ``DeprecationWarning``)."""
    _warn_deprecated("recording_receiver")
    return sx_recording_receiver


@pytest.fixture(name="manual_scheduler")
def _manual_scheduler(sx_manual_scheduler: ManualScheduler) -> ManualScheduler:
    """Deprecated alias of ``sx_manual_scheduler`` (warns ``DeprecationWarning``)."""
    _warn_deprecated("manual_scheduler")
    return sx_manual_scheduler


@pytest.fixture(name="thread_scheduler")
def _thread_scheduler(sx_thread_scheduler: ThreadScheduler) -> ThreadScheduler:
    """Deprecated alias of ``sx_thread_scheduler`` (warns ``DeprecationWarning``)."""
    _warn_deprecated("thread_scheduler")
    return sx_thread_scheduler


@pytest.fixture(name="terminate_calls")
def _terminate_calls(sx_terminate_calls: TerminateRecorder) -> TerminateRecorder:
    """Deprecated alias of ``sx_terminate_calls`` (warns ``DeprecationWarning``)."""
    _warn_deprecated("terminate_calls")
    return sx_terminate_calls


@pytest.fixture(name="no_trio_leaks")
async def _no_trio_leaks(sx_no_trio_leaks: LeakReport) -> LeakReport:
    """Deprecated alias of ``sx_no_trio_leaks`` (warns ``DeprecationWarning``)."""
    _warn_deprecated("no_trio_leaks")
    return sx_no_trio_leaks


@pytest.fixture(name="property_examples")
def _property_examples(sx_property_examples: int) -> int:
    """Deprecated alias of ``sx_property_examples`` (warns ``DeprecationWarning``)."""
    _warn_deprecated("property_examples")
    return sx_property_examples
