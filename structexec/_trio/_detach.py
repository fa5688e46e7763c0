"""Hosted trio tasks whose coroutine is permanently detached from trio.

docs/scopes.md "What happens when things fail" (a detached coroutine).

Lives with the trio bridge (the scopes and the coroutine senders both register here).

``trio.lowlevel.permanently_detach_coroutine_object`` (as trio-asyncio uses it) ends a trio
task without finishing its coroutine: trio treats the task as exited with the given outcome,
and its nursery no longer waits for it. The coroutine of a task a scope hosts is the scope's
wrapper around the user's coroutine (``_hosted``, ``_spawned``, ...), so detaching suspends
the wrapper too, and its ``finally`` (which releases the task's association) does not run:
the scope's exit would wait for it forever.

So that a scope behaves as a nursery does, each run in which a scope is entered (or a
coroutine sender is hosted in a system task) gets one trio instrument (:func:`watch_run`)
whose ``task_exited`` looks for a task whose coroutine has not finished (``cr_frame`` still
set: it detached) and whose code is one of the library's task wrappers. Such a task is over:
the wrapper's *release* function (registered in :data:`RELEASE` by the module that defines
the wrapper) ends it as the scope sees it (a plain task: the association is released; an
operation: it completes stopped, since its outcome is no longer trio's to see), and records
the user's coroutine in :data:`DETACHED`. If whoever took the coroutine resumes it later (or
drops it, which closes it with ``GeneratorExit``), the wrapper sees that record and does
nothing more for the scope.

The instrument costs one call per task exit of that run; a task that finished normally has
no frame and is skipped at once.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from types import CodeType
from typing import Any

import trio

__all__: list[str] = []

#: ``id()`` of the user coroutines whose hosted task ended by detaching. Removed by the
#: wrapper when the coroutine finally finishes or is closed (the id cannot be reused before).
DETACHED: set[int] = set()

#: The code of a scope's task wrapper -> ``release(frame_locals)``: end that task as the
#: scope sees it, once, and add its user coroutine's id to :data:`DETACHED`.
RELEASE: dict[CodeType, Callable[[dict[str, Any]], None]] = {}

_WATCHED: weakref.WeakSet[Any] = weakref.WeakSet()


class _DetachWatch(trio.abc.Instrument):
    """The instrument of :func:`watch_run` (see the module docstring)."""

    __slots__ = ()

    def task_exited(self, task: trio.lowlevel.Task) -> None:
        coro = task.coro
        frame = getattr(coro, "cr_frame", None)
        if frame is None:
            return  # finished normally
        release = RELEASE.get(coro.cr_code)
        if release is not None:
            try:
                release(frame.f_locals)
            except Exception:  # pragma: no cover - never fail trio's task bookkeeping
                pass


def watch_run(run: Any) -> None:
    """Install the detach watch in ``run`` (a ``RunState``; its trio thread) once."""
    if run not in _WATCHED:
        _WATCHED.add(run)
        trio.lowlevel.add_instrument(_DetachWatch())


def undetach(coro: Any) -> bool:
    """Called by a wrapper whose coroutine finished or was closed: ``True`` if its task had
    detached (the scope has already let it go), and forget it."""
    key = id(coro)
    if key in DETACHED:
        DETACHED.discard(key)
        return True
    return False
