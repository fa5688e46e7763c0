"""Random sequence pipelines and a model of their outcomes (the streams guide, the testing guide).

A :class:`Pipeline` is a source of ints, a list of stages and a consumer, with the items that
fail and an optional stop point (a stop request on the consumer's token when the k-th value
reaches the consumer). :meth:`Pipeline.build` makes the sequence and the consumer sender;
:meth:`Pipeline.model` predicts the outcome by a plain loop over the source. Under
``sync_wait`` every item completes inside its ``start``, so a run is deterministic and must
agree exactly with the model, whatever the ``max_concurrency`` of the stages; under trio
(:meth:`Pipeline.build` with ``trio=True``: the ``let_each`` stages await a checkpoint) a
stage with ``max_concurrency > 1`` and ``ordered=False`` may deliver in another order, which
:meth:`Outcome.agrees` allows for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import trio

from .._algorithms._just import just, just_error
from .._algorithms._write_env import write_env
from .._core._env import prop
from .._core._errors import Stopped
from .._core._queries import get_stop_token
from .._core._stop_token import inplace_stop_source
from .._schedulers._sync_wait import sync_wait
from .._sequence._consume import reduce
from .._sequence._filter_each import filter_each
from .._sequence._iterate import iterate
from .._sequence._take import take
from .._sequence._transform_each import let_each, then_each

if TYPE_CHECKING:
    from .._core._protocol import Sender

__all__ = ["Outcome", "Pipeline", "Stage", "StageFailure", "run_pipeline", "run_pipeline_trio"]


class StageFailure(ValueError):
    """The error raised by a failing item of a random pipeline; ``.value`` is the item."""

    def __init__(self, value: int) -> None:
        super().__init__(f"item {value} fails")
        self.value = value


@dataclass(frozen=True)
class Stage:
    """One adaptor: ``kind`` is ``"then_each"`` (add ``arg``), ``"filter_each"`` (keep the
    values divisible by ``arg``), ``"let_each"`` (identity, failing for the values in
    ``fail``; ``max_concurrency`` ``arg``, ``ordered``) or ``"take"`` (``arg`` items)."""

    kind: str
    arg: int
    ordered: bool = False
    fail: frozenset[int] = frozenset()


@dataclass(frozen=True)
class Outcome:
    """``kind`` is ``"value"`` (``values`` collected by the consumer), ``"error"`` (``error``
    is the ``StageFailure`` value, or ``-1`` for a failing source) or ``"stopped"``."""

    kind: str
    values: tuple[int, ...] = ()
    error: int | None = None
    #: A concurrent stage may complete items in another order (trio runs).
    unordered: bool = False
    #: ... and a ``take`` after it may then let other items through (only the count holds).
    any_subset: bool = False
    #: ... and a failing item, a failing source or a stop point may be reached in another
    #: order, so the kind of outcome may differ too.
    racy: bool = False

    def agrees(self, other: Outcome) -> bool:
        """Does the observed outcome ``other`` agree with this modelled one?"""
        if self.kind != other.kind:
            # Under concurrency a failing item may be reached before a stop point or a take.
            return self.racy
        if self.kind == "value":
            if self.racy:
                return True
            if self.any_subset:
                return len(self.values) == len(other.values)
            if self.unordered:
                return sorted(self.values) == sorted(other.values)
            return self.values == other.values
        if self.kind == "error":
            return self.unordered or self.error == other.error
        return True


@dataclass(frozen=True)
class Pipeline:
    """A random pipeline: ``source`` values, ``stages``, a stop point, a failing source."""

    source: tuple[int, ...]
    stages: tuple[Stage, ...] = ()
    #: Request stop on the consumer's token when this many values reached it (None: never).
    stop_at: int | None = None
    #: The source (a generator) raises after this many values (None: never).
    source_fails_at: int | None = None
    closed: list[str] = field(default_factory=list, compare=False, hash=False)

    # -- the model ---------------------------------------------------------------------

    def _loose(self) -> bool:
        return any(s.kind == "let_each" and s.arg > 1 and not s.ordered for s in self.stages)

    def _races(self) -> bool:
        # A stage with max_concurrency > 1 pulls ahead of its deliveries under trio (ordered
        # or not), so a failure or a stop may be reached before the items in front of it.
        ahead = any(s.kind == "let_each" and s.arg > 1 for s in self.stages)
        return ahead and (
            self.stop_at is not None
            or self.source_fails_at is not None
            or any(s.fail for s in self.stages)
        )

    def _through_stages(self, x: int, taken: list[int]) -> tuple[int, bool, bool, bool]:
        """Source item ``x`` through the stages: ``(datum, passed, ended, failed)``; ``ended``
        when a ``take`` reached its count, ``failed`` when a ``let_each`` failed on ``datum``."""
        v = x
        end_after = False
        for k, s in enumerate(self.stages):
            if s.kind == "then_each":
                v += s.arg
            elif s.kind == "filter_each":
                if v % s.arg:
                    return v, False, end_after, False
            elif s.kind == "let_each":
                if v in s.fail:
                    return v, False, end_after, True
            elif s.kind == "take":
                taken[k] += 1
                end_after = end_after or taken[k] == s.arg
        return v, True, end_after, False

    def model(self, *, trio: bool = False) -> Outcome:
        """The outcome a run must have (``trio=True``: the looser rule of a trio run, where a
        concurrent stage may complete items in another order)."""
        loose = trio and self._loose()
        if trio and self._races():
            return Outcome("value", unordered=True, any_subset=True, racy=True)
        has_take = any(s.kind == "take" for s in self.stages)
        if any(s.kind == "take" and s.arg == 0 for s in self.stages):
            return Outcome("value", (), unordered=loose, any_subset=False)
        fails_at = self.source_fails_at
        src = self.source if fails_at is None else self.source[:fails_at]
        taken = [0] * len(self.stages)
        got: list[int] = []
        for x in src:
            v, passed, end_after, failed = self._through_stages(x, taken)
            if failed:
                return Outcome("error", error=v, unordered=loose)
            if passed:
                got.append(v)
                if self.stop_at is not None and len(got) >= self.stop_at:
                    return Outcome("stopped", unordered=loose)
            if end_after:
                return Outcome("value", tuple(got), unordered=loose, any_subset=loose and has_take)
        if fails_at is not None:
            return Outcome("error", error=-1, unordered=loose)
        return Outcome("value", tuple(got), unordered=loose)

    def source_closed(self) -> bool:
        """Is the source's generator finished (exhausted or closed) after a run? Not when a
        ``take(0)`` kept the source from ever starting."""
        return not any(s.kind == "take" and s.arg == 0 for s in self.stages)

    # -- running -------------------------------------------------------------------------

    def _gen(self) -> Iterator[int]:
        try:
            for i, x in enumerate(self.source):
                if self.source_fails_at is not None and i >= self.source_fails_at:
                    raise StageFailure(-1)
                yield x
            if self.source_fails_at is not None and len(self.source) >= self.source_fails_at:
                raise StageFailure(-1)
        finally:
            self.closed.append("source")

    def build(self, *, trio: bool = False) -> tuple[Sender[list[int]], inplace_stop_source]:
        """``(consumer_sender, stop_source)``: the pipeline collected by ``reduce`` into a
        list, with the stop source whose token the consumer sees."""
        seq: Any = iterate(self._gen())
        for s in self.stages:
            if s.kind == "then_each":
                seq = seq | then_each(_Add(s.arg))
            elif s.kind == "filter_each":
                seq = seq | filter_each(_Divisible(s.arg))
            elif s.kind == "let_each":
                f: Any = _AsyncCheck(s.fail) if trio else _Check(s.fail)
                seq = seq | let_each(f, max_concurrency=s.arg, ordered=s.ordered)
            elif s.kind == "take":
                seq = seq | take(s.arg)
            else:  # pragma: no cover - a Stage made by hand
                raise ValueError(f"unknown stage kind {s.kind!r}")
        src = inplace_stop_source()
        stop_at = self.stop_at

        def collect(acc: list[int], v: int) -> list[int]:
            acc.append(v)
            if stop_at is not None and len(acc) >= stop_at:
                src.request_stop()
            return acc

        acc: list[int] = []
        consumer = write_env(reduce(seq, collect, acc), prop(get_stop_token, src.get_token()))
        return consumer, src


class _Add:
    __slots__ = ("k",)

    def __init__(self, k: int) -> None:
        self.k = k

    def __call__(self, v: int) -> int:
        return v + self.k


class _Divisible:
    __slots__ = ("m",)

    def __init__(self, m: int) -> None:
        self.m = m

    def __call__(self, v: int) -> bool:
        return v % self.m == 0


class _Check:
    __slots__ = ("fail",)

    def __init__(self, fail: frozenset[int]) -> None:
        self.fail = fail

    def __call__(self, v: int) -> Sender[int]:
        if v in self.fail:
            return just_error(StageFailure(v))
        return just(v)


class _AsyncCheck:
    __slots__ = ("fail",)

    def __init__(self, fail: frozenset[int]) -> None:
        self.fail = fail

    async def __call__(self, v: int) -> int:
        await trio.lowlevel.checkpoint()
        if v in self.fail:
            raise StageFailure(v)
        return v


def _outcome(run: Callable[[], tuple[list[int]] | list[int] | None]) -> Outcome:
    try:
        r = run()
    except StageFailure as e:
        return Outcome("error", error=e.value)
    except Stopped:
        return Outcome("stopped")
    if r is None:
        return Outcome("stopped")
    return Outcome("value", tuple(r[0] if isinstance(r, tuple) else r))


def run_pipeline(p: Pipeline) -> Outcome:
    """Run ``p`` under ``sync_wait`` and return what happened."""
    consumer, _ = p.build()
    return _outcome(lambda: sync_wait(consumer))


async def run_pipeline_trio(p: Pipeline) -> Outcome:
    """Run ``p`` by awaiting it in the current trio task and return what happened."""
    consumer, _ = p.build(trio=True)
    try:
        r = await consumer
    except StageFailure as e:
        return Outcome("error", error=e.value)
    except Stopped:
        return Outcome("stopped")
    return Outcome("value", tuple(r))
