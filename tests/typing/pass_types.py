"""Lines a type checker must accept, with the types it must infer (docs/typing.md).

Not run by pytest: tests/test_typing.py runs ``mypy --strict`` and ``pyright`` on this file.
Each ``assert_type`` is a check of both checkers unless its comment says otherwise.
"""

from __future__ import annotations

from typing import Any, NoReturn

from typing_extensions import assert_type

import structexec as sx


def to_str(x: int) -> str:
    return str(x)


def add(a: int, b: str) -> bytes:
    return (str(a) + b).encode()


def count(*xs: object) -> int:
    return len(xs)


async def co_len(s: str) -> int:
    return len(s)


def recover(e: BaseException) -> str:
    return repr(e)


# --------------------------------------------------------------------------- just, then


def senders() -> None:
    assert_type(sx.just(), sx.Sender[None])
    assert_type(sx.just(1), sx.Sender[int])
    assert_type(sx.just(1, "a"), sx.Sender[tuple[int, str]])
    assert_type(sx.just_error(ValueError()), sx.Sender[NoReturn])
    assert_type(sx.just_stopped(), sx.Sender[NoReturn])

    assert_type(sx.just(1) | sx.then(str), sx.Sender[str])
    assert_type(sx.just(1) | sx.then(to_str), sx.Sender[str])
    assert_type(sx.just(1) | sx.then(to_str) | sx.then(len), sx.Sender[int])
    assert_type(sx.then(sx.just(1), to_str), sx.Sender[str])
    assert_type(sx.just(1, "a") | sx.then(add), sx.Sender[bytes])
    assert_type(sx.just() | sx.then(lambda: 2), sx.Sender[int])
    five = sx.just(1, 2, 3, 4, 5)
    assert_type(five | sx.then(lambda a, b, c, d, e: str(a)), sx.Sender[str])
    assert_type(five | sx.then(count), sx.Sender[int])
    assert_type(sx.then(sx.just(1), lambda x: x + 1), sx.Sender[int])
    # mypy infers the lambda's parameter from the sender left of `|` (Sender[int]); pyright
    # checks the two operands apart and gives Sender[Any] (docs/typing.md)
    piped: sx.Sender[int] = sx.just(1) | sx.then(lambda x: x + 1)

    assert_type(sx.just(1) | sx.upon_error(recover), sx.Sender[int | str])
    assert_type(sx.upon_error(sx.just(1), recover), sx.Sender[int | str])
    assert_type(sx.just(1) | sx.upon_stopped(lambda: None), sx.Sender[int | None])

    # let_value: f returns a sender or a coroutine object
    assert_type(sx.just("ab") | sx.let_value(co_len), sx.Sender[int])
    assert_type(sx.just(1) | sx.let_value(lambda x: sx.just(to_str(x))), sx.Sender[str])
    assert_type(sx.let_value(sx.just(1), lambda x: sx.just(to_str(x))), sx.Sender[str])
    assert_type(sx.just(1) | sx.let_error(lambda e: sx.just("r")), sx.Sender[int | str])
    assert_type(sx.just(1) | sx.let_stopped(lambda: sx.just(None)), sx.Sender[int | None])

    # closures compose
    assert_type(sx.then(to_str) | sx.then(len), sx.MapClosure[int, int])
    assert_type(sx.just(1) | (sx.then(to_str) | sx.then(len)), sx.Sender[int])

    # value-preserving adaptors
    sch = sx.inline_scheduler()
    assert_type(sx.just(1) | sx.continues_on(sch), sx.Sender[int])
    assert_type(sx.continues_on(sx.just(1), sch), sx.Sender[int])
    assert_type(sx.just(1) | sx.write_env(sx.env()), sx.Sender[int])
    assert_type(sx.just(1) | sx.stopped_as_error(ValueError()), sx.Sender[int])
    assert_type(sx.just(1) | sx.timeout(1.0), sx.Sender[int])
    assert_type(sx.starts_on(sch, sx.just(1)), sx.Sender[int])
    assert_type(sx.just(1) | sx.unstoppable, sx.Sender[int])
    assert_type(sx.unstoppable(sx.just(1)), sx.Sender[int])
    assert_type(sx.just(1) | sx.affine_on, sx.Sender[int])
    assert_type(sx.just(1) | sx.stopped_as_optional, sx.Sender[int | None])
    assert_type(sx.just(1) | sx.retry(attempts=3), sx.Sender[int])
    assert_type(sx.just(1) | sx.stop_when(sx.never_stop_token()), sx.Sender[int])
    assert_type(sx.just(1) | sx.on(sch, sx.then(to_str)), sx.Sender[str])
    assert_type(sx.on(sch, sx.just(1)), sx.Sender[int])
    assert_type(sx.then(to_str) | sx.continues_on(sch), sx.MapClosure[int, str])
    assert_type(sx.just(1) | sx.repeat_n(2), sx.Sender[None])

    # when_all, when_any
    assert_type(sx.when_all(sx.just(1), sx.just("a")), sx.Sender[tuple[int, str]])
    assert_type(
        sx.when_all(sx.just(1), sx.just("a"), sx.just(b""), sx.just(1.0), sx.just(1), sx.just(1)),
        sx.Sender[tuple[int, str, bytes, float, int, int]],
    )
    assert_type(sx.when_any(sx.just(1), sx.just("a")), sx.Sender[int | str])

    # sync_wait: the datums, or None when stopped
    assert_type(sx.sync_wait(sx.just(1)), tuple[Any, ...] | None)
    del piped


# --------------------------------------------------------------------------- scopes


async def scopes() -> None:
    async with sx.counting_scope() as scope:
        assert_type(scope, sx.counting_scope)
        scope.request_stop()
        token = scope.get_token()
        assert_type(sx.spawn(sx.just(), token), None)
        fut = sx.spawn_future(sx.just(1), token)
        assert_type(fut, sx.Sender[int])
        assert_type(await fut, int)
        assert_type(scope.spawn_future(sx.just("a")), sx.Sender[str])
        assert_type(sx.associate(sx.just(1), token), sx.Sender[int])
        assert_type(sx.just(1) | sx.associate(token), sx.Sender[int])
        assert_type(scope.join(), sx.Sender[None])
    async with sx.simple_counting_scope() as simple:
        assert_type(simple, sx.simple_counting_scope)
        assert_type(await simple.spawn_future(co_len("abc")), int)


# --------------------------------------------------------------------------- task, await


@sx.task
async def double(x: int) -> int:
    return 2 * x


async def tasks() -> None:
    assert_type(double(1), sx.Sender[int])
    assert_type(await double(1), int)
    assert_type(await sx.when_all(double(1), sx.just("a")), tuple[int, str])
    assert_type(await (double(1) | sx.then(to_str)), str)
    assert_type(await sx.just(1, "a"), tuple[int, str])


# --------------------------------------------------------------------------- schedulers, stop


def schedulers_and_stop() -> None:
    sch = sx.inline_scheduler()
    assert_type(sch.schedule(), sx.Sender[None])
    assert_type(sx.schedule(sch), sx.Sender[None])
    assert_type(sx.trio_scheduler().schedule(), sx.Sender[None])
    loop = sx.run_loop()
    on_loop: sx.Sender[None] = loop.get_scheduler().schedule()
    assert_type(sx.schedule_after(sch, 1.0), sx.Sender[None])
    src = sx.inplace_stop_source()
    tok = src.get_token()
    assert_type(tok, sx.inplace_stop_token)
    assert_type(tok.stop_requested(), bool)
    assert_type(src.request_stop(), bool)
    assert_type(sx.never_stop_token().stop_possible(), bool)
    del on_loop


# --------------------------------------------------------------------------- sequences


async def fetch_len(s: str) -> int:
    return len(s)


def positive(v: int) -> bool:
    return v > 0


def sequences() -> None:
    seq = sx.iterate([1, 2])
    assert_type(seq, sx.SequenceSender[int])
    assert_type(seq | sx.then_each(str), sx.SequenceSender[str])
    assert_type(sx.to_list(sx.iterate([1, 2]) | sx.then_each(str)), sx.Sender[list[str]])
    assert_type(sx.reduce(seq, lambda a, v: a + v, 0), sx.Sender[int])
    lens = seq | sx.then_each(str) | sx.let_each(fetch_len, max_concurrency=4)
    assert_type(lens, sx.SequenceSender[int])
    assert_type(sx.to_list(lens | sx.filter_each(positive)), sx.Sender[list[int]])
    assert_type(sx.ignore_all_values(seq), sx.Sender[None])


async def each_loop() -> None:
    async with sx.each(sx.iterate(["a"])) as items:
        async for v in items:
            assert_type(v, str)
