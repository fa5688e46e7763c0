"""The domain dispatch state ([exec.domain.default], [exec.snd.transform], [exec.connect]): a
custom domain class costs only while it is alive, and only for the tags it declares; the
then-chains of a program with a remote parallel scheduler ask whether they run on it only when
they could."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest
import trio
from _helpers import pin_domain_dispatch, set_domain_dispatch

import structexec as sx
from structexec._core._domain import DISPATCH, may_transform
from structexec.testing import RecordingReceiver


class _Tag:
    """A custom algorithm tag (its senders are ``_Tagged``)."""

    def __repr__(self) -> str:
        return "custom_tag"


TAG = _Tag()


class _Tagged(sx.Sender[int]):
    """``just(7)`` under the tag ``TAG``; counts how often its attributes are read (the domain
    lookup of ``connect`` reads them, the fast path does not)."""

    tag = TAG

    def __init__(self) -> None:
        self.attrs_read = 0

    def get_env(self) -> Any:
        self.attrs_read += 1
        return sx.env()

    def get_completion_signatures(self, env: Any = None) -> Any:
        return sx.completion_signatures(sx.set_value_t(int))

    def connect(self, rcvr: Any) -> Any:
        return sx.connect(sx.just(7), rcvr)


def _make_domain(tags: frozenset[object] | None) -> weakref.ref[type]:
    class Local(sx.default_domain):
        customized_tags = tags

    Local()  # its first instance registers the class
    return weakref.ref(Local)


def _collect(ref: weakref.ref[type]) -> None:
    for _ in range(3):
        gc.collect()
    assert ref() is None, "the domain class is still referenced"


def test_a_collected_domain_class_stops_costing(monkeypatch: pytest.MonkeyPatch) -> None:
    """[exec.domain.default], [exec.connect]: while a domain declaring ``TAG`` lives,
    ``connect`` asks the late domain of ``TAG`` senders (reading their attributes); once the
    class is collected the registry forgets it and ``connect`` is back on the fast path."""
    set_domain_dispatch(monkeypatch, False)  # forget the domains made by earlier tests
    assert not DISPATCH.on and not may_transform(TAG)
    s = _Tagged()
    rec = RecordingReceiver()
    rec.run(s)
    assert rec.value == (7,) and s.attrs_read == 0  # no domain: connect skips the lookup

    ref = _make_domain(frozenset({TAG}))
    assert DISPATCH.on and may_transform(TAG) and not may_transform(sx.then)
    assert DISPATCH.classes() == [ref()]
    s = _Tagged()
    rec = RecordingReceiver()
    rec.run(s)
    assert rec.value == (7,) and s.attrs_read >= 1  # the domain layer looked

    _collect(ref)
    assert not DISPATCH.on and not may_transform(TAG) and DISPATCH.tags == frozenset()
    assert DISPATCH.classes() == []
    s = _Tagged()
    rec = RecordingReceiver()
    rec.run(s)
    assert rec.value == (7,) and s.attrs_read == 0  # the fast path is back


def test_a_collected_domain_customising_everything_releases_every_tag(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A domain without ``customized_tags`` may transform any sender while it lives; another
    live domain keeps its own tags after the first one is collected."""
    set_domain_dispatch(monkeypatch, False)
    keep = _make_domain(frozenset({TAG}))
    kept = keep()  # alive until deleted below
    every = _make_domain(None)
    assert DISPATCH.all and may_transform(sx.then) and may_transform(TAG)
    _collect(every)
    assert not DISPATCH.all and not may_transform(sx.then)
    assert DISPATCH.on and may_transform(TAG) and DISPATCH.classes() == [kept]
    del kept
    _collect(keep)
    assert not DISPATCH.on


def test_apply_sender_overrides_are_tracked_and_released(monkeypatch: pytest.MonkeyPatch) -> None:
    """[exec.sync.wait]: ``sync_wait`` asks the domain's ``apply_sender`` only while a domain
    overriding it lives."""
    set_domain_dispatch(monkeypatch, False)
    calls: list[Any] = []

    def make() -> weakref.ref[type]:
        class Applying(sx.default_domain):
            customized_tags = frozenset()

            def apply_sender(self, tag: Any, sndr: Any, *args: Any) -> Any:
                calls.append(tag)
                return super().apply_sender(tag, sndr, *args)

        dom = Applying()
        assert sx.sync_wait(sx.write_env(sx.just(1), sx.prop(sx.get_domain, dom))) == (1,)
        # The domain of a write_env sender is not its attributes' domain: ask it directly.
        assert sx.apply_sender(dom, sx.sync_wait, sx.just(2)) == (2,)
        return weakref.ref(Applying)

    ref = make()
    assert DISPATCH.apply and calls == [sx.sync_wait]
    _collect(ref)
    assert not DISPATCH.apply


class _HookSpy:
    """A stand-in for the remote parallel scheduler's then-hook: records the receivers it is
    asked about and never transforms."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def __call__(self, sndr: Any, rcvr: Any) -> None:
        self.asked.append(type(rcvr).__name__)


@pytest.fixture
def hook(monkeypatch: pytest.MonkeyPatch) -> _HookSpy:
    spy = _HookSpy()
    # As when a remote parallel scheduler exists: its domain is alive, and customises only
    # the bulk algorithms (here: nothing).
    pin_domain_dispatch(monkeypatch, on=True, all=False, tags=frozenset(), then_hook=spy)
    return spy


def test_just_then_on_receivers_without_a_domain_skips_the_remote_hook(hook: _HookSpy) -> None:
    """A ``just(...) | then(f)`` chain has no completion scheduler, so it runs where it is
    started ([exec.then]); connected to ``spawn``'s or ``sync_wait``'s receiver, whose
    environments never name a domain, it cannot run on a remote scheduler and the hook is not
    asked (a program that made one pays nothing on such chains)."""
    ran: list[int] = []
    scope = sx.counting_scope()
    sx.spawn(sx.just(1) | sx.then(ran.append), scope.get_token())
    scope.spawn(sx.just(2) | sx.then(ran.append))
    assert sx.sync_wait(sx.just(3) | sx.then(lambda x: x + 1)) == (4,)
    scope.close()
    sx.sync_wait(scope.join())
    assert ran == [1, 2]
    assert hook.asked == []


def test_chains_that_could_run_remotely_still_ask_the_hook(hook: _HookSpy) -> None:
    """The hook is still asked where the chain could run on a remote scheduler: the receiver's
    environment names a domain (inside ``starts_on``), or the predecessor has a completion
    scheduler ([exec.snd.transform], [exec.starts.on])."""
    rec = RecordingReceiver(extra_env=sx.prop(sx.get_domain, sx.default_domain()))
    rec.run(sx.just(1) | sx.then(lambda x: x))
    assert rec.value == (1,)
    assert hook.asked == ["RecordingReceiver"]
    hook.asked.clear()
    assert sx.sync_wait(sx.schedule(sx.inline_scheduler()) | sx.then(lambda: 5)) == (5,)
    assert hook.asked == ["_SyncWaitReceiver"]


async def test_awaited_just_then_still_asks_the_hook(hook: _HookSpy) -> None:
    """``await`` hosts coroutines whose environment may name a domain: it is not declared
    domain-free, so the hook is asked (and its answer, ``None``, changes nothing)."""
    assert await (sx.just(2) | sx.then(lambda x: x * 3)) == 6
    assert hook.asked == ["_AwaitRcvr"]
    await trio.lowlevel.checkpoint()
