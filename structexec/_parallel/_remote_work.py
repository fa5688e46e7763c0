"""Remote bulk work: the picklable part of a bulk operation, for process and cluster backends.

An extension of [exec.sysctxrepl.recvproxy]: ``bulk_item_receiver_proxy.remote_work()`` (in
``_replacement_api``) returns a :class:`RemoteBulkWork`, which runs chunks ``[b, e)`` of the bulk
function in whatever process unpickles it, and ``merge(b, e, parts)`` writes the chunk's results
back. This module holds that callable and the rule for which values a chunk copies back.
"""

from __future__ import annotations

import array
from collections.abc import Callable, Sequence
from typing import Any

from .._algorithms._then import run_stages

__all__: list[str] = []



# Mutable sequences whose elements [b, e) a chunk may write and a remote backend copies back.
_COPY_BACK_TYPES = (list, bytearray, array.array)


def _copy_back_indices(vals: tuple[Any, ...], shape: int) -> tuple[int, ...]:
    """Which datums a remote chunk copies back: sequences with at least ``shape`` elements."""
    out = []
    for k, v in enumerate(vals):
        if isinstance(v, _COPY_BACK_TYPES) or (
            hasattr(v, "__array_interface__") and getattr(v, "ndim", 0) >= 1
        ):
            try:
                if len(v) >= shape:
                    out.append(k)
            except TypeError:
                pass
    return tuple(out)


#: ``RemoteBulkWork.mode``: per-index function (``bulk``, ``bulk_unchunked``) or chunked.
PER_INDEX, CHUNKED = 0, 1


class RemoteBulkWork:
    """The picklable part of a bulk operation: the function, the values and the mode.

    ``work(b, e, should_stop=None)`` runs the chunk ``[b, e)`` in the current process, on the
    copies of the values that unpickling made, and returns ``(stopped, parts)``: ``stopped``
    is ``True`` when ``should_stop()`` answered ``True`` before the chunk was finished (it is
    called before each index of a per-index chunk, and once before a chunked call; backends
    make it cheap), and
    ``parts`` holds, for each value that is a list, ``bytearray``, ``array.array`` or numpy
    array with at least ``shape`` elements, its elements ``[b, e)`` as the chunk left them.
    ``bulk_item_receiver_proxy.merge(b, e, parts)`` writes them into the parent's objects.
    When the policy is not parallel the backend was given a shape of 1 and ``(0, 1)`` stands
    for the whole range, run sequentially ([exec.bulk]).
    """

    __slots__ = ("copy_back", "f", "mode", "parallel", "shape", "vals")

    def __init__(
        self,
        mode: int,
        f: Callable[..., object],
        vals: tuple[Any, ...],
        shape: int,
        parallel: bool,
        copy_back: tuple[int, ...],
    ) -> None:
        self.mode = mode
        self.f = f
        self.vals = vals
        self.shape = shape
        self.parallel = parallel
        self.copy_back = copy_back

    def __reduce__(self) -> tuple[type[RemoteBulkWork], tuple[object, ...]]:
        # The class and its constructor arguments: pickled and unpickled about 3 times faster
        # than the default protocol (``copyreg.__reduce_ex__`` and a state to set).
        return (
            RemoteBulkWork,
            (self.mode, self.f, self.vals, self.shape, self.parallel, self.copy_back),
        )

    def __call__(
        self, b: int, e: int, should_stop: Callable[[], bool] | None = None
    ) -> tuple[bool, tuple[Sequence[object], ...]]:
        if not self.parallel:
            b, e = 0, self.shape
        f = self.f
        vals = self.vals
        stopped = False
        if self.mode == CHUNKED:
            if should_stop is not None and should_stop():
                return True, ()
            f(b, e, *vals)
        else:
            if should_stop is None:
                for i in range(b, e):
                    f(i, *vals)
            else:
                for i in range(b, e):
                    if should_stop():
                        stopped = True
                        e = i
                        break
                    f(i, *vals)
        cb = self.copy_back
        return stopped, tuple(vals[k][b:e] for k in cb) if cb else ()

    def __repr__(self) -> str:
        kind = "chunked" if self.mode == CHUNKED else "per-index"
        return f"<RemoteBulkWork {kind} {getattr(self.f, '__qualname__', self.f)!r}>"


#: Kinds of completion a chain of ``then``/``upon_*`` stages receives and produces.
VALUE, ERROR, STOPPED = 0, 1, 2


class RemoteCallWork:
    """The picklable part of a remote ``then``/``upon_error``/``upon_stopped`` call.

    ``stages`` is the chain of ``(kind, function)`` pairs that run one after the other
    (``kind`` 0: ``then``, 1: ``upon_error``, 2: ``upon_stopped``), starting with one that
    matches the incoming completion ``kind`` with its datums ``data`` (the values, or the
    error). ``work()`` runs them in the current process exactly as the fused local chain
    does ([exec.then]): a stage that does not match the current completion passes it on, an
    ``Exception`` raised by a function becomes the error the next stages see, a returned
    coroutine object is a ``TypeError``. It returns the values of the final value completion
    as a tuple, and raises the final error. The values between the stages never leave the
    process that runs it.
    """

    __slots__ = ("data", "kind", "stages")

    def __init__(
        self, stages: tuple[tuple[int, Callable[..., object]], ...], kind: int, data: object
    ) -> None:
        self.stages = stages
        self.kind = kind
        self.data = data

    def __reduce__(self) -> tuple[type[RemoteCallWork], tuple[object, ...]]:
        return (RemoteCallWork, (self.stages, self.kind, self.data))

    def __call__(self) -> tuple[object, ...]:
        kind, data = run_stages(self.stages, self.kind, self.data)
        if kind == ERROR:
            raise data
        return tuple(data)

    @property
    def functions(self) -> tuple[Callable[..., object], ...]:
        """The functions of the stages, in order."""
        return tuple(f for _, f in self.stages)

    def __repr__(self) -> str:
        names = ", ".join(getattr(f, "__qualname__", repr(f)) for _, f in self.stages)
        return f"<RemoteCallWork {names}>"
