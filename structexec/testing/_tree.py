"""Sender trees as data, with a plain-Python model of what each tree must produce.

A :class:`Node` describes one sender (``Just``, ``Then``, ``WhenAll``, ``Hop``, ...). It can *build*
the real structexec sender in a :class:`World` (the schedulers, stop sources and scopes of one run)
and *model* it: :meth:`Node.outcomes` interprets the tree in plain Python and returns the set of
acceptable outcomes, each ``("value", datums)``, ``("error", err)`` or ``("stopped",)``. The model
knows nothing about operation states, receivers or stop callbacks; it encodes only the rules of the
spec ([exec.then], [exec.let], [exec.when.all], [exec.schedule.from], ...; [exec.factories],
[exec.write.env], [exec.unstoppable], [exec.starts.on], [exec.continues.on], [exec.on], [exec.then],
[exec.let], [exec.bulk], [exec.when.all], [exec.into.variant], [exec.stopped.opt],
[exec.stopped.err], [exec.counting.scopes], [exec.associate], [exec.stop.when], [exec.spawn],
[exec.spawn.future]).

Stop requests make outcomes depend on timing. The model takes a *stop mode* for each stop
token a subtree can see: ``NEVER`` (no stop request will ever be made), ``ALREADY`` (stop was
requested before the operation started) or ``MAYBE`` (a stop request may arrive at any
moment). Under ``MAYBE`` every point where the spec lets an algorithm observe a stop request
may or may not observe it, so the result is a set. Interleavings make ``when_all`` ambiguous
in the same way (which failing child completes first); the model enumerates the
possibilities and is exact where the order is fixed by the spec (children that complete
inline are started, and complete, in argument order: [exec.when.all]).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import structexec as sx

from .._core._adaptor_util import close_op
from .._core._values import values

__all__ = [
    "Adaptor",
    "Custom",
    "ALREADY",
    "MAYBE",
    "NEVER",
    "STOPPED",
    "Associate",
    "Coro",
    "Fn",
    "FutureRecord",
    "Hop",
    "IntoVariant",
    "Just",
    "JustError",
    "JustStopped",
    "Let",
    "Node",
    "PARALLEL",
    "Plan",
    "Schedule",
    "Spawn",
    "SpawnFuture",
    "StartsOn",
    "StopPoint",
    "StoppedAsError",
    "StoppedAsOptional",
    "Task",
    "Then",
    "THREAD",
    "TreeError",
    "TRIO",
    "Unstoppable",
    "WhenAll",
    "apply_fn",
    "error",
    "mark_late",
    "value",
]

Outcome = tuple[Any, ...]
Outcomes = frozenset[Outcome]

#: Stop modes, ordered: combining two sources of stop requests takes the maximum.
NEVER, MAYBE, ALREADY = 0, 1, 2
#: Timing classes: completes inside ``start`` / never inside ``start`` / either.
INLINE, ASYNC, UNKNOWN = "inline", "async", "unknown"

STOPPED: Outcome = ("stopped",)


def value(*args: Any) -> Outcome:
    """The outcome ``("value", args)``."""
    return ("value", args)


def error(e: Any) -> Outcome:
    """The outcome ``("error", e)``."""
    return ("error", e)


class TreeError(Exception):
    """An error datum of a generated tree. Compared by identity, so a wrapped or replaced
    error never matches the model."""

    def __init__(self, label: str) -> None:
        super().__init__(label)
        self.label = label

    def __repr__(self) -> str:
        return f"TreeError({self.label!r})"

    __eq__ = object.__eq__
    __hash__ = object.__hash__


def _mix(k: int, data: Any) -> int:
    # Deterministic across runs: hash() of ints, None and tuples of them is not randomised.
    return hash((k, data)) % 100_003


def apply_fn(f: Any, args: tuple[Any, ...]) -> Outcome:
    """The outcome of a ``then``/``upon_*`` stage calling ``f(*args)``
    (docs/trio.md "Awaiting a sender").

    ``None`` is no datum, ``sx.values(...)`` several, anything else one datum; an
    ``Exception`` becomes the error (TRY-EVAL, [exec.snd.expos], [exec.then]).
    """
    try:
        r = f(*args)
    except Exception as e:
        return ("error", e)
    if r is None:
        return ("value", ())
    if type(r) is values:
        return ("value", tuple(r))
    return ("value", (r,))


# --------------------------------------------------------------------------- functions


@dataclass(frozen=True, eq=False)
class Fn:
    """A deterministic function for ``then``/``upon_*`` stages, printable as code.

    Kinds: ``mix`` (one datum that depends on ``k`` and every argument), ``pack`` (several
    datums: the first two arguments and ``k``, via ``sx.values``), ``none`` (returns ``None``:
    no datum), ``tuple`` (the arguments as one tuple datum), ``raise`` (raises ``err``).
    """

    kind: str
    k: int = 0
    err: TreeError | None = None

    def __call__(self, *args: Any) -> Any:
        kind = self.kind
        if kind == "mix":
            return _mix(self.k, _plain(args))
        if kind == "pack":
            return values(*args[:2], self.k)
        if kind == "none":
            return None
        if kind == "tuple":
            return tuple(args)
        assert self.err is not None
        raise self.err

    def __repr__(self) -> str:
        if self.kind == "raise":
            return f"Fn.raise_({self.err!r})"
        if self.kind in ("mix", "pack"):
            return f"Fn.{self.kind}({self.k})"
        return f"Fn.{self.kind}()"

    @staticmethod
    def mix(k: int) -> Fn:
        return Fn("mix", k)

    @staticmethod
    def pack(k: int) -> Fn:
        return Fn("pack", k)

    @staticmethod
    def none() -> Fn:
        return Fn("none")

    @staticmethod
    def tuple() -> Fn:
        return Fn("tuple")

    @staticmethod
    def raise_(err: TreeError) -> Fn:
        return Fn("raise", err=err)


def _plain(x: Any) -> Any:
    # Errors passed to upon_error functions become their labels so _mix stays deterministic.
    if isinstance(x, TreeError):
        return x.label
    if isinstance(x, tuple):
        return tuple(_plain(v) for v in x)
    if isinstance(x, BaseException):
        return type(x).__name__
    return x


# --------------------------------------------------------------------------- plans and worlds


@dataclass
class Plan:
    """Which stop tokens may see a stop request, and how (``NEVER``/``MAYBE``/``ALREADY``).

    ``root`` is the mode of the root receiver's token; ``points[i]`` that of stop point
    ``i``; ``scopes[i]`` that of counting scope ``i``'s own stop source.
    """

    root: int = NEVER
    points: dict[int, int] = field(default_factory=dict)
    scopes: dict[int, int] = field(default_factory=dict)

    def point(self, i: int) -> int:
        return self.points.get(i, NEVER)

    def scope(self, i: int) -> int:
        return self.scopes.get(i, NEVER)


class World:
    """The resources one run of a tree uses; created by the driver (see ``strategies``).

    Attributes used by :meth:`Node.build`: ``schedulers`` (``ManualScheduler`` list),
    ``points`` (``inplace_stop_source`` list), ``tokens`` (scope tokens), ``thread_scheduler``,
    ``trio_scheduler``, ``spawn_log`` (``(node, outcome)`` of spawned work), ``spawned``
    (spawns whose work started), ``futures`` (a :class:`FutureRecord` per ``spawn_future``),
    ``spawn_env`` (the environment given to ``spawn``/``spawn_future``: a ``get_scheduler``,
    which a ``task`` needs), ``lock``.
    """

    schedulers: list[Any]
    points: list[Any]
    tokens: list[Any]
    thread_scheduler: Any
    trio_scheduler: Any
    spawn_log: list[tuple[Node, Outcome]]
    spawned: list[Node]
    futures: list[FutureRecord]
    spawn_env: Any
    in_flight: int
    tree_has_parallel_hop: bool
    lock: Any


def _fails(outs: Iterable[Outcome]) -> bool:
    return any(o[0] != "value" for o in outs)


def _arities(outs: Iterable[Outcome]) -> set[int]:
    return {len(o[1]) for o in outs if o[0] == "value"}


# --------------------------------------------------------------------------- nodes


class Node:
    """Base of tree nodes: ``build(world)``, ``outcomes(mode, plan)``, ``timing(mode, plan)``."""

    kind: ClassVar[str] = "?"
    #: Set by :func:`mark_late`: this node may be built after the root operation completed
    #: (inside detached work), when its scope may already be joined.
    late: bool = False
    #: Set by :func:`mark_late`: this node may be started while the tree is being built
    #: (inside the work of an eager ``spawn_future``), i.e. before the stop requests a
    #: schedule makes "at step 0".
    early: bool = False

    def build(self, w: World) -> Any:
        raise NotImplementedError

    def outcomes(self, mode: int, plan: Plan) -> Outcomes:
        raise NotImplementedError

    def timing(self, mode: int, plan: Plan) -> str:
        """``INLINE`` if it always completes inside ``start``, ``ASYNC`` if never, else
        ``UNKNOWN`` (given the stop mode)."""
        return UNKNOWN

    def kids(self) -> tuple[Node, ...]:
        return ()

    def walk(self) -> Iterator[Node]:
        """This node and all nodes below it, pre-order."""
        yield self
        for k in self.kids():
            yield from k.walk()

    def size(self) -> int:
        return sum(1 for _ in self.walk())

    def __repr__(self) -> str:
        return self.code()

    def code(self) -> str:
        raise NotImplementedError


@dataclass(eq=False, repr=False)
class Just(Node):
    """``sx.just(*vals)``."""

    vals: tuple[int, ...]
    kind: ClassVar[str] = "just"

    def build(self, w: World) -> Any:
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

    def build(self, w: World) -> Any:
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

    def build(self, w: World) -> Any:
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

    def build(self, w: World) -> Any:
        return getattr(sx, self.which)(self.child.build(w), self.fn)

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

    def build(self, w: World) -> Any:
        sub, prepend = self.sub, self.prepend

        def f(*args: Any) -> Any:
            s = sub.build(w)
            if prepend:
                s = sx.then(s, _Prepend(args))
            return s

        return getattr(sx, self.which)(self.child.build(w), f)

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

    def __init__(self, args: tuple[Any, ...]) -> None:
        self.args = args

    def __call__(self, *v: Any) -> Any:
        return values(*self.args, *v)


@dataclass(eq=False, repr=False)
class WhenAll(Node):
    """``sx.when_all(*children)`` or, with ``variant``, ``sx.when_all_with_variant``.

    Model ([exec.when.all]): stop before start gives stopped; children that complete
    inside ``start`` do so in argument order, and the first error among them is final;
    children that complete later may complete in any order; the first error wins, an error
    beats stopped, and a stop request reaches the remaining children (through when_all's own
    stop source) once a child has failed.
    """

    children: tuple[Node, ...]
    variant: bool = False
    kind: ClassVar[str] = "when_all"

    def build(self, w: World) -> Any:
        f = sx.when_all_with_variant if self.variant else sx.when_all
        return f(*(c.build(w) for c in self.children))

    def kids(self) -> tuple[Node, ...]:
        return self.children

    def code(self) -> str:
        name = "when_all_with_variant" if self.variant else "when_all"
        return f"sx.{name}({', '.join(c.code() for c in self.children)})"

    def _part(self, o: Outcome) -> tuple[Any, ...]:
        args: tuple[Any, ...] = o[1]
        return (args,) if self.variant else args

    def timing(self, mode: int, plan: Plan) -> str:
        if mode == ALREADY:
            return INLINE
        # Simulate ``start`` (phase 1 of ``outcomes``): a child started after an inline
        # sibling failed sees when_all's stop request at once (mode ALREADY), so it may
        # complete inline even though it would be asynchronous on its own.
        states: set[tuple[Any, bool]] = {("ok", False)}  # (disposition, a child pending)
        for c in self.children:
            nxt: set[tuple[Any, bool]] = set()
            for disp, pend in states:
                cmode = mode if disp == "ok" else ALREADY
                t = c.timing(cmode, plan)
                if t == UNKNOWN:
                    return UNKNOWN
                if t == INLINE:
                    nxt.update((self._step(disp, (), o)[0], pend) for o in c.outcomes(cmode, plan))
                else:
                    nxt.add((disp, True))
            states = nxt
        pending = {pend for _, pend in states}
        if pending == {True}:
            return ASYNC
        return INLINE if pending == {False} else UNKNOWN

    def outcomes(self, mode: int, plan: Plan) -> Outcomes:
        if mode == ALREADY:
            return frozenset({STOPPED})
        res: set[Outcome] = set()
        if mode == MAYBE:
            res.add(STOPPED)  # stop requested before start: no child is started
        kids = self.children
        can_fail = mode == MAYBE or any(_fails(c.outcomes(mode, plan)) for c in kids)
        late_mode = MAYBE if can_fail else NEVER
        timings = [
            t
            for c in kids
            for m in {mode, max(mode, late_mode), ALREADY}
            for t in (c.timing(m, plan),)
        ]
        if UNKNOWN in timings:
            return frozenset(res | self._coarse(mode, late_mode, plan))
        # Phase 1: children started in order; inline ones complete at once.
        # A state: (disposition, parts) where disposition is "ok", "stopped" or ("error", e)
        # and parts holds, per child, ("v", datums), ("x", ()) for a failed child, or
        # ("p", mode) for a pending child started under stop mode `mode`.
        states: set[tuple[Any, tuple[Any, ...]]] = {("ok", ())}
        for c in kids:
            nxt: set[tuple[Any, tuple[Any, ...]]] = set()
            for disp, parts in states:
                cmode = mode if disp == "ok" else ALREADY
                if c.timing(cmode, plan) == INLINE:
                    for o in c.outcomes(cmode, plan):
                        nxt.add(self._step(disp, parts, o))
                else:
                    nxt.add((disp, (*parts, ("p", cmode))))
            states = nxt
        # Phase 2: pending children complete in any order. Until the first failure nobody
        # requests stop, so the first child to fail does so "naturally" (under the mode it
        # started with); later ones may also see the stop request that failure made.
        for disp, parts in states:
            if isinstance(disp, tuple):
                res.add(disp)  # the first inline error is final ([exec.when.all])
                continue
            pend = [(i, p[1]) for i, p in enumerate(parts) if p[0] == "p"]
            natural = {i: kids[i].outcomes(m, plan) for i, m in pend}
            late = {i: kids[i].outcomes(max(m, late_mode), plan) for i, m in pend}
            if disp == "stopped":
                # An inline child stopped: every pending child may see the stop request.
                res.add(STOPPED)
                for i, _ in pend:
                    res.update(o for o in late[i] if o[0] == "error")
                continue
            # Nothing failed during start.
            for i, _ in pend:
                for o in natural[i]:
                    if o[0] == "error":
                        res.add(o)  # i failed first
                    elif o[0] == "stopped":
                        res.add(STOPPED)  # i stopped first; a later error still wins
                        for j, _ in pend:
                            if j != i:
                                res.update(x for x in late[j] if x[0] == "error")
            values_only = [
                sorted((o for o in natural[i] if o[0] == "value"), key=repr) for i, _ in pend
            ]
            for combo in itertools.product(*values_only):
                filled = list(parts)
                for (i, _), o in zip(pend, combo):
                    filled[i] = ("v", self._part(o))
                res.add(("value", tuple(x for p in filled for x in p[1])))
        return frozenset(res)

    def _step(self, disp: Any, parts: tuple[Any, ...], o: Outcome) -> tuple[Any, tuple[Any, ...]]:
        if o[0] == "error":
            if not isinstance(disp, tuple):
                disp = o  # the first error wins, and beats stopped ([exec.when.all])
            return disp, (*parts, ("x", ()))
        if o[0] == "stopped":
            return ("stopped" if disp == "ok" else disp), (*parts, ("x", ()))
        return disp, (*parts, ("v", self._part(o)))

    def _coarse(self, mode: int, late_mode: int, plan: Plan) -> set[Outcome]:
        # Completion order unknown: every child may see a stop request if any may fail.
        m = max(mode, late_mode)
        sets = [c.outcomes(m, plan) for c in self.children]
        res: set[Outcome] = set()
        for s in sets:
            res.update(o for o in s if o[0] == "error")
        if any(o[0] == "stopped" for s in sets for o in s):
            res.add(STOPPED)
        for combo in itertools.product(
            *([o for o in sorted(s, key=repr) if o[0] == "value"] for s in sets)
        ):
            res.add(("value", tuple(x for o in combo for x in self._part(o))))
        return res


@dataclass(eq=False, repr=False)
class IntoVariant(Node):
    """``sx.into_variant(child)``: the datums become one tuple datum ([exec.into.variant])."""

    child: Node
    kind: ClassVar[str] = "into_variant"

    def build(self, w: World) -> Any:
        return sx.into_variant(self.child.build(w))

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

    def build(self, w: World) -> Any:
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

    def build(self, w: World) -> Any:
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

    def build(self, w: World) -> Any:
        return self.adaptor.build(self.child.build(w))

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


def _hop_outcomes(inner: Outcomes, mode: int) -> Outcomes:
    # schedule_from: the scheduling op sees the outer token; if it completes stopped, the
    # stored result is discarded ([exec.schedule.from]).
    if mode == ALREADY:
        return frozenset({STOPPED})
    if mode == MAYBE:
        return inner | {STOPPED}
    return inner


@dataclass(eq=False, repr=False)
class Schedule(Node):
    """``sx.schedule(sch)`` on the ``ManualScheduler`` number ``sch``."""

    sch: int
    kind: ClassVar[str] = "schedule"

    def build(self, w: World) -> Any:
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

    def _target(self, w: World) -> Any:
        sch = self.sch
        if isinstance(sch, int):
            return w.schedulers[sch]
        if sch == THREAD:
            return w.thread_scheduler
        if sch == TRIO:
            return w.trio_scheduler
        return sx.get_parallel_scheduler()

    def build(self, w: World) -> Any:
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

    def build(self, w: World) -> Any:
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

    def build(self, w: World) -> Any:
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

    def build(self, w: World) -> Any:
        return sx.unstoppable(self.child.build(w))

    def outcomes(self, mode: int, plan: Plan) -> Outcomes:
        return self.child.outcomes(NEVER, plan)

    def timing(self, mode: int, plan: Plan) -> str:
        return self.child.timing(NEVER, plan)

    def kids(self) -> tuple[Node, ...]:
        return (self.child,)

    def code(self) -> str:
        return f"sx.unstoppable({self.child.code()})"


@dataclass(eq=False, repr=False)
class Associate(Node):
    """``sx.associate(child, tokens[scope])`` ([exec.associate], [exec.stop.when]): the child also
    sees the stop requests of a ``counting_scope``."""

    child: Node
    scope: int
    kind: ClassVar[str] = "associate"

    def build(self, w: World) -> Any:
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
    (docs/scopes.md "Futures outlive their work"). The driver records the work's outcome and what
    the consumer received (``world.futures``): an error that no consumer received must be reported
    by the scope's ``join`` (docs/scopes.md "What happens when things fail").
    """

    child: Node
    scope: int
    kind: ClassVar[str] = "spawn_future"

    def build(self, w: World) -> Any:
        rec = FutureRecord(self)
        with w.lock:
            w.futures.append(rec)
        s = sx.then(self.child.build(w), _Passthrough(rec, "value"))
        s = sx.let_error(s, _Passthrough(rec, "error"))
        s = sx.let_stopped(s, _Passthrough(rec, "stopped"))
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
    __slots__ = ("kind", "rec")

    def __init__(self, rec: FutureRecord, kind: str) -> None:
        self.rec = rec
        self.kind = kind

    def __call__(self, *args: Any) -> Any:
        if self.kind == "value":
            self.rec.work = ("value", args)
            return values(*args)
        if self.kind == "error":
            self.rec.work = ("error", args[0])
            return sx.just_error(args[0])
        self.rec.work = STOPPED
        return sx.just_stopped()


class _Observed(sx.Sender[Any]):
    """Forwards to the future and records what its consumer receives."""

    __slots__ = ("_fut", "_rec")

    def __init__(self, fut: Any, rec: FutureRecord) -> None:
        self._fut = fut
        self._rec = rec

    def connect(self, rcvr: Any) -> Any:
        return _ObservedOp(self._fut, rcvr, self._rec)

    def get_env(self) -> Any:
        return sx.get_env(self._fut)

    def get_completion_signatures(self, env: Any = None) -> Any:
        return sx.get_completion_signatures(self._fut, env)


class _InFlight(sx.Sender[Any]):
    """Forwards to ``sndr``; counts its started, not yet completed operations in
    ``world.in_flight`` (so the driver knows when work may still be on a pool thread)."""

    __slots__ = ("_sndr", "_w")

    def __init__(self, sndr: Any, w: World) -> None:
        self._sndr = sndr
        self._w = w

    def connect(self, rcvr: Any) -> Any:
        return _InFlightOp(self._sndr, rcvr, self._w)

    def get_env(self) -> Any:
        return sx.get_env(self._sndr)

    def get_completion_signatures(self, env: Any = None) -> Any:
        return sx.get_completion_signatures(self._sndr, env)


class _InFlightOp:
    __slots__ = ("_op", "_rcvr", "_w")

    def __init__(self, sndr: Any, rcvr: Any, w: World) -> None:
        self._rcvr = rcvr
        self._w = w
        self._op = sx.connect(sndr, self)

    def start(self) -> None:
        with self._w.lock:
            self._w.in_flight += 1
        self._op.start()

    def close(self) -> None:
        """Never started: release the child operation now
        (docs/senders.md "Writing your own sender")."""
        close_op(self._op)

    def get_env(self) -> Any:
        return sx.get_env(self._rcvr)

    def _done(self) -> None:
        with self._w.lock:
            self._w.in_flight -= 1

    # The count drops only after the completion has been passed on (and has queued whatever
    # comes next), so the driver never sees "nothing in flight, nothing queued" in between.
    def set_value(self, *vals: Any) -> None:
        try:
            self._rcvr.set_value(*vals)
        finally:
            self._done()

    def set_error(self, err: Any) -> None:
        try:
            self._rcvr.set_error(err)
        finally:
            self._done()

    def set_stopped(self) -> None:
        try:
            self._rcvr.set_stopped()
        finally:
            self._done()


class _ObservedOp:
    __slots__ = ("_op", "_rcvr", "_rec")

    def __init__(self, fut: Any, rcvr: Any, rec: FutureRecord) -> None:
        self._rcvr = rcvr
        self._rec = rec
        self._op = sx.connect(fut, self)

    def start(self) -> None:
        self._rec.consumer_started = True
        self._op.start()

    def close(self) -> None:
        """Never started: release the future's operation now
        (docs/senders.md "Writing your own sender")."""
        close_op(self._op)

    def get_env(self) -> Any:
        return sx.get_env(self._rcvr)

    def set_value(self, *vals: Any) -> None:
        self._rec.consumer = ("value", vals)
        self._rcvr.set_value(*vals)

    def set_error(self, err: Any) -> None:
        self._rec.consumer = ("error", err)
        self._rcvr.set_error(err)

    def set_stopped(self) -> None:
        self._rec.consumer = STOPPED
        self._rcvr.set_stopped()


@dataclass(eq=False, repr=False)
class Spawn(Node):
    """``sx.just() | sx.then(lambda: sx.spawn(work', tokens[scope]))``: completes ``value()``.

    ``work'`` records the outcome of ``work`` in ``world.spawn_log`` and completes
    ``set_value()``; ``world.spawned`` records each spawn whose work was started (a scope
    that is already joined refuses the association, and ``spawn`` then drops the work); with
    ``catch=False`` an error is recorded and then sent on, so the scope must report it from
    ``join`` (docs/scopes.md "The nursery face: `async with`").
    """

    work: Node
    scope: int
    catch: bool = True
    kind: ClassVar[str] = "spawn"

    def build(self, w: World) -> Any:
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


def mark_late(root: Node) -> None:
    """Mark the nodes that may be built after the root operation has completed (``late``), and
    those that may start while the tree is being built (``early``).

    Work given to ``spawn`` and the work of a ``spawn_future`` run on their own and may
    outlive the root (an abandoned future's work keeps running,
    docs/scopes.md "Futures outlive their work"). Inside such detached work, what is built lazily
    (the sender a ``let_*`` function returns, the work of a ``spawn``) may be built late. The driver
    joins the scopes once the root completes, so a late ``associate``, ``spawn_future`` or ``spawn``
    may find its scope joined.
    """

    def visit(n: Node, detached: bool, lazy: bool, early: bool) -> None:
        n.late = detached and lazy
        n.early = early
        if isinstance(n, Let):
            visit(n.child, detached, lazy, early)
            visit(n.sub, detached, True, early)
        elif isinstance(n, Spawn):
            visit(n.work, True, True, early)
        elif isinstance(n, SpawnFuture):
            # spawn_future starts its work when called: at build time unless built lazily.
            visit(n.child, True, lazy, early or not lazy)
        else:
            for k in n.kids():
                visit(k, detached, lazy, early)

    visit(root, False, False, False)


def _then_return(log: Any, o: Outcome, result: Any) -> Any:
    log(o)
    return result


def _coro_outcomes(inner: Outcomes, mode: int) -> Outcomes:
    # A coroutine returns what `await` gave: None for no datum, the datum, or a tuple; its sender
    # sends None as no datum (docs/trio.md "Awaiting a sender",
    # docs/task.md 'How "stopped" unwinds a task'). Stopped unwinds the coroutine.
    out: set[Outcome] = set()
    for o in inner:
        if o[0] == "value":
            args = o[1]
            r = None if not args else args[0] if len(args) == 1 else args
            out.add(("value", ()) if r is None else ("value", (r,)))
        else:
            out.add(o)
    if mode:
        out.add(STOPPED)
    return frozenset(out)


class _CoroutineAtConnect(sx.Sender[Any]):
    """Makes the coroutine object when connected, and connects that ([exec.connect]).

    A coroutine object that is never connected (the tree stopped before reaching it) would
    make Python warn "coroutine ... was never awaited"; a real program would not create it.
    """

    __slots__ = ("_s",)

    def __init__(self, s: Any) -> None:
        self._s = s

    def connect(self, rcvr: Any) -> Any:
        s = self._s

        async def f() -> Any:
            return await s

        return sx.connect(f(), rcvr)


@dataclass(eq=False, repr=False)
class Coro(Node):
    """A coroutine object as a sender: ``(async def f(): return await child)()``
    ([exec.connect])."""

    child: Node
    kind: ClassVar[str] = "coroutine"

    def build(self, w: World) -> Any:
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

    def build(self, w: World) -> Any:
        s = self.child.build(w)

        @sx.task
        async def f() -> Any:
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
