"""``on`` in its two forms ([exec.on]).

* ``on(sch, sndr)``: run ``sndr`` on ``sch`` and come back. At ``connect`` it remembers the
  receiver's scheduler ``orig = get_scheduler(get_env(rcvr))`` and becomes
  ``continues_on(starts_on(sch, sndr), orig)`` ([exec.on]). Without a scheduler in the receiver's
  environment it is ill-formed: ``connect`` raises ``TypeError`` ([exec.on]).
* ``on(sndr, sch, closure)`` / ``sndr | on(sch, closure)``: run ``sndr`` where it is started,
  hop to ``sch``, apply ``closure`` there, and hop back to ``orig`` (``sndr``'s value
  completion scheduler, else the receiver's scheduler) ([exec.on]). It becomes
  ``write_env(continues_on(closure(continues_on(write_env(sndr, SCHED-ENV(orig)), sch)), orig),
  SCHED-ENV(sch))``.

Both lowerings are ``on.transform_sender`` and are also what ``connect`` does when no custom
domain is in use, so the behaviour is the same either way.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, TypeVar, overload

from .._core._adaptor_util import (
    SchedulerAdaptorSender,
    check_scheduler,
    check_sender,
    early,
    early_child,
    sched_domain,
)
from .._core._completion_signatures import (
    completion_signatures,
    dependent_sender_error,
    get_completion_signatures,
)
from .._core._connect import connect_unchecked as connect
from .._core._env import EMPTY_ENV, fwd_env, get_env, join_env, sched_env
from .._core._protocol import Algorithm, Closure, MapClosure, Sender, WidenClosure, is_sender
from .._core._queries import _MISSING, get_completion_scheduler, get_scheduler, query_or
from .._core._tags import set_value_t
from ._continues_on import continues_on
from ._starts_on import starts_on
from ._write_env import write_env

if TYPE_CHECKING:
    from .._core._contracts import OperationState, Receiver

__all__ = ["on"]

T = TypeVar("T")
A = TypeVar("A")
R = TypeVar("R")


def _no_scheduler(form: str) -> TypeError:
    return TypeError(
        f"{form} needs to know which scheduler to return to, but the receiver's environment "
        "has no get_scheduler ([exec.on]). Connect it where a scheduler is known "
        "(sync_wait, a task, awaiting it from trio), provide one with "
        "sx.write_env(sender, sx.prop(sx.get_scheduler, sch)), or use sx.starts_on(sch, sndr) "
        "if the completion need not come back"
    )


class _OnSender(SchedulerAdaptorSender):
    __slots__ = ("_closure",)

    def __init__(self, sch: object, child: object, closure: Closure[object] | None) -> None:
        self._sch = sch  # type: ignore[assignment]
        self._child = child
        self._closure = closure  # None for on(sch, sndr)

    def connect(self, rcvr: Receiver) -> OperationState:
        op: OperationState = connect(_lower(self, get_env(rcvr)), rcvr)
        return op

    def get_completion_signatures(self, env: object = None) -> completion_signatures | None:
        """The signatures of the lowered sender; ``on(sch, sndr)`` is dependent
        ([exec.getcomplsigs])."""
        if env is None:
            try:
                lowered = _lower(self, EMPTY_ENV)
            except TypeError:
                raise dependent_sender_error(
                    "on(...) needs the receiver's get_scheduler: its completion signatures "
                    "depend on the environment ([exec.getcomplsigs])"
                ) from None
            return get_completion_signatures(lowered, None)
        return get_completion_signatures(_lower(self, env), env)

    @property
    def closure(self) -> Closure[object] | None:
        """The closure of ``on(sndr, sch, closure)``, ``None`` for ``on(sch, sndr)``."""
        return self._closure

    @property
    def data(self) -> object:  # type: ignore[override]
        return self._sch if self._closure is None else (self._sch, self._closure)

    def __repr__(self) -> str:
        if self._closure is None:
            return f"on({self._sch!r}, {self._child!r})"
        return f"on({self._child!r}, {self._sch!r}, {self._closure!r})"


def _lower(sndr: _OnSender, env: object) -> object:
    sch = sndr._sch
    child = sndr._child
    closure = sndr._closure
    if closure is None:
        orig = query_or(env, get_scheduler, _MISSING)
        if orig is _MISSING:
            raise _no_scheduler("on(sch, sndr)")
        return continues_on(starts_on(sch, child), orig)
    orig = query_or(
        get_env(child),
        get_completion_scheduler[set_value_t],
        query_or(env, get_scheduler, _MISSING),
    )
    if orig is _MISSING:
        raise _no_scheduler("on(sndr, sch, closure)")
    inner = closure(continues_on(write_env(child, sched_env(orig)), sch))
    return write_env(continues_on(inner, orig), sched_env(sch))


class on_t(Algorithm):
    """``on(sch, sndr)`` / ``on(sndr, sch, closure)``: run work on another scheduler and come back
    ([exec.on]).

    ``on(sch, sndr)`` starts ``sndr`` on ``sch`` (where ``read_env(get_scheduler)`` is
    ``sch``), then transfers the completion back to the scheduler of the receiver's
    environment and forwards the result ([exec.on]). ``connect`` raises ``TypeError`` if the
    receiver's environment has no ``get_scheduler`` ([exec.on]).

    ``on(sndr, sch, closure)``, or ``sndr | on(sch, closure)``: ``sndr`` runs on the current
    agent; its result moves to ``sch``, where ``closure`` (e.g. ``then(f)``) is applied to it;
    the result then moves back to ``sndr``'s completion scheduler (or, failing that, the
    receiver's scheduler) ([exec.on]). ``sndr`` sees that original scheduler as
    ``get_scheduler``, the closure's work sees ``sch``.

    Raises ``TypeError`` if ``sch`` is not a scheduler, or the second argument is neither a
    sender nor a closure, or both ([exec.on]). A failing scheduling operation completes with its
    error on an unspecified agent ([exec.on], [exec.starts.on], [exec.continues.on]).

    Completion signatures: the work's, plus the error and stopped signatures of the scheduling
    operations ([exec.on]).

    Errors: errors of the work come back to the original scheduler; a failing scheduling
    operation completes with its error on an unspecified agent.

    Cancellation: the receiver's stop token reaches the work and the hops; a stopped hop
    completes ``set_stopped()``.

    Example:

    >>> import structexec as sx
    >>> sx.sync_wait(sx.on(sx.inline_scheduler(), sx.just(1)))
    (1,)
    >>> sx.sync_wait(sx.just(1) | sx.on(sx.inline_scheduler(), sx.then(lambda x: x + 1)))
    (2,)
    """

    __slots__ = ()

    @overload
    def __call__(self, sch: object, sndr: Sender[T], /) -> Sender[T]: ...
    @overload
    def __call__(self, sch: object, closure: MapClosure[A, R], /) -> MapClosure[A, R]: ...
    @overload
    def __call__(self, sch: object, closure: WidenClosure[R], /) -> WidenClosure[R]: ...
    @overload
    def __call__(self, sch: object, closure: Closure[Any], /) -> Closure[Any]: ...
    @overload
    def __call__(
        self, sndr: Awaitable[A], sch: object, closure: MapClosure[A, R], /
    ) -> Sender[R]: ...
    @overload
    def __call__(
        self, sndr: Awaitable[T], sch: object, closure: WidenClosure[R], /
    ) -> Sender[T | R]: ...
    @overload
    def __call__(self, sndr: Sender[Any], sch: object, closure: Closure[Any], /) -> Sender[Any]: ...
    def __call__(self, *args: Any) -> Any:
        if len(args) == 3:
            sndr, sch, closure = args
            check_sender("on", "sndr", sndr)
            check_scheduler("on", "sch", sch)
            if not isinstance(closure, Closure):
                raise TypeError(
                    "on(sndr, sch, closure): closure must be a sender adaptor closure such as "
                    f"sx.then(f), got {type(closure).__name__}"
                )
            return early_child(sndr, _OnSender(sch, sndr, closure))
        if len(args) != 2:
            raise TypeError(
                f"on() takes (sch, sndr), (sch, closure) or (sndr, sch, closure), got "
                f"{len(args)} arguments"
            )
        sch, x = args
        check_scheduler("on", "sch", sch)
        is_closure = isinstance(x, Closure)
        if is_closure and callable(getattr(x, "connect", None)):
            raise TypeError(
                "on(sch, x): x is both a sender and a sender adaptor closure, which is "
                "ambiguous ([exec.on])"
            )
        if is_closure:
            return Closure(lambda s: self(s, sch, x))
        if not is_sender(x):
            raise TypeError(
                "on(sch, x): x must be a sender or a sender adaptor closure, got "
                f"{type(x).__name__}"
            )
        return early(sched_domain(sch), _OnSender(sch, x, None))

    def transform_sender(self, sndr: object, env: object = None) -> object:
        """The late lowering of either form ([exec.snd.transform]); needs ``env``."""
        if env is None or not isinstance(sndr, _OnSender):
            return sndr
        return _lower(sndr, env)

    def transform_env(self, sndr: object, env: object) -> object:
        """``on.transform_env``: ``JOIN-ENV(SCHED-ENV(sch), FWD-ENV(env))`` for ``on(sch, s)``,
        ``env`` unchanged for the closure form."""
        if isinstance(sndr, _OnSender) and sndr._closure is None:
            return join_env(sched_env(sndr._sch), fwd_env(env))
        return env


on = on_t()
_OnSender.tag = on
