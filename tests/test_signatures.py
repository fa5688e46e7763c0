"""Runtime signatures of the public callables: ``inspect.signature`` (and so ``help()``,
IDE tooltips and notebooks) shows the documented parameters, never the generic ``*args``
through which the algorithm objects are called ([exec.snd.expos] pipeable adaptors)."""

from __future__ import annotations

import inspect
import re
import sys

import pytest

import structexec as sx
import structexec.backends as backends
import structexec.testing as testing
from structexec._core._protocol import Algorithm

_P = inspect.Parameter
_CALL = re.compile(r"\s*``(\w+)\((.*?)\)``")


def _public_callables() -> list[tuple[str, object]]:
    out = []
    for mod in (sx, backends, testing):
        for name in mod.__all__:
            obj = getattr(mod, name)
            if callable(obj) and not isinstance(obj, type):
                out.append((f"{mod.__name__}.{name}", obj))
    return out


@pytest.mark.parametrize(
    ("name", "obj"), _public_callables(), ids=lambda x: x if isinstance(x, str) else ""
)
def test_no_public_callable_hides_its_parameters(name: str, obj: object) -> None:
    """A signature whose only positional parameter is a bare ``*args`` says nothing."""
    sig = inspect.signature(obj)  # type: ignore[arg-type]
    params = [p for p in sig.parameters.values() if p.kind is not _P.KEYWORD_ONLY]
    generic = len(params) == 1 and params[0].kind is _P.VAR_POSITIONAL and params[0].name == "args"
    assert not generic, f"inspect.signature({name}) is {sig}"


def _generic_call(obj: object) -> bool:
    impl = inspect.signature(type(obj).__call__)  # type: ignore[operator]
    return any(p.kind is _P.VAR_POSITIONAL for p in impl.parameters.values())


def _algorithms() -> list[tuple[str, Algorithm]]:
    """The algorithm objects called through a generic ``__call__(self, *args)``."""
    found = [(n, o) for n, o in _public_callables() if isinstance(o, Algorithm)]
    return [(n, o) for n, o in found if _generic_call(o)]


@pytest.mark.parametrize(
    ("name", "obj"), _algorithms(), ids=lambda x: x if isinstance(x, str) else ""
)
def test_algorithm_signature_is_the_documented_call(name: str, obj: Algorithm) -> None:
    """The parameters are those of the call the docstring's first line spells."""
    m = _CALL.match(type(obj).__doc__ or "")
    assert m and m.group(1) == name.rpartition(".")[2], f"{name}: no ``{name}(...)`` first line"
    sig = inspect.signature(obj)
    documented = [a.strip().split("=")[0].strip() for a in m.group(2).split(",") if a.strip()]
    shown = [("*" if p.kind is _P.VAR_POSITIONAL else "") + p.name for p in sig.parameters.values()]
    assert shown[: len(documented)] == documented, (name, str(sig))


def test_the_algorithm_list_is_not_vacuous() -> None:
    names = {n.rpartition(".")[2] for n, _ in _algorithms()}
    assert {"then", "just", "when_all", "bulk", "retry", "let_value", "associate"} <= names


def test_then_signature_shows_sender_and_function() -> None:
    sig = inspect.signature(sx.then)
    assert list(sig.parameters) == ["sndr", "f"]
    assert all(p.kind is _P.POSITIONAL_ONLY for p in sig.parameters.values())
    sig.bind(sx.just(1), lambda x: x)
    with pytest.raises(TypeError):
        sig.bind(sndr=sx.just(1), f=str)  # *args takes no keywords; the signature says so
    assert str(sig).startswith("(sndr")
    if sys.version_info >= (3, 11):  # annotated from the overloads (typing.get_overloads)
        assert sig.parameters["f"].annotation == "Callable[[A], R]"
        assert sig.return_annotation == "Sender[R]"


def test_keyword_parameters_of_the_implementation_stay_keywords() -> None:
    sig = inspect.signature(sx.retry)
    assert [(n, p.kind) for n, p in sig.parameters.items()] == [
        ("sndr", _P.POSITIONAL_ONLY),
        ("attempts", _P.KEYWORD_ONLY),
        ("delay", _P.KEYWORD_ONLY),
        ("backoff", _P.KEYWORD_ONLY),
        ("retry_on", _P.KEYWORD_ONLY),
    ]
    assert sig.parameters["retry_on"].default is Exception


def test_variadic_algorithms_and_the_class_itself() -> None:
    assert str(inspect.signature(sx.when_all)).startswith("(*senders)")
    assert str(inspect.signature(sx.just)).startswith("(*vals")
    # the class keeps its own (constructor) signature: the descriptor yields None there
    assert type(sx.then).__signature__ is None  # type: ignore[attr-defined]
    inspect.signature(type(sx.then))


def test_help_shows_the_parameters() -> None:
    import pydoc

    text = pydoc.render_doc(sx.then, renderer=pydoc.plaintext)
    assert "sndr" in text
