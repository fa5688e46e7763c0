"""``bulk``, ``bulk_chunked``, ``bulk_unchunked`` and the execution policies ([exec.bulk]).

[exec.bulk], [exec.snd.transform], [exec.par.scheduler],
the parallel guide "Data parallelism: `bulk`". Each algorithm waits for its child's values, runs a
function over the index space ``[0, shape)`` and then sends the child's values on ([exec.bulk]):

* ``bulk(sndr, policy, shape, f)`` calls ``f(i, *vals)`` for every ``i`` ([exec.bulk]);
* ``bulk_unchunked(...)`` calls ``f(i, *vals)`` for every ``i``, ideally each on its own
  agent ([exec.bulk]);
* ``bulk_chunked(...)`` calls ``f(b, e, *vals)`` for chunks ``0 <= b < e <= shape`` that
  cover each index exactly once ([exec.bulk]).

The defaults here run on the agent where the child completed: ``bulk_chunked`` makes one call
``f(0, shape, *vals)`` (none when ``shape == 0``, [exec.bulk]), ``bulk_unchunked`` loops. ``bulk``
lowers to ``bulk_chunked`` (``bulk_t.transform_sender``, applied at ``connect``), with a chunk
function that loops ``f(i, *vals)``; a scheduler whose domain customises ``bulk_chunked``
(``parallel_scheduler`` does) therefore also runs plain ``bulk`` ([exec.par.scheduler]). The default
``connect`` of a ``bulk`` sender performs the same lowering, so the result does not depend on
whether the domain machinery is active.

A backend reaches the pieces through the sender's ``policy``, ``shape``, ``f`` and ``child``
properties (also ``data == (policy, shape, f)`` and ``children == (child,)``, [exec.snd.concepts]).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar, overload

from .._core._adaptor_util import ChildOp, UnarySender, check_sender, early_child, is_async_fn
from .._core._completion_signatures import completion_signatures, get_completion_signatures
from .._core._connect import connect_unchecked as connect
from .._core._env import fwd_env
from .._core._protocol import Algorithm, Closure, Sender, WidenClosure, completed_twice
from .._core._tags import set_error_t, set_value_t

if TYPE_CHECKING:
    from .._core._contracts import OperationState, Receiver

__all__ = [
    "bulk",
    "bulk_chunked",
    "bulk_unchunked",
    "execution_policy",
    "par",
    "par_unseq",
    "seq",
    "unseq",
]

T = TypeVar("T")


# --------------------------------------------------------------------------- policies


class execution_policy:
    """An execution policy: ``sx.seq``, ``sx.par``, ``sx.par_unseq`` or ``sx.unseq``.

    The C++ ``std::execution::sequenced_policy`` & co. ([execution.syn], [algorithms.parallel]).
    A policy says how ``bulk`` may run ``f``: ``seq`` one call after another on one agent,
    ``par`` concurrently on several agents, ``unseq``/``par_unseq`` additionally interleaved
    (vectorised) on one agent. The default implementations here always run sequentially; a
    scheduler's backend (the parallel scheduler) may use ``par`` to run chunks concurrently
    ([exec.bulk]). The four instances are the only policies; they compare by identity.
    """

    __slots__ = ("name", "parallel")

    def __init__(self, name: str, parallel: bool) -> None:
        self.name = name
        #: ``True`` for ``par`` and ``par_unseq``: iterations may run on several agents.
        self.parallel = parallel

    def __repr__(self) -> str:
        return f"sx.{self.name}"

    def __reduce__(self) -> str:
        return self.name

    def __copy__(self) -> execution_policy:
        return self

    def __deepcopy__(self, memo: object) -> execution_policy:
        return self


#: Sequenced: iterations run one after another on the calling agent.
seq = execution_policy("seq", False)
#: Parallel: iterations may run concurrently on several agents.
par = execution_policy("par", True)
#: Parallel and unsequenced: concurrently, and interleaved within an agent.
par_unseq = execution_policy("par_unseq", True)
#: Unsequenced: on one agent, possibly interleaved (vectorised).
unseq = execution_policy("unseq", False)


# --------------------------------------------------------------------------- operations


class _BulkOp(ChildOp):
    """Operation of the default ``bulk_chunked``/``bulk_unchunked``; the child's receiver.

    Errors and stopped are forwarded ([exec.bulk]).
    """

    __slots__ = ("_chunked", "_f", "_shape")

    def __init__(self, rcvr: Receiver, shape: int, f: Callable[..., object], chunked: bool) -> None:
        self._rcvr = rcvr
        self._shape = shape
        self._f = f
        self._chunked = chunked
        self._state = 0
        self._op = None

    def set_value(self, *vals: object) -> None:
        if self._state == 2:
            raise completed_twice(self, "set_value")
        self._state = 2
        self._op = None
        n = self._shape
        f = self._f
        try:
            if self._chunked:
                if n > 0:  # no (0, 0) chunk: b < e must hold ([exec.bulk])
                    f(0, n, *vals)
            else:
                _loop(f, 0, n, vals)
        except Exception as e:
            self._rcvr.set_error(e)
            return
        self._rcvr.set_value(*vals)


def _loop(f: Callable[..., object], b: int, e: int, vs: tuple[object, ...]) -> None:
    """``for i in range(b, e): f(i, *vs)``, without the ``*vs`` cost for 0-2 datums."""
    n = len(vs)
    if n == 1:
        v = vs[0]
        for i in range(b, e):
            f(i, v)
    elif n == 0:
        for i in range(b, e):
            f(i)
    elif n == 2:
        v, w = vs
        for i in range(b, e):
            f(i, v, w)
    else:
        for i in range(b, e):
            f(i, *vs)


class chunk_loop:
    """The chunk function ``bulk`` lowers to: ``f'(b, e, *vs)`` calls ``f(i, *vs)`` for
    ``i`` in ``range(b, e)`` ([exec.bulk] ``bulk.transform_sender``).

    A module-level class rather than a closure so that it pickles whenever ``f`` does (the
    process-pool and dask backends send it to other processes). ``f`` is the original
    function.
    """

    __slots__ = ("f",)

    def __init__(self, f: Callable[..., object]) -> None:
        self.f = f

    def __call__(self, b: int, e: int, *vs: object) -> None:
        _loop(self.f, b, e, vs)

    def __reduce__(self) -> tuple[type[chunk_loop], tuple[Callable[..., object]]]:
        return (chunk_loop, (self.f,))

    def __repr__(self) -> str:
        return f"chunk_loop({self.f!r})"


# --------------------------------------------------------------------------- senders


class _BulkBase(UnarySender):
    __slots__ = ("_f", "_policy", "_shape")
    _algo = "bulk"

    def __init__(
        self, child: object, policy: execution_policy, shape: int, f: Callable[..., object]
    ) -> None:
        self._child = child
        self._policy = policy
        self._shape = shape
        self._f = f

    def get_completion_signatures(self, env: object = None) -> completion_signatures | None:
        """The child's signatures, plus ``set_error_t(Exception)`` when it can send values."""
        cs = get_completion_signatures(self._child, None if env is None else fwd_env(env))
        if cs is None:
            return None
        if cs.count_of(set_value_t):
            return cs | completion_signatures(set_error_t(Exception))
        return cs

    @property
    def policy(self) -> execution_policy:
        """The execution policy (``sx.seq``, ``sx.par``, ...)."""
        return self._policy

    @property
    def shape(self) -> int:
        """The size of the index space."""
        return self._shape

    @property
    def f(self) -> Callable[..., object]:
        """The function applied to the index space."""
        return self._f

    @property
    def child(self) -> object:
        """The sender whose values the iterations receive."""
        return self._child

    @property
    def data(self) -> tuple[execution_policy, int, Callable[..., object]]:
        return (self._policy, self._shape, self._f)

    def __repr__(self) -> str:
        fn = getattr(self._f, "__name__", self._f)
        return f"{self._algo}({self._child!r}, {self._policy!r}, {self._shape}, {fn!r})"


class _BulkChunkedSender(_BulkBase):
    __slots__ = ()
    _algo = "bulk_chunked"

    def connect(self, rcvr: Receiver) -> _BulkOp:
        op = _BulkOp(rcvr, self._shape, self._f, True)
        op._op = connect(self._child, op)
        return op


class _BulkUnchunkedSender(_BulkBase):
    __slots__ = ()
    _algo = "bulk_unchunked"

    def connect(self, rcvr: Receiver) -> _BulkOp:
        op = _BulkOp(rcvr, self._shape, self._f, False)
        op._op = connect(self._child, op)
        return op


class _BulkSender(_BulkBase):
    __slots__ = ("_lowered",)
    _algo = "bulk"

    def __init__(
        self, child: object, policy: execution_policy, shape: int, f: Callable[..., object]
    ) -> None:
        super().__init__(child, policy, shape, f)
        self._lowered: _BulkChunkedSender | None = None

    def lower(self) -> _BulkChunkedSender:
        """``bulk_chunked(child, policy, shape, chunk_loop(f))`` ([exec.bulk])."""
        low = self._lowered
        if low is None:
            low = self._lowered = _BulkChunkedSender(
                self._child, self._policy, self._shape, chunk_loop(self._f)
            )
        return low

    def connect(self, rcvr: Receiver) -> OperationState:
        # The same lowering as bulk_t.transform_sender, so that the behaviour does not depend
        # on whether custom domains are active. connect() transforms the lowered sender with
        # its late domain when they are.
        op: OperationState = connect(self.lower(), rcvr)
        return op


# --------------------------------------------------------------------------- algorithms


def _check(name: str, policy: object, shape: Any, f: object) -> int:
    if not isinstance(policy, execution_policy):
        raise TypeError(
            f"{name}(): policy must be an execution policy (sx.seq, sx.par, sx.par_unseq or "
            f"sx.unseq), got {type(policy).__name__}"
        )
    try:
        n = operator.index(shape)
    except TypeError:
        raise TypeError(f"{name}(): shape must be an integer, got {type(shape).__name__}") from None
    if n < 0:
        raise ValueError(f"{name}(): shape must not be negative, got {n}")
    if not callable(f):
        raise TypeError(f"{name}(): f must be callable, got {type(f).__name__}")
    if is_async_fn(f):
        raise TypeError(
            f"{name}(): f={getattr(f, '__qualname__', f)!r} is an async function; {name} calls "
            "f and ignores what it returns, so its coroutines would never run ([exec.bulk]). "
            "Pass a plain function, or await the work in a coroutine or @sx.task"
        )
    return n


class _BulkAlgorithm(Algorithm):
    __slots__ = ()
    _name = "bulk"
    _cls: type[_BulkBase]

    @overload
    def __call__(
        self, policy: execution_policy, shape: int, f: Callable[..., object], /
    ) -> WidenClosure[NoReturn]: ...
    @overload
    def __call__(
        self, sndr: Sender[T], policy: execution_policy, shape: int, f: Callable[..., object], /
    ) -> Sender[T]: ...
    def __call__(self, *args: object) -> object:
        return self._build(args)

    def _build(self, args: tuple[Any, ...]) -> Any:
        name = self._name
        if len(args) == 3:
            policy, shape, f = args
            if isinstance(policy, execution_policy) or not callable(
                getattr(policy, "connect", None)
            ):
                _check(name, policy, shape, f)
                return Closure(lambda s: self._build((s, policy, shape, f)))
            raise TypeError(
                f"{name}(sndr, shape, f): the execution policy is missing; write "
                f"{name}(sndr, sx.par, shape, f) or {name}(sx.seq, shape, f) as a closure "
                "([exec.bulk])"
            )
        if len(args) != 4:
            raise TypeError(
                f"{name}() takes (sender, policy, shape, f) or (policy, shape, f), got "
                f"{len(args)} arguments"
            )
        sndr, policy, shape, f = args
        check_sender(name, "sndr", sndr)
        n = _check(name, policy, shape, f)
        return early_child(sndr, self._cls(sndr, policy, n, f))


class bulk_t(_BulkAlgorithm):
    """``bulk(sndr, policy, shape, f)`` / ``sndr | bulk(policy, shape, f)`` ([exec.bulk]).

    [exec.bulk]. When ``sndr`` sends values ``vals``, calls
    ``f(i, *vals)`` for every ``i`` in ``range(shape)`` and then sends ``vals`` on unchanged
    (the same objects, so mutations made by ``f`` are visible downstream, [exec.bulk]). With
    ``shape == 0``, ``f`` is never called. If a call raises, the result is ``set_error`` with
    that exception; some calls may already have run ([exec.bulk]). Errors and stopped from ``sndr``
    are forwarded ([exec.bulk]). Stop requests are not checked during the loop (allowed by 15.8).

    ``policy`` is ``sx.seq``, ``sx.par``, ``sx.par_unseq`` or ``sx.unseq``; ``shape`` a non-negative
    integer; ``f`` a callable. Otherwise ``TypeError`` (``ValueError`` for a negative shape) is
    raised when the sender is built. P2079's three-argument ``bulk(sndr, shape, f)`` is not
    accepted: the policy is required (the parallel guide "Data parallelism: `bulk`").

    At ``connect``, ``bulk`` becomes ``bulk_chunked(sndr, policy, shape, chunk_loop(f))``
    (``transform_sender``), which is how a scheduler that customises ``bulk_chunked`` (the
    parallel scheduler) also runs ``bulk`` ([exec.par.scheduler]).

    Completion signatures: the child's value signatures (the datums are sent on unchanged),
    ``set_error_t(Exception)`` and the child's error and stopped signatures ([exec.bulk]).

    Errors: an ``Exception`` from ``f`` completes ``set_error`` with it; some calls may already
    have run.

    Cancellation: stop requests are not checked during the loop; the child's ``set_stopped()``
    passes through.

    Example:

    >>> import structexec as sx
    >>> sx.sync_wait(sx.just([0, 0, 0]) | sx.bulk(sx.seq, 3, lambda i, v: v.__setitem__(i, i * i)))
    ([0, 1, 4],)
    """

    __slots__ = ()
    _name = "bulk"
    _cls = _BulkSender

    def transform_sender(self, sndr: object, env: object = None) -> object:
        """``bulk`` → ``bulk_chunked`` with a looping chunk function ([exec.bulk],
        [exec.snd.transform])."""
        if env is None or not isinstance(sndr, _BulkSender):
            return sndr
        return sndr.lower()


class bulk_chunked_t(_BulkAlgorithm):
    """``bulk_chunked(sndr, policy, shape, f)``: call ``f(b, e, *vals)`` over chunks.

    [exec.bulk]. The chunks ``[b, e)`` satisfy ``0 <= b < e <= shape``
    and cover every index exactly once. The default implementation makes a single call
    ``f(0, shape, *vals)`` on the agent where ``sndr`` completed (no call at all when
    ``shape == 0``); a scheduler's domain may split the range over several agents (the
    parallel scheduler does). Then ``vals`` are sent on. Same argument rules, error and
    forwarding behaviour as :data:`bulk`.

    Completion signatures: the child's value signatures (the datums are sent on unchanged),
    ``set_error_t(Exception)`` and the child's error and stopped signatures ([exec.bulk]).

    Errors: an ``Exception`` from ``f`` completes ``set_error`` with it; some calls may already
    have run.

    Cancellation: stop requests are not checked during the loop; the child's ``set_stopped()``
    passes through.

    Example:

    >>> import structexec as sx
    >>> def f(b, e, v):
    ...     v[b:e] = range(b, e)
    >>> sx.sync_wait(sx.just([0, 0, 0]) | sx.bulk_chunked(sx.seq, 3, f))
    ([0, 1, 2],)
    """

    __slots__ = ()
    _name = "bulk_chunked"
    _cls = _BulkChunkedSender


class bulk_unchunked_t(_BulkAlgorithm):
    """``bulk_unchunked(sndr, policy, shape, f)``: call ``f(i, *vals)`` for each index.

    [exec.bulk]. Recommended practice is one agent per iteration; the
    default implementation is a sequential loop on the agent where ``sndr`` completed, and a
    scheduler's domain may do better (the parallel scheduler does). Same argument rules, error
    and forwarding behaviour as :data:`bulk`.

    Completion signatures: the child's value signatures (the datums are sent on unchanged),
    ``set_error_t(Exception)`` and the child's error and stopped signatures ([exec.bulk]).

    Errors: an ``Exception`` from ``f`` completes ``set_error`` with it; some calls may already
    have run.

    Cancellation: stop requests are not checked during the loop; the child's ``set_stopped()``
    passes through.

    Example:

    >>> import structexec as sx
    >>> def f(i, v):
    ...     v[i] = 1
    >>> sx.sync_wait(sx.just([0, 0]) | sx.bulk_unchunked(sx.seq, 2, f))
    ([1, 1],)
    """

    __slots__ = ()
    _name = "bulk_unchunked"
    _cls = _BulkUnchunkedSender


bulk = bulk_t()
bulk_chunked = bulk_chunked_t()
bulk_unchunked = bulk_unchunked_t()
_BulkSender.tag = bulk
_BulkChunkedSender.tag = bulk_chunked
_BulkUnchunkedSender.tag = bulk_unchunked
