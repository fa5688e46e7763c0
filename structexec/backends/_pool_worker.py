"""The process pool's worker side: what runs in a worker process (``_run_call``,
``_run_chunk`` and their payload caches), and how the parent pickles what it sends there
(``_work_dumps``, ``_fixed_stages``). ``_process_pool.ProcessPoolBackend`` submits these
functions; they are found by module and name in the workers."""

from __future__ import annotations

import importlib
import multiprocessing
import os
import pickle
import sys
from collections.abc import Callable
from functools import partial
from multiprocessing.context import BaseContext
from types import FunctionType
from typing import TYPE_CHECKING, Any, TypeVar

from ._common import dumps_or_cloudpickle, run_chunk_remotely, run_work_remotely

if TYPE_CHECKING:
    import ctypes

    from .._parallel._remote_work import RemoteBulkWork, RemoteCallWork

    #: Flags and pids shared with the worker processes (``RawArray("b"/"i", n)``).
    _Bytes = ctypes.Array[ctypes.c_byte]
    _Ints = ctypes.Array[ctypes.c_int]

__all__: list[str] = []

_W = TypeVar("_W")

#: Entries of the payload caches (parent: work -> bytes; worker: bytes -> work).
_CACHE_SIZE = 64

# --------------------------------------------------------------------------- worker side

_worker_flags: _Bytes | None = None
_worker_pids: _Ints | None = None
_worker_call_flags: _Bytes | None = None


def _init_worker(
    flags: _Bytes, pids: _Ints | None = None, call_flags: _Bytes | None = None
) -> None:
    global _worker_flags, _worker_pids, _worker_call_flags
    _worker_flags = flags
    _worker_pids = pids
    _worker_call_flags = call_flags


def _run_call(payload: bytes, slot: int, reuse: bool = False) -> bytes | None:
    """Runs in a worker process: ``None`` without running anything if a stop request
    cancelled call slot ``slot`` while the call waited in the pool; else say which process
    runs it and run the pickled ``RemoteCallWork`` (see :func:`run_work_remotely`). With
    ``reuse`` (the parent found that the call cannot change: see :func:`_fixed_stages`), the
    work unpickled for the same payload before is run again."""
    cancelled, pids = _worker_call_flags, _worker_pids
    if cancelled is not None and pids is not None and 0 <= slot < len(cancelled):
        if cancelled[slot]:
            return None
        pids[slot] = os.getpid()
    work = _cached_loads(payload, _call_cache) if reuse else pickle.loads(payload)
    return run_work_remotely(work, pickle.loads, dumps_or_cloudpickle, "ProcessPoolBackend")


def _cached_loads(payload: bytes, cache: dict[bytes, _W]) -> _W:
    """``pickle.loads(payload)``, or what an earlier call unpickled for the same payload (one the
    parent marked reusable: running it does not change it); the cache is emptied when full."""
    work: _W | None = cache.get(payload)
    if work is None:
        work = pickle.loads(payload)
        if len(cache) >= _CACHE_SIZE:
            cache.clear()
        cache[payload] = work
    return work


#: Remote calls this worker has unpickled, by payload, for payloads the parent marked
#: reusable (see :func:`_fixed_stages`).
_call_cache: dict[bytes, RemoteCallWork] = {}


#: Work this worker has unpickled, by payload, for payloads the parent marked reusable (no
#: values, a function sent by reference: running the work does not change it).
_work_cache: dict[bytes, RemoteBulkWork] = {}


def _run_chunk(payload: bytes, b: int, e: int, slot: int, reuse: bool = False) -> bytes | None:
    """Runs in a worker process: unpickle the work, run one chunk, return the pickled
    ``(stopped, parts)``, or ``None`` for a chunk that ran to the end with nothing to copy
    back (see :func:`run_chunk_remotely` for what happens on failure)."""
    flags = _worker_flags
    if slot >= 0 and flags is not None:
        if flags[slot]:
            return _STOPPED_BEFORE_START

        def should_stop() -> bool:
            return bool(flags[slot])

    else:
        should_stop = None  # type: ignore[assignment]
    # The work was pickled with pickle or cloudpickle; both load with the stdlib unpickler (which
    # imports cloudpickle for functions sent by value). Results and exceptions are plain data
    # that concurrent.futures sends with the stdlib pickle anyway: checked with it here.
    work = _cached_loads(payload, _work_cache) if reuse else pickle.loads(payload)
    return run_chunk_remotely(
        work, b, e, should_stop, _dumps, pickle.loads, "ProcessPoolBackend", "pickle",
        none_if_done=True,
    )


def _default_context() -> BaseContext:
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")


def _dumps(obj: object) -> bytes:
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def _work_dumps() -> Callable[[object], bytes]:
    """How the bulk work is pickled: with the stdlib pickler when it can (functions of
    importable modules and plain data: it is 3 to 8 times faster than cloudpickle), else with
    cloudpickle, which also pickles lambdas, closures and functions defined in ``__main__``
    by value (so they reach workers that cannot import them, e.g. from a REPL)."""
    try:
        cloudpickle: Any = importlib.import_module("cloudpickle")
    except ImportError as exc:  # pragma: no cover - a dependency of structexec
        raise ImportError(
            "ProcessPoolBackend needs cloudpickle to send bulk work to its worker processes; "
            "it is a dependency of structexec: pip install cloudpickle"
        ) from exc
    cp_dumps = cloudpickle.dumps
    dumps = pickle.dumps
    proto = pickle.HIGHEST_PROTOCOL

    def work_dumps(work: object) -> bytes:
        if getattr(getattr(work, "f", None), "__module__", None) != "__main__":
            try:
                return dumps(work, protocol=proto)
            except Exception:
                pass  # a lambda, a closure, a local class: cloudpickle sends it by value
        return bytes(cp_dumps(work, protocol=proto))

    return work_dumps


_STOPPED_BEFORE_START = _dumps((True, ()))


def _by_reference(f: FunctionType) -> bool:
    """``f`` is a module-level function that pickle sends by reference (not from
    ``__main__``, which cloudpickle sends by value): its module binds its name to it."""
    mod = f.__module__
    if mod == "__main__" or mod is None:
        return False
    m = sys.modules.get(mod)
    return m is not None and getattr(m, f.__qualname__, None) is f


#: Argument types of a ``functools.partial`` whose pickled bytes cannot change (immutable,
#: and pickled by value as they are: exact types only, not subclasses).
_ATOMS = frozenset((int, float, complex, str, bytes, bool, type(None)))


def _fixed_stages(stages: tuple[tuple[int, Callable[..., object]], ...]) -> bool:
    """Every function of ``stages`` pickles to bytes that cannot change, and running it
    cannot change what it is: a module-level function sent by reference, or a plain
    ``functools.partial`` of one with arguments of :data:`_ATOMS` only (no keywords, no
    attributes). Checked on every call, not remembered: a module may rebind a name, and a
    partial's ``keywords`` dict and ``__dict__`` may be filled in after its first run."""
    for _, f in stages:
        t = type(f)
        if t is partial:
            p: Any = f
            if p.keywords or p.__dict__:
                return False
            func = p.func
            if type(func) is not FunctionType or not _by_reference(func):
                return False
            for a in p.args:
                if type(a) not in _ATOMS:
                    return False
        elif t is not FunctionType or not _by_reference(f):  # type: ignore[arg-type]
            return False
    return True
