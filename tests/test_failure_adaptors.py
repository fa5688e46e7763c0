"""Failure semantics of the sender adaptors, coroutine senders and ``task``.

Defects 8 (``when_all``: a second completion, errors dropped silently), 9 (arguments accepted
silently that failed later), 11 (a swallowed stop: one rule everywhere), and the sweep of the
paths where user code runs (then/upon/let functions, bulk functions, coroutine senders, task
bodies, stop callbacks, receivers) for an ``Exception``, a ``BaseException``, a raise during
``start`` and a raise during a completion. The outcome is always an error completion, the
``BaseException`` propagating to whoever runs the event loop (``trio.run``, ``sync_wait``),
or a documented terminate: never a hang, never a lost error. What could hang or abort runs in
a child process with a hard timeout (``run_child``).
"""

from __future__ import annotations

import functools
import gc
import sys
import types
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import trio
from _helpers import BadStart
from _subproc import run_child
from hypothesis import given, settings
from hypothesis import strategies as st

import structexec as sx
from structexec._core._fastpaths import FAST
from structexec.testing import ManualScheduler, RecordingReceiver, TerminateRecorder

# --------------------------------------------------------------------------- helpers


class _Scripted(sx.Sender[Any]):
    """A sender whose operation, when started, calls the given completions in order (a
    broken sender for tests); what the second one raises is kept in ``raised``."""

    def __init__(self, *calls: tuple[str, tuple[Any, ...]]) -> None:
        self.calls = calls
        self.raised: list[BaseException] = []

    def connect(self, rcvr: Any) -> Any:
        outer = self

        class Op:
            def start(self) -> None:
                for how, args in outer.calls:
                    try:
                        getattr(rcvr, how)(*args)
                    except Exception as e:
                        outer.raised.append(e)

        return Op()


@pytest.fixture
def fast_path() -> Iterator[None]:
    saved = FAST.when_all_nursery
    yield
    FAST.when_all_nursery = saved


@pytest.fixture
def raising_terminate() -> Iterator[list[str]]:
    """A terminate handler that records and raises (instead of aborting the test process)."""
    reasons: list[str] = []

    def handler(reason: str, exc: BaseException | None) -> None:
        reasons.append(reason)
        raise AssertionError(f"terminate: {reason}") from exc

    prev = sx.set_terminate_handler(handler)
    try:
        yield reasons
    finally:
        sx.set_terminate_handler(prev)


# ================================================ when_all: second completions, lost errors


def test_when_all_rejects_a_second_completion_of_a_child() -> None:
    """[exec.when.all], [exec.async.ops]: a child's second completion (value, then error)
    raises ``RuntimeError`` in the child, as every other adaptor's receiver does; the first
    completion stands (the error does not replace the value)."""
    child = _Scripted(("set_value", (1,)), ("set_error", (ValueError("late"),)))
    rec = RecordingReceiver()
    rec.run(sx.when_all(child, sx.just(2)))
    assert rec.value == (1, 2)
    assert len(child.raised) == 1
    assert isinstance(child.raised[0], RuntimeError)
    assert "completes exactly once" in str(child.raised[0])


def test_when_all_second_value_does_not_complete_it_while_a_sibling_runs() -> None:
    """[exec.when.all]: when_all completes only when every child has completed once; a
    child's second set_value is rejected and does not count as the sibling's completion."""
    ms = ManualScheduler()
    child = _Scripted(("set_value", ()), ("set_value", ()))
    rec = RecordingReceiver()
    rec.run(sx.when_all(child, sx.schedule(ms)))
    assert [type(e) for e in child.raised] == [RuntimeError]
    assert not rec.done  # the scheduled sibling has not run yet
    ms.run_one()
    assert rec.value == ()


def test_when_all_rejects_a_second_stopped() -> None:
    """[exec.when.all], [exec.async.ops]: the same for stopped after an error."""
    err = KeyError("first")
    child = _Scripted(("set_error", (err,)), ("set_stopped", ()))
    rec = RecordingReceiver()
    rec.run(sx.when_all(child))
    assert rec.error is err
    assert [type(e) for e in child.raised] == [RuntimeError]


def _notes(e: BaseException) -> list[str]:
    return list(getattr(e, "__notes__", []))


def test_when_all_reports_the_errors_that_lost_as_notes() -> None:
    """[exec.when.all]: the first error is the result (first-error-wins); every later one is
    named in a note on it, never dropped silently."""
    e1, e2, e3 = ValueError("one"), KeyError("two"), OSError("three")
    with pytest.raises(ValueError) as info:
        sx.sync_wait(
            sx.when_all(sx.just_error(e1), sx.just(5), sx.just_error(e2), sx.just_error(e3))
        )
    assert info.value is e1
    notes = _notes(e1)
    assert len(notes) == 2
    assert "child #2" in notes[0] and "KeyError('two')" in notes[0]
    assert "child #3" in notes[1] and "OSError('three')" in notes[1]
    assert all("[exec.when.all]" in n for n in notes)


def test_when_all_notes_are_not_duplicated_for_a_shared_exception() -> None:
    """[exec.when.all]: a sender that is run twice with the same exception objects does not
    make the delivered exception collect copies of the same note; an error identical to the
    delivered one is not noted on itself."""
    e1, e2 = ValueError("one"), KeyError("two")
    s = sx.when_all(sx.just_error(e1), sx.just_error(e2), sx.just_error(e1))
    for _ in range(3):
        with pytest.raises(ValueError):
            sx.sync_wait(s)
    assert len(_notes(e1)) == 1
    assert _notes(e2) == []


def test_when_all_non_exception_error_is_not_changed_and_the_others_are_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """[exec.when.all]: a non-exception error datum cannot carry notes and is delivered
    unchanged; the errors that lost go to ``sys.unraisablehook`` (documented choice)."""
    seen: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    rec = RecordingReceiver()
    rec.run(sx.when_all(sx.just_error(42), sx.just_error(KeyError("k")), sx.just_error("s")))
    assert rec.error == 42
    assert [type(u.exc_value).__name__ for u in seen] == ["KeyError", "ErrorValue"]
    assert "child #1" in seen[0].err_msg and "[exec.when.all]" in seen[0].err_msg
    assert seen[1].exc_value.error == "s"


async def _bad(e: BaseException) -> None:
    raise e


@pytest.mark.parametrize("fast", [True, False], ids=["fast-path", "general-path"])
async def test_when_all_notes_in_trio_match_sync_wait(fast: bool, fast_path: None) -> None:
    """[exec.when.all]: ``await when_all(<coroutines>)`` in a trio task, on the nursery fast
    path and on the general path, notes the errors that lost exactly as sync_wait does."""
    FAST.when_all_nursery = fast
    errs = [ValueError("a"), KeyError("b"), OSError("c")]
    with pytest.raises(Exception) as info:
        await sx.when_all(*(_bad(e) for e in errs))
    first = info.value
    assert first in errs
    others = [e for e in errs if e is not first]
    notes = _notes(first)
    assert len(notes) == 2
    for e in others:
        assert any(repr(e) in n and f"child #{errs.index(e)}" in n for n in notes)


@settings(deadline=None, max_examples=60)
@given(st.lists(st.sampled_from(["v", "e", "s"]), min_size=1, max_size=6))
def test_when_all_never_loses_an_error(kinds: list[str]) -> None:
    """[exec.when.all]: for any mix of value/error/stopped children, the result is the first
    error if there is one (else stopped, else the values), and every other error is named in
    a note on it."""
    errs = [ValueError(i) for i in range(len(kinds))]
    children = [
        sx.just(i) if k == "v" else sx.just_error(errs[i]) if k == "e" else sx.just_stopped()
        for i, k in enumerate(kinds)
    ]
    rec = RecordingReceiver()
    rec.run(sx.when_all(*children))
    failing = [errs[i] for i, k in enumerate(kinds) if k == "e"]
    if failing:
        assert rec.error is failing[0]
        notes = _notes(failing[0])
        assert len(notes) == len(failing) - 1
        for e, n in zip(failing[1:], notes):
            assert repr(e) in n
    elif "s" in kinds:
        assert rec.stopped
    else:
        assert rec.value == tuple(range(len(kinds)))


# ==================================================== clear errors at build/connect time


@pytest.mark.parametrize("state", ["live", "stopped", "no source"])
def test_inplace_stop_callback_rejects_a_non_callable(state: str, raising_terminate: Any) -> None:
    """[stoptoken.concepts], [stopcallback.inplace]: a callback that is not callable raises
    ``TypeError`` naming ``fn`` at construction (it used to terminate at request_stop), for a
    live token, an already stopped one (where it would run at once) and one without a
    source."""
    src = sx.inplace_stop_source()
    tok = sx.inplace_stop_token() if state == "no source" else src.get_token()
    if state == "stopped":
        src.request_stop()
    with pytest.raises(TypeError, match="fn must be a callable"):
        sx.inplace_stop_callback(tok, 42)  # type: ignore[arg-type]
    src.request_stop()
    assert raising_terminate == []


@pytest.mark.parametrize(
    "make",
    [
        lambda: sx.stop_callback_for(sx.inplace_stop_source().get_token(), 42),
        lambda: sx.stop_callback_for(sx.never_stop_token(), 42),
        lambda: sx.never_stop_token.callback_type(sx.never_stop_token(), 42),
        lambda: sx.stop_callback_for(
            sx.combined_stop_token(sx.inplace_stop_source().get_token(), sx.never_stop_token()),
            42,
        ),
    ],
    ids=["stop_callback_for-inplace", "stop_callback_for-never", "never-callback_type", "combined"],
)
def test_other_stop_callback_constructors_reject_a_non_callable(make: Any) -> None:
    """[stoptoken.concepts]: every stop-callback constructor checks ``fn``."""
    with pytest.raises(TypeError, match="fn must be a callable"):
        make()


@pytest.mark.parametrize("rcvr", [None, 42, sx.just(1)], ids=["None", "int", "sender"])
def test_connect_rejects_a_non_receiver(rcvr: Any) -> None:
    """[exec.connect], [exec.recv.concepts]: ``connect(sndr, rcvr)`` with something that has
    no completion method raises ``TypeError`` naming ``rcvr`` (it used to fail with an
    AttributeError at the completion)."""
    with pytest.raises(TypeError, match="rcvr must be a receiver"):
        sx.connect(sx.just(1) | sx.then(lambda x: x), rcvr)


def test_connect_accepts_minimal_receivers() -> None:
    """[exec.recv.concepts]: a receiver needs only the completions it gets: a class with only
    ``set_stopped``, or an object whose completion methods are instance attributes."""
    got: list[Any] = []

    class OnlyStopped:
        def set_stopped(self) -> None:
            got.append("stopped")

    sx.connect(sx.just_stopped(), OnlyStopped()).start()
    ns = types.SimpleNamespace(set_value=lambda *v: got.append(v))
    sx.connect(sx.just(1, 2), ns).start()
    assert got == ["stopped", (1, 2)]


def test_a_coroutine_connected_twice_raises_at_the_second_connect() -> None:
    """[exec.connect] connect-awaitable: one coroutine object connected twice while the first
    operation lives raises ``TypeError`` at the second ``connect`` (it used to fail when the
    second one started); the first operation still runs it."""

    async def once() -> int:
        return 7

    c = once()
    r1 = RecordingReceiver()
    op1 = r1.connect(c)
    with pytest.raises(TypeError, match="already connected"):
        sx.connect(c, RecordingReceiver())
    r1.start(op1)
    assert r1.value == (7,)
    with pytest.raises(TypeError, match="already been started or closed"):
        sx.connect(c, RecordingReceiver())


def test_when_all_of_one_coroutine_twice_raises_at_connect_and_closes_it() -> None:
    """[exec.when.all], [exec.connect]: ``when_all(c, c)`` raises at connect, and the
    coroutine is closed at once (no "never awaited" warning later)."""

    async def once() -> int:
        return 1

    c = once()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(TypeError, match="already connected"):
            sx.sync_wait(sx.when_all(c, c))
        gc.collect()
    assert c.cr_frame is None  # closed


async def _async_fn(*args: Any) -> int:
    return 1


class _Obj:
    async def meth(self, *args: Any) -> int:
        return 1


@pytest.mark.parametrize(
    ("alg", "let"),
    [(sx.then, "let_value"), (sx.upon_error, "let_error"), (sx.upon_stopped, "let_stopped")],
    ids=["then", "upon_error", "upon_stopped"],
)
@pytest.mark.parametrize(
    "f",
    [_async_fn, _Obj().meth, functools.partial(_async_fn, 1)],
    ids=["function", "method", "partial"],
)
@pytest.mark.parametrize("form", ["closure", "two-args"])
def test_then_rejects_an_async_function(alg: Any, let: str, f: Any, form: str) -> None:
    """[exec.then]: ``then(async_fn)`` (and ``upon_error``/``upon_stopped``) raises
    ``TypeError`` when built, saying to use the matching ``let_*`` or to await the work in a
    coroutine (its function's coroutine would be sent as a value and never run)."""
    with pytest.raises(TypeError, match=rf"async function.*sx\.{let}\(f\)") as info:
        if form == "closure":
            alg(f)
        else:
            alg(sx.just(), f)
    assert "f=" in str(info.value)


def test_let_value_of_an_async_function_runs_the_coroutine() -> None:
    """[exec.let]: the advice works: a coroutine object is a sender, so ``let_value`` runs
    it."""
    assert sx.sync_wait(sx.just(2) | sx.let_value(_async_fn)) == (1,)


def _returns_coroutine(*args: Any) -> Any:
    return _async_fn()


@pytest.mark.parametrize(
    "make",
    [
        lambda: sx.just(1) | sx.then(_returns_coroutine),  # the fused just|then op
        lambda: sx.just(1) | sx.then(lambda x: x) | sx.then(_returns_coroutine),  # fused chain
        lambda: sx.schedule(sx.inline_scheduler()) | sx.then(_returns_coroutine),  # _ThenOp
        lambda: sx.just_error(KeyError()) | sx.upon_error(_returns_coroutine),
        lambda: sx.just_stopped() | sx.upon_stopped(_returns_coroutine),
        lambda: sx.just() | sx.upon_stopped(lambda: 0) | sx.then(_returns_coroutine),
    ],
    ids=[
        "just|then",
        "just|then|then",
        "schedule|then",
        "upon_error",
        "upon_stopped",
        "mixed chain",
    ],
)
def test_a_function_returning_a_coroutine_completes_with_type_error(make: Any) -> None:
    """[exec.then]: a then/upon function that returns a coroutine object (a lambda calling an
    async function, an object with an async ``__call__``) completes ``set_error(TypeError)``
    and the coroutine is closed (no "never awaited" warning)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(TypeError, match=r"returned a coroutine object.*let_"):
            sx.sync_wait(make())
        gc.collect()


@pytest.mark.parametrize("alg", [sx.bulk, sx.bulk_chunked, sx.bulk_unchunked])
def test_bulk_rejects_an_async_function(alg: Any) -> None:
    """[exec.bulk]: an async bulk function would create coroutines that never run."""
    with pytest.raises(TypeError, match="async function"):
        alg(sx.seq, 3, _async_fn)
    with pytest.raises(TypeError, match="async function"):
        alg(sx.just(), sx.seq, 3, _async_fn)


# ============================================================== a swallowed stop


async def _swallows_stop() -> str:
    try:
        await sx.just_stopped()
    except sx.Stopped:
        return "swallowed"
    return "resumed"  # pragma: no cover - never resumed with a value


async def _swallows_everything() -> str:
    try:
        await (sx.schedule(sx.trio_scheduler()) | sx.let_value(lambda: sx.just_stopped()))
    except BaseException:
        return "swallowed"
    return "resumed"  # pragma: no cover


async def _reraises_stop(log: list[str]) -> str:
    try:
        await sx.just_stopped()
    except sx.Stopped:
        log.append("cleanup")
        raise
    return "resumed"  # pragma: no cover


_SWALLOW = "caught the sx.Stopped"


def test_swallowed_stop_under_sync_wait() -> None:
    """[exec.with.awaitable.senders] (unhandled_stopped): a coroutine run as a sender that
    catches the Stopped of an awaited sender and returns completes with RuntimeError."""
    with pytest.raises(RuntimeError, match=_SWALLOW) as info:
        sx.sync_wait(_swallows_stop())
    assert "stopped_as_optional" in str(info.value)
    assert "DESIGN" not in str(info.value)


def test_swallowed_stop_in_a_task_under_sync_wait() -> None:
    """[task.promise]: the same rule in a task."""
    with pytest.raises(RuntimeError, match=_SWALLOW):
        sx.sync_wait(sx.task(_swallows_stop)())


@pytest.mark.parametrize("fast", [True, False], ids=["fast-path", "general-path"])
async def test_swallowed_stop_in_a_trio_hosted_coroutine(fast: bool, fast_path: None) -> None:
    """[exec.with.awaitable.senders]: a coroutine hosted in a trio task (a when_all child,
    on the nursery fast path and on the general path) follows the same rule: it used to
    deliver the value silently."""
    FAST.when_all_nursery = fast
    with pytest.raises(RuntimeError, match=_SWALLOW):
        await sx.when_all(_swallows_stop(), sx.just(1))


async def test_swallowed_stop_in_a_coroutine_started_on_the_trio_scheduler() -> None:
    """[exec.with.awaitable.senders]: ``starts_on(trio_scheduler(), coro)`` hosts the
    coroutine in a trio task of its own: same rule."""
    with pytest.raises(RuntimeError, match=_SWALLOW):
        await sx.starts_on(sx.trio_scheduler(), _swallows_stop())


async def test_swallowed_stop_when_catching_base_exception_in_trio() -> None:
    """[exec.with.awaitable.senders]: ``except BaseException`` around an await whose sender
    completes stopped on the trio scheduler is a swallowed stop too."""
    with pytest.raises(RuntimeError, match=_SWALLOW):
        await sx.when_all(_swallows_everything(), sx.just())


async def test_swallowed_stop_in_a_task_in_trio() -> None:
    """[task.promise]: a task awaited from trio, and one started as an operation."""
    t = sx.task(_swallows_stop)
    with pytest.raises(RuntimeError, match=_SWALLOW):
        await t()
    with pytest.raises(RuntimeError, match=_SWALLOW):
        await sx.when_all(t(), sx.just())


async def test_a_plain_trio_task_may_catch_stopped() -> None:
    """docs/task.md 'How "stopped" unwinds a task': the rule is about coroutines run as senders; in
    a plain trio task, ``sx.Stopped`` is an ordinary exception that the task may catch."""
    assert await _swallows_stop() == "swallowed"


def test_a_reraised_stop_completes_stopped_under_sync_wait() -> None:
    """[exec.with.awaitable.senders]: catching Stopped to clean up and re-raising it
    completes stopped (a coroutine and a task under sync_wait)."""
    log: list[str] = []
    assert sx.sync_wait(_reraises_stop(log)) is None
    assert sx.sync_wait(sx.task(_reraises_stop)(log)) is None
    assert log == ["cleanup"] * 2


async def test_a_reraised_stop_completes_stopped_in_trio() -> None:
    """[exec.with.awaitable.senders]: the same in trio (both when_all paths, and a task)."""
    log: list[str] = []
    for fast in (True, False):
        FAST.when_all_nursery = fast
        try:
            with pytest.raises(sx.Stopped):
                await sx.when_all(_reraises_stop(log), sx.just())
        finally:
            FAST.when_all_nursery = True
    with pytest.raises(sx.Stopped):
        await sx.when_all(sx.task(_reraises_stop)(log), sx.just())
    assert log == ["cleanup"] * 3


# =========================================================================== sweep: Exception


def _raise(*args: Any) -> Any:
    raise ValueError("boom")


async def _coro_raises() -> None:
    await sx.just()
    raise ValueError("boom")


_EXCEPTION_SITES = {
    "then": lambda: sx.just(1) | sx.then(_raise),
    "then-chain": lambda: sx.just(1) | sx.then(lambda x: x) | sx.then(_raise),
    "upon_error": lambda: sx.just_error(KeyError()) | sx.upon_error(_raise),
    "upon_stopped": lambda: sx.just_stopped() | sx.upon_stopped(_raise),
    "let_value": lambda: sx.just(1) | sx.let_value(_raise),
    "let_error": lambda: sx.just_error(KeyError()) | sx.let_error(_raise),
    "bulk": lambda: sx.just(1) | sx.bulk(sx.seq, 3, _raise),
    "bulk_chunked": lambda: sx.just(1) | sx.bulk_chunked(sx.seq, 3, _raise),
    "coroutine": _coro_raises,
    "task": lambda: sx.task(_coro_raises)(),
    "when_all": lambda: sx.when_all(sx.just(1), sx.just() | sx.then(_raise)),
    "start raises": lambda: BadStart(ValueError("boom")),
}


@pytest.mark.parametrize("site", list(_EXCEPTION_SITES))
def test_an_exception_in_user_code_is_an_error_completion_under_sync_wait(site: str) -> None:
    """[exec.then], [exec.let], [exec.bulk], [exec.task]: an ``Exception`` from user code is
    an error completion (TRY-EVAL); sync_wait raises it. A ``start()`` that raises (a contract
    violation) propagates to the caller."""
    with pytest.raises(ValueError, match="boom"):
        sx.sync_wait(_EXCEPTION_SITES[site]())


@pytest.mark.parametrize("site", list(_EXCEPTION_SITES))
async def test_an_exception_in_user_code_is_raised_by_await_in_trio(site: str) -> None:
    """The same sites awaited from a trio task, directly and inside a coroutine hosted as a
    when_all child ([exec.when.all], [exec.as.awaitable])."""
    with pytest.raises(ValueError, match="boom"):
        await _EXCEPTION_SITES[site]()

    async def hosted() -> Any:
        return await _EXCEPTION_SITES[site]()

    with pytest.raises(ValueError, match="boom"):
        await sx.when_all(hosted(), sx.schedule(sx.trio_scheduler()))


async def _awaits_bad_start() -> str:
    try:
        await BadStart(ValueError("start"))
    except ValueError as e:
        return f"caught {e}"
    return "no"  # pragma: no cover


def test_a_raising_start_is_raised_at_the_await_under_sync_wait() -> None:
    """[exec.opstate.start]: an awaited operation whose ``start()`` raises: the await raises
    it inside the coroutine / task body under sync_wait too (it used to escape past the
    suspended coroutine), as an await in a trio task does."""
    assert sx.sync_wait(_awaits_bad_start()) == ("caught start",)
    assert sx.sync_wait(sx.task(_awaits_bad_start)()) == ("caught start",)


async def test_a_raising_start_is_raised_at_the_await_in_trio() -> None:
    """[exec.opstate.start]: the same in trio: a plain await, a hosted coroutine, a task
    awaited from trio and a task started as an operation (which used to terminate)."""
    assert await _awaits_bad_start() == "caught start"
    assert await sx.when_all(_awaits_bad_start(), sx.just()) == "caught start"
    t = sx.task(_awaits_bad_start)
    assert await t() == "caught start"
    assert await sx.when_all(t(), sx.just()) == "caught start"


# =========================================================================== sweep: completions


class _RaisingReceiver:
    def __init__(self) -> None:
        self.calls = 0

    def get_env(self) -> Any:
        return sx.env()

    def set_value(self, *vals: Any) -> None:
        self.calls += 1
        raise ValueError("receiver")

    def set_error(self, err: Any) -> None:  # pragma: no cover - must not be reached
        self.calls += 1
        raise AssertionError("set_error after a raising set_value")

    set_stopped = set_error


@pytest.mark.parametrize(
    "make",
    [
        lambda: sx.just(1) | sx.then(lambda x: x),
        lambda: sx.just(1) | sx.then(lambda x: x) | sx.then(lambda x: x),
        lambda: sx.schedule(sx.inline_scheduler()) | sx.then(lambda: 1),
        lambda: sx.when_all(sx.just(1), sx.just(2)),
        lambda: sx.just(1) | sx.let_value(lambda x: sx.just(x)),
        lambda: sx.just(1) | sx.bulk(sx.seq, 2, lambda i, x: None),
    ],
    ids=["just|then", "chain", "schedule|then", "when_all", "let_value", "bulk"],
)
def test_a_receiver_that_raises_is_not_completed_again(make: Any) -> None:
    """[exec.recv.concepts]: completions must not raise. If the receiver's ``set_value``
    raises anyway, the exception propagates to whoever completed it (here ``start``); the
    adaptor does not turn it into a second completion (``set_error``)."""
    r = _RaisingReceiver()
    with pytest.raises(ValueError, match="receiver"):
        sx.connect(make(), r).start()
    assert r.calls == 1


async def test_a_raising_receiver_of_a_trio_hosted_coroutine_terminates(
    sx_terminate_calls: TerminateRecorder,
) -> None:
    """[exec.recv.concepts]: a receiver that raises when a trio-hosted coroutine completes
    it has nobody to raise to (the completion runs in the hosting trio task): the terminate
    handler is called (documented; the default aborts)."""

    async def c() -> int:
        return 1

    r = _RaisingReceiver()
    sx.connect(c(), r).start()
    for _ in range(5):
        await trio.lowlevel.checkpoint()
    assert r.calls == 1
    assert len(sx_terminate_calls.calls) == 1
    assert "[exec.recv.concepts]" in sx_terminate_calls.reasons[0]


def test_a_stop_callback_that_raises_calls_terminate_and_the_others_still_run(
    sx_terminate_calls: TerminateRecorder,
) -> None:
    """[stopsource.inplace]: a stop callback must not raise; one that does calls the
    terminate handler (documented), and the other callbacks still run."""
    src = sx.inplace_stop_source()
    ran: list[int] = []
    cbs = [
        sx.inplace_stop_callback(src.get_token(), lambda: ran.append(1)),
        sx.inplace_stop_callback(src.get_token(), _raise),
        sx.inplace_stop_callback(src.get_token(), lambda: ran.append(3)),
    ]
    assert src.request_stop()
    assert sorted(ran) == [1, 3]
    assert sx_terminate_calls.reasons == ["stop callback raised"]
    for cb in cbs:
        cb.close()


# =========================================================================== sweep: BaseException

#: Where user code raises, as a snippet that defines ``make()`` (a sender factory) from
#: ``boom`` (the raising function). Each runs under sync_wait and awaited in trio.run.
_BASE_SITES = {
    "then": "def make(): return sx.just(1) | sx.then(boom)",
    "then-chain": "def make(): return sx.just(1) | sx.then(lambda x: x) | sx.then(boom)",
    "upon_error": "def make(): return sx.just_error(KeyError()) | sx.upon_error(boom)",
    "upon_stopped": "def make(): return sx.just_stopped() | sx.upon_stopped(boom)",
    "let_value": "def make(): return sx.just(1) | sx.let_value(boom)",
    "bulk": "def make(): return sx.just(1) | sx.bulk(sx.seq, 3, boom)",
    "when_all": "def make(): return sx.when_all(sx.just(1) | sx.then(boom), sx.just(2))",
    "coroutine": ("async def c():\n    await sx.just()\n    boom()\ndef make(): return c()"),
    "task": ("@sx.task\nasync def t():\n    await sx.just()\n    boom()\ndef make(): return t()"),
    "coroutine-in-when_all": (
        "async def c():\n"
        "    boom()\n"
        "def make(): return sx.when_all(c(), sx.just(1) | sx.then(lambda x: x))"
    ),
    "task-in-when_all": (
        "@sx.task\n"
        "async def t():\n"
        "    await sx.just()\n"
        "    boom()\n"
        "@sx.task\n"
        "async def u():\n"
        "    await sx.just()\n"
        "def make(): return sx.when_all(t(), u())"
    ),
    "start": (
        "class Bad(sx.Sender):\n"
        "    def connect(self, r):\n"
        "        class Op:\n"
        "            def start(self): boom()\n"
        "        return Op()\n"
        "def make(): return sx.when_all(sx.just(), Bad())"
    ),
}

_BASE_CHILD = """
import structexec as sx, trio
{site}

def boom(*args):
    raise {exc}

def outcome(f):
    try:
        f()
    except {name} as e:
        return "raised"
    except BaseException as e:
        return "other " + type(e).__name__ + " " + repr(e.__cause__)
    return "returned"

async def awaited():
    await make()

async def hosted():
    async def inner():
        await make()
    await sx.when_all(inner(), sx.schedule(sx.trio_scheduler()))

print("sync_wait", outcome(lambda: sx.sync_wait(make())), flush=True)
print("trio", outcome(lambda: trio.run(awaited)), flush=True)
print("trio-hosted", outcome(lambda: trio.run(hosted)), flush=True)
"""


@pytest.mark.parametrize("site", list(_BASE_SITES))
@pytest.mark.parametrize(
    ("exc", "name"),
    [("KeyboardInterrupt()", "KeyboardInterrupt"), ("SystemExit(3)", "SystemExit")],
    ids=["KeyboardInterrupt", "SystemExit"],
)
def test_a_base_exception_in_user_code_reaches_whoever_runs_the_loop(
    site: str, exc: str, name: str
) -> None:
    """docs/senders.md "What happens when things fail", [exec.then], [exec.let], [exec.bulk],
    [exec.task], [exec.when.all]: a ``KeyboardInterrupt`` or ``SystemExit`` raised by user code is
    never an error datum; it comes out of ``sync_wait`` and out of ``trio.run`` (a plain await, and
    a coroutine hosted in a trio task of its own: it used to crash trio with TrioInternalError),
    never a hang or an abort."""
    r = run_child(_BASE_CHILD.format(site=_BASE_SITES[site], exc=exc, name=name), timeout=60)
    assert not r.timed_out, str(r)
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    assert lines == ["sync_wait raised", "trio raised", "trio-hosted raised"], str(r)
    assert r.returncode == 0, str(r)
    assert "TrioInternalError" not in r.stderr, str(r)


@pytest.mark.parametrize("exc", [ValueError("start"), KeyboardInterrupt("start")], ids=repr)
def test_a_raising_start_inside_let_value_leaves_no_cyclic_garbage(exc: BaseException) -> None:
    """[exec.let]: the second operation's ``start()`` raising (an ``Exception`` or a
    ``KeyboardInterrupt``) propagates out of ``sync_wait`` and leaves no reference cycle of
    the library's objects (the let operation and its second receiver refer to each other
    until a completion, which never comes)."""
    from _helpers import cyclic_garbage_of_sync

    class Op:  # keeps its receiver, as every real operation does
        def __init__(self, rcvr: Any) -> None:
            self.rcvr = rcvr

        def start(self) -> None:
            # a new exception each time: a kept one would keep its traceback's frames alive
            raise type(exc)(*exc.args)

    class Bad(sx.Sender[Any]):
        def connect(self, rcvr: Any) -> Op:
            return Op(rcvr)

    def run() -> None:
        with pytest.raises(type(exc), match="start"):
            sx.sync_wait(sx.just(1) | sx.let_value(lambda _: Bad()))

    assert cyclic_garbage_of_sync(run) == 0
