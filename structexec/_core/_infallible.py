"""The P3941R1 infallibility check shared by ``affine_on``, ``task_scheduler`` and ``task``.

P3941R1 3.2 and its wording for [exec.affine.on] p5 and [exec.task.scheduler]: a scheduler is
*infallible* when ``schedule(sch)``, connected in an environment whose ``get_stop_token`` is
unstoppable, declares exactly ``completion_signatures(set_value_t())`` ([exec.affine.on],
[exec.task.scheduler], the task guide "Scheduler affinity"). C++ checks this statically, on the
scheduler's *type*; here the answer is computed once per scheduler type and cached, which is the
same rule: a scheduler class whose instances differ in fallibility must be two classes, or set the
class attribute ``_sx_per_instance_sigs = True`` to be asked every time (``structexec.testing``'s
``ManualScheduler(infallible=...)`` is treated that way).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._completion_signatures import completion_signatures, get_completion_signatures
from ._env import prop
from ._protocol import is_scheduler
from ._queries import get_stop_token
from ._stop_token import never_stop_token
from ._tags import set_value_t

if TYPE_CHECKING:
    from ._contracts import Sched

#: The environment the check asks the schedule sender about: an unstoppable stop token.
UNSTOPPABLE_ENV = prop(get_stop_token, never_stop_token())
_ONLY_VALUE = completion_signatures(set_value_t())

#: type -> None (infallible) or the reason it is not. Filled on first use of each type.
_cache: dict[type, str | None] = {}


def _reason(sch: Sched) -> str | None:
    try:
        sndr = sch.schedule()
        sigs = get_completion_signatures(sndr, UNSTOPPABLE_ENV)
    except Exception as e:  # a broken schedule() is reported, not propagated as something else
        return f"asking its schedule() sender for completion signatures raised {e!r}"
    if sigs is None:
        return (
            "its schedule() sender does not declare completion signatures; give the sender a "
            "get_completion_signatures(env=None) method returning "
            "sx.completion_signatures(sx.set_value_t()) when get_stop_token(env) is "
            "unstoppable"
        )
    if sigs != _ONLY_VALUE:
        return (
            f"its schedule() sender declares {sigs!r} for an unstoppable stop token, but an "
            "infallible scheduler declares exactly completion_signatures(set_value_t())"
        )
    return None


def infallible_reason(sch: object) -> str | None:
    """``None`` if ``sch`` is an infallible scheduler, else why not (P3941R1 3.2)."""
    cls = type(sch)
    try:
        return _cache[cls]
    except KeyError:
        pass
    if not is_scheduler(sch):
        return f"{cls.__name__} is not a scheduler (it has no schedule() method)"
    r = _reason(sch)
    if not getattr(cls, "_sx_per_instance_sigs", False) and not cls.__module__.startswith(
        "structexec.testing"
    ):
        _cache[cls] = r
    return r


def check_infallible(sch: object, who: str) -> None:
    """Raise ``TypeError`` naming ``who`` unless ``sch`` is infallible
    (the adaptors guide)."""
    r = infallible_reason(sch)
    if r is not None:
        raise TypeError(
            f"{who} needs an infallible scheduler (P3941R1), and {sch!r} is not: {r}. A "
            "fallible scheduler such as parallel_scheduler cannot be a task's or affine_on's "
            "scheduler; run the work with sx.starts_on(sch, work) / sx.continues_on instead"
        )
