"""Errors and helpers shared by the backends (private)."""

from __future__ import annotations

import importlib
import pickle
import traceback
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .._core._describe import describe_callable
from .._parallel._backend_error import BackendError

if TYPE_CHECKING:
    from .._parallel._remote_work import RemoteBulkWork, RemoteCallWork

#: How the backends pickle: ``pickle.dumps``-like and ``pickle.loads``-like functions.
Dumps = Callable[[object], bytes]
Loads = Callable[[bytes], object]

__all__ = [
    "BackendError",
    "ClusterError",
    "UnpicklableWorkError",
    "WorkerDiedError",
    "call_payload_dumps",
    "dumps_or_cloudpickle",
    "pickle_call",
    "pickle_work",
    "run_call_remotely",
    "run_chunk_remotely",
    "run_work_remotely",
]


class WorkerDiedError(BackendError):
    """A worker process died while it ran (or was about to run) a chunk of bulk work or a
    remote ``then``/``upon_*`` call.

    Raised as the error of the operation by :class:`ProcessPoolBackend` (the pool was
    broken: ``concurrent.futures.process.BrokenProcessPool`` is the ``__cause__``; every call
    in the broken pool fails this way). The backend replaces its pool, so the next operation
    runs normally. :class:`DaskBackend` raises it once dask gives up on work whose workers
    kept dying (``__cause__``: dask's ``KilledWorker``) or lost it with its worker.
    """


class ClusterError(BackendError):
    """The dask cluster went away or refused the work (:class:`DaskBackend`).

    The message says what happened; ``__cause__`` is dask's own exception when there is one.
    """


class UnpicklableWorkError(TypeError):
    """The function, a value or a result of a bulk operation or of a remote ``then``/
    ``upon_*`` call cannot cross to or from another process.

    Raised as the error of the operation by the process and dask backends: before any chunk
    runs (before a call is sent) when the function or a value the predecessor sent cannot be
    pickled (with pickle, then cloudpickle), or when a chunk's results (the elements it left
    in a list, ``bytearray``, ``array.array`` or numpy value) or a call's returned values
    cannot be sent back. The message names the function or value that failed to pickle and,
    where it can tell, the object inside it (an argument of a ``functools.partial``, a
    variable a closure uses, an element of a container), and why. A ``TypeError`` because the
    work, not the backend, is at fault (the parallel guide "Running any function remotely").
    """


def _describe(obj: object) -> str:
    name = getattr(obj, "__qualname__", None)
    if name is not None:
        mod = getattr(obj, "__module__", None)
        return f"{type(obj).__name__} {mod + '.' if mod else ''}{name}"
    r = repr(obj)
    if len(r) > 60:
        r = r[:57] + "..."
    return f"{type(obj).__name__} {r}"


def _find_inner(obj: object, dumps: Dumps) -> str | None:
    """Name the element of a container that fails to pickle (one level deep)."""
    if isinstance(obj, dict):
        items: list[tuple[str, object]] = [(f"[{k!r}]", v) for k, v in obj.items()]
    elif isinstance(obj, (list, tuple, set, frozenset)):
        items = [(f"[{i}]", v) for i, v in enumerate(obj)]
    else:
        return None
    for where, v in items:
        try:
            dumps(v)
        except Exception:
            return f"{where} = {_describe(v)}"
    return None


def pickle_work(work: RemoteBulkWork, dumps: Dumps, who: str, how: str) -> bytes:
    """``dumps(work)``, or raise :class:`UnpicklableWorkError` naming the culprit.

    ``work`` is a ``RemoteBulkWork``; ``who`` names the backend and ``how`` the pickler (for
    the message).
    """
    try:
        return dumps(work)
    except Exception as exc:
        first = exc
    culprit = "the bulk work"
    cause: BaseException = first
    for label, obj in [("the bulk function", work.f)] + [
        (f"value #{k} sent by the predecessor", v) for k, v in enumerate(work.vals)
    ]:
        try:
            dumps(obj)
        except Exception as exc:
            culprit = f"{label} ({_describe(obj)})"
            cause = exc
            inner = _find_inner(obj, dumps)
            if inner is not None:
                culprit += f", which contains {inner}"
            break
    err = UnpicklableWorkError(
        f"{who} cannot send {culprit} to its worker processes: it cannot be pickled with {how} "
        f"({type(cause).__name__}: {cause}). Work for a process or cluster backend must be "
        "picklable: use functions defined at module level and plain data; no chunk was run."
    )
    err.__cause__ = cause
    raise err


# --------------------------------------------------------------------------- worker side


def _where(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    f = frames[-1]
    return f" (at {f.filename}:{f.lineno}, in {f.name})"


def _round_trips(obj: object, dumps: Dumps, loads: Loads) -> str:
    """``""`` if ``obj`` survives ``loads(dumps(obj))``, else why not."""
    try:
        loads(dumps(obj))
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return ""


def _unpicklable_result(
    work: RemoteBulkWork,
    result: tuple[bool, tuple[Sequence[object], ...]],
    b: int,
    e: int,
    dumps: Dumps,
    who: str,
    how: str,
    cause: Exception,
) -> UnpicklableWorkError:
    culprit = "the chunk's results"
    why = f"{type(cause).__name__}: {cause}"
    _, parts = result
    for j, part in enumerate(parts):
        try:
            dumps(part)
            continue
        except Exception as exc:
            k = work.copy_back[j] if j < len(work.copy_back) else j
            culprit = f"value #{k} sent by the predecessor ({type(part).__name__})"
            why = f"{type(exc).__name__}: {exc}"
        for idx, x in enumerate(part):
            try:
                dumps(x)
            except Exception as exc:
                culprit = (
                    f"element [{b + idx}] of value #{k} sent by the predecessor, "
                    f"{_describe(x)},"
                )
                why = f"{type(exc).__name__}: {exc}"
                break
        break
    return UnpicklableWorkError(
        f"{who} cannot send the results of chunk [{b}, {e}) of a bulk operation back from "
        f"its worker: {culprit} cannot be pickled with {how} ({why}). After the bulk function "
        "ran, the elements [b, e) of each list, bytearray, array.array or numpy value are "
        "copied back to this process, so they must be picklable: store plain data in them "
        "([exec.sysctxrepl.psb])."
    )


def run_chunk_remotely(
    work: RemoteBulkWork,
    b: int,
    e: int,
    should_stop: Callable[[], bool] | None,
    dumps: Dumps,
    loads: Loads,
    who: str,
    how: str,
    *,
    none_if_done: bool = False,
) -> bytes | None:
    """In a worker process: run chunk ``[b, e)`` of ``work`` and return its pickled result.

    With ``none_if_done``, a chunk that ran to the end and has nothing to copy back (the
    result ``(False, ())``) returns ``None``: nothing to pickle here or unpickle there.

    Whatever happens, what comes back to the parent is either the pickled ``(stopped,
    parts)`` or an exception that pickles, so that the parent always learns what went wrong
    (a failure to send it back would otherwise be misreported, as a dead worker or a lost
    cluster, or lose the user's error):

    * an ``Exception`` of the bulk function is raised as it is if it survives pickling, else
      as a :class:`BackendError` naming it;
    * a ``BaseException`` (``KeyboardInterrupt``, ``SystemExit``, ...) is raised as a
      :class:`BackendError`: it belongs to the worker, not to this program, and must not
      kill the worker (dask) or become an error datum that exits or interrupts the parent;
    * results that cannot be pickled raise :class:`UnpicklableWorkError` naming the element.
    """
    try:
        result = work(b, e, should_stop)
    except Exception as exc:
        broken = _round_trips(exc, dumps, loads)
        if not broken:
            raise
        raise BackendError(
            f"the bulk function raised {type(exc).__name__}: {exc}{_where(exc)} in a worker "
            f"of {who}, and that exception cannot be sent back to this process ({broken}). "
            "Exceptions raised by bulk functions on a process or cluster backend must pickle: "
            "an exception is re-created from its class and its args, so pass every "
            "constructor argument on to Exception.__init__ ([exec.sysctxrepl.psb])."
        ) from None
    except BaseException as exc:
        raise BackendError(
            f"the bulk function raised {type(exc).__name__}({exc}){_where(exc)} in a worker "
            f"of {who}. A {type(exc).__name__} raised in a worker does not interrupt or exit "
            "this program: the bulk operation fails with this error instead. To fail a bulk "
            "operation raise an Exception; to end it early, request stop on it "
            "([exec.sysctxrepl.psb])."
        ) from None
    if none_if_done and not result[1] and not result[0]:
        return None
    try:
        return dumps(result)
    except Exception as exc:
        raise _unpicklable_result(work, result, b, e, dumps, who, how, exc) from None


# --------------------------------------------------------------------------- remote calls


def _cloudpickle_dumps(obj: object) -> bytes:
    cloudpickle: Any = importlib.import_module("cloudpickle")
    return bytes(cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


def dumps_or_cloudpickle(obj: object) -> bytes:
    """Pickle with pickle, else with cloudpickle (a lambda, a closure, a local class): how a
    worker sends a remote call's result back."""
    try:
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return _cloudpickle_dumps(obj)


def call_payload_dumps(obj: object) -> bytes:
    """How a remote call is pickled: with pickle when it can (functions of importable
    modules and plain data travel by reference, 3 to 8 times faster), else with cloudpickle;
    and with cloudpickle also when pickle referred to something of ``__main__`` (the
    functions and classes of a script, a REPL, ``python -c``), which a worker cannot import:
    cloudpickle sends those by value."""
    try:
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return _cloudpickle_dumps(obj)
    if b"__main__" in data:
        return _cloudpickle_dumps(obj)
    return data


def pickle_call(work: RemoteCallWork, dumps: Dumps, who: str, how: str) -> bytes:
    """``dumps(work)`` for a ``RemoteCallWork``, or raise :class:`UnpicklableWorkError`
    naming the function or the value that cannot be pickled (and, for a container or a
    ``functools.partial``, the object inside it), before anything is sent."""
    try:
        return dumps(work)
    except Exception as exc:
        first = exc
    culprit = "the call"
    cause: BaseException = first
    names = ("then", "upon_error", "upon_stopped")
    cands: list[tuple[str, object]] = [
        (f"the {names[k]} function", f) for k, f in work.stages
    ]
    if work.kind == 0 and isinstance(work.data, tuple):  # (always a tuple of values)
        cands += [(f"value #{k} sent by the predecessor", v) for k, v in enumerate(work.data)]
    elif work.kind == 1:
        cands.append(("the error sent by the predecessor", work.data))
    for label, obj in cands:
        try:
            dumps(obj)
        except Exception as exc:
            what = describe_callable(obj) if callable(obj) else _describe(obj)
            culprit = f"{label} ({what})"
            cause = exc
            inner = _find_inner_call(obj, dumps)
            if inner is not None:
                culprit += f", which contains {inner}"
            break
    err = UnpicklableWorkError(
        f"{who} cannot send {culprit} to a worker: it cannot be pickled with {how} "
        f"({type(cause).__name__}: {cause}). Functions and values that run on a process or "
        "cluster backend must be picklable; nothing was sent."
    )
    err.__cause__ = cause
    raise err


def _find_inner_call(obj: Any, dumps: Dumps) -> str | None:  # duck-typed: read as it is
    """The object inside ``obj`` that fails to pickle: an argument of a ``partial``, a cell
    of a closure, an element of a container (one level deep)."""
    func = getattr(obj, "func", None)
    if func is not None and hasattr(obj, "args") and hasattr(obj, "keywords"):
        items: list[tuple[str, object]] = [("its function", func)]
        items += [(f"argument #{i}", a) for i, a in enumerate(obj.args)]
        items += [(f"argument {k}=", v) for k, v in (obj.keywords or {}).items()]
    elif getattr(obj, "__closure__", None):
        names = obj.__code__.co_freevars
        items = []
        for name, cell in zip(names, obj.__closure__):
            try:
                items.append((f"the variable {name!r} it uses", cell.cell_contents))
            except ValueError:
                continue
    else:
        return _find_inner(obj, dumps)
    for where, v in items:
        try:
            dumps(v)
        except Exception:
            return f"{where}: {_describe(v)}"
    return None


def run_call_remotely(
    payload: bytes, loads: Callable[[bytes], RemoteCallWork], dumps: Dumps, who: str
) -> bytes:
    """In a worker: run a pickled ``RemoteCallWork`` and return its pickled tuple of values
    (see :func:`run_work_remotely`)."""
    return run_work_remotely(loads(payload), loads, dumps, who)


def run_work_remotely(work: RemoteCallWork, loads: Loads, dumps: Dumps, who: str) -> bytes:
    """In a worker: run an unpickled ``RemoteCallWork`` and return its pickled tuple of values.

    As for bulk chunks, what comes back always pickles: the final ``Exception`` is raised as
    it is if it survives pickling, else as a :class:`BackendError` naming it; a
    ``BaseException`` becomes a :class:`BackendError`; values that cannot be pickled raise
    :class:`UnpicklableWorkError` naming the value (and the element inside it).
    """
    try:
        result = work()
    except Exception as exc:
        broken = _round_trips(exc, dumps, loads)
        if not broken:
            raise
        raise BackendError(
            f"{work!r} raised {type(exc).__name__}: {exc}{_where(exc)} in a worker of {who}, "
            f"and that exception cannot be sent back to this process ({broken}). Exceptions "
            "raised on a process or cluster backend must pickle: an exception is re-created "
            "from its class and its args, so pass every constructor argument on to "
            "Exception.__init__."
        ) from None
    except BaseException as exc:
        raise BackendError(
            f"{work!r} raised {type(exc).__name__}({exc}){_where(exc)} in a worker of {who}. "
            f"A {type(exc).__name__} raised in a worker does not interrupt or exit this "
            "program: the operation fails with this error instead; raise an Exception to "
            "fail it."
        ) from None
    try:
        return dumps(result)
    except Exception as exc:
        culprit = "the result"
        why = f"{type(exc).__name__}: {exc}"
        for k, v in enumerate(result):
            try:
                dumps(v)
            except Exception as exc2:
                culprit = f"value #{k} of the result ({_describe(v)})"
                why = f"{type(exc2).__name__}: {exc2}"
                inner = _find_inner(v, dumps)
                if inner is not None:
                    culprit += f", which contains {inner}"
                break
        raise UnpicklableWorkError(
            f"{who} cannot send back what {work!r} returned in its worker: {culprit} "
            f"cannot be pickled ({why}). The values a remote then returns must be picklable."
        ) from None
