"""Errors and helpers shared by the backends (private)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._sysctxrepl import BackendError

__all__ = [
    "BackendError",
    "ClusterError",
    "UnpicklableWorkError",
    "WorkerDiedError",
    "pickle_work",
]


class WorkerDiedError(BackendError):
    """A worker process died while it ran (or was about to run) a chunk of bulk work.

    Raised as the error of the bulk operation by :class:`ProcessPoolBackend` (the pool was
    broken: ``concurrent.futures.process.BrokenProcessPool`` is the ``__cause__``). The
    backend replaces its pool, so the next operation runs normally.
    """


class ClusterError(BackendError):
    """The dask cluster went away or refused the work (:class:`DaskBackend`).

    The message says what happened; ``__cause__`` is dask's own exception when there is one.
    """


class UnpicklableWorkError(TypeError):
    """The function or a value of a bulk operation cannot be sent to another process.

    Raised as the error of the operation, before any chunk runs, by the process and dask
    backends; the message names the object that failed to pickle and why. A ``TypeError``
    because the work, not the backend, is at fault (DESIGN.md 2.3, 2.12).
    """


def _describe(obj: Any) -> str:
    name = getattr(obj, "__qualname__", None)
    if name is not None:
        mod = getattr(obj, "__module__", None)
        return f"{type(obj).__name__} {mod + '.' if mod else ''}{name}"
    r = repr(obj)
    if len(r) > 60:
        r = r[:57] + "..."
    return f"{type(obj).__name__} {r}"


def _find_inner(obj: Any, dumps: Callable[[Any], bytes]) -> str | None:
    """Name the element of a container that fails to pickle (one level deep)."""
    if isinstance(obj, dict):
        items: list[tuple[str, Any]] = [(f"[{k!r}]", v) for k, v in obj.items()]
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


def pickle_work(work: Any, dumps: Callable[[Any], bytes], who: str, how: str) -> bytes:
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
