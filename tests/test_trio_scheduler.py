"""``sx.trio_scheduler()`` ([exec.sched], [exec.schedule], docs/trio.md "The trio scheduler",
P3941R1 infallibility)."""

from __future__ import annotations

import inspect
import threading

import pytest
import trio
import trio.testing

import structexec as sx
from structexec.testing import RecordingReceiver, no_leaks, record_terminate


async def settle(n: int = 5) -> None:
    for _ in range(n):
        await trio.lowlevel.checkpoint()


# --------------------------------------------------------------------------- identity


def test_trio_scheduler_outside_trio_raises_runtime_error() -> None:
    with pytest.raises(RuntimeError, match=r"trio\.run"):
        sx.trio_scheduler()


async def test_trio_schedulers_are_equal_within_a_run_and_hashable() -> None:
    a = sx.trio_scheduler()
    b = sx.trio_scheduler()
    assert a == b and a is b
    assert hash(a) == hash(b)
    assert sx.is_scheduler(a)
    assert a != sx.inline_scheduler()
    assert a != sx.run_loop().get_scheduler()


def test_trio_schedulers_of_different_runs_differ() -> None:
    async def get() -> object:
        return sx.trio_scheduler()

    a = trio.run(get)
    b = trio.run(get)
    assert a != b
    assert "finished" in repr(a)


async def test_forward_progress_is_weakly_parallel() -> None:
    sch = sx.trio_scheduler()
    assert sx.get_forward_progress_guarantee(sch) is sx.forward_progress_guarantee.weakly_parallel


async def test_scheduler_is_not_awaitable() -> None:
    with pytest.raises(TypeError, match=r"sx\.schedule"):
        await sx.trio_scheduler()  # type: ignore[misc]


# --------------------------------------------------------------------------- attributes


async def test_trio_schedule_completion_scheduler_attributes() -> None:
    sch = sx.trio_scheduler()
    attrs = sx.get_env(sx.schedule(sch))
    assert sx.get_completion_scheduler[sx.set_value_t](attrs) is sch
    assert sx.get_completion_scheduler[sx.set_stopped_t](attrs) is sch
    with pytest.raises(sx.QueryError):
        sx.get_completion_scheduler[sx.set_error_t](attrs)


async def test_p3941_infallible_completion_signatures() -> None:
    s = sx.schedule(sx.trio_scheduler())
    unstoppable = sx.prop(sx.get_stop_token, sx.never_stop_token())
    stoppable = sx.prop(sx.get_stop_token, sx.inplace_stop_source().get_token())
    assert sx.get_completion_signatures(s, unstoppable) == sx.completion_signatures(
        sx.set_value_t()
    )
    assert sx.get_completion_signatures(s, stoppable) == sx.completion_signatures(
        sx.set_value_t(), sx.set_stopped_t()
    )
    assert sx.get_completion_signatures(s, sx.env()) == sx.completion_signatures(sx.set_value_t())


# --------------------------------------------------------------------------- completion


async def test_never_completes_inline_and_completes_on_trio_thread() -> None:
    rec = RecordingReceiver()
    rec.run(sx.schedule(sx.trio_scheduler()))
    assert not rec.done  # start only queued it
    with trio.fail_after(5):
        await rec.wait_trio()
    assert rec.value == ()
    assert rec.thread == threading.get_ident()


async def test_fifo_order_of_starts() -> None:
    sch = sx.trio_scheduler()
    order: list[int] = []
    recs = []
    for i in range(50):
        rec = RecordingReceiver()
        recs.append(rec)
        op = sx.connect(sx.schedule(sch) | sx.then(lambda i=i: order.append(i)), rec)
        rec.start(op)
    assert order == []
    for rec in recs:
        await rec.wait_trio()
    assert order == list(range(50))


async def test_fifo_order_from_another_thread() -> None:
    sch = sx.trio_scheduler()
    order: list[int] = []
    recs = [RecordingReceiver() for _ in range(30)]

    def from_thread() -> None:
        for i, rec in enumerate(recs):
            rec.run(sx.schedule(sch) | sx.then(lambda i=i: order.append(i)))

    await trio.to_thread.run_sync(from_thread)
    for rec in recs:
        with trio.fail_after(5):
            await rec.wait_trio()
    assert order == list(range(30))
    assert {rec.thread for rec in recs} == {threading.get_ident()}


async def test_started_from_a_plain_thread_completes_on_trio_thread() -> None:
    sch = sx.trio_scheduler()
    trio_thread = threading.get_ident()
    rec = RecordingReceiver()
    starter: list[int] = []

    def work() -> None:
        starter.append(threading.get_ident())
        rec.run(sx.schedule(sch))

    t = threading.Thread(target=work)
    t.start()
    t.join()
    with trio.fail_after(5):
        await rec.wait_trio()
    assert starter[0] != trio_thread
    assert rec.thread == trio_thread


async def test_stop_requested_before_it_runs_completes_stopped() -> None:
    rec = RecordingReceiver()
    rec.run(sx.schedule(sx.trio_scheduler()))
    rec.request_stop()
    await rec.wait_trio()
    assert rec.stopped


async def test_stop_after_completion_has_no_effect() -> None:
    rec = RecordingReceiver()
    rec.run(sx.schedule(sx.trio_scheduler()))
    await rec.wait_trio()
    rec.request_stop()
    assert rec.value == () and rec.completions == 1


async def test_unstoppable_token_always_set_value() -> None:
    rec = RecordingReceiver(env=sx.env())
    rec.run(sx.schedule(sx.trio_scheduler()))
    await rec.wait_trio()
    assert rec.value == ()


async def test_started_twice_raises() -> None:
    rec = RecordingReceiver()
    op = rec.run(sx.schedule(sx.trio_scheduler()))
    with pytest.raises(RuntimeError, match="started twice"):
        op.start()
    await rec.wait_trio()


async def test_p3552_4_10_schedule_unwinds_the_stack() -> None:
    """Started 400 frames deep, the completion runs on a shallow stack (P3552R1 4.10)."""
    sch = sx.trio_scheduler()
    rec = RecordingReceiver()
    depths: dict[str, int] = {}

    def deep(k: int) -> None:
        if k:
            deep(k - 1)
            return
        depths["start"] = len(inspect.stack(0))
        rec.run(
            sx.schedule(sch) | sx.then(lambda: depths.setdefault("done", len(inspect.stack(0))))
        )

    deep(400)
    await rec.wait_trio()
    assert depths["start"] > 400
    assert depths["done"] < 60


async def test_completion_that_raises_calls_terminate_and_the_run_goes_on() -> None:
    class Bad:
        def set_value(self) -> None:
            raise ValueError("bad receiver")

        def set_error(self, e: object) -> None:
            pass

        def set_stopped(self) -> None:
            pass

    with record_terminate() as calls:
        sx.connect(sx.schedule(sx.trio_scheduler()), Bad()).start()
        await settle()
    assert len(calls) == 1
    assert isinstance(calls.calls[0][1], ValueError)
    assert await sx.just(5) == 5  # the run is intact


# --------------------------------------------------------------------------- await fast path


async def test_await_schedule_resumes_on_trio_thread_after_a_checkpoint() -> None:
    sch = sx.trio_scheduler()
    with trio.testing.assert_checkpoints():
        assert await sx.schedule(sch) is None


async def test_await_schedule_in_cancelled_scope_raises_cancelled() -> None:
    sch = sx.trio_scheduler()
    with trio.CancelScope() as cs:
        cs.cancel()
        await sx.schedule(sch)
        pytest.fail("not reached")  # pragma: no cover
    assert cs.cancelled_caught


async def test_await_schedule_then_general_path() -> None:
    sch = sx.trio_scheduler()
    tid = threading.get_ident()
    got = await (sx.schedule(sch) | sx.then(lambda: threading.get_ident()))
    assert got == tid


async def test_general_path_in_cancelled_scope_stop_then_value() -> None:
    """The trio cancellation requests stop; the op completes stopped; upon_stopped turns that into a
    value, which the await returns (docs/trio.md "trio cancellation becomes a stop request");
    Cancelled comes at the next checkpoint."""
    sch = sx.trio_scheduler()
    got: list[object] = []
    with trio.CancelScope() as cs:
        cs.cancel()
        got.append(await (sx.schedule(sch) | sx.upon_stopped(lambda: "was stopped")))
        await trio.lowlevel.checkpoint()
        pytest.fail("not reached")  # pragma: no cover
    assert got == ["was stopped"]
    assert cs.cancelled_caught


# --------------------------------------------------------------------------- lifetime


async def test_no_task_left_alive_when_idle() -> None:
    before = trio.lowlevel.current_statistics().tasks_living
    async with no_leaks():
        for _ in range(20):
            await (sx.schedule(sx.trio_scheduler()) | sx.then(lambda: None))
    await settle()
    assert trio.lowlevel.current_statistics().tasks_living == before


def test_start_after_the_run_finished_raises_clear_error() -> None:
    async def get() -> object:
        return sx.trio_scheduler()

    sch = trio.run(get)
    rec = RecordingReceiver()
    with pytest.raises(RuntimeError, match="run it belongs to has finished"):
        rec.run(sx.schedule(sch))

    errors: list[BaseException] = []

    def from_thread() -> None:
        try:
            RecordingReceiver().run(sx.schedule(sch))
        except RuntimeError as e:
            errors.append(e)

    t = threading.Thread(target=from_thread)
    t.start()
    t.join()
    assert len(errors) == 1 and "finished" in str(errors[0])


def test_schedule_works_during_run_shutdown() -> None:
    """A system task still running after the main task returned can hop on the scheduler."""
    seen: list[str] = []

    async def late(sch: object) -> None:
        with trio.CancelScope(shield=True):
            await trio.lowlevel.checkpoint()
            await (sx.schedule(sch) | sx.then(lambda: seen.append("hopped")))

    async def main() -> None:
        sch = sx.trio_scheduler()
        trio.lowlevel.spawn_system_task(late, sch)

    trio.run(main)
    assert seen == ["hopped"]


async def test_many_threads_start_concurrently() -> None:
    sch = sx.trio_scheduler()
    recs = [RecordingReceiver() for _ in range(200)]

    def worker(chunk: list[RecordingReceiver]) -> None:
        for rec in chunk:
            rec.run(sx.schedule(sch))

    threads = [threading.Thread(target=worker, args=(recs[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    await trio.to_thread.run_sync(lambda: [t.join() for t in threads])
    with trio.fail_after(5):
        for rec in recs:
            await rec.wait_trio()
    assert all(rec.value == () for rec in recs)
    assert {rec.thread for rec in recs} == {threading.get_ident()}
