"""Factories, then/upon_*, let_*: [exec.factories], [exec.then], [exec.let]."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import structexec as sx
from structexec.testing import ManualScheduler, RecordingReceiver


class E(Exception):
    pass


def test_just_family_completes_inline() -> None:
    for s, kind in [
        (sx.just(1, 2.0), "value"),
        (sx.just_error(E()), "error"),
        (sx.just_stopped(), "stopped"),
    ]:
        rec = RecordingReceiver()
        rec.run(s)
        assert rec.done and rec.events[0][0] == kind


def test_just_error_and_just_stopped_arity_is_enforced() -> None:
    with pytest.raises(TypeError):
        sx.just_error()
    with pytest.raises(TypeError):
        sx.just_error(E(), E())
    with pytest.raises(TypeError):
        sx.just_stopped(1)  # type: ignore[call-arg]


def test_just_datums_are_not_copied() -> None:
    obj = object()
    assert sx.sync_wait(sx.just(obj))[0] is obj  # type: ignore[index]


def test_just_family_signatures() -> None:
    assert sx.get_completion_signatures(sx.just(1, 2.0)) == sx.completion_signatures(
        sx.set_value_t(int, float)
    )
    assert sx.get_completion_signatures(sx.just_error(E())) == sx.completion_signatures(
        sx.set_error_t(E)
    )
    assert sx.get_completion_signatures(sx.just_stopped()) == sx.completion_signatures(
        sx.set_stopped_t()
    )


def test_read_env_value_and_query_failure_is_an_error() -> None:
    class Bad(sx.Query):
        forwarding = True

    bad = Bad()

    class BoomEnv:
        def query(self, q: Any, *a: Any) -> Any:
            if q is bad:
                raise E("query failed")
            raise sx.QueryError

    rec = RecordingReceiver(env=BoomEnv())
    rec.run(sx.read_env(bad))
    assert isinstance(rec.error, E)
    with pytest.raises(sx.dependent_sender_error):
        sx.get_completion_signatures(sx.read_env(bad))


def test_then_and_upon_transform_their_completion_and_forward_others() -> None:
    assert sx.sync_wait(sx.just(2) | sx.then(lambda x: x * 3)) == (6,)
    assert sx.sync_wait(sx.just_error(E("e")) | sx.upon_error(lambda e: str(e))) == ("e",)
    assert sx.sync_wait(sx.just_stopped() | sx.upon_stopped(lambda: "s")) == ("s",)
    # Non-matching completions pass through unchanged.
    err = E()
    with pytest.raises(E) as ei:
        sx.sync_wait(sx.just_error(err) | sx.then(lambda: 1) | sx.upon_stopped(lambda: 2))
    assert ei.value is err
    assert sx.sync_wait(sx.just_stopped() | sx.then(lambda: 1) | sx.upon_error(lambda e: 2)) is None
    assert sx.sync_wait(sx.just(1) | sx.upon_error(lambda e: 0) | sx.upon_stopped(lambda: 0)) == (
        1,
    )


def test_exception_in_then_becomes_error_and_later_stages_see_it() -> None:
    seen: list[Any] = []

    def boom(x: int) -> int:
        raise E(x)

    s = (
        sx.just(1)
        | sx.then(boom)
        | sx.then(lambda x: seen.append("then") or x)
        | sx.upon_error(lambda e: seen.append(("upon", e.args)) or 9)
    )
    assert sx.sync_wait(s) == (9,)
    assert seen == [("upon", (1,))]


def test_then_function_runs_on_the_completing_agent() -> None:
    sch = ManualScheduler()
    ran_on: list[Any] = []
    rec = RecordingReceiver()
    rec.run(sx.schedule(sch) | sx.then(lambda: ran_on.append(ManualScheduler.current())))
    assert ran_on == []
    t = threading.Thread(target=sch.drain)
    t.start()
    t.join()
    assert ran_on == [sch]
    assert rec.thread == t.ident


def test_then_wrong_arity_is_an_error_completion() -> None:
    rec = RecordingReceiver()
    rec.run(sx.just(1, 2) | sx.then(lambda x: x))
    assert isinstance(rec.error, TypeError)


def test_then_rejects_bad_arguments() -> None:
    with pytest.raises(TypeError, match="callable"):
        sx.then(42)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="sender"):
        sx.then(42, lambda: None)


def test_let_functions_run_the_returned_sender() -> None:
    assert sx.sync_wait(sx.just(3) | sx.let_value(lambda x: sx.just(x, x + 1))) == (3, 4)
    assert sx.sync_wait(sx.just_error(E()) | sx.let_error(lambda e: sx.just("r"))) == ("r",)
    assert sx.sync_wait(sx.just_stopped() | sx.let_stopped(lambda: sx.just("s"))) == ("s",)


def test_let_datums_live_until_the_second_operation_completes() -> None:
    sch = ManualScheduler()

    def f(lst: list[int]) -> Any:
        return sx.schedule(sch) | sx.then(lambda: lst.append(2) or lst)

    rec = RecordingReceiver()
    rec.run(sx.just([1]) | sx.let_value(f))
    import gc

    gc.collect()
    sch.drain()
    assert rec.value == ([1, 2],)


def test_let_function_exception_and_bad_return_are_errors() -> None:
    def boom() -> Any:
        raise E("f")

    rec = RecordingReceiver()
    rec.run(sx.just() | sx.let_value(boom))
    assert isinstance(rec.error, E)
    rec = RecordingReceiver()
    rec.run(sx.just() | sx.let_value(lambda: 42))
    assert isinstance(rec.error, TypeError) and "sender" in str(rec.error)


def test_let_non_matching_completions_are_forwarded() -> None:
    assert sx.sync_wait(sx.just(1) | sx.let_error(lambda e: sx.just(0))) == (1,)
    assert sx.sync_wait(sx.just_stopped() | sx.let_value(lambda: sx.just(0))) is None


def test_let_second_sender_sees_completion_scheduler() -> None:
    loop = sx.run_loop()
    sch = loop.get_scheduler()
    rec = RecordingReceiver()
    rec.run(sx.let_value(sx.schedule(sch), lambda: sx.read_env(sx.get_scheduler)))
    loop.finish()
    loop.run()
    assert rec.value == (sch,)


def test_let_lazy_and_f_called_once() -> None:
    calls: list[int] = []
    s = sx.just(1) | sx.let_value(lambda x: calls.append(x) or sx.just())
    assert calls == []
    sx.sync_wait(s)
    sx.sync_wait(s)
    assert calls == [1, 1]


# just(...) | then(f) | ... is connected as one operation (the fast path of spawn); these
# pin down that the fused operation keeps every rule of the two it replaces.


@pytest.mark.parametrize("stages", [1, 3])
def test_fused_just_then_values_and_order(stages: int) -> None:
    calls: list[tuple[Any, ...]] = []

    def f(*a: Any) -> Any:
        calls.append(a)
        return sx.values(*a, len(calls))

    s: Any = sx.just(7)
    for _ in range(stages):
        s = s | sx.then(f)
    rec = RecordingReceiver()
    op = rec.connect(s)
    assert calls == []  # connect runs nothing ([exec.connect])
    rec.start()
    assert rec.value == (7, *range(1, stages + 1))
    assert calls == [(7, *range(1, i + 1)) for i in range(stages)]
    with pytest.raises(RuntimeError, match="start"):
        op.start()  # an operation is started at most once ([exec.async.ops])
    assert len(calls) == stages


def test_fused_just_then_exception_becomes_error_receiver_exception_propagates() -> None:
    boom = E("f")
    rec = RecordingReceiver()
    rec.run(sx.just() | sx.then(lambda: (_ for _ in ()).throw(boom)) | sx.then(lambda: 1))
    assert rec.error is boom  # later then stages do not run on an error ([exec.then])
    rec = RecordingReceiver()
    rec.run(sx.just(1) | sx.then(lambda x: (_ for _ in ()).throw(boom)))  # one stage
    assert rec.error is boom
    for ret, sent in [(None, ()), ((1, 2), ((1, 2),)), (sx.values(1, 2), (1, 2))]:
        rec = RecordingReceiver()
        rec.run(sx.just(0) | sx.then(lambda x, r=ret: r))
        assert rec.value == sent  # the values convention (docs/trio.md "Awaiting a sender")

    class Bad:
        def get_env(self) -> Any:
            return sx.env()

        def set_value(self, *a: Any) -> None:
            raise KeyError("from the receiver")

    op = sx.connect(sx.just() | sx.then(lambda: None), Bad())
    with pytest.raises(KeyError):
        op.start()  # not turned into set_error: only f's exceptions are ([exec.snd.expos])


def test_just_sender_is_reusable_and_empty_just_is_shared_safely() -> None:
    a, b = sx.just(), sx.just()
    results = [sx.sync_wait(a | sx.then(lambda: 1)), sx.sync_wait(b | sx.then(lambda: 2))]
    assert results == [(1,), (2,)]
    s = sx.just() | sx.then(lambda: 3)
    assert [sx.sync_wait(s) for _ in range(3)] == [(3,)] * 3  # connectable many times
