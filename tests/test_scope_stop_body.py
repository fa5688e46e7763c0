"""``counting_scope.request_stop()`` stops the hosted work and not the ``async with`` body,
yet the body stays cancellable by the enclosing code ([exec.scope.counting]; docs/scopes.md
"The nursery face").

The hosted tasks live in a nursery opened by the task that entered the block (no task in
between, as trio's own task tree), so the body runs inside that nursery: a stop request
shields the body before it cancels the nursery, and a watcher task, started only then,
forwards an enclosing cancellation to the shielded body. These tests pin that the body keeps
running after a stop, that every kind of enclosing cancellation still reaches it, that
``fail_after``/``move_on_after`` report as they would around a nursery, and that no task is
left behind.
"""

from __future__ import annotations

import threading

import pytest
import trio
import trio.testing

import structexec as sx


class _Spawned(trio.abc.Instrument):
    def __init__(self) -> None:
        self.spawned: list[str] = []
        self.exited: list[str] = []

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.spawned.append(task.name)

    def task_exited(self, task: trio.lowlevel.Task) -> None:
        self.exited.append(task.name)


async def _sleeper(record: list[str], name: str) -> None:
    try:
        await trio.sleep_forever()
    except trio.Cancelled:
        record.append(f"{name} cancelled")
        raise


async def test_request_stop_cancels_children_and_the_body_runs_on(
    autojump_clock: trio.testing.MockClock,
) -> None:
    record: list[str] = []
    async with sx.counting_scope() as scope:
        scope.start_soon(_sleeper, record, "child")
        await trio.testing.wait_all_tasks_blocked()
        scope.request_stop()
        await trio.sleep(1)  # the body is not cancelled by its own scope's stop
        record.append("body slept")
        await trio.lowlevel.checkpoint()
        record.append("body done")
    assert record == ["child cancelled", "body slept", "body done"]


async def test_deadline_reaches_a_body_shielded_by_a_stop(
    autojump_clock: trio.testing.MockClock,
) -> None:
    record: list[str] = []
    with trio.move_on_after(5) as outer:
        async with sx.counting_scope() as scope:
            scope.start_soon(_sleeper, record, "child")
            await trio.testing.wait_all_tasks_blocked()
            scope.request_stop()
            try:
                await trio.sleep_forever()
            except trio.Cancelled:
                record.append("body cancelled")
                raise
    assert outer.cancelled_caught
    assert trio.current_time() == pytest.approx(5)
    assert record == ["child cancelled", "body cancelled"]


async def test_fail_after_raises_too_slow_after_a_stop(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with pytest.raises(trio.TooSlowError):
        with trio.fail_after(2):
            async with sx.counting_scope() as scope:
                scope.start_soon(trio.sleep_forever)
                await trio.testing.wait_all_tasks_blocked()
                scope.request_stop()
                await trio.sleep(10)


async def test_explicit_enclosing_cancel_reaches_a_shielded_body() -> None:
    record: list[str] = []
    with trio.CancelScope() as outer:
        async with trio.open_nursery() as n:

            async def cancel_later() -> None:
                await trio.testing.wait_all_tasks_blocked()
                outer.cancel()

            async with sx.counting_scope() as scope:
                scope.start_soon(_sleeper, record, "child")
                await trio.testing.wait_all_tasks_blocked()
                scope.request_stop()
                n.start_soon(cancel_later)
                try:
                    await trio.sleep_forever()
                except trio.Cancelled:
                    record.append("body cancelled")
                    raise
    assert outer.cancelled_caught
    assert record == ["child cancelled", "body cancelled"]


async def test_cancel_scope_cancel_after_a_stop_cancels_the_body() -> None:
    record: list[str] = []
    async with trio.open_nursery() as n:
        async with sx.counting_scope() as scope:
            scope.request_stop()

            async def cancel_later() -> None:
                await trio.testing.wait_all_tasks_blocked()
                scope.cancel_scope.cancel()

            n.start_soon(cancel_later)
            try:
                await trio.sleep_forever()
            except trio.Cancelled:
                record.append("body cancelled")
                raise
        record.append("after the block")
    assert scope.cancel_scope.cancelled_caught
    assert record == ["body cancelled", "after the block"]


async def test_stop_from_another_thread_leaves_the_body_running() -> None:
    record: list[str] = []
    async with sx.counting_scope() as scope:
        scope.start_soon(_sleeper, record, "child")
        await trio.testing.wait_all_tasks_blocked()
        t = threading.Thread(target=scope.request_stop)
        t.start()
        await trio.to_thread.run_sync(t.join)
        await trio.testing.wait_all_tasks_blocked()
        record.append("body after the stop")
        await trio.lowlevel.checkpoint()
    assert record == ["child cancelled", "body after the stop"]


async def test_no_task_without_a_stop_one_watcher_with_one() -> None:
    async def child() -> None:
        await trio.lowlevel.checkpoint()

    counter = _Spawned()
    trio.lowlevel.add_instrument(counter)
    try:
        async with sx.counting_scope() as scope:
            scope.start_soon(child)
        no_stop = list(counter.spawned)
        counter.spawned.clear()
        task = trio.lowlevel.current_task()
        before = list(task.child_nurseries)
        async with sx.counting_scope() as scope:
            scope.start_soon(trio.sleep_forever)
            await trio.testing.wait_all_tasks_blocked()
            scope.request_stop()
            await trio.testing.wait_all_tasks_blocked()
            # The stop started the watcher; the child has ended.
            assert len(scope.child_tasks) == 0
        assert task.child_nurseries == before
    finally:
        trio.lowlevel.remove_instrument(counter)
    assert len(no_stop) == 1 and "child" in no_stop[0]
    assert len(counter.spawned) == 2
    assert "counting_scope._watch" in counter.spawned[1]
    assert sorted(counter.exited) == sorted(no_stop + counter.spawned)


async def test_stop_after_the_body_left_starts_no_watcher() -> None:
    counter = _Spawned()
    release = trio.Event()

    async def stubborn() -> None:
        with trio.CancelScope(shield=True):
            await release.wait()

    trio.lowlevel.add_instrument(counter)
    try:
        async with trio.open_nursery() as n, sx.counting_scope() as scope:
            scope.start_soon(stubborn)

            async def stop_then_release() -> None:
                await trio.testing.wait_all_tasks_blocked()
                scope.request_stop()
                release.set()

            n.start_soon(stop_then_release)
    finally:
        trio.lowlevel.remove_instrument(counter)
    assert not any("counting_scope._watch" in name for name in counter.spawned)


async def test_enclosing_cancel_while_exit_waits_after_a_stop_still_propagates() -> None:
    # The exit's join wait is inside the hosted tasks' nursery, which the stop cancelled: a
    # Cancelled there is ambiguous, so the block checks once it is outside that nursery. As a
    # nursery's exit, the block raises none of its own (its one task is shielded and never
    # sees the cancellation): the code after it runs, and its next checkpoint raises it.
    release = trio.Event()
    record: list[str] = []

    async def stubborn() -> None:
        with trio.CancelScope(shield=True):
            await release.wait()

    outer = trio.CancelScope()
    scope = sx.counting_scope()

    async def stop_cancel_release() -> None:  # outside `outer`: not cancelled with it
        await trio.testing.wait_all_tasks_blocked()
        scope.request_stop()
        await trio.testing.wait_all_tasks_blocked()
        outer.cancel()
        await trio.testing.wait_all_tasks_blocked()
        release.set()

    async with trio.open_nursery() as n:
        n.start_soon(stop_cancel_release)
        with outer:
            async with scope:
                scope.start_soon(stubborn)
            record.append("after the block")
            await trio.lowlevel.checkpoint()
            pytest.fail("the enclosing cancellation must not be lost")  # pragma: no cover
    assert outer.cancelled_caught
    assert record == ["after the block"]


async def test_body_exception_after_a_stop_comes_out_in_the_group() -> None:
    with pytest.RaisesGroup(ValueError):
        async with sx.counting_scope() as scope:
            scope.start_soon(trio.sleep_forever)
            await trio.testing.wait_all_tasks_blocked()
            scope.request_stop()
            await trio.lowlevel.checkpoint()
            raise ValueError


async def test_child_error_after_a_stop_cancels_the_shielded_body() -> None:
    # A stop shields the body from the hosted tasks' nursery; an error of spawned work
    # still cancels the body, as a failing child cancels a nursery's body.
    record: list[str] = []

    async def fail_later() -> None:
        with trio.CancelScope(shield=True):
            await trio.testing.wait_all_tasks_blocked()
        raise KeyError("late")

    with pytest.RaisesGroup(KeyError):
        async with sx.counting_scope() as scope:
            scope.start_soon(fail_later)
            scope.request_stop()
            try:
                await trio.sleep_forever()
            except trio.Cancelled:
                record.append("body cancelled")
                raise
    assert record == ["body cancelled"]


async def test_ctrl_c_style_interrupt_after_a_stop_reaches_the_body() -> None:
    # A KeyboardInterrupt raised by a hosted task cancels the body even when a stop has
    # shielded it; the block raises the interrupt once everything has finished.
    record: list[str] = []

    async def interrupt() -> None:
        with trio.CancelScope(shield=True):
            await trio.testing.wait_all_tasks_blocked()
        raise KeyboardInterrupt

    with pytest.RaisesGroup(KeyboardInterrupt):
        async with sx.counting_scope() as scope:
            scope.start_soon(interrupt)
            scope.request_stop()
            try:
                await trio.sleep_forever()
            except trio.Cancelled:
                record.append("body cancelled")
                raise
    assert record == ["body cancelled"]
