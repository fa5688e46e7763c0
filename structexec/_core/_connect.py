"""``connect(sndr, rcvr)`` ([exec.connect]): a sender and a receiver give an operation state.

``connect`` checks the receiver (once per receiver class), lets the sender's late domain
transform the sender when custom domains are in use (the switches live in ``_domain``, read on
each call so that creating a domain, or a test, can flip them), and calls ``sndr.connect(rcvr)``;
a coroutine or other awaitable goes to the late-bound ``_hooks.connect_awaitable``.
``connect_unchecked`` is the same without the receiver check, for the library's own receivers.
Both are hot paths: their bodies are written out, with no call layer between them.
"""

from __future__ import annotations

import inspect
import types
from typing import TYPE_CHECKING, Any

from . import _domain, _hooks
from ._domain import get_domain_late, transform_sender
from ._env import get_env

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._contracts import OpState

_CoroutineType = types.CoroutineType

__all__ = ["connect"]


def connect(sndr: Any, rcvr: object) -> Any:
    """Connect a sender to a receiver, giving an operation state ([exec.connect]).

    The sender is first transformed by its late domain when custom domains are in use; then
    ``sndr.connect(rcvr)`` is called, or, for a coroutine or other awaitable, the awaitable is
    wrapped so that it runs in a trio task when started ([exec.connect]). ``connect`` runs
    no user work: nothing completes before ``start`` ([exec.async.ops]).

    ``rcvr`` must be a receiver: an object with the completion methods ``set_value(*vals)``,
    ``set_error(err)`` and ``set_stopped()`` that the sender may call ([exec.recv.concepts]).
    ``connect`` checks it cheaply: it must have at least one of them (checked once per
    receiver class); anything else (``None``, a number, a sender) raises ``TypeError`` here
    rather than an ``AttributeError`` at the completion.
    """
    if type(rcvr) not in _receiver_types:
        _check_receiver(rcvr)
    # The body of connect_unchecked, repeated: connect is a hot path, a call costs.
    if _domain._domains_on and (
        _domain._customize_all or getattr(sndr, "tag", None) in _domain._customized_tags
    ):
        e = get_env(rcvr)
        sndr = transform_sender(get_domain_late(sndr, e), sndr, e)
    if type(sndr) is _CoroutineType:  # common, and it has no connect: skip the exception
        return _hooks.connect_awaitable(sndr, rcvr)
    try:
        m = sndr.connect
    except AttributeError:
        if inspect.isawaitable(sndr):
            return _hooks.connect_awaitable(sndr, rcvr)
        raise _not_a_sender(sndr) from None
    return m(rcvr)


#: Receiver classes seen by :func:`connect` whose instances have a completion method (a
#: bounded cache: a program has a handful of receiver classes).
_receiver_types: set[type] = set()


def _check_receiver(rcvr: object) -> None:
    """The receiver check of :func:`connect` for a class not seen yet: a completion method on
    the class (then remember the class) or on the instance, else ``TypeError``."""
    cls = type(rcvr)
    if hasattr(cls, "set_value") or hasattr(cls, "set_error") or hasattr(cls, "set_stopped"):
        if len(_receiver_types) < 1024:
            _receiver_types.add(cls)
        return
    if hasattr(rcvr, "set_value") or hasattr(rcvr, "set_error") or hasattr(rcvr, "set_stopped"):
        return
    raise TypeError(
        f"connect(sndr, rcvr): rcvr must be a receiver, got {type(rcvr).__name__}: a receiver "
        "has the completion methods set_value(*vals), set_error(err) and set_stopped() "
        "([exec.recv.concepts]); derive from sx.Receiver to write one"
    )


def _not_a_sender(sndr: object) -> TypeError:
    return TypeError(
        f"connect() needs a sender, got {type(sndr).__name__}: a sender has a connect(rcvr) "
        "method (derive from sx.Sender) or is awaitable ([exec.snd.concepts])"
    )


def connect_unchecked(sndr: Any, rcvr: object) -> OpState:
    """:func:`connect` without the receiver check, for the library's own receivers."""
    if _domain._domains_on and (
        _domain._customize_all or getattr(sndr, "tag", None) in _domain._customized_tags
    ):
        e = get_env(rcvr)
        sndr = transform_sender(get_domain_late(sndr, e), sndr, e)
    if type(sndr) is _CoroutineType:  # common, and it has no connect: skip the exception
        return _hooks.connect_awaitable(sndr, rcvr)
    m: Callable[[object], OpState]
    try:
        m = sndr.connect
    except AttributeError:
        if inspect.isawaitable(sndr):
            return _hooks.connect_awaitable(sndr, rcvr)
        raise _not_a_sender(sndr) from None
    return m(rcvr)
