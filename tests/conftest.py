"""Test-suite configuration: load the structexec pytest plugin exactly once; leave the typing
suite out of a plain run (see ``pytest_collection_modifyitems``).

An installed structexec registers ``structexec.testing.plugin`` through its ``pytest11``
entry point (pyproject.toml), and pytest loads it automatically. When the suite runs from a
source checkout that is not installed (``python -m pytest`` in the repository), the entry
point does not exist, so load the plugin here. Loading it both ways would register the same
module twice, which pytest rejects.
"""

from __future__ import annotations

from importlib.metadata import entry_points

import pytest


def _entry_point_registered() -> bool:
    return any(ep.value == "structexec.testing.plugin" for ep in entry_points(group="pytest11"))


if not _entry_point_registered():
    pytest_plugins = ["structexec.testing.plugin"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leave the typing suite (``typing`` marker, tests/test_typing.py: it needs the ``typing``
    extra and runs mypy and pyright) out of a plain ``pytest`` run; it runs when selected with
    ``-m`` or named on the command line (``python -m pytest tests/test_typing.py``)."""
    if config.option.markexpr or any("test_typing" in str(a) for a in config.args):
        return
    typing_items = [i for i in items if i.get_closest_marker("typing") is not None]
    if typing_items:
        config.hook.pytest_deselected(items=typing_items)
        items[:] = [i for i in items if i.get_closest_marker("typing") is None]
