"""``then``, ``upon_error``, ``upon_stopped`` ([exec.then]).

Adjacent ``then``/``upon_*`` stages are fused at ``connect`` into one operation that runs the
functions in a loop, so a pipeline of 10,000 stages needs neither 10,000 operation states nor
10,000 stack frames, and each stage costs little more than the call itself.
Fusion is not observable: each function still runs once, in order, on the agent where the
previous stage completed, and a stage that does not match the incoming completion forwards it
unchanged ([exec.then]).

``_fastpaths.FAST.fuse_then = False`` turns the fusion off (tests compare both paths): each
stage is then connected as its own ``_ThenOp`` over its child's operation, ``just(...) |
then(f)`` included, which is the one-operation-per-stage structure of [exec.then]. The property
test ``tests/test_then_fusion_property.py`` checks that both paths agree.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar, overload

from .._core._adaptor_util import (
    PLAIN_CALLABLES,
    BoundClosure,
    ChildOp,
    FnAdaptor,
    UnarySender,
    async_fn_error,
    is_async_fn,
)
from .._core._connect import connect_unchecked as connect
from .._core._domain import DISPATCH as _DS
from .._core._domain import NO_DOMAIN_ENV as _NDE
from .._core._domain import get_domain_late, transform_sender
from .._core._env import fwd_env, get_env
from .._core._fastpaths import FAST as _FP
from .._core._protocol import (
    MapClosure,
    Sender,
    WidenClosure,
    completed_twice,
    twice_started,
)
from .._core._values import values
from ._just import _JustSender

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from typing import TypeAlias

    from .._core._contracts import Env, OperationState, Receiver

    _Fn: TypeAlias = Callable[..., object]
    #: A fused chain's stages: ``(kind, f)`` pairs, innermost first.
    _Stages: TypeAlias = tuple[tuple[int, _Fn], ...]
    #: What ``_ThenBase._flatten`` caches: the innermost non-then child, the stages, and the
    #: functions when every stage is a ``then`` (else ``None``).
    _Flat: TypeAlias = tuple[object, _Stages, "tuple[_Fn, ...] | None"]

__all__ = ["then", "upon_error", "upon_stopped"]

R = TypeVar("R")
# ``bound=Any``: pyright types an unannotated lambda's parameter as the type variable itself,
# so ``then(lambda x: x + 1)`` would be an error with a plain TypeVar; with ``Any`` as the
# bound the lambda's body is not checked (mypy infers it from the sender, docs/typing.md).
T = TypeVar("T")
A = TypeVar("A", bound=Any)
B = TypeVar("B", bound=Any)
C = TypeVar("C", bound=Any)
D = TypeVar("D", bound=Any)
E = TypeVar("E", bound=Any)
F = TypeVar("F", bound=Any)
_VALUE, _ERROR, _STOPPED = 0, 1, 2
_CoroutineType = types.CoroutineType
_FunctionType = types.FunctionType
_CO_COROUTINE = inspect.CO_COROUTINE
_NAMES = ("then", "upon_error", "upon_stopped")
#: The types of a function's result that are not sent as one datum by the values convention:
#: ``None`` (no datum), ``sx.values`` (several), a coroutine object (an error, [exec.then]).
_NOT_ONE_DATUM = frozenset((type(None), values, _CoroutineType))
#: The plain function that ``then(f)`` last found not to be an ``async def`` one (a one-entry
#: cache: building ``then(f)`` in a loop then checks ``f`` once). Not ``None``: ``then(None)``
#: must reach the check.
_last_sync_fn: object = object()


def run_stages(stages: Iterable[tuple[int, _Fn]], kind: int, data: Any) -> tuple[int, Any]:
    """Apply a fused chain of ``then``/``upon_*`` stages (``(kind, f)`` pairs) to a completion
    ``(kind, data)`` and return the resulting one ([exec.then]): a stage applies only to its
    own kind; an ``Exception`` it raises (or an ``async def`` function's coroutine, which is
    an error) becomes ``(ERROR, e)``; a result becomes the value datums (``data`` is then a
    tuple or a ``values``). Used by ``_ThenOp`` and by remote workers running a whole chain."""
    for k, f in stages:
        if k != kind:
            continue
        try:
            if kind == _VALUE:
                r = f(*data)
            elif kind == _ERROR:
                r = f(data)
            else:
                r = f()
        except Exception as e:
            kind, data = _ERROR, e
            continue
        if type(r) is _CoroutineType:
            kind, data = _ERROR, returned_coroutine(kind, f, r)
            continue
        kind = _VALUE
        data = () if r is None else (r if type(r) is values else (r,))
    return kind, data


def returned_coroutine(kind: int, f: object, coro: object) -> TypeError:
    """``f`` returned a coroutine object (``then(lambda: async_fn())``, or a callable object
    with an ``async def __call__``): close it (it never runs, and Python would warn that it
    was never awaited) and make the ``TypeError`` that the operation completes with."""
    if isinstance(coro, _CoroutineType):  # always (the caller found one)
        coro.close()
    name = _NAMES[kind]
    fname = getattr(f, "__qualname__", None) or type(f).__name__
    let = ("let_value", "let_error", "let_stopped")[kind]
    return TypeError(
        f"the function given to {name}, {fname}, returned a coroutine object; {name} sends "
        "what its function returns as a value, so the coroutine would never run (it was "
        f"closed) ([exec.then]). Use sx.{let}(f) to run it as the next step, or await it "
        "inside a coroutine or @sx.task"
    )


def _apply_fns(fns: tuple[_Fn, ...], vals: tuple[object, ...]) -> tuple[object, ...]:
    """Run a chain of ``then`` functions on ``vals``: each result becomes the next datums by the
    values convention (the trio guide "Awaiting a sender"). An exception from a function propagates,
    and so does the ``TypeError`` for a returned coroutine object ([exec.then]).

    While the functions return one datum each (the common case), the inner loop calls the
    next one with it directly, without a tuple per stage.
    """
    it = iter(fns)
    for f in it:
        r = f(*vals)
        if type(r) in _NOT_ONE_DATUM:
            if r is None:
                vals = ()
                continue
            if type(r) is values:
                vals = r
                continue
            raise returned_coroutine(_VALUE, f, r)
        for f in it:  # one datum r
            x = f(r)
            if type(x) in _NOT_ONE_DATUM:  # one test per stage for the common case
                if x is None:
                    vals = ()
                    break
                if type(x) is values:
                    vals = x
                    break
                raise returned_coroutine(_VALUE, f, x)
            r = x
        else:
            return (r,)
    return vals


class _ThenOp(ChildOp):
    """The fused operation; it is also the receiver of the innermost child."""

    __slots__ = ("_fns", "_stages")

    def __init__(self, rcvr: Receiver, stages: _Stages, fns: tuple[_Fn, ...] | None) -> None:
        self._rcvr = rcvr
        self._stages = stages
        self._fns = fns  # tuple of functions when every stage is a `then`, else None
        self._state = 0
        self._op = None

    def set_value(self, *vals: object) -> None:
        if self._state == 2:
            raise completed_twice(self, "set_value")
        self._state = 2
        self._op = None
        fns = self._fns
        if fns is None:
            self._run(_VALUE, vals)
            return
        try:
            vals = _apply_fns(fns, vals)
        except Exception as e:
            self._rcvr.set_error(e)
            return
        self._rcvr.set_value(*vals)

    def set_error(self, err: object) -> None:
        if self._state == 2:
            raise completed_twice(self, "set_error")
        self._state = 2
        self._op = None
        self._run(_ERROR, err)

    def set_stopped(self) -> None:
        if self._state == 2:
            raise completed_twice(self, "set_stopped")
        self._state = 2
        self._op = None
        self._run(_STOPPED, None)

    def _run(self, kind: int, data: object) -> None:
        k, d = run_stages(self._stages, kind, data)
        rcvr = self._rcvr
        if k == _VALUE:
            rcvr.set_value(*d)
        elif k == _ERROR:
            rcvr.set_error(d)
        else:
            rcvr.set_stopped()


class _JustThenOp:
    """``just(*vals) | then(f) | ...`` (``then`` stages only) connected as one operation.

    The most common sender of all (``spawn(sx.just() | sx.then(f), token)``) then costs one object:
    ``start`` runs the functions on the datums and completes. Not observable: the functions run once
    each, in order, inside ``start`` ([exec.just], [exec.then]); an exception from one becomes
    ``set_error`` ([exec.snd.expos]), one from the receiver propagates.
    """

    __slots__ = ("_fns", "_rcvr", "_started", "_vals")

    def __init__(self, rcvr: Receiver, vals: tuple[object, ...], fns: tuple[_Fn, ...]) -> None:
        self._rcvr = rcvr
        self._vals = vals
        self._fns = fns
        self._started = False

    def start(self) -> None:
        if self._started:
            raise twice_started(self)
        self._started = True
        try:
            vals = _apply_fns(self._fns, self._vals)
        except Exception as e:
            self._rcvr.set_error(e)
            return
        self._rcvr.set_value(*vals)


class _JustThen1Op:
    """``just(*vals) | then(f)``: :class:`_JustThenOp` with one function (no tuple, no loop)."""

    __slots__ = ("_fn", "_rcvr", "_started", "_vals")

    def __init__(self, rcvr: Receiver, vals: tuple[object, ...], fn: _Fn) -> None:
        self._rcvr = rcvr
        self._vals = vals
        self._fn = fn
        self._started = False

    def start(self) -> None:
        if self._started:
            raise twice_started(self)
        self._started = True
        try:
            r = self._fn(*self._vals)
        except Exception as e:
            self._rcvr.set_error(e)
            return
        if r is None:
            self._rcvr.set_value()
        elif type(r) is values:
            self._rcvr.set_value(*r)
        elif type(r) is _CoroutineType:
            self._rcvr.set_error(returned_coroutine(_VALUE, self._fn, r))
        else:
            self._rcvr.set_value(r)


_new = object.__new__


def _value_fns(stages: Sequence[tuple[int, _Fn]]) -> tuple[_Fn, ...] | None:
    """The functions of a chain of ``then`` stages only (``_ThenOp``'s fast loop), else None."""
    return tuple(f for _, f in stages) if all(k == _VALUE for k, _ in stages) else None


class _ThenBase(UnarySender):
    __slots__ = ("_flat", "_fn")
    _kind: int = _VALUE

    def __init__(self, child: object, fn: _Fn) -> None:
        self._child = child
        self._fn = fn
        self._flat: _Flat | None = None

    def _flatten(self) -> _Flat:
        flat = self._flat
        if flat is None:
            child = self._child
            if not isinstance(child, _ThenBase):  # one stage: the common case
                st = ((self._kind, self._fn),)
                flat = self._flat = (child, st, (self._fn,) if self._kind == _VALUE else None)
                return flat
            stages: list[tuple[int, _Fn]] = []
            s: object = self
            while isinstance(s, _ThenBase):
                stages.append((s._kind, s._fn))
                s = s._child
            stages.reverse()
            flat = self._flat = (s, tuple(stages), _value_fns(stages))
        return flat

    def connect(self, rcvr: Receiver) -> OperationState:
        if _DS.on:  # a custom domain is alive (a remote scheduler's then-hook implies one)
            hook = _DS.then_hook
            # A remote parallel scheduler exists (DomainDispatch.then_hook); just(...) | then(f)
            # connected to a receiver whose environment names no domain runs here: no hook.
            if hook is not None and (
                type(self._child) is not _JustSender or type(rcvr) not in _NDE
            ):
                t = hook(self, rcvr)
                if t is not None:
                    remote: OperationState = t.connect(rcvr)
                    return remote
            # _FUSE_TAGS: a domain customising `just` must see the just below a then too,
            # which the fused just|then operations below would skip.
            if _FP.fuse_then and _DS.hit[_FUSE_GROUP]:
                return self._connect_with_domains(rcvr)
        if not _FP.fuse_then:  # the fusion switch (_fastpaths)
            return self._connect_unfused(rcvr)
        child = self._child
        if type(child) is _JustSender and self._kind == _VALUE:  # just(...) | then(f)
            return _JustThen1Op(rcvr, child._vals, self._fn)  # the hot path: one object
        flat = self._flat
        base, stages, fns = self._flatten() if flat is None else flat
        if fns is not None and type(base) is _JustSender:
            return _JustThenOp(rcvr, base._vals, fns)  # no child operation
        op = _ThenOp(rcvr, stages, fns)
        op._op = connect(base, op)
        return op

    def _connect_unfused(self, rcvr: Receiver) -> _ThenOp:
        # fuse_then off: this stage alone, over its child's operation ([exec.then]).
        fn = self._fn
        op = _ThenOp(rcvr, ((self._kind, fn),), (fn,) if self._kind == _VALUE else None)
        op._op = connect(self._child, op)
        return op

    def _connect_with_domains(self, rcvr: Receiver) -> _ThenOp:
        # Fuse only through children that their late domain leaves unchanged; a child that a domain
        # transforms is connected as it is transformed ([exec.connect], [exec.snd.transform]).
        env = fwd_env(get_env(rcvr))
        rev: list[tuple[int, _Fn]] = [(self._kind, self._fn)]
        s: object = self._child
        # Every then-sender of the chain has the attributes of the innermost non-then child
        # (FWD-ENV is idempotent), hence the same late domain: compute it once.
        chain_dom = get_domain_late(self, env)
        while True:
            dom = chain_dom if isinstance(s, _ThenBase) else get_domain_late(s, env)
            t = transform_sender(dom, s, env)
            if t is not s or not isinstance(s, _ThenBase):
                break
            rev.append((s._kind, s._fn))
            s = s._child
        rev.reverse()
        stages = tuple(rev)
        op = _ThenOp(rcvr, stages, _value_fns(stages))
        try:
            m = t.connect
        except AttributeError:
            op._op = connect(t, op)
        else:
            op._op = m(op)
        return op

    def get_env(self) -> Env:
        # FWD-ENV(FWD-ENV(e)) is FWD-ENV(e): go straight to the innermost non-then child, so
        # a 10,000-stage chain does not recurse 10,000 times.
        return fwd_env(get_env(self._flatten()[0]))

    @property
    def _sx_completes_inline(self) -> bool:
        return bool(getattr(self._flatten()[0], "_sx_completes_inline", False))

    @property
    def data(self) -> _Fn:
        return self._fn

    def __repr__(self) -> str:
        return f"{self.tag!r}({self._child!r}, {getattr(self._fn, '__name__', self._fn)!r})"


class _ThenSender(_ThenBase):
    __slots__ = ()
    _kind = _VALUE


class _UponErrorSender(_ThenBase):
    __slots__ = ()
    _kind = _ERROR


class _UponStoppedSender(_ThenBase):
    __slots__ = ()
    _kind = _STOPPED


class _ThenClosure(BoundClosure):
    """``then(f)`` (``upon_*(f)``) of a plain function: ``sndr | c`` builds the sender in one
    step (``f`` was checked when the closure was made)."""

    __slots__ = ()
    _alg: FnAdaptor

    def __ror__(self, other: object) -> Sender[object]:
        if isinstance(other, Sender):
            alg = self._alg
            s: _ThenBase = _new(alg._cls)  # type: ignore[arg-type,assignment]
            s._child = other
            s._fn = self._x  # type: ignore[assignment]
            s._flat = None
            return s
        built: Sender[object] = BoundClosure.__ror__(self, other)
        return built


def _closure(alg: FnAdaptor, args: tuple[object, ...]) -> object:
    if len(args) == 1 and type(args[0]) in PLAIN_CALLABLES:
        if is_async_fn(args[0]):
            raise async_fn_error(alg._name, args[0])
        c = _new(_ThenClosure)
        c._alg = alg
        c._x = args[0]
        return c
    return alg._build(args)


class then_t(FnAdaptor):
    """``then(sndr, f)`` / ``sndr | then(f)``: on ``set_value(*a)``, send ``f(*a)`` ([exec.then]).

    ``f`` returning ``None`` sends ``set_value()``; a tuple is one datum; ``sx.values(a, b)`` sends
    two (the trio guide "Awaiting a sender"). An exception from ``f`` becomes ``set_error``
    (TRY-EVAL, [exec.snd.expos]). Errors and stopped pass through unchanged ([exec.then]). ``f``
    runs on the agent where the child completed, at most once, and never before the operation starts
    ([exec.adapt.general], [exec.then]).

    Completion signatures: ``set_value_t(...)`` with what ``f`` returns (values convention;
    unknown before ``f`` runs, so ``get_completion_signatures`` gives ``None``),
    ``set_error_t(Exception)``, and the child's error and stopped signatures unchanged
    ([exec.then]).

    Errors: an ``Exception`` raised by ``f`` completes ``set_error`` with it; ``f`` returning a
    coroutine object completes ``set_error(TypeError)``; a ``BaseException`` that is not an
    ``Exception`` propagates.

    Cancellation: none of its own: the receiver's environment (and stop token) is forwarded to
    the child, and ``set_stopped()`` passes through.

    Example:

    >>> import structexec as sx
    >>> sx.sync_wait(sx.just(1, 2) | sx.then(lambda a, b: a + b))
    (3,)
    """

    __slots__ = ()
    _cls = _ThenSender
    _name = "then"
    _sync_only = True

    # The value type of a sender (what ``await`` gives) is ``None`` for no datums, ``A`` for
    # one and ``tuple[A, B]`` for two, so ``f``'s parameters are checked against it by arity;
    # one parameter first: ``then(str)`` takes one argument, though ``str()`` also works.
    @overload
    def __call__(self, f: Callable[[A], R], /) -> MapClosure[A, R]: ...
    @overload
    def __call__(self, f: Callable[[], R], /) -> MapClosure[None, R]: ...
    @overload
    def __call__(self, f: Callable[[A, B], R], /) -> MapClosure[tuple[A, B], R]: ...
    @overload
    def __call__(self, f: Callable[[A, B, C], R], /) -> MapClosure[tuple[A, B, C], R]: ...
    @overload
    def __call__(self, f: Callable[[A, B, C, D], R], /) -> MapClosure[tuple[A, B, C, D], R]: ...
    @overload
    def __call__(
        self, f: Callable[[A, B, C, D, E], R], /
    ) -> MapClosure[tuple[A, B, C, D, E], R]: ...
    @overload
    def __call__(
        self, f: Callable[[A, B, C, D, E, F], R], /
    ) -> MapClosure[tuple[A, B, C, D, E, F], R]: ...
    @overload
    def __call__(self, sndr: Awaitable[A], f: Callable[[A], R], /) -> Sender[R]: ...
    @overload
    def __call__(self, sndr: Awaitable[None], f: Callable[[], R], /) -> Sender[R]: ...
    @overload
    def __call__(self, sndr: Awaitable[tuple[A, B]], f: Callable[[A, B], R], /) -> Sender[R]: ...
    @overload
    def __call__(
        self, sndr: Awaitable[tuple[A, B, C]], f: Callable[[A, B, C], R], /
    ) -> Sender[R]: ...
    @overload
    def __call__(
        self, sndr: Awaitable[tuple[A, B, C, D]], f: Callable[[A, B, C, D], R], /
    ) -> Sender[R]: ...
    @overload
    def __call__(
        self, sndr: Awaitable[tuple[A, B, C, D, E]], f: Callable[[A, B, C, D, E], R], /
    ) -> Sender[R]: ...
    @overload
    def __call__(
        self, sndr: Awaitable[tuple[A, B, C, D, E, F]], f: Callable[[A, B, C, D, E, F], R], /
    ) -> Sender[R]: ...
    def __call__(self, *args: Any) -> object:
        global _last_sync_fn
        if len(args) == 1:  # _closure, inlined
            f = args[0]
            t = type(f)
            if f is _last_sync_fn:  # checked already (then(f) in a loop: skip the check)
                pass
            elif t is _FunctionType:
                if f.__code__.co_flags & 0x80:  # inspect.CO_COROUTINE
                    raise async_fn_error("then", f)
                _last_sync_fn = f
            elif t not in PLAIN_CALLABLES:
                return self._build(args)
            elif is_async_fn(f):
                raise async_fn_error("then", f)
            c = _new(_ThenClosure)
            c._alg = self
            c._x = f
            return c
        return self._build(args)


class upon_error_t(FnAdaptor):
    """``upon_error(sndr, f)``: on ``set_error(e)``, send ``f(e)`` as a value ([exec.then]).

    Completion signatures: the child's value and stopped signatures, ``set_value_t(...)`` with
    what ``f`` returns, ``set_error_t(Exception)`` ([exec.then]).

    Errors: an ``Exception`` raised by ``f`` completes ``set_error`` with it; values and stopped
    pass through.

    Cancellation: none of its own; ``set_stopped()`` passes through.

    Example:

    >>> import structexec as sx
    >>> sx.sync_wait(sx.just_error(1) | sx.upon_error(lambda e: e + 1))
    (2,)
    """

    __slots__ = ()
    _cls = _UponErrorSender
    _name = "upon_error"
    _sync_only = True

    @overload
    def __call__(self, f: Callable[[Any], R], /) -> WidenClosure[R]: ...
    @overload
    def __call__(self, sndr: Awaitable[T], f: Callable[[Any], R], /) -> Sender[T | R]: ...
    def __call__(self, *args: object) -> object:
        return _closure(self, args)


class upon_stopped_t(FnAdaptor):
    """``upon_stopped(sndr, f)``: on ``set_stopped()``, send ``f()`` as a value ([exec.then]).

    Completion signatures: the child's value and error signatures, ``set_value_t(...)`` with
    what ``f`` returns, ``set_error_t(Exception)``; never ``set_stopped_t()`` ([exec.then]).

    Errors: an ``Exception`` raised by ``f`` completes ``set_error`` with it; values and errors
    pass through.

    Cancellation: a stopped child becomes a value completion (``f()``).

    Example:

    >>> import structexec as sx
    >>> sx.sync_wait(sx.just_stopped() | sx.upon_stopped(lambda: 0))
    (0,)
    """

    __slots__ = ()
    _cls = _UponStoppedSender
    _name = "upon_stopped"
    _sync_only = True

    @overload
    def __call__(self, f: Callable[[], R], /) -> WidenClosure[R]: ...
    @overload
    def __call__(self, sndr: Awaitable[T], f: Callable[[], R], /) -> Sender[T | R]: ...
    def __call__(self, *args: object) -> object:
        return _closure(self, args)


then = then_t()
upon_error = upon_error_t()
upon_stopped = upon_stopped_t()
_THEN_TAGS = frozenset((then, upon_error, upon_stopped))
_FUSE_TAGS = _THEN_TAGS | {_JustSender.tag}
_FUSE_GROUP = _DS.watch(_FUSE_TAGS)
_ThenSender.tag = then
_UponErrorSender.tag = upon_error
_UponStoppedSender.tag = upon_stopped
