"""A start made by an adaptor inside a completion that raises an ``Exception``.

``starts_on`` (the child, once ``schedule(sch)`` completes), ``let_*`` (the sender the function
returned), ``continues_on``/``schedule_from`` (the scheduling operation), ``scope.join()`` (the
schedule operation, once the scope's count reaches zero) and ``repeat_n``/``repeat_effect_until``
/``retry`` (every iteration after the first) start an operation from inside a completion. A
start that raises an ``Exception`` ([exec.opstate.start]: a contract violation, or a scheduler
that takes no more work, such as the trio scheduler of a finished run) never started its
operation: the exception is the adaptor's ``set_error``, never an exception out of the
completion (on a parallel-scheduler thread that would call the terminate handler and abort the
process). A start queued by the trampoline (past its nesting depth) delivers its failure to its
own adaptor's receiver. A ``KeyboardInterrupt`` propagates, and so does an exception from a
start whose operation did complete first (never a second completion).
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
from _helpers import BadStart
from _subproc import run_child

import structexec as sx
from structexec.testing import ManualScheduler, RecordingReceiver

# --------------------------------------------------------------------------- helpers


class LaterStartsRaise(sx.Sender[Any]):
    """The first ``connect`` connects ``first``; every later one gives an operation whose
    ``start`` raises ``exc`` (a loop's second iteration whose start fails)."""

    def __init__(self, first: Any, exc: BaseException) -> None:
        self.first = first
        self.exc = exc
        self.connects = 0

    def connect(self, rcvr: Any) -> Any:
        self.connects += 1
        if self.connects == 1:
            return sx.connect(self.first, rcvr)
        return BadStart(self.exc).connect(rcvr)


class CompletesThenRaises(sx.Sender[Any]):
    """An operation whose ``start`` completes ``set_value()`` and then raises ``ValueError``
    (a contract violation: the exception must propagate, never a second completion)."""

    def connect(self, rcvr: Any) -> Any:
        class Op:
            def start(self) -> None:
                rcvr.set_value()
                raise ValueError("after completing")

        return Op()


def _finished_trio_scheduler() -> Any:
    async def main() -> Any:
        return sx.trio_scheduler()

    return trio.run(main)


def _name(e: object) -> str:
    return type(e).__name__


def _bad() -> BadStart:
    return BadStart(ValueError("start failed"))


# --------------------------------------------------------------------------- inline


def _inline_cases() -> dict[str, Any]:
    t = _finished_trio_scheduler()
    inl = sx.inline_scheduler()
    return {
        "starts_on": lambda: sx.starts_on(inl, _bad()),
        "let_value": lambda: sx.just(1) | sx.let_value(lambda x: _bad()),
        "let_error": lambda: sx.just_error(1) | sx.let_error(lambda e: _bad()),
        "let_stopped": lambda: sx.just_stopped() | sx.let_stopped(lambda: _bad()),
        "continues_on": lambda: sx.just(1) | sx.continues_on(t),
        "schedule_from": lambda: sx.schedule_from(t, sx.just(1)),
        "repeat_n": lambda: LaterStartsRaise(sx.just(), ValueError("2nd")) | sx.repeat_n(3),
        "repeat_effect_until": lambda: (
            LaterStartsRaise(sx.just(), ValueError("2nd")) | sx.repeat_effect_until(lambda: False)
        ),
        "retry": lambda: (
            LaterStartsRaise(sx.just_error(ConnectionError()), ValueError("2nd"))
            | sx.retry(attempts=3)
        ),
    }


_EXPECTED = {"continues_on": "RuntimeError", "schedule_from": "RuntimeError"}
_INLINE = list(_inline_cases())


@pytest.mark.parametrize("name", _INLINE)
def test_inline_start_failure_is_the_adaptors_error_completion(name: str) -> None:
    """On the calling thread the failure is an error *completion* (an ``upon_error`` after
    the adaptor sees it), not an exception out of ``start``."""
    sndr = _inline_cases()[name]()
    assert sx.sync_wait(sndr | sx.upon_error(_name)) == (_EXPECTED.get(name, "ValueError"),)
    with pytest.raises(RuntimeError if name in _EXPECTED else ValueError):
        sx.sync_wait(_inline_cases()[name]())


def test_join_schedule_start_failure_inline_is_the_joins_error() -> None:
    """The join's schedule operation is started when the last work leaves the scope, inside
    that work's completion (here ``ManualScheduler.drain`` on this thread): its failure is
    the join's error, and ``drain`` returns normally."""
    t = _finished_trio_scheduler()
    m = ManualScheduler()
    scope = sx.counting_scope()
    sx.spawn(sx.schedule(m), scope.get_token())
    r = RecordingReceiver(extra_env=sx.prop(sx.get_scheduler, t))
    r.run(scope.join())
    assert not r.done
    m.drain()
    assert r.kind == "error" and isinstance(r.error, RuntimeError)
    assert r.completions == 1


# --------------------------------------------------------------------------- parallel threads

_CHILD_PRELUDE = """
import trio, structexec as sx

class Op:
    def __init__(self, exc):
        self.exc = exc
    def start(self):
        raise self.exc

class BadStart(sx.Sender):
    def __init__(self, exc):
        self.exc = exc
    def connect(self, rcvr):
        return Op(self.exc)

class LaterStartsRaise(sx.Sender):
    def __init__(self, first, exc):
        self.first, self.exc, self.n = first, exc, 0
    def connect(self, rcvr):
        self.n += 1
        return sx.connect(self.first, rcvr) if self.n == 1 else Op(self.exc)

async def m():
    return sx.trio_scheduler()
T = trio.run(m)
P = sx.get_parallel_scheduler()
bad = lambda: BadStart(ValueError("start failed"))

def boom():
    raise ConnectionError

def run(make):
    try:
        print("value", sx.sync_wait(make()), flush=True)
    except Exception as e:
        print("raised", type(e).__name__, flush=True)
"""

_PARALLEL = {
    "starts_on": "sx.starts_on(P, bad())",
    "let_value": "sx.schedule(P) | sx.let_value(lambda: bad())",
    "let_error": "sx.starts_on(P, sx.just_error(1)) | sx.let_error(lambda e: bad())",
    "let_stopped": "sx.starts_on(P, sx.just_stopped()) | sx.let_stopped(lambda: bad())",
    "continues_on": "sx.schedule(P) | sx.continues_on(T)",
    "repeat_n": "LaterStartsRaise(sx.schedule(P), ValueError()) | sx.repeat_n(3)",
    "repeat_effect_until": (
        "LaterStartsRaise(sx.schedule(P), ValueError()) | sx.repeat_effect_until(lambda: False)"
    ),
    "retry": (
        "LaterStartsRaise(sx.schedule(P) | sx.then(boom), ValueError()) | sx.retry(attempts=3)"
    ),
}


@pytest.mark.parametrize("name", list(_PARALLEL))
def test_start_failure_on_a_parallel_thread_does_not_abort(name: str) -> None:
    """The start is made inside a completion on a parallel-scheduler thread: the error
    reaches ``sync_wait`` and the process lives on."""
    code = _CHILD_PRELUDE + f"run(lambda: {_PARALLEL[name]})\nprint('alive', flush=True)\n"
    r = run_child(code, timeout=60)
    assert "std::terminate" not in r.stderr, str(r)
    assert r.returncode == 0, str(r)
    want = "RuntimeError" if name == "continues_on" else "ValueError"
    assert r.stdout.split() == ["raised", want, "alive"], str(r)


def test_join_schedule_start_failure_on_a_parallel_thread_does_not_abort() -> None:
    """The last work of the scope completes on a parallel thread; the join's schedule
    operation (on the finished trio run's scheduler) fails to start there."""
    code = _CHILD_PRELUDE + """
import threading
go = threading.Event()
scope = sx.counting_scope()
sx.spawn(sx.schedule(P) | sx.then(lambda: go.wait(10) and None), scope.get_token())
j = sx.write_env(scope.join(), sx.prop(sx.get_scheduler, T))
threading.Timer(0.05, go.set).start()
run(lambda: j)
print('alive', flush=True)
"""
    r = run_child(code, timeout=60)
    assert "std::terminate" not in r.stderr, str(r)
    assert r.returncode == 0, str(r)
    assert r.stdout.split() == ["raised", "RuntimeError", "alive"], str(r)


@pytest.mark.parametrize(
    "expr",
    [
        "sx.starts_on(P, sx.schedule(T))",
        "sx.schedule(P) | sx.let_value(lambda: sx.schedule(T))",
    ],
)
def test_reproducers_on_a_finished_trio_run(expr: str) -> None:
    """Starting work on the scheduler of a finished trio run from a parallel thread: the
    ``RuntimeError`` reaches ``sync_wait``."""
    r = run_child(_CHILD_PRELUDE + f"run(lambda: {expr})\nprint('alive', flush=True)\n")
    assert "std::terminate" not in r.stderr, str(r)
    assert r.returncode == 0, str(r)
    assert r.stdout.split() == ["raised", "RuntimeError", "alive"], str(r)


# --------------------------------------------------------------------------- the trampoline


def _deep_chain(innermost: Any, levels: int, done: list[int], wrong: list[int]) -> Any:
    """``levels`` nested ``let_value``s completing inline around ``innermost``; each level
    records its value completion in ``done`` and an error reaching it in ``wrong``."""
    s = innermost
    for i in range(1, levels + 1):
        s = (
            sx.just()
            | sx.let_value(lambda s=s: s)
            | sx.then(lambda *_, i=i: done.append(i))
            | sx.upon_error(lambda e, i=i: wrong.append(i))
        )
    return s


@pytest.mark.parametrize("kind", ["let_value", "continues_on", "starts_on"])
def test_a_queued_start_failure_reaches_its_own_receiver(kind: str) -> None:
    """Past the trampoline's depth the innermost start is queued and run by the outermost
    ``trampoline_start`` (the drain): its failure still goes to the innermost adaptor's
    receiver, and every other operation completes normally. The depth sweeps a whole
    trampoline period, so that in one of the runs the failing start is itself the queued one."""
    from structexec._core._trampoline import MAX_DEPTH

    t = _finished_trio_scheduler()
    make = {
        "let_value": lambda: sx.just() | sx.let_value(lambda: _bad()),
        "continues_on": lambda: sx.just() | sx.continues_on(t),
        "starts_on": lambda: sx.starts_on(sx.inline_scheduler(), _bad()),
    }[kind]
    for levels in range(3 * MAX_DEPTH, 4 * MAX_DEPTH + 2):
        caught: list[str] = []
        done: list[int] = []
        wrong: list[int] = []
        innermost = make() | sx.upon_error(lambda e, c=caught: c.append(_name(e)))
        assert sx.sync_wait(_deep_chain(innermost, levels, done, wrong)) == (), levels
        assert caught == ["RuntimeError" if kind == "continues_on" else "ValueError"], levels
        assert wrong == [], levels
        assert done == list(range(1, levels + 1)), levels


def test_a_queued_keyboard_interrupt_still_propagates() -> None:
    """A ``KeyboardInterrupt`` from a queued start is never an error completion: it
    propagates out of ``sync_wait``, as before."""
    done: list[int] = []
    wrong: list[int] = []
    innermost = sx.just() | sx.let_value(lambda: BadStart(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        sx.sync_wait(_deep_chain(innermost, 100, done, wrong))
    assert wrong == [] and done == []


@pytest.mark.parametrize(
    "make",
    [
        lambda: sx.just() | sx.let_value(lambda: BadStart(KeyboardInterrupt())),
        lambda: sx.starts_on(sx.inline_scheduler(), BadStart(KeyboardInterrupt())),
        lambda: LaterStartsRaise(sx.just(), KeyboardInterrupt()) | sx.repeat_n(3),
    ],
    ids=["let_value", "starts_on", "repeat_n"],
)
def test_a_keyboard_interrupt_from_a_start_propagates(make: Any) -> None:
    with pytest.raises(KeyboardInterrupt):
        sx.sync_wait(make())


def test_trampoline_sink_gets_only_exceptions_of_its_own_start() -> None:
    """``trampoline_start(op, sink)`` directly: a queued start's ``Exception`` goes to its
    own sink; a start without a sink still raises once the queue is empty; the operations
    queued behind both are started."""
    from structexec._core._trampoline import MAX_DEPTH, trampoline_start

    started: list[str] = []
    sunk: list[tuple[str, str]] = []

    class Sink:
        def __init__(self, name: str) -> None:
            self.name = name

        def _sx_start_failed(self, exc: Exception) -> None:
            sunk.append((self.name, str(exc)))

    class Op:
        def __init__(self, name: str, kids: tuple[Any, ...] = (), exc: Any = None) -> None:
            self.name, self.kids, self.exc = name, kids, exc

        def start(self) -> None:
            started.append(self.name)
            for k, sink in self.kids:
                trampoline_start(k, sink)
            if self.exc is not None:
                raise self.exc

    kids = (
        (Op("a", exc=ValueError("a")), Sink("a")),
        (Op("b", exc=ValueError("b")), None),
        (Op("c"), Sink("c")),
    )
    op = Op("n0", kids)
    for i in range(1, MAX_DEPTH):
        op = Op(f"n{i}", ((op, Sink(f"n{i}")),))
    with pytest.raises(ValueError, match=r"^b$"):
        trampoline_start(op, Sink("top"))
    assert sunk == [("a", "a")]
    assert started[-3:] == ["a", "b", "c"]


# --------------------------------------------------------------------------- contract violations


@pytest.mark.parametrize(
    "make",
    [
        lambda: sx.just() | sx.let_value(lambda: CompletesThenRaises()),
        lambda: sx.starts_on(sx.inline_scheduler(), CompletesThenRaises()),
        lambda: sx.just() | sx.repeat_n(2) | sx.let_value(lambda: CompletesThenRaises()),
    ],
    ids=["let_value", "starts_on", "repeat_then_let"],
)
def test_a_start_that_completed_then_raised_propagates_without_a_second_completion(
    make: Any,
) -> None:
    r = RecordingReceiver()
    with pytest.raises(ValueError, match="after completing"):
        r.run(make())
    assert r.completions == 1 and r.kind == "value"


def test_repeat_iteration_that_completed_then_raised_propagates() -> None:
    """A later iteration whose start completes and then raises: the exception propagates
    (the loop has its completion already), no second completion."""

    class Twice(sx.Sender[Any]):
        n = 0

        def connect(self, rcvr: Any) -> Any:
            Twice.n += 1
            if Twice.n == 1:
                return sx.connect(sx.just(), rcvr)
            return CompletesThenRaises().connect(rcvr)

    r = RecordingReceiver()
    with pytest.raises(ValueError, match="after completing"):
        r.run(Twice() | sx.repeat_n(2))
    assert r.completions == 1 and r.kind == "value"


# --------------------------------------------------------------------------- sequences


class _SeqRcvr:
    """A sequence receiver whose next sender is ``nexts[i]`` for the i-th item (a sender
    returned by ``set_next`` whose start raises stands for a broken consumer)."""

    def __init__(self, nexts: list[Any]) -> None:
        import threading

        self.nexts = nexts
        self.items = 0
        self.outcome: list[str] = []
        self.done = threading.Event()

    def get_env(self) -> Any:
        return sx.prop(sx.get_stop_token, sx.never_stop_token())

    def set_next(self, item: Any) -> Any:
        self.items += 1
        return self.nexts[self.items - 1]

    def set_value(self) -> None:
        self.outcome.append("value")
        self.done.set()

    def set_error(self, err: Any) -> None:
        self.outcome.append(_name(err))
        self.done.set()

    def set_stopped(self) -> None:
        self.outcome.append("stopped")
        self.done.set()


def test_iterate_next_sender_start_failure_ends_the_sequence_with_it() -> None:
    """``iterate``'s producer loop starts each next sender; one whose start raises (here the
    second, started after the first completed) ends the sequence with ``set_error``, and the
    source is closed."""
    closed: list[bool] = []

    def gen() -> Any:
        try:
            yield from (1, 2, 3)
        finally:
            closed.append(True)

    r = _SeqRcvr([sx.just(), _bad(), sx.just()])
    sx.connect(sx.iterate(gen()), r).start()
    assert r.outcome == ["ValueError"] and r.items == 2 and closed == [True]


def test_iterate_next_sender_start_failure_on_a_parallel_thread_does_not_abort() -> None:
    code = _CHILD_PRELUDE + """
import threading
class R:
    def __init__(self):
        self.n, self.out, self.done = 0, [], threading.Event()
    def get_env(self):
        return sx.prop(sx.get_stop_token, sx.never_stop_token())
    def set_next(self, item):
        self.n += 1
        return sx.schedule(P) if self.n == 1 else bad()
    def set_value(self):
        self.out.append("value"); self.done.set()
    def set_error(self, e):
        self.out.append(type(e).__name__); self.done.set()
    def set_stopped(self):
        self.out.append("stopped"); self.done.set()
r = R()
sx.connect(sx.iterate([1, 2, 3]), r).start()
r.done.wait(10)
print(*r.out, flush=True)
print('alive', flush=True)
"""
    r = run_child(code, timeout=60)
    assert "std::terminate" not in r.stderr, str(r)
    assert r.returncode == 0, str(r)
    assert r.stdout.split() == ["ValueError", "alive"], str(r)
