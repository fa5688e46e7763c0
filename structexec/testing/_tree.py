"""Sender trees as data, with a plain-Python model of what each tree must produce.

A :class:`Node` describes one sender (``Just``, ``Then``, ``WhenAll``, ``Hop``, ...). It can *build*
the real structexec sender in a :class:`World` (the schedulers, stop sources and scopes of one run)
and *model* it: :meth:`Node.outcomes` interprets the tree in plain Python and returns the set of
acceptable outcomes, each ``("value", datums)``, ``("error", err)`` or ``("stopped",)``. The model
knows nothing about operation states, receivers or stop callbacks; it encodes only the rules of the
spec ([exec.then], [exec.let], [exec.when.all], [exec.schedule.from], ...; [exec.factories],
[exec.write.env], [exec.unstoppable], [exec.starts.on], [exec.continues.on], [exec.on], [exec.then],
[exec.let], [exec.bulk], [exec.when.all], [exec.into.variant], [exec.stopped.opt],
[exec.stopped.err], [exec.counting.scopes], [exec.associate], [exec.stop.when], [exec.spawn],
[exec.spawn.future]).

Stop requests make outcomes depend on timing. The model takes a *stop mode* for each stop
token a subtree can see: ``NEVER`` (no stop request will ever be made), ``ALREADY`` (stop was
requested before the operation started) or ``MAYBE`` (a stop request may arrive at any
moment). Under ``MAYBE`` every point where the spec lets an algorithm observe a stop request
may or may not observe it, so the result is a set. Interleavings make ``when_all`` ambiguous
in the same way (which failing child completes first); the model enumerates the
possibilities and is exact where the order is fixed by the spec (children that complete
inline are started, and complete, in argument order: [exec.when.all]).

This module gathers the node families: ``_tree_base`` (outcomes, stop modes, :class:`Plan`,
:class:`World`, :class:`Node`, :class:`Fn`), ``_tree_nodes`` (factories, ``then``/``let_*``,
variants, user adaptors, hops, stop points), ``_tree_when_all`` (``when_all`` and its model),
``_tree_scopes`` (``associate``, ``spawn``, ``spawn_future``, coroutines, ``task``); and
:func:`mark_late`, which walks a whole tree.
"""

from __future__ import annotations

from ._tree_base import (
    ALREADY,
    MAYBE,
    NEVER,
    STOPPED,
    Fn,
    Node,
    Plan,
    TreeError,
    apply_fn,
    error,
    value,
)
from ._tree_base import ASYNC as ASYNC
from ._tree_base import INLINE as INLINE
from ._tree_base import UNKNOWN as UNKNOWN
from ._tree_base import Outcome as Outcome
from ._tree_base import Outcomes as Outcomes
from ._tree_base import World as World
from ._tree_nodes import (
    PARALLEL,
    THREAD,
    TRIO,
    Adaptor,
    Custom,
    Hop,
    IntoVariant,
    Just,
    JustError,
    JustStopped,
    Let,
    Schedule,
    StartsOn,
    StoppedAsError,
    StoppedAsOptional,
    StopPoint,
    Then,
    Unstoppable,
)
from ._tree_scopes import Associate, Coro, FutureRecord, Spawn, SpawnFuture, Task
from ._tree_when_all import WhenAll

__all__ = [
    "Adaptor",
    "Custom",
    "ALREADY",
    "MAYBE",
    "NEVER",
    "STOPPED",
    "Associate",
    "Coro",
    "Fn",
    "FutureRecord",
    "Hop",
    "IntoVariant",
    "Just",
    "JustError",
    "JustStopped",
    "Let",
    "Node",
    "PARALLEL",
    "Plan",
    "Schedule",
    "Spawn",
    "SpawnFuture",
    "StartsOn",
    "StopPoint",
    "StoppedAsError",
    "StoppedAsOptional",
    "Task",
    "Then",
    "THREAD",
    "TreeError",
    "TRIO",
    "Unstoppable",
    "WhenAll",
    "apply_fn",
    "error",
    "mark_late",
    "value",
]


def mark_late(root: Node) -> None:
    """Mark the nodes that may be built after the root operation has completed (``late``), and
    those that may start while the tree is being built (``early``).

    Work given to ``spawn`` and the work of a ``spawn_future`` run on their own and may
    outlive the root (an abandoned future's work keeps running,
    the scopes guide "Futures outlive their work"). Inside such detached work, what is built lazily
    (the sender a ``let_*`` function returns, the work of a ``spawn``) may be built late. The driver
    joins the scopes once the root completes, so a late ``associate``, ``spawn_future`` or ``spawn``
    may find its scope joined.
    """

    def visit(n: Node, detached: bool, lazy: bool, early: bool) -> None:
        n.late = detached and lazy
        n.early = early
        if isinstance(n, Let):
            visit(n.child, detached, lazy, early)
            visit(n.sub, detached, True, early)
        elif isinstance(n, Spawn):
            visit(n.work, True, True, early)
        elif isinstance(n, SpawnFuture):
            # spawn_future starts its work when called: at build time unless built lazily.
            visit(n.child, True, lazy, early or not lazy)
        else:
            for k in n.kids():
                visit(k, detached, lazy, early)

    visit(root, False, False, False)
