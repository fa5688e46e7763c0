"""``spawn_future(sndr, token, env=env())``: start work eagerly, get its result later.

[exec.spawn.future], the scopes guide "Futures outlive their work".

``spawn_future`` starts the work before it returns (like ``spawn``) and returns a single-shot
sender, the *future*, that completes with the work's result. The state shared by the work and the
future resolves three events in one total order ([exec.spawn.future]): ``complete`` (the work
finished), ``consume`` (the future's operation started) and ``abandon`` (the future, or its
operation, was dropped or closed without being started). The first of ``complete`` and
``consume``/``abandon`` to happen only records itself; the second one acts. Each side claims its
turn by popping the one element of a shared list (``list.pop`` is atomic), so no lock is needed
unless the consumer's stop token can fire (the scopes guide "Futures outlive their work" consumer
stop).

With the library's own scopes the state is also the work's environment, and the future's stop
source and the combined stop token are created only if the work asks for its stop token (or
the future is abandoned): a future of work that never looks at its token costs no stop source.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, TypeVar

from .._algorithms._stop_when import stop_when
from .._core._completion_signatures import completion_signatures, get_completion_signatures
from .._core._connect import connect
from .._core._env import EMPTY_ENV, fwd_env, get_env
from .._core._protocol import Algorithm, Sender, twice_started
from .._core._queries import _MISSING, QueryError, get_allocator, get_stop_token, query_or
from .._core._snapshot import FutureHolder, FutureRecord, snapshot_roots
from .._core._stop_token import (
    combined_stop_token,
    inplace_stop_source,
    is_unstoppable,
    stop_callback_for,
)
from .._core._tags import set_stopped_t
from .._core._trampoline import trampoline_start
from .._schedulers._run_loop import raised_sink, stopped_from_stop_callback
from ._site import note_error
from ._spawn import FAST_TOKENS, check_args, drop_refused, spawned_env, with_scope_env

T = TypeVar("T")

if TYPE_CHECKING:
    from types import CodeType

    from .._core._describe import Site
    from ._scope_token import CompletionReceiver

__all__ = ["spawn_future"]

_VALUE, _ERROR, _STOPPED, _LOST = 0, 1, 2, 3
_RESULT_NAMES = ("value", "error", "stopped")  # by kind, for sx.operation_tree()
_LAZY = threading.Lock()  # guards the lazy creation of a state's stop source


def _claim(flag: list[None]) -> bool:
    """Pop the one element of ``flag``: ``True`` for the first caller only (atomic)."""
    if flag:
        try:
            flag.pop()
        except IndexError:  # lost a race with another thread between the test and the pop
            return False
        return True
    return False


class _ConsumerStop:
    """The rarely needed part of the state: a consumer whose stop token can fire."""

    __slots__ = ("cb", "lock", "pending")

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.cb: Any = None
        self.pending: Any = None


class _FutureState:
    """``spawn-future-state``; also the receiver of the spawned work ([exec.spawn.future]).

    ``_token`` is the scope token (generic path) or the scope itself (``_fast``: the library's
    scopes). On the fast path the state is the work's environment: ``FWD-ENV(senv)`` with the
    stop token of ``stop-when`` (the future's own source, combined with ``senv``'s token and
    the ``counting_scope``'s) and the allocator of 29.2, computed when asked.
    """

    __slots__ = (
        "_associated",
        "_code",
        "_env",
        "_ext",
        "_fast",
        "_flag",
        "_kind",
        "_lasti",
        "_parked",
        "_result",
        "_slot",
        "_sndr",
        "_source",
        "_tok",
        "_token",
    )

    def __init__(self, token: Any, fast: bool, env: Any, sndr: object) -> None:
        self._token = token
        self._fast = fast
        self._env = env  # fast: FWD-ENV(senv); generic: senv
        self._sndr = sndr  # kept for the allocator query and the completion signatures
        self._source: inplace_stop_source | None = None
        self._tok: Any = None
        self._associated: list[None] = []  # [None] while associated; popped by the release
        self._flag = [None]  # claimed by whichever of complete / consume-or-abandon is first
        self._slot: Any = None  # the registered consumer: a one-element list
        self._kind = -1
        self._parked = False  # an unconsumed error known to the scope (fast path)
        self._result: Any = None
        self._ext: _ConsumerStop | None = None
        # the code object and instruction offset of the spawning call (docs/debugging.md)
        self._code: CodeType | None = None
        self._lasti = 0

    @property
    def _site(self) -> Site:
        code = self._code
        return None if code is None else (code, self._lasti)

    # -- the stop source, created on demand

    def _get_source(self) -> inplace_stop_source:
        src = self._source
        if src is None:
            with _LAZY:
                src = self._source
                if src is None:
                    src = self._source = inplace_stop_source()
        return src

    def _stop_token(self) -> object:
        tok = self._tok
        if tok is None:
            tok = self._get_source().get_token()
            rt = get_stop_token(self._env)
            if not is_unstoppable(rt):
                tok = combined_stop_token(tok, rt)
            st = self._token._stop_token
            if st is not None:
                tok = combined_stop_token(st, tok)
            self._tok = tok  # concurrent first queries build equivalent tokens
        return tok

    # -- receiver of the spawned work (spawn-future-receiver) and its environment

    def get_env(self) -> Any:
        return self if self._fast else self._env

    def _sx_try(self, q: object, default: object) -> object:
        if q is get_stop_token:
            return self._stop_token()
        if q is raised_sink:
            return self._sink
        if q is get_allocator:
            r = query_or(self._env, get_allocator, _MISSING)
            if r is not _MISSING:
                return r
            return query_or(get_env(self._sndr), get_allocator, default)
        return query_or(self._env, q, default)

    def query(self, q: Any, *args: object) -> Any:
        if args:
            return self._env.query(q, *args)
        r = self._sx_try(q, _MISSING)
        if r is _MISSING:
            raise QueryError(f"the environment of spawn_future's work does not support {q!r}")
        return r

    def set_value(self, *vals: object) -> None:
        self._store(_VALUE, vals)

    def set_error(self, err: object) -> None:
        self._store(_ERROR, err)

    def set_stopped(self) -> None:
        self._store(_STOPPED, None)

    def _store(self, kind: int, data: object) -> None:
        if self._kind >= 0:
            if self._kind == _LOST:
                return  # the start raised (_start_raised) or the work's raise was sunk (_sink)
            raise RuntimeError(
                "the work given to spawn_future completed twice; an operation completes "
                "exactly once ([exec.spawn.future])"
            )
        self._kind = kind
        self._result = data
        if kind == _ERROR and self._fast:
            note_error(data, self._site, self._token)
        self._complete()

    # -- the three events

    def _complete(self) -> None:
        parked = self._kind == _ERROR and self._fast and bool(self._flag)
        if parked:
            # Known to the scope before the claim, so that no join can miss it: an error
            # nobody has consumed when the scope's join delivers is reported there.
            self._parked = True
            self._token._assoc.park_future_error(self, self._result)
        if _claim(self._flag):
            # First: the result waits in the future for consume or abandon ([exec.spawn.future]).
            # The association is released now, not when the result is consumed: a finished future
            # never keeps its scope from joining ([exec.spawn.future], see
            # docs/scopes.md "Futures outlive their work"). With a token of another kind an error
            # keeps its association until consumed or dropped: only the library's own scopes can
            # report an unconsumed error at their join.
            if self._fast or self._kind != _ERROR:
                self._release()
            return
        if parked:
            self._unpark()  # a consumer is there (or it was abandoned): not the scope's
        ext = self._ext
        if ext is None:
            slot = self._slot
            rcvr = slot.pop() if slot else None  # only we take it: no consumer stop
            cb = None
        else:
            ext.lock.acquire()
            slot = self._slot
            rcvr = slot.pop() if slot else None
            cb = ext.cb
            ext.lock.release()
        if rcvr is None:
            # Abandoned (dropped, closed, or the consumer was stopped): destroy
            # ([exec.spawn.future]).
            self._destroy(True)
            return
        if cb is not None:
            cb.close()  # deregister before completing the consumer ([exec.recv.concepts])
        self._deliver(rcvr)

    def _consume(self, rcvr: CompletionReceiver) -> None:
        if not self._flag:
            self._deliver(rcvr)  # the work has completed: inline, inside start
            return
        self._slot = [rcvr]
        tok = get_stop_token(get_env(rcvr))
        ext = None
        if not is_unstoppable(tok) and tok.stop_possible():
            ext = self._ext = _ConsumerStop()
            ext.lock.acquire()
        if not _claim(self._flag):
            # The work completed meanwhile: deliver inline.
            if ext is not None:
                ext.lock.release()
            self._slot = None
            self._deliver(rcvr)
            return
        if ext is None:
            return  # _complete delivers
        # docs/scopes.md "Futures outlive their work": a stop request on the consumer abandons the
        # work and completes the consumer stopped at once. The lock orders the callback against
        # _complete.
        cb = ext.cb = stop_callback_for(tok, self._on_consumer_stop)
        pending = ext.pending
        ext.lock.release()
        if pending is not None:  # the callback ran inside the constructor, on this thread
            ext.pending = None
            cb.close()
            pending.set_stopped()

    def _on_consumer_stop(self) -> None:
        ext = self._ext
        assert ext is not None
        ext.lock.acquire()
        slot = self._slot
        rcvr = slot.pop() if slot else None  # None: _complete took it and delivers
        cb = ext.cb
        if rcvr is not None and cb is None:
            ext.pending = rcvr
        ext.lock.release()
        if rcvr is None:
            return
        self._get_source().request_stop()  # abandon: the work is still tracked by its scope
        if cb is not None:
            cb.close()  # from inside the callback itself: does not wait ([stoptoken.concepts])
            stopped_from_stop_callback(rcvr)  # a BaseException: the consumer's raised_sink

    def _abandon(self) -> None:
        if _claim(self._flag):
            self._get_source().request_stop()  # destroyed when the work completes
        else:
            self._destroy(True)  # the work had completed: destroy now ([exec.spawn.future])

    # -- delivery and release

    def _deliver(self, rcvr: CompletionReceiver) -> None:
        kind = self._kind
        data = self._result
        self._result = None
        if self._parked:
            self._unpark()
        if kind == _VALUE:
            rcvr.set_value(*data)
        elif kind == _ERROR:
            rcvr.set_error(data)
        else:
            rcvr.set_stopped()
        self._destroy(False)

    def _unpark(self) -> None:
        self._parked = False
        self._token._assoc.unpark_future_error(self)

    def _destroy(self, unconsumed: bool) -> None:
        """Release the association if the work's completion has not already ([exec.spawn.future]).

        An error result that no consumer received is recorded by the scope: the scope's own
        errors (the ``async with`` block's ``ExceptionGroup``, ``join()``'s error) include it.
        """
        token = self._token
        if unconsumed and self._kind == _ERROR:
            err = self._result
            self._result = None
            if self._fast:
                self._parked = False
                token._future_error_dropped(self, err)
            else:
                record = getattr(token, "record_error", None)
                if record is not None:
                    record(err)
        self._release()

    def _release(self) -> None:
        if _claim(self._associated):
            if self._fast:
                self._token._assoc.disassociate()
            else:
                self._token.disassociate()

    def _sink(self, exc: BaseException) -> bool:
        """``raised_sink`` (see ``scope_sink`` in ``_spawn``): the work raised a
        ``KeyboardInterrupt``/``SystemExit`` while another agent completed it. Inside
        ``async with`` the scope raises it at its exit; the future completes stopped, so a
        consumer never waits forever."""
        scope = self._token
        took = self._fast and scope._entered
        if self._fast:
            note_error(exc, self._site, scope)
        if took:
            scope._interrupt(exc)
        if self._kind < 0:
            self._store(_STOPPED, None)
            # The agent that called the sink may still complete the work stopped (a task's
            # driver, a hosted coroutine): ignore that completion, as a sink does. The
            # future's consumer is completed stopped all the same (_deliver).
            self._kind = _LOST
        return took

    def _start_raised(self) -> None:
        """The work's ``start`` raised (a ``BaseException`` from user code run inline): if it
        did not complete, the future is done for, and its association released at once."""
        if self._kind < 0:
            self._kind = _LOST
            self._flag.clear()
            self._release()

    def _start(self, op: Any) -> None:
        self._associated.append(None)
        try:
            trampoline_start(op)
        except BaseException:
            self._start_raised()
            raise

    def _sx_describe(self) -> FutureRecord | None:
        """A future of a library scope, for ``operation_tree()`` (``_contracts.Describable``);
        ``None`` for the generic path's futures, for a future whose work was lost, and while
        another thread is still in ``__init__`` (a slot not assigned yet). Never raises, no
        lock."""
        try:
            if not self._fast:
                return None
            kind = self._kind
            if kind == _LOST:
                return None
            src = self._source
            return FutureRecord(
                self._token,
                self._sndr,
                self._site,
                None if kind < 0 else _RESULT_NAMES[kind],
                bool(self._associated),
                src is not None and src.stop_requested(),
                not self._flag,
            )
        except AttributeError:  # being set up by another thread
            return None


class _FutureOp:
    """The future's operation: ``start`` is ``consume(rcvr)`` ([exec.spawn.future])."""

    __slots__ = ("_rcvr", "_shared")

    def __init__(self, state: _FutureState, rcvr: CompletionReceiver) -> None:
        self._shared: _FutureState | None = state
        self._rcvr = rcvr

    def start(self) -> None:
        st = self._shared
        if st is None:
            raise twice_started(self)
        self._shared = None
        st._consume(self._rcvr)

    def close(self) -> None:
        """Drop a connected but never-started operation: abandon the work ([exec.spawn.future])."""
        st = self._shared
        if st is not None:
            self._shared = None
            st._abandon()

    def __del__(self) -> None:
        if getattr(self, "_shared", None) is not None:
            self.close()

    def _sx_describe(self) -> FutureHolder | None:
        """The future's state while this still holds it (its result can be consumed), for
        ``operation_tree()`` (``_contracts.Describable``)."""
        st = getattr(self, "_shared", None)
        return None if st is None else FutureHolder(st)


class _FutureSender(Sender[Any]):
    """The sender returned by ``spawn_future``: single-shot ([exec.snd.concepts],
    [exec.spawn.future])."""

    __slots__ = ("_shared",)

    def __init__(self, state: _FutureState) -> None:
        self._shared: _FutureState | None = state

    def connect(self, rcvr: Any) -> _FutureOp:
        st = self._shared
        if st is None:
            raise RuntimeError(
                "the sender returned by spawn_future is single-shot: it was already "
                "connected (or closed); its result can be consumed once ([exec.spawn.future])"
            )
        self._shared = None
        return _FutureOp(st, rcvr)

    def close(self) -> None:
        """Drop the future without consuming it: requests stop on the work if it is still
        running (abandon, [exec.spawn.future]); the scope keeps waiting for the work. Idempotent."""
        st = self._shared
        if st is not None:
            self._shared = None
            st._abandon()

    def __del__(self) -> None:
        if getattr(self, "_shared", None) is not None:
            self.close()

    def get_completion_signatures(self, env: Any = None) -> Any:
        """The work's signatures plus ``set_stopped_t()`` ([exec.spawn.future]); ``None`` if
        unknown."""
        st = self._shared
        if st is None:
            return None
        sigs = get_completion_signatures(st._sndr, st.get_env())
        if sigs is None:
            return None
        return sigs | completion_signatures(set_stopped_t())

    def __repr__(self) -> str:
        state = "pending" if self._shared is not None else "connected"
        return f"<spawn_future sender, {state}>"

    def _sx_describe(self) -> FutureHolder | None:
        """The future's state while this still holds it (its result can be consumed), for
        ``operation_tree()`` (``_contracts.Describable``)."""
        st = getattr(self, "_shared", None)
        return None if st is None else FutureHolder(st)


class spawn_future_t(Algorithm):
    """``spawn_future(sndr, token, env=sx.env())``: start ``sndr`` now; return its future.

    [exec.spawn.future], the scopes guide "Futures outlive their work".

    * Eager ([exec.spawn.future]): connects
      ``write_env(stop-when(token.wrap(sndr), ssource.get_token()), senv)``, then
      ``token.try_associate()``; if associated, the work is started before ``spawn_future`` returns;
      otherwise the future completes ``set_stopped()`` and ``sndr`` never runs (its operation is
      closed at once, as by ``spawn``). ``senv`` is chosen as for ``spawn`` ([exec.spawn]).
    * The work's stop token combines the future's own stop source, the scope's token
      (``counting_scope``) and any stop token in ``env`` ([exec.spawn.future]).
    * The returned sender is single-shot (a second ``connect`` raises ``RuntimeError``). Its
      operation completes with the work's result: inline inside ``start`` if the work has
      already finished, otherwise on the thread that finishes the work ([exec.spawn.future]).
    * Abandon ([exec.spawn.future], the scopes guide "Futures outlive their work"): dropping the
      future or a never-started operation of it, or calling ``close()`` on either, requests stop on
      the work if it is still running; the scope still waits for it. A stop request on the
      consumer's token does the same and completes the consumer ``set_stopped()`` at once
      (the scopes guide "Futures outlive their work"); the work stays tracked.
    * The association is released when the work completes (Python's decision, see
      the scopes guide "Futures outlive their work"; C++ holds it until the result is
      consumed): the result then lives in the future, which may be awaited inside or after
      an ``async with`` block, and a finished future never keeps its scope from joining.
    * An error result that nobody has consumed when the scope's join delivers is reported by
      that join (the ``async with`` block's ``ExceptionGroup``); one dropped unconsumed
      before that is recorded by the scope at once. With a scope token of another kind, an
      error result keeps its association until consumed or dropped, and a dropped one goes
      to ``token.record_error(err)`` if the token has it.
    * A ``BaseException`` raised while the work starts (user code run inline) propagates
      out of ``spawn_future``, and the association is released.
    * ``TypeError`` for a non-sender, a non-token or a non-environment ([exec.spawn.future]).

    Completion signatures: the future completes with the work's completions, plus
    ``set_stopped_t()`` ([exec.spawn.future]).

    Errors: the work's error is delivered to the future's consumer; an exception from
    ``connect`` propagates from ``spawn_future``.

    Cancellation: a stop request on the consumer's token (or dropping the future) requests stop
    on the work and completes the consumer ``set_stopped()``; not associated, the future
    completes stopped.

    Example:

    >>> import structexec as sx
    >>> scope = sx.simple_counting_scope()
    >>> fut = sx.spawn_future(sx.just(1), scope.get_token())
    >>> sx.sync_wait(fut)
    (1,)
    >>> sx.sync_wait(scope.join())
    ()
    """

    __slots__ = ()

    def __call__(self, sndr: Awaitable[T], token: Any, env: Any = EMPTY_ENV) -> Sender[T]:
        if type(token) in FAST_TOKENS:
            if not isinstance(sndr, Sender) or env is not EMPTY_ENV:
                check_args("spawn_future", sndr, token, env)
            scope = token._scope
            st = _FutureState(scope, True, fwd_env(with_scope_env(scope, env)), sndr)
            try:
                f = sys._getframe(1)
            except ValueError:  # called from a C-level thread entry
                f = sys._getframe(0)
            if f.f_code is _SCOPE_SPAWN_FUTURE[0]:
                f = f.f_back or f  # through scope.spawn_future(): the user's call is above
            st._code = f.f_code
            st._lasti = f.f_lasti
            op = connect(sndr, st)
            if scope._assoc.try_associate():
                st._start(op)
            else:
                drop_refused(op)
                st.set_stopped()  # [exec.spawn.future]: stored stopped; the work never runs
            return _FutureSender(st)
        check_args("spawn_future", sndr, token, env)
        wrapped = token.wrap(sndr)
        senv = spawned_env(sndr, env, wrapped)
        source = inplace_stop_source()
        child = stop_when(wrapped, source.get_token())
        gst = _FutureState(token, False, senv, child)
        gst._source = source
        op = connect(child, gst)
        if token.try_associate():
            gst._start(op)
        else:
            drop_refused(op)
            gst.set_stopped()
        return _FutureSender(gst)


spawn_future = spawn_future_t()

#: The code of ``_ScopeBase.spawn_future`` (set by ``_counting_scope``): a spawn site found
#: there is the library's, the user's call is one frame further up.
_SCOPE_SPAWN_FUTURE: list[CodeType | None] = [None]

snapshot_roots(_FutureState, _FutureOp, _FutureSender)  # sx.operation_tree()
