"""Queries and environments: [exec.queries] ([exec.queryable], [exec.env], ...)."""

from __future__ import annotations

from typing import Any

import pytest

import structexec as sx
from structexec.testing import RecordingReceiver


class MyQuery(sx.Query):
    pass


class MyForwardingQuery(sx.Query):
    forwarding = True


q = MyQuery()
fq = MyForwardingQuery()


def test_prop_returns_the_same_object() -> None:
    v = object()
    p = sx.prop(q, v)
    assert p.query(q) is v
    assert q(p) is v
    with pytest.raises(sx.QueryError):
        p.query(fq)
    with pytest.raises(AttributeError):
        p.x = 1  # type: ignore[attr-defined]


def test_env_first_property_wins() -> None:
    e = sx.env(sx.prop(q, 1), sx.prop(q, 2))
    assert e.query(q) == 1
    with pytest.raises(sx.QueryError):
        sx.env().query(q)
    assert issubclass(sx.QueryError, LookupError)


def test_env_of_allocator_and_scheduler_answers_both() -> None:
    sch = sx.inline_scheduler()
    alloc = object()
    e = sx.env(sx.prop(sx.get_allocator, alloc), sx.prop(sx.get_scheduler, sch))
    assert sx.get_allocator(e) is alloc
    assert sx.get_scheduler(e) == sch


def test_supported_none_differs_from_unsupported() -> None:
    e = sx.prop(q, None)
    assert q(e) is None
    with pytest.raises(sx.QueryError):
        fq(e)


def test_get_env_default_is_an_empty_env() -> None:
    assert sx.get_env(object()) is sx.get_env(42)
    with pytest.raises(sx.QueryError):
        sx.get_env(object()).query(q)


def test_non_forwarding_query_does_not_cross_adaptors() -> None:
    outer = sx.env(sx.prop(q, 1), sx.prop(fq, 2))

    # read_env's receiver is the outer one; then's child sees only forwarding queries.
    r = RecordingReceiver(outer)
    r.run(sx.read_env(q))
    assert r.value == (1,)
    with pytest.raises(TypeError, match="does not support"):
        sx.connect(sx.read_env(q) | sx.then(lambda x: x), RecordingReceiver(outer))
    r2 = RecordingReceiver(outer)
    r2.run(sx.read_env(fq) | sx.then(lambda x: x))
    assert r2.value == (2,)


def test_single_child_adaptor_attributes_forward_completion_scheduler() -> None:
    loop = sx.run_loop()
    sch = loop.get_scheduler()
    s = sx.then(sx.schedule(sch), lambda: None)
    assert sx.get_completion_scheduler[sx.set_value_t](sx.get_env(s)) == sch
    assert sx.get_completion_scheduler[sx.set_stopped_t](sx.get_env(sx.schedule(sch))) == sch
    with pytest.raises(sx.QueryError):
        sx.get_completion_scheduler[sx.set_error_t](sx.get_env(sx.schedule(sch)))


def test_forwarding_query_rules() -> None:
    assert sx.forwarding_query(q) is False
    assert sx.forwarding_query(fq) is True

    class ByMethod:
        def query(self, what: Any) -> Any:
            if what is sx.forwarding_query:
                return True
            raise sx.QueryError

    assert sx.forwarding_query(ByMethod()) is True


@pytest.mark.parametrize(
    "query",
    [
        sx.get_allocator,
        sx.get_stop_token,
        sx.get_domain,
        sx.get_scheduler,
        sx.get_delegation_scheduler,
        sx.get_completion_scheduler[sx.set_value_t],
        sx.get_completion_scheduler[sx.set_error_t],
        sx.get_completion_scheduler[sx.set_stopped_t],
        sx.get_await_completion_adaptor,
    ],
)
def test_standard_queries_are_forwarding(query: Any) -> None:
    assert sx.forwarding_query(query) is True


def test_get_stop_token_default_is_never_stop_token() -> None:
    t = sx.get_stop_token(sx.env())
    assert isinstance(t, sx.never_stop_token)
    assert t.stop_possible() is False


def test_get_scheduler_has_no_default_and_says_how_to_add_one() -> None:
    with pytest.raises(sx.QueryError, match="write_env"):
        sx.get_scheduler(sx.env())


def test_forward_progress_guarantee_values_and_query() -> None:
    assert {g.name for g in sx.forward_progress_guarantee} == {
        "concurrent",
        "parallel",
        "weakly_parallel",
    }
    assert (
        sx.get_forward_progress_guarantee(sx.inline_scheduler())
        is sx.forward_progress_guarantee.weakly_parallel
    )
    assert (
        sx.get_forward_progress_guarantee(sx.run_loop().get_scheduler())
        is sx.forward_progress_guarantee.weakly_parallel
    )
    with pytest.raises(TypeError, match="scheduler"):
        sx.get_forward_progress_guarantee(42)


def test_completion_scheduler_is_indexed_by_completion_tag() -> None:
    assert (
        sx.get_completion_scheduler[sx.set_value_t] is sx.get_completion_scheduler[sx.set_value_t]
    )
    with pytest.raises(TypeError):
        sx.get_completion_scheduler[int]
