"""What happens when things fail: timeouts, errors nobody awaited, stop requests.

Run it from the repository root: ``.venv/bin/python examples/failures.py``.

1. "Gather with a timeout": futures whose results are not awaited before the timeout do not
   hang the block; finished ones can be awaited afterwards.
2. An error of a future nobody awaited is reported by the block, in its ExceptionGroup.
3. ``request_stop()`` stops the work, not the body, and never fails the block.
4. Errors come out in strict exception groups, as from a trio nursery (``except*`` works).

docs/scopes.md "What happens when things fail" has the whole table (Ctrl-C included).
"""

from __future__ import annotations

import sys

import trio

import structexec as sx

if sys.version_info < (3, 11):
    from exceptiongroup import ExceptionGroup


async def job(i: int) -> int:
    await trio.sleep(0.01 * i)
    return i * i


async def gather_with_a_timeout() -> None:
    async with sx.counting_scope() as scope:
        futs = [scope.spawn_future(job(i)) for i in range(10)]
        got = []
        with trio.move_on_after(0.045):
            for f in futs:
                got.append(await f)
        print(f"1. awaited in time: {got}")
    # Leaving the block waited only for the jobs still running. Each future released the
    # scope when its job ended: the results stay in the futures, for after the block.
    print(f"1. after the block: futs[7] -> {await futs[7]}, futs[9] -> {await futs[9]}")


async def unconsumed_error() -> None:
    async def fails() -> None:
        raise ValueError("nobody awaited me")

    try:
        async with sx.counting_scope() as scope:
            scope.spawn_future(sx.just(1) | sx.then(lambda x: x + 1))  # fine, ignored
            fut = scope.spawn_future(fails())
            await trio.sleep(0.01)
    except ExceptionGroup as group:
        print(f"2. reported by the block: {group.exceptions[0]!r}")
    try:
        await fut
    except ValueError as e:
        print(f"2. and still in the future: {e!r}")


async def stop_the_work_not_the_body() -> None:
    stopped = []

    async def worker(n: int) -> None:
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            stopped.append(n)
            raise

    async with sx.counting_scope() as scope:
        for n in range(3):
            scope.start_soon(worker, n)
        await trio.sleep(0.01)
        scope.request_stop()
        await trio.sleep(0.01)  # the body goes on
        print("3. the body is still running after request_stop()")
    print(f"3. workers stopped: {sorted(stopped)}; the block raised nothing")


async def strict_groups() -> None:
    async def child() -> None:
        raise KeyError("child")

    try:
        async with sx.counting_scope() as scope:
            scope.start_soon(child)
            await trio.sleep_forever()  # cancelled when the child fails, as in a nursery
    except ExceptionGroup as group:  # (on Python >= 3.11: except* KeyError)
        keys = group.subgroup(KeyError)
        print(f"4. the block raised a group with {len(keys.exceptions)} KeyError(s)")


async def main() -> None:
    await gather_with_a_timeout()
    await unconsumed_error()
    await stop_the_work_not_the_body()
    await strict_groups()


if __name__ == "__main__":
    trio.run(main)
