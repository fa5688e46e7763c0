"""``associate(sndr, token)``: tie a sender to a scope ([exec.associate]).

The association is made eagerly, when ``associate`` is called ([exec.associate]), and held by the
sender until it is connected, then by the operation until it completes. Python has no deterministic
destructors, so the release points are explicit (the senders guide "Writing your own sender"): right
after the operation's completion has been delivered downstream, or when a sender or operation that
was never started is closed (``close()``) or dropped.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar, overload

from .._core._adaptor_util import close_op
from .._core._completion_signatures import completion_signatures, get_completion_signatures
from .._core._connect import connect
from .._core._domain import get_domain_early, may_transform, transform_sender
from .._core._env import EMPTY_ENV, get_env
from .._core._protocol import (
    Algorithm,
    Closure,
    Sender,
    WidenClosure,
    completed_twice,
    is_sender,
    twice_started,
)
from .._core._snapshot import AssociateRecord, snapshot_roots
from .._core._tags import set_stopped_t
from ._scope_token import check_scope_token, is_scope_token

if TYPE_CHECKING:
    from ._scope_token import CompletionReceiver, ScopeToken

__all__ = ["associate"]

T = TypeVar("T")


class _AssociateOp:
    """The operation; the child's receiver too (the child sees the receiver's full env)."""

    __slots__ = ("_op", "_phase", "_rcvr", "_token")

    def __init__(self, rcvr: CompletionReceiver, token: ScopeToken | None) -> None:
        self._rcvr = rcvr
        self._token = token  # None when unassociated
        self._op: Any = None
        self._phase = 0  # 0 connected, 1 started, 2 completed, 3 closed

    def start(self) -> None:
        if self._phase == 3:
            raise RuntimeError("start() on an associate operation that was closed (dropped)")
        if self._phase:
            raise twice_started(self)
        self._phase = 1
        if self._token is None:
            self._phase = 2
            self._rcvr.set_stopped()  # [exec.associate]: unassociated, the sender never runs
            return
        try:
            self._op.start()
        except BaseException:
            # The child raised out of start (a BaseException from user code run inline) and
            # did not complete: nothing will release the association but us.
            if self._phase == 1:
                self._phase = 2
                self._op = None
                tok, self._token = self._token, None
                tok.disassociate()
            raise

    def get_env(self) -> Any:
        return get_env(self._rcvr)

    def _done(self, how: str) -> Any:
        if self._phase == 2:
            raise completed_twice(self, how)
        self._phase = 2
        self._op = None
        tok = self._token
        self._token = None
        return tok

    # Released right after the completion ([exec.associate]), also when the receiver's
    # completion raises (a BaseException from downstream user code run inline).

    def set_value(self, *vals: object) -> None:
        tok = self._done("set_value")
        try:
            self._rcvr.set_value(*vals)
        finally:
            tok.disassociate()

    def set_error(self, err: object) -> None:
        tok = self._done("set_error")
        try:
            self._rcvr.set_error(err)
        finally:
            tok.disassociate()

    def set_stopped(self) -> None:
        tok = self._done("set_stopped")
        try:
            self._rcvr.set_stopped()
        finally:
            tok.disassociate()

    def close(self) -> None:
        """Drop a connected, never-started operation: release its association."""
        if self._phase == 0:
            self._phase = 3
            tok = self._token
            self._token = None
            op, self._op = self._op, None
            if op is not None:
                close_op(op)  # the child goes first, with whatever it holds ([exec.associate])
            if tok is not None:
                tok.disassociate()

    def __del__(self) -> None:
        if getattr(self, "_phase", 1) == 0:
            self.close()

    def _sx_describe(self) -> AssociateRecord | None:
        """The associated work while it runs (started, not yet completed), for
        ``operation_tree()`` (``_contracts.Describable``); ``None`` otherwise, and while
        another thread is still in ``__init__``. Never raises, takes no lock."""
        try:
            tok = self._token
            if self._phase != 1 or tok is None:
                return None
            op = self._op
            return AssociateRecord(getattr(tok, "_scope", None), op, getattr(op, "_sndr", None))
        except AttributeError:  # being set up by another thread
            return None


class _AssociateSender(Sender[Any]):
    """``make-sender(associate, associate-data(token, sndr))``."""

    __slots__ = ("_sndr", "_token")

    def __init__(self, token: ScopeToken, wrapped: object, associated: bool) -> None:
        self._token = token
        self._sndr: object = wrapped if associated else None  # [exec.associate]: dropped at once

    @property
    def associated(self) -> bool:
        """Whether this sender holds an association (``sndr.has_value()`` of the spec)."""
        return self._sndr is not None

    def release(self) -> tuple[Any, Any] | None:
        """``(token, wrapped_sender)`` and the association with them, or ``None``
        ([exec.associate]).

        The caller becomes responsible for calling ``token.disassociate()``.
        """
        s = self._sndr
        if s is None:
            return None
        self._sndr = None
        return (self._token, s)

    def connect(self, rcvr: Any) -> _AssociateOp:
        """Move the association into the operation ([exec.associate]).

        Connecting a second time is connecting a moved-from sender: the operation completes
        ``set_stopped()``. If connecting the wrapped sender raises, the association is
        released and the exception propagates ([exec.associate]).
        """
        s = self._sndr
        self._sndr = None
        if s is None:
            return _AssociateOp(rcvr, None)
        token = self._token
        op = _AssociateOp(rcvr, token)
        try:
            op._op = connect(s, op)
        except BaseException:
            op._token = None
            op._phase = 3
            token.disassociate()
            raise
        return op

    def close(self) -> None:
        """Drop the association without running anything ([exec.associate]). Idempotent."""
        s = self._sndr
        if s is not None:
            self._sndr = None
            del s  # the wrapped sender goes first ([exec.associate])
            self._token.disassociate()

    def __del__(self) -> None:
        if getattr(self, "_sndr", None) is not None:
            self.close()

    def __copy__(self) -> _AssociateSender:
        """[exec.associate]: the copy asks for an association of its own; unassociated if
        refused."""
        s = self._sndr
        if s is None:
            return _AssociateSender(self._token, None, False)
        token = self._token
        if not token.try_associate():
            return _AssociateSender(token, None, False)
        try:
            s2 = copy.copy(s)
        except BaseException:
            token.disassociate()
            raise
        return _AssociateSender(token, s2, True)

    def get_completion_signatures(self, env: Any = None) -> Any:
        """The wrapped sender's signatures plus ``set_stopped_t()`` ([exec.associate])."""
        stopped = completion_signatures(set_stopped_t())
        if self._sndr is None:
            return stopped
        sigs = get_completion_signatures(self._sndr, env)
        return None if sigs is None else sigs | stopped

    def get_env(self) -> Any:
        return EMPTY_ENV

    @property
    def data(self) -> Any:
        return (self._token, self._sndr)

    def __repr__(self) -> str:
        return (
            f"associate({self._sndr!r}, {self._token!r})"
            if self._sndr is not None
            else (f"associate(<unassociated>, {self._token!r})")
        )


class associate_t(Algorithm):
    """``associate(sndr, token)`` / ``sndr | associate(token)`` ([exec.associate]).

    * Eager ([exec.associate]): ``token.wrap(sndr)`` and ``token.try_associate()`` run when
      ``associate`` is called; while the returned sender holds the association, the scope's
      ``join()`` does not complete.
    * If ``try_associate()`` returns ``False``, the wrapped sender is dropped at once; the
      associate-sender completes ``set_stopped()`` when started and ``sndr`` never runs
      ([exec.associate]).
    * ``connect`` moves the association into the operation; a second ``connect`` gets an
      operation that completes stopped ([exec.associate]). ``copy.copy`` makes a copy with its own
      association ([exec.associate]). ``release()`` hands over ``(token, wrapped)``
      ([exec.associate]).
    * The operation runs the wrapped sender with the receiver's own environment and releases
      the association right after its completion has been delivered ([exec.associate],
      the scopes guide "Senders in a scope: `spawn`, `spawn_future`, `associate`"). A sender or
      operation that is never started releases it on ``close()`` or when dropped.
    * Completion signatures: the wrapped sender's plus ``set_stopped_t()`` ([exec.associate]).
    * ``TypeError`` if ``sndr`` is not a sender or ``token`` is not a scope token.

    Completion signatures: the wrapped sender's plus ``set_stopped_t()`` ([exec.associate]).

    Errors: the wrapped sender's errors pass through; ``TypeError`` at call for a non-sender or
    non-token.

    Cancellation: not associated (closed or joined scope), it completes ``set_stopped()``
    without running ``sndr``; the receiver's stop token reaches the wrapped sender.

    Example:

    >>> import structexec as sx
    >>> scope = sx.simple_counting_scope()
    >>> sx.sync_wait(sx.just(1) | sx.associate(scope.get_token()))
    (1,)
    >>> sx.sync_wait(scope.join())
    ()
    """

    __slots__ = ()

    @overload
    def __call__(self, token: Any, /) -> WidenClosure[NoReturn]: ...
    @overload
    def __call__(self, sndr: Awaitable[T], token: Any, /) -> Sender[T]: ...
    def __call__(self, *args: Any) -> Any:
        if len(args) == 1:
            token = args[0]
            if is_sender(token) and not is_scope_token(token):
                raise TypeError("associate(sndr) needs a scope token: associate(sndr, token)")
            check_scope_token(token, "associate()")
            return Closure(lambda s: self(s, token))
        if len(args) != 2:
            raise TypeError(
                f"associate() takes (sender, token) or (token), got {len(args)} arguments"
            )
        sndr, token = args
        if not is_sender(sndr):
            raise TypeError(
                f"associate() needs a sender as its first argument, got {type(sndr).__name__}"
            )
        check_scope_token(token, "associate()")
        wrapped = token.wrap(sndr)
        s = _AssociateSender(token, wrapped, bool(token.try_associate()))
        if may_transform(associate):
            out: Any = transform_sender(get_domain_early(sndr), s)
            return out
        return s


associate = associate_t()
_AssociateSender.tag = associate
snapshot_roots(_AssociateOp)  # sx.operation_tree()
