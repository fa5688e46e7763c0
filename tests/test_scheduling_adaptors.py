"""``starts_on``, ``continues_on``, ``schedule_from``, ``on``: [exec.starts.on],
[exec.continues.on], [exec.schedule.from], [exec.on], with [exec.get.compl.sched] (completion
schedulers), [exec.adapt.general], [exec.adapt.obj], [exec.snd.concepts], [exec.snd.expos],
[exec.snd.transform] (domains).

Every step records ``threading.get_ident()`` and ``ManualScheduler.current()`` (the scheduler
whose item is running on this thread) so that the tests check *where* things happen.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from _helpers import LoopThread, loop_thread, restore_domain_dispatch
from _helpers import here as where

import structexec as sx
from structexec._core._domain import get_domain_late
from structexec.testing import ManualScheduler, RecordingReceiver

_restore_domain_dispatch = pytest.fixture(restore_domain_dispatch, autouse=True)
lt = pytest.fixture(loop_thread, name="lt")
MAIN = threading.get_ident


# =========================================================================== starts_on


def test_starts_on_runs_child_on_scheduler_and_does_not_come_back(lt: LoopThread) -> None:
    """[exec.starts.on]: ``starts_on(ThreadSched, then(just(), record_thread))`` runs on the
    scheduler's thread, and the receiver also completes there."""
    seen: list[int] = []
    rec = RecordingReceiver()
    rec.run(sx.starts_on(lt.sch, sx.then(sx.just(), lambda: seen.append(threading.get_ident()))))
    rec.wait()
    assert seen == [lt.ident]
    assert rec.thread == lt.ident != MAIN()
    assert rec.value == ()


def test_starts_on_runs_nothing_before_the_item_runs() -> None:
    """[exec.starts.on], [exec.get.compl.sched]: with a ManualScheduler, nothing runs before the
    item runs; then the child runs under the scheduler's marker and the receiver completes there
    too."""
    ms = ManualScheduler("A")
    steps: list[Any] = []
    rec = RecordingReceiver()
    rec.run(sx.starts_on(ms, sx.just(1) | sx.then(lambda x: steps.append(where()) or x + 1)))
    assert steps == [] and not rec.done and ms.pending == 1
    ms.run_one()
    assert steps == [(MAIN(), ms)]
    assert rec.value == (2,) and rec.scheduler is ms


def test_starts_on_child_sees_the_scheduler(lt: LoopThread) -> None:
    """[exec.starts.on]: ``sync_wait(starts_on(sch, read_env(get_scheduler))) == (sch,)``, read on
    sch."""
    got = sx.sync_wait(
        sx.starts_on(lt.sch, sx.read_env(sx.get_scheduler) | sx.then(lambda s: (s, MAIN())))
    )
    assert got == ((lt.sch, lt.ident),)


def test_starts_on_child_env_forwards_outer_forwarding_queries() -> None:
    """[exec.starts.on]: the child env is JOIN-ENV(SCHED-ENV(sch), FWD-ENV(env)): the stop token is
    the receiver's."""
    ms = ManualScheduler()
    rec = RecordingReceiver()
    rec.run(sx.starts_on(ms, sx.read_env(sx.get_stop_token)))
    ms.drain()
    assert rec.value == (rec.stop_source.get_token(),)


def test_starts_on_schedule_error_means_child_never_started() -> None:
    """[exec.starts.on]: ``schedule(sch)`` failing gives ``set_error`` and the child never
    runs."""
    ms = ManualScheduler(infallible=False)
    boom = RuntimeError("no agent")
    ms.fail_next(boom)
    ran: list[int] = []
    rec = RecordingReceiver()
    rec.run(sx.starts_on(ms, sx.then(sx.just(), lambda: ran.append(1))))
    ms.drain()
    assert rec.error is boom and ran == []


def test_starts_on_schedule_stopped_and_stop_token_forwarded() -> None:
    """[exec.starts.on]: the scheduling op sees the receiver's stop token; stopped → child never
    runs."""
    ms = ManualScheduler()
    ran: list[int] = []
    rec = RecordingReceiver()
    rec.run(sx.starts_on(ms, sx.then(sx.just(), lambda: ran.append(1))))
    assert sx.get_stop_token(ms.envs[0]) == rec.stop_source.get_token()
    rec.request_stop()
    ms.drain()
    assert rec.stopped and ran == []
    assert rec.live_callbacks_at_completion == 0


def test_starts_on_bad_arguments_and_laziness() -> None:
    """[exec.starts.on] (ill-formed → TypeError, docs/senders-adaptors.md), [exec.adapt.general]: no
    work before start, connect-time errors of the child raise from connect."""
    with pytest.raises(TypeError, match="scheduler"):
        sx.starts_on(42, sx.just())
    with pytest.raises(TypeError, match="sender"):
        sx.starts_on(ManualScheduler(), 42)
    ms = ManualScheduler()
    calls: list[int] = []
    rec = RecordingReceiver()
    op = rec.connect(sx.starts_on(ms, sx.then(sx.just(), lambda: calls.append(1))))
    assert ms.pending == 0 and calls == []
    rec.start(op)
    assert ms.pending == 1 and calls == []

    class NonFwd(sx.Query):
        pass

    with pytest.raises(TypeError):
        RecordingReceiver(sx.prop(NonFwd(), 1)).connect(sx.starts_on(ms, sx.read_env(NonFwd())))


def test_starts_on_structure_and_domain_at_construction() -> None:
    """[exec.snd.concepts], [exec.starts.on]: tag/data/children; the scheduler's domain sees the
    sender at construction."""
    seen: list[Any] = []

    class RecordingDomain(sx.default_domain):
        def transform_sender(self, sndr: Any, env: Any = None) -> Any:
            seen.append((sndr.tag, env))
            return super().transform_sender(sndr, env)

    dom = RecordingDomain()  # the first custom domain instance turns the dispatch on

    class DomSched(ManualScheduler):
        def query(self, q: Any, *args: Any) -> Any:
            if q is sx.get_domain:
                return dom
            return super().query(q, *args)

    ds = DomSched()
    child = sx.just(1)
    s = sx.starts_on(ds, child)
    assert s.tag is sx.starts_on and s.data is ds and s.children == (child,)
    assert seen == [(sx.starts_on, None)]


# =========================================================================== continues_on


def test_continues_on_delivers_all_three_completions_on_destination() -> None:
    """[exec.continues.on]: value, error and stopped are all delivered on an agent of ``sch``; the
    child starts on the current agent."""
    ms = ManualScheduler("dest")
    started_on: list[Any] = []
    child = sx.then(sx.just(), lambda: started_on.append(where()) or 7)
    for s, check in [
        (sx.continues_on(child, ms), lambda r: r.value == (7,)),
        (
            sx.continues_on(sx.just_error(ValueError("e")), ms),
            lambda r: type(r.error) is ValueError,
        ),
        (sx.just_stopped() | sx.continues_on(ms), lambda r: r.stopped),
    ]:
        rec = RecordingReceiver()
        rec.run(s)
        assert not rec.done and ms.pending == 1
        ms.run_one()
        assert check(rec) and rec.scheduler is ms
    assert started_on == [(MAIN(), None)]


def test_continues_on_thread_hop(lt: LoopThread) -> None:
    """[exec.continues.on]: the continuation runs on the run_loop thread; the child ran on this
    thread."""
    got = sx.sync_wait(
        sx.just(MAIN()) | sx.continues_on(lt.sch) | sx.then(lambda before: (before, MAIN()))
    )
    assert got == ((MAIN(), lt.ident),)


def test_continues_on_completion_schedulers_are_the_destination_except_for_errors() -> None:
    """[exec.continues.on]: completion schedulers value/stopped = sch; set_error_t comes from the
    child."""
    src = ManualScheduler("src", infallible=False)
    dst = ManualScheduler("dst")
    attrs = sx.get_env(sx.continues_on(sx.schedule(src), dst))
    assert sx.get_completion_scheduler[sx.set_value_t](attrs) is dst
    assert sx.get_completion_scheduler[sx.set_stopped_t](attrs) is dst
    assert sx.get_completion_scheduler[sx.set_error_t](attrs) is src
    attrs2 = sx.get_env(sx.continues_on(sx.just(), dst))
    with pytest.raises(sx.QueryError):
        sx.get_completion_scheduler[sx.set_error_t](attrs2)


def test_continues_on_lowering_and_late_domain_is_the_destinations() -> None:
    """[exec.continues.on], [exec.snd.transform]: the late domain is the destination's; at connect
    the sender becomes ``schedule_from(sch, sndr)``, which that domain sees."""
    seen: list[Any] = []

    class DestDomain(sx.default_domain):
        def transform_sender(self, sndr: Any, env: Any = None) -> Any:
            seen.append((sndr.tag, env is not None))
            return super().transform_sender(sndr, env)

    dom = DestDomain()

    class DestSched(ManualScheduler):
        def query(self, q: Any, *args: Any) -> Any:
            if q is sx.get_domain:
                return dom
            return super().query(q, *args)

    dst = DestSched()
    s = sx.continues_on(sx.just(4), dst)
    assert isinstance(get_domain_late(s, sx.env()), DestDomain)
    rec = RecordingReceiver()
    rec.run(s)
    assert (sx.continues_on, True) in seen and (sx.schedule_from, True) in seen
    dst.drain()
    assert rec.value == (4,) and rec.scheduler is dst


def test_schedule_from_connects_the_scheduling_op_at_connect() -> None:
    """[exec.schedule.from]: ``connect(schedule(sch), ...)`` happens at connect; it starts after the
    child."""
    ms = ManualScheduler()
    rec = RecordingReceiver()
    op = rec.connect(sx.schedule_from(ms, sx.just(1)))
    assert len(ms.envs) == 1 and ms.pending == 0
    rec.start(op)
    assert ms.pending == 1 and not rec.done


def test_schedule_from_stores_datums_by_reference_and_replays_them() -> None:
    """[exec.schedule.from]: the datums are kept (the same objects) and replayed on sch's agent."""
    ms = ManualScheduler()
    payload = [1, 2]
    rec = RecordingReceiver()
    rec.run(sx.schedule_from(ms, sx.just(payload, "x")))
    ms.run_one()
    (p, x) = rec.value
    assert p is payload and x == "x" and rec.scheduler is ms


@pytest.mark.parametrize("child_kind", ["value", "error", "stopped"])
def test_schedule_from_scheduling_failure_wins(child_kind: str) -> None:
    """[exec.schedule.from]: ``continues_on(just(1), FailingSched(e))`` gives ``set_error(e)``; the
    stored result (whatever its kind) is discarded."""
    child = {
        "value": sx.just(1),
        "error": sx.just_error(KeyError()),
        "stopped": sx.just_stopped(),
    }[child_kind]
    ms = ManualScheduler(infallible=False)
    e = OSError("cannot schedule")
    ms.fail_next(e)
    rec = RecordingReceiver()
    rec.run(sx.continues_on(child, ms))
    ms.drain()
    assert rec.error is e


def test_schedule_from_scheduling_stopped_wins() -> None:
    """[exec.schedule.from]: a stopped scheduling op completes ``set_stopped`` and drops the
    value."""
    ms = ManualScheduler()
    rec = RecordingReceiver()
    rec.run(sx.continues_on(sx.just(1), ms))
    rec.request_stop()
    ms.drain()
    assert rec.stopped and rec.live_callbacks_at_completion == 0


def test_continues_on_outer_stop_reaches_run_loop_schedule() -> None:
    """[exec.schedule.from]: ``continues_on(just(1), RLsched)`` with stop requested after start but
    before ``run`` gives ``set_stopped()`` (run_loop checks the token when the item runs,
    [exec.run.loop.types])."""
    loop = sx.run_loop()
    rec = RecordingReceiver()
    rec.run(sx.continues_on(sx.just(1), loop.get_scheduler()))
    assert not rec.done
    rec.request_stop()
    loop.finish()
    loop.run()
    assert rec.stopped and rec.thread == MAIN()


def test_continues_on_signatures_and_bad_arguments() -> None:
    """[exec.continues.on], [exec.schedule.from] (meta) and docs/senders-adaptors.md."""
    ms = ManualScheduler(infallible=False)
    cs = sx.get_completion_signatures(sx.continues_on(sx.just(1), ms))
    assert cs == sx.completion_signatures(
        sx.set_value_t(int), sx.set_stopped_t(), sx.set_error_t(Exception)
    )
    with pytest.raises(TypeError, match="scheduler"):
        sx.continues_on(sx.just(), 1)
    with pytest.raises(TypeError, match="scheduler"):
        sx.continues_on(1)
    with pytest.raises(TypeError, match="sender"):
        sx.continues_on(1, ms)
    with pytest.raises(TypeError):
        sx.schedule_from(sx.just(), ms)  # arguments swapped


def test_continues_on_is_lazy_and_exposes_its_structure() -> None:
    """[exec.adapt.general], [exec.adapt.obj], [exec.snd.concepts]."""
    ms = ManualScheduler()
    calls: list[int] = []
    s = sx.then(sx.just(), lambda: calls.append(1)) | sx.continues_on(ms)
    rec = RecordingReceiver()
    rec.connect(s)
    assert calls == [] and ms.pending == 0
    assert s.tag is sx.continues_on and s.data is ms and len(s.children) == 1
    sf = sx.schedule_from(ms, sx.just())
    assert sf.tag is sx.schedule_from and sf.data is ms
    c = sx.continues_on(ms) | sx.then(lambda: 3)
    assert isinstance(c, sx.Closure)


# =========================================================================== on


def test_on_goes_there_and_back() -> None:
    """[exec.on]: with A the receiver's scheduler and B = sch, ``sndr`` runs under B's marker and
    the result arrives under A's marker; the child sees get_scheduler == B."""
    a, b = ManualScheduler("A"), ManualScheduler("B")
    log: list[Any] = []
    child = sx.read_env(sx.get_scheduler) | sx.then(
        lambda s: log.append(("child", s, where())) or 9
    )
    rec = RecordingReceiver(extra_env=sx.prop(sx.get_scheduler, a))
    rec.run(sx.on(b, child))
    assert (a.pending, b.pending, log) == (0, 1, [])
    b.run_one()
    assert log == [("child", b, (MAIN(), b))]
    assert not rec.done and a.pending == 1
    a.run_one()
    assert rec.value == (9,) and rec.scheduler is a


def test_on_with_threads(lt: LoopThread) -> None:
    """[exec.on] under sync_wait: the work runs on the loop thread, the result comes back to the
    sync_wait thread's run_loop."""
    got = sx.sync_wait(
        sx.on(lt.sch, sx.just() | sx.then(lambda: MAIN())) | sx.then(lambda t: (t, MAIN()))
    )
    assert got == ((lt.ident, MAIN()),)


def test_on_without_scheduler_raises_at_connect() -> None:
    """[exec.on]: a receiver env without get_scheduler → ``connect`` raises TypeError saying how
    to provide one."""
    rec = RecordingReceiver()
    with pytest.raises(TypeError, match=r"get_scheduler.*write_env"):
        rec.connect(sx.on(ManualScheduler(), sx.just()))
    with pytest.raises(TypeError, match="get_scheduler"):
        rec.connect(sx.just() | sx.on(ManualScheduler(), sx.then(lambda: 1)))
    with pytest.raises(sx.dependent_sender_error):
        sx.get_completion_signatures(sx.on(ManualScheduler(), sx.just()))


def test_on_closure_form_hops_and_environments() -> None:
    """[exec.on]: ``sndr | on(sch, closure)``: sndr runs here (seeing get_scheduler == orig), the
    closure's work runs on sch (seeing get_scheduler == sch), the result returns to orig."""
    a, b = ManualScheduler("A"), ManualScheduler("B")
    log: list[Any] = []

    def in_closure(v: Any) -> Any:
        log.append(("closure", v, ManualScheduler.current()))
        return sx.read_env(sx.get_scheduler) | sx.then(lambda s: (v, s))

    s = sx.read_env(sx.get_scheduler) | sx.on(b, sx.let_value(in_closure))
    rec = RecordingReceiver(extra_env=sx.prop(sx.get_scheduler, a))
    rec.run(s)
    assert log == [] and b.pending == 1  # sndr (read_env) completed inline, hop to B queued
    b.run_one()
    assert log == [("closure", a, b)]
    assert not rec.done and a.pending == 1
    a.run_one()
    assert rec.value == ((a, b),) and rec.scheduler is a


def test_on_returns_to_the_childs_completion_scheduler() -> None:
    """[exec.on] step 1: orig is the child's value completion scheduler when it has one, even if
    the receiver's scheduler differs; the three-argument form is the same."""
    a, b, c = ManualScheduler("A"), ManualScheduler("B"), ManualScheduler("C")
    rec = RecordingReceiver(extra_env=sx.prop(sx.get_scheduler, c))
    rec.run(sx.on(sx.schedule(a), b, sx.then(lambda: ManualScheduler.current())))
    a.run_one()
    b.run_one()
    assert c.pending == 0 and a.pending == 1
    a.run_one()
    assert rec.value == (b,) and rec.scheduler is a


def test_on_ill_formed_arguments() -> None:
    """[exec.on]: non-scheduler, neither sender nor closure, or both → TypeError."""
    ms = ManualScheduler()
    with pytest.raises(TypeError, match="scheduler"):
        sx.on(42, sx.just())
    with pytest.raises(TypeError, match="sender or a sender adaptor closure"):
        sx.on(ms, 42)

    class Both(sx.Closure[Any]):
        def connect(self, rcvr: Any) -> Any:
            raise AssertionError

    with pytest.raises(TypeError, match="both"):
        sx.on(ms, Both(lambda s: s))
    with pytest.raises(TypeError, match="closure"):
        sx.on(sx.just(), ms, lambda s: s)
    with pytest.raises(TypeError):
        sx.on(ms)


def test_on_scheduling_failure_is_error() -> None:
    """[exec.on], [exec.starts.on], [exec.continues.on]: a failing scheduling operation (either hop)
    gives an error completion."""
    a = ManualScheduler("A", infallible=False)
    b = ManualScheduler("B", infallible=False)
    e = OSError("no")
    b.fail_next(e)
    ran: list[int] = []
    rec = RecordingReceiver(extra_env=sx.prop(sx.get_scheduler, a))
    rec.run(sx.on(b, sx.then(sx.just(), lambda: ran.append(1))))
    b.drain()
    a.drain()
    assert rec.error is e and ran == []
    e2 = OSError("no way back")
    a.fail_next(e2)
    rec2 = RecordingReceiver(extra_env=sx.prop(sx.get_scheduler, a))
    rec2.run(sx.on(b, sx.just(1)))
    b.drain()
    a.drain()
    assert rec2.error is e2


def test_on_is_lazy_and_exposes_its_structure() -> None:
    """[exec.adapt.general], [exec.snd.concepts]: ``on`` runs nothing before start;
    tag/data/children for both forms."""
    a, b = ManualScheduler("A"), ManualScheduler("B")
    calls: list[int] = []
    s = sx.on(b, sx.then(sx.just(), lambda: calls.append(1)))
    rec = RecordingReceiver(extra_env=sx.prop(sx.get_scheduler, a))
    rec.connect(s)
    assert calls == [] and b.pending == 0
    assert s.tag is sx.on and s.data is b and len(s.children) == 1
    cl = sx.then(lambda: 1)
    s2 = sx.on(sx.just(), b, cl)
    assert s2.tag is sx.on and s2.data == (b, cl)
