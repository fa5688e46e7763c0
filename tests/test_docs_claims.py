"""Checkable claims of the docs, checked: docs/scopes.md's failure table (Ctrl-C comes out of a
scope in a ``BaseExceptionGroup``, as from a nursery) and "What still differs from a
nursery" (quiet children, the wrapper frame), docs/index.md (the exit waits for work that
does not stop, as a nursery's does), docs/parallel.md (what a stopped bulk leaves in the
values on the process backend). Each test reads the sentence it checks, so docs and code
cannot drift apart silently."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from _subproc import run_child

import structexec as sx
from structexec.backends import ProcessPoolBackend
from structexec.testing import RecordingReceiver

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup

DOCS = Path(__file__).resolve().parent.parent / "docs"


def _flat(text: str) -> str:
    return " ".join(text.split())


def _row(page: str, first_cell: str) -> list[str]:
    """The cells of the table row of ``page`` whose first cell is ``first_cell``."""
    for line in (DOCS / page).read_text(encoding="utf-8").splitlines():
        if line.startswith(f"| {first_cell} |"):
            return [c.strip() for c in line.strip().strip("|").split(" | ")]
    raise AssertionError(f"no row {first_cell!r} in docs/{page}")


# --------------------------------------------------------------------------- Ctrl-C


def test_ctrl_c_leaves_a_scope_in_a_group_as_from_a_nursery() -> None:
    """A real SIGINT in the body, and one while the exit waits: a nursery, a counting_scope
    and a simple_counting_scope all raise ``BaseExceptionGroup([KeyboardInterrupt()])`` out
    of ``trio.run`` (strict exception groups), as the table of docs/scopes.md says."""
    r = run_child(
        """
        import os, signal, threading, trio, structexec as sx

        async def in_body(open_):
            async with open_() as n:
                n.start_soon(trio.sleep, 30)
                await trio.sleep(0.01)
                signal.raise_signal(signal.SIGINT)
                await trio.sleep(30)

        async def at_exit(open_):
            async with open_() as n:
                n.start_soon(trio.sleep, 30)
                threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()

        for how in (in_body, at_exit):
            for open_ in (trio.open_nursery, sx.counting_scope, sx.simple_counting_scope):
                try:
                    trio.run(how, open_)
                except BaseException as e:
                    print(how.__name__, open_.__name__, type(e).__name__, leaf_names(e))
        """,
        timeout=120,
    )
    assert not r.timed_out and r.returncode == 0, str(r)
    lines = r.stdout.strip().splitlines()
    assert lines == [
        f"{how} {o} BaseExceptionGroup ['KeyboardInterrupt']"
        for how in ("in_body", "at_exit")
        for o in ("open_nursery", "counting_scope", "simple_counting_scope")
    ], str(r)
    body = _row("scopes.md", "Ctrl-C in the body")
    assert "in a `BaseExceptionGroup`" in body[1] and "in a `BaseExceptionGroup`" in body[2]
    assert "raised in a group" in body[3]
    exit_ = _row("scopes.md", "Ctrl-C while the exit waits")
    assert "in a `BaseExceptionGroup`" in exit_[1]


# --------------------------------------------------------------------------- what still differs


async def _stubborn() -> None:
    with trio.CancelScope(shield=True):
        await trio.sleep(10)


@pytest.mark.parametrize("opener", ["nursery", "counting_scope"])
async def test_the_exit_waits_for_shielded_work_as_a_nursery_does(
    autojump_clock: Any, opener: str
) -> None:
    open_: Any = trio.open_nursery if opener == "nursery" else sx.counting_scope
    t0 = trio.current_time()
    with trio.move_on_after(1):
        async with open_() as n:
            n.start_soon(_stubborn)
    assert trio.current_time() - t0 == pytest.approx(10.0)  # not 1: the exit waited
    text = _flat((DOCS / "index.md").read_text(encoding="utf-8"))
    assert "exactly as the exit of a trio nursery waits for its children" in text
    assert "nothing hangs" not in text


async def _leaves_of_cancel(open_: Any) -> list[str]:
    names: list[str] = []
    with trio.CancelScope() as cs:
        try:
            async with open_() as n:
                for _ in range(3):
                    n.start_soon(trio.sleep_forever)
                await trio.testing.wait_all_tasks_blocked()
                cs.cancel()
                await trio.sleep_forever()
        except BaseException as e:
            stack = [e]
            while stack:
                x = stack.pop()
                if isinstance(x, BaseExceptionGroup):
                    stack.extend(x.exceptions)
                else:
                    names.append(type(x).__name__)
            raise
    return names


async def test_children_the_scope_cancels_end_quietly() -> None:
    assert await _leaves_of_cancel(trio.open_nursery) == ["Cancelled"] * 4  # 3 children + body
    assert await _leaves_of_cancel(sx.counting_scope) == ["Cancelled"]  # the body's only
    text = _flat((DOCS / "scopes.md").read_text(encoding="utf-8"))
    differs = text[text.index("**What still differs from a nursery, and why.**"):]
    differs = differs[: differs.index("## What happens when things fail")]
    assert "**Children the scope cancels end quietly.**" in differs
    assert "**A wrapper frame on each hosted task.**" in differs


@pytest.mark.parametrize("cls", [sx.counting_scope, sx.simple_counting_scope])
async def test_a_hosted_task_has_the_wrapper_frame_first(cls: Any) -> None:
    async def child() -> None:
        await trio.sleep_forever()

    async with cls() as scope:
        scope.start_soon(child)
        await trio.testing.wait_all_tasks_blocked()
        (task,) = scope.child_tasks
        frames = [f for f, _ in task.iter_await_frames()]
        assert frames[0].f_code.co_name == "_hosted"
        assert frames[0].f_code.co_filename.endswith(os.path.join("_scopes", "_hosted.py"))
        assert frames[1].f_code is child.__code__
        scope.cancel_scope.cancel()
        if cls is sx.simple_counting_scope:
            scope._cancel_hosted()  # its tasks are shielded from cancel_scope


# --------------------------------------------------------------------------- a stopped bulk


def gated(i: int, out: list[int], gate: str) -> None:
    out[i] = 100 + i
    if i == 2:  # the second chunk waits here until the test has requested stop
        deadline = time.monotonic() + 60
        while not os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.005)


def test_a_stopped_bulk_on_processes_copies_back_finished_chunks_only(tmp_path: Path) -> None:
    """docs/parallel.md: one worker, 8 indices in 4 chunks of 2. Chunk [0, 2) finishes and is
    copied back; chunk [2, 4) is interrupted by the stop after index 2 (which it ran: its
    element stays in the worker); [4, 8) never run."""
    gate = str(tmp_path / "stop-requested")
    out = [0] * 8
    with ProcessPoolBackend(1) as backend:
        sch = sx.parallel_scheduler(backend)
        rec = RecordingReceiver()
        rec.run(sx.just(out, gate) | sx.continues_on(sch) | sx.bulk(sx.par, 8, gated))
        deadline = time.monotonic() + 60
        while out[:2] != [100, 101] and time.monotonic() < deadline:
            time.sleep(0.005)
        assert out[:2] == [100, 101]  # the first chunk came back while the second runs
        rec.request_stop()
        Path(gate).touch()
        rec.wait(60)
    assert rec.stopped
    assert out == [100, 101, 0, 0, 0, 0, 0, 0]
    text = _flat((DOCS / "parallel.md").read_text(encoding="utf-8"))
    assert "A chunk the stop interrupted copies **nothing** back" in text
    assert "each chunk that **ran to its end** before the stop reached it are copied back" in text
