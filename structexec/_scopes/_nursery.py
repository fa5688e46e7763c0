"""The nursery face of the counting scopes: ``async with``, ``start_soon``, ``start``,
``cancel_scope``.

the scopes guide "The nursery face: `async with`" and "What happens when things fail";
[exec.scope.simple.counting], [exec.scope.counting].

:class:`NurseryFace` is what both scopes share as trio nurseries. It is made of objects, as
trio splits ``NurseryManager``, ``Nursery`` and ``CancelScope``:

* the association state (count, state, lock, joins, what the join reports) is an
  ``_state.AssociationState`` the scope owns (``_assoc``): this module only calls its methods;
* the trio nurseries and the tasks that watch them belong to a host object made at
  ``__aenter__`` (``_hosts.SimpleHost`` or ``_hosts.CountingHost``, the scope class's
  ``_host_type``);
* the hosted tasks' wrappers and the environment of the scope's work are ``_hosted``'s;
* the exit is ``_exit``'s: pure functions that work out what leaves the block, the coroutine
  that waits for the join, and the helper that raises keeping the context.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Awaitable, Callable
from functools import partial
from types import CoroutineType as _CoroutineType
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import trio

from .._core._env import EMPTY_ENV
from .._core._errors import Stopped as _Stopped
from .._core._stop_token import inplace_stop_callback
from .._trio import _trio_compat
from .._trio._detach import begin_wait, end_wait
from .._trio._trio_bridge import RunState, call_in_run, current_run
from ._exit import (
    combine,
    finish,
    has_cancelled,
    introspect_tree,
    is_interrupt,
    join_hosted,
    raise_keeping_context,
    without_cancelled,
)
from ._hosted import ScopeEnv, coroutine_of, hosted_start_task, hosted_task
from ._hosts import Host, cancel, safe_warn
from ._join import _TrioJoinWaiter
from ._site import (
    OPEN_SCOPES as _OPEN_SCOPES,  # the scopes the task is in, innermost first (_site)
)
from ._site import (
    USER_FILES,
    check_grace,
    enter_site,
    grace_of,
    no_trio_message,
    scope_label,
)
from ._spawn import as_exception
from ._state import AssociationState

if TYPE_CHECKING:
    from .._core._stop_token import inplace_stop_callback as _StopCallback
    from .._core._stop_token import inplace_stop_token
    from ._site import EnterSite

enable_ki_protection = trio.lowlevel.enable_ki_protection

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup  # type: ignore[import-not-found, unused-ignore]

__all__: list[str] = []

_Scope = TypeVar("_Scope", bound="NurseryFace")


class NurseryFace:
    """The nursery behaviour shared by both scopes (the scopes guide "The nursery face")."""

    __slots__ = (
        "__weakref__",
        "_assoc",
        "_body_cs",
        "_cancel_scope",
        "_cancel_seen",
        "_coro_env",
        "_coro_fwd_env",
        "_coro_scopes",
        "_enter_site",
        "_entered",
        "_host",
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

    #: The host the scope makes at ``async with`` (``_hosts``), and whether a ``Cancelled``
    #: of a hosted task is the scope's own stop (``Host.stops``).
    _host_type: ClassVar[type[Host]]
    _host_stops: ClassVar[bool] = False
    #: counting_scope's stop token (its slot; simple_counting_scope has none).
    _stop_token: inplace_stop_token | None = None
    #: The most associations the scope holds at once ([exec.counting.scopes]); a subclass
    #: may lower it (read when the scope is made).
    max_associations: ClassVar[int] = sys.maxsize

    def __init__(
        self,
        strict_exception_groups: bool | None = None,
        name: str | None = None,
        stop_grace: float | None = None,
    ) -> None:
        # The association state, and the scope's label in its messages and in repr().
        label = type(self).__name__ if name is None else f"{type(self).__name__} {str(name)!r}"
        self._assoc = AssociationState(self.max_associations, label)
        # None: the trio run's setting, read when something leaves the block (as
        # trio.open_nursery(), whose setting is the run's).
        self._strict = strict_exception_groups
        # docs/debugging.md: the name in notes, trees and reprs; the stuck-work warnings;
        # when stop was requested (time.monotonic(), for the tree).
        self._name = None if name is None else str(name)
        self._stop_grace = None if stop_grace is None else check_grace(stop_grace)
        self._stop_since: float | None = None
        self._entered = False
        self._cancel_seen = False  # a hosted task ended with trio.Cancelled (see __aexit__)
        self._body_cs: trio.CancelScope | None = None
        self._cancel_scope: trio.CancelScope | None = None
        self._parent_task: trio.lowlevel.Task | None = None
        self._reason: str | None = None  # the cancel reason trio tasks will see
        self._nursery: trio.Nursery | None = None
        self._host: Host | None = None
        self._spawn_env: object = EMPTY_ENV
        # counting_scope inside `async with`: the cancel scopes of the running tasks of
        # coroutines spawned on the direct path (_spawn_coro), cancelled with the hosted
        # nursery (the host sets and clears it), and their env. simple_counting_scope: None
        # (no direct path for coroutines).
        self._coro_scopes: set[trio.CancelScope] | None = None
        self._coro_env: object = None
        self._coro_fwd_env: object = None
        self._stop_cb: _StopCallback | None = None
        self._run: RunState | None = None  # the trio run that entered `async with`
        self._enter_site: EnterSite = None

    def _record_error(self, err: object) -> None:
        """An error of spawned work or of a hosted task, kept for the join: errors enter the
        association state only here, so that ``counting_scope`` can react to each."""
        self._assoc.record_error(err)

    # -- KeyboardInterrupt, SystemExit, ... (never error datums)

    def _interrupt(self, exc: BaseException) -> None:
        """A ``BaseException`` that is not a cancellation reached the scope (a hosted task
        raised it, or it hit ``__aexit__`` while it waited, e.g. Ctrl-C): as in a nursery,
        the hosted tasks and the ``async with`` body are cancelled, ``counting_scope``
        requests stop on its work, and the block raises it once everything has finished."""
        self._assoc.add_interrupt(exc)
        self._cancel_for_interrupt()

    def _task_raised(self, e: BaseException) -> bool:
        """A hosted task let ``e`` escape (a ``BaseException`` that is not a lone
        ``Exception``, ``Cancelled`` or ``Stopped``: an interrupt, or a group, say from the
        task's own nursery). ``True``: re-raise it into the host nursery (trio
        cancellations the scope did not ask for, which trio's cancel scopes absorb)."""
        if isinstance(e, BaseExceptionGroup):
            rest = e.split((trio.Cancelled, _Stopped))[1]
            if rest is None:
                # Only cancellations and stops: the task ended cancelled or stopped.
                cancelled = e.split(trio.Cancelled)[0]
                return cancelled is not None and not self._host_stops
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

    def _stop_work(self) -> None:
        """The body raised, or the block was cancelled from outside: counting_scope requests
        stop on its work ([exec.scope.counting]); simple_counting_scope's cannot be stopped."""

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
            coroutine_of("start_soon", fn, args).close()  # raises the right TypeError
        if not self._assoc.try_associate():
            raise RuntimeError(
                f"scope.start_soon(): {self!r} does not accept new work (it was closed, or "
                "max_associations is reached); the task was not started"
            )
        f = sys._getframe(1)  # the caller, for notes and trees (docs/debugging.md)
        try:
            nursery.start_soon(
                hosted_task, self, fn, args, (f.f_code, f.f_lasti),
                name=async_fn if name is None else name,
            )
        except BaseException:
            self._assoc.disassociate()
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
        (the scopes guide).
        """
        nursery = self._nursery
        if nursery is None:
            raise RuntimeError(self._not_entered("start"))
        if not callable(async_fn):
            raise TypeError(f"start() expected an async function, got {type(async_fn).__name__}")
        if not self._assoc.try_associate():
            raise RuntimeError(
                f"scope.start(): {self!r} does not accept new work (it is closed or joined)"
            )
        ran = [False]
        f = sys._getframe(1)
        self._wrappers += 1
        try:
            if not self._host_cancelled():
                return await nursery.start(
                    hosted_start_task, self, async_fn, args, ran, (f.f_code, f.f_lasti),
                    name=async_fn if name is None else name,
                )
            # Stop was requested: as nursery.start() into a cancelled nursery, the task runs
            # under start() cancelled, and a Cancelled before started() comes out of start()
            # (the block absorbs it, as the scope's own). The body itself stays uncancelled.
            caught: BaseException | None = None
            with trio.CancelScope() as cs:
                cancel(cs, self._reason)
                try:
                    return await nursery.start(
                        hosted_start_task, self, async_fn, args, ran, (f.f_code, f.f_lasti),
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
                self._assoc.disassociate()
            raise

    def _not_entered(self, what: str) -> str:
        return (
            f"scope.{what}() hosts a trio task, so it needs the scope to be open as a "
            f"nursery: use it inside `async with {type(self).__name__}() as scope:` "
            f"({self!r}); to spawn from elsewhere use sx.spawn(coro, scope.get_token())"
        )

    def _host_cancelled(self) -> bool:
        """Whether the code of the ``async with`` exit runs inside a nursery of hosted tasks
        that the scope itself cancelled (counting_scope after a stop request)."""
        host = self._host
        return host is not None and host.hosted_cancelled(self)

    def _cancel_hosted(self) -> None:
        """Cancel the hosted tasks (counting_scope: and stop them), from any thread."""
        host = self._host
        if host is not None:
            host.cancel_hosted(self)

    def _cancel_in_trio(self, cs: trio.CancelScope) -> None:
        """``cs.cancel()`` now on the trio thread, else queued to it (any thread may call);
        with the reason the scope has for it (``Cancelled.reason``), where trio has one."""
        self._in_trio(partial(cancel, cs, self._reason))

    def _in_trio(self, fn: Callable[[], object]) -> None:
        """``fn()`` now on the trio thread that entered the scope, else queued to it."""
        run = self._run
        if run is not None:
            call_in_run(run, fn)

    def _abandon(self) -> None:
        """The block will never be left properly (misnesting, see ``__aexit__``): cancel the
        hosted tasks (counting_scope: request stop), so that trio reports the misnesting
        instead of finding a task left behind."""
        self._stop_work()
        self._cancel_hosted()
        host = self._host
        if host is not None:
            host.abandon()

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

    # -- async with: entering

    @enable_ki_protection
    async def __aenter__(self: _Scope) -> _Scope:
        if self._entered:
            raise RuntimeError(f"{self!r} is already open as a nursery (async with)")
        if self._assoc.joining_or_joined():
            raise RuntimeError(
                f"`async with` on {self!r}: the scope is {self._assoc.state}, so it cannot "
                "host new work; create a new scope"
            )
        try:
            run = current_run()
        except RuntimeError:
            raise RuntimeError(no_trio_message(type(self).__name__)) from None
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
        host = self._host = self._host_type()
        try:
            self._cancel_scope = await host.open(self)
        except BaseException:  # pragma: no cover - opening a nursery does not block
            self._entered = False
            raise
        nursery = self._nursery
        assert nursery is not None
        self._spawn_env = ScopeEnv(self, nursery, run)
        token = self._stop_token
        if token is not None:
            self._stop_cb = inplace_stop_callback(token, self._cancel_hosted)
        # The body's own cancel scope (exited first thing in __aexit__): counting_scope
        # cancels it when spawned work fails, as a nursery cancels its body.
        body = self._body_cs = trio.CancelScope()
        body.__enter__()
        _OPEN_SCOPES.set((self, _OPEN_SCOPES.get()))
        return self

    # -- async with: leaving

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
                f"for {self._assoc.count} associated operation(s):\n"
                + introspect_tree(self)
            )
        await event.wait()

    def _grace_deadline(self) -> list[float | None] | None:
        """With a ``stop_grace`` (the debugging guide): when the exit's wait is to warn."""
        grace = grace_of(self)
        return None if grace is None else [trio.current_time() + grace]

    def _pop_misnested(self, node: tuple[Any, Any] | None) -> None:
        """Take this scope off the task's list of open scopes (``node``), when it is not the
        innermost. Scopes entered after it in this task and still open are misnested
        (entered, never left): trio raises "Cancel scope stack corrupted" at this exit and
        "Nursery stack corrupted" when the task ends; they are abandoned, so that no host
        task of theirs is left waiting forever."""
        if node is None:
            return  # left in another task than the one that entered it (trio raises)
        inner = []
        while node is not None and node[0] is not self:
            inner.append(node[0])
            node = node[1]
        if node is None:
            return  # not entered in this task: nothing of this task's list is ours
        _OPEN_SCOPES.set(node[1])
        for scope in inner:
            scope._abandon()

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
        errors, interrupts = self._assoc.take_exit_report()
        strict = self._strict_now()
        errs = [as_exception(e) for e in errors]
        out, ours = combine(errs, interrupts, exc, len(errs), None, strict)
        del errors, interrupts, errs
        raised = None
        try:
            raised = None if out is None else finish(out, exc, ours, strict)
            if raised is None:
                return False
            raise_keeping_context(raised, ours or raised is not out)
        finally:
            del exc, out, raised

    def _leave_body(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> tuple[BaseException | None, int, bool]:
        """Leave the body's own cancel scope with the body's exception ``exc``: what is left
        of it (``None``: nothing), how many errors arrived before it, and whether the exit
        must probe for an enclosing cancellation once outside the hosted nursery.

        A ``Cancelled`` that reaches here while the hosted tasks' nursery (which encloses the
        body) is cancelled by the scope's own stop may be that nursery's or an enclosing
        one's: it is taken as the scope's own, and the probe checks. A body that a stop
        request shielded had any enclosing cancellation forwarded to it by the watcher, as
        this scope's own (absorbed here): the probe raises it again."""
        arrived = 0 if exc is None else self._assoc.error_count()
        body_cs = self._body_cs
        self._body_cs = None
        try:
            try:
                if body_cs is not None and body_cs.__exit__(exc_type, exc, tb):
                    exc = None  # the body was cancelled by this scope, because work failed
            except BaseException as rest:  # what is left once this scope's Cancelled is gone
                if exc is None:
                    arrived = self._assoc.error_count()  # (a misnested cancel scope: trio's error)
                exc = rest
            probe = body_cs is not None and body_cs.shield
            if exc is not None and self._host_cancelled():
                exc, had = without_cancelled(exc)
                probe = probe or had
            return exc, arrived, probe
        finally:
            del exc, exc_type, tb

    def _body_exit_raised(self, rest: BaseException) -> tuple[BaseException | None, int, bool]:
        """Leaving the cancel scope of a body that left normally raised ``rest`` (a cancel
        scope misnested inside the body: trio's error): as :meth:`_leave_body` then."""
        try:
            arrived = self._assoc.error_count()
            probe = False
            exc: BaseException | None = rest
            if self._host_cancelled():
                exc, probe = without_cancelled(rest)
            return exc, arrived, probe
        finally:
            del rest

    def _body_raised(self, body_exc: BaseException) -> None:
        """The body raised ``body_exc``: counting_scope requests stop on its work
        (the scopes guide); a Ctrl-C in the body cancels the hosted tasks too."""
        if self._reason is None and not isinstance(body_exc, trio.Cancelled):
            self._reason = f"Code block inside {type(self).__name__} raised exception {body_exc!r}"
        self._stop_work()
        if is_interrupt(body_exc):
            self._cancel_hosted()

    async def _probe(self) -> BaseException | None:
        """Once outside the hosted nursery: the enclosing cancellation, if there is one, to
        pass on (as a nursery passes on the ``Cancelled`` of its body and children)."""
        try:
            await trio.lowlevel.checkpoint_if_cancelled()
        except trio.Cancelled as c:
            return c
        except BaseException as e:  # pragma: no cover - a Ctrl-C at the probe
            self._assoc.add_interrupt(e)
        return None

    def _outcome(
        self, exc: BaseException | None, arrived: int, cancelled: BaseException | None
    ) -> tuple[BaseException | None, bool, bool]:
        """What is handed to the block's own cancel scope (``_exit.combine``), whether it is a
        group made here, and the strictness (read only when something leaves the block)."""
        if not self._assoc.is_joined():  # pragma: no cover - defensive
            raise RuntimeError(f"{self!r} left its async with block without being joined")
        errors, interrupts = self._assoc.take_exit_report()  # reported now, for good
        if errors or interrupts or cancelled is not None:
            strict = self._strict_now()
            errs = [as_exception(e) for e in errors]
            del errors
            out, ours = combine(errs, interrupts, exc, arrived, cancelled, strict)
            return out, ours, strict
        return exc, False, True if exc is None else self._strict_now()

    def _raise(
        self,
        left: BaseException | None,
        out: BaseException | None,
        body_exc: BaseException | None,
        ours: bool,
        strict: bool,
    ) -> bool:
        """The end of the exit, once the block's own cancel scope has absorbed its
        ``Cancelled`` (``left``: what is left of ``out``): raise what leaves the block
        (``_exit.finish``, ``_exit.raise_keeping_context``), or say whether to swallow the
        body's exception (the scope's ``cancel_scope`` stays readable after the block, like
        ``nursery.cancel_scope``)."""
        if left is None:
            # only this scope's own cancellation (or nothing): absorbed
            return True if out is not None else body_exc is not None
        raised = finish(left, body_exc, ours, strict)
        if raised is None:
            return False
        try:
            raise_keeping_context(raised, ours or raised is not left)
        finally:
            del raised, left, out, body_exc

    @enable_ki_protection
    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        # KI-protected, like trio's own nursery exit: a Ctrl-C arrives as KeyboardInterrupt
        # at the wait (never halfway through the bookkeeping), and the scope still joins and
        # closes its host nursery before the KeyboardInterrupt propagates.
        if not self._entered:
            raise RuntimeError(f"{self!r}: __aexit__ without __aenter__")
        try:
            ended = self._parent_task.coro.cr_frame is None  # type: ignore[union-attr]
        except AttributeError:  # pragma: no cover - a task whose coroutine is not native
            ended = False
        if ended:
            return self._exit_abandoned(exc)  # the task that entered the block has ended
        body_exc = exc
        cancelled = out = left = None
        node = _OPEN_SCOPES.get()
        body_cs = self._body_cs
        if node is not None and node[0] is self:
            _OPEN_SCOPES.set(node[1])
            # The common case (benchmarks/README.md, the empty block): the body left without
            # an exception and was not shielded by a stop request; then leaving the body,
            # and, if nothing is left to wait for, the rest of the exit, take a short path.
            fast = exc is None and body_cs is not None and not body_cs.shield
        else:
            self._pop_misnested(node)
            fast = False
        try:
            if fast:
                assert body_cs is not None
                self._body_cs = None
                arrived, probe = 0, False
                try:
                    body_cs.__exit__(None, None, None)
                except BaseException as rest:  # a misnested cancel scope: trio's error
                    exc, arrived, probe = self._body_exit_raised(rest)
                del body_cs
            else:
                del body_cs
                exc, arrived, probe = self._leave_body(exc_type, exc, tb)
                if body_exc is not None:
                    self._body_raised(body_exc)
            # Join without closing first: spawned work may still spawn siblings
            # (docs/scopes.md). The waiter (a trio Event) is made only if there is work.
            waiter = self._assoc.join_or_register(_TrioJoinWaiter)
            host = self._host
            assert host is not None
            if waiter is None:
                if exc is None and not probe and not self._cancel_seen:
                    await host.close(self)
                    if not self._assoc.has_report():
                        # Nothing to report: leave the block's cancel scope.
                        left = await host.exit_cancel_scope(self, None)
                        return False if left is None else self._raise(left, None, None, False, True)
                    out, ours, strict = self._outcome(None, arrived, None)
                    left = await host.exit_cancel_scope(self, out)
                    return self._raise(left, out, None, ours, strict)
            else:
                watched = begin_wait(self)  # tasks that detached their coroutine end (_detach)
                if await join_hosted(self, waiter, self._host_cancelled()):
                    probe = True
                end_wait(watched)
            await host.close(self)
            if self._cancel_seen or (probe and has_cancelled(body_exc)):
                cancelled = await self._probe()
            out, ours, strict = self._outcome(exc, arrived, cancelled)
            left = await host.exit_cancel_scope(self, out)
            return self._raise(left, out, body_exc, ours, strict)
        finally:
            # No reference cycles through this frame's exceptions (nothing for the cycle
            # collector to find after an enclosing cancellation).
            del exc, body_exc, exc_type, tb, cancelled, out, left
