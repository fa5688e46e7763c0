"""parallel_scheduler frontend and replaceability: [exec.par.scheduler], [exec.sysctxrepl].

[exec.par.scheduler], [exec.sysctxrepl.recvproxy], [exec.sysctxrepl.psb], [exec.sysctxrepl.query],
docs/parallel.md; P2079R7 §3 ex.1/2 (examples E18, E19, E22).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import structexec as sx
from structexec._parallel._replacement_api import NO_STORAGE
from structexec.backends import BackendError, ThreadPoolBackend
from structexec.testing import RecordingReceiver, record_terminate

scr = sx.system_context_replaceability


@pytest.fixture
def restore_backend() -> Iterator[None]:
    """Put the process-wide backend factory back after a test that replaces it."""
    previous = sx.set_parallel_scheduler_backend(None)
    sx.set_parallel_scheduler_backend(previous)
    try:
        yield
    finally:
        sx.set_parallel_scheduler_backend(previous)


@pytest.fixture
def pool() -> Iterator[ThreadPoolBackend]:
    with ThreadPoolBackend(2, thread_name_prefix="test-pool") as p:
        yield p


class InlineBackend(scr.parallel_scheduler_backend):
    """Completes every schedule() inside the call and records the proxies it got."""

    def __init__(self) -> None:
        self.proxies: list[Any] = []
        self.storage: list[Any] = []

    def schedule(self, r: Any, s: memoryview) -> None:
        self.proxies.append(r)
        self.storage.append(s)
        r.set_value()


class ParkingBackend(scr.parallel_scheduler_backend):
    """Keeps the proxies; the test completes them."""

    def __init__(self) -> None:
        self.proxies: list[Any] = []

    def schedule(self, r: Any, s: memoryview) -> None:
        self.proxies.append(r)


class RaisingBackend(scr.parallel_scheduler_backend):
    def __init__(self) -> None:
        self.fail = True
        self.calls = 0

    def schedule(self, r: Any, s: memoryview) -> None:
        self.calls += 1
        if self.fail:
            raise OSError("no more threads")
        r.set_value()


# -------------------------------------------------------------- getting and replacing the scheduler


def test_default_parallel_scheduler_backend_is_a_thread_pool() -> None:
    sch = sx.get_parallel_scheduler()
    assert isinstance(sch, sx.parallel_scheduler)
    assert sx.is_scheduler(sch)
    assert isinstance(sch.backend, ThreadPoolBackend)
    assert sch.backend.max_workers == (os.cpu_count() or 1)  # sized to the machine
    assert sch.backend is sx.query_parallel_scheduler_backend()


def test_two_default_parallel_schedulers_are_equal() -> None:
    a, b = sx.get_parallel_scheduler(), sx.get_parallel_scheduler()
    assert a == b
    assert hash(a) == hash(b)
    assert a != sx.inline_scheduler()


def test_backend_replacement_new_schedulers_differ_old_keep_their_backend(
    restore_backend: None, pool: ThreadPoolBackend
) -> None:
    old = sx.get_parallel_scheduler()
    old_backend = old.backend
    calls = []

    def factory() -> ThreadPoolBackend:
        calls.append(1)
        return pool

    sx.set_parallel_scheduler_backend(factory)
    assert calls == []  # lazy: the factory runs on the next query
    new = sx.get_parallel_scheduler()
    assert calls == [1]
    assert sx.get_parallel_scheduler() == new and calls == [1]  # called once, then cached
    assert new.backend is pool
    assert new != old
    assert old.backend is old_backend
    # The old scheduler still runs its work on the old backend's threads.
    where = sx.sync_wait(sx.schedule(old) | sx.then(lambda: threading.current_thread().name))
    assert where is not None and where[0].startswith("structexec-parallel")
    where = sx.sync_wait(sx.schedule(new) | sx.then(lambda: threading.current_thread().name))
    assert where is not None and where[0].startswith("test-pool")
    # None restores the default, and the default is the same process-wide pool.
    sx.set_parallel_scheduler_backend(None)
    assert sx.get_parallel_scheduler() == old


def test_set_backend_returns_previous_factory(restore_backend: None) -> None:
    def f1() -> InlineBackend:
        return InlineBackend()

    def f2() -> InlineBackend:
        return InlineBackend()

    sx.set_parallel_scheduler_backend(f1)
    assert sx.set_parallel_scheduler_backend(f2) is f1
    assert sx.system_context_replaceability.set_parallel_scheduler_backend(None) is f2
    assert (
        sx.system_context_replaceability.query_parallel_scheduler_backend()
        is sx.query_parallel_scheduler_backend()
    )


def test_set_backend_rejects_a_backend_object() -> None:
    with pytest.raises(TypeError, match="pass a factory"):
        sx.set_parallel_scheduler_backend(InlineBackend())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="int"):
        sx.set_parallel_scheduler_backend(3)  # type: ignore[arg-type]


def test_factory_returning_a_non_backend_raises(restore_backend: None) -> None:
    sx.set_parallel_scheduler_backend(lambda: 42)
    with pytest.raises(TypeError, match="not a parallel_scheduler_backend"):
        sx.get_parallel_scheduler()


def test_null_backend_calls_terminate(restore_backend: None) -> None:
    sx.set_parallel_scheduler_backend(lambda: None)
    assert sx.query_parallel_scheduler_backend() is None
    with record_terminate() as rec, pytest.raises(RuntimeError, match="returned None"):
        sx.get_parallel_scheduler()
    assert len(rec) == 1 and "[exec.par.scheduler]" in rec.reasons[0]


def test_parallel_scheduler_forward_progress_is_parallel() -> None:
    sch = sx.get_parallel_scheduler()
    assert sx.get_forward_progress_guarantee(sch) is sx.forward_progress_guarantee.parallel


def test_parallel_scheduler_constructor_checks_its_backend() -> None:
    with pytest.raises(TypeError, match="parallel_scheduler_backend"):
        sx.parallel_scheduler(object())
    with pytest.raises(TypeError, match="namespace"):
        sx.system_context_replaceability()


# --------------------------------------------------------------------------- schedule


def test_schedule_calls_backend_schedule_with_a_proxy() -> None:
    backend = InlineBackend()
    sch = sx.parallel_scheduler(backend)
    rec = RecordingReceiver()
    op = rec.connect(sx.schedule(sch))
    assert backend.proxies == []  # nothing before start ([exec.async.ops])
    rec.start(op)
    assert rec.value == ()
    (proxy,) = backend.proxies
    assert isinstance(proxy, scr.receiver_proxy)
    assert backend.storage == [NO_STORAGE]
    assert isinstance(backend.storage[0], memoryview) and not backend.storage[0].readonly


def test_receiver_proxy_forwards_error_and_stopped() -> None:
    backend = ParkingBackend()
    sch = sx.parallel_scheduler(backend)
    r1, r2 = RecordingReceiver(), RecordingReceiver()
    r1.run(sx.schedule(sch))
    r2.run(sx.schedule(sch))
    boom = ValueError("boom")
    backend.proxies[0].set_error(boom)
    backend.proxies[1].set_stopped()
    assert r1.error is boom
    assert r2.stopped
    with pytest.raises(RuntimeError, match="already completed"):
        backend.proxies[0].set_value()


def test_schedule_completes_on_a_pool_thread(pool: ThreadPoolBackend) -> None:
    sch = sx.parallel_scheduler(pool)
    rec = RecordingReceiver()
    rec.run(sx.schedule(sch))
    rec.wait()
    assert rec.value == ()
    assert rec.thread != threading.get_ident()
    names = {t.ident: t.name for t in threading.enumerate()}
    assert names[rec.thread].startswith("test-pool")


def test_parallel_schedule_completion_scheduler_and_signatures() -> None:
    sch = sx.get_parallel_scheduler()
    s = sx.schedule(sch)
    assert sx.get_completion_scheduler[sx.set_value_t](sx.get_env(s)) == sch
    sigs = sx.get_completion_signatures(s)
    assert sigs == sx.completion_signatures(
        sx.set_value_t(), sx.set_error_t(Exception), sx.set_stopped_t()
    )


def test_then_runs_on_the_pool_and_sync_wait_gets_55() -> None:
    """P2079R7 §3 example 1."""
    sch = sx.get_parallel_scheduler()
    seen = []

    def hi() -> int:
        seen.append(threading.get_ident())
        return 13

    assert sx.sync_wait(sx.schedule(sch) | sx.then(hi) | sx.then(lambda x: x + 42)) == (55,)
    assert seen and seen[0] != threading.get_ident()


def test_on_returns_to_the_sync_wait_thread() -> None:
    """P2079R7 §3 example 2: ``on`` starts on the pool and comes back ([exec.on])."""
    sch = sx.get_parallel_scheduler()
    where: list[int] = []
    add_42 = sx.just() | sx.then(lambda: where.append(threading.get_ident()) or 13)
    done = sx.on(sch, add_42 | sx.then(lambda x: x + 42)) | sx.then(
        lambda x: (x, threading.get_ident())
    )
    result = sx.sync_wait(done)
    assert result is not None
    ((value, ident),) = result
    assert value == 55
    assert where[0] != threading.get_ident()
    assert ident == threading.get_ident()


def test_parallel_schedule_stop_before_start_completes_stopped(pool: ThreadPoolBackend) -> None:
    sch = sx.parallel_scheduler(pool)
    rec = RecordingReceiver()
    rec.request_stop()
    rec.run(sx.schedule(sch))
    rec.wait()
    assert rec.stopped


# ------------------------------------------------------------------------- receiver proxy try_query


class OwnToken:
    """A stoppable stop token of a type that is not ``inplace_stop_token``."""

    class callback_type:
        def __init__(self, token: OwnToken, fn: Any) -> None:
            self.token = token
            self.fn = fn
            token.callbacks.append(self)
            if token.stopped:
                fn()

        def close(self) -> None:
            if self in self.token.callbacks:
                self.token.callbacks.remove(self)

    def __init__(self) -> None:
        self.stopped = False
        self.callbacks: list[Any] = []

    def stop_requested(self) -> bool:
        return self.stopped

    def stop_possible(self) -> bool:
        return True

    def request_stop(self) -> None:
        self.stopped = True
        for cb in list(self.callbacks):
            cb.fn()


class Priority(sx.Query):
    forwarding = True


priority = Priority()


def _proxy_for(env: Any) -> tuple[Any, RecordingReceiver]:
    backend = ParkingBackend()
    rec = RecordingReceiver(env)
    rec.run(sx.schedule(sx.parallel_scheduler(backend)))
    (proxy,) = backend.proxies
    return proxy, rec


def test_try_query_gives_the_consumers_inplace_stop_token() -> None:
    rec0 = RecordingReceiver()
    backend = ParkingBackend()
    rec0.run(sx.schedule(sx.parallel_scheduler(backend)))
    (proxy,) = backend.proxies
    tok = proxy.try_query(sx.get_stop_token)
    assert type(tok) is sx.inplace_stop_token
    assert tok == rec0.stop_source.get_token()
    assert proxy.try_query(sx.get_stop_token, sx.inplace_stop_token) == tok
    assert proxy.try_query(sx.inplace_stop_token, sx.get_stop_token) == tok  # C++ order
    proxy.set_value()


def test_try_query_returns_none_when_unsupported() -> None:
    proxy, _ = _proxy_for(sx.prop(sx.get_stop_token, sx.never_stop_token()))
    assert proxy.try_query(sx.get_stop_token) is None  # never_stop_token
    proxy2, _ = _proxy_for(None)
    assert proxy2.try_query(sx.get_stop_token, sx.never_stop_token) is None  # wrong P
    assert proxy2.try_query(priority) is None  # the env does not answer
    proxy3, _ = _proxy_for(sx.env())
    assert proxy3.try_query(sx.get_stop_token) is None
    for p in (proxy, proxy2, proxy3):
        p.set_value()


def test_try_query_answers_other_queries_of_the_consumer() -> None:
    """P2079R7 §5.5/§5.10: properties reach the backend through receiver queries."""
    proxy, _ = _proxy_for(sx.prop(priority, 7))
    assert proxy.try_query(priority) == 7
    assert proxy.try_query(priority, int) == 7
    assert proxy.try_query(priority, str) is None
    proxy.set_value()


def test_try_query_never_raises() -> None:
    class Exploding:
        def query(self, q: Any, *args: Any) -> Any:
            raise RuntimeError("query blew up")

    proxy, _ = _proxy_for(Exploding())
    assert proxy.try_query(priority) is None
    assert proxy.try_query(sx.get_stop_token) is None
    proxy.set_value()


def test_other_stoppable_token_types_are_linked_to_an_inplace_token() -> None:
    own = OwnToken()
    proxy, rec = _proxy_for(sx.prop(sx.get_stop_token, own))
    tok = proxy.try_query(sx.get_stop_token)
    assert type(tok) is sx.inplace_stop_token
    assert proxy.try_query(sx.get_stop_token) is tok  # the same link every time
    assert len(own.callbacks) == 1 and not tok.stop_requested()
    own.request_stop()
    assert tok.stop_requested()
    proxy.set_stopped()
    assert rec.stopped
    assert own.callbacks == []  # the link is closed before the completion ([exec.recv.concepts])


def test_custom_proxy_hooks_drive_try_query() -> None:
    src = sx.inplace_stop_source()

    class MyProxy(scr.receiver_proxy):
        def _sx_stop_token(self) -> Any:
            return src.get_token()

        def _sx_query_env(self, q: Any) -> Any:
            return 3 if q is priority else super()._sx_query_env(q)

    p = MyProxy()
    assert p.try_query(sx.get_stop_token) == src.get_token()
    assert p.try_query(priority) == 3
    assert p.try_query(sx.get_scheduler) is None
    with pytest.raises(NotImplementedError):
        p.set_value()
    with pytest.raises(TypeError, match="takes"):
        p.try_query()


# --------------------------------------------------------------------------- faults


def test_backend_raising_in_schedule_completes_with_backend_error() -> None:
    backend = RaisingBackend()
    sch = sx.parallel_scheduler(backend)
    with pytest.raises(BackendError, match="raised from schedule") as info:
        sx.sync_wait(sx.schedule(sch))
    assert isinstance(info.value.__cause__, OSError)
    assert "no more threads" in str(info.value)
    # The scheduler stays usable.
    backend.fail = False
    assert sx.sync_wait(sx.schedule(sch)) == ()
    assert backend.calls == 2


def test_shut_down_pool_reports_instead_of_hanging() -> None:
    p = ThreadPoolBackend(1)
    sch = sx.parallel_scheduler(p)
    assert sx.sync_wait(sx.schedule(sch)) == ()
    p.shutdown()
    with pytest.raises(BackendError, match="shut down"):
        sx.sync_wait(sx.schedule(sch))
    with pytest.raises(BackendError, match="shut down"):
        sx.sync_wait(sx.schedule(sch) | sx.bulk(sx.par, 4, lambda i: None))


def test_backend_that_completes_then_raises_calls_terminate() -> None:
    class Bad(scr.parallel_scheduler_backend):
        def schedule(self, r: Any, s: memoryview) -> None:
            r.set_value()
            raise RuntimeError("oops")

    with record_terminate() as rec:
        assert sx.sync_wait(sx.schedule(sx.parallel_scheduler(Bad()))) == ()
    assert len(rec) == 1 and "completed an operation and then raised" in rec.reasons[0]


def test_schedule_op_started_twice_raises() -> None:
    rec = RecordingReceiver()
    op = rec.run(sx.schedule(sx.parallel_scheduler(InlineBackend())))
    assert rec.value == ()
    with pytest.raises(RuntimeError, match="started twice"):
        op.start()


def test_backends_import_without_dask() -> None:
    """``import structexec.backends`` must not import dask; DaskBackend says what is missing."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['distributed'] = None\n"
        "import structexec.backends as b\n"
        "assert 'dask' not in sys.modules\n"
        "try:\n"
        "    b.DaskBackend('tcp://127.0.0.1:1')\n"
        "except ImportError as e:\n"
        "    print(e)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "pip install 'structexec[dask]'" in proc.stdout
