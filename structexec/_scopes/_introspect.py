"""What is running: a snapshot of every live scope and its outstanding operations.

docs/debugging.md "Debugging structexec programs"; ``sx.operation_tree()``, ``sx.dump()``,
``sx.install_dump_on_signal()``, ``scope.outstanding()``.

Nothing is registered while the program runs, so nothing is kept alive and the hot paths pay
nothing for the tree. A snapshot finds the objects the garbage collector knows (the
referrers of the state classes, see ``_Snapshot``): the scopes (``AssociationState``), the
states of spawned work (``_spawn``'s spawn states, ``_spawn_future``'s future states,
``_associate``'s operations) and, through each scope's nursery, its hosted trio tasks. A
spawn stores only the sender it was given (which its state holds anyway) and the caller's
code object and instruction offset; the sender's description (``_core._describe``), the
file and line are computed here.

What an operation waits on is found by walking its operation state downwards (the slots of the
library's operations, never a receiver or an environment) for a pending timer, a hosted trio
task or a parallel-scheduler operation, and by looking for the operation in the stacks of the
other threads (``sys._current_frames()``).

No lock is taken (a tree may be printed by a signal handler that interrupted a holder of a
scope's lock on the same thread): counts, states and flags are read as they are.

Nesting: a scope entered with ``async with`` by a task is inside the scope that task entered
before it (the task's ``OPEN_SCOPES`` list, read from its context); when the entering task is
a hosted task of that scope, the nested scope hangs under that task's operation.
"""

from __future__ import annotations

import gc
import os
import signal as _signal
import sys
import sysconfig
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import MISSING, dataclass, field, fields
from itertools import compress
from operator import not_
from types import CodeType, FrameType
from typing import IO, Any

from .._algorithms._timed import TimerOp
from .._core._describe import describe, scheduler_label, site_line
from .._parallel._parallel_scheduler import _ScheduleOp as _ParScheduleOp
from .._parallel._remote_call import RemoteThenOp
from .._sequence._bounded import _BoundedOp, _Work
from .._trio._coroutine_sender import TrioHostedOp
from .._trio._trio_compat import shielded_in_task
from . import _spawn
from ._associate import _AssociateOp
from ._join import _JoinOp
from ._site import HOSTED_CODES, OPEN_SCOPES
from ._spawn_future import _FutureOp, _FutureSender, _FutureState
from ._state import AssociationState

__all__ = [
    "OperationInfo",
    "ScopeInfo",
    "dump",
    "format_tree",
    "install_dump_on_signal",
    "operation_tree",
    "outstanding",
]

_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass(frozen=True)
class OperationInfo:
    """One outstanding operation of a scope, in :func:`operation_tree` (docs/debugging.md).

    * ``kind``: ``"spawn"``, ``"spawn_future"``, ``"associate"``, ``"start_soon"`` or
      ``"start"``.
    * ``description``: the sender (``just(1) | then(parse)``, functions by qualified name) or,
      for a trio task, its function.
    * ``filename``, ``lineno``, ``spawned_at`` (``"app.py:42"``): where it was spawned, if
      known.
    * ``state``: what it is doing, in words (``running``, ``waiting on a timer, due in 2 s``,
      ``future: value not yet consumed``, ``in trio task ...``).
    * ``thread``: the name of the thread running its code right now, if any; ``scheduler``:
      the scheduler it waits on, if known.
    * ``trio_task``, ``await_frame``: the hosting trio task's name and where it waits
      (``handler at app.py:31``).
    * ``stop_requested``: a stop request reached it (its scope's, or its future's own).
    * ``scopes``: scopes entered by this operation's trio task (nested).
    * ``children``: for work running a sequence (docs/streams.md), one entry per stage that
      runs items concurrently (``kind`` ``"let_each"``, ``"transform_each"``,
      ``"then_each"``, ``"as_completed"``), upstream first; a stage's ``children`` are its
      items running now (``kind`` ``"item"``, ``description`` ``"#i"``: the ``i``-th item
      the stage started).
    * ``max_concurrency``, ``in_flight``, ``delivered``: of a stage (``None`` otherwise):
      its bound (``None``: unbounded), its items started and not yet delivered downstream,
      and the items delivered so far.
    """

    kind: str
    description: str
    filename: str | None
    lineno: int | None
    state: str
    thread: str | None = None
    scheduler: str | None = None
    trio_task: str | None = None
    await_frame: str | None = None
    stop_requested: bool = False
    scopes: tuple[ScopeInfo, ...] = ()
    children: tuple[OperationInfo, ...] = ()
    max_concurrency: int | None = None
    in_flight: int | None = None
    delivered: int | None = None

    @property
    def spawned_at(self) -> str | None:
        """``"app.py:42"`` (the file's base name), or ``None``."""
        if self.filename is None:
            return None
        return f"{os.path.basename(self.filename)}:{self.lineno}"


@dataclass(frozen=True)
class ScopeInfo:
    """One live scope in :func:`operation_tree` (docs/debugging.md).

    * ``kind`` (``"counting_scope"``, ``"simple_counting_scope"``), ``name`` (``None`` if
      unnamed), ``state`` (the spec's state name), ``count`` (associations held);
    * ``stop_requested`` and ``stop_requested_for`` (seconds since, when known);
    * ``entered_by``: the trio task that entered ``async with`` (``None`` otherwise);
    * ``errors``: errors recorded and not yet reported;
    * ``operations``: the outstanding operations; ``scopes``: scopes nested in the
      ``async with`` body (scopes nested in a hosted task are under its operation).
    """

    kind: str
    name: str | None
    state: str
    count: int
    stop_requested: bool = False
    stop_requested_for: float | None = None
    entered_by: str | None = None
    errors: int = 0
    operations: tuple[OperationInfo, ...] = ()
    scopes: tuple[ScopeInfo, ...] = field(default=())

    @property
    def label(self) -> str:
        """``counting_scope 'connections'`` or ``counting_scope``."""
        return self.kind if self.name is None else f"{self.kind} {self.name!r}"


# --------------------------------------------------------------------------- the scan


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


class _Snapshot:
    """What one scan of the heap found, grouped by scope (by ``id``).

    The objects are the garbage collector's referrers of the library's state classes (every
    instance refers to its class): one pass in C that returns only those instances, not a
    list of the whole heap. Holding such a list would hold a tuple that another thread is
    still filling (``tuple(generator)``), and growing it would then fail in that thread with
    ``SystemError`` ("bad argument to internal function"). Each state is read through its
    ``snapshot_info()``, which never raises on a state another thread is still setting up or
    completing.
    """

    def __init__(self) -> None:
        # id(scope) -> [(scope, sender, site, operation)], [(future state, its snapshot_info())],
        # [(associate operation, its child operation)]
        self.scopes: list[Any] = []
        self.states: dict[int, list[tuple[Any, Any, Any, Any]]] = {}
        self.futures: dict[int, list[tuple[Any, tuple[Any, ...]]]] = {}
        self.associates: dict[int, list[tuple[Any, Any]]] = {}
        self.held: set[int] = set()  # future states a future sender/operation still holds
        self._future_ops: dict[int, Any] | None = None
        # running sequence stages: id(stage) -> (stage, its snapshot_info()); their running
        # items: id(stage) -> [(item receiver, index)]
        self.stages: dict[int, tuple[Any, tuple[Any, ...]]] = {}
        self.items: dict[int, list[tuple[Any, int]]] = {}
        self._item_ops: dict[int, Any] | None = None
        spawn_types = {_spawn._ScopeSpawnState, _spawn._FastSpawnState}
        scope_types = _subclasses(AssociationState)
        future_types = _subclasses(_FutureState)  # with the direct path's (_spawn_coro)
        holder_types = {_FutureSender, _FutureOp}
        wanted = frozenset(spawn_types | scope_types | future_types | holder_types)
        wanted |= {_AssociateOp, _BoundedOp, _Work}
        refs = gc.get_referrers(*wanted)
        found = list(compress(refs, map(wanted.__contains__, map(type, refs))))
        del refs
        for o in found:
            t = type(o)
            if t in spawn_types:
                info = o.snapshot_info()
                if info is not None:
                    self.states.setdefault(id(info[0]), []).append(info)
            elif t in future_types:
                finfo = o.snapshot_info()
                if finfo is not None:
                    self.futures.setdefault(id(finfo[0]), []).append((o, finfo))
            elif t in holder_types:
                sh = getattr(o, "_shared", None)
                if sh is not None:
                    self.held.add(id(sh))
            elif t is _BoundedOp:
                sinfo = o.snapshot_info()
                if sinfo is not None:
                    self.stages[id(o)] = (o, sinfo)
            elif t is _Work:
                winfo = o.snapshot_info()
                if winfo is not None:
                    self.items.setdefault(id(winfo[0]), []).append((o, winfo[1]))
            elif t is _AssociateOp:
                ainfo = o.snapshot_info()
                if ainfo is not None and ainfo[0] is not None:
                    self.associates.setdefault(id(ainfo[0]), []).append((o, ainfo[1]))
            elif _scope_ready(o):
                self.scopes.append(o)

    def future_op(self, fs: Any) -> Any:
        """The operation of a future's running work: the object whose receiver is the state
        (the state does not hold it). Found among the referrers of all running futures of
        the snapshot at once, on the first call."""
        ops = self._future_ops
        if ops is None:
            running = [f for lst in self.futures.values() for f, i in lst if i[3] < 0]
            ids = {id(f) for f in running}
            ops = self._future_ops = {}
            refs = gc.get_referrers(*running) if running else []
            # no tuple is kept (one may be a tuple another thread is filling: see above)
            found = list(compress(refs, map(not_, map(_TUPLE.__contains__, map(type, refs)))))
            del refs
            for r in found:
                rc = getattr(r, "_rcvr", None)
                if rc is not None and id(rc) in ids and hasattr(r, "start"):
                    ops[id(rc)] = r
        return ops.get(id(fs))

    def item_op(self, w: Any) -> Any:
        """The operation of a running sequence item: the object whose receiver is ``w``
        (``None`` for an item run by a trio worker task of its stage). Found as
        :meth:`future_op` finds a future's, for all the items of the snapshot at once."""
        ops = self._item_ops
        if ops is None:
            running = [w for lst in self.items.values() for w, _ in lst]
            ids = {id(w) for w in running}
            ops = self._item_ops = {}
            refs = gc.get_referrers(*running) if running else []
            found = list(compress(refs, map(not_, map(_TUPLE.__contains__, map(type, refs)))))
            del refs
            for r in found:
                rc = getattr(r, "_rcvr", None)
                if rc is not None and id(rc) in ids and hasattr(r, "start"):
                    ops[id(rc)] = r
        return ops.get(id(w))


_TUPLE = frozenset((tuple,))


def _scope_ready(s: Any) -> bool:
    """Whether a scope is set up (another thread may be in its ``__init__``): what the tree
    reads of it is there."""
    try:
        s.state, s.count, s._errors_unlocked()  # each may raise AttributeError
    except AttributeError:
        return False
    return True


# --------------------------------------------------------------------------- op states

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


def _slots_of(t: type) -> tuple[str, ...]:
    s = _SLOTS.get(t)
    if s is None:
        names: list[str] = []
        for c in t.__mro__:
            sl = c.__dict__.get("__slots__", ())
            names.extend([sl] if isinstance(sl, str) else sl)
        s = _SLOTS[t] = tuple(n for n in names if n not in _UP and not n.startswith("__"))
    return s


# What _state_of looks for in a type (_TYPES): nothing, a timer, a hosted trio task, work on
# the parallel scheduler, a join, a scope (not walked into), a remote call.
_K_NONE, _K_TIMER, _K_HOSTED, _K_PAR, _K_JOIN, _K_SCOPE, _K_REMOTE = range(7)
#: Per type: (is it an operation state, or None: ask the object; the slots to walk; _K_*;
#: whether its instances have a ``__dict__``).
_TYPES: dict[type, tuple[bool | None, tuple[str, ...], int, bool]] = {}
#: Values never walked into.
_LEAVES = frozenset((int, float, bool, str, bytes, CodeType, type(None)))


def _type_info(t: type) -> tuple[bool | None, tuple[str, ...], int, bool]:
    info = _TYPES.get(t)
    if info is None:
        kind = _K_NONE
        for cls, k in (
            (TimerOp, _K_TIMER),
            (TrioHostedOp, _K_HOSTED),
            (_ParScheduleOp, _K_PAR),
            (RemoteThenOp, _K_REMOTE),  # a then-chain sent to a worker (remote backend)
            (_JoinOp, _K_JOIN),
            (AssociationState, _K_SCOPE),
        ):
            if issubclass(t, cls):
                kind = k
                break
        # an object answering attributes dynamically may grow a `start`: ask it
        is_op = True if hasattr(t, "start") else None if hasattr(t, "__getattr__") else False
        # a timer or a scope is where a walk stops (a timer has no operation below it)
        slots = () if kind in (_K_TIMER, _K_SCOPE) else _slots_of(t)
        has_dict = kind not in (_K_TIMER, _K_SCOPE) and bool(getattr(t, "__dictoffset__", 1))
        info = _TYPES[t] = (is_op, slots, kind, has_dict)
    return info


def _walk(op: Any, limit: int = 300) -> list[Any]:
    """The operation states below ``op`` (``op`` included; objects with a ``start``),
    breadth first, through their slots and attributes other than those in ``_UP``."""
    types = _TYPES
    t = type(op)
    info = types.get(t) or _type_info(t)
    if not info[1] and not info[3]:  # nothing below (a timer): the common case
        return [op]
    out: list[Any] = []
    seen: set[int] = set()
    todo = [op]
    i = 0
    while i < len(todo) and len(out) < limit:
        o = todo[i]
        i += 1
        t = type(o)
        if t in _LEAVES or id(o) in seen:
            continue
        seen.add(id(o))
        if t is list or t is tuple or isinstance(o, (list, tuple)):
            todo.extend(o[:64])
            continue
        info = types.get(t) or _type_info(t)
        if o is not op and not (info[0] or (info[0] is None and hasattr(o, "start"))):
            continue  # only operation states: not stop callbacks, tokens, environments
        out.append(o)
        if info[3]:
            d = getattr(o, "__dict__", None)
            if d is not None:
                todo.extend(v for k, v in d.items() if k not in _UP)
        for name in info[1]:
            v = getattr(o, name, None)
            if type(v) not in _LEAVES:
                todo.append(v)
    return out


def _owner_label(owner: Any) -> str:
    sch = getattr(owner, "sched", None)  # a trio run's RunState
    return scheduler_label(sch) if sch is not None else scheduler_label(owner)


def _frame_label(f: FrameType) -> str:
    code = f.f_code
    name = getattr(code, "co_qualname", code.co_name)
    return f"{name} at {os.path.basename(code.co_filename)}:{f.f_lineno}"


_STDLIB = sysconfig.get_paths().get("stdlib", "\0")


def read_locals(f: FrameType, names: Iterable[str]) -> dict[str, Any]:
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


def _call_args(coro: Any) -> str:
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


def _await_frame(coro: Any) -> str | None:
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


def _shield_note(task: Any, own: bool = False) -> str:
    """``"; in a shielded cancel scope"`` when the trio task sits in a shielded cancel scope of
    its own, which no stop can cancel; else ``""``. ``own``: the task's outermost scope is the
    library's (a hosted coroutine's, which a stop cancels) and does not count."""
    if shielded_in_task(task, own):
        return "; in a shielded cancel scope (a stop cannot cancel it)"
    return ""


def _threads_running(objs: dict[int, int]) -> dict[int, tuple[str, str | None]]:
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


def _state_of(
    op: Any, tasks: dict[int, Any], walked: list[Any] | None = None,
    clocks: dict[int, tuple[str, float | None]] | None = None,
) -> tuple[str, str | None, str | None, str | None]:
    """``(state, scheduler, trio task, await frame)`` of a running operation; ``walked``:
    ``_walk(op)`` if already made; ``clocks``: a cache of the timer owners' labels and
    times, for one snapshot."""
    for o in _walk(op) if walked is None else walked:
        kind = (_TYPES.get(type(o)) or _type_info(type(o)))[2]
        if kind == _K_NONE:
            continue
        if kind == _K_TIMER:
            key = getattr(o, "_key", None)
            if key is None:  # not queued: done, or not started
                continue
            owner = o._owner
            c = None if clocks is None else clocks.get(id(owner))
            if c is None:
                try:
                    now: float | None = owner._timer_now()
                except Exception:
                    now = None
                c = (_owner_label(owner), now)
                if clocks is not None:
                    clocks[id(owner)] = c
            if c[1] is not None:
                try:
                    return f"waiting on a timer, due in {key[0] - c[1]:.3g} s", c[0], None, None
                except Exception:
                    pass
            return "waiting on a timer", c[0], None, None
        if kind == _K_HOSTED and getattr(o, "_started", False):
            task = tasks.get(id(o))
            if task is not None:
                state = "in a trio task" + _shield_note(task, True)
                return state, "trio_scheduler", task.name, _await_frame(task.coro)
            return "hosted in a trio task", "trio_scheduler", None, None
        if kind == _K_REMOTE and getattr(o, "_call", None) is not None:
            return str(o.where()), "parallel_scheduler", None, None  # docs/parallel.md
        if kind == _K_PAR:
            return "on the parallel scheduler", "parallel_scheduler", None, None
        if kind == _K_JOIN and getattr(o, "_started", False):
            return f"waiting for the join of {getattr(o, '_scope', None)!r}", None, None, None
    return "running", None, None, None


# --------------------------------------------------------------------------- building


_INFO_DEFAULTS = {f.name: f.default for f in fields(OperationInfo) if f.default is not MISSING}
_new = object.__new__
_setattr = object.__setattr__


def _op_info(
    kind: str, description: str, filename: str | None, lineno: int | None, state: str,
    thread: str | None, scheduler: str | None, trio_task: str | None,
    await_frame: str | None, stop_requested: bool, scopes: tuple[ScopeInfo, ...],
) -> OperationInfo:
    """``OperationInfo(...)`` of these fields at a third of the cost: the frozen dataclass's
    ``__init__`` sets each field through ``object.__setattr__``; this sets its ``__dict__``
    at once (the same object: equal, same hash and repr; a field not named here takes its
    default). For the spawned work of a tree, which can hold a million operations."""
    info: OperationInfo = _new(OperationInfo)
    _setattr(info, "__dict__", {
        **_INFO_DEFAULTS, "kind": kind, "description": description, "filename": filename,
        "lineno": lineno, "state": state, "thread": thread, "scheduler": scheduler,
        "trio_task": trio_task, "await_frame": await_frame, "stop_requested": stop_requested,
        "scopes": scopes,
    })
    return info


_LINES: dict[Any, tuple[str, int] | None] = {}


def _site_fields(site: Any) -> tuple[str | None, int | None]:
    """``(filename, line)`` of a site; cached in ``_LINES`` while one snapshot is built
    (many operations are spawned by the same line). The key is the code object's ``id``
    (hashing a code object hashes its contents); the sites of the snapshot keep their code
    objects alive while the cache is used."""
    if site is None:
        return None, None
    key = (id(site[0]), site[1])
    fl = _LINES.get(key, _LINES)
    if fl is _LINES:
        fl = _LINES[key] = site_line(site)
    return (None, None) if fl is None else fl  # type: ignore[return-value]


def _name_of(stages: tuple[OperationInfo, ...]) -> str:
    """``"let_each -> then_each"``: the stages of a sequence, upstream first."""
    return " -> ".join(f"{c.kind}({c.description})" for c in stages) or "sequence"


def _hosted_tasks(scope: Any) -> list[Any]:
    n = getattr(scope, "_nursery", None)
    if n is None:
        return []
    return list(n.child_tasks)


class _Builder:
    def __init__(self, snap: _Snapshot) -> None:
        self.snap = snap
        # id(scope) -> scopes nested in its body; (id(scope), id(task)) -> scopes in a task
        self.body: dict[int, list[Any]] = {}
        self.in_task: dict[tuple[int, int], list[Any]] = {}
        self.roots: list[Any] = []
        self.now = time.monotonic()
        self.clocks: dict[int, tuple[str, float | None]] = {}  # see _state_of
        self.claimed: set[int] = set()  # sequence stages shown under an operation

    def place(self) -> None:
        by_id = {id(s): s for s in self.snap.scopes}
        for s in self.snap.scopes:
            parent, task = self._parent_of(s, by_id)
            if parent is None:
                self.roots.append(s)
            elif task is None:
                self.body.setdefault(id(parent), []).append(s)
            else:
                self.in_task.setdefault((id(parent), id(task)), []).append(s)

    def _parent_of(self, s: Any, by_id: dict[int, Any]) -> tuple[Any, Any]:
        task = getattr(s, "_parent_task", None)
        if task is None or not getattr(s, "_entered", False):
            return None, None
        try:
            node = task.context.get(OPEN_SCOPES)
        except Exception:  # pragma: no cover - a task without a context
            return None, None
        while node is not None and node[0] is not s:
            node = node[1]
        if node is None or node[1] is None:
            return None, None
        parent = node[1][0]
        if id(parent) not in by_id:
            return None, None
        if getattr(parent, "_parent_task", None) is task:
            return parent, None
        pn = getattr(parent, "_nursery", None)
        t = task
        for _ in range(100):
            nur = getattr(t, "parent_nursery", None)
            if nur is None:
                break
            if nur is pn:
                return parent, t
            t = nur.parent_task
        return parent, None

    def stages(self, objs: list[Any]) -> tuple[OperationInfo, ...]:
        """The running sequence stages among ``objs`` (a walk, downstream first), upstream
        first, each with its running items as children."""
        snap = self.snap
        if not snap.stages:
            return ()
        out: list[OperationInfo] = []
        for o in objs:
            entry = snap.stages.get(id(o))
            if entry is None or id(o) in self.claimed:
                continue
            self.claimed.add(id(o))
            name, n, active, delivered, stop = entry[1]
            items: list[OperationInfo] = []
            for w, idx in sorted(snap.items.get(id(o), ()), key=lambda e: e[1]):
                iop = snap.item_op(w)
                if iop is None:
                    state = "in a trio worker task of the stage"
                    sched: str | None = "trio_scheduler"
                    tname = frame = None
                else:
                    state, sched, tname, frame = _state_of(iop, {}, None, self.clocks)
                items.append(_op_info("item", f"#{idx}", None, None, state, None, sched,
                                      tname, frame, stop, ()))
            state = f"{active} in flight, {delivered} delivered"
            if stop:
                state += "; stop requested"
            info = _op_info(name, f"max_concurrency={n}", None, None, state, None, None,
                            None, None, stop, ())
            d = info.__dict__
            d["children"] = tuple(items)
            d["max_concurrency"] = n
            d["in_flight"] = active
            d["delivered"] = delivered
            out.append(info)
        out.reverse()
        return tuple(out)

    def free_sequences(self) -> ScopeInfo | None:
        """The running sequences that no operation of a scope runs (awaited by a task, or
        under ``sync_wait``), under one root entry of kind ``"sequences"``."""
        snap = self.snap
        free = [o for i, (o, _) in snap.stages.items() if i not in self.claimed]
        if not free:
            return None
        walks = [_walk(o) for o in free]
        inner = {id(x) for w in walks for x in w[1:]}  # upstream stages of another stage
        ops: list[OperationInfo] = []
        for o, w in zip(free, walks, strict=True):
            if id(o) in inner:
                continue
            st = self.stages(w)
            stop = any(c.stop_requested for c in st)
            info = _op_info("sequence", repr(_name_of(st)), None, None,
                            "running" + ("; stop requested" if stop else ""), None, None,
                            None, None, stop, ())
            info.__dict__["children"] = st
            ops.append(info)
        if not ops:
            return None
        return ScopeInfo("sequences", None, "running", len(ops), operations=tuple(ops))

    def scope(self, s: Any) -> ScopeInfo:
        ops = self._operations(s)
        src = getattr(s, "_source", None)
        stop = bool(src is not None and src.stop_requested())
        since = getattr(s, "_stop_since", None)
        ptask = getattr(s, "_parent_task", None)
        entered = getattr(s, "_entered", False)
        return ScopeInfo(
            kind=type(s).__name__,
            name=getattr(s, "_name", None),
            state=s.state,
            count=s.count,
            stop_requested=stop,
            stop_requested_for=None if not stop or since is None else self.now - since,
            entered_by=ptask.name if entered and ptask is not None else None,
            errors=s._errors_unlocked(),  # no lock: a signal handler may run this
            operations=tuple(ops),
            scopes=tuple(self.scope(c) for c in self.body.get(id(s), ())),
        )

    def _operations(self, s: Any) -> list[OperationInfo]:
        snap = self.snap
        stop_src = getattr(s, "_source", None)
        scope_stop = bool(stop_src is not None and stop_src.stop_requested())
        # hosted trio tasks: those of coroutine senders belong to their operations
        op_tasks: dict[int, Any] = {}
        plain_tasks: list[tuple[Any, str]] = []
        future_tasks: dict[int, Any] = {}
        for task in _hosted_tasks(s):
            coro = task.coro
            kind = HOSTED_CODES.get(getattr(coro, "cr_code", None))  # type: ignore[arg-type]
            cf = getattr(coro, "cr_frame", None)
            loc = {} if cf is None else read_locals(cf, ("async_fn",))
            if kind == "guarded":
                owner = getattr(loc.get("async_fn"), "__self__", None)
                if owner is not None:
                    op_tasks[id(owner)] = task
            elif kind == "future":  # scope.spawn_future(coroutine) on the direct path
                fst = None if cf is None else read_locals(cf, ("st",)).get("st")
                if fst is not None:
                    future_tasks[id(fst)] = task
            elif kind is not None:
                plain_tasks.append((task, kind))
        entries: list[tuple[Any, OperationInfo]] = []
        pending: list[tuple[str, str, Any, bool, Any]] = []
        for _, sndr, site, op in snap.states.get(id(s), ()):
            pending.append(("spawn", describe(sndr) if sndr is not None else "?",
                            site, scope_stop, op))
        for fs, (_, sndr, site, fkind, assoc, fsrc_stop, claimed) in snap.futures.get(
            id(s), ()
        ):
            fstop = scope_stop or fsrc_stop
            desc = describe(sndr)
            ftask = future_tasks.get(id(fs))
            if fkind < 0 and assoc and ftask is not None:
                fn, ln = _site_fields(site)
                entries.append((None, OperationInfo(
                    "spawn_future", desc, fn, ln,
                    "in a trio task" + _shield_note(ftask, True)
                    + ("; stop requested" if fstop else ""),
                    scheduler="trio_scheduler", trio_task=ftask.name,
                    await_frame=_await_frame(ftask.coro), stop_requested=fstop,
                    scopes=tuple(self.scope(c) for c in self.in_task.get((id(s), id(ftask)), ())))))
            elif fkind < 0 and assoc:
                pending.append(("spawn_future", desc, site, fstop, snap.future_op(fs)))
            elif fkind in (0, 1, 2) and id(fs) in snap.held and claimed:
                what = ("value", "error", "stopped")[fkind]
                fn, ln = _site_fields(site)
                entries.append((None, OperationInfo(
                    "spawn_future", desc, fn, ln,
                    f"finished: future holds an unconsumed {what} result",
                    stop_requested=fstop)))
        for _ao, cop in snap.associates.get(id(s), ()):
            pending.append(("associate", describe(getattr(cop, "_sndr", None) or cop),
                            None, scope_stop, cop))
        # which thread runs which operation
        walked: dict[int, int] = {}
        walks: list[list[Any]] = []
        for i, p in enumerate(pending):
            objs = [] if p[4] is None else _walk(p[4])  # None: a future's unknown operation
            walks.append(objs)
            for o in objs:
                walked.setdefault(id(o), i)
        running = _threads_running(walked) if walked else {}
        for i, (kind, desc, site, stop, op) in enumerate(pending):
            fn, ln = _site_fields(site)
            if op is not None:
                state, sched, tname, frame = _state_of(op, op_tasks, walks[i], self.clocks)
            else:
                state, sched, tname, frame = "running", None, None, None
            thread = None
            if i in running:
                thread, where = running[i]
                state = f"running on thread {thread!r}" + (f" in {where}" if where else "")
            if stop:
                state += "; stop requested"
            nested: list[Any] = []
            for o in walks[i] if op_tasks else ():
                t = op_tasks.get(id(o))
                if t is not None:
                    nested.extend(self.in_task.get((id(s), id(t)), ()))
            info = _op_info(
                kind, desc, fn, ln, state, thread, sched, tname, frame, stop,
                tuple(self.scope(c) for c in nested) if nested else ())
            if snap.stages:
                st = self.stages(walks[i])
                if st:
                    info.__dict__["children"] = st
            entries.append((op, info))
        for task, kind in plain_tasks:
            cf = task.coro.cr_frame
            loc = {} if cf is None else read_locals(cf, ("coro", "site"))
            inner = loc.get("coro")
            fn, ln = _site_fields(loc.get("site"))
            frame = _await_frame(task.coro)
            if kind == "spawn":  # scope.spawn(coroutine) on the direct path: as its sender
                desc = describe(inner)
                state = "in a trio task"
            else:
                desc = getattr(inner, "__qualname__", task.name) + _call_args(inner)
                state = f"in trio task, awaiting in {frame}" if frame else "in trio task"
            state += _shield_note(task, kind == "spawn")
            if scope_stop:
                state += "; stop requested"
            entries.append((None, OperationInfo(
                kind, desc, fn, ln, state, scheduler="trio_scheduler",
                trio_task=task.name, await_frame=frame, stop_requested=scope_stop,
                scopes=tuple(self.scope(c) for c in self.in_task.get((id(s), id(task)), ())))))
        infos = [e[1] for e in entries]
        infos.sort(key=lambda o: (o.filename or "~", o.lineno or 0, o.kind, o.description))
        return infos


def _snapshot_roots(only: Any = None) -> tuple[ScopeInfo, ...]:
    # The cycle collector is paused while the tree is built: the tree allocates a few objects
    # per operation, none of them garbage, and over a large heap the full collections they
    # would trigger cost more than building the tree (measured: 4 of 8 us per operation for
    # 50,000 timers). A snapshot running on another thread may have paused it already.
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        b = _Builder(_Snapshot())
        b.place()
        if only is not None:
            return (b.scope(only),)
        roots = [b.scope(s) for s in b.roots]
        free = b.free_sequences()
        if free is not None:
            roots.append(free)
        return tuple(roots)
    finally:
        _LINES.clear()  # keeps no code object alive after the snapshot
        if paused:
            gc.enable()


def operation_tree() -> tuple[ScopeInfo, ...]:
    """A snapshot of every live scope of the process and its outstanding operations, as data
    (docs/debugging.md).

    Returns the outermost scopes (:class:`ScopeInfo`); nested scopes are in their ``scopes``
    (entered in the ``async with`` body) or in the ``scopes`` of the operation whose trio task
    entered them. Each scope lists its outstanding operations (:class:`OperationInfo`): spawned
    and associated work still running, futures whose result nobody consumed yet, hosted trio
    tasks. Scopes and operations are found by the garbage collector's list of objects, so
    taking a snapshot keeps nothing alive, and costs nothing until it is asked for: then one
    scan of the heap in C (about 50 ms for 3 million objects) and about 4 us per outstanding
    operation, with the cycle collector paused meanwhile. Work that another thread is setting
    up or completing at that moment is left out; the snapshot never fails on it.

    Example:

    >>> import structexec as sx
    >>> scope = sx.counting_scope(name="demo")
    >>> [s.label for s in sx.operation_tree() if s.name == "demo"]
    ["counting_scope 'demo'"]
    """
    return _snapshot_roots()


def outstanding(scope: Any) -> tuple[OperationInfo, ...]:
    """The outstanding operations of one scope (``scope.outstanding()``)."""
    return _snapshot_roots(scope)[0].operations


def scope_info(scope: Any) -> ScopeInfo:
    """The tree below one scope."""
    return _snapshot_roots(scope)[0]


def _fmt_scope(s: ScopeInfo, indent: str, out: list[str]) -> None:
    bits = [s.state, f"{s.count} associated"]
    if s.stop_requested:
        ago = "" if s.stop_requested_for is None else f" {s.stop_requested_for:.1f} s ago"
        bits.append(f"stop requested{ago}")
    if s.errors:
        bits.append(f"{s.errors} error(s) recorded")
    if s.entered_by:
        bits.append(f"entered by trio task {s.entered_by!r}")
    out.append(f"{indent}{s.label} [{', '.join(bits)}]")
    for op in s.operations:
        where = f" spawned at {op.spawned_at}" if op.spawned_at else ""
        out.append(f"{indent}  - {op.kind} {op.description}{where}")
        out.append(f"{indent}      {op.state}")
        if op.trio_task and "trio task" not in op.state:
            out.append(f"{indent}      trio task {op.trio_task!r}, awaiting in {op.await_frame}")
        for ch in op.children:
            _fmt_child(ch, indent + "      ", out)
        for c in op.scopes:
            _fmt_scope(c, indent + "      ", out)
    for c in s.scopes:
        _fmt_scope(c, indent + "  ", out)


def _fmt_child(op: OperationInfo, indent: str, out: list[str]) -> None:
    """A sequence stage or item: ``- let_each max_concurrency=2: 2 in flight, 5 delivered``."""
    out.append(f"{indent}- {op.kind} {op.description}: {op.state}")
    for ch in op.children:
        _fmt_child(ch, indent + "  ", out)


def format_tree(tree: ScopeInfo | Iterable[ScopeInfo] | None = None) -> str:
    """The tree as indented text (:func:`operation_tree` by default)."""
    if tree is None:
        tree = operation_tree()
    scopes = (tree,) if isinstance(tree, ScopeInfo) else tuple(tree)
    out: list[str] = []
    for s in scopes:
        _fmt_scope(s, "", out)
    if not out:
        out.append("(no live structexec scopes)")
    return "\n".join(out)


def dump(file: IO[str] | None = None) -> str:
    """Print the tree of every live scope and its outstanding operations to ``file``
    (``sys.stderr`` by default) and return the text (docs/debugging.md).

    Example:

    >>> import io, structexec as sx
    >>> scope = sx.simple_counting_scope(name="example")
    >>> "simple_counting_scope 'example' [unused, 0 associated]" in sx.dump(io.StringIO())
    True
    """
    check_text_file("dump()", file)
    text = format_tree(operation_tree())
    out = sys.stderr if file is None else file
    out.write("structexec operation tree:\n" + text + "\n")
    out.flush()
    return text


def check_text_file(fn: str, file: Any) -> None:
    """``file`` is ``None`` or has ``write()`` (and ``flush()``), else ``TypeError``."""
    if file is not None and not (
        callable(getattr(file, "write", None)) and callable(getattr(file, "flush", None))
    ):
        raise TypeError(
            f"{fn}: file must be None (sys.stderr) or a text stream with write() and flush(), "
            f"got {type(file).__name__}"
        )


def install_dump_on_signal(
    signum: int = _signal.SIGUSR1 if hasattr(_signal, "SIGUSR1") else _signal.SIGINT,
    file: IO[str] | None = None,
) -> Callable[..., Any] | int | None:
    """Print :func:`dump` to ``file`` (``sys.stderr``) whenever the process gets ``signum``
    (``SIGUSR1`` by default), and return the previous handler (docs/debugging.md).

    Call it in the main thread, before or inside ``trio.run``; then ``kill -USR1 <pid>`` a
    stuck program prints its tree and goes on. Give the returned handler back to
    ``signal.signal`` to uninstall it.
    """

    check_text_file("install_dump_on_signal()", file)
    if isinstance(signum, bool) or not isinstance(signum, int):  # signal.Signals is an int
        raise TypeError(
            "install_dump_on_signal(): signum must be a signal number (an int such as "
            f"signal.SIGUSR1), got {type(signum).__name__}"
        )

    def handler(sig: int, frame: Any) -> None:
        try:
            dump(file)
        except Exception as e:  # pragma: no cover - a dump never stops the program
            print(f"structexec: dump failed: {e!r}", file=sys.stderr)

    try:
        return _signal.signal(signum, handler)
    except ValueError as e:  # not a signal number, or not the main thread
        raise ValueError(f"install_dump_on_signal(): signum={signum!r}: {e}") from None
