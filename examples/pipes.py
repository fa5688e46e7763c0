"""Pipes: build work step by step with `|`, and reuse steps as closures.

A sender describes work; nothing runs until it is started (here by `sx.sync_wait`, which
runs it on the calling thread and returns the tuple of values, or `None` if it was stopped,
or raises its error). Each adaptor wraps the sender to its left:

    sx.just(3) | sx.then(f) | sx.then(g)      is      sx.then(sx.then(sx.just(3), f), g)

An adaptor called without a sender is a *closure*; closures compose with `|` into reusable
steps, which is how you build your own vocabulary.

Run: python examples/pipes.py
"""

from __future__ import annotations

import threading
from typing import Any

import structexec as sx


def parse(text: str) -> int:
    return int(text)


# Reusable steps: each is a closure, and `|` composes them.
double = sx.then(lambda x: 2 * x)
describe = sx.then(lambda x: f"the answer is {x}")
parse_or_zero = sx.then(parse) | sx.upon_error(lambda e: 0)
pipeline = parse_or_zero | double | describe


def square_all(i: int, data: list[int]) -> None:
    data[i] = data[i] ** 2


def main() -> None:
    print(sx.sync_wait(sx.just("21") | pipeline))  # ('the answer is 42',)
    print(sx.sync_wait(sx.just("oops") | pipeline))  # the parse error became 0

    # A tuple is one datum; sx.values(...) sends several; None sends none.
    print(sx.sync_wait(sx.just(7) | sx.then(lambda x: sx.values(x, x + 1))))  # (7, 8)
    print(sx.sync_wait(sx.just(7) | sx.then(print)))  # prints 7, then ()

    # into_variant: whatever the child sent becomes one tuple.
    print(sx.sync_wait(sx.just(1, "a") | sx.into_variant))  # ((1, 'a'),)

    # Stopped (cancelled) work: turn "stopped" into None, or into an error.
    print(sx.sync_wait(sx.just_stopped()))  # None: sync_wait's answer for "stopped"
    maybe = sx.when_all(sx.just(1), sx.just_stopped()) | sx.stopped_as_optional
    print(sx.sync_wait(maybe))  # (None,)
    try:
        sx.sync_wait(sx.just_stopped() | sx.stopped_as_error(TimeoutError("gave up")))
    except TimeoutError as e:
        print("raised:", repr(e))

    # bulk: run a function over an index space, then pass the data on.
    print(sx.sync_wait(sx.just([1, 2, 3, 4]) | sx.bulk(sx.seq, 4, square_all)))

    # Hop to another thread in the middle of a pipeline, and back.
    loop = sx.run_loop()
    worker = threading.Thread(target=loop.run, name="worker")
    worker.start()
    try:

        def where(*xs: Any) -> Any:
            return sx.values(*xs, threading.current_thread().name)

        hop = sx.then(where) | sx.continues_on(loop.get_scheduler()) | sx.then(where)
        print(sx.sync_wait(sx.just("x") | hop))  # ('x', 'MainThread', 'worker')

        # on(sch, closure): run just that step over there, then come back.
        there_and_back = sx.on(loop.get_scheduler(), sx.then(where)) | sx.then(where)
        print(sx.sync_wait(sx.just("y") | there_and_back))  # ('y', 'worker', 'MainThread')
    finally:
        loop.finish()
        worker.join()


if __name__ == "__main__":
    main()
