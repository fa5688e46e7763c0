"""The two ways a counting scope hosts its trio tasks inside ``async with``.

[exec.scope.simple.counting], [exec.scope.counting]; the scopes guide "The nursery face".

A scope makes one host object when its block is entered (``NurseryFace.__aenter__``) and
it owns the trio nurseries of the block and the tasks that watch them:

* :class:`SimpleHost` (``simple_counting_scope``): the work cannot be cancelled, so its tasks
  live in a shielded nursery that a host task opens beside the body;
* :class:`CountingHost` (``counting_scope``): the tasks live in a nursery of the task that
  entered the block (trio's task tree), and a stop request cancels that nursery but not the
  body (the watcher forwards an enclosing cancellation to the body it shielded).

A host keeps no reference to its scope (no reference cycle): each method takes the scope.
"""

from __future__ import annotations

import inspect
import sys
import time
from contextlib import AbstractAsyncContextManager
from functools import partial
from typing import TYPE_CHECKING, ClassVar

import trio

from .._core._env import EMPTY_ENV
from ._hosted import task_finished
from ._site import grace_of, scope_label, warn_stuck

if TYPE_CHECKING:
    from ._nursery import NurseryFace

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup  # type: ignore[import-not-found, unused-ignore]

__all__: list[str] = []

#: trio >= 0.31 takes a reason for a cancellation (Cancelled.reason).
_CANCEL_REASONS = "reason" in inspect.signature(trio.CancelScope.cancel).parameters
# The trio names of the scopes' own tasks, as they were when these were methods of the
# public classes (trio names a task after its function: module and qualified name).
_HOST_TASK_NAME = "structexec._scopes._counting_scope.simple_counting_scope._host"
_WATCH_TASK_NAME = "structexec._scopes._counting_scope.counting_scope._watch"
_GRACE_TASK_NAME = "structexec stop_grace watcher"


def cancel(cs: trio.CancelScope, reason: str | None) -> None:
    """``cs.cancel()``, with ``reason`` where trio takes one (``Cancelled.reason``)."""
    if reason is None or not _CANCEL_REASONS:
        cs.cancel()
    else:
        cs.cancel(reason=reason)


def safe_warn(scope: NurseryFace, message: str) -> None:
    """Issue a :class:`StuckWorkWarning` about ``scope``, attributed to the user's line that
    entered it (``_site.warn_stuck``); shown, never raised, when a filter makes it an error."""
    warn_stuck(message, scope._enter_site)


class Host:
    """What both hosts do alike; the protocol ``NurseryFace`` uses."""

    __slots__ = ()

    #: Whether a ``Cancelled`` a hosted task sees is the scope's own stop (the task then
    #: ends stopped) rather than something to pass on.
    stops: ClassVar[bool] = False

    async def open(self, scope: NurseryFace) -> trio.CancelScope:
        """Enter the block's cancel scope (``scope.cancel_scope``, returned) and open, inside
        it, the trio nursery that hosts the scope's tasks (``scope._nursery``)."""
        raise NotImplementedError  # pragma: no cover - each host has its own

    async def close(self, scope: NurseryFace) -> None:
        """Close what :meth:`open` opened, once the scope has joined (nothing hosted is
        left running). An enclosing cancellation does not interrupt a nursery's exit; trio's
        errors of the host nursery (such as "Nursery stack corrupted" for a misnested child)
        are reported one by one, at the level a nursery reports them, as is a second Ctrl-C
        during the exit."""
        cb = scope._stop_cb
        if cb is not None:
            scope._stop_cb = None
            cb.close()
        try:
            cm = self._release(scope)
            if cm is not None:
                await cm.__aexit__(None, None, None)
        except BaseExceptionGroup as group:
            for member in group.exceptions:
                scope._assoc.add_interrupt(member)
            del group, member
        except BaseException as e:
            scope._assoc.add_interrupt(e)
        finally:
            scope._nursery = None
            scope._spawn_env = EMPTY_ENV
            scope._entered = False

    def _release(self, scope: NurseryFace) -> AbstractAsyncContextManager[trio.Nursery] | None:
        """Let the host's tasks end; the nursery manager to exit."""
        raise NotImplementedError  # pragma: no cover - each host has its own

    async def exit_cancel_scope(
        self, scope: NurseryFace, out: BaseException | None
    ) -> BaseException | None:
        """Leave the block's cancel scope, last thing in the exit, with ``out`` (what is to
        leave the block): what is left of it once the scope's own ``Cancelled`` is removed
        (``None``: nothing, or absorbed)."""
        cs = scope._cancel_scope
        assert cs is not None
        try:
            if out is None:
                cs.__exit__(None, None, None)
                return None
            if cs.__exit__(type(out), out, out.__traceback__):
                return None
            return out
        except BaseException as rest:
            return rest

    def hosted_cancelled(self, scope: NurseryFace) -> bool:
        """Whether the exit runs inside a nursery of hosted tasks that the scope itself
        cancelled (``counting_scope`` after a stop request)."""
        return False

    def cancel_hosted(self, scope: NurseryFace) -> None:
        """Cancel the hosted tasks, from any thread."""
        n = scope._nursery
        if n is not None:
            scope._cancel_in_trio(n.cancel_scope)

    def abandon(self) -> None:
        """The block will never be left properly (misnesting): nothing waits for the host."""


class SimpleHost(Host):
    """How ``simple_counting_scope`` hosts its trio tasks ([exec.scope.simple.counting]).

    The work of a ``simple_counting_scope`` cannot be cancelled, but the ``async with`` body
    can: its hosted tasks live in a shielded nursery that a host task opens beside the body
    (a nursery the opener's task opened would enclose, and so shield, the body)."""

    __slots__ = ("_cm", "_released")

    _cm: AbstractAsyncContextManager[trio.Nursery] | None
    _released: trio.Event

    # (No __init__: the scope makes its host at every `async with`; open() sets it up.)

    async def open(self, scope: NurseryFace) -> trio.CancelScope:
        self._released = trio.Event()
        self._cm = None
        cs = trio.CancelScope()
        cs.__enter__()
        try:
            await self._open_nursery(scope)
        except BaseException as exc:  # pragma: no cover - opening a nursery does not block
            cs.__exit__(type(exc), exc, exc.__traceback__)
            raise
        return cs

    async def _open_nursery(self, scope: NurseryFace) -> None:
        cm = trio.open_nursery(strict_exception_groups=True)
        outer = await cm.__aenter__()
        try:
            # Shielded: in an already-cancelled context trio would not let the host report
            # started(), and entering would never finish. The host starts at once anyway.
            with trio.CancelScope(shield=True):
                scope._nursery = await outer.start(self._host, scope, name=_HOST_TASK_NAME)
        except BaseException as exc:
            self._released.set()
            await cm.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        self._cm = cm

    async def _host(
        self,
        scope: NurseryFace,
        task_status: trio.TaskStatus[trio.Nursery] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        # The nursery that hosts the scope's trio tasks. It stays open until the scope has
        # joined, so work may be started even after the body has left.
        async with trio.open_nursery(strict_exception_groups=True) as inner:
            inner.cancel_scope.shield = True  # nothing but an interrupt cancels its tasks
            task_status.started(inner)
            try:
                await self._released.wait()
            except trio.Cancelled:
                parent = scope._parent_task
                if parent is not None and task_finished(parent):
                    # Misnesting: the task that entered the scope ended inside the block
                    # (trio cancels the nurseries it abandoned and raises "Nursery stack
                    # corrupted" there). No exit will release the host: it ends now.
                    scope._abandon()
                    return
                with trio.CancelScope(shield=True):
                    await self._released.wait()

    def abandon(self) -> None:
        self._released.set()

    def _release(self, scope: NurseryFace) -> AbstractAsyncContextManager[trio.Nursery] | None:
        self._released.set()
        cm, self._cm = self._cm, None
        return cm


class CountingHost(Host):
    """How ``counting_scope`` hosts its trio tasks and stops them ([exec.scope.counting]).

    The hosted tasks live in a nursery the opener's task opens (so the task tree is trio's:
    each child's parent is the task that entered ``async with``, no task in between). The
    body runs inside that nursery, so a stop request, which must cancel the hosted tasks and
    not the body, first shields the body and then cancels the nursery. A shielded body no
    longer sees an enclosing cancellation: a watcher task, started only then in a second
    nursery outside the first, forwards one to it::

        watcher nursery > hosted nursery > body's cancel scope > body

    The watcher nursery's cancel scope is the block's own (``scope.cancel_scope``), as a
    nursery's is: one cancel scope fewer to enter and leave. It is left last in the exit
    (:meth:`exit_cancel_scope`), with what leaves the block.
    """

    __slots__ = ("_grace_cs", "_watch_cm", "_watch_nursery", "_watch_release", "_work_cm")

    stops = True  # a Cancelled of a hosted task: the scope's stop (its own, or one it asked for)

    _grace_cs: trio.CancelScope | None
    _watch_cm: AbstractAsyncContextManager[trio.Nursery] | None
    _watch_nursery: trio.Nursery | None
    _watch_release: trio.Event | None
    _work_cm: AbstractAsyncContextManager[trio.Nursery] | None

    # (No __init__: the scope makes its host at every `async with`; open() sets it up.)

    async def open(self, scope: NurseryFace) -> trio.CancelScope:
        self._grace_cs = None
        self._watch_release = None
        watch_cm = trio.open_nursery(strict_exception_groups=True)
        watch = self._watch_nursery = await watch_cm.__aenter__()
        work_cm = trio.open_nursery(strict_exception_groups=True)
        try:
            scope._nursery = await work_cm.__aenter__()
        except BaseException as exc:  # pragma: no cover - opening a nursery does not block
            await watch_cm.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        self._watch_cm = watch_cm
        self._work_cm = work_cm
        scope._coro_scopes = set()
        return watch.cancel_scope

    def _release(self, scope: NurseryFace) -> AbstractAsyncContextManager[trio.Nursery] | None:
        gcs = self._grace_cs
        if gcs is not None:
            gcs.cancel()  # the stuck-work watcher: everything has finished
        release = self._watch_release
        if release is not None:
            self._watch_release = None
            release.set()
        work_cm, self._work_cm = self._work_cm, None
        self._watch_nursery = None
        scope._coro_scopes = None
        scope._coro_env = None
        scope._coro_fwd_env = None
        return work_cm

    async def exit_cancel_scope(
        self, scope: NurseryFace, out: BaseException | None
    ) -> BaseException | None:
        # The watcher nursery's exit (see above): it also waits for a watcher that is still
        # finishing (released by close). A strict nursery puts what leaves it in a group: a
        # lone exception is taken back out of it.
        cm, self._watch_cm = self._watch_cm, None
        assert cm is not None
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

    def hosted_cancelled(self, scope: NurseryFace) -> bool:
        n = scope._nursery
        return n is not None and n.cancel_scope.cancel_called

    def cancel_hosted(self, scope: NurseryFace) -> None:
        if scope._stop_since is None:
            scope._stop_since = time.monotonic()
        if scope._nursery is not None:
            scope._in_trio(partial(self._stop_hosted, scope))

    def _stop_hosted(self, scope: NurseryFace) -> None:
        """On the trio thread: cancel the hosted tasks, not the body (see above)."""
        n = scope._nursery
        if n is None:
            return
        wn = self._watch_nursery
        grace = grace_of(scope)
        if grace is not None and self._grace_cs is None and wn is not None:
            cs = self._grace_cs = trio.CancelScope()
            wn.start_soon(_grace_watch, scope, cs, grace, name=_GRACE_TASK_NAME)
        body = scope._body_cs
        block = scope._cancel_scope
        if (
            body is not None
            and wn is not None
            and block is not None
            and not body.shield
            and not body.cancel_called
            and not block.cancel_called
        ):
            body.shield = True
            release = self._watch_release = trio.Event()
            wn.start_soon(_watch, scope, release, name=_WATCH_TASK_NAME)
        cancel(n.cancel_scope, scope._reason)
        scopes = scope._coro_scopes
        if scopes:
            for coro_cs in list(scopes):
                coro_cs.cancel()


async def _grace_watch(scope: NurseryFace, cs: trio.CancelScope, grace: float) -> None:
    """Runs from a stop request with a ``stop_grace`` until the scope closes its host: after
    ``grace`` seconds, one :class:`StuckWorkWarning` per operation still running
    (the debugging guide)."""
    with cs:
        await trio.sleep(grace)
        from . import _introspect  # imported when first needed, not by `import structexec`

        for op in _introspect.outstanding(scope):
            where = f" (spawned at {op.spawned_at})" if op.spawned_at else ""
            safe_warn(
                scope,
                f"{op.kind} {op.description}{where} has ignored the stop request of "
                f"{scope_label(scope)} for {grace:g} s; it is {op.state}",
            )


async def _watch(scope: NurseryFace, release: trio.Event) -> None:
    """Runs from a stop request while the body runs until the body leaves: forwards a
    cancellation of the enclosing code (or of ``scope.cancel_scope``) to the body, which the
    stop request shielded."""
    try:
        await release.wait()
    except trio.Cancelled:
        scope._cancel_body()
        # Returning ends the task; the cancellation is trio's to deliver to the body.
