"""``@sx.task``: a coroutine type that is a sender ([exec.task], P3552R1, P3941R1).

[exec.task], the task guide, the task guide 'How "stopped" unwinds a task',
the task guide "What a task is", the task guide "Scheduler affinity".

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

Either way the body is stepped by one loop (``Driver``, ``_task_driver.py``), never by
recursion: an await whose sender completes inside ``start`` continues the same loop
iteration, and a task awaiting another task on the same scheduler runs the child's coroutine
on the same loop (a stack of frames), without a new trio task or operation state (P3552R1
[exec.get.await.adapt], [exec.task]).

This module has the decorator, the sender and the operation state (the promise, and a frame
of the driver); ``_task_environment.py`` reads the Environment and has ``with_error``,
``change_coroutine_scheduler`` and ``allocator_arg``; ``_task_driver.py`` is the loop.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Any, ParamSpec, Protocol, TypeVar, overload

import trio.lowlevel as tl

from .._core import _hooks
from .._core._completion_signatures import completion_signatures
from .._core._env import TryEnv, fwd_env, get_env
from .._core._errors import ErrorValue, Stopped, terminate
from .._core._protocol import Algorithm, Sender, twice_started
from .._core._queries import (
    _MISSING,
    QueryError,
    forwarding_query,
    get_allocator,
    get_scheduler,
    get_stop_token,
    query_or,
)
from .._core._stop_token import (
    inplace_stop_source,
    inplace_stop_token,
    never_stop_token,
    stop_callback_for,
)
from .._core._values import send_result
from .._schedulers._run_loop import raised_sink, sink_of
from .._trio._coroutine_sender import TrioHostedOp
from .._trio._trio_bridge import (
    RunState,
    call_in_run,
    current_run,
    hosted_env,
    in_trio_run,
    trio_host_nursery,
)
from ._task_driver import (
    LOOP,
    PENDING,
    SEND,
    STOP,
    THROW,
    TRIO,
    UNWIND_NONE,
    Driver,
    bind_task_sender,
)
from ._task_environment import (
    DEFAULT_ALLOC,
    Config,
    allocator_arg,
    change_coroutine_scheduler,
    find_allocator,
    resolve_scheduler,
    result_type,
    trio_run_of,
    with_error,
)

if TYPE_CHECKING:
    from .._core._contracts import Env, Rcvr
    from .._core._coroutine_driver import Steppable
    from .._core._stop_token import StopCallback, StopSource, StopToken

    #: A task's function and its arguments, kept until the task starts.
    Factory = tuple[Callable[..., Steppable], tuple[object, ...], dict[str, object]]
from ._task_scheduler import task_scheduler

__all__ = ["allocator_arg", "change_coroutine_scheduler", "task", "with_error"]

P = ParamSpec("P")
T = TypeVar("T")

_driver_state = _hooks.driver_state
_checkpoint = tl.checkpoint
_NEVER = never_stop_token()


def _is_forwarding(q: object) -> bool:
    return getattr(q, "forwarding", False) is True or bool(forwarding_query(q))


# --------------------------------------------------------------------------- the sender


class _TaskSender(Sender[T]):
    """A task: a lazy, single-use sender ([task.class], [task.members]; [exec.task]).

    It keeps the function and its arguments; the coroutine object is created when the task
    starts (or when a task awaiting it takes it), so a task that is never started leaves no
    coroutine behind: nothing to close, no "never awaited" warning ([exec.task]). An argument error
    (``TypeError`` from calling the function) therefore surfaces when the task starts, as its
    error completion.
    """

    __slots__ = ("__weakref__", "_alloc", "_args", "_cfg", "_fn", "_kwargs")

    def __init__(
        self,
        fn: Callable[..., Steppable],
        args: tuple[object, ...],
        kwargs: dict[str, object],
        cfg: Config,
        alloc: object,
    ) -> None:
        self._fn: Callable[..., Steppable] | None = fn
        self._args = args
        self._kwargs = kwargs
        self._cfg = cfg
        self._alloc = alloc

    def _consumed(self) -> RuntimeError:
        return RuntimeError(
            f"the task {self._cfg.name} was already connected or awaited: a task is single-use "
            "([task.class]); call the task function again for another run"
        )

    def connect(self, rcvr: Rcvr) -> _TaskOp:
        """Connect once: a second ``connect`` raises ``RuntimeError`` ([exec.task]).

        Raises ``TypeError`` (and leaves the task connectable) when the receiver's environment
        provides no scheduler the task can use ([exec.task]).
        """
        fn = self._fn
        if fn is None:
            raise self._consumed()
        op = _TaskOp(None, self._cfg, self._alloc, rcvr)  # may raise TypeError
        op.factory = (fn, self._args, self._kwargs)
        self._fn = None
        self._args = self._kwargs = None  # type: ignore[assignment]
        return op

    def _take(self) -> Steppable:
        """The coroutine, for a parent task that runs this one on its own loop."""
        fn = self._fn
        if fn is None:
            raise self._consumed()
        args, kwargs = self._args, self._kwargs
        self._fn = None
        self._args = self._kwargs = None  # type: ignore[assignment]
        return fn(*args, **kwargs)

    def __await__(self) -> Generator[object, object, T]:
        """``await t()``: inside a task, a frame of its loop; in a trio task, run right there.

        From plain trio code the body runs in the awaiting trio task itself, exactly as
        ``await sndr`` of any sender would run it with the environment of the trio bridge
        (``get_scheduler`` is the trio scheduler, the stop token follows the awaiting task's trio
        cancellation): the result is returned, an error raised, and a stop raises ``trio.Cancelled``
        if the awaiting task's cancellation caused it, ``sx.Stopped`` otherwise
        (the task guide 'How "stopped" unwinds a task'). Only the trio task hosting differs: no new
        trio task.
        """
        d = _driver_state.driver
        if d is not None:
            r: Generator[object, object, T] = d.await_sender(self)
            return r
        if self._cfg.scheduler_type is task_scheduler and in_trio_run():
            return self._await_in_trio_task()
        r = _hooks.await_sender(self)
        return r

    def _await_in_trio_task(self) -> Generator[object, object, Any]:
        run = current_run()
        holder = _Outcome(_TrioAwaitEnv(run, hosted_env.get()))
        op = self.connect(holder)
        fn, args, kwargs = op.factory  # type: ignore[misc]  # set by connect
        op.factory = None
        op.started = True
        op.coro = fn(*args, **kwargs)  # an argument error is raised at the await, as usual
        op._link_token(_NEVER, True)  # own source: trio cancellation -> stop request
        drv = op.driver = Driver(op, run)
        drv.mode = TRIO
        # trio tasks started inside the body (nurseries) see the task's environment when
        # they await senders, as in a task hosted in its own trio task
        reset = hosted_env.set(fwd_env(op))
        try:
            yield from drv._trio_loop()
        finally:
            hosted_env.reset(reset)
        kind = holder.kind
        if kind == SEND:
            return holder.data
        if kind == THROW:
            err = holder.data
            holder.data = None
            raise err if isinstance(err, BaseException) else ErrorValue(err)
        if drv.cancelled:
            # The stop came from this task's trio cancellation: let trio raise Cancelled.
            yield from _checkpoint().__await__()
        raise Stopped()

    def get_completion_signatures(self, env: object = None) -> completion_signatures | None:
        """``set_value_t(T)`` (or ``()``), the ``error_types``, ``set_stopped_t()`` ([exec.task]).

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
    def data(self) -> type | None:
        return self._cfg.environment

    def __repr__(self) -> str:
        state = "" if self._fn is not None else " (consumed)"
        return f"<task {self._cfg.name}{state}>"


# --------------------------------------------------------------------------- operation / frame


class _TaskOp:
    """The task's operation state and promise ([task.state], [task.promise]).

    A frame of the driver: ``coro`` is the body. Its ``query`` is the promise's ``get_env()``
    ([exec.task]): ``get_scheduler`` → ``SCHED``, ``get_allocator`` → the allocator,
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
        "rcvr",
        "sched",
        "source",
        "started",
        "token",
        "trio_run",
        "unwinding",
    )

    def __init__(
        self,
        coro: Steppable | None,
        cfg: Config,
        alloc: object,
        rcvr: Rcvr | None,
        ev: object = _MISSING,
    ) -> None:
        self.coro = coro
        self.cfg = cfg
        self.rcvr = rcvr
        if ev is _MISSING:
            ev = get_env(rcvr)
        self.sched = resolve_scheduler(cfg, ev)
        self.trio_run = trio_run_of(self.sched)
        if alloc is _MISSING:
            at = cfg.allocator_type
            alloc = DEFAULT_ALLOC if at is None else at()
        self.alloc = alloc
        # [task.state]: own-env, then the Environment object.
        env_cls = cfg.environment
        if env_cls is None:
            self.environment: Env | None = None
        else:
            et = cfg.env_type
            own_env = et(ev) if et is not None else ev
            self.environment = env_cls() if cfg.env_arity == 0 else env_cls(own_env)
        self.factory: Factory | None = None
        self.token: StopToken | None = None
        self.source: StopSource | None = None
        self.link: StopCallback | None = None
        self.driver: Driver | None = None
        self.started = False
        self.unwinding = UNWIND_NONE
        self.exit_error: object = None

    # -- the promise's environment -------------------------------------------------------------

    def _sx_try(self, q: object, default: object) -> object:
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

    def query(self, q: object, *args: object) -> object:
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
                "queries its Environment answers, [task.promise])"
            )
        return r

    def get_env(self) -> _TaskOp:
        return self

    # -- stop token ---------------------------------------------------------------------------

    def _link_token(self, st: StopToken, own: bool) -> None:
        """Make the task's token mirror ``st`` ([exec.task]); ``own`` forces an own stop source."""
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
        fn, args, kwargs = self.factory  # type: ignore[misc]  # set by connect
        self.factory = None
        try:
            self.coro = fn(*args, **kwargs)  # the body starts now ([exec.task])
        except Exception as e:  # the function rejected its arguments
            self._complete_root(THROW, e)
            return
        ev = get_env(self.rcvr)
        st = get_stop_token(ev)
        run = self.trio_run
        drv = self.driver = Driver(self, run)
        if run is None:
            self._link_token(st, False)
            drv.mode = LOOP
            drv.run_loop_from(SEND, None)
            return
        # The body runs in a trio task (so trio primitives work); it gets its own stop
        # source so that the hosting trio task's cancel scope is tied to it, not to the
        # receiver's token.
        self._link_token(st, True)
        drv.mode = TRIO
        nursery = query_or(ev, trio_host_nursery, None)
        sink = _HostSink(self)
        main = _host_main(drv)
        main.__qualname__ = self.cfg.name  # type: ignore[attr-defined]  # names the trio task
        hosted = TrioHostedOp(main, sink, run, fwd_env(self), nursery)
        if not call_in_run(run, hosted.start):
            main.close()
            drv.abandon()
            self._complete_root(STOP, None)

    def hand_over(self, exc: BaseException) -> bool:
        """Give ``exc`` (a ``KeyboardInterrupt``, ``SystemExit``, ... that escaped the body) to
        the consumer that waits for this task, through its ``raised_sink`` (an ``await`` in a
        trio task, ``sync_wait``): it raises it where it waits. ``False`` if nobody took it
        (the driver then raises it to whoever runs the body)."""
        rcvr = self.rcvr
        if rcvr is None:
            return False
        sink = sink_of(get_env(rcvr))
        if sink is None:
            return False
        try:
            return sink(exc) is True
        except Exception:  # pragma: no cover - a broken sink: raise it instead
            return False

    def _complete_root(self, kind: int, data: object) -> None:
        """Complete the receiver; the coroutine has finished ([exec.task], P3552R1 5 caveat 2)."""
        self._unlink()
        rcvr: Rcvr = self.rcvr  # type: ignore[assignment]  # a root frame's, set until now
        self.rcvr = None
        try:
            if kind == SEND:
                send_result(rcvr, data)
            elif kind == THROW:
                rcvr.set_error(data)
            else:
                rcvr.set_stopped()
        except Exception as exc:
            terminate(
                "a receiver's completion raised; completions must not raise ([exec.recv.concepts])",
                exc,
            )

    # -- a child frame ------------------------------------------------------------------------

    def child_frame(self, sndr: _TaskSender[object], drv: Driver) -> _TaskOp | None:
        """The frame that runs ``sndr``, a task awaited by this frame's body, on ``drv``'s loop.

        ``None`` when it would run on another scheduler: the driver then connects it as any
        sender ([exec.task]). Raises what taking its coroutine raises (a consumed task, arguments
        the function rejects); the driver throws that into this frame's body.
        """
        cfg = sndr._cfg
        tok = self.token
        if cfg.plain and type(self.sched) is task_scheduler and type(tok) is inplace_stop_token:
            # The common case: default Environment, so task_scheduler and an inplace stop
            # source. The child's SCHED is task_scheduler(parent SCHED), equal to the
            # parent's, and its token is the parent's (same type: no link, [exec.task]).
            alloc = sndr._alloc
            child = _TaskOp.__new__(_TaskOp)
            child.coro = sndr._take()  # may raise
            child.cfg = cfg
            child.rcvr = None
            child.sched = self.sched
            child.trio_run = self.trio_run
            child.alloc = DEFAULT_ALLOC if alloc is _MISSING else alloc
            child.environment = None
            child.factory = None
            child.token = tok
            child.source = None
            child.link = None
            child.driver = drv
            child.started = True
            child.unwinding = UNWIND_NONE
            child.exit_error = None
            return child
        try:
            child = _TaskOp(None, cfg, sndr._alloc, None, fwd_env(self))
        except Exception:
            return None  # connect it normally; the error surfaces from connect()
        if drv.mode == TRIO:
            same = cfg.inline or child.trio_run is self.trio_run
        else:
            same = child.sched == self.sched or (cfg.inline and self.cfg.inline)
        if not same:
            return None
        child.coro = sndr._take()  # may raise
        child.started = True
        child.driver = drv
        child._link_token(tok, False)  # type: ignore[arg-type]  # a started frame's token
        return child

    def __repr__(self) -> str:
        return f"<task operation {self.cfg.name}>"


class _Outcome:
    """Receiver of a task run inside the awaiting trio task: keeps the outcome."""

    __slots__ = ("data", "env", "kind")

    def __init__(self, env: Env) -> None:
        self.env = env
        self.kind = PENDING
        self.data: object = None

    def get_env(self) -> Env:
        return self.env

    def set_value(self, *vals: object) -> None:
        n = len(vals)
        self.data = vals[0] if n == 1 else (None if n == 0 else vals)
        self.kind = SEND

    def set_error(self, err: object) -> None:
        self.data = err
        self.kind = THROW

    def set_stopped(self) -> None:
        self.kind = STOP


class _TrioAwaitEnv(TryEnv):
    """The environment ``await sndr`` in a trio task gives (the trio bridge's,
    the trio guide "Awaiting a sender")."""

    __slots__ = ("_base", "_run")
    _unsupported = "the environment of an awaiting trio task does not support {q!r}"

    def __init__(self, run: RunState, base: Env | None) -> None:
        self._run = run
        self._base = base

    def _sx_try(self, q: object, default: object) -> object:
        if q is get_stop_token:
            return default  # the task makes its own, tied to trio cancellation
        if q is raised_sink:
            return default  # the body runs in the awaiting task: what it raises goes on there
        base = self._base
        if base is not None:
            r = query_or(base, q, _MISSING)
            if r is not _MISSING:
                return r
        if q is get_scheduler:
            return self._run.sched
        return default


async def _host_main(drv: Driver) -> None:
    await drv


class _HostSink:
    """Receiver of the trio hosting operation: the task completes its real receiver itself.

    If the body's trio task ended without the task having completed its receiver (the driver
    raised before it could: an internal failure), the sink completes it, so that nobody waits
    forever: stopped for a ``BaseException`` (it goes on to trio), else the error.
    """

    __slots__ = ("_op",)

    def __init__(self, op: _TaskOp) -> None:
        self._op = op

    def get_env(self) -> _TaskOp:
        return self._op

    def set_value(self, *vals: object) -> None:
        pass

    def set_error(self, err: object) -> None:  # pragma: no cover - _host_main never raises these
        if not self._finish_root(THROW, err):
            terminate(
                "internal error: a task's trio host failed",
                err if isinstance(err, BaseException) else None,
            )

    def set_stopped(self) -> None:
        self._finish_root(STOP, None)

    def _finish_root(self, kind: int, data: object) -> bool:
        op = self._op
        if op.rcvr is None:
            return False  # the task completed its receiver (the normal case)
        drv = op.driver
        op.driver = None
        if drv is not None:
            try:
                drv.abandon()  # close the body's coroutines (their finally blocks run)
            except Exception:  # pragma: no cover - a body that raises while closed
                pass
        op._complete_root(kind, data)
        return True


# --------------------------------------------------------------------------- the decorator


class _TaskDecorator(Protocol):
    def __call__(self, fn: Callable[P, Coroutine[Any, Any, T]], /) -> Callable[P, Sender[T]]: ...


class task_t(Algorithm):
    """``@sx.task`` / ``@sx.task(environment=Env, result=T)``: coroutine functions as senders.

    [exec.task], P3552R1, P3941R1; the task guide 'How "stopped" unwinds a task',
    the task guide "What a task is", the task guide "Scheduler affinity".

    Decorating an ``async def`` makes each call return a **task**: a sender that is

    * **lazy**: the call and ``connect`` run no line of the body ([exec.task]); the body starts when
      the operation is started;
    * **single-use**: a second ``connect`` (or ``await``) raises ``RuntimeError`` ([exec.task]);
      a task dropped without being started closes its coroutine quietly ([exec.task]);
    * completes ``set_value(v)`` with the returned ``v`` (``set_value()`` for ``None``,
      ``sx.values(a, b)`` for several datums), ``set_error(e)`` for an escaping exception that is an
      instance of one of ``error_types`` (any other exception calls the terminate handler,
      [exec.task]), ``set_error(e)`` for ``await sx.with_error(e)`` ([task.promise]), and
      ``set_stopped()`` when an awaited sender completes stopped ([exec.task]).

    Inside the body, ``await sndr`` gives ``None`` / the datum / a tuple ([exec.task]); an error
    completion is raised at the ``await``; a **stopped** completion unwinds the body: the await
    raises :class:`sx.Stopped` (a ``BaseException``: ``except Exception`` does not catch it),
    ``finally`` blocks and ``async with`` exits run and may await, and the task then completes
    ``set_stopped()`` (the task guide 'How "stopped" unwinds a task'). A body that swallows
    ``Stopped`` and returns completes with ``set_error(RuntimeError)``.

    **Scheduler** ([exec.task]): ``SCHED`` is
    ``scheduler_type(get_scheduler(env))`` of the receiver's environment, resolved at
    ``connect``; a receiver without a scheduler makes ``connect`` raise ``TypeError``
    explaining how to provide one (P3552R1 4.5). After every await the body resumes on
    ``SCHED`` (scheduler affinity, via ``affine_on`` semantics: senders known to complete
    where they started are not rescheduled). On the trio scheduler the body runs in a trio
    task and may await trio primitives; elsewhere that raises ``RuntimeError`` with advice.

    **Environment** ([exec.task]): a class with optional attributes
    ``scheduler_type`` (default :class:`task_scheduler`; :class:`inline_scheduler` turns
    affinity off), ``stop_source_type`` (default :class:`inplace_stop_source`),
    ``error_types`` (default ``completion_signatures(set_error_t(Exception))``; only
    ``set_error_t`` entries, else ``TypeError``), ``allocator_type`` and ``env_type(env)``.
    At ``connect`` the task builds ``Env(env_type(rcvr_env))`` if ``env_type`` exists, else
    ``Env(rcvr_env)``, else ``Env()``; awaited senders see its ``query`` answers for
    forwarding queries, plus ``get_scheduler`` (``SCHED``), ``get_stop_token`` (a token that
    mirrors the receiver's, [exec.task]) and ``get_allocator`` (the argument after
    ``sx.allocator_arg`` in the call, else ``allocator_type()``; [exec.task]).

    ``result=T`` (or the return annotation) declares the value type for
    ``get_completion_signatures``.
    """

    __slots__ = ()

    @overload
    def __call__(self, fn: Callable[P, Coroutine[Any, Any, T]], /) -> Callable[P, Sender[T]]: ...
    @overload
    def __call__(
        self, *, environment: type | None = None, result: object = ...
    ) -> _TaskDecorator: ...
    def __call__(
        self, fn: object = _MISSING, *, environment: type | None = None, result: object = _MISSING
    ) -> object:
        if fn is _MISSING:
            return lambda f: self._decorate(f, environment, result)
        return self._decorate(fn, environment, result)

    def _decorate(
        self, fn: object, environment: type | None, result: object
    ) -> Callable[..., _TaskSender[object]]:
        if not inspect.iscoroutinefunction(fn):
            raise TypeError(
                f"@sx.task decorates an `async def` function, got {type(fn).__name__} "
                f"{getattr(fn, '__qualname__', fn)!r}"
            )
        if environment is not None and not isinstance(environment, type):
            raise TypeError(f"@sx.task(environment=...) takes a class, got {environment!r}")
        name = getattr(fn, "__qualname__", repr(fn))
        if result is _MISSING:
            result = result_type(fn)
        cfg = Config(environment, result, name)

        @functools.wraps(fn)
        def make(*args: object, **kwargs: object) -> _TaskSender[object]:
            alloc = find_allocator(args, name)
            if alloc is not _MISSING and cfg.allocator_type is not None:
                at = cfg.allocator_type
                if not isinstance(alloc, at):
                    alloc = at(alloc)
            return _TaskSender(fn, args, kwargs, cfg, alloc)

        return make


task = task_t()
_TaskSender.tag = task
bind_task_sender(_TaskSender)
