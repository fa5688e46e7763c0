"""Tests of structexec.testing: RecordingReceiver, ManualScheduler, no_leaks ([exec.async.ops])."""

from __future__ import annotations

import threading

import pytest
import trio

import structexec as sx
from structexec.testing import (
    ManualScheduler,
    RecordingReceiver,
    ThreadScheduler,
    assert_no_leaks,
    no_leaks,
    record_terminate,
)

# --------------------------------------------------------------------------- RecordingReceiver


def test_rec_records_value_thread_and_outcome() -> None:
    rec = RecordingReceiver()
    op = rec.run(sx.just(1, "a"))
    assert op is rec.op
    assert rec.done and rec.completions == 1
    assert rec.events == [("value", (1, "a"))]
    assert rec.value == (1, "a")
    assert rec.kind == "value"
    assert rec.outcome == ("value", (1, "a"))
    assert rec.thread == threading.get_ident()
    assert rec.live_callbacks_at_completion == 0
    assert rec.scheduler is None
    with pytest.raises(AssertionError, match="expected an error"):
        _ = rec.error
    assert not rec.violations


def test_rec_error_and_stopped() -> None:
    e = ValueError("x")
    rec = RecordingReceiver()
    rec.run(sx.just_error(e))
    assert rec.error is e
    assert rec.outcome == ("error", e)
    assert not rec.stopped
    with pytest.raises(AssertionError, match="expected a value"):
        _ = rec.value
    rec2 = RecordingReceiver()
    rec2.run(sx.just_stopped())
    assert rec2.stopped
    assert rec2.outcome == ("stopped",)


def test_rec_not_completed_accessors_fail() -> None:
    rec = RecordingReceiver()
    assert not rec.done
    with pytest.raises(AssertionError, match="not been completed"):
        _ = rec.value
    with pytest.raises(AssertionError, match="within"):
        rec.wait(timeout=0.01)


def test_rec_second_completion_is_violation() -> None:
    rec = RecordingReceiver()
    rec.started = True
    rec.set_value(1)
    with pytest.raises(AssertionError, match="second completion"):
        rec.set_stopped()
    assert len(rec.violations) == 1
    assert rec.completions == 2
    # Even if a library swallowed the raise, the accessors fail the test.
    with pytest.raises(AssertionError, match="second completion"):
        _ = rec.value
    with pytest.raises(AssertionError, match="second completion"):
        rec.check()


def test_rec_completion_before_start_is_violation() -> None:
    class EagerSender:
        def connect(self, rcvr: object) -> object:
            rcvr.set_value()  # type: ignore[attr-defined]
            return sx.just().connect(RecordingReceiver())

    rec = RecordingReceiver()
    with pytest.raises(AssertionError, match="before the operation was started"):
        rec.connect(EagerSender())
    assert rec.violations


def test_rec_connect_then_start_separately() -> None:
    rec = RecordingReceiver()
    op = rec.connect(sx.just(5))
    assert not rec.done
    rec.start()
    assert rec.value == (5,)
    with pytest.raises(RuntimeError):
        op.start()  # started twice ([exec.async.ops])
    with pytest.raises(RuntimeError, match="nothing connected"):
        RecordingReceiver().start()


def test_rec_env_default_has_own_stop_token() -> None:
    rec = RecordingReceiver()
    tok = sx.get_stop_token(rec.get_env())
    assert tok == rec.stop_source.get_token()
    assert not tok.stop_requested()
    assert rec.request_stop() is True
    assert tok.stop_requested()
    assert rec.request_stop() is False


def test_rec_env_given_and_extra_env() -> None:
    e = sx.prop(sx.get_scheduler, sx.inline_scheduler())
    rec = RecordingReceiver(e)
    assert rec.get_env() is e
    assert sx.get_stop_token(rec.get_env()) == sx.never_stop_token()
    sch = ManualScheduler()
    rec2 = RecordingReceiver(extra_env=sx.prop(sx.get_scheduler, sch))
    assert sx.get_scheduler(rec2.get_env()) is sch
    assert sx.get_stop_token(rec2.get_env()) == rec2.stop_source.get_token()


def test_rec_detects_live_stop_callback_at_completion() -> None:
    class LeakyOp:
        def __init__(self, rcvr: RecordingReceiver) -> None:
            self.rcvr = rcvr

        def start(self) -> None:
            tok = sx.get_stop_token(self.rcvr.get_env())
            self.cb = sx.stop_callback_for(tok, lambda: None)  # never closed
            self.rcvr.set_value()

    class LeakySender:
        def connect(self, rcvr: RecordingReceiver) -> LeakyOp:
            return LeakyOp(rcvr)

    rec = RecordingReceiver()
    rec.run(LeakySender())
    assert rec.live_callbacks_at_completion == 1
    assert rec.events == [("value", ())]
    with pytest.raises(AssertionError, match="still registered"):
        _ = rec.value


def test_rec_wait_for_other_thread() -> None:
    rec = RecordingReceiver()
    rec.started = True
    t = threading.Thread(target=rec.set_value, args=(7,))
    t.start()
    assert rec.wait(timeout=5).value == (7,)
    t.join()
    assert rec.thread == t.ident
    assert rec.thread != threading.get_ident()


async def test_rec_wait_trio_from_other_thread() -> None:
    rec = RecordingReceiver()
    rec.started = True
    done: list[int] = []

    def worker() -> None:
        rec.set_value(3)
        done.append(1)

    t = threading.Thread(target=worker)
    t.start()
    with trio.fail_after(5):
        got = await rec
    t.join()
    assert got is rec and rec.value == (3,) and done == [1]
    # Already completed: returns at once.
    assert (await rec.wait_trio()).value == (3,)


# --------------------------------------------------------------------------- ManualScheduler


def test_manual_queues_until_run() -> None:
    sch = ManualScheduler("m")
    rec = RecordingReceiver()
    rec.run(sx.schedule(sch) | sx.then(lambda: ManualScheduler.current()))
    assert not rec.done
    assert sch.pending == 1 and sch.started == 1
    sch.run_one()
    assert rec.value == (sch,)  # the function ran while sch's item was running
    assert rec.scheduler is sch
    assert sch.pending == 0 and sch.ran == 1
    assert ManualScheduler.current() is None
    with pytest.raises(IndexError):
        sch.run_one()


def test_manual_run_one_index_and_drain_order() -> None:
    sch = ManualScheduler()
    order: list[int] = []
    recs = []
    for i in range(4):
        r = RecordingReceiver()
        r.run(sx.schedule(sch) | sx.then(lambda i=i: order.append(i)))
        recs.append(r)
    sch.run_one(2)
    sch.run_one(-1)
    assert order == [2, 3]
    assert sch.drain() == 2
    assert order == [2, 3, 0, 1]
    assert all(r.value == () for r in recs)


def test_manual_drain_runs_items_queued_by_items() -> None:
    sch = ManualScheduler()
    rec = RecordingReceiver()
    s = sx.schedule(sch)
    for _ in range(3):
        s = s | sx.let_value(lambda: sx.schedule(sch))
    rec.run(s | sx.then(lambda: 9))
    assert sch.drain() == 4
    assert rec.value == (9,)


def test_manual_drain_limit() -> None:
    sch = ManualScheduler()

    # A self-rescheduling item: an unbounded let_value loop on the scheduler.
    def again() -> object:
        return sx.schedule(sch) | sx.let_value(again)

    rec = RecordingReceiver()
    rec.run(again())
    with pytest.raises(RuntimeError, match="livelock"):
        sch.drain(limit=50)
    rec.request_stop()
    sch.drain()
    assert rec.stopped


def test_manual_honours_stop_when_run() -> None:
    sch = ManualScheduler()
    rec = RecordingReceiver()
    rec.run(sx.schedule(sch))
    rec.request_stop()
    assert not rec.done and sch.pending == 1
    sch.run_one()
    assert rec.stopped
    assert rec.live_callbacks_at_completion == 0


def test_manual_stop_eagerly() -> None:
    sch = ManualScheduler(stop_eagerly=True)
    rec = RecordingReceiver()
    rec.run(sx.schedule(sch))
    assert len(rec.stop_source._callbacks) == 1
    rec.request_stop()
    assert rec.stopped and sch.pending == 0 and sch.stopped_eagerly == 1
    assert rec.live_callbacks_at_completion == 0
    # Already stopped at start: completes inside start, no queueing.
    rec2 = RecordingReceiver()
    rec2.request_stop()
    rec2.run(sx.schedule(sch))
    assert rec2.stopped and sch.pending == 0
    # Run normally: the callback is deregistered before the completion.
    rec3 = RecordingReceiver()
    rec3.run(sx.schedule(sch))
    sch.run_one()
    assert rec3.value == () and rec3.live_callbacks_at_completion == 0


def test_manual_stop_eagerly_from_another_thread() -> None:
    sch = ManualScheduler(stop_eagerly=True)
    recs = [RecordingReceiver() for _ in range(50)]
    for r in recs:
        r.run(sx.schedule(sch))
    threads = [threading.Thread(target=r.request_stop) for r in recs[::2]]
    for t in threads:
        t.start()
    sch.drain()
    for t in threads:
        t.join()
    sch.drain()
    for i, r in enumerate(recs):
        r.check()
        assert r.completions == 1
        if i % 2:
            assert r.value == ()
        else:
            assert r.stopped


def test_manual_fail_next_requires_fallible_p3941() -> None:
    with pytest.raises(TypeError, match="infallible"):
        ManualScheduler().fail_next(ValueError())
    sch = ManualScheduler(infallible=False)
    e = OSError("boom")
    sch.fail_next(e, count=2)
    recs = [RecordingReceiver() for _ in range(3)]
    for r in recs:
        r.run(sx.schedule(sch))
    recs[0].request_stop()  # stopped items do not consume a failure
    sch.drain()
    assert recs[0].stopped
    assert recs[1].error is e and recs[2].error is e
    assert recs[1].scheduler is sch
    with pytest.raises(TypeError):
        sch.fail_next(None)  # type: ignore[arg-type, unused-ignore]


def test_manual_completion_signatures_p3941_infallible() -> None:
    sch = ManualScheduler()
    s = sch.schedule()
    never = sx.prop(sx.get_stop_token, sx.never_stop_token())
    stoppable = sx.prop(sx.get_stop_token, sx.inplace_stop_source().get_token())
    assert sx.get_completion_signatures(s, never) == sx.completion_signatures(sx.set_value_t())
    assert sx.get_completion_signatures(s, sx.env()) == sx.completion_signatures(sx.set_value_t())
    assert sx.get_completion_signatures(s, stoppable) == sx.completion_signatures(
        sx.set_value_t(), sx.set_stopped_t()
    )
    f = ManualScheduler(infallible=False).schedule()
    assert sx.get_completion_signatures(f, never) == sx.completion_signatures(
        sx.set_value_t(), sx.set_error_t(Exception)
    )


def test_manual_attrs_envs_equality() -> None:
    sch = ManualScheduler()
    other = ManualScheduler()
    assert sch == sch and sch != other
    assert sx.is_scheduler(sch)
    attrs = sx.get_env(sch.schedule())
    assert sx.get_completion_scheduler[sx.set_value_t](attrs) is sch
    assert sx.get_completion_scheduler[sx.set_stopped_t](attrs) is sch
    with pytest.raises(sx.QueryError):
        sx.get_completion_scheduler[sx.set_error_t](attrs)
    fallible = ManualScheduler(infallible=False)
    assert sx.get_completion_scheduler[sx.set_error_t](sx.get_env(fallible.schedule())) is fallible
    assert sx.get_forward_progress_guarantee(sch) is sx.forward_progress_guarantee.weakly_parallel
    rec = RecordingReceiver()
    op = rec.connect(sch.schedule())
    assert sch.envs == [rec.get_env()]
    assert sch.started == 0
    rec.start(op)
    with pytest.raises(RuntimeError):
        op.start()
    sch.drain()
    assert "ManualScheduler" in repr(sch)


def test_manual_thread_safe_schedule_from_threads() -> None:
    sch = ManualScheduler()
    recs = [RecordingReceiver() for _ in range(200)]

    def starter(chunk: list[RecordingReceiver]) -> None:
        for r in chunk:
            r.run(sx.schedule(sch))

    threads = [threading.Thread(target=starter, args=(recs[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sch.pending == 200
    assert sch.drain() == 200
    assert all(r.value == () and r.thread == threading.get_ident() for r in recs)


def test_manual_current_nested() -> None:
    a, b = ManualScheduler("a"), ManualScheduler("b")
    seen: list[object] = []
    rec_b = RecordingReceiver()
    rec_b.run(sx.schedule(b) | sx.then(lambda: seen.append(ManualScheduler.current())))
    rec_a = RecordingReceiver()

    def on_a() -> None:
        seen.append(ManualScheduler.current())
        b.run_one()
        seen.append(ManualScheduler.current())

    rec_a.run(sx.schedule(a) | sx.then(on_a))
    a.run_one()
    assert seen == [a, b, a]
    assert ManualScheduler.current() is None


# --------------------------------------------------------------------------- leaks


async def test_no_leaks_passes_for_clean_block() -> None:
    async with no_leaks() as report, trio.open_nursery() as n:
        n.start_soon(trio.sleep, 0)
    assert report.tasks_at_exit == report.tasks_at_entry


async def test_no_leaks_detects_task_leak() -> None:
    stop = trio.Event()
    with pytest.raises(AssertionError, match="task leak"):
        async with no_leaks(settle=2):
            trio.lowlevel.spawn_system_task(stop.wait)
    stop.set()
    await trio.testing.wait_all_tasks_blocked()


async def test_no_leaks_detects_terminate_call() -> None:
    with pytest.raises(AssertionError, match=r"contract violation.*cb raised"):
        async with no_leaks():
            from structexec._core._errors import terminate

            terminate("cb raised", ValueError())


async def test_no_leaks_detects_pending_deadline() -> None:
    cs = trio.CancelScope(deadline=trio.current_time() + 100)
    with pytest.raises(AssertionError, match="cancel scope leak"):
        async with no_leaks():
            cs.__enter__()
    cs.__exit__(None, None, None)
    assert_no_leaks(trio.lowlevel.current_statistics().tasks_living)


def test_record_terminate_restores_handler() -> None:
    from structexec._core._errors import terminate

    with record_terminate() as calls:
        terminate("x", None)
        src = sx.inplace_stop_source()
        sx.inplace_stop_callback(src.get_token(), lambda: 1 / 0)
        src.request_stop()
    assert calls.reasons == ["x", "stop callback raised"]
    assert isinstance(calls.calls[1][1], ZeroDivisionError)
    with record_terminate() as inner:
        pass
    assert len(inner) == 0


async def test_no_leaks_detects_unjoined_scope() -> None:
    sch = ManualScheduler()
    with pytest.raises(AssertionError, match=r"counting scope leak.*'open'"):
        async with no_leaks():
            scope = sx.counting_scope()
            sx.spawn(sx.schedule(sch), scope.get_token())  # open, never joined
    # Clean up: let the work finish and join, so the scope is not reported again.
    sch.drain()
    rec = RecordingReceiver(extra_env=sx.prop(sx.get_scheduler, sch))
    rec.run(scope.join())
    sch.drain()
    assert rec.value == ()


async def test_no_leaks_detects_scope_dropped_unjoined() -> None:
    """A scope that becomes garbage in a reference cycle, opened but never joined: the
    collection at exit reports it ([exec.scope.simple.counting])."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        with pytest.raises(AssertionError, match=r"counting scope leak.*garbage-collected"):
            async with no_leaks():
                scope = sx.counting_scope()
                tok = scope.get_token()
                assert tok.try_associate()
                tok.disassociate()  # open, count 0, never joined
                cycle: list[object] = [scope]
                cycle.append(cycle)
                del scope, tok, cycle


async def test_no_leaks_accepts_joined_and_unused_scopes() -> None:
    sch = ManualScheduler()
    async with no_leaks():
        unused = sx.counting_scope()
        joined = sx.simple_counting_scope()
        sx.spawn(sx.just(), joined.get_token())
        rec = RecordingReceiver(extra_env=sx.prop(sx.get_scheduler, sch))
        rec.run(joined.join())
        sch.drain()
        assert rec.value == () and unused.state == "unused"


# --------------------------------------------------------------------------- ThreadScheduler


class _CompletesTwiceOp:
    """A deliberately broken adaptor (docs/testing.md's ``stop_quickly``): its stop callback
    completes the receiver, and the child completes it again later."""

    def __init__(self, child: object, rcvr: object) -> None:
        self.rcvr = rcvr
        self.cb: object = None
        self.op = sx.connect(child, self)

    def get_env(self) -> object:
        return sx.get_env(self.rcvr)

    def start(self) -> None:
        tok = sx.get_stop_token(sx.get_env(self.rcvr))
        self.cb = sx.stop_callback_for(tok, self.rcvr.set_stopped)  # type: ignore[attr-defined]
        sx.start(self.op)

    def set_value(self, *vals: object) -> None:
        self.rcvr.set_value(*vals)  # type: ignore[attr-defined]

    def set_error(self, err: object) -> None:
        self.rcvr.set_error(err)  # type: ignore[attr-defined]

    def set_stopped(self) -> None:
        self.rcvr.set_stopped()  # type: ignore[attr-defined]


class _CompletesTwice(sx.Sender[object]):
    def __init__(self, child: object) -> None:
        self.child = child

    def connect(self, rcvr: object) -> _CompletesTwiceOp:
        return _CompletesTwiceOp(self.child, rcvr)


def test_thread_scheduler_survives_a_completion_that_raises_issue_12() -> None:
    # Regression: the teardown error "_ThenOp.set_stopped() called after the
    # operation had already completed". A user adaptor completed a then-operation twice (the
    # then-operation rightly raised); the raise happened on the ThreadScheduler's worker,
    # killed it, and escaped as an unhandled thread exception into a later test's teardown.
    # A completion that raises on the worker goes to the terminate handler, like on the
    # parallel scheduler's threads, and the worker keeps running the queue.
    escaped: list[BaseException | None] = []
    old_hook = threading.excepthook
    threading.excepthook = lambda args: escaped.append(args.exc_value)
    gate = threading.Event()
    try:
        with record_terminate() as calls, ThreadScheduler() as ts:
            busy = RecordingReceiver()
            busy.run(sx.schedule(ts) | sx.then(lambda: gate.wait(10)))  # occupy the worker
            rec = RecordingReceiver()
            rec.run(_CompletesTwice(sx.schedule(ts)) | sx.then(lambda: "ran"))
            rec.request_stop()  # the broken stop callback completes the then-op: stopped
            assert rec.stopped
            gate.set()  # the queued item now runs, sees the stop, completes the then-op again
            after = RecordingReceiver()
            after.run(sx.schedule(ts) | sx.then(lambda: "after"))
            after.wait(5)  # the worker survived and ran the next item
            assert after.value == ("after",)
        assert escaped == []
        assert len(calls.calls) == 1, calls.calls
        reason, exc = calls.calls[0]
        assert "ThreadScheduler" in reason and "raised" in reason
        assert isinstance(exc, RuntimeError)
        assert "_ThenOp.set_stopped() called after the operation had already completed" in str(
            exc
        )
        assert rec.events == [("stopped", ())]  # the then-op completed its receiver once
    finally:
        gate.set()
        threading.excepthook = old_hook
