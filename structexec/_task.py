"""``@sx.task``: a coroutine type that is a sender ([exec.task], P3552R1, P3941R1).

REQUIREMENTS 24, DESIGN.md 1 ("Coroutines"), 2.4, 2.9, 2.10.

Decorating an ``async def`` with ``@sx.task`` (or ``@sx.task(environment=Env)``) makes each
call return a lazy, single-use sender. Connecting it to a receiver and starting the
operation runs the body:

* on the trio scheduler (the receiver's ``get_scheduler`` is ``sx.trio_scheduler()``, possibly
  inside a ``task_scheduler``) the body runs in a trio task, so it may await trio primitives,
  and after every await it is back on the trio thread (trio reschedules the task: its own
  checkpoint machinery; from other threads through ``TrioToken.run_sync_soon``). Started as
  an operation, the body gets a trio task of its own (``TrioHostedOp`` of the trio bridge:
  the scope's nursery or a system task, a cancel scope tied to the task's stop token);
  ``await t()`` in trio code runs it in the awaiting trio task instead;
* on any other scheduler it is driven by a loop on the scheduler's agent; after an await
  whose sender completed elsewhere, the loop hops back with ``schedule(SCHED)`` (connected
  with a ``never_stop_token``: the hop cannot be stopped, P3941R1); with ``inline_scheduler``
  as ``scheduler_type`` there is no hop (affinity off).

Either way the body is stepped by one loop (``_Driver``), never by recursion: an await whose
sender completes inside ``start`` continues the same loop iteration, and a task awaiting
another task on the same scheduler runs the child's coroutine on the same loop (a stack of
frames), without a new trio task or operation state (P3552R1 4.10, REQUIREMENTS 24.22,
24.22b). While the driver steps a coroutine it is ``_hooks.driver_state.driver``, so
``await sndr`` (``Sender.__await__``) hands the sender to it.
"""

from __future__ import annotations

import functools
import inspect
import threading
import warnings
from collections.abc import Callable, Coroutine, Generator, Iterable
from typing import Any, Generic, NoReturn, Protocol, TypeVar, overload

import trio
import trio.lowlevel as tl
from typing_extensions import ParamSpec

from . import _hooks
from ._affine_on import completes_on
from ._completion_signatures import completion_signatures, get_completion_signatures
from ._coroutine_sender import TrioHostedOp
from ._domain import connect, domains_active
from ._env import (
    _MISSING,
    EMPTY_ENV,
    QueryError,
    TryEnv,
    forwarding_query,
    fwd_env,
    get_allocator,
    get_env,
    get_scheduler,
    get_stop_token,
    query_or,
    sched_env,
)
from ._errors import ErrorValue, Stopped, terminate
from ._infallible import UNSTOPPABLE_ENV
from ._inline_scheduler import inline_scheduler
from ._just import just, just_error, just_stopped
from ._protocol import (
    Algorithm,
    Sender,
    completed_twice,
    set_error_t,
    set_stopped_t,
    set_value_t,
    twice_started,
    values,
)
from ._read_env import read_env
from ._stop_token import (
    inplace_stop_source,
    inplace_stop_token,
    never_stop_token,
    stop_callback_for,
)
from ._task_scheduler import task_scheduler
from ._trampoline import trampoline_start
from ._trio_bridge import (
    RunState,
    current_run,
    hosted_env,
    in_trio_run,
    run_finished_error,
    trio_host_nursery,
)
from ._trio_scheduler import _TrioScheduler

__all__ = ["allocator_arg", "change_coroutine_scheduler", "task", "with_error"]

P = ParamSpec("P")
T = TypeVar("T")

_get_ident = threading.get_ident
_driver_state = _hooks.driver_state
_reschedule = tl.reschedule
_wait_task_rescheduled = tl.wait_task_rescheduled
_FAILED = tl.Abort.FAILED
_checkpoint = tl.checkpoint
_NEVER = never_stop_token()

# Completion kinds inside the driver.
_PENDING, _SEND, _THROW, _STOP = 0, 1, 2, 3
# What _Driver._step returns besides a foreign yielded object.
_SUSPEND: Any = object()
_DONE: Any = object()
# What Driver.await_sender yields to the loop.
_AWAIT: Any = object()
# _TaskOp.unwinding
_UNWIND_NONE, _UNWIND_STOP, _UNWIND_ERROR = 0, 1, 2


class _ErrorExit(BaseException):
    """Thrown into a task body by ``await sx.with_error(e)`` to unwind it (private)."""


# --------------------------------------------------------------------------- small public types


class _AllocatorArg:
    """``sx.allocator_arg``: the marker before an allocator among a task's arguments."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "allocator_arg"


#: Pass ``allocator_arg, alloc`` among a task function's positional arguments to give the
#: task an allocator: ``read_env(get_allocator)`` inside then returns it (P3552R1 4.6,
#: REQUIREMENTS 24.12). Python manages memory itself; the allocator is only plumbed (DQ-11).
allocator_arg: Any = _AllocatorArg()


class _DefaultAllocator:
    """``allocator<byte>``: what ``get_allocator`` gives inside a task without an allocator."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return type(other) is _DefaultAllocator

    def __hash__(self) -> int:
        return hash(_DefaultAllocator)

    def __repr__(self) -> str:
        return "allocator()"


class with_error(Generic[T]):
    """``await sx.with_error(e)`` inside a task: complete the task with ``set_error(e)``.

    [task.promise] ``yield_value(with_error<E>)``, P3552R1 4.9, REQUIREMENTS 24.14, DQ-12.
    The body is suspended and never resumed (its ``finally`` blocks run when the coroutine is
    closed); the error does not have to be an exception and nothing is raised. ``e`` must
    match exactly one of the task's ``error_types`` (an instance of it; an exact type match
    wins over a base class); otherwise the ``await`` raises ``TypeError`` (24.14 Mandates).
    ``return sx.with_error(e)`` does the same. ``.error`` is the datum, ``.type`` its type.
    Awaiting it outside a task body raises ``TypeError``.
    """

    __slots__ = ("error",)

    def __init__(self, error: T) -> None:
        if error is None:
            raise TypeError("with_error(None): None is not a valid error datum (REQUIREMENTS 1.2)")
        self.error = error

    @property
    def type(self) -> type:
        return type(self.error)

    def __await__(self) -> Generator[Any, Any, NoReturn]:
        if type(_driver_state.driver) is not _Driver:
            raise TypeError(
                "`await sx.with_error(e)` works only in the body of an @sx.task coroutine; "
                "elsewhere raise the exception or use sx.just_error(e)"
            )
        yield self
        raise RuntimeError("a task resumed after `await sx.with_error(...)`")  # never happens

    def __repr__(self) -> str:
        return f"with_error({self.error!r})"


class change_coroutine_scheduler:
    """``await sx.change_coroutine_scheduler(sch)``: deprecated; use ``sx.starts_on``/``sx.on``.

    [task.promise] ``await_transform(change_coroutine_scheduler)`` of the draft (REQUIREMENTS
    24.20). P3941R1 3.4 removes it: run the part that must run elsewhere as a nested task,
    ``await sx.starts_on(sch, nested())``. It is kept for the draft's users and warns
    (``DeprecationWarning``) when created. Inside a task it installs
    ``scheduler_type(sch)`` as the task's scheduler, continues on it (a ``schedule(sch)``
    hop) and returns the previous scheduler. Switching between the trio scheduler and a
    scheduler of another kind is not supported (``TypeError``): a body runs either in a trio
    task or on structexec's loop.
    """

    __slots__ = ("scheduler",)

    def __init__(self, sch: Any) -> None:
        warnings.warn(
            "change_coroutine_scheduler is deprecated (removed by P3941R1): await "
            "sx.starts_on(sch, nested_task()) or sx.on(sch, nested_task()) instead",
            DeprecationWarning,
            stacklevel=2,
        )
        if not callable(getattr(sch, "schedule", None)):
            raise TypeError(
                f"change_coroutine_scheduler() needs a scheduler, got {type(sch).__name__}"
            )
        self.scheduler = sch

    def __await__(self) -> Generator[Any, Any, Any]:
        if type(_driver_state.driver) is not _Driver:
            raise TypeError("`await sx.change_coroutine_scheduler(sch)` works only inside a task")
        return (yield self)

    def __repr__(self) -> str:
        return f"change_coroutine_scheduler({self.scheduler!r})"


# --------------------------------------------------------------------------- configuration


def _normalise_error_types(et: Any) -> tuple[Any, ...]:
    sigs = list(et) if isinstance(et, (completion_signatures, Iterable)) else [et]
    out: list[Any] = []
    for s in sigs:
        if type(s) is not set_error_t:
            raise TypeError(
                f"error_types may contain only set_error_t(E) signatures (REQUIREMENTS 24.2), "
                f"got {s!r}"
            )
        out.append(s.args[0])
    return tuple(out)


def _ctor_arity(cls: Any, what: str) -> int:
    """1 if ``cls(env)`` is valid, 0 if only ``cls()`` is (an Environment's constructor)."""
    try:
        sig = inspect.signature(cls)
    except (TypeError, ValueError):
        return 1
    try:
        sig.bind(None)
        return 1
    except TypeError:
        pass
    try:
        sig.bind()
        return 0
    except TypeError:
        raise TypeError(
            f"{what} {cls.__name__} must be constructible with one argument (the receiver's "
            "environment) or with none ([task.state], REQUIREMENTS 24.8)"
        ) from None


class _Config:
    """What ``@sx.task(environment=Env)`` derives from ``Env`` ([task.class], 24.1-24.4)."""

    __slots__ = (
        "allocator_type",
        "env_arity",
        "env_type",
        "environment",
        "err_types",
        "exc_types",
        "inline",
        "name",
        "plain",
        "result",
        "scheduler_type",
        "sigs",
        "stop_source_type",
    )

    def __init__(self, environment: Any, result: Any, name: str) -> None:
        self.name = name
        self.environment = environment
        e = environment if environment is not None else object
        self.scheduler_type: Any = getattr(e, "scheduler_type", task_scheduler)
        self.stop_source_type: Any = getattr(e, "stop_source_type", inplace_stop_source)
        self.allocator_type: Any = getattr(e, "allocator_type", None)
        et = getattr(e, "error_types", None)
        if et is None:
            self.err_types: tuple[Any, ...] = (Exception,)
        else:
            self.err_types = _normalise_error_types(et)
        self.exc_types = tuple(
            t for t in self.err_types if isinstance(t, type) and issubclass(t, BaseException)
        )
        if not callable(self.stop_source_type):
            raise TypeError(
                f"{name}: stop_source_type must be a class, got {self.stop_source_type!r}"
            )
        if not callable(self.scheduler_type):
            raise TypeError(f"{name}: scheduler_type must be a class, got {self.scheduler_type!r}")
        self.inline = self.scheduler_type is inline_scheduler
        # No Environment at all: a task awaited by a task takes a shortcut (_child_frame).
        self.plain = environment is None
        self.env_type: Any = getattr(e, "env_type", None) if environment is not None else None
        self.env_arity = _ctor_arity(environment, "Environment") if environment is not None else 0
        self.result = result
        self.sigs: Any = None
        if result is not _MISSING:
            vs = set_value_t() if result is None or result is type(None) else set_value_t(result)
            errs = [set_error_t(t) for t in self.err_types]
            self.sigs = completion_signatures(vs, *errs, set_stopped_t())

    def check_with_error(self, e: Any) -> str | None:
        """Why ``with_error(e)`` does not fit ``error_types`` (24.14), or ``None``."""
        matches = [t for t in self.err_types if not isinstance(t, type) or isinstance(e, t)]
        if len(matches) == 1:
            return None
        if len(matches) > 1:
            exact = [t for t in matches if t is type(e)]
            if len(exact) == 1:
                return None
            return (
                f"with_error({e!r}) matches several error_types of {self.name} "
                f"({', '.join(map(_tname, matches))}); it must match exactly one"
            )
        return (
            f"with_error({e!r}): {type(e).__name__} is not one of the error_types of "
            f"{self.name} ({', '.join(map(_tname, self.err_types))}) (REQUIREMENTS 24.14)"
        )


def _tname(t: Any) -> str:
    return getattr(t, "__name__", repr(t))


def _resolve_scheduler(cfg: _Config, ev: Any) -> Any:
    """``SCHED``: ``scheduler_type(get_scheduler(env))`` or ``scheduler_type()`` ([task.state])."""
    st = cfg.scheduler_type
    if cfg.inline:
        return inline_scheduler()
    sch = query_or(ev, get_scheduler, _MISSING)
    if sch is _MISSING:
        if st is task_scheduler:
            raise TypeError(
                f"the task {cfg.name} needs a scheduler, and the environment of the receiver it "
                "was connected to has no get_scheduler (P3552R1 4.5, REQUIREMENTS 24.9). Await "
                "it from trio code or from another task, run it with sx.sync_wait, spawn it "
                "with scope.spawn(...) inside `async with sx.counting_scope() as scope`, or "
                "give it one: sx.starts_on(sch, t), sx.write_env(t, sx.prop(sx.get_scheduler, "
                "sch)) or sx.spawn(t, token, sx.prop(sx.get_scheduler, sch)). To run it without "
                "a scheduler (no affinity), use @sx.task(environment=Env) with "
                "Env.scheduler_type = sx.inline_scheduler"
            )
        try:
            return st()
        except TypeError as e:
            raise TypeError(
                f"the task {cfg.name} needs a scheduler: the receiver's environment has no "
                f"get_scheduler and {_tname(st)}() failed ({e}) (REQUIREMENTS 24.9)"
            ) from None
    if st is task_scheduler:
        return sch if type(sch) is task_scheduler else task_scheduler(sch)
    if isinstance(sch, st):
        return sch
    if type(sch) is task_scheduler and isinstance(sch.wrapped, st):
        return sch.wrapped
    try:
        return st(sch)
    except TypeError:
        pass
    try:
        return st()
    except TypeError as e:
        raise TypeError(
            f"the task {cfg.name}: scheduler_type {_tname(st)} can be built neither from the "
            f"receiver's scheduler {sch!r} nor with no arguments ({e}) (REQUIREMENTS 24.9)"
        ) from None


def _trio_run_of(sch: Any) -> RunState | None:
    """The trio run whose scheduler ``sch`` is (possibly inside a ``task_scheduler``)."""
    if type(sch) is task_scheduler:
        sch = sch.wrapped
    if type(sch) is _TrioScheduler:
        r: RunState = sch._run
        return r
    return None


def _is_forwarding(q: Any) -> bool:
    return getattr(q, "forwarding", False) is True or bool(forwarding_query(q))


# --------------------------------------------------------------------------- the sender


class _TaskSender(Sender[T]):
    """A task: a lazy, single-use sender ([task.class], [task.members]; 24.5-24.7).

    It keeps the function and its arguments; the coroutine object is created when the task
    starts (or when a task awaiting it takes it), so a task that is never started leaves no
    coroutine behind: nothing to close, no "never awaited" warning (24.6). An argument error
    (``TypeError`` from calling the function) therefore surfaces when the task starts, as its
    error completion.
    """

    __slots__ = ("__weakref__", "_alloc", "_args", "_cfg", "_fn", "_kwargs")

    def __init__(
        self, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any], cfg: _Config, alloc: Any
    ) -> None:
        self._fn = fn
        self._args = args
        self._kwargs = kwargs
        self._cfg = cfg
        self._alloc = alloc

    def _consumed(self) -> RuntimeError:
        return RuntimeError(
            f"the task {self._cfg.name} was already connected or awaited: a task is single-use "
            "(REQUIREMENTS 24.5); call the task function again for another run"
        )

    def connect(self, rcvr: Any) -> _TaskOp:
        """Connect once: a second ``connect`` raises ``RuntimeError`` (24.5).

        Raises ``TypeError`` (and leaves the task connectable) when the receiver's environment
        provides no scheduler the task can use (24.9).
        """
        if self._fn is None:
            raise self._consumed()
        op = _TaskOp(None, self._cfg, self._alloc, rcvr)  # may raise TypeError
        op.factory = (self._fn, self._args, self._kwargs)
        self._fn = None
        self._args = self._kwargs = None  # type: ignore[assignment]
        return op

    def _take(self) -> Any:
        """The coroutine, for a parent task that runs this one on its own loop."""
        fn = self._fn
        if fn is None:
            raise self._consumed()
        args, kwargs = self._args, self._kwargs
        self._fn = None
        self._args = self._kwargs = None  # type: ignore[assignment]
        return fn(*args, **kwargs)

    def __await__(self) -> Generator[Any, Any, T]:
        """``await t()``: inside a task, a frame of its loop; in a trio task, run right there.

        From plain trio code the body runs in the awaiting trio task itself, exactly as
        ``await sndr`` of any sender would run it with the environment of the trio bridge
        (``get_scheduler`` is the trio scheduler, the stop token follows the awaiting task's
        trio cancellation): the result is returned, an error raised, and a stop raises
        ``trio.Cancelled`` if the awaiting task's cancellation caused it, ``sx.Stopped``
        otherwise (DESIGN.md 2.4). Only the trio task hosting differs: no new trio task.
        """
        d = _driver_state.driver
        if d is not None:
            r: Generator[Any, Any, T] = d.await_sender(self)
            return r
        if self._cfg.scheduler_type is task_scheduler and in_trio_run():
            return self._await_in_trio_task()
        r = _hooks.await_sender(self)
        return r

    def _await_in_trio_task(self) -> Generator[Any, Any, Any]:
        run = current_run()
        holder = _Outcome(_TrioAwaitEnv(run, hosted_env.get()))
        op = self.connect(holder)
        fn, args, kwargs = op.factory
        op.factory = None
        op.started = True
        op.coro = fn(*args, **kwargs)  # an argument error is raised at the await, as usual
        op._link_token(_NEVER, True)  # own source: trio cancellation -> stop request
        drv = op.driver = _Driver(op, run)
        drv.mode = _TRIO
        # trio tasks started inside the body (nurseries) see the task's environment when
        # they await senders, as in a task hosted in its own trio task
        reset = hosted_env.set(fwd_env(op))
        try:
            yield from drv._trio_loop()
        finally:
            hosted_env.reset(reset)
        kind = holder.kind
        if kind == _SEND:
            return holder.data
        if kind == _THROW:
            err = holder.data
            holder.data = None
            raise err if isinstance(err, BaseException) else ErrorValue(err)
        if drv.cancelled:
            # The stop came from this task's trio cancellation: let trio raise Cancelled.
            yield from _checkpoint().__await__()
        raise Stopped()

    def get_completion_signatures(self, env: Any = None) -> completion_signatures | None:
        """``set_value_t(T)`` (or ``()``), the ``error_types``, ``set_stopped_t()`` (24.3).

        ``T`` comes from ``@sx.task(result=T)`` or the function's return annotation; without
        either the value type is unknown and this returns ``None``.
        """
        r: completion_signatures | None = self._cfg.sigs
        return r

    @property
    def _sx_affine(self) -> bool:
        # A task completes on its own scheduler, which is the receiver's (unless it runs on
        # inline_scheduler): affine_on need not hop back (P3941R1 3.3).
        return not self._cfg.inline

    @property
    def data(self) -> Any:
        return self._cfg.environment

    def __repr__(self) -> str:
        state = "" if self._fn is not None else " (consumed)"
        return f"<task {self._cfg.name}{state}>"


# --------------------------------------------------------------------------- operation / frame


class _TaskOp:
    """The task's operation state and promise ([task.state], [task.promise]).

    A frame of the driver: ``coro`` is the body. Its ``query`` is the promise's ``get_env()``
    (24.21): ``get_scheduler`` → ``SCHED``, ``get_allocator`` → the allocator,
    ``get_stop_token`` → the task's token, any other *forwarding* query → the Environment
    object. A root frame completes ``rcvr``; a child frame (a task awaited by a task on the
    same scheduler) hands its outcome straight to its parent.
    """

    __slots__ = (
        "__weakref__",
        "alloc",
        "cfg",
        "coro",
        "driver",
        "environment",
        "exit_error",
        "factory",
        "link",
        "own_env",
        "rcvr",
        "sched",
        "source",
        "started",
        "token",
        "trio_run",
        "unwinding",
    )

    def __init__(self, coro: Any, cfg: _Config, alloc: Any, rcvr: Any, ev: Any = _MISSING) -> None:
        self.coro = coro
        self.cfg = cfg
        self.rcvr = rcvr
        if ev is _MISSING:
            ev = get_env(rcvr)
        self.sched = _resolve_scheduler(cfg, ev)
        self.trio_run = _trio_run_of(self.sched)
        if alloc is _MISSING:
            at = cfg.allocator_type
            alloc = _DEFAULT_ALLOC if at is None else at()
        self.alloc = alloc
        # [task.state]: own-env, then the Environment object.
        env_cls = cfg.environment
        if env_cls is None:
            self.own_env: Any = EMPTY_ENV
            self.environment: Any = None
        else:
            et = cfg.env_type
            self.own_env = et(ev) if et is not None else EMPTY_ENV
            if cfg.env_arity == 0:
                self.environment = env_cls()
            else:
                self.environment = env_cls(self.own_env if et is not None else ev)
        self.factory: Any = None
        self.token: Any = None
        self.source: Any = None
        self.link: Any = None
        self.driver: Any = None
        self.started = False
        self.unwinding = _UNWIND_NONE
        self.exit_error: Any = None

    # -- the promise's environment -------------------------------------------------------------

    def _sx_try(self, q: Any, default: Any) -> Any:
        if q is get_scheduler:
            return self.sched
        if q is get_stop_token:
            return self.token
        if q is get_allocator:
            return self.alloc
        e = self.environment
        if e is None or not _is_forwarding(q):
            return default
        return query_or(e, q, default)

    def query(self, q: Any, *args: Any) -> Any:
        if args:
            e = self.environment
            if e is not None and _is_forwarding(q):
                return e.query(q, *args)
            raise QueryError(f"the environment of task {self.cfg.name} does not support {q!r}")
        r = self._sx_try(q, _MISSING)
        if r is _MISSING:
            raise QueryError(
                f"the environment of task {self.cfg.name} does not support {q!r} (a task "
                "forwards only get_scheduler, get_stop_token, get_allocator and the forwarding "
                "queries its Environment answers, REQUIREMENTS 24.21)"
            )
        return r

    def get_env(self) -> Any:
        return self

    # -- stop token ---------------------------------------------------------------------------

    def _link_token(self, st: Any, own: bool) -> None:
        """Make the task's token mirror ``st`` (24.10); ``own`` forces an own stop source."""
        sst = self.cfg.stop_source_type
        if not own and sst is inplace_stop_source:
            t = type(st)
            if t is inplace_stop_token:
                self.token = st  # the same token type: no link needed (P3552R1 4.7)
                return
            if t is never_stop_token or not st.stop_possible():
                self.token = inplace_stop_token()  # stop_possible() is False, like st's
                return
        src = self.source = sst()
        self.token = src.get_token()
        if st.stop_possible():
            self.link = stop_callback_for(st, src.request_stop)

    def _unlink(self) -> None:
        link = self.link
        if link is not None:
            self.link = None
            link.close()

    # -- start --------------------------------------------------------------------------------

    def start(self) -> None:
        if self.started:
            raise twice_started(self)
        self.started = True
        fn, args, kwargs = self.factory
        self.factory = None
        try:
            self.coro = fn(*args, **kwargs)  # the body starts now (24.7)
        except Exception as e:  # the function rejected its arguments
            self._complete_root(_THROW, e)
            return
        ev = get_env(self.rcvr)
        st = get_stop_token(ev)
        run = self.trio_run
        drv = self.driver = _Driver(self, run)
        if run is None:
            self._link_token(st, False)
            drv.mode = _LOOP
            drv.run_loop_from(_SEND, None)
            return
        # The body runs in a trio task (so trio primitives work); it gets its own stop
        # source so that the hosting trio task's cancel scope is tied to it, not to the
        # receiver's token.
        self._link_token(st, True)
        drv.mode = _TRIO
        nursery = query_or(ev, trio_host_nursery, None)
        sink = _HostSink(self)
        main = _host_main(drv)
        main.__qualname__ = self.cfg.name  # type: ignore[attr-defined]  # names the trio task
        hosted = TrioHostedOp(main, sink, run, fwd_env(self), nursery)
        drv.hosted = hosted
        if _get_ident() == run.thread and not run.finished:
            hosted.start()
        else:
            try:
                run.token.run_sync_soon(hosted.start)
            except trio.RunFinishedError:
                main.close()
                drv.abandon()
                self._complete_root(_STOP, None)

    def _complete_root(self, kind: int, data: Any) -> None:
        """Complete the receiver; the coroutine has finished (24.13, P3552R1 5 caveat 2)."""
        self._unlink()
        rcvr = self.rcvr
        self.rcvr = None
        try:
            if kind == _SEND:
                if data is None:
                    rcvr.set_value()
                elif type(data) is values:
                    rcvr.set_value(*data)
                else:
                    rcvr.set_value(data)
            elif kind == _THROW:
                rcvr.set_error(data)
            else:
                rcvr.set_stopped()
        except Exception as exc:
            terminate("a receiver's completion raised (REQUIREMENTS 2.12)", exc)

    def __repr__(self) -> str:
        return f"<task operation {self.cfg.name}>"


_DEFAULT_ALLOC = _DefaultAllocator()


class _Outcome:
    """Receiver of a task run inside the awaiting trio task: keeps the outcome."""

    __slots__ = ("data", "env", "kind")

    def __init__(self, env: Any) -> None:
        self.env = env
        self.kind = _PENDING
        self.data: Any = None

    def get_env(self) -> Any:
        return self.env

    def set_value(self, *vals: Any) -> None:
        n = len(vals)
        self.data = vals[0] if n == 1 else (None if n == 0 else vals)
        self.kind = _SEND

    def set_error(self, err: Any) -> None:
        self.data = err
        self.kind = _THROW

    def set_stopped(self) -> None:
        self.kind = _STOP


class _TrioAwaitEnv(TryEnv):
    """The environment ``await sndr`` in a trio task gives (the trio bridge's, 32.1)."""

    __slots__ = ("_base", "_run")
    _unsupported = "the environment of an awaiting trio task does not support {q!r}"

    def __init__(self, run: RunState, base: Any) -> None:
        self._run = run
        self._base = base

    def _sx_try(self, q: Any, default: Any) -> Any:
        if q is get_stop_token:
            return default  # the task makes its own, tied to trio cancellation
        base = self._base
        if base is not None:
            r = query_or(base, q, _MISSING)
            if r is not _MISSING:
                return r
        if q is get_scheduler:
            return self._run.sched
        return default


async def _host_main(drv: _Driver) -> None:
    await drv


class _HostSink:
    """Receiver of the trio hosting operation: the task completes its real receiver itself."""

    __slots__ = ("_op",)

    def __init__(self, op: _TaskOp) -> None:
        self._op = op

    def get_env(self) -> Any:
        return self._op

    def set_value(self, *vals: Any) -> None:
        pass

    def set_error(self, err: Any) -> None:  # pragma: no cover - trio_main never raises these
        terminate(
            "internal error: a task's trio host failed",
            err if isinstance(err, BaseException) else None,
        )

    def set_stopped(self) -> None:
        pass


# --------------------------------------------------------------------------- the driver

_LOOP, _TRIO = 1, 2


class _Hop:
    """Receiver of the hop back onto ``SCHED`` after an await (unstoppable, P3941R1)."""

    __slots__ = ("_drv",)

    def __init__(self, drv: _Driver) -> None:
        self._drv = drv

    def get_env(self) -> Any:
        return UNSTOPPABLE_ENV

    def set_value(self) -> None:
        self._drv._loop()

    def set_error(self, err: Any) -> None:
        terminate(
            "an infallible scheduler's schedule() completed with an error on a task's hop back "
            "(P3941R1, REQUIREMENTS 21.14)",
            err if isinstance(err, BaseException) else None,
        )
        self._drv._loop()

    def set_stopped(self) -> None:
        terminate("an infallible scheduler's schedule() completed stopped on a task's hop back")
        self._drv._loop()


class _Driver:
    """Steps a stack of task frames with one loop (see the module docstring).

    It is the receiver of every sender awaited by its frames (one at a time); its
    environment is the top frame's (the promise's ``get_env``, 24.21).
    """

    __slots__ = (
        "cancelled",
        "data",
        "frames",
        "gate",
        "hop",
        "hosted",
        "kind",
        "mode",
        "run",
        "sndr",
        "task",
        "top",
    )

    def __init__(self, root: _TaskOp, run: RunState | None) -> None:
        self.top = root
        self.frames: list[_TaskOp] = [root]
        self.run = run
        self.mode = _LOOP
        self.kind = _PENDING
        self.data: Any = None
        self.sndr: Any = None
        self.gate: Any = None
        self.hop = False
        self.hosted: Any = None
        self.task: Any = None
        self.cancelled = False

    # -- the coroutine side ------------------------------------------------------------------

    def await_sender(self, sndr: Any) -> Generator[Any, Any, Any]:
        """``await sndr`` in a frame's coroutine: hand it to the loop."""
        self.sndr = sndr
        return (yield _AWAIT)

    # -- receiver of the awaited operation -----------------------------------------------------

    def get_env(self) -> Any:
        return self.top

    def set_value(self, *vals: Any) -> None:
        if self.kind:
            raise completed_twice(self, "set_value")
        n = len(vals)
        self.data = vals[0] if n == 1 else (None if n == 0 else vals)
        self.kind = _SEND
        g = self.gate
        if g is not None and g.pop(0, _MISSING) is _MISSING:
            self._resume()

    def set_error(self, err: Any) -> None:
        if self.kind:
            raise completed_twice(self, "set_error")
        self.data = err if isinstance(err, BaseException) else ErrorValue(err)
        self.kind = _THROW
        g = self.gate
        if g is not None and g.pop(0, _MISSING) is _MISSING:
            self._resume()

    def set_stopped(self) -> None:
        if self.kind:
            raise completed_twice(self, "set_stopped")
        self.kind = _STOP
        g = self.gate
        if g is not None and g.pop(0, _MISSING) is _MISSING:
            self._resume()

    def _done(self) -> bool:
        return self.kind != _PENDING

    def _resume(self) -> None:
        """The awaited operation completed after the loop suspended: continue on SCHED."""
        if self.mode == _TRIO:
            run = self.run
            assert run is not None
            if _get_ident() == run.thread and not run.finished:
                _reschedule(self.task)
                return
            try:
                run.token.run_sync_soon(self._wake)
            except trio.RunFinishedError:
                raise run_finished_error("resume a task after an await") from None
            return
        if self.hop:
            # Back onto SCHED's agent; the hop cannot be stopped (P3941R1 3.2, 24.17).
            op = connect(self.top.sched.schedule(), _Hop(self))
            trampoline_start(op)
            return
        self._loop()

    def _wake(self) -> None:
        _reschedule(self.task)

    # -- the loop ----------------------------------------------------------------------------

    def run_loop_from(self, kind: int, data: Any) -> None:
        self.kind = kind
        self.data = data
        self._loop()

    def _loop(self) -> None:
        kind = self.kind
        data = self.data
        self.data = None
        while True:
            r = self._step(kind, data)
            if r is _SUSPEND or r is _DONE:
                return
            kind, data = _THROW, RuntimeError(_foreign_message(self.top, r))

    def _trio_loop(self) -> Generator[Any, Any, None]:
        self.task = tl.current_task()
        kind, data = _SEND, None
        while True:
            r = self._step(kind, data)
            if r is _DONE:
                return
            if r is _SUSPEND:
                yield from _wait_task_rescheduled(self._abort).__await__()
                kind = self.kind
                data = self.data
                self.data = None
                continue
            # A trio primitive yielded to trio: pass it through, and its answer back.
            try:
                data = yield r
                kind = _SEND
            except BaseException as e:
                kind, data = _THROW, e

    def __await__(self) -> Generator[Any, Any, None]:
        # The trio hosting operation awaits the driver: the body runs in that trio task.
        r: Generator[Any, Any, None] = self._trio_loop()
        return r

    def _abort(self, raise_cancel: Any) -> Any:
        self.cancelled = True
        # The hosting trio task is being cancelled while an awaited sender runs: that is a
        # stop request (the awaited operation sees the task's token); keep waiting until it
        # completes (an operation state outlives its operation, REQUIREMENTS 32.2).
        src = self.frames[0].source
        if src is not None:
            src.request_stop()
        return _FAILED

    def abandon(self) -> None:
        for fr in self.frames:
            c = fr.coro
            fr.coro = None
            if c is not None:
                c.close()

    def _step(self, kind: int, data: Any) -> Any:
        """Run frames until the loop must wait, the root finished, or a foreign yield."""
        ds = _driver_state
        fr = self.top
        coro = fr.coro
        while True:
            prev = ds.driver
            ds.driver = self
            try:
                if kind == _SEND:
                    y = coro.send(data)
                elif kind == _THROW:
                    y = coro.throw(data)
                else:
                    # Stopped: unwind the body; it is never resumed with a value (2.4).
                    fr.unwinding = _UNWIND_STOP
                    y = coro.throw(Stopped())
            except StopIteration as si:
                ds.driver = prev
                k, d = self._returned(fr, si.value)
            except Stopped:
                ds.driver = prev
                k, d = _STOP, None
            except _ErrorExit:
                ds.driver = prev
                k, d = _THROW, fr.exit_error
            except Exception as e:
                ds.driver = prev
                if self.mode == _LOOP and type(e) is RuntimeError and e.args == _TRIO_NO_CTX:
                    e = _trio_off_loop_error(fr, e)
                if not isinstance(e, fr.cfg.exc_types):
                    terminate(
                        f"the task {fr.cfg.name} raised {type(e).__name__}, which is not among "
                        "its error_types (REQUIREMENTS 24.15)",
                        e,
                    )
                k, d = _THROW, e
            except BaseException as e:
                # trio.Cancelled (trio mode), KeyboardInterrupt, ...: never an error datum.
                # The root completes stopped and the exception goes on to trio / the caller;
                # in a child frame it propagates into the parent like a plain `await`.
                ds.driver = prev
                if len(self.frames) == 1:
                    self._finish_root(fr, _STOP, None)
                    raise
                self._pop(fr)
                fr = self.top
                coro = fr.coro
                kind, data = _THROW, e
                continue
            else:
                ds.driver = prev
                if y is _AWAIT:
                    sndr = self.sndr
                    self.sndr = None
                    ts = type(sndr)
                    if ts is _JUST and not domains_active():
                        # await sx.just(...): nothing to connect or start, no user code runs
                        # in between; the values are the result (no domain can intervene).
                        vals = sndr._vals
                        n = len(vals)
                        kind = _SEND
                        data = vals[0] if n == 1 else (None if n == 0 else vals)
                        continue
                    if ts is _TaskSender:
                        try:
                            child = self._child_frame(fr, sndr)
                        except Exception as e:  # consumed, or bad arguments
                            kind, data = _THROW, e
                            continue
                        if child is not None:
                            fr = child
                            coro = fr.coro
                            kind, data = _SEND, None
                            continue
                    try:
                        if ts not in _ONE_VALUE_SIG:
                            _check_awaitable(sndr, fr)
                        op = connect(sndr, self)
                    except Exception as e:
                        kind, data = _THROW, e
                        continue
                    self.kind = _PENDING
                    self.gate = None
                    op.start()
                    if not self.kind:
                        # Not completed inside start(). Decide the hop back, then arm the
                        # gate: whichever of this thread and the completing one pops it
                        # second continues the loop (see set_value).
                        if self.mode == _TRIO or fr.cfg.inline:
                            self.hop = False
                        else:
                            self.hop = not (
                                getattr(sndr, "_sx_affine", False) is True
                                or completes_on(sndr, fr.sched, fr)
                            )
                        gate = self.gate = {0: None}
                        # (re-read: the completion may have arrived on another thread)
                        if not self._done() and gate.pop(0, _MISSING) is None:
                            return _SUSPEND  # the completion resumes the loop
                    kind = self.kind
                    data = self.data
                    self.data = None
                    continue
                ty = type(y)
                if ty is with_error:
                    why = fr.cfg.check_with_error(y.error)
                    if why is not None:
                        kind, data = _THROW, TypeError(why)
                        continue
                    # Never resumed: unwind the body (finally blocks run, and may await),
                    # then complete with the error (24.14).
                    fr.unwinding = _UNWIND_ERROR
                    fr.exit_error = y.error
                    kind, data = _THROW, _ErrorExit()
                    continue
                if ty is change_coroutine_scheduler:
                    kind, data = self._change_scheduler(fr, y.scheduler)
                    if kind == _PENDING:
                        return _SUSPEND
                    continue
                return y
            # The frame's body finished with (k, d).
            if len(self.frames) == 1:
                self._finish_root(fr, k, d)
                return _DONE
            self._pop(fr)
            fr = self.top
            coro = fr.coro
            if k == _THROW and not isinstance(d, BaseException):
                d = ErrorValue(d)
            kind, data = k, d

    def _returned(self, fr: _TaskOp, v: Any) -> tuple[int, Any]:
        u = fr.unwinding
        if u == _UNWIND_STOP:
            return _THROW, RuntimeError(
                f"the task {fr.cfg.name} caught the sx.Stopped that unwinds it after an awaited "
                "sender completed stopped, and returned normally (DESIGN.md 2.4: stopped "
                "cannot be caught; re-raise it)"
            )
        if u == _UNWIND_ERROR:
            return _THROW, fr.exit_error
        if type(v) is with_error:
            why = fr.cfg.check_with_error(v.error)
            if why is not None:
                return _THROW, TypeError(why)
            return _THROW, v.error
        return _SEND, v

    # -- frames -----------------------------------------------------------------------------

    def _child_frame(self, parent: _TaskOp, sndr: _TaskSender[Any]) -> _TaskOp | None:
        """Run an awaited task on this loop if it would run on the same scheduler (24.22b)."""
        cfg = sndr._cfg
        tok = parent.token
        if cfg.plain and type(parent.sched) is task_scheduler and type(tok) is inplace_stop_token:
            # The common case: default Environment, so task_scheduler and an inplace stop
            # source. The child's SCHED is task_scheduler(parent SCHED), equal to the
            # parent's, and its token is the parent's (same type: no link, 24.10).
            alloc = sndr._alloc
            child = _TaskOp.__new__(_TaskOp)
            child.coro = sndr._take()  # may raise: thrown into the parent at its await
            child.cfg = cfg
            child.rcvr = None
            child.sched = parent.sched
            child.trio_run = parent.trio_run
            child.alloc = _DEFAULT_ALLOC if alloc is _MISSING else alloc
            child.own_env = EMPTY_ENV
            child.environment = None
            child.factory = None
            child.token = tok
            child.source = None
            child.link = None
            child.driver = self
            child.started = True
            child.unwinding = _UNWIND_NONE
            child.exit_error = None
            self.frames.append(child)
            self.top = child
            return child
        penv = fwd_env(parent)
        try:
            child = _TaskOp(None, cfg, sndr._alloc, None, penv)
        except Exception:
            return None  # connect it normally; the error surfaces from connect()
        if self.mode == _TRIO:
            same = cfg.inline or child.trio_run is parent.trio_run
        else:
            same = child.sched == parent.sched or (cfg.inline and parent.cfg.inline)
        if not same:
            return None
        child.coro = sndr._take()  # may raise: thrown into the parent at its await
        child.started = True
        child.driver = self
        child._link_token(parent.token, False)
        self.frames.append(child)
        self.top = child
        return child

    def _pop(self, fr: _TaskOp) -> None:
        fr._unlink()
        fr.coro = None
        frames = self.frames
        frames.pop()
        self.top = frames[-1]

    def _finish_root(self, fr: _TaskOp, kind: int, data: Any) -> None:
        fr.coro = None
        fr.driver = None  # no reference cycle left behind
        self.sndr = self.data = None
        fr._complete_root(kind, data)

    # -- change_coroutine_scheduler (deprecated) ----------------------------------------------

    def _change_scheduler(self, fr: _TaskOp, sch: Any) -> tuple[int, Any]:
        try:
            cfg = fr.cfg
            new = inline_scheduler() if cfg.inline else _resolve_scheduler(cfg, sched_env(sch))
            new_run = _trio_run_of(new)
            if (new_run is None) != (self.mode == _LOOP) or (
                new_run is not None and new_run is not self.run
            ):
                raise TypeError(
                    "change_coroutine_scheduler() cannot move a task between the trio "
                    "scheduler and a scheduler of another kind; await sx.starts_on(sch, "
                    "nested_task()) instead (P3941R1 3.4)"
                )
        except Exception as e:
            return _THROW, e
        old = fr.sched
        fr.sched = new
        if self.mode == _TRIO or cfg.inline:
            return _SEND, old
        # Continue on the new scheduler: an unstoppable hop.
        self.kind = _PENDING
        self.data = old
        self.hop = False
        op = connect(new.schedule(), _ChangeHop(self, old))
        trampoline_start(op)
        return _PENDING, None


class _ChangeHop(_Hop):
    __slots__ = ("_old",)

    def __init__(self, drv: _Driver, old: Any) -> None:
        super().__init__(drv)
        self._old = old

    def set_value(self) -> None:
        self._drv.run_loop_from(_SEND, self._old)


def _check_awaitable(sndr: Any, env: Any) -> None:
    """A sender with several value signatures is not awaitable (REQUIREMENTS 20.2, 24.19)."""
    try:
        sigs = get_completion_signatures(sndr, env)
    except Exception:
        return
    if sigs is not None and sigs.count_of(set_value_t) > 1:
        raise TypeError(
            f"{sndr!r} has {sigs.count_of(set_value_t)} value completion signatures and cannot "
            "be awaited: await sx.into_variant(sndr) instead (REQUIREMENTS 20.2, P3552R1 4.4)"
        )


#: What trio raises when one of its primitives is awaited outside a trio task.
_TRIO_NO_CTX = ("must be called from async context",)


def _off_trio_message(fr: _TaskOp, detail: str) -> str:
    return (
        f"the task {fr.cfg.name} awaited a trio primitive (trio.sleep, a channel, a nursery, a "
        f"cancel scope, ...) or another non-structexec awaitable, but it runs on {fr.sched!r}, "
        "not on the trio scheduler, so it is not inside a trio task. Await the task from trio "
        "code, spawn it into a counting_scope, or run the trio part as a nested task on the "
        f"trio scheduler: await sx.starts_on(sx.trio_scheduler(), nested_task()) ({detail})"
    )


def _trio_off_loop_error(fr: _TaskOp, e: RuntimeError) -> RuntimeError:
    """Replace trio's terse error by one that says why and what to do (issue: clear error)."""
    err = RuntimeError(_off_trio_message(fr, f"trio said: {e.args[0]!r}"))
    err.__cause__ = e
    err.__traceback__ = e.__traceback__
    return err


def _foreign_message(fr: _TaskOp, y: Any) -> str:
    return _off_trio_message(fr, f"it yielded {y!r}")


# --------------------------------------------------------------------------- the decorator


def _find_allocator(args: tuple[Any, ...], name: str) -> Any:
    for i, a in enumerate(args):
        if a is allocator_arg:
            if i + 1 >= len(args):
                raise TypeError(
                    f"{name}(): allocator_arg must be followed by an allocator (REQUIREMENTS 24.12)"
                )
            return args[i + 1]
    return _MISSING


def _result_type(fn: Any) -> Any:
    try:
        ann = inspect.get_annotations(fn, eval_str=True)
    except Exception:
        try:
            ann = dict(getattr(fn, "__annotations__", {}))
        except Exception:
            return _MISSING
        r = ann.get("return", _MISSING)
        return _MISSING if isinstance(r, str) else r
    return ann.get("return", _MISSING)


class _TaskDecorator(Protocol):
    def __call__(self, fn: Callable[P, Coroutine[Any, Any, T]], /) -> Callable[P, Sender[T]]: ...


class task_t(Algorithm):
    """``@sx.task`` / ``@sx.task(environment=Env, result=T)``: coroutine functions as senders.

    [exec.task], P3552R1, P3941R1; REQUIREMENTS 24, DESIGN.md 1, 2.4, 2.9, 2.10.

    Decorating an ``async def`` makes each call return a **task**: a sender that is

    * **lazy**: the call and ``connect`` run no line of the body (24.7); the body starts when
      the operation is started;
    * **single-use**: a second ``connect`` (or ``await``) raises ``RuntimeError`` (24.5);
      a task dropped without being started closes its coroutine quietly (24.6);
    * completes ``set_value(v)`` with the returned ``v`` (``set_value()`` for ``None``,
      ``sx.values(a, b)`` for several datums), ``set_error(e)`` for an escaping exception
      that is an instance of one of ``error_types`` (any other exception calls the
      terminate handler, 24.15), ``set_error(e)`` for ``await sx.with_error(e)`` (24.14),
      and ``set_stopped()`` when an awaited sender completes stopped (24.16).

    Inside the body, ``await sndr`` gives ``None`` / the datum / a tuple (24.19); an error
    completion is raised at the ``await``; a **stopped** completion unwinds the body: the
    await raises :class:`sx.Stopped` (a ``BaseException``: ``except Exception`` does not
    catch it), ``finally`` blocks and ``async with`` exits run and may await, and the task
    then completes ``set_stopped()`` (DESIGN.md 2.4). A body that swallows ``Stopped`` and
    returns completes with ``set_error(RuntimeError)``.

    **Scheduler** (24.9, 24.11, 24.17, 24.23): ``SCHED`` is
    ``scheduler_type(get_scheduler(env))`` of the receiver's environment, resolved at
    ``connect``; a receiver without a scheduler makes ``connect`` raise ``TypeError``
    explaining how to provide one (P3552R1 4.5). After every await the body resumes on
    ``SCHED`` (scheduler affinity, via ``affine_on`` semantics: senders known to complete
    where they started are not rescheduled). On the trio scheduler the body runs in a trio
    task and may await trio primitives; elsewhere that raises ``RuntimeError`` with advice.

    **Environment** (24.1-24.4, 24.8, 24.21): a class with optional attributes
    ``scheduler_type`` (default :class:`task_scheduler`; :class:`inline_scheduler` turns
    affinity off), ``stop_source_type`` (default :class:`inplace_stop_source`),
    ``error_types`` (default ``completion_signatures(set_error_t(Exception))``; only
    ``set_error_t`` entries, else ``TypeError``), ``allocator_type`` and ``env_type(env)``.
    At ``connect`` the task builds ``Env(env_type(rcvr_env))`` if ``env_type`` exists, else
    ``Env(rcvr_env)``, else ``Env()``; awaited senders see its ``query`` answers for
    forwarding queries, plus ``get_scheduler`` (``SCHED``), ``get_stop_token`` (a token that
    mirrors the receiver's, 24.10) and ``get_allocator`` (the argument after
    ``sx.allocator_arg`` in the call, else ``allocator_type()``; 24.12).

    ``result=T`` (or the return annotation) declares the value type for
    ``get_completion_signatures``.
    """

    __slots__ = ()

    @overload
    def __call__(self, fn: Callable[P, Coroutine[Any, Any, T]], /) -> Callable[P, Sender[T]]: ...
    @overload
    def __call__(self, *, environment: Any = None, result: Any = ...) -> _TaskDecorator: ...
    def __call__(self, fn: Any = None, *, environment: Any = None, result: Any = _MISSING) -> Any:
        if fn is None:
            return lambda f: self._decorate(f, environment, result)
        return self._decorate(fn, environment, result)

    def _decorate(self, fn: Any, environment: Any, result: Any) -> Any:
        if not inspect.iscoroutinefunction(fn):
            raise TypeError(
                f"@sx.task decorates an `async def` function, got {type(fn).__name__} "
                f"{getattr(fn, '__qualname__', fn)!r}"
            )
        if environment is not None and not isinstance(environment, type):
            raise TypeError(f"@sx.task(environment=...) takes a class, got {environment!r}")
        name = getattr(fn, "__qualname__", repr(fn))
        if result is _MISSING:
            result = _result_type(fn)
        cfg = _Config(environment, result, name)

        @functools.wraps(fn)
        def make(*args: Any, **kwargs: Any) -> _TaskSender[Any]:
            alloc = _find_allocator(args, name)
            if alloc is not _MISSING and cfg.allocator_type is not None:
                at = cfg.allocator_type
                if not isinstance(alloc, at):
                    alloc = at(alloc)
            return _TaskSender(fn, args, kwargs, cfg, alloc)

        make._sx_task_config = cfg  # type: ignore[attr-defined]
        return make


task = task_t()
_TaskSender.tag = task

_JUST = type(just(0))

#: Sender types known to have at most one value signature (no per-await check needed).
_ONE_VALUE_SIG: frozenset[type] = frozenset(
    {
        type(just(0)),
        type(just_error(0)),
        type(just_stopped()),
        type(read_env(get_scheduler)),
        _TaskSender,
    }
)
