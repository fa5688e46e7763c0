"""The scan behind ``sx.operation_tree()`` (``_introspect``): what is on the heap, what each
pending operation waits on, which thread runs it.

Everything here is read through the declared hooks (``_core._contracts.Describable``,
``HasChildren``; the records of ``_core._snapshot``): the root states a snapshot finds on the
heap describe themselves, and so do the states a pending operation may wait on (a timer, a
hosted trio task, the parallel scheduler, a remote call, a join). A state without
``_sx_children()`` is walked through its slots (the library's combinators hold their child
operations there), never into a receiver, an environment or another agent's machinery
(``_UP``).
"""

from __future__ import annotations

import gc
import os
import sys
import sysconfig
import threading
from collections.abc import Callable, Iterable
from itertools import compress
from operator import not_
from types import CodeType, FrameType
from typing import TYPE_CHECKING, NamedTuple

from .._core._describe import scheduler_label
from .._core._snapshot import (
    ROOTS,
    AssociateRecord,
    FutureHolder,
    FutureRecord,
    Hosted,
    ItemRecord,
    ScopeRecord,
    SpawnRecord,
    StageRecord,
    TimerWait,
    Waiting,
    no_children,
)
from .._trio._trio_compat import shielded_in_task

if TYPE_CHECKING:
    from trio.lowlevel import Task

__all__: list[str] = []

_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TUPLE = frozenset((tuple,))


def _subclasses(cls: type) -> set[type]:
    out = {cls}
    todo = [cls]
    while todo:
        sub: type
        for sub in todo.pop().__subclasses__():
            if sub not in out:
                out.add(sub)
                todo.append(sub)
    return out


def _ops_receiving(receivers: list[object]) -> dict[int, object]:
    """The operations whose receiver is one of ``receivers`` (by the receiver's ``id``): found
    among the referrers of all of them at once. No tuple is kept (one may be a tuple another
    thread is filling: see :class:`Snapshot`)."""
    if not receivers:
        return {}
    ids = {id(r) for r in receivers}
    ops: dict[int, object] = {}
    refs = gc.get_referrers(*receivers)
    found = list(compress(refs, map(not_, map(_TUPLE.__contains__, map(type, refs)))))
    del refs
    for r in found:
        rc = getattr(r, "_rcvr", None)  # the library's name for an operation's receiver
        if rc is not None and id(rc) in ids and hasattr(r, "start"):
            ops[id(rc)] = r
    return ops


class Snapshot:
    """What one scan of the heap found, grouped by scope (by ``id``).

    The objects are the garbage collector's referrers of the root classes
    (``_core._snapshot.ROOTS`` and their subclasses; every instance refers to its class): one
    pass in C that returns only those instances, not a list of the whole heap. Holding such a
    list would hold a tuple that another thread is still filling (``tuple(generator)``), and
    growing it would then fail in that thread with ``SystemError`` ("bad argument to internal
    function"). Each state is read through its ``_sx_describe()``, which never raises on a
    state another thread is still setting up or completing (it answers ``None``).
    """

    def __init__(self) -> None:
        self.scopes: list[tuple[object, ScopeRecord]] = []
        self.spawns: dict[int, list[SpawnRecord]] = {}  # by id(scope)
        self.futures: dict[int, list[tuple[object, FutureRecord]]] = {}  # by id(scope)
        self.associates: dict[int, list[AssociateRecord]] = {}  # by id(scope)
        self.held: set[int] = set()  # future states a future sender/operation still holds
        # running sequence stages: id(stage) -> (stage, record); their running items:
        # id(stage) -> [(item receiver, index)]
        self.stages: dict[int, tuple[object, StageRecord]] = {}
        self.items: dict[int, list[tuple[object, int]]] = {}
        self._future_ops: dict[int, object] | None = None
        self._item_ops: dict[int, object] | None = None
        wanted = frozenset(t for root in tuple(ROOTS) for t in _subclasses(root))
        refs = gc.get_referrers(*wanted)
        found = list(compress(refs, map(wanted.__contains__, map(type, refs))))
        del refs
        for o in found:
            rec = o._sx_describe()
            t = type(rec)
            if t is SpawnRecord:
                self.spawns.setdefault(id(rec.scope), []).append(rec)
            elif rec is None:
                continue
            elif t is FutureRecord:
                self.futures.setdefault(id(rec.scope), []).append((o, rec))
            elif t is FutureHolder:
                self.held.add(id(rec.state))
            elif t is StageRecord:
                self.stages[id(o)] = (o, rec)
            elif t is ItemRecord:
                self.items.setdefault(id(rec.stage), []).append((o, rec.index))
            elif t is AssociateRecord:
                if rec.scope is not None:
                    self.associates.setdefault(id(rec.scope), []).append(rec)
            elif t is ScopeRecord:
                self.scopes.append((o, rec))

    def future_op(self, fs: object) -> object | None:
        """The operation of a future's running work: the object whose receiver is the state
        (the state does not hold it). Found among the referrers of all running futures of
        the snapshot at once, on the first call."""
        ops = self._future_ops
        if ops is None:
            ops = self._future_ops = _ops_receiving(
                [f for lst in self.futures.values() for f, r in lst if r.result is None]
            )
        return ops.get(id(fs))

    def item_op(self, w: object) -> object | None:
        """The operation of a running sequence item: the object whose receiver is ``w``
        (``None`` for an item run by a trio worker task of its stage). Found as
        :meth:`future_op` finds a future's, for all the items of the snapshot at once."""
        ops = self._item_ops
        if ops is None:
            ops = self._item_ops = _ops_receiving(
                [w for lst in self.items.values() for w, _ in lst]
            )
        return ops.get(id(w))


# --------------------------------------------------------------------------- the walk

_SLOTS: dict[type, tuple[str, ...]] = {}
# Slots that lead up (receivers), sideways (environments, scopes, schedulers, tokens) or into
# another agent's machinery: never walked.
_UP = frozenset(
    (
        "_rcvr", "_scope", "_owner", "_run", "_backend", "_token", "_env", "_sch", "_source",
        "_cb", "_base", "_sndr", "_stop_cb", "_link", "_tok", "_nursery", "_letenv", "_key",
        "_shared",
    )
)
#: Values never walked into.
_LEAVES = frozenset((int, float, bool, str, bytes, CodeType, type(None)))


def _slots_of(t: type) -> tuple[str, ...]:
    s = _SLOTS.get(t)
    if s is None:
        names: list[str] = []
        for c in t.__mro__:
            sl = c.__dict__.get("__slots__", ())
            names.extend([sl] if isinstance(sl, str) else sl)
        s = _SLOTS[t] = tuple(n for n in names if n not in _UP and not n.startswith("__"))
    return s


class TypeFacts(NamedTuple):
    """What the walk needs to know of a type, found once per type (``_TYPES``)."""

    #: Whether its instances are operation states (have a ``start``); ``None``: ask each
    #: object (it answers attributes dynamically).
    is_op: bool | None
    #: Its ``_sx_describe`` (``_contracts.Describable``), or ``None``.
    describe: Callable[[object], object] | None
    #: Its ``_sx_children`` (``_contracts.HasChildren``), or ``None``: then walk ``slots``
    #: and, if ``has_dict``, the instance's ``__dict__``.
    children: Callable[[object], Iterable[object]] | None
    slots: tuple[str, ...]
    has_dict: bool
    #: Nothing is ever below it (``_sx_children = no_children``, or no slots and no dict).
    leaf: bool


_TYPES: dict[type, TypeFacts] = {}


def _type_facts(t: type) -> TypeFacts:
    facts = _TYPES.get(t)
    if facts is None:
        children = getattr(t, "_sx_children", None)
        # an object answering attributes dynamically may grow a `start`: ask it
        is_op = True if hasattr(t, "start") else None if hasattr(t, "__getattr__") else False
        slots = () if children is not None else _slots_of(t)
        has_dict = children is None and bool(getattr(t, "__dictoffset__", 1))
        leaf = children is no_children or (children is None and not slots and not has_dict)
        facts = _TYPES[t] = TypeFacts(
            is_op, getattr(t, "_sx_describe", None), children, slots, has_dict, leaf
        )
    return facts


def _below(o: object, facts: TypeFacts) -> list[object]:
    """The objects directly below ``o``: its children, or its slots and attributes other than
    those in ``_UP`` (leaf values left out)."""
    if facts.children is not None:
        try:
            return list(facts.children(o))
        except Exception:  # a user's hook that fails: nothing below, the snapshot goes on
            return []
    out: list[object] = []
    if facts.has_dict:
        d = getattr(o, "__dict__", None)
        if d is not None:
            out.extend(v for k, v in d.items() if k not in _UP)
    for name in facts.slots:
        v = getattr(o, name, None)
        if type(v) not in _LEAVES:
            out.append(v)
    return out


def walk(op: object, limit: int = 300) -> list[object]:
    """The operation states below ``op`` (``op`` included; objects with a ``start``),
    breadth first, through their ``_sx_children()`` or their slots."""
    types = _TYPES
    facts = types.get(type(op)) or _type_facts(type(op))
    if facts.leaf:  # nothing below (a timer): the common case
        return [op]
    todo = _below(op, facts)
    out = [op]
    seen = {id(op)}
    i = 0
    while i < len(todo) and len(out) < limit:
        o = todo[i]
        i += 1
        t = type(o)
        if t in _LEAVES or id(o) in seen:
            continue
        seen.add(id(o))
        if isinstance(o, (list, tuple)):
            todo.extend(o[:64])
            continue
        facts = types.get(t) or _type_facts(t)
        if not (facts.is_op or (facts.is_op is None and hasattr(o, "start"))):
            continue  # only operation states: not stop callbacks, tokens, environments
        out.append(o)
        todo.extend(_below(o, facts))
    return out


class Wait:
    """What a pending operation is doing, in words, and where."""

    __slots__ = ("await_frame", "scheduler", "state", "trio_task")

    def __init__(
        self, state: str, scheduler: str | None = None, trio_task: str | None = None,
        await_frame: str | None = None,
    ) -> None:
        self.state = state
        self.scheduler = scheduler
        self.trio_task = trio_task
        self.await_frame = await_frame


RUNNING = Wait("running")


class Clock:
    """A timer owner's ``label`` and its time ``now`` (``None``: unknown), read once per
    snapshot, and the waits of its timers made so far, by their words (many timers are due
    at the same rounded time: one record for all)."""

    __slots__ = ("label", "now", "waits")

    def __init__(self, label: str, now: float | None) -> None:
        self.label = label
        self.now = now
        self.waits: dict[str, Wait] = {}


#: Per snapshot: the :class:`Clock` of each timer owner, by ``id``.
Clocks = dict[int, Clock]


def wait_of(walked: list[object], tasks: dict[int, Task], clocks: Clocks) -> Wait:
    """What the operation whose walk is ``walked`` waits on: the first state below it that
    describes a wait (a queued timer, a hosted trio task, the parallel scheduler, ...);
    ``tasks``: the hosted trio tasks by the ``id`` of the operation they run."""
    types = _TYPES
    for o in walked:
        describe = (types.get(type(o)) or _type_facts(type(o))).describe
        if describe is None:
            continue
        try:
            rec = describe(o)
        except Exception:  # a user's hook that fails: as if it had nothing to say
            continue
        if isinstance(rec, TimerWait):  # the common case, inline (a tree of 50,000 timers)
            c = clocks.get(id(rec.owner)) or _clock(rec, clocks)
            state = "waiting on a timer"
            if c.now is not None:
                try:
                    state = f"waiting on a timer, due in {rec.due - c.now:.3g} s"
                except Exception:
                    pass
            w = c.waits.get(state)
            if w is None:
                w = c.waits[state] = Wait(state, c.label)
            return w
        if isinstance(rec, Hosted):
            task = tasks.get(id(o))
            if task is None:
                return Wait("hosted in a trio task", "trio_scheduler")
            state = "in a trio task" + shield_note(task, True)
            return Wait(state, "trio_scheduler", task.name, await_frame(task.coro))
        if isinstance(rec, Waiting):
            return Wait(rec.state, rec.scheduler)
    return RUNNING


def _clock(rec: TimerWait, clocks: Clocks) -> Clock:
    """The clock of a timer's owner, kept in ``clocks`` for the snapshot."""
    try:
        now: float | None = rec.now()
    except Exception:
        now = None
    c = clocks[id(rec.owner)] = Clock(_owner_label(rec.owner), now)
    return c


def _owner_label(owner: object) -> str:
    sch = getattr(owner, "sched", None)  # a trio run's RunState
    return scheduler_label(sch) if sch is not None else scheduler_label(owner)


# --------------------------------------------------------------------------- frames, threads


def _frame_label(f: FrameType) -> str:
    code = f.f_code
    name = getattr(code, "co_qualname", code.co_name)
    return f"{name} at {os.path.basename(code.co_filename)}:{f.f_lineno}"


_STDLIB = sysconfig.get_paths().get("stdlib", "\0")


def read_locals(f: FrameType, names: Iterable[str]) -> dict[str, object]:
    """The values of the local variables ``names`` of the function frame ``f``.

    Before Python 3.13 ``f.f_locals`` is a snapshot dict that the frame keeps: it would keep
    the values alive after the function dropped them (a reference the program did not make),
    so it is emptied after reading (that does not touch the variables themselves). From 3.13
    it is a view: nothing to undo.
    """
    loc = f.f_locals
    out = {n: loc[n] for n in names if n in loc}
    if sys.version_info < (3, 13) and type(loc) is dict and loc is not f.f_globals:
        loc.clear()
    return out


def call_args(coro: object) -> str:
    """``(conn_id=3)``: the arguments a coroutine was called with (its frame's parameters,
    as they are now), each cut short."""
    f = getattr(coro, "cr_frame", None)
    if f is None:
        return "()"
    code = f.f_code
    n = code.co_argcount + code.co_kwonlyargcount
    names = [v for v in code.co_varnames[:n] if v != "task_status"]
    loc = read_locals(f, code.co_varnames[:n])
    parts = []
    for v in names:
        r = repr(loc.get(v, "?"))
        parts.append(f"{v}={r if len(r) <= 30 else r[:27] + '...'}")
    return f"({', '.join(parts)})"


def _is_library(filename: str) -> bool:
    """Code of structexec, trio or the standard library (not where a user looks first)."""
    return (
        filename.startswith(_PKG_DIR)
        or filename.startswith(_STDLIB)
        or f"{os.sep}trio{os.sep}" in filename
        or filename.startswith("<frozen")
    )


def await_frame(coro: object) -> str | None:
    """Where a coroutine (a trio task's) waits: its innermost frame outside trio and
    structexec, else its innermost frame."""
    frames: list[FrameType] = []
    c = coro
    for _ in range(200):
        f = getattr(c, "cr_frame", None) or getattr(c, "gi_frame", None)
        if f is None:
            break
        frames.append(f)
        nxt = getattr(c, "cr_await", None)
        if nxt is None:
            nxt = getattr(c, "gi_yieldfrom", None)
        if nxt is None:
            break
        c = nxt
    for f in reversed(frames):
        if not _is_library(f.f_code.co_filename):
            return _frame_label(f)
    return _frame_label(frames[-1]) if frames else None


def shield_note(task: Task, own: bool = False) -> str:
    """``"; in a shielded cancel scope"`` when the trio task sits in a shielded cancel scope of
    its own, which no stop can cancel; else ``""``. ``own``: the task's outermost scope is the
    library's (a hosted coroutine's, which a stop cancels) and does not count."""
    if shielded_in_task(task, own):
        return "; in a shielded cancel scope (a stop cannot cancel it)"
    return ""


def threads_running(objs: dict[int, int]) -> dict[int, tuple[str, str | None]]:
    """For each key of ``objs`` (an ``id`` of an operation object → the index of its root
    operation): the thread whose stack runs one of its methods right now, and the innermost
    frame of that stack outside the library."""
    found: dict[int, tuple[str, str | None]] = {}
    me = threading.get_ident()
    # threading.enumerate() takes a lock the interrupted code may hold (a signal handler)
    active: dict[int, threading.Thread] = dict(getattr(threading, "_active", {}))
    names = {ident: t.name for ident, t in active.items()}
    frames = sys._current_frames()
    frames.pop(me, None)  # this frame among them would make a reference cycle
    f: FrameType | None = None
    top: FrameType | None = None
    try:
        for ident, top in frames.items():
            user: str | None = None
            f = top
            while f is not None:
                code = f.f_code
                if user is None and not _is_library(code.co_filename):
                    user = _frame_label(f)
                if code.co_varnames[:1] == ("self",) and code.co_filename.startswith(_PKG_DIR):
                    root = objs.get(id(read_locals(f, ("self",)).get("self")))
                    if root is not None and root not in found:
                        found[root] = (names.get(ident, str(ident)), user)
                        break
                f = f.f_back
    finally:
        frames.clear()
        f = top = None
    return found
