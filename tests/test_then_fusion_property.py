"""``then``/``upon_*`` fusion (``structexec._core._fastpaths.FAST.fuse_then``) vs the general path.

[exec.then], [exec.just]: the fused operations (``_JustThen1Op``/``_JustThenOp`` for
``just(...) | then(f) | ...``, one ``_ThenOp`` looping over adjacent stages) must be
observably the same as one operation per stage (``FAST.fuse_then = False``): the same values,
errors and stopped, every function called once with the same arguments in the same order,
on the same thread (a hop to another thread may sit between stages). Also docs/internals.md
§3 "Fast paths and their switches".
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from _helpers import pinned_domain_dispatch
from hypothesis import given, settings
from hypothesis import strategies as st

import structexec as sx
from structexec._algorithms import _then
from structexec._core._fastpaths import FAST

MAIN = threading.get_ident()


class Boom(Exception):
    pass


@contextmanager
def fused(on: bool) -> Iterator[None]:
    """Select the path; pretend no custom domain exists (other test modules may create one)."""
    old = FAST.fuse_then
    FAST.fuse_then = on
    try:
        with pinned_domain_dispatch(on=False, all=False):
            yield
    finally:
        FAST.fuse_then = old


def _norm(x: Any) -> Any:
    if isinstance(x, BaseException):
        return (type(x).__name__, tuple(_norm(a) for a in x.args))
    if isinstance(x, tuple):
        return tuple(_norm(a) for a in x)
    return x


class Rec:
    """Receiver: records the completion and the thread it arrived on."""

    def __init__(self, log: list[Any]) -> None:
        self.log = log
        self.done = threading.Event()

    def get_env(self) -> Any:
        return sx.env()

    def _end(self, what: Any) -> None:
        self.log.append(("end", _norm(what), threading.get_ident() == MAIN))
        self.done.set()

    def set_value(self, *vals: Any) -> None:
        self._end(("value", vals))

    def set_error(self, err: Any) -> None:
        self._end(("error", err))

    def set_stopped(self) -> None:
        self._end(("stopped",))


# A stage: (kind, behaviour) with kind in then/upon_error/upon_stopped/hop and behaviour one of
# "one" (one datum), "none", "two" (sx.values), "tuple", "raise".
kinds = st.sampled_from(["then", "then", "then", "upon_error", "upon_stopped", "hop"])
behaviours = st.sampled_from(["one", "none", "two", "tuple", "raise"])
bases = st.one_of(
    st.tuples(st.just("just"), st.lists(st.integers(-5, 5), max_size=3)),
    st.tuples(st.just("just_error"), st.integers(-5, 5)),
    st.tuples(st.just("just_stopped"), st.none()),
)


def build(base: tuple[str, Any], stages: list[tuple[str, str]], log: list[Any], sch: Any) -> Any:
    kind, arg = base
    if kind == "just":
        s: Any = sx.just(*arg)
    elif kind == "just_error":
        s = sx.just_error(Boom(arg))
    else:
        s = sx.just_stopped()
    for i, (k, b) in enumerate(stages):
        if k == "hop":
            s = sx.continues_on(s, sch)
            continue

        def f(*args: Any, _i: int = i, _b: str = b, _k: str = k) -> Any:
            log.append((_i, _k, _norm(args), threading.get_ident() == MAIN))
            if _b == "raise":
                raise Boom(_i)
            if _b == "none":
                return None
            if _b == "two":
                return sx.values(_i, len(args))
            if _b == "tuple":
                return (_i, len(args))
            return _i * 10 + len(args)

        alg: Callable[..., Any] = getattr(sx, k)
        s = s | alg(f)
    return s


def run(base: tuple[str, Any], stages: list[tuple[str, str]], on: bool) -> tuple[list[Any], str]:
    log: list[Any] = []
    with _Loop() as sch, fused(on):
        sndr = build(base, stages, log, sch)
        rec = Rec(log)
        op = sx.connect(sndr, rec)
        path = type(op).__name__
        if isinstance(op, _then._ThenOp):
            path += f"[{len(op._stages)}]"
        op.start()
        assert rec.done.wait(10)
    return log, path


class _Loop:
    """A ``run_loop`` driven by a thread of its own: a scheduler whose completions arrive
    on another thread."""

    def __enter__(self) -> Any:
        self.loop = sx.run_loop()
        self.t = threading.Thread(target=self.loop.run)
        self.t.start()
        return self.loop.get_scheduler()

    def __exit__(self, *exc: Any) -> None:
        self.loop.finish()
        self.t.join(10)


@settings(deadline=None, max_examples=200)
@given(base=bases, stages=st.lists(st.tuples(kinds, behaviours), max_size=7))
def test_fused_and_general_paths_agree(
    base: tuple[str, Any], stages: list[tuple[str, str]]
) -> None:
    fused_log, fused_path = run(base, stages, True)
    general_log, general_path = run(base, stages, False)
    assert fused_log == general_log
    # The general path really is one operation per stage (so this compares two paths).
    if stages and stages[-1][0] != "hop":
        assert general_path == "_ThenOp[1]", general_path
    if stages and base[0] == "just" and all(k == "then" for k, _ in stages):
        assert fused_path in ("_JustThen1Op", "_JustThenOp"), fused_path


def test_examples_of_each_fused_shape() -> None:
    """The shapes the fusion special-cases, on both paths, with their exact outcome."""
    cases: list[tuple[tuple[str, Any], list[tuple[str, str]], str]] = [
        (("just", [1, 2]), [("then", "one")], "_JustThen1Op"),
        (("just", [1]), [("then", "two"), ("then", "none"), ("then", "raise")], "_JustThenOp"),
        (("just_error", 3), [("then", "one"), ("upon_error", "tuple")], "_ThenOp[2]"),
        (("just_stopped", None), [("upon_stopped", "none"), ("then", "one")], "_ThenOp[2]"),
    ]
    for base, stages, path in cases:
        a, pa = run(base, stages, True)
        b, pb = run(base, stages, False)
        assert a == b
        assert pa == path
        assert pb == "_ThenOp[1]"
    a, _ = run(("just", [1, 2]), [("then", "one")], True)
    assert a == [(0, "then", (1, 2), True), ("end", ("value", (2,)), True)]
    a, _ = run(("just", [1]), [("then", "raise"), ("then", "one")], True)
    assert a == [(0, "then", (1,), True), ("end", ("error", ("Boom", (0,))), True)]


def test_switch_is_on_by_default() -> None:
    assert FAST.fuse_then is True
