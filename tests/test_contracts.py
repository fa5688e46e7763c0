"""The private ``_sx_*`` hooks are declared in ``structexec/_core/_contracts.py``
(docs/internals.md §2 "Internal hooks").

Every ``_sx_*`` name used in the package must be declared there (a new hook gets a Protocol
with its meaning, providers and callers), and the library's providers satisfy the Protocols.
"""

from __future__ import annotations

import ast
import re
import typing
from pathlib import Path

import structexec as sx
from structexec._core import _contracts as c
from structexec._core._env import TryEnv
from structexec._parallel._parallel_scheduler import _BulkOp, _ScheduleOp
from structexec._parallel._replacement_api import system_context_replaceability
from structexec._scopes._join import _JoinOp, _TrioJoinWaiter
from structexec._trio._trio_scheduler import _TrioScheduler

PKG = Path(sx.__file__).parent
HOOK = re.compile(r"\b_sx_[a-z_]+\b")


def _protocols() -> list[type]:
    return [getattr(c, n) for n in c.__all__]


def _declared() -> set[str]:
    names: set[str] = set()
    for p in _protocols():
        names |= {n for n in vars(p) if n.startswith("_sx_")}
        names |= {n for n in typing.get_type_hints(p) if n.startswith("_sx_")}
    return names


def test_every_hook_used_in_the_package_is_declared() -> None:
    used: dict[str, str] = {}
    for f in PKG.rglob("*.py"):
        if f.name == "_contracts.py":
            continue
        for name in HOOK.findall(f.read_text(encoding="utf-8")):
            used.setdefault(name, str(f.relative_to(PKG)))
    missing = {n: f for n, f in used.items() if n not in _declared()}
    assert not missing, f"_sx_ hooks without a Protocol in _core/_contracts.py: {missing}"
    unused = _declared() - set(used)
    assert not unused, f"Protocols in _contracts.py declare hooks nobody uses: {unused}"


def test_every_protocol_is_documented() -> None:
    for p in _protocols():
        doc = p.__doc__ or ""
        assert "Provided by" in doc or "Provided and used by" in doc, p
        assert "Called by" in doc or "Provided and used by" in doc, p


def test_contracts_imports_nothing_above_core() -> None:
    tree = ast.parse((PKG / "_core" / "_contracts.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 1 or not (node.module or "").startswith(("structexec", "trio"))
        elif isinstance(node, ast.Import):
            assert all(not a.name.startswith(("structexec", "trio")) for a in node.names)


def test_providers_satisfy_the_protocols() -> None:
    assert isinstance(TryEnv(), c.TryQuery)
    assert isinstance(sx.prop(sx.get_scheduler, 1), c.TryQuery)
    for s in (sx.just(1), sx.just_error(1), sx.just_stopped(), sx.read_env(sx.get_scheduler)):
        assert isinstance(s, c.CompletesInline)
        assert s._sx_completes_inline is True
    chain = sx.just(1) | sx.then(lambda x: x) | sx.upon_error(lambda e: 0)
    assert isinstance(chain, c.CompletesInline) and chain._sx_completes_inline is True
    assert sx.when_all(sx.just(1), sx.just(2))._sx_completes_inline is True
    assert sx.affine_on(sx.just(1))._sx_completes_inline is True
    assert isinstance(sx.inline_scheduler().schedule(), c.CompletesInline)
    assert isinstance(sx.continues_on(sx.just(), sx.inline_scheduler()), c.LateDomain)
    assert isinstance(sx.get_parallel_scheduler().schedule(), c.LateDomain)
    for cls in (_JoinOp, _TrioJoinWaiter):
        assert callable(getattr(cls, "_sx_join_complete", None))
    assert _TrioScheduler._sx_trio_scheduler is True
    rp = system_context_replaceability.receiver_proxy
    for cls in (rp, _ScheduleOp, _BulkOp):
        assert callable(cls._sx_stop_token) and callable(cls._sx_query_env)
    assert _BulkOp._sx_range_ok is True

    @sx.task
    async def t() -> int:
        return 1

    assert isinstance(t(), c.AffineSender)


def test_per_instance_sigs_is_set_by_no_library_class() -> None:
    """Kept as a documented opt-out for users' scheduler classes (see the Protocol)."""
    for f in PKG.rglob("*.py"):
        if f.name in ("_contracts.py", "_infallible.py"):
            continue
        assert "_sx_per_instance_sigs" not in f.read_text(encoding="utf-8"), f


def test_library_objects_have_the_basic_shapes() -> None:
    """The shape Protocols (``Rcvr``, ``OpState``, ``Env``, ``Sndr``, ``Sched``) that the
    internals are annotated with describe the library's objects."""
    from structexec._core._adaptor_util import WriteEnvReceiver

    class Rec:
        def set_value(self, *vals: object) -> None:
            self.vals = vals

        def set_error(self, err: object) -> None: ...

        def set_stopped(self) -> None: ...

    rec = Rec()
    assert isinstance(rec, c.Rcvr)
    assert not isinstance(object(), c.Rcvr)
    sndr = sx.just(1) | sx.then(lambda x: x + 1)
    assert isinstance(sndr, c.Sndr)
    op = sx.connect(sndr, rec)
    assert isinstance(op, c.OpState)
    op.start()
    assert rec.vals == (2,)
    assert isinstance(WriteEnvReceiver(rec, sx.env()), c.Rcvr)
    for sch in (sx.inline_scheduler(), sx.task_scheduler(sx.inline_scheduler())):
        assert isinstance(sch, c.Sched)
        assert isinstance(sch.schedule(), c.Sndr)
    for e in (sx.env(), sx.prop(sx.get_scheduler, 1), sx.get_env(sndr), sx.get_env(op)):
        assert isinstance(e, c.Env)
    assert not isinstance(1, c.Env)
