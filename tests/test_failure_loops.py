"""Failure semantics of the execution contexts: BaseExceptions on the trio scheduler, in
sync_wait, on pool threads.

The trio scheduler ([exec.schedule] on trio), ``run_loop`` ([exec.run.loop]), ``sync_wait``
([exec.sync.wait], [exec.sync.wait.var]), the parallel scheduler ([exec.par.scheduler]) and its
thread-pool backend ([exec.sysctxrepl.psb]). For every kind of failure of user code run by one
of them (an ``Exception``, a ``KeyboardInterrupt``, a ``SystemExit``; inline, on the context's
own agent, from another thread) the outcome is an error completion, the ``BaseException``
propagating to whoever waits for the work or runs the event loop (``await`` / ``trio.run``,
``sync_wait``), or a documented terminate; never a hang, a leaked thread or a lost error.

What could hang or abort the process runs in a child interpreter with a hard timeout
(``_subproc.run_child``); several checks share one child to keep the suite fast.
"""

from __future__ import annotations

import gc
import sys
from typing import Any

import pytest
from _subproc import run_child
from hypothesis import given, settings
from hypothesis import strategies as st

import structexec as sx
from structexec.testing import RecordingReceiver, record_terminate


def _kbi(*args: Any) -> None:
    raise KeyboardInterrupt("raised by a then-function")


def _lines(out: str) -> dict[str, str]:
    """``name: outcome`` lines printed by a child, as a dict."""
    d = {}
    for line in out.splitlines():
        if ": " in line:
            k, v = line.split(": ", 1)
            d[k] = v
    return d


# ----------------------------------------------------- a BaseException on the trio scheduler


_TRIO_CHILD = """
import sys, threading, time
import trio
import structexec as sx

def kbi(*a):
    raise KeyboardInterrupt("k")

def leave(*a):
    sys.exit(7)

def run(name, main):
    try:
        trio.run(main)
        print(f"{name}: returned", flush=True)
    except BaseException as e:
        print(f"{name}: {type(e).__name__} {e}", flush=True)

# Plain trio, for comparison: sync code in the main task raises KeyboardInterrupt.
async def plain():
    await trio.lowlevel.checkpoint()
    kbi()
run("plain", plain)

async def await_ki():
    await (sx.schedule(sx.trio_scheduler()) | sx.then(kbi))
run("await-ki", await_ki)

async def await_exit():
    await (sx.schedule(sx.trio_scheduler()) | sx.then(leave))
run("await-exit", await_exit)

# Work started from another thread onto the trio scheduler, waited for by sync_wait there.
async def from_thread():
    sch = sx.trio_scheduler()
    await trio.to_thread.run_sync(
        lambda: sx.sync_wait(sx.starts_on(sch, sx.just() | sx.then(kbi))))
run("thread-ki", from_thread)

# A task body resumed by the trio scheduler (affinity) raises.
async def task_body():
    @sx.task
    async def t():
        await sx.schedule(sx.trio_scheduler())
        leave()
    await t()
run("task-exit", task_body)

# No consumer to take it (a bare receiver): the drainer survives (the operations queued
# around the failing one complete) and the KeyboardInterrupt reaches trio as a Ctrl-C does.
seen = []
class R:
    def __init__(self, name): self.name = name
    def set_value(self, *v): seen.append(self.name)
    def set_error(self, e): seen.append(f"error {self.name}")
    def set_stopped(self): seen.append(f"stopped {self.name}")

async def no_consumer():
    sch = sx.trio_scheduler()
    ops = [sx.connect(sx.schedule(sch) | sx.then(f), R(n))
           for n, f in (("a", lambda: None), ("b", kbi), ("c", lambda: None))]
    for op in ops:
        op.start()
    await trio.sleep(5)
run("bare-ki", no_consumer)
print(f"bare-seen: {seen}", flush=True)

# A then-function on a parallel-scheduler thread, awaited in a trio task: raised from the
# await, as trio.to_thread.run_sync raises what its function raised.
async def pool_await():
    await sx.starts_on(sx.get_parallel_scheduler(), sx.just() | sx.then(kbi))
run("pool-await-ki", pool_await)

async def plain_to_thread():
    await trio.to_thread.run_sync(kbi)
run("plain-to-thread", plain_to_thread)

async def still_works():
    await (sx.schedule(sx.trio_scheduler()) | sx.then(lambda: None))
run("after", still_works)
"""


def test_base_exception_on_trio_scheduler_reaches_trio_run() -> None:
    """[exec.schedule], [exec.recv.concepts]: a ``KeyboardInterrupt`` or
    ``SystemExit`` raised by user code in a completion that the trio scheduler runs never
    hangs ``trio.run``. The awaiting task raises it from its ``await`` (as if the function
    had run there, like ``await trio.to_thread.run_sync(f)``), so it leaves ``trio.run`` as
    the same exception plain trio gives; ``sync_wait`` on another thread raises it there; with
    no consumer, a ``KeyboardInterrupt`` is delivered as a Ctrl-C is and the drainer goes on
    with the other queued operations."""
    r = run_child(_TRIO_CHILD, timeout=30)
    assert not r.timed_out, str(r)
    assert r.returncode == 0, str(r)
    out = _lines(r.stdout)
    assert out["plain"] == "KeyboardInterrupt k"
    assert out["await-ki"] == out["plain"]
    assert out["await-exit"] == "SystemExit 7"
    assert out["thread-ki"] == "KeyboardInterrupt k"
    assert out["task-exit"] == "SystemExit 7"
    assert out["bare-ki"].startswith("KeyboardInterrupt")
    assert out["bare-seen"] == "['a', 'c']"  # the drainer survived b
    assert out["pool-await-ki"] == out["plain-to-thread"] == "KeyboardInterrupt k"
    assert out["after"] == "returned"
    assert "terminate" not in r.stderr


# ------------------------------------------------------------ a BaseException in sync_wait


def test_sync_wait_base_exception_leaves_the_loop_finished() -> None:
    """[exec.sync.wait], [exec.run.loop.ctor]: a ``KeyboardInterrupt`` or
    ``SystemExit`` raised by a then-function under ``sync_wait`` (run on its loop after a hop
    to the parallel scheduler, or inline) reaches the caller, and the loop is finished: the
    garbage collector finds nothing to terminate about."""
    par = sx.get_parallel_scheduler()

    def leave(*args: Any) -> None:
        sys.exit(0)

    with record_terminate() as rec:
        for f, exc in ((_kbi, KeyboardInterrupt), (leave, SystemExit)):
            with pytest.raises(exc):
                sx.sync_wait(sx.on(par, sx.just(1)) | sx.then(f))
            with pytest.raises(exc):
                sx.sync_wait(sx.just(1) | sx.then(f))
            with pytest.raises(exc):
                sx.sync_wait_with_variant(sx.on(par, sx.just(1)) | sx.then(f))
            gc.collect()
        assert rec.reasons == []
        # sync_wait works as before afterwards
        assert sx.sync_wait(sx.on(par, sx.just(1)) | sx.then(lambda x: x + 1)) == (2,)


_SYNC_WAIT_CHILD = """
import gc, sys, threading, time
import structexec as sx
from structexec.backends import ThreadPoolBackend

def kbi(*a):
    raise KeyboardInterrupt("k")

def leave(*a):
    sys.exit(3)

def fail(*a):
    raise ValueError("v")

def attempt(name, sndr):
    try:
        print(f"{name}: value {sx.sync_wait(sndr)}", flush=True)
    except BaseException as e:
        print(f"{name}: {type(e).__name__} {e}", flush=True)
    gc.collect()

pool = ThreadPoolBackend(2)
ps = sx.parallel_scheduler(pool)
for kind, f in (("exc", fail), ("ki", kbi), ("exit", leave)):
    # a then-function on a pool thread
    attempt(f"then-{kind}", sx.starts_on(ps, sx.just() | sx.then(f)))
    # a bulk function on a pool thread (one index of many)
    attempt(f"bulk-{kind}",
            sx.schedule(ps) | sx.bulk(sx.par, 64, lambda i, f=f: f() if i == 33 else None))
    attempt(f"unchunked-{kind}",
            sx.schedule(ps) | sx.bulk_unchunked(sx.par, 8, lambda i, f=f: f() if i == 5 else None))
alive = [t.is_alive() for t in pool._threads]
print(f"pool-threads: {alive}", flush=True)
attempt("pool-after", sx.schedule(ps) | sx.then(lambda: 5))

# Late completion into an abandoned loop: the pool branch finishes after sync_wait has left.
done = threading.Event()
def slow(*a):
    time.sleep(0.2)
    done.set()
attempt("late", sx.when_all(sx.on(ps, sx.just() | sx.then(slow)), sx.just() | sx.then(kbi)))
done.wait(5)
time.sleep(0.1)
gc.collect()
print("late-after: ok", flush=True)

# No consumer to take it (a bare receiver): KeyboardInterrupt arrives in the main thread as a
# Ctrl-C does; a bulk operation completes stopped first; anything else is a terminate.
seen = []
class R:
    def set_value(self, *v): seen.append("value")
    def set_error(self, e): seen.append("error")
    def set_stopped(self): seen.append("stopped")
op = sx.connect(sx.schedule(ps) | sx.bulk(sx.par, 4, lambda i: kbi() if i == 1 else None), R())
try:
    # Inside the try: a pool thread can run the chunk and interrupt this thread before start
    # returns (seen on a loaded machine).
    op.start()
    for _ in range(100):  # short sleeps: a signal that lands just before a sleep waits for it
        time.sleep(0.05)
    print("bare-bulk: nothing", flush=True)
except KeyboardInterrupt:
    print(f"bare-bulk: KeyboardInterrupt {seen}", flush=True)
reasons = []
got = threading.Event()
sx.set_terminate_handler(lambda reason, exc: (reasons.append(type(exc).__name__), got.set()))
op2 = sx.connect(sx.starts_on(ps, sx.just() | sx.then(leave)), R())
op2.start()
got.wait(5)
sx.set_terminate_handler(None)
print(f"bare-exit: {reasons}", flush=True)
print(f"pool-threads-2: {[t.is_alive() for t in pool._threads]}", flush=True)

# Ctrl-C while sync_wait waits for work on the pool; the work finishes later. The work says
# when it runs (sync_wait is waiting for it then) and runs until the interrupt has arrived,
# however late the signal comes on a loaded machine.
release2 = threading.Event()
def slow2(*a):
    ready()
    release2.wait(30)
try:
    sx.sync_wait(sx.starts_on(ps, sx.just() | sx.then(slow2)))
    print("ctrl-c: no interrupt", flush=True)
except KeyboardInterrupt:
    print("ctrl-c: KeyboardInterrupt", flush=True)
release2.set()
time.sleep(0.5)
gc.collect()
attempt("end", sx.starts_on(ps, sx.just(9)))
pool.shutdown()
"""


def test_sync_wait_and_thread_pool_failure_matrix() -> None:
    """[exec.sync.wait], [exec.sysctxrepl.psb], [exec.par.scheduler], [exec.run.loop]: under
    ``sync_wait``, a then-function or a bulk function (chunked or unchunked) on a pool thread
    that raises an ``Exception`` gives the error; a ``KeyboardInterrupt`` or ``SystemExit``
    is raised by ``sync_wait`` itself (never a terminate, never a dead worker). Work still
    running when ``sync_wait`` left completes later into the abandoned loop harmlessly. With
    no consumer, a ``KeyboardInterrupt`` reaches the main thread as a Ctrl-C does and other
    ``BaseException``s are a terminate. A real Ctrl-C while ``sync_wait`` waits raises
    ``KeyboardInterrupt`` and leaves nothing behind."""
    r = run_child(_SYNC_WAIT_CHILD, timeout=40, sigint_after_ready=True, sigint_delay=0.1)
    assert not r.timed_out, str(r)
    assert r.returncode == 0, str(r)
    out = _lines(r.stdout)
    for where in ("then", "bulk", "unchunked"):
        assert out[f"{where}-exc"] == "ValueError v", str(r)
        assert out[f"{where}-ki"] == "KeyboardInterrupt k", str(r)
        assert out[f"{where}-exit"] == "SystemExit 3", str(r)
    assert out["pool-threads"] == "[True, True]"
    assert out["pool-after"] == "value (5,)"
    assert out["late"] == "KeyboardInterrupt k"
    assert out["late-after"] == "ok"
    assert out["bare-bulk"] == "KeyboardInterrupt ['stopped']"
    assert out["bare-exit"] == "['SystemExit']"
    assert out["pool-threads-2"] == "[True, True]"
    assert out["ctrl-c"] == "KeyboardInterrupt"
    assert out["end"] == "value (9,)"
    assert "std::terminate" not in r.stderr, str(r)


# --------------------------------------------------------------------------- run_loop


def _drive_loop(items: list[str], finish_first: bool) -> tuple[list[int], list[Any], list[str]]:
    """Queue one item per entry of ``items`` ("ok" appends its index, "ki"/"exit" raise), then
    call ``run()`` until it returns, calling ``finish()`` up front (``finish_first``) or after
    the first exception. Returns (indices run, exceptions' args, loop states seen); any other
    exception is returned as a string in the states, so that no loop outlives this call."""
    loop = sx.run_loop()
    sch = loop.get_scheduler()
    ran: list[int] = []
    raised: list[Any] = []
    states: list[str] = []

    def make(i: int, kind: str) -> Any:
        def f() -> None:
            if kind == "ki":
                raise KeyboardInterrupt(i)
            if kind == "exit":
                raise SystemExit(i)
            ran.append(i)

        return f

    keep = []
    for i, kind in enumerate(items):
        r = RecordingReceiver()
        r.run(sx.schedule(sch) | sx.then(make(i, kind)))
        keep.append(r)
    finished = finish_first or all(k == "ok" for k in items)
    if finished:
        loop.finish()
    try:
        for _ in range(len(items) + 1):
            try:
                loop.run()
                break
            except (KeyboardInterrupt, SystemExit) as e:
                raised.append(e.args[0])
                states.append(repr(loop).split()[1])
                if not finished:
                    loop.finish()
                    finished = True
        states.append(repr(loop).split()[1])
    except Exception as e:
        states.append(f"{type(e).__name__}: {e}")
        loop._queue.clear()  # the old behaviour: do not leave a running loop to the collector
        loop._state = "finished"
    return ran, raised, states


def test_run_loop_item_raising_leaves_loop_usable() -> None:
    """[exec.run.loop.members]: an item that raises a ``BaseException`` leaves ``run()`` with
    it; the loop is no longer running, the other items stay queued in order, and a second
    ``run()`` goes on with them. Dropping the finished loop terminates nothing
    ([exec.run.loop.ctor])."""
    with record_terminate() as rec:
        ran, raised, states = _drive_loop(["ok", "ki", "ok", "ok"], finish_first=False)
        gc.collect()
    assert ran == [0, 2, 3]
    assert raised == [1]
    assert states == ["starting,", "finished,"]  # not running after the raise; then finished
    assert rec.reasons == []


@settings(deadline=None, max_examples=50)
@given(st.lists(st.sampled_from(["ok", "ki", "exit"]), max_size=12), st.booleans())
def test_run_loop_base_exceptions_property(items: list[str], finish_first: bool) -> None:
    """[exec.run.loop.members] (property): whatever items raise, calling ``run()`` again after
    each exception runs every other item exactly once, in FIFO order, and the loop ends
    finished with nothing for the destructor to terminate about ([exec.run.loop.ctor])."""
    with record_terminate() as rec:
        ran, raised, states = _drive_loop(items, finish_first)
    assert ran == [i for i, k in enumerate(items) if k == "ok"]
    assert raised == [i for i, k in enumerate(items) if k != "ok"]
    assert states[-1] == "finished,"
    assert all(s in ("starting,", "finishing,") for s in states[:-1])
    assert rec.reasons == []


def test_run_loop_destroyed_message_cites_the_spec() -> None:
    """[exec.run.loop.ctor]: the terminate message for a loop dropped with work names the
    spec section and says what to do, and cites no document outside the repository."""
    with record_terminate() as rec:
        loop = sx.run_loop()
        r = RecordingReceiver()
        r.run(sx.schedule(loop.get_scheduler()))
        del loop, r
        gc.collect()
    assert len(rec.reasons) == 1
    msg = rec.reasons[0]
    assert "[exec.run.loop.ctor]" in msg and "finish()" in msg
    assert "REQUIREMENTS" not in msg and "DESIGN" not in msg


async def test_sync_wait_on_trio_thread_message_cites_the_spec() -> None:
    """[exec.sync.wait]: ``sync_wait`` on the trio thread says what to do instead and cites
    the spec section, no document outside the repository."""
    with pytest.raises(RuntimeError) as info:
        sx.sync_wait(sx.just(1))
    msg = str(info.value)
    assert "[exec.sync.wait]" in msg and "await" in msg
    assert "REQUIREMENTS" not in msg and "DESIGN" not in msg
