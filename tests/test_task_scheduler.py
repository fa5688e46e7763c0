"""``task_scheduler``:  ([exec.task.scheduler], P3552R1 4.5, P3941R1)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import structexec as sx
from structexec.testing import ManualScheduler, RecordingReceiver


class FallibleSched:
    """A scheduler that declares set_error: fallible in P3941R1's sense."""

    def schedule(self) -> Any:
        return _FallibleSender()


class _FallibleSender(sx.Sender[None]):
    def connect(self, rcvr: Any) -> Any:
        return sx.just().connect(rcvr)

    def get_completion_signatures(self, env: Any = None) -> sx.completion_signatures:
        return sx.completion_signatures(sx.set_value_t(), sx.set_error_t(Exception))


class UndeclaredSched:
    """A scheduler whose sender does not declare completion signatures."""

    def schedule(self) -> Any:
        class S:
            def connect(self, rcvr: Any) -> Any:
                return sx.just().connect(rcvr)

        return S()


def test_task_scheduler_wraps_any_infallible_scheduler_and_copies_share() -> None:
    rl = sx.run_loop().get_scheduler()
    ts = sx.task_scheduler(rl)
    assert ts.wrapped is rl
    # [exec.task.scheduler]: constructing from a task_scheduler copies; it never nests.
    ts2 = sx.task_scheduler(ts)
    assert type(ts2.wrapped) is type(rl)
    assert ts2.wrapped is rl
    assert sx.task_scheduler(sx.task_scheduler(sx.inline_scheduler())).wrapped == (
        sx.inline_scheduler()
    )
    assert sx.is_scheduler(ts)


def test_fallible_or_undeclared_scheduler_is_rejected() -> None:
    with pytest.raises(TypeError, match="infallible"):
        sx.task_scheduler(FallibleSched())
    with pytest.raises(TypeError, match="does not declare completion signatures"):
        sx.task_scheduler(UndeclaredSched())
    with pytest.raises(TypeError, match="infallible"):
        sx.task_scheduler(ManualScheduler(infallible=False))
    with pytest.raises(TypeError, match="not a scheduler"):
        sx.task_scheduler(42)
    # ManualScheduler is asked per instance: an infallible one is accepted afterwards.
    assert sx.task_scheduler(ManualScheduler()).wrapped is not None


def test_allocator_argument_is_accepted_and_ignored() -> None:
    rl = sx.run_loop().get_scheduler()
    assert sx.task_scheduler(rl, object()).wrapped is rl


def test_schedule_completes_through_the_wrapped_scheduler() -> None:
    m = ManualScheduler()
    ts = sx.task_scheduler(m)
    r = RecordingReceiver()
    r.run(sx.schedule(ts))
    assert not r.done and m.pending == 1
    m.run_one()
    assert r.value == ()
    assert r.scheduler is m  # completed inside the wrapped scheduler's item
    # stop is forwarded: the wrapped operation sees the receiver's token
    r2 = RecordingReceiver()
    r2.run(ts.schedule())
    r2.request_stop()
    m.drain()
    assert r2.stopped


def test_schedule_under_sync_wait_runs_on_the_loop_thread() -> None:
    seen: list[int] = []

    def body(sch: Any) -> Any:
        return sx.schedule(sx.task_scheduler(sch)) | sx.then(
            lambda: seen.append(threading.get_ident())
        )

    assert sx.sync_wait(sx.let_value(sx.read_env(sx.get_scheduler), body)) == ()
    assert seen == [threading.get_ident()]


def test_completion_scheduler_of_schedule_sender_is_the_task_scheduler() -> None:
    ts = sx.task_scheduler(sx.run_loop().get_scheduler())
    attrs = sx.get_env(ts.schedule())
    assert sx.get_completion_scheduler[sx.set_value_t](attrs) == ts
    assert sx.get_completion_scheduler[sx.set_value_t](attrs) is ts
    with pytest.raises(sx.QueryError):
        sx.get_completion_scheduler[sx.set_error_t](attrs)


def test_completion_signatures_are_infallible() -> None:
    ts = sx.task_scheduler(sx.run_loop().get_scheduler())
    s = ts.schedule()
    never = sx.prop(sx.get_stop_token, sx.never_stop_token())
    stoppable = sx.prop(sx.get_stop_token, sx.inplace_stop_source().get_token())
    assert sx.get_completion_signatures(s, never) == sx.completion_signatures(sx.set_value_t())
    assert sx.get_completion_signatures(s, stoppable) == sx.completion_signatures(
        sx.set_value_t(), sx.set_stopped_t()
    )
    # a task_scheduler is itself infallible, so it can be wrapped again / used by affine_on
    assert sx.task_scheduler(ts).wrapped is ts.wrapped


def test_task_scheduler_equality_matrix() -> None:
    loop1, loop2 = sx.run_loop(), sx.run_loop()
    rl1, rl1b, rl2 = loop1.get_scheduler(), loop1.get_scheduler(), loop2.get_scheduler()
    ts1, ts1b, ts2 = sx.task_scheduler(rl1), sx.task_scheduler(rl1b), sx.task_scheduler(rl2)
    inl = sx.task_scheduler(sx.inline_scheduler())
    # [exec.task.scheduler]: ts == sch
    assert inl == sx.inline_scheduler()
    assert ts1 == rl1b
    assert not (ts1 == rl2)  # noqa: SIM201
    assert ts1 != rl2
    assert not (ts1 == sx.inline_scheduler())  # noqa: SIM201
    # [exec.task.scheduler]: ts1 == ts2 compares the wrapped schedulers
    assert ts1 == ts1b
    assert ts1 != ts2
    assert ts1 != inl
    assert not (ts1 == 42)  # noqa: SIM201
    # hashing agrees with equality, so task_schedulers mix with the schedulers in sets
    assert hash(ts1) == hash(rl1) == hash(ts1b)
    assert len({ts1, ts1b, rl1}) == 1


def test_equality_is_symmetric_with_a_scheduler_that_defers() -> None:
    """[py] ``sch == ts``: a scheduler whose ``__eq__`` returns NotImplemented for unknown
    types lets Python ask the task_scheduler ([exec.task.scheduler])."""
    m1, m2 = ManualScheduler(), ManualScheduler()  # identity equality: object.__eq__ defers
    t1 = sx.task_scheduler(m1)
    assert m1 == t1
    assert t1 == m1
    assert m2 != t1
    assert not (m2 == t1)  # noqa: SIM201


def test_equality_is_symmetric_for_library_schedulers() -> None:
    rl = sx.run_loop().get_scheduler()
    assert sx.inline_scheduler() == sx.task_scheduler(sx.inline_scheduler())
    assert rl == sx.task_scheduler(rl)


async def test_equality_is_symmetric_for_the_trio_scheduler() -> None:
    sch = sx.trio_scheduler()
    ts = sx.task_scheduler(sch)
    assert ts == sch
    assert hash(ts) == hash(sch)


def test_queries_are_forwarded_to_the_wrapped_scheduler() -> None:
    ts = sx.task_scheduler(sx.inline_scheduler())
    assert sx.get_forward_progress_guarantee(ts) == sx.get_forward_progress_guarantee(
        sx.inline_scheduler()
    )
    assert "inline_scheduler" in repr(ts)


async def test_trio_scheduler_equality_is_symmetric() -> None:
    sch = sx.trio_scheduler()
    assert sch == sx.task_scheduler(sch)
