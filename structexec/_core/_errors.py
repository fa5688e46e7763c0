"""Exceptions shared by the whole library, and the terminate handler.

[exec.general] AS-EXCEPT-PTR, the senders guide "What happens when things fail",
the task guide 'How "stopped" unwinds a task'.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from typing import NoReturn

__all__ = ["ErrorValue", "Stopped", "set_terminate_handler"]


class ErrorValue(Exception):
    """Raised by a consumer for an error datum that is not an exception.

    Any object may be sent with ``set_error``; consumers (``sync_wait``, ``await sndr``, a ``task``
    awaiting a sender) raise an exception datum unchanged and wrap anything else in ``ErrorValue``
    ([exec.general], the senders guide "What happens when things fail"). The datum is in
    :attr:`error`.
    """

    def __init__(self, error: object) -> None:
        super().__init__(error)
        self.error = error

    def __repr__(self) -> str:
        return f"ErrorValue({self.error!r})"


class Stopped(BaseException):
    """Raised in a plain trio task that awaits a sender that completed ``set_stopped()``.

    Awaiting a stopped sender from trio code raises ``trio.Cancelled`` when the stop came from the
    awaiting task's own trio cancellation and ``Stopped`` otherwise
    (the task guide 'How "stopped" unwinds a task'). It derives from ``BaseException`` so that
    ``except Exception`` does not swallow a stop.
    """


def _default_terminate(reason: str, exc: BaseException | None) -> NoReturn:
    sys.stderr.write(f"structexec: std::terminate: {reason}\n")
    if exc is not None:
        traceback.print_exception(type(exc), exc, exc.__traceback__)
    sys.stderr.flush()
    os.abort()


_terminate_handler: Callable[[str, BaseException | None], object] = _default_terminate


def set_terminate_handler(
    handler: Callable[[str, BaseException | None], object] | None,
) -> Callable[[str, BaseException | None], object]:
    """Install ``handler(reason, exc)`` for contract violations; return the previous one.

    C++ answers some contract violations with ``std::terminate`` ([exec.general] MANDATE-NOTHROW,
    [exec.general], [stoptoken.concepts], [exec.run.loop.ctor], [exec.counting.scopes]): a stop
    callback that raises, a completion function that raises, a scope destroyed while work is
    outstanding. structexec calls the installed handler with a message and the exception (or
    ``None``). The default prints both and aborts the process
    (the senders guide "What happens when things fail"). ``None`` restores the default. Tests
    typically install a handler that records the call (``structexec.testing`` has a fixture for
    that). If the handler returns, the library carries on as best it can.
    """
    global _terminate_handler
    if handler is not None and not callable(handler):
        raise TypeError(
            "set_terminate_handler(): handler must be a callable taking (reason, exc), or None "
            f"for the default, got {type(handler).__name__}"
        )
    previous = _terminate_handler
    _terminate_handler = _default_terminate if handler is None else handler
    return previous


def terminate(reason: str, exc: BaseException | None = None) -> None:
    """Report a contract violation to the terminate handler (private helper)."""
    _terminate_handler(reason, exc)
