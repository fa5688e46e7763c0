"""Test-suite configuration: load the structexec pytest plugin exactly once.

An installed structexec registers ``structexec.testing.plugin`` through its ``pytest11``
entry point (pyproject.toml), and pytest loads it automatically. When the suite runs from a
source checkout that is not installed (``python -m pytest`` in the repository), the entry
point does not exist, so load the plugin here. Loading it both ways would register the same
module twice, which pytest rejects.
"""

from __future__ import annotations

from importlib.metadata import entry_points


def _entry_point_registered() -> bool:
    return any(ep.value == "structexec.testing.plugin" for ep in entry_points(group="pytest11"))


if not _entry_point_registered():
    pytest_plugins = ["structexec.testing.plugin"]
