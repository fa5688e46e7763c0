"""The shim over trio's private internals (``structexec._trio._trio_compat``): its feature
detection matches the running trio, its answers match trio's public API (and, for the
collapse of exception groups, what ``CancelScope.__exit__`` does), its public fallbacks give
the same answers, and no other module of the package touches trio's internals.

Run it against every supported trio release (the CI's minimum-dependency run covers the
oldest); ``test_running_trio_is_verified`` fails on a release not yet listed in
``_trio_compat.VERIFIED``.
"""

# The cancel scopes here are entered to look at trio's cancel state, not to time anything out.
# ruff: noqa: ASYNC100

from __future__ import annotations

import ast
import math
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

import structexec as sx
from structexec._trio import _trio_compat as compat
from structexec._trio import _when_all_nursery

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup

ROOT = Path(__file__).resolve().parent.parent


def _has_attrs(obj: Any, *names: str) -> bool:
    return all(hasattr(obj, n) for n in names)


def test_version_is_parsed_from_trio() -> None:
    major, minor = (int(x) for x in trio.__version__.split(".")[:2])
    assert (major, minor) == compat.TRIO_VERSION
    assert compat._version("0.25.1") == (0, 25)
    assert compat._version("1.2.0rc1") == (1, 2)
    assert compat._version("garbage") == (0, 0)


def test_running_trio_is_verified() -> None:
    """A trio release not in VERIFIED: run this file against it, then add it there."""
    assert compat.TRIO_VERSION >= compat.MIN_TRIO, (
        f"trio {trio.__version__} is older than structexec supports"
    )
    assert compat.TRIO_VERSION in compat.VERIFIED, (
        f"trio {trio.__version__} has not been checked against structexec._trio._trio_compat"
    )


async def test_feature_detection_matches_the_running_trio() -> None:
    # Look at live objects, not at the classes the shim inspected.
    task = trio.lowlevel.current_task()
    with trio.CancelScope() as cs:
        status = getattr(task, "_cancel_status", None)
        live = (
            status is not None
            and _has_attrs(status, "effectively_cancelled", "_scope", "_parent")
            and _has_attrs(cs, "_deadline", "_shield")
            and status._scope is cs
        )
    expected = compat.TRIO_VERSION >= compat.MIN_TRIO and live
    assert compat.PRIVATE_STATE is expected
    from trio._core import _run

    has_collapse = callable(getattr(_run, "collapse_exception_group", None))
    assert compat.HAS_COLLAPSE is (compat.TRIO_VERSION >= compat.MIN_TRIO and has_collapse)
    # On every verified release the private state is there (the fast path is fast).
    if compat.TRIO_VERSION in compat.VERIFIED:
        assert compat.PRIVATE_STATE
        assert compat.HAS_COLLAPSE


def test_fast_in_trio_run_agrees_with_trio() -> None:
    # The sync_wait guard (_hooks.on_trio_thread) reads trio's run context without hasattr's
    # AttributeError: the same answer as trio's in_trio_run everywhere a caller can be.
    fast = compat.fast_in_trio_run
    if compat.TRIO_VERSION in compat.VERIFIED:
        assert fast is not None
    if fast is None:  # pragma: no cover - the public function is used instead
        return
    from trio.lowlevel import in_trio_run

    from structexec._core import _hooks
    from structexec._trio import _trio_bridge

    assert _trio_bridge.in_trio_run is fast and _hooks.on_trio_thread is fast
    seen: list[tuple[str, bool, bool]] = []

    def look(where: str) -> None:
        seen.append((where, fast(), in_trio_run()))

    async def main() -> None:
        look("trio task")
        await trio.to_thread.run_sync(look, "worker thread")
        trio.lowlevel.current_trio_token().run_sync_soon(look, "run_sync_soon callback")
        await trio.sleep(0)

    look("before the run")
    trio.run(main)
    look("after the run")
    assert [(w, f) for w, f, _ in seen] == [(w, t) for w, _, t in seen]
    assert [f for _, f, _ in seen] == [False, True, False, True, False]
    with pytest.raises(RuntimeError, match="thread that is running trio"):

        async def refuse() -> None:
            sx.sync_wait(sx.just(1))

        trio.run(refuse)


async def test_cancel_status_follows_the_tasks_cancellation() -> None:
    task = trio.lowlevel.current_task()
    st = compat.cancel_status(task)
    if not compat.PRIVATE_STATE:
        assert st is None
        assert compat.effectively_cancelled(st) is None
        return
    assert compat.effectively_cancelled(st) is False
    with trio.CancelScope() as cs:
        inner = compat.cancel_status(task)
        assert compat.effectively_cancelled(inner) is False
        cs.cancel()
        assert compat.effectively_cancelled(inner) is True
        assert compat.effectively_cancelled(st) is False  # the outer status is not
        with trio.CancelScope(shield=True):
            assert compat.effectively_cancelled(compat.cancel_status(task)) is False
    assert compat.effectively_cancelled(compat.cancel_status(task)) is False


def _public_finite() -> bool:
    d = trio.current_effective_deadline()
    return d != math.inf and d != -math.inf


@pytest.mark.parametrize("private", [True, False], ids=["private", "fallback"])
async def test_deadline_is_finite_agrees_with_the_public_api(private: bool) -> None:
    task = trio.lowlevel.current_task()

    def check() -> None:
        st = compat.cancel_status(task) if private else None
        assert compat.deadline_is_finite(st) is _public_finite()

    check()  # no deadline
    with trio.move_on_after(100):
        check()
        with trio.CancelScope(shield=True):
            check()  # shielded from the deadline: none
            with trio.move_on_after(50):
                check()
        with trio.CancelScope():
            check()  # inherits the outer deadline
    with trio.CancelScope() as cs:
        check()
        cs.deadline = trio.current_time() + 100  # set on an entered scope
        check()
        cs.cancel()
        check()  # cancelled: -inf, not finite
    with trio.CancelScope(deadline=-math.inf):
        check()


@pytest.mark.filterwarnings("ignore:.*strict_exception_groups=False.*")
async def test_collapse_matches_cancel_scope_exit() -> None:
    """The group a non-strict nursery raises under an outer cancellation, less its
    ``Cancelled``, collapses to what the outer ``CancelScope.__exit__`` lets out."""
    seen: list[BaseExceptionGroup[BaseException]] = []

    async def boom() -> None:
        try:
            await trio.sleep_forever()
        finally:
            raise ValueError("boom")

    let_out: BaseException | None = None
    try:
        with trio.CancelScope() as outer:
            try:
                async with trio.open_nursery(strict_exception_groups=False) as n:
                    n.start_soon(boom)
                    n.start_soon(trio.sleep_forever)
                    await trio.testing.wait_all_tasks_blocked()
                    outer.cancel()
            except BaseExceptionGroup as g:
                seen.append(g)
                raise
    except BaseException as exc:
        let_out = exc
    (group,) = seen
    rest = group.split(trio.Cancelled)[1]
    assert rest is not None
    collapsed = compat.collapse_exception_group(rest)
    if compat.HAS_COLLAPSE:
        assert isinstance(collapsed, ValueError)
        assert isinstance(let_out, ValueError)
        assert collapsed is let_out
    else:
        assert collapsed is rest
    # A strict group is left alone.
    strict = BaseExceptionGroup("strict", [KeyError("k")])
    assert compat.collapse_exception_group(strict) is strict


async def test_when_all_fast_path_with_the_public_fallbacks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fast path gives the same answers with the shim's fallbacks (no private state)."""
    monkeypatch.setattr(_when_all_nursery, "_cancel_status", lambda task: None)

    async def val(x: int) -> int:
        await trio.sleep(0)
        return x

    assert await sx.when_all(val(1), val(2)) == (1, 2)
    # The awaiting task's own cancellation still raises trio.Cancelled.
    with trio.CancelScope() as cs:

        async def cancel_then_sleep() -> None:
            cs.cancel()
            await trio.sleep_forever()

        await sx.when_all(cancel_then_sleep(), val(3))
    assert cs.cancelled_caught
    # A child's stop is sx.Stopped, not Cancelled.

    async def stopped() -> None:
        await sx.just_stopped()

    with pytest.raises(sx.Stopped):
        await sx.when_all(stopped(), val(4))
    # With a deadline the general path is taken (and gives the same values).
    with trio.move_on_after(100):
        assert await sx.when_all(val(5), val(6)) == (5, 6)


#: Attribute names of trio's private state, and trio's private helper.
_PRIVATE_NAMES = {"_cancel_status", "effectively_cancelled", "collapse_exception_group"}


def test_no_other_module_touches_trio_internals() -> None:
    offenders = []
    for path in sorted((ROOT / "structexec").rglob("*.py")):
        if path.name == "_trio_compat.py":
            continue
        rel = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            what = None
            if isinstance(node, ast.Import):
                what = next((a.name for a in node.names if a.name.startswith("trio._")), None)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("trio._"):
                what = node.module
            elif (
                isinstance(node, ast.Attribute)
                and node.attr in _PRIVATE_NAMES
                and not (isinstance(node.value, ast.Name) and node.value.id == "_trio_compat")
            ):
                what = node.attr  # the shim's own functions of these names are fine
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr", "setattr")
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and node.args[1].value in _PRIVATE_NAMES
            ):
                what = node.args[1].value
            if what is not None:
                offenders.append(f"{rel}:{getattr(node, 'lineno', '?')}: {what}")
    assert not offenders, "\n".join(offenders)


def test_the_scan_finds_a_planted_access() -> None:
    tree = ast.parse("import trio._core._run\nx = task._cancel_status\n")
    found = [
        n
        for n in ast.walk(tree)
        if (isinstance(n, ast.Import) and n.names[0].name.startswith("trio._"))
        or (isinstance(n, ast.Attribute) and n.attr in _PRIVATE_NAMES)
    ]
    assert len(found) == 2
