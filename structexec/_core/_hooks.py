"""Late-bound hooks that let the bottom layers call into the trio bridge.

Imports flow one way (core at the bottom, the trio bridge above it). The few places where the
core needs the trio runtime (``Sender.__await__``, connecting a coroutine object, refusing
``sync_wait`` on the trio thread) go through these slots, which the upper layers fill in when
``structexec`` is imported.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typing import Protocol

    from ._contracts import OpState

    class AwaitDriver(Protocol):
        """A coroutine loop that takes ``await sndr`` itself (``CoroutineLoop``); the result
        is the awaited sender's value, of whatever type the sender sends."""

        def await_sender(self, sndr: object) -> Generator[object, object, Any]: ...


def _no_await(sndr: object) -> Generator[object, object, Any]:
    raise RuntimeError(
        "awaiting a sender needs the trio bridge; import structexec (the package), "
        "not only its private modules"
    )


def _no_connect_awaitable(aw: object, rcvr: object) -> OpState:
    raise TypeError(
        f"{type(aw).__name__} is an awaitable, and awaitables become senders only once "
        "the trio bridge is loaded (import structexec)"
    )


def _never(*args: object) -> bool:
    return False


#: ``await_sender(sndr)`` returns the generator behind ``Sender.__await__``.
await_sender: Callable[[object], Generator[object, object, Any]] = _no_await
#: ``connect_awaitable(aw, rcvr)`` connects a coroutine or other awaitable ([exec.connect]).
connect_awaitable: Callable[[Any, object], OpState] = _no_connect_awaitable
#: ``on_trio_thread()`` is True on a thread that is running ``trio.run``.
on_trio_thread: Callable[[], bool] = _never


class _DriverState(threading.local):
    """The structexec coroutine driver running on this thread, if any.

    A coroutine driven by structexec's own loop (a ``task`` off the trio scheduler, or a
    coroutine sender under ``sync_wait``) is resumed by ``driver.send``; while it runs, the
    driver sets ``driver_state.driver`` to itself, and ``Sender.__await__`` then returns
    ``driver.await_sender(sndr)`` (a generator that hands the sender to the driver) instead of
    the trio path. Outside such a driver it is ``None``.
    """

    driver: AwaitDriver | None = None


driver_state = _DriverState()
