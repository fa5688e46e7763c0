"""The public API of ``import structexec as sx`` is exactly the pinned list below.

The package facade re-exports each public name explicitly from the layered private modules
(docs/internals.md "The layers"). A refactor that moves code between modules must not add,
drop or rename a public name: this test pins the set. Adding a public name is a deliberate act:
add it here too.
"""

from __future__ import annotations

import importlib

import pytest

import structexec as sx

LAYERS = {
    "_core",
    "_algorithms",
    "_schedulers",
    "_trio",
    "_parallel",
    "_coro",
    "_scopes",
    "_sequence",
}

PUBLIC = frozenset(
    (
        "Closure",
        "MapClosure",
        "WidenClosure",
        "ErrorValue",
        "OperationInfo",
        "OperationState",
        "Query",
        "QueryError",
        "Receiver",
        "ScopeInfo",
        "Sender",
        "StopCallback",
        "Stopped",
        "StuckWorkWarning",
        "affine_on",
        "allocator_arg",
        "apply_sender",
        "as_awaitable",
        "associate",
        "bulk",
        "bulk_chunked",
        "bulk_unchunked",
        "change_coroutine_scheduler",
        "combined_stop_token",
        "completion_signatures",
        "connect",
        "continues_on",
        "counting_scope",
        "default_domain",
        "dependent_sender_error",
        "env",
        "execution_policy",
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
        "get_parallel_scheduler",
        "get_scheduler",
        "get_stop_token",
        "dump",
        "inline_scheduler",
        "inplace_stop_callback",
        "inplace_stop_source",
        "inplace_stop_token",
        "install_dump_on_signal",
        "into_variant",
        "is_scheduler",
        "is_sender",
        "is_timed_scheduler",
        "is_unstoppable",
        "just",
        "just_error",
        "just_stopped",
        "let_error",
        "let_stopped",
        "let_value",
        "never_stop_token",
        "now",
        "on",
        "operation_tree",
        "par",
        "par_unseq",
        "parallel_scheduler",
        "prop",
        "query_parallel_scheduler_backend",
        "read_env",
        "repeat_effect_until",
        "repeat_n",
        "retry",
        "run_loop",
        "schedule",
        "schedule_after",
        "schedule_at",
        "schedule_from",
        "sender_awaitable",
        "seq",
        "set_error",
        "set_error_t",
        "set_parallel_scheduler_backend",
        "set_stopped",
        "set_stop_grace",
        "set_stopped_t",
        "set_terminate_handler",
        "set_value",
        "set_value_t",
        "simple_counting_scope",
        "spawn",
        "spawn_future",
        "start",
        "starts_on",
        "stop_after",
        "stop_callback_for",
        "stop_when",
        "stopped_as_error",
        "stopped_as_optional",
        "sync_wait",
        "sync_wait_with_variant",
        "system_context_replaceability",
        "task",
        "task_scheduler",
        "then",
        "timeout",
        "transform_env",
        "transform_sender",
        "trio_scheduler",
        "unseq",
        "unstoppable",
        "upon_error",
        "upon_stopped",
        "values",
        "when_all",
        "when_all_with_variant",
        "when_any",
        "with_awaitable_senders",
        "with_error",
        "write_env",
        # sequence senders (streams of items)
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
    )
)


def test_all_is_exactly_the_pinned_public_api() -> None:
    assert len(sx.__all__) == len(set(sx.__all__)), "a name is exported twice"
    assert set(sx.__all__) == PUBLIC, (
        f"added: {sorted(set(sx.__all__) - PUBLIC)}, dropped: {sorted(PUBLIC - set(sx.__all__))}"
    )


def test_no_public_name_outside_all() -> None:
    # Helpers of the facade are private (a leading underscore); subpackages are reached as
    # structexec.backends / structexec.testing.
    # (pytest's assertion rewriting of the package adds names that are not identifiers.)
    public = {n for n in dir(sx) if n.isidentifier() and not n.startswith("_")}
    public -= {"backends", "testing"}
    assert public == set(sx.__all__)


def test_star_import_gives_the_public_api() -> None:
    namespace: dict[str, object] = {}
    exec("from structexec import *", namespace)
    assert set(namespace) - {"__builtins__"} == PUBLIC


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_each_name_comes_from_its_layered_module(name: str) -> None:
    obj = getattr(sx, name)
    module_name = getattr(obj, "__module__", None) or type(obj).__module__
    assert module_name.startswith("structexec._"), (name, module_name)
    layer = module_name.split(".")[1]
    assert layer in LAYERS
    # A module of that layer exports it (its own __all__): the facade is a pure re-export.
    modules = [importlib.import_module(f"structexec.{layer}.{sub}") for sub in _submodules(layer)]
    assert any(name in getattr(m, "__all__", ()) for m in modules), (
        f"{name} is in no __all__ of structexec.{layer}"
    )


def _submodules(layer: str) -> list[str]:
    import pkgutil

    package = importlib.import_module(f"structexec.{layer}")
    return [info.name for info in pkgutil.iter_modules(package.__path__)]
