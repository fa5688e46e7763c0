"""``BackendError``: the error of an operation whose parallel scheduler backend failed.

[exec.par.scheduler], [exec.sysctxrepl.psb], [exec.bulk]. Both sides of the backend interface
raise it: the frontend (``_parallel_scheduler.py``) when a backend's ``schedule*`` raises, the
backends (``structexec.backends``) when they lose a worker or a cluster or are shut down. It lives
in this module, which imports no other structexec module, so neither side imports the other for
it. Public as ``structexec.backends.BackendError``.
"""

from __future__ import annotations

__all__ = ["BackendError"]


class BackendError(RuntimeError):
    """A parallel scheduler backend failed (it raised, lost a worker, or lost its cluster).

    The operation that hit the failure completes with ``set_error(BackendError(...))`` whose
    message says what happened and whose ``__cause__`` is the underlying exception, if any.
    Derives from ``RuntimeError``, as [exec.bulk] allows for errors of the implementation
    ([exec.bulk]). Re-exported as ``structexec.backends.BackendError``.
    """
