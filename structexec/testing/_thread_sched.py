"""``ThreadScheduler``: runs work on one dedicated worker thread (ThreadSched)."""

from __future__ import annotations

import threading
from collections import deque
from types import TracebackType
from typing import TYPE_CHECKING

from .._core._errors import terminate
from .._core._protocol import Sender
from .._core._queries import QueryError, forward_progress_guarantee, get_forward_progress_guarantee
from .._core._schedule_sender import ScheduleOp, ScheduleSender
from ._manual import _current

if TYPE_CHECKING:
    from ._protocols import ReceiverLike

__all__ = ["ThreadScheduler"]


class _ThreadOp(ScheduleOp):
    __slots__ = ()


class _ThreadSender(ScheduleSender):
    __slots__ = ()

    def connect(self, rcvr: ReceiverLike) -> _ThreadOp:
        return _ThreadOp(self._sch._push, rcvr)


class ThreadScheduler:
    """A scheduler whose work runs, in FIFO order, on one dedicated worker thread.

     (``ThreadSched``), 2.16, 12.1. ``schedule()`` operations are queued and
    completed on the worker thread: ``set_stopped()`` if the receiver's stop token has a stop
    request when the item runs, else ``set_value()`` (infallible, P3941R1). While an item
    runs, ``ManualScheduler.current()`` on the worker thread is this scheduler, and
    :attr:`ident` is the worker's thread ident. :attr:`busy` counts items queued or running.
    The worker starts lazily; :meth:`close` (or leaving the ``with`` block) finishes the
    queued work and joins the thread. Equality is identity.
    """

    def __init__(self, name: str = "structexec-test-worker") -> None:
        self.name = name
        self._cond = threading.Condition(threading.Lock())
        self._queue: deque[_ThreadOp] = deque()
        self._thread: threading.Thread | None = None
        self._closing = False
        self.busy = 0
        self.ident: int | None = None

    def schedule(self) -> Sender[None]:
        """A sender that completes on the worker thread."""
        return _ThreadSender(self)

    def query(self, q: object, *args: object) -> object:
        """``get_forward_progress_guarantee`` is ``concurrent`` (a real thread)."""
        if q is get_forward_progress_guarantee:
            return forward_progress_guarantee.concurrent
        raise QueryError(f"{self!r} does not support {q!r}")

    def _push(self, op: _ThreadOp) -> None:
        with self._cond:
            if self._closing:
                raise RuntimeError(f"{self!r} is closed")
            self._queue.append(op)
            self.busy += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name=self.name, daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def _work(self) -> None:
        self.ident = threading.get_ident()
        _current.sch = self
        cond = self._cond
        while True:
            with cond:
                while not self._queue:
                    if self._closing:
                        return
                    cond.wait()
                op = self._queue.popleft()
            try:
                op._execute()
            except BaseException as exc:
                # A completion raised (a receiver that broke [exec.set.value]'s "must not
                # raise", typically an operation completed a second time): report it as the
                # library's own threads do, and keep serving the queue. Letting it escape
                # would kill the worker, strand every queued item and surface later as an
                # unhandled thread exception, possibly in another test.
                terminate(
                    f"a completion raised on {self!r}'s worker thread; completion functions "
                    "must not raise ([exec.set.value], [exec.async.ops])",
                    exc,
                )
            finally:
                del op  # do not keep the finished operation (and its receiver) alive
                with cond:
                    self.busy -= 1
                    cond.notify_all()

    def wait_idle(self, timeout: float = 5) -> bool:
        """Block until no item is queued or running; ``False`` on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self.busy == 0, timeout)

    def close(self) -> None:
        """Run what is queued, then stop and join the worker thread. Idempotent."""
        with self._cond:
            self._closing = True
            t = self._thread
            self._cond.notify_all()
        if t is not None and t is not threading.current_thread():
            t.join()

    def __enter__(self) -> ThreadScheduler:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<ThreadScheduler {self.name!r} busy={self.busy}>"
