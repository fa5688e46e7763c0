"""``when_all``'s fusion of ``just`` children (``structexec._core._fastpaths.FAST.fuse_just``)
vs connecting every child.

[exec.when.all], [exec.just]: a fused ``just(*vals)`` child (kept as a sender in its slot,
its datums delivered by ``start`` where the child would have been started) must be
observably the same as a connected one: the same values, errors and stopped, the siblings
started in the same order, nothing started after a stop request made before ``start``, and a
domain that customises ``just`` still sees (and may replace) every ``just`` child.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from _helpers import (
    cyclic_garbage_of_sync,
    pinned_domain_dispatch,
    restore_domain_dispatch,
    set_domain_dispatch,
)
from hypothesis import given, settings
from hypothesis import strategies as st

import structexec as sx
from structexec._core._fastpaths import FAST
from structexec.testing import RecordingReceiver

_restore_domain_dispatch = pytest.fixture(restore_domain_dispatch, autouse=True)


class Boom(Exception):
    pass


@contextmanager
def fused(on: bool) -> Iterator[None]:
    """Select the path; pretend no custom domain exists (other test modules may create one)."""
    old = FAST.fuse_just
    FAST.fuse_just = on
    try:
        with pinned_domain_dispatch(on=False, all=False):
            yield
    finally:
        FAST.fuse_just = old


# A child: ("just", datums) | ("then", datums) (a just | then that logs) | ("error",) |
# ("stopped",) | ("raise",) (a then whose function raises).
_CHILD = st.one_of(
    st.tuples(st.just("just"), st.lists(st.integers(0, 9), max_size=3).map(tuple)),
    st.tuples(st.just("then"), st.lists(st.integers(0, 9), max_size=2).map(tuple)),
    st.tuples(st.just("error")),
    st.tuples(st.just("stopped")),
    st.tuples(st.just("raise")),
)


def _build(spec: list[tuple[Any, ...]], log: list[Any]) -> Any:
    children: list[Any] = []
    for i, c in enumerate(spec):
        kind = c[0]
        if kind == "just":
            children.append(sx.just(*c[1]))
        elif kind == "then":

            def f(*a: Any, i: int = i) -> Any:
                log.append((i, a))
                return sx.values(*a)

            children.append(sx.just(*c[1]) | sx.then(f))
        elif kind == "error":
            children.append(sx.just_error(Boom(i)))
        elif kind == "stopped":
            children.append(sx.just_stopped())
        else:

            def g(i: int = i) -> None:
                log.append((i, "raise"))
                raise Boom(i)

            children.append(sx.just() | sx.then(g))
    return sx.when_all(*children)


def _outcome(spec: list[tuple[Any, ...]], stop_first: bool) -> Any:
    log: list[Any] = []
    rec = RecordingReceiver()
    if stop_first:
        rec.request_stop()
    rec.run(_build(spec, log))
    kind, args = rec.events[0]
    if kind == "error":
        args = (type(args[0]).__name__, args[0].args)
    assert len(rec.events) == 1
    return (kind, args), log, rec.live_callbacks_at_completion


@settings(deadline=None, max_examples=150)
@given(spec=st.lists(_CHILD, min_size=1, max_size=6), stop_first=st.booleans())
def test_fused_just_children_behave_as_connected_ones(
    spec: list[tuple[Any, ...]], stop_first: bool
) -> None:
    with fused(True):
        a = _outcome(spec, stop_first)
    with fused(False):
        b = _outcome(spec, stop_first)
    assert a == b
    if stop_first:
        assert a[0] == ("stopped", ()) and a[1] == []  # no child started ([exec.when.all])


@pytest.mark.parametrize("on", [True, False])
def test_values_of_just_children_in_argument_order(on: bool) -> None:
    with fused(on):
        s = sx.when_all(sx.just(1), sx.just(), sx.just(2, 3), sx.just(4) | sx.then(lambda x: x))
        assert sx.sync_wait(s) == (1, 2, 3, 4)
        assert sx.sync_wait(s) == (1, 2, 3, 4)  # multi-shot ([exec.snd.concepts])
        assert sx.sync_wait(sx.when_all(*[sx.just(i) for i in range(1000)])) == tuple(range(1000))


def test_a_domain_customising_just_sees_every_just_child(monkeypatch: pytest.MonkeyPatch) -> None:
    """[exec.connect], [exec.snd.transform]: fusion must not hide a ``just`` child from a
    domain that customises ``just`` (it is connected, and transformed, as before)."""
    set_domain_dispatch(monkeypatch, False)  # forget domains made by earlier tests
    seen: list[Any] = []

    class TimesTen(sx.default_domain):
        customized_tags = frozenset({sx.just})

        def transform_sender(self, sndr: Any, env: Any = None) -> Any:
            if sndr.tag is sx.just and all(v < 10 for v in sndr.data):
                seen.append(sndr.data)
                return sx.just(*(v * 10 for v in sndr.data))
            return super().transform_sender(sndr, env)

    dom = TimesTen()
    rec = RecordingReceiver(extra_env=sx.prop(sx.get_domain, dom))
    rec.run(sx.when_all(sx.just(1), sx.just(2, 3)))
    assert rec.value == (10, 20, 30)
    assert seen == [(1,), (2, 3)]


@pytest.mark.parametrize("on", [True, False])
@pytest.mark.parametrize("last", ["value", "error", "stopped", "token"])
def test_when_all_leaves_no_cyclic_garbage(on: bool, last: str) -> None:
    """The operation drops its children's environment (which refers back to it) when it
    completes, and each child's operation when that child completes: nothing is left for the
    garbage collector ([exec.when.all]; docs/senders.md "Writing your own sender")."""
    child = {
        "value": sx.just(1) | sx.then(lambda x: x),
        "error": sx.just_error(Boom(0)),
        "stopped": sx.just_stopped(),
        "token": sx.read_env(sx.get_stop_token),
    }[last]
    with fused(on):
        s = sx.when_all(sx.just(1), sx.just(2, 3), child)

        def runs() -> None:
            for _ in range(3):
                with contextlib.suppress(Boom):
                    sx.sync_wait(s)

        assert cyclic_garbage_of_sync(runs) == 0  # the code under test's (tests/_helpers.py)
