"""docs/testing.md: its Python snippets run, in order, and the worked example finds its bug.

DESIGN.md "Testing": the documentation shows users how to find a cancellation bug in their
own sender with the strategies; this test keeps that promise true (REQUIREMENTS 2.2).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

DOC = Path(__file__).resolve().parent.parent / "docs" / "testing.md"


def _blocks() -> list[str]:
    """The ```python blocks, each padded with newlines so that its line numbers are the
    line numbers in the .md file (tracebacks and ``inspect.getsource`` then point there)."""
    text = DOC.read_text()
    out = []
    for m in re.finditer(r"```python\n(.*?)```", text, flags=re.S):
        first_line = text.count("\n", 0, m.start(1))
        out.append("\n" * first_line + m.group(1))
    return out


def test_testing_doc_snippets_run_and_find_the_bug() -> None:
    ns: dict[str, Any] = {"__name__": __name__}
    blocks = _blocks()
    assert len(blocks) >= 6
    for code in blocks:
        exec(compile(code, str(DOC), "exec"), ns)
    # The hand-written checks pass ...
    sx = ns["sx"]
    assert sx.sync_wait(ns["StopQuickly"](sx.just(42))) == (42,)
    # ... and the property finds the double completion, shrunk to the documented tree.
    with pytest.raises(AssertionError, match="second completion") as info:
        ns["test_stop_quickly"]()
    assert "tree:  stop_quickly(sx.just())" in str(info.value)
