"""``as_awaitable`` and ``with_awaitable_senders`` for people who write coroutine types.

[exec.as.awaitable], [exec.with.awaitable.senders], [exec.awaitable],
P3552R1 3 objective 12. ``sx.task`` is built from the same pieces.

C++ coroutines call ``await_ready``/``await_suspend``/``await_resume`` on an awaiter and give
``await_suspend`` a handle that resumes the coroutine. A Python coroutine instead yields to
whoever calls ``coro.send``; this module keeps the C++ vocabulary and states the protocol
between an awaitable and that *driver*:

1. ``await aw`` inside the coroutine runs ``aw.__await__()``, which yields the awaiter
   object itself (``sender_awaitable``) to the driver; the coroutine is now suspended.
2. The driver, seeing an object with ``await_suspend``, calls
   ``awaiter.await_suspend(resume)``, where ``resume()`` is the driver's way to resume the
   coroutine (C++: the ``coroutine_handle``). ``await_suspend`` starts the operation.
3. When the operation completes with a value or an error, ``resume()`` is called once, on the
   completing thread, possibly before ``await_suspend`` returns (inline completion: a driver should
   then loop instead of recursing). The driver resumes the coroutine with ``coro.send(None)``, and
   ``__await__`` returns ``await_resume()``: the value (``None`` for no datum, the datum, or a tuple
   of several, the trio guide "Awaiting a sender") or raises the error.
4. When it completes stopped, ``resume`` is **not** called: ``promise.unhandled_stopped()``
   is, and if it returns a callable, that is called (C++ resumes the handle it returns). The
   coroutine is never resumed with a value ([exec.as.awaitable], [exec.with.awaitable.senders]).

``with_awaitable_senders`` supplies ``unhandled_stopped``, ``await_transform`` and the
parent link; its :meth:`~with_awaitable_senders.step` runs one step of a coroutine so that
``await sndr`` inside it goes through ``await_transform`` (Python has no ``await_transform``
hook; structexec routes ``Sender.__await__`` to the promise instead).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

from .._core import _hooks
from .._core._completion_signatures import get_completion_signatures
from .._core._connect import connect_unchecked as connect
from .._core._env import EMPTY_ENV, fwd_env, get_env
from .._core._errors import ErrorValue, terminate
from .._core._protocol import completed_twice
from .._core._queries import _MISSING, get_await_completion_adaptor, query_or
from .._core._tags import set_value_t

if TYPE_CHECKING:
    from typing import Protocol

    from .._core._contracts import Env, OpState
    from .._core._coroutine_driver import Steppable

    class _Promise(Protocol):
        """What a sender awaitable asks of its promise: ``unhandled_stopped()``; ``get_env()``
        is read through ``_env.get_env`` ([exec.as.awaitable])."""

        def unhandled_stopped(self) -> object: ...

__all__ = ["as_awaitable", "sender_awaitable", "with_awaitable_senders"]

_PENDING, _VALUE, _ERROR, _STOPPED = 0, 1, 2, 3


class _AwaitableReceiver:
    """``awaitable-receiver``: stores the result and resumes the continuation
    ([exec.as.awaitable])."""

    __slots__ = ("_aw",)

    def __init__(self, aw: sender_awaitable) -> None:
        self._aw = aw

    def get_env(self) -> Env:
        # Only forwarding queries reach the promise's environment ([exec.as.awaitable]).
        return fwd_env(get_env(self._aw._promise))

    def set_value(self, *vals: object) -> None:
        aw = self._aw
        if aw._kind:
            raise completed_twice(self, "set_value")
        aw._kind = _VALUE
        n = len(vals)
        aw._result = None if n == 0 else vals[0] if n == 1 else vals
        aw._resume_continuation()

    def set_error(self, err: object) -> None:
        aw = self._aw
        if aw._kind:
            raise completed_twice(self, "set_error")
        aw._kind = _ERROR
        aw._result = err
        aw._resume_continuation()

    def set_stopped(self) -> None:
        aw = self._aw
        if aw._kind:
            raise completed_twice(self, "set_stopped")
        aw._kind = _STOPPED
        h = aw._promise.unhandled_stopped()
        if callable(h):
            h()


class sender_awaitable:
    """``sender-awaitable``: a sender turned into an awaiter for one coroutine
    ([exec.as.awaitable]).

    Built by :func:`as_awaitable`. The sender is connected when the awaitable is built;
    ``await_suspend(resume)`` starts it (see the module docstring for the protocol);
    ``await_resume()`` returns ``None`` for no datum, the datum, or a tuple of several, and
    raises an error datum (an exception as it is, anything else as :class:`ErrorValue`).
    ``await_ready()`` is ``False``.
    """

    __slots__ = ("_continuation", "_kind", "_op", "_promise", "_result")

    def __init__(self, sndr: object, promise: _Promise) -> None:
        self._promise = promise
        self._kind = _PENDING
        self._result: object = None
        self._continuation: Callable[[], object] | None = None
        self._op: OpState = connect(sndr, _AwaitableReceiver(self))

    @staticmethod
    def await_ready() -> bool:
        return False

    def await_suspend(self, resume: Callable[[], object]) -> None:
        """Start the operation; ``resume()`` is called when it completes (not for stopped)."""
        self._continuation = resume
        self._op.start()

    def _resume_continuation(self) -> None:
        c = self._continuation
        if c is None:
            raise RuntimeError("a sender_awaitable completed before await_suspend() started it")
        c()

    def await_resume(self) -> Any:  # the sender's value, of whatever type it sends
        kind = self._kind
        r = self._result
        self._result = None
        if kind == _VALUE:
            return r
        if kind == _ERROR:
            if isinstance(r, BaseException):
                raise r
            raise ErrorValue(r)
        raise RuntimeError(f"await_resume() on a sender_awaitable that is not done ({kind})")

    def __await__(self) -> Generator[object, object, Any]:
        yield self
        return self.await_resume()


def _is_awaitable_sender(sndr: object, promise: object) -> bool:
    """``awaitable-sender<S, P>``: a sender, at most one value signature, ``unhandled_stopped``."""
    if not callable(getattr(sndr, "connect", None)):
        return False
    if not callable(getattr(promise, "unhandled_stopped", None)):
        raise TypeError(
            f"as_awaitable(): the promise {type(promise).__name__} has no unhandled_stopped(), so "
            "a sender cannot be awaited in its coroutine ([exec.as.awaitable]); derive the promise "
            "from sx.with_awaitable_senders"
        )
    try:
        sigs = get_completion_signatures(sndr, get_env(promise))
    except Exception:
        sigs = None
    if sigs is not None and sigs.count_of(set_value_t) > 1:
        raise TypeError(
            f"{sndr!r} has {sigs.count_of(set_value_t)} value completion signatures and cannot be "
            "awaited: await sx.into_variant(sndr) instead ([exec.as.awaitable], P3552R1 4.4)"
        )
    return True


def as_awaitable(expr: object, promise: _Promise) -> Any:
    """``as_awaitable(expr, promise)``: make ``expr`` awaitable in ``promise``'s coroutine.

    [exec.as.awaitable]. The first case that applies:

    1. ``expr.as_awaitable(promise)`` if ``expr`` has that method;
    2. ``expr`` itself if it is an awaitable that is not a sender (a coroutine, a trio
       primitive, anything with ``__await__`` but no ``connect``; structexec senders are
       awaitable in trio code, but here they take the sender path);
    3. a :class:`sender_awaitable` of ``get_await_completion_adaptor(get_env(expr))(expr)``
       when the sender's attributes provide that adaptor;
    4. a :class:`sender_awaitable` of ``expr`` when it is a sender;
    5. ``expr`` unchanged.

    A sender with more than one value signature raises ``TypeError`` (await ``into_variant(s)``
    instead, [exec.as.awaitable]), as does a promise without ``unhandled_stopped`` (C++ rejects both
    at compile time).
    """
    m = getattr(expr, "as_awaitable", None)
    if m is not None and callable(m) and not isinstance(expr, type):
        return m(promise)
    is_snd = callable(getattr(expr, "connect", None))
    if not is_snd:
        return expr
    adaptor = query_or(get_env(expr), get_await_completion_adaptor, _MISSING)
    if adaptor is not _MISSING:
        adapted = adaptor(expr)
        if _is_awaitable_sender(adapted, promise):
            return sender_awaitable(adapted, promise)
    if _is_awaitable_sender(expr, promise):
        return sender_awaitable(expr, promise)
    return expr  # pragma: no cover - _is_awaitable_sender is true for every sender


def _default_unhandled_stopped() -> object:
    terminate(
        "a sender awaited in a coroutine completed set_stopped() and the coroutine has no parent "
        "to report it to ([exec.with.awaitable.senders] unhandled_stopped)"
    )
    return None


class with_awaitable_senders:
    """Promise mixin: senders become awaitable in its coroutine ([exec.with.awaitable.senders]).

    [exec.with.awaitable.senders], [exec.awaitable]. Derive a coroutine type's promise (the object
    that drives the coroutine and answers ``get_env()``) from it:

    * ``set_continuation(parent)`` records the parent (any object; C++: the parent
      coroutine's handle) and, if the parent has ``unhandled_stopped()``, uses it as the
      stopped handler.
    * ``continuation()`` returns the recorded parent.
    * ``unhandled_stopped()`` delegates to the parent's handler and returns what it returns
      (a callable to run next, or ``None``). Without a parent handler it calls the terminate handler
      (the senders guide "What happens when things fail"): stopped is an uncatchable "exception"
      that nobody caught.
    * ``await_transform(value)`` is ``as_awaitable(value, self)``.
    * ``step(coro, value=None, exc=None)`` (Python-specific): runs ``coro.send(value)`` (or
      ``coro.throw(exc)``) with this promise installed, so that ``await sndr`` on a
      structexec sender inside the coroutine goes through :meth:`await_transform`, and
      returns what the coroutine yielded (``StopIteration`` when it returns). A yielded
      object with ``await_suspend`` is a suspended await: call
      ``obj.await_suspend(resume)`` (see the module docstring).

    Awaits in the coroutine see ``get_env()`` of the promise (override it; the default is
    an empty environment).
    """

    _sx_continuation: object = None
    _sx_stopped_handler: Callable[[], object] | None = None

    def set_continuation(self, parent: object) -> None:
        """Record ``parent`` and its ``unhandled_stopped`` (if any) as the stopped handler."""
        self._sx_continuation = parent
        h = getattr(parent, "unhandled_stopped", None)
        self._sx_stopped_handler = h if callable(h) else None

    def continuation(self) -> object:
        """The parent recorded by :meth:`set_continuation` (``None`` if none)."""
        return self._sx_continuation

    def unhandled_stopped(self) -> object:
        """Report "stopped" to the parent; with no parent handler, call the terminate handler."""
        h = self._sx_stopped_handler
        if h is None:
            return _default_unhandled_stopped()
        return h()

    def await_transform(self, value: object) -> Any:
        """``as_awaitable(value, self)`` ([exec.with.awaitable.senders], [exec.awaitable])."""
        return as_awaitable(value, self)

    def get_env(self) -> Env:
        """The environment awaited senders see (through forwarding queries only,
        [exec.as.awaitable])."""
        return EMPTY_ENV

    # The driver hook: Sender.__await__ asks the running driver for the awaiting generator.
    def await_sender(self, sndr: object) -> Generator[object, object, Any]:
        aw = self.await_transform(sndr)
        if aw is sndr:  # pragma: no cover - a sender always becomes a sender_awaitable
            raise TypeError(f"{sndr!r} is not awaitable in this coroutine")
        r: Generator[object, object, Any] = aw.__await__()
        return r

    def step(
        self, coro: Steppable, value: object = None, exc: BaseException | None = None
    ) -> object:
        """Run one step of ``coro`` with this promise as the awaiting context (see class doc)."""
        ds = _hooks.driver_state
        prev = ds.driver
        ds.driver = self
        try:
            if exc is not None:
                return coro.throw(exc)
            return coro.send(value)
        finally:
            ds.driver = prev
