"""Helpers shared by the tests of the core, the sender adaptors and the task layer.

Fixtures are plain functions here; a test module turns the ones it needs into fixtures, e.g.
``lt = pytest.fixture(loop_thread, name="lt")``, so that no fixture is imported under a name
that its tests then shadow as a parameter.
"""

from __future__ import annotations

import gc
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import structexec as sx
from structexec._core import _domain
from structexec.testing import ManualScheduler, RecordingReceiver

#: Seconds to wait for a helper thread to finish.
JOIN = 10.0


class LoopThread:
    """A ``run_loop`` driven by a thread of its own ("ThreadSched").

    ``sch`` is the loop's scheduler, ``ident`` the thread's ident; :meth:`close` finishes the
    loop and joins the thread.
    """

    def __init__(self, name: str = "loop-thread") -> None:
        self.loop = sx.run_loop()
        self.sch = self.loop.get_scheduler()
        self.thread = threading.Thread(target=self.loop.run, name=name)
        self.thread.start()
        assert self.thread.ident is not None
        self.ident: int = self.thread.ident

    def close(self) -> None:
        self.loop.finish()
        self.thread.join(JOIN)
        assert not self.thread.is_alive()


def loop_thread() -> Iterator[LoopThread]:
    """Fixture body: a :class:`LoopThread`, closed at teardown."""
    t = LoopThread()
    try:
        yield t
    finally:
        t.close()


def rec_on(sch: Any) -> RecordingReceiver:
    """A recording receiver whose environment has ``get_scheduler == sch`` and a stop token."""
    return RecordingReceiver(extra_env=sx.prop(sx.get_scheduler, sch))


def here() -> tuple[int, ManualScheduler | None]:
    """Where this runs: the thread's ident and the ``ManualScheduler`` running an item here."""
    return threading.get_ident(), ManualScheduler.current()


def wait_pending(m: ManualScheduler, n: int = 1) -> None:
    """Wait (up to :data:`JOIN` seconds) until ``m`` has ``n`` queued items, e.g. a hop back
    that a completion on another thread queues."""
    deadline = time.monotonic() + JOIN
    while m.pending < n:
        assert time.monotonic() < deadline, "the scheduled item never arrived"
        time.sleep(0.001)


def restore_domain_dispatch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fixture body (autouse in modules that create custom domains).

    Creating a custom domain turns the domain dispatch on while its class is alive
    ([exec.domain.default]); classes defined at module level stay alive, so this restores the
    previous registrations after the test, and other test modules are unaffected.
    """
    d = _domain.DISPATCH
    for name in ("on", "all", "tags", "apply", "hit"):
        monkeypatch.setattr(d, name, getattr(d, name))
    monkeypatch.setattr(d, "_refs", dict(d._refs))


def pin_domain_dispatch(monkeypatch: pytest.MonkeyPatch, **fields: object) -> None:
    """Set fields of the domain dispatch state (``on``, ``all``, ``tags``, ``apply``) for this
    test, pinned so that a domain class collected meanwhile does not recompute them."""
    restore_domain_dispatch(monkeypatch)
    d = _domain.DISPATCH
    monkeypatch.setattr(d, "pinned", True)
    for name, value in fields.items():
        assert hasattr(d, name), name
        monkeypatch.setattr(d, name, value)
    d.derive()


@contextmanager
def pinned_domain_dispatch(**fields: object) -> Iterator[None]:
    """:func:`pin_domain_dispatch` as a context manager (for code outside a fixture)."""
    d = _domain.DISPATCH
    names = ("pinned", "hit", *fields)
    old = [getattr(d, n) for n in names]
    d.pinned = True
    try:
        for n, v in fields.items():
            setattr(d, n, v)
        d.derive()
        yield
    finally:
        for n, v in zip(reversed(names), reversed(old)):
            setattr(d, n, v)
        d.refresh()  # domains registered meanwhile count now (unless an outer pin holds)


def set_domain_dispatch(monkeypatch: pytest.MonkeyPatch, on: bool) -> None:
    """Switch the domain transform machinery fully on (every sender asks its late domain at
    ``connect``, as if a domain customising every algorithm existed) or fully off (as if no
    domain had been made: domains made by this test register as usual)."""
    if on:
        pin_domain_dispatch(monkeypatch, on=True, all=True)
        return
    restore_domain_dispatch(monkeypatch)
    d = _domain.DISPATCH
    monkeypatch.setattr(d, "_refs", {})
    d.restore(())


def domains_off_and_on(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    """Fixture body, with ``params=DOMAIN_MODES``: run a test with the domain transform machinery
    off and on. The results must agree: a lowering is applied either by ``transform_sender`` at
    ``connect`` or by the sender's own ``connect`` ([exec.snd.transform])."""
    set_domain_dispatch(monkeypatch, request.param == "domains-on")
    yield request.param


DOMAIN_MODES = ["domains-off", "domains-on"]


class TwoValueSigs(sx.Sender[Any]):
    """A sender declaring two value signatures, ``(int)`` and ``(str, str)``; it sends
    ``vals`` (default ``1``)."""

    def __init__(self, *vals: Any) -> None:
        self.vals = vals or (1,)

    def connect(self, rcvr: Any) -> Any:
        return sx.connect(sx.just(*self.vals), rcvr)

    def get_completion_signatures(self, env: Any = None) -> Any:
        return sx.completion_signatures(sx.set_value_t(int), sx.set_value_t(str, str))


# A coroutine that awaits a sender resumes on the thread that completed it, unless the
# completion lands while the sender's ``start`` is still running: then it resumes on the
# starting thread (an inline completion). A test that asserts "resumed on the loop's thread"
# must not let the loop run the item before ``start`` has returned; under load a worker
# started up front can.
class BadStart(sx.Sender[Any]):
    """A sender whose operation's ``start()`` raises ``exc`` (a broken child: a contract
    violation that adaptors must survive, [exec.async.ops])."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def connect(self, rcvr: Any) -> Any:
        exc = self.exc

        class Op:
            def start(self) -> None:
                raise exc

        return Op()


def _parked(ident: int) -> bool:
    """Whether thread ``ident`` waits inside ``sync_wait`` (its run loop), past ``start``."""
    f = sys._current_frames().get(ident)
    return (
        f is not None
        and f.f_code.co_name == "run"
        and f.f_code.co_filename.endswith("_run_loop.py")
        and f.f_back is not None
        and f.f_back.f_code.co_filename.endswith("_sync_wait.py")
    )


def loop_thread_after_park(loop: Any, waiter: int | None = None) -> threading.Thread:
    """A started thread that runs ``loop.run()`` once thread ``waiter`` (default: the caller)
    is parked in ``sync_wait`` (waiting at most 10 s)."""
    ident = threading.get_ident() if waiter is None else waiter

    def work() -> None:
        deadline = time.monotonic() + 10
        while not _parked(ident) and time.monotonic() < deadline:
            time.sleep(0.0005)
        loop.run()

    t = threading.Thread(target=work)
    t.start()
    return t


# The tests that assert "no cyclic garbage" count what gc.collect() finds. The count is
# process-wide: another thread (a dask client's event loop left by an earlier test, a pool
# thread finishing late) can make garbage of its own while a test runs, or drop the last
# reference to a whole earlier trio run. Only garbage of the code under test counts here, and
# a test measures up to GARBAGE_ATTEMPTS times: a cycle the library makes is there every
# time, while trio itself leaves a Cancelled's traceback cycle only in rare timings (seen
# under sys.setswitchinterval(1e-5) with trio's own nursery).
GARBAGE_ATTEMPTS = 3
_OWN_PACKAGES = frozenset({"structexec", "trio", "outcome", "exceptiongroup"})
_OWN_PATHS = ("/structexec/", "/trio/", "/tests/")


def _is_own(o: object) -> bool:
    mod = getattr(type(o), "__module__", None) or ""
    if mod.partition(".")[0] in _OWN_PACKAGES:
        return True
    code = None
    for attr in ("cr_code", "gi_code", "ag_code", "f_code", "__code__"):
        code = getattr(o, attr, None)
        if code is not None:
            break
    if code is None:
        return False
    filename = getattr(code, "co_filename", "")
    return any(p in filename for p in _OWN_PATHS)


def own_cyclic_garbage() -> int:
    """``gc.collect()``, counting only the unreachable objects of the code under test:
    instances of structexec's and trio's classes, and coroutines, frames and functions of
    their code or of the tests. A cycle made by the library always contains one of those."""
    old = gc.get_debug()
    gc.set_debug(old | gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        return sum(1 for o in gc.garbage if _is_own(o))
    finally:
        gc.garbage.clear()
        gc.set_debug(old)


async def cyclic_garbage_of(fn: Callable[[], Awaitable[Any]]) -> int:
    """``await fn()`` with the cycle collector off, then :func:`own_cyclic_garbage`; up to
    :data:`GARBAGE_ATTEMPTS` times, until a run leaves none. Returns the last count."""
    n = 0
    for _ in range(GARBAGE_ATTEMPTS):
        gc.collect()
        gc.disable()
        try:
            await fn()
            n = own_cyclic_garbage()
        finally:
            gc.enable()
        if n == 0:
            break
    return n


def cyclic_garbage_of_sync(fn: Callable[[], Any]) -> int:
    """:func:`cyclic_garbage_of` for a plain function (driven without an event loop)."""

    async def call() -> None:
        fn()

    coro = cyclic_garbage_of(call)
    try:
        coro.send(None)
    except StopIteration as done:
        n: int = done.value
        return n
    coro.close()
    raise RuntimeError("cyclic_garbage_of_sync: the measurement suspended")
