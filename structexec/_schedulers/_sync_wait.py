"""``sync_wait`` and ``sync_wait_with_variant`` ([exec.sync.wait], [exec.sync.wait.var]).

[exec.sync.wait]. The calling thread drives a private :class:`run_loop` until the sender
completes; work that other threads schedule onto that loop runs on the calling thread.

A ``BaseException`` (``KeyboardInterrupt``, ``SystemExit``) is never an error completion
(the senders guide "What happens when things fail"); ``sync_wait`` raises it to its caller on every
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
from typing import TYPE_CHECKING, Any

from .._core import _hooks
from .._core._connect import connect
from .._core._domain import DISPATCH as _DS
from .._core._domain import (
    apply_sender,
    declare_no_domain_env,
    default_domain,
    get_domain_early,
)
from .._core._env import TryEnv
from .._core._errors import ErrorValue
from .._core._protocol import Algorithm, Sender, completed_twice, is_sender
from .._core._queries import get_delegation_scheduler, get_scheduler
from ._run_loop import raised_sink, run_loop

if TYPE_CHECKING:
    pass

__all__ = ["sync_wait", "sync_wait_with_variant"]

_default_apply = default_domain.apply_sender
_new = object.__new__


class _SyncWaitEnv(TryEnv):
    """The receiver's environment: the loop's scheduler for both scheduler queries
    ([exec.sync.wait])."""

    __slots__ = ("_rcvr",)
    _unsupported = "sync_wait's environment does not support {q!r}"

    def __init__(self, rcvr: _SyncWaitReceiver) -> None:
        self._rcvr = rcvr

    def _sx_try(self, q: object, default: object) -> object:
        if q is get_scheduler or q is get_delegation_scheduler:
            loop = self._rcvr._loop
            if loop is None:
                loop = self._rcvr._get_loop()
            return loop.get_scheduler()
        if q is raised_sink:
            return self._rcvr._take_raised
        return default


#: ``_SyncWaitReceiver._kind``: 1 value, 2 error, 3 stopped, and these two, after which late
#: completions are ignored: another agent raised a BaseException for us, or we were left.
_RAISED, _ABANDONED = 4, 5
_TAKE_LOCK = threading.Lock()
#: Guards the lazy creation of a receiver's loop against a completion on another thread
#: (``_SyncWaitReceiver._get_loop``).
_LOOP_LOCK = threading.Lock()


class _SyncWaitReceiver:
    """The receiver of ``sync_wait``. Its ``run_loop`` is made only when needed: when the
    work asks for the scheduler, or when it has not completed by the time ``start`` returns.
    Work that completes inside ``start`` (``just(x) | then(f)``) needs no loop at all."""

    #: Completing only records the result and wakes the waiting thread (contracts.HandOff).
    _sx_handoff = True

    __slots__ = ("_finished", "_kind", "_loop", "_result")

    def __init__(self) -> None:
        self._loop: run_loop | None = None
        self._kind = 0
        self._result: Any = None  # the values tuple, or the error datum
        self._finished = False  # finish() was called on _loop

    def get_env(self) -> _SyncWaitEnv:
        return _SyncWaitEnv(self)

    def _get_loop(self) -> run_loop:
        """The loop, made on first use. If the work completed before the loop existed, the
        loop is finished at once (its ``run()`` returns when its queue is empty)."""
        loop = self._loop
        if loop is not None:
            return loop
        with _LOOP_LOCK:
            loop = self._loop
            if loop is None:
                loop = run_loop()
                if self._kind == _ABANDONED:
                    loop._abandon()  # work scheduled onto it later is dropped (never run)
                elif self._kind:
                    self._finished = True
                    loop.finish()
                self._loop = loop
        return loop

    def _wake(self) -> None:
        """A completion arrived (``_kind`` is set): finish the loop if there is one, once.

        The completions call this when ``_LOOP_LOCK`` is held or the loop exists, checked in
        that order. ``_get_loop`` holds the lock from before it reads ``_kind`` until after
        it has published the loop, so either it saw the completion (and finished the loop
        itself), or the completion sees the lock held or the loop published. No completion
        is lost, and a loop is never finished twice (``_finished``, under the lock).
        """
        with _LOOP_LOCK:
            loop = self._loop
            if loop is None or self._finished:
                return
            self._finished = True
        loop.finish()

    def _take_raised(self, exc: BaseException) -> bool:
        """The ``raised_sink``: ``exc`` was raised on another agent while completing this work."""
        with _TAKE_LOCK:
            if self._kind:
                return False  # completed already (or abandoned): not ours to raise
            self._result = exc
            self._kind = _RAISED
        self._wake()
        return True

    def set_value(self, *vals: object) -> None:
        if self._kind:
            if self._kind >= _RAISED:
                return  # a late completion of abandoned work
            raise completed_twice(self, "set_value")
        self._result = vals
        self._kind = 1
        if _LOOP_LOCK.locked() or self._loop is not None:  # this order: see _wake
            self._wake()

    def set_error(self, err: object) -> None:
        if self._kind:
            if self._kind >= _RAISED:
                return
            raise completed_twice(self, "set_error")
        self._result = err
        self._kind = 2
        if _LOOP_LOCK.locked() or self._loop is not None:  # this order: see _wake
            self._wake()

    def set_stopped(self) -> None:
        if self._kind:
            if self._kind >= _RAISED:
                return
            raise completed_twice(self, "set_stopped")
        self._kind = 3
        if _LOOP_LOCK.locked() or self._loop is not None:  # this order: see _wake
            self._wake()


# Its environment answers only the schedulers and raised_sink: a then-chain connected to it
# whose predecessor has no completion scheduler runs here, never on a remote scheduler.
declare_no_domain_env(_SyncWaitReceiver)


def _run(alg: object, sndr: Any, custom: bool = True) -> tuple[Any, ...] | None:
    """``sync_wait(sndr)`` (``alg`` is ``sync_wait``, ``custom`` true: a domain may customise it,
    [exec.sync.wait]), and the body of ``sync_wait_with_variant`` and of ``apply_sender``
    (``custom`` false). It is ``sync_wait_t.__call__`` itself: one frame per call."""
    if custom and _DS.apply:  # apply_customized(), inlined
        dom = get_domain_early(sndr)
        if type(dom).apply_sender is not _default_apply:  # type: ignore[attr-defined]
            res: tuple[Any, ...] | None = apply_sender(dom, alg, sndr)
            return res
    is_sndr = isinstance(sndr, Sender)
    if not is_sndr and not is_sender(sndr):
        raise TypeError(f"sync_wait() needs a sender, got {type(sndr).__name__}")
    if _hooks.on_trio_thread():
        raise RuntimeError(
            "sync_wait() was called on a thread that is running trio: it would block the event "
            "loop forever. Use `await sndr` in trio code, or call sync_wait from "
            "trio.to_thread.run_sync ([exec.sync.wait])"
        )
    # _SyncWaitReceiver() without the __init__ frame
    rcvr: _SyncWaitReceiver = _new(_SyncWaitReceiver)
    init = rcvr  # (assigned through another name: mypy would narrow rcvr._loop to None)
    init._loop = None
    init._kind = 0
    init._result = None
    init._finished = False
    # connect(sndr, rcvr) without the domain layer when no domain may transform sndr
    if is_sndr and not (_DS.on and (_DS.all or getattr(sndr, "tag", None) in _DS.tags)):
        op = sndr.connect(rcvr)
    else:
        op = connect(sndr, rcvr)
    try:
        op.start()
        if rcvr._loop is not None or not rcvr._kind:
            # Not completed inline, or the work uses the loop: drive it ([exec.sync.wait]).
            rcvr._get_loop().run()
    except BaseException:
        # Raised on this thread (inline in start, by an item of the loop, or a signal while
        # the loop waits): leave with it, and leave nothing behind (module docstring).
        _abandon(rcvr)
        raise
    kind = rcvr._kind
    if kind == 1:
        r: tuple[Any, ...] = rcvr._result
        return r
    if kind == 2:
        err = rcvr._result
        rcvr._result = None
        try:
            if isinstance(err, BaseException):
                raise err
            raise ErrorValue(err)
        finally:
            # this frame is in the traceback: a local holding the exception would make the
            # cycle exception -> traceback -> frame -> exception (cyclic garbage)
            del err
    if kind == _RAISED:
        exc: BaseException = rcvr._result
        rcvr._result = None
        _abandon(rcvr)
        try:
            raise exc
        finally:
            del exc
    return None


def _abandon(rcvr: _SyncWaitReceiver) -> None:
    with _TAKE_LOCK:
        if not rcvr._kind:
            rcvr._kind = _ABANDONED
    with _LOOP_LOCK:
        loop = rcvr._loop
        if loop is None:
            # A loop made later (a late get_scheduler query) is abandoned at birth: the
            # _kind check in _get_loop. A completed, loopless operation leaves nothing.
            if rcvr._kind != _ABANDONED:
                rcvr._kind = _ABANDONED
            return
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

    # ``sync_wait(sndr)`` is ``_run(sync_wait, sndr)``: no frame of its own.
    __call__ = _run

    def apply_sender(self, sndr: object) -> tuple[Any, ...] | None:
        return _run(self, sndr, False)


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

    def __call__(self, sndr: object) -> tuple[Any, ...] | None:
        return _run(self, sndr, False)


sync_wait = sync_wait_t()
sync_wait_with_variant = sync_wait_with_variant_t()
