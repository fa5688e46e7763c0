"""The library's fast paths in one place: their switches, and the fast ``await`` handlers
(the internals guide §3 "Fast paths").

A fast path does what its general path does, observably the same (property tests run both and
compare), for the common case only. Each one has a switch in :data:`FAST` that the tests turn
off to force the general path; the library reads the switches on every use, so a test may flip
them at any time:

* ``fuse_then``: a chain of ``then``/``upon_*`` stages is one operation (``_then``);
* ``fuse_just``: a ``just`` child of ``when_all`` has no operation of its own (``_when_all``);
* ``spawn``: ``spawn(sndr, token)`` into a library scope builds its state without the general
  path's layers (``_spawn.spawn_fast``);
* ``spawn_coro``: ``scope.spawn(coro)`` runs the coroutine as a task of the scope's nursery
  (``_spawn_coro``);
* ``when_all_nursery``: ``await when_all(coroutines...)`` runs them in a nursery of the
  awaiting task (``_trio._when_all_nursery``).

:data:`FAST_AWAIT` maps a sender type to the fast handler of ``await sndr`` in a trio task,
filled in by the module that owns the sender (or knows the fast way to await it):
``handler(sndr, run)`` returns the generator to run instead of connecting the sender to an
awaiting receiver, or ``None`` when the fast path does not apply, and the general path runs
(``_trio._await.await_sender``).

This module is at the bottom of the layers: it imports nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import TypeAlias

__all__: list[str] = []


class FastPaths:
    """The switches of the fast paths (module docstring); all on by default."""

    __slots__ = ("fuse_just", "fuse_then", "spawn", "spawn_coro", "when_all_nursery")

    def __init__(self) -> None:
        self.fuse_then = True
        self.fuse_just = True
        self.spawn = True
        self.spawn_coro = True
        self.when_all_nursery = True

    def __repr__(self) -> str:
        on = ", ".join(f"{n}={getattr(self, n)}" for n in self.__slots__)
        return f"FastPaths({on})"


#: The switches: ``FAST.spawn = False`` sends every ``spawn`` through the general path.
FAST = FastPaths()

#: ``handler(sndr, run)``: the generator that awaits ``sndr`` in the trio run ``run``, or
#: ``None`` to take the general path.
FastAwait: TypeAlias = Callable[..., Generator[object, None, object] | None]

#: Sender type -> its fast ``await`` handler (module docstring).
FAST_AWAIT: dict[type, FastAwait] = {}


def register_fast_await(cls: type, handler: FastAwait) -> None:
    """Make ``handler`` the fast path of ``await`` for senders of exactly the type ``cls``."""
    if cls in FAST_AWAIT and FAST_AWAIT[cls] is not handler:
        raise RuntimeError(f"{cls.__name__} already has a fast await handler")
    FAST_AWAIT[cls] = handler
