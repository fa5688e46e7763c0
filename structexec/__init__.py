"""structexec: C++26 ``std::execution`` for trio.

Senders, receivers, schedulers, stop tokens, counting scopes, ``task`` and the parallel scheduler,
on top of trio. ``import structexec as sx``; docs/index.md introduces the API. Every public name is
re-exported here; each private module lists its public names in ``__all__``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .backends import ThreadPoolBackend

__all__: list[str] = []

# -- core protocol, environments, stop tokens, factories, basic adaptors, contexts
from . import _completion_signatures
from ._completion_signatures import *

__all__ += _completion_signatures.__all__
from . import _domain
from ._domain import *

__all__ += _domain.__all__
from . import _env
from ._env import *

__all__ += _env.__all__
from . import _errors
from ._errors import *

__all__ += _errors.__all__
from . import _inline_scheduler
from ._inline_scheduler import *

__all__ += _inline_scheduler.__all__
from . import _just
from ._just import *

__all__ += _just.__all__
from . import _let
from ._let import *

__all__ += _let.__all__
from . import _tags
from ._tags import *

__all__ += _tags.__all__
from . import _protocol
from ._protocol import *

__all__ += _protocol.__all__
from . import _read_env
from ._read_env import *

__all__ += _read_env.__all__
from . import _run_loop
from ._run_loop import *

__all__ += _run_loop.__all__
from . import _stop_token
from ._stop_token import *

__all__ += _stop_token.__all__
from . import _sync_wait
from ._sync_wait import *

__all__ += _sync_wait.__all__
from . import _then
from ._then import *

__all__ += _then.__all__

# -- more sender adaptors
from . import _when_all
from ._when_all import *

__all__ += _when_all.__all__
from . import _into_variant
from ._into_variant import *

__all__ += _into_variant.__all__
from . import _stopped_as
from ._stopped_as import *

__all__ += _stopped_as.__all__
from . import _bulk
from ._bulk import *

__all__ += _bulk.__all__
from . import _starts_on
from ._starts_on import *

__all__ += _starts_on.__all__
from . import _continues_on
from ._continues_on import *

__all__ += _continues_on.__all__
from . import _on
from ._on import *

__all__ += _on.__all__
from . import _write_env
from ._write_env import *

__all__ += _write_env.__all__

# -- the trio bridge
from . import _trio_scheduler
from ._trio_scheduler import *

__all__ += _trio_scheduler.__all__
from . import _await
from ._await import *

__all__ += _await.__all__
from . import _coroutine_sender
from ._coroutine_sender import *

__all__ += _coroutine_sender.__all__

# -- counting scopes
from . import _counting_scope
from ._counting_scope import *

__all__ += _counting_scope.__all__
from . import _associate
from ._associate import *

__all__ += _associate.__all__
from . import _spawn
from ._spawn import *

__all__ += _spawn.__all__
from . import _spawn_future
from ._spawn_future import *

__all__ += _spawn_future.__all__

# -- coroutines and task
from . import _as_awaitable
from ._as_awaitable import *

__all__ += _as_awaitable.__all__
from . import _task_scheduler
from ._task_scheduler import *

__all__ += _task_scheduler.__all__
from . import _affine_on
from ._affine_on import *

__all__ += _affine_on.__all__
from . import _task
from ._task import *

__all__ += _task.__all__

# -- parallel scheduler
from . import _parallel_scheduler
from ._parallel_scheduler import *

__all__ += _parallel_scheduler.__all__
from . import _sysctxrepl
from ._sysctxrepl import *

__all__ += _sysctxrepl.__all__
# -- wiring. The parallel scheduler's interface ([exec.sysctxrepl]) knows no implementation;
#    the package installs the default one here, at the top of the layers: the process-wide
#    thread pool of structexec.backends, imported by the first query that needs it (importing
#    structexec does not import the backends).
def _default_parallel_backend() -> ThreadPoolBackend:
    """The process-wide :class:`~structexec.backends.ThreadPoolBackend` (``os.cpu_count()``
    threads), created by the first call ([exec.sysctxrepl.query])."""
    from .backends._thread_pool import default_thread_pool

    return default_thread_pool()


_sysctxrepl.install_default_backend_factory(_default_parallel_backend)


__version__ = "0.1.0"
