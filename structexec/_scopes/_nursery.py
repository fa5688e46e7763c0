"""The nursery face of the counting scopes: ``async with``, ``start_soon``, ``start``,
``cancel_scope`` and the trio machinery that hosts a scope's tasks.

docs/scopes.md "The nursery face: `async with`" and "What happens when things fail";
[exec.scope.simple.counting], [exec.scope.counting].

:class:`NurseryFace` is what both scopes share as trio nurseries (the hosted-task wrappers,
``__aenter__``/``__aexit__``, interrupts, the cancel scopes); :class:`SimpleHost` and
:class:`CountingHost` are the two ways of hosting the tasks (a shielded nursery in a host
task for ``simple_counting_scope``; for ``counting_scope`` a nursery of the task that entered
the block, and the watcher that forwards an enclosing cancellation to a shielded body). The
association state itself (count, state, lock, joins) belongs to ``_state.AssociationState``:
this module only calls its methods.
"""

from __future__ import annotations

import inspect
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from types import CoroutineType as _CoroutineType
from types import TracebackType
from typing import Any, TypeVar

import trio

from .._algorithms._stop_when import StopTokenEnv
from .._core._env import EMPTY_ENV, TryEnv
from .._core._errors import Stopped
from .._core._queries import get_scheduler
from .._core._stop_token import inplace_stop_callback, inplace_stop_source
from .._trio import _trio_compat
from .._trio._detach import DETACHED, RELEASE, begin_wait, end_wait, undetach, watch_run
from .._trio._trio_bridge import (
    RunState,
    call_in_run,
    current_run,
    trio_host_nursery,
    trio_run,
)
from ._join import ERRORS_MESSAGE, _TrioJoinWaiter
from ._site import (
    HOSTED_CODES,
    OPEN_SCOPES,
    USER_FILES,
    check_grace,
    enter_site,
    grace_of,
    note_error,
    scope_label,
    warn_stuck,
)
from ._spawn import as_exception
from ._state import AssociationState

enable_ki_protection = trio.lowlevel.enable_ki_protection
#: trio >= 0.31 takes a reason for a cancellation (Cancelled.reason).
_CANCEL_REASONS = "reason" in inspect.signature(trio.CancelScope.cancel).parameters

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup  # type: ignore[import-not-found, unused-ignore]

__all__: list[str] = []

_Scope = TypeVar("_Scope", bound="NurseryFace")

_STRICT_MESSAGE = "exceptions from the counting scope"
# The trio names of the scopes' own tasks, as they were when these methods were defined on the
# public classes (trio names a task after its function: module and qualified name).
_HOST_TASK_NAME = "structexec._scopes._counting_scope.simple_counting_scope._host"
_WATCH_TASK_NAME = "structexec._scopes._counting_scope.counting_scope._watch"
_GRACE_TASK_NAME = "structexec stop_grace watcher"

class _TaskStatus:
    """Wraps trio's ``task_status`` to know whether ``started()`` moved the task into the
    scope (``called``). In a cancelled context trio's ``started()`` records the value but
    leaves the task under ``start()``, which then raises what the task raises; so does the
    scope's ``start()``."""

    __slots__ = ("_inner", "_nursery", "called")

    def __init__(self, inner: Any, nursery: Any) -> None:
        self._inner = inner
        self._nursery = nursery
        self.called = False

    def started(self, value: Any = None) -> None:
        self._inner.started(value)
        self.called = trio.lowlevel.current_task().parent_nursery is self._nursery

    def __repr__(self) -> str:
        return repr(self._inner)


def _coroutine_of(who: str, async_fn: Any, args: tuple[Any, ...]) -> Coroutine[Any, Any, Any]:
    """Call ``async_fn(*args)``; ``TypeError`` unless that gives a coroutine (like trio)."""
    if isinstance(async_fn, Coroutine):
        raise TypeError(
            f"{who}() expected an async function, but got a coroutine object {async_fn!r}; "
            f"pass the function and its arguments ({who}(fn, *args)), or give the coroutine "
            "to scope.spawn()"
        )
    if not callable(async_fn):
        raise TypeError(f"{who}() expected an async function, got {type(async_fn).__name__}")
    return _check_coroutine(who, async_fn, async_fn(*args))


def _check_coroutine(who: str, async_fn: Any, coro: Any) -> Coroutine[Any, Any, Any]:
    if isinstance(coro, Coroutine):
        return coro
    if isinstance(coro, Awaitable):
        raise TypeError(
            f"{who}() expected an async function, but {async_fn!r} returned "
            f"{type(coro).__name__}, an awaitable that is not a coroutine; give it to "
            "scope.spawn() instead"
        )
    raise TypeError(
        f"{who}() expected an async function, but {async_fn!r} returned "
        f"{type(coro).__name__}: it is not an async function (define it with async def)"
    )


def _hosted_task(scope: Any, async_fn: Any, args: tuple[Any, ...], site: Any = None) -> Any:
    """What ``scope.start_soon`` gives trio's ``nursery.start_soon``: trio calls it inside
    the new task's own copy of the context (so whatever ``async_fn(*args)`` does to
    contextvars, or sniffio, stays in the task), synchronously (so a ``TypeError`` for a
    function that is not async still comes out of ``start_soon``)."""
    coro = async_fn(*args)
    if type(coro) is not _CoroutineType:
        coro = _check_coroutine("start_soon", async_fn, coro)
    return _hosted(scope, coro, site)


def _hosted_start_task(
    scope: Any,
    async_fn: Any,
    args: tuple[Any, ...],
    ran: list[bool],
    site: Any = None,
    *,
    task_status: Any,
) -> Any:
    """What ``scope.start`` gives trio's ``nursery.start``: as :func:`_hosted_task`, trio
    calls it synchronously in the new task's context, so whatever ``async_fn`` raises while
    it is called (a sync function calling ``started()`` twice, say) comes out of
    ``start()``, as it does from a nursery's."""
    status = _TaskStatus(task_status, scope._nursery)
    coro = async_fn(*args, task_status=status)
    if type(coro) is not _CoroutineType:
        coro = _check_coroutine("start", async_fn, coro)
    return scope._hosted_start(coro, status, ran, site)


def _user_traceback(e: BaseException) -> BaseException:
    """Drop the library's wrapper frame from the front of ``e``'s traceback, so that it starts
    at the user's function, as a nursery child's does."""
    tb = e.__traceback__
    if tb is not None and tb.tb_frame.f_code in _WRAPPERS:
        e.__traceback__ = tb.tb_next
    return e


async def _hosted(scope: Any, coro: Coroutine[Any, Any, Any], site: Any = None) -> None:
    """The body of a task started with ``scope.start_soon`` (``site``: where it was called,
    for the note on its errors and ``sx.operation_tree()``)."""
    try:
        await coro
    except Exception as e:
        if DETACHED and id(coro) in DETACHED:
            raise  # the task detached (_detach): what its new driver sees, not the scope
        if not _abandoned(scope):
            note_error(e, site, scope, task=True)
            scope._record_error(_user_traceback(e))
    except trio.Cancelled:
        if not scope._stopping():
            raise
        # The scope's own request_stop cancelled this task: it ends "stopped". Returning
        # normally spares trio the per-child exception bookkeeping of a mass cancel.
        scope._cancel_seen = True
    except Stopped:
        pass  # an awaited sender completed stopped: the task ends stopped, like spawned work
    except BaseException as e:  # KeyboardInterrupt, SystemExit, groups: see _task_raised
        if type(e) is GeneratorExit or (DETACHED and id(coro) in DETACHED):
            # Detached (_detach), then closed or resumed elsewhere: not the scope's. (trio
            # never closes a live task's coroutine: GeneratorExit means it was let go.)
            raise
        if not isinstance(e, trio.Cancelled):
            note_error(e, site, scope, task=True)
        if scope._task_raised(e):
            raise
    finally:
        if not DETACHED or not undetach(coro):
            scope._wrappers -= 1
            scope._disassociate()


async def _guarded(scope: Any, async_fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    """A task the scope's nursery hosts for a coroutine sender or a ``task`` body (they
    complete their own operation first): a ``BaseException`` other than ``Cancelled`` that
    escapes it is the scope's to raise, not the host nursery's (see ``_ScopeBase._interrupt``).
    """
    # The spawn state of the coroutine sender (its operation's receiver), for the note: read
    # now, the operation forgets its receiver when it completes.
    op = getattr(async_fn, "__self__", None)
    st = getattr(op, "_rcvr", None)
    cs = getattr(op, "_scope", None)  # a coroutine sender's own cancel scope (the op drops it)
    try:
        await async_fn(*args)
    except BaseException as e:
        if DETACHED and undetach(async_fn):
            raise  # the task detached (_detach): its operation already completed stopped
        scope._wrappers -= 1
        if isinstance(e, trio.Cancelled):
            scope._cancel_seen = True  # (see __aexit__)
            raise
        note_error(e, getattr(st, "_site", None), scope)
        if scope._task_raised(e):
            raise
    else:
        if not DETACHED or not undetach(async_fn):
            scope._wrappers -= 1
        # A coroutine sender's own cancel scope caught the stop's Cancelled: a task that was
        # cancelled (the exit may pass an enclosing cancellation on, see __aexit__).
        if getattr(cs, "cancelled_caught", False):
            scope._cancel_seen = True


class _HostNursery:
    """What the scope's environment names as the host nursery of coroutine senders (docs/scopes.md):
    the real nursery's ``start_soon``, with each task guarded by :func:`_guarded`."""

    __slots__ = ("_nursery", "_scope")

    def __init__(self, scope: Any, nursery: Any) -> None:
        self._scope = scope
        self._nursery = nursery

    def start_soon(self, async_fn: Callable[..., Any], *args: Any, name: object = None) -> None:
        scope = self._scope
        if not scope._run.watched:
            watch_run(scope._run)  # a coroutine that detaches ends its operation (_detach)
        self._nursery.start_soon(
            _guarded, scope, async_fn, args, name=async_fn if name is None else name
        )
        scope._wrappers += 1

    def interrupt(self, rcvr: Any, exc: BaseException) -> None:
        """A hosted coroutine sender raised ``exc`` (not a cancellation, not a group): the
        scope's to raise at its exit, told before its operation completes (as ``_guarded``)."""
        note_error(exc, getattr(rcvr, "_site", None), self._scope)
        self._scope._interrupt(exc)

    def __repr__(self) -> str:
        return f"<host nursery of {self._scope!r}>"


#: The scopes the current trio task has entered and not yet left, innermost first (a linked
#: list of ``(scope, rest)`` pairs): how a scope's exit finds scopes misnested inside it.
_OPEN_SCOPES = OPEN_SCOPES


def safe_warn(scope: Any, message: str) -> None:
    """Issue a :class:`StuckWorkWarning` about ``scope``, attributed to the user's line that
    entered it (``_site.warn_stuck``); shown, never raised, when a filter makes it an error."""
    warn_stuck(message, getattr(scope, "_enter_site", None))


def _no_trio_message(scope: Any) -> str:
    """``async with scope`` outside trio (under asyncio, or with no event loop)."""
    kind = type(scope).__name__
    return (
        f"`async with {kind}()` needs a running trio event loop on this thread (it was "
        "entered outside trio.run, e.g. under asyncio): as a nursery, the scope hosts trio "
        "tasks, and structexec's runtime is trio. Run the program with trio.run; or, without "
        "`async with`, use the scope from any thread: spawn work with "
        "sx.spawn(sndr, scope.get_token()) and wait for it with sx.sync_wait(scope.join())"
    )


def _task_finished(task: trio.lowlevel.Task) -> bool:
    """Whether ``task``'s coroutine has finished (returned or raised)."""
    return getattr(task.coro, "cr_frame", True) is None


def _abandoned(scope: Any) -> bool:
    """Whether the task that entered ``scope``'s block ended inside it (misnesting): trio
    then cancels the nurseries it left open, and what their tasks raise in their cleanup is
    lost, as a closed nursery loses it (the scope's exit, see ``_exit_abandoned``)."""
    t = scope._parent_task
    return t is not None and _task_finished(t)


def _cancel(cs: trio.CancelScope, reason: str | None) -> None:
    """``cs.cancel()``, with ``reason`` where trio takes one (``Cancelled.reason``)."""
    if reason is None or not _CANCEL_REASONS:
        cs.cancel()
    else:
        cs.cancel(reason=reason)


def _without_cancelled(exc: BaseException) -> tuple[BaseException | None, bool]:
    """``exc`` without its ``trio.Cancelled`` parts (as a cancel scope that catches them
    leaves it), and whether it had any."""
    if isinstance(exc, trio.Cancelled):
        return None, True
    if isinstance(exc, BaseExceptionGroup):
        cancelled, rest = exc.split(trio.Cancelled)
        if cancelled is not None:
            return rest, True
    return exc, False


def _has_cancelled(exc: BaseException | None) -> bool:
    """Whether ``exc`` is, or its group holds, a ``trio.Cancelled``."""
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(trio.Cancelled)[0] is not None
    return isinstance(exc, trio.Cancelled)


def _is_interrupt(exc: BaseException | None) -> bool:
    """``KeyboardInterrupt``, ``SystemExit`` and other ``BaseException``s that are neither a
    trio cancellation nor a stopped completion (``sx.Stopped``)."""
    return exc is not None and not isinstance(exc, (Exception, trio.Cancelled, Stopped))



class NurseryFace(AssociationState):
    """The nursery behaviour shared by both scopes (docs/scopes.md "The nursery face")."""

    __slots__ = (
        "_body_cs",
        "_cancel_scope",
        "_cancel_seen",
        "_enter_site",
        "_entered",
        "_name",
        "_nursery",
        "_parent_task",
        "_reason",
        "_run",
        "_spawn_env",
        "_stop_cb",
        "_stop_grace",
        "_stop_since",
        "_strict",
        "_wrappers",
    )

    def __init__(
        self,
        *,
        strict_exception_groups: bool | None = None,
        name: str | None = None,
        stop_grace: float | None = None,
    ) -> None:
        AssociationState.__init__(self)
        # None: the trio run's setting, read at `async with` (as trio.open_nursery()).
        self._strict = strict_exception_groups
        # docs/debugging.md: the name in notes, trees and reprs; the stuck-work warnings;
        # when stop was requested (time.monotonic(), for the tree).
        self._name = None if name is None else str(name)
        self._stop_grace = None if stop_grace is None else check_grace(stop_grace)
        self._stop_since: float | None = None
        self._entered = False
        self._cancel_seen = False  # a hosted task ended with trio.Cancelled (see __aexit__)
        self._body_cs: Any = None
        self._cancel_scope: Any = None
        self._parent_task: Any = None
        self._reason: str | None = None  # the cancel reason trio tasks will see
        self._nursery: Any = None
        self._spawn_env: Any = EMPTY_ENV
        self._stop_cb: Any = None
        self._run: RunState | None = None  # the trio run that entered `async with`

    # -- KeyboardInterrupt, SystemExit, ... (never error datums)

    def _interrupt(self, exc: BaseException) -> None:
        """A ``BaseException`` that is not a cancellation reached the scope (a hosted task
        raised it, or it hit ``__aexit__`` while it waited, e.g. Ctrl-C): as in a nursery,
        the hosted tasks and the ``async with`` body are cancelled, ``counting_scope``
        requests stop on its work, and the block raises it once everything has finished."""
        self._add_interrupt(exc)
        self._cancel_for_interrupt()

    def _task_raised(self, e: BaseException) -> bool:
        """A hosted task let ``e`` escape (a ``BaseException`` that is not a lone
        ``Exception``, ``Cancelled`` or ``Stopped``: an interrupt, or a group, say from the
        task's own nursery). ``True``: re-raise it into the host nursery (trio
        cancellations the scope did not ask for, which trio's cancel scopes absorb)."""
        if isinstance(e, BaseExceptionGroup):
            rest = e.split((trio.Cancelled, Stopped))[1]
            if rest is None:
                # Only cancellations and stops: the task ended cancelled or stopped.
                cancelled = e.split(trio.Cancelled)[0]
                return cancelled is not None and not self._stopping()
            if rest.split(Exception)[1] is None:
                self._record_error(rest)  # only errors: an ExceptionGroup
                return False
            e = rest
        self._interrupt(e)
        return False

    def _cancel_for_interrupt(self) -> None:
        self._cancel_hosted()
        self._cancel_body()

    def _cancel_body(self) -> None:
        """Cancel the ``async with`` body (if it is running), from any thread."""
        cs = self._body_cs
        if cs is not None:
            self._cancel_in_trio(cs)


    # -- nursery behaviour (docs/scopes.md "The nursery face")

    def start_soon(
        self, async_fn: Callable[..., Awaitable[Any]], *args: Any, name: object = None
    ) -> None:
        """Run ``async_fn(*args)`` in a new trio task tracked by the scope (like
        ``nursery.start_soon``). Only inside ``async with scope:``.

        The call is checked at once (``TypeError`` if ``async_fn`` is not an async
        function). If the scope no longer accepts work (``close()`` was called, or
        ``max_associations`` is reached) it raises ``RuntimeError``, as trio does for a
        nursery closed to new arrivals (``sx.spawn`` drops work silently instead, as the
        spec says; a coroutine handed to ``start_soon`` is never dropped unseen). The task
        runs in its own copy of the context, as trio's. A ``counting_scope``'s task is
        cancelled by ``request_stop()``, ``cancel_scope.cancel()`` and enclosing cancel
        scopes, like a nursery child; a ``simple_counting_scope``'s only by an interrupt
        (``KeyboardInterrupt``). An exception it raises is recorded by the scope (and, for
        ``counting_scope``, requests stop and cancels the ``async with`` body).
        """
        nursery = self._nursery
        if nursery is None:
            raise RuntimeError(self._not_entered("start_soon"))
        fn: Any = async_fn
        if type(fn) is _CoroutineType or not callable(fn):
            _coroutine_of("start_soon", fn, args).close()  # raises the right TypeError
        if not self._try_associate():
            raise RuntimeError(
                f"scope.start_soon(): {self!r} does not accept new work (it was closed, or "
                "max_associations is reached); the task was not started"
            )
        f = sys._getframe(1)  # the caller, for notes and trees (docs/debugging.md)
        try:
            nursery.start_soon(
                _hosted_task, self, fn, args, (f.f_code, f.f_lasti),
                name=async_fn if name is None else name,
            )
        except BaseException:
            self._disassociate()
            run = self._run
            if run is None or threading.get_ident() != run.thread:
                raise RuntimeError(
                    "scope.start_soon() must be called on the trio thread that entered the "
                    "scope; from another thread use scope.spawn(async_fn(*args)) or "
                    "trio.from_thread.run_sync(scope.start_soon, async_fn, *args)"
                ) from None
            raise
        self._wrappers += 1

    async def start(
        self, async_fn: Callable[..., Awaitable[Any]], *args: Any, name: object = None
    ) -> Any:
        """Start ``async_fn(*args, task_status=...)`` and wait until it calls
        ``task_status.started(value)``; return ``value`` (trio's ``nursery.start``).

        An exception raised before ``started()`` propagates here, as in trio; after it, the
        task belongs to the scope like one started with :meth:`start_soon`. Raises
        ``RuntimeError`` if the scope no longer accepts work.

        After ``request_stop()`` (or any stop of a ``counting_scope``'s work) the task starts
        cancelled, as under ``nursery.start()`` into a cancelled nursery: a ``trio.Cancelled``
        it meets before ``started()`` comes out of ``start()``, and the ``async with`` block
        absorbs it, as the scope's own; a task that calls ``started()`` before its first
        checkpoint returns its value and is then cancelled with the other hosted tasks
        (docs/scopes.md).
        """
        nursery = self._nursery
        if nursery is None:
            raise RuntimeError(self._not_entered("start"))
        if not callable(async_fn):
            raise TypeError(f"start() expected an async function, got {type(async_fn).__name__}")
        if not self._try_associate():
            raise RuntimeError(
                f"scope.start(): {self!r} does not accept new work (it is closed or joined)"
            )
        ran = [False]
        f = sys._getframe(1)
        self._wrappers += 1
        try:
            if not self._hosted_cancelled():
                return await nursery.start(
                    _hosted_start_task, self, async_fn, args, ran, (f.f_code, f.f_lasti),
                    name=async_fn if name is None else name,
                )
            # Stop was requested: as nursery.start() into a cancelled nursery, the task runs
            # under start() cancelled, and a Cancelled before started() comes out of start()
            # (the block absorbs it, as the scope's own). The body itself stays uncancelled.
            caught: BaseException | None = None
            with trio.CancelScope() as cs:
                _cancel(cs, self._reason)
                try:
                    return await nursery.start(
                        _hosted_start_task, self, async_fn, args, ran, (f.f_code, f.f_lasti),
                        name=async_fn if name is None else name,
                    )
                except trio.Cancelled as c:
                    caught = c
            try:
                raise caught  # type: ignore[misc]
            finally:
                del caught
        except BaseException:
            if not ran[0]:  # the task never ran, so its finally did not release
                self._wrappers -= 1
                self._disassociate()
            raise

    def _not_entered(self, what: str) -> str:
        return (
            f"scope.{what}() hosts a trio task, so it needs the scope to be open as a "
            f"nursery: use it inside `async with {type(self).__name__}() as scope:` "
            f"({self!r}); to spawn from elsewhere use sx.spawn(coro, scope.get_token())"
        )

    async def _hosted_start(
        self, coro: Coroutine[Any, Any, Any], status: _TaskStatus, ran: list[bool], site: Any
    ) -> None:
        ran[0] = True
        try:
            await coro
        except Exception as e:
            if DETACHED and id(coro) in DETACHED:
                raise  # the task detached (_detach): not the scope's any more
            if not status.called:
                raise  # before started(): to the caller of start(), as in trio
            if not _abandoned(self):
                note_error(e, site, self, task=True)
                self._record_error(_user_traceback(e))
        except trio.Cancelled:
            if not (status.called and self._stopping()):
                raise
            self._cancel_seen = True
        except Stopped:
            if not status.called:
                raise
        except BaseException as e:
            if type(e) is GeneratorExit or (DETACHED and id(coro) in DETACHED):
                raise  # detached (_detach), then closed or resumed elsewhere: not ours
            if status.called:
                note_error(e, site, self, task=True)
            if not status.called or self._task_raised(e):
                raise  # before started(): to the caller of start()
        finally:
            if not DETACHED or not undetach(coro):
                self._wrappers -= 1
                self._disassociate()

    def _stopping(self) -> bool:
        return False

    async def _open_host(self) -> trio.CancelScope:
        """Enter the block's cancel scope (``scope.cancel_scope``, returned) and open, inside
        it, the trio nursery that hosts the scope's tasks (``self._nursery``); called by
        ``__aenter__``."""
        raise NotImplementedError  # pragma: no cover - each scope class has its own

    async def _exit_cancel_scope(self, out: BaseException | None) -> BaseException | None:
        """Leave the block's cancel scope, last thing in ``__aexit__``, with ``out`` (what is
        to leave the block): what is left of it once the scope's own ``Cancelled`` is
        removed (``None``: nothing, or absorbed)."""
        cs = self._cancel_scope
        try:
            if out is None:
                cs.__exit__(None, None, None)
                return None
            if cs.__exit__(type(out), out, out.__traceback__):
                return None
            return out
        except BaseException as rest:
            return rest

    async def _close_host(self) -> None:
        """Close what :meth:`_open_host` opened, once the scope has joined (nothing hosted
        is left running)."""
        raise NotImplementedError  # pragma: no cover - each scope class has its own

    def _hosted_cancelled(self) -> bool:
        """Whether the code of the ``async with`` exit runs inside a nursery of hosted tasks
        that the scope itself cancelled (counting_scope after a stop request)."""
        return False

    def _dropped_quietly(self) -> bool:
        t = getattr(self, "_parent_task", None)  # (absent if __init__ raised)
        # Misnested: the task that entered the block ended inside it, and trio reported
        # "Nursery stack corrupted" then; as an abandoned nursery, no second warning.
        return t is not None and getattr(self, "_entered", False) and _task_finished(t)

    def _abandon(self) -> None:
        """The block will never be left properly (misnesting, see ``__aexit__``): cancel the
        hosted tasks (counting_scope: request stop), so that trio reports the misnesting
        instead of finding a task left behind."""
        self._stop_work()
        self._cancel_hosted()

    @property
    def parent_task(self) -> trio.lowlevel.Task:
        """The trio task that entered ``async with`` (``nursery.parent_task``)."""
        t = self._parent_task
        if t is None:
            raise RuntimeError(f"{self!r} has not been entered with `async with`")
        task: trio.lowlevel.Task = t
        return task

    @property
    def child_tasks(self) -> frozenset[trio.lowlevel.Task]:
        """The trio tasks the scope hosts right now (``nursery.child_tasks``): those of
        ``start_soon``, of ``start`` once they called ``started()``, and of coroutines
        spawned as senders. Empty outside ``async with``. Senders need no task: see
        ``count`` for all the work."""
        n = self._nursery
        if n is None:
            return frozenset()
        tasks: frozenset[trio.lowlevel.Task] = n.child_tasks
        return tasks

    @property
    def cancel_scope(self) -> trio.CancelScope:
        """The ``trio.CancelScope`` of the ``async with`` block, as ``nursery.cancel_scope``.

        ``scope.cancel_scope.cancel()`` (``reason=`` too), a ``deadline`` or
        ``relative_deadline`` cancel the body as for a nursery; for ``counting_scope`` they
        also request stop, so every hosted task is cancelled and every associated sender sees
        its stop token fire. For ``simple_counting_scope`` only the body is cancelled (its
        work cannot be). ``RuntimeError`` outside ``async with``.
        """
        cs = self._cancel_scope
        if cs is None:
            raise RuntimeError(
                f"scope.cancel_scope exists only inside `async with {type(self).__name__}()` "
                f"({self!r}); to stop the work use scope.request_stop()"
            )
        c: trio.CancelScope = cs
        return c

    def _cancel_hosted(self) -> None:
        nursery = self._nursery
        if nursery is not None:
            self._cancel_in_trio(nursery.cancel_scope)

    def _cancel_in_trio(self, cs: Any) -> None:
        """``cs.cancel()`` now on the trio thread, else queued to it (any thread may call);
        with the reason the scope has for it (``Cancelled.reason``), where trio has one."""
        self._in_trio(partial(_cancel, cs, self._reason))

    def _in_trio(self, fn: Callable[[], object]) -> None:
        """``fn()`` now on the trio thread that entered the scope, else queued to it."""
        run = self._run
        if run is not None:
            call_in_run(run, fn)

    def __enter__(self) -> None:
        name = type(self).__name__
        raise RuntimeError(
            f"use 'async with {name}(...)', not 'with {name}(...)': the scope hosts trio "
            "tasks and leaving it waits for them"
        )

    def __exit__(self, *exc: object) -> None:  # pragma: no cover - __enter__ always raises
        pass

    @enable_ki_protection
    async def __aenter__(self: _Scope) -> _Scope:
        if self._entered:
            raise RuntimeError(f"{self!r} is already open as a nursery (async with)")
        if self._joining_or_joined():
            raise RuntimeError(
                f"`async with` on {self!r}: the scope is {self._state_name()}, so it cannot "
                "host new work; create a new scope"
            )
        try:
            run = current_run()
        except RuntimeError:
            raise RuntimeError(_no_trio_message(self)) from None
        self._entered = True
        # The user's `async with` line, for warnings (_site.enter_site; a frame of a file
        # seen before as the user's is taken at once, without the walk).
        f = sys._getframe(1)
        self._enter_site = (
            (f.f_code, f.f_lasti, f.f_globals)
            if f.f_code.co_filename in USER_FILES
            else enter_site()
        )
        del f
        self._run = run
        self._wrappers = 0  # its trio tasks whose wrapper has not finished (_detach)
        self._parent_task = trio.lowlevel.current_task()
        try:
            self._cancel_scope = await self._open_host()
        except BaseException:  # pragma: no cover - opening a nursery does not block
            self._entered = False
            raise
        self._spawn_env = _ScopeEnv(self, self._nursery, run)
        self._on_enter()
        # The body's own cancel scope (exited first thing in __aexit__): counting_scope
        # cancels it when spawned work fails, as a nursery cancels its body.
        self._body_cs = trio.CancelScope()
        self._body_cs.__enter__()
        _OPEN_SCOPES.set((self, _OPEN_SCOPES.get()))
        return self

    def _on_enter(self) -> None:
        pass

    async def _wait_joined(self, event: trio.Event, warn_at: list[float | None]) -> None:
        """Wait for the join (``event``); with a ``stop_grace``, once ``warn_at[0]`` has
        passed, issue the :class:`StuckWorkWarning` with the tree of what the exit waits for
        (once: ``warn_at[0]`` becomes ``None``)."""
        when = warn_at[0]
        if when is not None:
            with trio.move_on_at(when):
                await event.wait()
                return
            warn_at[0] = None
            waited = trio.current_time() - when + (grace_of(self) or 0.0)
            safe_warn(
                self,
                f"the exit of `async with {scope_label(self)}` has waited {waited:.1f} s "
                f"for {self.count} associated operation(s):\n"
                + _introspect_tree(self)
            )
        await event.wait()

    def _pop_open_scopes(self) -> None:
        """Take this scope off the task's list of open scopes. Scopes entered after it in
        this task and still open are misnested (entered, never left): trio raises "Cancel
        scope stack corrupted" at this exit and "Nursery stack corrupted" when the task
        ends; they are abandoned, so that no host task of theirs is left waiting forever."""
        node = _OPEN_SCOPES.get()
        if node is None:
            return  # left in another task than the one that entered it (trio raises)
        if node[0] is self:
            _OPEN_SCOPES.set(node[1])
            return
        inner = []
        while node is not None and node[0] is not self:
            inner.append(node[0])
            node = node[1]
        if node is None:
            return  # not entered in this task: nothing of this task's list is ours
        _OPEN_SCOPES.set(node[1])
        for scope in inner:
            scope._abandon()

    def _stop_work(self) -> None:
        """The body raised, or the block was cancelled from outside: counting_scope requests
        stop on its work ([exec.scope.counting]); simple_counting_scope's cannot be stopped."""

    def _strict_now(self) -> bool:
        """The block's ``strict_exception_groups``: the run's when none was given (as
        ``trio.open_nursery()``); read only when something leaves the block."""
        strict = self._strict
        if strict is None:
            strict = self._strict = _trio_compat.run_strict_exception_groups()
        return strict

    def _exit_abandoned(self, exc: BaseException | None) -> bool:
        """The exit of a block whose task ended inside it (misnesting: trio raised "Nursery
        stack corrupted" in that task and cancelled the nurseries it left open). As trio's
        exit of such a nursery: no wait for the abandoned tasks (they finish later, and
        what they raise then is lost, as a closed nursery loses it), the errors that arrived
        before and the exception passed in, in a group."""
        cb = self._stop_cb
        if cb is not None:
            self._stop_cb = None
            cb.close()
        self._nursery = None
        self._spawn_env = EMPTY_ENV
        self._body_cs = None
        errors, interrupts = self._take_exit_report()
        message = ERRORS_MESSAGE if errors else _STRICT_MESSAGE
        excs: list[BaseException] = [as_exception(e) for e in errors]
        if exc is not None:
            excs.append(exc)
        excs.extend(interrupts)
        del errors, interrupts
        if not excs:
            return False
        out: BaseException
        strict = self._strict_now()
        if strict or len(excs) > 1:
            group = BaseExceptionGroup(message, excs)
            if not strict:
                group.add_note(_trio_compat.LOOSE_NOTE)
            out = group
        else:
            out = excs[0]
            if out is exc:
                return False
        del excs
        try:
            raise out
        finally:
            out.__context__ = None
            del out, exc

    @enable_ki_protection
    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        # KI-protected, like trio's own nursery exit: a Ctrl-C arrives as KeyboardInterrupt
        # at the wait below (never halfway through the bookkeeping), and the scope still
        # joins and closes its host nursery before the KeyboardInterrupt propagates.
        if not self._entered:
            raise RuntimeError(f"{self!r}: __aexit__ without __aenter__")
        if getattr(self._parent_task.coro, "cr_frame", True) is None:
            return self._exit_abandoned(exc)  # the task that entered the block has ended
        body_exc = exc
        self._pop_open_scopes()
        # The errors that came before the body's exception (read only when there is one).
        arrived = 0 if exc is None else self._error_count()
        body_cs, self._body_cs = self._body_cs, None
        try:
            if body_cs.__exit__(exc_type, exc, tb):
                exc = None  # the body was cancelled by this scope, because work failed
        except BaseException as rest:  # what is left once this scope's Cancelled is removed
            if body_exc is None:
                arrived = self._error_count()  # (a misnested cancel scope: trio's RuntimeError)
            exc = rest
        # A Cancelled that reaches here while the hosted tasks' nursery (which encloses the
        # body) is cancelled by the scope's own stop may be that nursery's or an enclosing
        # one's: it is taken as the scope's own, and `probe` checks, once outside that
        # nursery, for an enclosing cancellation (which is then raised as it would have been).
        # A body that a stop request shielded had any enclosing cancellation forwarded to
        # it by the watcher, as this scope's own (absorbed above): `probe` raises it again.
        probe = bool(body_cs.shield)
        if exc is not None and self._hosted_cancelled():
            exc, had = _without_cancelled(exc)
            probe = probe or had
        if body_exc is not None:
            if self._reason is None and not isinstance(body_exc, trio.Cancelled):
                self._reason = (
                    f"Code block inside {type(self).__name__} raised exception {body_exc!r}"
                )
            self._stop_work()  # counting_scope: request_stop() (docs/scopes.md)
            if _is_interrupt(body_exc):
                self._cancel_hosted()  # Ctrl-C in the body: the hosted tasks too
        cancelled: BaseException | None = None
        left: BaseException | None = None
        # Join without closing first: spawned work may still spawn siblings (docs/scopes.md).
        # The waiter (a trio Event) is made only if the count is not already zero.
        waiter = self._join_or_register(_TrioJoinWaiter)
        if waiter is not None:
            watched = begin_wait(self)  # tasks that detached their coroutine end (_detach)
            # counting_scope: once stop was requested the wait is inside the cancelled
            # nursery of the hosted tasks, so it waits shielded (a Ctrl-C still arrives).
            shielded = self._hosted_cancelled()
            grace = grace_of(self)  # docs/debugging.md: warn once the exit waited that long
            warn_at: list[float | None] | None = (
                None if grace is None else [trio.current_time() + grace]
            )
            while True:
                try:
                    if shielded:
                        with trio.CancelScope(shield=True):
                            if warn_at is None:
                                await waiter.event.wait()
                            else:
                                await self._wait_joined(waiter.event, warn_at)
                    elif warn_at is None:
                        await waiter.event.wait()
                    else:
                        await self._wait_joined(waiter.event, warn_at)
                    break
                except trio.Cancelled:
                    # The enclosing code was cancelled while joining: counting_scope
                    # requests stop; both keep joining, shielded (docs/scopes.md). As in a
                    # nursery's exit, this Cancelled of the wait itself is not raised: the
                    # probe below raises the enclosing cancellation only if the body or a
                    # hosted task was cancelled by it (a nursery is never the source of a
                    # Cancelled, it only passes on those of its children and body).
                    probe = True
                    self._stop_work()
                except BaseException as e:
                    if type(e) is GeneratorExit:
                        # The coroutine is being closed: its run is gone (it crashed), so
                        # nothing can end the wait; waiting again would loop forever.
                        raise
                    # KeyboardInterrupt (Ctrl-C) while waiting: cancel the hosted tasks
                    # (counting_scope: request stop), wait for them, then raise it.
                    self._interrupt(e)
                shielded = True
            end_wait(watched)
        cb = self._stop_cb
        if cb is not None:
            self._stop_cb = None
            cb.close()
        try:
            # Waits for the host only (everything it hosted has finished). An enclosing
            # cancellation does not interrupt a nursery's exit.
            await self._close_host()
        except BaseExceptionGroup as group:
            # The host nursery's own group (strict): trio's errors, such as "Nursery stack
            # corrupted" for a misnested child, are reported one by one, at the level a
            # nursery reports them.
            for member in group.exceptions:
                self._add_interrupt(member)
            del group, member
        except BaseException as e:  # a second Ctrl-C during the host's exit
            self._add_interrupt(e)
        finally:
            self._nursery = None
            self._spawn_env = EMPTY_ENV
            self._entered = False
        if probe and (self._cancel_seen or _has_cancelled(body_exc)):
            try:
                await trio.lowlevel.checkpoint_if_cancelled()
            except trio.Cancelled as c:
                cancelled = c
            except BaseException as e:  # pragma: no cover - a Ctrl-C at the probe
                self._add_interrupt(e)
        if not self._is_joined():  # pragma: no cover - defensive
            raise RuntimeError(f"{self!r} left its async with block without being joined")
        errors, interrupts = self._take_exit_report()  # reported now, for good
        out: BaseException | None
        ours = False  # out is a group made here
        if errors:
            # In order of arrival, as a nursery: the body's exception among the errors of
            # the work by when it left the body.
            excs = [as_exception(e) for e in errors]
            if exc is not None:
                excs.insert(arrived, exc)
            if cancelled is not None:
                excs.append(cancelled)
            excs.extend(interrupts)
            out, ours = BaseExceptionGroup(ERRORS_MESSAGE, excs), True
            del excs  # no cycle: this frame <- the traceback of an exception in the list
        elif interrupts:
            # The interrupt supersedes a cancellation (which only asked the scope to finish
            # early); the body's own exception goes with it.
            if exc is not None and not isinstance(exc, trio.Cancelled):
                interrupts.insert(0, exc)
            if len(interrupts) == 1:
                out = interrupts[0]
            else:
                out, ours = BaseExceptionGroup(_STRICT_MESSAGE, interrupts), True
        elif cancelled is not None and exc is None:
            out = cancelled
        else:
            out = exc
        strict = True if out is None else self._strict_now()
        if ours and not strict:
            out.add_note(_trio_compat.LOOSE_NOTE)  # type: ignore[union-attr]
        # Last, the block's own cancel scope (scope.cancel_scope): it absorbs its Cancelled.
        # (self._cancel_scope is kept: like nursery.cancel_scope, readable after the block)
        try:
            left = await self._exit_cancel_scope(out)
            if left is None:
                # only this scope's own cancellation (or nothing): absorbed
                return True if out is not None else body_exc is not None
            out = left
            if not strict:
                # As a non-strict nursery: a group made here carries trio's "loose" note and
                # is collapsed where it holds one exception (once the Cancelleds are gone);
                # a group of the user's own is left alone.
                if isinstance(out, BaseExceptionGroup):
                    out = _trio_compat.collapse_exception_group(out)
                if out is body_exc:
                    return False
            elif not ours and not isinstance(out, trio.Cancelled):
                # As trio.open_nursery() by default: whatever leaves the block comes out in
                # a group (a group from the body nested in it), so `except*` written for a
                # nursery works unchanged. A lone Cancelled (the block was cancelled from
                # outside, nothing failed) comes out bare, as from anyio's task group.
                out, ours = BaseExceptionGroup(_STRICT_MESSAGE, [out]), True
            if ours:
                out.__suppress_context__ = True
            # Keep the context the exception had: raising here would make it the body's
            # exception, which may be inside the group itself (a context loop).
            context = out.__context__
            try:
                raise out
            finally:
                out.__context__ = context
        finally:
            # No reference cycles through this frame's exceptions (nothing for the cycle
            # collector to find after an enclosing cancellation).
            del cancelled, exc, body_exc, interrupts, errors, out, left


def _introspect_tree(scope: Any) -> str:
    """``scope``'s operation tree as text; the introspection module is imported when first
    needed, not by ``import structexec``."""
    from . import _introspect

    return _introspect.format_tree(_introspect.scope_info(scope))


_WRAPPERS = frozenset((_hosted.__code__, NurseryFace._hosted_start.__code__, _guarded.__code__))
HOSTED_CODES.update(
    {
        _hosted.__code__: "start_soon",
        NurseryFace._hosted_start.__code__: "start",
        _guarded.__code__: "guarded",
    }
)


def _release_hosted(f: dict[str, Any]) -> None:
    """A ``start_soon``/``start`` task detached its coroutine (``_detach``): it has ended,
    as a nursery sees it; its association is released now, not by the wrapper's finally."""
    key = id(f["coro"])
    if key not in DETACHED:
        DETACHED.add(key)
        scope = f.get("scope") or f["self"]
        scope._wrappers -= 1
        scope._disassociate()


def _release_guarded(f: dict[str, Any]) -> None:
    """A hosted coroutine sender's task detached its coroutine: its outcome will never
    reach trio, so the operation completes stopped now (``TrioHostedOp.detached``)."""
    fn = f["async_fn"]
    detached = getattr(getattr(fn, "__self__", None), "detached", None)
    if detached is not None and id(fn) not in DETACHED:
        DETACHED.add(id(fn))
        f["scope"]._wrappers -= 1
        detached()


RELEASE[_hosted.__code__] = _release_hosted
RELEASE[NurseryFace._hosted_start.__code__] = _release_hosted
RELEASE[_guarded.__code__] = _release_guarded


class _ScopeEnv(TryEnv):
    """The env given to work spawned through ``scope.spawn`` inside ``async with``: the host
    nursery for coroutine senders (docs/scopes.md, ``trio_host_nursery``: a
    :class:`_HostNursery`, made when first asked for), the trio run (``trio_run``, as
    ``host_env``) and the run's trio scheduler as ``get_scheduler``."""

    __slots__ = ("_host", "_nursery", "_run", "_scope")
    _unsupported = "the environment of a scope's work does not support {q!r}"

    def __init__(self, scope: Any, nursery: Any, run: RunState) -> None:
        self._scope = scope
        self._nursery = nursery
        self._run = run
        self._host: Any = None

    def _sx_try(self, q: Any, default: Any) -> Any:
        if q is get_scheduler:
            return self._run.sched
        if q is trio_host_nursery:
            h = self._host
            if h is None:
                h = self._host = _HostNursery(self._scope, self._nursery)
            return h
        if q is trio_run:
            return self._run
        return default

    def __repr__(self) -> str:
        return f"<environment of {self._scope!r}>"


class SimpleHost(NurseryFace):
    """How ``simple_counting_scope`` hosts its trio tasks ([exec.scope.simple.counting])."""

    __slots__ = ("_host_cm", "_host_release")
    _host_cm: Any
    _host_release: Any

    # The work of a simple_counting_scope cannot be cancelled, but the `async with` body
    # can: its hosted tasks live in a shielded nursery that a host task opens beside the
    # body (a nursery the opener's task opened would enclose, and so shield, the body).

    async def _open_host(self) -> trio.CancelScope:
        cs = trio.CancelScope()
        cs.__enter__()
        try:
            await self._open_host_nursery()
        except BaseException as exc:  # pragma: no cover - opening a nursery does not block
            cs.__exit__(type(exc), exc, exc.__traceback__)
            raise
        return cs

    async def _open_host_nursery(self) -> None:
        self._host_release = trio.Event()
        cm = trio.open_nursery(strict_exception_groups=True)
        outer = await cm.__aenter__()
        try:
            # Shielded: in an already-cancelled context trio would not let the host report
            # started(), and entering would never finish. The host starts at once anyway.
            with trio.CancelScope(shield=True):
                self._nursery = await outer.start(self._host, name=_HOST_TASK_NAME)
        except BaseException as exc:
            self._host_release.set()
            await cm.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        self._host_cm = cm

    async def _host(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        # The nursery that hosts the scope's trio tasks. It stays open until the scope has
        # joined, so work may be started even after the body has left.
        async with trio.open_nursery(strict_exception_groups=True) as inner:
            inner.cancel_scope.shield = True  # nothing but an interrupt cancels its tasks
            task_status.started(inner)
            try:
                await self._host_release.wait()
            except trio.Cancelled:
                if self._parent_task is not None and _task_finished(self._parent_task):
                    # Misnesting: the task that entered the scope ended inside the block
                    # (trio cancels the nurseries it abandoned and raises "Nursery stack
                    # corrupted" there). No exit will release the host: it ends now.
                    self._abandon()
                    return
                with trio.CancelScope(shield=True):
                    await self._host_release.wait()

    def _abandon(self) -> None:
        super()._abandon()
        self._host_release.set()

    async def _close_host(self) -> None:
        self._host_release.set()
        cm, self._host_cm = self._host_cm, None
        await cm.__aexit__(None, None, None)



class CountingHost(NurseryFace):
    """How ``counting_scope`` hosts its trio tasks and stops them ([exec.scope.counting])."""

    __slots__ = (
        "_coro_env",
        "_coro_fwd_env",
        "_coro_scopes",
        "_grace_cs",
        "_source",
        "_stop_env",
        "_stop_token",
        "_watch_cm",
        "_watch_nursery",
        "_watch_release",
        "_work_cm",
    )

    def __init__(
        self,
        *,
        strict_exception_groups: bool | None = None,
        name: str | None = None,
        stop_grace: float | None = None,
    ) -> None:
        NurseryFace.__init__(
            self, strict_exception_groups=strict_exception_groups, name=name, stop_grace=stop_grace
        )
        self._grace_cs: Any = None
        self._source = inplace_stop_source()
        self._stop_token = self._source.get_token()
        self._stop_env = StopTokenEnv(self._stop_token, EMPTY_ENV)
        self._watch_cm: Any = None
        self._watch_nursery: Any = None
        self._watch_release: trio.Event | None = None
        self._work_cm: Any = None
        # Inside `async with`: the cancel scopes of the running tasks of coroutines spawned on
        # the direct path (_spawn_coro), cancelled with the hosted nursery; and their env.
        self._coro_scopes: set[trio.CancelScope] | None = None
        self._coro_env: Any = None
        self._coro_fwd_env: Any = None

    def _stopping(self) -> bool:
        # A hosted task of a counting_scope is cancelled by a stop of the scope (its
        # request_stop(), an error), by its cancel_scope or by an enclosing cancellation
        # (which the body or the exit then turns into request_stop()). Either way the task
        # ends stopped.
        return True

    # The hosted tasks live in a nursery the opener's task opens (so the task tree is
    # trio's: each child's parent is the task that entered `async with`, no task in
    # between). The body runs inside that nursery, so a stop request, which must cancel
    # the hosted tasks and not the body, first shields the body and then cancels the
    # nursery. A shielded body no longer sees an enclosing cancellation: a watcher task,
    # started only then in a second nursery outside the first, forwards one to it.
    #
    #     watcher nursery > hosted nursery > body's cancel scope > body
    #
    # The watcher nursery's cancel scope is the block's own (``scope.cancel_scope``), as a
    # nursery's is: one cancel scope fewer to enter and leave. It is left last in
    # ``__aexit__`` (:meth:`_exit_cancel_scope`), with what leaves the block.

    async def _open_host(self) -> trio.CancelScope:
        watch_cm = trio.open_nursery(strict_exception_groups=True)
        watch = self._watch_nursery = await watch_cm.__aenter__()
        work_cm = trio.open_nursery(strict_exception_groups=True)
        try:
            self._nursery = await work_cm.__aenter__()
        except BaseException as exc:  # pragma: no cover - opening a nursery does not block
            await watch_cm.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        self._watch_cm = watch_cm
        self._work_cm = work_cm
        self._coro_scopes = set()
        cs: trio.CancelScope = watch.cancel_scope
        return cs

    async def _close_host(self) -> None:
        gcs = self._grace_cs
        if gcs is not None:
            gcs.cancel()  # the stuck-work watcher: everything has finished
        release = self._watch_release
        if release is not None:
            self._watch_release = None
            release.set()
        work_cm, self._work_cm = self._work_cm, None
        self._watch_nursery = None
        self._coro_scopes = None
        self._coro_env = None
        self._coro_fwd_env = None
        await work_cm.__aexit__(None, None, None)

    async def _exit_cancel_scope(self, out: BaseException | None) -> BaseException | None:
        # The watcher nursery's exit (see above): it also waits for a watcher that is still
        # finishing (released by _close_host). A strict nursery puts what leaves it in a
        # group: a lone exception is taken back out of it.
        cm, self._watch_cm = self._watch_cm, None
        try:
            if out is None:
                await cm.__aexit__(None, None, None)
                return None
            if await cm.__aexit__(type(out), out, out.__traceback__):
                return None
            return out  # pragma: no cover - a strict nursery makes a new group
        except BaseExceptionGroup as group:
            if group is not out and len(group.exceptions) == 1:
                lone: BaseException = group.exceptions[0]
                return lone
            whole: BaseException = group
            return whole
        except BaseException as rest:  # pragma: no cover - a strict nursery raises groups
            return rest

    def _hosted_cancelled(self) -> bool:
        n = self._nursery
        return n is not None and bool(n.cancel_scope.cancel_called)

    def _cancel_hosted(self) -> None:
        if self._stop_since is None:
            self._stop_since = time.monotonic()
        if self._nursery is not None:
            self._in_trio(self._stop_hosted)

    def _stop_hosted(self) -> None:
        """On the trio thread: cancel the hosted tasks, not the body (see above)."""
        n = self._nursery
        if n is None:
            return
        grace = grace_of(self)
        wn = self._watch_nursery
        if grace is not None and self._grace_cs is None and wn is not None:
            cs = self._grace_cs = trio.CancelScope()
            wn.start_soon(self._grace_watch, cs, grace, name=_GRACE_TASK_NAME)
        body = self._body_cs
        if (
            body is not None
            and not body.shield
            and not body.cancel_called
            and not self._cancel_scope.cancel_called
        ):
            body.shield = True
            self._watch_release = trio.Event()
            self._watch_nursery.start_soon(
                self._watch, self._watch_release, name=_WATCH_TASK_NAME
            )
        _cancel(n.cancel_scope, self._reason)
        scopes = self._coro_scopes
        if scopes:
            for cs in list(scopes):
                cs.cancel()

    async def _grace_watch(self, cs: trio.CancelScope, grace: float) -> None:
        """Runs from a stop request with a ``stop_grace`` until the scope closes its host:
        after ``grace`` seconds, one :class:`StuckWorkWarning` per operation still running
        (docs/debugging.md)."""
        with cs:
            await trio.sleep(grace)
            from . import _introspect  # imported when first needed, not by `import structexec`

            for op in _introspect.outstanding(self):
                where = f" (spawned at {op.spawned_at})" if op.spawned_at else ""
                safe_warn(
                    self,
                    f"{op.kind} {op.description}{where} has ignored the stop request of "
                    f"{scope_label(self)} for {grace:g} s; it is {op.state}"
                )

    async def _watch(self, release: trio.Event) -> None:
        """Runs from a stop request while the body runs until the body leaves: forwards a
        cancellation of the enclosing code (or of ``scope.cancel_scope``) to the body,
        which the stop request shielded."""
        try:
            await release.wait()
        except trio.Cancelled:
            self._cancel_body()
            # Returning ends the task; the cancellation is trio's to deliver to the body.

    def _on_enter(self) -> None:
        self._stop_cb = inplace_stop_callback(self._stop_token, self._cancel_hosted)

    def _stop_work(self) -> None:
        self._source.request_stop()

    def _cancel_for_interrupt(self) -> None:
        # The body first (then the stop request need not shield it), then the hosted tasks
        # through the stop callback.
        self._cancel_body()
        self._source.request_stop()
