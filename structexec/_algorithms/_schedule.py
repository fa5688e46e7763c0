"""``schedule(sch)`` ([exec.schedule]): the sender factory that asks a scheduler for its
schedule sender."""

from __future__ import annotations

from .._core._protocol import Algorithm, Sender

__all__ = ["schedule"]


class schedule_t(Algorithm):
    """``schedule(sch)``: ``sch.schedule()``, a sender that completes on ``sch`` ([exec.schedule]).

    Its value completion has no datums; ``get_completion_scheduler[set_value_t]`` of its
    attributes is ``sch`` ([exec.sched]).

    Completion signatures: those of ``sch.schedule()``: ``set_value_t()`` and whatever errors
    and stop the scheduler declares ([exec.schedule]).

    Errors: the schedule sender's own.

    Cancellation: the schedule sender's own (most complete ``set_stopped()`` when stop was
    requested before they run).

    Example:

    >>> import structexec as sx
    >>> sx.sync_wait(sx.schedule(sx.inline_scheduler()))
    ()
    """

    __slots__ = ()

    def __call__(self, sch: object) -> Sender[None]:
        m = getattr(sch, "schedule", None)
        if m is None or not callable(m):
            raise TypeError(
                f"schedule() needs a scheduler (an object with a schedule() method), "
                f"got {type(sch).__name__}"
            )
        s: Sender[None] = m()
        return s


schedule = schedule_t()
