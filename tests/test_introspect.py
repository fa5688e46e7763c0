"""``sx.operation_tree()``, ``sx.dump()``, ``scope.outstanding()``, ``install_dump_on_signal``
and the note that errors of spawned work carry (docs/debugging.md).

The tree is asserted field by field for a scripted program: nested scopes (in the body and in
a hosted task), a parked ``spawn_future`` result, a timer, hosted trio tasks, a coroutine
sender, work running on the parallel scheduler and a stop in progress. Spawn sites are found
by markers (``# <site:name>``) in this file, so the tests do not depend on line numbers.
"""

from __future__ import annotations

import gc
import io
import sys
import threading
import weakref
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from _subproc import run_child

import structexec as sx
from structexec._core._fastpaths import FAST

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup, ExceptionGroup

_SRC = Path(__file__).read_text(encoding="utf-8").splitlines()


def site(name: str) -> str:
    """``test_introspect.py:N`` of the line marked ``# <site:name>``."""
    marker = f"# <site:{name}>"
    (n,) = [i + 1 for i, line in enumerate(_SRC) if line.rstrip().endswith(marker)]
    return f"test_introspect.py:{n}"


def frame_name(fn: Any) -> str:
    """How a frame of ``fn`` is named in a tree: its qualified name (Python 3.10 frames
    know only the plain name)."""
    return str(fn.__qualname__ if sys.version_info >= (3, 11) else fn.__name__)


def find_scope(name: str, tree: Any = None) -> sx.ScopeInfo:
    """The scope called ``name`` anywhere in the tree."""
    todo = list(sx.operation_tree() if tree is None else tree)
    while todo:
        s = todo.pop()
        if s.name == name:
            return s
        todo.extend(s.scopes)
        for op in s.operations:
            todo.extend(op.scopes)
    raise AssertionError(f"no scope {name!r} in\n{sx.dump(io.StringIO())}")


def op_of(scope: sx.ScopeInfo, kind: str, description: str) -> sx.OperationInfo:
    found = [o for o in scope.operations if o.kind == kind and o.description == description]
    assert len(found) == 1, (kind, description, scope.operations)
    return found[0]


def parse(x: int) -> int:
    return x


async def handler(n: int) -> None:
    await trio.sleep(1000)


async def child_task(task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    async with sx.counting_scope(name="per-connection") as inner:
        inner.start_soon(handler, 2)  # <site:inner-handler>
        task_status.started()
        await trio.sleep(1000)


async def coro_sender() -> None:
    await trio.sleep(1000)


# --------------------------------------------------------------------------- the tree


async def test_tree_of_a_scripted_program(mock_clock: trio.testing.MockClock) -> None:
    par = sx.get_parallel_scheduler()
    entered = threading.Event()
    gate = threading.Event()

    def blocking() -> None:
        entered.set()
        gate.wait(10)

    PAR = f"starts_on(parallel_scheduler, just() | then({blocking.__qualname__}))"
    try:
        async with sx.counting_scope(name="outer") as outer:
            fut = outer.spawn_future(sx.just(1) | sx.then(parse))  # <site:future>
            outer.spawn(sx.schedule_after(sx.trio_scheduler(), 30.0))  # <site:timer>
            outer.start_soon(handler, 1)  # <site:handler>
            await outer.start(child_task)  # <site:child>
            outer.spawn(sx.starts_on(par, sx.just() | sx.then(blocking)))  # <site:par>
            outer.spawn(coro_sender())  # <site:coro>
            async with sx.simple_counting_scope(name="body-nested") as b:
                b.spawn(sx.schedule_after(sx.trio_scheduler(), 5.0))  # <site:inner-timer>
                await trio.to_thread.run_sync(entered.wait, 10)
                await trio.testing.wait_all_tasks_blocked()
                tree = sx.operation_tree()
                text = sx.dump(io.StringIO())
                mock_clock.jump(6)  # b's timer is due: b's exit completes

            o = find_scope("outer", tree)
            assert (o.kind, o.state, o.stop_requested, o.errors) == (
                "counting_scope", "open", False, 0
            )
            assert o.entered_by == trio.lowlevel.current_task().name
            assert o.count == 5  # timer, handler, child, parallel work, coroutine sender

            f = op_of(o, "spawn_future", "just(1) | then(parse)")
            assert f.spawned_at == site("future")
            assert f.filename == __file__
            assert f.state == "finished: future holds an unconsumed value result"

            t = op_of(o, "spawn", "schedule_after(trio_scheduler, 30.0)")
            assert t.spawned_at == site("timer")
            assert t.state == "waiting on a timer, due in 30 s"
            assert t.scheduler == "trio_scheduler"
            assert t.stop_requested is False

            h = op_of(o, "start_soon", "handler(n=1)")
            assert h.spawned_at == site("handler")
            assert h.trio_task is not None and h.trio_task.endswith("handler")
            assert h.await_frame is not None
            assert h.await_frame.startswith("handler at test_introspect.py:")
            assert h.state == f"in trio task, awaiting in {h.await_frame}"
            assert h.scheduler == "trio_scheduler"

            c = op_of(o, "start", "child_task()")
            assert c.spawned_at == site("child")
            assert c.await_frame is not None and c.await_frame.startswith("child_task at ")
            (inner,) = c.scopes  # the scope the hosted task entered hangs under it
            assert (inner.kind, inner.name, inner.state, inner.count) == (
                "counting_scope", "per-connection", "open", 1
            )
            ih = op_of(inner, "start_soon", "handler(n=2)")
            assert ih.spawned_at == site("inner-handler")

            p = op_of(o, "spawn", PAR)
            assert p.spawned_at == site("par")
            assert p.thread is not None and p.thread.startswith("structexec-parallel")
            assert p.state.startswith(f"running on thread {p.thread!r} in ")
            assert f"{frame_name(blocking)} at test_introspect.py:" in p.state

            k = op_of(o, "spawn", "coro_sender() (coroutine)")
            assert k.spawned_at == site("coro")
            assert k.state == "in a trio task"
            assert k.trio_task is not None
            assert k.await_frame is not None and k.await_frame.startswith("coro_sender at ")

            (nested,) = o.scopes  # nested in the body
            assert (nested.kind, nested.name, nested.state, nested.count) == (
                "simple_counting_scope", "body-nested", "open", 1
            )
            (nt,) = nested.operations
            assert (nt.kind, nt.description, nt.spawned_at) == (
                "spawn", "schedule_after(trio_scheduler, 5.0)", site("inner-timer")
            )
            # the text form has the same content
            assert "counting_scope 'outer' [open, 5 associated, entered by trio task" in text
            assert f"  - spawn_future just(1) | then(parse) spawned at {site('future')}" in text
            assert "      counting_scope 'per-connection' [open, 1 associated" in text
            assert "  simple_counting_scope 'body-nested' [" in text

            # a stop in progress: the parallel work ignores it
            gate.clear()
            entered.clear()
            outer.request_stop()
            await trio.testing.wait_all_tasks_blocked()
            o2 = find_scope("outer")
            assert o2.stop_requested is True
            assert o2.stop_requested_for is not None and o2.stop_requested_for >= 0
            p2 = op_of(o2, "spawn", PAR)
            assert p2.stop_requested is True
            assert p2.state.endswith("; stop requested")
            assert "stop requested" in sx.dump(io.StringIO())
            gate.set()
            assert await fut == 1
    finally:
        gate.set()


async def test_outstanding_of_one_scope_and_a_parked_error() -> None:
    async with sx.counting_scope(name="one") as scope:
        assert scope.outstanding() == ()
        fut = scope.spawn_future(sx.just_error(ValueError("x")))  # <site:parked-error>
        (op,) = scope.outstanding()
        assert (op.kind, op.spawned_at, op.state) == (
            "spawn_future",
            site("parked-error"),
            "finished: future holds an unconsumed error result",
        )
        with pytest.raises(ValueError):
            await fut
        assert scope.outstanding() == ()


async def test_a_running_future_shows_what_it_waits_on(autojump_clock: Any) -> None:
    async with sx.simple_counting_scope() as scope:
        fut = scope.spawn_future(sx.schedule_after(sx.trio_scheduler(), 7.0))
        (op,) = scope.outstanding()
        assert op.kind == "spawn_future"
        assert op.state == "waiting on a timer, due in 7 s"
        await fut
        assert scope.outstanding() == ()


def test_associate_and_scopes_outside_async_with() -> None:
    scope = sx.counting_scope(name="plain")
    started: list[Any] = []

    class Pending(sx.Sender[None]):
        def connect(self, rcvr: Any) -> Any:
            class Op:
                def start(self) -> None:
                    started.append(rcvr)

            return Op()

    class Rcvr:
        def set_value(self, *v: Any) -> None:
            pass

        def set_error(self, e: Any) -> None:  # pragma: no cover
            pass

        def set_stopped(self) -> None:  # pragma: no cover
            pass

    op = sx.connect(sx.associate(Pending(), scope.get_token()), Rcvr())
    sx.start(op)
    sx.spawn(Pending(), scope.get_token())  # <site:plain-spawn>
    s = find_scope("plain")
    assert (s.state, s.count, s.entered_by) == ("open", 2, None)
    kinds = sorted(o.kind for o in s.operations)
    assert kinds == ["associate", "spawn"]
    (sp,) = [o for o in s.operations if o.kind == "spawn"]
    assert sp.spawned_at == site("plain-spawn")
    assert sp.state == "running"
    for r in started:
        r.set_value()
    sx.sync_wait(scope.join())
    assert find_scope("plain").operations == ()


def test_format_of_an_empty_process_and_of_a_scope() -> None:
    scope = sx.simple_counting_scope(name="lonely")
    out = io.StringIO()
    text = sx.dump(out)
    assert out.getvalue() == "structexec operation tree:\n" + text + "\n"
    assert "simple_counting_scope 'lonely' [unused, 0 associated]" in text
    assert repr(scope) == "<simple_counting_scope 'lonely' unused, 0 associated>"
    del scope


# --------------------------------------------------------------------------- no extra references


def test_a_dropped_scope_disappears_from_the_tree() -> None:
    gc.collect()
    gc.disable()  # refcounting alone must free it: tracking holds no reference, no cycle
    try:
        scope = sx.counting_scope(name="ephemeral")
        assert find_scope("ephemeral").state == "unused"
        sx.dump(io.StringIO())
        ref = weakref.ref(scope)
        del scope
        assert ref() is None
        assert "ephemeral" not in [s.name for s in sx.operation_tree()]
    finally:
        gc.enable()


async def test_a_scope_left_in_trio_disappears_from_the_tree() -> None:
    gc.collect()
    gc.disable()
    try:
        async with sx.counting_scope(name="left") as scope:
            scope.spawn(sx.schedule(sx.trio_scheduler()))
            assert find_scope("left").count == 1
        ref = weakref.ref(scope)
        del scope
        assert ref() is None
        assert "left" not in [s.name for s in sx.operation_tree()]
    finally:
        gc.enable()


class _Target:
    def fn(self) -> None:
        pass


async def test_tracking_and_dumps_create_no_cycles() -> None:
    gc.collect()
    gc.disable()
    try:
        target = _Target()
        tref = weakref.ref(target)
        async with sx.counting_scope(name="cycles") as scope:
            sref = weakref.ref(scope)
            for _ in range(3):
                scope.spawn(sx.schedule(sx.trio_scheduler()) | sx.then(target.fn))
            f = scope.spawn_future(sx.just(1))
            scope.start_soon(trio.sleep, 0)
            sx.dump(io.StringIO())
            scope.outstanding()
            assert await f == 1
        del target, scope, f
        assert tref() is None
        assert sref() is None
    finally:
        gc.enable()


# --------------------------------------------------------------------------- notes on errors


def boom(*_: Any) -> None:
    raise ValueError("boom")


def notes(e: BaseException) -> list[str]:
    return list(getattr(e, "__notes__", []))


async def test_note_on_an_error_of_spawned_work() -> None:
    with pytest.raises(ExceptionGroup) as info:
        async with sx.counting_scope(name="connections") as scope:
            scope.spawn(sx.just() | sx.then(boom))  # <site:boom>
    (e,) = info.value.exceptions
    assert isinstance(e, ValueError)
    assert notes(e) == [f"spawned at {site('boom')} into counting_scope 'connections'"]


async def test_note_on_a_start_soon_task_and_none_from_an_unnamed_scope() -> None:
    async def fails() -> None:
        raise KeyError("k")

    with pytest.raises(ExceptionGroup) as info:
        async with sx.simple_counting_scope(name="s") as scope:
            scope.start_soon(fails)  # <site:fails>
    (e,) = info.value.exceptions
    assert notes(e) == [f"spawned at {site('fails')} into simple_counting_scope 's'"]
    # An unnamed scope leaves a trio task's error as it is, as a nursery does (an anchored
    # pytest.raises(match=...) reads the notes too); spawned senders, which a nursery has no
    # counterpart of, are noted in every scope
    with pytest.raises(ExceptionGroup) as info:
        async with sx.counting_scope() as scope:
            scope.start_soon(fails)
            scope.spawn(sx.just() | sx.then(boom))  # <site:boom-unnamed>
    by_type = {type(e): notes(e) for e in info.value.exceptions}
    assert by_type == {
        KeyError: [],
        ValueError: [f"spawned at {site('boom-unnamed')} into counting_scope"],
    }


async def test_note_on_a_group_raised_by_spawned_work_and_on_a_future_error() -> None:
    async def group() -> None:
        raise ExceptionGroup("g", [ValueError(1), KeyError(2)])

    with pytest.raises(ExceptionGroup) as info:
        async with sx.counting_scope(name="g") as scope:
            f = scope.spawn_future(sx.just() | sx.then(boom))  # <site:future-boom>
            with pytest.raises(ValueError) as fe:
                await f
            assert notes(fe.value) == [f"spawned at {site('future-boom')} into counting_scope 'g'"]
            scope.spawn(group())  # <site:group>
    (g,) = info.value.exceptions
    assert isinstance(g, ExceptionGroup)
    assert notes(g) == [f"spawned at {site('group')} into counting_scope 'g'"]


def test_note_through_sync_wait_of_join() -> None:
    scope = sx.simple_counting_scope(name="sync")
    tok = scope.get_token()
    sx.spawn(sx.just() | sx.then(boom), tok)  # <site:sync>
    with pytest.raises(ExceptionGroup) as info:
        sx.sync_wait(scope.join())
    (e,) = info.value.exceptions
    assert notes(e) == [f"spawned at {site('sync')} into simple_counting_scope 'sync'"]


async def test_note_on_a_keyboard_interrupt_of_a_hosted_task() -> None:
    async def interrupt() -> None:
        raise KeyboardInterrupt

    with pytest.raises(BaseExceptionGroup) as info:
        async with sx.counting_scope(name="ki") as scope:
            scope.start_soon(interrupt)  # <site:ki>
            await trio.sleep_forever()
    (e,) = info.value.exceptions
    assert isinstance(e, KeyboardInterrupt)
    assert notes(e) == [f"spawned at {site('ki')} into counting_scope 'ki'"]


async def test_note_on_a_keyboard_interrupt_of_a_coroutine_sender() -> None:
    async def interrupt() -> None:
        await trio.sleep(0)
        raise KeyboardInterrupt

    with pytest.raises(BaseExceptionGroup) as info:
        async with sx.counting_scope(name="ki2") as scope:
            scope.spawn(interrupt())  # <site:ki2>
            await trio.sleep_forever()
    (e,) = info.value.exceptions
    assert isinstance(e, KeyboardInterrupt)
    assert notes(e) == [f"spawned at {site('ki2')} into counting_scope 'ki2'"]


def test_a_note_is_added_once_and_not_to_error_values() -> None:
    from structexec._scopes._site import add_note

    e = ValueError()
    add_note(e, "n")
    add_note(e, "n")
    assert notes(e) == ["n"]
    add_note(42, "n")  # an error datum that is not an exception: left alone


# --------------------------------------------------------------------------- signal


def test_install_dump_on_signal_prints_the_tree_of_a_running_program() -> None:
    import signal

    if not hasattr(signal, "SIGUSR1"):  # pragma: no cover - Windows
        pytest.skip("needs SIGUSR1")
    r = run_child(
        """
        import os, signal, trio, structexec as sx
        old = sx.install_dump_on_signal(signal.SIGUSR1)
        assert old == signal.SIG_DFL

        async def main():
            async with sx.counting_scope(name="signalled") as scope:
                scope.spawn(sx.schedule_after(sx.trio_scheduler(), 100.0))
                await trio.sleep(0)
                os.kill(os.getpid(), signal.SIGUSR1)
                await trio.sleep(0.2)  # the handler runs, the program goes on
                print("still running", flush=True)
                scope.request_stop()
        trio.run(main)
        assert signal.signal(signal.SIGUSR1, old) is not signal.SIG_DFL
        print("done", flush=True)
        """,
        timeout=60,
    )
    assert r.returncode == 0 and not r.timed_out, str(r)
    assert r.stdout.splitlines() == ["still running", "done"], str(r)
    assert "structexec operation tree:" in r.stderr
    assert "counting_scope 'signalled' [open, 1 associated" in r.stderr
    assert "schedule_after(trio_scheduler, 100.0) spawned at <string>:" in r.stderr


def test_scope_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="stop_grace"):
        sx.counting_scope(stop_grace=-1)
    assert sx.simple_counting_scope(name=3)._name == "3"  # type: ignore[arg-type]


async def test_a_tree_taken_on_another_thread() -> None:
    async with sx.counting_scope(name="from-thread") as scope:
        scope.spawn(sx.schedule_after(sx.trio_scheduler(), 100.0))  # <site:from-thread>
        tree = await trio.to_thread.run_sync(sx.operation_tree)
        (op,) = find_scope("from-thread", tree).operations
        assert (op.spawned_at, op.description) == (
            site("from-thread"), "schedule_after(trio_scheduler, 100.0)"
        )
        assert op.state.startswith("waiting on a timer")
        scope.request_stop()


def test_sites_through_every_spawn_entry_point() -> None:
    scope = sx.counting_scope(name="entries")
    tok = scope.get_token()
    started: list[Any] = []

    class Pending(sx.Sender[None]):
        def connect(self, rcvr: Any) -> Any:
            class Op:
                def start(self) -> None:
                    started.append(rcvr)

            return Op()

    sx.spawn(Pending(), tok)  # <site:e1>
    scope.spawn(Pending())  # <site:e2>
    sx.spawn(Pending(), tok, sx.env())  # <site:e3>
    f1 = sx.spawn_future(Pending(), tok)  # <site:e4>
    f2 = scope.spawn_future(Pending())  # <site:e5>

    old = FAST.spawn
    FAST.spawn = False
    try:
        scope.spawn(Pending())  # <site:e6>
        sx.spawn(Pending(), tok)  # <site:e7>
    finally:
        FAST.spawn = old
    sites = sorted(o.spawned_at or "" for o in scope.outstanding())
    assert sites == sorted(site(f"e{i}") for i in range(1, 8))
    for r in started:
        r.set_value()
    sx.sync_wait(sx.when_all(f1, f2))
    scope.close()
    sx.sync_wait(scope.join())


@pytest.mark.parametrize("direct", [True, False])
async def test_sites_and_notes_of_coroutines_spawned_into_an_entered_scope(direct: bool) -> None:
    # scope.spawn(coro) / scope.spawn_future(coro) inside `async with` take a direct path
    # (FAST.spawn_coro); both paths report the same sites, descriptions and notes.

    async def waits(ev: trio.Event) -> None:
        await ev.wait()

    async def fails() -> None:
        raise KeyError("k")

    old = FAST.spawn_coro
    FAST.spawn_coro = direct
    try:
        ev = trio.Event()
        with pytest.raises(ExceptionGroup) as info:
            async with sx.counting_scope(name="coros") as scope:
                scope.spawn(waits(ev))  # <site:c1>
                fut = scope.spawn_future(waits(ev))  # <site:c2>
                await trio.testing.wait_all_tasks_blocked()
                ops = {o.kind: o for o in scope.outstanding()}
                assert ops["spawn"].spawned_at == site("c1")
                assert ops["spawn_future"].spawned_at == site("c2")
                assert ops["spawn"].description.endswith("waits() (coroutine)")
                assert ops["spawn_future"].description == ops["spawn"].description
                assert ops["spawn_future"].state == ops["spawn"].state == "in a trio task"
                ev.set()
                await fut
                bad = scope.spawn_future(fails())  # <site:c4>
                with pytest.raises(KeyError) as fe:
                    await bad
                assert notes(fe.value) == [f"spawned at {site('c4')} into counting_scope 'coros'"]
                scope.spawn(fails())  # <site:c3>
    finally:
        FAST.spawn_coro = old
    assert len(info.value.exceptions) == 1, info.value.exceptions
    (e,) = info.value.exceptions
    assert notes(e) == [f"spawned at {site('c3')} into counting_scope 'coros'"]


def test_a_dump_takes_no_lock_the_interrupted_code_may_hold() -> None:
    # A signal handler runs between two bytecodes of the main thread, maybe while it holds
    # a scope's lock: the dump must not wait for it (a child process: a hang is a failure).
    r = run_child(
        """
        import io, structexec as sx
        scope = sx.simple_counting_scope(name="locked")
        sx.spawn(sx.just_error(ValueError()), scope.get_token())
        with scope._assoc._lock:
            text = sx.dump(io.StringIO())
        print("locked" in text and "1 error(s) recorded" in text, flush=True)
        scope.close()
        try:
            sx.sync_wait(scope.join())
        except Exception:
            pass
        """,
        timeout=60,
    )
    assert not r.timed_out and r.returncode == 0, str(r)
    assert r.stdout.strip() == "True", str(r)


def test_spawn_from_a_c_level_thread_entry() -> None:
    # _thread.start_new_thread(sx.spawn, ...): no Python frame above the library; the spawn
    # site falls back to the library's own frame instead of failing.
    import _thread

    scope = sx.simple_counting_scope(name="c-entry")
    tok = scope.get_token()
    ran = threading.Event()
    _thread.start_new_thread(sx.spawn, (sx.just() | sx.then(ran.set), tok))
    assert ran.wait(10)
    ran2 = threading.Event()
    _thread.start_new_thread(sx.spawn_future, (sx.just() | sx.then(ran2.set), tok))
    assert ran2.wait(10)
    sx.sync_wait(scope.join())


async def test_a_dump_keeps_no_local_of_a_task_alive() -> None:
    # Reading a task's arguments goes through its frame's f_locals; before Python 3.13 that
    # is a snapshot the frame keeps: the tree empties it again, so a value the task drops
    # after the dump is freed at once.
    refs: list[Any] = []
    ev = trio.Event()
    dropped = trio.Event()

    async def holder(n: int) -> None:
        obj = _Target()
        refs.append(weakref.ref(obj))
        await ev.wait()
        del obj
        dropped.set()
        await trio.sleep_forever()

    gc.collect()
    gc.disable()
    try:
        async with sx.counting_scope(name="locals") as scope:
            scope.start_soon(holder, 1)
            await trio.testing.wait_all_tasks_blocked()
            (op,) = scope.outstanding()
            assert op.description == f"{holder.__qualname__}(n=1)"
            ev.set()
            await dropped.wait()
            assert refs[0]() is None
            scope.request_stop()
    finally:
        gc.enable()
