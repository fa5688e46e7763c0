"""Domains, transforms and completion signatures: [exec.connect], [exec.cmplsig],
[exec.domain.default], [exec.snd.transform]."""

from __future__ import annotations

from typing import Any

import pytest
from _helpers import set_domain_dispatch

import structexec as sx
from structexec.testing import RecordingReceiver


def test_completion_signatures_objects() -> None:
    sigs = sx.completion_signatures(
        sx.set_value_t(int, str), sx.set_error_t(Exception), sx.set_stopped_t(), sx.set_value_t()
    )
    assert len(sigs) == 4
    assert sigs.count_of(sx.set_value_t) == 2
    assert sigs.value_types == [(int, str), ()]
    assert sigs.error_types == [Exception]
    assert sigs.sends_stopped
    assert sx.set_value_t(int) in sigs | sx.completion_signatures(sx.set_value_t(int))
    with pytest.raises(TypeError):
        sx.set_error_t()
    with pytest.raises(TypeError):
        sx.set_stopped_t(int)
    with pytest.raises(TypeError, match="signatures"):
        sx.completion_signatures(int)  # type: ignore[arg-type]


def test_signatures_unknown_and_dependent_senders() -> None:
    class NoSigs:
        def connect(self, r: Any) -> Any:
            raise AssertionError

    assert sx.get_completion_signatures(NoSigs()) is None
    with pytest.raises(sx.dependent_sender_error):
        sx.get_completion_signatures(sx.read_env(sx.get_scheduler))
    sch = sx.inline_scheduler()
    sigs = sx.get_completion_signatures(
        sx.read_env(sx.get_scheduler), sx.prop(sx.get_scheduler, sch)
    )
    assert sigs is not None and sigs.value_types == [(sx.inline_scheduler,)]


def test_default_domain_leaves_plain_senders_unchanged() -> None:
    d = sx.default_domain()
    s = sx.just(1)
    assert d.transform_sender(s) is s
    assert sx.transform_sender(d, s) is s


def test_transform_recurses_to_fixed_point_and_custom_domain_applies_at_connect() -> None:
    seen: list[str] = []
    made: list[Any] = []

    class Doubling(sx.default_domain):
        def transform_sender(self, sndr: Any, env: Any = None) -> Any:
            if getattr(sndr, "tag", None) is sx.then and not any(m is sndr for m in made):
                seen.append("then")
                f = sndr.data
                new = sx.then(sndr.children[0], lambda *a: f(*a) * 2)
                made.append(new)
                return new
            return super().transform_sender(sndr, env)

    dom = Doubling()

    class Sched:
        def schedule(self) -> Any:
            return sx.schedule(sx.inline_scheduler())

        def query(self, q: Any) -> Any:
            if q is sx.get_domain:
                return dom
            raise sx.QueryError

        def __eq__(self, o: object) -> bool:
            return isinstance(o, Sched)

        def __hash__(self) -> int:
            return 0

    r = RecordingReceiver(sx.prop(sx.get_scheduler, Sched()))
    r.run(sx.just(3) | sx.then(lambda x: x + 1))
    assert r.value == (8,)
    assert seen == ["then"]


def test_apply_sender_default_calls_the_algorithm() -> None:
    assert sx.apply_sender(sx.default_domain(), sx.sync_wait, sx.just(4)) == (4,)


def test_transform_env_default_forwards_only_forwarding_queries() -> None:
    class Q(sx.Query):
        pass

    e = sx.transform_env(sx.default_domain(), sx.just(), sx.prop(Q(), 1))
    with pytest.raises(sx.QueryError):
        e.query(Q())


def test_domain_declaring_customized_tags_is_asked_only_about_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    set_domain_dispatch(monkeypatch, False)  # forget domains made by earlier tests
    asked: list[Any] = []

    class OnlyBulk(sx.default_domain):
        customized_tags = frozenset({sx.bulk_chunked})

        def transform_sender(self, sndr: Any, env: Any = None) -> Any:
            asked.append(sndr.tag)
            return super().transform_sender(sndr, env)

    dom = OnlyBulk()

    class R:
        def get_env(self) -> Any:
            return sx.prop(sx.get_domain, dom)

        def set_value(self, *v: Any) -> None:
            pass

        def set_error(self, e: Any) -> None:
            raise AssertionError(e)

        def set_stopped(self) -> None:
            raise AssertionError

    sx.start(sx.connect(sx.just([0]) | sx.then(lambda x: x), R()))
    assert asked == []
    sx.start(sx.connect(sx.bulk_chunked(sx.just([0]), sx.par, 1, lambda b, e, x: None), R()))
    assert asked == [sx.bulk_chunked]


def test_domain_customising_just_is_asked_under_a_then(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``just(x) | then(f)`` is connected as one operation when no domain customises either
    tag; a domain that customises only ``just`` must still see (and may replace) the ``just``
    below a ``then`` ([exec.connect], [exec.snd.transform])."""
    set_domain_dispatch(monkeypatch, False)  # forget domains made by earlier tests
    asked: list[Any] = []

    class TimesTen(sx.default_domain):
        customized_tags = frozenset({sx.just})

        def transform_sender(self, sndr: Any, env: Any = None) -> Any:
            asked.append(sndr.tag)
            if sndr.tag is sx.just and sndr.data != (10,):
                return sx.just(*(v * 10 for v in sndr.data))
            return super().transform_sender(sndr, env)

    dom = TimesTen()
    rec = RecordingReceiver(extra_env=sx.prop(sx.get_domain, dom))
    rec.run(sx.just(1) | sx.then(lambda x: x + 1))
    assert rec.value == (11,)
    assert sx.just in asked
