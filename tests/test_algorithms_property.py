"""Property: random compositions of the algorithms complete exactly once, with the result a
plain-Python model predicts. [exec.async.ops] (exactly once), [exec.just], [exec.then], [exec.let],
[exec.when.all] (including the stop it requests on siblings), [exec.into.variant],
[exec.stopped.opt], [exec.stopped.err].

The trees mix ``just*``, a stop probe (``read_env(get_stop_token) | then(stop_requested)``),
``then``/``upon_*``, ``let_*``, ``when_all``, ``into_variant`` and ``stopped_as_*``. Every
leaf completes inline, so the order of events is deterministic and the model is a direct
recursive evaluation. Each tree runs twice: with the domain machinery off and on (then the
``stopped_as_*`` lowerings to ``let_stopped`` are used, [exec.snd.transform]) — the outcome must
be the same. (The testing helper generalises such strategies in
``structexec.testing.strategies``; this one is deliberately small and self-contained.)
"""

from __future__ import annotations

from typing import Any

from _helpers import pinned_domain_dispatch
from hypothesis import given, settings
from hypothesis import strategies as st

import structexec as sx
from structexec.testing import RecordingReceiver

N_ERRS = 6

Tree = Any

leaves = st.one_of(
    st.tuples(st.just("just"), st.lists(st.integers(0, 3), max_size=2).map(tuple)),
    st.tuples(st.just("just_error"), st.integers(0, N_ERRS - 1)),
    st.just(("just_stopped",)),
    st.just(("probe",)),
)


def _extend(children: st.SearchStrategy[Tree]) -> st.SearchStrategy[Tree]:
    k = st.integers(0, 9)
    return st.one_of(
        st.tuples(st.just("then"), children, k, st.booleans()),
        st.tuples(st.just("upon_error"), children, k),
        st.tuples(st.just("upon_stopped"), children, k),
        st.tuples(st.just("let_value"), children, children),
        st.tuples(st.just("let_error"), children, children),
        st.tuples(st.just("let_stopped"), children, children),
        st.tuples(st.just("when_all"), st.lists(children, min_size=1, max_size=3).map(tuple)),
        st.tuples(st.just("into_variant"), children),
        st.tuples(st.just("stopped_as_optional"), children),
        st.tuples(st.just("stopped_as_error"), children, st.integers(0, N_ERRS - 1)),
    )


trees = st.recursive(leaves, _extend, max_leaves=12)


# --------------------------------------------------------------------------- sender builder


def build(t: Tree, errs: list[BaseException]) -> Any:
    kind = t[0]
    if kind == "just":
        return sx.just(*t[1])
    if kind == "just_error":
        return sx.just_error(errs[t[1]])
    if kind == "just_stopped":
        return sx.just_stopped()
    if kind == "probe":
        return sx.read_env(sx.get_stop_token) | sx.then(lambda tok: tok.stop_requested())
    if kind == "then":
        _, c, k, raises = t
        if raises:

            def f(*a: Any, e: BaseException = errs[k % N_ERRS]) -> Any:
                raise e

        else:

            def f(*a: Any, k: int = k) -> Any:
                return (k, len(a))

        return sx.then(build(c, errs), f)
    if kind == "upon_error":
        return sx.upon_error(build(t[1], errs), lambda e, k=t[2]: ("h", k, e))
    if kind == "upon_stopped":
        return sx.upon_stopped(build(t[1], errs), lambda k=t[2]: ("s", k))
    if kind in ("let_value", "let_error", "let_stopped"):
        algo = {"let_value": sx.let_value, "let_error": sx.let_error, "let_stopped": sx.let_stopped}
        sub = t[2]
        return algo[kind](build(t[1], errs), lambda *a, sub=sub: build(sub, errs))
    if kind == "when_all":
        return sx.when_all(*(build(c, errs) for c in t[1]))
    if kind == "into_variant":
        return build(t[1], errs) | sx.into_variant
    if kind == "stopped_as_optional":
        # then(...) packs the datums into one (stopped_as_optional needs a single datum).
        return build(t[1], errs) | sx.then(lambda *a: a) | sx.stopped_as_optional
    if kind == "stopped_as_error":
        return sx.stopped_as_error(build(t[1], errs), errs[t[2]])
    raise AssertionError(kind)


# --------------------------------------------------------------------------- model


def model(t: Tree, errs: list[BaseException], chain: list[list[bool]]) -> tuple[Any, ...]:
    """The expected outcome: ``("value", datums)``, ``("error", err)`` or ``("stopped",)``.

    ``chain`` holds one cell per enclosing ``when_all``: whether stop was requested on its
    internal source (a probe sees a request on any of them, [exec.when.all])."""
    kind = t[0]
    if kind == "just":
        return ("value", t[1])
    if kind == "just_error":
        return ("error", errs[t[1]])
    if kind == "just_stopped":
        return ("stopped",)
    if kind == "probe":
        return ("value", (any(c[0] for c in chain),))
    if kind == "then":
        _, c, k, raises = t
        out = model(c, errs, chain)
        if out[0] != "value":
            return out
        return ("error", errs[k % N_ERRS]) if raises else ("value", ((k, len(out[1])),))
    if kind == "upon_error":
        out = model(t[1], errs, chain)
        return ("value", (("h", t[2], out[1]),)) if out[0] == "error" else out
    if kind == "upon_stopped":
        out = model(t[1], errs, chain)
        return ("value", (("s", t[2]),)) if out[0] == "stopped" else out
    if kind in ("let_value", "let_error", "let_stopped"):
        out = model(t[1], errs, chain)
        if out[0] == kind.removeprefix("let_"):
            return model(t[2], errs, chain)
        return out
    if kind == "when_all":
        if any(c[0] for c in chain):
            return ("stopped",)  # stop already requested at start: no child starts
        cell = [False]
        inner = [*chain, cell]
        disp, err, vals = "started", None, ()
        for c in t[1]:
            out = model(c, errs, inner)
            if out[0] == "error":
                if disp != "error":  # first error wins, even after a stop ([exec.when.all])
                    disp, err = "error", out[1]
                    cell[0] = True
            elif out[0] == "stopped":
                if disp == "started":
                    disp = "stopped"
                    cell[0] = True
            else:
                vals += out[1]
        if disp == "error":
            return ("error", err)
        if disp == "stopped":
            return ("stopped",)
        return ("value", vals)
    if kind == "into_variant":
        out = model(t[1], errs, chain)
        return ("value", (out[1],)) if out[0] == "value" else out
    if kind == "stopped_as_optional":
        out = model(t[1], errs, chain)
        if out[0] == "value":
            return ("value", (out[1],))
        return ("value", (None,)) if out[0] == "stopped" else out
    if kind == "stopped_as_error":
        out = model(t[1], errs, chain)
        return ("error", errs[t[2]]) if out[0] == "stopped" else out
    raise AssertionError(kind)


def _same(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    if a[0] != b[0]:
        return False
    if a[0] == "error":
        return a[1] is b[1]
    return a == b


@settings(deadline=None, max_examples=300)
@given(trees)
def test_random_compositions_complete_once_as_modelled(tree: Tree) -> None:
    """[exec.async.ops], [exec.then], [exec.let], [exec.when.all]: exactly one completion, inline,
    equal to the model's prediction,
    with and without the domain machinery ([exec.snd.transform])."""
    for domains_on in (False, True):
        with pinned_domain_dispatch(on=domains_on, all=domains_on):
            errs: list[BaseException] = [KeyError(i) for i in range(N_ERRS)]
            expected = model(tree, errs, [])
            rec = RecordingReceiver()
            rec.run(build(tree, errs))
            assert rec.completions == 1, rec.events
            rec.check()
            assert _same(rec.outcome, expected), (tree, rec.outcome, expected)
            assert rec.live_callbacks_at_completion == 0
