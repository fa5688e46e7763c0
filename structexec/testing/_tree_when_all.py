"""The ``when_all`` node and its model ([exec.when.all])."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import structexec as sx

from ._tree_base import (
    ALREADY,
    ASYNC,
    INLINE,
    MAYBE,
    NEVER,
    STOPPED,
    UNKNOWN,
    Node,
    Outcome,
    Outcomes,
    Plan,
    World,
    _fails,
)

if TYPE_CHECKING:
    from .._core._protocol import Sender


#: How a when_all's start went so far: ``"ok"``, ``"stopped"`` or the first error outcome.
_Disposition = str | Outcome
#: Per child: ``("v", datums)``, ``("x", ())`` for a failed child, ``("p", (mode,))`` pending.
_Part = tuple[str, tuple[object, ...]]
_State = tuple[_Disposition, tuple[_Part, ...]]


@dataclass(eq=False, repr=False)
class WhenAll(Node):
    """``sx.when_all(*children)`` or, with ``variant``, ``sx.when_all_with_variant``.

    Model ([exec.when.all]): stop before start gives stopped; children that complete
    inside ``start`` do so in argument order, and the first error among them is final;
    children that complete later may complete in any order; the first error wins, an error
    beats stopped, and a stop request reaches the remaining children (through when_all's own
    stop source) once a child has failed.
    """

    children: tuple[Node, ...]
    variant: bool = False
    kind: ClassVar[str] = "when_all"

    def build(self, w: World) -> Sender[object]:
        f = sx.when_all_with_variant if self.variant else sx.when_all
        return f(*(c.build(w) for c in self.children))

    def kids(self) -> tuple[Node, ...]:
        return self.children

    def code(self) -> str:
        name = "when_all_with_variant" if self.variant else "when_all"
        return f"sx.{name}({', '.join(c.code() for c in self.children)})"

    def _part(self, o: Outcome) -> tuple[object, ...]:
        args: tuple[object, ...] = o[1]
        return (args,) if self.variant else args

    def timing(self, mode: int, plan: Plan) -> str:
        if mode == ALREADY:
            return INLINE
        # Simulate ``start`` (phase 1 of ``outcomes``): a child started after an inline
        # sibling failed sees when_all's stop request at once (mode ALREADY), so it may
        # complete inline even though it would be asynchronous on its own.
        states: set[tuple[_Disposition, bool]] = {("ok", False)}  # (disposition, a child pending)
        for c in self.children:
            nxt: set[tuple[_Disposition, bool]] = set()
            for disp, pend in states:
                cmode = mode if disp == "ok" else ALREADY
                t = c.timing(cmode, plan)
                if t == UNKNOWN:
                    return UNKNOWN
                if t == INLINE:
                    nxt.update((self._step(disp, (), o)[0], pend) for o in c.outcomes(cmode, plan))
                else:
                    nxt.add((disp, True))
            states = nxt
        pending = {pend for _, pend in states}
        if pending == {True}:
            return ASYNC
        return INLINE if pending == {False} else UNKNOWN

    def outcomes(self, mode: int, plan: Plan) -> Outcomes:
        if mode == ALREADY:
            return frozenset({STOPPED})
        res: set[Outcome] = set()
        if mode == MAYBE:
            res.add(STOPPED)  # stop requested before start: no child is started
        kids = self.children
        can_fail = mode == MAYBE or any(_fails(c.outcomes(mode, plan)) for c in kids)
        late_mode = MAYBE if can_fail else NEVER
        modes = {mode, max(mode, late_mode), ALREADY}
        if any(c.timing(m, plan) == UNKNOWN for c in kids for m in modes):
            return frozenset(res | self._coarse(mode, late_mode, plan))
        for disp, parts in self._started(mode, plan):
            res |= self._finished(disp, parts, late_mode, plan)
        return frozenset(res)

    def _started(self, mode: int, plan: Plan) -> set[_State]:
        """Phase 1: children started in order; inline ones complete at once.

        A state: ``(disposition, parts)`` where the disposition is ``"ok"``, ``"stopped"`` or
        ``("error", e)`` and ``parts`` holds, per child, ``("v", datums)``, ``("x", ())`` for a
        failed child, or ``("p", (mode,))`` for a pending child started under stop mode ``mode``.
        """
        states: set[_State] = {("ok", ())}
        for c in self.children:
            nxt: set[_State] = set()
            for disp, parts in states:
                cmode = mode if disp == "ok" else ALREADY
                if c.timing(cmode, plan) == INLINE:
                    for o in c.outcomes(cmode, plan):
                        nxt.add(self._step(disp, parts, o))
                else:
                    nxt.add((disp, (*parts, ("p", (cmode,)))))
            states = nxt
        return states

    def _finished(
        self, disp: _Disposition, parts: tuple[_Part, ...], late_mode: int, plan: Plan
    ) -> set[Outcome]:
        """Phase 2: pending children complete in any order. Until the first failure nobody
        requests stop, so the first child to fail does so "naturally" (under the mode it
        started with); later ones may also see the stop request that failure made."""
        if isinstance(disp, tuple):
            return {disp}  # the first inline error is final ([exec.when.all])
        kids = self.children
        pend = [
            (i, m) for i, (k, d) in enumerate(parts) if k == "p" for m in d if isinstance(m, int)
        ]
        late = {i: kids[i].outcomes(max(m, late_mode), plan) for i, m in pend}
        if disp == "stopped":
            # An inline child stopped: every pending child may see the stop request.
            return {STOPPED} | {o for i, _ in pend for o in late[i] if o[0] == "error"}
        # Nothing failed during start.
        natural = {i: kids[i].outcomes(m, plan) for i, m in pend}
        return _first_failures(natural, late) | self._all_values(parts, natural)

    def _all_values(self, parts: tuple[_Part, ...], natural: dict[int, Outcomes]) -> set[Outcome]:
        """Every pending child completes with a value: the datums in argument order."""
        res: set[Outcome] = set()
        values_only = [
            sorted((o for o in outs if o[0] == "value"), key=repr) for outs in natural.values()
        ]
        for combo in itertools.product(*values_only):
            filled = list(parts)
            for i, o in zip(natural, combo):
                filled[i] = ("v", self._part(o))
            res.add(("value", tuple(x for p in filled for x in p[1])))
        return res

    def _step(self, disp: _Disposition, parts: tuple[_Part, ...], o: Outcome) -> _State:
        if o[0] == "error":
            if not isinstance(disp, tuple):
                disp = o  # the first error wins, and beats stopped ([exec.when.all])
            return disp, (*parts, ("x", ()))
        if o[0] == "stopped":
            return ("stopped" if disp == "ok" else disp), (*parts, ("x", ()))
        return disp, (*parts, ("v", self._part(o)))

    def _coarse(self, mode: int, late_mode: int, plan: Plan) -> set[Outcome]:
        # Completion order unknown: every child may see a stop request if any may fail.
        m = max(mode, late_mode)
        sets = [c.outcomes(m, plan) for c in self.children]
        res: set[Outcome] = set()
        for s in sets:
            res.update(o for o in s if o[0] == "error")
        if any(o[0] == "stopped" for s in sets for o in s):
            res.add(STOPPED)
        for combo in itertools.product(
            *([o for o in sorted(s, key=repr) if o[0] == "value"] for s in sets)
        ):
            res.add(("value", tuple(x for o in combo for x in self._part(o))))
        return res


def _first_failures(natural: dict[int, Outcomes], late: dict[int, Outcomes]) -> set[Outcome]:
    """The outcomes when pending child ``i`` fails first ("naturally"): its error, or stopped,
    after which a later error of another pending child still wins ([exec.when.all])."""
    res: set[Outcome] = set()
    for i, outs in natural.items():
        for o in outs:
            if o[0] == "error":
                res.add(o)  # i failed first
            elif o[0] == "stopped":
                res.add(STOPPED)  # i stopped first; a later error still wins
                for j, others in late.items():
                    if j != i:
                        res.update(x for x in others if x[0] == "error")
    return res
