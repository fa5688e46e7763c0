"""Small pieces shared by the sender adaptors (private).

* :class:`UnaryAdaptor`: the base of one-argument adaptor objects (``into_variant``,
  ``stopped_as_optional``, ``unstoppable``). Such an object is itself a pipeable sender
  adaptor closure ([exec.adapt.obj]: "if a pipeable sender adaptor object accepts only one
  argument, then it is a pipeable sender adaptor closure object"), so ``s | into_variant``,
  ``s | into_variant()`` and ``into_variant | then(f)`` all work ([exec.adapt.obj]).
* :func:`early`: the construction-time ``transform_sender(get-domain-early(...), ...)`` that
  [exec.adapt] specifies for every adaptor ([exec.snd.expos]); free unless a custom domain is
  involved.
* argument checks that raise ``TypeError`` naming the argument (the adaptors guide).
* :class:`BinaryAdaptor`, :class:`FnAdaptor`: the bases of the algorithm objects called as
  ``alg(sndr, x)`` or ``alg(x)`` (``then``, ``upon_*``, ``let_*``, ``continues_on``,
  ``write_env``, ``stopped_as_error``).
* :class:`ChildOp`: the base of the operation states that are also their child's receiver
  (``then``, ``let_*``, ``bulk_*``, ``starts_on``, ``schedule_from``).
* :class:`UnarySender`, :class:`SchedulerAdaptorSender`, :class:`InlineAsChild`: the
  attributes and structure ([exec.snd.concepts]) of a single-child adaptor's sender.
* :class:`WriteEnvReceiver`: the child's receiver of ``write_env``/``starts_on``, which
  forwards every completion straight to the outer receiver's bound methods.

The bases add no call on the connect, start or completion paths: subclasses set the slots in
their own ``__init__`` (no ``super().__init__()`` call) and inherited methods are looked up as
fast as a class's own.
"""

from __future__ import annotations

import functools
import inspect
import types
from typing import TYPE_CHECKING, Any, TypeVar

from ._completion_signatures import completion_signatures, get_completion_signatures
from ._domain import default_domain, get_domain_early, may_transform, transform_sender
from ._env import fwd_env, get_env, join_env
from ._protocol import (
    Algorithm,
    Closure,
    Sender,
    completed_twice,
    is_scheduler,
    is_sender,
    twice_started,
)
from ._queries import get_domain, query_or
from ._tags import set_value_t

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._contracts import Env, OpState, Rcvr, Sched

S = TypeVar("S")

_DEFAULT = default_domain()


def sched_domain(sch: object) -> object:
    """``query-with-default(get_domain, sch, default_domain())`` ([exec.snd.expos])."""
    return query_or(sch, get_domain, _DEFAULT)


def early(dom: object, sndr: S) -> S:
    """``transform_sender(dom, sndr)`` without an environment, at construction
    ([exec.snd.transform], [exec.snd.expos]).

    The default domain's env-less transform returns the sender unchanged for every adaptor of
    this library (their lowerings need an environment, as in C++), so it is skipped; only a
    custom domain gets to see (and possibly replace) the freshly built sender.
    """
    if type(dom) is default_domain or not may_transform(getattr(sndr, "tag", None)):
        return sndr
    r: S = transform_sender(dom, sndr, None)
    return r


def early_child(child: object, sndr: S) -> S:
    """``early(get-domain-early(child), sndr)``: the rule for single-child adaptors."""
    if not may_transform(getattr(sndr, "tag", None)):
        return sndr
    return early(get_domain_early(child), sndr)


def check_sender(name: str, arg: str, x: object) -> None:
    if not is_sender(x):
        what = "a sender adaptor closure" if isinstance(x, Closure) else type(x).__name__
        raise TypeError(f"{name}(): {arg} must be a sender, got {what}")


def check_scheduler(name: str, arg: str, x: object) -> None:
    if not is_scheduler(x):
        raise TypeError(
            f"{name}(): {arg} must be a scheduler (an object with a schedule() method), "
            f"got {type(x).__name__}"
        )


def with_schedule_failures(
    cs: completion_signatures | None, sch: Sched, env: object
) -> completion_signatures | None:
    """``cs`` plus the error and stopped signatures of ``schedule(sch)`` in ``env``.

    The signatures of an adaptor that runs its child around a scheduling operation whose
    failure is its result (``starts_on`` 12.3, ``schedule_from`` 12.11); ``None`` when either
    set is unknown.
    """
    sched = get_completion_signatures(sch.schedule(), env)
    if cs is None or sched is None:
        return None
    return cs | completion_signatures(*(s for s in sched if type(s) is not set_value_t))


class BinaryAdaptor(Algorithm):
    """An algorithm object called as ``alg(sndr, x)``, or ``alg(x)`` for its closure
    ([exec.adapt.obj]).

    Subclasses set ``_name`` and ``_arg`` (the name of ``x`` in messages), implement
    ``_check_arg(x)`` (raise ``TypeError`` naming the argument, the adaptors guide) and
    ``_make(sndr, x)`` (check ``x`` and build the sender), and implement ``__call__`` (with
    their overloads) as ``return self._build(args)``.
    """

    __slots__ = ()
    _name: str
    _arg: str

    def _check_arg(self, x: object) -> None:
        raise NotImplementedError

    def _make(self, sndr: object, x: object) -> Sender[object]:
        raise NotImplementedError

    def _build(self, args: tuple[object, ...]) -> Sender[object] | BoundClosure:
        if len(args) == 2:
            sndr, x = args
            check_sender(self._name, "sndr", sndr)
            return self._make(sndr, x)
        if len(args) == 1:
            x = args[0]
            self._check_arg(x)
            return BoundClosure(self, x)
        a = self._arg
        raise TypeError(f"{self._name}() takes (sender, {a}) or ({a}), got {len(args)} arguments")


class BoundClosure(Closure[Any]):
    """``alg(x)``: the closure of a :class:`BinaryAdaptor` with its argument bound
    ([exec.adapt.obj]).

    ``sndr | alg(x)`` builds ``alg(sndr, x)`` directly: no lambda, no re-dispatch on the
    argument count, and ``x`` (checked when the closure was made) is not checked again.
    """

    __slots__ = ("_alg", "_x")

    def __init__(self, alg: BinaryAdaptor, x: object) -> None:
        self._alg = alg
        self._x = x

    def __call__(self, sndr: object) -> Sender[object]:
        if not isinstance(sndr, Sender):
            check_sender(self._alg._name, "sndr", sndr)
        return self._alg._make(sndr, self._x)

    def __ror__(self, other: object) -> Sender[object]:
        # ``c | bound``: Python asks the subclass's reflected method first; composition of
        # two closures is Closure.__or__'s job.
        if isinstance(other, Closure):
            return NotImplemented
        return self(other)


PLAIN_CALLABLES = frozenset(
    {types.FunctionType, types.BuiltinFunctionType, types.MethodType, functools.partial}
)


_FunctionType = types.FunctionType
_CO_COROUTINE = inspect.CO_COROUTINE


def is_async_fn(f: object) -> bool:
    """Is ``f`` an ``async def`` function (or a method or partial of one)?

    A plain function is checked by its code flags (cheap: this runs when ``then(f)`` is
    built); anything else by ``inspect.iscoroutinefunction``.
    """
    if type(f) is _FunctionType:
        return bool(f.__code__.co_flags & _CO_COROUTINE)
    return inspect.iscoroutinefunction(f)


#: What a function that must not be a coroutine function is run as instead, per algorithm.
_ASYNC_INSTEAD = {"then": "let_value", "upon_error": "let_error", "upon_stopped": "let_stopped"}


def async_fn_error(name: str, f: object) -> TypeError:
    """``then(async_fn)``: the function would return a coroutine object, never run it."""
    fname = getattr(f, "__qualname__", None) or type(f).__name__
    let = _ASYNC_INSTEAD.get(name, "let_value")
    return TypeError(
        f"{name}(f): f={fname} is an async function; {name} sends what f returns as a value, "
        f"so the coroutine would never run ([exec.then]). Use sx.{let}(f) to run the "
        "coroutine as the next step (a coroutine object is a sender), or await the work "
        "inside a coroutine or @sx.task"
    )


class FnAdaptor(BinaryAdaptor):
    """``alg(sndr, f)`` / ``alg(f)`` (``then``, ``upon_*``, ``let_*``): builds ``_cls(sndr, f)``.

    ``_fn_kind`` says what ``f`` must be, for messages; ``alg(sndr)`` with a sender alone is
    rejected as a closure whose function is a sender. With ``_sync_only`` (``then``,
    ``upon_*``), an ``async def`` function is rejected too: its coroutine would be sent as a
    value and never run.
    """

    __slots__ = ()
    _arg = "f"
    _cls: Callable[..., Sender[object]]
    _fn_kind = "a callable"
    _sync_only = False

    def _check_arg(self, f: object) -> None:
        if type(f) in PLAIN_CALLABLES:  # the common case, checked cheaply
            if self._sync_only and is_async_fn(f):
                raise async_fn_error(self._name, f)
            return
        if not callable(f) or is_sender(f):
            raise TypeError(f"{self._name}(f) needs {self._fn_kind}, got {type(f).__name__}")
        if self._sync_only and is_async_fn(f):
            raise async_fn_error(self._name, f)

    def _make(self, sndr: object, f: object) -> Sender[object]:
        if not callable(f):
            raise TypeError(f"{self._name}() needs {self._fn_kind}, got {type(f).__name__}")
        if self._sync_only and is_async_fn(f):
            raise async_fn_error(self._name, f)
        return self._cls(sndr, f)


class UnaryAdaptor(Algorithm, Closure[Any]):
    """A one-argument adaptor object that is also its own closure (see module docstring).

    Subclasses implement ``_apply(sndr)``. ``adaptor(sndr)`` builds the sender,
    ``adaptor()`` returns the adaptor itself (a closure), ``sndr | adaptor`` pipes.
    """

    __slots__ = ()
    _name = "adaptor"

    def __init__(self) -> None:
        Closure.__init__(self, self._apply)

    def _apply(self, sndr: object) -> Sender[object]:
        raise NotImplementedError

    def __call__(self, *args: Any) -> Any:
        if not args:
            return self
        if len(args) != 1:
            raise TypeError(f"{self._name}() takes one sender, got {len(args)} arguments")
        check_sender(self._name, "the argument", args[0])
        return self._apply(args[0])

    def __ror__(self, sndr: Any) -> Any:
        if isinstance(sndr, Closure):
            # ``c | adaptor``: Python tries this reflected method first because the adaptor's
            # class derives from Closure; compose as Closure.__or__ would.
            first = sndr
            return Closure(lambda s: self(first(s)))
        return self(sndr)


# --------------------------------------------------------------------------- operation states

_CONNECTED, _STARTED, _COMPLETED = 0, 1, 2


def close_op(op: object) -> None:
    """``op.close()`` if the operation state has one (library operations that hold resources
    or children do): the explicit release of a never-started operation
    (the senders guide "Writing your own sender")."""
    close = getattr(op, "close", None)
    if close is not None:
        close()


class ChildOp:
    """An adaptor's operation state that is also the receiver of its child (private base).

    Slots set by the subclass's ``__init__``: ``_rcvr`` (the outer receiver), ``_state``
    (0 connected, 1 started, 2 completed) and ``_op`` (the operation started by ``start``;
    the subclass's ``connect`` fills it in). ``start`` raises ``RuntimeError`` on a second call
    ([exec.async.ops]); the environment is ``FWD-ENV(get_env(rcvr))`` ([exec.adapt.general]);
    each ``set_*`` forwards unchanged and raises ``RuntimeError`` on a second completion
    ([exec.async.ops]).
    Subclasses override the completions they transform, with the same checks. Every
    completion clears ``_op``: the child has completed, and the op <-> receiver reference
    cycle must not outlive it (a spawned then-chain is then freed by reference counting,
    not by the cycle collector).
    """

    __slots__ = ("_op", "_rcvr", "_state")
    _rcvr: Rcvr
    _state: int
    _op: OpState | None

    def start(self) -> None:
        if self._state:
            raise twice_started(self)
        self._state = _STARTED
        self._op.start()  # type: ignore[union-attr]  # None only once closed or completed

    def get_env(self) -> Env:
        return fwd_env(get_env(self._rcvr))

    def close(self) -> None:
        """Drop this operation without starting it (the senders guide "Writing your own sender"):
        close the child operation.

        Operation states and their children's receivers refer to each other, so a dropped,
        never-started tree would otherwise wait for the cycle collector; ``close()`` releases
        what it holds (e.g. an ``associate`` operation's scope association) at once. It does
        nothing once the operation has started. Starting a closed operation raises.
        """
        if self._state == 0:
            self._state = _COMPLETED
            op = self._op
            self._op = None
            close_op(op)

    def set_value(self, *vals: object) -> None:
        if self._state == _COMPLETED:
            raise completed_twice(self, "set_value")
        self._state = _COMPLETED
        self._op = None
        self._rcvr.set_value(*vals)

    def set_error(self, err: object) -> None:
        if self._state == _COMPLETED:
            raise completed_twice(self, "set_error")
        self._state = _COMPLETED
        self._op = None
        self._rcvr.set_error(err)

    def set_stopped(self) -> None:
        if self._state == _COMPLETED:
            raise completed_twice(self, "set_stopped")
        self._state = _COMPLETED
        self._op = None
        self._rcvr.set_stopped()


class WriteEnvReceiver:
    """The child's receiver with environment ``JOIN-ENV(written, FWD-ENV(get_env(rcvr)))``.

    [exec.write.env], and ``starts_on``'s child receiver with
    ``written = SCHED-ENV(sch)`` ([exec.starts.on]). The completions are the outer receiver's bound
    methods, so a completion costs no extra call.
    """

    __slots__ = ("_env", "set_error", "set_stopped", "set_value")

    def __init__(self, rcvr: Rcvr, written: Env) -> None:
        self.set_value = rcvr.set_value
        self.set_error = rcvr.set_error
        self.set_stopped = rcvr.set_stopped
        self._env = join_env(written, fwd_env(get_env(rcvr)))

    def get_env(self) -> Env:
        return self._env


# --------------------------------------------------------------------------- senders


class UnarySender(Sender[Any]):
    """A sender adaptor with one child in the slot ``_child`` (private base).

    Attributes ``FWD-ENV(get_env(child))`` ([exec.adapt.general]) and ``children ==
    (child,)`` ([exec.snd.concepts]); ``data`` stays the base's ``None`` unless overridden.
    """

    __slots__ = ("_child",)
    _child: Any

    def get_env(self) -> Env:
        return fwd_env(get_env(self._child))

    @property
    def children(self) -> tuple[object, ...]:
        return (self._child,)


class SchedulerAdaptorSender(UnarySender):
    """A single-child adaptor that also holds a scheduler in ``_sch`` (private base).

    ``starts_on``, ``schedule_from``/``continues_on`` and ``on``: ``scheduler`` is that
    scheduler, and so is ``data`` ([exec.snd.concepts]) unless overridden.
    """

    __slots__ = ("_sch",)
    _sch: Sched

    @property
    def scheduler(self) -> Sched:
        """The scheduler the work runs on, or is transferred to."""
        return self._sch

    @property
    def data(self) -> Sched:
        return self._sch


class InlineAsChild:
    """Mixin: the sender completes inside ``start`` exactly when its child does.

    For adaptors that neither hop nor defer (``write_env``, ``into_variant``,
    ``stopped_as_error``); ``affine_on`` and the task driver use it to skip a hop back.
    """

    __slots__ = ()
    _child: Any

    @property
    def _sx_completes_inline(self) -> bool:
        return bool(getattr(self._child, "_sx_completes_inline", False))
