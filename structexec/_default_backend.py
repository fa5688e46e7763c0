"""The default parallel scheduler backend: the process-wide thread pool ([exec.sysctxrepl.query]).

[exec.sysctxrepl.query], [exec.par.scheduler]: ``query_parallel_scheduler_backend()`` returns the
default backend until another factory is installed with ``set_parallel_scheduler_backend``. The
interface module (``_sysctxrepl.py``) does not know the backends that implement it; importing this
module (the package does) installs the default backend's factory there. The backends package is
imported by the first query that needs the default, not when structexec is imported.
"""

from __future__ import annotations

from typing import Any

from ._sysctxrepl import install_default_backend_factory

__all__: list[str] = []


def default_backend() -> Any:
    """The process-wide :class:`~structexec.backends.ThreadPoolBackend` (``os.cpu_count()``
    threads), created by the first call ([exec.sysctxrepl.query])."""
    from .backends._thread_pool import default_thread_pool

    return default_thread_pool()


install_default_backend_factory(default_backend)
