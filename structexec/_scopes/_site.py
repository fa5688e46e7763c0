"""Where scoped work came from: spawn sites, scope names, the note on errors of spawned work,
and the settings of the stuck-work warnings (the debugging guide).

The lowest module of the scope introspection; ``_spawn``, ``_spawn_future`` and ``_nursery``
use it on their error paths only. A spawn stores ``(code object, instruction offset)`` of the
caller's frame (``_core._describe.site_of``, done inline in the fast paths); the file and line
are computed here, when an error is noted or a tree is printed (``_introspect``).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys
import warnings
from types import CodeType
from typing import Any

from .._core._args import real_seconds
from .._core._describe import Site, format_site, site_line

__all__ = ["StuckWorkWarning", "set_stop_grace"]

#: The code objects of the coroutines that host ``start_soon``/``start`` tasks and coroutine
#: senders, and what they are (filled by ``_nursery`` and ``_spawn_coro``, which define them;
#: read by ``_introspect``, which is imported only when a program first looks).
HOSTED_CODES: dict[CodeType, str] = {}

#: The scopes the current trio task has entered and not yet left, innermost first (a linked
#: list of ``(scope, rest)`` pairs): how a scope's exit finds scopes misnested inside it
#: (``_nursery``) and how ``sx.operation_tree()`` nests scopes (``_introspect``).
OPEN_SCOPES: contextvars.ContextVar[tuple[Any, Any] | None] = contextvars.ContextVar(
    "structexec_open_scopes", default=None
)

#: The process-wide default of ``stop_grace`` (:func:`set_stop_grace`); ``None``: no warnings.
_settings: dict[str, float | None] = {"stop_grace": None}


class StuckWorkWarning(RuntimeWarning):
    """Issued by a scope with a ``stop_grace`` (the debugging guide "Stuck-work warnings").

    * when an operation associated with a ``counting_scope`` is still running ``stop_grace``
      seconds after the scope requested stop; the message names the operation (its sender's
      description, or the trio task) and where it was spawned;
    * when the exit of an ``async with`` block has waited ``stop_grace`` seconds for the
      scope's work; the message has the tree of what it waits for (``sx.operation_tree()``).

    Each is issued once per scope and stop. Seconds are trio's clock, so ``MockClock`` tests
    them without waiting.
    """


def set_stop_grace(seconds: float | None) -> float | None:
    """Set the process-wide default of the scopes' ``stop_grace``; return the previous one.

    ``None`` (the default) switches the stuck-work warnings off for every scope that was not
    given its own ``stop_grace``; a number of seconds switches them on
    (:class:`StuckWorkWarning`, the debugging guide). ``seconds`` is ``None`` or a real number
    (``int``, ``float``, ``Fraction``, ``Decimal``; ``TypeError`` for ``bool``, ``str`` and other
    types); ``ValueError`` for a negative number, NaN or one too large for a float.

    Example:

    >>> import structexec as sx
    >>> old = sx.set_stop_grace(5.0)
    >>> sx.set_stop_grace(old)
    5.0
    """
    seconds = check_grace(seconds, "set_stop_grace()", "seconds")
    old = _settings["stop_grace"]
    _settings["stop_grace"] = seconds
    return old


def check_grace(
    grace: object, fn: str = "counting_scope()", name: str = "stop_grace"
) -> float | None:
    """``None`` or the grace as a float: the numbers every time of the library accepts
    (``_core._args``), ``>= 0``; ``inf`` is no warning."""
    if grace is None:
        return None
    return real_seconds(grace, fn, f"{name} (None or seconds)")


def grace_of(scope: object) -> float | None:
    """The scope's ``stop_grace``, else the process-wide one."""
    g: float | None = getattr(scope, "_stop_grace", None)
    return _settings["stop_grace"] if g is None else g


def scope_label(scope: object) -> str:
    """``counting_scope 'connections'``, or ``counting_scope`` for an unnamed one."""
    name = getattr(scope, "_name", None)
    kind = type(scope).__name__
    return kind if name is None else f"{kind} {name!r}"


def spawn_note(site: Site, scope: object, how: str = "spawned") -> str:
    """``spawned at app.py:42 into counting_scope 'connections'``."""
    where = format_site(site)
    at = f" at {where}" if where is not None else ""
    return f"{how}{at} into {scope_label(scope)}"


def add_note(exc: object, note: str) -> None:
    """Add ``note`` to the exception ``exc`` once (``add_note``; ``__notes__`` on 3.10, which
    the ``exceptiongroup`` backport prints). Non-exception error datums are left alone."""
    if not isinstance(exc, BaseException):
        return
    notes = getattr(exc, "__notes__", None)
    if isinstance(notes, list) and note in notes:
        return
    try:
        if sys.version_info >= (3, 11):
            exc.add_note(note)
        elif isinstance(notes, list):  # pragma: no cover - 3.10
            notes.append(note)
        else:  # pragma: no cover - 3.10
            exc.__notes__ = [note]  # type: ignore[attr-defined]
    except Exception:  # pragma: no cover - an exception type that refuses attributes
        pass


def note_error(
    exc: object, site: Site, scope: object, how: str = "spawned", task: bool = False
) -> None:
    """Note on ``exc`` where its work was spawned and which scope records it.

    Errors of spawned *senders* (``spawn``, ``spawn_future``, a spawned coroutine) always get
    the note: a nursery has no such work, so no nursery-written test can depend on their text.
    Errors of trio tasks (``task=True``: ``start_soon``/``start``) get it only if the scope has
    a name: an unnamed scope leaves them exactly as a trio nursery does, since a test matching a
    task error's whole text (``pytest.raises(match="^...$")`` also reads the notes) must pass
    for a scope as for a nursery (the debugging guide)."""
    if not task or getattr(scope, "_name", None) is not None:
        add_note(exc, spawn_note(site, scope, how))


# --------------------------------------------------------------------------- warnings

_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_CONTEXTLIB = contextlib.__file__

#: Where a scope was entered: ``(code, instruction offset, module globals)`` of the user's
#: frame, or ``None``.
EnterSite = tuple[Any, int, dict[str, Any]] | None


#: The files :func:`enter_site` found to be the user's (not structexec's nor ``contextlib``'s):
#: a frame of one of them is the site at once (the scope's ``__aenter__``, without a call).
USER_FILES: set[str] = set()


def enter_site() -> EnterSite:
    """The innermost frame above the caller that is not structexec's (nor ``contextlib``'s,
    for an ``AsyncExitStack``): the user's ``async with`` line. Cheap: no line lookup."""
    f: Any = sys._getframe(1)
    while f is not None:
        fn = f.f_code.co_filename
        if not (fn.startswith(_PKG_DIR) or fn == _CONTEXTLIB):
            USER_FILES.add(fn)
            return (f.f_code, f.f_lasti, f.f_globals)
        f = f.f_back
    return None


def warn_stuck(message: str, where: EnterSite) -> None:
    """Issue a :class:`StuckWorkWarning` attributed to ``where`` (the ``async with`` line of
    the scope, :func:`enter_site`), so that its file and line are the user's and a
    ``filterwarnings(..., module=...)`` of the user's module applies. From inside the scope's
    machinery: a filter that turns it into an error must not break the scope's join, so the
    warning is then shown instead of raised."""
    fl = None if where is None else site_line((where[0], where[1]))
    if where is None or fl is None:
        filename, lineno, module, g = "<unknown>", 0, "<unknown>", None
    else:
        (filename, lineno), g = fl, where[2]
        module = g.get("__name__", "<unknown>")
    registry = None if g is None else g.setdefault("__warningregistry__", {})
    try:
        warnings.warn_explicit(
            message, StuckWorkWarning, filename, lineno, module, registry, g
        )
    except Warning:
        warnings.showwarning(message, StuckWorkWarning, filename, lineno)


def no_trio_message(kind: str) -> str:
    """``async with kind()`` outside trio (under asyncio, or with no event loop)."""
    return (
        f"`async with {kind}()` needs a running trio event loop on this thread (it was "
        "entered outside trio.run, e.g. under asyncio): as a nursery, the scope hosts trio "
        "tasks, and structexec's runtime is trio. Run the program with trio.run; or, without "
        "`async with`, use the scope from any thread: spawn work with "
        "sx.spawn(sndr, scope.get_token()) and wait for it with sx.sync_wait(scope.join())"
    )
