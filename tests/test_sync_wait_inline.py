"""``sync_wait`` makes its ``run_loop`` only when the work needs one ([exec.sync.wait]).

Work that completes inside ``start`` (``just(x) | then(f)``) is waited for without a loop;
work that asks for the scheduler, or that has not completed when ``start`` returns, gets
the loop. Both paths give the same results (values, errors, stopped, BaseExceptions), and a
completion from another thread that races with the loop being made is never lost (the
race test runs in a child process with a timeout, so a lost wake-up fails instead of
hanging the suite).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from _helpers import pin_domain_dispatch
from _subproc import run_child
from hypothesis import given, settings
from hypothesis import strategies as st

import structexec as sx
from structexec._schedulers import _sync_wait


class _CountingLoop(sx.run_loop):
    made = 0

    def __init__(self) -> None:
        super().__init__()
        type(self).made += 1


@pytest.fixture
def counting_loop(monkeypatch: pytest.MonkeyPatch) -> type[_CountingLoop]:
    _CountingLoop.made = 0
    monkeypatch.setattr(_sync_wait, "run_loop", _CountingLoop)
    # A custom domain made by an earlier test turns on the late-domain lookup at connect,
    # which asks the receiver's environment for its scheduler (and so makes the loop).
    pin_domain_dispatch(monkeypatch, on=False, all=False, apply=False)
    return _CountingLoop


def _inc(x: int) -> int:
    return x + 1


def test_inline_completion_makes_no_loop(counting_loop: type[_CountingLoop]) -> None:
    assert sx.sync_wait(sx.just(1) | sx.then(_inc)) == (2,)
    assert sx.sync_wait(sx.just_stopped()) is None
    with pytest.raises(ValueError, match="x"):
        sx.sync_wait(sx.just_error(ValueError("x")))
    assert counting_loop.made == 0


def test_scheduler_query_makes_the_loop(counting_loop: type[_CountingLoop]) -> None:
    # read_env(get_scheduler) completes inline, but it asked for the loop's scheduler.
    (sch,) = sx.sync_wait(sx.read_env(sx.get_scheduler)) or ((),)
    assert counting_loop.made == 1
    # Work scheduled onto the loop runs on it.
    assert sx.sync_wait(sx.schedule(sx.inline_scheduler()) | sx.then(lambda: 3)) == (3,)
    r = sx.sync_wait(sx.let_value(sx.read_env(sx.get_scheduler), sx.schedule))
    assert r == ()
    assert counting_loop.made == 2  # the inline_scheduler row made none
    assert sch is not None


class _LaterFromThread(sx.Sender[Any]):
    """Completes from another thread, after ``start`` has returned (or while it returns)."""

    def __init__(self, how: str) -> None:
        self.how = how

    def connect(self, rcvr: Any) -> Any:
        how = self.how

        class Op:
            def start(self) -> None:
                def complete() -> None:
                    if how == "value":
                        rcvr.set_value(7)
                    elif how == "error":
                        rcvr.set_error(KeyError("k"))
                    else:
                        rcvr.set_stopped()

                threading.Thread(target=complete).start()

        return Op()


@pytest.mark.parametrize("how", ["value", "error", "stopped"])
def test_completion_from_another_thread(how: str) -> None:
    s = _LaterFromThread(how)
    if how == "value":
        assert sx.sync_wait(s) == (7,)
    elif how == "error":
        with pytest.raises(KeyError):
            sx.sync_wait(s)
    else:
        assert sx.sync_wait(s) is None


class _RaiseInStart(sx.Sender[Any]):
    def connect(self, rcvr: Any) -> Any:
        class Op:
            def start(self) -> None:
                raise KeyboardInterrupt

        return Op()


def test_keyboard_interrupt_inline_leaves_nothing(counting_loop: type[_CountingLoop]) -> None:
    with pytest.raises(KeyboardInterrupt):
        sx.sync_wait(_RaiseInStart())
    with pytest.raises(KeyboardInterrupt):
        sx.sync_wait(sx.just() | sx.then(_raise_kbi))
    assert counting_loop.made == 0


def _raise_kbi() -> None:
    raise KeyboardInterrupt


class _Sink:
    def set_value(self, *vals: Any) -> None:
        pass

    def set_error(self, err: Any) -> None:
        pass

    def set_stopped(self) -> None:
        pass


def test_late_scheduler_query_after_abandon_drops_the_work() -> None:
    """The work raised a BaseException inline (the caller left) and asks for the scheduler
    afterwards from another thread: the loop made then is abandoned at birth, and work
    scheduled onto it is dropped, never run, never raising into that thread."""
    kept: list[Any] = []

    class Op:
        def __init__(self, rcvr: Any) -> None:
            self.rcvr = rcvr

        def start(self) -> None:
            kept.append(self.rcvr)
            raise KeyboardInterrupt

    class S(sx.Sender[Any]):
        def connect(self, rcvr: Any) -> Any:
            return Op(rcvr)

    with pytest.raises(KeyboardInterrupt):
        sx.sync_wait(S())
    (rcvr,) = kept
    ran: list[int] = []

    def later() -> None:
        sch = sx.get_scheduler(sx.get_env(rcvr))
        op = sx.connect(sx.schedule(sch) | sx.then(lambda: ran.append(1)), _Sink())
        sx.start(op)
        rcvr.set_value()  # a late completion: ignored

    t = threading.Thread(target=later)
    t.start()
    t.join()
    assert ran == []


@settings(deadline=None, max_examples=30)
@given(
    kind=st.sampled_from(["value", "error", "stopped", "kbi"]),
    stages=st.integers(min_value=0, max_value=4),
    via_loop=st.booleans(),
)
def test_inline_and_loop_paths_agree(kind: str, stages: int, via_loop: bool) -> None:
    """The same work, completed inline or via the loop (``continues_on`` the loop's own
    scheduler, which makes the loop), gives the same outcome ([exec.sync.wait])."""
    base: Any
    if kind == "value":
        base = sx.just(0)
    elif kind == "error":
        base = sx.just_error(ValueError("e"))
    elif kind == "stopped":
        base = sx.just_stopped()
    else:
        base = sx.just(0) | sx.then(lambda x: _raise_kbi())
    s = base
    for _ in range(stages):
        s = s | sx.then(_inc)
    if via_loop:
        s = (
            sx.let_value(sx.read_env(sx.get_scheduler), lambda sch, s=s: s | sx.continues_on(sch))
            | sx.let_error(sx.just_error)
            | sx.let_stopped(sx.just_stopped)
        )

    def outcome() -> Any:
        try:
            return ("value", sx.sync_wait(s))
        except KeyboardInterrupt:
            return ("kbi",)
        except ValueError as e:
            return ("error", str(e))

    expected = {
        "value": ("value", (stages,)),
        "error": ("error", "e"),
        "stopped": ("value", None),
        "kbi": ("kbi",),
    }[kind]
    assert outcome() == expected


_RACE_CHILD = """
import threading, random
import structexec as sx

class Op:
    def __init__(self, rcvr, delay_spins, how, ask):
        self.rcvr, self.spins, self.how, self.ask = rcvr, delay_spins, how, ask
    def start(self):
        rcvr, spins, how = self.rcvr, self.spins, self.how
        if self.ask:
            sx.get_scheduler(sx.get_env(rcvr))
        def complete():
            for _ in range(spins):
                pass
            if how == 0:
                rcvr.set_value(1)
            elif how == 1:
                rcvr.set_stopped()
            else:
                sink = rcvr.get_env().query(raised_sink)
                sink(SystemExit(3))
        threading.Thread(target=complete).start()

class S(sx.Sender):
    def __init__(self, *a):
        self.a = a
    def connect(self, rcvr):
        return Op(rcvr, *self.a)

from structexec._schedulers._run_loop import raised_sink
rng = random.Random(5)
for i in range(3000):
    how = rng.randrange(3)
    s = S(rng.randrange(0, 400), how, rng.random() < 0.2)
    try:
        r = sx.sync_wait(s)
    except SystemExit as e:
        assert how == 2 and e.code == 3
    else:
        assert r == ((1,) if how == 0 else None), (how, r)
print("OK")
"""


def test_completion_racing_with_the_loop_creation_is_never_lost() -> None:
    r = run_child(_RACE_CHILD, timeout=120)
    assert not r.timed_out, str(r)
    assert r.returncode == 0 and "OK" in r.stdout, str(r)
