"""Unhappy paths of what time, racing and the host-less counting_scope added: a real SIGINT
while a timer, a timeout, a retry wait, a when_any race or a body shielded by
``request_stop()`` waits (each in a child process with a hard timeout: a hang fails the test),
and timers entered while already cancelled (docs/time.md, docs/scopes.md).
"""

from __future__ import annotations

import sys

import pytest
import trio
import trio.testing
from _helpers import cyclic_garbage_of
from _subproc import HangGuard, run_child

import structexec as sx

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup

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
try:
    ready()  # inside the try: a late start of this line must not meet the signal outside it
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


# ------------------------------------- a BaseException raised on a stop path (upon_stopped)

_STOP_PATH_CHILD = """
import trio, trio.testing, structexec as sx

def on_stop():
    raise KeyboardInterrupt("on_stop")

def work(case, sch):
    if case == "timer":
        return sx.schedule_after(sch, 3600) | sx.upon_stopped(on_stop)
    if case == "timer_at":
        return sx.schedule_at(sch, sx.now(sch) + 3600) | sx.upon_stopped(on_stop)
    if case == "parallel_timer":
        par = sx.get_parallel_scheduler()
        return sx.schedule_after(par, 3600) | sx.upon_stopped(on_stop)
    if case == "coroutine":
        return trio.sleep_forever() | sx.upon_stopped(on_stop)
    if case == "coroutine_then":
        return trio.sleep(0) | sx.then(on_stop)
    if case == "let_stopped":
        return sx.schedule_after(sch, 3600) | sx.let_stopped(lambda: sx.just() | sx.then(on_stop))
    if case == "timeout_inner":
        return sx.timeout(sx.schedule_after(sch, 3600) | sx.upon_stopped(on_stop), 1800)
    if case == "timeout_outer":
        return sx.timeout(sx.schedule_after(sch, 3600), 1800) | sx.upon_stopped(on_stop)
    if case == "when_any_loser":
        return sx.when_any(
            sx.schedule_after(sch, 3600) | sx.upon_stopped(on_stop), sx.schedule(sch)
        )
    if case == "when_any":
        return sx.when_any(sx.schedule_after(sch, 3600), sx.schedule_after(sch, 3000)) | (
            sx.upon_stopped(on_stop)
        )
    if case == "stop_when":
        return sx.stop_when(
            sx.schedule_after(sch, 3600) | sx.upon_stopped(on_stop), sx.schedule(sch)
        )

async def main(case, how):
    sch = sx.trio_scheduler()
    async with sx.counting_scope() as scope:
        if how == "spawn":
            scope.spawn(work(case, sch))
        else:
            fut = scope.spawn_future(work(case, sch))
        await trio.testing.wait_all_tasks_blocked()
        scope.request_stop()  # must not raise: the scope raises it at its exit
        print(how, "request_stop returned", flush=True)
        await trio.sleep_forever()  # cancelled by the interrupt (or the stop)

for how in ("spawn", "spawn_future"):
    try:
        trio.run(main, CASE, how)
        print(how, "returned")
    except BaseException as e:
        print(how, leaf_names(e), flush=True)
"""

_STOP_PATH_CASES = [
    "timer",
    "timer_at",
    "parallel_timer",
    "coroutine",
    "coroutine_then",
    "let_stopped",
    "timeout_inner",
    "timeout_outer",
    "when_any_loser",
    "when_any",
    "stop_when",
]


@pytest.mark.parametrize("case", _STOP_PATH_CASES)
def test_a_keyboard_interrupt_from_a_stop_path_ends_the_work_and_leaves_the_block(
    case: str,
) -> None:
    """docs/time.md "Timed schedulers", docs/scopes.md "What happens when things fail": a
    ``KeyboardInterrupt`` raised by user code on the stop path of spawned work (an
    ``upon_stopped`` function after a pending timer that ``request_stop()`` takes out, after a
    coroutine cancelled by it, the loser of a ``when_any``, the inner or outer side of a
    ``timeout``, ...) ends that work: its association is released, ``request_stop()`` returns,
    and the block raises the interrupt at its exit, as a nursery raises a child's. It used to
    escape from ``request_stop()`` with the operation never completing: ``scope.count`` stayed
    1 and the exit waited forever (shielded: no deadline ended it)."""
    r = run_child(f"CASE = {case!r}\n" + _STOP_PATH_CHILD, timeout=30)
    assert not r.timed_out, str(r)
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    assert lines[-1] == "spawn_future ['KeyboardInterrupt']", str(r)
    assert lines[0] in ("spawn request_stop returned", "spawn ['KeyboardInterrupt']"), str(r)
    assert "spawn ['KeyboardInterrupt']" in lines, str(r)
    assert r.returncode == 0, str(r)


_STOP_PATH_CONSUMERS = {
    # A stop from another thread while sync_wait waits: sync_wait raises it.
    "sync_wait": """
import threading, structexec as sx
src = sx.inplace_stop_source()
work = (sx.read_env(sx.get_scheduler)
        | sx.let_value(lambda s: sx.schedule_after(s, 3600))
        | sx.upon_stopped(on_stop))
t = threading.Thread(target=lambda: (started.wait(), src.request_stop()))
started = threading.Event()
t.start()
try:
    sx.sync_wait(sx.write_env(sx.just() | sx.then(started.set) | sx.let_value(lambda: work),
                              sx.prop(sx.get_stop_token, src.get_token())))
    print("returned")
except BaseException as e:
    print(leaf_names(e))
t.join()
""",
    # The awaiting trio task is cancelled: the await raises it (it used to crash trio).
    "await": """
import trio, structexec as sx
async def main():
    with trio.move_on_after(0.01):
        await (sx.schedule_after(sx.trio_scheduler(), 3600) | sx.upon_stopped(on_stop))
    print("not reached")
try:
    trio.run(main)
    print("returned")
except BaseException as e:
    print(leaf_names(e))
""",
    # Outside `async with` nobody waits to raise it: request_stop() raises it, the work has
    # ended (count 0) and join() completes.
    "outside_async_with": """
import trio, structexec as sx
async def main():
    for kind in (sx.counting_scope, sx.simple_counting_scope):
        scope = kind()
        src = sx.inplace_stop_source()
        sx.spawn(sx.schedule_after(sx.trio_scheduler(), 3600) | sx.upon_stopped(on_stop),
                 scope.get_token(), sx.prop(sx.get_stop_token, src.get_token()))
        try:
            src.request_stop()
        except BaseException as e:
            print(leaf_names(e), scope.count)
        await scope.join()
trio.run(main)
print("joined")
""",
}

_STOP_PATH_EXPECTED = {
    "sync_wait": ["['KeyboardInterrupt']"],
    "await": ["['KeyboardInterrupt']"],
    "outside_async_with": ["['KeyboardInterrupt'] 0", "['KeyboardInterrupt'] 0", "joined"],
}


@pytest.mark.parametrize("consumer", list(_STOP_PATH_CONSUMERS))
def test_a_keyboard_interrupt_from_a_timers_stop_path_reaches_its_consumer(consumer: str) -> None:
    """The same ``upon_stopped`` raising ``KeyboardInterrupt`` after a pending timer, with
    other consumers: ``sync_wait`` stopped from another thread raises it (it used to wait
    forever), a cancelled ``await`` raises it (it used to crash trio with
    ``TrioInternalError``), and outside ``async with`` ``request_stop()`` raises it with the
    work ended (it used to leave the association held: ``join()`` never completed)."""
    code = 'def on_stop():\n    raise KeyboardInterrupt("on_stop")\n'
    r = run_child(code + _STOP_PATH_CONSUMERS[consumer], timeout=30)
    assert not r.timed_out, str(r)
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    assert lines == _STOP_PATH_EXPECTED[consumer], str(r)
    assert r.returncode == 0, str(r)


@sx.task
async def _task_raising_ki() -> None:
    await trio.sleep(0)
    raise KeyboardInterrupt("task")


async def _coro_raising_ki() -> None:
    await trio.sleep(0)
    raise KeyboardInterrupt("coroutine")


def _raise_ki() -> None:
    raise KeyboardInterrupt("on_stop")


@pytest.mark.parametrize(
    "case", ["timer_stop", "coroutine_stop", "future_of_task", "future_of_coroutine"]
)
async def test_interrupt_paths_leave_no_cyclic_garbage(case: str) -> None:
    """The operations a ``KeyboardInterrupt`` ends on these paths (a timer's and a
    coroutine's stopped completion, the work of ``spawn_future``) die by reference counting:
    no cyclic garbage of the library's objects (checked with ``gc.DEBUG_SAVEALL``). (That
    they end at all is checked in child processes: ``future_of_task`` used to abort, the stop
    paths to hang.)"""
    guard = HangGuard(trio.lowlevel.current_trio_token(), 20.0)
    sch = sx.trio_scheduler()

    async def once() -> None:
        with pytest.raises(BaseExceptionGroup) as info:
            async with sx.counting_scope() as scope:
                if case == "timer_stop":
                    scope.spawn(sx.schedule_after(sch, 3600) | sx.upon_stopped(_raise_ki))
                elif case == "coroutine_stop":
                    scope.spawn(trio.sleep_forever() | sx.upon_stopped(_raise_ki))  # noqa: ASYNC105
                elif case == "future_of_task":
                    await scope.spawn_future(_task_raising_ki())
                else:
                    await scope.spawn_future(_coro_raising_ki())
                await trio.testing.wait_all_tasks_blocked()
                scope.request_stop()
                await trio.sleep_forever()
        assert [type(e) for e in info.value.exceptions] == [KeyboardInterrupt]
        del info

    terminated: list[str] = []  # a regression must not abort the suite's process
    previous = sx.set_terminate_handler(lambda reason, exc: terminated.append(reason))
    try:
        await once()
        assert await cyclic_garbage_of(once) == 0
    finally:
        sx.set_terminate_handler(previous)
        guard.close()
    assert terminated == []
