"""The one coroutine driver: a loop that steps a coroutine awaiting senders, off the trio scheduler.

[exec.as.awaitable], [exec.with.awaitable.senders], [exec.connect], [exec.task], [task.promise],
the task guide 'How "stopped" unwinds a task', the task guide "What a task is" (a ``task`` body is
driven by the library as a loop, never by recursion), the internals guide "The coroutine driver".

:class:`CoroutineLoop` owns the stepping: every coroutine structexec drives itself (a coroutine
sender under ``sync_wait``, a ``task`` body) is stepped by its :meth:`CoroutineLoop._step`.
Two classes specialise it:

* :class:`CoroutineDriver` (this module) is the one-frame case with no scheduler affinity: a
  coroutine (or any generator-like object) driven into a receiver, for coroutine senders off
  trio (``_coroutine_sender.py``)::

      drv = CoroutineDriver(coro, rcvr, env=None)
      drv.start()

* the task ``Driver`` (``_coro/_task_driver.py``, [task.promise]) adds the stack of task frames,
  the hop back to the task's scheduler, ``with_error``/``change_coroutine_scheduler`` and the mode
  where the loop runs inside a trio task.

How the loop works. While it runs ``coro.send``/``coro.throw`` it sets
``_hooks.driver_state.driver`` to itself, so ``await sndr`` inside the coroutine calls
:meth:`CoroutineLoop.await_sender`, a generator that hands the sender to the loop by yielding a
private marker. The loop connects the sender with itself as the receiver (the loop is the
receiver of every awaited operation, one at a time), starts it and:

* if it completed inside ``start`` it resumes the coroutine in the same loop iteration (no
  recursion: 100,000 awaits of ``just(i)`` use constant stack);
* otherwise it returns; the completion, on whichever thread it happens, resumes the loop
  (:meth:`CoroutineLoop._resume`). A one-entry dict, the *gate*, decides who continues when the
  completion races with the end of ``start``: whichever of the two threads pops it second.

A value is sent into the coroutine (the trio guide "Awaiting a sender": ``None``, the datum or a
tuple); an error is thrown into it as it is (a non-exception datum as ``ErrorValue``,
AS-EXCEPT-PTR); stopped throws :class:`sx.Stopped` (a ``BaseException``, so ``except Exception``
cannot catch it), which unwinds the coroutine: ``finally`` blocks and ``async with`` exits run and
may await. When ``Stopped`` escapes, the frame ends stopped. A coroutine that swallows the
``Stopped`` and returns violates the contract: it ends with
``RuntimeError(swallowed_stop_message(...))``. The same rule holds for a coroutine hosted in a trio
task (``_coroutine_sender.py``, ``_await.py``); :class:`HostMark` is how the trio side tells.
``connect`` raising, or ``start`` raising (which it must not, [exec.opstate.start]), throws the
exception into the coroutine, as an ``await`` in a trio task raises it.

Awaiting anything that is not a structexec sender (a trio primitive such as ``trio.sleep``)
yields a foreign object to the loop; :meth:`CoroutineLoop._yielded` decides what happens. The
generic driver throws ``RuntimeError(foreign_await_message(y))`` into the coroutine, which
names what was awaited: an asyncio future (never awaitable here), a trio primitive ("trio
primitives can only be awaited when the coroutine runs on the trio scheduler ...") or another
awaitable.
"""

from __future__ import annotations

import contextvars
import enum
from collections.abc import Generator
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar

from . import _hooks
from ._connect import connect_unchecked as connect
from ._domain import may_transform
from ._env import fwd_env, get_env
from ._errors import ErrorValue, Stopped
from ._protocol import completed_twice, twice_started
from ._queries import _MISSING
from ._values import send_result

if TYPE_CHECKING:
    from collections.abc import Callable, Collection
    from typing import ClassVar, Protocol

    from ._contracts import Env, Rcvr

    _LF = TypeVar("_LF", bound="LoopFrame")

    class Steppable(Protocol):
        """A coroutine (or generator-like object) the loop steps."""

        def send(self, value: object, /) -> object: ...
        def throw(self, exc: Any, /) -> object: ...
        def close(self) -> object: ...

    class LoopFrame(Protocol):
        """What the loop uses of a frame (``_Frame`` here, the task driver's ``TaskFrame``)."""

        #: The coroutine; cleared (``None``) once the frame has ended, never stepped again.
        coro: Steppable | None
        #: ``UNWIND_NONE``, ``UNWIND_STOP`` or a subclass's reason.
        unwinding: int

        def _unlink(self) -> None: ...

        @property
        def child_frame(self: _LF) -> Callable[..., _LF | None]: ...

    class JustLike(Protocol):
        """``just``'s sender as the loop reads it (``CoroutineLoop.just_type``)."""

        tag: ClassVar[object]

        @property
        def _vals(self) -> tuple[object, ...]: ...

__all__: list[str] = []

F = TypeVar("F", bound="LoopFrame")

_driver_state = _hooks.driver_state

# Completion kinds inside the loop (``PENDING``: the awaited operation has not completed).
PENDING, SEND, THROW, STOP = 0, 1, 2, 3
# What CoroutineLoop._step returns when the loop must wait, or the root frame finished.
SUSPEND: Final = object()
DONE: Final = object()


class _Raise(enum.Enum):
    RAISE = "RAISE"


# What a hook returns to make the loop re-raise the exception being handled.
RAISE: Final = _Raise.RAISE
# What CoroutineLoop.await_sender yields to the loop.
_AWAIT: Final = object()
# Frame.unwinding: not unwinding, or unwinding because Stopped was thrown into the body.
UNWIND_NONE, UNWIND_STOP = 0, 1


def _coro_name(coro: object) -> str:
    q = getattr(coro, "__qualname__", None)
    return f"the coroutine {q}" if isinstance(q, str) else "the coroutine"


def _what_was_awaited(y: object) -> tuple[str, bool]:
    """What an awaitable that yielded ``y`` to the loop was, in words; ``True`` for asyncio."""
    if hasattr(y, "_asyncio_future_blocking"):  # asyncio's (and uvloop's) futures and tasks
        return f"an asyncio future ({y!r})", True
    if y is None:
        return "an awaitable that yielded None, as asyncio.sleep(0) does", True
    t = y if isinstance(y, type) else type(y)
    if getattr(t, "__module__", "").partition(".")[0] == "trio":
        return f"a trio primitive (it yielded trio's {t.__name__})", False
    return f"an awaitable that is not a structexec sender (it yielded {y!r})", False


def foreign_await_message(y: object) -> str:
    """The message of the ``RuntimeError`` thrown into a coroutine that structexec drives off
    the trio scheduler when it awaits something other than a sender (it yielded ``y``)."""
    what, asyncio = _what_was_awaited(y)
    if asyncio:
        return (
            f"this coroutine awaited {what}, but it is driven by structexec, whose runtime is "
            "trio: asyncio futures, tasks and primitives cannot be awaited in a coroutine that "
            "structexec runs, on any scheduler. Await structexec senders (or, on the trio "
            "scheduler, trio primitives) instead, and run asyncio code in asyncio's own loop"
        )
    return (
        "trio primitives can only be awaited when the coroutine runs on the trio scheduler; "
        f"this coroutine is driven by structexec off the trio scheduler and awaited {what}. "
        "Await structexec senders here, or run the coroutine on the trio scheduler (for "
        "example await it from a trio task, or use sx.starts_on(sx.trio_scheduler(), ...))"
    )


def swallowed_stop_message(what: str) -> str:
    """The message of the ``RuntimeError`` a coroutine run as a sender completes with when it
    caught the ``sx.Stopped`` (or ``trio.Cancelled``) that unwinds it and returned a value."""
    return (
        f"{what} caught the sx.Stopped (or trio.Cancelled) raised because an awaited sender "
        "completed stopped, and then returned normally. In a coroutine run as a sender, a "
        "stopped completion cannot be caught: the coroutine is never resumed with a value "
        "([exec.with.awaitable.senders] unhandled_stopped). Re-raise it (clean up in "
        "`finally:` or `except sx.Stopped: ...; raise`), or turn stopped into a value before "
        "awaiting: `await (sndr | sx.stopped_as_optional())` or `sx.upon_stopped(f)`"
    )


class HostMark:
    """Set in the context of a trio task that hosts a coroutine run as a sender.

    ``await sndr`` (``_await.py``) sets ``stopped`` when, in that very task, an awaited sender
    completed stopped and the await raised; the host then knows that a coroutine that returns
    a value swallowed the stop (see :func:`swallowed_stop_message`).
    """

    __slots__ = ("stopped", "task")

    def __init__(self, task: object) -> None:
        self.task = task
        self.stopped = False


#: The :class:`HostMark` of the hosting trio task, if any.
host_mark: contextvars.ContextVar[HostMark | None] = contextvars.ContextVar(
    "structexec_host_mark", default=None
)


class CoroutineLoop(Generic[F]):
    """The one loop that steps coroutines awaiting senders (see the module docstring).

    The loop steps ``top``, the last of ``frames`` (objects with ``coro``, the coroutine, and
    ``unwinding``). When a frame other than the first ends, it is popped (``fr._unlink()``) and
    its result sent or thrown into the frame below; when the first ends, ``_complete`` gets the
    result. A subclass provides these hooks, none of them on the path of an await that
    completes inside ``start``:

    * ``_resume()``: the awaited operation completed after the loop suspended;
    * ``_suspending(sndr, fr)``: the awaited operation did not complete inside ``start``;
    * ``fr.child_frame(sndr, loop)``, for ``sndr`` of type ``frame_type``: the frame to push
      (it runs ``sndr`` on this loop), or ``None`` to connect ``sndr``; an exception is thrown
      into ``fr``;
    * ``_yielded(fr, y)``: the coroutine yielded ``y``, not an awaited sender: ``(kind, data)``
      to continue with, or ``(PENDING, r)`` to return ``r`` from :meth:`_step`;
    * ``_returned(fr, v)``: the coroutine returned ``v`` (and was not unwinding for a stop):
      ``(kind, data)`` the frame ends with;
    * ``_error(fr, e)``: the ``Exception`` the frame ends with when ``e`` escaped it;
    * ``_raised(fr, e)``: another ``BaseException`` escaped: ``(kind, data)`` the frame ends
      with, ``None`` (the loop is done) or ``RAISE`` (re-raise ``e``);
    * ``_complete(fr, kind, data)``: the first frame ended with ``(kind, data)``;
    * ``_name(fr)``: how messages name the frame's coroutine.

    Class-level switches (``None`` turns each off): ``just_type`` (awaited without connecting
    when no domain may transform it: its values are the result), ``frame_type`` (see
    ``child_frame``), ``plain_types`` and ``check``: ``check(sndr, env)``, a plain function,
    raises if ``sndr`` (not of a type in ``plain_types``) cannot be awaited.
    """

    __slots__ = ("data", "frames", "gate", "kind", "op", "sndr", "top")

    just_type: type[JustLike] | None = None
    frame_type: type | None = None
    plain_types: Collection[type] | None = None
    check: Callable[[object, F], None] | None = None  # set together with plain_types

    def __init__(self, top: F) -> None:
        self.top = top
        self.frames: list[F] = [top]
        self.kind = PENDING
        self.data: object = None
        self.sndr: object = None
        self.gate: dict[int, None] | None = None
        self.op: object = None

    # -- the coroutine side ------------------------------------------------------------------

    def await_sender(self, sndr: object) -> Generator[object, object, Any]:
        """``await sndr`` in a coroutine this loop steps: hand ``sndr`` to the loop."""
        self.sndr = sndr
        return (yield _AWAIT)

    # -- receiver of the awaited operation ---------------------------------------------------

    def set_value(self, *vals: object) -> None:
        if self.kind:
            raise completed_twice(self, "set_value")
        n = len(vals)
        self.data = vals[0] if n == 1 else (None if n == 0 else vals)
        self.kind = SEND
        g = self.gate
        if g is not None and g.pop(0, _MISSING) is _MISSING:
            self._resume()

    def set_error(self, err: object) -> None:
        if self.kind:
            raise completed_twice(self, "set_error")
        self.data = err if isinstance(err, BaseException) else ErrorValue(err)
        self.kind = THROW
        g = self.gate
        if g is not None and g.pop(0, _MISSING) is _MISSING:
            self._resume()

    def set_stopped(self) -> None:
        if self.kind:
            raise completed_twice(self, "set_stopped")
        self.kind = STOP
        g = self.gate
        if g is not None and g.pop(0, _MISSING) is _MISSING:
            self._resume()

    def _resume(self) -> None:
        self._loop()

    # -- the loop ------------------------------------------------------------------------------

    def run_loop_from(self, kind: int, data: object) -> None:
        self.kind = kind
        self.data = data
        self._loop()

    def _loop(self) -> None:
        kind = self.kind
        data = self.data
        self.data = self.op = None
        self._step(kind, data)

    def _step(self, kind: int, data: object) -> object:
        """Step frames until the loop must wait (``SUSPEND``), it is done (``DONE``) or a hook
        asks to return something else (``_yielded``)."""
        # The one hot loop of the package, kept as one function on purpose (its cyclomatic
        # complexity is about 30): every ``await`` in a coroutine or task driven off trio goes
        # round it once, and the common cases (``await just(...)``, a sender that completes
        # inside ``start``, an awaited task pushed as a frame, a frame that returns) must stay
        # free of method calls and of attribute reloads: the loop state lives in locals
        # (``fr``, ``coro``, ``kind``, ``data``), which a helper would have to return and
        # reload. Only the rare paths (foreign yields, errors, interrupts) call the hooks.
        ds = _driver_state
        fr = self.top
        coro = fr.coro
        just_t = self.just_type
        frame_t = self.frame_type
        plain = self.plain_types
        check = self.check
        k: int
        d: object
        sndr: Any  # dispatched on its exact type below
        while True:
            prev = ds.driver
            ds.driver = self
            try:
                if kind == SEND:
                    y = coro.send(data)  # type: ignore[union-attr]  # a live frame's
                elif kind == THROW:
                    y = coro.throw(data)  # type: ignore[union-attr]
                else:
                    # Stopped: unwind the body; it is never resumed with a value (docs/task.md).
                    fr.unwinding = UNWIND_STOP
                    y = coro.throw(Stopped())  # type: ignore[union-attr]
            except StopIteration as si:
                ds.driver = prev
                if fr.unwinding == UNWIND_STOP:
                    k, d = THROW, RuntimeError(swallowed_stop_message(self._name(fr)))
                else:
                    k, d = self._returned(fr, si.value)
            except Stopped:
                ds.driver = prev
                k, d = STOP, None
            except Exception as e:
                ds.driver = prev
                k, d = THROW, self._error(fr, e)
            except BaseException as e:
                ds.driver = prev
                r = self._raised(fr, e)
                if r is None:
                    return DONE
                if r is RAISE:
                    raise
                k, d = r
            else:
                ds.driver = prev
                if y is _AWAIT:
                    sndr = self.sndr
                    self.sndr = None
                    ts = type(sndr)
                    if ts is just_t and not may_transform(just_t.tag):
                        # await sx.just(...): nothing to connect or start, no user code runs
                        # in between; the values are the result (no domain can intervene).
                        vals = sndr._vals
                        n = len(vals)
                        kind = SEND
                        data = vals[0] if n == 1 else (None if n == 0 else vals)
                        continue
                    if ts is frame_t:
                        # An awaited task on the same scheduler: a new frame on this loop.
                        try:
                            child = fr.child_frame(sndr, self)
                        except Exception as e:  # consumed, or bad arguments
                            kind, data = THROW, e
                            continue
                        if child is not None:
                            self.frames.append(child)
                            self.top = fr = child
                            coro = fr.coro
                            kind, data = SEND, None
                            continue
                    try:
                        if plain is not None and ts not in plain:
                            check(sndr, fr)  # type: ignore[misc]  # set with plain_types
                        op = connect(sndr, self)
                    except Exception as e:
                        kind, data = THROW, e
                        continue
                    self.kind = PENDING
                    self.gate = None
                    try:
                        op.start()
                    except BaseException as e:
                        # start() must not raise ([exec.opstate.start]); if it does, the
                        # await raises it, as an await in a trio task does. A completion
                        # that still arrives is a second one (kind is no longer PENDING).
                        self.kind = THROW
                        self.data = None
                        kind, data = THROW, e
                        continue
                    if not self.kind:
                        # Not completed inside start(). Let the subclass prepare the resumption,
                        # then arm the gate: whichever of this thread and the completing one
                        # pops it second continues the loop (see set_value).
                        self._suspending(sndr, fr)
                        self.op = op  # alive until it completes
                        gate = self.gate = {0: None}
                        # (re-read: the completion may have arrived on another thread)
                        if self.kind == PENDING and gate.pop(0, _MISSING) is None:
                            return SUSPEND  # the completion resumes the loop
                        self.op = None
                    kind = self.kind
                    data = self.data
                    self.data = None
                    continue
                kind, data = self._yielded(fr, y)
                if kind == PENDING:
                    return data
                fr = self.top
                coro = fr.coro
                continue
            # The frame's body finished with (k, d).
            frames = self.frames
            if len(frames) == 1:
                self._complete(fr, k, d)
                return DONE
            fr._unlink()
            fr.coro = None  # ended: never stepped again
            frames.pop()
            self.top = fr = frames[-1]
            coro = fr.coro
            if k == THROW and not isinstance(d, BaseException):
                d = ErrorValue(d)
            kind, data = k, d

    # -- hooks (the generic driver's behaviour; see the class docstring) -----------------------

    def _suspending(self, sndr: object, fr: F) -> None:
        pass

    def _yielded(self, fr: F, y: object) -> tuple[int, object]:
        return THROW, RuntimeError(foreign_await_message(y))

    def _returned(self, fr: F, v: object) -> tuple[int, object]:
        return SEND, v

    def _error(self, fr: F, e: Exception) -> BaseException:
        return e

    def _raised(self, fr: F, e: BaseException) -> tuple[int, object] | _Raise | None:
        return RAISE

    def _complete(self, fr: F, kind: int, data: object) -> None:
        raise NotImplementedError

    def _name(self, fr: F) -> str:
        return _coro_name(fr.coro)


class _Frame:
    """The one frame of a :class:`CoroutineDriver`."""

    __slots__ = ("coro", "unwinding")

    def __init__(self, coro: Steppable) -> None:
        self.coro: Steppable | None = coro
        self.unwinding = UNWIND_NONE

    def _unlink(self) -> None:  # never called: the one frame is the first
        pass

    def child_frame(self, sndr: object, loop: object) -> _Frame | None:
        return None  # never called: frame_type is None


class CoroutineDriver(CoroutineLoop[_Frame]):
    """Drive ``coro`` to completion into ``rcvr`` (the one-frame :class:`CoroutineLoop`).

    ``rcvr`` receives the outcome: ``set_value(v)`` for a returned ``v`` (``set_value()`` for
    ``None``, ``set_value(*xs)`` for ``sx.values(*xs)``), ``set_error(e)`` for an escaping
    ``Exception``, ``set_stopped()`` when the coroutine unwinds because an awaited sender
    completed stopped; another ``BaseException`` propagates to whoever runs the loop. ``env``
    is the environment the awaited senders see (their receiver's environment); it defaults to
    ``FWD-ENV(get_env(rcvr))`` ([exec.as.awaitable], [exec.connect]). ``start()`` may be called
    once.
    """

    __slots__ = ("_env", "_rcvr", "_started")

    def __init__(self, coro: Steppable, rcvr: Rcvr, env: Env | None = None) -> None:
        if not (hasattr(coro, "send") and hasattr(coro, "throw")):
            raise TypeError(
                f"CoroutineDriver needs a coroutine (an object with send() and throw()), "
                f"got {type(coro).__name__}"
            )
        super().__init__(_Frame(coro))
        self.kind = SEND  # no awaited operation yet: a completion now is a stray one
        self._rcvr = rcvr
        self._env = fwd_env(get_env(rcvr)) if env is None else env
        self._started = False

    def get_env(self) -> Env:
        return self._env

    def start(self) -> None:
        if self._started:
            raise twice_started(self)
        self._started = True
        self._step(SEND, None)

    def close(self) -> None:
        """Close a coroutine that was never started (no 'never awaited' warning)."""
        if not self._started:
            self._started = True
            close = getattr(self.top.coro, "close", None)
            if close is not None:
                close()

    def _complete(self, fr: _Frame, kind: int, data: object) -> None:
        rcvr = self._rcvr
        if kind == SEND:
            send_result(rcvr, data)
        elif kind == THROW:
            rcvr.set_error(data)
        else:
            rcvr.set_stopped()
