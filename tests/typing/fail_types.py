"""Lines a type checker must reject (docs/typing.md).

Not run by pytest: tests/test_typing.py runs ``mypy --strict --warn-unused-ignores`` and
``pyright`` (``reportUnnecessaryTypeIgnoreComment``, ``enableTypeIgnoreComments`` off) on this
file, so every ``# type: ignore[code]`` must be needed by mypy and every
``# pyright: ignore[rule]`` by pyright: a line that stops failing fails the test. A line with
only one of the two comments documents what only that checker catches.
"""

from __future__ import annotations

import structexec as sx


def to_str(x: int) -> str:
    return str(x)


def two(a: int, b: int) -> int:
    return a + b


async def scopes() -> None:
    async with sx.counting_scope() as scope:
        scope.request_stp()  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue]
        scope.spawn_future(42)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    async with sx.simple_counting_scope() as simple:
        simple.request_stop()  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue]
        sx.spawn_future(sx.just(1), simple.get_token()).no_such()  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue]


async def values() -> None:
    # an unannotated lambda after `|`: mypy infers x from the sender; pyright checks the right
    # operand on its own (x is Any there), so only mypy catches it
    _ = sx.just("a") | sx.then(lambda x: x + 1)  # type: ignore[operator]
    # the two-argument form: both checkers infer x from the sender
    _ = sx.then(sx.just("a"), lambda x: x + 1)  # type: ignore[operator]  # pyright: ignore[reportOperatorIssue]
    # an annotated function whose parameter does not take the sender's value
    _ = sx.just("a") | sx.then(to_str)  # type: ignore[arg-type]  # pyright: ignore[reportOperatorIssue]
    _ = sx.then(sx.just("a"), to_str)  # type: ignore[arg-type]  # pyright: ignore[reportCallIssue, reportArgumentType]
    _ = sx.just(1) | sx.then(two)  # type: ignore[operator]  # pyright: ignore[reportOperatorIssue]
    _ = sx.just(1) | sx.let_value(to_str)  # type: ignore[arg-type]  # pyright: ignore[reportCallIssue, reportArgumentType]
    # the value type survives a value-preserving adaptor (mypy: the lambda after `|`)
    _ = sx.just(1) | sx.continues_on(sx.inline_scheduler()) | sx.then(lambda x: x.upper())  # type: ignore[attr-defined]
    # upon_stopped's function takes no argument
    _ = sx.just(1) | sx.upon_stopped(lambda x: x)  # type: ignore[arg-type, misc]  # pyright: ignore[reportArgumentType]
    # not a sender
    _ = sx.when_all(sx.just(1), 42)  # type: ignore[call-overload]  # pyright: ignore[reportArgumentType]
    # the value type flows into await
    x: int = await (sx.just(1) | sx.then(to_str))  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]
    y: tuple[int, int] = await sx.when_all(sx.just(1), sx.just("a"))  # type: ignore[arg-type]  # pyright: ignore[reportAssignmentType]
    z: int = await sx.when_any(sx.just(1), sx.just("a"))  # type: ignore[arg-type]  # pyright: ignore[reportAssignmentType]
    s: str = await sx.spawn_future(sx.just(1), sx.simple_counting_scope().get_token())  # type: ignore[arg-type]  # pyright: ignore[reportAssignmentType]
    del x, y, z, s


@sx.task
async def double(x: int) -> int:
    return 2 * x


async def tasks() -> None:
    double("a")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    t: str = await double(1)  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]
    del t


def sequences() -> None:
    sx.to_list(sx.just(1))  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    _ = sx.iterate([1]) | sx.then_each(len)  # type: ignore[arg-type]  # pyright: ignore[reportOperatorIssue]
