"""Worker tasks for ``let_each(async_fn, max_concurrency=n)`` under trio (private module).

Running every item's coroutine in a trio task of its own costs a task spawn per item (and
the general coroutine-sender machinery around it). For ``as_completed`` (``fn`` is ``None``)
each item is itself the work: a coroutine object is awaited directly in a worker. When a
``let_each`` stage whose function is an ``async def`` one starts on the trio thread, its items
run instead in at most ``n`` long-lived worker tasks (system tasks of the run, like the
tasks that host coroutine senders), each taking the next item when it finished the previous
one: the structure of the trio idiom of ``n`` workers reading one memory channel, with the
rules of the bounded stage (slots, order, delivery) unchanged.

The workers run in one nursery of a host task of the stage (a system task of the run),
inside one cancel scope: a cancel scope per worker would cost as much as the worker's task
(``as_completed`` starts every coroutine at once, so each gets a worker of its own).
Cancellation: a stop request on the stage's stop token cancels that scope (off the trio
thread, through ``TrioToken.run_sync_soon``); an item submitted after the host ended (a stop
from another thread meanwhile) never runs and is dropped. An item that ends with
``trio.Cancelled`` completes stopped. Idle workers end when the stage completes. A
``BaseException`` raised by the function (not ``trio.Cancelled``) propagates out of the
worker (into the host's nursery, and out of its system task), as from a coroutine
sender's task.
"""

from __future__ import annotations

import _thread
import contextvars
import signal
import threading
import types
from functools import partial
from typing import TYPE_CHECKING

import trio
import trio.lowlevel as tl

from .._algorithms._into_variant import into_variant
from .._algorithms._just import _JustSender
from .._core._errors import Stopped
from .._core._stop_token import stop_callback_for
from .._core._values import values
from .._schedulers._run_loop import sink_of
from ._protocol import ERROR, STOPPED, VALUE

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from .._core._stop_token import StopCallback
    from ._bounded import _BoundedOp, _Work
    from ._protocol import StopToken

    #: An idle worker: its task and the box it finds its next ``(work, item)`` in.
    _Entry = tuple[tl.Task, list[tuple[_Work, object]]]

__all__ = ["TrioPool"]

_get_ident = threading.get_ident
_CoroutineType = types.CoroutineType


def _ki_ok() -> bool:
    try:
        return callable(signal.getsignal(signal.SIGINT))
    except Exception:  # pragma: no cover - no signal support
        return False


class TrioPool:
    __slots__ = (
        "_cb", "_closed", "_cs", "_ended", "_fn", "_host_task", "_idle", "_nursery", "_op",
        "_pending", "_thread", "_token",
    )

    def __init__(self, op: _BoundedOp, fn: Callable[..., Awaitable[object]] | None) -> None:
        self._op = op
        self._fn = fn
        self._idle: list[_Entry] = []
        self._cs = trio.CancelScope()  # of the host task: a stop cancels every worker
        self._nursery: trio.Nursery | None = None  # the host task's, once it runs
        self._host_task: tl.Task | None = None  # the host task while it waits for the close
        self._ended = False  # the host task ended (a stop, or the run ending)
        self._pending: list[tuple[_Work, object]] | None = None  # submitted before that
        self._closed = False
        self._thread = _get_ident()
        self._token = tl.current_trio_token()
        self._cb: StopCallback | None = None

    def open(self, tok: StopToken) -> None:
        if tok.stop_possible():
            self._cb = stop_callback_for(tok, self._on_stop)

    def _on_stop(self) -> None:
        if _get_ident() == self._thread:
            self._cancel_all()
        else:
            try:
                self._token.run_sync_soon(self._cancel_all)
            except trio.RunFinishedError:  # pragma: no cover - the run is over: nothing runs
                pass

    def _cancel_all(self) -> None:
        self._cs.cancel()

    def submit(self, w: _Work, item: object) -> None:
        if _get_ident() == self._thread:
            self._submit(w, item)
        else:
            self._token.run_sync_soon(self._submit, w, item)

    def _submit(self, w: _Work, item: object) -> None:
        idle = self._idle
        if idle:
            task, box = idle.pop()
            box.append((w, item))
            tl.reschedule(task)  # the worker finds its next item in its box
        elif self._nursery is not None:
            self._nursery.start_soon(self._worker, w, item, name="structexec let_each worker")
        elif self._ended:
            # Stopped meanwhile (a stop from another thread): the item never runs.
            if type(item) is _CoroutineType:
                item.close()
            self._op._item_done(w, STOPPED, None)
        elif self._pending is not None:
            self._pending.append((w, item))
        else:
            self._pending = [(w, item)]
            tl.spawn_system_task(
                self._host,
                name="structexec let_each workers",
                context=contextvars.copy_context(),
            )

    async def _host(self) -> None:
        # One cancel scope and one nursery for all the workers: a scope per worker would cost
        # as much as the worker's task (as_completed runs one worker per coroutine).
        try:
            with self._cs:
                async with trio.open_nursery() as n:
                    self._nursery = n
                    pending = self._pending or []
                    self._pending = None
                    for w, item in pending:
                        n.start_soon(self._worker, w, item, name="structexec let_each worker")
                    del pending
                    if not self._closed:
                        self._host_task = tl.current_task()
                        await tl.wait_task_rescheduled(self._abort_host)
        finally:
            self._nursery = None
            self._ended = True

    def _abort_host(self, raise_cancel: object) -> tl.Abort:
        self._host_task = None
        return tl.Abort.SUCCEEDED

    def close(self) -> None:
        """The stage completed: end the idle workers (on the trio thread)."""
        self._closed = True
        cb = self._cb
        if cb is not None:
            self._cb = None
            cb.close()
        if _get_ident() == self._thread:
            self._wake_idle()
        else:
            self._token.run_sync_soon(self._wake_idle)

    def _wake_idle(self) -> None:
        idle = self._idle
        while idle:
            tl.reschedule(idle.pop()[0])  # an empty box: the worker ends
        host = self._host_task
        if host is not None:
            self._host_task = None
            tl.reschedule(host)

    def _base_exception(self, w: _Work, exc: BaseException) -> None:
        op = self._op
        sink = sink_of(op._env)
        taken = False
        if sink is not None:
            try:
                taken = sink(exc) is True
            except Exception:  # pragma: no cover - a broken sink: fall back
                taken = False
        op._src.request_stop()
        op._item_done(w, STOPPED, None)
        if taken:
            return
        if isinstance(exc, KeyboardInterrupt) and _ki_ok():
            _thread.interrupt_main()  # delivered as a Ctrl-C, as for a coroutine sender
            return
        raise exc

    def _unidle(self, entry: _Entry, raise_cancel: object) -> tl.Abort:
        """Abort the idle wait of the worker of ``entry`` (its host's scope was cancelled).
        Called by trio from whoever cancels (any task, or no task at all): the worker is
        found by its entry, never by ``current_task()``."""
        idle = self._idle
        for i, e in enumerate(idle):
            if e is entry:
                del idle[i]
                return tl.Abort.SUCCEEDED
        return tl.Abort.FAILED  # pragma: no cover - rescheduled meanwhile

    async def _worker(self, w: _Work, item: object) -> None:
        # In the host's cancel scope: a stop request cancels it, and every item that runs
        # afterwards in a worker is cancelled at its first checkpoint; the stage is ending
        # anyway, since a stop request on its token is never withdrawn.
        fn = self._fn
        op = self._op
        task = tl.current_task()
        while True:
            try:
                if fn is None:  # as_completed: the item is the work
                    if type(item) is _CoroutineType:
                        r = await item
                    else:
                        r = values(*await into_variant(item))
                else:
                    if type(item) is _JustSender:
                        vals = item._vals
                    else:
                        vals = await into_variant(item)
                    r = await fn(*vals)
            except (trio.Cancelled, Stopped):
                kind: int = STOPPED
                data: object = None
            except Exception as e:
                kind, data = ERROR, e
            except BaseException as exc:
                # KeyboardInterrupt, SystemExit: never an error datum. Hand it to the
                # consumer that waits (an await in a trio task, sync_wait), which raises
                # it where it waits, as a coroutine sender's task does; the item
                # completes stopped, which stops the stage.
                self._base_exception(w, exc)
                return
            else:
                kind = VALUE
                data = () if r is None else (tuple(r) if type(r) is values else (r,))
            item = None
            op._item_done(w, kind, data)
            w = data = None  # type: ignore[assignment]  # no reference kept while idle
            if self._closed:
                return
            box: list[tuple[_Work, object]] = []
            entry = (task, box)
            self._idle.append(entry)
            await tl.wait_task_rescheduled(partial(self._unidle, entry))
            if not box:
                return
            w, item = box[0]
