"""What ``sx.operation_tree()`` asks of the library's objects: the records their
``_sx_describe()`` hooks return (``_contracts.Describable``), and the classes whose live
instances a snapshot looks for (:func:`snapshot_roots`).

An operation state that can be pending describes itself: ``_sx_describe()`` returns one of the
records below, or ``None`` while there is nothing to show (not started, completed, or being set
up or torn down by another thread). A hook never raises and takes no lock (a tree may be
printed by a signal handler that interrupted the holder of a lock on the same thread): it reads
its own fields as they are. The introspection module (``_scopes._introspect*``, imported only
when a program first looks) walks the hooks; it reads no other private field, so a state that
renames a field updates its own hook, next to the field.

Two kinds of states answer:

* roots, found by a scan of the heap: the classes given to :func:`snapshot_roots` (and their
  subclasses): scopes (:class:`ScopeRecord`), spawned work (:class:`SpawnRecord`), futures
  (:class:`FutureRecord`, and :class:`FutureHolder` for the senders and operations that still
  hold one), associated work (:class:`AssociateRecord`), sequence stages and their items
  (:class:`StageRecord`, :class:`ItemRecord`);
* what a pending operation waits on, found by walking down from a root's operation (through
  ``_sx_children()`` where a state declares it, else through its slots): a timer
  (:class:`TimerWait`), a hosted trio task (:data:`HOSTED`), anything else in words
  (:class:`Waiting`: the parallel scheduler, a remote call, a join).

This module is at the bottom of the layers: it imports nothing above ``_core`` and not trio.
The records are plain slotted classes (cheap to define at import, about 0.1 us to make).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._describe import Site

__all__ = [
    "HOSTED",
    "AssociateRecord",
    "FutureHolder",
    "FutureRecord",
    "Hosted",
    "ItemRecord",
    "ROOTS",
    "ScopeRecord",
    "SpawnRecord",
    "StageRecord",
    "TimerWait",
    "Waiting",
    "no_children",
    "snapshot_roots",
]

#: The classes whose instances (and their subclasses') a snapshot finds on the heap.
ROOTS: set[type] = set()


def snapshot_roots(*classes: type) -> None:
    """Make the live instances of ``classes`` (and of their subclasses) visible to
    ``sx.operation_tree()``: each answers ``_sx_describe()`` with one of the root records.
    Called by the module that defines them, at import (nothing is imported for it)."""
    ROOTS.update(classes)


def no_children(self: object) -> tuple[()]:
    """The ``_sx_children`` of a state that has none (``_sx_children = no_children``): a walk
    down pending work ends there without calling it."""
    return ()


class ScopeRecord:
    """A scope that is set up: its ``name`` (``None``: unnamed), spec ``state`` name,
    ``count`` of associations, ``errors`` recorded and not yet reported, whether a stop was
    requested and when (``stop_since``, ``time.monotonic()``), whether its ``async with`` is
    ``entered``, the trio task that entered it last (``None`` if none) and its nursery of
    hosted tasks (``None`` if none)."""

    __slots__ = (
        "count", "entered", "errors", "name", "nursery", "parent_task", "state",
        "stop_requested", "stop_since",
    )

    def __init__(
        self, name: str | None, state: str, count: int, errors: int, stop_requested: bool,
        stop_since: float | None, entered: bool, parent_task: Any, nursery: Any,
    ) -> None:
        # parent_task: a trio.lowlevel.Task or None; nursery: a trio.Nursery or None (the
        # core does not import trio, not even for annotations)
        self.name = name
        self.state = state
        self.count = count
        self.errors = errors
        self.stop_requested = stop_requested
        self.stop_since = stop_since
        self.entered = entered
        self.parent_task = parent_task
        self.nursery = nursery


class SpawnRecord:
    """Spawned work still running: its ``scope``, the ``sender`` spawned, the ``site`` of the
    spawning call and the work's operation ``op``."""

    __slots__ = ("op", "scope", "sender", "site")

    def __init__(self, scope: object, sender: object, site: Site | None, op: object) -> None:
        self.scope = scope
        self.sender = sender
        self.site = site
        self.op = op


class FutureRecord:
    """The shared state of ``spawn_future`` on a library scope: ``scope``, ``sender``,
    ``site``; ``result``: ``None`` while the work runs, else ``"value"``, ``"error"`` or
    ``"stopped"`` (held until consumed); ``associated``: it still holds its association;
    ``stop_requested``: of the future's own stop source; ``claimed``: its completion or its
    consumer took the result."""

    __slots__ = ("associated", "claimed", "result", "scope", "sender", "site", "stop_requested")

    def __init__(
        self, scope: object, sender: object, site: Site | None, result: str | None,
        associated: bool, stop_requested: bool, claimed: bool,
    ) -> None:
        self.scope = scope
        self.sender = sender
        self.site = site
        self.result = result
        self.associated = associated
        self.stop_requested = stop_requested
        self.claimed = claimed


class FutureHolder:
    """A future sender or its operation that still holds the future's ``state`` (its result
    can still be consumed)."""

    __slots__ = ("state",)

    def __init__(self, state: object) -> None:
        self.state = state


class AssociateRecord:
    """Associated work running: its ``scope``, the child operation ``op`` and the child's
    ``sender`` (``None`` if unknown)."""

    __slots__ = ("op", "scope", "sender")

    def __init__(self, scope: object, op: object, sender: object) -> None:
        self.scope = scope
        self.op = op
        self.sender = sender


class StageRecord:
    """A running sequence stage: its ``name`` (``"let_each"``...), ``max_concurrency``
    (``None``: unbounded), items ``in_flight`` and ``delivered``, and whether a stop was
    requested."""

    __slots__ = ("delivered", "in_flight", "max_concurrency", "name", "stop_requested")

    def __init__(
        self, name: str, max_concurrency: int | None, in_flight: int, delivered: int,
        stop_requested: bool,
    ) -> None:
        self.name = name
        self.max_concurrency = max_concurrency
        self.in_flight = in_flight
        self.delivered = delivered
        self.stop_requested = stop_requested


class ItemRecord:
    """A running item of a sequence stage: the ``stage`` (its operation state) and the item's
    ``index`` (the ``index``-th item the stage started)."""

    __slots__ = ("index", "stage")

    def __init__(self, stage: object, index: int) -> None:
        self.stage = stage
        self.index = index


class TimerWait:
    """A queued timer: its deadline ``due`` on the clock ``now()`` of its ``owner`` (the
    scheduler or trio run it waits on, labelled by ``_core._describe.scheduler_label``)."""

    __slots__ = ("due", "now", "owner")

    def __init__(self, due: float, owner: object, now: Callable[[], float]) -> None:
        self.due = due
        self.owner = owner
        self.now = now


class Hosted:
    """An operation that runs in a hosted trio task (found by the task's coroutine)."""

    __slots__ = ()


#: The one :class:`Hosted` record.
HOSTED = Hosted()


class Waiting:
    """What a pending operation waits on, in words (``state``), and the ``scheduler`` it
    waits on (``"parallel_scheduler"``; ``None`` if none)."""

    __slots__ = ("scheduler", "state")

    def __init__(self, state: str, scheduler: str | None) -> None:
        self.state = state
        self.scheduler = scheduler
