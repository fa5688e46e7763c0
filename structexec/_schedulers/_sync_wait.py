"""``sync_wait`` and ``sync_wait_with_variant`` ([exec.sync.wait], [exec.sync.wait.var]).

[exec.sync.wait]. The calling thread drives a private :class:`run_loop` until the sender
completes; work that other threads schedule onto that loop runs on the calling thread.

A ``BaseException`` (``KeyboardInterrupt``, ``SystemExit``) is never an error completion
(docs/senders.md "What happens when things fail"); ``sync_wait`` raises it to its caller on every
path, and its loop ends up finished, so nothing is left for the garbage collector to complain about:

* raised on the calling thread (inline in ``start``, by a function the loop runs, or a Ctrl-C
  while the loop waits): it propagates out of ``sync_wait``;
* raised on another agent while completing this work (a ``then`` function on a
  parallel-scheduler thread or on the trio scheduler): that execution context hands it to
  the receiver's ``raised_sink`` (see ``_run_loop``), and ``sync_wait`` raises it.

Then the operation is *abandoned*: work still running elsewhere is not waited for (it cannot
be stopped: ``sync_wait`` provides no stop token, [exec.sync.wait]); its late completions are
dropped, never run on the gone caller's thread and never raising into the thread that
delivers them.
"""

from __future__ import annotations

import threading
from typing import Any

from .._core import _hooks
from .._core._connect import connect
from .._core._domain import (
    apply_customized,
    apply_sender,
    default_domain,
    get_domain_early,
)
from .._core._env import TryEnv
from .._core._errors import ErrorValue
from .._core._protocol import Algorithm, completed_twice, is_sender
from .._core._queries import get_delegation_scheduler, get_scheduler
from ._run_loop import raised_sink, run_loop

__all__ = ["sync_wait", "sync_wait_with_variant"]

_default_apply = default_domain.apply_sender


class _SyncWaitEnv(TryEnv):
    """The receiver's environment: the loop's scheduler for both scheduler queries
    ([exec.sync.wait])."""

    __slots__ = ("_rcvr",)
    _unsupported = "sync_wait's environment does not support {q!r}"

    def __init__(self, rcvr: _SyncWaitReceiver) -> None:
        self._rcvr = rcvr

    def _sx_try(self, q: Any, default: Any) -> Any:
        if q is get_scheduler or q is get_delegation_scheduler:
            return self._rcvr._loop.get_scheduler()
        if q is raised_sink:
            return self._rcvr._take_raised
        return default


#: ``_SyncWaitReceiver._kind``: 1 value, 2 error, 3 stopped, and these two, after which late
#: completions are ignored: another agent raised a BaseException for us, or we were left.
_RAISED, _ABANDONED = 4, 5
_TAKE_LOCK = threading.Lock()


class _SyncWaitReceiver:
    __slots__ = ("_kind", "_loop", "_result")
    #: Completing only records the result and wakes the waiting thread (contracts.HandOff).
    _sx_handoff = True

    def __init__(self, loop: run_loop) -> None:
        self._loop = loop
        self._kind = 0
        self._result: Any = None

    def get_env(self) -> _SyncWaitEnv:
        return _SyncWaitEnv(self)

    def _take_raised(self, exc: BaseException) -> bool:
        """The ``raised_sink``: ``exc`` was raised on another agent while completing this work."""
        with _TAKE_LOCK:
            if self._kind:
                return False  # completed already (or abandoned): not ours to raise
            self._kind = _RAISED
        self._result = exc
        self._loop.finish()
        return True

    def set_value(self, *vals: Any) -> None:
        if self._kind:
            if self._kind >= _RAISED:
                return  # a late completion of abandoned work
            raise completed_twice(self, "set_value")
        self._kind = 1
        self._result = vals
        self._loop.finish()

    def set_error(self, err: Any) -> None:
        if self._kind:
            if self._kind >= _RAISED:
                return
            raise completed_twice(self, "set_error")
        self._kind = 2
        self._result = err
        self._loop.finish()

    def set_stopped(self) -> None:
        if self._kind:
            if self._kind >= _RAISED:
                return
            raise completed_twice(self, "set_stopped")
        self._kind = 3
        self._loop.finish()


def _run(sndr: Any) -> tuple[Any, ...] | None:
    if not is_sender(sndr):
        raise TypeError(f"sync_wait() needs a sender, got {type(sndr).__name__}")
    if _hooks.on_trio_thread():
        raise RuntimeError(
            "sync_wait() was called on a thread that is running trio: it would block the event "
            "loop forever. Use `await sndr` in trio code, or call sync_wait from "
            "trio.to_thread.run_sync ([exec.sync.wait])"
        )
    loop = run_loop()
    rcvr = _SyncWaitReceiver(loop)
    op = connect(sndr, rcvr)
    try:
        op.start()
        loop.run()
    except BaseException:
        # Raised on this thread (inline in start, by an item of the loop, or a signal while
        # the loop waits): leave with it, and leave nothing behind (module docstring).
        _abandon(rcvr, loop)
        raise
    kind = rcvr._kind
    if kind == 1:
        r: tuple[Any, ...] = rcvr._result
        return r
    if kind == 2:
        err = rcvr._result
        rcvr._result = None
        if isinstance(err, BaseException):
            raise err
        raise ErrorValue(err)
    if kind == _RAISED:
        exc: BaseException = rcvr._result
        rcvr._result = None
        _abandon(rcvr, loop)
        raise exc
    return None


def _abandon(rcvr: _SyncWaitReceiver, loop: run_loop) -> None:
    with _TAKE_LOCK:
        if not rcvr._kind:
            rcvr._kind = _ABANDONED
    loop._abandon()


class sync_wait_t(Algorithm):
    """``sync_wait(sndr)``: run ``sndr`` to completion on the calling thread ([exec.sync.wait]).

    Returns the tuple of value datums (``()`` for none), ``None`` if the sender completed
    stopped, and raises the error (an exception as it is, anything else wrapped in
    :class:`ErrorValue`). The receiver's environment provides ``get_scheduler`` and
    ``get_delegation_scheduler`` (the private ``run_loop``'s scheduler) and no stop token. Raises
    ``RuntimeError`` on a thread that is running trio (use ``await``); it works from
    ``trio.to_thread.run_sync`` threads. A domain may customise it via ``apply_sender``
    ([exec.sync.wait]).

    A ``KeyboardInterrupt`` or ``SystemExit`` raised by the work (on this thread, on a
    parallel-scheduler thread or on the trio scheduler), or a Ctrl-C while it waits, is raised
    here; work still running elsewhere is then abandoned: not waited for, its late completions
    dropped (see the module docstring).

    Completion signatures: the sender must have at most one value signature ([exec.sync.wait];
    use ``sync_wait_with_variant`` otherwise).

    Errors: an error completion is raised: an exception as it is, any other datum wrapped in
    ``ErrorValue``.

    Cancellation: the receiver's environment has no stop token; a stopped completion returns
    ``None``.

    Example:

    >>> import structexec as sx
    >>> sx.sync_wait(sx.just(1, 2))
    (1, 2)
    >>> sx.sync_wait(sx.just_stopped()) is None
    True
    """

    __slots__ = ()

    def __call__(self, sndr: Any) -> tuple[Any, ...] | None:
        if apply_customized():
            dom = get_domain_early(sndr)
            if type(dom).apply_sender is not _default_apply:
                r: tuple[Any, ...] | None = apply_sender(dom, self, sndr)
                return r
        return _run(sndr)

    def apply_sender(self, sndr: Any) -> tuple[Any, ...] | None:
        return _run(sndr)


class sync_wait_with_variant_t(Algorithm):
    """``sync_wait_with_variant(sndr)``: ``sync_wait(into_variant(sndr))`` unwrapped
    ([exec.sync.wait.var]).

    In Python the "variant" is the tuple of whichever value datums arrived, so this returns
    the same as ``sync_wait`` but accepts senders with several value signatures.

    Completion signatures: any number of value signatures ([exec.sync.wait.var]).

    Errors: as ``sync_wait``: the error is raised.

    Cancellation: as ``sync_wait``: stopped returns ``None``.

    Example:

    >>> import structexec as sx
    >>> sx.sync_wait_with_variant(sx.just(1))
    (1,)
    """

    __slots__ = ()

    def __call__(self, sndr: Any) -> tuple[Any, ...] | None:
        return _run(sndr)


sync_wait = sync_wait_t()
sync_wait_with_variant = sync_wait_with_variant_t()
