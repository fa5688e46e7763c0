"""A concurrent crawler built on a counting_scope.

What it shows (docs/scopes.md):

* ``async with sx.counting_scope() as scope:`` used like a trio nursery;
* bounded concurrency: at most ``MAX_CONCURRENT`` fetches at a time (a ``trio.CapacityLimiter``);
* results collected with ``scope.spawn_future(...)``: the fetch starts at once, its result is
  awaited later, in whatever order suits the program;
* work that spawns more work (each page schedules its links) while the block is already
  exiting: leaving the block joins, it does not close;
* plain senders spawned next to trio tasks (a cheap progress counter that needs no task);
* ``scope.request_stop()`` cancelling the whole crawl: running fetches get ``trio.Cancelled``,
  queued ones never start.

Nothing touches the network: ``fetch`` sleeps for a latency derived from the URL, and the
program runs under ``trio.testing.MockClock(autojump_threshold=0)``, so the "seconds" below
are virtual and the whole run takes a fraction of a real second.

    python examples/crawler.py
"""

from __future__ import annotations

import random
import zlib

import trio
import trio.testing

import structexec as sx

MAX_CONCURRENT = 4
SITE_SIZE = 60


def make_site(seed: int = 7) -> dict[str, list[str]]:
    """A fake web site: page name -> the pages it links to."""
    rng = random.Random(seed)
    pages = [f"/page/{i}" for i in range(SITE_SIZE)]
    return {p: rng.sample(pages, k=rng.randint(1, 4)) for p in pages} | {"/": pages[:3]}


SITE = make_site()


class Fetcher:
    """Simulated HTTP client: latency from the URL, a limiter, and some bookkeeping."""

    def __init__(self) -> None:
        self.limiter = trio.CapacityLimiter(MAX_CONCURRENT)
        self.in_flight = 0
        self.peak = 0
        self.fetched = 0
        self.cancelled = 0
        self.cancelled_waiting = 0

    async def fetch(self, url: str) -> list[str]:
        try:
            await self.limiter.acquire()
        except trio.Cancelled:
            self.cancelled_waiting += 1  # stopped before it got a connection slot
            raise
        try:
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            try:
                await trio.sleep(0.1 + (zlib.crc32(url.encode()) % 7) / 10)  # 0.1 .. 0.7 s
                self.fetched += 1
                return SITE.get(url, [])
            except trio.Cancelled:
                self.cancelled += 1
                raise
            finally:
                self.in_flight -= 1
        finally:
            self.limiter.release()


async def fetch_some(urls: list[str]) -> None:
    """Part 1: fetch a fixed list concurrently, collect the results with spawn_future."""
    client = Fetcher()
    t0 = trio.current_time()
    async with sx.counting_scope() as scope:
        # Each spawn_future starts its fetch now (as a task of the scope) and returns a
        # single-use sender: awaiting it gives the result, or raises the fetch's error.
        futures = {url: scope.spawn_future(client.fetch(url)) for url in urls}
        sizes = {url: len(await fut) for url, fut in futures.items()}
    elapsed = trio.current_time() - t0
    print(
        f"part 1: fetched {client.fetched} pages in {elapsed:.1f} virtual s, "
        f"at most {client.peak} at a time (limit {MAX_CONCURRENT})"
    )
    for url in urls[:5]:
        print(f"  {url:10} -> {sizes[url]} links")


async def crawl(budget: float) -> None:
    """Part 2: follow links from "/" until the budget is spent, then cancel the rest."""
    client = Fetcher()
    seen: set[str] = set()
    progress = [0]

    def count_page() -> None:
        progress[0] += 1

    async def visit(scope: sx.counting_scope, url: str) -> None:
        links = await client.fetch(url)
        # A plain sender next to the trio tasks: no task, runs right here, counted by the
        # scope until it completes.
        scope.spawn(sx.just() | sx.then(count_page))
        for link in links:
            if link not in seen:
                seen.add(link)
                scope.start_soon(visit, scope, link)  # work spawning work

    t0 = trio.current_time()
    async with sx.counting_scope() as scope:
        seen.add("/")
        scope.start_soon(visit, scope, "/")
        await trio.sleep(budget)  # the body runs alongside the crawl
        print(
            f"  budget of {budget} virtual s spent: request_stop() with "
            f"{scope.count} jobs still in the scope"
        )
        scope.request_stop()  # every fetch in flight gets trio.Cancelled
        # Leaving the block waits until everything has finished or been cancelled.
    elapsed = trio.current_time() - t0
    print(
        f"part 2: crawled {client.fetched} pages ({progress[0]} counted by a plain "
        f"sender), {client.cancelled} fetches cancelled mid-flight, "
        f"{client.cancelled_waiting} stopped while waiting for a slot; "
        f"done after {elapsed:.1f} virtual s; scope is {scope.state}"
    )


async def main() -> None:
    await fetch_some([f"/page/{i}" for i in range(20)])
    await crawl(budget=2.0)


if __name__ == "__main__":
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
