"""The sender that ``schedule(sch)`` returns, shared by the library's schedulers ([exec.schedule]).

``run_loop`` ([exec.run.loop]), the trio scheduler and the testing schedulers give the same
schedule sender; they differ only in how a started operation is queued on their execution
agent. Internal API:

* :class:`ScheduleOp` -- ``ScheduleOp(enqueue, rcvr)``: ``start()`` calls ``enqueue(op)`` once
  (a second ``start`` raises, [exec.opstate.start]); the scheduler's agent later calls
  ``op._execute()``, which completes ``set_stopped()`` if the receiver's stop token has a stop
  request by then, else ``set_value()`` ([exec.run.loop.types]).
* :class:`ScheduleAttrs` -- the sender's attributes: ``get_completion_scheduler`` for
  ``set_value_t`` and ``set_stopped_t`` is the scheduler ([exec.get.compl.sched]).
* :class:`ScheduleSender` -- ``ScheduleSender(sch)``: attributes from the class attribute
  ``_attrs_type`` (called with ``sch``) and infallible completion signatures; a subclass defines
  ``connect``, which names how the operation is queued.

Nothing here imports trio.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from ._completion_signatures import completion_signatures
from ._env import TryEnv, get_env
from ._protocol import Sender, twice_started
from ._queries import get_completion_scheduler, get_stop_token
from ._stop_token import is_unstoppable
from ._tags import set_stopped_t, set_value_t

if TYPE_CHECKING:
    from ._contracts import Env, Rcvr

__all__: list[str] = []

_VALUE_Q = get_completion_scheduler[set_value_t]
_STOPPED_Q = get_completion_scheduler[set_stopped_t]


class ScheduleOp:
    """The operation of a schedule sender: ``start`` queues it, the agent completes it.

    ``enqueue(op)`` is the scheduler's queueing function (it may raise, e.g. on a finished
    loop; the operation then counts as started). ``_execute()`` runs on the scheduler's agent:
    ``set_stopped()`` if the receiver's stop token has a stop request, else ``set_value()``
    ([exec.run.loop.types]).
    """

    __slots__ = ("_enqueue", "_rcvr", "_started")

    def __init__(self, enqueue: Callable[[Any], object], rcvr: Rcvr) -> None:
        self._enqueue = enqueue
        self._rcvr = rcvr
        self._started = False

    def start(self) -> None:
        if self._started:
            raise twice_started(self)
        self._started = True
        self._enqueue(self)

    def _execute(self) -> None:
        rcvr = self._rcvr
        if get_stop_token(get_env(rcvr)).stop_requested():
            rcvr.set_stopped()
        else:
            rcvr.set_value()


class ScheduleAttrs(TryEnv):
    """A schedule sender's attributes: the scheduler is the completion scheduler of
    ``set_value_t`` and ``set_stopped_t`` ([exec.get.compl.sched]); no other query."""

    __slots__ = ("_sch",)
    _unsupported = "the schedule sender of {self._sch!r} does not support {q!r}"

    def __init__(self, sch: Any) -> None:
        self._sch = sch  # Any: subclasses read their own scheduler's fields

    def _sx_try(self, q: object, default: object) -> object:
        if q is _VALUE_Q or q is _STOPPED_Q:
            return self._sch
        return default


class ScheduleSender(Sender[None]):
    """``schedule(sch)`` ([exec.schedule]): completes on ``sch``'s agent, never inline.

    Infallible: it declares ``set_value_t()``, plus ``set_stopped_t()`` unless the
    environment's stop token is unstoppable (a stop request can only arrive through a
    stoppable token). Subclasses define ``connect`` and may replace ``_attrs_type``.
    """

    __slots__ = ("_sch",)
    #: The attributes class, called with the scheduler.
    _attrs_type: ClassVar[type[Any]] = ScheduleAttrs

    def __init__(self, sch: Any) -> None:
        self._sch = sch  # Any: the subclasses read their own scheduler's fields

    def get_env(self) -> Env:
        """The attributes: ``get_completion_scheduler`` of value and stopped is the scheduler
        ([exec.get.compl.sched])."""
        attrs: Env = self._attrs_type(self._sch)
        return attrs

    def get_completion_signatures(self, env: object = None) -> completion_signatures:
        if env is not None and is_unstoppable(get_stop_token(env)):
            return completion_signatures(set_value_t())
        return completion_signatures(set_value_t(), set_stopped_t())
