"""``affine_on``:  ([exec.affine.on] as changed by P3941R1), docs/task.md "Scheduler affinity".

Tests record ``threading.get_ident()`` and ``ManualScheduler.current()`` (the scheduler whose
item is completing on this thread) to check where completions are delivered.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
import trio
from _helpers import LoopThread, here, loop_thread, rec_on, wait_pending

import structexec as sx
from structexec._core._protocol import Algorithm
from structexec.testing import ManualScheduler, RecordingReceiver

lt = pytest.fixture(loop_thread, name="lt")


# --------------------------------------------------------------------------- shape, checks


def test_affine_on_one_argument_form_and_pipes() -> None:
    child = sx.just(1)
    s = sx.affine_on(child)
    assert s.tag is sx.affine_on
    assert s.children == (child,)
    assert (sx.just(1) | sx.affine_on).tag is sx.affine_on
    assert (sx.just(1) | sx.affine_on()).tag is sx.affine_on
    composed = sx.affine_on | sx.then(lambda x: x + 1)
    r = rec_on(sx.inline_scheduler())
    r.run(sx.just(1) | composed)
    assert r.value == (2,)


def test_affine_on_bad_arguments_raise_type_error() -> None:
    with pytest.raises(TypeError, match="sender"):
        sx.affine_on(42)
    with pytest.raises(TypeError, match="sch must be a scheduler"):
        sx.affine_on(sx.just(), 42)
    with pytest.raises(TypeError):
        42 | sx.affine_on  # type: ignore[operator]


def test_receiver_without_scheduler_raises_at_connect() -> None:
    r = RecordingReceiver()  # stop token only
    with pytest.raises(TypeError, match="get_scheduler"):
        sx.connect(sx.affine_on(sx.just(1)), r)


def test_fallible_scheduler_raises_at_connect() -> None:
    fallible = ManualScheduler(infallible=False)
    with pytest.raises(TypeError, match="infallible"):
        sx.connect(sx.affine_on(sx.just(1)), rec_on(fallible))
    with pytest.raises(TypeError, match="infallible"):
        sx.connect(sx.affine_on(sx.just(1), fallible), RecordingReceiver())

    class Undeclared:
        def schedule(self) -> Any:
            return sx.just()  # declares set_value_t() ... but only because just() does

    # just() declares exactly set_value_t(): that *is* an infallible declaration
    sx.connect(sx.affine_on(sx.just(1)), rec_on(Undeclared()))

    class NoSigs:
        def schedule(self) -> Any:
            class S:
                def connect(self, rcvr: Any) -> Any:
                    return sx.connect(sx.just(), rcvr)

            return S()

    with pytest.raises(TypeError, match="does not declare"):
        sx.connect(sx.affine_on(sx.just(1)), rec_on(NoSigs()))


# --------------------------------------------------------------------------- behaviour


def test_completions_are_delivered_on_the_receivers_scheduler(lt: LoopThread) -> None:
    m = ManualScheduler("home")
    r = rec_on(m)
    seen: list[Any] = []
    r.run(sx.affine_on(sx.schedule(lt.sch) | sx.then(lambda: seen.append(here()) or 7)))
    # the child ran on the loop thread; the result waits for the hop onto `home`
    wait_pending(m)
    assert seen == [(lt.ident, None)]
    assert not r.done
    assert m.pending == 1
    m.run_one()
    assert r.value == (7,)
    assert r.thread == threading.get_ident()
    assert r.scheduler is m


def test_error_and_stopped_are_also_delivered_on_the_scheduler() -> None:
    home, other = ManualScheduler("home"), ManualScheduler("other")
    r = rec_on(home)
    r.run(sx.affine_on(sx.schedule(other) | sx.then(lambda: 1 / 0)))
    other.run_one()
    assert not r.done and home.pending == 1
    home.run_one()
    assert isinstance(r.error, ZeroDivisionError)
    assert r.scheduler is home

    r2 = rec_on(home)
    r2.run(sx.affine_on(sx.schedule(other) | sx.let_value(lambda: sx.just_stopped())))
    other.run_one()
    assert not r2.done
    home.run_one()
    assert r2.stopped
    assert r2.scheduler is home


def test_hop_back_operation_is_connected_at_connect() -> None:
    home, other = ManualScheduler("home"), ManualScheduler("other")
    r = rec_on(home)
    op = r.connect(sx.affine_on(sx.schedule(other)))
    assert len(home.envs) == 1  # the hop back exists before start
    assert home.started == 0
    r.start(op)
    other.run_one()
    home.run_one()
    assert r.value == ()


def test_hop_is_unstoppable_and_child_sees_the_receivers_token() -> None:
    home, other = ManualScheduler("home"), ManualScheduler("other")
    r = rec_on(home)
    tokens: list[Any] = []
    child = sx.schedule(other) | sx.let_value(
        lambda: sx.read_env(sx.get_stop_token) | sx.then(tokens.append)
    )
    r.run(sx.affine_on(child))
    (hop_env,) = home.envs
    assert sx.is_unstoppable(sx.get_stop_token(hop_env))
    other.run_one()
    assert tokens == [r.stop_source.get_token()]
    home.run_one()
    assert r.value == ()


def test_stop_mid_flight_child_stops_and_stopped_arrives_on_scheduler() -> None:
    home, other = ManualScheduler("home"), ManualScheduler("other")
    r = rec_on(home)
    r.run(sx.affine_on(sx.schedule(other)))
    r.request_stop()
    other.run_one()  # the child sees the stop request and completes stopped
    assert not r.done
    home.run_one()  # the hop is unstoppable: it still runs
    assert r.stopped
    assert r.scheduler is home
    assert r.live_callbacks_at_completion == 0


def test_senders_that_complete_inline_are_not_rescheduled() -> None:
    home = ManualScheduler("home")
    cases = [
        (sx.just(1), ("value", (1,))),
        (sx.just_error(ValueError("e")), ("error", None)),
        (sx.just_stopped(), ("stopped", ())),
        (sx.read_env(sx.get_scheduler), ("value", (home,))),
        (sx.write_env(sx.just(2), sx.prop(sx.get_allocator, 1)), ("value", (2,))),
        (sx.just(3) | sx.then(lambda x: x + 1), ("value", (4,))),
        (sx.just_error(1) | sx.upon_error(lambda e: e + 1), ("value", (2,))),
        (sx.just_stopped() | sx.upon_stopped(lambda: 5), ("value", (5,))),
    ]
    for sndr, (kind, args) in cases:
        r = rec_on(home)
        r.run(sx.affine_on(sndr))
        assert r.done, sndr  # completed inline, without the scheduler
        assert r.events[0][0] == kind
        if args is not None:
            assert r.events[0][1] == args
    assert home.pending == 0
    assert home.envs == []  # no hop was even connected


def test_child_completing_on_the_scheduler_is_not_rescheduled() -> None:
    home = ManualScheduler("home")
    r = rec_on(home)
    r.run(sx.affine_on(sx.schedule(home)))
    assert home.pending == 1
    home.run_one()
    assert r.value == ()  # one item, no second hop
    assert home.pending == 0


def test_childs_tag_customisation_of_affine_on_is_used() -> None:
    calls: list[Any] = []

    class tag_t(Algorithm):
        def affine_on(self, child: Any, env: Any) -> Any:
            calls.append(sx.get_scheduler(env))
            return sx.just("custom")

    class Child(sx.Sender[Any]):
        tag = tag_t()

        def connect(self, rcvr: Any) -> Any:
            raise AssertionError("the customisation replaces the child")

    home = ManualScheduler()
    r = rec_on(home)
    r.run(sx.affine_on(Child()))
    assert r.value == ("custom",)
    assert calls == [home]


def test_nested_affine_on_hops_once() -> None:
    home, other = ManualScheduler("home"), ManualScheduler("other")
    r = rec_on(home)
    r.run(sx.affine_on(sx.affine_on(sx.schedule(other))))
    other.run_one()
    home.run_one()
    assert r.value == ()
    assert home.pending == 0


def test_affine_on_two_argument_form_uses_the_given_scheduler(lt: LoopThread) -> None:
    target = ManualScheduler("target")
    r = RecordingReceiver()  # no scheduler needed in the receiver
    r.run(sx.schedule(lt.sch) | sx.affine_on(target) | sx.then(lambda: here()))
    wait_pending(target)
    target.run_one()
    assert r.value == ((threading.get_ident(), target),)
    attrs = sx.get_env(sx.affine_on(sx.just(), target))
    assert sx.get_completion_scheduler[sx.set_value_t](attrs) is target


def test_attributes_forward_child_queries_without_completion_schedulers() -> None:
    m = ManualScheduler()
    attrs = sx.get_env(sx.affine_on(sx.schedule(m)))
    with pytest.raises(sx.QueryError):
        sx.get_completion_scheduler[sx.set_value_t](attrs)

    class Q(sx.Query):
        forwarding = True

    q = Q()

    class Child(sx.Sender[Any]):
        def connect(self, rcvr: Any) -> Any:
            return sx.connect(sx.just(), rcvr)

        def get_env(self) -> Any:
            return sx.prop(q, "attr")

    assert q(sx.get_env(sx.affine_on(Child()))) == "attr"


def test_affine_on_signatures_are_the_childs() -> None:
    s = sx.affine_on(sx.just(1, "a"))
    assert sx.get_completion_signatures(s) == sx.completion_signatures(sx.set_value_t(int, str))


def test_under_sync_wait_the_result_comes_back_to_the_waiting_thread(lt: LoopThread) -> None:
    where: list[int] = []
    s = (
        sx.schedule(lt.sch)
        | sx.then(lambda: where.append(threading.get_ident()))
        | sx.affine_on
        | sx.then(lambda: where.append(threading.get_ident()))
    )
    assert sx.sync_wait(s) == ()
    assert where == [lt.ident, threading.get_ident()]


async def test_in_trio_the_result_comes_back_to_the_trio_thread(lt: LoopThread) -> None:
    trio_thread = threading.get_ident()
    where: list[int] = []
    s = (
        sx.schedule(lt.sch)
        | sx.then(lambda: where.append(threading.get_ident()))
        | sx.affine_on
        | sx.then(lambda: where.append(threading.get_ident()) or "done")
    )
    assert await s == "done"
    assert where == [lt.ident, trio_thread]
    with trio.fail_after(5):
        assert await sx.affine_on(sx.just(3)) == 3


def test_a_task_completes_on_the_receivers_scheduler_so_no_hop(lt: LoopThread) -> None:
    """A task's scheduler is the receiver's, and it resumes there after every await: affine_on
    need not hop back (P3941R1 3.3). A task on inline_scheduler has no affinity: it needs one.
    """
    home = ManualScheduler("home")

    @sx.task
    async def affine() -> int:
        await sx.schedule(lt.sch)  # completes on the loop thread; the task hops home itself
        return ManualScheduler.current() is home

    r = rec_on(home)
    r.run(sx.affine_on(affine()))
    wait_pending(home)
    home.run_one()  # the task's own hop back
    assert r.value == (True,)
    assert home.pending == 0 and home.started == 1  # affine_on added nothing

    class NoAffinity:
        scheduler_type = sx.inline_scheduler

    @sx.task(environment=NoAffinity)
    async def free() -> int:
        await sx.schedule(lt.sch)
        return threading.get_ident()

    r2 = rec_on(home)
    r2.run(sx.affine_on(free()))
    wait_pending(home)
    assert r2.done is False
    home.run_one()  # affine_on's hop: the task itself finished on the loop thread
    assert r2.value == (lt.ident,)
    assert r2.scheduler is home
