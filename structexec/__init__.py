"""structexec: C++26 ``std::execution`` for trio.

Senders, receivers, schedulers, stop tokens, counting scopes, ``task`` and the parallel scheduler,
on top of trio. ``import structexec as sx``; the documentation's index introduces the API. Every
public name is re-exported here, explicitly, from the layered private subpackages (the internals
guide "The layers"); each private module lists its public names in ``__all__``.

The docstrings name the guides by their names ("the scopes guide", "the time guide", ...): the
pages of the documentation site, whose navigation lists them, and the files of the ``docs``
directory of the source distribution and of a clone (``scopes.md``, ``time.md``, ...; the wheel
carries none of them); the site turns each mention into a link to its page.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

if _TYPE_CHECKING:
    from .backends import ThreadPoolBackend

# -- the core: protocol, tags, environments and queries, domains, stop tokens, errors
from ._core._completion_signatures import (
    completion_signatures as completion_signatures,
    dependent_sender_error as dependent_sender_error,
    get_completion_signatures as get_completion_signatures,
)
from ._core._connect import (
    connect as connect,
)
from ._core._domain import (
    apply_sender as apply_sender,
    default_domain as default_domain,
    transform_env as transform_env,
    transform_sender as transform_sender,
)
from ._core._env import (
    env as env,
    get_env as get_env,
    prop as prop,
)
from ._core._queries import (
    Query as Query,
    QueryError as QueryError,
    forward_progress_guarantee as forward_progress_guarantee,
    forwarding_query as forwarding_query,
    get_allocator as get_allocator,
    get_await_completion_adaptor as get_await_completion_adaptor,
    get_completion_scheduler as get_completion_scheduler,
    get_delegation_scheduler as get_delegation_scheduler,
    get_domain as get_domain,
    get_forward_progress_guarantee as get_forward_progress_guarantee,
    get_scheduler as get_scheduler,
    get_stop_token as get_stop_token,
)
from ._core._errors import (
    ErrorValue as ErrorValue,
    Stopped as Stopped,
    set_terminate_handler as set_terminate_handler,
)
from ._core._tags import (
    set_error_t as set_error_t,
    set_stopped_t as set_stopped_t,
    set_value_t as set_value_t,
)
from ._core._protocol import (
    Closure as Closure,
    MapClosure as MapClosure,
    OperationState as OperationState,
    Receiver as Receiver,
    Sender as Sender,
    WidenClosure as WidenClosure,
    is_scheduler as is_scheduler,
    is_sender as is_sender,
    set_error as set_error,
    set_stopped as set_stopped,
    set_value as set_value,
    start as start,
)
from ._core._values import (
    values as values,
)
from ._core._stop_token import (
    inplace_stop_source as inplace_stop_source,
    inplace_stop_token as inplace_stop_token,
    inplace_stop_callback as inplace_stop_callback,
    never_stop_token as never_stop_token,
    stop_callback_for as stop_callback_for,
    is_unstoppable as is_unstoppable,
    combined_stop_token as combined_stop_token,
    StopCallback as StopCallback,
)

# -- sender factories and adaptors, one [exec.X] section per module
from ._algorithms._just import (
    just as just,
    just_error as just_error,
    just_stopped as just_stopped,
)
from ._algorithms._let import (
    let_error as let_error,
    let_stopped as let_stopped,
    let_value as let_value,
)
from ._algorithms._read_env import (
    read_env as read_env,
)
from ._algorithms._schedule import (
    schedule as schedule,
)
from ._algorithms._timed import (
    is_timed_scheduler as is_timed_scheduler,
    now as now,
    schedule_after as schedule_after,
    schedule_at as schedule_at,
)
from ._algorithms._then import (
    then as then,
    upon_error as upon_error,
    upon_stopped as upon_stopped,
)
from ._algorithms._when_all import (
    when_all as when_all,
    when_all_with_variant as when_all_with_variant,
)
from ._algorithms._when_any import (
    stop_when as stop_when,
    when_any as when_any,
)
from ._algorithms._timeout import (
    stop_after as stop_after,
    timeout as timeout,
)
from ._algorithms._into_variant import (
    into_variant as into_variant,
)
from ._algorithms._stopped_as import (
    stopped_as_error as stopped_as_error,
    stopped_as_optional as stopped_as_optional,
)
from ._algorithms._bulk import (
    bulk as bulk,
    bulk_chunked as bulk_chunked,
    bulk_unchunked as bulk_unchunked,
    execution_policy as execution_policy,
    par as par,
    par_unseq as par_unseq,
    seq as seq,
    unseq as unseq,
)
from ._algorithms._starts_on import (
    starts_on as starts_on,
)
from ._algorithms._continues_on import (
    continues_on as continues_on,
    schedule_from as schedule_from,
)
from ._algorithms._on import (
    on as on,
)
from ._algorithms._write_env import (
    write_env as write_env,
)
from ._algorithms._unstoppable import (
    unstoppable as unstoppable,
)
from ._algorithms._affine_on import (
    affine_on as affine_on,
)
from ._algorithms._repeat import (
    repeat_effect_until as repeat_effect_until,
    repeat_n as repeat_n,
)
from ._algorithms._retry import (
    retry as retry,
)

# -- schedulers and consumers without trio: inline_scheduler, run_loop, sync_wait
from ._schedulers._inline_scheduler import (
    inline_scheduler as inline_scheduler,
)
from ._schedulers._run_loop import (
    run_loop as run_loop,
)
from ._schedulers._sync_wait import (
    sync_wait as sync_wait,
    sync_wait_with_variant as sync_wait_with_variant,
)

# -- the trio bridge: awaiting senders, the trio scheduler
from ._trio._trio_scheduler import (
    trio_scheduler as trio_scheduler,
)
from ._trio import _await  # fills the late-bound hooks of _core._hooks
from ._trio import _coroutine_sender  # fills the late-bound hooks of _core._hooks

# -- coroutines: task, its scheduler and environment, as_awaitable
from ._coro._as_awaitable import (
    as_awaitable as as_awaitable,
    sender_awaitable as sender_awaitable,
    with_awaitable_senders as with_awaitable_senders,
)
from ._coro._task_scheduler import (
    task_scheduler as task_scheduler,
)
from ._coro._task import (
    allocator_arg as allocator_arg,
    change_coroutine_scheduler as change_coroutine_scheduler,
    task as task,
    with_error as with_error,
)

# -- async scopes: counting scopes, spawn, spawn_future, associate
from ._scopes._counting_scope import (
    counting_scope as counting_scope,
    simple_counting_scope as simple_counting_scope,
)
from ._scopes._associate import (
    associate as associate,
)
from ._scopes._spawn import (
    spawn as spawn,
)
from ._scopes._spawn_future import (
    spawn_future as spawn_future,
)

# -- seeing what runs (docs/debugging.md): imported on first use (``__getattr__`` below)
if _TYPE_CHECKING:
    from ._scopes._introspect import (
        OperationInfo as OperationInfo,
        ScopeInfo as ScopeInfo,
        dump as dump,
        install_dump_on_signal as install_dump_on_signal,
        operation_tree as operation_tree,
    )
from ._scopes._site import (
    StuckWorkWarning as StuckWorkWarning,
    set_stop_grace as set_stop_grace,
)

# -- the parallel scheduler (imported on first use) and its replaceability API
if _TYPE_CHECKING:
    from ._parallel._parallel_scheduler import (
        get_parallel_scheduler as get_parallel_scheduler,
        parallel_scheduler as parallel_scheduler,
    )
from ._parallel._replacement_api import (
    system_context_replaceability as system_context_replaceability,
    query_parallel_scheduler_backend as query_parallel_scheduler_backend,
    set_parallel_scheduler_backend as set_parallel_scheduler_backend,
)


# -- sequence senders (streams of items)
from ._sequence._protocol import (
    SequenceSender as SequenceSender,
    is_sequence_sender as is_sequence_sender,
    set_next as set_next,
)
from ._sequence._iterate import (
    empty_sequence as empty_sequence,
    iterate as iterate,
)
from ._sequence._from_aiter import (
    from_aiter as from_aiter,
    from_channel as from_channel,
)
from ._sequence._as_completed import as_completed as as_completed
from ._sequence._transform_each import (
    let_each as let_each,
    then_each as then_each,
    transform_each as transform_each,
)
from ._sequence._filter_each import filter_each as filter_each
from ._sequence._take import (
    take as take,
    take_until as take_until,
)
from ._sequence._merge import (
    merge as merge,
    merge_each as merge_each,
)
from ._sequence._consume import (
    ignore_all_values as ignore_all_values,
    reduce as reduce,
    to_list as to_list,
)
from ._sequence._into_channel import into_channel as into_channel
from ._sequence._each import each as each


# -- wiring. The parallel scheduler's interface ([exec.sysctxrepl]) knows no implementation;
#    the package installs the default one here, at the top of the layers: the process-wide
#    thread pool of structexec.backends, imported by the first query that needs it (importing
#    structexec does not import the backends).
from ._parallel._replacement_api import (
    install_default_backend_factory as _install_default_backend_factory,
)


# Public names whose modules load on first use: introspection and the parallel scheduler are
# not needed by most programs and cost milliseconds at import (PEP 562).
_LAZY = {
    "OperationInfo": "._scopes._introspect",
    "ScopeInfo": "._scopes._introspect",
    "dump": "._scopes._introspect",
    "install_dump_on_signal": "._scopes._introspect",
    "operation_tree": "._scopes._introspect",
    "get_parallel_scheduler": "._parallel._parallel_scheduler",
    "parallel_scheduler": "._parallel._parallel_scheduler",
}


def __getattr__(name: str) -> object:
    """Import a lazily loaded public name (``_LAZY``) on first access and keep it."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def _default_parallel_backend() -> "ThreadPoolBackend":
    """The process-wide :class:`~structexec.backends.ThreadPoolBackend` (``os.cpu_count()``
    threads), created by the first call ([exec.sysctxrepl.query])."""
    from .backends._thread_pool import default_thread_pool

    return default_thread_pool()


_install_default_backend_factory(_default_parallel_backend)


__all__ = [
    "completion_signatures",
    "dependent_sender_error",
    "get_completion_signatures",
    "apply_sender",
    "connect",
    "default_domain",
    "transform_env",
    "transform_sender",
    "Query",
    "QueryError",
    "env",
    "forward_progress_guarantee",
    "forwarding_query",
    "get_allocator",
    "get_await_completion_adaptor",
    "get_completion_scheduler",
    "get_delegation_scheduler",
    "get_domain",
    "get_env",
    "get_forward_progress_guarantee",
    "get_scheduler",
    "get_stop_token",
    "prop",
    "ErrorValue",
    "Stopped",
    "set_terminate_handler",
    "set_error_t",
    "set_stopped_t",
    "set_value_t",
    "Closure",
    "MapClosure",
    "WidenClosure",
    "OperationState",
    "Receiver",
    "Sender",
    "is_scheduler",
    "is_sender",
    "set_error",
    "set_stopped",
    "set_value",
    "start",
    "values",
    "inplace_stop_source",
    "inplace_stop_token",
    "inplace_stop_callback",
    "never_stop_token",
    "stop_callback_for",
    "is_unstoppable",
    "combined_stop_token",
    "StopCallback",
    "just",
    "just_error",
    "just_stopped",
    "let_error",
    "let_stopped",
    "let_value",
    "read_env",
    "schedule",
    "schedule_after",
    "schedule_at",
    "now",
    "is_timed_scheduler",
    "then",
    "upon_error",
    "upon_stopped",
    "when_all",
    "when_all_with_variant",
    "when_any",
    "stop_when",
    "timeout",
    "stop_after",
    "into_variant",
    "stopped_as_error",
    "stopped_as_optional",
    "bulk",
    "bulk_chunked",
    "bulk_unchunked",
    "execution_policy",
    "par",
    "par_unseq",
    "seq",
    "unseq",
    "starts_on",
    "continues_on",
    "schedule_from",
    "on",
    "unstoppable",
    "write_env",
    "affine_on",
    "repeat_effect_until",
    "repeat_n",
    "retry",
    "inline_scheduler",
    "run_loop",
    "sync_wait",
    "sync_wait_with_variant",
    "trio_scheduler",
    "as_awaitable",
    "sender_awaitable",
    "with_awaitable_senders",
    "task_scheduler",
    "allocator_arg",
    "change_coroutine_scheduler",
    "task",
    "with_error",
    "counting_scope",
    "simple_counting_scope",
    "associate",
    "spawn",
    "spawn_future",
    "OperationInfo",
    "ScopeInfo",
    "dump",
    "install_dump_on_signal",
    "operation_tree",
    "StuckWorkWarning",
    "set_stop_grace",
    "get_parallel_scheduler",
    "parallel_scheduler",
    "system_context_replaceability",
    "query_parallel_scheduler_backend",
    "set_parallel_scheduler_backend",
    "SequenceSender",
    "is_sequence_sender",
    "set_next",
    "empty_sequence",
    "iterate",
    "from_aiter",
    "from_channel",
    "as_completed",
    "let_each",
    "then_each",
    "transform_each",
    "filter_each",
    "take",
    "take_until",
    "merge",
    "merge_each",
    "ignore_all_values",
    "reduce",
    "to_list",
    "into_channel",
    "each",
]

__version__ = "0.1.0"
