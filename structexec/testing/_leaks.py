"""Leak checks for trio tests: no task, no cancel-scope deadline, no contract violation left.

the scopes guide "The nursery face: `async with`",
the scopes guide "Senders in a scope: `spawn`, `spawn_future`, `associate`" (scopes always join;
associations released at a defined moment), [exec.counting.scopes], the trio guide (trio binding).
"""

from __future__ import annotations

import gc
import math
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .._core._errors import set_terminate_handler
from .._scopes._counting_scope import counting_scope, simple_counting_scope

if TYPE_CHECKING:
    import trio

__all__ = [
    "LeakReport",
    "TerminateRecorder",
    "assert_no_leaks",
    "live_scopes",
    "living_tasks",
    "no_leaks",
    "record_terminate",
]


class TerminateRecorder:
    """Records calls of the terminate handler instead of aborting
    (the senders guide "What happens when things fail").

    ``calls`` is a list of ``(reason, exc)``. Use it through :func:`record_terminate` or the
    ``sx_terminate_calls`` pytest fixture.
    """

    def __init__(self) -> None:
        self.calls: list[tuple[str, BaseException | None]] = []

    def __call__(self, reason: str, exc: BaseException | None) -> None:
        self.calls.append((reason, exc))

    def __len__(self) -> int:
        return len(self.calls)

    def __bool__(self) -> bool:
        return True

    @property
    def reasons(self) -> list[str]:
        """The reasons of the recorded calls, in order."""
        return [r for r, _ in self.calls]

    def __repr__(self) -> str:
        return f"<TerminateRecorder {self.reasons!r}>"


@contextmanager
def record_terminate() -> Iterator[TerminateRecorder]:
    """Install a :class:`TerminateRecorder` with ``sx.set_terminate_handler``; restore on exit."""
    rec = TerminateRecorder()
    previous = set_terminate_handler(rec)
    try:
        yield rec
    finally:
        set_terminate_handler(previous)


@dataclass
class LeakReport:
    """What :func:`no_leaks` saw: trio task counts at entry/exit, terminate calls."""

    tasks_at_entry: int = 0
    tasks_at_exit: int = 0
    terminate_calls: list[tuple[str, BaseException | None]] = field(default_factory=list)


def living_tasks() -> set[trio.lowlevel.Task]:
    """Every task of the current trio run, found by walking the task tree from the root."""
    import trio

    out: set[trio.lowlevel.Task] = set()
    stack = [trio.lowlevel.current_root_task()]
    while stack:
        t = stack.pop()
        if t is None or t in out:
            continue
        out.add(t)
        for n in t.child_nurseries:
            stack.extend(n.child_tasks)
    return out


_GOOD_SCOPE_STATES = ("unused", "unused-and-closed", "joined")


def live_scopes() -> list[counting_scope | simple_counting_scope]:
    """Every ``counting_scope`` and ``simple_counting_scope`` object that is still alive."""
    kinds = (counting_scope, simple_counting_scope)
    return [o for o in gc.get_objects() if isinstance(o, kinds)]


def unjoined_scopes(before: set[int]) -> list[counting_scope | simple_counting_scope]:
    """Scopes alive now, not in ``before`` (ids), in a state other than unused or joined."""
    return [
        s
        for s in live_scopes()
        if id(s) not in before and getattr(s, "state", "joined") not in _GOOD_SCOPE_STATES
    ]


def collect_scope_warnings() -> list[str]:
    """``gc.collect()``, returning the ResourceWarnings of scopes dropped un-joined
    ([exec.scope.simple.counting])."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        gc.collect()
    return [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]


def _stats() -> trio.lowlevel.RunStatistics:
    import trio

    return trio.lowlevel.current_statistics()


def assert_no_leaks(tasks_at_entry: int, *, deadline_at_entry: float = math.inf) -> None:
    """Assert that the current trio run has ``tasks_at_entry`` living tasks and no new deadline.

    ``trio.lowlevel.current_statistics().tasks_living`` must equal ``tasks_at_entry`` (a
    larger count means a task was left running, for instance a system task of the trio
    bridge); if there was no pending cancel-scope deadline at entry, there must be none now
    (a cancel scope was left open). Raises ``AssertionError`` naming what leaked.
    """
    st = _stats()
    if st.tasks_living != tasks_at_entry:
        raise AssertionError(
            f"trio task leak: {st.tasks_living} tasks living, {tasks_at_entry} expected"
        )
    if math.isinf(deadline_at_entry) and not math.isinf(st.seconds_to_next_deadline):
        raise AssertionError(
            "trio cancel scope leak: a deadline is pending that was not there at entry"
        )


@asynccontextmanager
async def no_leaks(
    *, settle: int = 10, check_terminate: bool = True, collect: bool = True
) -> AsyncIterator[LeakReport]:
    """``async with no_leaks():`` fails if the block leaks a trio task, a scope or a violation.

    At entry it records ``trio.lowlevel.current_statistics().tasks_living``, whether a
    cancel-scope deadline is pending and which counting scopes exist, and (with
    ``check_terminate``) installs a terminate handler that records contract violations. At
    exit it lets the scheduler run up to ``settle`` times (``trio.lowlevel.checkpoint``) for
    tasks that are finishing, runs ``gc.collect()`` (with ``collect``), restores the handler
    and asserts:

    * the number of living trio tasks is back to its value at entry;
    * no cancel-scope deadline is pending that was not at entry;
    * no ``counting_scope``/``simple_counting_scope`` created in the block is left open or
      closed but not joined, and none was garbage-collected un-joined ([exec.scope.simple.counting],
      the scopes guide "The nursery face: `async with`");
    * the terminate handler was not called.

    The body's own exception, if any, propagates unchanged (the checks are then skipped).
    [exec.counting.scopes], the scopes guide "The nursery face: `async with`",
    the senders guide "Writing your own sender", the trio guide.
    """
    import trio

    st = _stats()
    report = LeakReport(tasks_at_entry=st.tasks_living)
    deadline = st.seconds_to_next_deadline
    scopes_before = {id(s) for s in live_scopes()}
    restore: Callable[[], object] | None = None
    if check_terminate:
        rec = TerminateRecorder()
        previous = set_terminate_handler(rec)
        report.terminate_calls = rec.calls

        def restore() -> None:
            set_terminate_handler(previous)

    dropped: list[str] = []
    try:
        yield report
        for _ in range(settle):
            if _stats().tasks_living <= report.tasks_at_entry:
                break
            await trio.lowlevel.checkpoint()
        if collect:
            dropped = collect_scope_warnings()
    finally:
        if restore is not None:
            restore()
    report.tasks_at_exit = _stats().tasks_living
    assert_no_leaks(report.tasks_at_entry, deadline_at_entry=deadline)
    check_scopes(scopes_before, dropped)
    if report.terminate_calls:
        reason, exc = report.terminate_calls[0]
        raise AssertionError(
            f"contract violation (terminate handler called {len(report.terminate_calls)} "
            f"time(s)): {reason}"
        ) from exc


def check_scopes(before: set[int], dropped: list[str]) -> None:
    """Raise ``AssertionError`` for scopes left un-joined (alive, or dropped: ``dropped``)."""
    if dropped:
        raise AssertionError(f"counting scope leak: {dropped[0]}")
    left = unjoined_scopes(before)
    if left:
        raise AssertionError(
            f"counting scope leak: {len(left)} scope(s) not joined: "
            + ", ".join(f"{type(s).__name__} in state {s.state!r}" for s in left)
        )
