"""Hot paths vs a minimal pure-Python model of the same protocol steps (the "floor").

Each row times the real structexec path and, in the same run, a model of it written the
shortest way Python allows: one plain class per protocol role (sender, receiver, operation
state), the same calls in the same order (build the sender, connect, start, complete, hand
the result back), and no checks at all (no twice-started or completed-twice guards, no
domains, no completion signatures, no stop tokens, no BaseException handling). The ratio
real / model is how much the library's guarantees cost on top of the protocol itself; the
target is 2.0x.

* ``await sx.just(x)`` in a trio task vs ``await FloorJust(x)``: the model's ``__await__``
  connects a receiver, starts, and returns the datum without yielding to trio;
* ``sync_wait(just(0) | then(inc) * 10)`` vs the model: the chain connected as one
  operation that runs the ten functions in a loop (the real path fuses adjacent ``then``
  stages the same way, [exec.then]), started by a blocking wait that needs no loop because
  the work completes inline;
* ``sx.spawn(sx.just() | sx.then(f), token)`` into a ``counting_scope`` vs the model: a
  counter under a lock for the scope, one fused just-then operation whose completion
  decrements it.

The model is structurally what the real hot path does (the same fusion), so the ratio
measures the checks and layers, not the structure.

``scope.spawn`` has its own floor row in ``bench_scopes.py``.
"""

from __future__ import annotations

import threading
from collections.abc import Generator
from typing import Any

import structexec as sx
from _harness import Bench, Pair, row, timeit_sync, timeit_trio

# --------------------------------------------------------------------------- the model


class FloorRcvr:
    """The receiver that hands the result to its consumer."""

    __slots__ = ("kind", "vals")

    def __init__(self) -> None:
        self.kind = 0
        self.vals: Any = None

    def set_value(self, *vals: Any) -> None:
        self.vals = vals
        self.kind = 1

    def set_error(self, err: Any) -> None:
        self.vals = err
        self.kind = 2

    def set_stopped(self) -> None:
        self.kind = 3


class FloorJustOp:
    __slots__ = ("rcvr", "vals")

    def __init__(self, rcvr: Any, vals: tuple[Any, ...]) -> None:
        self.rcvr = rcvr
        self.vals = vals

    def start(self) -> None:
        self.rcvr.set_value(*self.vals)


class FloorJust:
    __slots__ = ("vals",)

    def __init__(self, *vals: Any) -> None:
        self.vals = vals

    def connect(self, rcvr: Any) -> FloorJustOp:
        return FloorJustOp(rcvr, self.vals)

    def __or__(self, closure: Any) -> Any:
        return closure(self)

    def __await__(self) -> Generator[Any, Any, Any]:
        r = FloorRcvr()
        self.connect(r).start()
        if r.kind == 1:
            vals = r.vals
            return vals[0] if len(vals) == 1 else (vals or None)
        yield  # pragma: no cover - the model only handles inline completion


class FloorChainOp:
    """``just(*vals) | then(f1) | ... | then(fk)`` connected as one operation, as the real
    path fuses it: start runs the functions in a loop and completes."""

    __slots__ = ("fns", "rcvr", "vals")

    def __init__(self, rcvr: Any, vals: tuple[Any, ...], fns: tuple[Any, ...]) -> None:
        self.rcvr = rcvr
        self.vals = vals
        self.fns = fns

    def start(self) -> None:
        try:
            fns = self.fns
            r = fns[0](*self.vals)
            for f in fns[1:]:
                r = f(r)
        except Exception as e:
            self.rcvr.set_error(e)
            return
        if r is None:
            self.rcvr.set_value()
        else:
            self.rcvr.set_value(r)


class FloorThen:
    """A then-sender over a just (or over another then of one): it keeps the base's datums
    and the tuple of functions, so connecting it is one object."""

    __slots__ = ("fns", "vals")

    def __init__(self, child: Any, fn: Any) -> None:
        if type(child) is FloorThen:
            self.vals = child.vals
            self.fns = (*child.fns, fn)
        else:
            self.vals = child.vals
            self.fns = (fn,)

    def connect(self, rcvr: Any) -> FloorChainOp:
        return FloorChainOp(rcvr, self.vals, self.fns)

    def __or__(self, closure: Any) -> Any:
        return closure(self)


class floor_then:
    """``then(f)``'s closure: ``sndr | floor_then(f)``."""

    __slots__ = ("fn",)

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def __call__(self, child: Any) -> FloorThen:
        return FloorThen(child, self.fn)


def floor_sync_wait(sndr: Any) -> Any:
    """A blocking wait for work that completes inline: no loop needed."""
    r = FloorRcvr()
    sndr.connect(r).start()
    if r.kind == 1:
        return r.vals
    if r.kind == 2:
        raise r.vals
    return None


class FloorScope:
    __slots__ = ("count", "lock")

    def __init__(self) -> None:
        self.count = 0
        self.lock = threading.Lock()


class FloorSpawnRcvr:
    """The spawn receiver: completion releases the association (under the scope's lock, as
    the scope may be joined from another thread)."""

    __slots__ = ("scope",)

    def __init__(self, scope: FloorScope) -> None:
        self.scope = scope

    def set_value(self, *vals: Any) -> None:
        scope = self.scope
        scope.lock.acquire()
        scope.count -= 1
        scope.lock.release()

    def set_error(self, err: Any) -> None:
        self.set_value()

    def set_stopped(self) -> None:
        self.set_value()


def floor_spawn(sndr: Any, scope: FloorScope) -> None:
    op = sndr.connect(FloorSpawnRcvr(scope))
    lock = scope.lock
    lock.acquire()
    scope.count += 1
    lock.release()
    op.start()


# --------------------------------------------------------------------------- rows


def _inc(x: int) -> int:
    return x + 1


def _noop() -> None:
    pass


def _best(f: Any, reps: int = 3) -> float:
    return min(f() for _ in range(reps))


def await_just_pair(n: int) -> Pair:
    async def real() -> None:
        await sx.just(1)

    async def model() -> None:
        await FloorJust(1)

    return _best(lambda: timeit_trio(real, n)), _best(lambda: timeit_trio(model, n))


@row(metric="await sx.just(x) in trio vs its pure-Python model", unit="us/op", target=2.0)
def await_just_floor(b: Bench) -> Pair:
    return await_just_pair(b.n(50_000))


def chain_pair(n: int) -> Pair:
    p: Any = sx.just(0)
    m: Any = FloorJust(0)
    for _ in range(10):
        p = p | sx.then(_inc)
        m = m | floor_then(_inc)
    assert sx.sync_wait(p) == (10,) and floor_sync_wait(m) == (10,)
    sync_wait = sx.sync_wait
    return (
        _best(lambda: timeit_sync(lambda: sync_wait(p), n)),
        _best(lambda: timeit_sync(lambda: floor_sync_wait(m), n)),
    )


@row(
    metric="sync_wait(just | then x 10) vs its pure-Python model",
    unit="us/op",
    target=2.0,
)
def chain_floor(b: Bench) -> Pair:
    return chain_pair(b.n(20_000))


def spawn_pair(n: int) -> Pair:
    async def real(k: int) -> None:
        async with sx.counting_scope() as scope:
            tok = scope.get_token()
            spawn, just, then = sx.spawn, sx.just, sx.then
            for _ in range(k):
                spawn(just() | then(_noop), tok)

    async def model(k: int) -> None:
        scope = FloorScope()
        for _ in range(k):
            floor_spawn(FloorJust() | floor_then(_noop), scope)
        assert scope.count == 0

    return (
        _best(lambda: timeit_trio(real, n, batch=True)),
        _best(lambda: timeit_trio(model, n, batch=True)),
    )


@row(
    metric="sx.spawn(just() | then(f), token) vs its pure-Python model",
    unit="us/op",
    target=2.0,
)
def spawn_floor(b: Bench) -> Pair:
    return spawn_pair(b.n(50_000))
