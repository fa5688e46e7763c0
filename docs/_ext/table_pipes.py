"""A mkdocs hook (mkdocs.yml ``hooks:``): ``|`` inside a code span of a table row.

A table cell writes the operator ``|`` inside a code span as ``\\|`` (```work \\| sx.timeout(s)```),
which GitHub requires and renders as ``|``. Python-Markdown's tables already keep a pipe inside
backticks in its cell, but would print the backslash; this hook drops it from the code spans of
table rows before the page is converted, so the site shows ``work | sx.timeout(s)``.
"""

from __future__ import annotations

import re
from typing import Any

_CODE_SPAN = re.compile(r"`[^`\n]*`")


def unescape_table_pipes(markdown: str) -> str:
    """``markdown`` with ``\\|`` turned into ``|`` inside the code spans of table rows."""
    lines = markdown.split("\n")
    fence = False
    for i, line in enumerate(lines):
        if line.lstrip().startswith(("```", "~~~")):
            fence = not fence
        elif not fence and line.lstrip().startswith("|"):
            lines[i] = _CODE_SPAN.sub(lambda m: m.group(0).replace("\\|", "|"), line)
    return "\n".join(lines)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    return unescape_table_pipes(markdown)
