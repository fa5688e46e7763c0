"""``inline_scheduler``:  ([exec.inline.scheduler], P3552R1 4.5, P3941R1)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from _helpers import loop_thread_after_park

import structexec as sx
from structexec.testing import RecordingReceiver


def test_all_inline_schedulers_compare_equal() -> None:
    a, b = sx.inline_scheduler(), sx.inline_scheduler()
    assert a == b
    assert not (a != b)  # noqa: SIM202
    assert hash(a) == hash(b)
    assert a != sx.run_loop().get_scheduler()
    assert sx.is_scheduler(a)


def test_schedule_completes_set_value_inside_start() -> None:
    r = RecordingReceiver()
    op = r.connect(sx.schedule(sx.inline_scheduler()))
    assert not r.done  # connect runs nothing
    r.start(op)
    assert r.done  # completed before start returned
    assert r.value == ()
    assert r.thread == threading.get_ident()
    with pytest.raises(RuntimeError, match="started twice"):
        op.start()


def test_signatures_are_set_value_only_in_any_env() -> None:
    s = sx.inline_scheduler().schedule()
    only = sx.completion_signatures(sx.set_value_t())
    assert sx.get_completion_signatures(s) == only
    assert (
        sx.get_completion_signatures(s, sx.prop(sx.get_stop_token, sx.never_stop_token())) == only
    )
    tok = sx.inplace_stop_source().get_token()
    assert sx.get_completion_signatures(s, sx.prop(sx.get_stop_token, tok)) == only


def test_a_stop_request_does_not_change_the_completion() -> None:
    r = RecordingReceiver()
    r.request_stop()
    r.run(sx.schedule(sx.inline_scheduler()))
    assert r.value == ()


def test_completion_scheduler_is_an_inline_scheduler() -> None:
    attrs = sx.get_env(sx.schedule(sx.inline_scheduler()))
    cs = sx.get_completion_scheduler[sx.set_value_t](attrs)
    assert isinstance(cs, sx.inline_scheduler)
    assert cs == sx.inline_scheduler()


def test_inline_scheduler_is_infallible_for_affine_on_and_task_scheduler() -> None:
    ts = sx.task_scheduler(sx.inline_scheduler())  # would raise TypeError if fallible
    assert ts == sx.inline_scheduler()
    loop = sx.run_loop()
    r = RecordingReceiver(extra_env=sx.prop(sx.get_scheduler, sx.inline_scheduler()))
    r.run(sx.affine_on(sx.schedule(loop.get_scheduler()) | sx.then(lambda: 1)))
    # affine_on accepted the inline scheduler at connect; the run_loop item is still queued
    assert not r.done
    loop.finish()
    loop.run()
    assert r.value == (1,)
    assert r.thread == threading.get_ident()


def test_task_on_inline_scheduler_skips_affinity_and_resumes_where_completed() -> None:
    """A task whose scheduler_type is inline_scheduler resumes on the completing thread."""

    class Inline:
        scheduler_type = sx.inline_scheduler

    loop = sx.run_loop()
    worker = loop_thread_after_park(loop)  # the hop then completes after start
    try:
        seen: list[Any] = []

        @sx.task(environment=Inline)
        async def body() -> None:
            seen.append(threading.get_ident())
            seen.append(await sx.read_env(sx.get_scheduler))
            await sx.schedule(loop.get_scheduler())
            seen.append(threading.get_ident())

        assert sx.sync_wait(body()) == ()
    finally:
        loop.finish()
        worker.join(10)
    assert seen[0] == threading.get_ident()
    assert seen[1] == sx.inline_scheduler()
    assert seen[2] == worker.ident  # no hop back: affinity is off


def test_inline_scheduler_forward_progress_guarantee_is_weakly_parallel() -> None:
    assert (
        sx.get_forward_progress_guarantee(sx.inline_scheduler())
        == sx.forward_progress_guarantee.weakly_parallel
    )
