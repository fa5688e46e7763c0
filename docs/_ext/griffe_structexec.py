"""A griffe extension for the API reference (mkdocs.yml loads it; not part of the package).

structexec's docstrings are written for ``help()`` and doctest: sections such as
``Example:`` are followed by unindented ``>>>`` lines, and cross-references use Sphinx roles
(:class:`X`). Markdown would render ``>>>`` lines as block quotes and the roles verbatim, so
before a docstring is parsed this extension

* wraps every run of doctest lines (a ``>>>`` line up to the next blank line, the expected
  output included) in a ``pycon`` code fence, and
* turns a Sphinx role (:class:`X`, :meth:`~X.y`, ...) into a code span (``X``, ``X.y``).

The docstrings themselves stay as they are: tests/test_docstrings.py runs their examples.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:class|meth|attr|func|data|mod|exc|obj):`~?([^`]+)`")


def _fence_doctests(text: str) -> str:
    out: list[str] = []
    in_block = False
    indent = ""
    for line in text.splitlines():
        stripped = line.lstrip()
        if not in_block and stripped.startswith(">>>"):
            in_block = True
            indent = line[: len(line) - len(stripped)]
            out.append(f"{indent}```pycon")
        elif in_block and not stripped:
            out.append(f"{indent}```")
            in_block = False
        out.append(line)
    if in_block:
        out.append(f"{indent}```")
    return "\n".join(out)


def _markdown(text: str) -> str:
    return _ROLE.sub(r"`\1`", _fence_doctests(text))


class StructexecDocstrings(griffe.Extension):
    """Rewrites each docstring for Markdown once the object tree is complete."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _markdown(obj.docstring.value)
