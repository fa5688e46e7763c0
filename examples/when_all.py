"""when_all: run senders concurrently and wait for all of them.

`sx.when_all(a, b, c)` is the sender version of a trio nursery whose tasks each fill a result
slot: it starts every child, waits until all of them have finished, and then

* sends all their values, in argument order, if every child succeeded;
* otherwise reports the *first* error (after asking the other children to stop), or
  "stopped" if a child was stopped and none failed.

"Asking to stop" is a stop request on a stop token that `when_all` gives its children; work
that checks the token (or runs on a scheduler that does) winds down early, and `when_all`
still waits for it, so nothing outlives the `when_all`.

Run: python examples/when_all.py
"""

from __future__ import annotations

import threading
import time
from typing import Any

import trio

import structexec as sx


class Worker:
    """A thread running a `run_loop`: a scheduler whose work runs on that thread."""

    def __init__(self, name: str) -> None:
        self.loop = sx.run_loop()
        self.thread = threading.Thread(target=self.loop.run, name=name)
        self.thread.start()

    def scheduler(self) -> Any:
        return self.loop.get_scheduler()

    def close(self) -> None:
        self.loop.finish()
        self.thread.join()


def blocking_fetch(name: str, seconds: float) -> str:
    time.sleep(seconds)  # stands in for blocking I/O
    return f"{name} ({threading.current_thread().name})"


def cooperative_job(token: Any) -> str:
    """Works in small steps and checks its stop token between them."""
    for step in range(100):
        if token.stop_requested():
            return f"gave up at step {step}: a sibling failed"
        time.sleep(0.005)
    return "finished all 100 steps"


def fails_soon() -> None:
    time.sleep(0.02)
    raise ConnectionError("the server went away")


def demo_sync_wait() -> None:
    print("-- sync_wait --")
    # Values are concatenated in argument order.
    print("values:", sx.sync_wait(sx.when_all(sx.just(1), sx.just(2, 3), sx.just())))

    a, b = Worker("worker-a"), Worker("worker-b")
    try:
        # Two blocking calls on two threads: about 0.1 s in total, not 0.2 s.
        t0 = time.perf_counter()
        both = sx.when_all(
            sx.starts_on(a.scheduler(), sx.just("alpha", 0.1) | sx.then(blocking_fetch)),
            sx.starts_on(b.scheduler(), sx.just("beta", 0.1) | sx.then(blocking_fetch)),
        )
        result = sx.sync_wait(both)
        print(f"concurrent: {result} in {time.perf_counter() - t0:.2f} s")

        # One child fails: when_all requests stop, the cooperative sibling notices and
        # returns early, when_all waits for it and then raises the first error.
        log: list[str] = []
        job = sx.read_env(sx.get_stop_token) | sx.then(cooperative_job) | sx.then(log.append)
        t0 = time.perf_counter()
        try:
            sx.sync_wait(
                sx.when_all(
                    sx.starts_on(a.scheduler(), job),
                    sx.starts_on(b.scheduler(), sx.just() | sx.then(fails_soon)),
                )
            )
        except ConnectionError as e:
            print(f"error: {e!r} after {time.perf_counter() - t0:.2f} s; sibling: {log[0]}")

        # Keep going after a failure: turn errors and stops into values per child.
        safe = sx.when_all(
            sx.just("ok"),
            sx.just() | sx.then(fails_soon) | sx.upon_error(lambda e: f"failed: {e}"),
            sx.just_stopped() | sx.upon_stopped(lambda: "was stopped"),
        )
        print("each child handled:", sx.sync_wait(safe))
    finally:
        a.close()
        b.close()


async def fetch(name: str, seconds: float) -> str:
    await trio.sleep(seconds)
    return name.upper()


async def demo_trio() -> None:
    print("-- trio --")
    # Coroutines are senders too; awaiting when_all gives the tuple of results.
    print("awaited:", await sx.when_all(fetch("a", 0.02), fetch("b", 0.01), sx.just(42)))

    # A trio cancellation of the awaiting task stops every child.
    with trio.move_on_after(0.05) as scope:
        await sx.when_all(fetch("slow", 10), fetch("slower", 20))
    print("cancelled by trio:", scope.cancelled_caught)


if __name__ == "__main__":
    demo_sync_wait()
    trio.run(demo_trio)
