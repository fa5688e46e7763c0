"""structexec: C++26 ``std::execution`` (senders, receivers, schedulers, scopes, ``task``) for trio.

See DESIGN.md for the API; every public name is re-exported here.
"""

from __future__ import annotations

from ._completion_signatures import (
    completion_signatures,
    dependent_sender_error,
    get_completion_signatures,
)
from ._domain import apply_sender, connect, default_domain, transform_env, transform_sender
from ._env import (
    Query,
    QueryError,
    env,
    forward_progress_guarantee,
    forwarding_query,
    get_allocator,
    get_await_completion_adaptor,
    get_completion_scheduler,
    get_delegation_scheduler,
    get_domain,
    get_env,
    get_forward_progress_guarantee,
    get_scheduler,
    get_stop_token,
    prop,
)
from ._errors import ErrorValue, Stopped, set_terminate_handler
from ._inline_scheduler import inline_scheduler
from ._just import just, just_error, just_stopped
from ._let import let_error, let_stopped, let_value
from ._protocol import (
    Closure,
    OperationState,
    Receiver,
    Sender,
    is_scheduler,
    is_sender,
    set_error,
    set_error_t,
    set_stopped,
    set_stopped_t,
    set_value,
    set_value_t,
    start,
    values,
)
from ._read_env import read_env, schedule
from ._run_loop import run_loop
from ._stop_token import (
    inplace_stop_callback,
    inplace_stop_source,
    inplace_stop_token,
    is_unstoppable,
    never_stop_token,
    stop_callback_for,
)
from ._sync_wait import sync_wait, sync_wait_with_variant
from ._then import then, upon_error, upon_stopped

# -- more modules register here (one import line each, keep alphabetical by module) --

__version__ = "0.1.0"

__all__ = [
    "Closure",
    "ErrorValue",
    "OperationState",
    "Query",
    "QueryError",
    "Receiver",
    "Sender",
    "Stopped",
    "apply_sender",
    "completion_signatures",
    "connect",
    "default_domain",
    "dependent_sender_error",
    "env",
    "forward_progress_guarantee",
    "forwarding_query",
    "get_allocator",
    "get_await_completion_adaptor",
    "get_completion_scheduler",
    "get_completion_signatures",
    "get_delegation_scheduler",
    "get_domain",
    "get_env",
    "get_forward_progress_guarantee",
    "get_scheduler",
    "get_stop_token",
    "inline_scheduler",
    "inplace_stop_callback",
    "inplace_stop_source",
    "inplace_stop_token",
    "is_scheduler",
    "is_sender",
    "is_unstoppable",
    "just",
    "just_error",
    "just_stopped",
    "let_error",
    "let_stopped",
    "let_value",
    "never_stop_token",
    "prop",
    "read_env",
    "run_loop",
    "schedule",
    "set_error",
    "set_error_t",
    "set_stopped",
    "set_stopped_t",
    "set_terminate_handler",
    "set_value",
    "set_value_t",
    "start",
    "stop_callback_for",
    "sync_wait",
    "sync_wait_with_variant",
    "then",
    "upon_error",
    "upon_stopped",
    "values",
]
