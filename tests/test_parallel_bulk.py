"""bulk, bulk_chunked, bulk_unchunked on a parallel scheduler, and the backend bulk contract.

[exec.bulk], [exec.sysctxrepl.psb]; [exec.par.scheduler],
[exec.sysctxrepl.psb]; P2079R7 §3 ex.3 (example E20), §5.7 (no allocation per index).
"""

from __future__ import annotations

import threading
import time
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import structexec as sx
from structexec.backends import ThreadPoolBackend
from structexec.backends._thread_pool import _plan
from structexec.testing import RecordingReceiver

scr = sx.system_context_replaceability


@pytest.fixture(scope="module")
def pool() -> Iterator[ThreadPoolBackend]:
    with ThreadPoolBackend(2, thread_name_prefix="bulk-pool") as p:
        yield p


@pytest.fixture(scope="module")
def pool1() -> Iterator[ThreadPoolBackend]:
    with ThreadPoolBackend(1, thread_name_prefix="bulk-pool1") as p:
        yield p


class RecordingBackend(scr.parallel_scheduler_backend):
    """Runs everything inline on the calling thread and records what it was asked."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def schedule(self, r: Any, s: memoryview) -> None:
        self.calls.append(("schedule", 0))
        r.set_value()

    def schedule_bulk_chunked(self, n: int, r: Any, s: memoryview) -> None:
        self.calls.append(("chunked", n))
        try:
            if n:
                r.execute(0, n)
        except Exception as e:
            r.set_error(e)
            return
        r.set_value()

    def schedule_bulk_unchunked(self, n: int, r: Any, s: memoryview) -> None:
        self.calls.append(("unchunked", n))
        try:
            for i in range(n):
                r.execute(i, i + 1)
        except Exception as e:
            r.set_error(e)
            return
        r.set_value()


def squares(i: int, lst: list[int]) -> None:
    lst[i] = i * i


# ------------------------------------------------------------------------- bulk reaches the backend


def test_bulk_after_schedule_reaches_schedule_bulk_chunked() -> None:
    backend = RecordingBackend()
    sch = sx.parallel_scheduler(backend)
    lst = [0] * 6
    s = sx.schedule(sch) | sx.then(lambda: lst) | sx.bulk(sx.par, 6, squares)
    assert sx.sync_wait(s) == ([0, 1, 4, 9, 16, 25],)
    assert backend.calls == [("schedule", 0), ("chunked", 6)]


def test_bulk_chunked_reaches_schedule_bulk_chunked_with_the_values() -> None:
    backend = RecordingBackend()
    sch = sx.parallel_scheduler(backend)
    seen = []
    s = (
        sx.schedule(sch)
        | sx.then(lambda: sx.values("a", 2))
        | sx.bulk_chunked(sx.par, 5, lambda b, e, x, y: seen.append((b, e, x, y)))
    )
    assert sx.sync_wait(s) == ("a", 2)  # the datums are forwarded (a gap in [exec.par.scheduler])
    assert backend.calls[-1] == ("chunked", 5)
    assert seen == [(0, 5, "a", 2)]


def test_bulk_unchunked_reaches_schedule_bulk_unchunked() -> None:
    backend = RecordingBackend()
    sch = sx.parallel_scheduler(backend)
    seen: list[tuple[int, str]] = []
    s = (
        sx.schedule(sch)
        | sx.then(lambda: "v")
        | sx.bulk_unchunked(sx.par, 4, lambda i, v: seen.append((i, v)))
    )
    assert sx.sync_wait(s) == ("v",)
    assert backend.calls[-1] == ("unchunked", 4)
    assert seen == [(0, "v"), (1, "v"), (2, "v"), (3, "v")]


def test_continues_on_the_parallel_scheduler_then_bulk() -> None:
    backend = RecordingBackend()
    sch = sx.parallel_scheduler(backend)
    lst = [0] * 3
    s = sx.just(lst) | sx.continues_on(sch) | sx.bulk(sx.par, 3, squares)
    assert sx.sync_wait(s) == ([0, 1, 4],)
    assert ("chunked", 3) in backend.calls


@pytest.mark.parametrize("how", ["starts_on", "on"])
def test_bulk_under_starts_on_and_on_uses_the_receivers_scheduler(how: str) -> None:
    backend = RecordingBackend()
    sch = sx.parallel_scheduler(backend)
    lst = [0] * 4
    work = sx.just(lst) | sx.bulk_unchunked(sx.par, 4, squares)
    s = sx.starts_on(sch, work) if how == "starts_on" else sx.on(sch, work)
    assert sx.sync_wait(s) == ([0, 1, 4, 9],)
    assert ("unchunked", 4) in backend.calls


def test_scheduler_propagates_through_on_and_read_env_to_bulk() -> None:
    """P2079R7 §3 example 3: the scheduler propagates through ``on`` and ``read_env``."""
    backend = RecordingBackend()
    seen: list[int] = []

    def bar() -> Any:
        return sx.let_value(
            sx.read_env(sx.get_scheduler),
            lambda current: sx.bulk(sx.schedule(current), sx.par, 1, seen.append),
        )

    assert sx.sync_wait(sx.on(sx.parallel_scheduler(backend), bar())) == ()
    assert seen == [0]
    assert ("chunked", 1) in backend.calls


def test_bulk_elsewhere_is_not_sent_to_the_backend() -> None:
    backend = RecordingBackend()
    sx.parallel_scheduler(backend)  # the parallel domain exists, but nothing runs on it
    lst = [0] * 3
    assert sx.sync_wait(sx.just(lst) | sx.bulk(sx.par, 3, squares)) == ([0, 1, 4],)
    loop_sch = sx.inline_scheduler()
    assert sx.sync_wait(sx.schedule(loop_sch) | sx.then(lambda: lst) | sx.bulk(sx.par, 3, squares))
    assert backend.calls == []


def test_sequential_policies_on_the_backend_get_shape_one_and_run_in_order() -> None:
    backend = RecordingBackend()
    sch = sx.parallel_scheduler(backend)
    order: list[int] = []
    for policy in (sx.seq, sx.unseq):
        order.clear()
        s = sx.schedule(sch) | sx.bulk_unchunked(policy, 5, order.append)
        assert sx.sync_wait(s) == ()
        assert backend.calls[-1] == ("unchunked", 1)
        assert order == [0, 1, 2, 3, 4]
    chunks: list[tuple[int, int]] = []
    sx.sync_wait(sx.schedule(sch) | sx.bulk_chunked(sx.seq, 7, lambda b, e: chunks.append((b, e))))
    assert backend.calls[-1] == ("chunked", 1) and chunks == [(0, 7)]
    sx.sync_wait(sx.schedule(sch) | sx.bulk_chunked(sx.seq, 0, lambda b, e: chunks.append((b, e))))
    assert backend.calls[-1] == ("chunked", 0) and chunks == [(0, 7)]


def test_predecessor_error_and_stopped_are_forwarded_without_the_backend() -> None:
    backend = RecordingBackend()
    sch = sx.parallel_scheduler(backend)
    boom = KeyError("k")
    with pytest.raises(KeyError):
        sx.sync_wait(
            sx.schedule(sch)
            | sx.then(lambda: (_ for _ in ()).throw(boom))
            | sx.bulk(sx.par, 3, squares)
        )
    assert (
        sx.sync_wait(
            sx.schedule(sch) | sx.let_value(lambda: sx.just_stopped()) | sx.bulk(sx.par, 3, squares)
        )
        is None
    )
    assert [c for c in backend.calls if c[0] != "schedule"] == []


def test_transformed_sender_attributes_and_signatures() -> None:
    sch = sx.parallel_scheduler(RecordingBackend())
    b = sx.schedule(sch) | sx.bulk(sx.par, 3, lambda i: None)
    env = sx.env()
    t = sx.transform_sender(sx.get_domain(sch), b, env)
    assert t is not b and t.tag is not sx.bulk
    assert sx.get_completion_scheduler[sx.set_value_t](sx.get_env(t)) == sch
    sigs = sx.get_completion_signatures(t, env)
    assert sigs is not None
    assert sx.set_value_t() in sigs and sx.set_error_t(Exception) in sigs
    assert sigs.sends_stopped
    assert t.children[0] is b.child
    # Without an environment (the construction-time transform) nothing changes.
    assert sx.transform_sender(sx.get_domain(sch), b, None) is b


# --------------------------------------------------------------------------- the thread pool


def test_bulk_on_the_default_parallel_scheduler_squares_a_list() -> None:
    lst = list(range(100))
    s = (
        sx.schedule(sx.get_parallel_scheduler())
        | sx.then(lambda: lst)
        | sx.bulk(sx.par, 100, lambda i, xs: xs.__setitem__(i, i * i))
    )
    assert sx.sync_wait(s) == ([i * i for i in range(100)],)


def test_error_from_bulk_function_on_the_pool_is_the_error_of_the_operation(
    pool: ThreadPoolBackend,
) -> None:
    sch = sx.parallel_scheduler(pool)
    err = ValueError("index 7")

    def f(i: int) -> None:
        if i == 7:
            raise err

    with pytest.raises(ValueError) as info:
        sx.sync_wait(sx.schedule(sch) | sx.bulk(sx.par, 50, f))
    assert info.value is err


def test_bulk_runs_on_several_pool_threads_and_completes_on_one(pool: ThreadPoolBackend) -> None:
    sch = sx.parallel_scheduler(pool)
    threads: set[int] = set()

    def f(b: int, e: int) -> None:
        threads.add(threading.get_ident())
        time.sleep(0.01)

    rec = RecordingReceiver()
    rec.run(sx.schedule(sch) | sx.bulk_chunked(sx.par, 8, f))
    rec.wait()
    assert rec.value == ()
    pool_idents = {t.ident for t in threading.enumerate() if t.name.startswith("bulk-pool-")}
    assert threads <= pool_idents and len(threads) == 2
    assert rec.thread in pool_idents


def test_stop_is_honoured_between_chunks(pool1: ThreadPoolBackend) -> None:
    """40 indices on one thread are 4 chunks of 10: a stop during chunk 1 ends after it."""
    sch = sx.parallel_scheduler(pool1)
    rec = RecordingReceiver()
    chunks: list[tuple[int, int]] = []

    def f(b: int, e: int) -> None:
        chunks.append((b, e))
        if b == 10:
            rec.request_stop()

    rec.run(sx.schedule(sch) | sx.bulk_chunked(sx.par, 40, f))
    rec.wait()
    assert rec.stopped
    assert chunks == [(0, 10), (10, 20)]
    assert rec.live_callbacks_at_completion == 0


@pytest.mark.parametrize("algo", [sx.bulk, sx.bulk_unchunked])
def test_stop_request_stops_per_index_work_at_the_next_index(
    pool1: ThreadPoolBackend, algo: Any
) -> None:
    sch = sx.parallel_scheduler(pool1)
    rec = RecordingReceiver()
    done: list[int] = []

    def f(i: int) -> None:
        done.append(i)
        if i == 12:
            rec.request_stop()

    rec.run(sx.schedule(sch) | algo(sx.par, 40, f))
    rec.wait()
    assert rec.stopped
    assert done == list(range(13))


def test_error_stops_the_hand_out_of_chunks(pool1: ThreadPoolBackend) -> None:
    sch = sx.parallel_scheduler(pool1)
    done: list[int] = []

    def f(i: int) -> None:
        done.append(i)
        if i == 12:
            raise RuntimeError("twelve")

    with pytest.raises(RuntimeError, match="twelve"):
        sx.sync_wait(sx.schedule(sch) | sx.bulk(sx.par, 40, f))
    assert done == list(range(13))


def test_bulk_with_stop_already_requested_runs_nothing(pool: ThreadPoolBackend) -> None:
    rec = RecordingReceiver()
    rec.request_stop()
    ran: list[int] = []
    rec.run(sx.schedule(sx.parallel_scheduler(pool)) | sx.bulk(sx.par, 10, ran.append))
    rec.wait()
    assert rec.stopped and ran == []


def test_chunking_adapts_to_shape_and_workers() -> None:
    assert _plan(0, 2) == (0, 1)
    assert _plan(8, 2) == (8, 1)  # 8 blocks of work: one per chunk
    assert _plan(3, 4) == (3, 1)
    assert _plan(10_000, 2) == (8, 1250)  # 4 chunks per worker
    assert _plan(10_000, 8) == (32, 313)
    n, size = _plan(10_000_000, 2)
    assert size <= 1 << 16 and n * size >= 10_000_000  # bounded chunk: stop checks stay frequent


def test_no_allocation_per_index(pool: ThreadPoolBackend) -> None:
    """P2079R7 §5.7: memory does not grow with the shape (no future or tuple per index)."""
    sch = sx.parallel_scheduler(pool)

    def f(i: int) -> None:
        pass

    def peak(n: int) -> int:
        sx.sync_wait(sx.schedule(sch) | sx.bulk_unchunked(sx.par, 16, f))  # warm up
        tracemalloc.start()
        try:
            sx.sync_wait(sx.schedule(sch) | sx.bulk_unchunked(sx.par, n, f))
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    small, large = peak(1_000), peak(200_000)
    assert large < small + 32_000, (small, large)


def test_schedule_only_backend_gets_default_bulk_on_its_agent() -> None:
    """The base class runs bulk work on the agent ``schedule`` completes on."""

    class OneThread(scr.parallel_scheduler_backend):
        def __init__(self) -> None:
            self.pool = ThreadPoolBackend(1, thread_name_prefix="one-thread")

        def schedule(self, r: Any, s: memoryview) -> None:
            self.pool.schedule(r, s)

    backend = OneThread()
    try:
        sch = sx.parallel_scheduler(backend)
        where: list[str] = []
        lst = [0] * 5

        def f(i: int, lst: list[int]) -> None:
            where.append(threading.current_thread().name)
            lst[i] = i * i

        assert sx.sync_wait(
            sx.schedule(sch) | sx.then(lambda: lst) | sx.bulk_unchunked(sx.par, 5, f)
        ) == ([0, 1, 4, 9, 16],)
        assert set(where) == {"one-thread-0"}
        with pytest.raises(ZeroDivisionError):
            sx.sync_wait(sx.schedule(sch) | sx.bulk_chunked(sx.par, 3, lambda b, e: 1 / 0))
    finally:
        backend.pool.shutdown()


# --------------------------------------------------------------------------- contract checks


class CheckingProxy(scr.bulk_item_receiver_proxy):
    """Checks [exec.sysctxrepl.psb] for a backend: ranges, coverage, order, threads."""

    def __init__(self, n: int, unchunked: bool, token: Any = None) -> None:
        self.n = n
        self.unchunked = unchunked
        self.token = token
        self.lock = threading.Lock()
        self.cover = [0] * n
        self.calls: list[tuple[int, int, int]] = []
        self.kind: str | None = None
        self.thread: int | None = None
        self.violations: list[str] = []
        self.done = threading.Event()

    def _sx_stop_token(self) -> Any:
        return self.token

    def execute(self, b: int, e: int) -> None:
        with self.lock:
            if self.kind is not None:
                self.violations.append(f"execute({b}, {e}) after the completion")
            if not (0 <= b < e <= self.n):
                self.violations.append(f"execute({b}, {e}) out of range for n={self.n}")
            if self.unchunked and e != b + 1:
                self.violations.append(f"unchunked execute({b}, {e})")
            for i in range(b, min(e, self.n)):
                self.cover[i] += 1
            self.calls.append((b, e, threading.get_ident()))

    def _complete(self, kind: str) -> None:
        with self.lock:
            if self.kind is not None:
                self.violations.append(f"second completion {kind} after {self.kind}")
                return
            self.kind = kind
            self.thread = threading.get_ident()
        self.done.set()

    def set_value(self) -> None:
        self._complete("value")

    def set_error(self, err: BaseException) -> None:
        self._complete("error")

    def set_stopped(self) -> None:
        self._complete("stopped")

    def check(self) -> None:
        assert self.done.wait(10), "the backend never completed the proxy"
        assert not self.violations, self.violations
        assert max(self.cover, default=0) <= 1, "an index was covered twice"
        if self.kind == "value":
            assert self.cover == [1] * self.n, "set_value but not every index covered once"


@settings(deadline=None, max_examples=40)
@given(
    n=st.integers(min_value=0, max_value=300),
    workers=st.integers(min_value=1, max_value=3),
    unchunked=st.booleans(),
)
def test_thread_pool_backend_bulk_contract(n: int, workers: int, unchunked: bool) -> None:
    with ThreadPoolBackend(workers, thread_name_prefix="contract") as backend:
        proxy = CheckingProxy(n, unchunked)
        if unchunked:
            backend.schedule_bulk_unchunked(n, proxy, memoryview(bytearray()))
        else:
            backend.schedule_bulk_chunked(n, proxy, memoryview(bytearray()))
        proxy.check()
        assert proxy.kind == "value"
        idents = {t.ident for t in threading.enumerate() if t.name.startswith("contract-")}
        assert proxy.thread in idents
        assert {c[2] for c in proxy.calls} <= idents


def test_thread_pool_backend_contract_holds_when_stopped_midway(pool: ThreadPoolBackend) -> None:
    src = sx.inplace_stop_source()
    proxy = CheckingProxy(1000, True, src.get_token())
    original = proxy.execute

    def execute(b: int, e: int) -> None:
        original(b, e)
        if b == 300:
            src.request_stop()

    proxy.execute = execute  # type: ignore[method-assign]
    pool.schedule_bulk_unchunked(1000, proxy, memoryview(bytearray()))
    proxy.check()
    assert proxy.kind == "stopped"
    assert 300 < sum(proxy.cover) < 1000


def test_thread_pool_backend_schedule_contract(pool: ThreadPoolBackend) -> None:
    proxy = CheckingProxy(0, False)
    pool.schedule(proxy, memoryview(bytearray()))
    proxy.check()
    assert proxy.kind == "value" and proxy.thread != threading.get_ident()
