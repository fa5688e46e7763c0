"""Time, timeouts and racing with senders, under trio's MockClock.

Run: .venv/bin/python examples/timeouts.py

Three things a trio program does with ``fail_after``, ``move_on_after`` and a nursery race,
written as senders that run on any timed scheduler (docs/time.md):

1. a fan-out where each job has its own timeout;
2. a flaky call retried with exponential backoff;
3. a race between a fast mirror and a slow one: the first answer wins, the loser is stopped.

The trio clock is a ``trio.testing.MockClock`` with ``autojump_threshold=0``: virtual time
jumps ahead whenever every task is waiting, so the whole program runs in a fraction of a
second while the times it prints are the virtual ones.
"""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

import structexec as sx


def job(sch: Any, name: str, seconds: float) -> sx.Sender[str]:
    """A job that takes ``seconds`` of (virtual) time on ``sch``."""
    return sx.schedule_after(sch, seconds) | sx.then(lambda: f"{name} done after {seconds}s")


async def main() -> None:
    sch = sx.trio_scheduler()
    start = trio.current_time()

    # 1. Fan-out with per-job timeouts: each job gets 3 s; the slow one times out alone.
    async with sx.counting_scope() as scope:
        futures = [
            scope.spawn_future(
                job(sch, name, seconds)
                | sx.timeout(3.0)
                | sx.upon_error(lambda e: f"{type(e).__name__}")
            )
            for name, seconds in [("a", 1.0), ("b", 5.0), ("c", 2.0)]
        ]
        results = [await f for f in futures]
    print("1. fan-out:", results, f"(took {trio.current_time() - start:.0f}s)")

    # 2. Retry with backoff: the call fails twice, then succeeds; waits 0.5 s, then 1 s.
    attempts: list[float] = []

    def flaky() -> str:
        attempts.append(trio.current_time() - t0)
        if len(attempts) < 3:
            raise ConnectionError("try again")
        return "connected"

    t0 = trio.current_time()
    answer = await (
        sx.just() | sx.then(flaky) | sx.retry(attempts=5, delay=0.5, backoff=2.0)
    )
    print("2. retry:", answer, "attempts at", [f"{t:.1f}s" for t in attempts])

    # 3. A race: the fast mirror answers after 0.2 s; the slow one is stopped then.
    t0 = trio.current_time()
    winner = await sx.when_any(job(sch, "slow mirror", 10.0), job(sch, "fast mirror", 0.2))
    print("3. race:", winner, f"(at {trio.current_time() - t0:.1f}s)")


if __name__ == "__main__":
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
