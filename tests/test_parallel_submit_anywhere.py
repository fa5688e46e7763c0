"""``schedule(sch) | bulk(...)`` on a backend that only submits its bulk work elsewhere
(``_sx_submit_anywhere``, docs/internals.md §2): the bulk work is handed to the backend on the
thread that starts the operation, without the ``schedule`` hop ([exec.par.scheduler],
[exec.sysctxrepl.psb]); a backend that says "not now", or has no such attribute, gets the hop.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

import structexec as sx
from structexec.backends import BackendError, ProcessPoolBackend
from structexec.testing import RecordingReceiver


class _Submitter(sx.system_context_replaceability.parallel_scheduler_backend):
    """Records where its methods run; bulk work is 'submitted' to a thread of its own. No
    ``_sx_submit_anywhere`` on the class: the hop is always taken."""

    def __init__(self, anywhere: bool | None) -> None:
        self.anywhere = anywhere
        self.calls: list[tuple[str, str]] = []

    def schedule(self, r: Any, s: memoryview) -> None:
        self.calls.append(("schedule", threading.current_thread().name))
        threading.Thread(target=r.set_value, name="submitter-agent").start()

    def schedule_bulk_chunked(self, n: int, r: Any, s: memoryview) -> None:
        self.calls.append(("bulk", threading.current_thread().name))

        def run() -> None:
            tok = r.try_query(sx.get_stop_token)
            if tok is not None and tok.stop_requested():
                r.set_stopped()
                return
            r.execute(0, n)
            r.set_value()

        threading.Thread(target=run, name="submitter-agent").start()

    schedule_bulk_unchunked = schedule_bulk_chunked


class _Anywhere(_Submitter):
    """The attribute on the class, as RemoteBackend has it; its value read at start."""

    @property
    def _sx_submit_anywhere(self) -> bool:
        return bool(self.anywhere)


def _run(backend: _Submitter) -> list[int]:
    out = [0] * 8
    sch = sx.parallel_scheduler(backend)

    def fill(i: int) -> None:
        out[i] = i + 1

    sx.sync_wait(sx.schedule(sch) | sx.bulk(sx.par, 8, fill))
    return out


def test_a_submit_anywhere_backend_gets_the_work_on_the_starting_thread() -> None:
    b = _Anywhere(True)
    assert _run(b) == list(range(1, 9))
    assert b.calls == [("bulk", threading.current_thread().name)]


@pytest.mark.parametrize("backend", [_Anywhere(False), _Submitter(None)], ids=["not-now", "absent"])
def test_otherwise_the_schedule_hop_is_taken(backend: _Submitter) -> None:
    assert _run(backend) == list(range(1, 9))
    assert backend.calls == [
        ("schedule", threading.current_thread().name),
        ("bulk", "submitter-agent"),
    ]


def test_only_a_schedule_of_the_same_backend_is_skipped() -> None:
    b = _Anywhere(True)
    sch = sx.parallel_scheduler(b)
    other = sx.parallel_scheduler(_Anywhere(True))
    out = [0] * 4
    sx.sync_wait(
        sx.just(out)
        | sx.continues_on(sch)
        | sx.bulk(sx.par, 4, lambda i, o: o.__setitem__(i, 1))
    )
    assert out == [1] * 4
    assert [c[0] for c in b.calls] == ["schedule", "bulk"]
    sx.sync_wait(sx.schedule(other) | sx.continues_on(sch) | sx.bulk(sx.par, 4, lambda i: None))
    assert [c[0] for c in b.calls] == ["schedule", "bulk", "schedule", "bulk"]


def test_stop_before_start_and_an_unstarted_operation() -> None:
    b = _Anywhere(True)
    sch = sx.parallel_scheduler(b)
    rec = RecordingReceiver()
    rec.request_stop()
    rec.run(sx.schedule(sch) | sx.bulk(sx.par, 4, lambda i: None))
    rec.wait()
    assert rec.stopped
    op = sx.connect(sx.schedule(sch) | sx.bulk(sx.par, 4, lambda i: None), RecordingReceiver())
    op.close()  # never started: nothing was connected, nothing to release
    assert [c[0] for c in b.calls] == ["bulk"]


def noop(i: int) -> None:
    pass


def test_process_pool_submits_from_the_caller_once_its_workers_run() -> None:
    with ProcessPoolBackend(1) as backend:
        sch = sx.parallel_scheduler(backend)
        assert backend._sx_submit_anywhere is False  # no executor yet: the hop starts it
        sx.sync_wait(sx.schedule(sch) | sx.bulk(sx.par, 2, noop))
        assert backend._sx_submit_anywhere is True
        rec = RecordingReceiver()
        rec.request_stop()
        rec.run(sx.schedule(sch) | sx.bulk(sx.par, 2, noop))
        rec.wait()
        assert rec.stopped
    assert backend._sx_submit_anywhere is False  # shut down: the hop reports it
    with pytest.raises(BackendError):
        sx.sync_wait(sx.schedule(sch) | sx.bulk(sx.par, 2, noop))
