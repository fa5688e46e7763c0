"""The documentation site's sources are consistent, checked without mkdocs (the build itself,
``mkdocs build --strict``, runs in ``.ci/docs``):

* every public name (``structexec``, ``structexec.backends``, ``structexec.testing``) has a
  ``::: structexec.name`` block in ``docs/reference/``, and every block names a real object;
* every page under ``docs/`` is in the ``nav`` of ``mkdocs.yml`` and every ``nav`` entry exists
  (mkdocs.yml makes an omitted page a warning, so ``--strict`` fails on it too);
* relative links in ``docs/`` point at an existing file: a page of ``docs/``, or a repository
  file that the site build carries beside the pages (``docs/_ext/repo_files.py``);
* README.md links to the repository's files relatively, and each exists (the package index
  gets them as plain text: tests/test_packaging.py);
* a link's text is never a bare file name of a page ("trio.md"), the nav never repeats a
  label, and the site needs no network (site address from the environment, system fonts,
  mermaid vendored).
"""

from __future__ import annotations

import importlib
import importlib.util
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


def _carried_repository_files() -> set[str]:
    """The repository files outside docs/ that the site build copies (the mkdocs hook)."""
    spec = importlib.util.spec_from_file_location("_repo_files", DOCS / "_ext" / "repo_files.py")
    assert spec is not None and spec.loader is not None
    if importlib.util.find_spec("mkdocs") is None:  # the hook imports mkdocs' File class
        text = (DOCS / "_ext" / "repo_files.py").read_text()
        patterns = re.search(r"PATTERNS = \(([^)]*)\)", text)
        assert patterns is not None
        globs = re.findall(r'"([^"]+)"', patterns.group(1))
        return {p.relative_to(ROOT).as_posix() for g in globs for p in ROOT.glob(g)}
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return set(module.repository_files())


@pytest.mark.parametrize("page", _pages(), ids=lambda p: p.relative_to(DOCS).as_posix())
def test_relative_links_name_existing_files(page: Path) -> None:
    carried = _carried_repository_files()
    bad = []
    for target in _links(page.read_text()):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # absolute URL (https:, mailto:) or an anchor of this page
        path = target.split("#", 1)[0]
        resolved = (page.parent / path).resolve()
        if not resolved.exists():
            bad.append(f"{target} (no such file)")
        elif not resolved.is_relative_to(DOCS.resolve()):
            rel = resolved.relative_to(ROOT).as_posix()
            if rel not in carried:
                bad.append(f"{target} (not carried by the site: docs/_ext/repo_files.py)")
    assert not bad, f"{page.relative_to(ROOT)}: {bad}"


@pytest.mark.parametrize("page", _pages(), ids=lambda p: p.relative_to(DOCS).as_posix())
def test_link_texts_are_not_page_file_names(page: Path) -> None:
    text = _CODE_SPAN.sub("", _FENCE.sub("", page.read_text()))
    bare = re.findall(r"\[([\w-]+\.md)\]\(", text)
    assert not bare, f"{page.relative_to(ROOT)}: link texts {bare}: use the page's title"


def _nav_labels() -> list[str]:
    """The label of each nav entry: its explicit label, or the page's first heading."""
    text = MKDOCS_YML.read_text()
    nav = text[text.index("\nnav:") :]
    labels = []
    for line in nav.splitlines()[1:]:
        m = re.match(r"\s*-\s*(?:\"?([^\":]+(?::[^\"]+)?)\"?\s*:\s*)?([\w/.-]+\.md)?\s*$", line)
        if not m or not (m.group(1) or m.group(2)):
            continue
        if m.group(1):  # a labelled page or a section
            labels.append(m.group(1).strip())
        else:
            first = (DOCS / m.group(2)).read_text().splitlines()[0]
            labels.append(first.removeprefix("# ").strip())
    return labels


def test_nav_labels_are_unique() -> None:
    labels = _nav_labels()
    assert "API reference" in labels and "Counting scopes" in labels
    repeated = sorted({x for x in labels if labels.count(x) > 1})
    assert not repeated, f"the nav repeats {repeated}"


def test_site_is_self_contained() -> None:
    """No repository URL, the address from the environment, system fonts, vendored mermaid
    (.ci/docs checks the built site itself)."""
    text = MKDOCS_YML.read_text()
    assert not re.search(r"^(repo_url|repo_name|edit_uri):", text, re.M)
    assert re.search(r"^site_url: !ENV \[SX_DOCS_SITE_URL, null\]$", text, re.M)
    assert re.search(r"^  font: false$", text, re.M)
    (script,) = re.findall(r"^  - (assets/javascripts/mermaid\.min\.js)$", text, re.M)
    assert (DOCS / script).stat().st_size > 1_000_000
    assert (DOCS / "assets/javascripts/mermaid.LICENSE.txt").read_text().startswith("The MIT")


def test_the_link_checks_are_not_vacuous() -> None:
    assert _links("see [a](x.md) and [b](https://e.org/y), `[c](z.md)`\n```\n[d](w.md)\n```\n") == [
        "x.md",
        "https://e.org/y",
    ]
    assert "../examples/when_all.py" in _links((DOCS / "senders.md").read_text())
    assert "docs/scopes.md" in _links(README.read_text())


def test_readme_relative_links_name_existing_files() -> None:
    targets = [t for t in _links(README.read_text()) if not re.match(r"[a-z]+:|#", t)]
    assert targets, "README.md links to no file of the repository"
    missing = [t for t in targets if not (ROOT / t.split("#", 1)[0]).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"


def test_table_pipes_hook_unescapes_code_spans_in_table_rows_only() -> None:
    spec = importlib.util.spec_from_file_location("_table_pipes", DOCS / "_ext" / "table_pipes.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    page = "| a | `x \\| y` and a\\|b |\nprose `x \\| y`\n```\n| `x \\| y` |\n```\n"
    assert module.unescape_table_pipes(page) == (
        "| a | `x | y` and a\\|b |\nprose `x \\| y`\n```\n| `x \\| y` |\n```\n"
    )
