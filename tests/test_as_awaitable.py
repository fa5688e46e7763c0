"""``as_awaitable`` and ``with_awaitable_senders`` for user coroutine types: [exec.as.awaitable],
[exec.with.awaitable.senders] ([exec.as.awaitable], [exec.with.awaitable.senders],
[exec.awaitable]).

The tests build a minimal coroutine type the way a user would: a promise derived from
``sx.with_awaitable_senders`` and a driver loop that follows the protocol documented in
``structexec._coro._as_awaitable`` (step the coroutine with ``promise.step``; call
``await_suspend(resume)`` on what it yields; loop instead of recursing on inline resumes).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

import structexec as sx
from structexec.testing import record_terminate


class Promise(sx.with_awaitable_senders):
    def __init__(self, env: Any = None) -> None:
        self.env = sx.env() if env is None else env
        self.outcome: tuple[str, Any] | None = None
        self.done = threading.Event()

    def get_env(self) -> Any:
        return self.env


class Root(Promise):
    """A top-level promise: records stopped instead of terminating."""

    def __init__(self, env: Any = None) -> None:
        super().__init__(env)
        self.stopped_calls = 0

    def unhandled_stopped(self) -> Any:
        self.stopped_calls += 1
        self.outcome = ("stopped", None)
        self.done.set()
        return None


def drive(coro: Any, promise: Promise) -> Promise:
    """Run ``coro`` as a coroutine of ``promise``'s type; completion is recorded on it."""

    def run(value: Any = None, exc: BaseException | None = None) -> None:
        while True:
            try:
                y = promise.step(coro, value, exc)
            except StopIteration as e:
                promise.outcome = ("value", e.value)
                promise.done.set()
                return
            except Exception as e:
                promise.outcome = ("error", e)
                promise.done.set()
                return
            value, exc = None, None
            if not hasattr(y, "await_suspend"):
                exc = RuntimeError(f"unexpected yield {y!r}")
                continue
            state = {"inline": True, "resumed": False}

            def resume(state: dict[str, bool] = state) -> None:
                if state["inline"]:
                    state["resumed"] = True  # completed inside await_suspend: loop on
                else:
                    run()

            y.await_suspend(resume)
            state["inline"] = False
            if not state["resumed"]:
                return

    run()
    return promise


# --------------------------------------------------------------------------- as_awaitable cases


def test_as_awaitable_member_is_used() -> None:
    seen: list[Any] = []

    class Custom:
        def as_awaitable(self, promise: Any) -> Any:
            seen.append(promise)
            return "the awaitable"

    p = Promise()
    assert sx.as_awaitable(Custom(), p) == "the awaitable"
    assert seen == [p]


def test_non_sender_awaitables_pass_through() -> None:
    async def coro() -> int:
        return 1

    c = coro()
    try:
        assert sx.as_awaitable(c, Promise()) is c
    finally:
        c.close()


def test_await_completion_adaptor_is_applied() -> None:
    adapted: list[Any] = []

    def adaptor(s: Any) -> Any:
        adapted.append(s)
        return sx.just("adapted")

    class S(sx.Sender[Any]):
        def connect(self, rcvr: Any) -> Any:
            raise AssertionError("the adaptor's sender is connected instead")

        def get_env(self) -> Any:
            return sx.prop(sx.get_await_completion_adaptor, adaptor)

    s = S()
    aw = sx.as_awaitable(s, Promise())
    assert isinstance(aw, sx.sender_awaitable)
    assert adapted == [s]

    async def body() -> Any:
        return await aw

    assert drive(body(), Promise()).outcome == ("value", "adapted")


def test_senders_become_sender_awaitables_and_other_objects_pass_through() -> None:
    aw = sx.as_awaitable(sx.just(1), Promise())
    assert isinstance(aw, sx.sender_awaitable)
    assert sx.as_awaitable(42, Promise()) == 42


def test_two_value_signatures_are_not_awaitable() -> None:
    class Two(sx.Sender[Any]):
        def connect(self, rcvr: Any) -> Any:
            return sx.connect(sx.just(), rcvr)

        def get_completion_signatures(self, env: Any = None) -> Any:
            return sx.completion_signatures(sx.set_value_t(), sx.set_value_t(int))

    with pytest.raises(TypeError, match="into_variant"):
        sx.as_awaitable(Two(), Promise())


def test_promise_without_unhandled_stopped_cannot_await_senders() -> None:
    class Bare:
        def get_env(self) -> Any:
            return sx.env()

    with pytest.raises(TypeError, match="unhandled_stopped"):
        sx.as_awaitable(sx.just(1), Bare())


# --------------------------------------------------------------------------- sender-awaitable


def test_await_results_none_single_value_or_tuple() -> None:
    async def body() -> Any:
        return (await sx.just(), await sx.just(1), await sx.just(1, 2))

    assert drive(body(), Promise()).outcome == ("value", (None, 1, (1, 2)))


def test_connect_at_construction_start_at_await_suspend() -> None:
    events: list[str] = []

    class S(sx.Sender[Any]):
        def connect(self, rcvr: Any) -> Any:
            events.append("connect")
            inner = sx.connect(sx.just(5), rcvr)

            class Op:
                def start(self) -> None:
                    events.append("start")
                    inner.start()

            return Op()

    aw = sx.as_awaitable(S(), Promise())
    assert events == ["connect"]
    assert aw.await_ready() is False
    resumed: list[bool] = []
    aw.await_suspend(lambda: resumed.append(True))
    assert events == ["connect", "start"]
    assert resumed == [True]
    assert aw.await_resume() == 5


def test_error_is_raised_and_non_exception_error_wrapped() -> None:
    async def body() -> Any:
        try:
            await sx.just_error(KeyError("k"))
        except KeyError as e:
            first = e
        try:
            await sx.just_error(42)
        except sx.ErrorValue as e:
            return first, e.error
        return None

    kind, (first, second) = drive(body(), Promise()).outcome  # type: ignore[misc]
    assert kind == "value"
    assert isinstance(first, KeyError) and second == 42


def test_stopped_calls_unhandled_stopped_and_never_resumes() -> None:
    after: list[str] = []

    async def body() -> None:
        await sx.just_stopped()
        after.append("resumed")  # must never run

    p = drive(body(), Root())
    assert p.outcome == ("stopped", None)
    assert p.stopped_calls == 1
    assert after == []


def test_receiver_env_forwards_only_forwarding_queries() -> None:
    class Fwd(sx.Query):
        forwarding = True

    class Local(sx.Query):
        forwarding = False

    fwd, local = Fwd(), Local()
    p = Promise(sx.env(sx.prop(fwd, "f"), sx.prop(local, "l")))

    async def body() -> Any:
        return await sx.read_env(fwd)

    assert drive(body(), p).outcome == ("value", "f")
    with pytest.raises(TypeError, match="does not support"):
        sx.as_awaitable(sx.read_env(local), p)


def test_cross_thread_completion_resumes_on_the_completing_thread() -> None:
    loop = sx.run_loop()
    worker = threading.Thread(target=loop.run)
    try:
        where: list[int] = []

        async def body() -> str:
            where.append(threading.get_ident())
            await sx.schedule(loop.get_scheduler())
            where.append(threading.get_ident())
            return "ok"

        # The loop's thread starts only once the coroutine has parked: a completion that lands
        # while `start` is still running resumes the coroutine on the starting thread instead
        # (an inline completion), which a worker started first could do at random.
        p = drive(body(), Promise())
        assert not p.done.is_set()
        worker.start()
        assert p.done.wait(10)
    finally:
        loop.finish()
        if worker.ident is not None:
            worker.join(10)
    assert p.outcome == ("value", "ok")
    assert where == [threading.get_ident(), worker.ident]  # no affinity in a bare promise


def test_deep_inline_await_loop_does_not_recurse() -> None:
    async def body() -> int:
        total = 0
        for i in range(20_000):
            total += await sx.just(i)
        return total

    assert drive(body(), Promise()).outcome == ("value", sum(range(20_000)))


# --------------------------------------------------------------------------- with_awaitable_senders


def test_nested_coroutines_stopped_goes_to_the_outer_handler() -> None:
    """The inner coroutine awaits just_stopped(); the outer promise's unhandled_stopped runs
    and neither coroutine resumes ([exec.with.awaitable.senders])."""
    resumed: list[str] = []
    outer = Root()
    inner = Promise()
    inner.set_continuation(outer)
    assert inner.continuation() is outer

    async def inner_body() -> None:
        await sx.just_stopped()
        resumed.append("inner")

    async def outer_body() -> None:
        # The outer coroutine awaits the inner one through a custom awaiter whose
        # await_suspend drives the inner coroutine with the outer as its continuation.
        class InnerAwaiter:
            def __await__(self) -> Any:
                yield self
                resumed.append("outer")  # never: the stop went to the outer handler

            def await_suspend(self, resume: Any) -> None:
                drive(inner_body(), inner)
                if inner.outcome is not None:
                    resume()

        await InnerAwaiter()
        resumed.append("outer body")

    drive(outer_body(), outer)
    assert outer.stopped_calls == 1
    assert resumed == []
    assert inner.outcome is None


def test_unhandled_stopped_without_parent_calls_terminate() -> None:
    async def body() -> None:
        await sx.just_stopped()

    with record_terminate() as calls:
        p = drive(body(), Promise())
    assert len(calls) == 1
    assert "unhandled_stopped" in calls.reasons[0] or "stopped" in calls.reasons[0]
    assert p.outcome is None  # never resumed, never finished


def test_promise_await_transform_is_as_awaitable_of_self() -> None:
    p = Promise()
    aw = p.await_transform(sx.just(1))
    assert isinstance(aw, sx.sender_awaitable)
    assert p.await_transform(7) == 7


def test_parent_without_handler_falls_back_to_terminate() -> None:
    inner = Promise()
    inner.set_continuation(object())  # a parent with no unhandled_stopped

    async def body() -> None:
        await sx.just_stopped()

    with record_terminate() as calls:
        drive(body(), inner)
    assert len(calls) == 1
