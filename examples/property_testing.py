"""Property-testing cancellation: hypothesis finds a bug in a hand-written sender.

Run it:  python examples/property_testing.py

`stop_quickly(sndr)` is an adaptor a trio programmer might write: "when someone asks me to
stop, complete at once instead of waiting for the slow work". The tests a person would write
by hand pass. Then `structexec.testing.strategies` mixes the adaptor into thousands of random
sender trees, requests stops at random steps and runs the scheduler queues in random orders,
and finds the bug: the operation completes twice (once stopped, from the stop callback, and
once more when its child finishes). The fixed adaptor passes the same property.
docs/testing.md walks through this example.
"""

from __future__ import annotations

from typing import Any

from hypothesis import Verbosity, given, settings

import structexec as sx
from structexec.testing import ManualScheduler, RecordingReceiver, record_terminate
from structexec.testing import strategies as sxst

# ----------------------------------------------------------------------------- the adaptor


class _StopQuicklyOp:
    """Operation state of stop_quickly; it is also the receiver of the child."""

    def __init__(self, child: Any, rcvr: Any, fixed: bool) -> None:
        self.rcvr = rcvr
        self.fixed = fixed
        self.cb: Any = None
        self.op = sx.connect(child, self)

    def get_env(self) -> Any:
        return sx.get_env(self.rcvr)  # the child sees our receiver's stop token

    def start(self) -> None:
        if not self.fixed:
            # BUG: complete as soon as stop is requested, without waiting for the child.
            token = sx.get_stop_token(sx.get_env(self.rcvr))
            self.cb = sx.stop_callback_for(token, self.rcvr.set_stopped)
        # FIX: register nothing. The child sees the same stop token; it will complete
        # (stopped, most likely) and we forward that. An operation completes exactly once,
        # and never before its children ([exec.async.ops]).
        self.op.start()

    def _deregister(self) -> None:
        cb, self.cb = self.cb, None
        if cb is not None:
            cb.close()  # stop callbacks are deregistered before completing

    def set_value(self, *vals: Any) -> None:
        self._deregister()
        self.rcvr.set_value(*vals)

    def set_error(self, err: Any) -> None:
        self._deregister()
        self.rcvr.set_error(err)

    def set_stopped(self) -> None:
        self._deregister()
        self.rcvr.set_stopped()


class StopQuickly(sx.Sender[Any]):
    def __init__(self, child: Any, fixed: bool = False) -> None:
        self.child = child
        self.fixed = fixed

    def connect(self, rcvr: Any) -> _StopQuicklyOp:
        return _StopQuicklyOp(self.child, rcvr, self.fixed)


def stop_quickly(sndr: Any) -> StopQuickly:
    return StopQuickly(sndr)


def stop_quickly_fixed(sndr: Any) -> StopQuickly:
    return StopQuickly(sndr, fixed=True)


# ----------------------------------------------------------------------------- hand tests


def hand_written_tests() -> None:
    # The obvious tests pass, even with the bug.
    assert sx.sync_wait(stop_quickly(sx.just(42))) == (42,)
    assert sx.sync_wait(stop_quickly(sx.just_stopped())) is None  # stopped
    rec = RecordingReceiver()
    rec.run(stop_quickly(sx.just(1) | sx.then(lambda x: x + 1)))
    rec.request_stop()  # after completion: nothing happens
    assert rec.value == (2,) and rec.live_callbacks_at_completion == 0
    print("hand-written tests: pass")


# ----------------------------------------------------------------------------- the property


def find_bug(adaptor: sxst.Adaptor) -> str | None:
    """Run the cancellation property over trees that contain ``adaptor``; return the failure."""

    # derandomize: the same 500 trees on every run (reproducible; the database is not used).
    # Only trees whose operations run on this thread, so that each run of an example behaves
    # the same way (docs/testing.md, "Keeping the test reproducible").
    @settings(
        max_examples=500,
        deadline=None,
        derandomize=True,
        verbosity=Verbosity.quiet,
        report_multiple_bugs=False,
    )
    @given(
        sxst.trees_with_stop_schedules(
            kinds=sxst.SYNC_KINDS - {"thread_hop", "parallel_hop"},
            adaptors=[adaptor],
            scopes=(),
            from_threads=False,
        ),
        sxst.interleavings(),
    )
    def every_tree_completes_once(
        case: tuple[sxst.Tree, sxst.StopSchedule], order: sxst.Interleaving
    ) -> None:
        tree, stops = case
        sxst.run_tree(tree, stops, order).check()

    try:
        every_tree_completes_once()
    except AssertionError as e:
        return str(e)
    return None


def main() -> None:
    hand_written_tests()

    # The model of the adaptor: whatever its child completes with, or stopped when a stop
    # request may arrive (the default model of sxst.Adaptor).
    broken = sxst.Adaptor("stop_quickly", stop_quickly)
    # A double completion is a contract violation; when it happens on a pool thread the
    # library calls the terminate handler, which by default aborts the process (as C++ calls
    # std::terminate). Record those calls instead, so hypothesis sees a failing example.
    with record_terminate():
        failure = find_bug(broken)
    assert failure is not None, "the property should have found the bug"
    print("\nproperty over random trees, stop schedules and interleavings: FAILS")
    print("hypothesis shrank the failure to:")
    for line in failure.splitlines():
        print("   ", line)

    # Replay the shrunk case by hand: stop requested before start.
    rec = RecordingReceiver()
    rec.request_stop()
    try:
        # start() registers the stop callback, which runs at once and completes stopped;
        # then the child, started anyway, completes with its value.
        rec.run(stop_quickly(sx.just()))
    except AssertionError as e:
        print(f"\nreplayed by hand: {e}")
    print(f"events: {rec.events}")

    # Another way to hit it: the stop arrives while the child waits on a scheduler.
    sch = ManualScheduler()
    rec = RecordingReceiver()
    rec.run(stop_quickly(sx.schedule(sch)))
    rec.request_stop()  # completes stopped at once, from the stop callback...
    try:
        sch.run_one()  # ...and the child, which saw the same stop request, completes too
    except AssertionError as e:
        print(f"and with a scheduler hop: {e}")

    fixed = sxst.Adaptor("stop_quickly_fixed", stop_quickly_fixed)
    with record_terminate() as calls:
        assert find_bug(fixed) is None
    assert not calls.calls, calls.calls
    print("\nthe fixed adaptor passes the same property (500 trees)")


if __name__ == "__main__":
    main()
