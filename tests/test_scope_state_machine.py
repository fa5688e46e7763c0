"""Counting scopes: the seven-state machine, join, max_associations, threads, a model test.

[exec.counting.scopes.general], [exec.scope.simple.counting], [exec.scope.counting]; the state x
operation table of docs/scopes.md "The state machine" is tested cell by cell.
"""

from __future__ import annotations

import copy
import gc
import pickle
import sys
import threading
import warnings
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import structexec as sx
from structexec.testing import ManualScheduler, RecordingReceiver

if sys.version_info < (3, 11):
    from exceptiongroup import ExceptionGroup

SCOPES = [sx.simple_counting_scope, sx.counting_scope]
STATES = [
    "unused",
    "open",
    "closed",
    "open-and-joining",
    "closed-and-joining",
    "unused-and-closed",
    "joined",
]


def join_rcvr(sch: Any = None) -> RecordingReceiver:
    """A receiver for scope.join(): it needs get_scheduler ([exec.counting.scopes.general])."""
    return RecordingReceiver(extra_env=sx.prop(sx.get_scheduler, sch or sx.inline_scheduler()))


def start_join(scope: Any, sch: Any = None) -> RecordingReceiver:
    r = join_rcvr(sch)
    r.run(scope.join())
    return r


def make(kind: Callable[[], Any], state: str) -> tuple[Any, list[RecordingReceiver]]:
    """A scope in ``state``; the open states hold exactly one association."""
    scope = kind()
    joins: list[RecordingReceiver] = []
    tok = scope.get_token()
    if state == "unused":
        pass
    elif state == "open":
        assert tok.try_associate()
    elif state == "closed":
        assert tok.try_associate()
        scope.close()
    elif state == "open-and-joining":
        assert tok.try_associate()
        joins.append(start_join(scope))
    elif state == "closed-and-joining":
        assert tok.try_associate()
        joins.append(start_join(scope))
        scope.close()
    elif state == "unused-and-closed":
        scope.close()
    elif state == "joined":
        start_join(scope)
    assert scope.state == state
    return scope, joins


def finish(scope: Any) -> None:
    """Release what the test holds and join, so the scope can be dropped quietly
    ([exec.scope.simple.counting])."""
    while scope.count:
        scope.get_token().disassociate()
    sx.sync_wait(scope.join())
    assert scope.state == "joined"


# --------------------------------------------------------------------------- a new scope


@pytest.mark.parametrize("kind", SCOPES)
def test_new_scope_is_unused_with_count_zero(kind: Any) -> None:
    scope = kind()
    assert scope.state == "unused"
    assert scope.count == 0


# --------------------------------------------------------------------------- the state table

TRY_ASSOCIATE = {
    # state: (result, state after, count after) -- count before is 0 or 1 (see make)
    "unused": (True, "open", 1),
    "open": (True, "open", 2),
    "open-and-joining": (True, "open-and-joining", 2),
    "closed": (False, "closed", 1),
    "unused-and-closed": (False, "unused-and-closed", 0),
    "closed-and-joining": (False, "closed-and-joining", 1),
    "joined": (False, "joined", 0),
}


@pytest.mark.parametrize("kind", SCOPES)
@pytest.mark.parametrize("state", STATES)
def test_try_associate_in_every_state(kind: Any, state: str) -> None:
    """Column "try_associate (count < max)" of the state table ([exec.scope.simple.counting])."""
    scope, _ = make(kind, state)
    result, after, count = TRY_ASSOCIATE[state]
    assert scope.get_token().try_associate() is result
    assert scope.state == after
    assert scope.count == count
    finish(scope)


CLOSE = {
    "unused": "unused-and-closed",
    "open": "closed",
    "open-and-joining": "closed-and-joining",
    "closed": "closed",
    "unused-and-closed": "unused-and-closed",
    "closed-and-joining": "closed-and-joining",
    "joined": "joined",
}


@pytest.mark.parametrize("kind", SCOPES)
@pytest.mark.parametrize("state", STATES)
def test_close_in_every_state(kind: Any, state: str) -> None:
    """Column "close()" ([exec.scope.simple.counting]), and its postcondition: try_associate fails
    afterwards."""
    scope, _ = make(kind, state)
    count = scope.count
    scope.close()
    assert scope.state == CLOSE[state]
    assert scope.count == count
    assert scope.get_token().try_associate() is False
    finish(scope)


@pytest.mark.parametrize("kind", SCOPES)
@pytest.mark.parametrize("state", ["unused", "unused-and-closed", "joined"])
def test_start_join_without_associations_completes_inline(kind: Any, state: str) -> None:
    """Column "start join" for unused, unused-and-closed, joined: → joined, inline set_value,
    without scheduling ([exec.scope.simple.counting], [exec.counting.scopes.general]: the
    ManualScheduler never gets an item)."""
    scope, _ = make(kind, state)
    sch = ManualScheduler()
    r = start_join(scope, sch)
    assert r.done and r.value == ()
    assert scope.state == "joined"
    assert sch.pending == 0
    assert r.thread == threading.get_ident()


@pytest.mark.parametrize("kind", SCOPES)
@pytest.mark.parametrize(
    "state,after",
    [
        ("open", "open-and-joining"),
        ("open-and-joining", "open-and-joining"),
        ("closed", "closed-and-joining"),
        ("closed-and-joining", "closed-and-joining"),
    ],
)
def test_start_join_with_associations_registers_the_join(kind: Any, state: str, after: str) -> None:
    """Column "start join" with associations held: the join is registered, not completed."""
    scope, earlier = make(kind, state)
    r = start_join(scope)
    assert not r.done
    assert scope.state == after
    scope.get_token().disassociate()
    assert scope.state == "joined"
    assert r.value == ()
    for e in earlier:
        assert e.value == ()


@pytest.mark.parametrize("kind", SCOPES)
@pytest.mark.parametrize("closed", [False, True])
def test_join_with_count_zero_completes_at_once(kind: Any, closed: bool) -> None:
    """[exec.scope.simple.counting] spec gap: open/closed with count 0 (all associations released) →
    joined, inline.

    The common idiom: spawn, let the work finish, then (close and) join.
    """
    scope = kind()
    tok = scope.get_token()
    assert tok.try_associate()
    tok.disassociate()
    if closed:
        scope.close()
    assert scope.state == ("closed" if closed else "open")
    assert scope.count == 0
    sch = ManualScheduler()
    r = start_join(scope, sch)
    assert r.value == ()
    assert sch.pending == 0
    assert scope.state == "joined"
    # and with sync_wait, the plain idiom
    s2 = kind()
    sx.spawn(sx.just(), s2.get_token())
    if closed:
        s2.close()
    assert sx.sync_wait(s2.join()) == ()


@pytest.mark.parametrize("kind", SCOPES)
@pytest.mark.parametrize("state", ["open", "closed"])
def test_last_disassociate_outside_joining_keeps_state(kind: Any, state: str) -> None:
    """Column "last disassociate": open stays open, closed stays closed
    ([exec.scope.simple.counting])."""
    scope, _ = make(kind, state)
    scope.get_token().disassociate()
    assert scope.state == state
    assert scope.count == 0
    finish(scope)


@pytest.mark.parametrize("kind", SCOPES)
@pytest.mark.parametrize("state", ["open-and-joining", "closed-and-joining"])
def test_last_disassociate_while_joining_completes_all_joins(kind: Any, state: str) -> None:
    """Column "last disassociate" while joining: → joined, every registered join completes."""
    scope, joins = make(kind, state)
    joins.append(start_join(scope))
    joins.append(start_join(scope))
    assert not any(j.done for j in joins)
    scope.get_token().disassociate()
    assert scope.state == "joined"
    assert [j.value for j in joins] == [(), (), ()]


@pytest.mark.parametrize("kind", SCOPES)
@pytest.mark.parametrize("state", ["unused", "unused-and-closed", "joined"])
def test_disassociate_without_association_raises(kind: Any, state: str) -> None:
    """Column "last disassociate" is n/a where the count is 0: underflow raises
    ([exec.scope.simple.counting])."""
    scope, _ = make(kind, state)
    with pytest.raises(RuntimeError, match="holds no association"):
        scope.get_token().disassociate()
    assert scope.state == state
    assert scope.count == 0


@pytest.mark.parametrize("kind", SCOPES)
def test_disassociate_not_last_does_not_complete_join(kind: Any) -> None:
    scope = kind()
    tok = scope.get_token()
    assert tok.try_associate() and tok.try_associate()
    r = start_join(scope)
    tok.disassociate()
    assert not r.done and scope.state == "open-and-joining" and scope.count == 1
    tok.disassociate()
    assert r.value == ()


# --------------------------------------------------------------------------- joining


@pytest.mark.parametrize("kind", SCOPES)
def test_open_and_joining_accepts_new_associations(kind: Any) -> None:
    """Work may spawn more work while a join waits (open-and-joining, [exec.scope.simple.counting],
    docs/scopes.md "The nursery face: `async with`")."""
    scope = kind()
    tok = scope.get_token()
    assert tok.try_associate()
    r = start_join(scope)
    assert tok.try_associate()  # a child spawning a sibling during the join
    tok.disassociate()
    assert not r.done
    tok.disassociate()
    assert r.value == ()


# --------------------------------------------------------------------------- join


@pytest.mark.parametrize("kind", SCOPES)
def test_join_returns_a_new_sender_each_time_and_is_lazy(kind: Any) -> None:
    scope = kind()
    j1, j2 = scope.join(), scope.join()
    assert j1 is not j2
    tok = scope.get_token()
    assert tok.try_associate()
    r = join_rcvr()
    r.connect(j1)
    assert scope.state == "open"  # no effect until started ([exec.scope.simple.counting])
    r.start()
    assert scope.state == "open-and-joining"
    tok.disassociate()
    assert r.value == ()


@pytest.mark.parametrize("kind", SCOPES)
def test_join_completes_through_the_receivers_scheduler(kind: Any) -> None:
    """A registered join starts schedule(get_scheduler(env)): set_value arrives on that
    scheduler, not on the thread of the last disassociate ([exec.counting.scopes.general])."""
    scope = kind()
    tok = scope.get_token()
    assert tok.try_associate()
    sch = ManualScheduler()
    r = start_join(scope, sch)
    t = threading.Thread(target=tok.disassociate)
    t.start()
    t.join()
    assert scope.state == "joined"
    assert not r.done  # waiting in the scheduler's queue
    assert sch.pending == 1
    sch.run_one()
    assert r.value == ()
    assert r.scheduler is sch
    assert r.thread == threading.get_ident()


@pytest.mark.parametrize("kind", SCOPES)
def test_several_joins_complete_together(kind: Any) -> None:
    scope = kind()
    tok = scope.get_token()
    assert tok.try_associate()
    sch = ManualScheduler()
    rs = [start_join(scope, sch) for _ in range(5)]
    tok.disassociate()
    assert sch.pending == 5
    sch.drain()
    assert [r.value for r in rs] == [()] * 5


@pytest.mark.parametrize("kind", SCOPES)
def test_join_needs_a_scheduler(kind: Any) -> None:
    scope = kind()
    r = RecordingReceiver()
    with pytest.raises(TypeError, match="get_scheduler"):
        r.connect(scope.join())
    assert scope.state == "unused"


@pytest.mark.parametrize("kind", SCOPES)
def test_join_forwards_scheduler_stop_and_error(kind: Any) -> None:
    """The schedule op sees the full receiver env (its stop token): a stopped or failing
    final schedule completes the join stopped / with the error. No stop callback while waiting
    (a join is not interruptible)."""
    scope = kind()
    tok = scope.get_token()
    assert tok.try_associate()
    sch = ManualScheduler()
    r = start_join(scope, sch)
    r.request_stop()
    assert not r.done  # not interrupted by stop while waiting
    tok.disassociate()
    sch.run_one()
    assert r.stopped
    # error from the scheduler
    s2 = kind()
    t2 = s2.get_token()
    assert t2.try_associate()
    sch2 = ManualScheduler(infallible=False)
    r2 = start_join(s2, sch2)
    sch2.fail_next(KeyError("sched"))
    t2.disassociate()
    sch2.run_one()
    assert isinstance(r2.error, KeyError)


@pytest.mark.parametrize("kind", SCOPES)
def test_join_started_twice_raises(kind: Any) -> None:
    scope = kind()
    r = join_rcvr()
    op = r.run(scope.join())
    with pytest.raises(RuntimeError, match="started twice"):
        op.start()


@pytest.mark.parametrize("kind", SCOPES)
def test_join_signatures(kind: Any) -> None:
    scope = kind()
    sigs = sx.get_completion_signatures(
        scope.join(), sx.env(sx.prop(sx.get_scheduler, sx.inline_scheduler()))
    )
    assert sigs is not None
    assert sx.set_value_t() in sigs
    assert sigs.error_types  # the ExceptionGroup of errors of spawned work


# --------------------------------------------------------------------------- max_associations


@pytest.mark.parametrize("kind", SCOPES)
def test_max_associations_overridable_in_a_subclass(kind: Any) -> None:
    class Small(kind):  # type: ignore[misc, valid-type]
        max_associations = 2

    scope = Small()
    tok = scope.get_token()
    ran: list[int] = []
    sched = ManualScheduler()
    # two pending spawns take the two associations
    sx.spawn(sx.schedule(sched) | sx.then(lambda: ran.append(1)), tok)
    fut = sx.spawn_future(sx.schedule(sched) | sx.then(lambda: ran.append(2)), tok)
    assert scope.count == 2
    assert tok.try_associate() is False
    # the third: spawn drops silently, associate and spawn_future complete stopped
    sx.spawn(sx.just() | sx.then(lambda: ran.append(3)), tok)
    a = sx.associate(sx.just() | sx.then(lambda: ran.append(4)), tok)
    f3 = sx.spawn_future(sx.just() | sx.then(lambda: ran.append(5)), tok)
    assert sx.sync_wait(a) is None
    assert sx.sync_wait(f3) is None
    assert ran == []
    sched.drain()
    assert ran == [1, 2]
    assert sx.sync_wait(fut) == ()
    assert sx.sync_wait(scope.join()) == ()
    assert kind.max_associations > 2**40  # the default is effectively unbounded


# -------------------------------------------------------------------- tokens, request_stop, copying


def test_simple_token_wrap_is_identity_and_forwards() -> None:
    scope = sx.simple_counting_scope()
    tok = scope.get_token()
    s = sx.just(1)
    assert tok.wrap(s) is s
    assert tok.try_associate() and scope.count == 1
    tok.disassociate()
    assert scope.count == 0
    assert isinstance(tok, sx.simple_counting_scope.token)
    finish(scope)


def test_counting_token_wrap_sees_the_scope_stop_token() -> None:
    scope = sx.counting_scope()
    tok = scope.get_token()
    assert isinstance(tok, sx.counting_scope.token)
    seen: list[Any] = []
    w = tok.wrap(sx.read_env(sx.get_stop_token) | sx.then(seen.append))
    assert sx.sync_wait(w) == ()
    assert seen[0].stop_possible() and not seen[0].stop_requested()
    scope.request_stop()
    assert seen[0].stop_requested()
    sx.sync_wait(scope.join())


def test_request_stop_stops_associated_work_and_keeps_state() -> None:
    scope = sx.counting_scope()
    tok = scope.get_token()
    sch = ManualScheduler()
    outcomes: list[str] = []
    for _ in range(3):
        sx.spawn(
            sx.schedule(sch)
            | sx.then(lambda: outcomes.append("ran"))
            | sx.upon_stopped(lambda: outcomes.append("stopped")),
            tok,
        )
    assert scope.state == "open"
    scope.request_stop()
    scope.request_stop()  # idempotent
    assert scope.state == "open"  # does not close ([exec.scope.counting])
    sch.drain()
    assert outcomes == ["stopped"] * 3
    # work associated after request_stop is still accepted and starts already stopped
    tokens: list[Any] = []
    sx.spawn(sx.read_env(sx.get_stop_token) | sx.then(tokens.append), tok)
    assert tokens and tokens[0].stop_requested()
    assert sx.sync_wait(scope.join()) == ()


def test_request_stop_is_thread_safe() -> None:
    scope = sx.counting_scope()
    tok = scope.get_token()
    sch = ManualScheduler()
    for _ in range(50):
        sx.spawn(sx.schedule(sch) | sx.upon_stopped(lambda: None), tok)
    threads = [threading.Thread(target=scope.request_stop) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sch.drain()
    assert sx.sync_wait(scope.join()) == ()


@pytest.mark.parametrize("kind", SCOPES)
def test_scopes_are_not_copyable(kind: Any) -> None:
    scope = kind()
    with pytest.raises(TypeError, match="cannot be copied"):
        copy.copy(scope)
    with pytest.raises(TypeError, match="cannot be copied"):
        copy.deepcopy(scope)
    with pytest.raises(TypeError):
        pickle.dumps(scope)


@pytest.mark.parametrize("kind", SCOPES)
def test_scope_tokens_copy_and_compare(kind: Any) -> None:
    scope = kind()
    t1, t2 = scope.get_token(), scope.get_token()
    assert t1 == t2 and hash(t1) == hash(t2)
    assert copy.copy(t1) == t1 and copy.deepcopy(t1) == t1
    assert t1 != kind().get_token()


# --------------------------------------------------------------------------- dropping a scope


@pytest.mark.parametrize("kind", SCOPES)
@pytest.mark.parametrize("state", ["open", "closed", "open-and-joining", "closed-and-joining"])
def test_dropping_an_unjoined_scope_warns(kind: Any, state: str) -> None:
    scope, joins = make(kind, state)
    del joins
    with pytest.warns(ResourceWarning, match=f"state '{state}'"):
        del scope
        gc.collect()


@pytest.mark.parametrize("kind", SCOPES)
@pytest.mark.parametrize("state", ["unused", "unused-and-closed", "joined"])
def test_dropping_a_scope_in_a_final_state_is_quiet(kind: Any, state: str) -> None:
    scope, _ = make(kind, state)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        del scope
        gc.collect()


# -------------------------------------------------------------------------- errors (docs/scopes.md)


@pytest.mark.parametrize("kind", SCOPES)
def test_join_of_a_scope_with_unhandled_errors_raises_an_exception_group(kind: Any) -> None:
    scope = kind()
    tok = scope.get_token()

    def boom() -> None:
        raise ValueError("boom")

    sx.spawn(sx.just() | sx.then(boom), tok)
    sx.spawn(sx.just_error("not an exception") | sx.upon_stopped(lambda: None), tok)
    with pytest.raises(ExceptionGroup) as ei:
        sx.sync_wait(scope.join())
    errs = ei.value.exceptions
    assert isinstance(errs[0], ValueError)
    assert isinstance(errs[1], sx.ErrorValue) and errs[1].error == "not an exception"
    assert scope.state == "joined"
    assert len(scope.unhandled_errors) == 2


def test_spawned_error_requests_stop_only_for_counting_scope() -> None:
    for kind, expect in ((sx.counting_scope, "stopped"), (sx.simple_counting_scope, "ran")):
        scope = kind()
        tok = scope.get_token()
        sch = ManualScheduler()
        out: list[str] = []
        sx.spawn(
            sx.schedule(sch)
            | sx.then(lambda out=out: out.append("ran"))
            | sx.upon_stopped(lambda out=out: out.append("stopped")),
            tok,
        )
        sx.spawn(sx.just() | sx.then(lambda: 1 / 0), tok)
        sch.drain()
        assert out == [expect], kind
        with pytest.raises(ExceptionGroup):
            sx.sync_wait(scope.join())


# --------------------------------------------------------------------------- threads


@pytest.mark.parametrize("kind", SCOPES)
def test_four_threads_spawning_2000_each_keep_an_exact_count(kind: Any) -> None:
    """4 threads each spawn 2,000 senders that complete on their own thread; the final count
    is exact and join completes ([exec.scope.simple.counting])."""
    scope = kind()
    tok = scope.get_token()
    counts = [0] * 4
    threads_seen: list[set[int]] = [set() for _ in range(4)]
    barrier = threading.Barrier(4)

    def worker(i: int) -> None:
        def bump() -> None:
            counts[i] += 1
            threads_seen[i].add(threading.get_ident())

        barrier.wait()
        for _ in range(2000):
            sx.spawn(sx.just() | sx.then(bump), tok)

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert counts == [2000] * 4
    assert all(len(s) == 1 for s in threads_seen)
    assert scope.count == 0
    assert sx.sync_wait(scope.join()) == ()


@pytest.mark.parametrize("kind", SCOPES)
def test_completions_on_other_threads_while_joining(kind: Any) -> None:
    """Work completes on worker threads while the join waits (associations cross threads)."""
    scope = kind()
    tok = scope.get_token()
    sch = ManualScheduler()
    n = 400
    done = [0]
    lock = threading.Lock()

    def bump() -> None:
        with lock:
            done[0] += 1

    for _ in range(n):
        sx.spawn(sx.schedule(sch) | sx.then(bump), tok)
    r = start_join(scope)
    ts = [threading.Thread(target=lambda: sch.drain()) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert done[0] == n
    assert r.value == ()


def test_close_races_with_spawning_threads() -> None:
    """try_associate and close are totally ordered: every spawn that ran was admitted before
    the close, none after; the count ends at zero and join completes."""
    scope = sx.simple_counting_scope()
    tok = scope.get_token()
    ran = [0]
    lock = threading.Lock()
    closed_at: list[int] = []

    def bump() -> None:
        with lock:
            ran[0] += 1

    def spawner() -> None:
        for _ in range(3000):
            sx.spawn(sx.just() | sx.then(bump), tok)

    ts = [threading.Thread(target=spawner) for _ in range(3)]
    for t in ts:
        t.start()
    scope.close()
    with lock:
        closed_at.append(ran[0])
    for t in ts:
        t.join()
    assert scope.state == "closed"
    assert ran[0] <= 9000
    assert tok.try_associate() is False
    assert sx.sync_wait(scope.join()) == ()


@pytest.mark.parametrize("kind,roots", [(sx.counting_scope, 256), (sx.simple_counting_scope, 32)])
def test_recursive_spawning_256_by_1024(kind: Any, roots: int) -> None:
    """Each operation spawns more while a counter is below a bound: 256 roots x 1,024 = 262,144
    operations in total (fewer roots for the simple scope, same depth), all completing inline:
    a chain 1,024 spawns deep, which would overflow the stack without the trampoline.
    Exact count; join completes."""
    scope = kind()
    tok = scope.get_token()
    total = roots * 1024
    counter = [0]

    def step(depth: int) -> None:
        counter[0] += 1
        if depth < 1024:  # each operation spawns the next one of its chain
            sx.spawn(sx.just(depth + 1) | sx.then(step), tok)

    for _ in range(roots):
        sx.spawn(sx.just(1) | sx.then(step), tok)
    assert counter[0] == total
    assert scope.count == 0
    assert sx.sync_wait(scope.join()) == ()


def test_recursive_spawning_across_threads_and_join() -> None:
    """Recursive spawning with completions on a thread pool while a join waits."""
    from concurrent.futures import ThreadPoolExecutor

    scope = sx.counting_scope()
    tok = scope.get_token()
    total = 4096
    counter = [0]
    lock = threading.Lock()
    pool = ThreadPoolExecutor(4)

    class PoolSched:
        def schedule(self) -> Any:
            return _PoolSender()

    class _PoolOp:
        def __init__(self, r: Any) -> None:
            self.r = r

        def start(self) -> None:
            pool.submit(self.r.set_value)

    class _PoolSender(sx.Sender[None]):
        def connect(self, r: Any) -> Any:
            return _PoolOp(r)

    sch = PoolSched()

    budget = [total - 8]  # operations still to spawn after the 8 roots

    def step() -> None:
        with lock:
            counter[0] += 1
            more = budget[0] >= 2
            if more:
                budget[0] -= 2
        if more:  # each operation spawns two more while the budget lasts
            sx.spawn(sx.schedule(sch) | sx.then(step), tok)
            sx.spawn(sx.schedule(sch) | sx.then(step), tok)

    for _ in range(8):
        sx.spawn(sx.schedule(sch) | sx.then(step), tok)
    assert sx.sync_wait(scope.join()) == ()  # the join waits for every descendant
    pool.shutdown(wait=True)
    assert scope.count == 0
    assert counter[0] == total


# --------------------------------------------------------------------------- model test


class Model:
    """The state table (docs/scopes.md "The state machine") as a pure function of (state, count)."""

    def __init__(self) -> None:
        self.state = "unused"
        self.count = 0
        self.joins_done = 0
        self.joins_waiting = 0

    def try_associate(self, limit: int) -> bool:
        if self.count >= limit:
            return False
        if self.state in ("unused", "open", "open-and-joining"):
            self.count += 1
            if self.state == "unused":
                self.state = "open"
            return True
        return False

    def close(self) -> None:
        self.state = {
            "unused": "unused-and-closed",
            "open": "closed",
            "open-and-joining": "closed-and-joining",
        }.get(self.state, self.state)

    def join(self) -> None:
        if self.state in ("unused", "unused-and-closed", "joined") or self.count == 0:
            self.state = "joined"
            self.joins_done += 1
        else:
            self.state = (
                "open-and-joining"
                if self.state in ("open", "open-and-joining")
                else "closed-and-joining"
            )
            self.joins_waiting += 1

    def disassociate(self) -> None:
        self.count -= 1
        if self.count == 0 and self.state in ("open-and-joining", "closed-and-joining"):
            self.state = "joined"
            self.joins_done += self.joins_waiting
            self.joins_waiting = 0


OPS = st.sampled_from(["spawn", "associate", "complete", "close", "join", "request_stop"])


@settings(deadline=None, max_examples=150)
@given(kind=st.sampled_from(SCOPES), ops=st.lists(OPS, max_size=40), limit=st.integers(1, 6))
def test_random_scope_operation_sequences_agree_with_the_model(
    kind: Any, ops: list[str], limit: int
) -> None:
    """Random spawn/associate/complete/close/join/request_stop sequences agree with the model
    of the state machine (state, count, which joins completed, what ran)."""

    class Scope(kind):  # type: ignore[misc, valid-type]
        max_associations = limit

    scope = Scope()
    tok = scope.get_token()
    model = Model()
    sch = ManualScheduler()
    joins: list[RecordingReceiver] = []
    held: list[Any] = []  # associate-senders holding an association
    ran = [0]
    stopped = [0]
    expect_ran = 0
    expect_stopped = 0
    stop_requested = False
    pending = 0  # spawned operations waiting in sch

    def on_value() -> None:
        ran[0] += 1

    def on_stop() -> None:
        stopped[0] += 1

    for op in ops:
        if op == "spawn":
            admitted = model.try_associate(limit)
            sx.spawn(sx.schedule(sch) | sx.then(on_value) | sx.upon_stopped(on_stop), tok)
            pending += admitted
        elif op == "associate":
            admitted = model.try_associate(limit)
            a = sx.associate(sx.just(), tok)
            assert a.associated is admitted
            if admitted:
                held.append(a)
            else:
                assert sx.sync_wait(a) is None  # completes stopped ([exec.associate])
        elif op == "complete":
            if pending:
                sch.run_one()
                pending -= 1
                model.disassociate()
                if stop_requested:
                    expect_stopped += 1
                else:
                    expect_ran += 1
            elif held:
                assert sx.sync_wait(held.pop()) == ()
                model.disassociate()
        elif op == "close":
            scope.close()
            model.close()
        elif op == "join":
            joins.append(start_join(scope))
            model.join()
        elif op == "request_stop" and kind is sx.counting_scope:
            scope.request_stop()
            stop_requested = True
        assert scope.state == model.state, (op, ops)
        assert scope.count == model.count
        assert sum(j.done for j in joins) == model.joins_done
    assert ran[0] == expect_ran and stopped[0] == expect_stopped
    # drain everything; the scope must end joined
    while pending:
        sch.run_one()
        pending -= 1
    while held:
        sx.sync_wait(held.pop())
    assert sx.sync_wait(scope.join()) == ()
    assert all(j.value == () for j in joins)


@pytest.mark.parametrize("kind", SCOPES)
def test_token_wrap_keeps_the_completion_signatures(kind: Any) -> None:
    tok = kind().get_token()
    for s in (sx.just(1, "a"), sx.just_error(KeyError()), sx.just_stopped()):
        for e in (None, sx.env()):
            assert sx.get_completion_signatures(tok.wrap(s), e) == sx.get_completion_signatures(
                s, e
            )


@pytest.mark.parametrize("make", SCOPES)
@pytest.mark.parametrize("pending", [False, True])
def test_a_finished_join_leaves_no_cycle(make: Callable[[], Any], pending: bool) -> None:
    """``sync_wait(scope.join())``, inline (count already 0) or after the last disassociate:
    once it returns, reference counting alone frees the scope ([exec.scope.join]; the join's
    schedule operation is dropped at completion)."""
    import weakref

    was_enabled = gc.isenabled()
    gc.disable()
    try:
        scope = make()
        if pending:
            sch = ManualScheduler()
            sx.spawn(sx.schedule(sch) | sx.then(lambda: None), scope.get_token())
            rec = RecordingReceiver(extra_env=sx.prop(sx.get_scheduler, sch))
            rec.run(scope.join())
            sch.drain()
            assert rec.value == ()
            rec.op = None  # the recording receiver's own reference to the operation
            sch.envs.clear()  # the test scheduler's record of environments (a cycle of its own)
            del rec, sch
        else:
            assert sx.sync_wait(scope.join()) == ()
        ref = weakref.ref(scope)
        del scope
        assert ref() is None
    finally:
        if was_enabled:
            gc.enable()


@pytest.mark.parametrize("make", SCOPES)
def test_a_never_started_join_closes_its_schedule_op(make: Callable[[], Any]) -> None:
    """A join connected and dropped without ``start``: ``close()`` releases its schedule
    operation, and a later ``start`` is refused."""
    scope = make()
    sch = ManualScheduler()
    op = sx.connect(scope.join(), RecordingReceiver(extra_env=sx.prop(sx.get_scheduler, sch)))
    op.close()
    with pytest.raises(RuntimeError):
        op.start()
    assert sx.sync_wait(scope.join()) == ()
