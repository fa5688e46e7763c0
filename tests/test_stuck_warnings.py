"""Stuck-work warnings (docs/debugging.md "Stuck-work warnings"): ``stop_grace`` per scope and
``sx.set_stop_grace`` for all, under trio's ``MockClock`` (the ``autojump_clock`` fixture), so
no test waits in real time."""

from __future__ import annotations

import re
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import structexec as sx

_SRC = Path(__file__).read_text(encoding="utf-8").splitlines()


def frame_name(fn: Any) -> str:
    """How a frame of ``fn`` is named in a tree (Python 3.10 frames: the plain name)."""
    return str(fn.__qualname__ if sys.version_info >= (3, 11) else fn.__name__)


def site(name: str) -> str:
    marker = f"# <site:{name}>"
    (n,) = [i + 1 for i, line in enumerate(_SRC) if line.rstrip().endswith(marker)]
    return f"test_stuck_warnings.py:{n}"


@pytest.fixture
def global_grace() -> Iterator[None]:
    old = sx.set_stop_grace(None)
    try:
        yield
    finally:
        sx.set_stop_grace(old)


async def stubborn() -> None:
    with trio.CancelScope(shield=True):  # ignores the scope's stop
        await trio.sleep(10)


def messages(record: Any) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, sx.StuckWorkWarning)]


async def test_an_operation_that_ignores_a_stop_is_named(autojump_clock: Any) -> None:
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        async with sx.counting_scope(name="conns", stop_grace=5.0) as scope:
            scope.start_soon(stubborn)  # <site:stubborn>
            scope.spawn(sx.unstoppable(sx.schedule_after(sx.trio_scheduler(), 8.0)))  # <site:timer>
            await trio.sleep(1)
            t0 = trio.current_time()
            scope.request_stop()
        assert trio.current_time() - t0 == pytest.approx(9.0)  # the stubborn task's 10 s
    msgs = messages(rec)
    stop_msgs = sorted(m for m in msgs if "ignored the stop request" in m)
    assert len(stop_msgs) == 2
    assert stop_msgs[0] == (
        "spawn schedule_after(trio_scheduler, 8.0) | write_env(prop(get_stop_token, "
        f"never_stop_token())) (spawned at {site('timer')})"
        " has ignored the stop request of counting_scope 'conns' for 5 s; it is waiting on a "
        "timer, due in 2 s; stop requested"
    )
    assert stop_msgs[1].startswith(
        f"start_soon {stubborn.__qualname__}() (spawned at {site('stubborn')}) has ignored the "
        "stop request of counting_scope 'conns' for 5 s; it is in trio task, awaiting in "
        f"{frame_name(stubborn)} at test_stuck_warnings.py:"
    )
    exit_msgs = [m for m in msgs if m.startswith("the exit of")]
    assert len(exit_msgs) == 1
    assert exit_msgs[0].startswith(
        "the exit of `async with counting_scope 'conns'` has waited 5.0 s for 2 associated "
        "operation(s):\ncounting_scope 'conns' [open-and-joining, 2 associated, stop requested"
    )
    assert f"  - start_soon {stubborn.__qualname__}() spawned at {site('stubborn')}" in exit_msgs[0]


async def test_the_exit_warning_has_the_tree(autojump_clock: Any) -> None:
    async def sleeper() -> None:
        await trio.sleep(10)

    with pytest.warns(sx.StuckWorkWarning) as rec:
        async with sx.simple_counting_scope(name="slow", stop_grace=2) as scope:
            scope.start_soon(sleeper)  # <site:sleeper>
    (msg,) = messages(rec)
    lines = msg.splitlines()
    assert lines[0] == (
        "the exit of `async with simple_counting_scope 'slow'` has waited 2.0 s for 1 "
        "associated operation(s):"
    )
    assert lines[1].startswith("simple_counting_scope 'slow' [open-and-joining, 1 associated")
    assert lines[2] == f"  - start_soon {sleeper.__qualname__}() spawned at {site('sleeper')}"
    assert lines[3].startswith(f"      in trio task, awaiting in {frame_name(sleeper)} at ")


async def test_no_warning_within_the_grace_or_without_one(
    autojump_clock: Any, global_grace: None
) -> None:
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        async with sx.counting_scope(stop_grace=5) as scope:
            scope.start_soon(trio.sleep, 4)
            scope.spawn(sx.schedule_after(sx.trio_scheduler(), 100))  # stops at once
            scope.request_stop()
        async with sx.counting_scope() as scope:  # no grace: no warnings however long
            scope.start_soon(stubborn)
            scope.request_stop()
        async with sx.simple_counting_scope(stop_grace=5) as s2:
            s2.start_soon(trio.sleep, 4.5)
    assert messages(rec) == []


async def test_the_global_setting(autojump_clock: Any, global_grace: None) -> None:
    assert sx.set_stop_grace(3) is None
    with pytest.warns(sx.StuckWorkWarning) as rec:
        async with sx.counting_scope(name="g") as scope:
            scope.start_soon(stubborn)
            scope.request_stop()
    msgs = messages(rec)
    assert len(msgs) == 2
    assert any("for 3 s" in m for m in msgs)
    assert sx.set_stop_grace(None) == 3.0
    with pytest.raises(ValueError, match="stop_grace"):
        sx.set_stop_grace(-1)


async def test_an_error_filter_does_not_break_the_join(
    autojump_clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    shown: list[str] = []
    monkeypatch.setattr(warnings, "showwarning", lambda m, *a, **k: shown.append(str(m)))
    with warnings.catch_warnings():
        warnings.simplefilter("error", sx.StuckWorkWarning)
        async with sx.counting_scope(name="strict", stop_grace=1) as scope:
            scope.start_soon(stubborn)
            scope.request_stop()
    assert len(shown) == 2
    assert scope.state == "joined"


async def test_the_warning_watcher_ends_with_the_scope(autojump_clock: Any) -> None:
    # A stop whose work finishes at once: the watcher is cancelled when the scope closes,
    # and leaving the block does not wait for the grace to pass.
    t0 = trio.current_time()
    async with sx.counting_scope(stop_grace=50) as scope:
        scope.start_soon(trio.sleep, 100)
        scope.request_stop()
    assert trio.current_time() == t0


async def test_a_stop_requested_from_another_thread(mock_clock: Any) -> None:
    # the clock stands still while the thread runs (autojump would end the sleep meanwhile)
    with pytest.warns(sx.StuckWorkWarning) as rec:
        async with sx.counting_scope(name="threaded", stop_grace=2) as scope:
            scope.start_soon(stubborn)  # <site:threaded>
            await trio.testing.wait_all_tasks_blocked()
            await trio.to_thread.run_sync(scope.request_stop)
            await trio.testing.wait_all_tasks_blocked()
            assert scope.outstanding()[0].stop_requested
            mock_clock.autojump_threshold = 0
    msgs = messages(rec)
    assert any(
        m.startswith(f"start_soon {stubborn.__qualname__}() (spawned at {site('threaded')})")
        for m in msgs
    ), msgs


# --------------------------------------------------------------------------- attribution


def _stuck(record: Any) -> list[Any]:
    return [w for w in record if issubclass(w.category, sx.StuckWorkWarning)]


async def test_the_warnings_point_at_the_async_with_line(autojump_clock: Any) -> None:
    """Both warnings (an operation ignoring the stop, the exit waiting) carry the file and
    line of the user's ``async with``, not the library's, so that the printed source line is
    the user's and ``filterwarnings`` by module applies (as ``warnings.warn(stacklevel=...)``
    would attribute them)."""
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        async with sx.counting_scope(stop_grace=1) as scope:  # <site:enter>
            scope.start_soon(stubborn)
            scope.request_stop()
    stuck = _stuck(rec)
    assert len(stuck) == 2
    assert {f"{Path(w.filename).name}:{w.lineno}" for w in stuck} == {site("enter")}
    assert {w.filename for w in stuck} == {__file__}


async def test_an_exit_stack_entry_points_at_the_enter_call(autojump_clock: Any) -> None:
    import contextlib

    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        async with contextlib.AsyncExitStack() as stack:
            scope = await stack.enter_async_context(sx.counting_scope(stop_grace=1))  # <site:stack>
            scope.start_soon(stubborn)
            scope.request_stop()
    lines = {f"{Path(w.filename).name}:{w.lineno}" for w in _stuck(rec)}
    assert lines == {site("stack")}


async def test_a_module_filter_in_the_user_module_applies(autojump_clock: Any) -> None:
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        warnings.filterwarnings(
            "ignore", category=sx.StuckWorkWarning, module=re.escape(__name__) + "$"
        )
        async with sx.counting_scope(stop_grace=1) as scope:
            scope.start_soon(stubborn)
            scope.request_stop()
    assert _stuck(rec) == []
    # and a filter for another module leaves them alone
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=sx.StuckWorkWarning, module="structexec")
        async with sx.counting_scope(stop_grace=1) as scope:
            scope.start_soon(stubborn)
            scope.request_stop()
    assert len(_stuck(rec)) == 2
