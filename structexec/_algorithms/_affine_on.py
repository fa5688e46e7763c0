"""``affine_on``: complete where the operation was started ([exec.affine.on], P3941R1).

[exec.affine.on], the task guide "Scheduler affinity". ``affine_on(sndr)`` starts ``sndr`` on the
current agent and delivers every completion (value, error, stopped) on the scheduler found in the
receiver's environment (``get_scheduler``), which must be *infallible*. It is what a ``task`` wraps
around every awaited sender to stay on its scheduler (scheduler affinity, P3552R1 4.5).

At ``connect`` the sender lowers itself as P3941R1's wording says::

    write_env(schedule_from(sch, write_env(child, ev)),
              JOIN-ENV(prop(get_stop_token, never_stop_token()), ev))

with ``ev = get_env(rcvr)`` and ``sch = get_scheduler(ev)``: the child sees the receiver's
environment (its real stop token); the hop back, connected at ``connect``, sees a
``never_stop_token``, so a stop request can never leave the result on the wrong agent
([exec.affine.on]). Two things skip the hop: a child whose tag
defines ``affine_on(child, env)`` (its result is connected instead), and a child known to
complete where it started (``just``, ``just_error``, ``just_stopped``, ``read_env``,
``write_env``/``then``/``upon_*`` of those) or known to complete on ``sch`` already.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, TypeVar, overload

from .._core._adaptor_util import UnarySender
from .._core._completion_signatures import completion_signatures, get_completion_signatures
from .._core._connect import connect_unchecked as connect
from .._core._env import TryEnv, fwd_env, get_env, join_env, sched_attrs
from .._core._infallible import UNSTOPPABLE_ENV, check_infallible
from .._core._protocol import Algorithm, Closure, Sender, is_scheduler, is_sender
from .._core._queries import _MISSING, get_completion_scheduler, get_scheduler, query_or
from .._core._tags import set_error_t, set_stopped_t, set_value_t
from ._continues_on import schedule_from
from ._write_env import write_env

if TYPE_CHECKING:
    from .._core._contracts import Env, OperationState, Receiver

__all__ = ["affine_on"]

T = TypeVar("T")
_TAGS = (set_value_t, set_error_t, set_stopped_t)
_CS_QUERIES = tuple(get_completion_scheduler[t] for t in _TAGS)


def completes_inline(sndr: object) -> bool:
    """Whether ``sndr`` is known to complete inside ``start``, on the starting agent (it
    provides ``_contracts.CompletesInline`` with the value ``True``)."""
    return getattr(sndr, "_sx_completes_inline", False) is True


def completes_on(child: object, sch: object, ev: object) -> bool:
    """Whether every completion ``child`` can make is known to happen on ``sch``.

    For each channel, either the child's attributes name ``sch`` as its completion scheduler,
    or the child's completion signatures (in ``ev``) show it never completes on that channel.
    Unknown means no.
    """
    attrs = get_env(child)
    sigs: completion_signatures | None = None
    looked = False  # sigs computed (when first needed)
    for tag, q in zip(_TAGS, _CS_QUERIES):
        cs = query_or(attrs, q, _MISSING)
        if cs is _MISSING:
            if not looked:
                looked = True
                try:
                    sigs = get_completion_signatures(child, ev)
                except Exception:
                    sigs = None
            if sigs is None or any(type(s) is tag for s in sigs):
                return False
            continue
        try:
            if not (cs is sch or cs == sch):
                return False
        except Exception:
            return False
    return True


class _AffineAttrs(TryEnv):
    """Attributes: the child's forwarding attributes, minus its completion schedulers.

    P3941R1 words them as ``get_env(child)``; the child's completion schedulers are dropped
    because ``affine_on`` completes on the receiver's scheduler, which is unknown until
    ``connect`` (advertising the child's would send ``let_value`` and ``affine_on`` itself the
    wrong way).
    """

    __slots__ = ("_child",)
    _unsupported = "affine_on's attributes do not support {q!r}"

    def __init__(self, child: object) -> None:
        self._child = child

    def _sx_try(self, q: object, default: object) -> object:
        if type(q) is type(_CS_QUERIES[0]):
            return default
        return query_or(fwd_env(get_env(self._child)), q, default)


class _AffineOnSender(UnarySender):
    __slots__ = ("_sch",)

    def __init__(self, child: object, sch: object) -> None:
        self._child = child
        self._sch = sch  # None: P3941R1's one-argument form

    def connect(self, rcvr: Receiver) -> OperationState:
        ev = get_env(rcvr)
        sch = self._sch
        if sch is None:
            sch = query_or(ev, get_scheduler, _MISSING)
            if sch is _MISSING:
                raise TypeError(
                    "affine_on(sndr) was connected to a receiver whose environment has no "
                    "get_scheduler, so it does not know where to complete (P3941R1, "
                    "[exec.affine.on]); provide one, e.g. sx.write_env(sndr, "
                    "sx.prop(sx.get_scheduler, sch)), or use affine_on(sndr, sch)"
                )
        check_infallible(sch, "affine_on")
        child = self._child
        target: object
        if type(child) is _AffineOnSender and child._sch is None:
            target = child  # it already completes on this receiver's scheduler
        elif callable(custom := getattr(getattr(child, "tag", None), "affine_on", None)):
            target = custom(child, ev)
        elif (
            completes_inline(child)
            # a sender that completes on the scheduler of the receiver it is connected to
            # (a task that does not run on inline_scheduler, whose scheduler is the receiver's)
            or getattr(child, "_sx_affine", False) is True
            or completes_on(child, sch, ev)
        ):
            target = child
        else:
            target = write_env(
                schedule_from(sch, write_env(child, ev)), join_env(UNSTOPPABLE_ENV, ev)
            )
        op: OperationState = connect(target, rcvr)
        return op

    def get_env(self) -> Env:
        if self._sch is not None:
            # The draft's two-argument form: JOIN-ENV(SCHED-ATTRS(sch), FWD-ENV(child attrs)).
            return join_env(sched_attrs(self._sch), fwd_env(get_env(self._child)))  # type: ignore[arg-type]
        return _AffineAttrs(self._child)

    def get_completion_signatures(self, env: object = None) -> completion_signatures | None:
        """The child's: the hop back is infallible and unstoppable, so it adds nothing."""
        return get_completion_signatures(self._child, env)

    @property
    def _sx_completes_inline(self) -> bool:
        return completes_inline(self._child)

    @property
    def data(self) -> object:
        return self._sch

    def __repr__(self) -> str:
        if self._sch is None:
            return f"affine_on({self._child!r})"
        return f"affine_on({self._child!r}, {self._sch!r})"


class affine_on_t(Algorithm, Closure[Any]):
    """``affine_on(sndr)`` / ``sndr | affine_on``: complete on the receiver's scheduler.

    [exec.affine.on] as changed by P3941R1; the task guide "Scheduler affinity".

    * The scheduler is ``get_scheduler(get_env(rcvr))``, read at ``connect``; a receiver
      without one makes ``connect`` raise ``TypeError`` ([exec.affine.on]). ``start`` must be called
      on that scheduler's agent (P3718R0).
    * The scheduler must be infallible: its ``schedule()`` sender declares exactly
      ``set_value_t()`` for an unstoppable stop token; otherwise ``connect`` raises
      ``TypeError`` ([exec.affine.on], the adaptors guide).
    * ``sndr`` starts on the current agent and sees the receiver's environment, including its
      stop token. Every completion is delivered on the scheduler; the hop back is connected at
      ``connect`` with a ``never_stop_token``, so even a stopped or failed child comes back
      ([exec.affine.on]).
    * No hop when the child's tag defines ``affine_on(child, env)`` (its result is used,
      [exec.affine.on]), when the child is known to complete inline where it started (``just*``,
      ``read_env``, ``write_env``/``then``/``upon_*`` of those; [exec.affine.on]), or when its
      attributes show every completion already happens on the scheduler.
    * ``affine_on(sndr, sch)``, the draft's two-argument form, uses ``sch`` instead of the
      receiver's scheduler ([exec.affine.on], the task guide "Scheduler affinity";
      ``sndr | affine_on(sch)`` too); its attributes are
      ``JOIN-ENV(SCHED-ATTRS(sch), FWD-ENV(get_env(sndr)))``. ``sch`` must be infallible as well.
    * Attributes of the one-argument form: the child's forwarding attributes without its
      completion schedulers ([exec.affine.on]; see :class:`_AffineAttrs`).

    Completion signatures: the child's: the hop back is infallible and unstoppable, so it adds
    nothing ([exec.affine.on]).

    Errors: the child's errors come back on the scheduler; ``connect`` raises ``TypeError`` for
    a receiver without ``get_scheduler`` or a fallible scheduler.

    Cancellation: the child sees the receiver's stop token; the hop back runs with a
    ``never_stop_token``, so a stopped child also comes back.

    Example:

    >>> import structexec as sx
    >>> sx.sync_wait(sx.just(1) | sx.affine_on)
    (1,)
    """

    __slots__ = ()

    def __init__(self) -> None:
        Closure.__init__(self, self._apply)

    def _apply(self, sndr: object) -> Sender[object]:
        return _AffineOnSender(sndr, None)

    @overload
    def __call__(self, sndr: Sender[T], /) -> Sender[T]: ...
    @overload
    def __call__(self, sndr: Sender[T], sch: object, /) -> Sender[T]: ...
    @overload
    def __call__(self, /) -> affine_on_t: ...
    def __call__(self, *args: object) -> object:
        if not args:
            return self
        if len(args) == 1:
            x = args[0]
            if is_sender(x):
                return _AffineOnSender(x, None)
            if is_scheduler(x):
                return Closure(lambda s: self(s, x))
            raise TypeError(
                f"affine_on() takes a sender (or a scheduler, for the closure of the two-argument "
                f"form), got {type(x).__name__}"
            )
        if len(args) != 2:
            raise TypeError(f"affine_on() takes (sndr) or (sndr, sch), got {len(args)} arguments")
        sndr, sch = args
        if not is_sender(sndr):
            raise TypeError(f"affine_on(): sndr must be a sender, got {type(sndr).__name__}")
        if not is_scheduler(sch):
            raise TypeError(
                f"affine_on(): sch must be a scheduler (an object with a schedule() method), "
                f"got {type(sch).__name__}"
            )
        return _AffineOnSender(sndr, sch)

    def __ror__(self, sndr: Awaitable[T]) -> Sender[T]:
        if not is_sender(sndr):
            raise TypeError(
                f"affine_on was applied to {type(sndr).__name__}, which is not a sender"
            )
        return _AffineOnSender(sndr, None)


affine_on = affine_on_t()
_AffineOnSender.tag = affine_on
