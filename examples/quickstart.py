"""structexec quick start: senders in trio code, in five short steps.

1. Describe work as a sender (a pipeline) and `await` it in a trio task.
2. Run coroutines concurrently with `sx.when_all` (they are senders too).
3. Cancellation, trio -> structexec: a trio cancel scope stops the awaited work.
4. Cancellation, structexec -> trio: a stop request cancels the trio task hosting a coroutine.
5. Hop between threads and back to the trio thread with schedulers.
6. A counting_scope used as a nursery: spawn work, get results back with spawn_future, run
   CPU-bound work on the parallel scheduler, and cancel the whole subtree with request_stop.

Run: python examples/quickstart.py   (takes well under a second)
"""

from __future__ import annotations

import threading

import trio

import structexec as sx


async def fetch(name: str, delay: float) -> str:
    """An ordinary trio coroutine."""
    await trio.sleep(delay)
    return f"<{name}>"


async def slow_download() -> str:
    try:
        await trio.sleep(60)
        return "finished"
    finally:
        print("   slow_download: unwound (its finally block ran)")


async def main() -> None:
    # 1. A sender describes work; nothing runs until it is awaited (or started).
    pipeline = sx.just(6) | sx.then(lambda x: x * 7) | sx.then(lambda x: f"answer={x}")
    print("1. await pipeline        ->", await pipeline)

    # 2. Coroutine objects are senders: when_all runs them concurrently, like a nursery,
    #    and returns their results in argument order.
    a, b = await sx.when_all(fetch("a", 0.02), fetch("b", 0.01))
    print("2. when_all(coroutines)  ->", a, b)

    # 3. trio -> structexec: when the trio cancel scope expires, the awaited operation gets a
    #    stop request; the await waits until the work has really stopped, then trio's own
    #    Cancelled unwinds to the scope, as for any trio call.
    with trio.move_on_after(0.05) as scope:
        await sx.when_all(fetch("c", 0.01), slow_download())
    print("3. trio cancel scope     -> cancelled_caught =", scope.cancelled_caught)

    # 4. structexec -> trio: a stop request (from any thread) cancels the trio task that runs
    #    a coroutine sender; the sender then completes "stopped" (awaiting it raises
    #    sx.Stopped, a BaseException, because the stop did not come from our own scope).
    source = sx.inplace_stop_source()
    work = sx.write_env(slow_download(), sx.prop(sx.get_stop_token, source.get_token()))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.to_thread.run_sync, stop_soon, source)
        try:
            await work
        except sx.Stopped:
            print("4. stop request          -> coroutine cancelled, await raised sx.Stopped")

    # 5. Where work runs: a run_loop driven by a worker thread, then back to trio.
    loop = sx.run_loop()
    worker = threading.Thread(target=loop.run, name="worker")
    worker.start()
    try:
        hop = (
            sx.starts_on(loop.get_scheduler(), sx.just() | sx.then(_thread_name))
            | sx.continues_on(sx.trio_scheduler())
            | sx.then(lambda there: f"ran on {there!r}, came back to {_thread_name()!r}")
        )
        print("5. starts_on/continues_on ->", await hop)
    finally:
        loop.finish()
        worker.join()

    # 6. Scopes: a counting_scope is a nursery that also takes senders and hands results back.
    #    request_stop() cancels everything in it (hosted trio tasks get Cancelled).
    async with sx.counting_scope() as scope:
        scope.start_soon(slow_download)  # plain trio work, as in a nursery
        cpu = scope.spawn_future(  # CPU work on the shared thread pool, result via a future
            sx.schedule(sx.get_parallel_scheduler()) | sx.then(lambda: sum(range(10**6)))
        )
        print("6. spawn_future(parallel) ->", await cpu)
        scope.request_stop()  # slow_download is cancelled; leaving the block joins
    print("   scope joined: everything in it finished or was cancelled")


def stop_soon(source: sx.inplace_stop_source) -> None:
    """Runs on a worker thread: wait a moment, then request stop."""
    threading.Event().wait(0.02)
    source.request_stop()


def _thread_name() -> str:
    return threading.current_thread().name


if __name__ == "__main__":
    trio.run(main)
