"""A stream pipeline: read lines from a trio channel, fetch 4 at a time with a timeout and a
retry each, parse on the parallel scheduler, write the results into another channel.

    python examples/pipeline.py

Backpressure runs end to end: the task that feeds the input channel blocks while the pipeline
is full, and the pipeline waits while nobody reads the output channel. Ctrl-C stops it
cleanly: the feeding task, the fetches in flight and the parse jobs are stopped, every
``finally`` runs, and the program exits with KeyboardInterrupt (no orphaned task, no hang).
See docs/streams.md.
"""

from __future__ import annotations

import random
import sys

import trio

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup

import structexec as sx

CONCURRENCY = 4  # fetches in flight at most


async def fetch(url: str) -> str:
    """A flaky, sometimes slow download (a stand-in for an HTTP client call)."""
    await trio.sleep(random.choice([0.001, 0.002, 0.003, 1.0]))  # 1.0: too slow, times out
    if random.random() < 0.2:
        raise ConnectionError(f"{url}: connection reset")
    return f"{url} 200 {len(url) * 100}"


def parse(body: str) -> tuple[str, int]:
    """CPU work: runs on the parallel scheduler's threads."""
    url, _status, size = body.split()
    return url, int(size)


def fetch_with_retry(url: str) -> sx.Sender[str]:
    # `just(url) | let_value(fetch)` calls fetch afresh on every attempt.
    attempt = sx.just(url) | sx.let_value(fetch) | sx.timeout(0.1)
    return sx.retry(attempt, attempts=10)


async def main() -> None:
    random.seed(7)
    par = sx.get_parallel_scheduler()
    lines_in, lines_out = trio.open_memory_channel[str](0)
    results_in, results_out = trio.open_memory_channel[tuple[str, int]](0)

    async def feed() -> None:
        async with lines_in:
            for i in range(20):
                await lines_in.send(f"https://example.org/page/{i}")

    pipeline = (
        sx.from_channel(lines_out)
        | sx.let_each(fetch_with_retry, max_concurrency=CONCURRENCY)
        | sx.transform_each(sx.continues_on(par) | sx.then(parse), max_concurrency=2)
    )

    async def run_pipeline() -> None:
        # Awaiting the consumer sender runs the whole pipeline; it closes results_in at the end.
        await sx.into_channel(pipeline, results_in)

    total = 0
    async with trio.open_nursery() as nursery:
        nursery.start_soon(feed)
        nursery.start_soon(run_pipeline)
        async with results_out:
            async for url, size in results_out:
                total += 1
                print(f"{url}: {size} bytes")
    print(f"done: {total} pages fetched, parsed and written")


if __name__ == "__main__":
    try:
        trio.run(main)
    except BaseException as exc:  # Ctrl-C: KeyboardInterrupt, inside the nursery's group
        leaves = exc.exceptions if isinstance(exc, BaseExceptionGroup) else (exc,)
        if not all(isinstance(e, KeyboardInterrupt) for e in leaves):
            raise
        print("interrupted: the pipeline stopped cleanly")
