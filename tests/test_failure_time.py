"""Unhappy paths of what time, racing and the host-less counting_scope added: a real SIGINT
while a timer, a timeout, a retry wait, a when_any race or a body shielded by
``request_stop()`` waits (each in a child process with a hard timeout: a hang fails the test),
and timers entered while already cancelled (docs/time.md, docs/scopes.md).
"""

from __future__ import annotations

import pytest
import trio
from _subproc import run_child

import structexec as sx

CASES = {
"stopped_body": """
import trio, structexec as sx
async def main():
    async with sx.counting_scope() as s:
        s.start_soon(trio.sleep_forever)
        await trio.testing.wait_all_tasks_blocked()
        s.request_stop()
        ready()
        await trio.sleep_forever()
import trio.testing
try:
    trio.run(main)
except BaseException as e:
    print("RAISED", type(e).__name__, leaf_names(e))
""",
"sync_wait_timer": """
import structexec as sx
s = sx.read_env(sx.get_scheduler) | sx.let_value(lambda sch: sx.schedule_after(sch, 3600))
ready()
try:
    sx.sync_wait(s)
except BaseException as e:
    print("RAISED", type(e).__name__)
""",
"trio_timeout": """
import trio, structexec as sx
async def main():
    ready()
    await (sx.schedule_after(sx.get_parallel_scheduler(), 3600) | sx.timeout(7200))
try:
    trio.run(main)
except BaseException as e:
    print("RAISED", type(e).__name__, leaf_names(e))
""",
"retry_wait": """
import trio, structexec as sx
def boom(): raise ConnectionError
async def main():
    ready()
    await (sx.just() | sx.then(boom) | sx.retry(delay=3600))
try:
    trio.run(main)
except BaseException as e:
    print("RAISED", type(e).__name__, leaf_names(e))
""",
"when_any_trio": """
import trio, structexec as sx
async def main():
    sch = sx.trio_scheduler()
    ready()
    await sx.when_any(sx.schedule_after(sch, 3600), sx.schedule_after(sch, 7200))
try:
    trio.run(main)
except BaseException as e:
    print("RAISED", type(e).__name__, leaf_names(e))
""",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_real_sigint_while_waiting_raises_keyboard_interrupt(name: str) -> None:
    r = run_child(CASES[name], timeout=20, sigint_after_ready=True, sigint_delay=0.3)
    assert not r.timed_out, r
    assert "RAISED" in r.stdout, r
    assert "KeyboardInterrupt" in r.stdout, r
    assert "TrioInternalError" not in r.stdout + r.stderr, r


async def test_a_timer_awaited_in_a_cancelled_scope_raises_cancelled_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    sch = sx.trio_scheduler()
    t0 = trio.current_time()
    with trio.CancelScope() as cs:
        cs.cancel()
        await sx.schedule_after(sch, 3600)
    assert cs.cancelled_caught and trio.current_time() == t0


@pytest.mark.parametrize(
    "build",
    [
        lambda sch: sx.schedule_after(sch, 3600) | sx.timeout(7200),
        lambda sch: sx.when_any(sx.schedule_after(sch, 3600), sx.schedule_after(sch, 7200)),
        lambda sch: sx.just() | sx.then(_boom) | sx.retry(delay=3600),
    ],
    ids=["timeout", "when_any", "retry"],
)
async def test_racing_senders_awaited_in_a_cancelled_scope_end_at_once(
    build: object, autojump_clock: trio.testing.MockClock
) -> None:
    sch = sx.trio_scheduler()
    t0 = trio.current_time()
    with trio.CancelScope() as cs:
        cs.cancel()
        await build(sch)  # type: ignore[operator]
    assert cs.cancelled_caught and trio.current_time() == t0


def _boom() -> None:
    raise ConnectionError
