"""``associate`` ([exec.associate],
docs/scopes.md "Senders in a scope: `spawn`, `spawn_future`, `associate`")."""

from __future__ import annotations

import copy
import gc
from typing import Any

import pytest

import structexec as sx
from structexec.testing import ManualScheduler, RecordingReceiver

SCOPES = [sx.simple_counting_scope, sx.counting_scope]


def join_now(scope: Any) -> RecordingReceiver:
    r = RecordingReceiver(extra_env=sx.prop(sx.get_scheduler, sx.inline_scheduler()))
    r.run(scope.join())
    return r


class CountingToken:
    def __init__(self, admit: bool = True) -> None:
        self.admit = admit
        self.associated = 0
        self.log: list[str] = []

    def try_associate(self) -> bool:
        self.log.append("try_associate")
        if self.admit:
            self.associated += 1
        return self.admit

    def disassociate(self) -> None:
        self.log.append("disassociate")
        assert self.associated > 0
        self.associated -= 1

    def wrap(self, sndr: Any) -> Any:
        self.log.append("wrap")
        return sndr


@pytest.mark.parametrize("kind", SCOPES)
def test_eager_association_blocks_join(kind: Any) -> None:
    scope = kind()
    a = sx.associate(sx.just(1), scope.get_token())
    assert scope.count == 1 and a.associated
    j = join_now(scope)
    assert not j.done  # an unconnected associate-sender holds the scope open
    assert sx.sync_wait(a) == (1,)
    assert j.value == ()


def test_associate_calls_wrap_then_try_associate_and_pipes() -> None:
    tok = CountingToken()
    a = sx.just(1) | sx.associate(tok)
    assert tok.log == ["wrap", "try_associate"]
    assert sx.sync_wait(a) == (1,)
    assert tok.log == ["wrap", "try_associate", "disassociate"]


@pytest.mark.parametrize("kind", SCOPES)
def test_refused_association_completes_stopped_and_never_runs(kind: Any) -> None:
    scope = kind()
    scope.close()
    ran: list[int] = []
    a = sx.associate(sx.just() | sx.then(lambda: ran.append(1)), scope.get_token())
    assert not a.associated
    r = RecordingReceiver()
    r.run(a)
    assert r.stopped and ran == []
    assert a.release() is None


def test_copy_reassociates() -> None:
    scope = sx.simple_counting_scope()
    a = sx.associate(sx.just(1), scope.get_token())
    b = copy.copy(a)
    assert scope.count == 2 and b.associated
    assert sx.sync_wait(b) == (1,)
    assert sx.sync_wait(a) == (1,)
    assert scope.count == 0
    # a copy made when the scope refuses is unassociated and completes stopped
    c = sx.associate(sx.just(2), scope.get_token())
    scope.close()
    d = copy.copy(c)
    assert not d.associated and sx.sync_wait(d) is None
    assert sx.sync_wait(c) == (2,)
    # copying an unassociated sender gives an unassociated one (no try_associate)
    e = copy.copy(d)
    assert not e.associated
    assert join_now(scope).value == ()


def test_copy_failure_disassociates() -> None:
    class NoCopy(sx.Sender[None]):
        def connect(self, r: Any) -> Any:
            return sx.connect(sx.just(), r)

        def __copy__(self) -> Any:
            raise RuntimeError("no copies")

    tok = CountingToken()
    a = sx.associate(NoCopy(), tok)
    with pytest.raises(RuntimeError, match="no copies"):
        copy.copy(a)
    assert tok.associated == 1  # only the original's
    a.close()
    assert tok.associated == 0


@pytest.mark.parametrize("kind", SCOPES)
def test_connect_moves_the_association_and_second_connect_is_stopped(kind: Any) -> None:
    scope = kind()
    a = sx.associate(sx.just(1), scope.get_token())
    r1 = RecordingReceiver()
    op1 = r1.connect(a)
    assert not a.associated  # moved into the operation ([exec.associate])
    assert scope.count == 1
    r2 = RecordingReceiver()
    r2.run(a)  # a moved-from sender: completes stopped
    assert r2.stopped
    r1.start(op1)
    assert r1.value == (1,) and scope.count == 0
    assert join_now(scope).value == ()


@pytest.mark.parametrize("kind", SCOPES)
@pytest.mark.parametrize("how", ["close", "drop"])
def test_dropping_an_associated_sender_releases(kind: Any, how: str) -> None:
    scope = kind()
    ran: list[int] = []
    a = sx.associate(sx.just() | sx.then(lambda: ran.append(1)), scope.get_token())
    j = join_now(scope)
    if how == "close":
        a.close()
        a.close()  # idempotent
    else:
        del a
        gc.collect()
    assert ran == [] and scope.count == 0
    assert j.value == ()


def test_release_hands_over_token_and_wrapped() -> None:
    scope = sx.counting_scope()
    tok = scope.get_token()
    s = sx.just(1)
    a = sx.associate(s, tok)
    got = a.release()
    assert got is not None
    t, w = got
    assert t == tok
    assert sx.sync_wait(w) == (1,)  # the wrapped (stop-when) sender
    assert not a.associated and a.release() is None
    assert scope.count == 1  # the caller owns the association now
    t.disassociate()
    assert join_now(scope).value == ()


@pytest.mark.parametrize("kind", SCOPES)
def test_connect_failure_disassociates(kind: Any) -> None:
    class Bad(sx.Sender[None]):
        def connect(self, r: Any) -> Any:
            raise OSError("connect failed")

    scope = kind()
    a = sx.associate(Bad(), scope.get_token())
    with pytest.raises(OSError):
        RecordingReceiver().connect(a)
    assert scope.count == 0
    assert join_now(scope).value == ()


@pytest.mark.parametrize("kind", SCOPES)
@pytest.mark.parametrize("how", ["close", "drop"])
def test_never_started_operation_releases_on_close_or_drop(kind: Any, how: str) -> None:
    scope = kind()
    a = sx.associate(sx.just(), scope.get_token())
    op = RecordingReceiver().connect(a)
    assert scope.count == 1
    if how == "close":
        op.close()
        with pytest.raises(RuntimeError):
            op.start()
    else:
        del op
        gc.collect()
    assert scope.count == 0
    assert join_now(scope).value == ()


@pytest.mark.parametrize("kind", SCOPES)
def test_release_right_after_the_completion_is_delivered(kind: Any) -> None:
    """docs/scopes.md "Senders in a scope: `spawn`, `spawn_future`, `associate`": the association is
    released right after the downstream completion call returns: during the completion the scope
    still counts it."""
    scope = kind()
    sch = ManualScheduler()
    counts: list[int] = []

    class Rec(RecordingReceiver):
        def set_value(self, *vals: Any) -> None:
            counts.append(scope.count)
            super().set_value(*vals)

    r = Rec()
    r.run(sx.associate(sx.schedule(sch) | sx.then(lambda: 5), scope.get_token()))
    assert scope.count == 1
    sch.drain()
    assert r.value == (5,)
    assert counts == [1]
    assert scope.count == 0
    assert join_now(scope).value == ()


@pytest.mark.parametrize("kind", SCOPES)
@pytest.mark.parametrize(
    "sndr,kind_out",
    [(sx.just(1), "value"), (sx.just_error(KeyError()), "error"), (sx.just_stopped(), "stopped")],
)
def test_every_completion_is_forwarded_and_releases(kind: Any, sndr: Any, kind_out: str) -> None:
    scope = kind()
    r = RecordingReceiver()
    r.run(sx.associate(sndr, scope.get_token()))
    assert r.kind == kind_out
    assert scope.count == 0
    assert join_now(scope).value == ()


def test_child_sees_the_receivers_full_env() -> None:
    """The wrapped sender is connected to the receiver itself: non-forwarding queries too."""

    class MyQuery(sx.Query):
        forwarding = False

    q = MyQuery()
    scope = sx.simple_counting_scope()
    r = RecordingReceiver(extra_env=sx.prop(q, "mine"))
    r.run(sx.associate(sx.read_env(q), scope.get_token()))
    assert r.value == ("mine",)
    assert join_now(scope).value == ()


def test_counting_scope_stop_reaches_associated_work() -> None:
    scope = sx.counting_scope()
    sch = ManualScheduler()
    r = RecordingReceiver()
    r.run(sx.associate(sx.schedule(sch), scope.get_token()))
    scope.request_stop()
    sch.drain()
    assert r.stopped
    assert r.live_callbacks_at_completion == 0
    assert join_now(scope).value == ()


def test_associate_signatures_add_stopped() -> None:
    scope = sx.simple_counting_scope()
    a = sx.associate(sx.just(1), scope.get_token())
    assert sx.get_completion_signatures(a) == sx.completion_signatures(
        sx.set_value_t(int), sx.set_stopped_t()
    )
    a.close()
    assert sx.get_completion_signatures(a) == sx.completion_signatures(sx.set_stopped_t())
    assert join_now(scope).value == ()


def test_associate_bad_arguments_raise_type_error() -> None:
    tok = sx.simple_counting_scope().get_token()
    with pytest.raises(TypeError, match="needs a sender"):
        sx.associate(3, tok)
    with pytest.raises(TypeError, match="scope token"):
        sx.associate(sx.just(), 3)
    with pytest.raises(TypeError, match="scope token"):
        sx.associate(3)
    with pytest.raises(TypeError, match="takes"):
        sx.associate(sx.just(), tok, 3)


def test_associate_tag_and_data() -> None:
    scope = sx.simple_counting_scope()
    tok = scope.get_token()
    a = sx.associate(sx.just(1), tok)
    assert a.tag is sx.associate
    assert a.data[0] == tok
    a.close()
    assert join_now(scope).value == ()


def test_user_scope_token_with_associate() -> None:
    tok = CountingToken()
    assert sx.sync_wait(sx.associate(sx.just(3), tok)) == (3,)
    assert tok.associated == 0
    assert sx.sync_wait(sx.associate(sx.just(3), CountingToken(admit=False))) is None


def _assoc(tok: Any, ran: list[int], child: Any = None) -> Any:
    c = sx.just() if child is None else child
    return sx.associate(c | sx.then(lambda *_: ran.append(1)), tok)


def _then_over(tok: Any, ran: list[int]) -> Any:
    """An adaptor over the associate sender: its operation and the associate operation
    refer to each other (a reference cycle until it completes or is closed)."""
    return sx.then(_assoc(tok, ran), lambda *_: None)


def _let_holding(tok: Any, ran: list[int]) -> Any:
    """A ``let_value`` whose function holds the associate sender (not connected yet)."""
    a = _assoc(tok, ran)
    return sx.let_value(sx.just() | sx.then(lambda: None), lambda: a)


def _when_all_let_stopped(tok: Any, ran: list[int]) -> Any:
    return sx.let_stopped(sx.when_all(_assoc(tok, ran, sx.just_stopped())), lambda: sx.just())


def _when_all_two_upon_stopped(tok: Any, ran: list[int]) -> Any:
    pair = sx.when_all(_assoc(tok, ran, sx.just_error(OSError("x"))), _assoc(tok, ran))
    return sx.upon_error(sx.upon_stopped(pair, lambda: None), lambda e: None)


SHAPES = {
    "then": _then_over,
    "let_value": _let_holding,
    "when_all_let_stopped": _when_all_let_stopped,
    "when_all_two_upon_stopped": _when_all_two_upon_stopped,
}


def _spawn_refused(how: str, work: Any) -> Any:
    """Give ``work`` to a scope that refuses the association; returns the future for
    ``spawn_future``, else ``None``."""
    joined = sx.counting_scope()
    assert join_now(joined).value == ()  # joined: every try_associate() is refused
    tok: Any = CountingToken(admit=False) if how.endswith("user_token") else joined.get_token()
    if how.startswith("spawn_future"):
        return sx.spawn_future(work, tok)
    if how == "spawn_env":
        return sx.spawn(work, tok, sx.prop(sx.get_allocator, None))
    if how == "scope_spawn":
        return joined.spawn(work)
    return sx.spawn(work, tok)


@pytest.mark.parametrize("kind", SCOPES)
@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize(
    "how",
    [
        "spawn",
        "spawn_env",
        "scope_spawn",
        "spawn_user_token",
        "spawn_future",
        "spawn_future_user_token",
    ],
)
def test_work_refused_by_spawn_releases_its_associations_without_gc(
    kind: Any, shape: str, how: str
) -> None:
    """[exec.spawn], [exec.spawn.future]: when the scope refuses the association the connected
    operation is dropped, and with it the associations its work holds (here of another scope,
    taken eagerly by ``associate``): by ``spawn`` before it returns, by ``spawn_future`` once its
    future (stored stopped) is consumed, never left to the cycle collector: the other scope's
    ``join()`` completes with gc off, and the work never runs."""
    other = kind()
    ran: list[int] = []
    work = SHAPES[shape](other.get_token(), ran)
    assert other.count >= 1
    gc.collect()
    gc.disable()
    try:
        fut = _spawn_refused(how, work)
        del work
        if fut is not None:
            assert sx.sync_wait(fut) is None  # a refused future is stored stopped
            del fut
        assert other.count == 0
        assert join_now(other).value == ()
    finally:
        gc.enable()
    assert ran == []
