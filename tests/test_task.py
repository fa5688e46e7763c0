"""``@sx.task``:  ([exec.task], P3552R1, P3941R1), docs/task.md 'How "stopped" unwinds a task',
docs/task.md "What a task is".

The P3552R1 examples are ported as tests (fourteen of them, E1-E14), followed by the
object semantics (laziness, single use), completions (values, errors, ``with_error``,
stopped unwinding), the Environment, the stop token and stack safety. Trio-specific
behaviour is in ``test_task_trio.py``, scheduler affinity in ``test_task_affinity.py``.
"""

from __future__ import annotations

import gc
import threading
import traceback
from typing import Any

import pytest
import trio
from _helpers import LoopThread, loop_thread
from _helpers import rec_on as on
from hypothesis import given, settings
from hypothesis import strategies as st

import structexec as sx
from structexec.testing import ManualScheduler, RecordingReceiver, record_terminate


class get_value_t(sx.Query):
    """A user query (P3552R1 4.7); forwarding, so a task's Environment may answer it."""

    forwarding = True


get_value = get_value_t()


lt = pytest.fixture(loop_thread, name="lt")


# =========================================================================== P3552R1 examples


def test_hello_world_task(capsys: pytest.CaptureFixture[str]) -> None:
    @sx.task
    async def main() -> int:
        print("Hello, world!")
        return await sx.just(0)

    assert sx.sync_wait(main()) == (0,)
    assert capsys.readouterr().out == "Hello, world!\n"


def test_nested_tasks() -> None:
    @sx.task
    async def inner() -> int:
        return 42

    @sx.task
    async def outer() -> None:
        result = await inner()
        assert result == 42

    assert sx.sync_wait(outer()) == ()


def test_tasks_in_containers_are_single_use() -> None:
    ran: list[int] = []

    @sx.task
    async def t(i: int) -> None:
        ran.append(i)

    cont = [t(0), t(1)]
    cont.append(t(2))
    for x in cont:
        assert sx.sync_wait(x) == ()
    assert ran == [0, 1, 2]
    with pytest.raises(RuntimeError, match="single-use"):
        sx.connect(cont[0], RecordingReceiver())


def test_environment_with_one_customisation_keeps_the_other_defaults() -> None:
    class AllocatorAware:
        allocator_type = dict

    seen: list[Any] = []

    @sx.task(environment=AllocatorAware)
    async def t() -> None:
        seen.append(await sx.read_env(sx.get_allocator))
        seen.append(await sx.read_env(sx.get_scheduler))
        seen.append(await sx.read_env(sx.get_stop_token))

    assert sx.sync_wait(t()) == ()
    assert seen[0] == {}  # allocator_type()
    assert isinstance(seen[1], sx.task_scheduler)  # default scheduler_type
    assert isinstance(seen[2], sx.inplace_stop_token)  # default stop_source_type's token
    with pytest.raises(RuntimeError, match="boom"):
        sx.sync_wait(_raise_in_task(AllocatorAware))  # default error_types: exceptions


def _raise_in_task(env: Any) -> Any:
    @sx.task(environment=env)
    async def t() -> None:
        raise RuntimeError("boom")

    return t()


def test_allocator_arg_convention() -> None:
    class AllocatorAware:
        allocator_type = list

    @sx.task(environment=AllocatorAware)
    async def fun(value: int, *a: Any) -> tuple[int, Any]:
        return value, await sx.read_env(sx.get_allocator)

    assert sx.sync_wait(fun(17)) == ((17, []),)
    alloc = ["pool"]
    assert sx.sync_wait(fun(17, sx.allocator_arg, alloc)) == ((17, alloc),)
    # an allocator that is not an allocator_type is converted with allocator_type(arg)
    assert sx.sync_wait(fun(17, sx.allocator_arg, ("a", "b"))) == ((17, ["a", "b"]),)
    with pytest.raises(TypeError, match="allocator_arg must be followed"):
        fun(17, sx.allocator_arg)


def test_allocator_visible_through_the_task_env_default_environment() -> None:
    resource = object()

    @sx.task
    async def t(*args: Any) -> Any:
        return await sx.read_env(sx.get_allocator)

    assert sx.sync_wait(t(sx.allocator_arg, resource)) == (resource,)
    (default,) = sx.sync_wait(t())  # type: ignore[misc]
    assert repr(default) == "allocator()"


def test_environment_with_a_custom_query(capsys: pytest.CaptureFixture[str]) -> None:
    class Context:
        def __init__(self, env: Any) -> None:
            self.value = get_value(env)

        def query(self, q: Any) -> Any:
            if q is get_value:
                return self.value
            raise sx.QueryError(q)

    @sx.task(environment=Context)
    async def t() -> None:
        sched = await sx.read_env(sx.get_scheduler)
        value = await sx.read_env(get_value)
        print(f"value={value}")
        assert isinstance(sched, sx.task_scheduler)

    sx.sync_wait(sx.write_env(t(), sx.prop(get_value, 42)))
    assert capsys.readouterr().out == "value=42\n"

    # With the default Environment the receiver's custom query is not visible ([exec.task]).
    @sx.task
    async def plain() -> Any:
        return await sx.read_env(get_value)

    with pytest.raises(TypeError, match="does not support"):
        sx.sync_wait(sx.write_env(plain(), sx.prop(get_value, 42)))


def test_env_type_builds_own_env_first() -> None:
    built: list[Any] = []

    class Ctx:
        @staticmethod
        def env_type(env: Any) -> Any:
            own = sx.prop(get_value, get_value(env) * 2)
            built.append(own)
            return own

        def __init__(self, own_env: Any) -> None:
            self.own = own_env

        def query(self, q: Any) -> Any:
            return self.own.query(q)

    @sx.task(environment=Ctx)
    async def t() -> Any:
        return await sx.read_env(get_value)

    assert sx.sync_wait(sx.write_env(t(), sx.prop(get_value, 21))) == (42,)
    assert len(built) == 1

    class NoArg:
        def query(self, q: Any) -> Any:
            if q is get_value:
                return "default-constructed"
            raise sx.QueryError(q)

    @sx.task(environment=NoArg)
    async def u() -> Any:
        return await sx.read_env(get_value)

    assert sx.sync_wait(u()) == ("default-constructed",)


def test_non_forwarding_environment_queries_are_not_exposed() -> None:
    class Local(sx.Query):
        forwarding = False

    local = Local()

    class Ctx:
        def query(self, q: Any) -> Any:
            return "answer"

    @sx.task(environment=Ctx)
    async def t() -> Any:
        return await sx.read_env(get_value), await sx.read_env(local)

    with pytest.raises(TypeError, match="does not support"):
        sx.sync_wait(t())


def test_just_stopped_cancels_the_task() -> None:
    after: list[str] = []

    @sx.task
    async def t() -> None:
        await sx.just_stopped()
        after.append("never")

    assert sx.sync_wait(t()) is None
    assert after == []


def test_with_error_completes_without_raising() -> None:
    class IntErrors:
        error_types = sx.completion_signatures(sx.set_error_t(int))

    body: list[str] = []

    @sx.task(environment=IntErrors)
    async def t() -> None:
        body.append("before")
        try:
            await sx.with_error(42)
        finally:
            body.append("finally")
        body.append("after")

    r = on(sx.inline_scheduler())
    r.run(t())
    assert r.error == 42
    assert body == ["before", "finally"]
    with pytest.raises(sx.ErrorValue) as ei:
        sx.sync_wait(
            sx.write_env(
                _with_error_task(IntErrors, 7), sx.prop(sx.get_scheduler, sx.inline_scheduler())
            )
        )
    assert ei.value.error == 7


def _with_error_task(env: Any, e: Any) -> Any:
    @sx.task(environment=env)
    async def t() -> None:
        return sx.with_error(e)  # type: ignore[return-value]

    return t()


def test_with_error_of_an_exception_and_return_sugar() -> None:
    err = ValueError("v")

    @sx.task
    async def t() -> None:
        await sx.with_error(err)

    r = on(sx.inline_scheduler())
    r.run(t())
    assert r.error is err

    r2 = on(sx.inline_scheduler())
    r2.run(_with_error_task(None, err))
    assert r2.error is err


def test_with_error_type_mismatch_raises_type_error_at_the_await() -> None:
    class IntErrors:
        error_types = (sx.set_error_t(int),)

    caught: list[BaseException] = []

    @sx.task(environment=IntErrors)
    async def t() -> str:
        try:
            await sx.with_error("not an int")
        except TypeError as e:
            caught.append(e)
        return "went on"

    assert sx.sync_wait(t()) == ("went on",)
    assert "error_types" in str(caught[0])

    class Ambiguous:
        error_types = (sx.set_error_t(Exception), sx.set_error_t(LookupError))

    @sx.task(environment=Ambiguous)
    async def u() -> None:
        await sx.with_error(KeyError("k"))  # matches both, exactly neither

    with pytest.raises(TypeError, match="exactly one"):
        sx.sync_wait(u())

    @sx.task(environment=Ambiguous)
    async def v() -> None:
        await sx.with_error(LookupError("exact"))  # exact type match wins

    with pytest.raises(LookupError, match="exact"):
        sx.sync_wait(v())


def test_with_error_outside_a_task_raises() -> None:
    async def plain() -> None:
        await sx.with_error(1)

    c = plain()
    with pytest.raises(TypeError, match="only in the body"):
        c.send(None)
    with pytest.raises(TypeError):
        sx.with_error(None)


def test_undeclared_exception_calls_terminate() -> None:
    class MyErr(Exception):
        pass

    class OnlyMyErr:
        error_types = (sx.set_error_t(MyErr),)

    @sx.task(environment=OnlyMyErr)
    async def bad() -> None:
        raise ValueError("undeclared")

    @sx.task(environment=OnlyMyErr)
    async def good() -> None:
        raise MyErr("declared")

    with pytest.raises(MyErr):
        sx.sync_wait(good())
    with record_terminate() as calls:
        r = on(sx.inline_scheduler())
        r.run(bad())
    assert len(calls) == 1
    assert "error_types" in calls.reasons[0]
    assert isinstance(calls.calls[0][1], ValueError)
    # the handler returned: the library carried on and reported the error
    assert isinstance(r.error, ValueError)


def test_await_loop_of_inline_senders_does_not_recurse() -> None:
    @sx.task
    async def t() -> int:
        s = 0
        for i in range(100_000):
            s += await sx.just(i)
        return s

    env = sx.prop(sx.get_scheduler, sx.inline_scheduler())
    assert sx.sync_wait(sx.write_env(t(), env)) == (sum(range(100_000)),)


def test_await_loop_under_sync_wait_default_scheduler() -> None:
    @sx.task
    async def t() -> int:
        s = 0
        for i in range(100_000):
            s += await (sx.just(i) | sx.then(lambda x: x))
        return s

    assert sx.sync_wait(t()) == (sum(range(100_000)),)


def test_await_loop_with_inline_scheduler_type() -> None:
    class Inline:
        scheduler_type = sx.inline_scheduler

    @sx.task(environment=Inline)
    async def t() -> int:
        s = 0
        for i in range(100_000):
            s += await sx.just(i)
        return s

    # no scheduler needed at all: scheduler_type() is used ([exec.task])
    r = RecordingReceiver()
    r.run(t())
    assert r.value == (sum(range(100_000)),)


def test_deep_chain_of_nested_tasks_does_not_recurse() -> None:
    @sx.task
    async def depth(n: int) -> int:
        if n == 0:
            return 0
        return 1 + await depth(n - 1)

    # Each level is a frame of the same driver: no Python recursion per level beyond the
    # coroutine's own await delegation, which the driver avoids (it steps the child).
    assert sx.sync_wait(depth(5_000)) == (5_000,)


def test_sender_with_two_value_signatures_is_not_awaitable() -> None:
    class AsyncPop(sx.Sender[Any]):
        """queue.async_pop(): set_value(v) or set_value() when closed."""

        def __init__(self, item: Any) -> None:
            self.item = item

        def connect(self, rcvr: Any) -> Any:
            return sx.connect(sx.just(self.item) if self.item is not None else sx.just(), rcvr)

        def get_completion_signatures(self, env: Any = None) -> Any:
            return sx.completion_signatures(sx.set_value_t(int), sx.set_value_t())

    got: list[Any] = []

    @sx.task
    async def pop_demo() -> None:
        try:
            await AsyncPop(1)
        except TypeError as e:
            got.append(str(e))
        got.append(await sx.into_variant(AsyncPop(5)))
        got.append(await sx.into_variant(AsyncPop(None)))

    assert sx.sync_wait(pop_demo()) == ()
    assert "into_variant" in got[0]
    assert got[1:] == [(5,), ()]


def test_spawn_of_a_task_without_scheduler_fails_at_connect_with_advice() -> None:
    scope = sx.simple_counting_scope()

    @sx.task
    async def work() -> None:
        await sx.just()

    with pytest.raises(TypeError) as ei:
        sx.spawn(work(), scope.get_token())
    msg = str(ei.value)
    assert "get_scheduler" in msg and "write_env" in msg and "inline_scheduler" in msg
    assert scope.count == 0  # no association is held ([exec.spawn])
    # With a scheduler in the spawn env it works.
    ran: list[int] = []

    @sx.task
    async def work2() -> None:
        ran.append(threading.get_ident())

    sx.spawn(work2(), scope.get_token(), sx.prop(sx.get_scheduler, sx.inline_scheduler()))
    assert ran == [threading.get_ident()]
    scope.close()
    sx.sync_wait(scope.join())


def test_starts_on_a_nested_task_replaces_change_coroutine_scheduler(
    lt: LoopThread,
) -> None:
    where: list[str] = []
    main = threading.get_ident()

    @sx.task
    async def nested() -> int:
        where.append("nested on loop" if threading.get_ident() == lt.ident else "nested?")
        await sx.just()
        where.append("nested on loop" if threading.get_ident() == lt.ident else "nested?")
        return 5

    @sx.task
    async def outer() -> int:
        v = await sx.starts_on(lt.sch, nested())
        where.append("outer on main" if threading.get_ident() == main else "outer?")
        return v

    assert sx.sync_wait(outer()) == (5,)
    assert where == ["nested on loop", "nested on loop", "outer on main"]


# =========================================================================== object semantics


def test_task_is_lazy_nothing_runs_before_start() -> None:
    ran: list[str] = []

    @sx.task
    async def t() -> None:
        ran.append("body")

    x = t()
    assert ran == []
    r = on(sx.inline_scheduler())
    op = r.connect(x)
    assert ran == []
    r.start(op)
    assert ran == ["body"]
    assert r.value == ()
    with pytest.raises(RuntimeError, match="started twice"):
        op.start()


def test_dropping_an_unstarted_task_runs_nothing_and_does_not_warn() -> None:
    ran: list[str] = []

    @sx.task
    async def t() -> None:
        ran.append("body")

    x = t()
    del x
    op = sx.connect(t(), on(sx.inline_scheduler()))
    del op
    gc.collect()
    assert ran == []


def test_second_connect_raises_and_failed_connect_keeps_the_task() -> None:
    @sx.task
    async def t() -> int:
        return 1

    x = t()
    with pytest.raises(TypeError, match="needs a scheduler"):
        sx.connect(x, RecordingReceiver())
    r = on(sx.inline_scheduler())
    r.run(x)  # still connectable after the failed connect
    assert r.value == (1,)
    with pytest.raises(RuntimeError, match="single-use"):
        sx.connect(x, on(sx.inline_scheduler()))


def test_decorator_rejects_non_coroutine_functions_and_bad_environments() -> None:
    with pytest.raises(TypeError, match="async def"):
        sx.task(lambda: 1)
    with pytest.raises(TypeError, match="class"):
        sx.task(environment=object())(_coro_fn)

    class BadErrors:
        error_types = sx.completion_signatures(sx.set_value_t(int))

    with pytest.raises(TypeError, match="set_error_t"):
        sx.task(environment=BadErrors)(_coro_fn)

    class BadCtor:
        def __init__(self, a: Any, b: Any) -> None:
            pass

    with pytest.raises(TypeError, match="constructible"):
        sx.task(environment=BadCtor)(_coro_fn)


async def _coro_fn() -> None:
    pass


def test_task_completion_signatures() -> None:
    class MyErr(Exception):
        pass

    class Env:
        error_types = (sx.set_error_t(MyErr), sx.set_error_t(int))

    @sx.task(environment=Env)
    async def f() -> int:
        return 1

    @sx.task
    async def g() -> None:
        pass

    @sx.task(result=str)
    async def h():  # type: ignore[no-untyped-def]
        return "x"

    @sx.task
    async def unknown():  # type: ignore[no-untyped-def]
        return 1

    assert sx.get_completion_signatures(f()) == sx.completion_signatures(
        sx.set_value_t(int), sx.set_error_t(MyErr), sx.set_error_t(int), sx.set_stopped_t()
    )
    assert sx.get_completion_signatures(g()) == sx.completion_signatures(
        sx.set_value_t(), sx.set_error_t(Exception), sx.set_stopped_t()
    )
    assert sx.set_value_t(str) in sx.get_completion_signatures(h())  # type: ignore[operator]
    assert sx.get_completion_signatures(unknown()) is None
    for s in (f(), g(), h(), unknown()):
        r = on(sx.inline_scheduler())
        r.run(s)
        assert r.events[0][0] == "value"


def test_task_is_a_sender_with_tag_and_works_with_adaptors() -> None:
    @sx.task
    async def t(x: int) -> int:
        return x

    s = t(1)
    assert sx.is_sender(s)
    assert s.tag is sx.task
    assert sx.sync_wait(t(2) | sx.then(lambda v: v * 10)) == (20,)
    assert sx.sync_wait(sx.when_all(t(1), t(2), sx.just(3))) == (1, 2, 3)
    r = on(sx.inline_scheduler())
    r.run(s)
    assert r.value == (1,)


def test_task_returning_values_sends_several_datums() -> None:
    @sx.task
    async def t() -> Any:
        return sx.values(1, 2)

    assert sx.sync_wait(t()) == (1, 2)


# =========================================================================== errors


def test_awaited_error_is_raised_with_its_traceback() -> None:
    def fail() -> None:
        raise KeyError("deep")

    @sx.task
    async def t() -> str:
        try:
            await (sx.just() | sx.then(fail))
        except KeyError as e:
            tb = "".join(traceback.format_tb(e.__traceback__))
            assert "fail" in tb  # the original frame is kept ([exec.task])
            return "caught"
        return "no"

    assert sx.sync_wait(t()) == ("caught",)


def test_non_exception_error_is_raised_as_error_value() -> None:
    @sx.task
    async def t() -> Any:
        try:
            await sx.just_error("plain")
        except sx.ErrorValue as e:
            return e.error
        return None

    assert sx.sync_wait(t()) == ("plain",)


def test_escaping_exception_is_set_error() -> None:
    err = OSError("io")

    @sx.task
    async def t() -> None:
        await sx.just()
        raise err

    r = on(sx.inline_scheduler())
    r.run(t())
    assert r.error is err


def test_connect_error_of_an_awaited_sender_is_raised_at_the_await() -> None:
    class Local(sx.Query):
        forwarding = False

    @sx.task
    async def t() -> str:
        try:
            await sx.read_env(Local())
        except TypeError:
            return "connect failed at the await"
        return "no"

    assert sx.sync_wait(t()) == ("connect failed at the await",)


# =========================================================================== stopped
# (docs/task.md 'How "stopped" unwinds a task')


class AsyncCM:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    async def __aenter__(self) -> AsyncCM:
        self.log.append("enter")
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await sx.just()  # exits may await
        self.log.append(f"exit {exc[0].__name__ if exc[0] else None}")


def test_stopped_unwinds_finally_and_async_with_but_not_except_exception() -> None:
    log: list[str] = []

    @sx.task
    async def t() -> str:
        try:
            async with AsyncCM(log):
                try:
                    await sx.just_stopped()
                    log.append("resumed")
                except Exception:
                    log.append("except Exception")
                finally:
                    log.append("finally")
                    log.append(f"awaited in finally: {await sx.just('ok')}")
        finally:
            log.append("outer finally")
        return "value"

    r = on(sx.inline_scheduler())
    r.run(t())
    assert r.stopped
    assert log == [
        "enter",
        "finally",
        "awaited in finally: ok",
        "exit Stopped",
        "outer finally",
    ]


def test_stopped_propagates_through_nested_tasks() -> None:
    log: list[str] = []

    @sx.task
    async def inner() -> int:
        try:
            await sx.just_stopped()
        finally:
            log.append("inner finally")
        return 1

    @sx.task
    async def outer() -> int:
        try:
            return await inner()
        finally:
            log.append("outer finally")

    assert sx.sync_wait(outer()) is None
    assert log == ["inner finally", "outer finally"]


def test_swallowing_stopped_is_reported_as_an_error() -> None:
    @sx.task
    async def t() -> int:
        try:
            await sx.just_stopped()
        except BaseException:
            pass
        return 1

    with pytest.raises(RuntimeError, match=r"caught the sx\.Stopped"):
        sx.sync_wait(t())


def test_exception_raised_while_unwinding_replaces_the_stop() -> None:
    @sx.task
    async def t() -> None:
        try:
            await sx.just_stopped()
        finally:
            raise ValueError("cleanup failed")

    with pytest.raises(ValueError, match="cleanup failed"):
        sx.sync_wait(t())


# =========================================================================== stop token
# ([exec.task])


def test_never_stop_token_receiver_gives_an_unstoppable_task_token() -> None:
    @sx.task
    async def t() -> Any:
        return await sx.read_env(sx.get_stop_token)

    (tok,) = sx.sync_wait(t())  # type: ignore[misc]
    assert tok.stop_possible() is False
    assert tok.stop_requested() is False


def test_task_token_mirrors_the_receivers_and_callbacks_fire() -> None:
    m = ManualScheduler()
    fired: list[int] = []
    tokens: list[Any] = []

    @sx.task
    async def t() -> str:
        tok = await sx.read_env(sx.get_stop_token)
        tokens.append(tok)
        cb = sx.stop_callback_for(tok, lambda: fired.append(threading.get_ident()))
        try:
            await sx.schedule(m)  # completes stopped once stop is requested
        finally:
            cb.close()
        return "unreachable"

    r = on(m)
    r.run(t())
    assert m.pending == 1  # the task waits in schedule(m)
    tok = tokens[0]
    assert tok.stop_possible() is True
    assert tok.stop_requested() is False
    r.request_stop()
    assert fired == [threading.get_ident()]
    assert tok.stop_requested() is True
    m.drain()
    assert r.stopped
    assert r.live_callbacks_at_completion == 0


def test_custom_stop_source_type_is_linked() -> None:
    class MySource(sx.inplace_stop_source):
        made: list[MySource] = []

        def __init__(self) -> None:
            super().__init__()
            MySource.made.append(self)

    class Env:
        stop_source_type = MySource

    m = ManualScheduler()

    @sx.task(environment=Env)
    async def t() -> None:
        await sx.schedule(m)

    r = on(m)
    r.run(t())
    assert len(MySource.made) == 1
    r.request_stop()
    assert MySource.made[0].stop_requested()
    m.drain()
    assert r.stopped
    assert r.live_callbacks_at_completion == 0  # the link was removed before completing


# -- stdexec task tests worth porting (test/exec/test_task.cpp)


def test_stdexec_can_stop_early() -> None:
    """A task whose stop was requested before it started completes stopped at its first
    stoppable await, and code after it never runs."""
    m = ManualScheduler()
    after: list[str] = []

    @sx.task
    async def t() -> None:
        await sx.schedule(m)
        after.append("after")

    r = on(m)
    r.request_stop()
    r.run(t())
    m.drain()
    assert r.stopped
    assert after == []


def test_stdexec_can_error_early() -> None:
    @sx.task
    async def t() -> None:
        raise RuntimeError("early")

    r = on(sx.inline_scheduler())
    r.run(t())
    assert isinstance(r.error, RuntimeError)


def test_stdexec_propagates_stop_token_to_nested_tasks_and_senders() -> None:
    m = ManualScheduler()
    seen: list[bool] = []

    @sx.task
    async def inner() -> None:
        tok = await sx.read_env(sx.get_stop_token)
        seen.append(tok.stop_requested())
        await sx.schedule(m)

    @sx.task
    async def outer() -> None:
        await inner()

    r = on(m)
    r.run(outer())
    assert seen == [False]
    r.request_stop()
    m.drain()
    assert r.stopped


def test_stdexec_task_of_task_returns_value() -> None:
    @sx.task
    async def leaf(x: int) -> int:
        return x + 1

    @sx.task
    async def mid(x: int) -> int:
        return await leaf(x) * 2

    @sx.task
    async def top() -> int:
        return await mid(1) + await mid(2)

    assert sx.sync_wait(top()) == (4 + 6,)


def test_stdexec_stopped_inline_does_not_deadlock() -> None:
    """stdexec #2036: an awaited sender completing set_stopped inline must not hang."""

    @sx.task
    async def t() -> None:
        await (sx.just() | sx.let_value(lambda: sx.just_stopped()))

    assert sx.sync_wait(t()) is None


# =========================================================================== env ([exec.task])


def test_get_env_answers_scheduler_stop_token_allocator() -> None:
    m = ManualScheduler()
    got: dict[str, Any] = {}

    @sx.task
    async def t() -> None:
        got["sched"] = await sx.read_env(sx.get_scheduler)
        got["token"] = await sx.read_env(sx.get_stop_token)
        got["alloc"] = await sx.read_env(sx.get_allocator)

    r = on(m)
    r.run(t())
    assert r.value == ()
    assert got["sched"] == sx.task_scheduler(m)
    assert got["sched"].wrapped is m
    assert got["token"] == r.stop_source.get_token()  # same type: shared, no link
    assert repr(got["alloc"]) == "allocator()"


def test_task_scheduler_type_custom_class() -> None:
    m = ManualScheduler()

    class Env:
        scheduler_type = ManualScheduler

    @sx.task(environment=Env)
    async def t() -> Any:
        return await sx.read_env(sx.get_scheduler)

    r = on(m)
    r.run(t())
    assert r.value == (m,)  # isinstance(sch, scheduler_type): used as it is


def test_when_all_of_tasks_one_stops() -> None:
    @sx.task
    async def ok() -> int:
        return 1

    @sx.task
    async def stops() -> int:
        await sx.just_stopped()
        return 2

    assert sx.sync_wait(sx.when_all(ok(), stops())) is None


# ===================================================================== property: driver vs model

_leaf = st.one_of(
    st.tuples(st.just("just"), st.integers(0, 9)),
    st.tuples(st.just("error"), st.integers(1, 9)),
    st.tuples(st.just("hop")),
    st.tuples(st.just("stop")),
    st.tuples(st.just("with_error"), st.integers(1, 9)),
)
_steps = st.recursive(
    st.lists(_leaf, max_size=6),
    lambda inner: st.lists(st.one_of(_leaf, st.tuples(st.just("nested"), inner)), max_size=6),
    max_leaves=20,
)


def _model(steps: list[Any]) -> tuple[str, int]:
    """(outcome, total): 'value', 'stopped' or 'error'; total of the values seen so far."""
    total = 0
    for s in steps:
        k = s[0]
        if k == "just":
            total += s[1]
        elif k == "error":
            total -= s[1]
        elif k == "stop":
            return "stopped", total
        elif k == "with_error":
            return "error", total
        elif k == "nested":
            out, sub = _model(s[1])
            total += sub
            if out != "value":
                return out, total
    return "value", total


@settings(max_examples=40, deadline=None)
@given(steps=_steps, on_trio=st.booleans())
def test_property_task_driver_matches_a_model(steps: list[Any], on_trio: bool) -> None:
    """Random bodies of awaits (inline values, caught errors, hops to another thread, nested
    tasks, stops, with_error) give the model's outcome, every finally runs once, and the
    body is always back on its scheduler's thread after an await, under sync_wait and on
    trio ([exec.task], docs/task.md 'How "stopped" unwinds a task')."""
    t = LoopThread()
    main = threading.get_ident()
    total = [0]
    finallies = [0, 0]  # entered, left
    off_thread: list[int] = []

    class Errs:
        error_types = (sx.set_error_t(Exception), sx.set_error_t(int))

    @sx.task(environment=Errs)
    async def body(steps: list[Any]) -> None:
        finallies[0] += 1
        try:
            for s in steps:
                k = s[0]
                if k == "just":
                    total[0] += await sx.just(s[1])
                elif k == "error":
                    try:
                        await sx.just_error(ValueError(s[1]))
                    except ValueError as e:
                        total[0] -= e.args[0]
                elif k == "hop":
                    await sx.schedule(t.sch)
                elif k == "stop":
                    await sx.just_stopped()
                elif k == "with_error":
                    await sx.with_error(s[1])
                else:
                    await body(s[1])
                if threading.get_ident() != main:
                    off_thread.append(threading.get_ident())
        finally:
            finallies[1] += 1

    async def in_trio() -> str:
        try:
            await body(steps)
        except sx.Stopped:
            return "stopped"
        except sx.ErrorValue:
            return "error"
        return "value"

    try:
        if on_trio:
            outcome = trio.run(in_trio)
        else:
            try:
                result: Any = sx.sync_wait(body(steps))
                outcome = "value" if result == () else "stopped"
            except sx.ErrorValue:
                outcome = "error"
    finally:
        t.close()
    want, want_total = _model(steps)
    assert (outcome, total[0]) == (want, want_total)
    assert finallies[0] == finallies[1]
    assert off_thread == []
