"""Short human-readable descriptions of senders, functions and spawn sites (trio-free).

Used by the scope introspection (``sx.operation_tree()``, the debugging guide) and by the notes
that errors of spawned work carry. Everything here runs when a description is *asked for*
(a dump, an error), never when work is spawned: a spawn only stores the sender it was given
and, for its site, the caller's code object and instruction offset (:func:`site_of`).

A sender is described from its structural decomposition ([exec.snd.concepts]: ``tag``,
``data``, ``children``): ``just(1) | then(parse)`` for ``then(just(1), parse)``, functions by
their qualified names, ``when_all(a, b)`` for several children; a sender without a tag by its
``repr``, cut short.
"""

from __future__ import annotations

import os
import sys
from types import CodeType
from typing import Any

__all__ = ["describe", "describe_callable", "site_line", "site_of", "format_site"]

#: The longest description :func:`describe` returns (the rest becomes ``...``).
MAX_LEN = 200
_MAX_DEPTH = 12

#: A captured spawn site: ``(code object, instruction offset)`` of the caller's frame, or
#: ``None``. The line number is computed from the offset only when asked (:func:`site_line`).
Site = tuple[CodeType, int] | None


def site_of(depth: int) -> Site:
    """The code object and instruction offset of the frame ``depth`` levels above the caller
    (cheap: no traceback, no line-number lookup; :func:`site_line` does that later)."""
    try:
        f = sys._getframe(depth + 1)
    except ValueError:
        return None
    return (f.f_code, f.f_lasti)


def site_line(site: Site) -> tuple[str, int] | None:
    """``(filename, line number)`` of a captured site, or ``None``."""
    if site is None:
        return None
    code, lasti = site
    line = code.co_firstlineno
    for start, end, ln in code.co_lines():
        if start <= lasti < end:
            if ln is not None:
                line = ln
            break
    return code.co_filename, line


def format_site(site: Site, full: bool = False) -> str | None:
    """``"app.py:42"`` (the file's base name; ``full``: its whole path), or ``None``."""
    fl = site_line(site)
    if fl is None:
        return None
    fn, line = fl
    return f"{fn if full else os.path.basename(fn)}:{line}"


def describe_callable(fn: object) -> str:
    """A function by its qualified name (``Parser.parse``, ``main.<locals>.<lambda>``); a
    ``functools.partial`` as ``partial(name, ...)``; anything else by a short ``repr``."""
    func = getattr(fn, "func", None)
    if func is not None and callable(func) and hasattr(fn, "args"):
        return f"partial({describe_callable(func)}, ...)"
    q = getattr(fn, "__qualname__", None)
    if isinstance(q, str):
        return q
    return _short(repr(fn), 60)


def _short(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 3] + "..."


def _data(d: object) -> str:
    if d is None:
        return ""
    if isinstance(d, tuple):
        return ", ".join(_data_item(x) for x in d)
    return _data_item(d)


_SCHEDULER_NAMES = {"_TrioScheduler": "trio_scheduler", "_RunLoopScheduler": "run_loop"}


def scheduler_label(sch: object) -> str:
    """A scheduler by its kind: ``trio_scheduler``, ``parallel_scheduler``, ..."""
    n = type(sch).__name__
    return _SCHEDULER_NAMES.get(n, n.lstrip("_"))


def _data_item(x: object) -> str:
    if hasattr(x, "schedule"):  # a scheduler: its kind is enough
        return scheduler_label(x)
    if callable(x):
        return describe_callable(x)
    return _short(repr(x), 40)


#: Algorithms whose sender argument comes after the scheduler: described as calls.
_SENDER_LAST = frozenset(("starts_on", "on"))


def _describe(s: Any, depth: int) -> str:
    if depth > _MAX_DEPTH:
        return "..."
    cr = getattr(s, "cr_code", None)
    if isinstance(cr, CodeType):  # a coroutine object given as a sender
        return f"{getattr(s, '__qualname__', cr.co_name)}() (coroutine)"
    tag = getattr(s, "tag", None)
    if tag is None:
        sch = getattr(s, "_sch", None)
        t = getattr(s, "_t", None)
        if sch is not None and isinstance(t, (int, float)):  # a timer sender
            name = "schedule_after" if getattr(s, "_after", True) else "schedule_at"
            return f"{name}({scheduler_label(sch)}, {t!r})"
        return _short(repr(s), 80)
    name = str(tag)
    try:
        children = tuple(s.children)
        data = s.data
    except Exception:  # a sender whose decomposition raises: its repr
        return _short(repr(s), 80)
    args = _data(data) if name != "task" else ""
    if name == "task":
        return _short(repr(s), 80)
    if len(children) == 1 and not (name in _SENDER_LAST and hasattr(data, "schedule")):
        return f"{_describe(children[0], depth + 1)} | {name}({args})"
    inner = [_describe(c, depth + 1) for c in children]
    if args:
        if name in _SENDER_LAST:
            inner.insert(0, args)
        else:
            inner.append(args)
    return f"{name}({', '.join(inner)})"


def describe(sndr: object) -> str:
    """A one-line description of ``sndr``: ``just(1) | then(parse)``, ``when_all(a, b)``,
    ``schedule_after(parallel_scheduler, 5.0)``, ``handle() (coroutine)``."""
    try:
        return _short(_describe(sndr, 0), MAX_LEN)
    except Exception as e:  # pragma: no cover - a description never raises
        return f"<{type(sndr).__name__}: no description ({type(e).__name__})>"
