"""``spawn_future(sndr, token, env=env())``: start work eagerly, get its result later.

[exec.spawn.future], REQUIREMENTS 30, DESIGN.md 2.7.

``spawn_future`` starts the work before it returns (like ``spawn``) and returns a single-shot
sender, the *future*, that completes with the work's result. The state shared by the work and
the future resolves three events in one total order (30.7): ``complete`` (the work finished),
``consume`` (the future's operation started) and ``abandon`` (the future, or its operation,
was dropped or closed without being started). The first of ``complete`` and
``consume``/``abandon`` to happen only records itself; the second one acts. Both sides claim
their turn with ``list.pop()`` on a one-element list, which is atomic, so no lock is needed
unless the consumer's stop token can fire (DESIGN.md 2.7's consumer stop).
"""

from __future__ import annotations

import threading
from typing import Any

from ._completion_signatures import completion_signatures, get_completion_signatures
from ._domain import connect
from ._env import EMPTY_ENV, fwd_env, get_env, get_stop_token
from ._protocol import Algorithm, Sender, set_stopped_t, twice_started
from ._spawn import FAST_TOKENS, check_args, spawned_env
from ._stop_token import inplace_stop_source, is_unstoppable, stop_callback_for
from ._stop_when import StopTokenEnv, child_token, combined_stop_token, stop_when
from ._trampoline import trampoline_start

__all__ = ["spawn_future"]

_VALUE, _ERROR, _STOPPED = 0, 1, 2


class _FutureState:
    """``spawn-future-state``; also the receiver of the spawned work (30.2-30.8).

    ``_token`` is the scope token (generic path) or the scope itself (library scopes), with
    ``_fast`` telling which.
    """

    __slots__ = (
        "_associated",
        "_env",
        "_fast",
        "_flag",
        "_kind",
        "_lock",
        "_result",
        "_slot",
        "_source",
        "_stop_cb",
        "_stop_pending",
        "_token",
    )

    def __init__(self, token: Any, fast: bool, env: Any, source: inplace_stop_source) -> None:
        self._token = token
        self._fast = fast
        self._env = env
        self._source = source
        self._associated = False
        self._flag = [None]  # popped by whichever of complete / consume-or-abandon comes first
        self._slot: list[Any] = []  # the registered consumer, taken atomically with pop()
        self._kind = -1
        self._result: Any = None
        self._lock: Any = None
        self._stop_cb: Any = None
        self._stop_pending: Any = None

    # -- receiver of the spawned work (spawn-future-receiver)

    def get_env(self) -> Any:
        return self._env

    def set_value(self, *vals: Any) -> None:
        self._store(_VALUE, vals)

    def set_error(self, err: Any) -> None:
        self._store(_ERROR, err)

    def set_stopped(self) -> None:
        self._store(_STOPPED, None)

    def _store(self, kind: int, data: Any) -> None:
        if self._kind >= 0:
            raise RuntimeError(
                "the work given to spawn_future completed twice; an operation completes "
                "exactly once (REQUIREMENTS 2.2)"
            )
        self._kind = kind
        self._result = data
        self._complete()

    # -- the three events

    def _complete(self) -> None:
        try:
            self._flag.pop()
        except IndexError:
            pass
        else:
            return  # first: the result waits for consume or abandon (30.7)
        lock = self._lock
        if lock is not None:
            lock.acquire()
        try:
            rcvr = self._slot.pop()
        except IndexError:
            rcvr = None
        cb = self._stop_cb
        if lock is not None:
            lock.release()
        if rcvr is None:
            # Abandoned (dropped, closed, or the consumer was stopped): destroy (30.6).
            self._destroy(True)
            return
        if cb is not None:
            cb.close()  # deregister before completing the consumer (2.13)
        self._deliver(rcvr)

    def _consume(self, rcvr: Any) -> None:
        self._slot.append(rcvr)
        tok = get_stop_token(get_env(rcvr))
        lock = None
        if not is_unstoppable(tok) and tok.stop_possible():
            lock = self._lock = threading.RLock()
            lock.acquire()
        try:
            self._flag.pop()
        except IndexError:
            # The work has completed: deliver inline, inside start (30.5).
            if lock is not None:
                lock.release()
            self._slot.pop()
            self._deliver(rcvr)
            return
        if lock is None:
            return  # delivered by _complete
        # DESIGN.md 2.7: a stop request on the consumer abandons the work and completes the
        # consumer stopped at once. The lock orders the callback against _complete.
        cb = self._stop_cb = stop_callback_for(tok, self._on_consumer_stop)
        pending = self._stop_pending
        lock.release()
        if pending is not None:  # the callback ran inside the constructor, on this thread
            self._stop_pending = None
            cb.close()
            pending.set_stopped()

    def _on_consumer_stop(self) -> None:
        lock = self._lock
        lock.acquire()
        try:
            rcvr = self._slot.pop()
        except IndexError:
            rcvr = None  # _complete took it: it delivers the result
        cb = self._stop_cb
        if rcvr is not None and cb is None:
            self._stop_pending = rcvr
        lock.release()
        if rcvr is None:
            return
        self._source.request_stop()  # abandon: the work is still tracked by its scope
        if cb is not None:
            cb.close()  # from inside the callback itself: does not wait (5.4)
            rcvr.set_stopped()

    def _abandon(self) -> None:
        try:
            self._flag.pop()
        except IndexError:
            self._destroy(True)  # the work had completed: destroy now (30.6)
        else:
            self._source.request_stop()  # destroyed when the work completes (30.6)

    # -- delivery and release

    def _deliver(self, rcvr: Any) -> None:
        kind = self._kind
        data = self._result
        self._result = None
        if kind == _VALUE:
            rcvr.set_value(*data)
        elif kind == _ERROR:
            rcvr.set_error(data)
        else:
            rcvr.set_stopped()
        self._destroy(False)

    def _destroy(self, unconsumed: bool) -> None:
        """Release the association, after the state is done with (30.8).

        An error result that no consumer received is recorded by the scope (DESIGN.md 2.6).
        """
        token = self._token
        if unconsumed and self._kind == _ERROR:
            err = self._result
            self._result = None
            if self._fast:
                token._record_error(err)
            else:
                record = getattr(token, "record_error", None)
                if record is not None:
                    record(err)
        else:
            self._result = None
        if self._associated:
            self._associated = False
            if self._fast:
                token._disassociate()
            else:
                token.disassociate()


class _FutureOp:
    """The future's operation: ``start`` is ``consume(rcvr)`` (30.5)."""

    __slots__ = ("_rcvr", "_state")

    def __init__(self, state: _FutureState, rcvr: Any) -> None:
        self._state: _FutureState | None = state
        self._rcvr = rcvr

    def start(self) -> None:
        st = self._state
        if st is None:
            raise twice_started(self)
        self._state = None
        st._consume(self._rcvr)

    def close(self) -> None:
        """Drop a connected but never-started operation: abandon the work (30.6)."""
        st = self._state
        if st is not None:
            self._state = None
            st._abandon()

    def __del__(self) -> None:
        if getattr(self, "_state", None) is not None:
            self.close()


class _FutureSender(Sender[Any]):
    """The sender returned by ``spawn_future``: single-shot (2.15, 30.5)."""

    __slots__ = ("_cenv", "_sndr", "_state")

    def __init__(self, state: _FutureState, sndr: Any, cenv: Any) -> None:
        self._state: _FutureState | None = state
        self._sndr = sndr
        self._cenv = cenv

    def connect(self, rcvr: Any) -> _FutureOp:
        st = self._state
        if st is None:
            raise RuntimeError(
                "the sender returned by spawn_future is single-shot: it was already "
                "connected (or closed); its result can be consumed once (REQUIREMENTS 2.15, "
                "30.5)"
            )
        self._state = None
        self._sndr = self._cenv = None
        return _FutureOp(st, rcvr)

    def close(self) -> None:
        """Drop the future without consuming it: requests stop on the work if it is still
        running (abandon, 30.6); the scope keeps waiting for the work. Idempotent."""
        st = self._state
        if st is not None:
            self._state = None
            self._sndr = self._cenv = None
            st._abandon()

    def __del__(self) -> None:
        if getattr(self, "_state", None) is not None:
            self.close()

    def get_completion_signatures(self, env: Any = None) -> Any:
        """The work's signatures plus ``set_stopped_t()`` (30.10); ``None`` if unknown."""
        if self._sndr is None:
            return None
        sigs = get_completion_signatures(self._sndr, self._cenv)
        if sigs is None:
            return None
        return sigs | completion_signatures(set_stopped_t())

    def __repr__(self) -> str:
        state = "pending" if self._state is not None else "connected"
        return f"<spawn_future sender, {state}>"


class spawn_future_t(Algorithm):
    """``spawn_future(sndr, token, env=sx.env())``: start ``sndr`` now; return its future.

    [exec.spawn.future], REQUIREMENTS 30, DESIGN.md 2.7.

    * Eager (30.2): connects ``write_env(stop-when(token.wrap(sndr), ssource.get_token()),
      senv)``, then ``token.try_associate()``; if associated, the work is started before
      ``spawn_future`` returns; otherwise the future completes ``set_stopped()`` and ``sndr``
      never runs. ``senv`` is chosen as for ``spawn`` (29.2).
    * The work's stop token combines the future's own stop source, the scope's token
      (``counting_scope``) and any stop token in ``env`` (30.3).
    * The returned sender is single-shot (a second ``connect`` raises ``RuntimeError``). Its
      operation completes with the work's result: inline inside ``start`` if the work has
      already finished, otherwise on the thread that finishes the work (30.5).
    * Abandon (30.6, DESIGN.md 2.7): dropping the future or a never-started operation of it,
      or calling ``close()`` on either, requests stop on the work if it is still running; the
      scope still waits for it. A stop request on the consumer's token does the same and
      completes the consumer ``set_stopped()`` at once (DQ-7b); the work stays tracked.
    * The association is released after the result has been delivered, or when the work
      completes after an abandon, or at the abandon if the work had already completed (30.8).
      So a future that is neither awaited nor dropped keeps its scope from joining.
    * An error result that nobody consumes is recorded by the scope (DESIGN.md 2.6).
    * ``TypeError`` for a non-sender, a non-token or a non-environment (30.1).
    """

    __slots__ = ()

    def __call__(self, sndr: Any, token: Any, env: Any = EMPTY_ENV) -> Sender[Any]:
        check_args("spawn_future", sndr, token, env)
        source = inplace_stop_source()
        if type(token) in FAST_TOKENS:
            scope = token._scope
            senv = spawned_env(sndr, env)
            tok = child_token(source.get_token(), get_stop_token(senv))
            if scope._stop_token is not None:
                tok = combined_stop_token(scope._stop_token, tok)
            cenv = StopTokenEnv(tok, fwd_env(senv))
            st = _FutureState(scope, True, cenv, source)
            op = connect(sndr, st)
            if scope._try_associate():
                st._associated = True
                trampoline_start(op)
            else:
                st.set_stopped()
            return _FutureSender(st, sndr, cenv)
        wrapped = token.wrap(sndr)
        senv = spawned_env(sndr, env, wrapped)
        child = stop_when(wrapped, source.get_token())
        st = _FutureState(token, False, senv, source)
        op = connect(child, st)
        if token.try_associate():
            st._associated = True
            trampoline_start(op)
        else:
            st.set_stopped()
        return _FutureSender(st, child, senv)


spawn_future = spawn_future_t()
