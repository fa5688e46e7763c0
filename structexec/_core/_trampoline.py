"""A per-thread trampoline that keeps deep synchronous chains off the Python stack.

P3552R1 4.10 warns that a loop of senders that complete inline grows the stack with every
iteration; Python's recursion limit makes that urgent (for example, 100,000 ``let_value``
iterations under ``sync_wait``). Algorithms that start a new operation from inside a
completion (``let_*``, ``starts_on``, the ``task`` driver, ...) call :func:`trampoline_start`
instead of ``op.start()``. Past a small nesting depth the start is queued and run by the
outermost ``trampoline_start`` on the same thread once the stack has unwound, so every
operation is still started, on the same thread, before the outermost call returns.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._contracts import OpState

MAX_DEPTH = 24


class _Tramp(threading.local):
    depth = 0
    queue: deque[OpState] | None = None


_t = _Tramp()


def trampoline_start(op: OpState) -> None:
    """Start ``op`` now, or, when nested too deeply, as soon as this thread's stack unwinds."""
    t = _t
    d = t.depth
    if d >= MAX_DEPTH:
        q = t.queue
        if q is None:
            q = t.queue = deque()
        q.append(op)
        return
    t.depth = d + 1
    try:
        op.start()
    finally:
        t.depth = d
    if d == 0:
        q = t.queue
        if q:
            drain(t, q)


def drain(t: _Tramp, q: deque[OpState]) -> None:
    """Start the queued operations, in order, at depth 1 (the outermost call's job).

    A ``start`` that raises (a ``BaseException`` from user code run inline, such as
    ``KeyboardInterrupt``) does not strand the operations queued behind it: they are still
    started, on this thread, and the first exception is raised once the queue is empty.
    """
    first: BaseException | None = None
    while q:
        nxt = q.popleft()
        t.depth = 1
        try:
            nxt.start()
        except BaseException as e:
            if first is None:
                first = e
        finally:
            t.depth = 0
    if first is not None:
        try:
            raise first
        finally:
            first = None  # no reference cycle through this frame
