"""The fast path of ``spawn`` agrees with the general path ([exec.spawn]; docs/internals.md §3).

``spawn(sndr, token)`` and ``scope.spawn(sndr)`` of a ``Sender`` into a library scope, without an
``env``, take :func:`structexec._scopes._spawn.spawn_fast` (the state is the receiver and its own
environment, ``connect`` skips the domain lookup, the outermost trampoline start is inlined).
``structexec._scopes.FAST.spawn = False`` sends the same calls through the general
machinery (``spawn_into``: ``senv``, ``stop-when``'s environment, a ``_ScopeSpawnState``).

The property test draws random sender trees (``structexec.testing.strategies.sender_trees``),
spawns them in both ways into a ``counting_scope`` or a ``simple_counting_scope`` (directly, or
from inside the completion of other spawned work, as nested starts through the trampoline), runs
the queued work in a random interleaving, requests stop on the scope or closes it at a random
step, and compares everything observable: what ``spawn`` raised, each completion of the work
(values, errors, stopped), the scope's count and state at every event, the order of the events,
the errors the scope kept and the outcome of its join.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from _helpers import pinned_domain_dispatch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import structexec as sx
from structexec._core import _domain
from structexec._core._fastpaths import FAST
from structexec._scopes import _spawn
from structexec.testing import ManualScheduler, RecordingReceiver
from structexec.testing import strategies as sxst
from structexec.testing._driver import Interleaving, _World

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup  # type: ignore[import-not-found, unused-ignore]

KINDS = sxst.SYNC_KINDS - {"thread_hop", "parallel_hop", "associate", "spawn", "spawn_future"}

SETTINGS = settings(
    max_examples=sxst.max_examples(150),
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
)


@contextmanager
def fast_spawn(on: bool) -> Iterator[None]:
    old = FAST.spawn
    FAST.spawn = on
    try:
        yield
    finally:
        FAST.spawn = old


def _show(x: Any) -> Any:
    """Errors made by the library (value datums) are fresh objects in each run: compare them by
    type and message; the tree's own errors are the same objects in both runs."""
    if isinstance(x, BaseException) and not isinstance(x, sxst.TreeError):
        return (type(x).__name__, str(x))
    if isinstance(x, BaseExceptionGroup):
        return (type(x).__name__, str(x), tuple(_show(e) for e in x.exceptions))
    if isinstance(x, tuple):
        return tuple(_show(e) for e in x)
    return x


@st.composite
def spawn_cases(draw: st.DrawFn) -> dict[str, Any]:
    trees = draw(
        st.lists(sxst.sender_trees(kinds=KINDS, scopes=(), max_nodes=8), min_size=1, max_size=3)
    )
    return {
        "scope": draw(st.sampled_from(["counting", "simple"])),
        "items": [
            {
                "tree": t,
                "how": draw(st.sampled_from(["sx.spawn", "scope.spawn"])),
                "keep_values": draw(st.booleans()),  # value datums are ill-formed ([exec.spawn])
                "nested": draw(st.booleans()),  # spawned from inside another spawned work
            }
            for t in trees
        ],
        "order": draw(sxst.interleavings(32)),
        "stop_at": draw(st.none() | st.integers(0, 6)),
        "close_at": draw(st.none() | st.integers(0, 6)),
        "domains": draw(st.booleans()),  # connect with and without the domain machinery
    }


def run(case: dict[str, Any], fast: bool) -> list[Any]:
    events: list[Any] = []
    scope: Any = sx.counting_scope() if case["scope"] == "counting" else sx.simple_counting_scope()
    tok = scope.get_token()

    def note(*what: Any) -> None:
        events.append((*_show(what), scope.count, scope.state))

    def spawn_one(i: int, sndr: Any, how: str) -> None:
        try:
            if how == "sx.spawn":
                sx.spawn(sndr, tok)
            else:
                scope.spawn(sndr)
        except Exception as e:
            note("spawn raised", i, e)
        else:
            note("spawned", i)

    worlds = []
    with fast_spawn(fast), pinned_domain_dispatch(on=case["domains"] or _domain.DISPATCH.on):
        for i, item in enumerate(case["items"]):
            w = _World(item["tree"])
            worlds.append(w)
            s = item["tree"].root.build(w)
            if not item["keep_values"]:
                s = sx.then(s, lambda *a, i=i: note("value", i, a))
            s = sx.let_error(s, lambda e, i=i: (note("error", i, e), sx.just_error(e))[1])
            s = sx.let_stopped(s, lambda i=i: (note("stopped", i), sx.just_stopped())[1])
            if item["nested"]:
                inner = s
                how = item["how"]
                s = sx.then(sx.just(), lambda i=i, x=inner, how=how: spawn_one(i, x, how))
            spawn_one(i, s, item["how"])
        # A fresh cursor per run: an Interleaving is consumed as it is used, and the two
        # runs of one case must make the same choices.
        order = Interleaving(case["order"].choices)
        step = 0
        while True:
            if step == case["stop_at"] and hasattr(scope, "request_stop"):
                scope.request_stop()
                note("request_stop")
            if step == case["close_at"]:
                scope.close()
                note("close")
            ran = False
            for w in worlds:
                if w.pending() and w.run_chosen(order):
                    ran = True
                    break
            if not ran and step > 6:
                break
            step += 1
    note("unhandled", tuple(scope.unhandled_errors))
    main = ManualScheduler("main")
    rec = RecordingReceiver(extra_env=sx.prop(sx.get_scheduler, main))
    rec.run(scope.join())
    main.drain()
    note("joined", rec.kind, rec.error if rec.kind == "error" else None)
    return events


@SETTINGS
@given(case=spawn_cases())
def test_property_fast_and_general_spawn_agree(case: dict[str, Any]) -> None:
    assert run(case, True) == run(case, False)


def test_the_switch_chooses_the_path(monkeypatch: Any) -> None:
    """``FAST.spawn`` decides which path ``sx.spawn`` and ``scope.spawn`` take."""
    calls: list[str] = []
    real_fast, real_into = _spawn.spawn_fast, _spawn.spawn_into
    monkeypatch.setattr(_spawn, "spawn_fast", lambda *a: (calls.append("fast"), real_fast(*a))[1])
    import structexec._scopes._counting_scope as cs

    monkeypatch.setattr(cs, "spawn_into", lambda *a: (calls.append("into"), real_into(*a))[1])
    monkeypatch.setattr(_spawn, "spawn_into", lambda *a: (calls.append("into"), real_into(*a))[1])
    scope = sx.counting_scope()
    for on in (True, False):
        with fast_spawn(on):
            sx.spawn(sx.just(), scope.get_token())
            scope.spawn(sx.just())
    assert calls == ["fast", "fast", "into", "into"]
    assert scope.count == 0
    sx.sync_wait(scope.join())
