"""Structural types the testing tools share (for annotations)."""

from __future__ import annotations

from typing import Protocol

__all__ = ["ReceiverLike"]


class ReceiverLike(Protocol):
    """What the testing senders' operations complete: a receiver ([exec.recv.concepts])."""

    def set_value(self, *vals: object) -> None: ...
    def set_error(self, err: object) -> None: ...
    def set_stopped(self) -> None: ...
