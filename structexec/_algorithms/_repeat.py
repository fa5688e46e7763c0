"""``repeat_effect_until`` and ``repeat_n``: extensions modelled on stdexec's
``exec::repeat_effect_until`` and ``exec::repeat_n`` (no [exec.*] section specifies them).

Both run their child again and again, one iteration at a time, and complete ``set_value()``.
:class:`LoopOp` is the loop they share with ``retry`` (``_retry``):

* Each iteration connects the child (the first one at ``connect``), with the loop operation as
  its receiver, and starts it. The loop drops its reference to an iteration's operation when
  it completes; an iteration that completes inline, inside ``start``, is freed before the next
  one is connected.
* An iteration that completes inside ``start`` does not start the next one from inside its
  completion (which would nest one ``start`` per iteration): :meth:`LoopOp._run` runs the
  iterations in a ``while`` loop, so 100,000 inline iterations use constant stack and hold no
  memory per finished iteration (P3552R1 4.10). Which side continues the loop, the ``while``
  loop after ``start`` returned or the completion, is decided by a two-item *gate* list that
  both pop (``list.pop`` is atomic): the second to pop continues. A completion on another
  agent that pops second runs the loop there.
* Between iterations the receiver's stop token is checked: a stop request completes
  ``set_stopped()`` instead of connecting the next iteration. Each iteration sees the token
  too (its environment is ``FWD-ENV(get_env(rcvr))``, [exec.adapt.general]).
* The first iteration's ``start()`` runs inside the loop's own ``start``: if it raises (a
  contract violation), that propagates to whoever started the loop, as for every adaptor, and
  the loop ends without completing. Every later iteration is started on behalf of the previous
  one's completion (maybe on another thread, where nothing could receive the exception): an
  ``Exception`` from its ``start`` ends the loop with ``set_error`` if the iteration did not
  complete (``_state`` is still ``_RUNNING``); if it did, the exception propagates rather than
  produce a second completion. A ``KeyboardInterrupt`` or other non-``Exception`` propagates.
"""

from __future__ import annotations

from collections.abc import Callable
from types import CoroutineType as _CoroutineType
from typing import TYPE_CHECKING, overload

from .._core._adaptor_util import (
    BinaryAdaptor,
    UnarySender,
    close_op,
    early_child,
    is_async_fn,
)
from .._core._completion_signatures import completion_signatures, get_completion_signatures
from .._core._connect import connect_unchecked as connect
from .._core._env import fwd_env, get_env
from .._core._protocol import Closure, Sender, completed_twice, is_sender, twice_started
from .._core._queries import get_stop_token, query_or
from .._core._stop_token import never_stop_token
from .._core._tags import set_error_t, set_stopped_t, set_value_t

if TYPE_CHECKING:
    from .._core._adaptor_util import BoundClosure
    from .._core._contracts import OperationState, Receiver

__all__ = ["repeat_effect_until", "repeat_n"]

#: What the two sides of an iteration pop from its gate: the first to pop gets ``_FIRST``.
_FIRST, _SECOND = 1, 2
_NEVER = never_stop_token()
#: ``LoopOp._state``: connected, running an iteration, between iterations, completed.
_CONNECTED, _RUNNING, _BETWEEN, _DONE = 0, 1, 2, 3


class LoopOp:
    """The operation state of a loop of child operations; also each child's receiver.

    Subclasses set ``_next`` (the sender the loop connects next) in their completions and
    call :meth:`_again` to run it, or complete the outer receiver with :meth:`_finish_*`.
    Before each iteration but the first, a stop request ends the loop with ``set_stopped()``.
    """

    __slots__ = ("_env", "_gate", "_next", "_op", "_rcvr", "_state", "_token")

    def __init__(self, rcvr: Receiver, first: object) -> None:
        self._rcvr = rcvr
        self._env = env = fwd_env(get_env(rcvr))
        self._token = query_or(env, get_stop_token, _NEVER)
        self._state = _CONNECTED
        self._gate: list[int] | None = None
        self._next: object = None  # the sender of the next iteration
        self._op: OperationState | None = None if first is None else connect(first, self)

    # -- operation state

    def start(self) -> None:
        if self._state != _CONNECTED:
            raise twice_started(self)  # or closed
        if self._op is None:  # nothing to run (repeat_n(s, 0))
            self._state = _DONE
            self._rcvr.set_value()
            return
        self._run(True)

    def close(self) -> None:
        """Drop this operation without starting it: close the first iteration's operation
        (the senders guide "Writing your own sender")."""
        if self._state == _CONNECTED:
            self._state = _DONE
            op, self._op = self._op, None
            close_op(op)

    def _run(self, first: bool = False) -> None:
        """Start the iteration in ``_op``, then, while each iteration completes inline and
        asks for another, connect and start the next one here (no nesting). The operation is
        passed in ``_op``, never as an argument: a caller's frame would keep it alive (it does
        on Python 3.10) for as long as the loop runs. ``first``: the first iteration's start
        is the loop's own (its exception propagates, see the module docstring)."""
        while True:
            gate = self._gate = [_SECOND, _FIRST]
            self._state = _RUNNING
            op = self._op
            try:
                op.start()  # type: ignore[union-attr]  # (set by connect or _connect_next)
            except Exception as e:
                op = None
                if first or self._state != _RUNNING:
                    raise  # the loop's own start, or the iteration completed: propagate
                self._op = None
                self._finish_error(e)
                return
            first = False
            # The completion dropped _op: this was the last reference to an iteration that
            # completed inline, and it is freed before the next one is connected.
            op = None
            if gate.pop() == _FIRST:
                return  # still running elsewhere, or the loop has ended
            if not self._connect_next():
                return

    def _connect_next(self) -> bool:
        """Connect the next iteration into ``_op``; ``False`` when the loop ended instead."""
        if self._token.stop_requested():
            self._finish_stopped()
            return False
        nxt, self._next = self._next, None
        try:
            self._op = connect(nxt, self)
        except Exception as e:
            self._finish_error(e)
            return False
        return True

    def _again(self) -> None:
        """From a completion: run the iteration in ``_next``. Inside ``start`` the ``while``
        loop of :meth:`_run` does it; otherwise this completion runs the loop."""
        self._state = _BETWEEN
        gate = self._gate
        assert gate is not None
        if gate.pop() == _SECOND and self._connect_next():
            self._run()

    # -- completing the loop

    def _finish_value(self) -> None:
        self._state = _DONE
        self._rcvr.set_value()

    def _finish_error(self, err: object) -> None:
        self._state = _DONE
        self._rcvr.set_error(err)

    def _finish_stopped(self) -> None:
        self._state = _DONE
        self._rcvr.set_stopped()

    # -- the receiver of each iteration

    def get_env(self) -> object:
        return self._env

    def _completed(self, how: str) -> None:
        if self._state != _RUNNING:
            raise completed_twice(self, how)
        self._state = _BETWEEN
        self._op = None

    def set_value(self, *vals: object) -> None:  # pragma: no cover - every loop overrides it
        """What a value of one iteration means is the loop's own decision (repeat_effect_until,
        repeat_n, retry each define it)."""
        raise NotImplementedError(
            f"{type(self).__name__} must define set_value(): a LoopOp subclass decides whether "
            "an iteration's value ends the loop"
        )

    def set_error(self, err: object) -> None:
        self._completed("set_error")
        self._finish_error(err)

    def set_stopped(self) -> None:
        self._completed("set_stopped")
        self._finish_stopped()


# --------------------------------------------------------------------------- repeat_effect_until


def _async_predicate(pred: object, coro: object = None) -> TypeError:
    """``repeat_effect_until`` with an ``async def`` predicate: its coroutine object would
    count as true (one run, a coroutine never awaited). Rejected; a coroutine returned at run
    time (a callable object with an ``async def __call__``) is closed and this is the error."""
    if isinstance(coro, _CoroutineType):
        coro.close()
    name = getattr(pred, "__qualname__", None) or type(pred).__name__
    return TypeError(
        f"repeat_effect_until(): predicate={name} is an async function; the predicate is "
        "called synchronously after each run and its result tested for truth, so a coroutine "
        "would never run (and would always count as true). Pass a plain function, or write "
        "the loop in a coroutine or @sx.task (`await sndr` then `if await check(): break` in a "
        "`while True:` loop)"
    )


class _UntilOp(LoopOp):
    __slots__ = ("_child", "_pred")

    def __init__(self, rcvr: Receiver, child: object, pred: Callable[[], object]) -> None:
        self._child = child
        self._pred = pred
        LoopOp.__init__(self, rcvr, child)

    def set_value(self, *vals: object) -> None:
        self._completed("set_value")
        try:
            done = self._pred()
        except Exception as e:
            self._finish_error(e)
            return
        if type(done) is _CoroutineType:  # a callable object with an async __call__
            self._finish_error(_async_predicate(self._pred, done))
            return
        if done:
            self._finish_value()
            return
        self._next = self._child
        self._again()


def _loop_signatures(
    child: object, env: object, *, predicate: bool
) -> completion_signatures | None:
    """``set_value_t()``, the child's errors, ``set_error_t(Exception)`` with a predicate,
    ``set_stopped_t()``; ``None`` when the child's signatures are unknown."""
    cs = get_completion_signatures(child, None if env is None else fwd_env(env))
    if cs is None:
        return None
    errs = [s for s in cs if type(s) is set_error_t]
    if predicate:
        errs.append(set_error_t(Exception))
    return completion_signatures(set_value_t(), *errs, set_stopped_t())


class _UntilSender(UnarySender):
    __slots__ = ("_pred",)

    def __init__(self, child: object, pred: Callable[[], object]) -> None:
        self._child = child
        self._pred = pred

    def connect(self, rcvr: Receiver) -> _UntilOp:
        return _UntilOp(rcvr, self._child, self._pred)

    def get_completion_signatures(self, env: object = None) -> completion_signatures | None:
        """``set_value_t()``, the child's errors, ``set_error_t(Exception)``, stopped."""
        return _loop_signatures(self._child, env, predicate=True)

    @property
    def data(self) -> object:
        return self._pred

    def __repr__(self) -> str:
        name = getattr(self._pred, "__name__", self._pred)
        return f"repeat_effect_until({self._child!r}, {name!r})"


class repeat_effect_until_t(BinaryAdaptor):
    """``repeat_effect_until(sndr, predicate)``: run ``sndr`` until ``predicate()`` is true.

    An extension modelled on stdexec's ``exec::repeat_effect_until`` (no [exec.*] section
    specifies it; it is an adaptor in the sense of [exec.adapt]). ``sndr`` is connected and
    started again and again, one run at a time. After each value completion (its datums are
    discarded) ``predicate()`` is called with no arguments, on the agent where the run
    completed; when it returns something true the result is ``set_value()``, else ``sndr`` runs
    again. ``sndr | sx.repeat_effect_until(pred)`` pipes. A loop of runs that complete inline
    needs constant stack and no memory per finished run.

    Completion signatures: ``set_value_t()``, the child's error signatures,
    ``set_error_t(Exception)`` (the predicate raised) and ``set_stopped_t()``; ``None`` when
    the child's are unknown.

    Errors: an error completion of a run ends the loop with it; an ``Exception`` raised by
    ``predicate`` completes ``set_error`` with it; a ``BaseException`` that is not an
    ``Exception`` propagates (as from a ``then`` function), and so does an exception from the
    first run's ``start()``; an ``Exception`` from a later run's ``start()`` (made on behalf of
    the previous run's completion) completes ``set_error`` with it. ``TypeError`` at build for a
    non-sender, a non-callable predicate or an ``async def`` one (its coroutine would count as
    true and never run: the predicate is synchronous); a predicate that returns a coroutine
    object anyway (an object with an ``async def __call__``) completes ``set_error(TypeError)``,
    the coroutine closed.

    Cancellation: each run sees the receiver's stop token; a stopped run ends the loop with
    ``set_stopped()``, and a stop request is also checked between runs (``set_stopped()``
    instead of the next run).

    Example:

    >>> import structexec as sx
    >>> runs = []
    >>> sx.sync_wait(sx.just() | sx.then(lambda: runs.append(1))
    ...              | sx.repeat_effect_until(lambda: len(runs) == 3))
    ()
    >>> len(runs)
    3
    """

    __slots__ = ()
    _name = "repeat_effect_until"
    _arg = "predicate"

    def _check_arg(self, pred: object) -> None:
        if not callable(pred) or is_sender(pred):
            raise TypeError(
                "repeat_effect_until(): predicate must be a callable taking no arguments, "
                f"got {type(pred).__name__}"
            )
        if is_async_fn(pred):
            raise _async_predicate(pred)

    def _make(self, sndr: object, pred: Callable[[], object]) -> object:  # type: ignore[override]
        self._check_arg(pred)
        return early_child(sndr, _UntilSender(sndr, pred))

    @overload
    def __call__(self, predicate: Callable[[], object], /) -> Closure[None]: ...
    @overload
    def __call__(self, sndr: object, predicate: Callable[[], object], /) -> Sender[None]: ...
    def __call__(self, *args: object) -> object:
        return self._build(args)


# --------------------------------------------------------------------------- repeat_n


class _RepeatNOp(LoopOp):
    __slots__ = ("_child", "_left")

    def __init__(self, rcvr: Receiver, child: object, n: int) -> None:
        self._child = child
        self._left = n
        LoopOp.__init__(self, rcvr, child if n else None)

    def set_value(self, *vals: object) -> None:
        self._completed("set_value")
        left = self._left = self._left - 1
        if left <= 0:
            self._finish_value()
            return
        self._next = self._child
        self._again()


class _RepeatNSender(UnarySender):
    __slots__ = ("_n",)

    def __init__(self, child: object, n: int) -> None:
        self._child = child
        self._n = n

    def connect(self, rcvr: Receiver) -> _RepeatNOp:
        return _RepeatNOp(rcvr, self._child, self._n)

    def get_completion_signatures(self, env: object = None) -> completion_signatures | None:
        """``set_value_t()``, and for ``n > 0`` the child's errors and ``set_stopped_t()``."""
        if self._n == 0:
            return completion_signatures(set_value_t())
        return _loop_signatures(self._child, env, predicate=False)

    @property
    def data(self) -> object:
        return self._n

    def __repr__(self) -> str:
        return f"repeat_n({self._child!r}, {self._n!r})"


def check_count(name: str, arg: str, n: object, minimum: int) -> int:
    """``n`` as an ``int`` (not a ``bool``) that is at least ``minimum``, else raise."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"{name}(): {arg} must be an int, got {type(n).__name__}")
    if n < minimum:
        raise ValueError(f"{name}(): {arg} must be >= {minimum}, got {n}")
    return n


class repeat_n_t(BinaryAdaptor):
    """``repeat_n(sndr, n)``: run ``sndr`` ``n`` times, one run after the other.

    An extension modelled on stdexec's ``exec::repeat_n`` (no [exec.*] section specifies it;
    it is an adaptor in the sense of [exec.adapt]). The datums of each run are discarded; after
    the ``n``-th value completion the result is ``set_value()``. ``n == 0`` completes
    ``set_value()`` at ``start`` without connecting ``sndr``. ``sndr | sx.repeat_n(5)`` pipes.
    A loop of runs that complete inline needs constant stack and no memory per finished run.

    Completion signatures: ``set_value_t()``; for ``n > 0`` also the child's error signatures
    and ``set_stopped_t()``; ``None`` when the child's are unknown.

    Errors: an error completion of a run ends the loop with it; an exception from the first
    run's ``start()`` propagates, an ``Exception`` from a later run's ``start()`` completes
    ``set_error`` with it. ``TypeError`` at build for a non-sender or a non-``int`` ``n``,
    ``ValueError`` for ``n < 0``.

    Cancellation: each run sees the receiver's stop token; a stopped run ends the loop with
    ``set_stopped()``, and a stop request is also checked between runs.

    Example:

    >>> import structexec as sx
    >>> runs = []
    >>> sx.sync_wait(sx.just() | sx.then(lambda: runs.append(1)) | sx.repeat_n(4))
    ()
    >>> len(runs)
    4
    """

    __slots__ = ()
    _name = "repeat_n"
    _arg = "n"

    def _check_arg(self, n: object) -> None:
        check_count("repeat_n", "n", n, 0)

    def _make(self, sndr: object, n: object) -> Sender[object]:
        return early_child(sndr, _RepeatNSender(sndr, check_count("repeat_n", "n", n, 0)))

    def _build(self, args: tuple[object, ...]) -> Sender[object] | BoundClosure:
        if len(args) == 1 and is_sender(args[0]):
            raise TypeError("repeat_n() takes (sender, n) or (n): n is missing")
        return BinaryAdaptor._build(self, args)

    @overload
    def __call__(self, n: int, /) -> Closure[None]: ...
    @overload
    def __call__(self, sndr: object, n: int, /) -> Sender[None]: ...
    def __call__(self, *args: object) -> object:
        return self._build(args)


repeat_effect_until = repeat_effect_until_t()
repeat_n = repeat_n_t()
_UntilSender.tag = repeat_effect_until
_RepeatNSender.tag = repeat_n
