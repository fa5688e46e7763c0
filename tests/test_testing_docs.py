"""docs/testing.md: its Python snippets run, in order, and the worked example finds its bug.

The documentation shows users how to find a cancellation bug in their own sender with the
strategies; this test keeps that promise true. It must pass on every hypothesis seed: the
doc's property is derandomized and single-threaded, the test asserts
*that* it finds the double completion (not which tree hypothesis shrinks to, which depends
on the search), and the documented failure report is checked against a replay of the
documented minimal case, which involves no randomness at all.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

DOC = Path(__file__).resolve().parent.parent / "docs" / "testing.md"

#: How a double completion is reported: by the root's RecordingReceiver ("second completion
#: set_value() after stopped()") or by a library operation above the broken adaptor, which
#: the driver reports as "second completion: _ThenOp.set_value() called after ...".
DOUBLE_COMPLETION = re.compile(
    r"second completion|called after the operation had already completed"
)


def _blocks() -> list[str]:
    """The ```python blocks, each padded with newlines so that its line numbers are the
    line numbers in the .md file (tracebacks and ``inspect.getsource`` then point there)."""
    text = DOC.read_text()
    out = []
    for m in re.finditer(r"```python\n(.*?)```", text, flags=re.S):
        first_line = text.count("\n", 0, m.start(1))
        out.append("\n" * first_line + m.group(1))
    return out


def _documented_report() -> str:
    """The failure report docs/testing.md prints (the plain ``` block that shows one)."""
    text = DOC.read_text()
    m = re.search(r"```\n(second completion .*?)```", text, flags=re.S)
    assert m is not None, "docs/testing.md no longer shows a failure report"
    return m.group(1).rstrip("\n")


@pytest.fixture(scope="module")
def doc_ns() -> dict[str, Any]:
    ns: dict[str, Any] = {"__name__": __name__}
    blocks = _blocks()
    assert len(blocks) >= 7
    for code in blocks:
        exec(compile(code, str(DOC), "exec"), ns)
    return ns


def test_testing_doc_snippets_run_and_find_the_bug(doc_ns: dict[str, Any]) -> None:
    ns = doc_ns
    sx = ns["sx"]
    # The hand-written checks pass ...
    assert sx.sync_wait(ns["StopQuickly"](sx.just(42))) == (42,)
    # ... and the property finds the double completion, in a tree that has the adaptor.
    with pytest.raises(AssertionError) as info:
        ns["test_stop_quickly"]()
    msg = str(info.value)
    assert DOUBLE_COMPLETION.search(msg), msg
    tree_line = next(line for line in msg.splitlines() if line.startswith("  tree:  "))
    assert "stop_quickly(" in tree_line, msg


def test_testing_doc_property_is_derandomized(doc_ns: dict[str, Any]) -> None:
    # What makes the snippet reproducible: the same examples on every run, whatever
    # --hypothesis-seed says, no replay from the example database, no real threads.
    settings = doc_ns["test_stop_quickly"]._hypothesis_internal_use_settings
    assert settings.derandomize
    assert settings.database is None


def test_testing_doc_replay_prints_the_documented_report(doc_ns: dict[str, Any]) -> None:
    # The shrunk case, replayed as the doc shows: exactly the report the doc prints.
    with pytest.raises(AssertionError) as info:
        doc_ns["test_stop_quickly_stopped_before_start"]()
    assert str(info.value) == _documented_report()
