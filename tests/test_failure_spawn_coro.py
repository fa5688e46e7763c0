"""Unhappy paths of the direct path of ``scope.spawn(coro)`` / ``scope.spawn_future(coro)``
inside ``async with counting_scope()`` (``_scopes/_spawn_coro.py``; [exec.spawn],
[exec.spawn.future]): a real SIGINT while the spawned coroutines wait (child processes with hard
timeouts: a hang fails instead of stalling), a scope entered while already cancelled, and the
spawn-site note on a ``SystemExit``. Both paths run (``FAST.spawn_coro`` on and off) and must
behave alike.
"""

from __future__ import annotations

import pytest
import trio
from _subproc import run_child

import structexec as sx
from structexec._core._fastpaths import FAST

SIGINT_CHILD = """
import trio, structexec as sx
from structexec._core._fastpaths import FAST
FAST.spawn_coro = {direct}
async def main():
    async with sx.counting_scope() as scope:
        scope.spawn(trio.sleep_forever())
        fut = scope.spawn_future(trio.sleep_forever())
        await trio.testing.wait_all_tasks_blocked()
        ready()
        await fut
import trio.testing
try:
    trio.run(main)
except BaseException as e:
    print("RAISED", type(e).__name__, leaf_names(e))
"""


@pytest.fixture(params=[True, False], ids=["direct", "general"])
def direct(request: pytest.FixtureRequest) -> object:
    old = FAST.spawn_coro
    FAST.spawn_coro = request.param
    yield request.param
    FAST.spawn_coro = old


@pytest.mark.parametrize("fast", [True, False], ids=["direct", "general"])
def test_real_sigint_while_spawned_coroutines_wait(fast: bool) -> None:
    r = run_child(SIGINT_CHILD.format(direct=fast), timeout=20, sigint_after_ready=True,
                  sigint_delay=0.3)
    assert not r.timed_out, r
    # trio's strict groups: the interrupt comes out of the scope as a nursery's does
    assert "RAISED BaseExceptionGroup ['KeyboardInterrupt']" in r.stdout, r
    assert "TrioInternalError" not in r.stdout + r.stderr, r


async def test_spawned_coroutines_in_a_scope_entered_while_cancelled(direct: bool) -> None:
    ran: list[str] = []

    async def work(tag: str) -> None:
        ran.append(tag)
        await trio.sleep_forever()

    with trio.CancelScope() as cs:
        cs.cancel()
        async with sx.counting_scope() as scope:
            scope.spawn(work("spawn"))
            fut = scope.spawn_future(work("future"))
    assert cs.cancelled_caught
    # the tasks were cancelled at their first checkpoint, as a nursery's children are
    assert sorted(ran) == ["future", "spawn"]
    assert scope.count == 0 and scope.state == "joined"
    with pytest.raises(sx.Stopped):
        await fut


async def test_system_exit_from_a_spawned_coroutine_carries_the_note(direct: bool) -> None:
    async def leaves() -> None:
        raise SystemExit(3)

    with pytest.RaisesGroup(SystemExit) as info:  # strict groups, as a nursery
        async with sx.counting_scope(name="exits") as scope:
            scope.spawn(leaves())  # <site>
    (e,) = info.value.exceptions
    assert e.args == (3,)
    notes = getattr(e, "__notes__", [])
    assert len(notes) == 1 and notes[0].endswith("into counting_scope 'exits'"), notes
