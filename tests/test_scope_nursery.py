"""Counting scopes as trio nurseries ([exec.spawn], [exec.spawn.future],
docs/scopes.md "The nursery face: `async with`")."""

from __future__ import annotations

import gc
import sys
import threading
from typing import Any

import pytest
import trio
import trio.testing

import structexec as sx
from structexec.testing import ManualScheduler, no_leaks

if sys.version_info < (3, 11):
    from exceptiongroup import ExceptionGroup

SCOPES = [sx.simple_counting_scope, sx.counting_scope]


class TaskCounter(trio.abc.Instrument):
    def __init__(self) -> None:
        self.spawned = 0

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.spawned += 1


class WaitForStop(sx.Sender[None]):
    """Completes stopped when its stop token fires (records the thread), never otherwise."""

    def __init__(self) -> None:
        self.stopped_on: list[int] = []

    def connect(self, rcvr: Any) -> Any:
        outer = self

        class Op:
            cb: Any = None

            def start(self) -> None:
                tok = sx.get_stop_token(sx.get_env(rcvr))
                self.cb = sx.stop_callback_for(tok, self.fire)

            def fire(self) -> None:
                outer.stopped_on.append(threading.get_ident())
                cb, self.cb = self.cb, None
                if cb is not None:
                    cb.close()
                rcvr.set_stopped()

        return Op()


# --------------------------------------------------------------------------- basics


@pytest.mark.parametrize("kind", SCOPES)
async def test_start_soon_runs_and_exit_waits(kind: Any) -> None:
    out: list[int] = []

    async def work(i: int) -> None:
        await trio.sleep(0.001 * i)
        out.append(i)

    async with no_leaks():
        async with kind() as scope:
            for i in (3, 1, 2):
                scope.start_soon(work, i)
            assert scope.count == 3
        assert sorted(out) == [1, 2, 3]
        assert scope.state == "joined"


@pytest.mark.parametrize("kind", SCOPES)
async def test_start_returns_the_started_value(kind: Any) -> None:
    log: list[str] = []
    go = trio.Event()  # not a real sleep: a loaded machine resumes the caller late

    async def server(port: int, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        log.append("setup")
        task_status.started(port + 1)
        await go.wait()
        log.append("served")

    async with kind() as scope:
        got = await scope.start(server, 80)
        assert got == 81
        assert log == ["setup"]
        go.set()
    assert log == ["setup", "served"]


@pytest.mark.parametrize("kind", SCOPES)
async def test_start_error_before_started_propagates_to_caller(kind: Any) -> None:
    async def bad(*, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        raise KeyError("early")

    async with kind() as scope:
        with pytest.raises(KeyError):
            await scope.start(bad)
        assert scope.count == 0
    assert scope.unhandled_errors == ()


@pytest.mark.parametrize("kind", SCOPES)
async def test_start_error_after_started_goes_to_the_scope(kind: Any) -> None:
    async def late(*, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        await trio.lowlevel.checkpoint()
        raise KeyError("late")

    with pytest.raises(ExceptionGroup) as ei:
        async with kind() as scope:
            await scope.start(late)
    assert [type(e) for e in ei.value.exceptions] == [KeyError]


async def test_counting_scope_works_where_trio_expects_a_nursery() -> None:
    """Code written for a nursery (start_soon, start) accepts a counting_scope."""

    async def serve(nursery: Any) -> list[str]:
        log: list[str] = []

        async def handler(name: str) -> None:
            await trio.sleep(0)
            log.append(name)

        async def listener(*, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
            task_status.started("ready")
            nursery.start_soon(handler, "from-listener")

        assert await nursery.start(listener) == "ready"
        nursery.start_soon(handler, "direct")
        return log

    async with trio.open_nursery() as n:
        log_n = await serve(n)
    async with sx.counting_scope() as scope:
        log_s = await serve(scope)
    assert sorted(log_n) == sorted(log_s) == ["direct", "from-listener"]


# --------------------------------------------------------------------------- spawn/future


@pytest.mark.parametrize("kind", SCOPES)
async def test_spawning_plain_senders_creates_no_trio_task(kind: Any) -> None:
    """Spawning a plain sender creates no trio task; only coroutines are hosted."""
    ran: list[int] = []
    async with kind() as scope:
        counter = TaskCounter()
        trio.lowlevel.add_instrument(counter)
        try:
            for i in range(100):
                scope.spawn(sx.just(i) | sx.then(ran.append))
                sx.spawn(sx.just(i) | sx.then(ran.append), scope.get_token())
            assert counter.spawned == 0
            assert len(ran) == 200

            async def coro() -> None:
                await trio.sleep(0)

            scope.spawn(coro())
            assert counter.spawned == 1
        finally:
            trio.lowlevel.remove_instrument(counter)


@pytest.mark.parametrize("kind", SCOPES)
async def test_spawned_coroutines_run_in_the_scopes_nursery(kind: Any) -> None:
    parents: list[Any] = []

    async def where() -> None:
        parents.append(trio.lowlevel.current_task().parent_nursery)

    async with kind() as scope:
        scope.spawn(where())
        scope.start_soon(where)
    assert len(parents) == 2
    assert parents[0] is parents[1] is not None


@pytest.mark.parametrize("kind", SCOPES)
async def test_spawn_future_starts_synchronously_and_awaits(kind: Any) -> None:
    ran: list[str] = []
    async with kind() as scope:
        f = scope.spawn_future(sx.just(2) | sx.then(lambda x: ran.append("ran") or x * 21))
        assert ran == ["ran"]  # started before spawn_future returned ([exec.spawn.future])
        assert await f == 42

        async def slow() -> int:
            await trio.sleep(0.001)
            return 5

        assert await scope.spawn_future(slow()) == 5


@pytest.mark.parametrize("kind", SCOPES)
async def test_scope_spawn_env_has_the_trio_scheduler(kind: Any) -> None:
    async with kind() as scope:
        sch = await scope.spawn_future(sx.read_env(sx.get_scheduler))
        assert sch == sx.trio_scheduler()
        # and a scheduler hop through it
        hops: list[int] = []
        scope.spawn(
            sx.read_env(sx.get_scheduler)
            | sx.let_value(sx.schedule)
            | sx.then(lambda: hops.append(threading.get_ident()))
        )
    assert hops == [threading.get_ident()]


@pytest.mark.parametrize("kind", SCOPES)
async def test_await_join_in_trio(kind: Any) -> None:
    scope = kind()
    sch = ManualScheduler()
    sx.spawn(sx.schedule(sch), scope.get_token())

    async def later() -> None:
        await trio.sleep(0.001)
        sch.drain()

    async with trio.open_nursery() as n:
        n.start_soon(later)
        await scope.join()
    assert scope.state == "joined"


# --------------------------------------------------------------------------- exit joins


@pytest.mark.parametrize("kind", SCOPES)
async def test_exit_joins_without_closing(kind: Any) -> None:
    """Work spawned from spawned work while the block exits still runs (open-and-joining)."""
    log: list[str] = []

    async def parent(scope: Any) -> None:
        await trio.sleep(0.002)
        log.append("parent")
        scope.start_soon(child)
        scope.spawn(sx.just() | sx.then(lambda: log.append("sender")))

    async def child() -> None:
        await trio.sleep(0.002)
        log.append("child")

    async with kind() as scope:
        scope.start_soon(parent, scope)
    assert log == ["parent", "sender", "child"]
    # afterwards the scope is joined: new work is dropped silently
    # (docs/scopes.md "The nursery face: `async with`")
    scope.spawn(sx.just() | sx.then(lambda: log.append("late")))
    assert log[-1] == "child"


@pytest.mark.parametrize("kind", SCOPES)
async def test_exit_waits_for_cross_thread_work(kind: Any) -> None:
    done: list[int] = []
    async with kind() as scope:
        sch = ManualScheduler()
        scope.spawn(sx.schedule(sch) | sx.then(lambda: done.append(threading.get_ident())))
        t = threading.Thread(
            target=lambda: (trio.from_thread.run_sync(lambda: None, trio_token=token), sch.drain())
        )
        token = trio.lowlevel.current_trio_token()
        t.start()
    t.join()
    assert done == [t.ident]


# --------------------------------------------------------------------------- cancellation


async def test_counting_scope_enclosing_cancellation_requests_stop(
    autojump_clock: Any,
) -> None:
    w = WaitForStop()
    cancelled: list[str] = []

    async def sleeper() -> None:
        try:
            await trio.sleep(100)
        except trio.Cancelled:
            cancelled.append("task")
            raise

    with trio.move_on_after(1) as cs:
        async with sx.counting_scope() as scope:
            scope.spawn(w)
            scope.start_soon(sleeper)
            await trio.sleep(50)
    assert cs.cancelled_caught
    assert cancelled == ["task"]
    assert w.stopped_on == [threading.get_ident()]
    assert trio.current_time() == pytest.approx(1)
    assert scope.state == "joined"


async def test_counting_scope_cancellation_while_exiting(autojump_clock: Any) -> None:
    """The body has finished; the exit's join is cancelled by the enclosing scope: stop is
    requested and the join continues, shielded (docs/scopes.md "The nursery face: `async with`")."""
    w = WaitForStop()
    with trio.move_on_after(1) as cs:
        async with sx.counting_scope() as scope:
            scope.spawn(w)
            scope.start_soon(trio.sleep, 100)
    assert cs.cancelled_caught
    assert w.stopped_on
    assert trio.current_time() == pytest.approx(1)


async def test_simple_scope_work_is_not_cancelled(autojump_clock: Any) -> None:
    """simple_counting_scope has no stop source: leaving the block waits for the work even
    when the enclosing code is cancelled, and the Cancelled then propagates."""
    done: list[str] = []

    async def work() -> None:
        await trio.sleep(10)
        done.append("task")

    sch = ManualScheduler()

    async def later() -> None:
        await trio.sleep(20)
        sch.drain()

    async with trio.open_nursery() as n:
        n.start_soon(later)
        with trio.move_on_after(1) as cs:
            async with sx.simple_counting_scope() as scope:
                scope.start_soon(work)
                scope.spawn(sx.schedule(sch) | sx.then(lambda: done.append("sender")))
                await trio.sleep(100)
    assert cs.cancelled_caught
    assert sorted(done) == ["sender", "task"]
    assert trio.current_time() == pytest.approx(20)


async def test_body_exception_requests_stop_and_propagates(autojump_clock: Any) -> None:
    w = WaitForStop()
    with pytest.raises(ExceptionGroup) as ei:  # strict, as trio.open_nursery() by default
        async with sx.counting_scope() as scope:
            scope.spawn(w)
            scope.start_soon(trio.sleep, 100)
            1 / 0  # noqa: B018
    assert [type(e) for e in ei.value.exceptions] == [ZeroDivisionError]
    assert w.stopped_on
    assert trio.current_time() == 0
    assert scope.state == "joined"


async def test_simple_scope_body_exception_waits_then_propagates(
    autojump_clock: Any,
) -> None:
    with pytest.raises(ExceptionGroup) as ei:
        async with sx.simple_counting_scope() as scope:
            scope.start_soon(trio.sleep, 5)
            1 / 0  # noqa: B018
    assert [type(e) for e in ei.value.exceptions] == [ZeroDivisionError]
    assert trio.current_time() == pytest.approx(5)
    # strict_exception_groups=False: the body's exception alone comes out as it is.
    with pytest.raises(ZeroDivisionError):
        async with sx.simple_counting_scope(strict_exception_groups=False):
            1 / 0  # noqa: B018


async def test_error_of_spawned_work_cancels_siblings(autojump_clock: Any) -> None:
    w = WaitForStop()

    async def fail() -> None:
        await trio.sleep(1)
        raise ValueError("task failed")

    with pytest.raises(ExceptionGroup) as ei:
        async with sx.counting_scope() as scope:
            scope.spawn(w)
            scope.start_soon(trio.sleep, 100)
            scope.start_soon(fail)
            scope.spawn(sx.schedule(sx.trio_scheduler()) | sx.then(lambda: 1 / 0))
    # The sender's error (at time 0) requested stop: fail() was cancelled before it raised.
    assert [type(e) for e in ei.value.exceptions] == [ZeroDivisionError]
    assert w.stopped_on
    assert trio.current_time() == pytest.approx(0)


async def test_task_error_cancels_siblings(autojump_clock: Any) -> None:
    w = WaitForStop()

    async def fail() -> None:
        await trio.sleep(1)
        raise ValueError("task failed")

    with pytest.raises(ExceptionGroup) as ei:
        async with sx.counting_scope() as scope:
            scope.spawn(w)
            scope.start_soon(trio.sleep, 100)
            scope.start_soon(fail)
    assert [type(e) for e in ei.value.exceptions] == [ValueError]
    assert w.stopped_on
    assert trio.current_time() == pytest.approx(1)


async def test_errors_and_body_exception_in_one_group() -> None:
    async def fail() -> None:
        raise ValueError("child")

    with pytest.raises(ExceptionGroup) as ei:
        async with sx.counting_scope() as scope:
            scope.start_soon(fail)
            raise KeyError("body")  # before the child ran: both are reported, body first
    assert [type(e) for e in ei.value.exceptions] == [KeyError, ValueError]


@pytest.mark.parametrize("how", ["start_soon", "spawn", "spawn_from_thread"])
async def test_failing_work_cancels_the_body_like_a_nursery(
    how: str, autojump_clock: Any
) -> None:
    """A nursery cancels its body when a child fails; a counting_scope does the same for an
    exception of a hosted task or an error completion of spawned work
    (docs/scopes.md "What happens when things fail",
    docs/scopes.md "The nursery face: `async with`"). The body's Cancelled is absorbed; the block
    raises the group of the work's errors; code after the body's checkpoint never runs."""
    reached: list[str] = []

    async def fail() -> None:
        raise ValueError("child")

    async def body_waits(scope: Any) -> None:
        await trio.sleep(10)
        reached.append("after sleep")  # pragma: no cover - must not run

    t0 = trio.current_time()
    with pytest.raises(ExceptionGroup) as ei:
        async with sx.counting_scope() as scope:
            if how == "start_soon":
                scope.start_soon(fail)
            elif how == "spawn":
                scope.spawn(sx.just() | sx.then(lambda: (_ for _ in ()).throw(ValueError())))
            else:
                await trio.to_thread.run_sync(
                    lambda: sx.spawn(sx.just_error(ValueError("t")), scope.get_token())
                )
            reached.append("body")
            await body_waits(scope)
    assert [type(e) for e in ei.value.exceptions] == [ValueError]
    assert reached == ["body"]
    assert trio.current_time() - t0 < 1


async def test_simple_scope_body_and_request_stop_do_not_cancel_the_body(
    autojump_clock: Any,
) -> None:
    """simple_counting_scope cancels nothing; request_stop() stops the work, not the body
    (the body is not work of the scope)."""

    async def fail() -> None:
        raise ValueError("child")

    with pytest.raises(ExceptionGroup):
        async with sx.simple_counting_scope() as scope:
            scope.start_soon(fail)
            await trio.sleep(1)  # not cancelled
            done = trio.current_time()
    assert done >= 1
    async with sx.counting_scope() as cs:
        cs.request_stop()
        await trio.sleep(1)  # not cancelled
        after = True
    assert after


async def test_body_cancelled_by_the_scope_inside_an_outer_cancel_scope(
    autojump_clock: Any,
) -> None:
    """The scope absorbs only its own cancellation: an enclosing cancel scope's Cancelled
    still propagates to it."""
    with trio.move_on_after(5) as outer:
        async with sx.counting_scope():
            await trio.sleep(10)
    assert outer.cancelled_caught


async def test_request_stop_cancels_hosted_tasks_and_senders() -> None:
    w = WaitForStop()
    cancelled: list[int] = []

    async def sleeper() -> None:
        try:
            await trio.sleep_forever()
        finally:
            cancelled.append(1)

    async with sx.counting_scope() as scope:
        for _ in range(10):
            scope.start_soon(sleeper)
        scope.spawn(w)
        await trio.testing.wait_all_tasks_blocked()
        scope.request_stop()
        assert scope.state == "open"  # request_stop does not close
        # work started after the stop request starts stopped
        scope.start_soon(sleeper)
        toks: list[Any] = []
        scope.spawn(sx.read_env(sx.get_stop_token) | sx.then(toks.append))
        assert toks[0].stop_requested()
    assert len(cancelled) == 11
    assert scope.unhandled_errors == ()


async def test_request_stop_from_another_thread_cancels_trio_tasks() -> None:
    async with sx.counting_scope() as scope:
        scope.start_soon(trio.sleep_forever)
        w = WaitForStop()
        scope.spawn(w)
        await trio.testing.wait_all_tasks_blocked()
        t = threading.Thread(target=scope.request_stop)
        t.start()
        t.join()
    assert w.stopped_on == [t.ident]


async def test_cancelled_awaiter_of_a_future_stops_at_once(autojump_clock: Any) -> None:
    """Awaiting a future from a trio task that gets cancelled: the consumer completes stopped
    at once (Cancelled), the work is asked to stop and the scope still waits for it."""
    finished: list[str] = []

    async def work() -> int:
        try:
            await trio.sleep(100)
        finally:
            with trio.CancelScope(shield=True):
                await trio.sleep(5)  # slow cleanup after the stop request
            finished.append("work")
        return 1

    async with sx.counting_scope() as scope:
        fut = scope.spawn_future(work())
        with trio.move_on_after(1) as cs:
            await fut
        assert cs.cancelled_caught
        assert trio.current_time() == pytest.approx(1)
        assert finished == []
    assert finished == ["work"]
    assert trio.current_time() == pytest.approx(6)


# --------------------------------------------------------------------------- bad use


@pytest.mark.parametrize("kind", SCOPES)
async def test_bad_input_to_start_soon(kind: Any) -> None:
    def not_async() -> None:
        pass

    async def coro_fn() -> None:
        pass

    async with kind() as scope:
        with pytest.raises(TypeError, match="not an async function"):
            scope.start_soon(not_async)
        c = coro_fn()
        with pytest.raises(TypeError, match="coroutine object"):
            scope.start_soon(c)  # type: ignore[arg-type]
        c.close()
        with pytest.raises(TypeError, match="int"):
            scope.start_soon(3)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="async function"):
            await scope.start(3)  # type: ignore[arg-type]
        assert scope.count == 0


@pytest.mark.parametrize("kind", SCOPES)
async def test_bad_state_use(kind: Any) -> None:
    async def noop() -> None:
        pass

    scope = kind()
    with pytest.raises(RuntimeError, match="async with"):
        scope.start_soon(noop)
    with pytest.raises(RuntimeError, match="async with"):
        await scope.start(noop)
    async with scope:
        with pytest.raises(RuntimeError, match="already open"):
            await scope.__aenter__()
    with pytest.raises(RuntimeError, match="joined"):
        async with scope:
            pass  # pragma: no cover
    # a closed scope refuses start_soon and start loudly, as trio does for a nursery closed
    # to new arrivals (sx.spawn drops silently, [exec.spawn])
    async with kind() as s2:
        s2.close()
        with pytest.raises(RuntimeError, match="does not accept new work"):
            s2.start_soon(noop)
        assert s2.count == 0
        with pytest.raises(RuntimeError, match="does not accept new work"):
            await s2.start(noop)


@pytest.mark.parametrize("kind", SCOPES)
async def test_scope_used_before_the_block(kind: Any) -> None:
    """Work spawned before `async with` is joined by the block too."""
    scope = kind()
    sch = ManualScheduler()
    sx.spawn(sx.schedule(sch), scope.get_token())

    async def drain_later() -> None:
        await trio.sleep(0.001)
        sch.drain()

    async with scope:
        scope.start_soon(drain_later)
    assert scope.count == 0 and scope.state == "joined"


async def test_unjoined_scope_warns_when_collected() -> None:
    scope = sx.counting_scope()
    sx.spawn(sx.schedule(ManualScheduler()), scope.get_token())
    with pytest.warns(ResourceWarning, match="must be joined"):
        del scope
        gc.collect()


async def test_many_hosted_tasks_exact_count() -> None:
    n = [0]

    async def bump() -> None:
        await trio.lowlevel.checkpoint()
        n[0] += 1

    async with no_leaks(), sx.counting_scope() as scope:
        for _ in range(2000):
            scope.start_soon(bump)
    assert n[0] == 2000


@pytest.mark.parametrize("kind", SCOPES)
async def test_start_soon_off_the_trio_thread_is_a_clear_error_spawn_works(kind: Any) -> None:
    """Other threads use scope.spawn(coro): the coroutine still runs in the scope's nursery
    on the trio thread (docs/trio.md "trio cancellation becomes a stop request"); start_soon there
    raises a RuntimeError saying so."""
    ran: list[int] = []

    async def work() -> None:
        await trio.sleep(0)
        ran.append(threading.get_ident())

    errors: list[BaseException] = []
    async with kind() as scope:

        def other() -> None:
            try:
                scope.start_soon(work)
            except RuntimeError as e:
                errors.append(e)
            scope.spawn(work())

        await trio.to_thread.run_sync(other)
    assert len(errors) == 1 and "trio thread" in str(errors[0])
    assert ran == [threading.get_ident()]
    assert scope.count == 0


def test_crawler_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """examples/crawler.py runs (virtual time) and reports a stopped crawl."""
    import runpy
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "examples" / "crawler.py"
    runpy.run_path(str(path), run_name="__main__")
    out = capsys.readouterr().out
    assert "part 1: fetched 20 pages" in out
    assert "at most 4 at a time (limit 4)" in out
    assert "request_stop()" in out
    assert "scope is joined" in out


@pytest.mark.parametrize("kind", SCOPES)
async def test_spawn_coroutine_without_async_with(kind: Any) -> None:
    """sx.spawn(coro, token) in trio without `async with`: the coroutine runs as a trio task
    of the run (the bridge's system task) and the scope still tracks it."""
    ran: list[str] = []

    async def work() -> None:
        await trio.sleep(0)
        ran.append("coro")

    scope = kind()
    sx.spawn(work(), scope.get_token())
    assert scope.count == 1
    await scope.join()
    assert ran == ["coro"] and scope.state == "joined"


async def test_spawn_future_finished_unconsumed_does_not_hold_the_block(
    autojump_clock: Any,
) -> None:
    """[exec.spawn.future], docs/scopes.md "Futures outlive their work": the association is
    released when the work completes, so a block that keeps an unconsumed future in a
    variable finishes at once; the result stays in the future and can be awaited after."""
    async with sx.counting_scope() as scope:
        fut = scope.spawn_future(sx.just(1))
        assert scope.count == 0
    assert trio.current_time() == 0
    assert scope.state == "joined"
    assert await fut == 1


async def test_spawn_future_finishing_while_the_exit_waits_then_await_after(
    autojump_clock: Any,
) -> None:
    """The exit waits for the work only while it runs; the result is awaited after."""
    sch = ManualScheduler()

    async def finish_later() -> None:
        await trio.sleep(1)
        sch.drain()

    async with trio.open_nursery() as n:
        async with sx.counting_scope() as scope:
            fut = scope.spawn_future(sx.schedule(sch) | sx.then(lambda: 7))
            n.start_soon(finish_later)
        assert trio.current_time() == pytest.approx(1)
    assert await fut == 7


async def test_no_warning_when_futures_are_consumed_or_still_running(
    autojump_clock: Any,
) -> None:
    sch = ManualScheduler()
    async with sx.counting_scope() as scope:
        fut = scope.spawn_future(sx.just(2))
        assert await fut == 2
        running = scope.spawn_future(sx.schedule(sch))
        del running  # abandoned: stop requested, the scope waits for the work

        async def drain_later() -> None:
            await trio.sleep(1)
            sch.drain()

        scope.start_soon(drain_later)
    assert scope.state == "joined"


