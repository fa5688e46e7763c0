"""Exposition-only ``stop-when`` ([exec.stop.when], [exec.recv.concepts])."""

from __future__ import annotations

import threading
from typing import Any

import structexec as sx
from structexec._algorithms._stop_when import stop_when
from structexec._core._stop_token import combined_stop_token
from structexec.testing import ManualScheduler, RecordingReceiver


def test_stop_when_with_an_unstoppable_token_gives_the_sender_itself() -> None:
    s = sx.just(1)
    assert stop_when(s, sx.never_stop_token()) is s


def test_stop_when_with_an_unstoppable_receiver_token_uses_the_given_token() -> None:
    src = sx.inplace_stop_source()
    r = RecordingReceiver(env=sx.env())  # no stop token: never_stop_token
    r.run(stop_when(sx.read_env(sx.get_stop_token), src.get_token()))
    assert r.value == (src.get_token(),)


def test_combined_stop_token_queries() -> None:
    src = sx.inplace_stop_source()
    r = RecordingReceiver()
    r.run(stop_when(sx.read_env(sx.get_stop_token), src.get_token()))
    (tok,) = r.value
    assert isinstance(tok, combined_stop_token)
    assert tok.stop_possible() and not tok.stop_requested()
    r.request_stop()
    assert tok.stop_requested()
    r2 = RecordingReceiver()
    r2.run(stop_when(sx.read_env(sx.get_stop_token), src.get_token()))
    (tok2,) = r2.value
    src.request_stop()
    assert tok2.stop_requested()
    # stop_possible is the or of both
    never_src = sx.inplace_stop_token()  # no source: cannot stop
    assert combined_stop_token(never_src, src.get_token()).stop_possible()
    assert not combined_stop_token(never_src, never_src).stop_possible()


def test_callback_fires_once_from_either_token() -> None:
    a, b = sx.inplace_stop_source(), sx.inplace_stop_source()
    tok = combined_stop_token(a.get_token(), b.get_token())
    fired: list[int] = []
    cb = sx.stop_callback_for(tok, lambda: fired.append(threading.get_ident()))
    b.request_stop()
    a.request_stop()
    assert fired == [threading.get_ident()]
    cb.close()
    # already stopped at registration: runs at once, once
    fired2: list[int] = []
    cb2 = sx.stop_callback_for(tok, lambda: fired2.append(1))
    assert fired2 == [1]
    cb2.close()


def test_callback_deregistered_from_both_tokens() -> None:
    a, b = sx.inplace_stop_source(), sx.inplace_stop_source()
    tok = combined_stop_token(a.get_token(), b.get_token())
    fired: list[int] = []
    cb = sx.stop_callback_for(tok, lambda: fired.append(1))
    assert len(a._callbacks) == 1 and len(b._callbacks) == 1
    cb.close()
    assert len(a._callbacks) == 0 and len(b._callbacks) == 0
    a.request_stop()
    b.request_stop()
    assert fired == []


def test_concurrent_requests_fire_once() -> None:
    for _ in range(200):
        a, b = sx.inplace_stop_source(), sx.inplace_stop_source()
        tok = combined_stop_token(a.get_token(), b.get_token())
        fired: list[int] = []
        cb = sx.stop_callback_for(tok, lambda fired=fired: fired.append(1))
        barrier = threading.Barrier(2)

        def go(src: Any, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            src.request_stop()

        ts = [threading.Thread(target=go, args=(s,)) for s in (a, b)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        cb.close()
        assert fired == [1]


def test_work_stops_on_scope_stop_and_on_consumer_stop() -> None:
    """counting_scope-wrapped work stops on request_stop() and on the consumer's request."""
    for who in ("scope", "consumer"):
        scope = sx.counting_scope()
        sch = ManualScheduler(stop_eagerly=True)
        r = RecordingReceiver()
        r.run(scope.get_token().wrap(sx.schedule(sch)))
        assert sch.pending == 1
        if who == "scope":
            scope.request_stop()
        else:
            r.request_stop()
        assert r.stopped, who
        assert sch.pending == 0
        assert r.live_callbacks_at_completion == 0  # [exec.stop.when], [exec.recv.concepts]
        assert len(scope._source._callbacks) == 0
        assert sx.sync_wait(scope.join()) == ()


def test_callbacks_deregistered_before_completion_on_value() -> None:
    scope = sx.counting_scope()
    sch = ManualScheduler(stop_eagerly=True)
    r = RecordingReceiver()
    r.run(scope.get_token().wrap(sx.schedule(sch)))
    assert len(scope._source._callbacks) == 1  # the schedule op's, via the combined token
    sch.run_one()
    assert r.value == ()
    assert r.live_callbacks_at_completion == 0
    assert len(scope._source._callbacks) == 0
    assert sx.sync_wait(scope.join()) == ()


def test_when_all_under_counting_scope_leaves_no_callback() -> None:
    scope = sx.counting_scope()
    sch = ManualScheduler(stop_eagerly=True)
    fut = sx.spawn_future(sx.when_all(sx.schedule(sch), sx.schedule(sch)), scope.get_token())
    r = RecordingReceiver()
    r.run(fut)
    scope.request_stop()
    assert r.wait().stopped
    assert r.live_callbacks_at_completion == 0
    assert len(scope._source._callbacks) == 0
    assert sx.sync_wait(scope.join()) == ()


def test_stop_when_forwards_attributes_and_signatures() -> None:
    src = sx.inplace_stop_source()
    sch = ManualScheduler()
    w = stop_when(sx.schedule(sch), src.get_token())
    assert sx.get_completion_scheduler[sx.set_value_t](sx.get_env(w)) is sch
    sigs = sx.get_completion_signatures(w, sx.env())
    assert sigs is not None and sx.set_stopped_t() in sigs  # the child now sees a stoppable token
    assert w.tag is stop_when and w.children[0] is not None


class _FlagToken:
    """A user-defined stoppable token type (callback_type protocol, [stopcallback.inplace])."""

    def __init__(self) -> None:
        self.requested = False
        self.callbacks: list[Any] = []

    def stop_requested(self) -> bool:
        return self.requested

    def stop_possible(self) -> bool:
        return True

    def fire(self) -> None:
        self.requested = True
        for cb in list(self.callbacks):
            cb.fn()


class _FlagCallback:
    def __init__(self, tok: _FlagToken, fn: Any) -> None:
        self.tok = tok
        self.fn = fn
        if tok.requested:
            fn()
        else:
            tok.callbacks.append(self)

    def close(self) -> None:
        if self in self.tok.callbacks:
            self.tok.callbacks.remove(self)


_FlagToken.callback_type = _FlagCallback  # type: ignore[attr-defined]


def test_combined_token_with_a_user_defined_receiver_token() -> None:
    """The receiver's token may be any stoppable token type: the combination still fires once
    and deregisters from both sides."""
    user = _FlagToken()
    scope = sx.counting_scope()
    sch = ManualScheduler(stop_eagerly=True)
    r = RecordingReceiver(env=sx.prop(sx.get_stop_token, user))
    r.run(scope.get_token().wrap(sx.schedule(sch)))
    assert len(user.callbacks) == 1 and len(scope._source._callbacks) == 1
    user.fire()
    assert r.stopped
    assert user.callbacks == [] and len(scope._source._callbacks) == 0
    scope.request_stop()  # no second firing
    assert r.completions == 1
    assert sx.sync_wait(scope.join()) == ()
