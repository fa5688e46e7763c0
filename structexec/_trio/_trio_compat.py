"""The one place where structexec touches trio's private internals (read only), behind a
version check and feature detection, each with a public fallback.

The fast path of ``await sx.when_all(<coroutines>)`` (``_when_all_nursery``) needs three things
trio has no public API for:

* whether the awaiting task's own cancellation has hit (``Task._cancel_status`` and its
  ``effectively_cancelled``), read at the await and again when the last child has finished;
* whether the task's effective deadline is finite, cheaply (the chain of ``CancelStatus._scope``
  / ``._parent`` and ``CancelScope._deadline`` / ``._shield``; the public
  ``trio.current_effective_deadline()`` costs about six times as much);
* trio's own ``collapse_exception_group``, so that a group escaping a child is collapsed exactly
  as ``CancelScope.__exit__`` collapses it (a non-strict nursery's one-exception group becomes
  its exception).

For ``sx.dump()``, :func:`shielded_in_task` walks the same chain (read only) to tell whether a
hosted task sits in a shielded cancel scope of its own (``None`` without the private state).

And one more, for ``sync_wait`` (which refuses to run on a trio thread) and the other callers
of ``in_trio_run``: :func:`fast_in_trio_run`, the same answer as ``trio.lowlevel.in_trio_run()``
(``hasattr`` of ``runner`` on trio's thread-local run context) read as a key of that
thread-local's per-thread ``__dict__``. ``hasattr`` on a ``threading.local`` builds and
discards an ``AttributeError`` on every miss (the common answer: not on a trio thread), which
made it the largest single cost of ``sync_wait`` of work that completes inline (about
0.2-0.8 us of 1.6-3 us); the key lookup costs a few tens of nanoseconds.

And two for the counting scopes' ``strict_exception_groups`` (which must behave as
``trio.open_nursery``'s): :func:`run_strict_exception_groups`, the ``trio.run`` setting a
nursery opened without one follows, and :data:`LOOSE_NOTE`, trio's note on a non-strict
nursery's group, which :func:`collapse_exception_group` looks for.

:data:`PRIVATE_STATE` says whether the private state is used: trio at least
:data:`MIN_TRIO` and every attribute above present (checked once, at import, on trio's
classes). Otherwise every function here falls back to public trio:
``cancel_status`` gives ``None``, ``effectively_cancelled`` gives ``None`` (the caller then
looks at ``trio.current_effective_deadline() == -inf`` when it needs the answer), and
``deadline_is_finite`` asks ``trio.current_effective_deadline()``. :data:`HAS_COLLAPSE` is the
same for ``collapse_exception_group`` (without it a group is kept as it is).

:data:`VERIFIED` lists the trio releases ``tests/test_trio_compat.py`` was run against (its
``test_running_trio_is_verified`` fails on any other release, so a new trio is looked at
before it is trusted; the detection above keeps the library correct meanwhile).
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from trio._core._run import CancelStatus

__all__: list[str] = []


def _version(text: str) -> tuple[int, int]:
    m = re.match(r"(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


#: The running trio's ``(major, minor)``.
TRIO_VERSION = _version(trio.__version__)
#: The oldest trio whose private state is read (older ones use the public fallbacks).
MIN_TRIO = (0, 25)
#: ``(major, minor)`` of the trio releases the compat tests were run against.
VERIFIED = frozenset((0, minor) for minor in range(25, 36))  # 0.25 ... 0.35

_INF = math.inf
_NEG_INF = -math.inf
_current_effective_deadline = trio.current_effective_deadline


def _slot_names(cls: type) -> set[str]:
    """The attribute names an instance of ``cls`` has: attrs fields, slots, descriptors."""
    names: set[str] = set()
    for k in getattr(cls, "__mro__", (cls,)):
        names.update(vars(k))
        slots = vars(k).get("__slots__", ())
        names.update((slots,) if isinstance(slots, str) else slots)
    attrs_fields = getattr(cls, "__attrs_attrs__", ())
    names.update(a.name for a in attrs_fields)
    return names


def _detect_private_state() -> bool:
    if TRIO_VERSION < MIN_TRIO:
        return False
    try:
        from trio._core import _run

        task_cls: type = trio.lowlevel.Task
        status_cls: type = _run.CancelStatus
        scope_cls: type = trio.CancelScope
    except (ImportError, AttributeError):  # pragma: no cover - a trio laid out differently
        return False
    return (
        "_cancel_status" in _slot_names(task_cls)
        and {"effectively_cancelled", "_scope", "_parent"} <= _slot_names(status_cls)
        and {"_deadline", "_shield"} <= _slot_names(scope_cls)
    )


def _detect_collapse() -> Callable[[BaseException], BaseException] | None:
    if TRIO_VERSION < MIN_TRIO:
        return None
    try:
        from trio._core._run import collapse_exception_group
    except ImportError:  # pragma: no cover - a trio without it
        return None
    fn: Callable[[BaseException], BaseException] = collapse_exception_group  # type: ignore[assignment, unused-ignore]
    return fn


#: Whether the private cancel state (``Task._cancel_status`` and the chain above it) is read.
PRIVATE_STATE = _detect_private_state()


def _detect_fast_in_trio_run() -> Callable[[], bool] | None:
    """``fast_in_trio_run`` if trio keeps its run context as we expect, else ``None``."""
    if TRIO_VERSION < MIN_TRIO:
        return None
    try:
        from trio._core._run import GLOBAL_RUN_CONTEXT
    except ImportError:  # pragma: no cover - a trio laid out differently
        return None
    ctx: object = GLOBAL_RUN_CONTEXT
    # in_trio_run() is hasattr(ctx, "runner"): the same as a key of the per-thread __dict__
    # when ctx is a threading.local whose class does not define "runner" itself.
    if not isinstance(ctx, threading.local) or hasattr(type(ctx), "runner"):
        return None  # pragma: no cover - not trio's layout
    try:
        if "runner" in ctx.__dict__:  # pragma: no cover - imported inside trio.run
            return None
    except Exception:  # pragma: no cover - not trio's layout
        return None

    def fast_in_trio_run() -> bool:
        return "runner" in ctx.__dict__

    return fast_in_trio_run


#: ``trio.lowlevel.in_trio_run`` without its ``hasattr`` miss (see the module docstring), or
#: ``None`` when trio's run context is not laid out as expected (use the public function).
fast_in_trio_run = _detect_fast_in_trio_run()
_collapse = _detect_collapse()
#: Whether trio's own ``collapse_exception_group`` is used.
HAS_COLLAPSE = _collapse is not None


def cancel_status(task: trio.lowlevel.Task) -> CancelStatus | None:
    """``task``'s innermost ``CancelStatus`` (opaque; pass it to the functions below), or
    ``None`` when the private state is not used."""
    if PRIVATE_STATE:
        return getattr(task, "_cancel_status", None)
    return None


def effectively_cancelled(status: CancelStatus | None) -> bool | None:
    """Whether the cancel status from :func:`cancel_status` is cancelled now; ``None`` when
    unknown (no private state): the caller then asks the public API."""
    if status is None:
        return None
    return status.effectively_cancelled is True


def deadline_is_finite(status: CancelStatus | None) -> bool:
    """Is ``trio.current_effective_deadline()`` finite (neither ``inf`` nor ``-inf``) for the
    current task, whose :func:`cancel_status` is ``status``?

    With the private state this walks the ``CancelStatus`` chain (read only). It never says
    "not finite" when the public function gives a finite deadline (a scope whose deadline is
    ``-inf`` but not yet processed counts as finite).
    """
    if status is not None:
        try:
            if status.effectively_cancelled:
                return False
            s: CancelStatus | None = status
            while s is not None:
                scope = s._scope
                if scope._deadline != _INF:
                    return True
                if scope._shield:
                    return False
                s = s._parent
            return False
        except AttributeError:  # pragma: no cover - detection passed, so not expected
            pass
    d = _current_effective_deadline()
    return d != _INF and d != _NEG_INF


def shielded_in_task(task: trio.lowlevel.Task, skip_outermost: bool = False) -> bool | None:
    """Does ``task`` sit in a shielded cancel scope entered in the task itself (between it and
    the nursery that hosts it)? ``skip_outermost``: the task's outermost scope (a library
    wrapper's, which a stop cancels) does not count. ``None`` when unknown (no private state).
    For ``sx.dump()`` (``_scopes._introspect``): the usual reason a task ignores a stop."""
    if not PRIVATE_STATE:
        return None
    try:
        s: CancelStatus | None = task._cancel_status
        # (a finished task has no parent nursery: the AttributeError below)
        top = task.parent_nursery._cancel_status  # type: ignore[union-attr]
        while s is not None and s is not top:
            if s._scope._shield and not (skip_outermost and s._parent is top):
                return True
            s = s._parent
        return False
    except AttributeError:  # a task that has finished, or trio changed
        return None


def collapse_exception_group(group: BaseException) -> BaseException:
    """What ``CancelScope.__exit__`` makes of ``group``: trio's own collapse (a non-strict
    nursery's one-exception group becomes that exception), or ``group`` as it is without it."""
    if _collapse is not None:
        return _collapse(group)
    return group


def _detect_loose_note() -> str:
    try:
        from trio._core._run import NONSTRICT_EXCEPTIONGROUP_NOTE
    except ImportError:  # pragma: no cover - a trio without it
        return 'This is a "loose" ExceptionGroup'
    note: str = NONSTRICT_EXCEPTIONGROUP_NOTE
    return note


#: trio's note on the group of a non-strict nursery: :func:`collapse_exception_group` collapses
#: a group carrying it to its one exception (the counting scopes mark theirs the same way).
LOOSE_NOTE = _detect_loose_note()


def run_strict_exception_groups() -> bool:
    """The ``strict_exception_groups`` of the current trio run (what ``trio.open_nursery()``
    follows when given none); trio has no public accessor. ``True`` when it cannot be read."""
    try:
        from trio._core._run import GLOBAL_RUN_CONTEXT
    except ImportError:  # pragma: no cover - a trio laid out differently
        return True
    runner = getattr(GLOBAL_RUN_CONTEXT, "runner", None)
    return bool(getattr(runner, "strict_exception_groups", True))
