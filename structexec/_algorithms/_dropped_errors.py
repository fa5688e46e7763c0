"""How ``when_all`` makes the errors that lost to the first one visible ([exec.when.all]).

``when_all`` delivers only the first error of its children; the later ones are reported, not
dropped silently: as notes on the delivered exception, or through ``sys.unraisablehook`` when
the delivered error is not an exception. Used by ``_when_all``'s operation and by the trio
nursery fast path of ``await when_all(...)`` (``_trio._when_all_nursery``); ``when_any``'s race
attaches the errors that completed after it was decided with the same :func:`add_notes`.
"""

from __future__ import annotations

import reprlib
import sys
import traceback
from collections.abc import Callable, Iterable, Sequence

from .._core._errors import ErrorValue

__all__ = ["add_notes", "dropped_error_note", "report_dropped_errors", "short_repr"]

_short_repr = reprlib.Repr()
_short_repr.maxstring = _short_repr.maxother = 160
short_repr = _short_repr.repr


def dropped_error_note(i: int, other: object) -> str:
    """The note that names an error of child ``#i`` that lost to the first one."""
    return (
        f"when_all: child #{i} also failed, with {_short_repr.repr(other)}; only the first "
        "error is delivered ([exec.when.all]), this one was dropped"
    )


def report_dropped_errors(err: object, more: Sequence[tuple[int, object]]) -> None:
    """Make the errors that lost to ``err`` visible ([exec.when.all] delivers only the first).

    If ``err`` is an exception, each other error becomes a note on it (``__notes__``; a note
    already there is not added twice, so a shared exception does not collect copies). A
    non-exception error datum is never changed: the other errors then go to
    ``sys.unraisablehook``, Python's channel for an exception that cannot be raised (the
    default one prints them to stderr; pytest reports them as warnings).
    """
    if isinstance(err, BaseException):
        add_notes(err, more, dropped_error_note)
        return
    for i, other in more:
        exc = other if isinstance(other, BaseException) else ErrorValue(other)
        msg = (
            f"when_all: the error of child #{i} was dropped because another child's error, "
            f"{_short_repr.repr(err)}, was delivered ([exec.when.all]); that error is not an "
            "exception, so this one could not be attached to it as a note"
        )
        hook = sys.unraisablehook
        try:
            if hook is sys.__unraisablehook__:  # it accepts only the interpreter's own args
                sys.stderr.write(f"{msg}:\n")
                traceback.print_exception(type(exc), exc, exc.__traceback__)
            else:
                hook(_Unraisable(exc, msg))  # type: ignore[arg-type]
        except Exception:  # pragma: no cover - a broken hook must not break the completion
            pass


def add_notes(
    err: BaseException,
    more: Iterable[tuple[int, object]],
    note: Callable[[int, object], str],
) -> None:
    """Add ``note(i, other)`` to ``err.__notes__`` for each ``(i, other)`` in ``more``.

    ``other is err`` is skipped (a child that failed with the delivered exception itself); a
    note already there is not added twice, so a shared exception does not collect copies. An
    exception type without a ``__dict__``, or a ``__notes__`` replaced by something other than
    a list, gets no notes (the error is still delivered).
    """
    # err.__notes__ is what BaseException.add_note (3.11+) appends to; set it directly so
    # that Python 3.10 (where the exceptiongroup backport prints notes) works the same.
    notes = getattr(err, "__notes__", None)
    for i, other in more:
        if other is err:
            continue
        text = note(i, other)
        if notes is None:
            notes = []
            try:
                err.__notes__ = notes  # type: ignore[attr-defined,unused-ignore]
            except Exception:  # pragma: no cover - an exception type without a __dict__
                return
        if type(notes) is not list:  # pragma: no cover - someone replaced __notes__
            return
        if text not in notes:
            notes.append(text)


class _Unraisable:
    """The argument of ``sys.unraisablehook`` (the attributes it reads)."""

    __slots__ = ("err_msg", "exc_traceback", "exc_type", "exc_value", "object")

    def __init__(self, exc: BaseException, msg: str) -> None:
        self.exc_type = type(exc)
        self.exc_value = exc
        self.exc_traceback = exc.__traceback__
        self.err_msg = msg
        self.object = None
