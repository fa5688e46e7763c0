"""Every public name has its own docstring; the algorithm objects' docstrings are sectioned
(what it does / completion signatures / errors / cancellation / example) and their examples
run (doctest). The docstrings are reachable as ``sx.then.__doc__`` (set on the class of the
instance), which is what API-doc generators read.
"""

from __future__ import annotations

import doctest
import inspect
from typing import Any

import pytest

import structexec as sx
from structexec._core._protocol import Algorithm

SECTIONS = ("Completion signatures:", "Errors:", "Cancellation:", "Example:")

#: Public algorithm objects: instances of an ``Algorithm`` class that build senders, plus the
#: consumers ``sync_wait``/``sync_wait_with_variant``.
ALGORITHMS = sorted(
    n for n in sx.__all__ if isinstance(getattr(sx, n), Algorithm) and n not in ("task",)
)

_GENERIC = {
    id(d)
    for c in (object, type, Algorithm, *Algorithm.__mro__, *type(sx.then).__mro__[1:])
    for d in (c.__doc__,)
    if d
}


def test_the_algorithm_list_is_complete() -> None:
    for n in (
        "then",
        "upon_error",
        "upon_stopped",
        "let_value",
        "let_error",
        "let_stopped",
        "when_all",
        "when_all_with_variant",
        "when_any",
        "stop_when",
        "timeout",
        "stop_after",
        "into_variant",
        "bulk",
        "bulk_chunked",
        "bulk_unchunked",
        "starts_on",
        "continues_on",
        "on",
        "affine_on",
        "schedule_from",
        "stopped_as_optional",
        "stopped_as_error",
        "write_env",
        "read_env",
        "unstoppable",
        "just",
        "just_error",
        "just_stopped",
        "spawn",
        "spawn_future",
        "associate",
        "sync_wait",
        "sync_wait_with_variant",
        "schedule",
    ):
        assert n in ALGORITHMS, n


@pytest.mark.parametrize("name", sx.__all__)
def test_every_public_name_has_its_own_docstring(name: str) -> None:
    o = getattr(sx, name)
    doc = o.__doc__
    assert doc and doc.strip(), f"sx.{name} has no docstring"
    owner = o if isinstance(o, type) or inspect.isroutine(o) else type(o)
    if isinstance(o, type) or not inspect.isroutine(o):
        assert "__doc__" in vars(owner) or "__doc__" in getattr(o, "__dict__", {}), (
            f"sx.{name}'s docstring is inherited from a base class"
        )
    assert id(doc) not in _GENERIC or isinstance(o, type), f"sx.{name}: generic docstring"


@pytest.mark.parametrize("name", ALGORITHMS)
def test_algorithm_docstrings_are_sectioned(name: str) -> None:
    doc: Any = getattr(sx, name).__doc__
    for s in SECTIONS:
        assert s in doc, f"sx.{name}.__doc__ lacks the section {s!r}"
    assert "[exec." in doc, f"sx.{name}.__doc__ cites no spec section"


@pytest.mark.parametrize("name", [*ALGORITHMS, "forwarding_query", "get_completion_scheduler"])
def test_docstring_examples_run(name: str) -> None:
    o = getattr(sx, name)
    finder = doctest.DocTestFinder(recurse=False)
    tests = finder.find(type(o), name=f"sx.{name}", globs={"sx": sx})
    examples = [t for t in tests if t.examples]
    assert examples, f"sx.{name} has no example"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for t in examples:
        runner.run(t)
    assert runner.failures == 0, f"sx.{name}'s example fails (see the output above)"
