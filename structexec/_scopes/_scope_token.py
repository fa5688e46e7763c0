"""The ``scope_token`` protocol ([exec.scope.concepts]).

A scope token is any object with three methods:

* ``try_associate() -> bool``: ask the token's scope to count one more association;
* ``disassociate() -> None``: release one association (must not raise);
* ``wrap(sndr) -> sender``: a sender with the same completions as ``sndr`` that the scope
  can act on (``counting_scope`` adds its stop token; ``simple_counting_scope`` returns
  ``sndr`` itself).

Tokens are copied freely and copying must not raise ([exec.scope.concepts]). ``associate``,
``spawn`` and ``spawn_future`` accept any object that has the three methods ([exec.scope.concepts]).
A token may also define ``record_error(err)``: ``spawn`` then hands it the error datum of spawned
work that fails (the scopes guide "The nursery face: `async with`"); the tokens of
``simple_counting_scope`` and ``counting_scope`` do.
"""

from __future__ import annotations

from typing import Protocol

__all__: list[str] = []

def is_scope_token(token: object) -> bool:
    """True if ``token`` has ``try_associate``, ``disassociate`` and ``wrap``
    ([exec.scope.concepts])."""
    return (
        callable(getattr(token, "try_associate", None))
        and callable(getattr(token, "disassociate", None))
        and callable(getattr(token, "wrap", None))
    )


def check_scope_token(token: object, who: str) -> None:
    """Raise ``TypeError`` naming ``who`` unless ``token`` is a scope token ([exec.spawn])."""
    if not is_scope_token(token):
        names = ("try_associate", "disassociate", "wrap")
        missing = [m for m in names if not callable(getattr(token, m, None))]
        hint = ""
        if callable(getattr(token, "get_token", None)):
            hint = " (it looks like a scope: pass scope.get_token())"
        raise TypeError(
            f"{who}: the token argument must be a scope token, got {type(token).__name__}, which "
            f"has no {', '.join(missing)} method{'s' if len(missing) > 1 else ''}{hint} "
            "([exec.scope.concepts], [exec.spawn])"
        )


class ScopeToken(Protocol):
    """What ``spawn``, ``spawn_future`` and ``associate`` call on a scope token
    ([exec.scope.concepts]); for annotations (:func:`check_scope_token` checks at run time)."""

    def try_associate(self) -> bool: ...

    def disassociate(self) -> None: ...

    def wrap(self, sndr: object) -> object: ...


class CompletionReceiver(Protocol):
    """The completions the scopes deliver to a receiver ([exec.recv.concepts]); for
    annotations."""

    def set_value(self, *vals: object) -> None: ...

    def set_error(self, err: object) -> None: ...

    def set_stopped(self) -> None: ...
