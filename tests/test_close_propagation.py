"""``close()`` of a never-started operation reaches every operation below it
(docs/senders.md "Writing your own sender").

An operation state and its child's receiver refer to each other, so a dropped, never-started
tree is freed only by the cycle collector unless each adaptor closes what it connected. These
tests run with the collector disabled and check that the scope association held at the
bottom of each adaptor is released (and a coroutine sender closed) the moment the outer
operation is closed, or the moment a ``when_all`` stopped before start drops its children
([exec.when.all], [exec.associate]).
"""

from __future__ import annotations

import gc
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import structexec as sx
from structexec._algorithms._stop_when import (
    stop_when,  # exposition-only in [exec.stop.when]: private
)
from structexec.testing import ManualScheduler, RecordingReceiver


@pytest.fixture(autouse=True)
def _no_gc() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


SCH = ManualScheduler()

WRAPPERS: dict[str, Callable[[Any, Any], Any]] = {
    "associate": lambda s, tok: sx.associate(s, tok),
    "stop_when": lambda s, tok: stop_when(s, sx.inplace_stop_source().get_token()),
    "starts_on": lambda s, tok: sx.starts_on(SCH, s),
    "continues_on": lambda s, tok: sx.continues_on(s, SCH),
    "then": lambda s, tok: s | sx.then(lambda *a: a),
    "let_value": lambda s, tok: s | sx.let_value(lambda *a: sx.just()),
    "when_all": lambda s, tok: sx.when_all(s, sx.just()),
    "into_variant": lambda s, tok: sx.into_variant(s),
    "parallel_bulk": lambda s, tok: sx.bulk(
        sx.starts_on(sx.get_parallel_scheduler(), s), sx.par, 1, lambda i, *a: None
    ),
}


@pytest.mark.parametrize("outer", sorted(WRAPPERS))
@pytest.mark.parametrize("inner", sorted(WRAPPERS))
def test_close_releases_the_association_below_two_adaptors(outer: str, inner: str) -> None:
    scope = sx.counting_scope()
    tok = scope.get_token()
    s = WRAPPERS[outer](WRAPPERS[inner](sx.associate(sx.just(1), tok), tok), tok)
    assert scope.count >= 1
    op = sx.connect(s, RecordingReceiver())
    del s
    op.close()
    assert scope.count == 0, f"{outer}({inner}(associate(...))) kept {scope.count}"
    del op
    assert sx.sync_wait(scope.join()) == ()  # completes at once: nothing is associated


@pytest.mark.parametrize("outer", sorted(WRAPPERS))
def test_when_all_stopped_before_start_closes_every_level(outer: str) -> None:
    scope = sx.counting_scope()
    tok = scope.get_token()
    s = sx.when_all(WRAPPERS[outer](sx.associate(sx.associate(sx.just(), tok), tok), tok))
    r = RecordingReceiver()
    r.stop_source.request_stop()
    r.run(s)
    assert r.events == [("stopped", ())]
    assert scope.count == 0
    assert sx.sync_wait(scope.join()) == ()


async def _coro() -> int:
    return 1


def test_starts_on_stopped_schedule_closes_the_coroutine_child() -> None:
    """The scheduling operation completes stopped, so the child never starts: a coroutine
    child is closed then, not left to warn "never awaited" from the collector."""
    sch = ManualScheduler()
    r = RecordingReceiver()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r.run(sx.starts_on(sch, _coro()))
        r.stop_source.request_stop()
        sch.drain()
    assert r.events == [("stopped", ())]


def test_closed_stop_when_operation_cannot_start() -> None:
    scope = sx.counting_scope()
    op = sx.connect(
        stop_when(sx.associate(sx.just(), scope.get_token()), sx.inplace_stop_source().get_token()),
        RecordingReceiver(),
    )
    op.close()
    op.close()  # idempotent
    assert scope.count == 0
    with pytest.raises(RuntimeError):
        op.start()
    assert sx.sync_wait(scope.join()) == ()
