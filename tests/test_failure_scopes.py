"""Failure semantics of counting scopes: no hang, no lost error, Ctrl-C always works.

[exec.scope.counting], [exec.spawn], [exec.spawn.future], [exec.associate]; docs/scopes.md
"What happens when things fail". Each test compares with what a trio nursery does in the same
situation where there is one. Tests of behaviour that used to hang or crash trio run in a child
process with a hard timeout (``run_child``), so a regression fails instead of stalling the run.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import trio
import trio.testing
from _subproc import HangGuard, run_child

import structexec as sx
from structexec.testing import ManualScheduler, RecordingReceiver

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup, ExceptionGroup

SCOPES = [sx.simple_counting_scope, sx.counting_scope]


@pytest.fixture
async def hang_guard() -> Any:
    """Every trio test here used to hang (or could, if its defect came back): fail instead."""
    g = HangGuard(trio.lowlevel.current_trio_token(), 15.0)
    yield
    g.close()


guarded = pytest.mark.usefixtures("hang_guard")
INTERRUPTS = [KeyboardInterrupt, SystemExit]


def join_now(scope: Any) -> RecordingReceiver:
    r = RecordingReceiver(extra_env=sx.prop(sx.get_scheduler, sx.inline_scheduler()))
    r.run(scope.join())
    return r


def _raise(exc: type[BaseException]) -> Any:
    def f(*_: Any) -> Any:
        raise exc()

    return f


def _leaves(e: BaseException) -> list[BaseException]:
    if isinstance(e, BaseExceptionGroup):
        return [x for sub in e.exceptions for x in _leaves(sub)]
    return [e]


@contextlib.contextmanager
def raises_group_of(*types: type[BaseException]) -> Iterator[Any]:
    """What leaves a scope (strict exception groups, as a trio nursery by default): a group
    whose leaves are exactly ``types``."""
    with pytest.raises(BaseExceptionGroup) as ei:
        yield ei
    assert sorted(type(e).__name__ for e in _leaves(ei.value)) == sorted(
        t.__name__ for t in types
    )


# --------------------------------------------------------------------- 1. Ctrl-C at the exit

_CTRL_C_AT_EXIT = """
import trio, structexec as sx
async def main():
    async with {opener} as s:
        s.start_soon(trio.sleep_forever)
        ready()
try:
    trio.run(main)
except BaseException as e:
    print("RAISED", type(e).__name__, leaf_names(e))
else:
    print("RETURNED")
"""


@pytest.mark.parametrize(
    "opener", ["trio.open_nursery()", "sx.counting_scope()", "sx.simple_counting_scope()"]
)
def test_ctrl_c_while_the_exit_waits_raises_keyboard_interrupt(opener: str) -> None:
    """Defect: SIGINT while ``async with`` waits for a hosted task crashed trio
    (TrioInternalError, Nursery.__del__ AssertionError). Now, like a nursery, the hosted task
    is cancelled and KeyboardInterrupt comes out of ``trio.run``, with nothing else."""
    r = run_child(_CTRL_C_AT_EXIT.format(opener=opener), timeout=20, sigint_after_ready=True)
    assert not r.timed_out, r
    assert "RAISED" in r.stdout, r
    assert "['KeyboardInterrupt']" in r.stdout, r
    assert "TrioInternalError" not in r.stdout + r.stderr, r
    assert "AssertionError" not in r.stderr, r


def test_ctrl_c_with_trio_serve_tcp_handler_nursery() -> None:
    """``trio.serve_tcp(..., handler_nursery=scope)``: Ctrl-C while the exit waits for the
    server and its handlers stops them cleanly (it crashed trio)."""
    code = """
import trio, structexec as sx
async def handler(stream):
    await trio.sleep_forever()
async def main():
    async with sx.counting_scope() as scope:
        listeners = await scope.start(
            lambda task_status: trio.serve_tcp(handler, 0, host="127.0.0.1",
                                               handler_nursery=scope, task_status=task_status))
        port = listeners[0].socket.getsockname()[1]
        conn = await trio.open_tcp_stream("127.0.0.1", port)
        await trio.sleep(0.05)
        ready()  # the body ends here: Ctrl-C arrives while the exit waits for the server
try:
    trio.run(main)
except BaseException as e:
    print("KI" if leaf_names(e) == ["KeyboardInterrupt"] else f"OTHER {e!r}")
"""
    r = run_child(code, timeout=20, sigint_after_ready=True)
    assert not r.timed_out, r
    assert r.stdout.strip().endswith("KI"), r
    assert "TrioInternalError" not in r.stderr, r


# ------------------------------------------------- 2. unconsumed spawn_future under a timeout


def test_gather_with_a_timeout_does_not_hang() -> None:
    """Defect: unconsumed futures + a cancellation hung forever (the outer deadline could not
    rescue it). Now a finished future releases its association ([exec.spawn.future] as
    revised, docs/scopes.md): the block exits once running work has stopped."""
    code = """
import trio, structexec as sx
async def job(i):
    await trio.sleep(0.01 * (i % 5) + (10 if i % 7 == 0 else 0))
    return i
async def main():
    got = []
    with trio.move_on_after(5) as outer:
        async with sx.counting_scope() as scope:
            futs = [scope.spawn_future(job(i)) for i in range(50)]
            with trio.move_on_after(0.2):
                for f in futs:
                    got.append(await f)
    print("GOT", len(got), "OUTER", outer.cancelled_caught)
trio.run(main)
"""
    r = run_child(code, timeout=30)
    assert not r.timed_out, r
    assert r.returncode == 0, r
    # job(0) sleeps 10 s: the loop is cut at 0.2 s, the outer deadline stops the rest.
    assert "GOT 0 OUTER True" in r.stdout, r


@pytest.mark.parametrize("kind", SCOPES)
@guarded
async def test_finished_future_kept_in_a_variable_does_not_hold_the_exit(
    kind: Any, autojump_clock: trio.testing.MockClock
) -> None:
    async with kind() as scope:
        fut = scope.spawn_future(sx.just(3))
        err = scope.spawn_future(sx.just_stopped())
    assert trio.current_time() == 0 and scope.state == "joined"
    assert await fut == 3  # the result lives in the future, consumed after the block
    with pytest.raises(sx.Stopped):
        await err


@pytest.mark.parametrize("kind", SCOPES)
@guarded
async def test_unconsumed_future_error_is_reported_at_the_exit(
    kind: Any, autojump_clock: trio.testing.MockClock
) -> None:
    """An error nobody consumed by the time the block's join delivers is reported there, in
    the ExceptionGroup, like a nursery child's (never lost). The future still holds it."""
    boom = ValueError("boom")
    with pytest.raises(ExceptionGroup) as ei:
        async with kind() as scope:
            fut = scope.spawn_future(sx.just_error(boom))
            ok = scope.spawn_future(sx.just(1))
    assert ei.value.exceptions == (boom,)
    assert await ok == 1
    with pytest.raises(ValueError):
        await fut  # the same error, to whoever awaits it later


@pytest.mark.parametrize("kind", SCOPES)
@guarded
async def test_consumed_future_error_is_not_reported_again(kind: Any) -> None:
    async with kind() as scope:
        fut = scope.spawn_future(sx.just_error(ValueError("handled")))
        with pytest.raises(ValueError):
            await fut
    assert scope.unhandled_errors == ()


@guarded
async def test_dropped_future_error_inside_the_block_cancels_like_a_child_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Dropping a failed future inside the block makes its error unhandled: counting_scope
    requests stop and cancels the body, as a failing nursery child does."""
    boom = ValueError("dropped")
    with pytest.raises(ExceptionGroup) as ei:
        async with sx.counting_scope() as scope:
            fut = scope.spawn_future(sx.just_error(boom))
            fut.close()
            await trio.sleep_forever()  # cancelled by the scope
    assert ei.value.exceptions == (boom,)
    assert trio.current_time() == 0


def test_bare_join_reports_unconsumed_future_errors() -> None:
    scope = sx.counting_scope()
    fut = sx.spawn_future(sx.just_error(OSError("e")), scope.get_token())
    assert scope.count == 0
    j = join_now(scope)
    assert isinstance(j.error, ExceptionGroup)
    assert [type(e) for e in j.error.exceptions] == [OSError]
    assert sx.sync_wait(sx.stopped_as_optional(fut | sx.upon_error(lambda e: 9))) == (9,)
    del fut  # consumed or not, nothing more is reported after the join


def test_future_error_dropped_after_join_is_not_recorded_twice() -> None:
    scope = sx.counting_scope()
    fut = sx.spawn_future(sx.just_error(OSError("e")), scope.get_token())
    j = join_now(scope)
    assert len(j.error.exceptions) == 1
    fut.close()
    assert len(scope.unhandled_errors) == 1


def test_still_running_future_dropped_requests_stop_and_is_waited_for() -> None:
    """Abandon, as before: stop requested, the scope waits for the work."""
    scope = sx.simple_counting_scope()
    sch = ManualScheduler()
    toks: list[Any] = []
    fut = sx.spawn_future(
        sx.read_env(sx.get_stop_token) | sx.then(toks.append) | sx.let_value(
            lambda: sx.schedule(sch)
        ),
        scope.get_token(),
    )
    assert scope.count == 1
    del fut
    assert toks[0].stop_requested()
    j = join_now(scope)
    assert not j.done
    sch.drain()
    assert j.value == ()


def test_future_races_consumer_across_threads_release_exactly_once() -> None:
    """Completion on another thread racing consume/abandon: every association is released
    exactly once (a double release would raise; a missing one would keep the count)."""
    for _ in range(20):
        scope = sx.counting_scope()
        sch = ManualScheduler()
        futs = [
            sx.spawn_future(sx.schedule(sch) | sx.then(lambda i=i: i), scope.get_token())
            for i in range(100)
        ]
        t = threading.Thread(target=sch.drain)
        rs = [RecordingReceiver() for _ in futs[::2]]
        t.start()
        for r, f in zip(rs, futs[::2]):
            r.run(f)
        for f in futs[1::2]:
            f.close()
        t.join(10)
        sch.drain()
        assert scope.count == 0
        assert [r.wait().value for r in rs] == [(i,) for i in range(0, 100, 2)]
        assert join_now(scope).value == ()


# ------------------------------------------- 3. a BaseException while spawned work starts


def _starters() -> list[Any]:
    def spawn_sender(body: Any, tok: Any) -> None:
        sx.spawn(sx.just() | sx.then(body), tok)

    def spawn_sender_env(body: Any, tok: Any) -> None:
        sx.spawn(sx.just() | sx.then(body), tok, sx.prop(sx.get_allocator, None))

    def spawn_multi(body: Any, tok: Any) -> None:
        sx.spawn(sx.just() | sx.then(lambda: None) | sx.then(body), tok)

    def spawn_let(body: Any, tok: Any) -> None:
        sx.spawn(sx.just() | sx.let_value(lambda: sx.just() | sx.then(body)), tok)

    def spawn_future_(body: Any, tok: Any) -> None:
        sx.spawn_future(sx.just() | sx.then(body), tok)

    def spawn_future_env(body: Any, tok: Any) -> None:
        sx.spawn_future(sx.just() | sx.then(body), tok, sx.prop(sx.get_allocator, None))

    return [spawn_sender, spawn_sender_env, spawn_multi, spawn_let, spawn_future_, spawn_future_env]


@pytest.mark.parametrize("start", _starters(), ids=lambda f: f.__name__)
@pytest.mark.parametrize("exc", INTERRUPTS)
@pytest.mark.parametrize("kind", SCOPES)
def test_base_exception_during_start_releases_the_association(
    kind: Any, exc: type[BaseException], start: Any
) -> None:
    """Defect: ``spawn(just() | then(sys.exit))`` propagated SystemExit and left the scope
    ``open, 1 associated`` forever. The BaseException still propagates to the caller (it is
    never an error datum), and the association is released ([exec.spawn])."""
    scope = kind()
    with pytest.raises(exc):
        start(_raise(exc), scope.get_token())
    assert scope.count == 0
    assert scope.unhandled_errors == ()
    assert join_now(scope).value == ()


@pytest.mark.parametrize("exc", INTERRUPTS)
def test_base_exception_during_start_with_a_user_token(exc: type[BaseException]) -> None:
    class CountingToken:
        """A user-defined scope token ([exec.scope.concepts])."""

        associated = 0

        def try_associate(self) -> bool:
            self.associated += 1
            return True

        def disassociate(self) -> None:
            self.associated -= 1

        def wrap(self, sndr: Any) -> Any:
            return sndr

    tok = CountingToken()
    with pytest.raises(exc):
        sx.spawn(sx.just() | sx.then(_raise(exc)), tok)
    with pytest.raises(exc):
        sx.spawn_future(sx.just() | sx.then(_raise(exc)), tok)
    assert tok.associated == 0


@pytest.mark.parametrize("exc", INTERRUPTS)
@pytest.mark.parametrize("kind", SCOPES)
def test_base_exception_through_associate_releases(kind: Any, exc: type[BaseException]) -> None:
    """[exec.associate]: a BaseException raised by the receiver's completion (downstream
    user code) or while the child starts does not keep the association."""
    scope = kind()
    with pytest.raises(exc):
        sx.sync_wait(sx.associate(sx.just(1), scope.get_token()) | sx.then(_raise(exc)))
    assert scope.count == 0
    with pytest.raises(exc):
        sx.sync_wait(sx.associate(sx.just() | sx.then(_raise(exc)), scope.get_token()))
    assert scope.count == 0
    assert join_now(scope).value == ()


@pytest.mark.parametrize("exc", INTERRUPTS)
@guarded
async def test_base_exception_during_start_in_a_block_then_the_block_exits(
    exc: type[BaseException], autojump_clock: trio.testing.MockClock
) -> None:
    """The block that used to hang at exit now exits at once."""
    with raises_group_of(exc):
        async with sx.counting_scope() as scope:
            scope.spawn(sx.just() | sx.then(_raise(exc)))
    assert scope.state == "joined" and trio.current_time() == 0


def test_trampolined_starts_after_a_raising_one_still_run() -> None:
    """A start queued on the per-thread trampoline behind one that raises is still started
    (nothing is stranded on the queue, where it would wait for an unrelated later start);
    the first exception is raised once the queue is empty."""
    from structexec._core._trampoline import MAX_DEPTH, trampoline_start

    started: list[str] = []

    class Op:
        def __init__(self, name: str, kids: tuple[Any, ...] = (), exc: Any = None) -> None:
            self.name, self.kids, self.exc = name, kids, exc

        def start(self) -> None:
            started.append(self.name)
            for k in self.kids:
                trampoline_start(k)
            if self.exc is not None:
                raise self.exc()

    # The innermost op starts at depth MAX_DEPTH: its two children are queued, not nested.
    op = Op("n0", (Op("raises", exc=KeyboardInterrupt), Op("after")))
    for i in range(1, MAX_DEPTH):
        op = Op(f"n{i}", (op,))
    with pytest.raises(KeyboardInterrupt):
        trampoline_start(op)
    assert started[-2:] == ["raises", "after"]
    started.clear()
    trampoline_start(Op("next"))
    assert started == ["next"]  # nothing left over on the queue


# ---------------------------------------- 6. KeyboardInterrupt / SystemExit from hosted work


@pytest.mark.parametrize("exc", INTERRUPTS)
@pytest.mark.parametrize("kind", SCOPES)
@guarded
async def test_interrupt_from_a_hosted_task_cancels_the_body_and_propagates(
    kind: Any, exc: type[BaseException], autojump_clock: trio.testing.MockClock
) -> None:
    """Defect: the scope waited for the body forever. Now, like a nursery child's crash, the
    body and the other hosted tasks are cancelled and the exception propagates."""
    cancelled: list[str] = []

    async def sibling() -> None:
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            cancelled.append("sibling")
            raise

    async def crash() -> None:
        await trio.sleep(1)
        raise exc()

    with raises_group_of(exc):
        async with kind() as scope:
            scope.start_soon(sibling)
            scope.start_soon(crash)
            try:
                await trio.sleep_forever()
            except trio.Cancelled:
                cancelled.append("body")
                raise
    assert sorted(cancelled) == ["body", "sibling"]
    assert trio.current_time() == pytest.approx(1)
    assert scope.state == "joined"


@pytest.mark.parametrize("exc", INTERRUPTS)
@guarded
async def test_interrupt_from_a_nursery_child_for_comparison(
    exc: type[BaseException], autojump_clock: trio.testing.MockClock
) -> None:
    async def crash() -> None:
        await trio.sleep(1)
        raise exc()

    with pytest.raises(BaseExceptionGroup) as ei:
        async with trio.open_nursery() as n:
            n.start_soon(crash)
            await trio.sleep_forever()
    assert [type(e) for e in _leaves(ei.value)] == [exc]
    assert trio.current_time() == pytest.approx(1)


@pytest.mark.parametrize("exc", INTERRUPTS)
@pytest.mark.parametrize("kind", SCOPES)
@guarded
async def test_interrupt_from_a_spawned_coroutine_propagates(
    kind: Any, exc: type[BaseException], autojump_clock: trio.testing.MockClock
) -> None:
    """A coroutine spawned as a sender runs in the scope's nursery: same outcome."""

    async def crash() -> None:
        await trio.sleep(1)
        raise exc()

    with raises_group_of(exc):
        async with kind() as scope:
            scope.spawn(crash())
            await trio.sleep_forever()
    assert trio.current_time() == pytest.approx(1)


@pytest.mark.parametrize("exc", INTERRUPTS)
@guarded
async def test_interrupt_in_start_before_and_after_started(
    exc: type[BaseException], autojump_clock: trio.testing.MockClock
) -> None:
    async def before(task_status: Any) -> None:
        raise exc()

    async def after(task_status: Any) -> None:
        task_status.started(1)
        await trio.sleep(1)
        raise exc()

    async with sx.counting_scope() as scope:
        with pytest.raises(exc):
            await scope.start(before)  # before started(): out of start(), as in trio
    assert scope.state == "joined"
    with raises_group_of(exc):
        async with sx.counting_scope() as scope:
            assert await scope.start(after) == 1
            await trio.sleep_forever()
    assert trio.current_time() == pytest.approx(1)


@pytest.mark.parametrize("kind", SCOPES)
@guarded
async def test_keyboard_interrupt_in_the_body_cancels_hosted_tasks(
    kind: Any, autojump_clock: trio.testing.MockClock
) -> None:
    """Ctrl-C in the body: even a simple_counting_scope (whose senders cannot be stopped)
    cancels its hosted trio tasks, so the program can always be interrupted."""
    with raises_group_of(KeyboardInterrupt):
        async with kind() as scope:
            scope.start_soon(trio.sleep_forever)
            await trio.sleep(1)
            raise KeyboardInterrupt
    assert trio.current_time() == pytest.approx(1)


@guarded
async def test_interrupt_and_errors_come_out_together(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def fail() -> None:
        raise ValueError("v")

    async def crash() -> None:
        await trio.sleep(1)
        raise KeyboardInterrupt

    with pytest.raises(BaseExceptionGroup) as ei:
        async with sx.simple_counting_scope() as scope:
            scope.start_soon(fail)
            scope.start_soon(crash)
    assert sorted(type(e).__name__ for e in _leaves(ei.value)) == [
        "KeyboardInterrupt",
        "ValueError",
    ]


# ------------------------------------------------ 7. request_stop never fails the block


@pytest.mark.parametrize("from_thread", [False, True])
@guarded
async def test_request_stop_with_a_task_awaiting_a_stopped_future(
    from_thread: bool, autojump_clock: trio.testing.MockClock
) -> None:
    """Defect: ``request_stop()`` made the block raise ``BaseExceptionGroup([Stopped()])``
    when a hosted task awaited a future whose work ended stopped. A stop you request
    yourself stops the work, not the body: the block exits normally."""
    sch = ManualScheduler()

    async def waiter(fut: Any) -> None:
        with trio.CancelScope(shield=True):  # the stop reaches it through the future only
            await fut  # raises sx.Stopped, which escapes the task

    async with sx.counting_scope() as scope:
        for _ in range(5):
            scope.start_soon(waiter, scope.spawn_future(sx.schedule(sch)))
        await trio.sleep(1)
        if from_thread:
            await trio.to_thread.run_sync(scope.request_stop)
        else:
            scope.request_stop()
        await trio.sleep(1)
        sch.drain()  # the work ends stopped
    assert scope.unhandled_errors == ()


@guarded
async def test_hosted_task_ending_with_stopped_is_a_stopped_task() -> None:
    """A hosted task that lets ``sx.Stopped`` escape (an awaited sender completed stopped)
    ends stopped, like spawned work that completes ``set_stopped()``: not an error."""

    async def t() -> None:
        await sx.just_stopped()

    async with sx.counting_scope() as scope:
        scope.start_soon(t)
        scope.spawn(t())
    assert scope.unhandled_errors == ()


# -------------------------------------------------- spawn of a coroutine vs of a sender


@pytest.mark.parametrize("kind", SCOPES)
@guarded
async def test_spawn_value_datums_are_reported_consistently(kind: Any) -> None:
    """``spawn(just(1))`` is a TypeError when it is built (the signature proves it); a
    coroutine or a then-function whose value is only known at run time is reported by the
    scope with the same TypeError. ``start_soon`` ignores return values, as trio does."""
    with pytest.raises(TypeError, match="spawn_future"):
        sx.spawn(sx.just(1), kind().get_token())

    async def returns() -> int:
        return 42

    with pytest.raises(ExceptionGroup) as ei:
        async with kind() as scope:
            scope.spawn(returns())
    (err,) = ei.value.exceptions
    assert isinstance(err, TypeError) and "(42,)" in str(err) and "spawn_future" in str(err)
    async with kind() as scope:
        scope.start_soon(returns)  # a trio task: its return value is ignored
        assert await scope.spawn_future(returns()) == 42


# ------------------------------------------- entering a scope in a cancelled context


@pytest.mark.parametrize("kind", SCOPES)
@guarded
async def test_entering_a_scope_while_cancelled_does_not_hang(kind: Any) -> None:
    """Used to deadlock (no timeout could end it): trio made the host's ``started()`` a
    no-op. Now the body runs and is cancelled at its first checkpoint, as in a nursery."""
    reached: list[str] = []
    with trio.move_on_after(5):  # a hang would end here (and fail below), not stall
        with trio.CancelScope() as cs:
            cs.cancel()
            async with kind():
                reached.append("body")
                await trio.sleep(0)
                reached.append("not reached")
        reached.append("after")
    assert reached == ["body", "after"]


# ------------------------------------------------------- Ctrl-C inside a stop callback


@pytest.mark.parametrize("exc", INTERRUPTS)
def test_interrupt_in_a_stop_callback_propagates_and_the_others_run(
    exc: type[BaseException],
) -> None:
    """A KeyboardInterrupt that lands in a stop callback (a real Ctrl-C can) is not a
    contract violation: the other callbacks run and it propagates from request_stop(); an
    Exception there still calls the terminate handler ([stopsource.inplace])."""
    src = sx.inplace_stop_source()
    ran: list[int] = []
    cbs = [
        sx.inplace_stop_callback(src.get_token(), lambda: ran.append(1)),
        sx.inplace_stop_callback(src.get_token(), _raise(exc)),
        sx.inplace_stop_callback(src.get_token(), lambda: ran.append(3)),
    ]
    with pytest.raises(exc):
        src.request_stop()
    assert sorted(ran) == [1, 3]
    assert src.stop_requested()
    with pytest.raises(exc):
        sx.inplace_stop_callback(src.get_token(), _raise(exc))  # already stopped: at once
    for cb in cbs:
        cb.close()


def test_ctrl_c_during_request_stop_of_many_tasks_does_not_abort() -> None:
    """A real SIGINT while request_stop() runs its callbacks: KeyboardInterrupt out of
    trio.run, never the terminate handler's abort."""
    code = """
import trio, structexec as sx
async def main():
    async with sx.counting_scope() as scope:
        for _ in range(2000):
            scope.start_soon(trio.sleep_forever)
        src = sx.inplace_stop_source()
        cbs = [sx.inplace_stop_callback(src.get_token(), lambda: sum(range(2000)))
               for _ in range(20000)]
        await trio.sleep(0.05)
        ready()
        src.request_stop()
        scope.request_stop()
        await trio.sleep_forever()
try:
    trio.run(main)
except BaseException as e:
    print("KI" if leaf_names(e) == ["KeyboardInterrupt"] else f"OTHER {e!r}")
"""
    r = run_child(code, timeout=30, sigint_after_ready=True, sigint_delay=0.0)
    assert not r.timed_out, r
    assert r.stdout.strip().endswith("KI"), r
    assert "terminate" not in r.stderr, r


# ------------------------------- a BaseException raised while another agent completes work


@pytest.mark.parametrize("exc", INTERRUPTS)
@pytest.mark.parametrize("kind", SCOPES)
@pytest.mark.parametrize("how", ["spawn", "spawn_token", "spawn_future"])
@guarded
async def test_interrupt_in_work_completed_by_the_trio_scheduler(
    kind: Any, exc: type[BaseException], how: str
) -> None:
    """A then-function run by the trio scheduler's drainer raises KeyboardInterrupt or
    SystemExit: the spawned work ends (its association is released, nothing hangs), and the
    scope raises the exception at its exit, like a hosted task's."""
    sndr = sx.schedule(sx.trio_scheduler()) | sx.then(_raise(exc))
    with raises_group_of(exc):
        async with kind() as scope:
            if how == "spawn":
                scope.spawn(sndr)
            elif how == "spawn_token":
                sx.spawn(sndr, scope.get_token(), sx.prop(sx.get_allocator, None))
            else:
                fut = scope.spawn_future(sndr)
                with pytest.raises(sx.Stopped):
                    await fut  # the consumer is not left waiting
            await trio.sleep_forever()
    assert scope.state == "joined" and scope.count == 0


# ----------------------------------------- after a run that crashed: finalizers, late joins

_CRASHED_RUN_CHILD = """
import gc, threading, trio, trio.abc, structexec as sx
from structexec.testing import ManualScheduler

class CrashingClock(trio.abc.Clock):
    armed = False
    def start_clock(self): pass
    def current_time(self): return 0.0
    def deadline_to_sleep_time(self, deadline):
        if CrashingClock.armed:
            raise ValueError("the clock broke")
        return 0.0

keep = []
sch = ManualScheduler()

async def main():
    s = sx.counting_scope()
    await s.__aenter__()
    keep.append(s)
    keep.append(s.spawn_future(trio.sleep_forever()))
    async with sx.counting_scope() as s2:
        s2.spawn(sch.schedule())
        CrashingClock.armed = True  # the run crashes while this exit waits

try:
    trio.run(main, clock=CrashingClock())
except trio.TrioInternalError:
    print("crashed", flush=True)
t = threading.Thread(target=sch.run_one)  # completes the work the exit waited for
t.start()
t.join()
print("completed on a thread", flush=True)
keep.clear()
gc.collect()  # the future, its stop callbacks and the scope die after their run
print("collected", flush=True)
"""


def test_nothing_aborts_or_hangs_after_the_trio_run_crashed() -> None:
    """A trio run that crashed (``TrioInternalError``) closes its wake-up socket without
    marking itself finished, so ``TrioToken.run_sync_soon`` raises ``OSError``. Work of a
    scope that completes afterwards on another thread, a future and a scope garbage-collected
    afterwards (their stop callbacks queue to the run), and the suspended ``async with`` exit
    closed at interpreter exit must not abort the process ("stop callback raised", which
    it used to) nor loop forever: nothing may terminate the process from a finalizer."""
    r = run_child(_CRASHED_RUN_CHILD, timeout=30)
    assert not r.timed_out, str(r)
    assert r.stdout.split("\n")[:3] == ["crashed", "completed on a thread", "collected"], str(r)
    assert r.returncode == 0, str(r)
    assert "terminate" not in r.stderr, str(r)
    assert "/_scopes/" not in r.stderr and "/_trio/" not in r.stderr, str(r)  # none of ours
    assert "Bad file descriptor" not in r.stderr, str(r)
