"""Hosted trio tasks whose coroutine is permanently detached from trio.

the scopes guide "What happens when things fail" (a detached coroutine).

``trio.lowlevel.permanently_detach_coroutine_object`` (as trio-asyncio uses it) ends a trio
task without finishing its coroutine: trio treats the task as exited with the given outcome,
and its nursery no longer waits for it. The coroutine of a task a scope hosts is the scope's
wrapper around the user's coroutine (``_hosted``, ``_spawned``, ...), so detaching suspends
the wrapper too, and its ``finally`` (which releases the task's association) does not run:
the scope's exit would wait for it forever.

So that a scope behaves as a nursery does, a scope counts its wrapper tasks that have not
finished (``_wrappers``). When its ``async with`` exit has to wait (:func:`begin_wait`):

* if it counts more wrappers than its host nursery has tasks, some detached earlier: it
  finds their (suspended) wrapper coroutines among the live objects (``gc.get_objects()``,
  once) and releases them;
* while it waits for tasks, a trio instrument looks at each task that exits: a task whose
  coroutine has not finished (``cr_frame`` still set) detached it. It is installed at the
  first such wait of the run and stays for the rest of the run (:func:`watch_run`; adding
  and removing it per wait would cost more): about half a microsecond per task exit.

That is enough for ``start_soon``/``start`` tasks, whose end only the exit waits for (a task
dropped after it detached is closed with ``GeneratorExit``, which its wrapper takes as its
end). Coroutines that run inside a cancel scope of the library (``spawn``/``spawn_future`` of
a coroutine, coroutine senders, also in system tasks outside ``async with``) can have a
consumer waiting for their operation, and cannot be closed outside trio cleanly: the first
of them in a run installs the instrument for the rest of the run (:func:`watch_run`), so
they end when they detach.

Releasing a wrapper (its *release* function, registered in :data:`RELEASE` by the module
that defines it) ends the task as the scope sees it (a plain task: the association is
released; an operation: it completes stopped, since its outcome is no longer trio's to see)
and records the user's coroutine in :data:`DETACHED`. If whoever took the coroutine resumes
it later (or drops it, which closes it with ``GeneratorExit``), the wrapper sees that record
and does nothing more for the scope.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from types import CodeType, CoroutineType
from typing import TYPE_CHECKING, Any

import trio

if TYPE_CHECKING:
    from ._trio_bridge import RunState


__all__: list[str] = []

#: ``id()`` of the user coroutines (``_guarded``: of its bound method) whose hosted task ended
#: by detaching. Removed by the wrapper when the coroutine finally finishes or is closed (the
#: id cannot be reused before).
DETACHED: set[int] = set()

#: The code of a scope's task wrapper -> ``release(frame_locals)``: end that task as the
#: scope sees it, once (also one less in the scope's ``_wrappers``), and add its key to
#: :data:`DETACHED`.
RELEASE: dict[CodeType, Callable[[dict[str, Any]], None]] = {}

class _DetachWatch(trio.abc.Instrument):
    """The instrument installed while an exit waits (see the module docstring)."""

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


def _owner(f: dict[str, object]) -> object:
    return f.get("scope", f.get("self"))


def _live_coroutines() -> set[object]:
    """The coroutines of every task of the current run (trio's public task tree)."""
    live: set[object] = set()
    todo = [trio.lowlevel.current_root_task()]
    while todo:
        task = todo.pop()
        if task is None:
            continue
        live.add(task.coro)
        for n in task.child_nurseries:
            todo.extend(n.child_tasks)
    return live


def begin_wait(scope: Any) -> RunState:
    """The ``async with`` exit of ``scope`` is about to wait (its trio thread): release the
    wrappers that detached already, and watch for more while it waits. Returns what
    :func:`end_wait` takes."""
    nursery = scope._nursery
    if nursery is not None and scope._wrappers > len(nursery.child_tasks):
        # (also while a scope.start() is pending: its task is still the starter's child)
        live = _live_coroutines()
        for o in gc.get_objects():
            if (
                type(o) is CoroutineType
                and o.cr_code in RELEASE
                and o.cr_frame is not None
                and o not in live
            ):
                f = o.cr_frame.f_locals
                if _owner(f) is scope:
                    RELEASE[o.cr_code](f)
    run: RunState = scope._run
    if scope._wrappers and not run.watched:
        watch_run(run)
    return run


def end_wait(run: RunState) -> None:
    """The exit that :func:`begin_wait` returned ``run`` for has finished waiting (the
    instrument stays: adding and removing one costs more than it saves)."""


def watch_run(run: RunState) -> None:
    """Watch every task exit of ``run`` from now on (its trio thread; once per run, so
    callers test ``run.watched`` first): a coroutine hosted in a cancel scope of the library
    (``spawn``/``spawn_future`` of a coroutine, a coroutine sender) that detaches ends its
    operation when it does, not when an exit next looks."""
    if not run.watched:
        run.watched = True
        trio.lowlevel.add_instrument(_DetachWatch())


def undetach(key: object) -> bool:
    """Called by a wrapper whose coroutine finished or was closed: ``True`` if its task had
    detached (the scope has already let it go), and forget it."""
    k = id(key)
    if k in DETACHED:
        DETACHED.discard(k)
        return True
    return False
