"""``sx.operation_tree()`` / ``sx.dump()`` show running sequences: a line per concurrent stage
(kind, ``max_concurrency``, items in flight and delivered) and the items running now
(docs/streams.md "Seeing a running pipeline", docs/debugging.md)."""

from __future__ import annotations

import io
import sys
import threading
from typing import Any

import pytest
import trio
import trio.testing

import structexec as sx


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


def _free_sequences(max_concurrency: int) -> list[sx.OperationInfo]:
    """The pipelines outside any scope whose first stage has this bound (other tests may
    have left abandoned ones to the cycle collector)."""
    return [
        op
        for s in sx.operation_tree()
        if s.kind == "sequences"
        for op in s.operations
        if op.children and op.children[0].max_concurrency == max_concurrency
    ]


async def test_an_awaited_pipeline_shows_its_stage_and_items(autojump_clock: Any) -> None:
    async def f(i: int) -> int:
        await trio.sleep(10)
        return i

    seen: list[Any] = []

    async def look() -> None:
        await trio.sleep(1)
        seen.append(_free_sequences(13))
        seen.append(sx.dump(io.StringIO()))

    async with trio.open_nursery() as n:
        n.start_soon(look)
        got = await sx.to_list(sx.iterate(range(20)) | sx.let_each(f, max_concurrency=13))
    assert sorted(got) == list(range(20))
    (seq,) = seen[0]
    assert seq.kind == "sequence"
    (stage,) = seq.children
    assert (stage.kind, stage.max_concurrency, stage.in_flight, stage.delivered) == (
        "let_each", 13, 13, 0,
    )
    assert [c.description for c in stage.children] == [f"#{i}" for i in range(13)]
    assert {c.kind for c in stage.children} == {"item"}
    assert "- let_each max_concurrency=13: 13 in flight, 0 delivered" in seen[1]
    assert _free_sequences(13) == []  # gone once it completed


async def test_a_spawned_two_stage_pipeline_paused_on_timers(autojump_clock: Any) -> None:
    sch = sx.trio_scheduler()
    done: list[Any] = []
    seq = (
        sx.iterate(range(20))
        | sx.let_each(lambda i: sx.just(i), max_concurrency=2)
        | sx.transform_each(
            sx.let_value(lambda i: sx.schedule_after(sch, 5) | sx.then(lambda: i)),
            max_concurrency=3,
        )
    )
    async with sx.counting_scope(name="pipe") as scope:
        scope.spawn(sx.to_list(seq) | sx.then(done.append))
        await trio.sleep(1)
        (sc,) = [s for s in sx.operation_tree() if s.name == "pipe"]
        (op,) = sc.operations
        first, second = op.children  # upstream first
        assert (first.kind, first.max_concurrency, first.in_flight) == ("let_each", 2, 2)
        # the first stage's items finished and wait for a slot downstream (backpressure)
        assert first.children == ()
        assert (second.kind, second.max_concurrency, second.in_flight, second.delivered) == (
            "transform_each", 3, 3, 0,
        )
        assert [c.state for c in second.children] == ["waiting on a timer, due in 4 s"] * 3
        text = sx.dump(io.StringIO())
        assert "- transform_each max_concurrency=3: 3 in flight, 0 delivered" in text
        assert "  - item #0: waiting on a timer, due in 4 s" in text
        await trio.sleep(5)  # the first 3 items were delivered, 3 more are running
        (sc,) = [s for s in sx.operation_tree() if s.name == "pipe"]
        second = sc.operations[0].children[1]
        assert (second.in_flight, second.delivered) == (3, 3)
    assert sorted(done[0]) == list(range(20))


async def test_chained_concurrent_stages_lose_no_item(autojump_clock: Any) -> None:
    # An upstream stage running items concurrently offers several results at once to a full
    # downstream stage: each waits for a slot (one was lost, and the pipeline hung).
    async def slow(i: int) -> int:
        await trio.sleep(1 + i % 3)
        return i

    with trio.fail_after(1000):
        got = await sx.to_list(
            sx.iterate(range(30))
            | sx.let_each(lambda i: sx.just(i), max_concurrency=4)
            | sx.let_each(slow, max_concurrency=2)
            | sx.transform_each(sx.then(lambda i: i * 2), max_concurrency=3)
        )
    assert sorted(got) == [2 * i for i in range(30)]


async def test_merge_each_fed_by_a_concurrent_stage_loses_no_item(autojump_clock: Any) -> None:
    # The same for merge_each: several inner sequences offered at once wait for a slot.
    async def slow(i: int) -> int:
        await trio.sleep(1 + i % 3)
        return i

    with trio.fail_after(1000):
        got = await sx.to_list(
            sx.iterate(range(30))
            | sx.let_each(
                lambda i: sx.just(sx.iterate([i, i]) | sx.let_each(slow, max_concurrency=2)),
                max_concurrency=4,
            )
            | sx.merge_each(max_concurrency=2)
        )
    assert sorted(got) == sorted(list(range(30)) * 2)


async def test_idle_workers_cancelled_from_outside_any_task(autojump_clock: Any) -> None:
    # let_each(async fn) workers wait idle for items; a trio cancellation reaches them from
    # the task that cancels (here the deadline, through the stop callback): the idle worker
    # is found by its entry (it looked for the current task, and the stop callback raised).
    async def slow(i: int) -> int:
        await trio.sleep(1000 if i == 0 else 1)
        return i

    with trio.move_on_after(5) as cs:
        await sx.to_list(
            sx.iterate(range(6))
            | sx.let_each(lambda i: sx.just(i), max_concurrency=4)
            | sx.let_each(slow, max_concurrency=8)
        )
    assert cs.cancelled_caught
    assert trio.current_time() == pytest.approx(5)


async def test_chained_concurrent_stages_stop_cleanly(autojump_clock: Any) -> None:
    sch = sx.trio_scheduler()
    seq = (
        sx.iterate(range(50))
        | sx.let_each(lambda i: sx.just(i), max_concurrency=3)
        | sx.transform_each(
            sx.let_value(lambda i: sx.schedule_after(sch, 5) | sx.then(lambda: i)),
            max_concurrency=2,
        )
    )
    with trio.fail_after(1000):
        async with sx.counting_scope() as scope:
            fut = scope.spawn_future(sx.to_list(seq))
            await trio.sleep(1)
            scope.request_stop()
    with pytest.raises(sx.Stopped):
        await fut


def test_snapshot_from_another_thread_while_a_pipeline_runs() -> None:
    stop = threading.Event()
    seen = threading.Event()  # a snapshot saw a stage with an item in flight
    errors: list[BaseException] = []
    counts: list[int] = []

    def snapper() -> None:
        try:
            while not stop.is_set():
                tree = sx.operation_tree()
                for s in tree:
                    for op in s.operations:
                        for st in op.children:
                            counts.append(st.in_flight or 0)
                            assert (st.in_flight or 0) <= 4
                            if st.in_flight:
                                seen.set()
                sx.dump(io.StringIO())
        except BaseException as e:  # pragma: no cover - the failure the test looks for
            errors.append(e)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    t = threading.Thread(target=snapper)
    t.start()
    try:
        par = sx.get_parallel_scheduler()

        def f(i: int) -> int:
            if i == 0:  # hold the first item until a snapshot has seen it in flight
                seen.wait(30)
            return i + 1

        for _ in range(30):
            (got,) = sx.sync_wait(
                sx.to_list(
                    sx.iterate(range(200))
                    | sx.transform_each(sx.continues_on(par) | sx.then(f), max_concurrency=4)
                    | sx.let_each(lambda i: sx.just(i), max_concurrency=2)
                )
            )
            assert sorted(got) == list(range(1, 201))
    finally:
        stop.set()
        t.join()
        sys.setswitchinterval(old)
    assert errors == []
    assert seen.is_set() and max(counts) >= 1  # some snapshots saw a stage running
