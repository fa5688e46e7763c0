"""The records of ``sx.operation_tree()``: :class:`OperationInfo` and :class:`ScopeInfo`
(``_introspect`` builds them; the debugging guide)."""

from __future__ import annotations

import os
from dataclasses import MISSING, dataclass, field, fields

__all__ = ["OperationInfo", "ScopeInfo"]


@dataclass(frozen=True)
class OperationInfo:
    """One outstanding operation of a scope, in :func:`operation_tree` (the debugging guide).

    * ``kind``: ``"spawn"``, ``"spawn_future"``, ``"associate"``, ``"start_soon"`` or
      ``"start"``.
    * ``description``: the sender (``just(1) | then(parse)``, functions by qualified name) or,
      for a trio task, its function.
    * ``filename``, ``lineno``, ``spawned_at`` (``"app.py:42"``): where it was spawned, if
      known.
    * ``state``: what it is doing, in words (``running``, ``waiting on a timer, due in 2 s``,
      ``future: value not yet consumed``, ``in trio task ...``).
    * ``thread``: the name of the thread running its code right now, if any; ``scheduler``:
      the scheduler it waits on, if known.
    * ``trio_task``, ``await_frame``: the hosting trio task's name and where it waits
      (``handler at app.py:31``).
    * ``stop_requested``: a stop request reached it (its scope's, or its future's own).
    * ``scopes``: scopes entered by this operation's trio task (nested).
    * ``children``: for work running a sequence (the streams guide), one entry per stage that
      runs items concurrently (``kind`` ``"let_each"``, ``"transform_each"``,
      ``"then_each"``, ``"as_completed"``), upstream first; a stage's ``children`` are its
      items running now (``kind`` ``"item"``, ``description`` ``"#i"``: the ``i``-th item
      the stage started).
    * ``max_concurrency``, ``in_flight``, ``delivered``: of a stage (``None`` otherwise):
      its bound (``None``: unbounded), its items started and not yet delivered downstream,
      and the items delivered so far.
    """

    kind: str
    description: str
    filename: str | None
    lineno: int | None
    state: str
    thread: str | None = None
    scheduler: str | None = None
    trio_task: str | None = None
    await_frame: str | None = None
    stop_requested: bool = False
    scopes: tuple[ScopeInfo, ...] = ()
    children: tuple[OperationInfo, ...] = ()
    max_concurrency: int | None = None
    in_flight: int | None = None
    delivered: int | None = None

    @property
    def spawned_at(self) -> str | None:
        """``"app.py:42"`` (the file's base name), or ``None``."""
        if self.filename is None:
            return None
        return f"{os.path.basename(self.filename)}:{self.lineno}"


@dataclass(frozen=True)
class ScopeInfo:
    """One live scope in :func:`operation_tree` (the debugging guide).

    * ``kind`` (``"counting_scope"``, ``"simple_counting_scope"``), ``name`` (``None`` if
      unnamed), ``state`` (the spec's state name), ``count`` (associations held);
    * ``stop_requested`` and ``stop_requested_for`` (seconds since, when known);
    * ``entered_by``: the trio task that entered ``async with`` (``None`` otherwise);
    * ``errors``: errors recorded and not yet reported;
    * ``operations``: the outstanding operations; ``scopes``: scopes nested in the
      ``async with`` body (scopes nested in a hosted task are under its operation).
    """

    kind: str
    name: str | None
    state: str
    count: int
    stop_requested: bool = False
    stop_requested_for: float | None = None
    entered_by: str | None = None
    errors: int = 0
    operations: tuple[OperationInfo, ...] = ()
    scopes: tuple[ScopeInfo, ...] = field(default=())

    @property
    def label(self) -> str:
        """``counting_scope 'connections'`` or ``counting_scope``."""
        return self.kind if self.name is None else f"{self.kind} {self.name!r}"


_INFO_DEFAULTS = {f.name: f.default for f in fields(OperationInfo) if f.default is not MISSING}
_new = object.__new__
_setattr = object.__setattr__


def op_info(
    kind: str, description: str, filename: str | None, lineno: int | None, state: str,
    thread: str | None, scheduler: str | None, trio_task: str | None,
    await_frame: str | None, stop_requested: bool, scopes: tuple[ScopeInfo, ...],
    children: tuple[OperationInfo, ...] = (),
) -> OperationInfo:
    """``OperationInfo(...)`` of these fields at a third of the cost: the frozen dataclass's
    ``__init__`` sets each field through ``object.__setattr__``; this sets its ``__dict__``
    at once (the same object: equal, same hash and repr; a field not named here takes its
    default). For the spawned work of a tree, which can hold a million operations."""
    info: OperationInfo = _new(OperationInfo)
    _setattr(info, "__dict__", {
        **_INFO_DEFAULTS, "kind": kind, "description": description, "filename": filename,
        "lineno": lineno, "state": state, "thread": thread, "scheduler": scheduler,
        "trio_task": trio_task, "await_frame": await_frame, "stop_requested": stop_requested,
        "scopes": scopes, "children": children,
    })
    return info


def stage_info(
    kind: str, description: str, state: str, stop_requested: bool,
    children: tuple[OperationInfo, ...], max_concurrency: int | None, in_flight: int,
    delivered: int,
) -> OperationInfo:
    """The record of a running sequence stage (no site, thread or task)."""
    info: OperationInfo = _new(OperationInfo)
    _setattr(info, "__dict__", {
        **_INFO_DEFAULTS, "kind": kind, "description": description, "filename": None,
        "lineno": None, "state": state, "stop_requested": stop_requested,
        "children": children, "max_concurrency": max_concurrency, "in_flight": in_flight,
        "delivered": delivered,
    })
    return info
