"""Sender trees as data: outcomes, stop modes, plans, the world, the :class:`Node` base and the
base of the nodes' forwarding test senders (:class:`ForwardingSender`, :class:`ForwardingOp`).

What a :class:`Node` is, how it *builds* its sender in a :class:`World` and *models* it
(:meth:`Node.outcomes`: the set of acceptable outcomes under a stop mode, ``NEVER``, ``MAYBE``
or ``ALREADY``) is told once, in the docstring of ``structexec.testing._tree``, the module
that gathers the node families.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from .._core._adaptor_util import close_op
from .._core._completion_signatures import get_completion_signatures
from .._core._connect import connect
from .._core._env import get_env
from .._core._protocol import Sender
from .._core._values import values
from ._protocols import ReceiverLike as ReceiverLike

if TYPE_CHECKING:
    import threading

    from .._core._completion_signatures import completion_signatures
    from .._core._contracts import Env, OpState
    from .._core._env import prop
    from .._core._stop_token import inplace_stop_source
    from ._manual import ManualScheduler
    from ._thread_sched import ThreadScheduler
    from ._tree_scopes import FutureRecord

_A = TypeVar("_A", covariant=True)

Outcome = tuple[Any, ...]
Outcomes = frozenset[Outcome]

#: Stop modes, ordered: combining two sources of stop requests takes the maximum.
NEVER, MAYBE, ALREADY = 0, 1, 2
#: Timing classes: completes inside ``start`` / never inside ``start`` / either.
INLINE, ASYNC, UNKNOWN = "inline", "async", "unknown"

STOPPED: Outcome = ("stopped",)


def value(*args: object) -> Outcome:
    """The outcome ``("value", args)``."""
    return ("value", args)


def error(e: object) -> Outcome:
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


def _mix(k: int, data: object) -> int:
    # Deterministic across runs: hash() of ints, None and tuples of them is not randomised.
    return hash((k, data)) % 100_003


def apply_fn(f: Callable[..., object], args: tuple[object, ...]) -> Outcome:
    """The outcome of a ``then``/``upon_*`` stage calling ``f(*args)``
    (the trio guide "Awaiting a sender").

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

    def __call__(self, *args: object) -> object:
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


def _plain(x: object) -> object:
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

    schedulers: list[ManualScheduler]
    points: list[inplace_stop_source]
    tokens: list[object]
    thread_scheduler: ThreadScheduler | None
    trio_scheduler: object
    spawn_log: list[tuple[Node, Outcome]]
    spawned: list[Node]
    futures: list[FutureRecord]
    spawn_env: prop[object]
    in_flight: int
    tree_has_parallel_hop: bool
    lock: threading.Lock


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

    def build(self, w: World) -> Sender[object]:
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


def _hop_outcomes(inner: Outcomes, mode: int) -> Outcomes:
    # schedule_from: the scheduling op sees the outer token; if it completes stopped, the
    # stored result is discarded ([exec.schedule.from]).
    if mode == ALREADY:
        return frozenset({STOPPED})
    if mode == MAYBE:
        return inner | {STOPPED}
    return inner


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


# --------------------------------------------------------------------------- forwarding senders


class ForwardingSender(Sender[object], Generic[_A]):
    """A test sender that forwards to ``sndr``: its environment and completion signatures are
    ``sndr``'s; ``connect`` makes the subclass's ``_op_type(sndr, rcvr, arg)``, the
    :class:`ForwardingOp` that observes (``arg``: what it records into)."""

    __slots__ = ("_arg", "_sndr")
    _op_type: ClassVar[type[ForwardingOp[object]]]

    def __init__(self, sndr: Sender[object], arg: _A) -> None:
        self._sndr = sndr
        self._arg = arg

    def connect(self, rcvr: ReceiverLike) -> ForwardingOp[object]:
        return self._op_type(self._sndr, rcvr, self._arg)

    def get_env(self) -> Env:
        return get_env(self._sndr)

    def get_completion_signatures(self, env: object = None) -> completion_signatures | None:
        return get_completion_signatures(self._sndr, env)


class ForwardingOp(Generic[_A]):
    """Connects ``sndr`` to itself and passes each completion on to ``rcvr`` unchanged
    (``arg``: what a subclass records into).

    A subclass observes through three hooks (no-ops here): ``_started()`` before the child
    operation starts, ``_completing(outcome)`` before a completion is passed on (``outcome``
    as in the model: ``("value", datums)``, ``("error", err)`` or ``STOPPED``) and
    ``_completed()`` after it was passed on, also when passing it on raised.
    """

    __slots__ = ("_arg", "_op", "_rcvr")

    def __init__(self, sndr: Sender[object], rcvr: ReceiverLike, arg: _A) -> None:
        self._rcvr = rcvr
        self._arg = arg
        self._op: OpState = connect(sndr, self)

    def _started(self) -> None:
        pass

    def _completing(self, outcome: Outcome) -> None:
        pass

    def _completed(self) -> None:
        pass

    def start(self) -> None:
        self._started()
        self._op.start()

    def close(self) -> None:
        """Never started: release the child operation now
        (the senders guide "Writing your own sender")."""
        close_op(self._op)

    def get_env(self) -> Env:
        return get_env(self._rcvr)

    def set_value(self, *vals: object) -> None:
        self._completing(("value", vals))
        try:
            self._rcvr.set_value(*vals)
        finally:
            self._completed()

    def set_error(self, err: object) -> None:
        self._completing(("error", err))
        try:
            self._rcvr.set_error(err)
        finally:
            self._completed()

    def set_stopped(self) -> None:
        self._completing(STOPPED)
        try:
            self._rcvr.set_stopped()
        finally:
            self._completed()
