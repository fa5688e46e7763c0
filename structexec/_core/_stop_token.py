"""Stop tokens: ``inplace_stop_source``, ``inplace_stop_token``, ``never_stop_token``.

C++26 [thread.stoptoken] as used by [exec] (the senders guide "Stop tokens: cancellation for
senders" and 2.13). These objects sit on hot paths (every awaited sender may register a stop
callback), so the common operations are kept to a handful of bytecodes:

* each ``inplace_stop_source`` owns one ``threading.Lock`` and a ``dict`` that maps each
  registered callback object to its function (O(1) registration and removal);
* registration inserts into the dict *without* the lock and then re-reads the stop flag:
  ``request_stop`` sets the flag under the lock and then takes callbacks out of the dict
  with ``popitem``, so either it sees the new entry or the registering thread sees the flag
  and takes its entry back with ``pop`` to run it at once. ``dict`` operations are atomic in
  CPython, and each is a critical section on free-threaded builds, which orders them;
* deregistration is a lock-free ``dict.pop``; only if ``request_stop`` has already taken
  the entry does ``close()`` take the lock, and only if the callback is running on another
  thread at that moment does it wait, on one ``threading.Condition`` per source that is
  created on demand;
* the lock is taken with ``acquire()``/``release()`` rather than ``with`` (half the cost
  on CPython 3.11).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any, ClassVar, NoReturn, Protocol, TypeVar, runtime_checkable

from structexec._core._errors import terminate

__all__ = [
    "inplace_stop_source",
    "inplace_stop_token",
    "inplace_stop_callback",
    "never_stop_token",
    "stop_callback_for",
    "is_unstoppable",
    "combined_stop_token",
    "StopCallback",
]

_get_ident = threading.get_ident
_CB = TypeVar("_CB", bound="_ClosesOnExit")
_new_token = object.__new__


class StopToken(Protocol):
    """What the library asks of a stop token ([stoptoken.concepts]): ``stop_requested()`` and
    ``stop_possible()``; a stoppable token's class also names ``callback_type``
    (:func:`stop_callback_for`). ``inplace_stop_token``, ``never_stop_token`` and
    ``combined_stop_token`` are the library's."""

    def stop_requested(self) -> bool: ...
    def stop_possible(self) -> bool: ...


class StopSource(Protocol):
    """What the library asks of a stop source (a task's ``stop_source_type``,
    [stopsource.inplace]): ``get_token()`` and ``request_stop()``."""

    def get_token(self) -> StopToken: ...
    def request_stop(self) -> object: ...


@runtime_checkable
class StopCallback(Protocol):
    """What ``stop_callback_for(token, fn)`` returns: a registered stop callback.

    The Python spelling of C++ ``stop_callback_for_t<Token, Fn>`` objects and of the
    ``stoppable-callback-for`` concept ([stoptoken.concepts], [stopcallback.inplace]): constructing
    one registers ``fn`` with the token; ``close()`` (or leaving the ``with`` block) is the C++
    destructor and deregisters it. ``close()`` is idempotent.
    """

    def close(self) -> None:
        """Deregister the callback ([stoptoken.concepts])."""

    def __enter__(self) -> StopCallback:
        """Return the callback itself."""

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Call :meth:`close`."""


def _no_copy(self: object, *args: object) -> NoReturn:
    raise TypeError(
        f"{type(self).__name__} is not copyable or movable ([stopsource.inplace], "
        "[stopcallback.inplace]); share the object itself"
    )


def _not_callable(what: str, fn: object) -> TypeError:
    return TypeError(
        f"{what}: fn must be a callable taking no arguments (it is called when stop is "
        f"requested), got {type(fn).__name__} {fn!r:.60} ([stoptoken.concepts]: "
        "stoppable-callback-for)"
    )


def _run_immediately(fn: Callable[[], object]) -> None:
    """Invoke a callback whose token is already stopped ([stoptoken.concepts])."""
    try:
        fn()
    except Exception as exc:
        terminate("stop callback raised", exc)
    # A KeyboardInterrupt or SystemExit (Ctrl-C landing in the callback) propagates: it is
    # not the callback's contract violation, and Ctrl-C must never abort the process.


class _ClosesOnExit:
    """The context-manager face of a stop callback: leaving ``with`` deregisters it
    ([stoptoken.concepts])."""

    __slots__ = ()

    def close(self) -> None:  # overridden by every subclass
        pass

    def __enter__(self: _CB) -> _CB:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class inplace_stop_callback(_ClosesOnExit):
    """``std::inplace_stop_callback<Fn>``: register ``fn`` on an ``inplace_stop_token``.

    ``inplace_stop_callback(token, fn)`` ([stoptoken.concepts], [stopcallback.inplace]):

    * if ``token.stop_requested()`` is already true, ``fn()`` runs at once, inside the
      constructor, on the constructing thread, and nothing is registered;
    * else if ``token.stop_possible()`` is false (a default-constructed token) nothing is
      registered and ``fn`` is never invoked;
    * else ``fn`` is registered and the source's ``request_stop()`` will call it exactly once
      on the requesting thread ([stoptoken.concepts]).

    ``close()`` is the C++ destructor ([stoptoken.concepts]): afterwards ``fn`` is never invoked; if
    ``fn`` is running on another thread at that moment ``close()`` blocks until it has returned;
    called from inside ``fn`` itself it returns at once. ``close()`` is idempotent, and the object
    is a context manager whose exit closes it. If ``fn`` raises, the terminate handler is called
    ([stoptoken.concepts], the senders guide "What happens when things fail"). Not copyable
    ([stopcallback.inplace]).
    """

    __slots__ = ("_source",)

    _source: inplace_stop_source | None

    def __init__(self, token: inplace_stop_token, fn: Callable[[], object]) -> None:
        if not callable(fn):  # rejected here, not when a later request_stop calls it
            raise _not_callable("inplace_stop_callback(token, fn)", fn)
        try:
            src = token._source
        except AttributeError:
            raise TypeError(
                f"inplace_stop_callback needs an inplace_stop_token, got {type(token).__name__};"
                " use stop_callback_for(token, fn) for other token types"
            ) from None
        if src is None or src._requested:
            # No source: stop is not possible, register nothing ([stoptoken.concepts],
            # [stoptoken.inplace], [stopsource.inplace]). Already stopped: run at once, in the
            # constructor, on this thread ([stoptoken.concepts]).
            self._source = None
            if src is not None:
                _run_immediately(fn)
            return
        callbacks = src._callbacks
        callbacks[self] = fn
        self._source = src
        # Re-read the flag (mypy cannot know another thread may have set it meanwhile).
        if src._requested and callbacks.pop(self, None) is not None:  # type: ignore[unreachable]
            # request_stop set the flag after our first check and did not take our entry:
            # it has finished with the dict or will not see us, so run now ([stoptoken.concepts]).
            self._source = None  # type: ignore[unreachable]
            _run_immediately(fn)

    def close(self) -> None:
        """Deregister; wait if the callback is running on another thread ([stoptoken.concepts])."""
        src = self._source
        if src is None:
            return
        self._source = None
        # Fast path: still registered. dict.pop is atomic and request_stop takes entries
        # out with popitem, so exactly one of the two gets this entry.
        if src._callbacks.pop(self, None) is not None:
            return
        lock = src._lock
        lock.acquire()
        try:
            # request_stop took the entry; it sets _executing in the same critical section. If it is
            # running on this very thread we are inside it: do not wait ([stoptoken.concepts]).
            if src._executing is self and src._thread != _get_ident():
                cond = src._cond
                if cond is None:
                    cond = src._cond = threading.Condition(lock)
                while src._executing is self:
                    cond.wait()
        finally:
            lock.release()

    __copy__ = _no_copy
    __deepcopy__ = _no_copy
    __reduce__ = _no_copy

    def __repr__(self) -> str:
        state = "registered" if self._source is not None else "inactive"
        return f"<inplace_stop_callback {state}>"


class inplace_stop_token:
    """``std::inplace_stop_token``: the token of an ``inplace_stop_source`` ([stoptoken.inplace],
    [stopsource.inplace]).

    Obtained with ``source.get_token()``; it refers to its source, which must outlive it.
    ``stop_requested()`` and ``stop_possible()`` read the source ([stoptoken.concepts]). Tokens
    compare equal, and hash alike, when they refer to the same source. ``inplace_stop_token()`` with
    no source answers ``False`` to both queries and never invokes callbacks ([stoptoken.inplace],
    [stopsource.inplace]). ``callback_type`` is ``inplace_stop_callback`` (C++ ``callback_type``
    member alias, ``stop_callback_for_t``, [stopcallback.inplace]).
    """

    __slots__ = ("_source",)

    callback_type: ClassVar[type[inplace_stop_callback]] = inplace_stop_callback
    unstoppable: ClassVar[bool] = False

    def __init__(self, source: inplace_stop_source | None = None) -> None:
        self._source = source

    def stop_requested(self) -> bool:
        """Whether stop has been requested on the source ([stoptoken.concepts]); ``False`` without
        one."""
        src = self._source
        return src is not None and src._requested

    def stop_possible(self) -> bool:
        """Whether this token has a source ([stoptoken.inplace], [stopsource.inplace]); an
        ``inplace_stop_source`` always can stop."""
        return self._source is not None

    def __eq__(self, other: object) -> bool:
        if isinstance(other, inplace_stop_token):
            return self._source is other._source
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._source)

    def __copy__(self) -> inplace_stop_token:
        return self

    def __deepcopy__(self, memo: object) -> inplace_stop_token:
        return self

    def __repr__(self) -> str:
        if self._source is None:
            return "inplace_stop_token()"
        return f"<inplace_stop_token of source at {id(self._source):#x}>"


class inplace_stop_source:
    """``std::inplace_stop_source``: a stop source that owns its stop state ([stoptoken.inplace],
    [stopsource.inplace]).

    ``get_token()`` returns an ``inplace_stop_token`` referring to this source;
    ``request_stop()`` atomically makes the stop request and returns ``True`` only for the
    call that made it ([stoptoken.concepts]), after invoking every registered callback exactly once,
    synchronously, on the requesting thread ([stoptoken.concepts]); ``stop_requested()`` tells
    whether the request was made; ``stop_possible()`` is always ``True``. A callback that raises
    calls the terminate handler and the remaining callbacks still run ([stoptoken.concepts],
    the senders guide "What happens when things fail"). Not copyable or movable
    ([stoptoken.inplace], [stopsource.inplace]): ``copy``/``deepcopy``/``pickle`` raise
    ``TypeError``.
    """

    __slots__ = ("_callbacks", "_cond", "_executing", "_lock", "_requested", "_thread")

    def __init__(self) -> None:
        self._requested = False
        self._lock = threading.Lock()
        self._callbacks: dict[inplace_stop_callback, Callable[[], object]] = {}
        self._executing: inplace_stop_callback | None = None
        self._cond: threading.Condition | None = None
        # _thread (the requesting thread) is only read while _executing is set.
        self._thread: int

    def get_token(self) -> inplace_stop_token:
        """Return an ``inplace_stop_token`` that refers to this source ([stoptoken.inplace],
        [stopsource.inplace]).

        Tokens of the same source compare equal. A new token object is made per call
        (it is one small object) rather than cached, so that a source and its token do not
        form a reference cycle: a dropped source is freed at once, not by the cycle collector.
        """
        tok = _new_token(inplace_stop_token)
        tok._source = self
        return tok

    def stop_requested(self) -> bool:
        """Whether ``request_stop()`` has been called ([stoptoken.concepts])."""
        return self._requested

    def stop_possible(self) -> bool:
        """Always ``True`` for an ``inplace_stop_source`` ([stoptoken.inplace],
        [stopsource.inplace])."""
        return True

    def request_stop(self) -> bool:
        """Make the stop request; ``True`` only for the call that made it ([stoptoken.concepts]).

        Every registered callback runs here, on this thread, exactly once, before this call
        returns. A callback that raises an ``Exception`` calls the terminate handler
        ([stopsource.inplace]); if the handler itself raises, the remaining callbacks still
        run and the first such exception is re-raised at the end. A ``KeyboardInterrupt`` or
        ``SystemExit`` from a callback (a Ctrl-C that lands in it) is not a contract
        violation: the remaining callbacks run, then it propagates from here.
        """
        if self._requested:
            return False
        lock = self._lock
        lock.acquire()
        if self._requested:  # another thread made the request since the unlocked read
            lock.release()  # type: ignore[unreachable]
            return False
        self._requested = True
        callbacks = self._callbacks
        # A dict critical section after setting the flag: orders it against a registration
        # on a free-threaded build (see the module docstring). Never a key; a cheap no-op.
        callbacks.pop(_NO_KEY, None)
        if not callbacks:
            lock.release()
            return True
        self._thread = _get_ident()
        failure: BaseException | None = None
        while callbacks:  # the lock is held at the top of each iteration
            try:
                cb, fn = callbacks.popitem()
            except KeyError:  # a racing close() removed the last entry
                break
            self._executing = cb
            lock.release()
            try:
                fn()
            except Exception as exc:
                try:
                    terminate("stop callback raised", exc)
                except BaseException as handler_exc:
                    if failure is None:
                        failure = handler_exc
            except BaseException as exc:
                # KeyboardInterrupt, SystemExit (e.g. Ctrl-C landing in the callback): the
                # remaining callbacks still run, then it propagates from request_stop().
                if failure is None:
                    failure = exc
            lock.acquire()
            cond = self._cond
            if cond is not None:  # a close() on another thread may wait for cb
                cond.notify_all()
        self._executing = None
        lock.release()
        if failure is not None:
            raise failure
        return True

    __copy__ = _no_copy
    __deepcopy__ = _no_copy
    __reduce__ = _no_copy

    def __repr__(self) -> str:
        state = "stopped" if self._requested else f"{len(self._callbacks)} callbacks"
        return f"<inplace_stop_source {state}>"


_NO_FN = object()


class _noop_stop_callback:
    """Callback of a token that can never stop: registers nothing, ``close()`` does nothing.

    ``never_stop_token::callback_type`` ([stoptoken.never]) and the result of
    ``stop_callback_for`` for any token whose ``stop_possible()`` is false ([stoptoken.concepts]).
    """

    __slots__ = ()

    def __init__(self, token: object = None, fn: object = _NO_FN) -> None:
        if fn is not _NO_FN and not callable(fn):
            raise _not_callable("never_stop_token.callback_type(token, fn)", fn)

    def close(self) -> None:
        """Do nothing."""

    def __enter__(self) -> _noop_stop_callback:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        pass


_NOOP_CALLBACK = _noop_stop_callback()
_NO_KEY: inplace_stop_callback = object.__new__(inplace_stop_callback)  # never registered


class never_stop_token:
    """``std::never_stop_token``: a token on which stop is never requested ([stoptoken.never]).

    ``stop_requested()`` and ``stop_possible()`` are always ``False``, its ``callback_type``
    does nothing, all instances are equal (it is a singleton), and it models
    ``unstoppable_token``: ``is_unstoppable(never_stop_token())`` is ``True``
    ([stoptoken.concepts]). It is the default of ``get_stop_token`` ([exec.get.stop.token]).
    """

    __slots__ = ()

    callback_type: ClassVar[type[_noop_stop_callback]] = _noop_stop_callback
    unstoppable: ClassVar[bool] = True

    def __new__(cls) -> never_stop_token:
        return _NEVER

    def stop_requested(self) -> bool:
        """Always ``False`` ([stoptoken.never])."""
        return False

    def stop_possible(self) -> bool:
        """Always ``False`` ([stoptoken.never])."""
        return False

    def __eq__(self, other: object) -> bool:
        if isinstance(other, never_stop_token):
            return True
        return NotImplemented

    def __hash__(self) -> int:
        return 0x5707

    def __copy__(self) -> never_stop_token:
        return self

    def __deepcopy__(self, memo: object) -> never_stop_token:
        return self

    def __reduce__(self) -> tuple[type[never_stop_token], tuple[()]]:
        return (never_stop_token, ())

    def __repr__(self) -> str:
        return "never_stop_token()"


_NEVER: never_stop_token = object.__new__(never_stop_token)


def stop_callback_for(token: Any, fn: Callable[[], object]) -> StopCallback:
    """``std::stop_callback_for_t<Token, Fn>(token, fn)`` for any stop token
    ([stopcallback.inplace]).

    Token protocol: a token class names its callback class in the class attribute
    ``callback_type`` (the C++ ``Token::callback_type`` alias), constructed as
    ``callback_type(token, fn)``; the result registers ``fn`` and has ``close()`` and
    context-manager support (:class:`StopCallback`). A token type without ``callback_type``
    is accepted only when ``token.stop_possible()`` is false; it gets a callback that does
    nothing ([stoptoken.concepts], [stoptoken.never]). A stoppable token without one raises
    ``TypeError``.
    """
    cls = type(token)
    if cls is inplace_stop_token:
        return inplace_stop_callback(token, fn)
    if not callable(fn):
        raise _not_callable("stop_callback_for(token, fn)", fn)
    if cls is never_stop_token:
        return _NOOP_CALLBACK
    cb_type = getattr(cls, "callback_type", None)
    if cb_type is not None:
        cb: StopCallback = cb_type(token, fn)
        return cb
    stop_possible = getattr(token, "stop_possible", None)
    if stop_possible is None:
        raise TypeError(f"{cls.__qualname__} is not a stop token: it has no stop_possible()")
    if not stop_possible():
        return _NOOP_CALLBACK
    raise TypeError(
        f"stop token type {cls.__qualname__} can stop but defines no callback_type: a stop "
        "token class must name its callback class in the class attribute callback_type, "
        "constructed as callback_type(token, fn) and providing close() (C++ "
        "stop_callback_for_t, [stoptoken.concepts])"
    )


def is_unstoppable(token: object) -> bool:
    """Whether ``token`` models C++ ``unstoppable_token`` ([stoptoken.concepts]).

    True for ``never_stop_token`` and for any token whose class declares the class attribute
    ``unstoppable = True`` (``stop_possible()`` is *statically* false); ``False`` otherwise.
    It never calls ``stop_possible()``: a default-constructed ``inplace_stop_token`` cannot
    stop either, but its type is not unstoppable. ``stop-when`` and P3941R1 dispatch on it.
    """
    cls = type(token)
    return cls is never_stop_token or getattr(cls, "unstoppable", False) is True


class _CombinedCallback(_ClosesOnExit):
    """``stoken-t::callback_type``: registered on both tokens, runs ``fn`` at most once."""

    __slots__ = ("_ca", "_cb", "_fn")

    def __init__(self, token: combined_stop_token, fn: Callable[[], object]) -> None:
        if not callable(fn):
            raise _not_callable("combined_stop_token.callback_type(token, fn)", fn)
        # A one-element list: list.pop() is atomic, so exactly one of the two sides (or the
        # constructor's immediate run) gets ``fn``.
        self._fn = [fn]
        self._ca: StopCallback | None = None
        self._cb: StopCallback | None = None
        self._ca = stop_callback_for(token._a, self._fire)
        if self._fn:  # not fired yet by the first token: register on the second one too
            self._cb = stop_callback_for(token._b, self._fire)

    def _fire(self) -> None:
        try:
            fn = self._fn.pop()
        except IndexError:
            return
        fn()

    def close(self) -> None:
        """Deregister from both tokens (waits for a run in progress on another thread,
        [stoptoken.concepts])."""
        ca, cb = self._ca, self._cb
        self._ca = self._cb = None
        if ca is not None:
            ca.close()
        if cb is not None:
            cb.close()


class combined_stop_token:
    """``stoken-t`` of [exec.stop.when]: stopped when either of two tokens is.

    Also the token an awaited sender sees inside a coroutine hosted by structexec: the
    await's own token combined with the hosting operation's ([exec.connect])."""

    __slots__ = ("_a", "_b")
    callback_type: ClassVar[type[_CombinedCallback]] = _CombinedCallback
    unstoppable: ClassVar[bool] = False

    def __init__(self, a: StopToken, b: StopToken) -> None:
        self._a = a
        self._b = b

    def stop_requested(self) -> bool:
        return bool(self._a.stop_requested() or self._b.stop_requested())

    def stop_possible(self) -> bool:
        return bool(self._a.stop_possible() or self._b.stop_possible())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, combined_stop_token):
            return bool(self._a == other._a and self._b == other._b)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self._a, self._b))

    def __repr__(self) -> str:
        return f"combined_stop_token({self._a!r}, {self._b!r})"
