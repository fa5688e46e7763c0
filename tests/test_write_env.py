"""``write_env`` and ``unstoppable``:  ([exec.write.env], [exec.unstoppable]), with
[exec.adapt.general] (env forwarding, attributes), [exec.adapt.general] (laziness), [exec.adapt.obj]
(closures), [exec.snd.concepts] (tags)."""

from __future__ import annotations

from typing import Any

import pytest

import structexec as sx
from structexec.testing import ManualScheduler, RecordingReceiver


class NonFwd(sx.Query):
    """A user query that is not forwarding ([exec.fwd.env])."""


class Fwd(sx.Query):
    forwarding = True


Q = NonFwd()
F = Fwd()


# -------------------------------------------------------------------------- the written environment


def test_written_query_is_read() -> None:
    """[exec.write.env]: ``sync_wait(write_env(read_env(q), prop(q, 7))) == (7,)``, q
    non-forwarding."""
    assert sx.sync_wait(sx.write_env(sx.read_env(Q), sx.prop(Q, 7))) == (7,)


def test_written_query_overrides_outer_scheduler() -> None:
    """[exec.write.env]: an outer ``get_scheduler`` is overridden by the written one."""
    mine = sx.inline_scheduler()
    outer = sx.sync_wait(sx.read_env(sx.get_scheduler))
    assert outer is not None and outer[0] != mine
    got = sx.sync_wait(sx.write_env(sx.read_env(sx.get_scheduler), sx.prop(sx.get_scheduler, mine)))
    assert got == (mine,)


def test_outer_non_forwarding_query_is_hidden_and_forwarding_one_visible() -> None:
    """[exec.write.env]: the receiver's non-forwarding queries do not reach the child;
    forwarding queries do; the written env is joined in front."""
    outer = sx.env(sx.prop(Q, "outer-q"), sx.prop(F, "outer-f"))
    rec = RecordingReceiver(outer)
    with pytest.raises(TypeError):
        rec.connect(sx.write_env(sx.read_env(Q), sx.prop(sx.get_allocator, 1)))
    rec = RecordingReceiver(outer)
    rec.run(sx.write_env(sx.read_env(F), sx.prop(sx.get_allocator, 1)))
    assert rec.value == ("outer-f",)
    rec = RecordingReceiver(outer)
    rec.run(sx.write_env(sx.read_env(F), sx.prop(F, "written")))
    assert rec.value == ("written",)


def test_nested_write_env_inner_wins_and_outer_written_nonfwd_hidden() -> None:
    """[exec.write.env]: nested writes join inner-first; a non-forwarding query written by an outer
    ``write_env`` is forwarded through the inner adaptor only if forwarding
    ([exec.adapt.general])."""
    s = sx.write_env(sx.write_env(sx.read_env(F), sx.prop(F, "inner")), sx.prop(F, "outer"))
    assert sx.sync_wait(s) == ("inner",)
    s2 = sx.write_env(sx.then(sx.read_env(Q), lambda v: v), sx.prop(Q, 1))
    with pytest.raises(TypeError):
        sx.sync_wait(s2)


# -------------------------------------------------------------------------- completions, signatures


@pytest.mark.parametrize(
    ("child", "expected"),
    [
        (sx.just(1, "a"), ("value", (1, "a"))),
        (sx.just_error(KeyError("k")), ("error", KeyError)),
        (sx.just_stopped(), ("stopped",)),
    ],
)
def test_write_env_and_unstoppable_forward_completions_unchanged(
    child: Any, expected: tuple[Any, ...]
) -> None:
    """[exec.write.env]: value, error and stopped pass through ``write_env`` and ``unstoppable`` as
    is."""
    for s in (sx.write_env(child, sx.prop(Q, 1)), sx.unstoppable(child)):
        rec = RecordingReceiver()
        rec.run(s)
        out = rec.outcome
        if expected[0] == "error":
            assert out[0] == "error" and isinstance(out[1], expected[1])
            assert out[1] is child.data  # the same object
        else:
            assert out == expected


def test_write_env_signatures_use_joined_env() -> None:
    """[exec.write.env]: completion signatures are the child's in the joined environment (meta)."""
    s = sx.write_env(sx.read_env(Q), sx.prop(Q, 7))
    cs = sx.get_completion_signatures(s)
    assert cs is not None and sx.set_value_t(int) in cs
    cs2 = sx.get_completion_signatures(s, sx.env(sx.prop(Q, "ignored")))
    assert cs2 is not None and sx.set_value_t(int) in cs2
    with pytest.raises(sx.dependent_sender_error):
        sx.get_completion_signatures(sx.write_env(sx.read_env(F), sx.prop(Q, 1)))
    assert sx.get_completion_signatures(sx.write_env(sx.just(1.5), sx.prop(Q, 1))) == (
        sx.completion_signatures(sx.set_value_t(float))
    )


# ---------------------------------------------------------------- closure form, laziness, structure


def test_write_env_closure_form_and_bad_arguments() -> None:
    """[exec.write.env] (optional closure form), docs/senders-adaptors.md: ``s | write_env(env)``;
    TypeError for bad input."""
    assert sx.sync_wait(sx.read_env(Q) | sx.write_env(sx.prop(Q, 3))) == (3,)
    with pytest.raises(TypeError, match="env"):
        sx.write_env(sx.just(), 42)
    with pytest.raises(TypeError, match="sender"):
        sx.write_env(42, sx.prop(Q, 1))
    with pytest.raises(TypeError, match="env"):
        sx.write_env(object())
    with pytest.raises(TypeError):
        sx.write_env(sx.just(), sx.prop(Q, 1), 3)


def test_write_env_is_lazy() -> None:
    """[exec.adapt.general]: nothing runs at construction or connect."""
    calls: list[int] = []
    s = sx.write_env(sx.then(sx.just(), lambda: calls.append(1)), sx.prop(Q, 1))
    rec = RecordingReceiver()
    op = rec.connect(s)
    assert calls == [] and not rec.done
    rec.start(op)
    assert calls == [1] and rec.value == ()


def test_write_env_tag_data_children_and_attributes() -> None:
    """[exec.snd.concepts], [exec.adapt.general]: tag/data/children; attributes are FWD-ENV of the
    child's."""
    e = sx.prop(Q, 1)
    ms = ManualScheduler()
    s = sx.write_env(sx.schedule(ms), e)
    assert s.tag is sx.write_env and s.data is e and len(s.children) == 1
    assert sx.get_completion_scheduler[sx.set_value_t](sx.get_env(s)) is ms
    u = sx.unstoppable(sx.just())
    assert u.tag is sx.write_env
    assert sx.get_stop_token(u.data) == sx.never_stop_token()


# --------------------------------------------------------------------------- unstoppable


def test_unstoppable_child_sees_never_stop_token() -> None:
    """[exec.unstoppable]: inside, ``read_env(get_stop_token)`` is a ``never_stop_token``."""
    rec = RecordingReceiver()
    rec.run(sx.unstoppable(sx.read_env(sx.get_stop_token)))
    (tok,) = rec.value
    assert tok == sx.never_stop_token() and sx.is_unstoppable(tok)
    assert sx.sync_wait(sx.just() | sx.unstoppable | sx.then(lambda: 5)) == (5,)


def test_outer_stop_never_reaches_an_unstoppable_child() -> None:
    """[exec.unstoppable]: a stop request on the outer token does not reach the child (control: it
    does without ``unstoppable``)."""
    ms = ManualScheduler()
    plain = RecordingReceiver()
    plain.run(sx.schedule(ms))
    shielded = RecordingReceiver()
    shielded.run(sx.unstoppable(sx.schedule(ms)))
    plain.request_stop()
    shielded.request_stop()
    ms.drain()
    assert plain.stopped
    assert shielded.value == ()
    assert sx.get_stop_token(ms.envs[1]) == sx.never_stop_token()


def test_write_env_and_unstoppable_completes_inline_marker() -> None:
    """[exec.write.env]: write_env/unstoppable of a sender that completes where it started are
    marked so (affine_on does not reschedule them); of a scheduling sender they are not."""
    assert sx.write_env(sx.just(), sx.prop(Q, 1))._sx_completes_inline is True
    assert sx.unstoppable(sx.read_env(Q))._sx_completes_inline is True
    assert sx.unstoppable(sx.schedule(ManualScheduler()))._sx_completes_inline is False
