"""What is running: a snapshot of every live scope and its outstanding operations.

the debugging guide "Debugging structexec programs"; ``sx.operation_tree()``, ``sx.dump()``,
``sx.install_dump_on_signal()``, ``scope.outstanding()``.

Nothing is registered while the program runs, so nothing is kept alive and the hot paths pay
nothing for the tree. A snapshot finds the objects the garbage collector knows (the
referrers of the root state classes, ``_introspect_scan.Snapshot``): the scopes, the states of
spawned work, futures and associated work, the running stages of sequences and, through each
scope's nursery, its hosted trio tasks. Each answers ``_sx_describe()`` with a typed record
(``_core._snapshot``, declared as ``_core._contracts.Describable``); a spawn stores only the
sender it was given and the caller's code object and instruction offset: the sender's
description (``_core._describe``), the file and line are computed here.

What an operation waits on is found by walking its operation state downwards (through
``_sx_children()`` where a state declares it, else the slots of the library's operations,
never a receiver or an environment) to a state that describes a wait (a pending timer, a
hosted trio task, a parallel-scheduler operation, ...), and by looking for the operation in
the stacks of the other threads (``sys._current_frames()``).

No lock is taken (a tree may be printed by a signal handler that interrupted a holder of a
scope's lock on the same thread): counts, states and flags are read as they are.

The parts: ``_introspect_records`` (the public records), ``_introspect_scan`` (the heap scan,
the walk, frames and threads), ``_introspect_build`` (the tree), this module (the public
functions and the printer). None is imported by ``import structexec``.
"""

from __future__ import annotations

import gc
import signal as _signal
import sys
from collections.abc import Callable, Iterable
from typing import IO, Any

from ._introspect_build import Builder as _Builder
from ._introspect_build import forget_lines
from ._introspect_records import OperationInfo, ScopeInfo
from ._introspect_scan import Snapshot

__all__ = [
    "OperationInfo",
    "ScopeInfo",
    "dump",
    "format_tree",
    "install_dump_on_signal",
    "operation_tree",
    "outstanding",
]


def _snapshot_roots(only: object = None) -> tuple[ScopeInfo, ...]:
    # The cycle collector is paused while the tree is built: the tree allocates a few objects
    # per operation, none of them garbage, and over a large heap the full collections they
    # would trigger cost more than building the tree (measured: 4 of 8 us per operation for
    # 50,000 timers). A snapshot running on another thread may have paused it already.
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        b = _Builder(Snapshot())
        b.place()
        if only is not None:
            return (b.scope(only),)
        roots = [b.scope(s) for s in b.roots]
        free = b.free_sequences()
        if free is not None:
            roots.append(free)
        return tuple(roots)
    finally:
        forget_lines()  # keeps no code object alive after the snapshot
        if paused:
            gc.enable()


def operation_tree() -> tuple[ScopeInfo, ...]:
    """A snapshot of every live scope of the process and its outstanding operations, as data
    (the debugging guide).

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


def outstanding(scope: object) -> tuple[OperationInfo, ...]:
    """The outstanding operations of one scope (``scope.outstanding()``)."""
    return _snapshot_roots(scope)[0].operations


def scope_info(scope: object) -> ScopeInfo:
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
    (``sys.stderr`` by default) and return the text (the debugging guide).

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


def check_text_file(fn: str, file: object) -> None:
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
    (``SIGUSR1`` by default), and return the previous handler (the debugging guide).

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

    def handler(sig: int, frame: object) -> None:
        try:
            dump(file)
        except Exception as e:  # pragma: no cover - a dump never stops the program
            print(f"structexec: dump failed: {e!r}", file=sys.stderr)

    try:
        return _signal.signal(signum, handler)
    except ValueError as e:  # not a signal number, or not the main thread
        raise ValueError(f"install_dump_on_signal(): signum={signum!r}: {e}") from None
