"""The trio tasks a counting scope hosts as a nursery: the wrappers of ``start_soon``,
``start`` and hosted coroutine senders, and the environment of the scope's work.

the scopes guide "The nursery face: `async with`" and "What happens when things fail";
[exec.scope.simple.counting], [exec.scope.counting].

Each hosted task runs its user coroutine inside a wrapper (:func:`_hosted`,
:func:`_hosted_start`, :func:`_guarded`) that reports its outcome to the scope: an exception
is an error of the scope's work, a ``Cancelled`` the scope asked for ends the task "stopped",
a ``KeyboardInterrupt`` is the scope's to raise at its exit. The wrappers' code objects are
registered with ``_site.HOSTED_CODES`` (for ``sx.operation_tree()``, which reads their
``coro`` and ``site`` locals) and ``_detach.RELEASE`` (a coroutine that detaches itself).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from types import CoroutineType as _CoroutineType
from typing import TYPE_CHECKING, Any

import trio

from .._core._describe import Site
from .._core._env import TryEnv
from .._core._errors import Stopped
from .._core._queries import get_scheduler
from .._trio._detach import DETACHED, RELEASE, undetach, watch_run
from .._trio._trio_bridge import RunState, trio_host_nursery, trio_run
from ._site import HOSTED_CODES, note_error

if TYPE_CHECKING:
    from types import CodeType

    from ._nursery import NurseryFace

__all__: list[str] = []

#: A user coroutine a hosted task runs.
UserCoro = Coroutine[object, object, object]


class TaskStatus:
    """Wraps trio's ``task_status`` to know whether ``started()`` moved the task into the
    scope (``called``). In a cancelled context trio's ``started()`` records the value but
    leaves the task under ``start()``, which then raises what the task raises; so does the
    scope's ``start()``."""

    __slots__ = ("_inner", "_nursery", "called")

    def __init__(self, inner: trio.TaskStatus[object], nursery: trio.Nursery | None) -> None:
        self._inner = inner
        self._nursery = nursery
        self.called = False

    def started(self, value: object = None) -> None:
        self._inner.started(value)
        self.called = trio.lowlevel.current_task().parent_nursery is self._nursery

    def __repr__(self) -> str:
        return repr(self._inner)


def coroutine_of(who: str, async_fn: object, args: tuple[object, ...]) -> UserCoro:
    """Call ``async_fn(*args)``; ``TypeError`` unless that gives a coroutine (like trio)."""
    if isinstance(async_fn, Coroutine):
        raise TypeError(
            f"{who}() expected an async function, but got a coroutine object {async_fn!r}; "
            f"pass the function and its arguments ({who}(fn, *args)), or give the coroutine "
            "to scope.spawn()"
        )
    if not callable(async_fn):
        raise TypeError(f"{who}() expected an async function, got {type(async_fn).__name__}")
    return check_coroutine(who, async_fn, async_fn(*args))


def check_coroutine(who: str, async_fn: object, coro: object) -> UserCoro:
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


def hosted_task(
    scope: NurseryFace,
    async_fn: Callable[..., Awaitable[object]],
    args: tuple[object, ...],
    site: Site | None = None,
) -> UserCoro:
    """What ``scope.start_soon`` gives trio's ``nursery.start_soon``: trio calls it inside
    the new task's own copy of the context (so whatever ``async_fn(*args)`` does to
    contextvars, or sniffio, stays in the task), synchronously (so a ``TypeError`` for a
    function that is not async still comes out of ``start_soon``)."""
    coro: Any = async_fn(*args)
    if type(coro) is not _CoroutineType:
        coro = check_coroutine("start_soon", async_fn, coro)
    return _hosted(scope, coro, site)


def hosted_start_task(
    scope: NurseryFace,
    async_fn: Callable[..., Awaitable[object]],
    args: tuple[object, ...],
    ran: list[bool],
    site: Site | None = None,
    *,
    task_status: trio.TaskStatus[object],
) -> UserCoro:
    """What ``scope.start`` gives trio's ``nursery.start``: as :func:`hosted_task`, trio
    calls it synchronously in the new task's context, so whatever ``async_fn`` raises while
    it is called (a sync function calling ``started()`` twice, say) comes out of
    ``start()``, as it does from a nursery's."""
    status = TaskStatus(task_status, scope._nursery)
    coro: Any = async_fn(*args, task_status=status)
    if type(coro) is not _CoroutineType:
        coro = check_coroutine("start", async_fn, coro)
    return _hosted_start(scope, coro, status, ran, site)


def _user_traceback(e: BaseException) -> BaseException:
    """Drop the library's wrapper frame from the front of ``e``'s traceback, so that it starts
    at the user's function, as a nursery child's does."""
    tb = e.__traceback__
    if tb is not None and tb.tb_frame.f_code in _WRAPPERS:
        e.__traceback__ = tb.tb_next
    return e


def task_finished(task: trio.lowlevel.Task) -> bool:
    """Whether ``task``'s coroutine has finished (returned or raised)."""
    return getattr(task.coro, "cr_frame", True) is None


def abandoned(scope: NurseryFace) -> bool:
    """Whether the task that entered ``scope``'s block ended inside it (misnesting): trio
    then cancels the nurseries it left open, and what their tasks raise in their cleanup is
    lost, as a closed nursery loses it (the scope's exit, ``NurseryFace._exit_abandoned``)."""
    t = scope._parent_task
    return t is not None and task_finished(t)


def _task_error(scope: NurseryFace, e: Exception, site: Site | None) -> None:
    """A hosted task raised the ``Exception`` ``e``: an error of the scope's work."""
    if not abandoned(scope):
        note_error(e, site, scope, task=True)
        scope._record_error(_user_traceback(e))


def _task_interrupt(scope: NurseryFace, e: BaseException, site: Site | None) -> bool:
    """A hosted task let the ``BaseException`` ``e`` escape (``_task_raised``); ``True``:
    re-raise it into the host nursery."""
    if not isinstance(e, trio.Cancelled):
        note_error(e, site, scope, task=True)
    return scope._task_raised(e)


async def _hosted(scope: NurseryFace, coro: UserCoro, site: Site | None = None) -> None:
    """The body of a task started with ``scope.start_soon`` (``site``: where it was called,
    for the note on its errors and ``sx.operation_tree()``)."""
    try:
        await coro
    except Exception as e:
        if DETACHED and id(coro) in DETACHED:
            raise  # the task detached (_detach): what its new driver sees, not the scope
        _task_error(scope, e, site)
    except trio.Cancelled:
        if not scope._host_stops:
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
        if _task_interrupt(scope, e, site):
            raise
    finally:
        if not DETACHED or not undetach(coro):
            scope._wrappers -= 1
            scope._assoc.disassociate()


async def _hosted_start(
    scope: NurseryFace,
    coro: UserCoro,
    status: TaskStatus,
    ran: list[bool],
    site: Site | None,
) -> None:
    """The body of a task started with ``scope.start``: before ``started()`` what the task
    raises goes to the caller of ``start()``, as in trio; after it, as :func:`_hosted`."""
    ran[0] = True
    try:
        await coro
    except BaseException as e:
        if _start_task_raised(scope, coro, status, e, site):
            raise
    finally:
        if not DETACHED or not undetach(coro):
            scope._wrappers -= 1
            scope._assoc.disassociate()


def _start_task_raised(
    scope: NurseryFace, coro: UserCoro, status: TaskStatus, e: BaseException, site: Site
) -> bool:
    """What a ``start`` task let escape; ``True``: re-raise it (before ``started()``: to the
    caller of ``start()``, as in trio)."""
    called = status.called
    if isinstance(e, Exception):
        if (DETACHED and id(coro) in DETACHED) or not called:
            return True  # detached (_detach): not the scope's any more; or before started()
        _task_error(scope, e, site)
        return False
    if isinstance(e, trio.Cancelled):
        if not (called and scope._host_stops):
            return True
        scope._cancel_seen = True
        return False
    if isinstance(e, Stopped):
        return not called
    if type(e) is GeneratorExit or (DETACHED and id(coro) in DETACHED):
        return True  # detached (_detach), then closed or resumed elsewhere: not ours
    return not called or _task_interrupt(scope, e, site)


async def _guarded(
    scope: NurseryFace, async_fn: Callable[..., Awaitable[object]], args: tuple[object, ...]
) -> None:
    """A task the scope's nursery hosts for a coroutine sender or a ``task`` body (they
    complete their own operation first): a ``BaseException`` other than ``Cancelled`` that
    escapes it is the scope's to raise, not the host nursery's (``NurseryFace._interrupt``).
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
            scope._cancel_seen = True  # (see NurseryFace.__aexit__)
            raise
        note_error(e, getattr(st, "_site", None), scope)
        if scope._task_raised(e):
            raise
    else:
        if not DETACHED or not undetach(async_fn):
            scope._wrappers -= 1
        # A coroutine sender's own cancel scope caught the stop's Cancelled: a task that was
        # cancelled (the exit may pass an enclosing cancellation on).
        if getattr(cs, "cancelled_caught", False):
            scope._cancel_seen = True


class HostNursery:
    """What the scope's environment names as the host nursery of coroutine senders
    (the scopes guide): the real nursery's ``start_soon``, with each task guarded by
    :func:`_guarded`."""

    __slots__ = ("_nursery", "_scope")

    def __init__(self, scope: NurseryFace, nursery: trio.Nursery) -> None:
        self._scope = scope
        self._nursery = nursery

    def start_soon(
        self, async_fn: Callable[..., Awaitable[object]], *args: object, name: object = None
    ) -> None:
        scope = self._scope
        run = scope._run
        if run is not None and not run.watched:
            watch_run(run)  # a coroutine that detaches ends its operation (_detach)
        self._nursery.start_soon(
            _guarded, scope, async_fn, args, name=async_fn if name is None else name
        )
        scope._wrappers += 1

    def interrupt(self, rcvr: object, exc: BaseException) -> None:
        """A hosted coroutine sender raised ``exc`` (not a cancellation, not a group): the
        scope's to raise at its exit, told before its operation completes (as ``_guarded``)."""
        note_error(exc, getattr(rcvr, "_site", None), self._scope)
        self._scope._interrupt(exc)

    def __repr__(self) -> str:
        return f"<host nursery of {self._scope!r}>"


class ScopeEnv(TryEnv):
    """The env given to work spawned through ``scope.spawn`` inside ``async with``: the host
    nursery for coroutine senders (the scopes guide, ``trio_host_nursery``: a
    :class:`HostNursery`, made when first asked for), the trio run (``trio_run``, as
    ``host_env``) and the run's trio scheduler as ``get_scheduler``."""

    __slots__ = ("_host", "_nursery", "_run", "_scope")
    _unsupported = "the environment of a scope's work does not support {q!r}"

    def __init__(self, scope: NurseryFace, nursery: trio.Nursery, run: RunState) -> None:
        self._scope = scope
        self._nursery = nursery
        self._run = run
        self._host: HostNursery | None = None

    def _sx_try(self, q: object, default: object) -> object:
        if q is get_scheduler:
            return self._run.sched
        if q is trio_host_nursery:
            h = self._host
            if h is None:
                h = self._host = HostNursery(self._scope, self._nursery)
            return h
        if q is trio_run:
            return self._run
        return default

    def __repr__(self) -> str:
        return f"<environment of {self._scope!r}>"


# -- registrations: the wrappers' frames (tracebacks, operation trees, detaching)

_WRAPPERS: frozenset[CodeType] = frozenset(
    (_hosted.__code__, _hosted_start.__code__, _guarded.__code__)
)
HOSTED_CODES.update(
    {_hosted.__code__: "start_soon", _hosted_start.__code__: "start", _guarded.__code__: "guarded"}
)


def _release_hosted(f: dict[str, Any]) -> None:
    """A ``start_soon``/``start`` task detached its coroutine (``_detach``): it has ended,
    as a nursery sees it; its association is released now, not by the wrapper's finally."""
    key = id(f["coro"])
    if key not in DETACHED:
        DETACHED.add(key)
        scope = f["scope"]
        scope._wrappers -= 1
        scope._assoc.disassociate()


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
RELEASE[_hosted_start.__code__] = _release_hosted
RELEASE[_guarded.__code__] = _release_guarded
