"""Book-keeping shared by the backends that run bulk chunks in other processes (private).

A :class:`RemoteJob` tracks the chunks of one bulk operation that run elsewhere (a process
pool, a dask cluster): it merges each chunk's results into the parent's values as the chunk
finishes, remembers the first error and whether a stop request cut the work short, and
completes the proxy once every chunk has finished, on the process-wide thread pool, so that
downstream work never runs on (and never blocks) the engine's own callback thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial
from typing import Any

from .._core._errors import terminate
from .._core._stop_token import inplace_stop_callback
from .._parallel._backend_error import BackendError
from ._thread_pool import default_thread_pool

__all__ = ["RemoteJob", "complete_soon"]


def complete_soon(fn: Callable[[], object]) -> None:
    """Run a completion on the process-wide thread pool."""
    default_thread_pool().call_soon(fn)


class RemoteJob:
    """One bulk operation's chunks in flight (see the module docstring)."""

    __slots__ = (
        "_stop_cb",
        "collect",
        "error",
        "lock",
        "on_finish",
        "on_stop",
        "r",
        "remaining",
        "stop_requested",
        "stopped",
    )

    def __init__(self, r: Any) -> None:
        self.r = r
        self.lock = threading.Lock()
        self.remaining = 0
        self.error: BaseException | None = None
        self.stopped = False
        self.stop_requested = False
        self._stop_cb: inplace_stop_callback | None = None
        #: Called (on the thread that requested stop, or the one that recorded an error)
        #: to stop the chunks still queued or running: set a flag, cancel futures.
        self.on_stop: Callable[[], None] | None = None
        #: Called once, before the completion, to release resources (slots, events, ...).
        self.on_finish: Callable[[], None] | None = None
        #: Called once, when every chunk has finished and before anything else, to fetch and
        #: merge results that were not merged chunk by chunk.
        self.collect: Callable[[], None] | None = None

    def watch(self, tok: Any) -> None:
        """Request cooperative stop of the chunks when ``tok`` is stopped."""
        if tok is not None:
            self._stop_cb = inplace_stop_callback(tok, self._stop)

    def _stop(self) -> None:
        with self.lock:
            if self.stop_requested:
                return
            self.stop_requested = True
        fn = self.on_stop
        if fn is not None:
            fn()

    def fail(self, exc: BaseException, *, stop_others: bool = True) -> None:
        """Record ``exc`` (the first error wins) and, by default, stop the other chunks."""
        with self.lock:
            if self.error is None:
                self.error = exc
        if stop_others:
            self._stop()

    def merge(self, b: int, e: int, parts: tuple[Any, ...]) -> None:
        """Bring a chunk's results into the parent's values (an ``execute`` of the contract)."""
        if parts:
            try:
                self.r.merge(b, e, parts)
            except Exception as exc:
                self.fail(exc)

    def chunk_done(self) -> None:
        """One chunk has finished (whatever the outcome); the last one completes the proxy."""
        with self.lock:
            self.remaining -= 1
            last = self.remaining == 0
        if last:
            self.finish()

    def finish(self) -> None:
        collect = self.collect
        if collect is not None:
            self.collect = None
            try:
                collect()
            except Exception as exc:  # the operation must complete whatever happens
                failed = BackendError(
                    f"fetching the results of a remote bulk operation failed: "
                    f"{type(exc).__name__}: {exc}"
                )
                failed.__cause__ = exc
                self.fail(failed, stop_others=False)
        cb = self._stop_cb
        if cb is not None:
            self._stop_cb = None
            cb.close()
        fin = self.on_finish
        if fin is not None:
            self.on_finish = None
            try:
                fin()
            except Exception as exc:
                terminate("releasing the resources of a remote bulk operation raised", exc)
        r = self.r
        self.r = None
        if self.error is not None:
            complete_soon(partial(r.set_error, self.error))
        elif self.stopped:
            complete_soon(r.set_stopped)
        else:
            complete_soon(r.set_value)
