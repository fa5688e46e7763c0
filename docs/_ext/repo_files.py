"""A mkdocs hook (mkdocs.yml ``hooks:``): the repository files the pages link to.

The pages link to files of the repository outside ``docs/`` relatively
(``[examples/when_all.py](../examples/when_all.py)``), so the links work in a clone, in the
unpacked sdist and on any host of the repository. The site would not carry those files; this
hook adds each of them to the build under its repository path (``examples/when_all.py`` at the
site root), so the same relative links resolve on the site, offline, and mkdocs validates them
like links between pages. They are copied as they are (a Markdown file is not rendered).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files, InclusionLevel

ROOT = Path(__file__).resolve().parents[2]

#: The repository files outside docs/ that the site carries (tests/test_docs_site.py checks
#: that every relative link leaving docs/ names one of them).
PATTERNS = (
    "README.md",
    "CHANGELOG.md",
    "LICENSE",
    "examples/*.py",
    "examples/*.md",
    "benchmarks/README.md",
)


def repository_files() -> list[str]:
    """The repository paths (``examples/when_all.py``, ...) that the site carries."""
    return sorted(
        p.relative_to(ROOT).as_posix() for pattern in PATTERNS for p in ROOT.glob(pattern)
    )


class _RepositoryFile(File):
    """Copied verbatim, never rendered as a page, even when it is Markdown."""

    def is_documentation_page(self) -> bool:
        return False

    def is_static_page(self) -> bool:
        return False


def on_files(files: Files, config: Any, **kwargs: Any) -> Files:
    docs_dir = config["docs_dir"]
    up = os.path.relpath(ROOT, docs_dir).replace(os.sep, "/")  # ".."
    for path in repository_files():
        files.append(
            _RepositoryFile(
                f"{up}/{path}",
                src_dir=docs_dir,
                dest_dir=config["site_dir"],
                use_directory_urls=config["use_directory_urls"],
                dest_uri=path,
                # not excluded as a path starting with a dot ('../') would be by default
                inclusion=InclusionLevel.INCLUDED,
            )
        )
    return files
