"""``import structexec`` loads what every program needs and no more: the introspection module
(``sx.operation_tree``, ``sx.dump``, ...) and the parallel scheduler load on first use
(PEP 562 ``__getattr__`` in ``structexec/__init__.py``), the backends when a backend is first
queried. Each check runs in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys

_LAZY_MODULES = [
    "structexec._scopes._introspect",
    "structexec._parallel._parallel_scheduler",
    "structexec.backends",
]


def _run(code: str) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, object] = json.loads(proc.stdout)
    return result


def test_import_structexec_loads_no_lazy_module() -> None:
    out = _run(
        "import json, sys, trio\n"
        "before = set(sys.modules)\n"
        "import structexec\n"
        "new = sorted(set(sys.modules) - before)\n"
        f"print(json.dumps({{'loaded': [m for m in {_LAZY_MODULES!r} if m in sys.modules],"
        " 'new': new}))\n"
    )
    assert out["loaded"] == []
    new = out["new"]
    assert isinstance(new, list)
    # structexec's own modules, and of the standard library little beyond what trio loads
    assert [m for m in new if not m.startswith("structexec")] == [
        m for m in new if m in {"dataclasses", "sysconfig"} or m.startswith("_sysconfigdata")
    ]


def test_lazy_names_load_on_first_use_and_stay() -> None:
    out = _run(
        "import json, sys, structexec as sx\n"
        "tree = sx.operation_tree\n"
        "get_par = sx.get_parallel_scheduler\n"
        "from structexec import *\n"
        "from structexec._scopes import _introspect\n"
        "from structexec._parallel import _parallel_scheduler\n"
        "print(json.dumps({'same': tree is _introspect.operation_tree"
        " and get_par is _parallel_scheduler.get_parallel_scheduler"
        " and 'operation_tree' in vars(sx) and 'dump' in dir(sx),"
        " 'star': sorted(set(sx.__all__) - set(globals()))}))\n"
    )
    assert out == {"same": True, "star": []}


def test_unknown_attribute_is_an_attribute_error() -> None:
    import pytest

    import structexec as sx

    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        sx.no_such_name  # type: ignore[attr-defined]  # noqa: B018
