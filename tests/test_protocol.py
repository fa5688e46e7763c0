"""The sender/receiver protocol: [exec.general], [exec.snd.concepts] ([exec.async.ops],
[exec.connect], ...)."""

from __future__ import annotations

import copy
import gc
import threading
from typing import Any

import pytest

import structexec as sx
from structexec.testing import RecordingReceiver


class PlainReceiver:
    """A duck-typed receiver without get_env ([exec.recv.concepts])."""

    def __init__(self) -> None:
        self.got: list[tuple[str, tuple[Any, ...]]] = []

    def set_value(self, *vals: Any) -> None:
        self.got.append(("value", vals))

    def set_error(self, err: Any) -> None:
        self.got.append(("error", (err,)))

    def set_stopped(self) -> None:
        self.got.append(("stopped", ()))


def test_start_twice_raises() -> None:
    op = sx.connect(sx.just(1), PlainReceiver())
    sx.start(op)
    with pytest.raises(RuntimeError, match="started twice"):
        sx.start(op)


def test_connect_runs_nothing_and_start_completes() -> None:
    calls: list[int] = []
    r = PlainReceiver()
    op = sx.connect(sx.just(1) | sx.then(lambda x: calls.append(x)), r)
    assert r.got == [] and calls == []
    sx.start(op)
    assert r.got == [("value", ())] and calls == [1]


def test_just_completes_inline_on_starting_thread() -> None:
    rec = RecordingReceiver()
    rec.run(sx.just(1, 2))
    assert rec.done and rec.value == (1, 2)
    assert rec.thread == threading.get_ident()


def test_completing_twice_raises() -> None:
    class Twice(sx.Sender[Any]):
        def connect(self, rcvr: Any) -> Any:
            class Op:
                def start(self) -> None:
                    rcvr.set_value(1)
                    rcvr.set_value(2)

            return Op()

    r = PlainReceiver()
    op = sx.connect(Twice() | sx.then(lambda x: x), r)
    with pytest.raises(RuntimeError, match="already completed"):
        sx.start(op)
    assert r.got == [("value", (1,))]


def test_set_error_none_is_rejected() -> None:
    with pytest.raises(TypeError, match="None"):
        sx.set_error(PlainReceiver(), None)
    with pytest.raises(TypeError):
        sx.just_error(None)


def test_op_may_be_dropped_during_completion() -> None:
    holder: dict[str, Any] = {}

    class DropReceiver(PlainReceiver):
        def set_value(self, *vals: Any) -> None:
            holder.clear()
            gc.collect()
            super().set_value(*vals)

    r = DropReceiver()
    holder["op"] = sx.connect(sx.just(1) | sx.then(lambda x: x + 1), r)
    sx.start(holder["op"])
    assert r.got == [("value", (2,))]


def test_started_op_completes_without_being_held() -> None:
    loop = sx.run_loop()
    r = PlainReceiver()
    sx.start(sx.connect(sx.schedule(loop.get_scheduler()) | sx.then(lambda: 5), r))
    gc.collect()
    loop.finish()
    loop.run()
    assert r.got == [("value", (5,))]


def test_operation_states_are_not_copyable() -> None:
    class Op(sx.OperationState):
        def start(self) -> None:
            pass

    with pytest.raises(TypeError):
        copy.copy(Op())


def test_free_completion_functions_forward_to_the_receiver() -> None:
    r = PlainReceiver()
    sx.set_value(r, 1, 2)
    sx.set_error(r, ValueError("x"))
    sx.set_stopped(r)
    assert [k for k, _ in r.got] == ["value", "error", "stopped"]


def test_receiver_without_get_env_has_empty_env() -> None:
    e = sx.get_env(PlainReceiver())
    with pytest.raises(sx.QueryError):
        e.query(sx.get_scheduler)
    assert sx.get_stop_token(e).stop_possible() is False


def test_multishot_senders_connect_repeatedly() -> None:
    s = sx.just([1]) | sx.then(lambda x: [*x, 2])
    assert sx.sync_wait(s) == ([1, 2],)
    assert sx.sync_wait(s) == ([1, 2],)


def test_is_sender_and_is_scheduler_recognise_their_kinds() -> None:
    async def coro() -> None:
        pass

    c = coro()
    assert sx.is_sender(sx.just())
    assert sx.is_sender(c)
    c.close()
    assert not sx.is_sender(sx.then(lambda: None))
    assert not sx.is_sender(42)
    assert not sx.is_sender(sx.inline_scheduler())
    assert sx.is_scheduler(sx.inline_scheduler())
    assert not sx.is_scheduler(sx.just())


def test_adaptors_are_lazy() -> None:
    calls: list[str] = []
    s = sx.just() | sx.then(lambda: calls.append("then"))
    s = s | sx.let_value(lambda: calls.append("let") or sx.just())
    op = sx.connect(s, PlainReceiver())
    assert calls == []
    sx.start(op)
    assert calls == ["then", "let"]


def test_pipes_and_closures_compose() -> None:
    assert sx.sync_wait(sx.just(1) | sx.then(lambda x: x + 1) | sx.then(str)) == ("2",)
    f = lambda x: x * 10  # noqa: E731
    g = lambda x: x + 1  # noqa: E731
    c = sx.then(f) | sx.then(g)
    assert sx.sync_wait(c(sx.just(1))) == sx.sync_wait(sx.then(sx.then(sx.just(1), f), g)) == (11,)
    assert sx.sync_wait(sx.just(2) | c) == (21,)


def test_closure_applied_to_non_sender_raises_type_error() -> None:
    with pytest.raises(TypeError, match=r"then.*must be a sender, got int"):
        sx.then(lambda: None)(42)
    with pytest.raises(TypeError, match="must be a sender"):
        42 | sx.then(lambda: None)


def test_connect_non_sender_names_type() -> None:
    with pytest.raises(TypeError, match="int"):
        sx.connect(42, PlainReceiver())


def test_user_sender_base_class_gets_await_and_pipe() -> None:
    class Seven(sx.Sender[int]):
        def connect(self, rcvr: Any) -> Any:
            class Op(sx.OperationState):
                def start(self) -> None:
                    sx.set_value(rcvr, 7)

            return Op()

    assert sx.sync_wait(Seven() | sx.then(lambda x: x * 2)) == (14,)


def test_duck_typed_sender_works_with_pipes() -> None:
    class Duck:
        def connect(self, rcvr: Any) -> Any:
            class Op:
                def start(self) -> None:
                    rcvr.set_value("quack")

            return Op()

    assert sx.sync_wait(Duck() | sx.then(str.upper)) == ("QUACK",)


def test_then_return_value_convention_none_single_tuple_values() -> None:
    assert sx.sync_wait(sx.just(1) | sx.then(lambda x: None)) == ()
    assert sx.sync_wait(sx.just(1) | sx.then(lambda x: (x, x))) == ((1, 1),)
    assert sx.sync_wait(sx.just(1) | sx.then(lambda x: sx.values(x, 2))) == (1, 2)
    assert sx.sync_wait(sx.just(1) | sx.then(lambda x: sx.values(None))) == (None,)
    assert sx.sync_wait(sx.just(1) | sx.then(lambda x: sx.values())) == ()


def test_base_exceptions_are_not_error_datums() -> None:
    def boom() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sx.sync_wait(sx.just() | sx.then(boom))
