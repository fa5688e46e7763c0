"""The world one run of a generated tree lives in, and scope tokens that count associations.

:class:`CountingToken` wraps a scope token and counts ``try_associate``/``disassociate``
([exec.scope.concepts]); ``_World`` holds the ``ManualScheduler`` queues, stop sources, scopes,
tokens and records of one run (the attributes :class:`~._tree_base.World` declares) and runs
the queued item an :class:`~._driver.Interleaving` picks.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Protocol

from .._core._env import prop
from .._core._queries import get_scheduler
from .._core._stop_token import inplace_stop_source
from .._scopes._counting_scope import counting_scope, simple_counting_scope
from ._manual import ManualScheduler
from ._receiver import RecordingReceiver
from ._thread_sched import ThreadScheduler
from ._tree import World

if TYPE_CHECKING:
    from .._core._protocol import Sender
    from ._driver import Interleaving, StopEvent, Tree

__all__ = ["CountingToken"]


class ScopeToken(Protocol):
    """A scope token ([exec.scope.concepts]): what :class:`CountingToken` wraps."""

    def try_associate(self) -> bool: ...
    def disassociate(self) -> None: ...
    def wrap(self, sndr: Sender[object]) -> Sender[object]: ...


class _Counts:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.granted = 0
        self.refused = 0
        self.released = 0
        self.underflow = 0


class CountingToken:
    """A scope token wrapper that counts associations ([exec.scope.concepts]).

    ``try_associate()``, ``disassociate()`` and ``wrap()`` forward to the wrapped token;
    :attr:`granted`, :attr:`refused` and :attr:`released` count them (shared by copies).
    A ``disassociate()`` without a matching granted association is counted in
    :attr:`underflow`.
    """

    def __init__(self, inner: ScopeToken) -> None:
        self.inner = inner
        self.counts = _Counts()

    def try_associate(self) -> bool:
        ok = bool(self.inner.try_associate())
        c = self.counts
        with c.lock:
            if ok:
                c.granted += 1
            else:
                c.refused += 1
        return ok

    def disassociate(self) -> None:
        c = self.counts
        with c.lock:
            c.released += 1
            if c.released > c.granted:
                c.underflow += 1
        self.inner.disassociate()

    def wrap(self, sndr: Sender[object]) -> Sender[object]:
        wrapped: Sender[object] = self.inner.wrap(sndr)
        return wrapped

    def __getattr__(self, name: str) -> Any:
        # Optional token methods (``record_error``, ...) go to the wrapped token.
        if name.startswith("__") or name in ("inner", "counts"):
            raise AttributeError(name)
        return getattr(self.inner, name)

    @property
    def granted(self) -> int:
        return self.counts.granted

    @property
    def refused(self) -> int:
        return self.counts.refused

    @property
    def released(self) -> int:
        return self.counts.released

    @property
    def underflow(self) -> int:
        return self.counts.underflow

    def __repr__(self) -> str:
        c = self.counts
        return f"<CountingToken granted={c.granted} released={c.released} refused={c.refused}>"


# --------------------------------------------------------------------------- worlds


class _World(World):
    def __init__(self, tree: Tree, trio_scheduler: object = None) -> None:
        self.tree = tree
        self.schedulers = [ManualScheduler(f"sch[{i}]") for i in range(max(1, tree.schedulers))]
        self.main = ManualScheduler("main")
        self.points = [inplace_stop_source() for _ in range(tree.points)]
        self.scopes: list[counting_scope | simple_counting_scope] = []
        self.tokens = []
        for kind in tree.scopes:
            scope = counting_scope() if kind == "counting" else simple_counting_scope()
            self.scopes.append(scope)
            tok = scope.get_token()
            self.tokens.append(CountingToken(tok) if tree.counted_tokens else tok)
        self.thread_scheduler = ThreadScheduler() if tree.threads else None
        self.trio_scheduler = trio_scheduler
        self.spawn_log = []
        self.spawned = []
        self.futures = []
        self.spawn_env = prop(get_scheduler, self.main)
        self.in_flight = 0
        self.tree_has_parallel_hop = tree.parallel
        self.lock = threading.Lock()

    def all_schedulers(self) -> list[ManualScheduler]:
        return [*self.schedulers, self.main]

    def pending(self) -> int:
        return sum(s.pending for s in self.all_schedulers())

    def run_chosen(self, interleaving: Interleaving) -> bool:
        for _ in range(100):
            counts = [s.pending for s in self.all_schedulers()]
            total = sum(counts)
            if not total:
                return False
            i = interleaving.choose(total)
            for s, n in zip(self.all_schedulers(), counts):
                if i < n:
                    try:
                        s.run_one(i)
                    except IndexError:  # raced with another thread; try again
                        break
                    return True
                i -= n
        return False

    def stop_source_of(
        self, target: tuple[str, int], rec: RecordingReceiver
    ) -> inplace_stop_source | counting_scope:
        kind, i = target
        if kind == "root":
            return rec.stop_source
        if kind == "point":
            return self.points[i]
        scope = self.scopes[i]
        assert isinstance(scope, counting_scope), "stop schedules target counting scopes only"
        return scope

    def close(self) -> None:
        if self.thread_scheduler is not None:
            self.thread_scheduler.close()


def _request(w: _World, ev: StopEvent, rec: RecordingReceiver) -> None:
    src = w.stop_source_of(ev.target, rec)
    if not ev.from_thread:
        src.request_stop()
        return
    t = threading.Thread(target=src.request_stop, name="structexec-test-stop")
    t.start()
    t.join(10)
    if t.is_alive():
        raise AssertionError(f"request_stop() on {ev.target} from another thread hung (deadlock)")
