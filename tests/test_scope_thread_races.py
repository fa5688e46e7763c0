"""Thread races of a counting scope used with ``async with``, under a tiny switch interval.

[exec.counting.scopes], [exec.scope.counting], [exec.spawn], [exec.spawn.future],
[exec.associate]; the scopes guide "What happens when things fail". Worker threads
``spawn``, ``spawn_future`` and ``associate`` work into the scope while another thread calls
``request_stop()`` and the trio task leaves the block (the exit joins); the work is completed
from yet other threads. Every operation that started completes exactly once, downstream and
at its consumer; nothing is started twice; the count returns to 0; the exit's join
completes; no error is lost. ``sys.setswitchinterval(1e-5)`` makes the threads switch at
nearly every bytecode boundary, so the interleavings vary from round to round.
"""

from __future__ import annotations

import itertools
import queue
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import trio
from _subproc import HangGuard

import structexec as sx
from structexec.testing import RecordingReceiver

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup

#: Seconds a helper thread or a consumer is waited for before the test fails.
WAIT = 20.0


@pytest.fixture
def tiny_switch_interval() -> Iterator[None]:
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


class Boom(Exception):
    """The error operation ``i`` completes with."""

    def __init__(self, i: int) -> None:
        super().__init__(i)
        self.i = i


@dataclass
class Round:
    """The bookkeeping of one round: the receivers of the started gates (for the completer
    threads), how often each gate started, how each operation completed downstream, and
    the consumers of the futures and associations."""

    pending: queue.SimpleQueue[tuple[int, Any] | None] = field(default_factory=queue.SimpleQueue)
    lock: threading.Lock = field(default_factory=threading.Lock)
    started: Counter[int] = field(default_factory=Counter)
    seen: Counter[tuple[int, str]] = field(default_factory=Counter)
    consumers: dict[int, RecordingReceiver] = field(default_factory=dict)
    first_start: threading.Event = field(default_factory=threading.Event)

    def note(self, i: int, how: str) -> None:
        with self.lock:
            self.seen[i, how] += 1


class Gate(sx.Sender[Any]):
    """Work that completes when a completer thread takes its receiver from the queue
    (ignores stop requests, like a blocking call)."""

    def __init__(self, rnd: Round, i: int) -> None:
        self.rnd, self.i = rnd, i

    def connect(self, rcvr: Any) -> Any:
        gate = self

        class Op:
            def start(self) -> None:
                rnd = gate.rnd
                with rnd.lock:
                    rnd.started[gate.i] += 1
                rnd.pending.put((gate.i, rcvr))
                rnd.first_start.set()

        return Op()


KINDS = ("spawn", "future", "associate")
#: How operation i's gate completes (the completers choose by i).
OUTCOMES = ("value", "error", "stopped")


def kind_of(i: int) -> str:
    return KINDS[i % 3]


def outcome_of(i: int) -> str:
    return OUTCOMES[(i // 3) % 3]


def complete(i: int, rcvr: Any) -> None:
    how = outcome_of(i)
    if how == "error":
        rcvr.set_error(Boom(i))
    elif how == "stopped":
        rcvr.set_stopped()
    elif kind_of(i) == "spawn":
        rcvr.set_value()  # spawn's work sends no value
    else:
        rcvr.set_value(i)


def spawn_op(rnd: Round, tok: Any, i: int) -> None:
    """Operation ``i`` from a worker thread: spawn, spawn_future (consumed at once) or
    associate (started at once), each observed downstream of its gate."""
    kind = kind_of(i)
    if kind == "spawn":

        def on_error(e: BaseException, i: int = i) -> None:
            rnd.note(i, "error")
            raise e

        work = (
            Gate(rnd, i)
            | sx.then(lambda i=i: rnd.note(i, "value"))
            | sx.upon_error(on_error)
            | sx.upon_stopped(lambda i=i: rnd.note(i, "stopped"))
        )
        sx.spawn(work, tok)
        return
    r = RecordingReceiver()
    with rnd.lock:
        rnd.consumers[i] = r
    if kind == "future":
        r.run(sx.spawn_future(Gate(rnd, i), tok))
    else:
        r.run(sx.associate(Gate(rnd, i), tok))


def completer(rnd: Round) -> None:
    """Complete the started gates until told to stop (a ``None`` in the queue, put there
    once every spawning thread has ended)."""
    while True:
        item = rnd.pending.get()
        if item is None:
            return
        complete(*item)


def end_completers(
    rnd: Round, spawning: list[threading.Thread], completers: list[threading.Thread]
) -> None:
    for t in spawning:
        t.join()
    for _ in completers:
        rnd.pending.put(None)


async def one_round(seed: int, threads: int, ops: int) -> tuple[Round, Any, list[Boom]]:
    """One round: ``threads`` spawning threads of ``ops`` operations each, two completers, a
    stopper that requests stop once the ``seed``-th operation has been issued; the trio task
    leaves the block as soon as the first gate started."""
    rnd = Round()
    issued = itertools.count()
    stop_at = seed % (threads * ops)
    stop_now = threading.Event()
    raised: list[Boom] = []
    scope = sx.counting_scope()
    try:
        async with scope:
            tok = scope.get_token()

            def spawner(first: int) -> None:
                for i in range(first, first + ops):
                    if next(issued) == stop_at:
                        stop_now.set()
                    spawn_op(rnd, tok, i)

            def stopper() -> None:
                stop_now.wait(WAIT)
                scope.request_stop()

            spawning = [threading.Thread(target=spawner, args=(n * ops,)) for n in range(threads)]
            completers = [threading.Thread(target=completer, args=(rnd,)) for _ in range(2)]
            # The completers are told to end once every spawning thread has ended, by a
            # thread of their own (the exit must not wait for that).
            ender = threading.Thread(target=end_completers, args=(rnd, spawning, completers))
            helpers = [threading.Thread(target=stopper), *completers, ender]
            for t in [*spawning, *helpers]:
                t.start()
            await trio.to_thread.run_sync(rnd.first_start.wait, WAIT)
            # Leave the block now: the exit joins while the threads go on spawning,
            # completing and stopping.
    except BaseExceptionGroup as eg:
        leaves = eg.split(Boom)
        assert leaves[1] is None, eg  # nothing but the spawned work's errors
        assert leaves[0] is not None
        raised = [e for e in _leaves(leaves[0]) if isinstance(e, Boom)]
    for t in [*spawning, *helpers]:
        await trio.to_thread.run_sync(t.join, WAIT)
        assert not t.is_alive()
    return rnd, scope, raised


def _leaves(e: BaseException) -> Iterator[BaseException]:
    if isinstance(e, BaseExceptionGroup):
        for x in e.exceptions:
            yield from _leaves(x)
    else:
        yield e


def check(rnd: Round, scope: Any, raised: list[Boom], total: int) -> None:
    # The exit's join completed and nothing is associated any more.
    assert scope.count == 0 and scope.state == "joined"
    # A gate starts at most once; one that started was completed by a completer.
    assert all(n == 1 for n in rnd.started.values()), rnd.started
    for i in range(total):
        kind, how = kind_of(i), outcome_of(i)
        started = i in rnd.started
        if kind == "spawn":
            # Downstream of a started gate: exactly one completion, the gate's.
            want = Counter({(i, how): 1}) if started else Counter()
            got = Counter({k: n for k, n in rnd.seen.items() if k[0] == i})
            assert got == want, (i, got, want)
            continue
        r = rnd.consumers[i].wait(WAIT)  # completed exactly once (else wait raises)
        r.check()
        if not started:
            assert r.outcome == ("stopped",), (i, r.outcome)  # the scope had joined
        elif how == "value":
            assert r.outcome == ("value", (i,)), (i, r.outcome)
        elif how == "error":
            assert r.kind == "error" and isinstance(r.error, Boom) and r.error.i == i
        else:
            assert r.outcome == ("stopped",), (i, r.outcome)
    # No error lost: every error of spawned work is raised by the block, once. (An error of
    # spawn_future's work reached its consumer, checked above; if it finished before the
    # consumer was attached, the join may report it too.)
    failed_spawns = sorted(
        i for i in rnd.started if kind_of(i) == "spawn" and outcome_of(i) == "error"
    )
    spawn_errors = sorted(e.i for e in raised if kind_of(e.i) == "spawn")
    assert spawn_errors == failed_spawns
    assert all(kind_of(e.i) != "associate" for e in raised)


@pytest.mark.usefixtures("tiny_switch_interval")
async def test_threads_spawn_complete_and_stop_while_the_block_joins() -> None:
    guard = HangGuard(trio.lowlevel.current_trio_token(), 60.0)
    threads, ops, rounds = 3, 36, 25
    total = threads * ops
    started_any = 0
    try:
        for seed in range(rounds):
            rnd, scope, raised = await one_round(seed * 7 + 3, threads, ops)
            check(rnd, scope, raised, total)
            started_any += len(rnd.started)
    finally:
        guard.close()
    # The race was there: most gates started (the exit did not simply end the round first).
    assert started_any > rounds * total // 4
