"""The task driver: the one coroutine loop, stepping a stack of task bodies ([task.promise]).

[exec.task], [task.promise], the task guide 'How "stopped" unwinds a task',
the task guide "What a task is". A :class:`Driver` runs the body of a started task (its *root
frame*, a :class:`TaskFrame`: ``_TaskOp`` of ``_task.py``) and of every task that body awaits on the
same scheduler (*child frames*, pushed on ``frames``): a nested await is a new frame on the same
loop, not a new operation, trio task or stack frame.

:class:`Driver` is a :class:`CoroutineLoop` (``_core/_coroutine_driver.py``, the internals guide
"The coroutine driver"): the stepping, the await handshake, the completion translation and the
swallowed-stop rule are that loop's; this module fills in its hooks (frames, affinity, ``TRIO``
mode, ``with_error``, ``error_types``). While it steps a body the driver is
``_hooks.driver_state.driver``, so ``await sndr`` (``Sender.__await__``) calls
:meth:`Driver.await_sender`, which yields the sender to the loop. The loop connects it with the
driver as the receiver and starts it:

* completed inside ``start``: the body is resumed in the same loop iteration (100,000 awaits of
  ``just(i)`` use constant stack);
* otherwise the loop returns, and the completion resumes it: off trio on ``SCHED``, through an
  unstoppable ``schedule(SCHED)`` hop unless the sender is known to complete there already
  (scheduler affinity, [exec.task], the task guide "Scheduler affinity"); in a trio task by
  rescheduling that task.

Values are sent into the body (the trio guide "Awaiting a sender"), errors thrown into it, and a
stopped completion throws ``sx.Stopped`` to unwind it (the task guide). ``with_error``,
``change_coroutine_scheduler`` and awaited tasks are recognised by type. Two modes: ``LOOP`` (a
plain loop on the scheduler's agent, ``run_loop_from``) and ``TRIO`` (a generator awaited by the
hosting trio task, ``__await__``), where foreign yields (trio primitives) pass through to trio.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any, Protocol

import trio
import trio.lowlevel as tl

from .._algorithms._affine_on import completes_on
from .._algorithms._just import _JustSender, just, just_error, just_stopped
from .._algorithms._read_env import read_env
from .._core._completion_signatures import get_completion_signatures
from .._core._connect import connect_unchecked as connect
from .._core._coroutine_driver import DONE, RAISE, SUSPEND, CoroutineLoop, _Raise
from .._core._coroutine_driver import PENDING as PENDING
from .._core._coroutine_driver import SEND as SEND
from .._core._coroutine_driver import STOP as STOP
from .._core._coroutine_driver import THROW as THROW
from .._core._coroutine_driver import UNWIND_NONE as UNWIND_NONE
from .._core._env import sched_env
from .._core._errors import terminate
from .._core._infallible import UNSTOPPABLE_ENV
from .._core._queries import get_scheduler
from .._core._tags import set_value_t
from .._core._trampoline import trampoline_start
from .._schedulers._inline_scheduler import inline_scheduler
from .._trio._trio_bridge import RunState, call_in_run, run_finished_error
from ._task_environment import (
    Config,
    change_coroutine_scheduler,
    resolve_scheduler,
    trio_run_of,
    with_error,
)

if TYPE_CHECKING:
    from .._core._contracts import Env, Sched
    from .._core._coroutine_driver import Steppable
    from .._core._stop_token import StopSource

__all__: list[str] = []

_reschedule = tl.reschedule
_wait_task_rescheduled = tl.wait_task_rescheduled
_FAILED = tl.Abort.FAILED

# Driver modes.
LOOP, TRIO = 1, 2
# TaskFrame.unwinding: UNWIND_NONE, UNWIND_STOP (the loop's), or unwinding for with_error.
_UNWIND_ERROR = 2


class TaskFrame(Protocol):
    """What the driver uses of a frame: a task's operation state and promise ([task.state],
    [task.promise]).

    ``_task.py`` implements it (``_TaskOp``) and imports this module; the driver knows frames only
    through this protocol, so it never imports ``_task.py``. A frame is also the environment of
    the senders its body awaits (the promise's ``get_env``, [exec.task]): the driver passes it
    wherever an environment is expected.
    """

    #: The body: a coroutine, stepped with ``send``/``throw``; ``None`` once it has finished.
    coro: Steppable | None
    #: What the task's Environment configured ([exec.task]): ``name``, ``exc_types`` (the
    #: ``error_types``), ``inline`` (``scheduler_type`` is ``inline_scheduler``),
    #: ``check_with_error``.
    cfg: Config
    #: ``SCHED`` ([exec.task]); ``change_coroutine_scheduler`` replaces it.
    sched: Sched
    #: The task's own stop source, or ``None`` when it uses its receiver's token ([exec.task]).
    source: StopSource | None
    #: The driver running this frame; the root frame's is cleared when it completes.
    driver: Driver | None
    #: ``UNWIND_NONE``, or why the body is being unwound: a stop, or ``with_error``.
    unwinding: int
    #: The error of ``await sx.with_error(e)`` while the body unwinds for it ([task.promise]).
    exit_error: object

    def query(self, q: object, *args: object) -> object:
        """The promise's environment ([exec.task]): ``get_scheduler``, ``get_stop_token``, ..."""

    def hand_over(self, exc: BaseException) -> bool:
        """Give ``exc`` (not an error datum) to the consumer waiting for the task; ``False`` if
        none took it."""

    def child_frame(self, sndr: Any, drv: Driver) -> TaskFrame | None:
        """The frame that runs the awaited task ``sndr`` on ``drv``'s loop, or ``None`` when it
        runs on another scheduler ([exec.task])."""

    def _unlink(self) -> None:
        """Deregister the link from the receiver's stop token to the task's own stop source."""

    def _complete_root(self, kind: int, data: object) -> None:
        """Complete the task's receiver: ``SEND`` a value, ``THROW`` an error, else stopped."""


_JUST = _JustSender

#: Sender types known to have at most one value signature (no per-await check needed).
_ONE_VALUE_SIG: set[type] = {
    type(just(0)),
    type(just_error(0)),
    type(just_stopped()),
    type(read_env(get_scheduler)),
}


def _check_awaitable(sndr: object, env: object) -> None:
    """A sender with several value signatures is not awaitable ([exec.as.awaitable],
    [exec.task])."""
    try:
        sigs = get_completion_signatures(sndr, env)
    except Exception:
        return
    if sigs is not None and sigs.count_of(set_value_t) > 1:
        raise TypeError(
            f"{sndr!r} has {sigs.count_of(set_value_t)} value completion signatures and cannot "
            "be awaited: await sx.into_variant(sndr) instead ([exec.as.awaitable], P3552R1 4.4)"
        )


class _ErrorExit(BaseException):
    """Thrown into a task body by ``await sx.with_error(e)`` to unwind it (private)."""


class _Hop:
    """Receiver of the hop back onto ``SCHED`` after an await (unstoppable, [exec.task],
    the task guide "Scheduler affinity")."""

    __slots__ = ("_drv",)

    def __init__(self, drv: Driver) -> None:
        self._drv = drv

    def get_env(self) -> Env:
        return UNSTOPPABLE_ENV

    def set_value(self) -> None:
        self._drv._loop()

    def set_error(self, err: object) -> None:
        terminate(
            "an infallible scheduler's schedule() completed with an error on a task's hop back "
            "([exec.affine.on], P3941R1)",
            err if isinstance(err, BaseException) else None,
        )
        self._drv._loop()

    def set_stopped(self) -> None:
        terminate("an infallible scheduler's schedule() completed stopped on a task's hop back")
        self._drv._loop()


class Driver(CoroutineLoop[TaskFrame]):
    """Steps a stack of task frames with the one loop, :class:`CoroutineLoop` (see the module
    docstring).

    It is the receiver of every sender awaited by its frames (one at a time); its
    environment is the top frame's (the promise's ``get_env``, [exec.task]).
    """

    __slots__ = ("cancelled", "hop", "mode", "run", "task")
    #: How ``with_error`` and ``change_coroutine_scheduler`` recognise a task body's driver.
    is_task_driver = True
    just_type = _JUST
    plain_types = _ONE_VALUE_SIG
    check = staticmethod(_check_awaitable)

    def __init__(self, root: TaskFrame, run: RunState | None) -> None:
        super().__init__(root)
        self.top: TaskFrame = root
        self.run = run
        self.mode = LOOP
        self.hop = False
        self.task: tl.Task | None = None
        self.cancelled = False

    def get_env(self) -> TaskFrame:
        return self.top

    # -- resuming after an await that did not complete inside start ---------------------------

    def _suspending(self, sndr: object, fr: TaskFrame) -> None:
        # Decide the hop back onto SCHED (scheduler affinity, [exec.task]).
        if self.mode == TRIO or fr.cfg.inline:
            self.hop = False
        else:
            self.hop = not (
                getattr(sndr, "_sx_affine", False) is True or completes_on(sndr, fr.sched, fr)
            )

    def _resume(self) -> None:
        """The awaited operation completed after the loop suspended: continue on SCHED."""
        if self.mode == TRIO:
            run = self.run
            assert run is not None
            if not call_in_run(run, self._wake):
                raise run_finished_error("resume a task after an await")
            return
        if self.hop:
            # Back onto SCHED's agent; the hop cannot be stopped ([exec.task]).
            op = connect(self.top.sched.schedule(), _Hop(self))
            trampoline_start(op)
            return
        self._loop()

    def _wake(self) -> None:
        _reschedule(self.task)  # type: ignore[arg-type]  # set by _trio_loop first

    # -- TRIO mode ------------------------------------------------------------------------------

    def _trio_loop(self) -> Generator[object, object, None]:
        self.task = tl.current_task()
        kind, data = SEND, None
        while True:
            r = self._step(kind, data)
            if r is DONE:
                return
            if r is SUSPEND:
                yield from _wait_task_rescheduled(self._abort).__await__()
                kind = self.kind
                data = self.data
                self.data = self.op = None
                continue
            # A trio primitive yielded to trio: pass it through, and its answer back.
            try:
                data = yield r
                kind = SEND
            except BaseException as e:
                kind, data = THROW, e

    def __await__(self) -> Generator[object, object, None]:
        # The trio hosting operation awaits the driver: the body runs in that trio task.
        return self._trio_loop()

    def _abort(self, raise_cancel: object) -> tl.Abort:
        self.cancelled = True
        # The hosting trio task is being cancelled while an awaited sender runs: that is a stop
        # request (the awaited operation sees the task's token); keep waiting until it completes (an
        # operation state outlives its operation,
        # docs/trio.md "trio cancellation becomes a stop request").
        src = self.frames[0].source
        if src is not None:
            src.request_stop()
        return _FAILED

    def abandon(self) -> None:
        for fr in self.frames:
            c = fr.coro
            fr.coro = None
            if c is not None:
                c.close()

    # -- the task-specific hooks of the loop ------------------------------------------------------

    def _yielded(self, fr: TaskFrame, y: Any) -> tuple[int, object]:  # dispatched on type(y)
        ty = type(y)
        if ty is with_error:
            why = fr.cfg.check_with_error(y.error)
            if why is not None:
                return THROW, TypeError(why)
            # Never resumed: unwind the body (finally blocks run, and may await),
            # then complete with the error ([task.promise]).
            fr.unwinding = _UNWIND_ERROR
            fr.exit_error = y.error
            return THROW, _ErrorExit()
        if ty is change_coroutine_scheduler:
            kind, data = self._change_scheduler(fr, y.scheduler)
            if kind == PENDING:
                return PENDING, SUSPEND
            return kind, data
        if self.mode == TRIO:
            return PENDING, y  # a trio primitive: _trio_loop passes it through to trio
        return THROW, RuntimeError(_foreign_message(fr, y))

    def _returned(self, fr: TaskFrame, v: object) -> tuple[int, object]:
        if fr.unwinding == _UNWIND_ERROR:
            return THROW, fr.exit_error
        if type(v) is with_error:
            why = fr.cfg.check_with_error(v.error)
            if why is not None:
                return THROW, TypeError(why)
            return THROW, v.error
        return SEND, v

    def _error(self, fr: TaskFrame, e: Exception) -> BaseException:
        if self.mode == LOOP and type(e) is RuntimeError and e.args == _TRIO_NO_CTX:
            e = _trio_off_loop_error(fr, e)
        if not isinstance(e, fr.cfg.exc_types):
            terminate(
                f"the task {fr.cfg.name} raised {type(e).__name__}, which is not among "
                "its error_types ([task.promise] unhandled_exception); add it to the "
                "Environment's error_types or catch it in the body",
                e,
            )
        return e

    def _raised(self, fr: TaskFrame, e: BaseException) -> tuple[int, object] | _Raise | None:
        if isinstance(e, _ErrorExit):
            return THROW, fr.exit_error
        # trio.Cancelled (trio mode), KeyboardInterrupt, ...: never an error datum.
        # The root completes stopped and the exception goes on to trio / the caller,
        # or to the consumer that waits for the task if it takes it (raised_sink: an
        # await in a trio task, sync_wait), which raises it where it waits; in a child
        # frame it propagates into the parent like a plain `await`.
        if len(self.frames) == 1:
            if not isinstance(e, trio.Cancelled) and fr.hand_over(e):
                self._finish_root(fr, STOP, None)  # the consumer ignores it
                return None
            self._finish_root(fr, STOP, None)
            return RAISE
        return THROW, e

    def _complete(self, fr: TaskFrame, kind: int, data: object) -> None:
        self._finish_root(fr, kind, data)

    def _name(self, fr: TaskFrame) -> str:
        return f"the task {fr.cfg.name}"

    # -- frames -----------------------------------------------------------------------------

    def _finish_root(self, fr: TaskFrame, kind: int, data: object) -> None:
        fr.coro = None
        fr.driver = None  # no reference cycle left behind
        self.sndr = self.data = None
        fr._complete_root(kind, data)

    # -- change_coroutine_scheduler (deprecated) ----------------------------------------------

    def _change_scheduler(self, fr: TaskFrame, sch: Sched) -> tuple[int, object]:
        try:
            cfg = fr.cfg
            new = inline_scheduler() if cfg.inline else resolve_scheduler(cfg, sched_env(sch))
            new_run = trio_run_of(new)
            if (new_run is None) != (self.mode == LOOP) or (
                new_run is not None and new_run is not self.run
            ):
                raise TypeError(
                    "change_coroutine_scheduler() cannot move a task between the trio "
                    "scheduler and a scheduler of another kind; await sx.starts_on(sch, "
                    "nested_task()) instead (P3941R1 3.4)"
                )
        except Exception as e:
            return THROW, e
        old = fr.sched
        fr.sched = new
        if self.mode == TRIO or cfg.inline:
            return SEND, old
        # Continue on the new scheduler: an unstoppable hop.
        self.kind = PENDING
        self.data = old
        self.hop = False
        op = connect(new.schedule(), _ChangeHop(self, old))
        trampoline_start(op)
        return PENDING, None


class _ChangeHop(_Hop):
    __slots__ = ("_old",)

    def __init__(self, drv: Driver, old: Sched) -> None:
        super().__init__(drv)
        self._old = old

    def set_value(self) -> None:
        self._drv.run_loop_from(SEND, self._old)


#: What trio raises when one of its primitives is awaited outside a trio task.
_TRIO_NO_CTX = ("must be called from async context",)


def _off_trio_message(fr: TaskFrame, detail: str) -> str:
    return (
        f"the task {fr.cfg.name} awaited a trio primitive (trio.sleep, a channel, a nursery, a "
        f"cancel scope, ...) or another non-structexec awaitable, but it runs on {fr.sched!r}, "
        "not on the trio scheduler, so it is not inside a trio task. Await the task from trio "
        "code, spawn it into a counting_scope, or run the trio part as a nested task on the "
        f"trio scheduler: await sx.starts_on(sx.trio_scheduler(), nested_task()) ({detail})"
    )


def _trio_off_loop_error(fr: TaskFrame, e: RuntimeError) -> RuntimeError:
    """Replace trio's terse error by one that says why and what to do."""
    err = RuntimeError(_off_trio_message(fr, f"trio said: {e.args[0]!r}"))
    err.__cause__ = e
    err.__traceback__ = e.__traceback__
    return err


def _foreign_message(fr: TaskFrame, y: object) -> str:
    return _off_trio_message(fr, f"it yielded {y!r}")


def bind_task_sender(cls: type) -> None:
    """Called once by ``_task.py`` with the task sender class. ``_task.py`` defines it and
    imports this module, so it hands the class over; the loop recognises awaited tasks by this
    exact type (``CoroutineLoop.frame_type``, a fast identity check on every await)."""
    Driver.frame_type = cls
    _ONE_VALUE_SIG.add(cls)
