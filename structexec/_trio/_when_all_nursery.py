"""``await sx.when_all(c1(), c2(), ...)`` in a nursery of the awaiting task: the trio fast path
of ``when_all`` ([exec.when.all]) over coroutine objects.

See the trio guide "Awaiting a sender", "trio cancellation becomes a stop request" and "Coroutines
are senders; a stop request cancels them", the scopes guide "The nursery face: `async with`" and
the task guide 'How "stopped" unwinds a task'. In a plain trio task (not inside a
structexec-hosted coroutine), when every child is a not-yet-started ``types.CoroutineType``, no
custom domain may transform ``when_all`` (none customises it, nor every algorithm) and the
task has no finite effective deadline, the children run as tasks of a trio nursery opened
inside the awaiting task instead of as hosted system tasks, each in its own
shielded cancel scope, behind the generic ``when_all`` operation. The observable outcome is the
general path's:

* values are concatenated in argument order with the values convention (a child returning
  ``None`` adds no datum, ``sx.values(...)`` several, anything else one); the await gives
  ``None``, the datum or a tuple ([exec.when.all], the trio guide "Awaiting a sender");
* the first exception wins and cancels the siblings at once (the stop request, [exec.when.all]);
  later ones become notes on it, as in the general path (``report_dropped_errors``); an exception
  also beats an earlier stopped child ([exec.when.all]); it is raised as it is, never inside an
  ``ExceptionGroup`` (the child wrappers catch everything: nothing escapes into the nursery);
* a child that ends stopped (an ``sx.Stopped`` escaping it, or a ``trio.Cancelled``, i.e. the
  when_all's own stop or the awaiting task's cancellation) cancels its siblings ([exec.when.all]);
  the await then raises ``trio.Cancelled`` if the awaiting task's cancellation hit before the last
  child finished (through a checkpoint, as the general path does), ``sx.Stopped`` otherwise;
* the await returns or raises only after every child task has finished ([exec.when.all]); a trio
  cancellation of the awaiting task cancels the children
  (the trio guide "trio cancellation becomes a stop request": the stop request), and a value that
  arrives despite it is returned;
* a ``BaseException`` other than ``Cancelled``/``Stopped`` (``KeyboardInterrupt``,
  ``SystemExit``) escaping a child stops the siblings and is raised from the await, as the
  general path's hosted task hands it to the await's ``raised_sink`` (so ``trio.run`` raises
  it as it raises a nursery child's); the first one wins. Difference: the general path raises
  it at once and abandons the stopped siblings, the fast path once they have finished;
* a ``KeyboardInterrupt`` that trio delivers to the awaiting (main) task while it waits stops
  the children and is raised alone once they have finished;
* group handling at the child boundary mirrors the general path's cancel scope: when the child
  is cancelled, ``trio.Cancelled`` is removed from a ``BaseExceptionGroup`` it raises;
* the child tasks carry the coroutine's ``__qualname__`` as their name, a copy of the
  awaiting task's context, and ``KeyboardInterrupt`` protection (as system tasks have);
  senders awaited inside see the trio scheduler and a stop token tied to the child task's
  own cancellation, which the when_all's stop and the awaiting task's cancellation both
  reach.

Whether the awaiting task's cancellation hit before the last child finished is read from
trio's private ``Task._cancel_status.effectively_cancelled`` of the awaiting task (read only;
without it, at the moment the task resumes); its deadline is read from the same private chain
(the public ``trio.current_effective_deadline()`` without it). Both, and trio's
``collapse_exception_group``, go through the version-checked shim ``_trio_compat``.

The remaining differences, asserted in ``tests/test_trio_when_all_fast_path.py``:

* the child tasks' ``parent_nursery`` is the new nursery (not the system nursery);
* a ``Cancelled`` seen inside a child because the awaiting task was cancelled carries that
  cancellation's trio metadata (``reason``, ``source``) rather than ``"explicit"`` with no
  reason;
* a deadline set on an enclosing scope *while* the children run is visible to them through
  ``trio.current_effective_deadline()`` (with a finite deadline at the await the general path
  is taken, so this cannot differ at the start);
* when children return values (or raise) despite a ``KeyboardInterrupt`` delivered to the
  awaiting task, the general path returns them (raises) and raises the ``KeyboardInterrupt``
  at the next checkpoint; the fast path raises the ``KeyboardInterrupt`` from the await.

``_fastpaths.FAST.when_all_nursery = False`` turns the fast path off (tests compare both
paths). Its entry is this module's fast ``await`` handler of ``when_all`` senders
(:func:`_await_when_all`, in ``_fastpaths.FAST_AWAIT``), which reads the switch on each
``await`` of a ``when_all`` sender.
"""

from __future__ import annotations

import inspect
import math
import sys
import types
from collections.abc import Generator
from typing import TYPE_CHECKING

import trio
import trio.lowlevel as tl

from .._algorithms._when_all import _WhenAllSender, report_dropped_errors
from .._algorithms._when_all import when_all as _when_all_tag
from .._core._coroutine_driver import HostMark, host_mark, swallowed_stop_message
from .._core._domain import DISPATCH as _DS
from .._core._errors import Stopped
from .._core._fastpaths import FAST as _FP
from .._core._fastpaths import register_fast_await
from .._core._queries import QueryError, get_stop_token
from .._core._stop_token import combined_stop_token, inplace_stop_source, inplace_stop_token
from .._core._values import values
from . import _trio_compat
from ._coroutine_sender import name_of
from ._trio_bridge import hosted_env

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup  # type: ignore[import-not-found, unused-ignore]

# trio's own helper (through the shim), so that the child boundary matches CancelScope.__exit__
_collapse_group = _trio_compat.collapse_exception_group


__all__: list[str] = []

_set_hosted = hosted_env.set
_get_hosted = hosted_env.get
_new = object.__new__
_set_mark = host_mark.set
_current_task = tl.current_task
_current_effective_deadline = trio.current_effective_deadline
_open_nursery = trio.open_nursery
_Cancelled = trio.Cancelled
_CoroutineType = types.CoroutineType
_getcoroutinestate = inspect.getcoroutinestate
_CORO_CREATED = inspect.CORO_CREATED
_NEG_INF = -math.inf
_enable_ki_protection = tl.enable_ki_protection
_checkpoint = tl.checkpoint
_cancel_status = _trio_compat.cancel_status
_deadline_is_finite = _trio_compat.deadline_is_finite
_effectively_cancelled = _trio_compat.effectively_cancelled

_STARTED, _ERROR_D, _STOPPED_D = 0, 1, 2

if TYPE_CHECKING:
    from ._trio_compat import CancelStatus

    #: A child: a fresh coroutine object (checked by :func:`nursery_state`).
    _Coro = types.CoroutineType[object, object, object]


def nursery_state(
    children: tuple[object, ...], parent: _FastChildEnv | None
) -> _NurseryWhenAll | None:
    """The state for running ``await when_all(*children)`` in a nursery, or ``None`` if not.

    Only fresh coroutine objects (the general path raises ``TypeError`` at connect for a used
    one), no custom domain that may transform it (one customising ``when_all`` or every
    algorithm; coroutine children have no tag, so only those reach them), no finite deadline (hosted
    children would not see it), and only in a trio task.
    """
    for c in children:
        if type(c) is not _CoroutineType or _getcoroutinestate(c) != _CORO_CREATED:
            return None
    if len(children) > 1 and len(set(map(id, children))) != len(children):
        return None  # one coroutine given twice: the general path's connect raises TypeError
    if _DS.on and (_DS.all or _when_all_tag in _DS.tags):
        return None
    try:
        task = _current_task()
    except RuntimeError:  # not in a trio task: the general path says why
        return None
    # The task's innermost CancelStatus, outside the nursery (private trio state, read only,
    # None without it): tells whether *its* cancellation hit, as opposed to the when_all's own
    # stop request.
    status = _cancel_status(task)
    if _deadline_is_finite(status):
        return None
    return _NurseryWhenAll(len(children), status, parent)


def _await_when_all(sndr: _WhenAllSender, run: object) -> Generator[object, None, object] | None:
    """The fast ``await`` of ``when_all(<coroutines>)`` (``_fastpaths.FAST_AWAIT``): a nursery
    of the awaiting task, in a plain trio task or a child of another fast-path ``when_all``;
    ``None`` (the general path) when :func:`nursery_state` says no, inside another hosted
    coroutine, or under a stopped parent (the general path stops before starting anything)."""
    if not _FP.when_all_nursery:
        return None
    hosted = _get_hosted()
    if hosted is not None and (type(hosted) is not _FastChildEnv or hosted.stopped()):
        return None
    children = sndr._children  # the private tuple behind _WhenAllSender.children
    st = nursery_state(children, hosted)
    # nursery_state checked that every child is a fresh coroutine object
    return None if st is None else st._run(children).__await__()  # type: ignore[arg-type]


class _NurseryWhenAll:
    """Bookkeeping of one ``await when_all(<coroutines>)`` run in a nursery ([exec.when.all])."""

    __slots__ = (
        "_base",
        "_cancel_seen",
        "_count",
        "_disp",
        "_env",
        "_err",
        "_more",
        "_outer",
        "_outer_cancelled",
        "_parent",
        "_scope",
        "_src",
        "_vals",
    )

    def __init__(
        self, n: int, outer: CancelStatus | None, parent: _FastChildEnv | None = None
    ) -> None:
        self._count = n
        self._parent = parent
        self._disp = _STARTED
        self._vals: list[object] = [None] * n
        self._outer = outer
        # The stop source standing for the general path's when_all stop source; made only if
        # a child asks for its stop token (see _FastChildEnv).
        self._src: inplace_stop_source | None = None
        self._cancel_seen = False
        self._env: _FastChildEnv | None = _FastChildEnv(self)
        self._more: list[tuple[int, Exception]] | None = None  # errors that lost to _err
        self._base: BaseException | None = None  # a child's KeyboardInterrupt, SystemExit
        # Set when used: _scope (in _run), _err (with _disp = _ERROR_D), _outer_cancelled (by
        # the last arrival when _disp is _STOPPED_D).
        self._scope: trio.CancelScope
        self._err: Exception
        self._outer_cancelled: bool | None

    async def _run(self, children: tuple[_Coro, ...]) -> object:
        i = 0
        try:
            async with _open_nursery() as nursery:
                self._scope = nursery.cancel_scope
                start = nursery.start_soon
                child = self._child
                try:
                    for c in children:
                        start(child, i, c, name=c.__qualname__)
                        i += 1
                except BaseException:  # pragma: no cover - start_soon does not fail here
                    for c in children[i:]:
                        c.close()
                    raise
        except BaseExceptionGroup as group:
            # The child wrappers never raise: only what trio injected into this task while it
            # waited can get here, a KeyboardInterrupt (SIGINT, delivered to the main task).
            # The nursery cancelled the children; the general path's abort function takes it
            # as a cancellation (stop request) and raises it when the stopped result makes it
            # pass a checkpoint. Raise it alone once the children have finished.
            ki = _lone_keyboard_interrupt(group)
            if ki is None:
                raise
        else:
            ki = None
        finally:
            self._env = None  # the children are done: no when_all <-> child env cycle
        if ki is not None:
            raise ki
        base = self._base
        if base is not None:  # a child raised KeyboardInterrupt, SystemExit, ... (_raised)
            self._base = None
            raise base
        disp = self._disp
        if disp == _STARTED:
            # One list, then one tuple (concatenating tuples is quadratic in the children).
            parts: list[object] = []
            for v in self._vals:
                if v is None:
                    continue
                if type(v) is values:
                    parts.extend(v)
                else:
                    parts.append(v)
            out = tuple(parts)
            n = len(out)
            if n == 1:
                return out[0]
            return None if n == 0 else out
        if disp == _ERROR_D:
            err = self._err
            self._err = None  # type: ignore[assignment]  # read once: no reference kept
            more = self._more
            if more is not None:
                self._more = None
                report_dropped_errors(err, more)
            raise err
        cancelled = self._outer_cancelled
        if cancelled is None:  # a trio without CancelStatus.effectively_cancelled: look now
            cancelled = _current_effective_deadline() == _NEG_INF
        if cancelled:
            # The stop came from this task's trio cancellation: let trio raise its Cancelled.
            await _checkpoint()
        raise Stopped()

    def _request_stop(self) -> None:
        self._cancel_seen = True
        src = self._src
        if src is not None:
            src.request_stop()

    def _stopped_now(self) -> bool:
        """Whether the general path's when_all would have seen a stop request by now: a
        child failed or stopped, or the awaiting task's trio cancellation hit (the general
        path turns that into a stop request as soon as the task parks)."""
        if self._disp != _STARTED or self._cancel_seen:
            return True
        return _effectively_cancelled(self._outer) is True

    def _token(self) -> inplace_stop_token | combined_stop_token:
        src = self._src
        if src is None:
            src = self._src = inplace_stop_source()
            if self._stopped_now():
                src.request_stop()
        tok = inplace_stop_token(src)
        parent = self._parent  # nested in a child of another fast-path when_all
        return tok if parent is None else combined_stop_token(tok, parent._st._token())

    @_enable_ki_protection
    async def _child(self, i: int, coro: _Coro) -> None:
        _set_hosted(self._env)  # this task's context only (trio copies it per task)
        mark = _new(HostMark)  # HostMark(_current_task()) without the __init__ frame
        mark.task = _current_task()
        mark.stopped = False
        _set_mark(mark)
        try:
            result = await coro
            if mark.stopped:  # the coroutine swallowed a stop (as TrioHostedOp._main)
                raise RuntimeError(swallowed_stop_message(f"the coroutine {name_of(coro)}"))
        except BaseException as exc:
            self._raised(exc, i)
        else:
            if self._disp == _STARTED:  # values kept only while nothing failed ([exec.when.all])
                self._vals[i] = result
                self._count -= 1
            else:
                self._arrive()
        finally:
            mark.task = None  # no task -> context -> mark -> task cycle (as _coroutine_sender)

    def _raised(self, exc: BaseException, i: int) -> None:
        # What the general path's shielded CancelScope + ``except Stopped / Exception /
        # BaseException`` make of an exception escaping the coroutine (_coroutine_sender).
        ex: BaseException | None = exc
        if isinstance(exc, (_Cancelled, BaseExceptionGroup)) and (
            _current_effective_deadline() == _NEG_INF  # this child is cancelled
        ):
            if isinstance(exc, _Cancelled):
                ex = None
            else:
                rest = exc.split(_Cancelled)[1]
                ex = _collapse_group(rest) if rest is not None else None
        if ex is None or isinstance(ex, Stopped):
            self._stop()
            self._arrive()
            return
        if isinstance(ex, Exception):
            if self._disp != _ERROR_D:  # the first error wins, also over a stop ([exec.when.all])
                first = self._disp == _STARTED
                self._disp = _ERROR_D
                self._err = ex
                if first and self._src is not None:
                    self._src.request_stop()
                self._scope.cancel()
            else:  # reported with the error that won, as the general path does
                more = self._more
                if more is None:
                    more = self._more = []
                more.append((i, ex))
            self._arrive()
            return
        # KeyboardInterrupt, SystemExit, ...: never an error datum
        # (docs/senders.md "What happens when things fail"). Like the general path (the hosted task
        # hands it to the await's raised_sink), the siblings are stopped and the await raises it;
        # here once the children have finished.
        self._stop()
        if self._base is None:
            self._base = ex
        self._arrive()

    def _stop(self) -> None:
        if self._disp == _STARTED:  # ([exec.when.all])
            self._disp = _STOPPED_D
            if self._src is not None:
                self._src.request_stop()
            self._scope.cancel()

    def _arrive(self) -> None:
        self._count = c = self._count - 1
        if c == 0 and self._disp == _STOPPED_D:
            # The general path raises Cancelled when the awaiting task was cancelled while it
            # waited, i.e. before the last child completed: look now, not when it resumes.
            outer = self._outer
            self._outer = None
            self._outer_cancelled = _effectively_cancelled(outer)


class _FastChildEnv:
    """What a child of the fast path hosts its awaits in (``hosted_env``), as a hosted
    coroutine of the general path does: ``get_stop_token`` is when_all's own stop token
    (stopped when a child fails or stops), so a token a child reads with ``read_env`` fires
    as the general path's does ([exec.when.all], [exec.connect]). Nothing else is answered here (the
    awaiting receiver adds the trio scheduler)."""

    __slots__ = ("_st",)

    def __init__(self, st: _NurseryWhenAll) -> None:
        self._st = st

    def _sx_try(self, q: object, default: object) -> object:
        return self._st._token() if q is get_stop_token else default

    def stopped(self) -> bool:
        """Whether this when_all, or one it is nested in, has a stop request by now."""
        st = self._st
        return st._stopped_now() or (st._parent is not None and st._parent.stopped())

    def query(self, q: object, *args: object) -> object:
        if q is get_stop_token and not args:
            return self._st._token()
        raise QueryError(f"the environment of a when_all child does not support {q!r}")


def _lone_keyboard_interrupt(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    excs = group.exceptions
    if len(excs) == 1 and isinstance(excs[0], KeyboardInterrupt):
        return excs[0]
    return None


register_fast_await(_WhenAllSender, _await_when_all)
