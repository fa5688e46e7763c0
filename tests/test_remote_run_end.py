"""The trio run ending (returning or crashing) while a remote call is in flight
([exec.then], [exec.par.scheduler], [exec.schedule.from]; docs/parallel.md "Running any
function remotely").

A ``then`` shipped to a ``ProcessPoolBackend`` or a ``DaskBackend`` worker outlives the trio
run that started it in several ways, compared here with what ``trio.to_thread.run_sync`` does
in a nursery:

* a trio task awaiting the call is cancelled (the run crashes with ``ValueError`` or
  ``KeyboardInterrupt``, in a nursery or a scope): on the process pool the running call is
  waited for and its value delivered, as ``trio.to_thread.run_sync`` does; on dask it is
  abandoned (``Cancelled`` at once), as ``to_thread.run_sync(abandon_on_cancel=True)`` does;
* a coroutine spawned into a scope that is never joined keeps awaiting it: ``trio.run``
  waits for it, and it gets the value;
* a spawned sender goes back to the trio scheduler after the call (``continues_on``): the run
  has finished by then, so the work completes with the clear ``RuntimeError`` of a finished
  run, kept by the scope (it used to abort the process: the failed start was raised out of
  a completion);
* another thread's ``sync_wait`` of such a sender raises that error; one of a ``when_all``
  of the call and a trio timer returns stopped (the timer is stopped when the run ends and
  stops the call).

Nothing hangs (a child process with a timeout), nothing aborts, and the backend's call slots
(process pool) or the cluster's keys (dask) are all released afterwards. The snippet's
functions are defined in ``__main__`` of ``python -c``, which a worker cannot import: they
travel by value (cloudpickle), which the process pool used to get wrong for remote calls.
"""

from __future__ import annotations

import pytest
from _subproc import run_child

_CHILD = """
import functools, os, pathlib, sys, tempfile, threading, time
import trio
import structexec as sx

KIND = {kind!r}
W = pathlib.Path(tempfile.mkdtemp())

def work(tag):
    (W / f"started-{{tag}}").write_text(str(os.getpid()))
    deadline = time.monotonic() + 30
    while not (W / f"release-{{tag}}").exists() and time.monotonic() < deadline:
        time.sleep(0.005)
    return os.getpid()

def release(tag):
    (W / f"release-{{tag}}").touch()

async def wait_started(tag):
    with trio.fail_after(20):  # the call failed instead of starting: fail, do not hang
        while not (W / f"started-{{tag}}").exists():
            await trio.sleep(0.005)

def call(tag):
    return sx.schedule(par) | sx.then(functools.partial(work, tag))

res = {{}}

async def waiter(tag, how="sx"):
    try:
        if how == "to_thread":
            v = await trio.to_thread.run_sync(work, tag)
        else:
            v = await call(tag)
        res[tag] = ("value", v != os.getpid())
    except BaseException as e:
        res[tag] = (type(e).__name__,)
        raise

def show(*a):
    print(*a, flush=True)

def detached_coroutine():
    async def main():
        scope = sx.simple_counting_scope()
        sx.spawn(waiter("A"), scope.get_token())
        await wait_started("A")
        threading.Timer(0.2, release, ("A",)).start()
        return scope
    scope = trio.run(main)
    show("A", res["A"], scope.count)

async def release_task(tag, how):
    # Dask abandons a running call when its waiter is cancelled: release the call only once
    # the waiter has its outcome (shielded: the run does not end before). The process pool
    # (and to_thread) waits for the running call: release it at once (the waiter was
    # cancelled already).
    if KIND != "pool" and how == "sx":
        with trio.CancelScope(shield=True):
            while tag not in res:
                await trio.sleep(0.005)
    release(tag)

def crash(tag, exc, host, how="sx"):
    # The call is released by a system task, which runs after the exit of the block has
    # cancelled the waiter (a timer thread started here released it after 0.2 s, which a
    # loaded machine could let pass before the exit cancelled the waiter).
    async def main():
        if host == "nursery":
            async with trio.open_nursery() as n:
                n.start_soon(waiter, tag, how)
                await wait_started(tag)
                trio.lowlevel.spawn_system_task(release_task, tag, how)
                raise exc
        else:
            async with sx.counting_scope() as scope:
                scope.spawn(waiter(tag, how))
                await wait_started(tag)
                trio.lowlevel.spawn_system_task(release_task, tag, how)
                raise exc
    try:
        trio.run(main)
    except BaseException as e:
        show(tag, res[tag], leaf_names(e))

def detached_sender_back_to_trio():
    async def main():
        scope = sx.simple_counting_scope()
        sx.spawn(call("C") | sx.continues_on(sx.trio_scheduler()), scope.get_token())
        await wait_started("C")
        return scope
    scope = trio.run(main)
    pending = scope.count
    release("C")
    try:
        sx.sync_wait(scope.join())
        joined = "joined"
    except Exception as e:
        leaves = e.exceptions if isinstance(e, ExceptionGroup) else [e]
        joined = [(type(x).__name__, "finished" in str(x)) for x in leaves]
    show("C", pending, scope.count, joined)

def other_thread(tag, make):
    got = {{}}
    def run(sch):
        try:
            got["r"] = ("returned", sx.sync_wait(make(sch)))
        except BaseException as e:
            got["r"] = ("raised", type(e).__name__, "finished" in str(e))
    t = []
    async def main():
        t.append(threading.Thread(target=run, args=(sx.trio_scheduler(),)))
        t[0].start()
        await wait_started(tag)
    trio.run(main)
    release(tag)
    t[0].join(30)
    show(tag, got.get("r", "still waiting"))

def leftovers():
    if KIND == "pool":
        return sorted(backend._call_slots), len(backend._call_queue)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        keys = [k for k in backend.client.futures if str(k).startswith("structexec-call")]
        if not keys:
            break
        time.sleep(0.05)
    return keys

if KIND == "pool":
    from structexec.backends import ProcessPoolBackend
    backend = ProcessPoolBackend(2)
else:
    import distributed
    from structexec.backends import DaskBackend
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       protocol="tcp", host="127.0.0.1", dashboard_address=None)
    backend = DaskBackend(cluster)
par = sx.parallel_scheduler(backend)
detached_coroutine()
crash("B1", ValueError("crash"), "nursery")
crash("B2", KeyboardInterrupt(), "nursery")
crash("B3", ValueError("crash"), "scope")
crash("B4", ValueError("crash"), "nursery", how="to_thread")
detached_sender_back_to_trio()
other_thread("D", lambda sch: call("D") | sx.continues_on(sch))
# (the timer first: it is registered before the call starts, so before the run ends)
other_thread("E", lambda sch: sx.when_all(sx.schedule_after(sch, 3600), call("E")))
show("left", leftovers())
backend._close()
if KIND != "pool":
    cluster.close()
show("closed")
"""

#: What each case prints: the waiter's outcome (on a worker: ``True``), then the case's
#: own facts. ``B4`` is ``trio.to_thread.run_sync`` in the same place, for comparison.
_COMMON = [
    "A ('value', True) 0",  # trio.run waited for the spawned coroutine; it got the value
    "B4 ('value', False) ['ValueError']",  # to_thread: waited for, value delivered
    "C 1 0 [('RuntimeError', True)]",  # run over: the scope keeps the clear error
    "D ('raised', 'RuntimeError', True)",
    "E ('returned', None)",  # stopped
    "closed",
]
_EXPECTED = {
    # The process pool waits for a running call (as to_thread does), then delivers it.
    "pool": [
        "B1 ('value', True) ['ValueError']",
        "B2 ('value', True) ['KeyboardInterrupt']",
        "B3 ('value', True) ['ValueError']",
        "left ([0, 1], 0)",  # every call slot free again, nothing queued
    ],
    # Dask abandons a running call (to_thread(abandon_on_cancel=True)): Cancelled at once.
    "dask": [
        "B1 ('Cancelled',) ['ValueError']",
        "B2 ('Cancelled',) ['KeyboardInterrupt']",
        "B3 ('Cancelled',) ['ValueError']",
        "left []",  # no call's key left on the cluster
    ],
}


@pytest.mark.parametrize("kind", ["pool", pytest.param("dask", marks=pytest.mark.dask)])
def test_the_run_ending_with_a_remote_call_in_flight_never_hangs_aborts_or_leaks(
    kind: str,
) -> None:
    if kind == "dask":
        pytest.importorskip("distributed", reason="needs the dask extra")
    r = run_child(_CHILD.format(kind=kind), timeout=100)
    assert not r.timed_out, str(r)
    assert "std::terminate" not in r.stderr, str(r)
    assert r.returncode == 0, str(r)
    lines = r.stdout.strip().splitlines()
    assert sorted(lines) == sorted(_COMMON + _EXPECTED[kind]), str(r)
