"""Parallel scheduler backends: threads, processes, and a dask.distributed cluster.

[exec.par.scheduler], the parallel guide; [exec.sysctxrepl].

* :class:`ThreadPoolBackend`: the default; one process-wide pool of ``os.cpu_count()``
  threads.
* :class:`ProcessPoolBackend`: bulk work and ``then``/``upon_*`` functions in worker
  processes (functions and values must pickle).
* :class:`DaskBackend`: bulk work and ``then``/``upon_*`` functions on a dask.distributed
  cluster (``pip install structexec[dask]``); importing this package does not import dask.

Install one with ``sx.set_parallel_scheduler_backend(lambda: backend)``; see
``docs/parallel.md``. Failures of a backend complete the operation with
:class:`BackendError` (or a subclass: :class:`WorkerDiedError`, :class:`ClusterError`); work
that cannot be sent to another process fails with :class:`UnpicklableWorkError`.
"""

from __future__ import annotations

from ._common import BackendError, ClusterError, UnpicklableWorkError, WorkerDiedError
from ._dask import DaskBackend
from ._process_pool import ProcessPoolBackend
from ._thread_pool import ThreadPoolBackend

__all__ = [
    "ThreadPoolBackend",
    "ProcessPoolBackend",
    "DaskBackend",
    "BackendError",
    "ClusterError",
    "UnpicklableWorkError",
    "WorkerDiedError",
]
