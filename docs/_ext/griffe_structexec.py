"""A griffe extension for the API reference (mkdocs.yml loads it; not part of the package).

structexec's docstrings are written for ``help()`` and doctest: sections such as
``Example:`` are followed by unindented ``>>>`` lines, and cross-references use Sphinx roles
(:class:`X`). Markdown would render ``>>>`` lines as block quotes and the roles verbatim, so
before a docstring is parsed this extension

* wraps every run of doctest lines (a ``>>>`` line up to the next blank line, the expected
  output included) in a ``pycon`` code fence, and
* turns a Sphinx role (:class:`X`, :meth:`~X.y`, ...) into a code span (``X``, ``X.y``), and
* turns a mention of a guide (``the scopes guide``: docstrings name a guide by its file's stem,
  since ``help()`` readers have no ``docs/`` directory) or of a page path (``docs/scopes.md``,
  in text written for a clone) into a link to that page of the site, titled as in the nav.

An attribute whose docstring is its value's type's (``int``, ``tuple``, ...: inspection finds
``int.__doc__`` on ``max_associations = sys.maxsize``) has no docstring of its own: it is
dropped, so the reference never shows Python's "Convert a number or string to an integer"
(the class docstring describes such attributes).

An algorithm object (``sx.then``, ...) is called through its adaptor base's generic
``__call__(*args)``; its docstring's first line spells the real call (````then(sndr, f)````), so
when the inspected signature is that lone ``*args`` the parameters are taken from there.

The docstrings themselves stay as they are: tests/test_docstrings.py runs their examples.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
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


# docs/scopes.md, not inside a code span or a path (``docs/x.md``, tests/docs/...)
_PAGE = re.compile(r"(?<![`/\w])docs/([a-z-]+)\.md(?![`\w])")
_DOCS = Path(__file__).resolve().parents[1]
# The docstrings of builtin types, which inspection attaches to attributes holding such values.
_BUILTIN_DOCS = {
    (t.__doc__ or "").strip()
    for t in (int, float, bool, str, bytes, tuple, list, dict, set, frozenset, type(None))
}


def _page_title(name: str) -> str | None:
    page = _DOCS / f"{name}.md"
    if not page.is_file():
        return None
    first = page.read_text(encoding="utf-8").splitlines()[0]
    return first.removeprefix("# ").strip() if first.startswith("# ") else name


def _page_link(m: re.Match[str]) -> str:
    title = _page_title(m.group(1))
    # reference pages are docs/reference/*.md: the guides are one level up
    return m.group(0) if title is None else f"[{title}](../{m.group(1)}.md)"


# "the scopes guide": docs/scopes.md; the one guide whose name is not its file's stem:
_GUIDE = re.compile(r"\bthe ([a-z]+) guide\b")
GUIDE_FILES = {"adaptors": "senders-adaptors"}


def _guide_link(m: re.Match[str]) -> str:
    stem = GUIDE_FILES.get(m.group(1), m.group(1))
    title = _page_title(stem)
    return m.group(0) if title is None else f"the [{title}](../{stem}.md) guide"


def _markdown(text: str) -> str:
    text = _ROLE.sub(r"`\1`", _fence_doctests(text))
    return _GUIDE.sub(_guide_link, _PAGE.sub(_page_link, text))


_CALL = re.compile(r"``(\w+)\((.*?)\)``")
_KINDS = {
    "posonlyargs": griffe.ParameterKind.positional_only,
    "args": griffe.ParameterKind.positional_or_keyword,
    "kwonlyargs": griffe.ParameterKind.keyword_only,
}


def _parameters_from_docstring(name: str, doc: str) -> griffe.Parameters | None:
    """The parameters of the call ````name(...)```` that starts ``doc``, if it parses."""
    m = _CALL.match(doc)
    if m is None or m.group(1) != name:
        return None
    try:
        fn = ast.parse(f"def f({m.group(2)}): pass").body[0]
    except SyntaxError:
        return None
    assert isinstance(fn, ast.FunctionDef)
    a = fn.args
    params: list[griffe.Parameter] = []
    positional = [*a.posonlyargs, *a.args]
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    for arg, default in zip(positional, defaults):
        kind = _KINDS["posonlyargs" if arg in a.posonlyargs else "args"]
        text = None if default is None else ast.unparse(default)
        params.append(griffe.Parameter(arg.arg, kind=kind, default=text))
    if a.vararg is not None:
        params.append(griffe.Parameter(a.vararg.arg, kind=griffe.ParameterKind.var_positional))
    for arg, kw_default in zip(a.kwonlyargs, a.kw_defaults):
        text = None if kw_default is None else ast.unparse(kw_default)
        params.append(griffe.Parameter(arg.arg, kind=_KINDS["kwonlyargs"], default=text))
    if a.kwarg is not None:
        params.append(griffe.Parameter(a.kwarg.arg, kind=griffe.ParameterKind.var_keyword))
    return griffe.Parameters(*params)


def _is_generic_call(func: griffe.Function) -> bool:
    params = list(func.parameters)
    return len(params) == 1 and params[0].kind is griffe.ParameterKind.var_positional


class StructexecDocstrings(griffe.Extension):
    """Rewrites each docstring for Markdown once the object tree is complete."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is None:
            return
        if isinstance(obj, griffe.Attribute) and obj.docstring.value.strip() in _BUILTIN_DOCS:
            obj.docstring = None
            return
        if isinstance(obj, griffe.Function) and _is_generic_call(obj):
            params = _parameters_from_docstring(obj.name, obj.docstring.value)
            if params is not None:
                obj.parameters = params
        obj.docstring.value = _markdown(obj.docstring.value)
