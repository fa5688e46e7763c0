"""Sender-tree nodes: factories, ``then``/``let_*``, variants, user adaptors, hops, stop points.

Each node builds its structexec sender in a :class:`~._tree_base.World` and models it
(:meth:`~._tree_base.Node.outcomes`, :meth:`~._tree_base.Node.timing`); ``code()`` prints it
([exec.factories], [exec.then], [exec.let], [exec.into.variant], [exec.stopped.opt],
[exec.stopped.err], [exec.continues.on], [exec.schedule.from], [exec.starts.on],
[exec.write.env], [exec.unstoppable]).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import structexec as sx

from .._core._values import values
from ._tree_base import (
    ALREADY,
    ASYNC,
    INLINE,
    MAYBE,
    NEVER,
    STOPPED,
    UNKNOWN,
    Fn,
    ForwardingOp,
    ForwardingSender,
    Node,
    Outcome,
    Outcomes,
    Plan,
    TreeError,
    World,
    _hop_outcomes,
    apply_fn,
)

if TYPE_CHECKING:
    from .._core._protocol import Sender


@dataclass(eq=False, repr=False)
class Just(Node):
    """``sx.just(*vals)``."""

    vals: tuple[int, ...]
    kind: ClassVar[str] = "just"

    def build(self, w: World) -> Sender[object]:
        return sx.just(*self.vals)

    def outcomes(self, mode: int, plan: Plan) -> Outcomes:
        return frozenset({("value", self.vals)})

    def timing(self, mode: int, plan: Plan) -> str:
        return INLINE

    def code(self) -> str:
        return f"sx.just({', '.join(map(repr, self.vals))})"


@dataclass(eq=False, repr=False)
class JustError(Node):
    """``sx.just_error(err)``."""

    err: TreeError
    kind: ClassVar[str] = "just_error"

    def build(self, w: World) -> Sender[object]:
        return sx.just_error(self.err)

    def outcomes(self, mode: int, plan: Plan) -> Outcomes:
        return frozenset({("error", self.err)})

    def timing(self, mode: int, plan: Plan) -> str:
        return INLINE

    def code(self) -> str:
        return f"sx.just_error({self.err!r})"


@dataclass(eq=False, repr=False)
class JustStopped(Node):
    """``sx.just_stopped()``."""

    kind: ClassVar[str] = "just_stopped"

    def build(self, w: World) -> Sender[object]:
        return sx.just_stopped()

    def outcomes(self, mode: int, plan: Plan) -> Outcomes:
        return frozenset({STOPPED})

    def timing(self, mode: int, plan: Plan) -> str:
        return INLINE

    def code(self) -> str:
        return "sx.just_stopped()"


_THEN_KINDS = {"then": "value", "upon_error": "error", "upon_stopped": "stopped"}


@dataclass(eq=False, repr=False)
class Then(Node):
    """``child | sx.then(fn)``, ``sx.upon_error(fn)`` or ``sx.upon_stopped(fn)`` (``which``)."""

    child: Node
    fn: Fn
    which: str = "then"
    kind: ClassVar[str] = "then"

    def build(self, w: World) -> Sender[object]:
        s: Sender[object] = getattr(sx, self.which)(self.child.build(w), self.fn)
        return s

    def outcomes(self, mode: int, plan: Plan) -> Outcomes:
        match = _THEN_KINDS[self.which]
        out = set()
        for o in self.child.outcomes(mode, plan):
            if o[0] != match:
                out.add(o)
            elif match == "value":
                out.add(apply_fn(self.fn, o[1]))
            elif match == "error":
                out.add(apply_fn(self.fn, (o[1],)))
            else:
                out.add(apply_fn(self.fn, ()))
        return frozenset(out)

    def timing(self, mode: int, plan: Plan) -> str:
        return self.child.timing(mode, plan)

    def kids(self) -> tuple[Node, ...]:
        return (self.child,)

    def code(self) -> str:
        return f"{self.child.code()} | sx.{self.which}({self.fn!r})"


@dataclass(eq=False, repr=False)
class Let(Node):
    """``child | sx.let_value(f)`` (``let_error``, ``let_stopped``) where ``f`` builds ``sub``.

    With ``prepend`` (``let_value`` only), the datums that reached ``f`` are sent in front of
    the datums of ``sub`` (``f`` returns ``sub | then(lambda *v: values(*args, *v))``).
    """

    child: Node
    sub: Node
    which: str = "let_value"
    prepend: bool = False
    kind: ClassVar[str] = "let"

    def build(self, w: World) -> Sender[object]:
        sub, prepend = self.sub, self.prepend

        def f(*args: object) -> Sender[object]:
            s = sub.build(w)
            if prepend:
                s = sx.then(s, _Prepend(args))
            return s

        s: Sender[object] = getattr(sx, self.which)(self.child.build(w), f)
        return s

    def _match(self) -> str:
        return {"let_value": "value", "let_error": "error", "let_stopped": "stopped"}[self.which]

    def outcomes(self, mode: int, plan: Plan) -> Outcomes:
        match = self._match()
        out: set[Outcome] = set()
        for o in self.child.outcomes(mode, plan):
            if o[0] != match:
                out.add(o)
                continue
            for o2 in self.sub.outcomes(mode, plan):
                if self.prepend and o2[0] == "value":
                    out.add(("value", o[1] + o2[1]))
                else:
                    out.add(o2)
        return frozenset(out)

    def timing(self, mode: int, plan: Plan) -> str:
        t = self.child.timing(mode, plan)
        if t != INLINE:
            return t
        kinds = {o[0] for o in self.child.outcomes(mode, plan)}
        match = self._match()
        if match not in kinds:
            return INLINE
        ts = self.sub.timing(mode, plan)
        if ts == INLINE:
            return INLINE
        return ts if kinds == {match} else UNKNOWN

    def kids(self) -> tuple[Node, ...]:
        return (self.child, self.sub)

    def code(self) -> str:
        body = self.sub.code()
        if self.prepend:
            return f"{self.child.code()} | sx.{self.which}(lambda *a: {body} | prepend(a))"
        return f"{self.child.code()} | sx.{self.which}(lambda *a: {body})"


class _Prepend:
    __slots__ = ("args",)

    def __init__(self, args: tuple[object, ...]) -> None:
        self.args = args

    def __call__(self, *v: object) -> object:
        return values(*self.args, *v)


@dataclass(eq=False, repr=False)
class IntoVariant(Node):
    """``sx.into_variant(child)``: the datums become one tuple datum ([exec.into.variant])."""

    child: Node
    kind: ClassVar[str] = "into_variant"

    def build(self, w: World) -> Sender[object]:
        s: Sender[object] = sx.into_variant(self.child.build(w))
        return s

    def outcomes(self, mode: int, plan: Plan) -> Outcomes:
        return frozenset(
            ("value", (o[1],)) if o[0] == "value" else o for o in self.child.outcomes(mode, plan)
        )

    def timing(self, mode: int, plan: Plan) -> str:
        return self.child.timing(mode, plan)

    def kids(self) -> tuple[Node, ...]:
        return (self.child,)

    def code(self) -> str:
        return f"sx.into_variant({self.child.code()})"


@dataclass(eq=False, repr=False)
class StoppedAsOptional(Node):
    """``sx.stopped_as_optional(child)``: stopped becomes ``set_value(None)`` ([exec.stopped.opt]).

    The spec needs a child with one non-void value type ([exec.stopped.opt]); when the child's
    datums are not always exactly one, the node inserts ``then(Fn.mix(0))`` (``single``).
    """

    child: Node
    single: bool = False
    kind: ClassVar[str] = "stopped_as_optional"

    def build(self, w: World) -> Sender[object]:
        c = self.child.build(w)
        if self.single:
            c = sx.then(c, Fn.mix(0))
        return sx.stopped_as_optional(c)

    def outcomes(self, mode: int, plan: Plan) -> Outcomes:
        out = set()
        for o in self.child.outcomes(mode, plan):
            if o[0] == "value" and self.single:
                o = apply_fn(Fn.mix(0), o[1])
            if o[0] == "stopped":
                out.add(("value", (None,)))
            else:
                out.add(o)
        return frozenset(out)

    def timing(self, mode: int, plan: Plan) -> str:
        return self.child.timing(mode, plan)

    def kids(self) -> tuple[Node, ...]:
        return (self.child,)

    def code(self) -> str:
        c = self.child.code()
        if self.single:
            c = f"{c} | sx.then(Fn.mix(0))"
        return f"sx.stopped_as_optional({c})"


@dataclass(eq=False, repr=False)
class StoppedAsError(Node):
    """``sx.stopped_as_error(child, err)``: stopped becomes ``set_error(err)``
    ([exec.stopped.err])."""

    child: Node
    err: TreeError
    kind: ClassVar[str] = "stopped_as_error"

    def build(self, w: World) -> Sender[object]:
        return sx.stopped_as_error(self.child.build(w), self.err)

    def outcomes(self, mode: int, plan: Plan) -> Outcomes:
        return frozenset(
            ("error", self.err) if o[0] == "stopped" else o for o in self.child.outcomes(mode, plan)
        )

    def timing(self, mode: int, plan: Plan) -> str:
        return self.child.timing(mode, plan)

    def kids(self) -> tuple[Node, ...]:
        return (self.child,)

    def code(self) -> str:
        return f"sx.stopped_as_error({self.child.code()}, {self.err!r})"


@dataclass(frozen=True, eq=False)
class Adaptor:
    """A user-defined sender adaptor to mix into generated trees (``sender_trees(adaptors=...)``).

    ``build(child_sender) -> sender`` applies the adaptor; ``model(child_outcomes, mode)``
    says what it may complete with, given the set of outcomes its child may complete with
    (the child is modelled under the same stop ``mode``: ``NEVER``, ``MAYBE`` or
    ``ALREADY``). The default model is "the child's outcomes, or stopped when a stop request
    may arrive". ``child_mode(mode)`` gives the child's stop mode when the adaptor changes
    what the child sees (default: unchanged). ``name`` appears in printed trees.
    """

    name: str
    build: Callable[[Any], Any]
    model: Callable[[Outcomes, int], Outcomes] | None = None
    child_mode: Callable[[int], int] | None = None

    def __repr__(self) -> str:
        return self.name


@dataclass(eq=False, repr=False)
class Custom(Node):
    """``adaptor.build(child)`` for a user :class:`Adaptor`."""

    child: Node
    adaptor: Adaptor
    kind: ClassVar[str] = "custom"

    def build(self, w: World) -> Sender[object]:
        s: Sender[object] = self.adaptor.build(self.child.build(w))
        return s

    def outcomes(self, mode: int, plan: Plan) -> Outcomes:
        a = self.adaptor
        cm = a.child_mode(mode) if a.child_mode is not None else mode
        inner = self.child.outcomes(cm, plan)
        if a.model is not None:
            return frozenset(a.model(inner, mode))
        return inner | {STOPPED} if mode else inner

    def timing(self, mode: int, plan: Plan) -> str:
        return UNKNOWN

    def kids(self) -> tuple[Node, ...]:
        return (self.child,)

    def code(self) -> str:
        return f"{self.adaptor.name}({self.child.code()})"


@dataclass(eq=False, repr=False)
class Schedule(Node):
    """``sx.schedule(sch)`` on the ``ManualScheduler`` number ``sch``."""

    sch: int
    kind: ClassVar[str] = "schedule"

    def build(self, w: World) -> Sender[object]:
        return sx.schedule(w.schedulers[self.sch])

    def outcomes(self, mode: int, plan: Plan) -> Outcomes:
        return _hop_outcomes(frozenset({("value", ())}), mode)

    def timing(self, mode: int, plan: Plan) -> str:
        return ASYNC

    def code(self) -> str:
        return f"sx.schedule(sch[{self.sch}])"


#: The targets of a :class:`Hop` other than a ``ManualScheduler`` number: a worker thread,
#: the parallel scheduler, the trio scheduler.
THREAD, PARALLEL, TRIO = "thread", "parallel", "trio"
_HOP_KINDS = {THREAD: "thread_hop", PARALLEL: "parallel_hop", TRIO: "trio_hop"}
_HOP_CODE = {
    THREAD: "thread_sch",
    PARALLEL: "sx.get_parallel_scheduler()",
    TRIO: "sx.trio_scheduler()",
}


@dataclass(eq=False, repr=False)
class Hop(Node):
    """``child | sx.continues_on(target)`` ([exec.continues.on], [exec.schedule.from]).

    ``sch`` is the target, and gives the node its ``kind``:

    * an ``int``: ``ManualScheduler`` number ``sch`` (kind ``continues_on``);
    * ``THREAD``: the worker-thread scheduler of the run (``thread_hop``);
    * ``PARALLEL``: ``sx.get_parallel_scheduler()`` (``parallel_hop``). The backend may check
      the stop token before it runs the item or not, so a stop request made before the hop
      is modelled as "maybe" ([exec.par.scheduler], [exec.sysctxrepl]);
    * ``TRIO``: ``sx.trio_scheduler()`` (``trio_hop``, trio runs only).
    """

    child: Node
    sch: int | str

    def __post_init__(self) -> None:
        if not isinstance(self.sch, int) and self.sch not in _HOP_KINDS:
            raise ValueError(
                f"Hop: sch must be a ManualScheduler number, THREAD, PARALLEL or TRIO, "
                f"not {self.sch!r}"
            )

    @property
    def kind(self) -> str:  # type: ignore[override]
        sch = self.sch
        return "continues_on" if isinstance(sch, int) else _HOP_KINDS[sch]

    def _target(self, w: World) -> object:
        sch = self.sch
        if isinstance(sch, int):
            return w.schedulers[sch]
        if sch == THREAD:
            return w.thread_scheduler
        if sch == TRIO:
            return w.trio_scheduler
        return sx.get_parallel_scheduler()

    def build(self, w: World) -> Sender[object]:
        hop = sx.continues_on(self.child.build(w), self._target(w))
        return _InFlight(hop, w) if self.sch == PARALLEL else hop

    def outcomes(self, mode: int, plan: Plan) -> Outcomes:
        inner = self.child.outcomes(mode, plan)
        if self.sch == PARALLEL:
            return inner | {STOPPED} if mode else inner
        return _hop_outcomes(inner, mode)

    def timing(self, mode: int, plan: Plan) -> str:
        if self.sch == THREAD or self.sch == PARALLEL:
            return UNKNOWN
        t = self.child.timing(mode, plan)
        return UNKNOWN if t == UNKNOWN else ASYNC

    def kids(self) -> tuple[Node, ...]:
        return (self.child,)

    def code(self) -> str:
        sch = self.sch
        target = f"sch[{sch}]" if isinstance(sch, int) else _HOP_CODE[sch]
        return f"{self.child.code()} | sx.continues_on({target})"


@dataclass(eq=False, repr=False)
class StartsOn(Node):
    """``sx.starts_on(sch, child)`` with ``ManualScheduler`` number ``sch`` ([exec.starts.on])."""

    sch: int
    child: Node
    kind: ClassVar[str] = "starts_on"

    def build(self, w: World) -> Sender[object]:
        return sx.starts_on(w.schedulers[self.sch], self.child.build(w))

    def outcomes(self, mode: int, plan: Plan) -> Outcomes:
        if mode == ALREADY:
            return frozenset({STOPPED})
        inner = self.child.outcomes(mode, plan)
        return inner | {STOPPED} if mode == MAYBE else inner

    def timing(self, mode: int, plan: Plan) -> str:
        return ASYNC

    def kids(self) -> tuple[Node, ...]:
        return (self.child,)

    def code(self) -> str:
        return f"sx.starts_on(sch[{self.sch}], {self.child.code()})"


@dataclass(eq=False, repr=False)
class StopPoint(Node):
    """``sx.write_env(child, sx.prop(sx.get_stop_token, points[i].get_token()))``.

    The child sees the token of stop source ``i`` instead of its parent's: a target for stop
    schedules inside the tree (and a test of ``write_env``, [exec.write.env], [exec.unstoppable]).
    """

    child: Node
    point: int
    kind: ClassVar[str] = "stop_point"

    def build(self, w: World) -> Sender[object]:
        tok = w.points[self.point].get_token()
        return sx.write_env(self.child.build(w), sx.prop(sx.get_stop_token, tok))

    def _mode(self, plan: Plan) -> int:
        m = plan.point(self.point)
        # Started while the tree was built, the child may be running before the stop
        # request made "at step 0" arrives.
        return MAYBE if m == ALREADY and self.early else m

    def outcomes(self, mode: int, plan: Plan) -> Outcomes:
        return self.child.outcomes(self._mode(plan), plan)

    def timing(self, mode: int, plan: Plan) -> str:
        return self.child.timing(self._mode(plan), plan)

    def kids(self) -> tuple[Node, ...]:
        return (self.child,)

    def code(self) -> str:
        return (
            f"sx.write_env({self.child.code()}, "
            f"sx.prop(sx.get_stop_token, points[{self.point}].get_token()))"
        )


@dataclass(eq=False, repr=False)
class Unstoppable(Node):
    """``sx.unstoppable(child)``: the child never sees a stop request ([exec.write.env],
    [exec.unstoppable])."""

    child: Node
    kind: ClassVar[str] = "unstoppable"

    def build(self, w: World) -> Sender[object]:
        return sx.unstoppable(self.child.build(w))

    def outcomes(self, mode: int, plan: Plan) -> Outcomes:
        return self.child.outcomes(NEVER, plan)

    def timing(self, mode: int, plan: Plan) -> str:
        return self.child.timing(NEVER, plan)

    def kids(self) -> tuple[Node, ...]:
        return (self.child,)

    def code(self) -> str:
        return f"sx.unstoppable({self.child.code()})"


class _InFlightOp(ForwardingOp[World]):
    """Counts its started, not yet completed operations in ``world.in_flight`` (so the driver
    knows when work may still be on a pool thread)."""

    __slots__ = ()

    def _started(self) -> None:
        w = self._arg
        with w.lock:
            w.in_flight += 1

    # The count drops only after the completion has been passed on (and has queued whatever
    # comes next), so the driver never sees "nothing in flight, nothing queued" in between.
    def _completed(self) -> None:
        w = self._arg
        with w.lock:
            w.in_flight -= 1


class _InFlight(ForwardingSender[World]):
    """Forwards to ``sndr`` through an :class:`_InFlightOp` (``arg``: the world)."""

    __slots__ = ()
    _op_type = _InFlightOp
