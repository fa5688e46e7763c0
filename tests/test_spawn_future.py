"""``spawn_future`` ([exec.spawn.future], docs/scopes.md "Futures outlive their work")."""

from __future__ import annotations

import gc
import sys
import threading
from typing import Any

import pytest
from _subproc import run_child

import structexec as sx
from structexec.testing import ManualScheduler, RecordingReceiver

if sys.version_info < (3, 11):
    from exceptiongroup import ExceptionGroup

SCOPES = [sx.simple_counting_scope, sx.counting_scope]


def join_now(scope: Any) -> RecordingReceiver:
    r = RecordingReceiver(extra_env=sx.prop(sx.get_scheduler, sx.inline_scheduler()))
    r.run(scope.join())
    return r


class Trigger(sx.Sender[Any]):
    """Completes when the test says so, with whatever the test says (ignores stop)."""

    def __init__(self) -> None:
        self.rcvrs: list[Any] = []

    def connect(self, rcvr: Any) -> Any:
        trig = self

        class Op:
            def start(self) -> None:
                trig.rcvrs.append(rcvr)

        return Op()


class CountingToken:
    def __init__(self, admit: bool = True) -> None:
        self.admit = admit
        self.associated = 0
        self.errors: list[Any] = []

    def try_associate(self) -> bool:
        if self.admit:
            self.associated += 1
        return self.admit

    def disassociate(self) -> None:
        assert self.associated > 0
        self.associated -= 1

    def wrap(self, sndr: Any) -> Any:
        return sndr

    def record_error(self, err: Any) -> None:
        self.errors.append(err)


# --------------------------------------------------------------------------- arguments, eager start


@pytest.mark.parametrize("kind", SCOPES)
def test_spawn_future_argument_checks(kind: Any) -> None:
    tok = kind().get_token()
    with pytest.raises(TypeError, match="needs a sender"):
        sx.spawn_future(42, tok)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="scope token"):
        sx.spawn_future(sx.just(), 42)
    with pytest.raises(TypeError, match="env must be an environment"):
        sx.spawn_future(sx.just(), tok, 42)


@pytest.mark.parametrize("kind", SCOPES)
def test_eager_start_and_inline_delivery(kind: Any) -> None:
    """The work runs before spawn_future returns; consuming later delivers inline
    ([exec.spawn.future])."""
    scope = kind()
    ran: list[int] = []
    fut = sx.spawn_future(
        sx.just(20) | sx.then(lambda x: ran.append(x) or x + 1), scope.get_token()
    )
    assert ran == [20]
    assert scope.count == 0  # released when the work completed ([exec.spawn.future])
    r = RecordingReceiver()
    r.run(fut)
    assert r.value == (21,)
    assert r.thread == threading.get_ident()
    assert scope.count == 0
    assert join_now(scope).value == ()


@pytest.mark.parametrize("kind", SCOPES)
def test_not_associated_completes_stopped_and_never_runs(kind: Any) -> None:
    scope = kind()
    scope.close()
    ran: list[int] = []
    fut = sx.spawn_future(sx.just() | sx.then(lambda: ran.append(1)), scope.get_token())
    assert sx.sync_wait(fut) is None
    assert ran == []
    assert scope.count == 0


# -------------------------------------------------------------------------- environment of the work


def test_work_sees_future_source_and_scope_token() -> None:
    scope = sx.counting_scope()
    sch = ManualScheduler()
    toks: list[Any] = []
    fut = sx.spawn_future(
        sx.read_env(sx.get_stop_token)
        | sx.then(toks.append)
        | sx.let_value(lambda: sx.schedule(sch)),
        scope.get_token(),
    )
    tok = toks[0]
    assert tok.stop_possible() and not tok.stop_requested()
    scope.request_stop()
    assert tok.stop_requested()
    sch.drain()
    assert sx.sync_wait(fut) is None  # the schedule saw the stop
    assert join_now(scope).value == ()


def test_simple_scope_work_sees_only_the_future_source() -> None:
    scope = sx.simple_counting_scope()
    toks: list[Any] = []
    fut = sx.spawn_future(sx.read_env(sx.get_stop_token) | sx.then(toks.append), scope.get_token())
    assert toks[0].stop_possible()
    assert toks[0] != sx.never_stop_token()
    sx.sync_wait(fut)
    assert join_now(scope).value == ()


@pytest.mark.parametrize("kind", SCOPES)
def test_no_scheduler_unless_env_gives_one(kind: Any) -> None:
    scope = kind()
    with pytest.raises(TypeError, match="get_scheduler"):
        sx.spawn_future(sx.read_env(sx.get_scheduler), scope.get_token())
    assert scope.count == 0
    sch = sx.inline_scheduler()
    f = sx.spawn_future(
        sx.read_env(sx.get_scheduler), scope.get_token(), sx.prop(sx.get_scheduler, sch)
    )
    assert sx.sync_wait(f) == (sch,)
    assert join_now(scope).value == ()


# --------------------------------------------------------------------------- results, consuming


@pytest.mark.parametrize("kind", SCOPES)
@pytest.mark.parametrize(
    "sndr,outcome",
    [
        (sx.just(1, "a"), ("value", (1, "a"))),
        (sx.just(), ("value", ())),
        (sx.just_error(KeyError("k")), "error"),
        (sx.just_stopped(), ("stopped",)),
    ],
)
def test_each_result_kind_is_stored_and_delivered(kind: Any, sndr: Any, outcome: Any) -> None:
    scope = kind()
    fut = sx.spawn_future(sndr, scope.get_token())
    r = RecordingReceiver()
    r.run(fut)
    if outcome == "error":
        assert isinstance(r.error, KeyError)
    else:
        assert r.outcome == outcome
    assert scope.unhandled_errors == ()  # a consumed error is not recorded
    assert join_now(scope).value == ()


@pytest.mark.parametrize("kind", SCOPES)
def test_consume_before_complete_delivers_on_the_completing_thread(kind: Any) -> None:
    scope = kind()
    sch = ManualScheduler()
    fut = sx.spawn_future(sx.schedule(sch) | sx.then(lambda: 7), scope.get_token())
    r = RecordingReceiver()
    r.run(fut)
    assert not r.done
    t = threading.Thread(target=sch.drain)
    t.start()
    t.join()
    assert r.value == (7,)
    assert r.thread == t.ident
    assert r.scheduler is sch
    assert scope.count == 0
    assert join_now(scope).value == ()


@pytest.mark.parametrize("kind", SCOPES)
def test_future_is_single_shot(kind: Any) -> None:
    scope = kind()
    fut = sx.spawn_future(sx.just(1), scope.get_token())
    r = RecordingReceiver()
    op = r.connect(fut)
    with pytest.raises(RuntimeError, match="single-shot"):
        RecordingReceiver().connect(fut)
    r.start(op)
    assert r.value == (1,)
    with pytest.raises(RuntimeError, match="started twice"):
        op.start()
    assert join_now(scope).value == ()


# --------------------------------------------------------------------------- abandon


@pytest.mark.parametrize("kind", SCOPES)
@pytest.mark.parametrize("how", ["drop", "close", "drop_op", "close_op"])
def test_abandon_requests_stop_and_scope_still_waits(kind: Any, how: str) -> None:
    scope = kind()
    sch = ManualScheduler()
    toks: list[Any] = []
    done: list[str] = []
    fut = sx.spawn_future(
        sx.read_env(sx.get_stop_token)
        | sx.then(toks.append)
        | sx.let_value(lambda: sx.schedule(sch))
        | sx.then(lambda: done.append("value"))
        | sx.upon_stopped(lambda: done.append("stop")),
        scope.get_token(),
    )
    assert not toks[0].stop_requested()
    if how == "drop":
        del fut
    elif how == "close":
        fut.close()
        fut.close()  # idempotent
    else:
        op = RecordingReceiver().connect(fut)
        del fut
        if how == "close_op":
            op.close()
        else:
            del op
    gc.collect()
    assert toks[0].stop_requested()
    j = join_now(scope)
    assert not j.done  # the scope waits for the abandoned work
    sch.drain()
    assert done == ["stop"]
    assert j.value == ()


@pytest.mark.parametrize("kind", SCOPES)
def test_complete_releases_at_once_then_abandon_is_a_no_op(kind: Any) -> None:
    """[exec.spawn.future] as revised for Python: the association is released when the work
    completes, not when the future is consumed or dropped."""
    scope = kind()
    fut = sx.spawn_future(sx.just(1), scope.get_token())
    assert scope.count == 0
    fut.close()
    assert scope.count == 0
    assert join_now(scope).value == ()


@pytest.mark.parametrize("kind", SCOPES)
def test_unconsumed_error_of_a_future_is_recorded(kind: Any) -> None:
    scope = kind()
    trig = Trigger()
    f1 = sx.spawn_future(sx.just_error(ValueError("first")), scope.get_token())
    f2 = sx.spawn_future(trig, scope.get_token())
    f1.close()  # completed, then dropped
    f2.close()  # dropped, then completes with an error
    trig.rcvrs[0].set_error(OSError("second"))
    errs = scope.unhandled_errors
    assert [type(e) for e in errs] == [ValueError, OSError]
    with pytest.raises(ExceptionGroup):
        sx.sync_wait(scope.join())


# --------------------------------------------------------------------------- order


@pytest.mark.parametrize("kind", SCOPES)
def test_complete_consume_abandon_in_every_order(kind: Any) -> None:
    """complete/consume/abandon in each order, with the observable effects of each."""
    # complete before consume: inline (covered above); consume before complete: on completion
    # (above); abandon before complete: stop request then destroy at completion; complete
    # before abandon: destroy at once.
    scope = kind()
    sch = ManualScheduler()
    stops: list[bool] = []
    f = sx.spawn_future(
        sx.read_env(sx.get_stop_token)
        | sx.then(lambda t: stops.append(t))
        | sx.let_value(lambda: sx.schedule(sch)),
        scope.get_token(),
    )
    f.close()  # abandon first
    assert stops[0].stop_requested() and scope.count == 1
    sch.drain()  # complete second: destroy
    assert scope.count == 0
    f2 = sx.spawn_future(sx.just(), scope.get_token())  # complete first: released at once
    assert scope.count == 0
    f2.close()  # abandon second: destroy
    assert scope.count == 0
    assert join_now(scope).value == ()


@pytest.mark.parametrize("kind", SCOPES)
def test_complete_races_consume_across_threads(kind: Any) -> None:
    """Many futures whose work completes on another thread while the consumer connects and
    starts: every consumer gets its own value exactly once, and everything is released."""
    scope = kind()
    n = 300
    sch = ManualScheduler()
    futs = [
        sx.spawn_future(sx.schedule(sch) | sx.then(lambda i=i: i), scope.get_token())
        for i in range(n)
    ]
    rs = [RecordingReceiver() for _ in range(n)]
    t = threading.Thread(target=sch.drain)
    t.start()
    for r, f in zip(rs, futs):
        r.run(f)
    t.join()
    sch.drain()
    for i, r in enumerate(rs):
        assert r.wait().value == (i,)
    assert scope.count == 0
    assert join_now(scope).value == ()


# ---------------------------------------------------------------------------
# docs/scopes.md "Futures outlive their work"


@pytest.mark.parametrize("kind", SCOPES)
def test_consumer_stop_completes_stopped_at_once(kind: Any) -> None:
    scope = kind()
    sch = ManualScheduler()
    toks: list[Any] = []
    out: list[str] = []
    fut = sx.spawn_future(
        sx.read_env(sx.get_stop_token)
        | sx.then(toks.append)
        | sx.let_value(lambda: sx.schedule(sch))
        | sx.then(lambda: out.append("ran"))
        | sx.upon_stopped(lambda: out.append("stopped")),
        scope.get_token(),
    )
    r = RecordingReceiver()
    r.run(fut)
    assert not r.done
    r.request_stop()
    assert r.stopped  # at once, before the work completes
    assert r.live_callbacks_at_completion == 0  # deregistered first ([exec.recv.concepts])
    assert toks[0].stop_requested()  # the work got a stop request (abandon)
    assert scope.count == 1  # still tracked by the scope
    j = join_now(scope)
    assert not j.done
    sch.drain()
    assert out == ["stopped"]
    assert j.value == ()


@pytest.mark.parametrize("kind", SCOPES)
def test_consumer_already_stopped_completes_stopped(kind: Any) -> None:
    scope = kind()
    sch = ManualScheduler()
    fut = sx.spawn_future(sx.schedule(sch), scope.get_token())
    r = RecordingReceiver()
    r.request_stop()
    r.run(fut)
    assert r.stopped
    sch.drain()
    assert scope.count == 0
    assert join_now(scope).value == ()


@pytest.mark.parametrize("kind", SCOPES)
def test_consumer_stop_after_completion_keeps_the_value(kind: Any) -> None:
    scope = kind()
    sch = ManualScheduler()
    fut = sx.spawn_future(sx.schedule(sch) | sx.then(lambda: 3), scope.get_token())
    r = RecordingReceiver()
    r.run(fut)
    sch.drain()
    assert r.value == (3,)
    r.request_stop()  # too late: no effect
    assert r.completions == 1
    assert join_now(scope).value == ()


def test_consumer_stop_races_completion_across_threads() -> None:
    """The consumer's stop and the work's completion race on two threads: the consumer is
    completed exactly once (value or stopped), no callback is left, all is released."""
    scope = sx.counting_scope()
    for _ in range(200):
        sch = ManualScheduler()
        fut = sx.spawn_future(sx.schedule(sch) | sx.then(lambda: 1), scope.get_token())
        r = RecordingReceiver()
        r.run(fut)
        barrier = threading.Barrier(2)

        def stopper(r: RecordingReceiver = r, b: threading.Barrier = barrier) -> None:
            b.wait()
            r.request_stop()

        t = threading.Thread(target=stopper)
        t.start()
        barrier.wait()
        sch.drain()
        t.join()
        r.wait()
        assert r.completions == 1
        assert r.outcome in (("value", (1,)), ("stopped",))
        assert r.live_callbacks_at_completion == 0
    assert scope.count == 0
    assert join_now(scope).value == ()


def test_error_of_work_abandoned_by_a_stopped_consumer_is_recorded() -> None:
    scope = sx.simple_counting_scope()
    trig = Trigger()
    fut = sx.spawn_future(trig, scope.get_token())
    r = RecordingReceiver()
    r.run(fut)
    r.request_stop()
    assert r.stopped
    trig.rcvrs[0].set_error(KeyError("late"))
    assert [type(e) for e in scope.unhandled_errors] == [KeyError]
    with pytest.raises(ExceptionGroup):
        sx.sync_wait(scope.join())


# -------------------------------------------------------------------- signatures, user scope tokens


@pytest.mark.parametrize("kind", SCOPES)
def test_future_signatures_are_the_works_plus_stopped(kind: Any) -> None:
    scope = kind()
    fut = sx.spawn_future(sx.just(1), scope.get_token())
    sigs = sx.get_completion_signatures(fut)
    assert sigs == sx.completion_signatures(sx.set_value_t(int), sx.set_stopped_t())
    sx.sync_wait(fut)
    assert join_now(scope).value == ()


def test_user_token_with_spawn_future() -> None:
    tok = CountingToken()
    fut = sx.spawn_future(sx.just(2), tok)
    assert tok.associated == 0  # released when the work completed
    assert sx.sync_wait(fut) == (2,)
    assert tok.associated == 0
    refused = CountingToken(admit=False)
    assert sx.sync_wait(sx.spawn_future(sx.just(2), refused)) is None
    f = sx.spawn_future(sx.just_error("e"), tok)
    f.close()
    assert tok.errors == ["e"] and tok.associated == 0


def test_user_token_wrap_is_used_by_spawn_future() -> None:
    class Wrapping(CountingToken):
        def wrap(self, sndr: Any) -> Any:
            return sndr | sx.then(lambda x: x * 10)

    assert sx.sync_wait(sx.spawn_future(sx.just(4), Wrapping())) == (40,)


# ------------------------------------------------- a BaseException out of the work of a future

_BASE_FUTURE_CHILD = """
import trio, structexec as sx
from structexec._core._fastpaths import FAST

class Custom(BaseException):
    pass

E = {exc}

def boom():
    raise E("x")

@sx.task
async def slow_task():
    await trio.sleep(0.01)
    boom()

@sx.task
async def eager_task():
    boom()

async def coro():
    await trio.sleep(0.01)
    boom()

def make(kind, scope, sch):
    if kind == "task":
        return lambda: slow_task()
    if kind == "eager-task":
        return lambda: eager_task()
    if kind in ("coro", "coro-general"):
        return lambda: coro()
    if kind == "then":
        return lambda: sx.schedule(sch) | sx.then(boom)
    if kind == "timer":
        return lambda: sx.schedule_after(sch, 0.01) | sx.then(boom)

async def main(kind, how):
    sch = sx.trio_scheduler()
    FAST.spawn_coro = kind != "coro-general"
    async with sx.counting_scope() as scope:
        work = make(kind, scope, sch)
        if how == "spawn":
            scope.spawn(work())
            await trio.sleep(5)
        elif how == "future-awaited":
            await scope.spawn_future(work())
        else:
            fut = scope.spawn_future(work())
            await trio.sleep(5)

for kind in ("task", "eager-task", "coro", "coro-general", "then", "timer"):
    for how in ("spawn", "future-awaited", "future-kept"):
        try:
            trio.run(main, kind, how)
            print(kind, how, "returned", flush=True)
        except BaseException as e:
            print(kind, how, leaf_names(e), flush=True)
"""


@pytest.mark.parametrize(
    "exc", ["KeyboardInterrupt", "SystemExit", "GeneratorExit", "Custom"]
)
def test_a_base_exception_from_a_futures_work_reaches_trio_run_as_from_spawn(exc: str) -> None:
    """[exec.spawn.future], [exec.spawn], docs/scopes.md "What happens when things fail": a
    ``KeyboardInterrupt`` (``SystemExit``, any ``BaseException`` that is not a cancellation)
    raised by the work of ``scope.spawn_future`` -- an ``@sx.task``, a coroutine (direct and
    general path), a ``then`` on the trio scheduler, a timer -- comes out of ``trio.run``
    alone in the block's group, exactly as for ``scope.spawn`` of the same work: the future
    completes stopped, the body awaiting it is cancelled with the block (no ``Stopped``
    beside the interrupt). It used to abort the process for a task ("the work given to
    spawn_future completed twice") and to add a ``Stopped`` for a coroutine."""
    r = run_child(_BASE_FUTURE_CHILD.format(exc=exc), timeout=60)
    assert not r.timed_out, str(r)
    assert r.returncode == 0, str(r)
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    expected = [
        f"{kind} {how} {[exc]}"
        for kind in ("task", "eager-task", "coro", "coro-general", "then", "timer")
        for how in ("spawn", "future-awaited", "future-kept")
    ]
    assert lines == expected, str(r)
    assert "completed twice" not in r.stderr, str(r)
