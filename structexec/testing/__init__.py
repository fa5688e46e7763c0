"""``structexec.testing``: tools to test senders, and to property-test cancellation.

the testing guide (test vocabulary), 2 (the asynchronous-operation contract).

* :class:`RecordingReceiver`: records how an operation completed and checks the completion
  contract (exactly once, never before start, stop callbacks deregistered first).
* :class:`ManualScheduler`: a scheduler whose queued items run when the test says, in the
  order it says; :class:`ThreadScheduler`: one dedicated worker thread.
* :func:`no_leaks` / :func:`assert_no_leaks`: a trio test leaked no task, no cancel scope and
  triggered no contract violation; :func:`record_terminate` records terminate-handler calls.
* :mod:`structexec.testing.strategies` (needs ``hypothesis``: the ``testing`` extra):
  strategies for random sender trees with a model of their outcome, stop schedules and
  scheduler interleavings.
* :mod:`structexec.testing.plugin`: the pytest plugin (fixtures), registered under the
  ``pytest11`` entry point ``structexec``.

Importing this package needs neither pytest nor hypothesis.
"""

from __future__ import annotations

from ._leaks import (
    LeakReport,
    TerminateRecorder,
    assert_no_leaks,
    live_scopes,
    living_tasks,
    no_leaks,
    record_terminate,
)
from ._manual import ManualScheduler
from ._receiver import RecordingReceiver
from ._thread_sched import ThreadScheduler

__all__ = [
    "RecordingReceiver",
    "ManualScheduler",
    "ThreadScheduler",
    "no_leaks",
    "assert_no_leaks",
    "live_scopes",
    "living_tasks",
    "record_terminate",
    "TerminateRecorder",
    "LeakReport",
]
