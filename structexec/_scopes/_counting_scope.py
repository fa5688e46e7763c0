"""``simple_counting_scope`` and ``counting_scope``: scopes that count associations.

[exec.scope], [exec.counting.scopes], [exec.scope.simple.counting], [exec.scope.counting];
the scopes guide explains the Python decisions (errors, futures, Ctrl-C, nursery parity).

A scope counts the work associated with it (by ``spawn``, ``spawn_future``, ``associate`` or,
used as a nursery, ``start_soon``/``start``) and ``join()`` completes once that count is
zero. The two public classes are composed from:

* ``_state.AssociationState``, an object each scope owns (``_assoc``) and its tokens hold:
  the seven states of [exec.counting.scopes.general], the count, the lock, the registered
  joins and what the join reports (the state diagram is in its docstring); the only code that
  touches them;
* ``_join``: the sender of ``scope.join()`` ([exec.scope.join]);
* ``_nursery``: the trio nursery face (``async with``, ``start_soon``, ``start``,
  ``cancel_scope``), with a host object per kind (``_hosts``: ``SimpleHost``,
  ``CountingHost``) and the exit (``_exit``);
* this module: the tokens ([exec.simple.counting.token], [exec.scope.counting]), what both
  scopes share as spawn targets (``get_token``, ``join``, ``spawn``, ``spawn_future``) and
  the public face of the state (``close``, ``state``, ``count``), and what each scope does
  when an error of its work is recorded (``_record_error``).
"""

from __future__ import annotations

import inspect
import time
import warnings
from collections.abc import Awaitable, Callable
from types import CoroutineType as _CoroutineType
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn, TypeVar

from .._algorithms._stop_when import StopTokenEnv, stop_when
from .._core._env import EMPTY_ENV
from .._core._env import env as _env_cls
from .._core._fastpaths import FAST as _FP
from .._core._protocol import Sender
from .._core._snapshot import ScopeRecord, snapshot_roots
from .._core._stop_token import inplace_stop_source
from . import _spawn, _spawn_future
from ._hosted import task_finished
from ._hosts import CountingHost, SimpleHost
from ._join import _JoinSender
from ._nursery import NurseryFace
from ._site import check_grace
from ._spawn import FAST_TOKENS, as_exception, check_env, check_sender, spawn_into
from ._spawn_coro import direct_ok, spawn_coro, spawn_future_coro
from ._spawn_future import spawn_future

__all__ = ["counting_scope", "simple_counting_scope"]

T = TypeVar("T")
_S = TypeVar("_S", bound="_ScopeBase")


# --------------------------------------------------------------------------- tokens


class _Token:
    # _assoc: the scope's association state, held directly (no load of it per call).
    __slots__ = ("_assoc", "_scope")

    def __init__(self, scope: _ScopeBase) -> None:
        self._scope = scope
        self._assoc = scope._assoc

    def try_associate(self) -> bool:
        """Ask the scope for one more association ([exec.counting.scopes]); ``True`` if
        granted."""
        return self._assoc.try_associate()

    def disassociate(self) -> None:
        """Release one association ([exec.counting.scopes]); the last one completes the
        registered joins."""
        self._assoc.disassociate()

    def record_error(self, err: object) -> None:
        """Keep the error of spawned work for ``join()`` and the ``async with`` exit
        (the scopes guide)."""
        self._scope._record_error(err)

    def __eq__(self, other: object) -> bool:
        if type(other) is type(self):
            return other._scope is self._scope  # type: ignore[attr-defined, no-any-return, unused-ignore]
        return NotImplemented

    def __hash__(self) -> int:
        return id(self._scope)

    def __copy__(self) -> _Token:
        return self

    def __deepcopy__(self, memo: object) -> _Token:
        return self

    def __repr__(self) -> str:
        return f"<{type(self).__qualname__} of {self._scope!r}>"


class _SimpleToken(_Token):
    """``simple_counting_scope::token`` ([exec.simple.counting.token]).

    ``wrap(sndr)`` is ``sndr`` itself; ``try_associate()`` and ``disassociate()`` forward to
    the scope. Tokens are immutable and compare equal when they refer to the same scope;
    copying one returns it ([exec.scope.concepts]).
    """

    __slots__ = ()

    def wrap(self, sndr: T) -> T:
        """Return ``sndr`` unchanged ([exec.simple.counting.token])."""
        return sndr


class _CountingToken(_Token):
    """``counting_scope::token`` ([exec.scope.counting]).

    ``wrap(sndr)`` is ``stop-when(sndr, scope's stop token)``: the wrapped sender sees
    ``request_stop()`` of the scope as well as its own receiver's stop requests
    ([exec.stop.when]).
    """

    __slots__ = ()

    def wrap(self, sndr: object) -> Any:
        """``stop-when(sndr, s_source.get_token())`` ([exec.scope.counting], [exec.stop.when])."""
        return stop_when(sndr, self._scope._stop_token)  # type: ignore[arg-type]  # set while open


FAST_TOKENS.update((_SimpleToken, _CountingToken))


# --------------------------------------------------------------------------- scopes


class _ScopeBase(NurseryFace):
    """The parts shared by both scopes as targets of ``spawn``/``spawn_future``/``join``; the
    state machine is the ``AssociationState`` each owns (``_assoc``), the nursery behaviour
    ``NurseryFace``'s."""

    __slots__ = ()

    _stop_env: object = EMPTY_ENV  # counting_scope: its slot, the env of its stop token
    _token_type: ClassVar[type[_Token]] = _SimpleToken

    if TYPE_CHECKING:  # both scopes' (_scope_init makes them)

        def __init__(
            self,
            *,
            strict_exception_groups: bool | None = None,
            name: str | None = None,
            stop_grace: float | None = None,
        ) -> None: ...

    # -- public members

    def close(self) -> None:
        """Refuse new associations from now on; state changes as in [exec.counting.scopes].

        unused → unused-and-closed, open → closed, open-and-joining → closed-and-joining;
        otherwise no effect. Afterwards every ``try_associate()`` returns ``False``, so
        ``spawn`` drops its work and ``associate``/``spawn_future`` complete stopped.
        """
        self._assoc.close()

    @property
    def state(self) -> str:
        """The current state's name, as in the spec ("unused", "open-and-joining", ...)."""
        return self._assoc.state

    @property
    def count(self) -> int:
        """The number of associations held right now (a snapshot, for debugging and tests)."""
        return self._assoc.count

    def get_token(self) -> _Token:
        """The scope's token: give it to ``spawn``, ``spawn_future`` and ``associate``
        ([exec.scope.concepts])."""
        return self._token_type(self)

    def join(self) -> Sender[None]:
        """A new sender that completes when the scope's count has dropped to zero
        ([exec.scope.join]).

        Starting it moves the scope to (open|closed)-and-joining; it does not close the scope,
        so associated work may still associate more. When the last association is released,
        every registered join completes by starting ``schedule(get_scheduler(env))`` with its
        receiver's scheduler, so ``set_value()`` arrives there (a ``TypeError`` at ``connect``
        if the receiver has no scheduler). A join of a scope that is unused, unused-and-closed,
        joined, or whose count is already zero completes inline with ``set_value()``. Several
        joins may be registered; all complete. A join is not interruptible by stop. If work
        spawned into the scope failed, the join completes ``set_error`` with a
        ``BaseExceptionGroup`` (an ``ExceptionGroup`` when all are exceptions) of those errors
        instead of ``set_value()`` (the scopes guide).
        """
        return _JoinSender(self)

    def outstanding(self) -> tuple[object, ...]:
        """The scope's outstanding operations right now, as ``sx.OperationInfo`` records:
        spawned and associated work still running, futures whose result nobody consumed yet,
        hosted trio tasks (the debugging guide). A snapshot; it keeps nothing alive."""
        from . import _introspect  # imported when first needed, not by `import structexec`

        return _introspect.outstanding(self)

    @property
    def unhandled_errors(self) -> tuple[object, ...]:
        """Error datums of spawned work that nobody consumed, in order (the scopes guide):
        what ``join()`` reports. The ``async with`` exit reports them for good and forgets
        them (as a nursery keeps no reference to what it raised)."""
        return tuple(self._assoc.errors_snapshot())

    # -- what the scope does with the errors of its work (and _record_error, NurseryFace's)

    def _future_error_dropped(self, st: object, err: object) -> None:
        """The future ``st`` of failed work was dropped or closed unconsumed: its error is an
        unhandled error of spawned work, unless the join reports it already."""
        if self._assoc.drop_future_error(st):
            self._record_error(err)

    # -- what a scope refuses, its repr, and dropping it

    def __enter__(self) -> None:
        name = type(self).__name__
        raise RuntimeError(
            f"use 'async with {name}(...)', not 'with {name}(...)': the scope hosts trio "
            "tasks and leaving it waits for them"
        )

    def __exit__(self, *exc: object) -> None:  # pragma: no cover - __enter__ always raises
        pass

    def __copy__(self) -> NoReturn:
        raise TypeError(f"{type(self).__name__} cannot be copied ([exec.counting.scopes.general])")

    def __deepcopy__(self, memo: object) -> NoReturn:
        raise TypeError(f"{type(self).__name__} cannot be copied ([exec.counting.scopes.general])")

    def __reduce__(self) -> NoReturn:
        raise TypeError(
            f"{type(self).__name__} cannot be copied or pickled ([exec.counting.scopes.general])"
        )

    # -- spawning conveniences

    def spawn(self, sndr: object, env: object = EMPTY_ENV) -> None:
        """``sx.spawn(sndr, self.get_token(), env)`` ([exec.spawn]).

        Inside ``async with`` the work's environment also provides the trio scheduler
        (``get_scheduler``) and names the scope's nursery, so a coroutine object given
        here runs as a task of this scope.
        """
        if env is EMPTY_ENV:
            if type(sndr) is _CoroutineType:
                if direct_ok(self, sndr):
                    spawn_coro(self, sndr)  # a coroutine inside `async with` (_spawn_coro)
                    return
            elif isinstance(sndr, Sender) and _FP.spawn:
                _spawn.spawn_fast(sndr, self)
                return
            e = self._spawn_env
        else:
            check_env("spawn", env)
            e = _env_cls(env, self._spawn_env)  # type: ignore[arg-type]
        check_sender("spawn", sndr)
        spawn_into(sndr, self, e)

    def spawn_future(self, sndr: Awaitable[T], env: object = EMPTY_ENV) -> Sender[T]:
        """``sx.spawn_future(sndr, self.get_token(), env)`` ([exec.spawn.future]), with the
        same environment additions as :meth:`spawn`. ``await scope.spawn_future(x)`` gives
        ``x``'s result."""
        if env is EMPTY_ENV:
            if type(sndr) is _CoroutineType and direct_ok(self, sndr):
                return spawn_future_coro(self, sndr)  # a coroutine inside `async with`
            e = self._spawn_env
        else:
            e = _env_cls(env, self._spawn_env)  # type: ignore[arg-type]
        return spawn_future(sndr, self._token_type(self), e)

    def __repr__(self) -> str:
        assoc = getattr(self, "_assoc", None)  # (absent if __init__ raised)
        return f"<{type(self).__name__} unused, 0 associated>" if assoc is None else repr(assoc)

    def __del__(self) -> None:
        try:
            assoc = self._assoc
        except AttributeError:  # __init__ raised
            return
        if assoc.good_to_drop():
            return
        t = getattr(self, "_parent_task", None)
        if t is not None and self._entered and task_finished(t):
            # Misnested: the task that entered the block ended inside it, and trio reported
            # "Nursery stack corrupted" then; as an abandoned nursery, no second warning.
            return
        warnings.warn(
            f"{type(self).__name__} garbage-collected in state {assoc.state!r} with "
            f"{assoc.count} associations: a scope must be joined before it is dropped "
            "([exec.counting.scopes.general]): leave its `async with` block, or await "
            "scope.join()",
            ResourceWarning,
            stacklevel=1,
        )

    def _sx_describe(self) -> ScopeRecord | None:
        """The scope, for ``operation_tree()`` (``_contracts.Describable``); ``None`` while
        another thread is still in ``__init__`` (a field not assigned yet). Never raises,
        takes no lock (a signal handler may run it): counts and flags are read as they
        are."""
        try:
            src = getattr(self, "_source", None)  # counting_scope only
            stop = bool(src is not None and src.stop_requested())
            return ScopeRecord(
                self._name,
                self.state,
                self.count,
                self._assoc.errors_unlocked(),
                stop,
                getattr(self, "_stop_since", None),
                self._entered,
                getattr(self, "_parent_task", None),
                getattr(self, "_nursery", None),
            )
        except AttributeError:  # being set up by another thread
            return None


_spawn_future._SCOPE_SPAWN_FUTURE[0] = _ScopeBase.spawn_future.__code__
snapshot_roots(_ScopeBase)  # sx.operation_tree()

#: The keywords both scopes take (their only arguments), for messages and signatures.
_KEYWORDS = ("strict_exception_groups", "name", "stop_grace")


def _check_ctor(
    cls: str, args: tuple[object, ...], unknown: dict[str, object], grace: object
) -> float | None:
    """The arguments of ``cls(...)``: ``TypeError`` naming ``cls`` and the keywords it takes
    for a positional argument or an unknown keyword; ``stop_grace`` checked (``_site``)."""
    accepted = f"{cls}() takes only the keyword arguments {', '.join(_KEYWORDS)}"
    if unknown:
        k = next(iter(unknown))
        hint = (
            " (the limit is the class attribute max_associations: set it in a subclass)"
            if k == "max_associations"
            else ""
        )
        raise TypeError(f"{accepted}; got the unexpected keyword argument {k!r}{hint}")
    if args:
        raise TypeError(f"{accepted}; got {len(args)} positional argument(s) {args!r}")
    return None if grace is None else check_grace(grace, f"{cls}()")


def _scope_init(cls: str, setup: Callable[[_S], None] | None = None) -> Callable[..., None]:
    """The ``__init__`` of the scope class named ``cls``: keywords only, as documented (its
    ``inspect.signature`` and ``help()`` say so), but taking ``*args`` and ``**unknown`` so that
    a wrong call names ``cls`` and the accepted keywords (``_check_ctor``); then
    ``setup(self)``, if given (what the class adds to the shared state)."""

    def __init__(
        self: _S,
        *args: object,
        strict_exception_groups: bool | None = None,
        name: str | None = None,
        stop_grace: float | None = None,
        **unknown: object,
    ) -> None:
        if args or unknown or stop_grace is not None:
            stop_grace = _check_ctor(cls, args, unknown, stop_grace)
        NurseryFace.__init__(self, strict_exception_groups, name, stop_grace)
        if setup is not None:
            setup(self)

    __init__.__qualname__ = f"{cls}.__init__"
    __init__.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
            inspect.Parameter(
                "strict_exception_groups",
                inspect.Parameter.KEYWORD_ONLY,
                default=None,
                annotation="bool | None",
            ),
            inspect.Parameter(
                "name", inspect.Parameter.KEYWORD_ONLY, default=None, annotation="str | None"
            ),
            inspect.Parameter(
                "stop_grace",
                inspect.Parameter.KEYWORD_ONLY,
                default=None,
                annotation="float | None",
            ),
        ],
        return_annotation="None",
    )
    return __init__


class simple_counting_scope(_ScopeBase):
    """A scope that counts associated work; its work cannot be cancelled.

    [exec.scope.simple.counting]; the scopes guide.

    * ``get_token()``: a token for ``sx.spawn``, ``sx.spawn_future`` and ``sx.associate``;
      ``token.wrap(s)`` is ``s`` itself ([exec.simple.counting.token]), so spawned work sees
      ``never_stop_token``
      unless the ``env`` given to ``spawn`` has a stop token ([exec.spawn]).
    * ``close()``, ``join()``: see the methods; the state machine is in the scopes guide "The
      state machine" (and in the docstring of ``_state``).
    * ``max_associations``: class attribute (``sys.maxsize``); a subclass may lower it
      ([exec.counting.scopes]). A scope reads it once, when it is made.
    * Thread-safe: every operation takes the scope's lock; all appear in one total order.
    * As a nursery: ``async with sx.simple_counting_scope() as scope:`` opens a trio nursery
      that hosts the scope's trio tasks; inside, ``scope.start_soon(fn, *args)``,
      ``await scope.start(fn, *args)``, ``scope.spawn(sndr)`` and ``scope.spawn_future(sndr)``.
      Leaving the block joins (without closing first, so work may spawn more work) and waits
      for everything; an enclosing trio cancellation does not cancel the work. If spawned
      work failed, the block raises an ``ExceptionGroup`` of the errors (with the body's own
      exception, if any); otherwise the body's exception comes out in a group too (strict
      exception groups, as ``trio.open_nursery``; ``strict_exception_groups=False`` lets a
      lone one out as it is, and the default ``None`` follows
      ``trio.run(strict_exception_groups=...)``, as trio's). ``scope.cancel_scope.cancel()``
      cancels the body only.
    * ``KeyboardInterrupt``, ``SystemExit`` (Ctrl-C in the body or while the exit waits, or
      raised by a hosted task or spawned coroutine) cancel the hosted trio tasks and the
      body even here; the block raises the exception once everything has finished (see
      the scopes guide "What happens when things fail").
    * Dropping a scope that is not unused, unused-and-closed or joined is a contract
      violation: a ``ResourceWarning`` when it is garbage-collected
      ([exec.counting.scopes]). Not copyable.
    * Debugging (the debugging guide): ``name=`` appears in ``repr``, in ``sx.dump()`` and in
      the note ``spawned at app.py:42 into simple_counting_scope 'jobs'`` that errors of its
      work carry (errors of ``start_soon``/``start`` tasks only in a named scope, as a nursery
      adds none); ``stop_grace=`` (seconds, default
      ``sx.set_stop_grace``'s) warns (``sx.StuckWorkWarning``) when the exit of ``async
      with`` has waited that long; ``scope.outstanding()`` lists the work still running.
    """

    __slots__ = ()

    if not TYPE_CHECKING:  # the signature is _ScopeBase's
        __init__ = _scope_init("simple_counting_scope")

    _host_type = SimpleHost

    token: ClassVar[type[_Token]] = _SimpleToken
    _token_type = _SimpleToken

    if TYPE_CHECKING:

        def get_token(self) -> _SimpleToken: ...


def _open_stop_source(scope: counting_scope) -> None:
    """What ``counting_scope.__init__`` adds: the scope's stop source ([exec.scope.counting])."""
    source = scope._source = inplace_stop_source()
    token = scope._stop_token = source.get_token()
    scope._stop_env = StopTokenEnv(token, EMPTY_ENV)


class counting_scope(_ScopeBase):
    """A ``simple_counting_scope`` whose work can be cancelled with ``request_stop()``.

    [exec.scope.counting]; the scopes guide.

    * ``token.wrap(s)`` is ``stop-when(s, t)`` with ``t`` the token of the scope's
      ``inplace_stop_source``: associated work sees the scope's stop requests and its own
      receiver's ([exec.stop.when]).
    * ``request_stop()``: requests stop on that source; thread-safe; it does not change the
      state: an open scope still accepts work, which starts with its token already stopped.
    * As a nursery (``async with sx.counting_scope() as scope:``), like a trio nursery: a trio
      cancellation of the enclosing code, an exception escaping the body, or an error of any
      spawned work (an exception of a ``start_soon`` task, an error completion of spawned
      senders) requests stop, so every associated sender sees its stop token fire and every
      hosted trio task gets ``trio.Cancelled``. An error of spawned work also cancels the
      body (its ``Cancelled`` is absorbed by the block, which then raises the
      ``ExceptionGroup`` of the errors), as a nursery cancels its body when a child fails;
      a ``request_stop()`` of your own does not. ``scope.start_soon``, ``await
      scope.start``, ``scope.cancel_scope`` (whose ``cancel()`` also requests stop),
      ``parent_task`` and ``child_tasks`` make it usable where trio code expects a nursery.
    * ``strict_exception_groups``, as ``trio.open_nursery``'s: ``True``, whatever leaves
      the block comes out in a ``BaseExceptionGroup``; ``False``, a lone exception comes out
      as it is, and a group the block makes carries trio's "loose" note (collapsed to its
      one exception once a cancel scope has taken the ``Cancelled`` out of it); ``None``
      (the default), the ``strict_exception_groups`` of the ``trio.run`` that enters the
      block (``True`` unless the run says otherwise). A block cancelled from outside in
      which nothing failed raises one bare ``trio.Cancelled`` either way.
    * ``stop_grace=`` also warns, that many seconds after a stop request, about each
      operation still running, with where it was spawned (the debugging guide).
    * Everything else as :class:`simple_counting_scope`.
    """

    __slots__ = ("_source", "_stop_env", "_stop_token")
    _source: inplace_stop_source

    if not TYPE_CHECKING:  # the signature is _ScopeBase's; then the scope's stop source
        __init__ = _scope_init("counting_scope", _open_stop_source)

    _host_type = CountingHost
    _host_stops = CountingHost.stops

    token: ClassVar[type[_Token]] = _CountingToken
    _token_type = _CountingToken

    if TYPE_CHECKING:

        def get_token(self) -> _CountingToken: ...

    def request_stop(self) -> None:
        """Request stop on every associated operation ([exec.scope.counting]); thread-safe,
        idempotent.

        Inside ``async with`` it also cancels the scope's hosted trio tasks. It does not close
        the scope or change its state.
        """
        if self._stop_since is None:
            self._stop_since = time.monotonic()
        self._source.request_stop()

    def _record_error(self, err: object) -> None:
        self._assoc.record_error(err)
        if self._reason is None:
            self._reason = f"child task raised exception {as_exception(err)!r}"
        # An unhandled error cancels, inside `async with`, the body, as a nursery does, and
        # the siblings (docs/scopes.md). The body first: then the stop need not shield it.
        self._cancel_body()
        self._source.request_stop()

    def _stop_work(self) -> None:
        self._source.request_stop()

    def _cancel_for_interrupt(self) -> None:
        # The body first (then the stop request need not shield it), then the hosted tasks
        # through the stop callback.
        self._cancel_body()
        self._source.request_stop()
