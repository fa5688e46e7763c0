"""``when_all`` and ``when_all_with_variant`` ([exec.when.all]).

``when_all(a, b, ...)`` starts every child and completes when all of them have completed:

* all sent values: ``set_value`` with every child's datums concatenated in argument order,
  whatever the order of completion ([exec.when.all]);
* the first ``set_error`` requests stop on the children (on the completing thread) and is the
  result; later errors are dropped ([exec.when.all]); an error wins over a stop even when it arrives
  after it ([exec.when.all]);
* a ``set_stopped`` while no error has happened requests stop and makes the result
  ``set_stopped`` unless an error follows ([exec.when.all]).

It always waits for every child. The children's stop token is ``when_all``'s own
``inplace_stop_source``'s; the receiver's stop token only *propagates* a request to it. A stop
already requested at ``start`` completes ``set_stopped`` without starting any child. The stop
callback on the receiver's token is removed before the completion is delivered
([exec.recv.concepts]). Children may complete concurrently on different threads; the
bookkeeping is done under a lock that is never held while calling out.

This is what a trio user knows as a nursery whose tasks each fill a result slot, where the
first failure cancels the siblings; here the "cancel" is a stop request.

**``just`` children are fused** (as ``then`` fuses ``just(...) | then(f)``, [exec.then]):
``connect`` keeps a ``just(*vals)`` child's sender in its slot, and ``start`` records its
datums where it would have started it (the same order, the same datums). It saves an
operation and a receiver per child, objects in a cycle the garbage collector would walk
(benchmarks/README.md). Not done when a domain customises ``just``, nor with
``_fastpaths.FAST.fuse_just = False``.
"""

from __future__ import annotations

import threading
import types
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, TypeVar, overload

from .._core._adaptor_util import close_op, early
from .._core._completion_signatures import (
    completion_signatures,
    dependent_sender_error,
    get_completion_signatures,
)
from .._core._connect import connect_unchecked as connect
from .._core._domain import DISPATCH as _DS
from .._core._domain import default_domain, domains_active, get_domain_early, may_transform
from .._core._env import EMPTY_ENV, fwd_env, get_env, prop
from .._core._fastpaths import FAST as _FP
from .._core._protocol import Algorithm, Sender, completed_twice, is_sender, twice_started
from .._core._queries import get_domain, get_stop_token, query_or
from .._core._stop_token import (
    inplace_stop_source,
    is_unstoppable,
    never_stop_token,
    stop_callback_for,
)
from .._core._tags import set_stopped_t, set_value_t
from ._dropped_errors import report_dropped_errors as report_dropped_errors
from ._into_variant import into_variant
from ._just import _JustSender, just, just_error, just_stopped
from ._read_env import read_env

if TYPE_CHECKING:
    from .._core._contracts import Env, OperationState, Receiver
    from .._core._stop_token import StopCallback, inplace_stop_token
    from .._core._tags import _Signature

T1 = TypeVar("T1")
T2 = TypeVar("T2")
T3 = TypeVar("T3")
T4 = TypeVar("T4")
T5 = TypeVar("T5")
T6 = TypeVar("T6")

__all__ = ["when_all", "when_all_with_variant"]

_STARTED, _ERROR, _STOPPED = 0, 1, 2
_CoroutineType = types.CoroutineType
_DEFAULT = default_domain()
_NEVER = never_stop_token()


class _WhenAllEnv:
    """``make-when-all-env``: our stop token, and the receiver's forwarding queries
    ([exec.when.all])."""

    __slots__ = ("_env", "_op")

    def __init__(self, op: _WhenAllOp | None, outer: object) -> None:
        self._op = op  # None: an environment for computing completion signatures only
        self._env = fwd_env(outer)

    def _token(self) -> inplace_stop_token:
        op = self._op
        return inplace_stop_source().get_token() if op is None else op._token()

    def _sx_try(self, q: object, default: object) -> object:
        if q is get_stop_token:
            return self._token()
        return query_or(self._env, q, default)

    def query(self, q: object, *args: object) -> object:
        if q is get_stop_token:
            return self._token()
        return self._env.query(q, *args)


class _ChildReceiver:
    """The receiver of child ``#i``; a second completion raises, as every adaptor's does
    ([exec.async.ops]: an operation completes exactly once)."""

    __slots__ = ("_done", "_i", "_op")

    def __init__(self, op: _WhenAllOp, i: int) -> None:
        self._op = op
        self._i = i
        self._done = False

    def get_env(self) -> _WhenAllEnv:
        op = self._op
        cenv = op._cenv
        return op._make_cenv() if cenv is None else cenv

    def set_value(self, *vals: object) -> None:
        if self._done:
            raise completed_twice(self, "set_value")
        self._done = True
        self._op._on_value(self._i, vals)

    def set_error(self, err: object) -> None:
        if self._done:
            raise completed_twice(self, "set_error")
        self._done = True
        self._op._on_error(self._i, err)

    def set_stopped(self) -> None:
        if self._done:
            raise completed_twice(self, "set_stopped")
        self._done = True
        self._op._on_stopped(self._i)

    def __repr__(self) -> str:
        return f"<when_all child #{self._i} receiver>"


class _WhenAllOp:
    __slots__ = (
        "_cenv",
        "_count",
        "_disp",
        "_err",
        "_fused",
        "_lock",
        "_more",
        "_on_stop",
        "_ops",
        "_rcvr",
        "_src",
        "_started",
        "_vals",
    )

    def __init__(self, rcvr: Receiver, n: int) -> None:
        self._rcvr = rcvr
        self._count = n
        self._disp = _STARTED
        self._err: object = None
        self._more: list[tuple[int, object]] | None = None  # the errors that lost ([exec.when.all])
        self._vals: list[tuple[object, ...]] = [()] * n
        self._lock = threading.Lock()
        self._on_stop: StopCallback | None = None
        self._started = False
        self._fused = False  # some child is a fused just (its slot in _ops holds the sender)
        # The stop source, made when first needed: a child asks for its stop token, or the
        # receiver has a stop token to forward (start). Work whose children never ask, under
        # a consumer without a stop token (sync_wait), never makes one.
        self._src: inplace_stop_source | None = None
        # The children's environment, made when a child (or the signature check) first asks;
        # dropped at completion: it refers back to this operation (a cycle otherwise left to
        # the garbage collector after every when_all).
        self._cenv: _WhenAllEnv | None = None
        # Child operations; a fused just keeps its sender here, a completed child None.
        self._ops: list[OperationState | _JustSender | None]

    def _make_cenv(self) -> _WhenAllEnv:
        # Two children asking at once on two threads may each make one: they are equivalent.
        cenv = self._cenv = _WhenAllEnv(self, get_env(self._rcvr))
        return cenv

    def close(self) -> None:
        """Drop a connected, never-started operation: close the children's operations at
        once rather than leaving the cycle they form with this one to the garbage collector
        (the senders guide "Writing your own sender")."""
        if not self._started:
            self._started = True
            ops = self._ops
            self._ops = []
            for op in ops:
                close_op(op)

    def _token(self) -> inplace_stop_token:
        """The children's stop token ([exec.when.all])."""
        src = self._src
        if src is None:
            src = self._make_src()
        return src.get_token()

    def _make_src(self) -> inplace_stop_source:
        """Make the stop source, stopped at once if a child already failed or stopped (the
        completions set ``_disp`` under the lock, then request stop on the source if it
        exists: whichever comes second requests the stop)."""
        lock = self._lock
        lock.acquire()
        src = self._src
        stopped = False
        if src is None:
            src = self._src = inplace_stop_source()
            stopped = self._disp != _STARTED
        lock.release()
        if stopped:
            src.request_stop()
        return src

    def _request_stop(self) -> None:
        src = self._src
        if src is not None:
            src.request_stop()

    def start(self) -> None:
        if self._started:
            raise twice_started(self)
        self._started = True
        # [exec.when.all]: forward a stop request from the receiver's token to our source ...
        tok = query_or(get_env(self._rcvr), get_stop_token, _NEVER)
        if tok is not _NEVER:
            src = self._src
            if src is None:
                src = self._make_src()
            self._on_stop = stop_callback_for(tok, src.request_stop)
            # ... and if it was already requested, complete without starting any child,
            # releasing their operations now (they and their receivers form a cycle with
            # this operation: only the garbage collector would free them otherwise).
            if src.stop_requested():
                self._on_stop.close()
                self._on_stop = None
                ops = self._ops
                self._ops = []
                for op in ops:
                    close_op(op)
                self._rcvr.set_stopped()
                return
        # No slot is None yet (a slot is cleared when its child completes, after its start);
        # a slot holds a _JustSender only when fused.
        ops = self._ops
        try:
            if not self._fused:
                for op in ops:
                    op.start()  # type: ignore[union-attr]
                return
            for i, op in enumerate(ops):
                if type(op) is _JustSender:  # a fused just(*vals): its set_value(*vals), here
                    self._on_value(i, op._vals)
                else:
                    op.start()  # type: ignore[union-attr]
        except BaseException as exc:  # (a completion that raised: its slot is cleared)
            self._start_failed(ops, op, exc)

    def _start_rest(self, first: int) -> None:
        """Start the children from ``#first`` on, after a failed start (as ``start``)."""
        ops = self._ops
        for i in range(first, len(ops)):
            op = ops[i]
            if type(op) is _JustSender:  # a fused just(*vals): its set_value(*vals), here
                self._on_value(i, op._vals)
                continue
            try:
                op.start()  # type: ignore[union-attr]
            except BaseException as exc:
                self._start_failed(ops, op, exc)
                return

    def _start_failed(
        self, ops: list[OperationState | _JustSender | None], op: object, exc: BaseException
    ) -> None:
        """A child's ``start`` raised ``exc``: an ``Exception`` is that child's error (the
        others are stopped and waited for, nothing started is orphaned); another exception
        stops what runs, drops the rest and propagates (the operation never completes, as
        ``when_any``'s), as does one from a child that completed first ([exec.async.ops])."""
        i = next((k for k, o in enumerate(ops) if o is op), -1)
        if i < 0 or not isinstance(exc, Exception):
            if i >= 0:
                src = self._src if self._src is not None else self._make_src()
                src.request_stop()
                ops[i] = None
                for k in range(i + 1, len(ops)):
                    o, ops[k] = ops[k], None  # (a running child's completion clears its slot)
                    close_op(o)
                on_stop, self._on_stop = self._on_stop, None
                if on_stop is not None:
                    on_stop.close()
            raise exc
        self._on_error(i, exc)
        self._start_rest(i + 1)

    # -- child completions ([exec.when.all] impls-for<when_all_t>::complete)

    # Each completion drops this operation's reference to the child's operation: a finished
    # child (and its receiver) is freed at once by reference counting instead of living, in a
    # cycle with this operation, until the last child completes. With 100,000 children that
    # keeps the garbage collector from walking an ever larger heap (per-child cost at 1e5
    # within 1.5x of 1e3; benchmarks/bench_scaling.py).

    def _on_value(self, i: int, vals: tuple[object, ...]) -> None:
        lock = self._lock
        lock.acquire()
        self._ops[i] = None
        if self._disp == _STARTED:  # values are kept only while nothing failed ([exec.when.all])
            self._vals[i] = vals
        self._count = c = self._count - 1
        lock.release()
        if c == 0:
            self._complete()

    def _on_error(self, i: int, err: object) -> None:
        lock = self._lock
        lock.acquire()
        self._ops[i] = None
        first = self._disp != _ERROR  # an error replaces a stop ([exec.when.all])
        if first:
            self._disp = _ERROR
            self._err = err
        else:  # kept to be reported with the error that won (never silently dropped)
            more = self._more
            if more is None:
                more = self._more = []
            more.append((i, err))
        lock.release()
        if first:
            self._request_stop()  # synchronously, on this thread ([exec.when.all])
        self._arrive()

    def _on_stopped(self, i: int) -> None:
        lock = self._lock
        lock.acquire()
        self._ops[i] = None
        first = self._disp == _STARTED
        if first:
            self._disp = _STOPPED
        lock.release()
        if first:
            self._request_stop()  # ([exec.when.all])
        self._arrive()

    def _arrive(self) -> None:
        lock = self._lock
        lock.acquire()
        self._count = c = self._count - 1
        lock.release()
        if c == 0:
            self._complete()

    def _complete(self) -> None:
        self._cenv = None  # break the op <-> environment cycle (a late query makes a new one)
        on_stop = self._on_stop
        if on_stop is not None:  # deregister before completing ([exec.recv.concepts])
            self._on_stop = None
            on_stop.close()
        rcvr = self._rcvr
        disp = self._disp
        if disp == _STARTED:
            vs = self._vals
            if len(vs) == 2:
                rcvr.set_value(*vs[0], *vs[1])
            else:
                # One pass over the children's datums (concatenating tuples would copy the
                # prefix each time: quadratic in the number of children).
                rcvr.set_value(*[x for v in vs for x in v])
        elif disp == _ERROR:
            err = self._err
            self._err = None
            more = self._more
            if more is not None:
                self._more = None
                report_dropped_errors(err, more)
            rcvr.set_error(err)
        else:
            rcvr.set_stopped()


def _common_domain(children: tuple[object, ...]) -> object:
    """``CD``: the children's common early domain; the default domain when there is none."""
    doms = [get_domain_early(c) for c in children]
    first = doms[0]
    if all(d == first for d in doms):
        return first
    # Python has no common_type; take a domain that every other one derives from, if any.
    for d in doms:
        if all(isinstance(o, type(d)) for o in doms):
            return d
    return _DEFAULT


class _WhenAllSender(Sender[object]):
    __slots__ = ("_attrs", "_checked", "_children")

    def __init__(self, children: tuple[object, ...]) -> None:
        self._children = children
        self._attrs: object = None
        # None: not checked yet; True: checked without an env; False: check on every connect.
        self._checked: bool | None = None

    def _check_child_sigs(self, env: object) -> None:
        """[exec.when.all]: a child with two or more value signatures is rejected at connect."""
        need_env = False
        for i, c in enumerate(self._children):
            if type(c) in _AT_MOST_ONE_VALUE_SIG:
                continue
            try:
                cs = get_completion_signatures(c, env)
            except dependent_sender_error:
                need_env = True
                continue
            if cs is not None and cs.count_of(set_value_t) >= 2:
                sigs = ", ".join(repr(s) for s in cs if type(s) is set_value_t)
                raise TypeError(
                    f"when_all(): child #{i} ({c!r}) can complete with several value signatures "
                    f"({sigs}); when_all needs at most one per child. Use "
                    "sx.when_all_with_variant(...) or sx.into_variant(child) ([exec.when.all])"
                )
        if env is None:
            self._checked = not need_env

    def connect(self, rcvr: Receiver) -> _WhenAllOp:
        children = self._children
        op = _WhenAllOp(rcvr, len(children))
        checked = self._checked
        if checked is None:
            self._check_child_sigs(None)
            checked = self._checked
        if not checked:
            self._check_child_sigs(op._make_cenv())
        ops: list[OperationState | _JustSender | None] = []
        # A domain that customises `just` must see every just connected (connect_unchecked).
        fuse = _FP.fuse_just and not (_DS.on and (_DS.all or just in _DS.tags))
        try:
            for i, c in enumerate(children):
                if fuse and type(c) is _JustSender:
                    ops.append(c)  # fused: start() delivers its datums (module docstring)
                    op._fused = True
                else:
                    ops.append(connect(c, _ChildReceiver(op, i)))
        except BaseException:
            # A child rejected its receiver (or a coroutine given twice): release what the
            # children connected so far hold, at once, not when the garbage collector runs.
            for o in ops:
                close_op(o)
            raise
        op._ops = ops
        return op

    def get_env(self) -> Env:
        """``env()``, or ``get_domain`` when the children share a non-default domain
        ([exec.when.all])."""
        attrs = self._attrs
        if attrs is None:
            attrs = EMPTY_ENV
            if domains_active():
                cd = _common_domain(self._children)
                if type(cd) is not default_domain:
                    attrs = prop(get_domain, cd)
            self._attrs = attrs
        return attrs  # type: ignore[return-value]

    def get_completion_signatures(self, env: object = None) -> completion_signatures | None:
        """Concatenated values, the union of the errors, and stopped ([exec.when.all])."""
        cenv = None if env is None else _WhenAllEnv(None, env)
        # A child without a value signature contributes no datums ([exec.stopped.opt]'s
        # example: when_all(just(1), just_stopped()) has the value signature (int)).
        values: list[object] = []
        others: list[_Signature] = []
        for c in self._children:
            cs = get_completion_signatures(c, cenv)
            if cs is None:
                return None
            vsigs = [s for s in cs if type(s) is set_value_t]
            if len(vsigs) >= 2:
                raise TypeError(
                    f"when_all(): child {c!r} has several value signatures; when_all needs at most "
                    "one per child. Use sx.when_all_with_variant(...) or sx.into_variant(child) "
                    "([exec.when.all])"
                )
            if vsigs:
                values.extend(vsigs[0].args)
            others.extend(s for s in cs if type(s) is not set_value_t)
        sigs: list[_Signature] = [set_value_t(*values)]
        sigs.extend(others)
        if env is None or not is_unstoppable(get_stop_token(env)):
            sigs.append(set_stopped_t())  # an outer stop before start ([exec.when.all])
        return completion_signatures(*sigs)

    @property
    def _sx_completes_inline(self) -> bool:
        return all(getattr(c, "_sx_completes_inline", False) for c in self._children)

    @property
    def data(self) -> None:
        return None

    @property
    def children(self) -> tuple[object, ...]:
        return self._children

    def __repr__(self) -> str:
        return f"{self.tag!r}({', '.join(map(repr, self._children))})"


class _WhenAllWithVariantSender(_WhenAllSender):
    __slots__ = ("_lowered",)

    def __init__(self, children: tuple[object, ...]) -> None:
        super().__init__(children)
        self._lowered: Sender[object] | None = None

    def lower(self) -> Sender[object]:
        """``when_all(into_variant(c) for c in children)`` ([exec.when.all])."""
        low = self._lowered
        if low is None:
            low = self._lowered = when_all(*(into_variant(c) for c in self._children))
        return low

    def connect(self, rcvr: Receiver) -> OperationState:  # type: ignore[override]
        op: OperationState = connect(self.lower(), rcvr)
        return op

    def get_completion_signatures(self, env: object = None) -> completion_signatures | None:
        return get_completion_signatures(self.lower(), env)


def _make(cls: type[_WhenAllSender], name: str, sndrs: tuple[object, ...]) -> Sender[object]:
    """Check the arguments ([exec.when.all]) and build the sender, transformed by the children's
    common early domain when domains are in use ([exec.snd.expos])."""
    if not sndrs:
        raise TypeError(
            f"{name}() needs at least one sender ([exec.when.all]); for no work at all use "
            "sx.just()"
        )
    for i, s in enumerate(sndrs):
        # A sender or a coroutine object (the common children) need no is_sender call.
        t = type(s)
        if t is not _CoroutineType and not (t in _SENDER_TYPES or is_sender(s)):
            raise TypeError(f"{name}(): argument #{i} must be a sender, got {type(s).__name__}")
    sndr = cls(sndrs)
    # early() leaves the sender as it is unless some domain may transform its tag: skip the
    # children's common domain (a query per child) in that case too.
    if _DS.on and may_transform(cls.tag):
        return early(_common_domain(sndrs), sndr)
    return sndr


class when_all_t(Algorithm):
    """``when_all(*senders)``: run senders concurrently; complete when all have completed.

    [exec.when.all]. Success sends every child's datums, concatenated in argument order:
    ``sync_wait(when_all(just(1), just(2, 3), just()))`` is ``(1, 2, 3)``. The first error requests
    stop on the other children and becomes the result (an error also beats an earlier stop); a
    stopped child requests stop and makes the result stopped. ``when_all`` always waits for every
    child before completing. Its children see ``when_all``'s own stop token, to which a stop request
    on the receiver's token is forwarded; a request made before ``start`` completes ``set_stopped``
    without starting any child. Attributes: empty, or ``get_domain`` if the children share a custom
    domain ([exec.when.all]).

    Coroutine objects and other awaitables are accepted as children. Raises ``TypeError`` at call
    for no senders or a non-sender ([exec.when.all]), and at ``connect`` for a child whose declared
    completion signatures have more than one value signature ([exec.when.all]; use
    ``when_all_with_variant``). Children may complete on different threads.

    Completion signatures: one ``set_value_t`` with the children's value datums concatenated in
    argument order (each child has at most one value signature), the children's error
    signatures, and ``set_stopped_t()`` ([exec.when.all]).

    Errors: the first error wins and requests stop on the others; an error beats a stop.

    Cancellation: a stop request on the receiver's token is forwarded to every child; a stopped
    child requests stop on the others and the result is stopped; a request before ``start``
    completes ``set_stopped`` without starting any child.

    Example:

    >>> import structexec as sx
    >>> sx.sync_wait(sx.when_all(sx.just(1), sx.just(2, 3)))
    (1, 2, 3)
    """

    __slots__ = ()

    # Typing (docs/typing.md): children that send one datum each; ``await`` gives the tuple.
    @overload
    def __call__(self, s1: Awaitable[T1], /) -> Sender[T1]: ...
    @overload
    def __call__(self, s1: Awaitable[T1], s2: Awaitable[T2], /) -> Sender[tuple[T1, T2]]: ...
    @overload
    def __call__(
        self, s1: Awaitable[T1], s2: Awaitable[T2], s3: Awaitable[T3], /
    ) -> Sender[tuple[T1, T2, T3]]: ...
    @overload
    def __call__(
        self, s1: Awaitable[T1], s2: Awaitable[T2], s3: Awaitable[T3], s4: Awaitable[T4], /
    ) -> Sender[tuple[T1, T2, T3, T4]]: ...
    @overload
    def __call__(
        self,
        s1: Awaitable[T1],
        s2: Awaitable[T2],
        s3: Awaitable[T3],
        s4: Awaitable[T4],
        s5: Awaitable[T5],
        /,
    ) -> Sender[tuple[T1, T2, T3, T4, T5]]: ...
    @overload
    def __call__(
        self,
        s1: Awaitable[T1],
        s2: Awaitable[T2],
        s3: Awaitable[T3],
        s4: Awaitable[T4],
        s5: Awaitable[T5],
        s6: Awaitable[T6],
        /,
    ) -> Sender[tuple[T1, T2, T3, T4, T5, T6]]: ...
    @overload
    def __call__(self) -> Sender[None]: ...
    @overload
    def __call__(
        self,
        s1: Awaitable[object],
        s2: Awaitable[object],
        s3: Awaitable[object],
        s4: Awaitable[object],
        s5: Awaitable[object],
        s6: Awaitable[object],
        s7: Awaitable[object],
        /,
        *sndrs: Awaitable[object],
    ) -> Sender[tuple[Any, ...]]: ...
    def __call__(self, *sndrs: object) -> Sender[object]:
        return _make(_WhenAllSender, "when_all", sndrs)


class when_all_with_variant_t(Algorithm):
    """``when_all_with_variant(*senders)``: ``when_all(*(into_variant(s) for s in senders))``.

    [exec.when.all]. Each child contributes exactly one datum, the
    tuple of the datums it sent, so children with several possible value signatures are
    fine: ``sync_wait(when_all_with_variant(just(1), just(2, 3)))`` is ``((1,), (2, 3))``.
    The lowering to ``when_all(into_variant(...), ...)`` happens at ``connect``
    (``transform_sender``), so a domain may customise ``when_all_with_variant`` itself.

    Completion signatures: ``set_value_t(tuple, ...)``: one tuple per child (its
    ``into_variant`` datum), the children's errors, ``set_stopped_t()`` ([exec.when.all]).

    Errors: as ``when_all``: the first error wins and requests stop on the others.

    Cancellation: as ``when_all``.

    Example:

    >>> import structexec as sx
    >>> sx.sync_wait(sx.when_all_with_variant(sx.just(1), sx.just(2, 3)))
    ((1,), (2, 3))
    """

    __slots__ = ()

    def __call__(self, *sndrs: object) -> Sender[object]:
        return _make(_WhenAllWithVariantSender, "when_all_with_variant", sndrs)

    def transform_sender(self, sndr: object, env: object = None) -> object:
        """The late lowering to ``when_all(into_variant(c), ...)`` ([exec.when.all],
        [exec.snd.transform])."""
        if env is None or not isinstance(sndr, _WhenAllWithVariantSender):
            return sndr
        return sndr.lower()


when_all = when_all_t()
# Sender types that never declare more than one value signature, so that the check of 16.2
# costs nothing for them (it would otherwise build their signatures on every new sender).
_AT_MOST_ONE_VALUE_SIG: set[type] = {
    type(just()),
    type(just_error(0)),
    type(just_stopped()),
    type(read_env(get_stop_token)),
    type(into_variant(just())),
    _WhenAllSender,
}
#: Types ``_make`` accepts without calling ``is_sender``: a sender type known to the library.
_SENDER_TYPES = frozenset(_AT_MOST_ONE_VALUE_SIG)
when_all_with_variant = when_all_with_variant_t()
_WhenAllSender.tag = when_all
_WhenAllWithVariantSender.tag = when_all_with_variant
