"""let_value: choose the next piece of work from the previous result.

`then(f)` transforms a value; `let_value(f)` lets `f` return a whole new *sender*, which is
then run, and its result becomes the result. This is how you write loops and branches
without a coroutine. Because structexec runs nested starts on a trampoline, even a
100,000-step recursive loop that completes synchronously does not hit Python's recursion
limit.

Run: python examples/let_value.py
"""

from __future__ import annotations

from typing import Any

import structexec as sx


def collatz_steps(n: int) -> Any:
    """A sender that counts the Collatz steps from n down to 1, one let_value per step."""

    def step(x: int, steps: int) -> Any:
        if x == 1:
            return sx.just(steps)
        nxt = x // 2 if x % 2 == 0 else 3 * x + 1
        return sx.just(nxt, steps + 1) | sx.let_value(step)

    return sx.just(n, 0) | sx.let_value(step)


def countdown(n: int) -> Any:
    """A 100,000-iteration loop written as recursion over senders."""

    def step(i: int) -> Any:
        return sx.just(i - 1) | sx.let_value(step) if i > 0 else sx.just("liftoff")

    return sx.just(n) | sx.let_value(step)


def fallback_on_error() -> Any:
    """let_error: recover from a failure by running another sender."""

    def flaky() -> int:
        raise ConnectionError("primary is down")

    return (
        sx.just() | sx.then(flaky) | sx.let_error(lambda e: sx.just(f"fallback used because: {e}"))
    )


if __name__ == "__main__":
    print("collatz(27) steps:", sx.sync_wait(collatz_steps(27))[0])  # type: ignore[index]
    print("countdown(100_000):", sx.sync_wait(countdown(100_000))[0])  # type: ignore[index]
    print(sx.sync_wait(fallback_on_error())[0])  # type: ignore[index]
