"""``spawn`` ([exec.spawn]) and the scope-token protocol ([exec.scope.concepts])."""

from __future__ import annotations

import sys
import threading
from typing import Any

import pytest

import structexec as sx
from structexec.testing import ManualScheduler, RecordingReceiver, record_terminate

if sys.version_info < (3, 11):
    from exceptiongroup import ExceptionGroup

SCOPES = [sx.simple_counting_scope, sx.counting_scope]


class CountingToken:
    """A user-defined scope token ([exec.scope.concepts]): counts calls, wraps with a marker."""

    def __init__(self, admit: bool = True) -> None:
        self.admit = admit
        self.associated = 0
        self.calls: list[str] = []
        self.wrapped: list[Any] = []
        self.errors: list[Any] = []

    def try_associate(self) -> bool:
        self.calls.append("try_associate")
        if self.admit:
            self.associated += 1
        return self.admit

    def disassociate(self) -> None:
        self.calls.append("disassociate")
        assert self.associated > 0
        self.associated -= 1

    def wrap(self, sndr: Any) -> Any:
        self.calls.append("wrap")
        self.wrapped.append(sndr)
        return sndr

    def record_error(self, err: Any) -> None:
        self.errors.append(err)


class _Gate(sx.Sender[None]):
    """A sender that completes when the test opens it; records connect/start."""

    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.ops: list[Any] = []

    def connect(self, rcvr: Any) -> Any:
        self.log.append("connect")
        op = _GateOp(rcvr, self.log)
        self.ops.append(op)
        return op


class _GateOp:
    def __init__(self, rcvr: Any, log: list[str]) -> None:
        self.rcvr = rcvr
        self.log = log

    def start(self) -> None:
        self.log.append("start")

    def open(self) -> None:
        self.rcvr.set_value()


# --------------------------------------------------------------------------- arguments


@pytest.mark.parametrize("kind", SCOPES)
def test_spawn_returns_none_and_checks_arguments(kind: Any) -> None:
    scope = kind()
    tok = scope.get_token()
    assert sx.spawn(sx.just(), tok) is None
    with pytest.raises(TypeError, match=r"needs a sender.*int"):
        sx.spawn(42, tok)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"scope token.*object"):
        sx.spawn(sx.just(), object())
    with pytest.raises(TypeError, match=r"pass scope\.get_token"):
        sx.spawn(sx.just(), scope)
    with pytest.raises(TypeError, match="env must be an environment"):
        sx.spawn(sx.just(), tok, 3)
    assert scope.count == 0
    assert sx.sync_wait(scope.join()) == ()


# --------------------------------------------------------------------------- allocator


class _Alloc:
    def __repr__(self) -> str:
        return "alloc"


@pytest.mark.parametrize("kind", SCOPES)
def test_spawn_allocator_from_env(kind: Any) -> None:
    scope = kind()
    a = _Alloc()
    seen: list[Any] = []
    sx.spawn(
        sx.read_env(sx.get_allocator) | sx.then(seen.append),
        scope.get_token(),
        sx.prop(sx.get_allocator, a),
    )
    assert seen == [a]
    sx.sync_wait(scope.join())


class _WithAllocAttr(sx.Sender[None]):
    """A sender whose attributes name an allocator; it reports the allocator it sees."""

    def __init__(self, alloc: Any, seen: list[Any]) -> None:
        self.alloc = alloc
        self.seen = seen

    def get_env(self) -> Any:
        return sx.prop(sx.get_allocator, self.alloc)

    def connect(self, rcvr: Any) -> Any:
        seen = self.seen

        class Op:
            def start(self) -> None:
                seen.append(sx.get_allocator(sx.get_env(rcvr)))
                rcvr.set_value()

        return Op()


@pytest.mark.parametrize("kind", SCOPES)
def test_spawn_allocator_from_the_senders_attributes(kind: Any) -> None:
    """No allocator in env: the wrapped sender's attributes give it, and senv gets it."""
    scope = kind()
    a, b = _Alloc(), _Alloc()
    seen: list[Any] = []
    sx.spawn(_WithAllocAttr(a, seen), scope.get_token())
    # env's own allocator wins over the attributes
    sx.spawn(_WithAllocAttr(a, seen), scope.get_token(), sx.prop(sx.get_allocator, b))
    assert seen == [a, b]
    sx.sync_wait(scope.join())


@pytest.mark.parametrize("kind", SCOPES)
def test_spawn_without_any_allocator_fails_at_connect(kind: Any) -> None:
    """Neither env nor attributes have one: senv is env, so reading it fails at connect
    (and the failed spawn holds no association, [exec.spawn])."""
    scope = kind()
    with pytest.raises(TypeError, match="get_allocator"):
        sx.spawn(sx.read_env(sx.get_allocator) | sx.then(print), scope.get_token())
    assert scope.count == 0
    assert sx.sync_wait(scope.join()) == ()


# -------------------------------------------------------------------------- value datums and errors


@pytest.mark.parametrize("kind", SCOPES)
def test_spawn_of_value_datums_proven_by_metadata_raises(kind: Any) -> None:
    scope = kind()
    with pytest.raises(TypeError, match="value datums"):
        sx.spawn(sx.just(1), scope.get_token())
    assert scope.count == 0
    assert scope.state == "unused"


@pytest.mark.parametrize("kind", SCOPES)
def test_value_datums_at_run_time_are_reported_not_dropped(kind: Any) -> None:
    """[exec.spawn]: without metadata (then's result is unknown) the datums are found at run
    time; the scope reports the same TypeError a build-time check raises (never dropped
    silently), and names what to use instead."""
    scope = kind()
    sx.spawn(sx.just() | sx.then(lambda: 5), scope.get_token())
    assert scope.count == 0
    (err,) = scope.unhandled_errors
    assert isinstance(err, TypeError)
    assert "(5,)" in str(err) and "spawn_future" in str(err) and "start_soon" in str(err)
    with pytest.raises(ExceptionGroup):
        sx.sync_wait(scope.join())


@pytest.mark.parametrize("kind", SCOPES)
def test_error_completion_is_recorded_by_the_scope(kind: Any) -> None:
    """docs/scopes.md "What happens when things fail": an error of spawned work is kept by the
    scope, never lost."""
    scope = kind()
    err = KeyError("x")
    sx.spawn(sx.just_error(err), scope.get_token())
    assert scope.unhandled_errors == (err,)
    with pytest.raises(ExceptionGroup) as ei:
        sx.sync_wait(scope.join())
    assert ei.value.exceptions == (err,)


def test_user_token_gets_errors_through_record_error() -> None:
    tok = CountingToken()
    sx.spawn(sx.just_error("e"), tok)
    assert tok.errors == ["e"]
    assert tok.associated == 0


def test_user_token_without_record_error_terminates() -> None:
    class Bare:
        def __init__(self) -> None:
            self.n = 0

        def try_associate(self) -> bool:
            self.n += 1
            return True

        def disassociate(self) -> None:
            self.n -= 1

        def wrap(self, s: Any) -> Any:
            return s

    tok = Bare()
    with record_terminate() as calls:
        sx.spawn(sx.just_error(ValueError("lost")), tok)
    assert len(calls) == 1
    assert "record_error" in calls.reasons[0]
    assert isinstance(calls.calls[0][1], ValueError)
    assert tok.n == 0


# --------------------------------------------------------------------------- order of effects


@pytest.mark.parametrize("kind", SCOPES)
def test_spawn_starts_synchronously_before_returning(kind: Any) -> None:
    scope = kind()
    side: list[int] = []
    sx.spawn(sx.then(sx.just(), lambda: side.append(1)), scope.get_token())
    assert side == [1]
    sx.sync_wait(scope.join())


def test_spawn_order_of_effects_with_a_user_token() -> None:
    """wrap, connect, then try_associate, then start, then (at completion) disassociate."""
    log: list[str] = []
    tok = CountingToken()
    gate = _Gate(log)

    orig = tok.try_associate

    def try_associate() -> bool:
        log.append("try_associate")
        return orig()

    tok.try_associate = try_associate  # type: ignore[method-assign]
    sx.spawn(gate, tok)
    assert log == ["connect", "try_associate", "start"]
    assert tok.calls[0] == "wrap" and tok.wrapped == [gate]
    assert tok.associated == 1
    gate.ops[0].open()
    assert tok.associated == 0
    assert tok.calls[-1] == "disassociate"


@pytest.mark.parametrize("kind", SCOPES)
def test_closed_scope_drops_silently(kind: Any) -> None:
    scope = kind()
    scope.close()
    log: list[str] = []
    gate = _Gate(log)
    ran: list[int] = []
    assert sx.spawn(sx.just() | sx.then(lambda: ran.append(1)), scope.get_token()) is None
    sx.spawn(gate, scope.get_token())
    assert ran == []
    assert log == ["connect"]  # connected ([exec.spawn] step 2), never started
    assert scope.count == 0
    assert sx.sync_wait(scope.join()) == ()


def test_user_token_refusing_drops_silently() -> None:
    tok = CountingToken(admit=False)
    ran: list[int] = []
    sx.spawn(sx.just() | sx.then(lambda: ran.append(1)), tok)
    assert ran == []
    assert "disassociate" not in tok.calls


# --------------------------------------------------------------------------- connect failure


class _ConnectRaises(sx.Sender[None]):
    def connect(self, rcvr: Any) -> Any:
        raise OSError("cannot connect")


@pytest.mark.parametrize("kind", SCOPES)
def test_connect_exception_propagates_and_no_association_is_held(kind: Any) -> None:
    scope = kind()
    with pytest.raises(OSError, match="cannot connect"):
        sx.spawn(_ConnectRaises(), scope.get_token())
    assert scope.count == 0
    assert scope.state == "unused"
    tok = CountingToken()
    with pytest.raises(OSError):
        sx.spawn(_ConnectRaises(), tok)
    assert tok.associated == 0 and "try_associate" not in tok.calls


# --------------------------------------------------------------------------- join


@pytest.mark.parametrize("kind", SCOPES)
def test_join_completes_only_after_the_spawned_work(kind: Any) -> None:
    scope = kind()
    log: list[str] = []
    gate = _Gate(log)
    sx.spawn(gate, scope.get_token())
    r = RecordingReceiver(extra_env=sx.prop(sx.get_scheduler, sx.inline_scheduler()))
    r.run(scope.join())
    assert not r.done
    gate.ops[0].open()
    assert r.value == ()


# -------------------------------------------------------------------------- environment of the work


def test_simple_scope_work_sees_never_stop_token_and_no_scheduler() -> None:
    scope = sx.simple_counting_scope()
    toks: list[Any] = []
    sx.spawn(sx.read_env(sx.get_stop_token) | sx.then(toks.append), scope.get_token())
    assert toks == [sx.never_stop_token()]
    with pytest.raises(TypeError, match="get_scheduler"):
        sx.spawn(sx.read_env(sx.get_scheduler) | sx.then(toks.append), scope.get_token())
    sx.sync_wait(scope.join())


def test_counting_scope_work_sees_the_scope_token() -> None:
    scope = sx.counting_scope()
    toks: list[Any] = []
    sx.spawn(sx.read_env(sx.get_stop_token) | sx.then(toks.append), scope.get_token())
    assert toks[0].stop_possible()
    scope.request_stop()
    assert toks[0].stop_requested()
    sx.sync_wait(scope.join())


@pytest.mark.parametrize("kind", SCOPES)
def test_env_supplies_scheduler_and_stop_token(kind: Any) -> None:
    scope = kind()
    src = sx.inplace_stop_source()
    sch = sx.inline_scheduler()
    seen: list[Any] = []
    e = sx.env(sx.prop(sx.get_scheduler, sch), sx.prop(sx.get_stop_token, src.get_token()))
    sx.spawn(sx.read_env(sx.get_scheduler) | sx.then(seen.append), scope.get_token(), e)
    sx.spawn(sx.read_env(sx.get_stop_token) | sx.then(seen.append), scope.get_token(), e)
    assert seen[0] == sch
    tok = seen[1]
    assert not tok.stop_requested()
    src.request_stop()
    assert tok.stop_requested()  # env's token reaches the work ([exec.stop.when])
    sx.sync_wait(scope.join())


def test_counting_scope_combines_env_token_and_scope_token() -> None:
    scope = sx.counting_scope()
    src = sx.inplace_stop_source()
    toks: list[Any] = []
    sx.spawn(
        sx.read_env(sx.get_stop_token) | sx.then(toks.append),
        scope.get_token(),
        sx.prop(sx.get_stop_token, src.get_token()),
    )
    tok = toks[0]
    fired: list[int] = []
    cb = sx.stop_callback_for(tok, lambda: fired.append(1))
    scope.request_stop()
    src.request_stop()
    assert fired == [1]  # at most once ([exec.stop.when])
    cb.close()
    sx.sync_wait(scope.join())


# --------------------------------------------------------------------------- user scope tokens


def test_user_token_with_spawn_runs_and_releases() -> None:
    tok = CountingToken()
    ran: list[int] = []
    sch = ManualScheduler()
    sx.spawn(sx.schedule(sch) | sx.then(lambda: ran.append(1)), tok)
    assert tok.associated == 1
    sch.drain()
    assert ran == [1] and tok.associated == 0
    assert tok.calls == ["wrap", "try_associate", "disassociate"]


def test_token_wrap_decides_what_runs() -> None:
    """The token's wrap decides what runs (here: it replaces the sender)."""

    class Replacing(CountingToken):
        def wrap(self, sndr: Any) -> Any:
            return sx.just() | sx.then(lambda: out.append("wrapped"))

    out: list[str] = []
    sx.spawn(sx.just() | sx.then(lambda: out.append("original")), Replacing())
    assert out == ["wrapped"]


@pytest.mark.parametrize("kind", SCOPES)
def test_spawn_from_many_threads_completes_on_the_spawning_thread(kind: Any) -> None:
    scope = kind()
    tok = scope.get_token()
    seen: dict[int, set[int]] = {}
    lock = threading.Lock()

    def work(i: int) -> None:
        with lock:
            seen.setdefault(i, set()).add(threading.get_ident())

    threads = []
    for i in range(3):

        def run(i: int = i) -> None:
            for _ in range(200):
                sx.spawn(sx.just(i) | sx.then(work), tok)

        threads.append(threading.Thread(target=run))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {i: len(v) for i, v in seen.items()} == {0: 1, 1: 1, 2: 1}
    assert sx.sync_wait(scope.join()) == ()
