"""``spawn(sndr, token, env=env())``: start work eagerly in a scope ([exec.spawn]).

``spawn`` connects ``token.wrap(sndr)`` (with ``env`` written into its environment), asks the
token for an association and, if it gets one, starts the operation before returning. The
operation's completion releases the association. Nothing is returned: to get a result back
use ``spawn_future``.

A plain sender spawned this way needs no trio task: into a ``counting_scope`` it costs one
small state object, the sender's own operation and two lock round trips on the scope.
Only coroutines are hosted in trio tasks.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from .._algorithms._stop_when import StopTokenEnv, child_token
from .._core._adaptor_util import close_op
from .._core._completion_signatures import get_completion_signatures
from .._core._connect import connect
from .._core._domain import DISPATCH as _DS
from .._core._domain import declare_no_domain_env
from .._core._env import EMPTY_ENV, TryEnv, fwd_env, get_env, join_env, prop
from .._core._env import env as _joined_env
from .._core._errors import ErrorValue, terminate
from .._core._fastpaths import FAST as _FP
from .._core._protocol import Algorithm, Sender, completed_twice, is_sender
from .._core._queries import _MISSING, get_allocator, get_stop_token, query_or
from .._core._snapshot import SpawnRecord, snapshot_roots
from .._core._tags import set_value_t
from .._core._trampoline import _t as _tramp
from .._core._trampoline import drain as _drain_queue
from .._core._trampoline import trampoline_start
from .._schedulers._run_loop import raised_sink
from ._scope_token import check_scope_token
from ._site import note_error

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import CodeType

    from .._core._describe import Site
    from ._counting_scope import _ScopeBase
    from ._scope_token import ScopeToken

__all__ = ["spawn"]

#: Token types of the library's own scopes (filled in by ``_counting_scope``). For these,
#: ``spawn`` and ``spawn_future`` talk to the scope directly: ``token._scope`` has
#: ``_assoc`` (its ``_state.AssociationState``: ``try_associate()``, ``disassociate()``),
#: ``_record_error(err)``, ``_spawn_env`` and ``_stop_token`` (``None`` for
#: ``simple_counting_scope``, whose ``wrap`` is the identity).
FAST_TOKENS: set[type] = set()

#: The switch of the fast path of ``spawn`` (:func:`spawn_fast`) is ``_fastpaths.FAST.spawn``.

_DONE: object = object()
_new = object.__new__
_getframe = sys._getframe


def check_sender(who: str, sndr: object) -> None:
    """``TypeError`` unless ``sndr`` is a sender ([exec.spawn])."""
    if not is_sender(sndr):
        raise TypeError(
            f"{who}() needs a sender as its first argument, got {type(sndr).__name__} "
            f"({sndr!r:.60}): a sender has connect(rcvr) or is awaitable ([exec.spawn])"
        )


def check_env(who: str, env: object) -> None:
    """``TypeError`` unless ``env`` is queryable ([exec.spawn])."""
    if env is not EMPTY_ENV and not callable(getattr(env, "query", None)):
        raise TypeError(
            f"{who}(): env must be an environment (an object with a query() method, such as "
            f"sx.prop(q, v) or sx.env(...)), got {type(env).__name__} ([exec.spawn])"
        )


def check_args(who: str, sndr: object, token: ScopeToken, env: object) -> None:
    """The checks of 29.1/30.1: a sender, a scope token, a queryable env (``TypeError``)."""
    check_sender(who, sndr)
    if type(token) not in FAST_TOKENS:
        check_scope_token(token, f"{who}()")
    check_env(who, env)


def spawned_env(sndr: object, env: object, wrapped: object = None) -> object:
    """``senv`` of 29.2: ``env``, plus the wrapped sender's allocator if ``env`` has none."""
    if env is not EMPTY_ENV and query_or(env, get_allocator, _MISSING) is not _MISSING:
        return env
    a = query_or(get_env(sndr if wrapped is None else wrapped), get_allocator, _MISSING)
    if a is _MISSING:
        return env
    return join_env(prop(get_allocator, a), env)  # type: ignore[arg-type]


def fast_child_env(scope: _ScopeBase, senv: object) -> object:
    """The environment ``sndr`` sees when spawned into one of the library's scopes.

    ``write_env(token.wrap(sndr), senv)`` connected to a receiver without an environment:
    for ``simple_counting_scope`` that is ``senv``; for ``counting_scope`` it is
    ``stop-when``'s ``JOIN-ENV(prop(get_stop_token, t'), FWD-ENV(senv))`` with ``t'`` the
    scope's token, combined with ``senv``'s own token if it has a stoppable one ([exec.stop.when]).
    """
    st = scope._stop_token
    if st is None:
        return senv
    if senv is EMPTY_ENV:
        return scope._stop_env
    return StopTokenEnv(child_token(st, get_stop_token(senv)), fwd_env(senv))


def check_spawn_signatures(sndr: object, cenv: object) -> None:
    """[exec.spawn] (meta): value datums are ill-formed for ``spawn``; raise where metadata proves
    it.

    Error completions are not rejected: the scopes guide "What happens when things fail" has the
    scope record them at run time, since in Python nearly every sender that runs user code may
    raise.
    """
    sigs = get_completion_signatures(sndr, cenv)
    if sigs is not None:
        check_signature_set(sndr, sigs)


def value_datums_error(vals: tuple[object, ...]) -> TypeError:
    """The error a scope reports for work given to ``spawn`` that completed with datums."""
    return TypeError(
        f"work given to spawn() completed with value datums {vals!r:.80}, but spawn() has "
        "nowhere to deliver a result ([exec.spawn]: its receiver accepts only set_value() "
        "and set_stopped()). To get the result use spawn_future(); to ignore it end the "
        "work with | sx.then(lambda *_: None); for a trio-style task whose return value is "
        "ignored, as in a nursery, use scope.start_soon(async_fn, *args)"
    )


def check_signature_set(sndr: object, sigs: Any) -> None:
    for s in sigs:
        if type(s) is set_value_t and s.args:
            raise TypeError(
                f"spawn(): {sndr!r:.80} may complete with value datums {s!r}, but the spawn "
                "receiver accepts only set_value() and set_stopped() ([exec.spawn]). "
                "Drop the values (| sx.then(lambda *_: None)) or use spawn_future"
            )


def _ignore(self: object, *args: object) -> None:
    """A completion that arrives after the start of its operation raised: the association
    was already released when the start raised, so there is nothing left to do."""


def start_or_release(
    op: object, st: _ScopeSpawnState | _SpawnState, release: Callable[[], None]
) -> None:
    """``trampoline_start(op)``; if the start raises (a ``BaseException`` from user code run
    inline, say ``KeyboardInterrupt`` or ``SystemExit``) before ``st`` completed, release the
    association with ``release()`` and re-raise: nothing leaks, nobody waits forever
    ([exec.spawn], [exec.scope.concepts]: every successful ``try_associate`` is matched by one
    ``disassociate``)."""
    try:
        trampoline_start(op)  # type: ignore[arg-type]  # set by connect before start
    except BaseException:
        lost(st, release)
        raise


def lost(st: _ScopeSpawnState | _SpawnState, release: Callable[[], None]) -> None:
    """``st``'s operation raised out of ``start`` without completing: release its association
    once, and ignore a completion that may still arrive later."""
    if st._op is not _DONE:
        st._op = _DONE
        st.__class__ = _LOST[type(st)]
        release()


def drop_refused(op: object, st: _ScopeSpawnState | _SpawnState | None = None) -> None:
    """The token refused the association: ``op`` is dropped silently, never started, nothing
    completes ([exec.spawn]; ``spawn_future`` then stores ``set_stopped()``,
    [exec.spawn.future]). ``op`` is closed now, so what it holds (an ``associate``'s
    association inside the work, say) is released before the call returns, not left to the
    cycle collector. A ``spawn`` state ``st`` is marked done first."""
    if st is not None:
        st._op = _DONE
    close_op(op)


def as_exception(err: object) -> BaseException:
    """An error datum as an exception: itself, or wrapped in ``ErrorValue``
    (the senders guide "What happens when things fail")."""
    return err if isinstance(err, BaseException) else ErrorValue(err)


def scope_sink(st: _ScopeSpawnState, scope: _ScopeBase) -> Any:
    """The ``raised_sink`` of work spawned into a library scope: a ``KeyboardInterrupt`` or
    ``SystemExit`` raised by the work while another agent (the trio scheduler, a pool thread)
    completes it ends the work (its association is released) and, inside ``async with``, is
    the scope's to raise at its exit, like a hosted task's. Outside ``async with`` nobody
    waits for the work, so the fallback applies (a ``KeyboardInterrupt`` becomes a Ctrl-C)."""

    def sink(exc: BaseException) -> bool:
        note_error(exc, st._site, scope)
        lost(st, scope._assoc.disassociate)
        if scope._entered:
            scope._interrupt(exc)
            return True
        return False

    return sink


class _ScopeSpawnState(TryEnv):
    """``spawn-state`` + ``spawn-receiver`` for the library's own scopes ([exec.spawn]); also
    the work's environment (``TryEnv``: ``query`` through ``_sx_try``)."""

    # _code, _lasti: the code object and instruction offset of the spawning call (two slots:
    # no tuple per spawn; docs/debugging.md); _sndr: the spawned sender, described only when
    # a tree is printed.
    __slots__ = ("_code", "_env", "_lasti", "_op", "_scope", "_sndr")
    _unsupported = "the environment of spawned work does not support {q!r}"

    def __init__(
        self, scope: _ScopeBase, env: object, sndr: object = None, site: Site = None
    ) -> None:
        self._scope = scope
        self._env = env
        self._op: Any = None
        self._sndr = sndr
        self._code: CodeType | None = None if site is None else site[0]
        self._lasti: int = 0 if site is None else site[1]

    @property
    def _site(self) -> Site:
        """Where the work was spawned: ``(code, offset)`` or ``None`` (``_core._describe``)."""
        code = self._code
        return None if code is None else (code, self._lasti)

    def get_env(self) -> object:
        return self

    def _sx_try(self, q: object, default: object) -> object:
        if q is raised_sink:
            return scope_sink(self, self._scope)
        return query_or(self._env, q, default)

    def set_value(self, *vals: object) -> None:
        if vals:
            # Datums cannot be delivered anywhere ([exec.spawn]): never dropped silently.
            self.set_error(value_datums_error(vals))
            return
        if self._op is _DONE:
            raise completed_twice(self, "set_value")
        self._op = _DONE  # "destroy" the state first, then disassociate ([exec.spawn])
        self._scope._assoc.disassociate()

    def set_stopped(self) -> None:
        if self._op is _DONE:
            raise completed_twice(self, "set_stopped")
        self._op = _DONE
        self._scope._assoc.disassociate()

    def set_error(self, err: object) -> None:
        if self._op is _DONE:
            raise completed_twice(self, "set_error")
        self._op = _DONE
        scope = self._scope
        note_error(err, self._site, scope)
        scope._record_error(err)
        scope._assoc.disassociate()

    def _sx_describe(self) -> SpawnRecord | None:
        """Outstanding work, for ``operation_tree()`` (``_contracts.Describable``); ``None``
        while the state is being set up (another thread may be between making it and
        ``connect`` returning: its slots are not all assigned yet) and once the work has
        completed. Never raises, takes no lock: ``_op`` is assigned last during the setup, so
        once it is an operation the other slots are there."""
        op = getattr(self, "_op", None)
        if op is None or op is _DONE:
            return None
        code = getattr(self, "_code", None)
        site = None if code is None else (code, getattr(self, "_lasti", 0))
        return SpawnRecord(getattr(self, "_scope", None), getattr(self, "_sndr", None), site, op)


class _FastSpawnState(_ScopeSpawnState):
    """The state of ``spawn(sndr, token, env)`` with a library scope's token, where ``env`` is
    empty or the scope's own nursery env (which has no allocator and no stop token).

    It is its own environment, which is ``senv`` seen through ``token.wrap`` ([exec.spawn]):
    ``get_stop_token`` is the scope's token (``counting_scope``: ``stop-when`` over a ``senv``
    without a stop token) or ``env``'s (``simple_counting_scope``: ``never_stop_token``);
    ``get_allocator`` is the one named by the sender's attributes, if any, looked up when
    asked, which saves the lookup on every spawn whose work never asks; other queries go to
    ``env``.
    """

    __slots__ = ("_base",)

    def __init__(self, scope: _ScopeBase, sndr: object, base: object) -> None:
        self._scope = scope
        self._sndr = sndr
        self._base = base
        self._op: Any = None
        self._code: CodeType | None = None
        self._lasti = 0

    def get_env(self) -> object:
        return self

    def _sx_try(self, q: object, default: object) -> object:
        if q is get_stop_token:
            tok = self._scope._stop_token
            return query_or(self._base, q, default) if tok is None else tok
        if q is get_allocator:
            return query_or(get_env(self._sndr), get_allocator, default)
        if q is raised_sink:
            return scope_sink(self, self._scope)
        return query_or(self._base, q, default)


# Its environment answers get_domain from the scope's spawn env (empty, or the trio one: no
# domain): a then-chain spawned here whose predecessor has no completion scheduler is local.
declare_no_domain_env(_FastSpawnState)


def spawn_fast(sndr: Sender[object], scope: _ScopeBase) -> None:
    """The fast path of ``spawn`` ([exec.spawn]): a ``Sender`` spawned into a library scope
    without an ``env`` (``sx.spawn(sndr, token)`` and ``scope.spawn(sndr)``), when
    ``_fastpaths.FAST.spawn`` is on.

    The same effects as the general path (:func:`spawn_into`), in the same order: the state
    is the receiver and its own environment (:class:`_FastSpawnState`, built without an
    ``__init__`` frame), ``connect`` skips the domain lookup while no custom domain exists,
    and the outermost ``trampoline_start`` is inlined.
    """
    st = _new(_FastSpawnState)
    st._scope = scope
    st._sndr = sndr
    try:
        f = _getframe(2)  # the user's call (through spawn_t.__call__ or scope.spawn)
    except ValueError:  # called from a C-level thread entry: no frame above the library
        f = _getframe(0)
    st._code = f.f_code  # formatted only when asked (docs/debugging.md)
    st._lasti = f.f_lasti
    st._base = scope._spawn_env  # trio scheduler + host nursery inside `async with`
    sigs = sndr.get_completion_signatures(st)
    if sigs is not None:
        check_signature_set(sndr, sigs)
    # connect(sndr, st) without the domain layer unless a custom domain may transform sndr
    # (not merely when one exists: the parallel scheduler makes one on first use)
    if _DS.on and (_DS.all or sndr.tag in _DS.tags):  # a Sender: `tag` is a class attribute
        op = st._op = connect(sndr, st)
    else:
        op = st._op = sndr.connect(st)
    if not scope._assoc.try_associate():
        drop_refused(op, st)
        return
    # trampoline_start(op), inlined for the outermost level
    t = _tramp
    if t.depth:
        start_or_release(op, st, scope._assoc.disassociate)
        return
    t.depth = 1
    try:
        op.start()
    except BaseException:
        lost(st, scope._assoc.disassociate)  # e.g. KeyboardInterrupt from a then-function
        raise
    finally:
        t.depth = 0
    q = t.queue
    if q:
        _drain_queue(t, q)


class _SpawnState:
    """``spawn-state`` + ``spawn-receiver`` for any other scope token."""

    __slots__ = ("_env", "_op", "_token")

    def __init__(self, token: ScopeToken, env: object) -> None:
        self._token = token
        self._env = env
        self._op: Any = None

    def get_env(self) -> object:
        return self._env

    def set_value(self, *vals: object) -> None:
        if vals:
            self.set_error(value_datums_error(vals))
            return
        if self._op is _DONE:
            raise completed_twice(self, "set_value")
        self._op = _DONE
        self._token.disassociate()

    def set_stopped(self) -> None:
        if self._op is _DONE:
            raise completed_twice(self, "set_stopped")
        self._op = _DONE
        self._token.disassociate()

    def set_error(self, err: object) -> None:
        if self._op is _DONE:
            raise completed_twice(self, "set_error")
        self._op = _DONE
        token = self._token
        record = getattr(token, "record_error", None)
        if record is not None:
            record(err)
        else:
            terminate(
                "work given to spawn() completed with an error, and its scope token has no "
                "record_error() to keep it ([exec.spawn]); handle errors "
                "before spawning (| sx.upon_error(...))",
                as_exception(err),
            )
        token.disassociate()


def spawn_into(sndr: object, scope: _ScopeBase, env: object) -> None:
    """``spawn`` into one of the library's scopes (the fast path of :func:`spawn`)."""
    senv = spawned_env(sndr, env)
    cenv = fast_child_env(scope, senv)
    check_spawn_signatures(sndr, cenv)
    try:
        f = _getframe(2)  # the user's call (through spawn_t.__call__ or scope.spawn)
    except ValueError:  # called from a C-level thread entry: no frame above the library
        f = _getframe(0)
    st = _ScopeSpawnState(scope, cenv, sndr, (f.f_code, f.f_lasti))
    op = st._op = connect(sndr, st)  # an exception here leaves no association ([exec.spawn])
    if scope._assoc.try_associate():
        start_or_release(op, st, scope._assoc.disassociate)
    else:
        drop_refused(op, st)


class spawn_t(Algorithm):
    """``spawn(sndr, token, env=sx.env())``: start ``sndr`` now, tracked by ``token``'s scope.

    [exec.spawn], the scopes guide "The nursery face: `async with`".

    * Order of effects ([exec.spawn]): connect ``write_env(token.wrap(sndr), senv)``; then
      ``token.try_associate()``; if that succeeds the operation is started before ``spawn``
      returns, otherwise it is dropped silently (a closed or joined scope, or
      ``max_associations`` reached): nothing runs, nothing completes, nothing is raised; the
      operation is closed before ``spawn`` returns, so what it holds (say the association of
      an ``associate`` inside the work) is released then, not by the cycle collector.
    * ``senv`` ([exec.spawn]): ``env`` if it provides ``get_allocator``; else, if the wrapped
      sender's attributes provide one, ``env`` plus that allocator; else ``env``. The spawned work
      has no ``get_scheduler`` unless ``env`` gives one, and its stop token is the scope's
      (``counting_scope``) or ``never_stop_token`` (``simple_counting_scope``) ([exec.spawn]).
    * When the operation completes its state is dropped and the association released, so
      ``join()`` completes only after the work has ([exec.spawn]).
    * An exception from ``connect`` propagates, and no association is held ([exec.spawn]).
    * Value datums are ill-formed ([exec.spawn]): ``TypeError`` where the sender's completion
      signatures prove it; found at run time, the same ``TypeError`` is recorded by the scope
      as an error of the work (never dropped silently; use ``spawn_future`` for a result).
    * A ``BaseException`` (``KeyboardInterrupt``, ``SystemExit``) raised while the work starts
      (user code run inline) propagates out of ``spawn``, and the association is released.
    * An error completion is recorded by the scope (it makes ``join()``/the ``async with``
      block raise an ``ExceptionGroup``; ``counting_scope`` also requests stop). A user
      token receives it through its ``record_error(err)`` method if it has one; otherwise the
      terminate handler is called.
    * ``TypeError`` for a non-sender, a non-token or a non-environment ([exec.spawn]).

    Deeply nested spawns from inside completions are started through the per-thread
    trampoline, so recursive spawning cannot overflow the stack; such a nested start still
    happens on the same thread before the outermost ``spawn`` returns.

    Completion signatures: the spawned sender may complete ``set_value()`` (no datum),
    ``set_error`` and ``set_stopped()`` ([exec.spawn]); ``spawn`` itself returns ``None``.

    Errors: an error of the work is recorded by the library's scopes and reported by ``join()``
    (or the ``async with`` exit); an exception from ``connect`` propagates from ``spawn``.

    Cancellation: the work's stop token is the scope's (``counting_scope``) or
    ``never_stop_token`` (``simple_counting_scope``); a stopped completion just releases the
    association.

    Example:

    >>> import structexec as sx
    >>> scope = sx.simple_counting_scope()
    >>> sx.spawn(sx.just() | sx.then(lambda: None), scope.get_token())
    >>> sx.sync_wait(scope.join())
    ()
    """

    __slots__ = ()

    def __call__(self, sndr: object, token: Any, env: object = EMPTY_ENV) -> None:
        # The common case, the fast path: a library scope, no env, a Sender subclass.
        fast = _FP.spawn and env is EMPTY_ENV and type(token) in FAST_TOKENS
        if fast and isinstance(sndr, Sender):
            spawn_fast(sndr, token._scope)
            return
        check_args("spawn", sndr, token, env)
        if type(token) in FAST_TOKENS:
            spawn_into(sndr, token._scope, with_scope_env(token._scope, env))
            return
        wrapped = token.wrap(sndr)
        senv = spawned_env(sndr, env, wrapped)
        check_spawn_signatures(wrapped, senv)
        gst = _SpawnState(token, senv)
        op = gst._op = connect(wrapped, gst)
        if token.try_associate():
            start_or_release(op, gst, token.disassociate)
        else:
            drop_refused(op, gst)


def with_scope_env(scope: _ScopeBase, env: object) -> object:
    """The environment of work given to a library scope's token: ``env``, then the scope's own.

    Inside ``async with scope:`` the scope's environment provides the trio scheduler and the scope's
    nursery, so ``sx.spawn(my_task(), scope.get_token())`` behaves exactly like
    ``scope.spawn(my_task())`` (the scopes guide "The nursery face: `async with`");
    outside it, it is empty.
    """
    base = scope._spawn_env
    if env is EMPTY_ENV or env is base:
        return base
    if base is EMPTY_ENV:
        return env
    return _joined_env(env, base)  # type: ignore[arg-type]  # environments are checked at run time


spawn = spawn_t()


def _lost_class(cls: type) -> type:
    return type(
        f"{cls.__name__}Lost",
        (cls,),
        {"__slots__": (), "set_value": _ignore, "set_error": _ignore, "set_stopped": _ignore},
    )


#: The class a spawn state takes when its start raised (see :func:`lost`).
_LOST: dict[type, type] = {
    c: _lost_class(c) for c in (_ScopeSpawnState, _FastSpawnState, _SpawnState)
}
snapshot_roots(_ScopeSpawnState)  # and _FastSpawnState (sx.operation_tree())
