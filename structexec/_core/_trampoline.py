"""A per-thread trampoline that keeps deep synchronous chains off the Python stack.

P3552R1 4.10 warns that a loop of senders that complete inline grows the stack with every
iteration; Python's recursion limit makes that urgent (for example, 100,000 ``let_value``
iterations under ``sync_wait``). Algorithms that start a new operation from inside a
completion (``let_*``, ``starts_on``, the ``task`` driver, ...) call :func:`trampoline_start`
instead of ``op.start()``. Past a small nesting depth the start is queued and run by the
outermost ``trampoline_start`` on the same thread once the stack has unwound, so every
operation is still started, on the same thread, before the outermost call returns.

A start made from inside a completion must not let an ``Exception`` escape that completion
(on a parallel-scheduler thread that would call the terminate handler). The adaptor passes a
*sink* with the operation: ``trampoline_start(op, sink)``. An ``Exception`` from
``op.start()`` goes to ``sink._sx_start_failed(exc)``, which completes the adaptor's receiver
with it (the operation never started, so nothing is orphaned) or, if the operation did complete
before its start raised (a contract violation), re-raises it. A queued start keeps its own sink,
so the drain delivers the failure to the right receiver, never to whichever operation happens to
be outermost. A ``BaseException`` that is not an ``Exception`` (``KeyboardInterrupt``) is never
given to a sink: it propagates as before.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._contracts import OpState, StartSink

MAX_DEPTH = 24


class _Tramp(threading.local):
    depth = 0
    queue: deque[tuple[OpState, StartSink | None]] | None = None


_t = _Tramp()


def trampoline_start(op: OpState, sink: StartSink | None = None) -> None:
    """Start ``op`` now, or, when nested too deeply, as soon as this thread's stack unwinds.

    With a ``sink``, an ``Exception`` from ``op.start()`` (now or when the queue drains) is
    given to ``sink._sx_start_failed`` instead of propagating; without one it propagates."""
    t = _t
    d = t.depth
    if d >= MAX_DEPTH:
        q = t.queue
        if q is None:
            q = t.queue = deque()
        q.append((op, sink))
        return
    t.depth = d + 1
    try:
        op.start()
    except Exception as e:
        if sink is None:
            raise
        sink._sx_start_failed(e)
    finally:
        t.depth = d
    if d == 0:
        q = t.queue
        if q:
            drain(t, q)


def drain(t: _Tramp, q: deque[tuple[OpState, StartSink | None]]) -> None:
    """Start the queued operations, in order, at depth 1 (the outermost call's job).

    An ``Exception`` from a queued start goes to the sink queued with it. A start that raises
    otherwise (no sink, a sink that re-raises, a ``BaseException`` from user code run inline,
    such as ``KeyboardInterrupt``) does not strand the operations queued behind it: they are
    still started, on this thread, and the first exception is raised once the queue is empty.
    """
    first: BaseException | None = None
    while q:
        nxt, sink = q.popleft()
        t.depth = 1
        try:
            try:
                nxt.start()
            except Exception as e:
                if sink is None:
                    raise
                sink._sx_start_failed(e)
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
