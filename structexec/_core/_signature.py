"""The runtime signatures of the algorithm objects (``sx.then``, ``sx.just``, ...).

An algorithm object is called through a generic ``__call__(self, *args)`` (it accepts the
pipeable form ``then(f)`` and the full form ``then(sndr, f)`` alike), so
``inspect.signature(sx.then)`` would be ``(*args)`` and ``help()``, IDEs and notebooks would
show no parameters. ``Algorithm.__signature__`` (a :class:`DocumentedSignature`) gives instead
the call its docstring documents on its first line (````then(sndr, f)````), annotated from the
``@overload`` of ``__call__`` with the same parameters where Python can list the overloads
(3.11+, :func:`typing.get_overloads`); without such a line, the overload with the most
parameters. The parameters are positional-only, as ``*args`` takes them, except those that
the implementation takes as keywords (``retry(sndr, attempts=...)``).

Computed once per class on first use, not at import.
"""

from __future__ import annotations

import ast
import inspect
import re
import typing
from typing import Any

__all__ = ["DocumentedSignature", "documented_signature"]

_CALL = re.compile(r"\s*``(\w+)\((.*?)\)``")
_cache: dict[type, inspect.Signature | None] = {}
_P = inspect.Parameter


def _overloads(cls: type) -> list[inspect.Signature]:
    get_overloads = getattr(typing, "get_overloads", None)  # new in Python 3.11
    call = cls.__dict__.get("__call__")  # overloads are registered on the defining class
    if get_overloads is None or call is None:
        return []
    sigs = []
    for fn in get_overloads(call):
        sig = inspect.signature(fn)
        sigs.append(sig.replace(parameters=list(sig.parameters.values())[1:]))  # drop self
    return sigs


def _literal(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError:
        return _Source(ast.unparse(node))


class _Source:
    """A default shown as its source text (``retry_on=Exception``)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _from_docstring(name: str, doc: str | None, impl: inspect.Signature) -> list[_P] | None:
    m = _CALL.match(doc or "")
    if m is None or m.group(1) != name:
        return None
    try:
        fn = ast.parse(f"def f({m.group(2)}): pass").body[0]
    except SyntaxError:
        return None
    assert isinstance(fn, ast.FunctionDef)
    a = fn.args
    keywords = {p.name: p for p in impl.parameters.values() if p.kind is _P.KEYWORD_ONLY}
    positional = [*a.posonlyargs, *a.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(a.defaults))
    defaults += a.defaults
    params: list[_P] = []
    for arg, default in zip(positional, defaults):
        if arg.arg in keywords:  # the implementation takes it as a keyword
            params.append(keywords[arg.arg])
            continue
        value = _P.empty if default is None else _literal(default)
        params.append(_P(arg.arg, _P.POSITIONAL_ONLY, default=value))
    if a.vararg is not None:
        params.append(_P(a.vararg.arg, _P.VAR_POSITIONAL))
    for arg, kw_default in zip(a.kwonlyargs, a.kw_defaults):
        value = _P.empty if kw_default is None else _literal(kw_default)
        params.append(keywords.get(arg.arg) or _P(arg.arg, _P.KEYWORD_ONLY, default=value))
    if a.kwarg is not None:
        params.append(_P(a.kwarg.arg, _P.VAR_KEYWORD))
    # keyword-only parameters of the implementation that the line does not spell
    params += [p for n, p in keywords.items() if all(q.name != n for q in params)]
    return params


def _annotate(params: list[_P], overloads: list[inspect.Signature]) -> inspect.Signature | None:
    """``params`` with the annotations of the overload that has the same parameter names."""
    names = [p.name for p in params]
    for ov in overloads:
        if [p.name for p in ov.parameters.values()] == names:
            by_name = ov.parameters
            annotated = [p.replace(annotation=by_name[p.name].annotation) for p in params]
            return inspect.Signature(annotated, return_annotation=ov.return_annotation)
    return None


def documented_signature(cls: type) -> inspect.Signature | None:
    """The documented signature of calling an instance of ``cls`` (an algorithm class); None
    when ``__call__`` already has real parameters (then ``inspect`` finds them itself)."""
    try:
        return _cache[cls]
    except KeyError:
        pass
    impl = inspect.signature(cls.__call__)
    impl = impl.replace(parameters=list(impl.parameters.values())[1:])
    result: inspect.Signature | None = None
    if any(p.kind is _P.VAR_POSITIONAL for p in impl.parameters.values()):
        name = getattr(cls, "_name", None) or cls.__name__.removesuffix("_t")
        overloads = _overloads(cls)
        params = _from_docstring(name, cls.__doc__, impl)
        if params is not None:
            result = _annotate(params, overloads) or inspect.Signature(
                params, return_annotation=impl.return_annotation
            )
        elif overloads:
            result = max(overloads, key=lambda s: len(s.parameters))
    _cache[cls] = result
    return result


class DocumentedSignature:
    """The ``__signature__`` of an algorithm object: :func:`documented_signature` of its class
    (``None``, which ``inspect`` ignores, on the class itself)."""

    __slots__ = ()

    def __get__(self, obj: object, owner: type | None = None) -> inspect.Signature | None:
        if obj is None:
            return None
        return documented_signature(type(obj))
