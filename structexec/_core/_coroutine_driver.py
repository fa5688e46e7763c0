"""The generic coroutine driver: runs a coroutine off the trio scheduler with a loop.

[exec.as.awaitable], [exec.with.awaitable.senders], [exec.connect], [exec.task],
docs/task.md 'How "stopped" unwinds a task', docs/task.md "What a task is" (the ``task`` body is
driven by the library as a loop, never by recursion).

Internal API (used by coroutine senders under ``sync_wait`` and by ``task`` when its scheduler
is not trio's)::

    drv = CoroutineDriver(coro, rcvr, env=None)
    drv.start()

``coro`` is a coroutine object (or any generator-like object with ``send``/``throw``, e.g. the
result of ``awaitable.__await__()``). ``rcvr`` receives the outcome: ``set_value(v)`` for a returned
``v`` (``set_value()`` for ``None``, ``set_value(*xs)`` for ``sx.values(*xs)``), ``set_error(e)``
for an escaping ``Exception``, ``set_stopped()`` when the coroutine unwinds because an awaited
sender completed stopped. ``env`` is the environment the awaited senders see (their receiver's
environment); it defaults to ``FWD-ENV(get_env(rcvr))`` ([exec.as.awaitable], [exec.connect]).

How it works. While the driver runs ``coro.send``/``coro.throw`` it sets
``_hooks.driver_state.driver`` to itself, so ``await sndr`` inside the coroutine calls
:meth:`CoroutineDriver.await_sender`, a generator that hands the sender to the loop by
yielding a private marker. The loop connects the sender to the driver (the driver is the
receiver of every awaited operation, one at a time), starts it and:

* if it completed inside ``start`` it resumes the coroutine in the same loop iteration (no
  recursion: 100,000 awaits of ``just(i)`` use constant stack);
* otherwise it returns; the completion, on whichever thread it happens, resumes the loop.

A value is sent into the coroutine (docs/trio.md "Awaiting a sender": ``None``, the datum or a
tuple); an error is thrown into it as it is (a non-exception datum as ``ErrorValue``,
AS-EXCEPT-PTR); stopped throws :class:`sx.Stopped` (a ``BaseException``, so ``except Exception``
cannot catch it), which unwinds the coroutine: ``finally`` blocks and ``async with`` exits run and
may await. When ``Stopped`` escapes, the operation completes ``set_stopped()``. A coroutine that
swallows the ``Stopped`` and returns violates the contract: the operation completes with
``set_error(RuntimeError(swallowed_stop_message(...)))``. The same rule holds for a coroutine hosted
in a trio task (``_coroutine_sender.py``, ``_await.py``) and for ``task`` (``_task_driver.py``);
:class:`HostMark` is how the trio side tells.

Awaiting anything that is not a structexec sender (a trio primitive such as ``trio.sleep``)
throws ``RuntimeError("trio primitives can only be awaited when the coroutine runs on the trio
scheduler ...")`` into the coroutine.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Generator
from typing import Any

from . import _hooks
from ._connect import connect_unchecked as connect
from ._env import fwd_env, get_env
from ._errors import ErrorValue, Stopped
from ._protocol import completed_twice, twice_started
from ._values import values

__all__: list[str] = []

_driver_state = _hooks.driver_state
_MARK: Any = object()  # what await_sender yields to the loop

_SEND, _THROW, _STOP = 0, 1, 2


def _coro_name(coro: Any) -> str:
    q = getattr(coro, "__qualname__", None)
    return f"the coroutine {q}" if isinstance(q, str) else "the coroutine"


FOREIGN_AWAIT_MESSAGE = (
    "trio primitives can only be awaited when the coroutine runs on the trio scheduler; "
    "this coroutine is driven by structexec off the trio scheduler (it was awaited {what}). "
    "Await structexec senders here, or run the coroutine on the trio scheduler (for example "
    "await it from a trio task, or use sx.starts_on(sx.trio_scheduler(), ...))"
)


def swallowed_stop_message(what: str) -> str:
    """The message of the ``RuntimeError`` a coroutine run as a sender completes with when it
    caught the ``sx.Stopped`` (or ``trio.Cancelled``) that unwinds it and returned a value."""
    return (
        f"{what} caught the sx.Stopped (or trio.Cancelled) raised because an awaited sender "
        "completed stopped, and then returned normally. In a coroutine run as a sender, a "
        "stopped completion cannot be caught: the coroutine is never resumed with a value "
        "([exec.with.awaitable.senders] unhandled_stopped). Re-raise it (clean up in "
        "`finally:` or `except sx.Stopped: ...; raise`), or turn stopped into a value before "
        "awaiting: `await (sndr | sx.stopped_as_optional())` or `sx.upon_stopped(f)`"
    )


class HostMark:
    """Set in the context of a trio task that hosts a coroutine run as a sender.

    ``await sndr`` (``_await.py``) sets ``stopped`` when, in that very task, an awaited sender
    completed stopped and the await raised; the host then knows that a coroutine that returns
    a value swallowed the stop (see :func:`swallowed_stop_message`).
    """

    __slots__ = ("stopped", "task")

    def __init__(self, task: Any) -> None:
        self.task = task
        self.stopped = False


#: The :class:`HostMark` of the hosting trio task, if any.
host_mark: contextvars.ContextVar[HostMark | None] = contextvars.ContextVar(
    "structexec_host_mark", default=None
)


class CoroutineDriver:
    """Drive ``coro`` to completion into ``rcvr`` with a loop (see the module docstring).

    The driver is also the receiver of each awaited operation; :meth:`get_env` returns the
    ``env`` given at construction. ``start()`` may be called once.
    """

    __slots__ = (
        "_coro",
        "_data",
        "_env",
        "_in_start",
        "_kind",
        "_lock",
        "_op",
        "_pending",
        "_rcvr",
        "_req",
        "_started",
        "_stopping",
    )

    def __init__(self, coro: Any, rcvr: Any, env: Any = None) -> None:
        if not (hasattr(coro, "send") and hasattr(coro, "throw")):
            raise TypeError(
                f"CoroutineDriver needs a coroutine (an object with send() and throw()), "
                f"got {type(coro).__name__}"
            )
        self._coro = coro
        self._rcvr = rcvr
        self._env = fwd_env(get_env(rcvr)) if env is None else env
        self._lock = threading.Lock()
        self._kind = _SEND
        self._data: Any = None
        self._req: Any = None
        self._op: Any = None
        self._pending = False
        self._in_start = False
        self._started = False
        self._stopping = False

    def get_env(self) -> Any:
        return self._env

    def start(self) -> None:
        if self._started:
            raise twice_started(self)
        self._started = True
        self._loop()

    def close(self) -> None:
        """Close a coroutine that was never started (no 'never awaited' warning)."""
        if not self._started:
            self._started = True
            close = getattr(self._coro, "close", None)
            if close is not None:
                close()

    # -- the coroutine side -------------------------------------------------------------

    def await_sender(self, sndr: Any) -> Generator[Any, Any, Any]:
        """``await sndr`` inside the driven coroutine: hand ``sndr`` to the loop."""
        self._req = sndr
        return (yield _MARK)

    # -- receiver of the awaited operation ---------------------------------------------------

    def _complete(self, kind: int, data: Any, how: str) -> None:
        lock = self._lock
        lock.acquire()
        if not self._pending:
            lock.release()
            raise completed_twice(self, how)
        self._pending = False
        self._kind = kind
        self._data = data
        resume = not self._in_start
        lock.release()
        if resume:
            self._loop()

    def set_value(self, *vals: Any) -> None:
        n = len(vals)
        self._complete(_SEND, vals[0] if n == 1 else (None if n == 0 else vals), "set_value")

    def set_error(self, err: Any) -> None:
        self._complete(
            _THROW, err if isinstance(err, BaseException) else ErrorValue(err), "set_error"
        )

    def set_stopped(self) -> None:
        self._complete(_STOP, None, "set_stopped")

    # -- the loop -------------------------------------------------------------------------

    def _loop(self) -> None:
        coro = self._coro
        ds = _driver_state
        lock = self._lock
        while True:
            kind = self._kind
            data = self._data
            self._data = None
            self._op = None
            prev = ds.driver
            ds.driver = self
            try:
                if kind == _SEND:
                    y = coro.send(data)
                elif kind == _THROW:
                    y = coro.throw(data)
                else:
                    self._stopping = True
                    y = coro.throw(Stopped())
            except StopIteration as e:
                ds.driver = prev
                self._finish_value(e.value)
                return
            except Stopped:
                ds.driver = prev
                self._rcvr.set_stopped()
                return
            except Exception as e:
                ds.driver = prev
                self._rcvr.set_error(e)
                return
            except BaseException:
                ds.driver = prev
                raise
            ds.driver = prev
            if y is not _MARK:
                self._kind = _THROW
                self._data = RuntimeError(FOREIGN_AWAIT_MESSAGE.format(what=f"yielded {y!r}"))
                continue
            sndr = self._req
            self._req = None
            try:
                op = connect(sndr, self)
            except Exception as e:
                self._kind = _THROW
                self._data = e
                continue
            self._op = op
            self._pending = True
            self._in_start = True
            try:
                op.start()
            except BaseException as e:
                # start() must not raise ([exec.opstate.start]); if it does, the await raises
                # it, as an await in a trio task does (a later completion is a second one).
                lock.acquire()
                self._in_start = False
                self._pending = False
                lock.release()
                self._kind = _THROW
                self._data = e
                continue
            lock.acquire()
            self._in_start = False
            pending = self._pending
            lock.release()
            if pending:
                return  # the completion resumes the loop

    def _finish_value(self, v: Any) -> None:
        rcvr = self._rcvr
        if self._stopping:
            rcvr.set_error(RuntimeError(swallowed_stop_message(_coro_name(self._coro))))
        elif v is None:
            rcvr.set_value()
        elif type(v) is values:
            rcvr.set_value(*v)
        else:
            rcvr.set_value(v)
