"""``into_variant``, ``stopped_as_optional``, ``stopped_as_error``: [exec.into.variant],
[exec.stopped.opt], [exec.stopped.err] ([exec.into.variant], [exec.stopped.opt],
[exec.stopped.err]), with [exec.adapt.general], [exec.adapt.obj], [exec.snd.concepts],
[exec.snd.transform] (lowerings at connect)."""

from __future__ import annotations

from typing import Any

import pytest
from _helpers import DOMAIN_MODES, TwoValueSigs, domains_off_and_on, restore_domain_dispatch

import structexec as sx
from structexec.testing import ManualScheduler, RecordingReceiver

_restore_domain_dispatch = pytest.fixture(restore_domain_dispatch, autouse=True)


# With the domain machinery on, ``connect`` applies the ``let_stopped`` lowerings
# (``transform_sender``); off, the senders' own ``connect`` runs. Results must agree.
domains = pytest.fixture(domains_off_and_on, params=DOMAIN_MODES, name="domains")


# --------------------------------------------------------------------------- into_variant


@pytest.mark.parametrize(
    ("vals", "expected"), [((), ()), ((1,), (1,)), ((1, "a", None), (1, "a", None))]
)
def test_into_variant_values_become_one_tuple(
    vals: tuple[Any, ...], expected: tuple[Any, ...]
) -> None:
    """[exec.into.variant]/: ``set_value(*a)`` becomes ``set_value(tuple(a))``, exactly one
    datum."""
    rec = RecordingReceiver()
    rec.run(sx.into_variant(sx.just(*vals)))
    assert rec.value == (expected,)


def test_into_variant_forwards_errors_and_stopped() -> None:
    """[exec.into.variant]: errors (the same object) and stopped pass through."""
    e = KeyError("k")
    rec = RecordingReceiver()
    rec.run(sx.just_error(e) | sx.into_variant)
    assert rec.error is e
    rec2 = RecordingReceiver()
    rec2.run(sx.just_stopped() | sx.into_variant())
    assert rec2.stopped


def test_into_variant_of_a_multi_signature_child_has_one_signature() -> None:
    """[exec.into.variant]: a child with several value signatures gets a single one."""
    s = sx.into_variant(TwoValueSigs("x", "y"))
    assert sx.sync_wait(s) == (("x", "y"),)
    assert sx.get_completion_signatures(s) == sx.completion_signatures(sx.set_value_t(tuple))
    cs = sx.get_completion_signatures(sx.into_variant(sx.just_error(KeyError())))
    assert cs == sx.completion_signatures(sx.set_error_t(KeyError))


def test_into_variant_pipe_forms_compose() -> None:
    """[exec.adapt.obj]: ``s | into_variant``, ``s | into_variant()``, ``into_variant | then(f)``
    and ``then(f) | into_variant`` all work; the adaptor object is a closure, not a sender."""
    assert sx.sync_wait(sx.just(1, 2) | sx.into_variant) == ((1, 2),)
    assert sx.sync_wait(sx.just(1, 2) | sx.into_variant()) == ((1, 2),)
    c = sx.into_variant | sx.then(len)
    assert sx.sync_wait(sx.just(1, 2, 3) | c) == (3,)
    c2 = sx.then(lambda x: sx.values(x, x)) | sx.into_variant
    assert sx.sync_wait(sx.just(4) | c2) == ((4, 4),)
    assert not sx.is_sender(sx.into_variant) and isinstance(sx.into_variant, sx.Closure)
    with pytest.raises(TypeError, match="sender"):
        sx.into_variant(42)
    with pytest.raises(TypeError):
        sx.into_variant(sx.just(), sx.just())


def test_variant_and_stopped_adaptors_structure_and_laziness() -> None:
    """[exec.adapt.general], [exec.snd.concepts]: nothing runs before start; tag/children;
    attributes forwarded ([exec.adapt.general])."""
    calls: list[int] = []
    ms = ManualScheduler()
    cases = [
        (sx.into_variant, sx.into_variant),
        (sx.stopped_as_optional, sx.stopped_as_optional),
        (sx.stopped_as_error(KeyError()), sx.stopped_as_error),
    ]
    for adaptor, tag in cases:
        child = sx.schedule(ms) | sx.then(lambda: calls.append(1) or 1)
        s = child | adaptor
        assert s.tag is tag and s.children == (child,)
        assert sx.get_completion_scheduler[sx.set_value_t](sx.get_env(s)) is ms
        rec = RecordingReceiver()
        rec.connect(s)
        assert calls == [] and ms.pending == 0


# --------------------------------------------------------------------------- stopped_as_optional


def test_stopped_as_optional_value_and_stopped(domains: str) -> None:
    """[exec.stopped.opt]: ``sync_wait(stopped_as_optional(just(5))) == (5,)``; stopped →
    ``(None,)`` for a child whose value type is int (``when_all(just(1), just_stopped())``)."""
    assert sx.sync_wait(sx.stopped_as_optional(sx.just(5))) == (5,)
    assert sx.sync_wait(sx.stopped_as_optional(sx.when_all(sx.just(1), sx.just_stopped()))) == (
        None,
    )


def test_stopped_as_optional_several_datums_become_a_tuple_and_errors_forwarded(
    domains: str,
) -> None:
    """[exec.stopped.opt]: several datums → one tuple; errors forwarded; it never completes
    stopped."""
    assert sx.sync_wait(sx.just(1, "a") | sx.stopped_as_optional) == ((1, "a"),)
    e = ValueError("v")
    rec = RecordingReceiver()
    rec.run(sx.when_all(sx.just(1), sx.just_error(e)) | sx.stopped_as_optional)
    assert rec.error is e
    ms = ManualScheduler()
    rec2 = RecordingReceiver()
    rec2.run(sx.stopped_as_optional(sx.schedule(ms) | sx.then(lambda: 3)))
    rec2.request_stop()
    ms.drain()
    assert rec2.value == (None,) and rec2.scheduler is ms


@pytest.mark.parametrize(
    "child",
    [sx.just(), sx.just_stopped(), TwoValueSigs(1), sx.just_error(KeyError())],
    ids=["void", "just_stopped", "two-value-sigs", "no-value"],
)
def test_stopped_as_optional_ill_formed_children_raise_at_connect(child: Any, domains: str) -> None:
    """[exec.stopped.opt]: a child whose declared value type is void, missing, or not single raises
    TypeError at connect (never set_error); construction itself is fine (laziness)."""
    s = sx.stopped_as_optional(child)
    rec = RecordingReceiver()
    with pytest.raises(TypeError, match="stopped_as_optional"):
        rec.connect(s)
    assert not rec.done


def test_stopped_as_optional_unknown_signatures_are_permissive() -> None:
    """[exec.stopped.opt]/docs/senders-adaptors.md: a child with unknown signatures is accepted; a
    void value at run time is forwarded as ``set_value()``."""
    assert sx.sync_wait(sx.then(sx.just(), lambda: None) | sx.stopped_as_optional) == ()
    assert sx.sync_wait(sx.then(sx.just(), lambda: 2) | sx.stopped_as_optional) == (2,)


def test_stopped_as_optional_signatures() -> None:
    """[exec.stopped.opt] (meta): one value signature, the child's errors, no stopped."""
    s = sx.stopped_as_optional(sx.when_all(sx.just(1), sx.just_error(KeyError())))
    assert sx.get_completion_signatures(s) == sx.completion_signatures(
        sx.set_value_t(int), sx.set_error_t(KeyError)
    )
    s2 = sx.stopped_as_optional(sx.just(1, 2))
    assert sx.get_completion_signatures(s2) == sx.completion_signatures(sx.set_value_t(tuple))


class Spy(sx.default_domain):
    """Records every sender a late transform sees."""

    def __init__(self) -> None:
        self.seen: list[Any] = []

    def transform_sender(self, sndr: Any, env: Any = None) -> Any:
        if env is not None:
            self.seen.append(sndr.tag)
        return super().transform_sender(sndr, env)


def test_stopped_as_optional_lowers_to_let_stopped_at_connect() -> None:
    """[exec.stopped.opt], [exec.snd.transform]: at connect, ``stopped_as_optional`` becomes
    ``let_stopped(then(child, make-optional), lambda: just(None))``."""
    spy = Spy()
    rec = RecordingReceiver(extra_env=sx.prop(sx.get_domain, spy))
    rec.run(sx.stopped_as_optional(sx.when_all(sx.just(1), sx.just_stopped())))
    assert rec.value == (None,)
    assert spy.seen[:2] == [sx.stopped_as_optional, sx.let_stopped]
    assert sx.then in spy.seen and sx.just in spy.seen


def test_lowered_value_none_is_one_datum() -> None:
    """[exec.stopped.opt]/docs/trio.md "Awaiting a sender": through the ``then`` lowering, a child
    value ``None`` still sends one datum (``values``), like the direct path."""
    spy = Spy()
    rec = RecordingReceiver(extra_env=sx.prop(sx.get_domain, spy))
    rec.run(sx.stopped_as_optional(sx.just(None)))
    assert rec.value == (None,) and sx.let_stopped in spy.seen


# --------------------------------------------------------------------------- stopped_as_error


def test_stopped_as_error_turns_stopped_into_the_error(domains: str) -> None:
    """[exec.stopped.err]: ``set_stopped()`` → ``set_error(err)``; values and errors forwarded."""
    err = TimeoutError("cancelled")
    rec = RecordingReceiver()
    rec.run(sx.just_stopped() | sx.stopped_as_error(err))
    assert rec.error is err
    assert sx.sync_wait(sx.stopped_as_error(sx.just(1, 2), err)) == (1, 2)
    e2 = KeyError()
    rec2 = RecordingReceiver()
    rec2.run(sx.stopped_as_error(sx.just_error(e2), err))
    assert rec2.error is e2
    with pytest.raises(TimeoutError):
        sx.sync_wait(sx.just_stopped() | sx.stopped_as_error(err))


def test_stopped_as_error_accepts_a_non_exception_error_datum() -> None:
    """[exec.stopped.err]/docs/senders.md "What happens when things fail": any non-None object is an
    error datum; sync_wait wraps it."""
    with pytest.raises(sx.ErrorValue) as info:
        sx.sync_wait(sx.stopped_as_error(sx.just_stopped(), 42))
    assert info.value.error == 42


def test_stopped_as_error_bad_arguments() -> None:
    """[exec.stopped.err]: ``None`` is not an error datum; a sender in place of ``err`` is
    rejected."""
    with pytest.raises(TypeError, match="None"):
        sx.stopped_as_error(sx.just(), None)
    with pytest.raises(TypeError, match="None"):
        sx.stopped_as_error(None)
    with pytest.raises(TypeError, match="error datum"):
        sx.stopped_as_error(sx.just())
    with pytest.raises(TypeError, match="sender"):
        sx.stopped_as_error(42, KeyError())


def test_stopped_as_error_lowering_and_signatures() -> None:
    """[exec.stopped.err], [exec.snd.transform]: lowers to ``let_stopped(s, lambda:
    just_error(err))`` at connect; the signatures replace stopped by ``set_error_t(type(err))``."""
    spy = Spy()
    err = TimeoutError()
    rec = RecordingReceiver(extra_env=sx.prop(sx.get_domain, spy))
    rec.run(sx.stopped_as_error(sx.just_stopped(), err))
    assert rec.error is err
    assert spy.seen[:2] == [sx.stopped_as_error, sx.let_stopped]
    cs = sx.get_completion_signatures(sx.stopped_as_error(sx.when_all(sx.just(1)), err))
    assert cs == sx.completion_signatures(sx.set_value_t(int), sx.set_error_t(TimeoutError))
    assert sx.stopped_as_error(sx.just(), err).data is err
