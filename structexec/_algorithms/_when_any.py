"""``when_any`` and the public ``stop_when``: racing senders.

Neither is in the C++ draft's ``std::execution`` as a public algorithm: ``when_any`` is an
extension modelled on stdexec's ``exec/when_any.hpp`` (and libunifex's ``when_any``); the public
``stop_when(sndr, trigger)`` is modelled on libunifex's ``stop_when`` (the draft has only the
exposition-only ``stop-when`` of a *stop token*, [exec.stop.when], which stays private in
``_stop_when`` for the scopes). Both are built on one operation, :class:`RaceOp`, shared with
``timeout``/``stop_after`` (``_timeout``):

* every child is connected to a receiver whose environment has the race's own
  ``inplace_stop_source``'s token (and the receiver's forwarding queries), as ``when_all``'s
  children do ([exec.when.all]);
* the first child completion of any kind *fires* the race: a stop request goes to the other
  children, on the completing thread;
* the result is decided under a lock, so children completing at once on several threads give
  exactly one winner; nothing is called while the lock is held;
* the operation completes after every child has completed (no orphan work), with the result
  that was decided: for ``when_any`` the first completion, for ``stop_when`` always the
  completion of ``sndr`` (child 0), whichever fired;
* a stop request on the receiver's token is forwarded to the children; for ``when_any`` (and
  the timeouts) it also decides the result, ``set_stopped()``, unless a child won before;
* a stop already requested at ``start`` completes ``set_stopped()`` without starting any child;
  once the result is decided, the children not started yet are not started (their operations
  are closed): ``when_any(just(1), other)`` never starts ``other``.

An ``Exception`` raised by a child's ``start`` (a broken sender) is taken as that child's
``set_error`` completion, so the race stays structured; a ``BaseException`` (Ctrl-C) requests
stop on the children started so far, closes the others and propagates to the caller of
``start``: as for ``when_all``, the operation then never completes.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar, overload

from .._core._adaptor_util import BinaryAdaptor, close_op, early, early_child
from .._core._completion_signatures import completion_signatures, get_completion_signatures
from .._core._connect import connect_unchecked as connect
from .._core._domain import domains_active
from .._core._env import EMPTY_ENV, fwd_env, get_env
from .._core._protocol import (
    Algorithm,
    Sender,
    WidenClosure,
    completed_twice,
    is_sender,
    twice_started,
)
from .._core._queries import get_stop_token, query_or
from .._core._stop_token import (
    inplace_stop_source,
    is_unstoppable,
    never_stop_token,
    stop_callback_for,
)
from .._core._tags import set_stopped_t
from ._dropped_errors import add_notes, short_repr
from ._stop_when import StopTokenEnv
from ._when_all import _common_domain

if TYPE_CHECKING:
    from .._core._contracts import Env, OperationState, Receiver
    from .._core._stop_token import StopCallback

T1 = TypeVar("T1")
T2 = TypeVar("T2")
T3 = TypeVar("T3")
T4 = TypeVar("T4")
T5 = TypeVar("T5")
T6 = TypeVar("T6")

__all__ = ["stop_when", "when_any"]

T = TypeVar("T")

VALUE, ERROR, STOPPED = 0, 1, 2
_NEVER = never_stop_token()


class RaceReceiver:
    """The receiver of child ``#i`` of a race; a second completion raises ([exec.async.ops])."""

    __slots__ = ("_done", "_i", "_op")

    def __init__(self, op: RaceOp, i: int) -> None:
        self._op = op
        self._i = i
        self._done = False

    def get_env(self) -> StopTokenEnv:
        return self._op._cenv

    def set_value(self, *vals: object) -> None:
        if self._done:
            raise completed_twice(self, "set_value")
        self._done = True
        self._op._arrive(self._i, VALUE, vals)

    def set_error(self, err: object) -> None:
        if self._done:
            raise completed_twice(self, "set_error")
        self._done = True
        self._op._arrive(self._i, ERROR, err)

    def set_stopped(self) -> None:
        if self._done:
            raise completed_twice(self, "set_stopped")
        self._done = True
        self._op._arrive(self._i, STOPPED, None)

    def __repr__(self) -> str:
        return f"<{self._op._name} child #{self._i} receiver>"


class RaceOp:
    """The operation of ``when_any``, ``stop_when``, ``timeout`` and ``stop_after``.

    ``primary`` is ``-1`` for "the first completion wins" (``when_any``, the timeouts) or the
    index of the child whose completion is always the result (``stop_when``: 0). Subclasses of
    :class:`RaceReceiver` may map a child's completion before it arrives (the timers of
    ``_timeout``).
    """

    __slots__ = (
        "_cenv",
        "_count",
        "_fired",
        "_lock",
        "_losers",
        "_name",
        "_on_stop",
        "_ops",
        "_primary",
        "_rcvr",
        "_rcvrs",
        "_result",
        "_src",
        "_started",
        "_winner",
    )

    def __init__(self, rcvr: Receiver, n: int, primary: int, name: str) -> None:
        self._rcvr = rcvr
        self._count = n
        self._primary = primary
        self._name = name
        self._fired = False
        # (kind, payload): the values tuple, the error datum, or None ([exec.when.all] style).
        self._result: tuple[int, Any] | None = None
        self._winner = -1
        self._losers: list[tuple[int, BaseException]] | None = None
        self._lock = threading.Lock()
        self._on_stop: StopCallback | None = None
        self._started = False
        self._src = inplace_stop_source()
        self._cenv = StopTokenEnv(self._src.get_token(), fwd_env(get_env(rcvr)))
        self._ops: list[OperationState] = []
        self._rcvrs: Sequence[RaceReceiver] = ()

    def connect_children(self, children: tuple[object, ...], rcvrs: list[RaceReceiver]) -> None:
        ops: list[OperationState] = []
        try:
            for c, r in zip(children, rcvrs):
                ops.append(connect(c, r))
        except BaseException:
            for o in ops:
                close_op(o)
            raise
        self._ops = ops
        self._rcvrs = rcvrs

    def close(self) -> None:
        """Drop a connected, never-started operation: close the children's operations
        (the senders guide "Writing your own sender")."""
        if not self._started:
            self._started = True
            self._rcvrs = ()  # the receivers point back here: no cycle left behind
            ops, self._ops = self._ops, []
            for op in ops:
                close_op(op)

    def start(self) -> None:
        if self._started:
            raise twice_started(self)
        self._started = True
        src = self._src
        tok = query_or(get_env(self._rcvr), get_stop_token, _NEVER)
        if tok is not _NEVER and not is_unstoppable(tok):
            self._on_stop = stop_callback_for(tok, self._outer_stop)
            if src.stop_requested():  # requested before start: start nothing
                self._on_stop.close()
                self._on_stop = None
                self._rcvrs = ()
                ops, self._ops = self._ops, []
                for op in ops:
                    close_op(op)
                self._rcvr.set_stopped()
                return
        ops = self._ops
        rcvrs = self._rcvrs  # (_complete may drop them while a child starts)
        n = len(ops)
        lock = self._lock
        for i in range(n):
            op = ops[i]
            lock.acquire()
            if self._result is not None:  # decided: do not start the rest
                rest = n - i
                self._count = c = self._count - rest
                lock.release()
                self._ops = []
                for o in ops[i:]:
                    close_op(o)
                if c == 0:
                    self._complete()
                return
            lock.release()
            try:
                op.start()
            except Exception as e:
                # A broken child: its start's exception is its error completion.
                r = rcvrs[i]
                if r._done:  # it completed, then raised: a contract violation
                    raise
                r.set_error(e)
            except BaseException:
                # Ctrl-C and friends: stop what runs, drop the rest, propagate. The
                # operation never completes (as when_all's), so forget the outer callback.
                src.request_stop()
                self._ops = []
                self._rcvrs = ()  # never completes: leave no cycle through the receivers
                for o in ops[i + 1 :]:
                    close_op(o)
                on_stop, self._on_stop = self._on_stop, None
                if on_stop is not None:
                    on_stop.close()
                raise
        self._ops = []

    def _outer_stop(self) -> None:
        """The receiver's token was stopped: for a first-wins race, stopped is the result
        unless a child already completed; then stop the children."""
        if self._primary < 0:
            lock = self._lock
            lock.acquire()
            if not self._fired:
                self._fired = True
                self._result = (STOPPED, None)
            lock.release()
        self._src.request_stop()

    def _arrive(self, i: int, kind: int, payload: object) -> None:
        lock = self._lock
        lock.acquire()
        first = not self._fired
        self._fired = True
        primary = self._primary
        if self._result is None and (primary < 0 or i == primary):
            self._result = (kind, payload)
            self._winner = i
        elif kind == ERROR and isinstance(payload, BaseException):
            losers = self._losers
            if losers is None:
                losers = self._losers = []
            losers.append((i, payload))
        self._count = c = self._count - 1
        lock.release()
        if first:
            self._src.request_stop()  # on the completing thread, before anything else
        if c == 0:
            self._complete()

    def _complete(self) -> None:
        # The children's receivers point back to this operation: dropping them here leaves
        # no reference cycle, so a finished race is freed by reference counting.
        self._rcvrs = ()
        on_stop = self._on_stop
        if on_stop is not None:  # deregister before completing ([exec.recv.concepts])
            self._on_stop = None
            on_stop.close()
        result = self._result
        self._result = None
        rcvr = self._rcvr
        if result is None:  # pragma: no cover - every path decides before the count is 0
            rcvr.set_stopped()
            return
        kind, payload = result
        if kind == VALUE:
            rcvr.set_value(*payload)
        elif kind == ERROR:
            losers = self._losers
            if losers is not None and isinstance(payload, BaseException):
                self._losers = None
                _note_losers(self._name, payload, losers)
            rcvr.set_error(payload)
        else:
            rcvr.set_stopped()


def _note_losers(name: str, err: BaseException, losers: list[tuple[int, BaseException]]) -> None:
    """Attach the exceptions of children that completed with an error after the race was
    decided to the winning exception, as notes (they are not delivered)."""

    def note(i: int, other: object) -> str:
        return (
            f"{name}: child #{i} also failed, with {short_repr(other)}, after the race "
            "was decided; only the first completion is delivered"
        )

    add_notes(err, losers, note)


def child_env_for(env: object) -> StopTokenEnv | None:
    """The environment a race's children see, for ``get_completion_signatures(child, env)``."""
    if env is None:
        return None
    return StopTokenEnv(inplace_stop_source().get_token(), fwd_env(env))


def outer_may_stop(env: object) -> bool:
    return env is None or not is_unstoppable(get_stop_token(env))


# --------------------------------------------------------------------------- when_any


class _WhenAnySender(Sender[object]):
    __slots__ = ("_children",)

    def __init__(self, children: tuple[object, ...]) -> None:
        self._children = children

    def connect(self, rcvr: Receiver) -> RaceOp:
        children = self._children
        op = RaceOp(rcvr, len(children), -1, "when_any")
        op.connect_children(children, [RaceReceiver(op, i) for i in range(len(children))])
        return op

    def get_env(self) -> Env:
        return EMPTY_ENV

    def get_completion_signatures(self, env: object = None) -> completion_signatures | None:
        """The union of the children's signatures, and ``set_stopped_t()``."""
        cenv = child_env_for(env)
        sigs = completion_signatures.union(
            get_completion_signatures(c, cenv) for c in self._children
        )
        if sigs is None:
            return None
        return sigs | completion_signatures(set_stopped_t())

    @property
    def data(self) -> None:
        return None

    @property
    def children(self) -> tuple[object, ...]:
        return self._children

    def __repr__(self) -> str:
        return f"when_any({', '.join(map(repr, self._children))})"


class when_any_t(Algorithm):
    """``when_any(*senders)``: race senders; the first to complete decides the result.

    An extension modelled on stdexec's ``exec/when_any.hpp`` (not in the C++ draft; compare
    ``when_all``, [exec.when.all]). Starts every child in argument order; the first child to
    complete, with a value, an error or stopped, *wins*: its completion becomes the result,
    exactly as it sent it (values passed through: ``when_any(just(1, 2), ...)`` sends ``1, 2``),
    and the other children get a stop request. ``when_any`` completes only after every child
    has completed (no orphan work); the losers' results are discarded (an exception a loser
    completes with is attached to a winning exception as a note). Once the result is decided,
    children not started yet are not started. Children may complete on different threads:
    exactly one wins, the first to take ``when_any``'s lock; on one agent (a manual scheduler,
    a trio run) that is the first to complete.

    The trio equivalent is a nursery whose tasks each try to finish first and cancel the
    nursery's scope when they do.

    Raises ``TypeError`` at call for no senders, or for an argument that is not a sender (the
    message names its position).

    Completion signatures: the union of the children's signatures, plus ``set_stopped_t()``.

    Errors: an error wins like any other completion: the first completion decides. An
    ``Exception`` raised by a child's ``start`` is that child's error completion; a
    ``BaseException`` propagates out of ``start`` (the operation then never completes).

    Cancellation: a stop request on the receiver's token stops every child and the result is
    ``set_stopped()``, unless a child had already completed (then that child's completion is
    the result); a request before ``start`` completes ``set_stopped()`` without starting any
    child.

    Example:

    >>> import structexec as sx
    >>> sx.sync_wait(sx.when_any(sx.just(1), sx.just(2)))
    (1,)
    """

    __slots__ = ()

    # Typing (docs/typing.md): ``await`` gives the winner's value: the union of the children's.
    @overload
    def __call__(self, s1: Awaitable[T1], /) -> Sender[T1]: ...
    @overload
    def __call__(self, s1: Awaitable[T1], s2: Awaitable[T2], /) -> Sender[T1 | T2]: ...
    @overload
    def __call__(
        self, s1: Awaitable[T1], s2: Awaitable[T2], s3: Awaitable[T3], /
    ) -> Sender[T1 | T2 | T3]: ...
    @overload
    def __call__(
        self, s1: Awaitable[T1], s2: Awaitable[T2], s3: Awaitable[T3], s4: Awaitable[T4], /
    ) -> Sender[T1 | T2 | T3 | T4]: ...
    @overload
    def __call__(
        self,
        s1: Awaitable[T1],
        s2: Awaitable[T2],
        s3: Awaitable[T3],
        s4: Awaitable[T4],
        s5: Awaitable[T5],
        /,
    ) -> Sender[T1 | T2 | T3 | T4 | T5]: ...
    @overload
    def __call__(
        self,
        s1: Awaitable[T1],
        s2: Awaitable[T2],
        s3: Awaitable[T3],
        s4: Awaitable[T4],
        s5: Awaitable[T5],
        s6: Awaitable[T6],
        /,
    ) -> Sender[T1 | T2 | T3 | T4 | T5 | T6]: ...
    @overload
    def __call__(
        self,
        s1: Awaitable[object],
        s2: Awaitable[object],
        s3: Awaitable[object],
        s4: Awaitable[object],
        s5: Awaitable[object],
        s6: Awaitable[object],
        s7: Awaitable[object],
        /,
        *sndrs: Awaitable[object],
    ) -> Sender[Any]: ...
    def __call__(self, *sndrs: object) -> Sender[object]:
        if not sndrs:
            raise TypeError(
                "when_any() needs at least one sender: with none, nothing could ever win"
            )
        for i, s in enumerate(sndrs):
            if not is_sender(s):
                raise TypeError(
                    f"when_any(): argument #{i} must be a sender, got {type(s).__name__}"
                )
        sndr = _WhenAnySender(sndrs)
        if domains_active():
            return early(_common_domain(sndrs), sndr)
        return sndr


when_any = when_any_t()
_WhenAnySender.tag = when_any


# --------------------------------------------------------------------------- stop_when


class _StopWhenTriggerSender(Sender[object]):
    __slots__ = ("_child", "_trigger")

    def __init__(self, child: object, trigger: object) -> None:
        self._child = child
        self._trigger = trigger

    def connect(self, rcvr: Receiver) -> RaceOp:
        op = RaceOp(rcvr, 2, 0, "stop_when")
        op.connect_children(
            (self._child, self._trigger), [RaceReceiver(op, 0), RaceReceiver(op, 1)]
        )
        return op

    def get_env(self) -> Env:
        return fwd_env(get_env(self._child))

    def get_completion_signatures(self, env: object = None) -> completion_signatures | None:
        """``sndr``'s signatures, plus ``set_stopped_t()`` for a stop before ``start``."""
        sigs = get_completion_signatures(self._child, child_env_for(env))
        if sigs is None:
            return None
        if outer_may_stop(env):
            sigs = sigs | completion_signatures(set_stopped_t())
        return sigs

    @property
    def data(self) -> None:
        return None

    @property
    def children(self) -> tuple[object, ...]:
        return (self._child, self._trigger)

    def __repr__(self) -> str:
        return f"stop_when({self._child!r}, {self._trigger!r})"


class stop_when_t(BinaryAdaptor):
    """``stop_when(sndr, trigger)`` / ``sndr | stop_when(trigger)``: stop ``sndr`` when
    ``trigger`` completes.

    The public, sender-triggered form of the exposition-only ``stop-when`` of [exec.stop.when]
    (which fuses a stop *token*), modelled on libunifex's ``stop_when``. Runs both senders,
    ``sndr`` started first. When ``trigger`` completes first (with anything: a value, an error or
    stopped), ``sndr`` gets a stop request; when ``sndr`` completes first, ``trigger`` gets one.
    The result is always ``sndr``'s completion, delivered after both have completed; what
    ``trigger`` completes with is discarded. If ``sndr`` completes inside ``start``, ``trigger``
    is not started at all.

    The trio equivalent: run ``sndr``'s work inside a ``trio.CancelScope`` and cancel the scope
    from a sibling task when the trigger happens (and cancel the sibling when the work ends).

    Raises ``TypeError`` for a ``sndr`` or ``trigger`` that is not a sender.

    Completion signatures: ``sndr``'s, plus ``set_stopped_t()``.

    Errors: ``sndr``'s errors are the result; ``trigger``'s are discarded (an exception is
    attached as a note to an exception ``sndr`` fails with). An ``Exception`` raised by a
    child's ``start`` is that child's error completion.

    Cancellation: a stop request on the receiver's token reaches both; the result is still
    ``sndr``'s completion (normally ``set_stopped()``). A request before ``start`` completes
    ``set_stopped()`` without starting either.

    Example:

    >>> import structexec as sx
    >>> sx.sync_wait(sx.just(1) | sx.stop_when(sx.just()))
    (1,)
    """

    __slots__ = ()
    _name = "stop_when"
    _arg = "trigger"

    @overload
    def __call__(self, trigger: object, /) -> WidenClosure[NoReturn]: ...
    @overload
    def __call__(self, sndr: Awaitable[T], trigger: object, /) -> Sender[T]: ...
    def __call__(self, *args: object) -> object:
        return self._build(args)

    def _check_arg(self, trigger: object) -> None:
        if not is_sender(trigger):
            raise TypeError(f"stop_when(): trigger must be a sender, got {type(trigger).__name__}")

    def _make(self, sndr: object, trigger: object) -> Sender[object]:
        self._check_arg(trigger)
        return early_child(sndr, _StopWhenTriggerSender(sndr, trigger))


stop_when = stop_when_t()
_StopWhenTriggerSender.tag = stop_when
