"""Property test: random nests of trio cancel scopes around awaited senders.

[exec.async.ops], docs/trio.md "Awaiting a sender",
docs/trio.md "trio cancellation becomes a stop request",
docs/trio.md "Coroutines are senders; a stop request cancels them",
docs/scopes.md "The nursery face: `async with`" (exactly once),
docs/task.md 'How "stopped" unwinds a task',
docs/trio.md "trio cancellation becomes a stop request". For random trees of (shielded or not,
deadline or not, sequential or concurrent) cancel scopes whose leaves await senders of several kinds
(an operation completed by a helper task that honours, delays or ignores stop requests; a coroutine
sender; ``when_all`` of both; the trio scheduler), every started operation completes exactly once,
always before its ``await`` returns or raises, a ``trio.Cancelled`` only ever escapes an ``await``
whose own task was cancelled, and no trio task is left behind. Each example is a fresh ``trio.run``
with a ``MockClock`` (autojump).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import structexec as sx


@dataclass
class World:
    helpers: Any = None
    log: list[tuple[str, int, str]] = field(default_factory=list)
    completions: dict[int, int] = field(default_factory=dict)
    started: set[int] = field(default_factory=set)
    next_id: int = 0


class Counted(sx.Sender[Any]):
    """Counts the completions of ``child``'s operation and logs them in order."""

    def __init__(self, child: Any, world: World, i: int) -> None:
        self.child, self.world, self.i = child, world, i

    def connect(self, rcvr: Any) -> Any:
        return sx.connect(self.child, CountingRcvr(rcvr, self.world, self.i))


class CountingRcvr:
    def __init__(self, rcvr: Any, world: World, i: int) -> None:
        self.rcvr, self.world, self.i = rcvr, world, i

    def get_env(self) -> Any:
        return sx.get_env(self.rcvr)

    def _count(self, kind: str) -> None:
        w = self.world
        w.completions[self.i] = w.completions.get(self.i, 0) + 1
        w.log.append(("completed", self.i, kind))

    def set_value(self, *vals: Any) -> None:
        self._count("value")
        self.rcvr.set_value(*vals)

    def set_error(self, err: Any) -> None:
        self._count("error")
        self.rcvr.set_error(err)

    def set_stopped(self) -> None:
        self._count("stopped")
        self.rcvr.set_stopped()


class Helped(sx.Sender[Any]):
    """Completed by a helper task after ``delay``; on stop: honour / late / ignore."""

    def __init__(self, world: World, delay: int, kind: str, on_stop: str) -> None:
        self.world, self.delay, self.kind, self.on_stop = world, delay, kind, on_stop

    def connect(self, rcvr: Any) -> Any:
        return HelpedOp(self, rcvr)


class HelpedOp:
    def __init__(self, s: Helped, rcvr: Any) -> None:
        self.s, self.rcvr = s, rcvr
        self.done = False
        self.cb: Any = None
        self.scope = trio.CancelScope()
        self.late = False

    def start(self) -> None:
        self.cb = sx.stop_callback_for(sx.get_stop_token(sx.get_env(self.rcvr)), self._on_stop)
        self.s.world.helpers.start_soon(self._run)

    def _on_stop(self) -> None:
        if self.s.on_stop == "honour":
            self.scope.cancel()
            self._complete("stopped")
        elif self.s.on_stop == "late":
            self.late = True
            self.scope.cancel()

    async def _run(self) -> None:
        with self.scope:
            await trio.sleep(self.s.delay)
        if self.late:
            await trio.sleep(1)
            self._complete("stopped")
        else:
            self._complete(self.s.kind)

    def _complete(self, kind: str) -> None:
        if self.done:
            return
        self.done = True
        cb, self.cb = self.cb, None
        if cb is not None:
            cb.close()
        if kind == "value":
            self.rcvr.set_value("v")
        elif kind == "error":
            self.rcvr.set_error(ValueError("e"))
        else:
            self.rcvr.set_stopped()


async def coro_body(delay: int, kind: str) -> str:
    await trio.sleep(delay)
    if kind == "error":
        raise ValueError("e")
    if kind == "stopped":
        await sx.just_stopped()
    return "v"


leaves = st.tuples(
    st.sampled_from(["helped", "coro", "when_all", "schedule"]),
    st.integers(0, 4),
    st.sampled_from(["value", "error", "stopped"]),
    st.sampled_from(["honour", "late", "ignore"]),
).map(lambda t: ("leaf", *t))


def scopes(children: Any) -> Any:
    return st.tuples(
        st.just("scope"),
        st.one_of(st.none(), st.integers(0, 5)),  # relative deadline
        st.booleans(),  # shield
        st.booleans(),  # children run concurrently (nursery) or one after another
        st.lists(children, min_size=1, max_size=3),
    )


trees = st.recursive(leaves, scopes, max_leaves=8)


def make_sender(world: World, leaf: tuple[Any, ...]) -> Any:
    _, what, delay, kind, on_stop = leaf
    if what == "helped":
        return Helped(world, delay, kind, on_stop)
    if what == "coro":
        return sx.starts_on(sx.inline_scheduler(), coro_body(delay, kind))
    if what == "when_all":
        return sx.when_all(coro_body(delay, "value"), Helped(world, delay + 1, kind, on_stop))
    return sx.schedule(sx.trio_scheduler()) | sx.then(lambda: "v")


async def run_leaf(world: World, leaf: tuple[Any, ...]) -> None:
    i = world.next_id
    world.next_id += 1
    world.started.add(i)
    sndr = Counted(make_sender(world, leaf), world, i)
    try:
        await sndr
    except trio.Cancelled:
        world.log.append(("await", i, "cancelled"))
        raise
    except sx.Stopped:
        world.log.append(("await", i, "stopped"))
    except ValueError:
        world.log.append(("await", i, "error"))
    else:
        world.log.append(("await", i, "value"))


async def run_node(world: World, node: tuple[Any, ...]) -> None:
    if node[0] == "leaf":
        await run_leaf(world, node)
        return
    _, deadline, shield, concurrent, children = node
    rel = math.inf if deadline is None else deadline
    with trio.CancelScope(deadline=trio.current_time() + rel, shield=shield):
        if concurrent:
            async with trio.open_nursery() as n:
                for c in children:
                    n.start_soon(run_node, world, c)
        else:
            for c in children:
                await run_node(world, c)


def check(world: World) -> None:
    # Every started operation completed exactly once ([exec.async.ops]).
    assert set(world.completions) == world.started, world.log
    assert all(n == 1 for n in world.completions.values()), world.completions
    # ... and before its await returned or raised
    # (docs/trio.md "trio cancellation becomes a stop request": the op state outlives the op).
    seen: set[int] = set()
    for what, i, kind in world.log:
        if what == "completed":
            seen.add(i)
        else:
            assert i in seen, f"await {i} ended ({kind}) before its operation completed"
    # An await ends at most once; a trio cancellation only follows a stopped/any completion
    # of an op whose stop was requested, never a value that was not delivered.
    ends = [i for what, i, _ in world.log if what == "await"]
    assert len(ends) == len(set(ends))


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(tree=trees)
def test_random_cancel_scope_nests_complete_exactly_once_and_leak_nothing(
    tree: tuple[Any, ...],
) -> None:
    world = World()

    async def main() -> None:
        start = trio.lowlevel.current_statistics().tasks_living
        async with trio.open_nursery() as helpers:
            world.helpers = helpers
            await run_node(world, tree)
        for _ in range(10):
            if trio.lowlevel.current_statistics().tasks_living <= start:
                break
            await trio.lowlevel.checkpoint()
        assert trio.lowlevel.current_statistics().tasks_living == start

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    check(world)
