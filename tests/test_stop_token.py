"""Stop tokens:  ([thread.stoptoken]) and docs/senders.md "What happens when things fail"."""

from __future__ import annotations

import copy
import functools
import pickle
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from structexec._core import _errors
from structexec._core._stop_token import (
    StopCallback,
    inplace_stop_callback,
    inplace_stop_source,
    inplace_stop_token,
    is_unstoppable,
    never_stop_token,
    stop_callback_for,
)

JOIN_TIMEOUT = 10.0


@pytest.fixture
def terminate_calls() -> Iterator[list[tuple[str, BaseException | None]]]:
    """Install a terminate handler that records its calls
    (docs/senders.md "What happens when things fail"); restore it."""
    calls: list[tuple[str, BaseException | None]] = []

    def record(reason: str, exc: BaseException | None) -> None:
        calls.append((reason, exc))

    previous = _errors.set_terminate_handler(record)
    try:
        yield calls
    finally:
        _errors.set_terminate_handler(previous)


@pytest.fixture
def tiny_switch_interval() -> Iterator[None]:
    """Make the GIL switch threads very often so that races actually interleave."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(previous)


def start(fn: Callable[[], object]) -> threading.Thread:
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    return t


def join(*threads: threading.Thread) -> None:
    for t in threads:
        t.join(JOIN_TIMEOUT)
        assert not t.is_alive(), "thread did not finish"


# ----------------------------------------------------------------------------- request_stop


def test_request_stop_true_only_once() -> None:
    """[stoptoken.concepts]: request_stop returns True only for the call that made the request."""
    src = inplace_stop_source()
    tok = src.get_token()
    assert not src.stop_requested()
    assert not tok.stop_requested()
    assert src.request_stop() is True
    assert src.stop_requested()
    assert tok.stop_requested()
    assert src.get_token().stop_requested()
    assert src.request_stop() is False
    assert src.request_stop() is False
    assert tok.stop_requested()


def _concurrent_request_round(n_callbacks: int) -> None:
    src = inplace_stop_source()
    tok = src.get_token()
    runs = [0] * n_callbacks
    cbs = []
    for i in range(n_callbacks):

        def bump(i: int = i) -> None:
            runs[i] += 1

        cbs.append(inplace_stop_callback(tok, bump))
    barrier = threading.Barrier(8)
    results: list[bool] = []
    lock = threading.Lock()

    def requester() -> None:
        barrier.wait()
        r = src.request_stop()
        with lock:
            results.append(r)

    threads = [start(requester) for _ in range(8)]
    join(*threads)
    assert sorted(results) == [False] * 7 + [True]
    assert runs == [1] * n_callbacks
    for cb in cbs:
        cb.close()


@pytest.mark.parametrize("n_callbacks", [0, 1, 50])
@pytest.mark.usefixtures("tiny_switch_interval")
def test_concurrent_request_stop_exactly_one_true(n_callbacks: int) -> None:
    """[stoptoken.concepts]: with 8 concurrent request_stop calls exactly one returns True;
    callbacks run once."""
    for _ in range(20):
        _concurrent_request_round(n_callbacks)


# ----------------------------------------------------------------------------- where callbacks run


def test_callbacks_run_on_requesting_thread_before_return() -> None:
    """[stoptoken.concepts]: every callback runs synchronously inside request_stop, on the
    requesting thread."""
    src = inplace_stop_source()
    tok = src.get_token()
    seen: list[tuple[int, int]] = []
    cbs = []
    for i in range(5):

        def record(i: int = i) -> None:
            seen.append((i, threading.get_ident()))

        cbs.append(inplace_stop_callback(tok, record))
    requester_ident: list[int] = []

    def requester() -> None:
        requester_ident.append(threading.get_ident())
        assert src.request_stop()
        assert sorted(i for i, _ in seen) == [0, 1, 2, 3, 4]

    join(start(requester))
    assert sorted(i for i, _ in seen) == [0, 1, 2, 3, 4]
    assert {ident for _, ident in seen} == set(requester_ident)
    assert requester_ident[0] != threading.get_ident()
    for cb in cbs:
        cb.close()


def test_callback_registered_inside_a_callback_runs_immediately() -> None:
    """[stoptoken.concepts]: a callback registered while callbacks run (stop already requested)
    runs at once."""
    src = inplace_stop_source()
    tok = src.get_token()
    log: list[str] = []

    def outer() -> None:
        log.append("outer")
        inplace_stop_callback(tok, lambda: log.append("inner"))
        log.append("outer-end")

    with inplace_stop_callback(tok, outer):
        src.request_stop()
    assert log == ["outer", "inner", "outer-end"]


def test_request_stop_from_callback_returns_false() -> None:
    """[stoptoken.concepts]: a nested request_stop from inside a callback returns False, nothing
    reruns."""
    src = inplace_stop_source()
    nested: list[bool] = []
    runs = [0]

    def cb() -> None:
        runs[0] += 1
        nested.append(src.request_stop())

    with inplace_stop_callback(src.get_token(), cb):
        assert src.request_stop() is True
    assert nested == [False]
    assert runs == [1]


# ----------------------------------------------------------------------------- registering


def test_already_stopped_runs_in_constructor_on_constructing_thread() -> None:
    """[stoptoken.concepts]: constructing on a stopped token invokes fn immediately, in the
    constructor."""
    src = inplace_stop_source()
    src.request_stop()
    log: list[tuple[str, int]] = []
    log.append(("before", threading.get_ident()))
    cb = inplace_stop_callback(src.get_token(), lambda: log.append(("fn", threading.get_ident())))
    log.append(("after", threading.get_ident()))
    me = threading.get_ident()
    assert log == [("before", me), ("fn", me), ("after", me)]
    cb.close()
    assert len(log) == 3

    other: list[int] = []

    def construct() -> None:
        inplace_stop_callback(src.get_token(), lambda: other.append(threading.get_ident()))
        other.append(-1)

    t = start(construct)
    join(t)
    assert other == [t.ident, -1]


def test_not_stop_possible_registers_nothing() -> None:
    """[stoptoken.concepts], [stoptoken.inplace]: a token without source registers nothing and never
    invokes the callback."""
    tok = inplace_stop_token()
    runs: list[int] = []
    cb = inplace_stop_callback(tok, lambda: runs.append(1))
    cb.close()
    cb.close()
    assert runs == []
    with stop_callback_for(tok, lambda: runs.append(2)):
        pass
    assert runs == []


def test_registered_callback_runs_on_request_not_before() -> None:
    """[stoptoken.concepts]: on a live token the callback is registered and runs only at
    request_stop."""
    src = inplace_stop_source()
    runs: list[int] = []
    cb = inplace_stop_callback(src.get_token(), lambda: runs.append(1))
    assert runs == []
    src.request_stop()
    assert runs == [1]
    src.request_stop()
    cb.close()
    assert runs == [1]


# ----------------------------------------------------------------------------- close


def test_callback_close_prevents_invocation() -> None:
    """[stoptoken.concepts]: after close() returns the callback is never invoked; close() is
    idempotent."""
    src = inplace_stop_source()
    runs: list[str] = []
    a = inplace_stop_callback(src.get_token(), lambda: runs.append("a"))
    b = inplace_stop_callback(src.get_token(), lambda: runs.append("b"))
    with inplace_stop_callback(src.get_token(), lambda: runs.append("c")) as c:
        assert isinstance(c, inplace_stop_callback)
    a.close()
    a.close()
    src.request_stop()
    assert runs == ["b"]
    b.close()
    b.close()
    assert runs == ["b"]


def test_close_from_other_thread_waits_for_running_callback() -> None:
    """[stoptoken.concepts]: close() on another thread blocks until the executing callback has
    returned."""
    src = inplace_stop_source()
    entered = threading.Event()
    release = threading.Event()
    events: list[str] = []

    def slow() -> None:
        events.append("callback-start")
        entered.set()
        assert release.wait(JOIN_TIMEOUT)
        events.append("callback-end")

    cb = inplace_stop_callback(src.get_token(), slow)
    requester = start(src.request_stop)
    assert entered.wait(JOIN_TIMEOUT)
    closing = threading.Event()

    def closer() -> None:
        closing.set()
        cb.close()
        events.append("close-returned")

    closer_thread = start(closer)
    assert closing.wait(JOIN_TIMEOUT)
    # The closer is (or is about to be) blocked; give it ample time to return wrongly.
    closer_thread.join(0.2)
    assert closer_thread.is_alive(), "close() returned while the callback was running"
    assert events == ["callback-start"]
    release.set()
    join(closer_thread, requester)
    assert events == ["callback-start", "callback-end", "close-returned"]


def test_close_from_inside_callback_does_not_deadlock() -> None:
    """[stoptoken.concepts]: close() from inside the callback itself (same thread) returns at
    once."""
    src = inplace_stop_source()
    holder: list[inplace_stop_callback] = []
    events: list[str] = []

    def self_closing() -> None:
        events.append("start")
        holder[0].close()
        events.append("closed-self")

    holder.append(inplace_stop_callback(src.get_token(), self_closing))
    t = start(src.request_stop)
    join(t)
    assert events == ["start", "closed-self"]
    holder[0].close()


def test_callback_closing_a_sibling_prevents_it() -> None:
    """[stoptoken.concepts]: a callback that closes a not-yet-run sibling means the sibling never
    runs."""
    src = inplace_stop_source()
    tok = src.get_token()
    runs: list[str] = []
    cbs: dict[str, inplace_stop_callback] = {}

    def make(name: str) -> Callable[[], None]:
        def fn() -> None:
            runs.append(name)
            other = "b" if name == "a" else "a"
            cbs[other].close()

        return fn

    cbs["a"] = inplace_stop_callback(tok, make("a"))
    cbs["b"] = inplace_stop_callback(tok, make("b"))
    src.request_stop()
    assert runs in (["a"], ["b"])
    for cb in cbs.values():
        cb.close()


def _close_vs_request_round() -> None:
    src = inplace_stop_source()
    closed = threading.Event()
    late: list[bool] = []

    def fn() -> None:
        late.append(closed.is_set())

    cb = inplace_stop_callback(src.get_token(), fn)
    barrier = threading.Barrier(2)

    def closer() -> None:
        barrier.wait()
        cb.close()
        closed.set()

    def requester() -> None:
        barrier.wait()
        src.request_stop()

    join(start(closer), start(requester))
    # Either close() won (nothing ran) or the callback ran, entirely before close returned.
    assert late in ([], [False])


@pytest.mark.usefixtures("tiny_switch_interval")
def test_close_racing_request_stop_never_runs_after_close() -> None:
    """[stoptoken.concepts]: racing close() against request_stop: a callback never starts after
    close."""
    for _ in range(200):
        _close_vs_request_round()


def _register_vs_request_round() -> bool:
    src = inplace_stop_source()
    tok = src.get_token()
    counts = [0] * 400
    lock = threading.Lock()
    halfway = threading.Event()
    requesting = threading.Event()
    ran_on: list[int] = []

    def registrar(offset: int) -> None:
        for i in range(offset, offset + 200):
            if i == offset + 100:
                halfway.set()
                assert requesting.wait(JOIN_TIMEOUT)

            def fn(i: int = i) -> None:
                with lock:
                    counts[i] += 1
                    ran_on.append(threading.get_ident())

            inplace_stop_callback(tok, fn)  # left registered on purpose

    def requester() -> None:
        assert halfway.wait(JOIN_TIMEOUT)
        requesting.set()
        src.request_stop()

    r1, r2, rq = start(lambda: registrar(0)), start(lambda: registrar(200)), start(requester)
    join(r1, r2, rq)
    assert counts == [1] * 400
    # Were both paths exercised: run by request_stop, and run at once by a late constructor?
    return rq.ident in ran_on and bool({r1.ident, r2.ident} & set(ran_on))


@pytest.mark.usefixtures("tiny_switch_interval")
def test_registration_racing_request_stop_runs_exactly_once() -> None:
    """[stoptoken.concepts]: every registration racing a request runs exactly once (none is
    lost)."""
    both_paths = [_register_vs_request_round() for _ in range(50)]
    assert any(both_paths), "the race never interleaved registration with the request"


# ----------------------------------------------------------------------------- raising callbacks


def test_raising_callback_calls_terminate_and_others_still_run(
    terminate_calls: list[tuple[str, BaseException | None]],
) -> None:
    """[stoptoken.concepts]/docs/senders.md "What happens when things fail": a raising callback
    calls terminate; the other callbacks still run."""
    src = inplace_stop_source()
    tok = src.get_token()
    runs: list[str] = []
    boom = ValueError("boom")

    def bad() -> None:
        runs.append("bad")
        raise boom

    cbs = [
        inplace_stop_callback(tok, lambda: runs.append("a")),
        inplace_stop_callback(tok, bad),
        inplace_stop_callback(tok, lambda: runs.append("b")),
    ]
    assert src.request_stop() is True
    assert sorted(runs) == ["a", "b", "bad"]
    assert terminate_calls == [("stop callback raised", boom)]
    for cb in cbs:
        cb.close()


def test_raising_callback_in_constructor_calls_terminate(
    terminate_calls: list[tuple[str, BaseException | None]],
) -> None:
    """[stoptoken.concepts]: a callback run in the constructor that raises calls terminate, not
    the caller."""
    src = inplace_stop_source()
    src.request_stop()
    boom = RuntimeError("x")

    def bad() -> None:
        raise boom

    inplace_stop_callback(src.get_token(), bad).close()
    assert terminate_calls == [("stop callback raised", boom)]


def test_raising_terminate_handler_still_runs_others() -> None:
    """[stoptoken.concepts]: a terminate handler that raises: remaining callbacks run, then it
    propagates."""

    class HandlerError(Exception):
        pass

    def handler(reason: str, exc: BaseException | None) -> None:
        raise HandlerError(reason)

    previous = _errors.set_terminate_handler(handler)
    try:
        src = inplace_stop_source()
        runs: list[str] = []
        cbs = [
            inplace_stop_callback(src.get_token(), lambda: runs.append("ok1")),
            inplace_stop_callback(src.get_token(), lambda: 1 / 0),
            inplace_stop_callback(src.get_token(), lambda: runs.append("ok2")),
        ]
        with pytest.raises(HandlerError):
            src.request_stop()
        assert sorted(runs) == ["ok1", "ok2"]
        assert src.stop_requested()
        for cb in cbs:
            cb.close()  # nothing is left executing: must not block
    finally:
        _errors.set_terminate_handler(previous)


# ----------------------------------------------------------------- never_stop_token, is_unstoppable


def test_never_stop_token_never_stops_and_all_are_equal() -> None:
    """[stoptoken.never]: never_stop_token never stops, cannot stop, callbacks are no-ops, all
    equal."""
    a, b = never_stop_token(), never_stop_token()
    assert a == b
    assert a is b
    assert hash(a) == hash(b)
    assert a.stop_requested() is False
    assert a.stop_possible() is False
    assert a != inplace_stop_token()
    assert copy.copy(a) is a
    assert copy.deepcopy(a) is a
    assert pickle.loads(pickle.dumps(a)) is a
    runs: list[int] = []
    cb = never_stop_token.callback_type(a, lambda: runs.append(1))
    cb.close()
    cb.close()
    with stop_callback_for(a, lambda: runs.append(2)) as cb2:
        assert isinstance(cb2, StopCallback)
    assert runs == []


def test_is_unstoppable_is_a_static_property_of_the_token_type() -> None:
    """[stoptoken.concepts]: is_unstoppable is a static property of the token type; never calls
    stop_possible."""

    class Unstoppable:
        unstoppable = True

        def stop_possible(self) -> bool:
            raise AssertionError("is_unstoppable must not call stop_possible()")

    class Plain:
        def stop_possible(self) -> bool:
            raise AssertionError("is_unstoppable must not call stop_possible()")

    assert is_unstoppable(never_stop_token())
    assert is_unstoppable(Unstoppable())
    assert not is_unstoppable(Plain())
    assert not is_unstoppable(inplace_stop_source().get_token())
    # A source-less inplace_stop_token cannot stop, but its type is not unstoppable.
    assert not is_unstoppable(inplace_stop_token())


# ---------------------------------------------------------------- inplace tokens, stop_callback_for


def test_default_inplace_token_and_token_identity() -> None:
    """[stoptoken.inplace], [stopsource.inplace]: default token has no source; tokens of one source
    are equal; stop_possible True."""
    t = inplace_stop_token()
    assert t.stop_possible() is False
    assert t.stop_requested() is False
    assert t == inplace_stop_token()
    src = inplace_stop_source()
    other = inplace_stop_source()
    assert src.stop_possible() is True
    assert src.get_token() == src.get_token()
    assert hash(src.get_token()) == hash(inplace_stop_token(src))
    assert src.get_token() == inplace_stop_token(src)
    assert src.get_token() != other.get_token()
    assert src.get_token() != t
    assert src.get_token().stop_possible() is True
    assert inplace_stop_token.callback_type is inplace_stop_callback
    src.request_stop()
    assert src.stop_possible() is True
    assert src.get_token().stop_possible() is True
    assert not other.get_token().stop_requested()


@pytest.mark.parametrize(
    "op",
    [copy.copy, copy.deepcopy, pickle.dumps],
    ids=["copy", "deepcopy", "pickle"],
)
def test_inplace_stop_source_and_callback_not_copyable(op: Callable[[Any], Any]) -> None:
    """[stoptoken.inplace], [stopsource.inplace], [stopcallback.inplace]: inplace_stop_source and
    inplace_stop_callback are not copyable or movable."""
    src = inplace_stop_source()
    with pytest.raises(TypeError, match="not copyable"):
        op(src)
    cb = inplace_stop_callback(src.get_token(), lambda: None)
    with pytest.raises(TypeError, match="not copyable"):
        op(cb)
    cb.close()


def test_stop_callback_for_dispatches_on_callback_type() -> None:
    """[stopcallback.inplace]: stop_callback_for uses Token.callback_type (stop_callback_for_t)."""
    src = inplace_stop_source()
    runs: list[str] = []
    cb = stop_callback_for(src.get_token(), lambda: runs.append("inplace"))
    assert type(cb) is inplace_stop_callback
    assert isinstance(cb, StopCallback)

    class MyCallback:
        def __init__(self, token: MyToken, fn: Callable[[], object]) -> None:
            token.registered.append(fn)
            self.token = token
            self.fn = fn

        def close(self) -> None:
            self.token.registered.remove(self.fn)

        def __enter__(self) -> MyCallback:
            return self

        def __exit__(self, *exc: object) -> None:
            self.close()

    class MyToken:
        callback_type = MyCallback

        def __init__(self) -> None:
            self.registered: list[Callable[[], object]] = []

        def stop_requested(self) -> bool:
            return False

        def stop_possible(self) -> bool:
            return True

    mine = MyToken()
    with stop_callback_for(mine, lambda: runs.append("mine")) as my_cb:
        assert type(my_cb) is MyCallback
        assert len(mine.registered) == 1
        mine.registered[0]()
    assert mine.registered == []

    src.request_stop()
    cb.close()
    assert runs == ["mine", "inplace"]


def test_stop_callback_for_token_without_callback_type() -> None:
    """[stopcallback.inplace], [stoptoken.concepts]: no callback_type: no-op if it cannot stop, else
    TypeError naming the type."""

    class CannotStop:
        def stop_requested(self) -> bool:
            return False

        def stop_possible(self) -> bool:
            return False

    class CanStop:
        def stop_requested(self) -> bool:
            return False

        def stop_possible(self) -> bool:
            return True

    runs: list[int] = []
    with stop_callback_for(CannotStop(), lambda: runs.append(1)) as cb:
        cb.close()
    assert runs == []
    with pytest.raises(TypeError, match=r"CanStop.*callback_type"):
        stop_callback_for(CanStop(), lambda: None)
    with pytest.raises(TypeError, match="not a stop token"):
        stop_callback_for(object(), lambda: None)


def test_inplace_stop_callback_rejects_other_tokens() -> None:
    """[stopcallback.inplace]: inplace_stop_callback needs an inplace_stop_token."""
    with pytest.raises(TypeError, match="inplace_stop_token"):
        inplace_stop_callback(never_stop_token(), lambda: None)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- property


_ops = st.lists(
    st.one_of(
        st.tuples(st.just("register"), st.integers(0, 7)),
        st.tuples(st.just("close"), st.integers(0, 7)),
        st.tuples(st.just("request"), st.just(0)),
    ),
    max_size=40,
)


@settings(deadline=None, max_examples=300)
@given(_ops)
def test_stop_callbacks_agree_with_the_model(ops: list[tuple[str, int]]) -> None:
    """[stoptoken.concepts] model: what ran is exactly what was registered-and-open at the
    request, plus what was registered after it (run at once); nothing runs twice or after close."""
    src = inplace_stop_source()
    tok = src.get_token()
    ran: list[int] = []  # serial numbers of registrations, in the order they ran
    live: dict[int, tuple[int, inplace_stop_callback]] = {}  # slot -> (serial, callback)
    model_live: set[int] = set()  # serials registered and not closed, before the request
    expected: list[int] = []
    requested = False
    serial = 0
    for op, slot in ops:
        if op == "register":
            if slot in live:  # reusing a slot closes its previous callback first
                old, old_cb = live.pop(slot)
                old_cb.close()
                model_live.discard(old)
            serial += 1
            n = serial
            before = len(ran)
            cb = inplace_stop_callback(tok, functools.partial(ran.append, n))
            live[slot] = (n, cb)
            if requested:
                expected.append(n)
                assert ran[before:] == [n], "runs at once in the constructor"
            else:
                model_live.add(n)
                assert len(ran) == before
        elif op == "close":
            if slot in live:
                n, cb = live.pop(slot)
                cb.close()
                model_live.discard(n)
        else:
            before = len(ran)
            assert src.request_stop() is (not requested)
            if not requested:
                assert sorted(ran[before:]) == sorted(model_live)
                expected.extend(model_live)
                model_live.clear()
                requested = True
            else:
                assert len(ran) == before
    for _, cb in live.values():
        cb.close()
    assert sorted(ran) == sorted(expected)
    assert len(set(ran)) == len(ran)
