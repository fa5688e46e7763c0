"""What a run of a generated tree must satisfy: :class:`RunResult` and its named properties.

:meth:`RunResult.check` evaluates :data:`PROPERTIES` in order. Each :class:`Property` is a small
function of the result that returns ``None`` or a failure message (a function may also raise
``AssertionError``, as a :class:`RecordingReceiver` does for a contract violation it saw); the
first failure is raised naming its property, the tree, the stop schedule and the model. The
properties: the completion contract of [exec.async.ops] (exactly one completion, never before
start, stop callbacks gone at completion, [exec.recv.concepts]), nothing raised from ``start`` or
a completion ([exec.opstate.start], [exec.set.value]), no terminate-handler call, no lost
completion, no reliance on the garbage collector, the outcome one the model allows, the declared
completion scheduler ([exec.get.compl.sched]), spawned work and futures completed with modelled
outcomes ([exec.spawn], [exec.spawn.future]), every scope joined, reported exactly the errors
nobody received and released exactly the associations it granted ([exec.counting.scopes],
[exec.scope.concepts], [exec.associate], the scopes guide "What happens when things fail").
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ._manual import ManualScheduler
from ._receiver import RecordingReceiver
from ._tree import MAYBE, STOPPED, FutureRecord, Node, Outcome, Outcomes, Plan, Spawn
from ._world import CountingToken

if TYPE_CHECKING:
    from .._core._stop_token import inplace_stop_source
    from .._scopes._counting_scope import counting_scope, simple_counting_scope
    from ._driver import StopSchedule, Tree

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup  # type: ignore[import-not-found, unused-ignore]

__all__ = ["PROPERTIES", "Property", "RunResult"]


@dataclass
class RunResult:
    """Everything a run observed; :meth:`check` asserts the properties."""

    tree: Tree
    stops: StopSchedule
    model: Outcomes
    plan: Plan
    rec: RecordingReceiver
    joins: list[RecordingReceiver] = field(default_factory=list)
    spawn_log: list[tuple[Node, Outcome]] = field(default_factory=list)
    spawned: list[Node] = field(default_factory=list)
    futures: list[FutureRecord] = field(default_factory=list)
    tokens: list[object] = field(default_factory=list)
    scopes: list[counting_scope | simple_counting_scope] = field(default_factory=list)
    sources: list[tuple[str, inplace_stop_source]] = field(default_factory=list)
    terminate_calls: list[tuple[str, BaseException | None]] = field(default_factory=list)
    declared_value_scheduler: object = None
    hung: str | None = None
    raised: Exception | None = None
    gc_needed: list[str] = field(default_factory=list)
    unclosed_coroutines: list[str] = field(default_factory=list)
    allow_gc: bool = False

    @property
    def outcome(self) -> Outcome:
        return self.rec.outcome

    def failure(self) -> tuple[str, str, BaseException | None] | None:
        """The first property this run breaks, as ``(name, message, cause)``, or ``None``.

        Properties are evaluated in the order of :data:`PROPERTIES`; ``cause`` is the exception
        behind the failure (what the run raised, say), if any.
        """
        for prop in PROPERTIES:
            try:
                msg = prop.check(self)
            except AssertionError as e:
                return prop.name, str(e), e.__cause__
            if msg is not None:
                return prop.name, msg, None
        return None

    def check(self) -> None:
        """Assert every property; the message names the broken property, the tree, the schedule
        and the model."""
        found = self.failure()
        if found is None:
            return
        name, msg, cause = found
        raise AssertionError(
            f"{msg}\n  property: {name}\n  tree:  {self.tree.code()}\n  stops: {self.stops!r}\n"
            f"  model: {sorted(self.model, key=repr)!r}\n  events: {self.rec.events!r}"
        ) from cause


@dataclass(frozen=True)
class Property:
    """A named property of a run: ``check(result)`` returns ``None`` or a failure message."""

    name: str
    check: Callable[[RunResult], str | None]


# --------------------------------------------------------------------------- the run itself


def _receiver_contract(r: RunResult) -> str | None:
    # A violation the receiver saw (and raised) comes first; it raises it again here.
    r.rec.check()
    return None


#: What the library's operations say when they are completed a second time.
_COMPLETED_TWICE = "called after the operation had already completed"


def _nothing_raised(r: RunResult) -> str | None:
    e = r.raised
    if e is None:
        return None
    where = ""
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is not None:
        where = f" at {tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}"
    if isinstance(e, RuntimeError) and _COMPLETED_TWICE in str(e):
        # The library's operation is not at fault: it detected that whatever is
        # below it in the tree completed it a second time (and raised, as it must).
        raise AssertionError(
            f"second completion: {e}{where}. Something below that operation in the "
            "tree completed it twice (an operation completes exactly once, "
            "[exec.async.ops]); look for a completion made from a stop callback, or "
            "both by an adaptor and by its child"
        ) from e
    raise AssertionError(
        f"the run raised {type(e).__name__}: {e}{where}; start() and completion "
        "functions must not raise ([exec.opstate.start], [exec.set.value])"
    ) from e


def _no_terminate(r: RunResult) -> str | None:
    if not r.terminate_calls:
        return None
    reason, exc = r.terminate_calls[0]
    return f"terminate handler called: {reason} ({exc!r})"


def _no_hang(r: RunResult) -> str | None:
    return r.hung


_CLOSE_UNSTARTED = (
    "(an adaptor that drops a child operation unstarted must close() it: "
    "the senders guide, 'Writing your own sender')"
)


def _coroutines_closed(r: RunResult) -> str | None:
    if not r.unclosed_coroutines or r.allow_gc:
        return None
    return (
        f"{r.unclosed_coroutines[0]}: a coroutine connected as a sender but never "
        f"started was left to the garbage collector instead of being closed {_CLOSE_UNSTARTED}"
    )


def _no_gc_reliance(r: RunResult) -> str | None:
    if not r.gc_needed or r.allow_gc:
        return None
    return (
        f"{r.gc_needed[0]} completed only after gc.collect(): an association was "
        f"released by the garbage collector, not at a defined moment {_CLOSE_UNSTARTED}"
    )


def _completes_once(r: RunResult) -> str | None:
    if r.rec.completions != 1:
        return f"completed {r.rec.completions} times ([exec.async.ops])"
    return None


def _callbacks_gone_at_completion(r: RunResult) -> str | None:
    if r.rec.live_callbacks_at_completion:
        return "stop callbacks still registered at completion ([exec.recv.concepts])"
    return None


def _modelled_outcome(r: RunResult) -> str | None:
    if r.rec.outcome not in r.model:
        return f"outcome {r.rec.outcome!r} is not one the model allows"
    return None


def _declared_scheduler(r: RunResult) -> str | None:
    sch = r.declared_value_scheduler
    rec = r.rec
    if not isinstance(sch, ManualScheduler) or rec.kind != "value" or rec.scheduler is sch:
        return None
    return (
        f"the sender declares get_completion_scheduler[set_value_t] == {sch!r} but "
        f"completed on {rec.scheduler!r} ([exec.get.compl.sched])"
    )


# --------------------------------------------------------------------------- detached work


def _spawned_work_modelled(r: RunResult) -> str | None:
    for node, o in r.spawn_log:
        assert isinstance(node, Spawn)
        allowed = node.work_outcomes(r.plan)
        if o not in allowed:
            return (
                f"spawned work {node.work.code()} completed with {o!r}, model allows "
                f"{sorted(allowed, key=repr)!r}"
            )
    return None


def _counts(nodes: list[Node]) -> dict[int, int]:
    out: dict[int, int] = {}
    for node in nodes:
        out[id(node)] = out.get(id(node), 0) + 1
    return out


def _spawned_work_completes_once(r: RunResult) -> str | None:
    if _counts([n for n, _ in r.spawn_log]) != _counts(r.spawned):
        return (
            f"{len(r.spawned)} spawn() calls but {len(r.spawn_log)} completions of "
            "spawned work: work was lost or completed twice"
        )
    return None


def _future_failure(f: FutureRecord, plan: Plan) -> str | None:
    if f.work is None and f.node.late and f.consumer in (None, STOPPED):
        return None  # refused by a joined scope: the work never ran ([exec.spawn.future])
    if f.work is None:
        return f"the work of {f.node.code()} never completed, but its scope was joined"
    # The work may be abandoned (a stop request) whenever its consumer is stopped.
    allowed = f.node.child.outcomes(MAYBE, plan)
    if f.work not in allowed:
        return (
            f"the work of {f.node.code()} completed with {f.work!r}, model allows "
            f"{sorted(allowed, key=repr)!r}"
        )
    if f.consumer is not None and f.consumer not in (f.work, STOPPED):
        return (
            f"the consumer of {f.node.code()} received {f.consumer!r} but the work "
            f"completed with {f.work!r} ([exec.spawn.future])"
        )
    return None


def _futures_modelled(r: RunResult) -> str | None:
    # The work completed with a modelled outcome; the consumer received it unless it was
    # stopped (docs/scopes.md "Futures outlive their work").
    for f in r.futures:
        msg = _future_failure(f, r.plan)
        if msg is not None:
            return msg
    return None


# --------------------------------------------------------------------------- scopes


def _leaf_exceptions(e: BaseException) -> list[BaseException]:
    if isinstance(e, BaseExceptionGroup):
        out: list[BaseException] = []
        for x in e.exceptions:
            out.extend(_leaf_exceptions(x))
        return out
    return [e]


def _failed_work(r: RunResult, i: int, consumed: bool) -> list[object]:
    """Errors of scope ``i``'s futures whose consumer did (``consumed``) or did not receive them."""
    return [
        f.work[1]
        for f in r.futures
        if f.node.scope == i
        and f.work is not None
        and f.work[0] == "error"
        and (f.consumer == f.work) is consumed
    ]


def _expected_join_errors(r: RunResult, i: int, j: RecordingReceiver) -> list[object]:
    """The errors the join of scope ``i`` must report: those of spawned work and futures that
    nobody received (the scopes guide "What happens when things fail")."""
    expected = [
        o[1]
        for n, o in r.spawn_log
        if isinstance(n, Spawn) and not n.catch and o[0] == "error" and n.scope == i
    ]
    expected += _failed_work(r, i, consumed=False)
    # An error of a finished future that its consumer received only after the join
    # delivered is reported by the join as well ([exec.spawn.future]: the association
    # ends with the work, and the join reports what nobody had consumed by then).
    maybe = _failed_work(r, i, consumed=True)
    if j.kind == "error" and maybe:
        got = _leaf_exceptions(j.error)
        for e in maybe:
            if sum(g is e for g in got) > sum(x is e for x in expected):
                expected.append(e)
    return expected


def _join_failure(r: RunResult, i: int, j: RecordingReceiver) -> str | None:
    j.check()
    if j.completions != 1:
        return f"join of scope {i} completed {j.completions} times"
    expected = _expected_join_errors(r, i, j)
    if not expected:
        if j.outcome != ("value", ()):
            return f"join of scope {i} completed {j.outcome!r}, not value()"
        return None
    if j.kind != "error":
        return (
            f"join of scope {i} completed {j.outcome!r}; spawned work failed with "
            f"{expected!r} and nobody received those errors (a scope reports "
            "them, like a nursery: the scopes guide)"
        )
    got = _leaf_exceptions(j.error)
    if sorted(map(id, got)) != sorted(map(id, expected)):
        return (
            f"join of scope {i} reported {got!r}, expected exactly {expected!r} (the scopes guide)"
        )
    return None


def _joins_report_unreceived_errors(r: RunResult) -> str | None:
    for i, j in enumerate(r.joins):
        msg = _join_failure(r, i, j)
        if msg is not None:
            return msg
    return None


def _scopes_count_zero(r: RunResult) -> str | None:
    for i, scope in enumerate(r.scopes):
        if scope.count != 0:
            return f"scope {i} still counts {scope.count} associations"
    return None


def _associations_released(r: RunResult) -> str | None:
    for i, tok in enumerate(r.tokens):
        if isinstance(tok, CountingToken) and (tok.underflow or tok.granted != tok.released):
            return (
                f"scope {i} granted {tok.granted} associations but {tok.released} were "
                "released ([exec.scope.concepts], [exec.counting.scopes])"
            )
    return None


def _stop_callbacks_gone(r: RunResult) -> str | None:
    for name, src in r.sources:
        live = len(src._callbacks)
        if live:
            return (
                f"{live} stop callback(s) still registered on {name} after every operation "
                "completed ([exec.recv.concepts])"
            )
    return None


#: The properties :meth:`RunResult.check` asserts, in the order it evaluates them.
PROPERTIES: tuple[Property, ...] = (
    Property("receiver-contract", _receiver_contract),
    Property("nothing-raised", _nothing_raised),
    Property("no-terminate", _no_terminate),
    Property("no-lost-completion", _no_hang),
    Property("coroutines-closed", _coroutines_closed),
    Property("no-gc-reliance", _no_gc_reliance),
    Property("completes-once", _completes_once),
    Property("callbacks-gone-at-completion", _callbacks_gone_at_completion),
    Property("modelled-outcome", _modelled_outcome),
    Property("declared-completion-scheduler", _declared_scheduler),
    Property("spawned-work-modelled", _spawned_work_modelled),
    Property("spawned-work-completes-once", _spawned_work_completes_once),
    Property("futures-modelled", _futures_modelled),
    Property("joins-report-unreceived-errors", _joins_report_unreceived_errors),
    Property("scopes-count-zero", _scopes_count_zero),
    Property("associations-released", _associations_released),
    Property("stop-callbacks-gone", _stop_callbacks_gone),
)
