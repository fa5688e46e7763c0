"""``scope.join()``: the join sender and its operation ([exec.scope.join]), and the join the
``async with`` exit waits for in trio.

Starting a join asks the scope's association state (``_state.AssociationState.start_join``)
either to complete at once (the count is already zero) or to register the join; the last
``disassociate`` then calls the join's ``_sx_join_complete()`` (the internals guide §2). A join
reports the errors of spawned work that nobody handled (the scopes guide "What happens when
things fail").
"""

from __future__ import annotations

import sys
import threading
from typing import TYPE_CHECKING, Any

import trio

from .._algorithms._schedule import schedule
from .._core._adaptor_util import close_op
from .._core._completion_signatures import completion_signatures, get_completion_signatures
from .._core._connect import connect
from .._core._env import get_env
from .._core._protocol import Sender, twice_started
from .._core._queries import _MISSING, get_scheduler, query_or
from .._core._snapshot import Waiting
from .._core._tags import set_error_t, set_value_t
from .._core._trampoline import trampoline_start
from ._spawn import as_exception

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup  # type: ignore[import-not-found, unused-ignore]

if TYPE_CHECKING:
    from ._nursery import NurseryFace
    from ._scope_token import CompletionReceiver

__all__: list[str] = []

ERRORS_MESSAGE = "errors in work spawned into the scope"


def error_group(errors: list[object]) -> BaseExceptionGroup[Any]:
    """The group a join reports for the errors of spawned work (the scopes guide)."""
    return BaseExceptionGroup(ERRORS_MESSAGE, [as_exception(e) for e in errors])


class _JoinOp:
    """``impls-for<scope-join-t>::state``; also the receiver of the final schedule op."""

    __slots__ = ("_rcvr", "_sched_op", "_scope", "_started")

    def __init__(self, scope: NurseryFace, rcvr: CompletionReceiver, sched: object) -> None:
        self._scope = scope
        self._rcvr = rcvr
        self._started = False
        self._sched_op = connect(schedule(sched), self)

    def start(self) -> None:
        if self._started:
            raise twice_started(self)
        self._started = True
        if self._scope._assoc.start_join(self):
            self._drop_sched_op()  # not needed
            self._deliver()  # complete-inline: set_value directly ([exec.scope.join])

    def close(self) -> None:
        """A connected join that is never started: release its schedule operation now
        (the senders guide "Writing your own sender"). No effect once started."""
        if not self._started:
            self._started = True
            self._drop_sched_op()

    def _drop_sched_op(self) -> None:
        # Also dropped at completion (set_*): no join op <-> schedule op cycle keeps the scope
        # alive until the garbage collector runs.
        op, self._sched_op = self._sched_op, None
        if op is not None:
            close_op(op)

    def _sx_join_complete(self) -> None:
        # complete(): start the schedule op, so set_value arrives on the receiver's
        # scheduler ([exec.scope.join]). Through the trampoline: this runs inside a disassociate().
        trampoline_start(self._sched_op, self)

    def _sx_start_failed(self, exc: Exception) -> None:
        # The schedule op's start raised (``_trampoline``): it never started, so that is the
        # join's error instead of an exception out of the disassociate() that completed the
        # scope. Its completions clear _sched_op: if it did complete, the exception propagates.
        if self._sched_op is None:
            raise exc
        self._sched_op = None
        self._rcvr.set_error(exc)

    # receiver of schedule(get_scheduler(env)): sees the full receiver env ([exec.scope.join])
    def get_env(self) -> Any:
        return get_env(self._rcvr)

    def set_value(self, *vals: object) -> None:
        self._sched_op = None
        self._deliver()

    def set_error(self, err: object) -> None:
        self._sched_op = None
        self._rcvr.set_error(err)

    def set_stopped(self) -> None:
        self._sched_op = None
        self._rcvr.set_stopped()

    def _deliver(self) -> None:
        errors = self._scope._assoc.errors_snapshot()
        if errors:
            self._rcvr.set_error(error_group(errors))
        else:
            self._rcvr.set_value()

    def _sx_describe(self) -> Waiting | None:
        """Once started: waiting for the scope's join, for ``operation_tree()``
        (``_contracts.Describable``)."""
        if not getattr(self, "_started", False):
            return None
        return Waiting(f"waiting for the join of {getattr(self, '_scope', None)!r}", None)

    def _sx_children(self) -> tuple[object, ...]:
        """The schedule operation that completes the join (``_contracts.HasChildren``)."""
        return (getattr(self, "_sched_op", None),)


class _JoinSender(Sender[None]):
    """The sender of ``scope.join()``: ``make-sender(scope-join-t(), scope)``
    ([exec.scope.join])."""

    __slots__ = ("_scope",)

    def __init__(self, scope: NurseryFace) -> None:
        self._scope = scope

    def connect(self, rcvr: CompletionReceiver) -> _JoinOp:
        sch = query_or(get_env(rcvr), get_scheduler, _MISSING)
        if sch is _MISSING:
            raise TypeError(
                "scope.join() completes through schedule(get_scheduler(env)), but the "
                f"receiver's environment has no get_scheduler ({type(rcvr).__name__}); await "
                "it from trio or a task, use sync_wait, or add one with sx.write_env "
                "([exec.scope.join])"
            )
        return _JoinOp(self._scope, rcvr, sch)

    def get_completion_signatures(self, env: object = None) -> Any:
        """``set_value_t()``, ``set_error_t(BaseExceptionGroup)`` (errors of spawned work) and
        whatever the receiver scheduler's ``schedule()`` sender adds besides its value
        ([exec.scope.join])."""
        mine = completion_signatures(set_value_t(), set_error_t(BaseExceptionGroup))
        if env is None:
            return None
        sch = query_or(env, get_scheduler, _MISSING)
        if sch is _MISSING:
            raise TypeError(
                "scope.join() needs get_scheduler in the environment ([exec.scope.join])"
            )
        sigs = get_completion_signatures(schedule(sch), env)
        if sigs is None:
            return None
        return mine | completion_signatures(*(s for s in sigs if type(s) is not set_value_t))

    def __repr__(self) -> str:
        return f"<join sender of {self._scope!r}>"


class _TrioJoinWaiter:
    """A join registered by ``__aexit__``: sets a trio Event, from whatever thread."""

    __slots__ = ("_thread", "_token", "event")

    def __init__(self) -> None:
        self.event = trio.Event()
        self._token = trio.lowlevel.current_trio_token()
        self._thread = threading.get_ident()

    def _sx_join_complete(self) -> None:
        if threading.get_ident() == self._thread:
            self.event.set()
        else:
            try:
                self._token.run_sync_soon(self.event.set)
            except (trio.RunFinishedError, OSError):  # the run is gone: nobody waits
                pass
