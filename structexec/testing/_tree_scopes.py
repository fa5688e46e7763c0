"""Sender-tree nodes for scopes and coroutines: ``associate``, ``spawn``, ``spawn_future``,
coroutine senders and ``task`` ([exec.associate], [exec.spawn], [exec.spawn.future],
[exec.counting.scopes], [exec.task]).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, TypeVar

import structexec as sx

from .._core._values import values
from ._tree_base import (
    INLINE,
    MAYBE,
    NEVER,
    STOPPED,
    UNKNOWN,
    ForwardingOp,
    ForwardingSender,
    Node,
    Outcome,
    Outcomes,
    Plan,
    ReceiverLike,
    World,
    _coro_outcomes,
)

if TYPE_CHECKING:
    from .._core._contracts import OpState
    from .._core._protocol import Sender

R = TypeVar("R")


@dataclass(eq=False, repr=False)
class Associate(Node):
    """``sx.associate(child, tokens[scope])`` ([exec.associate], [exec.stop.when]): the child also
    sees the stop requests of a ``counting_scope``."""

    child: Node
    scope: int
    kind: ClassVar[str] = "associate"

    def build(self, w: World) -> Sender[object]:
        return sx.associate(self.child.build(w), w.tokens[self.scope])

    def outcomes(self, mode: int, plan: Plan) -> Outcomes:
        m = max(mode, plan.scope(self.scope))
        out = self.child.outcomes(m, plan)
        # Built late, the scope may be joined already: the association is refused and the
        # sender completes stopped without running its child ([exec.associate]).
        return out | {STOPPED} if self.late else out

    def timing(self, mode: int, plan: Plan) -> str:
        return self.child.timing(max(mode, plan.scope(self.scope)), plan)

    def kids(self) -> tuple[Node, ...]:
        return (self.child,)

    def code(self) -> str:
        return f"sx.associate({self.child.code()}, tokens[{self.scope}])"


@dataclass(eq=False, repr=False)
class SpawnFuture(Node):
    """``sx.spawn_future(child, tokens[scope])``, made when the tree is built (eager,
    [exec.spawn.future]).

    The work runs with the scope's stop token and the future's own source; a stop request on
    the consumer completes it stopped at once and asks the work to stop
    (the scopes guide "Futures outlive their work"). The driver records the work's outcome and what
    the consumer received (``world.futures``): an error that no consumer received must be reported
    by the scope's ``join`` (the scopes guide "What happens when things fail").
    """

    child: Node
    scope: int
    kind: ClassVar[str] = "spawn_future"

    def build(self, w: World) -> Sender[object]:
        rec = FutureRecord(self)
        with w.lock:
            w.futures.append(rec)
        s = sx.then(self.child.build(w), _Passthrough(rec))
        s = sx.let_error(s, _PassFailure(rec, "error"))
        s = sx.let_stopped(s, _PassFailure(rec, "stopped"))
        return _Observed(sx.spawn_future(s, w.tokens[self.scope], w.spawn_env), rec)

    def outcomes(self, mode: int, plan: Plan) -> Outcomes:
        inner = self.child.outcomes(self.work_mode(mode, plan), plan)
        # Stopped: the consumer was stopped (docs/scopes.md "Futures outlive their work"), or, built
        # late, the association was refused and the result stored is stopped ([exec.spawn.future]).
        return inner | {STOPPED} if mode or self.late else inner

    def work_mode(self, mode: int, plan: Plan) -> int:
        """The work sees the scope's stop requests, and an abandon (consumer stopped or
        future dropped) as a stop request."""
        return max(plan.scope(self.scope), MAYBE if mode else NEVER)

    def timing(self, mode: int, plan: Plan) -> str:
        return UNKNOWN

    def kids(self) -> tuple[Node, ...]:
        return (self.child,)

    def code(self) -> str:
        return f"sx.spawn_future({self.child.code()}, tokens[{self.scope}])"


@dataclass(eq=False)
class FutureRecord:
    """What happened to one ``spawn_future``: the work's outcome, what the consumer got."""

    node: SpawnFuture
    work: Outcome | None = None
    consumer: Outcome | None = None
    consumer_started: bool = False


class _Passthrough:
    """Records the work's value and sends it on (a ``then`` function)."""

    __slots__ = ("rec",)

    def __init__(self, rec: FutureRecord) -> None:
        self.rec = rec

    def __call__(self, *args: object) -> object:
        self.rec.work = ("value", args)
        return values(*args)


class _PassFailure:
    """Records the work's error or stop and sends it on (a ``let_error``/``let_stopped``
    function)."""

    __slots__ = ("kind", "rec")

    def __init__(self, rec: FutureRecord, kind: str) -> None:
        self.rec = rec
        self.kind = kind

    def __call__(self, *args: object) -> Sender[object]:
        if self.kind == "error":
            self.rec.work = ("error", args[0])
            return sx.just_error(args[0])
        self.rec.work = STOPPED
        return sx.just_stopped()


class _ObservedOp(ForwardingOp[FutureRecord]):
    """Records what the future's consumer receives (and that it was started)."""

    __slots__ = ()

    def _started(self) -> None:
        self._arg.consumer_started = True

    def _completing(self, outcome: Outcome) -> None:
        self._arg.consumer = outcome


class _Observed(ForwardingSender[FutureRecord]):
    """Forwards to the future through an :class:`_ObservedOp` (``arg``: its record)."""

    __slots__ = ()
    _op_type = _ObservedOp


@dataclass(eq=False, repr=False)
class Spawn(Node):
    """``sx.just() | sx.then(lambda: sx.spawn(work', tokens[scope]))``: completes ``value()``.

    ``work'`` records the outcome of ``work`` in ``world.spawn_log`` and completes
    ``set_value()``; ``world.spawned`` records each spawn whose work was started (a scope
    that is already joined refuses the association, and ``spawn`` then drops the work); with
    ``catch=False`` an error is recorded and then sent on, so the scope must report it from
    ``join`` (the scopes guide "The nursery face: `async with`").
    """

    work: Node
    scope: int
    catch: bool = True
    kind: ClassVar[str] = "spawn"

    def build(self, w: World) -> Sender[object]:
        node = self

        def log(o: Outcome) -> None:
            with w.lock:
                w.spawn_log.append((node, o))

        def go() -> None:
            s = self.work.build(w)
            s = sx.then(s, lambda *a: log(("value", a)))
            s = sx.let_stopped(s, lambda: _then_return(log, STOPPED, sx.just()))
            if self.catch:
                s = sx.upon_error(s, lambda e: log(("error", e)))
            else:
                s = sx.let_error(s, lambda e: _then_return(log, ("error", e), sx.just_error(e)))
            started: list[bool] = []
            work = s
            marked = sx.let_value(sx.then(sx.just(), lambda: started.append(True)), lambda: work)
            sx.spawn(marked, w.tokens[self.scope], w.spawn_env)
            if started:  # associated and started before spawn() returned ([exec.spawn])
                with w.lock:
                    w.spawned.append(node)

        return sx.then(sx.just(), go)

    def outcomes(self, mode: int, plan: Plan) -> Outcomes:
        return frozenset({("value", ())})

    def work_outcomes(self, plan: Plan) -> Outcomes:
        """What the spawned work may record: it sees only the scope's stop token ([exec.spawn])."""
        return self.work.outcomes(plan.scope(self.scope), plan)

    def timing(self, mode: int, plan: Plan) -> str:
        return INLINE

    def kids(self) -> tuple[Node, ...]:
        return (self.work,)

    def code(self) -> str:
        how = "" if self.catch else ", catch=False"
        return f"spawn({self.work.code()}, tokens[{self.scope}]{how})"


def _then_return(log: Callable[[Outcome], None], o: Outcome, result: R) -> R:
    log(o)
    return result


class _CoroutineAtConnect(sx.Sender[object]):
    """Makes the coroutine object when connected, and connects that ([exec.connect]).

    A coroutine object that is never connected (the tree stopped before reaching it) would
    make Python warn "coroutine ... was never awaited"; a real program would not create it.
    """

    __slots__ = ("_s",)

    def __init__(self, s: Sender[object]) -> None:
        self._s = s

    def connect(self, rcvr: ReceiverLike) -> OpState:
        s = self._s

        async def f() -> object:
            return await s

        op: OpState = sx.connect(f(), rcvr)
        return op


@dataclass(eq=False, repr=False)
class Coro(Node):
    """A coroutine object as a sender: ``(async def f(): return await child)()``
    ([exec.connect])."""

    child: Node
    kind: ClassVar[str] = "coroutine"

    def build(self, w: World) -> Sender[object]:
        return _CoroutineAtConnect(self.child.build(w))

    def outcomes(self, mode: int, plan: Plan) -> Outcomes:
        return _coro_outcomes(self.child.outcomes(MAYBE if mode else NEVER, plan), mode)

    def kids(self) -> tuple[Node, ...]:
        return (self.child,)

    def code(self) -> str:
        return f"coro({self.child.code()})"


@dataclass(eq=False, repr=False)
class Task(Node):
    """``@sx.task async def f(): return await child``; ``f()`` ([exec.task])."""

    child: Node
    kind: ClassVar[str] = "task"

    def build(self, w: World) -> Sender[object]:
        s = self.child.build(w)

        @sx.task
        async def f() -> object:
            return await s

        if w.tree_has_parallel_hop:
            # After a hop onto the parallel scheduler, a let_* function's sender sees it as
            # get_scheduler, and a task refuses a fallible scheduler (P3941R1,
            # docs/senders-adaptors.md).
            return sx.write_env(f(), sx.prop(sx.get_scheduler, w.spawn_env.query(sx.get_scheduler)))
        return f()

    def outcomes(self, mode: int, plan: Plan) -> Outcomes:
        return _coro_outcomes(self.child.outcomes(MAYBE if mode else NEVER, plan), mode)

    def kids(self) -> tuple[Node, ...]:
        return (self.child,)

    def code(self) -> str:
        return f"task({self.child.code()})"
