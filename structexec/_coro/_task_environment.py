"""A task's configuration: the Environment, ``with_error``, ``change_coroutine_scheduler``,
``allocator_arg`` ([task.class], [task.state], [task.promise]; [exec.task],
[exec.task], [task.promise]).

``@sx.task(environment=Env)`` reads ``Env`` once, when the function is decorated, into a
:class:`Config`; :func:`resolve_scheduler` computes ``SCHED`` from a receiver's environment at
``connect``. ``with_error`` and ``change_coroutine_scheduler`` are the objects a task body
awaits to talk to the driver (``_task_driver.py``), which recognises them by type.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Generator, Iterable
from typing import TYPE_CHECKING, Any, Generic, NoReturn, TypeVar

from .._core import _hooks
from .._core._completion_signatures import completion_signatures
from .._core._queries import _MISSING, get_scheduler, query_or
from .._core._stop_token import inplace_stop_source
from .._core._tags import set_error_t, set_stopped_t, set_value_t
from .._schedulers._inline_scheduler import inline_scheduler
from .._trio._trio_bridge import RunState
from .._trio._trio_scheduler import _TrioScheduler
from ._task_scheduler import task_scheduler

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._core._contracts import Sched
    from .._core._stop_token import StopSource

__all__ = ["allocator_arg", "change_coroutine_scheduler", "with_error"]

T = TypeVar("T")

_driver_state = _hooks.driver_state


def _in_task_body() -> bool:
    """Whether the running coroutine is a task body (stepped by the task driver)."""
    return getattr(_driver_state.driver, "is_task_driver", False) is True


# --------------------------------------------------------------------------- small public types


class _AllocatorArg:
    """``sx.allocator_arg``: the marker before an allocator among a task's arguments."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "allocator_arg"


#: Pass ``allocator_arg, alloc`` among a task function's positional arguments to give the
#: task an allocator: ``read_env(get_allocator)`` inside then returns it (P3552R1 4.6,
#: [exec.task]). Python manages memory itself; the allocator is only plumbed.
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

    [task.promise] ``yield_value(with_error<E>)``, P3552R1 4.9, the task guide.
    The body is suspended and never resumed (its ``finally`` blocks run when the coroutine is
    closed); the error does not have to be an exception and nothing is raised. ``e`` must
    match exactly one of the task's ``error_types`` (an instance of it; an exact type match
    wins over a base class); otherwise the ``await`` raises ``TypeError`` ([task.promise] Mandates).
    ``return sx.with_error(e)`` does the same. ``.error`` is the datum, ``.type`` its type.
    Awaiting it outside a task body raises ``TypeError``.
    """

    __slots__ = ("error",)

    def __init__(self, error: T) -> None:
        if error is None:
            raise TypeError("with_error(None): None is not a valid error datum ([exec.set.error])")
        self.error = error

    @property
    def type(self) -> type:
        return type(self.error)

    def __await__(self) -> Generator[object, object, NoReturn]:
        if not _in_task_body():
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

    [task.promise] ``await_transform(change_coroutine_scheduler)`` of the draft
    ([exec.task]). P3941R1 3.4 removes it: run the part that must run elsewhere as a nested task,
    ``await sx.starts_on(sch, nested())``. It is kept for the draft's users and warns
    (``DeprecationWarning``) when created. Inside a task it installs
    ``scheduler_type(sch)`` as the task's scheduler, continues on it (a ``schedule(sch)``
    hop) and returns the previous scheduler. Switching between the trio scheduler and a
    scheduler of another kind is not supported (``TypeError``): a body runs either in a trio
    task or on structexec's loop.
    """

    __slots__ = ("scheduler",)

    def __init__(self, sch: Sched) -> None:
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

    def __await__(self) -> Generator[object, object, Any]:
        if not _in_task_body():
            raise TypeError("`await sx.change_coroutine_scheduler(sch)` works only inside a task")
        return (yield self)

    def __repr__(self) -> str:
        return f"change_coroutine_scheduler({self.scheduler!r})"


#: What ``get_allocator`` gives inside a task without an allocator.
DEFAULT_ALLOC = _DefaultAllocator()


# --------------------------------------------------------------------------- configuration


def _normalise_error_types(et: object) -> tuple[object, ...]:
    sigs = list(et) if isinstance(et, (completion_signatures, Iterable)) else [et]
    out: list[object] = []
    for s in sigs:
        if type(s) is not set_error_t:
            raise TypeError(
                f"error_types may contain only set_error_t(E) signatures ([task.class]), got {s!r}"
            )
        out.append(s.args[0])
    return tuple(out)


def _ctor_arity(cls: type, what: str) -> int:
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
            "environment) or with none ([task.state])"
        ) from None


class Config:
    """What ``@sx.task(environment=Env)`` derives from ``Env`` ([task.class], [exec.task])."""

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

    def __init__(self, environment: type | None, result: object, name: str) -> None:
        self.name = name
        self.environment = environment
        e = environment if environment is not None else object
        self.scheduler_type: type[Sched] = getattr(e, "scheduler_type", task_scheduler)
        self.stop_source_type: Callable[[], StopSource] = getattr(
            e, "stop_source_type", inplace_stop_source
        )
        self.allocator_type: type | None = getattr(e, "allocator_type", None)
        et = getattr(e, "error_types", None)
        if et is None:
            self.err_types: tuple[object, ...] = (Exception,)
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
        self.env_type: Callable[[object], object] | None = (
            getattr(e, "env_type", None) if environment is not None else None
        )
        self.env_arity = _ctor_arity(environment, "Environment") if environment is not None else 0
        self.sigs: completion_signatures | None = None
        if result is not _MISSING:
            vs = set_value_t() if result is None or result is type(None) else set_value_t(result)
            errs = [set_error_t(t) for t in self.err_types]
            self.sigs = completion_signatures(vs, *errs, set_stopped_t())

    def check_with_error(self, e: object) -> str | None:
        """Why ``with_error(e)`` does not fit ``error_types`` ([task.promise]), or ``None``."""
        matches = [t for t in self.err_types if not isinstance(t, type) or isinstance(e, t)]
        if len(matches) == 1:
            return None
        if len(matches) > 1:
            exact = [t for t in matches if t is type(e)]
            if len(exact) == 1:
                return None
            return (
                f"with_error({e!r}) matches several error_types of {self.name} "
                f"({', '.join(map(tname, matches))}); it must match exactly one"
            )
        return (
            f"with_error({e!r}): {type(e).__name__} is not one of the error_types of "
            f"{self.name} ({', '.join(map(tname, self.err_types))}) ([task.promise])"
        )


def tname(t: object) -> str:
    return getattr(t, "__name__", repr(t))


def resolve_scheduler(cfg: Config, ev: object) -> Sched:
    """``SCHED``: ``scheduler_type(get_scheduler(env))`` or ``scheduler_type()`` ([task.state])."""
    st = cfg.scheduler_type
    if cfg.inline:
        return inline_scheduler()
    sch = query_or(ev, get_scheduler, _MISSING)
    if sch is _MISSING:
        if st is task_scheduler:
            raise TypeError(
                f"the task {cfg.name} needs a scheduler, and the environment of the receiver it "
                "was connected to has no get_scheduler ([task.state], P3552R1 4.5). Await "
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
                f"get_scheduler and {tname(st)}() failed ({e}) ([task.state])"
            ) from None
    if st is task_scheduler:
        return sch if type(sch) is task_scheduler else task_scheduler(sch)
    if isinstance(sch, st):
        return sch
    if type(sch) is task_scheduler and isinstance(sch.wrapped, st):
        return sch.wrapped
    build: Callable[..., Sched] = st  # scheduler_type(sch), or scheduler_type()
    try:
        return build(sch)
    except TypeError:
        pass
    try:
        return st()
    except TypeError as e:
        raise TypeError(
            f"the task {cfg.name}: scheduler_type {tname(st)} can be built neither from the "
            f"receiver's scheduler {sch!r} nor with no arguments ({e}) ([task.state])"
        ) from None


def trio_run_of(sch: object) -> RunState | None:
    """The trio run whose scheduler ``sch`` is (possibly inside a ``task_scheduler``)."""
    if type(sch) is task_scheduler:
        sch = sch.wrapped
    if type(sch) is _TrioScheduler:
        r: RunState = sch._run
        return r
    return None


def find_allocator(args: tuple[object, ...], name: str) -> object:
    """The argument after ``allocator_arg`` in a task call, else ``_MISSING`` ([exec.task])."""
    for i, a in enumerate(args):
        if a is allocator_arg:
            if i + 1 >= len(args):
                raise TypeError(
                    f"{name}(): allocator_arg must be followed by an allocator ([task.class])"
                )
            return args[i + 1]
    return _MISSING


def result_type(fn: Callable[..., object]) -> object:
    """The return annotation of ``fn`` (for its value signature), else ``_MISSING``."""
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
