"""The documentation site's sources are consistent, checked without mkdocs (the build itself,
``mkdocs build --strict``, runs in ``.ci/docs``):

* every public name (``structexec``, ``structexec.backends``, ``structexec.testing``) has a
  ``::: structexec.name`` block in ``docs/reference/``, and every block names a real object;
* every page under ``docs/`` is in the ``nav`` of ``mkdocs.yml`` and every ``nav`` entry exists
  (mkdocs.yml makes an omitted page a warning, so ``--strict`` fails on it too);
* relative links in ``docs/`` stay inside ``docs/`` and point at an existing file: the site
  carries only ``docs/``, so a link to a repository file (an example, the benchmarks) is an
  absolute GitHub URL;
* README.md has no relative link: the package index shows it without the repository.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

import structexec as sx
import structexec.backends as backends
import structexec.testing as testing

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
REFERENCE = DOCS / "reference"
MKDOCS_YML = ROOT / "mkdocs.yml"
README = ROOT / "README.md"

_BLOCK = re.compile(r"^::: (structexec(?:\.\w+)+)\s*$", re.M)
# [text](target) and ![alt](target); the target ends at whitespace or ")".
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_FENCE = re.compile(r"^(\s*)(```|~~~).*?^\1\2\s*$", re.M | re.S)
_CODE_SPAN = re.compile(r"`[^`\n]*`")


def _pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if "_ext" not in p.relative_to(DOCS).parts)


def _reference_blocks() -> list[str]:
    return [m for p in sorted(REFERENCE.glob("*.md")) for m in _BLOCK.findall(p.read_text())]


def _links(text: str) -> list[str]:
    """The link targets of a Markdown text, outside code blocks and code spans."""
    text = _CODE_SPAN.sub("", _FENCE.sub("", text))
    return _LINK.findall(text)


def _public_names() -> list[str]:
    return [
        *(f"structexec.{n}" for n in sx.__all__),
        *(f"structexec.backends.{n}" for n in backends.__all__),
        *(f"structexec.testing.{n}" for n in testing.__all__),
    ]


def test_every_public_name_is_in_the_reference() -> None:
    documented = set(_reference_blocks())
    missing = [n for n in _public_names() if n not in documented]
    assert not missing, f"add a '::: name' block to a page of docs/reference/ for: {missing}"


def test_reference_blocks_name_public_objects_once() -> None:
    blocks = _reference_blocks()
    assert len(blocks) == len(set(blocks)), "a name has two blocks in docs/reference/"
    public = set(_public_names())
    for path in blocks:
        assert path in public, f"docs/reference/ documents {path}, which is not public"
        module, _, name = path.rpartition(".")
        assert hasattr(importlib.import_module(module), name), path


def _nav_entries() -> list[str]:
    text = MKDOCS_YML.read_text()
    nav = text[text.index("\nnav:") :]
    return re.findall(r"([\w/.-]+\.md)\s*$", nav, re.M)


def test_every_page_is_in_the_nav_and_every_nav_entry_exists() -> None:
    entries = _nav_entries()
    assert "index.md" in entries and "reference/index.md" in entries
    pages = {p.relative_to(DOCS).as_posix() for p in _pages()}
    missing_pages, not_in_nav = set(entries) - pages, pages - set(entries)
    assert not missing_pages, f"mkdocs.yml nav names pages that do not exist: {missing_pages}"
    assert not not_in_nav, f"pages missing from the mkdocs.yml nav: {not_in_nav}"


@pytest.mark.parametrize("page", _pages(), ids=lambda p: p.relative_to(DOCS).as_posix())
def test_relative_links_stay_inside_docs(page: Path) -> None:
    bad = []
    for target in _links(page.read_text()):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # absolute URL (https:, mailto:) or an anchor of this page
        path = target.split("#", 1)[0]
        resolved = (page.parent / path).resolve()
        if not resolved.is_relative_to(DOCS.resolve()):
            bad.append(f"{target} (outside docs/: use an absolute GitHub URL)")
        elif not resolved.exists():
            bad.append(f"{target} (no such file)")
    assert not bad, f"{page.relative_to(ROOT)}: {bad}"


def test_the_link_checks_are_not_vacuous() -> None:
    assert _links("see [a](x.md) and [b](https://e.org/y), `[c](z.md)`\n```\n[d](w.md)\n```\n") == [
        "x.md",
        "https://e.org/y",
    ]
    assert "https://github.com/structexec/structexec/blob/main/examples/when_all.py" in (
        _links((DOCS / "senders.md").read_text())
    )


def test_readme_links_are_absolute() -> None:
    relative = [
        t for t in _links(README.read_text()) if not t.startswith(("https://", "http://", "#"))
    ]
    assert not relative, f"README.md links that break on the package index: {relative}"
