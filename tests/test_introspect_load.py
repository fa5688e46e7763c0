"""``sx.operation_tree()`` / ``sx.dump()`` under load (docs/debugging.md).

* A snapshot never fails on work that another thread is setting up or completing: the scan
  sees a spawn state, a future's state, an associate operation or a scope between its
  allocation and the end of its setup (its slots not all assigned yet), and skips it.
* A snapshot does not break the threads it runs beside: holding a list of the whole heap
  would hold a tuple another thread is still filling, and that thread then fails with
  ``SystemError`` when the tuple grows.
* A snapshot of many pending operations costs less per operation than spawning them.
"""

from __future__ import annotations

import io
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import trio

import structexec as sx
from structexec._scopes import _introspect, _introspect_records, _spawn
from structexec._scopes._associate import _AssociateOp
from structexec._scopes._spawn_coro import _CoroFutureState
from structexec._scopes._spawn_future import _FutureOp, _FutureSender, _FutureState


def _bare(cls: type) -> Any:
    """An instance whose ``__init__`` has not run yet (what another thread holds between
    allocating a state and assigning its slots)."""
    return object.__new__(cls)


def _spawn_state_with_scope_only(scope: Any) -> Any:
    st = _bare(_spawn._FastSpawnState)
    st._scope = scope  # spawn_fast assigns the scope first, the operation last
    return st


def _future_state_half_set_up(scope: Any) -> Any:
    fs = _bare(_FutureState)
    fs._token = scope  # __init__ assigns the token first
    fs._fast = True
    return fs


HALF_MADE: dict[str, Callable[[Any], Any]] = {
    "spawn state": lambda scope: _bare(_spawn._FastSpawnState),
    "spawn state with its scope only": _spawn_state_with_scope_only,
    "general spawn state": lambda scope: _bare(_spawn._ScopeSpawnState),
    "future state": lambda scope: _bare(_FutureState),
    "future state half set up": _future_state_half_set_up,
    "direct-path future state": lambda scope: _bare(_CoroFutureState),
    "future sender": lambda scope: _bare(_FutureSender),
    "future operation": lambda scope: _bare(_FutureOp),
    "associate operation": lambda scope: _bare(_AssociateOp),
    "counting_scope": lambda scope: _bare(sx.counting_scope),
    "simple_counting_scope": lambda scope: _bare(sx.simple_counting_scope),
}


@pytest.mark.parametrize("what", list(HALF_MADE))
async def test_a_snapshot_skips_work_that_is_being_set_up(what: str) -> None:
    """Each kind of object the scan looks for, caught between its allocation and the end of
    its setup: the tree is taken, lists the real work, and leaves the half-made object out."""
    async with sx.counting_scope(name="real") as scope:
        scope.spawn(sx.schedule_after(sx.trio_scheduler(), 100.0))
        half = HALF_MADE[what](scope)
        tree = sx.operation_tree()
        text = sx.dump(io.StringIO())
        (real,) = [s for s in tree if s.name == "real"]
        assert [(o.kind, o.description) for o in real.operations] == [
            ("spawn", "schedule_after(trio_scheduler, 100.0)")
        ]
        assert real.operations[0].state.startswith("waiting on a timer, due in ")
        assert "counting_scope 'real' [open, 1 associated, entered by trio task" in text
        assert [o.kind for o in scope.outstanding()] == ["spawn"]
        del half
        scope.request_stop()


#: How long the stress run may go on (it stops at the first failure).
STRESS_SECONDS = 2.0


def test_snapshots_while_four_threads_spawn() -> None:
    """Four threads spawn (``spawn``, ``sx.spawn``, ``spawn_future``, ``associate``) into a
    scope and complete their work while this thread takes trees and dumps, with the switch
    interval at 1 us: no snapshot fails, no spawning thread fails, nothing is lost."""
    scope = sx.simple_counting_scope(name="stress")
    tok = scope.get_token()
    stop = threading.Event()
    errors: list[BaseException] = []
    spawned = [0] * 4

    def noop() -> None:
        pass

    def spawner(k: int) -> None:
        try:
            while not stop.is_set():
                for _ in range(20):
                    scope.spawn(sx.just())
                    sx.spawn(sx.just() | sx.then(noop), tok)
                    sx.sync_wait(sx.spawn_future(sx.just(k) | sx.then(lambda v: v), tok))
                    sx.sync_wait(sx.associate(sx.just(), tok))
                    spawned[k] += 4
        except BaseException as e:  # reported by the test
            errors.append(e)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    threads = [threading.Thread(target=spawner, args=(k,)) for k in range(4)]
    snapshots = 0
    try:
        for t in threads:
            t.start()
        deadline = time.monotonic() + STRESS_SECONDS
        while time.monotonic() < deadline and not errors:
            try:
                tree = sx.operation_tree()
                sx.dump(io.StringIO())
            except BaseException as e:  # reported by the test
                errors.append(e)
                break
            assert any(s.name == "stress" for s in tree)
            snapshots += 1
    finally:
        sys.setswitchinterval(old)
        stop.set()
        for t in threads:
            t.join(10)
    assert not errors, errors
    assert snapshots > 0 and all(spawned)
    sx.sync_wait(scope.join())
    assert scope.count == 0


def test_the_fast_operation_info_is_an_operation_info() -> None:
    """The tree makes its operations' records without the dataclass's ``__init__`` (for
    speed): they are the same records, with every field."""
    fields: dict[str, Any] = dict(
        kind="spawn",
        description="just()",
        filename="app.py",
        lineno=3,
        state="running",
        thread="t",
        scheduler="trio_scheduler",
        trio_task="task",
        await_frame="f at app.py:4",
        stop_requested=True,
        scopes=(),
    )
    fast = _introspect_records.op_info(*fields.values())
    slow = sx.OperationInfo(**fields)
    assert type(fast) is sx.OperationInfo
    assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
    assert fast.spawned_at == "app.py:3"
    with pytest.raises(AttributeError):
        fast.state = "x"  # type: ignore[misc]  # still frozen


async def test_a_snapshot_costs_less_per_pending_operation_than_spawning_it() -> None:
    """20,000 pending timers: the tree costs less per operation than ``scope.spawn`` of the
    same timer (CPU time of this thread, best of three; before, it cost 1.5-1.8 times as
    much: each operation was walked twice and the collector ran full passes over the heap
    for the objects the tree allocates)."""
    n = 20_000
    ratios = []
    sch = sx.trio_scheduler()
    for _ in range(3):
        async with sx.counting_scope() as scope:
            t0 = time.thread_time()
            for _ in range(n):
                scope.spawn(sx.schedule_after(sch, 3600))
            spawn = time.thread_time() - t0
            await trio.lowlevel.checkpoint()
            sx.operation_tree()  # warm-up
            t0 = time.thread_time()
            tree = sx.operation_tree()
            snap = time.thread_time() - t0
            assert sum(len(s.operations) for s in tree) >= n
            del tree
            scope.request_stop()
        ratios.append(snap / spawn)
    assert min(ratios) < 1.1, ratios


async def test_snapshots_in_trio_while_four_threads_spawn_timers() -> None:
    """The same inside trio: four threads spawn timers of the trio scheduler (and plain
    work) into an entered ``counting_scope`` while a trio task takes trees and dumps; the
    timers complete on the trio thread, so snapshots see states being completed too."""
    errors: list[BaseException] = []
    stop = threading.Event()
    spawned = [0] * 4
    snapshots = 0
    old = sys.getswitchinterval()
    async with sx.counting_scope(name="trio-stress") as scope:
        sch = sx.trio_scheduler()

        def spawner(k: int) -> None:
            try:
                while not stop.is_set():
                    for _ in range(20):
                        scope.spawn(sx.schedule_after(sch, 0.0))
                        scope.spawn(sx.just(k) | sx.then(lambda v: None))
                        spawned[k] += 2
                    time.sleep(0.0005)  # let the trio thread run the due timers
            except BaseException as e:  # reported by the test
                errors.append(e)

        threads = [threading.Thread(target=spawner, args=(k,)) for k in range(4)]
        sys.setswitchinterval(1e-6)
        try:
            for t in threads:
                t.start()
            deadline = time.monotonic() + STRESS_SECONDS
            while time.monotonic() < deadline and not errors:
                try:
                    tree = sx.operation_tree()
                    sx.dump(io.StringIO())
                except BaseException as e:  # reported by the test
                    errors.append(e)
                    break
                assert any(s.name == "trio-stress" for s in tree)
                snapshots += 1
                await trio.sleep(0)
        finally:
            sys.setswitchinterval(old)
            stop.set()
            for t in threads:
                await trio.to_thread.run_sync(t.join, 10)
    assert not errors, errors
    assert snapshots > 0 and all(spawned)
    assert scope.count == 0


def test_a_snapshot_leaves_the_cycle_collector_as_it_found_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The collector is paused while a tree is built, then put back: on if it was on, off if
    the program had turned it off."""
    import gc

    scope = sx.simple_counting_scope(name="gc-state")
    seen: list[bool] = []
    real = _introspect._Builder.place

    def place(self: Any) -> None:
        seen.append(gc.isenabled())
        real(self)

    monkeypatch.setattr(_introspect._Builder, "place", place)
    assert gc.isenabled()
    sx.operation_tree()
    assert gc.isenabled()
    gc.disable()
    try:
        sx.dump(io.StringIO())
        assert not gc.isenabled()
    finally:
        gc.enable()
    assert seen == [False, False]  # paused while building, both times
    assert scope.state == "unused"
