"""The completion tags: ``set_value_t``, ``set_error_t``, ``set_stopped_t`` ([exec.cmplsig]).

[exec.cmplsig], [exec.get.compl.sched]. Calling a tag with types makes a completion signature
(``set_value_t(int, str)``, ``set_error_t(E)``, ``set_stopped_t()``); the tag classes themselves
name a channel, as in ``get_completion_scheduler[set_value_t]``. This module imports no other
structexec module, so every layer (environments, the protocol, completion signatures) can use
the tags.
"""

from __future__ import annotations

__all__ = ["set_error_t", "set_stopped_t", "set_value_t"]


class _Signature:
    __slots__ = ("args",)
    args: tuple[object, ...]

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.args == self.args  # type: ignore[attr-defined,unused-ignore]

    def __hash__(self) -> int:
        return hash((type(self), self.args))

    def __repr__(self) -> str:
        names = ", ".join(getattr(a, "__name__", repr(a)) for a in self.args)
        return f"{type(self).__name__}({names})"


class set_value_t(_Signature):
    """Tag of the value channel; ``set_value_t(int, str)`` is a completion signature.

    [exec.cmplsig]. Used as ``get_completion_scheduler[set_value_t]``.
    """

    __slots__ = ()

    def __init__(self, *types: object) -> None:
        self.args = types


class set_error_t(_Signature):
    """Tag of the error channel; ``set_error_t(E)`` takes exactly one type ([exec.cmplsig])."""

    __slots__ = ()

    def __init__(self, *types: object) -> None:
        if len(types) != 1:
            raise TypeError(f"set_error_t(E) takes exactly one error type, got {len(types)}")
        self.args = types


class set_stopped_t(_Signature):
    """Tag of the stopped channel; ``set_stopped_t()`` takes no types ([exec.cmplsig])."""

    __slots__ = ()

    def __init__(self, *types: object) -> None:
        if types:
            raise TypeError("set_stopped_t() takes no types")
        self.args = ()
