"""run_loop and sync_wait: [exec.run.loop], [exec.sync.wait], [exec.inline.scheduler]."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import structexec as sx
from structexec.testing import RecordingReceiver


def test_run_loop_schedulers_are_equal_only_for_the_same_loop() -> None:
    a, b = sx.run_loop(), sx.run_loop()
    assert a.get_scheduler() == a.get_scheduler()
    assert a.get_scheduler() != b.get_scheduler()
    s = a.get_scheduler()
    attrs = sx.get_env(sx.schedule(s))
    assert sx.get_completion_scheduler[sx.set_value_t](attrs) == s
    assert sx.get_completion_scheduler[sx.set_stopped_t](attrs) == s


def test_run_loop_is_fifo_never_inline_and_runs_nested_items() -> None:
    loop = sx.run_loop()
    sch = loop.get_scheduler()
    order: list[Any] = []
    recs = []
    for i in range(5):
        r = RecordingReceiver()
        r.run(sx.schedule(sch) | sx.then(lambda i=i: order.append(i)))
        recs.append(r)
    assert order == []  # never inline
    r2 = RecordingReceiver()
    r2.run(
        sx.schedule(sch)
        | sx.let_value(lambda: sx.schedule(sch) | sx.then(lambda: order.append("nested")))
    )
    loop.finish()
    loop.run()
    assert order == [0, 1, 2, 3, 4, "nested"]
    assert all(r.done for r in recs) and r2.done


def test_run_loop_finish_twice_and_run_twice_raise() -> None:
    loop = sx.run_loop()
    loop.finish()
    with pytest.raises(RuntimeError):
        loop.finish()
    loop.run()
    with pytest.raises(RuntimeError):
        loop.run()


def test_run_loop_checks_stop_when_the_item_runs() -> None:
    loop = sx.run_loop()
    rec = RecordingReceiver()
    rec.run(sx.schedule(loop.get_scheduler()))
    rec.request_stop()
    loop.finish()
    loop.run()
    assert rec.stopped


def test_work_scheduled_from_other_threads_runs_on_the_run_thread() -> None:
    loop = sx.run_loop()
    sch = loop.get_scheduler()
    ran: list[int] = []
    recs: list[RecordingReceiver] = []

    def worker() -> None:
        for _ in range(100):
            r = RecordingReceiver()
            recs.append(r)
            r.run(sx.schedule(sch) | sx.then(lambda: ran.append(threading.get_ident())))

    ts = [threading.Thread(target=worker) for _ in range(4)]
    for t in ts:
        t.start()
    runner = threading.Thread(target=loop.run)
    runner.start()
    for t in ts:
        t.join()
    loop.finish()
    runner.join()
    assert len(ran) == 400 and set(ran) == {runner.ident}


def test_run_loop_schedule_signatures_depend_on_the_stop_token() -> None:
    s = sx.schedule(sx.run_loop().get_scheduler())
    assert sx.get_completion_signatures(s, sx.env()) == sx.completion_signatures(sx.set_value_t())
    src = sx.inplace_stop_source()
    stoppable = sx.prop(sx.get_stop_token, src.get_token())
    assert sx.get_completion_signatures(s, stoppable) == sx.completion_signatures(
        sx.set_value_t(), sx.set_stopped_t()
    )


def test_sync_wait_env_provides_scheduler_and_delegation_scheduler() -> None:
    both = sx.read_env(sx.get_scheduler) | sx.let_value(
        lambda s: sx.read_env(sx.get_delegation_scheduler) | sx.then(lambda d: sx.values(s, d))
    )
    sched, deleg = sx.sync_wait(both)  # type: ignore[misc]
    assert sched == deleg
    assert sx.is_scheduler(sched)
    (tok,) = sx.sync_wait(sx.read_env(sx.get_stop_token))  # type: ignore[misc]
    assert isinstance(tok, sx.never_stop_token)


def test_sync_wait_returns_values_none_for_stopped_and_raises_errors() -> None:
    assert sx.sync_wait(sx.just(1, 2)) == (1, 2)
    assert sx.sync_wait(sx.just()) == ()
    assert sx.sync_wait(sx.just_stopped()) is None
    e = ValueError("x")
    with pytest.raises(ValueError) as ei:
        sx.sync_wait(sx.just_error(e))
    assert ei.value is e
    with pytest.raises(sx.ErrorValue) as ev:
        sx.sync_wait(sx.just_error(42))
    assert ev.value.error == 42


def test_sync_wait_runs_work_from_other_threads_on_the_calling_thread() -> None:
    def on_thread(rcvr: Any) -> None:
        sch = sx.get_scheduler(sx.get_env(rcvr))

        class Op:
            def start(self) -> None:
                pass

        threading.Thread(
            target=lambda: sx.start(
                sx.connect(sx.schedule(sch) | sx.then(lambda: threading.get_ident()), rcvr)
            )
        ).start()

    class Hop(sx.Sender[Any]):
        def connect(self, rcvr: Any) -> Any:
            class Op:
                def start(self) -> None:
                    on_thread(rcvr)

            return Op()

    assert sx.sync_wait(Hop()) == (threading.get_ident(),)


def test_sync_wait_with_variant_values_and_stopped() -> None:
    assert sx.sync_wait_with_variant(sx.just(1)) == (1,)
    assert sx.sync_wait_with_variant(sx.just_stopped()) is None


def test_sync_wait_rejects_non_sender() -> None:
    with pytest.raises(TypeError, match="int"):
        sx.sync_wait(42)


def test_inline_scheduler_completes_on_the_calling_thread() -> None:
    sch = sx.inline_scheduler()
    assert sch == sx.inline_scheduler()
    rec = RecordingReceiver()
    rec.run(sx.schedule(sch))
    assert rec.value == () and rec.thread == threading.get_ident()
    assert sx.get_completion_scheduler[sx.set_value_t](sx.get_env(sch.schedule())) == sch
    assert sx.get_completion_signatures(sch.schedule()) == sx.completion_signatures(
        sx.set_value_t()
    )
