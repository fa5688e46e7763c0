"""The tree of ``sx.operation_tree()`` built from one :class:`~._introspect_scan.Snapshot`
(``_introspect``): scopes placed under the scopes and tasks that entered them, each with its
outstanding operations.

Nesting: a scope entered with ``async with`` by a task is inside the scope that task entered
before it (the task's ``OPEN_SCOPES`` list, read from its context); when the entering task is
a hosted task of that scope, the nested scope hangs under that task's operation.

Hosted trio tasks are recognised by the code of their coroutine (``_site.HOSTED_CODES``, filled
by the modules that define the wrappers, which name the local variables read here).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from .._core._describe import describe, site_line
from ._introspect_records import OperationInfo, ScopeInfo, op_info, stage_info
from ._introspect_scan import (
    RUNNING,
    Clocks,
    Snapshot,
    Wait,
    await_frame,
    call_args,
    read_locals,
    shield_note,
    threads_running,
    wait_of,
    walk,
)
from ._site import HOSTED_CODES, OPEN_SCOPES

if TYPE_CHECKING:
    from trio import Nursery
    from trio.lowlevel import Task

    from .._core._describe import Site
    from .._core._snapshot import FutureRecord, ScopeRecord, SpawnRecord, StageRecord

__all__: list[str] = []

_LINES: dict[tuple[int, int], tuple[str, int] | None] = {}


def site_fields(site: Site | None) -> tuple[str | None, int | None]:
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


def forget_lines() -> None:
    """Empty the line cache after a snapshot (it keeps no code object alive)."""
    _LINES.clear()


#: The local variables of each hosted-task wrapper (by its ``HOSTED_CODES`` kind) that the
#: tree reads from the wrapper's frame: the coroutine it runs and its spawn site, the future
#: state, the coroutine sender's bound method (whose ``__self__`` is the operation).
#: tests/test_introspect_hooks.py checks that every registered wrapper has them.
HOSTED_LOCALS: dict[str, tuple[str, ...]] = {
    "start_soon": ("coro", "site"),
    "start": ("coro", "site"),
    "spawn": ("coro", "site"),
    "future": ("st",),
    "guarded": ("async_fn",),
}


def _name_of(stages: tuple[OperationInfo, ...]) -> str:
    """``"let_each -> then_each"``: the stages of a sequence, upstream first."""
    return " -> ".join(f"{c.kind}({c.description})" for c in stages) or "sequence"


class _Pending:
    """Work of a scope whose state is found by walking its operation (``op``; ``None``: a
    future whose operation is unknown)."""

    __slots__ = ("description", "kind", "op", "site", "stop")

    def __init__(
        self, kind: str, description: str, site: Site | None, stop: bool, op: object | None
    ) -> None:
        self.kind = kind
        self.description = description
        self.site = site
        self.stop = stop
        self.op = op


class _Tasks:
    """The hosted trio tasks of one scope's nursery, by what they run (``HOSTED_CODES``)."""

    __slots__ = ("by_op", "futures", "plain")

    def __init__(self, nursery: Nursery | None) -> None:
        #: the tasks of coroutine senders, by ``id`` of the operation (``_guarded``'s owner)
        self.by_op: dict[int, Task] = {}
        #: ``scope.spawn_future(coroutine)`` on the direct path, by ``id`` of the future state
        self.futures: dict[int, Task] = {}
        #: ``start_soon``/``start`` tasks and ``scope.spawn(coroutine)``, with their kind
        self.plain: list[tuple[Task, str]] = []
        if nursery is None:
            return
        for task in list(nursery.child_tasks):
            coro = task.coro
            code = getattr(coro, "cr_code", None)
            kind = None if code is None else HOSTED_CODES.get(code)
            if kind is None:
                continue
            cf = getattr(coro, "cr_frame", None)
            if kind == "guarded":
                loc = {} if cf is None else read_locals(cf, HOSTED_LOCALS[kind])
                owner = getattr(loc.get("async_fn"), "__self__", None)
                if owner is not None:
                    self.by_op[id(owner)] = task
            elif kind == "future":
                fst = None if cf is None else read_locals(cf, HOSTED_LOCALS[kind]).get("st")
                if fst is not None:
                    self.futures[id(fst)] = task
            else:
                self.plain.append((task, kind))


def _index(entry: tuple[object, int]) -> int:
    return entry[1]


class Builder:
    """Builds the tree of one snapshot: :meth:`place` the scopes, then :meth:`scope` each
    root (and :meth:`free_sequences`)."""

    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap
        self.records: dict[int, ScopeRecord] = {id(s): r for s, r in snap.scopes}
        # id(scope) -> scopes nested in its body; (id(scope), id(task)) -> scopes in a task
        self.body: dict[int, list[object]] = {}
        self.in_task: dict[tuple[int, int], list[object]] = {}
        self.roots: list[object] = []
        self.now = time.monotonic()
        self.clocks: Clocks = {}  # see wait_of
        self.claimed: set[int] = set()  # sequence stages shown under an operation

    def place(self) -> None:
        for s, rec in self.snap.scopes:
            parent, task = self._parent_of(s, rec)
            if parent is None:
                self.roots.append(s)
            elif task is None:
                self.body.setdefault(id(parent), []).append(s)
            else:
                self.in_task.setdefault((id(parent), id(task)), []).append(s)

    def _parent_of(self, s: object, rec: ScopeRecord) -> tuple[object | None, Task | None]:
        task = rec.parent_task
        if task is None or not rec.entered:
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
        prec = self.records.get(id(parent))
        if prec is None:
            return None, None
        if prec.parent_task is task:
            return parent, None
        t = task
        for _ in range(100):
            nur = t.parent_nursery
            if nur is None:
                break
            if nur is prec.nursery:
                return parent, t
            t = nur.parent_task
        return parent, None

    # -- sequences

    def stages(self, objs: list[object]) -> tuple[OperationInfo, ...]:
        """The running sequence stages among ``objs`` (a walk, downstream first), upstream
        first, each with its running items as children."""
        stages = self.snap.stages
        if not stages:
            return ()
        out: list[OperationInfo] = []
        for o in objs:
            entry = stages.get(id(o))
            if entry is None or id(o) in self.claimed:
                continue
            self.claimed.add(id(o))
            out.append(self._stage(o, entry[1]))
        out.reverse()
        return tuple(out)

    def _stage(self, o: object, r: StageRecord) -> OperationInfo:
        stop = r.stop_requested
        running = sorted(self.snap.items.get(id(o), ()), key=_index)
        items = tuple(self._item(w, idx, stop) for w, idx in running)
        state = f"{r.in_flight} in flight, {r.delivered} delivered"
        if stop:
            state += "; stop requested"
        return stage_info(
            r.name, f"max_concurrency={r.max_concurrency}", state, stop, items,
            r.max_concurrency, r.in_flight, r.delivered,
        )

    def _item(self, w: object, idx: int, stop: bool) -> OperationInfo:
        iop = self.snap.item_op(w)
        if iop is None:
            wt = Wait("in a trio worker task of the stage", "trio_scheduler")
        else:
            wt = wait_of(walk(iop), {}, self.clocks)
        return op_info("item", f"#{idx}", None, None, wt.state, None, wt.scheduler,
                       wt.trio_task, wt.await_frame, stop, ())

    def free_sequences(self) -> ScopeInfo | None:
        """The running sequences that no operation of a scope runs (awaited by a task, or
        under ``sync_wait``), under one root entry of kind ``"sequences"``."""
        free = [o for i, (o, _) in self.snap.stages.items() if i not in self.claimed]
        if not free:
            return None
        walks = [walk(o) for o in free]
        inner = {id(x) for w in walks for x in w[1:]}  # upstream stages of another stage
        ops: list[OperationInfo] = []
        for o, w in zip(free, walks, strict=True):
            if id(o) in inner:
                continue
            st = self.stages(w)
            stop = any(c.stop_requested for c in st)
            ops.append(op_info("sequence", repr(_name_of(st)), None, None,
                               "running" + ("; stop requested" if stop else ""), None, None,
                               None, None, stop, (), st))
        if not ops:
            return None
        return ScopeInfo("sequences", None, "running", len(ops), operations=tuple(ops))

    # -- scopes and their operations

    def scope(self, s: object) -> ScopeInfo:
        rec = self.records.get(id(s))
        if rec is None:  # a scope the scan did not see (outstanding() of a scope being made)
            rec = s._sx_describe()  # type: ignore[attr-defined]
            if rec is None:
                return ScopeInfo(type(s).__name__, None, "unused", 0)
        ops = self._operations(s, rec)
        stop = rec.stop_requested
        since = rec.stop_since
        ptask = rec.parent_task
        return ScopeInfo(
            kind=type(s).__name__,
            name=rec.name,
            state=rec.state,
            count=rec.count,
            stop_requested=stop,
            stop_requested_for=None if not stop or since is None else self.now - since,
            entered_by=ptask.name if rec.entered and ptask is not None else None,
            errors=rec.errors,
            operations=tuple(ops),
            scopes=tuple(self.scope(c) for c in self.body.get(id(s), ())),
        )

    def _in_task(self, s: object, task: Task) -> tuple[ScopeInfo, ...]:
        """The scopes a hosted task of ``s`` entered."""
        return tuple(self.scope(c) for c in self.in_task.get((id(s), id(task)), ()))

    def _operations(self, s: object, rec: ScopeRecord) -> list[OperationInfo]:
        scope_stop = rec.stop_requested
        tasks = _Tasks(rec.nursery)
        infos: list[OperationInfo] = []
        others = self._others(s, scope_stop, tasks, infos)
        infos.extend(self._pending_infos(s, self.snap.spawns.get(id(s), []), others, scope_stop,
                                         tasks))
        infos.extend(self._task_info(s, task, kind, scope_stop) for task, kind in tasks.plain)
        infos.sort(key=lambda o: (o.filename or "~", o.lineno or 0, o.kind, o.description))
        return infos

    def _others(
        self, s: object, scope_stop: bool, tasks: _Tasks, infos: list[OperationInfo]
    ) -> list[_Pending]:
        """The future and associated work of ``s`` whose state is found by walking its
        operation; a future's record that needs no walk goes to ``infos``."""
        snap = self.snap
        pending: list[_Pending] = []
        for fs, fr in snap.futures.get(id(s), ()):
            info = self._future(s, fs, fr, scope_stop, tasks, pending)
            if info is not None:
                infos.append(info)
        for a in snap.associates.get(id(s), ()):
            pending.append(
                _Pending("associate", describe(a.sender or a.op), None, scope_stop, a.op)
            )
        return pending

    def _future(
        self, s: object, fs: object, r: FutureRecord, scope_stop: bool, tasks: _Tasks,
        pending: list[_Pending],
    ) -> OperationInfo | None:
        """A future's record if it runs in a trio task or holds an unconsumed result; a
        future whose work runs elsewhere goes to ``pending``."""
        fstop = scope_stop or r.stop_requested
        desc = describe(r.sender)
        if r.result is None and r.associated:
            ftask = tasks.futures.get(id(fs))
            if ftask is None:
                pending.append(
                    _Pending("spawn_future", desc, r.site, fstop, self.snap.future_op(fs))
                )
                return None
            fn, ln = site_fields(r.site)
            return OperationInfo(
                "spawn_future", desc, fn, ln,
                "in a trio task" + shield_note(ftask, True) + ("; stop requested" if fstop else ""),
                scheduler="trio_scheduler", trio_task=ftask.name,
                await_frame=await_frame(ftask.coro), stop_requested=fstop,
                scopes=self._in_task(s, ftask),
            )
        if r.result is not None and id(fs) in self.snap.held and r.claimed:
            fn, ln = site_fields(r.site)
            return OperationInfo(
                "spawn_future", desc, fn, ln,
                f"finished: future holds an unconsumed {r.result} result", stop_requested=fstop,
            )
        return None

    def _pending_infos(
        self, s: object, spawns: list[SpawnRecord], others: list[_Pending], scope_stop: bool,
        tasks: _Tasks,
    ) -> list[OperationInfo]:
        """The records of spawned work (``spawns``), then of ``others``; each operation is
        walked once: what it waits on, and which thread runs it."""
        ops = [r.op for r in spawns] + [p.op for p in others]
        walked: dict[int, int] = {}
        walks: list[list[object]] = []
        for i, op in enumerate(ops):
            objs = [] if op is None else walk(op)  # None: a future's unknown operation
            walks.append(objs)
            for o in objs:
                walked.setdefault(id(o), i)
        running = threads_running(walked) if walked else {}
        out: list[OperationInfo] = []
        by_op = tasks.by_op
        clocks = self.clocks
        stages = self.snap.stages
        n = len(spawns)
        for i, op in enumerate(ops):
            if i < n:
                r = spawns[i]
                kind, site, stop = "spawn", r.site, scope_stop
                desc = describe(r.sender) if r.sender is not None else "?"
            else:
                p = others[i - n]
                kind, desc, site, stop = p.kind, p.description, p.site, p.stop
            objs = walks[i]
            w = RUNNING if op is None else wait_of(objs, by_op, clocks)
            state = w.state
            thread = None
            run = running.get(i)
            if run is not None:
                thread, where = run
                state = f"running on thread {thread!r}" + (f" in {where}" if where else "")
            if stop:
                state += "; stop requested"
            fn, ln = site_fields(site)
            nested = self._nested(s, objs, tasks) if by_op else ()
            out.append(op_info(kind, desc, fn, ln, state, thread, w.scheduler, w.trio_task,
                               w.await_frame, stop, nested, self.stages(objs) if stages else ()))
        return out

    def _nested(self, s: object, objs: list[object], tasks: _Tasks) -> tuple[ScopeInfo, ...]:
        """The scopes entered by the hosted tasks of the operations in ``objs``."""
        nested: list[object] = []
        for o in objs:
            t = tasks.by_op.get(id(o))
            if t is not None:
                nested.extend(self.in_task.get((id(s), id(t)), ()))
        return tuple(self.scope(c) for c in nested) if nested else ()

    def _task_info(self, s: object, task: Task, kind: str, scope_stop: bool) -> OperationInfo:
        """A ``start_soon``/``start`` task, or ``scope.spawn(coroutine)`` on the direct path."""
        cf = task.coro.cr_frame
        loc = {} if cf is None else read_locals(cf, HOSTED_LOCALS[kind])
        inner = loc.get("coro")
        site = loc.get("site")
        fn, ln = site_fields(site if isinstance(site, tuple) else None)
        frame = await_frame(task.coro)
        if kind == "spawn":  # scope.spawn(coroutine) on the direct path: as its sender
            desc = describe(inner)
            state = "in a trio task"
        else:
            desc = getattr(inner, "__qualname__", task.name) + call_args(inner)
            state = f"in trio task, awaiting in {frame}" if frame else "in trio task"
        state += shield_note(task, kind == "spawn")
        if scope_stop:
            state += "; stop requested"
        return OperationInfo(
            kind, desc, fn, ln, state, scheduler="trio_scheduler", trio_task=task.name,
            await_frame=frame, stop_requested=scope_stop, scopes=self._in_task(s, task),
        )
