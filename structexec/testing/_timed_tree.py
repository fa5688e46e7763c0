"""Timed sender trees: timers, ``when_any``, ``stop_when``, ``timeout``/``stop_after``.

The nodes here extend the tree model of ``_tree`` (the testing guide "Timed trees"). Their outcome
depends on *when* things happen, so they are modelled differently from the rest: instead of a
set of acceptable outcomes under a stop mode, :func:`simulate` interprets a whole tree as a
plain-Python discrete-event simulation on virtual time and predicts the one outcome, and the
virtual time at which the root completes. The real tree runs on one
``ManualScheduler`` whose clock the driver (:func:`run_timed_tree`) moves with ``advance``:
timers fire in deadline order and first-in-first-out among equal deadlines (in the order
their operations were started), so every run of a timed tree is deterministic.

The simulation knows the documented rules of the algorithms (the time guide, its "Racing" section)
and nothing about operation states:

* ``sx.schedule_after(sch, d)`` started at time ``t`` completes ``set_value()`` at ``t + d``
  (``d == 0`` waits for the next ``advance``); a stop request, or one already made at start,
  completes it ``set_stopped()`` at once;
* a race (``when_any``, ``stop_when``, ``timeout``, ``stop_after``) stopped before start
  completes stopped without starting a child; it starts its children in order, and stops
  starting them once its result is decided; the first completion of a child requests stop
  on the others; it completes once every started child has completed. ``when_any`` and the
  timeouts deliver the first completion (a stop request on the receiver decides
  ``set_stopped()`` unless a child completed before); ``stop_when`` always delivers the
  completion of its first child. The timer of ``timeout`` (child 1, started after the work)
  turns its value into ``set_error(TimeoutError)`` (``stop_after``: ``set_stopped()``);
* ``when_all``, ``then``, ``let_value`` and the factories as in ``_tree``.

Timed trees contain only nodes whose reaction to a stop request is to complete stopped
(no ``upon_stopped``, ``let_stopped``, ``stopped_as_*``, ``unstoppable``): the order in which a
stop source runs its callbacks then never changes the outcome, and the simulation is exact.
Trees with thread or trio hops are not timed trees: there, which completion comes first
depends on real threads, and the model could only give a set of outcomes.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn

import structexec as sx

from ._manual import ManualScheduler
from ._receiver import RecordingReceiver
from ._tree import (
    STOPPED,
    Just,
    JustError,
    JustStopped,
    Let,
    Node,
    Outcome,
    Outcomes,
    Plan,
    Then,
    WhenAll,
    World,
    apply_fn,
)

if TYPE_CHECKING:
    from .._core._completion_signatures import completion_signatures
    from .._core._contracts import Env
    from .._core._protocol import Sender
    from ._protocols import ReceiverLike


__all__ = [
    "TIMEOUT",
    "StopWhen",
    "TimedResult",
    "TimedTree",
    "Timeout",
    "Timer",
    "WhenAny",
    "run_timed_tree",
    "simulate",
    "timed_world",
]

#: The error datum of a fired ``timeout`` in outcomes: the real ``TimeoutError`` is compared
#: by type (``("error", TIMEOUT)``).
TIMEOUT = "TimeoutError"


def _not_set_based(node: Node) -> NoReturn:
    raise TypeError(
        f"{node.kind} is a timed node: its outcome depends on virtual time, so it is "
        "modelled by simulate() (run it with run_timed_tree), not by Node.outcomes"
    )


@dataclass(eq=False, repr=False)
class Timer(Node):
    """``sx.schedule_after(sch[0], seconds)``: ``set_value()`` once the clock has moved on by
    ``seconds``."""

    seconds: int
    kind: ClassVar[str] = "schedule_after"

    def build(self, w: World) -> Sender[object]:
        return sx.schedule_after(w.schedulers[0], self.seconds)

    def outcomes(self, mode: int, plan: Plan) -> Outcomes:
        _not_set_based(self)

    def code(self) -> str:
        return f"sx.schedule_after(sch[0], {self.seconds})"


@dataclass(eq=False, repr=False)
class WhenAny(Node):
    """``sx.when_any(*children)``: the first completion of any kind wins."""

    children: tuple[Node, ...]
    kind: ClassVar[str] = "when_any"

    def build(self, w: World) -> Sender[object]:
        return sx.when_any(*(c.build(w) for c in self.children))

    def outcomes(self, mode: int, plan: Plan) -> Outcomes:
        _not_set_based(self)

    def kids(self) -> tuple[Node, ...]:
        return self.children

    def code(self) -> str:
        return f"sx.when_any({', '.join(c.code() for c in self.children)})"


@dataclass(eq=False, repr=False)
class StopWhen(Node):
    """``sx.stop_when(child, trigger)``: ``child``'s completion; ``trigger`` completing first
    asks ``child`` to stop."""

    child: Node
    trigger: Node
    kind: ClassVar[str] = "stop_when"

    def build(self, w: World) -> Sender[object]:
        return sx.stop_when(self.child.build(w), self.trigger.build(w))

    def outcomes(self, mode: int, plan: Plan) -> Outcomes:
        _not_set_based(self)

    def kids(self) -> tuple[Node, ...]:
        return (self.child, self.trigger)

    def code(self) -> str:
        return f"sx.stop_when({self.child.code()}, {self.trigger.code()})"


@dataclass(eq=False, repr=False)
class Timeout(Node):
    """``sx.timeout(child, seconds)`` (``set_error(TimeoutError)`` when the time passes first),
    or with ``stop``, ``sx.stop_after(child, seconds)`` (``set_stopped()``). The clock is the
    receiver's ``get_scheduler``: ``sch[0]`` in :func:`run_timed_tree`."""

    child: Node
    seconds: int
    stop: bool = False
    kind: ClassVar[str] = "timeout"

    def build(self, w: World) -> Sender[object]:
        f = sx.stop_after if self.stop else sx.timeout
        return f(self.child.build(w), self.seconds)

    def outcomes(self, mode: int, plan: Plan) -> Outcomes:
        _not_set_based(self)

    def kids(self) -> tuple[Node, ...]:
        return (self.child,)

    def code(self) -> str:
        name = "stop_after" if self.stop else "timeout"
        return f"sx.{name}({self.child.code()}, {self.seconds})"


# --------------------------------------------------------------------------- the simulation


class _Source:
    """A model stop source: callbacks run once, in registration order; registering on a
    stopped source runs the callback at once."""

    def __init__(self) -> None:
        self.stopped = False
        self._cbs: dict[int, Callable[[], None]] = {}
        self._ids = itertools.count()

    def on(self, fn: Callable[[], None]) -> int:
        if self.stopped:
            fn()
            return -1
        key = next(self._ids)
        self._cbs[key] = fn
        return key

    def off(self, key: int) -> None:
        self._cbs.pop(key, None)

    def request(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        cbs = list(self._cbs.values())
        self._cbs.clear()
        for f in cbs:
            f()


K = Callable[[Outcome], None]


class _Sim:
    def __init__(self) -> None:
        self.now = 0
        self._heap: list[tuple[int, int, list[Any]]] = []
        self._seq = itertools.count()

    def timer(self, seconds: int, tok: _Source, k: K) -> None:
        if tok.stopped:
            k(STOPPED)
            return
        entry: list[Any] = [True, None]

        def on_stop() -> None:
            if entry[0]:
                entry[0] = False
                k(STOPPED)

        entry[1] = tok.on(on_stop)

        def fire() -> None:
            entry[0] = False
            tok.off(entry[1])
            k(("value", ()))

        entry.append(fire)
        heapq.heappush(self._heap, (self.now + seconds, next(self._seq), entry))

    def pending(self) -> bool:
        while self._heap and not self._heap[0][2][0]:
            heapq.heappop(self._heap)
        return bool(self._heap)

    def next_deadline(self) -> int:
        return self._heap[0][0]

    def advance_to(self, t: int) -> None:
        """Fire every live timer due by ``t`` (also those started meanwhile), in deadline
        order, FIFO among equal deadlines; then the time is ``t``."""
        while self.pending() and self._heap[0][0] <= t:
            deadline, _, entry = heapq.heappop(self._heap)
            self.now = max(self.now, deadline)
            entry[2]()
        self.now = max(self.now, t)

    # -- nodes

    def run(self, n: Node, tok: _Source, k: K) -> None:
        if isinstance(n, Just):
            k(("value", n.vals))
        elif isinstance(n, JustError):
            k(("error", n.err))
        elif isinstance(n, JustStopped):
            k(STOPPED)
        elif isinstance(n, Then):
            match = {"then": "value", "upon_error": "error", "upon_stopped": "stopped"}[n.which]
            fn = n.fn

            def then_k(o: Outcome) -> None:
                if o[0] != match:
                    k(o)
                elif match == "value":
                    k(apply_fn(fn, o[1]))
                elif match == "error":
                    k(apply_fn(fn, (o[1],)))
                else:
                    k(apply_fn(fn, ()))

            self.run(n.child, tok, then_k)
        elif isinstance(n, Let):
            self._let(n, tok, k)
        elif isinstance(n, WhenAll):
            self._when_all(n, tok, k)
        elif isinstance(n, Timer):
            self.timer(n.seconds, tok, k)
        elif isinstance(n, WhenAny):
            starters = [self._starter(c) for c in n.children]
            self._race(starters, -1, tok, k)
        elif isinstance(n, StopWhen):
            self._race([self._starter(n.child), self._starter(n.trigger)], 0, tok, k)
        elif isinstance(n, Timeout):
            seconds, stop = n.seconds, n.stop

            def timer(t: _Source, kk: K) -> None:
                def mapped(o: Outcome) -> None:
                    if o[0] == "value":
                        kk(STOPPED if stop else ("error", TIMEOUT))
                    else:
                        kk(o)

                self.timer(seconds, t, mapped)

            self._race([self._starter(n.child), timer], -1, tok, k)
        else:
            raise TypeError(f"{n.kind} nodes cannot be part of a timed tree")

    def _starter(self, n: Node) -> Callable[[_Source, K], None]:
        return lambda t, kk: self.run(n, t, kk)

    def _let(self, n: Let, tok: _Source, k: K) -> None:
        match = {"let_value": "value", "let_error": "error", "let_stopped": "stopped"}[n.which]

        def let_k(o: Outcome) -> None:
            if o[0] != match:
                k(o)
            elif n.prepend and match == "value":
                args = o[1]
                self.run(
                    n.sub, tok, lambda o2: k(("value", args + o2[1]) if o2[0] == "value" else o2)
                )
            else:
                self.run(n.sub, tok, k)

        self.run(n.child, tok, let_k)

    def _when_all(self, n: WhenAll, tok: _Source, k: K) -> None:
        if tok.stopped:
            k(STOPPED)
            return
        src = _Source()
        kids = n.children
        st: dict[str, Any] = {"disp": "ok", "count": len(kids)}
        parts: list[tuple[Any, ...]] = [() for _ in kids]
        key = tok.on(src.request)

        def arrive(i: int, o: Outcome) -> None:
            if o[0] == "value":
                parts[i] = (o[1],) if n.variant else o[1]
            elif o[0] == "error":
                if not (isinstance(st["disp"], tuple)):
                    st["disp"] = o
                src.request()
            else:
                if st["disp"] == "ok":
                    st["disp"] = "stopped"
                src.request()
            st["count"] = c = st["count"] - 1
            if c == 0:
                tok.off(key)
                d = st["disp"]
                if d == "ok":
                    k(("value", tuple(x for p in parts for x in p)))
                elif d == "stopped":
                    k(STOPPED)
                else:
                    k(d)

        for i, c in enumerate(kids):
            self.run(c, src, lambda o, i=i: arrive(i, o))  # type: ignore[misc]

    def _race(
        self, starters: list[Callable[[_Source, K], None]], primary: int, tok: _Source, k: K
    ) -> None:
        if tok.stopped:
            k(STOPPED)
            return
        src = _Source()
        n = len(starters)
        st: dict[str, Any] = {"fired": False, "result": None, "count": n}

        def outer() -> None:
            if primary < 0 and not st["fired"]:
                st["fired"] = True
                st["result"] = STOPPED
            src.request()

        key = tok.on(outer)

        def complete() -> None:
            tok.off(key)
            k(st["result"])

        def arrive(i: int, o: Outcome) -> None:
            first = not st["fired"]
            st["fired"] = True
            if st["result"] is None and (primary < 0 or i == primary):
                st["result"] = o
            st["count"] = c = st["count"] - 1
            if first:
                src.request()
            if c == 0:
                complete()

        for i, start in enumerate(starters):
            if st["result"] is not None:  # decided: the rest are not started
                st["count"] -= n - i
                if st["count"] == 0:
                    complete()
                return
            start(src, lambda o, i=i: arrive(i, o))  # type: ignore[misc]


def simulate(root: Node, stop_at: int | None = None) -> tuple[Outcome, int]:
    """The outcome of ``root`` and the virtual time it completes at, when it is started at
    time 0 and a stop request reaches its receiver at ``stop_at`` (``None``: never; ``-1``:
    before it starts; else after every timer due by ``stop_at`` has fired)."""
    sim = _Sim()
    tok = _Source()
    got: list[tuple[Outcome, int]] = []

    def done(o: Outcome) -> None:
        if got:
            raise AssertionError(f"model: second completion {o!r} after {got[0]!r}")
        got.append((o, sim.now))

    if stop_at is not None and stop_at < 0:
        tok.request()
    sim.run(root, tok, done)
    if stop_at is not None and stop_at >= 0 and not got:
        sim.advance_to(stop_at)
        tok.request()
    while not got and sim.pending():
        sim.advance_to(sim.next_deadline())
    if not got:
        raise AssertionError("model: the tree never completes")
    return got[0]


# --------------------------------------------------------------------------- the driver


class TimedTree:
    """A timed tree (see the module docstring) and when its root gets a stop request
    (``stop_at``: ``None`` never, ``-1`` before start, else at that virtual time).

    Its ``repr`` is the code of the tree, so hypothesis prints a failing case as a
    reproducer: ``TimedTree(sx.timeout(sx.schedule_after(sch[0], 3), 2), stop_at=None)``.
    """

    __slots__ = ("root", "stop_at")

    def __init__(self, root: Node, stop_at: int | None = None) -> None:
        self.root = root
        self.stop_at = stop_at

    def model(self) -> tuple[Outcome, int]:
        """``(outcome, time)``: what the root completes with, and at which virtual time."""
        return simulate(self.root, self.stop_at)

    def code(self) -> str:
        return self.root.code()

    def __repr__(self) -> str:
        return f"TimedTree({self.root.code()}, stop_at={self.stop_at!r})"


class _TimedWorld(World):
    def __init__(self, sch: ManualScheduler) -> None:
        super().__init__()
        self.schedulers = [sch]
        self.points = []
        self.tokens = []
        self.spawn_log = []
        self.spawned = []
        self.futures = []
        self.in_flight = 0
        self.tree_has_parallel_hop = False
        self.lock = threading.Lock()


def timed_world(sch: ManualScheduler) -> World:
    """The :class:`World` a timed tree is built in: ``sch[0]`` is ``sch``."""
    return _TimedWorld(sch)


@dataclass
class TimedResult:
    """What :func:`run_timed_tree` saw; :meth:`check` compares it with the model."""

    tree: TimedTree
    outcome: Outcome | None
    time: float | None
    rec: RecordingReceiver
    pending_timers: int
    expected: tuple[Outcome, int] = field(default=(STOPPED, 0))

    def check(self) -> None:
        """Assert: the root completed exactly once, with no stop callback left registered,
        with the modelled outcome at the modelled virtual time, and no timer is left pending."""
        head = f"\n  tree:  {self.tree.code()}\n  stop_at: {self.tree.stop_at!r}"
        if self.rec.violations:
            raise AssertionError(f"{self.rec.violations[0]}{head}")
        if self.outcome is None:
            raise AssertionError(f"the root never completed{head}\n  model: {self.expected}")
        assert self.rec.live_callbacks_at_completion == 0, (
            f"a stop callback was still registered at completion{head}"
        )
        got = (self.outcome, self.time)
        want = (self.expected[0], float(self.expected[1]))
        if got != want:
            raise AssertionError(
                f"outcome or time differs from the model{head}\n  model: {want!r}\n  got:   {got!r}"
            )
        if self.pending_timers:
            raise AssertionError(f"{self.pending_timers} timer(s) left pending{head}")


def _normalise(o: Outcome) -> Outcome:
    if o[0] == "error" and isinstance(o[1], TimeoutError):
        return ("error", TIMEOUT)
    return o


def run_timed_tree(tree: TimedTree | Node, stop_at: int | None = None) -> TimedResult:
    """Run a timed tree on a fresh ``ManualScheduler`` ``sch[0]`` (also the receiver's
    ``get_scheduler``, the clock of ``timeout``/``stop_after``): start the root at time 0,
    request stop at ``stop_at`` (after ``advance`` to it), then advance to each next deadline
    until the root completes. Returns a :class:`TimedResult`; call ``check()``."""
    if not isinstance(tree, TimedTree):
        tree = TimedTree(tree, stop_at)
    expected = tree.model()
    sch = ManualScheduler("timed")
    w = _TimedWorld(sch)
    seen: list[tuple[Outcome, float]] = []
    rec = RecordingReceiver(extra_env=sx.prop(sx.get_scheduler, sch))
    s = _Clocked(tree.root.build(w), sch, seen)
    if tree.stop_at is not None and tree.stop_at < 0:
        rec.request_stop()
    rec.run(s)
    if tree.stop_at is not None and tree.stop_at >= 0 and not rec.done:
        sch.advance(tree.stop_at - sch.now())
        rec.request_stop()
    steps = 0
    while not rec.done and sch.pending_timers:
        sch.advance(sch.next_deadline - sch.now())
        steps += 1
        if steps > 10_000:  # pragma: no cover - a livelock
            break
    outcome = time = None
    if seen:
        outcome, time = _normalise(seen[0][0]), seen[0][1]
    return TimedResult(tree, outcome, time, rec, sch.pending_timers, expected)


class _Clocked(sx.Sender[object]):
    """Forwards to ``sndr``; records the completion and ``sch.now()`` at that moment."""

    __slots__ = ("_s", "_sch", "_seen")

    def __init__(
        self, sndr: Sender[object], sch: ManualScheduler, seen: list[tuple[Outcome, float]]
    ) -> None:
        self._s = sndr
        self._sch = sch
        self._seen = seen

    def connect(self, rcvr: ReceiverLike) -> _ClockedOp:
        return _ClockedOp(self._s, rcvr, self._sch, self._seen)

    def get_completion_signatures(self, env: object = None) -> completion_signatures | None:
        return sx.get_completion_signatures(self._s, env)


class _ClockedOp:
    __slots__ = ("_op", "_rcvr", "_sch", "_seen")

    def __init__(
        self,
        sndr: Sender[object],
        rcvr: ReceiverLike,
        sch: ManualScheduler,
        seen: list[tuple[Outcome, float]],
    ) -> None:
        self._rcvr = rcvr
        self._sch = sch
        self._seen = seen
        self._op = sx.connect(sndr, self)

    def start(self) -> None:
        self._op.start()

    def get_env(self) -> Env:
        return sx.get_env(self._rcvr)

    def set_value(self, *vals: object) -> None:
        self._seen.append((("value", vals), self._sch.now()))
        self._rcvr.set_value(*vals)

    def set_error(self, err: object) -> None:
        self._seen.append((("error", err), self._sch.now()))
        self._rcvr.set_error(err)

    def set_stopped(self) -> None:
        self._seen.append((STOPPED, self._sch.now()))
        self._rcvr.set_stopped()
