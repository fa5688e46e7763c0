"""What the ``async with`` exit of a counting scope raises, and how it waits.

the scopes guide "What happens when things fail"; [exec.scope.simple.counting],
[exec.scope.counting].

The exit (``_nursery.NurseryFace.__aexit__``) is made of three parts, as trio splits its
``NurseryManager.__aexit__``:

* :func:`combine` and :func:`finish`, **pure** functions: from the outcomes (the errors of
  the work in order of arrival, the interrupts, the body's exception and when it arrived, an
  enclosing cancellation, the strictness) they work out the exception that leaves the block.
  Between the two, trio's cancel scope of the block removes its own ``Cancelled``
  (:func:`outcome` models that step too, for tests that compare with a nursery);
* :func:`join_hosted`, the coroutine that waits for the join (shielded once the scope stopped
  its work), issues the stuck-work warnings of ``stop_grace`` and keeps waiting through an
  enclosing cancellation or a Ctrl-C;
* :func:`raise_keeping_context`, the one place that raises what leaves the block.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, NoReturn

import trio

from .._core._errors import Stopped
from .._trio import _trio_compat
from ._join import ERRORS_MESSAGE

if TYPE_CHECKING:
    from ._join import _TrioJoinWaiter
    from ._nursery import NurseryFace

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup  # type: ignore[import-not-found, unused-ignore]

__all__: list[str] = []

#: The message of a group the block makes when no work failed (interrupts, strictness).
STRICT_MESSAGE = "exceptions from the counting scope"


# --------------------------------------------------------------------------- pure parts


def without_cancelled(exc: BaseException) -> tuple[BaseException | None, bool]:
    """``exc`` without its ``trio.Cancelled`` parts (as a cancel scope that catches them
    leaves it), and whether it had any."""
    if isinstance(exc, trio.Cancelled):
        return None, True
    if isinstance(exc, BaseExceptionGroup):
        cancelled, rest = exc.split(trio.Cancelled)
        if cancelled is not None:
            return rest, True
    return exc, False


def has_cancelled(exc: BaseException | None) -> bool:
    """Whether ``exc`` is, or its group holds, a ``trio.Cancelled``."""
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(trio.Cancelled)[0] is not None
    return isinstance(exc, trio.Cancelled)


def is_interrupt(exc: BaseException | None) -> bool:
    """``KeyboardInterrupt``, ``SystemExit`` and other ``BaseException``s that are neither a
    trio cancellation nor a stopped completion (``sx.Stopped``)."""
    return exc is not None and not isinstance(exc, (Exception, trio.Cancelled, Stopped))


def combine(
    errors: list[BaseException],
    interrupts: list[BaseException],
    exc: BaseException | None,
    arrived: int,
    cancelled: BaseException | None,
    strict: bool,
) -> tuple[BaseException | None, bool]:
    """What the block hands to its own cancel scope, and whether it is a group made here.

    ``errors``: the errors of the work (as exceptions), in order of arrival; ``exc``: what is
    left of the body's exception (``None``: nothing), which arrived after ``arrived`` of the
    errors; ``cancelled``: an enclosing cancellation the exit passes on; ``interrupts``:
    ``KeyboardInterrupt``/``SystemExit``/... kept by the scope. As a nursery: errors make a
    group with everything else in it; an interrupt supersedes a cancellation (which only
    asked the block to finish early) and takes the body's own exception with it; a group made
    here by a non-strict block carries trio's "loose" note. Never mutates its inputs.
    """
    if errors:
        excs = list(errors)
        if exc is not None:
            excs.insert(arrived, exc)
        if cancelled is not None:
            excs.append(cancelled)
        excs.extend(interrupts)
        return _group(ERRORS_MESSAGE, excs, strict), True
    if interrupts:
        if exc is not None and not isinstance(exc, trio.Cancelled):
            interrupts = [exc, *interrupts]
        if len(interrupts) == 1:
            return interrupts[0], False
        return _group(STRICT_MESSAGE, interrupts, strict), True
    if cancelled is not None and exc is None:
        return cancelled, False
    return exc, False


def _group(
    message: str, excs: list[BaseException], strict: bool
) -> BaseExceptionGroup[BaseException]:
    group = BaseExceptionGroup(message, excs)
    if not strict:
        group.add_note(_trio_compat.LOOSE_NOTE)
    return group


def finish(
    left: BaseException, body_exc: BaseException | None, ours: bool, strict: bool
) -> BaseException | None:
    """What leaves the block once its cancel scope has taken its own ``Cancelled`` out
    (``left``, not ``None``); ``None``: let the body's own exception propagate unchanged.

    Strict (``trio.open_nursery()`` by default): whatever leaves comes out in a group (a
    group from the body nested in it), except a lone ``Cancelled`` (the block was cancelled
    from outside, nothing failed), which comes out bare, as from anyio's task group.
    Non-strict: a group made here is collapsed where it holds one exception (once the
    ``Cancelled``s are gone); a group of the user's own is left alone.
    """
    if not strict:
        if isinstance(left, BaseExceptionGroup):
            left = _trio_compat.collapse_exception_group(left)
        return None if left is body_exc else left
    if not ours and not isinstance(left, trio.Cancelled):
        group: BaseException = BaseExceptionGroup(STRICT_MESSAGE, [left])
        return group
    return left


def outcome(
    errors: list[BaseException],
    body_exc: BaseException | None,
    *,
    arrived: int = 0,
    interrupts: list[BaseException] | None = None,
    cancelled: BaseException | None = None,
    cancelled_here: bool = False,
    strict: bool = True,
) -> BaseException | None:
    """The whole rule, pure: what leaves a block whose body raised ``body_exc`` (after
    ``arrived`` of the ``errors``). ``cancelled_here``: the scope itself cancelled the body
    and its work (``cancel_scope.cancel()``, a stop request), so a ``Cancelled`` in the body's
    exception is its own and is removed, as its cancel scopes do, unless an enclosing
    cancellation is passed on (``cancelled``): a trio cancel scope absorbs no ``Cancelled``
    while an enclosing one is cancelled too. ``None``: nothing leaves
    (or the body's exception leaves unchanged, if it is the result). For tests that compare
    the rule with a trio nursery; the exit itself runs the same steps with trio's cancel
    scope in the middle."""
    exc = body_exc
    absorbs = cancelled_here and cancelled is None
    if exc is not None and absorbs:
        exc = without_cancelled(exc)[0]
    out, ours = combine(list(errors), list(interrupts or ()), exc, arrived, cancelled, strict)
    if out is not None and absorbs:
        out = without_cancelled(out)[0]
    if out is None:
        return None
    left = finish(out, body_exc, ours, strict)
    return body_exc if left is None else left


# --------------------------------------------------------------------------- trio parts


def raise_keeping_context(out: BaseException, made_here: bool) -> NoReturn:
    """Raise ``out`` from the exit with the context it had (raising it inside ``__aexit__``
    would make the body's exception its context, and that may be inside ``out`` itself: a
    context loop). A group ``made_here`` does not show a context of its own."""
    if made_here:
        out.__suppress_context__ = True
    context = out.__context__
    try:
        raise out
    finally:
        out.__context__ = context
        del out, context


async def join_hosted(scope: NurseryFace, waiter: _TrioJoinWaiter, shielded: bool) -> bool:
    """Wait until ``scope`` has joined (``waiter``); ``True`` if an enclosing cancellation
    arrived meanwhile (the exit then checks, once outside the hosted nursery, whether to pass
    one on: a nursery is never the source of a ``Cancelled``, it only passes those of its
    children and body on).

    ``shielded``: the wait is inside the hosted nursery that a stop request cancelled, so it
    waits shielded from the start. An enclosing cancellation requests stop on the work
    (``counting_scope``) and the wait goes on shielded; a ``KeyboardInterrupt`` cancels the
    hosted tasks and the body and the wait goes on (the exit raises it once everything has
    finished). With a ``stop_grace``, a :class:`StuckWorkWarning` once the wait took that long.
    """
    warn_at = scope._grace_deadline()
    cancelled = False
    while True:
        try:
            if shielded:
                with trio.CancelScope(shield=True):
                    await _wait(scope, waiter.event, warn_at)
            else:
                await _wait(scope, waiter.event, warn_at)
            return cancelled
        except trio.Cancelled:
            cancelled = True
            scope._stop_work()
        except BaseException as e:
            if type(e) is GeneratorExit:
                # The coroutine is being closed: its run is gone (it crashed), so nothing
                # can end the wait; waiting again would loop forever.
                raise
            scope._interrupt(e)
        shielded = True


async def _wait(scope: NurseryFace, event: trio.Event, warn_at: list[float | None] | None) -> None:
    if warn_at is None:
        await event.wait()
    else:
        await scope._wait_joined(event, warn_at)


def introspect_tree(scope: object) -> str:
    """``scope``'s operation tree as text; the introspection module is imported when first
    needed, not by ``import structexec``."""
    from . import _introspect

    return _introspect.format_tree(_introspect.scope_info(scope))
