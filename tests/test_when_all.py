"""``when_all`` and ``when_all_with_variant``:  ([exec.when.all]), with [exec.async.ops] (exactly
once), [exec.recv.concepts] (no stop callback left registered at completion), [exec.adapt.general],
[exec.snd.concepts], [exec.snd.transform]."""

from __future__ import annotations

import gc
import threading
import weakref
from typing import Any

import pytest
import trio
from _helpers import JOIN, BadStart, TwoValueSigs, restore_domain_dispatch

import structexec as sx
from structexec.testing import ManualScheduler, RecordingReceiver

_restore_domain_dispatch = pytest.fixture(restore_domain_dispatch, autouse=True)


def raise_(e: BaseException) -> Any:
    raise e


# --------------------------------------------------------------------------- arguments, values


def test_when_all_of_zero_senders_or_non_senders_raises() -> None:
    """[exec.when.all]: ``when_all()`` and a non-sender argument raise TypeError at call."""
    for algo in (sx.when_all, sx.when_all_with_variant):
        with pytest.raises(TypeError, match="at least one sender"):
            algo()
        with pytest.raises(TypeError, match="#1"):
            algo(sx.just(), 42)
        with pytest.raises(TypeError):
            algo(sx.then(lambda: 1))  # a closure is not a sender ([exec.adapt.obj])


def test_child_with_two_value_signatures_raises_at_connect() -> None:
    """[exec.when.all]: a child with >=2 value signatures raises at connect (not at construction);
    ``when_all_with_variant`` accepts it."""
    s = sx.when_all(sx.just(), TwoValueSigs())
    rec = RecordingReceiver()
    with pytest.raises(TypeError, match="when_all_with_variant"):
        rec.connect(s)
    assert not rec.done
    assert sx.sync_wait(sx.when_all_with_variant(sx.just(), TwoValueSigs())) == ((), (1,))


def test_values_concatenated_in_argument_order() -> None:
    """[exec.when.all]: ``sync_wait(when_all(just(1), just(2, 3), just())) == (1, 2, 3)``."""
    assert sx.sync_wait(sx.when_all(sx.just(1), sx.just(2, 3), sx.just())) == (1, 2, 3)
    assert sx.sync_wait(sx.when_all(sx.just("only"))) == ("only",)


def test_order_independent_of_completion_order() -> None:
    """[exec.when.all]: the result order is the argument order even when children complete in
    reverse."""
    ms = ManualScheduler()
    rec = RecordingReceiver()
    rec.run(
        sx.when_all(
            sx.schedule(ms) | sx.then(lambda: "first"),
            sx.schedule(ms) | sx.then(lambda: sx.values("second", 2)),
            sx.schedule(ms) | sx.then(lambda: "third"),
        )
    )
    ms.run_one(2)
    ms.run_one(1)
    assert not rec.done
    ms.run_one(0)
    assert rec.value == ("first", "second", 2, "third")
    assert rec.scheduler is ms and rec.live_callbacks_at_completion == 0


# -------------------------------------------------------------------- children's environment, start


def test_children_env_has_own_stop_token_and_forwarded_queries() -> None:
    """[exec.when.all]: the children see when_all's own stop token; other forwarding queries come
    from the receiver env; non-forwarding ones are hidden."""
    a = ManualScheduler("A")
    rec = RecordingReceiver(extra_env=sx.prop(sx.get_scheduler, a))
    rec.run(sx.when_all(sx.read_env(sx.get_stop_token), sx.read_env(sx.get_scheduler)))
    tok, sch = rec.value
    assert isinstance(tok, sx.inplace_stop_token)
    assert tok != rec.stop_source.get_token() and tok.stop_possible()
    assert not tok.stop_requested()
    assert sch is a

    class NonFwd(sx.Query):
        pass

    q = NonFwd()
    with pytest.raises(TypeError):
        RecordingReceiver(sx.prop(q, 1)).connect(sx.when_all(sx.read_env(q)))


def test_children_started_in_argument_order() -> None:
    """[exec.when.all] step 3: the children are started in argument order."""
    order: list[int] = []
    sx.sync_wait(sx.when_all(*(sx.then(sx.just(), lambda i=i: order.append(i)) for i in range(5))))
    assert order == [0, 1, 2, 3, 4]


def test_outer_stop_before_start_starts_no_child() -> None:
    """[exec.when.all]: an outer source stopped before start means no child side effects and
    ``set_stopped``; the callback is deregistered ([exec.recv.concepts])."""
    ms = ManualScheduler()
    ran: list[int] = []
    rec = RecordingReceiver()
    rec.request_stop()
    rec.run(sx.when_all(sx.then(sx.just(), lambda: ran.append(1)), sx.schedule(ms)))
    assert rec.stopped and ran == [] and ms.pending == 0
    assert rec.live_callbacks_at_completion == 0


def test_stop_before_start_releases_the_unstarted_children_at_once() -> None:
    """[exec.when.all] with docs/senders.md "Writing your own sender": the children's operations,
    never started, are released when ``when_all`` completes ``set_stopped``, without the garbage
    collector (an operation and its child receiver form a cycle), so what they hold (a scope
    association of ``associate``) ends at a defined moment."""
    ops: list[weakref.ref[Any]] = []

    class Op:
        def __init__(self, rcvr: Any) -> None:
            self.rcvr = rcvr  # the child's receiver refers back to when_all's operation

        def start(self) -> None:
            raise AssertionError("a child was started after a stop request ([exec.when.all])")

    class Child(sx.Sender[None]):
        def connect(self, rcvr: Any) -> Op:
            op = Op(rcvr)
            ops.append(weakref.ref(op))
            return op

    rec = RecordingReceiver()
    rec.request_stop()
    gc.disable()
    try:
        op = rec.run(sx.when_all(Child(), Child()))
        assert rec.stopped
        assert len(ops) == 2 and all(r() is None for r in ops)
        del op
    finally:
        gc.enable()


# --------------------------------------------------------------------------- errors and stopped


def test_first_error_requests_stop_and_wins() -> None:
    """[exec.when.all]: the first error requests stop on the internal source (the pending sibling
    sees it) and is the result; a later error is ignored."""
    ms = ManualScheduler()
    e1, e2 = KeyError(1), KeyError(2)
    rec = RecordingReceiver()
    rec.run(
        sx.when_all(
            sx.schedule(ms),
            sx.just_error(e1),
            sx.read_env(sx.get_stop_token) | sx.then(lambda t: t.stop_requested()),
            sx.just_error(e2),
        )
    )
    assert not rec.done  # waits for the scheduled child ([exec.when.all])
    ms.run_one()  # ManualScheduler honours the stop request when the item runs
    assert rec.error is e1 and rec.live_callbacks_at_completion == 0


def test_stop_request_runs_on_the_erroring_thread() -> None:
    """[exec.when.all], [stoptoken.concepts]: the stop request runs synchronously on the thread that
    delivered the error; a sibling that reacts to stop at once completes there, and so does
    when_all."""
    worker = ManualScheduler("worker")
    eager = ManualScheduler("eager", stop_eagerly=True)
    boom = RuntimeError("boom")
    rec = RecordingReceiver()
    rec.run(
        sx.when_all(
            sx.schedule(worker) | sx.then(lambda: raise_(boom)),
            sx.schedule(eager),
        )
    )
    t = threading.Thread(target=worker.run_one)
    t.start()
    t.join(JOIN)
    assert not t.is_alive()
    assert eager.stopped_eagerly == 1 and eager.pending == 0
    assert rec.error is boom and rec.thread == t.ident


@pytest.mark.parametrize("order", ["stopped-first", "error-first"])
def test_error_beats_stopped(order: str) -> None:
    """[exec.when.all]: ``when_all(just_stopped(), just_error(e))`` gives ``set_error(e)``, and
    so does the reverse order."""
    e = ValueError("e")
    kids = [sx.just_stopped(), sx.just_error(e)]
    if order == "error-first":
        kids.reverse()
    rec = RecordingReceiver()
    rec.run(sx.when_all(*kids))
    assert rec.error is e and rec.live_callbacks_at_completion == 0


def test_stopped_child_requests_stop_and_result_is_stopped() -> None:
    """[exec.when.all]: a stopped child stops the siblings; the result is stopped."""
    ms = ManualScheduler()
    rec = RecordingReceiver()
    rec.run(sx.when_all(sx.schedule(ms) | sx.then(lambda: 1), sx.just_stopped()))
    assert not rec.done
    ms.run_one()
    assert rec.stopped


# ------------------------------------------------------------------- waiting, outer stop, callbacks


def test_when_all_waits_for_all_children() -> None:
    """[exec.when.all]: a child that finishes late on a ManualScheduler delays the completion until
    ``drain()``, even after an error."""
    ms = ManualScheduler()
    e = OSError("early")
    rec = RecordingReceiver()
    rec.run(sx.when_all(sx.unstoppable(sx.schedule(ms)), sx.just_error(e)))
    assert not rec.done and ms.pending == 1
    ms.drain()
    assert rec.error is e and rec.scheduler is ms


def test_outer_stop_reaches_children_and_values_still_win() -> None:
    """[exec.when.all]: an outer stop request reaches the children's token; if every child still
    completes with a value, the result is the values."""
    ms = ManualScheduler()
    tokens: list[Any] = []
    rec = RecordingReceiver()
    rec.run(
        sx.when_all(
            sx.unstoppable(sx.schedule(ms)) | sx.then(lambda: 1),
            sx.read_env(sx.get_stop_token) | sx.then(lambda t: tokens.append(t) or 2),
        )
    )
    assert not tokens[0].stop_requested()
    rec.request_stop()
    assert tokens[0].stop_requested()
    ms.drain()
    assert rec.value == (1, 2) and rec.live_callbacks_at_completion == 0


@pytest.mark.parametrize("path", ["value", "error", "stopped", "outer-stop", "outer-stop-before"])
def test_no_live_stop_callbacks_at_completion(path: str) -> None:
    """[exec.when.all], [exec.recv.concepts]: every stop callback registered on the receiver's token
    is removed before the completion, on every path."""
    ms = ManualScheduler()
    kids: list[Any] = [sx.schedule(ms) | sx.then(lambda: 1)]
    if path == "error":
        kids.append(sx.just_error(KeyError()))
    elif path == "stopped":
        kids.append(sx.just_stopped())
    rec = RecordingReceiver()
    if path == "outer-stop-before":
        rec.request_stop()
    rec.run(sx.when_all(*kids))
    if path == "outer-stop":
        assert len(rec.stop_source._callbacks) == 1  # our forwarding callback, while running
        rec.request_stop()
    ms.drain()
    assert rec.done and rec.live_callbacks_at_completion == 0
    rec.check()
    expected = {
        "value": "value",
        "error": "error",
        "stopped": "stopped",
        "outer-stop": "stopped",
        "outer-stop-before": "stopped",
    }[path]
    assert rec.kind == expected


# --------------------------------------------------------------------------- threads


def test_concurrent_children_on_threads_complete_exactly_once() -> None:
    """[exec.when.all], [exec.async.ops]: children completing at the same time on different threads
    give exactly one completion with all values in argument order (repeated to shake out races)."""
    n = 6
    for _ in range(60):
        scheds = [ManualScheduler(str(i)) for i in range(n)]
        rec = RecordingReceiver()
        rec.run(
            sx.when_all(*(sx.schedule(s) | sx.then(lambda i=i: i) for i, s in enumerate(scheds)))
        )
        barrier = threading.Barrier(n)

        def run(s: ManualScheduler, b: threading.Barrier = barrier) -> None:
            b.wait()
            s.run_one()

        threads = [threading.Thread(target=run, args=(s,)) for s in scheds]
        for t in threads:
            t.start()
        for t in threads:
            t.join(JOIN)
        rec.wait()
        assert rec.value == tuple(range(n)) and rec.completions == 1


def test_concurrent_errors_and_stops_complete_exactly_once() -> None:
    """[exec.when.all] under races: with errors, stops and values arriving concurrently the result
    is one of the errors, exactly once."""
    n = 6
    for _ in range(40):
        scheds = [ManualScheduler(str(i)) for i in range(n)]
        errs = [KeyError(i) for i in range(n)]
        kids = []
        for i, s in enumerate(scheds):
            if i % 3 == 0:  # unstoppable: the error must happen even after a stop request
                kids.append(sx.unstoppable(sx.schedule(s)) | sx.then(lambda e=errs[i]: raise_(e)))
            elif i % 3 == 1:
                kids.append(sx.schedule(s) | sx.let_value(sx.just_stopped))
            else:
                kids.append(sx.unstoppable(sx.schedule(s)) | sx.then(lambda i=i: i))
        rec = RecordingReceiver()
        rec.run(sx.when_all(*kids))
        barrier = threading.Barrier(n)
        threads = [
            threading.Thread(target=lambda s=s, b=barrier: (b.wait(), s.run_one())) for s in scheds
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(JOIN)
        rec.wait()
        assert rec.completions == 1
        assert any(rec.error is e for e in errs[::3])
        assert rec.live_callbacks_at_completion == 0


# ---------------------------------------------------------------- attributes, when_all_with_variant


def test_when_all_attributes_empty_or_common_domain() -> None:
    """[exec.when.all]: attributes are ``env()``; with a common custom domain,
    ``get_domain``."""
    attrs = sx.get_env(sx.when_all(sx.schedule(ManualScheduler()), sx.just()))
    with pytest.raises(sx.QueryError):
        sx.get_completion_scheduler[sx.set_value_t](attrs)
    with pytest.raises(sx.QueryError):
        sx.get_domain(attrs)

    class MyDomain(sx.default_domain):
        pass

    dom = MyDomain()

    class DomSched(ManualScheduler):
        def query(self, q: Any, *args: Any) -> Any:
            if q is sx.get_domain:
                return dom
            return super().query(q, *args)

    d1, d2 = DomSched(), DomSched()
    s = sx.when_all(sx.schedule(d1), sx.schedule(d2))
    assert isinstance(sx.get_domain(sx.get_env(s)), MyDomain)


def test_when_all_with_variant_values_and_lowering() -> None:
    """[exec.when.all], [exec.snd.transform]: each child contributes one tuple; the lowering to
    ``when_all(into_variant(...))`` happens at connect, visible to a domain."""
    assert sx.sync_wait(sx.when_all_with_variant(sx.just(1), sx.just(2, 3), sx.just())) == (
        (1,),
        (2, 3),
        (),
    )
    seen: list[Any] = []

    class Spy(sx.default_domain):
        def transform_sender(self, sndr: Any, env: Any = None) -> Any:
            if env is not None:
                seen.append(sndr.tag)
            return super().transform_sender(sndr, env)

    rec = RecordingReceiver(extra_env=sx.prop(sx.get_domain, Spy()))
    rec.run(sx.when_all_with_variant(sx.just(1)))
    assert rec.value == ((1,),)
    assert seen[:2] == [sx.when_all_with_variant, sx.when_all]
    assert sx.into_variant in seen


# --------------------------------------------------------------------------- misc


def test_when_all_is_lazy_and_exposes_its_structure() -> None:
    """[exec.adapt.general]: nothing runs at construction or connect; [exec.snd.concepts]:
    tag/data/children."""
    calls: list[int] = []
    kids = (sx.then(sx.just(), lambda: calls.append(1)), sx.just(2))
    s = sx.when_all(*kids)
    rec = RecordingReceiver()
    op = rec.connect(s)
    assert calls == [] and not rec.done
    rec.start(op)
    assert calls == [1] and rec.value == (2,)
    assert s.tag is sx.when_all and s.children == kids and s.data is None
    with pytest.raises(RuntimeError, match="started twice"):
        op.start()


def test_when_all_completion_signatures() -> None:
    """[exec.when.all]: concatenated value types, union of errors, stopped unless unstoppable."""
    s = sx.when_all(sx.just(1), sx.just("a", 2.0), sx.just_error(KeyError()))
    cs = sx.get_completion_signatures(s)
    assert cs is not None
    assert sx.set_value_t(int, str, float) in cs and sx.set_error_t(KeyError) in cs
    assert cs.sends_stopped
    cs2 = sx.get_completion_signatures(sx.when_all(sx.just(1)), sx.env())
    assert cs2 == sx.completion_signatures(sx.set_value_t(int))
    assert sx.get_completion_signatures(sx.when_all(sx.just(), sx.then(sx.just(), print))) is None


def test_when_all_is_multi_shot() -> None:
    """A when_all of multi-shot children can be connected repeatedly."""
    s = sx.when_all(sx.just(1), sx.just(2))
    assert [sx.sync_wait(s) for _ in range(3)] == [(1, 2)] * 3


async def test_when_all_of_coroutine_children_under_trio() -> None:
    """[exec.when.all], docs/trio.md "Coroutines are senders; a stop request cancels them":
    coroutine objects are senders and can be children; awaiting when_all in a trio task gives the
    tuple of datums (docs/trio.md "Awaiting a sender")."""

    async def slow(v: int) -> int:
        await trio.sleep(0)
        return v

    assert await sx.when_all(slow(5), sx.just(2), slow(7)) == (5, 2, 7)

    async def fails() -> None:
        await trio.sleep(0)
        raise KeyError("coro")

    with pytest.raises(KeyError, match="coro"):
        await sx.when_all(fails(), slow(1))


@pytest.mark.parametrize("fused", [False, True])
def test_an_exception_from_a_childs_start_is_its_error_and_running_children_are_waited_for(
    fused: bool,
) -> None:
    """[exec.when.all]: a child whose ``start`` raises after earlier children started is
    that child's error completion: the running children are stopped and waited for, the
    children after it start with the stop already requested, and only then is the error
    delivered (``start`` itself does not raise, so nothing started is orphaned)."""
    m = ManualScheduler()
    events: list[str] = []
    first = sx.schedule(m) | sx.then(lambda: events.append("first ran"))
    last = sx.schedule(m) | sx.then(lambda: events.append("last ran"))
    children: list[Any] = [first, BadStart(ValueError("boom")), last]
    if fused:
        children.insert(0, sx.just(0))
    r = RecordingReceiver()
    r.run(sx.when_all(*children))  # start does not raise
    assert not r.done  # the first child still runs: the error waits for it
    m.drain()  # the stop request completes the queued schedules stopped
    assert isinstance(r.error, ValueError) and str(r.error) == "boom"
    assert events == []
    with pytest.raises(ValueError, match="boom"):
        sx.sync_wait(sx.when_all(sx.just(1), BadStart(ValueError("boom"))))


def test_a_base_exception_from_a_childs_start_propagates_stops_and_drops_the_rest() -> None:
    m = ManualScheduler()
    r = RecordingReceiver()
    later = sx.schedule(m)
    with pytest.raises(KeyboardInterrupt):
        r.run(sx.when_all(sx.schedule(m), BadStart(KeyboardInterrupt()), later))
    assert m.pending == 1  # only the child before the broken one was started
    m.drain()  # it completes (stopped); the operation never completes
    assert not r.done and m.pending == 0


def test_a_call_on_a_worker_and_a_finished_runs_timer_deliver_the_error_after_the_call() -> None:
    """The trio scheduler of a finished run refuses to start a timer (``RuntimeError`` from
    ``start``): beside a call already running on a worker thread, ``when_all`` waits for the
    call before ``sync_wait`` raises (it used to raise at once, the call still running)."""

    async def get_sched() -> Any:
        return sx.trio_scheduler()

    sch = trio.run(get_sched)
    started = threading.Event()
    release = threading.Event()
    finished: list[str] = []

    def work() -> None:
        started.set()
        release.wait(5)
        finished.append("call")

    class TimerOnceTheCallRuns(sx.Sender[None]):
        def connect(self, rcvr: Any) -> Any:
            inner = sx.connect(sx.schedule_after(sch, 3600), rcvr)

            class Op:
                def start(self) -> None:
                    started.wait(5)
                    inner.start()

            return Op()

    par = sx.get_parallel_scheduler()
    threading.Timer(0.05, release.set).start()
    with pytest.raises(RuntimeError, match="has finished"):
        sx.sync_wait(sx.when_all(sx.schedule(par) | sx.then(work), TimerOnceTheCallRuns()))
    assert finished == ["call"]
