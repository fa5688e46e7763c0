"""No link to a place that does not exist: the project has no public repository or site
address yet, so no file names one (the README, the pages, the changelog, mkdocs.yml and the
package metadata link to the repository's own files relatively), and every documentation page
that a docstring or message names exists (tests/test_docs_site.py checks the Markdown links,
tests/test_packaging.py the built metadata, .ci/docs the built site)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Spelled in two pieces so that this file does not match itself.
_MISSING_REPOSITORY = "github.com/" + "structexec"
_TEXT_SUFFIXES = {".md", ".py", ".toml", ".yml", ".yaml", ".ini", ".txt", ".cfg", ".json", ""}


def _project_files() -> list[Path]:
    """The tracked files (a checkout), or every file under the root (an unpacked sdist)."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
        ).stdout
        files = [ROOT / p for p in out.decode().split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        skip = {".git", ".venv", ".venv-docs", ".ci-venvs", "__pycache__", ".tox", "site"}
        files = [p for p in ROOT.rglob("*") if not skip & set(p.relative_to(ROOT).parts)]
    return [p for p in files if p.is_file() and p.suffix in _TEXT_SUFFIXES]


def test_the_file_list_is_not_vacuous() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in _project_files()}
    assert {"README.md", "CHANGELOG.md", "mkdocs.yml", "pyproject.toml", "docs/index.md"} <= names


def test_no_file_links_to_the_repository_that_does_not_exist() -> None:
    found = []
    for path in _project_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for n, line in enumerate(text.splitlines(), 1):
            if _MISSING_REPOSITORY in line.lower():
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:100]}")
    assert not found, "links to a repository that does not exist:\n" + "\n".join(found)


# A tracker issue by number ("issue" and a number): the tracker is not part of the
# repository, so a reader cannot look it up.
_TRACKER = re.compile(r"\bissues? #?\d", re.IGNORECASE)


def test_no_file_sends_the_reader_to_a_tracker_issue() -> None:
    found = []
    for path in _project_files():
        if path.suffix not in {".md", ".py"}:
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for n, line in enumerate(text.splitlines(), 1):
            if _TRACKER.search(line):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:100]}")
    assert not found, "names a tracker issue the reader cannot look up:\n" + "\n".join(found)


_PAGE = re.compile(r"(?<![\w/])docs/([a-z][a-z0-9/_-]*\.md)")


@pytest.mark.parametrize("top", ["structexec", "examples", "benchmarks"])
def test_documentation_pages_named_in_the_code_exist(top: str) -> None:
    """``help()`` prints a docstring's "docs/scopes.md"; the site turns it into a link to the
    page (docs/_ext/griffe_structexec.py). Either way the page must exist."""
    missing = []
    for path in sorted((ROOT / top).rglob("*.py")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            missing += [
                f"{path.relative_to(ROOT)}:{n}: docs/{page}"
                for page in _PAGE.findall(line)
                if not (ROOT / "docs" / page).is_file()
            ]
    assert not missing, missing


# "the scopes guide" names docs/scopes.md; the one guide whose name is not its file's stem:
_GUIDE = re.compile(r"\bthe ([a-z]+) guide\b")
_GUIDE_FILES = {"adaptors": "senders-adaptors"}


def test_guides_named_in_the_code_exist() -> None:
    """A docstring names a guide as "the scopes guide" (``help()`` readers have no ``docs/``
    directory; the site links it, docs/_ext/griffe_structexec.py). The guide must exist."""
    missing = []
    named = 0
    for path in sorted((ROOT / "structexec").rglob("*.py")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for name in _GUIDE.findall(line):
                named += 1
                if not (ROOT / "docs" / f"{_GUIDE_FILES.get(name, name)}.md").is_file():
                    missing.append(f"{path.relative_to(ROOT)}:{n}: the {name} guide")
    assert not missing, missing
    assert named > 0  # the pattern still matches how the docstrings are written


def _public_docstrings() -> list[tuple[str, str]]:
    import inspect

    import structexec
    import structexec.testing

    out: list[tuple[str, str]] = [("structexec", structexec.__doc__ or "")]
    for mod in (structexec, structexec.testing):
        for name in mod.__all__:
            obj = getattr(mod, name)
            out.append((f"{mod.__name__}.{name}", inspect.getdoc(obj) or ""))
            if inspect.isclass(obj):
                for attr, member in vars(obj).items():
                    if not attr.startswith("_") or attr in ("__init__", "__call__"):
                        doc = getattr(member, "__doc__", None)
                        if isinstance(doc, str):
                            out.append((f"{mod.__name__}.{name}.{attr}", doc))
    return out


def test_public_docstrings_name_no_repository_path() -> None:
    """``help(sx.X)`` in an installed wheel has no ``docs/`` directory beside it: a public
    docstring names a guide ("the scopes guide"), never a repository path ("docs/scopes.md")."""
    found = [f"{where}: {m}" for where, doc in _public_docstrings() for m in _PAGE.findall(doc)]
    assert not found, found
