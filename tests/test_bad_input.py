"""Bad input to the public entry points: a ``TypeError``/``ValueError`` when the sender, scope or
setting is built, naming the function and the argument and saying what is accepted
(docs/senders-adaptors.md). And the one set of numbers every time-taking API accepts: ``int``,
``float``, ``Fraction``, ``Decimal`` (not ``bool``, ``str``, NaN, or a number too large for a
float)."""

from __future__ import annotations

import inspect
import math
import signal
import warnings
from collections.abc import Callable, Iterator
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest
from _subproc import run_child

import structexec as sx
from structexec.testing import ManualScheduler, RecordingReceiver

BIG = 10**400  # float(BIG) raises OverflowError


@pytest.fixture(autouse=True)
def _restore_settings() -> Iterator[None]:
    old_grace = sx.set_stop_grace(None)
    old_handler = signal.getsignal(signal.SIGUSR1) if hasattr(signal, "SIGUSR1") else None
    try:
        yield
    finally:
        sx.set_stop_grace(old_grace)
        if hasattr(signal, "SIGUSR1"):
            signal.signal(signal.SIGUSR1, old_handler)


async def _async_pred() -> bool:
    return True


def _rl_sch() -> Any:
    return sx.run_loop().get_scheduler()


#: (id, the call, the exception type, a regular expression its message must match).
BAD: list[tuple[str, Callable[[], object], type[Exception], str]] = [
    # -- functions that must be callables
    ("then(None)", lambda: sx.then(None), TypeError, r"then\(f\) needs a callable, got NoneType"),
    ("sndr|then(None)", lambda: sx.just() | sx.then(None), TypeError, r"then\(f\) needs a call"),
    ("upon_error(None)", lambda: sx.upon_error(None), TypeError, r"upon_error\(f\) needs a call"),
    ("upon_stopped(1)", lambda: sx.upon_stopped(1), TypeError, r"upon_stopped\(f\) needs a"),
    ("let_value(None)", lambda: sx.let_value(None), TypeError, r"let_value\(f\) needs a callable"),
    ("let_error(1)", lambda: sx.let_error(1), TypeError, r"let_error\(f\) needs a callable"),
    ("let_stopped('x')", lambda: sx.let_stopped("x"), TypeError, r"let_stopped\(f\) needs a call"),
    ("repeat_effect_until(async)", lambda: sx.repeat_effect_until(sx.just(), _async_pred),
     TypeError, r"repeat_effect_until\(\): predicate=_async_pred is an async function"),
    ("repeat_effect_until(async) closure", lambda: sx.repeat_effect_until(_async_pred),
     TypeError, r"predicate=_async_pred is an async function"),
    ("set_terminate_handler(1)", lambda: sx.set_terminate_handler(1), TypeError,  # type: ignore[arg-type]
     r"set_terminate_handler\(\): handler must be a callable .* or None"),
    ("task(None)", lambda: sx.task(None), TypeError, r"@sx.task decorates an `async def` function"),
    # -- times: schedule_after / schedule_at and the schedulers' own methods
    ("schedule_after(BIG)", lambda: sx.schedule_after(_rl_sch(), BIG), ValueError,
     r"^schedule_after: seconds is too large for a float number of seconds, got 1000.*\.\.\. "
     r"\(use math.inf"),
    ("schedule_after(nan)", lambda: sx.schedule_after(_rl_sch(), math.nan), ValueError,
     r"schedule_after: seconds must be >= 0 \(and not NaN\), got nan"),
    ("schedule_after(-1)", lambda: sx.schedule_after(_rl_sch(), -1), ValueError,
     r"seconds must be >= 0"),
    ("schedule_after(True)", lambda: sx.schedule_after(_rl_sch(), True), TypeError,
     r"seconds must be a number: a real number of seconds \(int, float, fractions.Fraction, "
     r"decimal.Decimal .*not bool or str\); got bool"),
    ("schedule_after('1')", lambda: sx.schedule_after(_rl_sch(), "1"), TypeError,
     r"seconds must be a number.*got str"),
    ("schedule_at(BIG)", lambda: sx.schedule_at(_rl_sch(), BIG), ValueError,
     r"schedule_at: deadline is too large"),
    ("schedule_at(nan)", lambda: sx.schedule_at(_rl_sch(), Decimal("nan")), ValueError,
     r"schedule_at: deadline must not be NaN"),
    ("ManualScheduler.schedule_after(BIG)", lambda: ManualScheduler().schedule_after(BIG),
     ValueError, r"schedule_after: seconds is too large"),
    ("ManualScheduler.advance(BIG)", lambda: ManualScheduler().advance(BIG), ValueError,
     r"advance: seconds is too large"),
    ("parallel.schedule_after(BIG)", lambda: sx.get_parallel_scheduler().schedule_after(BIG),
     ValueError, r"schedule_after: seconds is too large"),
    # -- timeout / stop_after
    ("timeout(BIG)", lambda: sx.timeout(BIG), ValueError, r"^timeout\(\): seconds is too large"),
    ("timeout(s, BIG)", lambda: sx.timeout(sx.just(), BIG), ValueError, r"timeout\(\): seconds"),
    ("timeout(nan)", lambda: sx.timeout(math.nan), ValueError, r"timeout\(\): seconds must be >="),
    ("timeout(-0.5)", lambda: sx.timeout(-0.5), ValueError, r"timeout\(\): seconds must be >= 0"),
    ("timeout(True)", lambda: sx.timeout(True), TypeError, r"timeout\(\): seconds must be a num"),
    ("timeout(sndr)", lambda: sx.timeout(sx.just()), TypeError,
     r"timeout\(\) takes \(sender, seconds\) or \(seconds\): seconds is missing"),
    ("stop_after(s, BIG)", lambda: sx.stop_after(sx.just(), BIG), ValueError,
     r"stop_after\(\): seconds is too large"),
    ("stop_after(nan)", lambda: sx.stop_after(math.nan), ValueError, r"stop_after\(\): seconds"),
    ("stop_after('1')", lambda: sx.stop_after("1"), TypeError, r"stop_after\(\): seconds must be"),
    # -- retry
    ("retry(delay=BIG)", lambda: sx.retry(delay=BIG), ValueError,
     r"^retry\(\): delay is too large for a float number of seconds, got 1000"),
    ("retry(backoff=BIG)", lambda: sx.retry(backoff=BIG), ValueError, r"retry\(\): backoff is too"),
    ("retry(delay=nan)", lambda: sx.retry(delay=math.nan), ValueError,
     r"retry\(\): delay must be finite and >= 0, got nan"),
    ("retry(delay=inf)", lambda: sx.retry(delay=math.inf), ValueError, r"delay must be finite"),
    ("retry(delay=True)", lambda: sx.retry(delay=True), TypeError, r"delay must be a number"),
    ("retry(foo=1)", lambda: sx.retry(sx.just(), foo=1), TypeError,  # type: ignore[call-overload]
     r"^retry\(\) got an unexpected keyword argument 'foo'; it takes one sender .* attempts, "
     r"delay, backoff and retry_on$"),
    # -- stop_grace
    ("set_stop_grace('soon')", lambda: sx.set_stop_grace("soon"), TypeError,  # type: ignore[arg-type]
     r"^set_stop_grace\(\): seconds .*must be a number.*got str$"),
    ("set_stop_grace(True)", lambda: sx.set_stop_grace(True), TypeError, r"set_stop_grace.*bool"),
    ("set_stop_grace(BIG)", lambda: sx.set_stop_grace(BIG), ValueError, r"set_stop_grace.*large"),
    ("set_stop_grace(nan)", lambda: sx.set_stop_grace(math.nan), ValueError,
     r"set_stop_grace\(\): seconds .*must be >= 0"),
    ("counting_scope(stop_grace='1')", lambda: sx.counting_scope(stop_grace="1"), TypeError,  # type: ignore[arg-type]
     r"^counting_scope\(\): stop_grace .*must be a number.*got str$"),
    ("counting_scope(stop_grace=True)", lambda: sx.counting_scope(stop_grace=True), TypeError,
     r"^counting_scope\(\): stop_grace .*got bool$"),
    ("counting_scope(stop_grace=-1)", lambda: sx.counting_scope(stop_grace=-1), ValueError,
     r"^counting_scope\(\): stop_grace .*must be >= 0"),
    ("simple_counting_scope(stop_grace=True)",
     lambda: sx.simple_counting_scope(stop_grace=True), TypeError,
     r"^simple_counting_scope\(\): stop_grace .*got bool$"),
    # -- the scopes' keywords
    ("counting_scope(max_associations=2)", lambda: sx.counting_scope(max_associations=2),  # type: ignore[call-arg]
     TypeError, r"^counting_scope\(\) takes only the keyword arguments strict_exception_groups, "
     r"name, stop_grace; got the unexpected keyword argument 'max_associations' \(the limit is "
     r"the class attribute max_associations"),
    ("simple_counting_scope(max_associations=2)",
     lambda: sx.simple_counting_scope(max_associations=2), TypeError,  # type: ignore[call-arg]
     r"^simple_counting_scope\(\) takes only the keyword arguments"),
    ("counting_scope('name')", lambda: sx.counting_scope("name"), TypeError,  # type: ignore[misc]
     r"^counting_scope\(\) takes only the keyword arguments .*; got 1 positional argument"),
    # -- introspection
    ("install_dump_on_signal(None)", lambda: sx.install_dump_on_signal(None), TypeError,  # type: ignore[arg-type]
     r"^install_dump_on_signal\(\): signum must be a signal number .*got NoneType$"),
    ("install_dump_on_signal(file=42)", lambda: sx.install_dump_on_signal(file=42), TypeError,  # type: ignore[arg-type]
     r"^install_dump_on_signal\(\): file must be None \(sys.stderr\) or a text stream"),
    ("install_dump_on_signal(99999)", lambda: sx.install_dump_on_signal(99999), ValueError,
     r"^install_dump_on_signal\(\): signum=99999: "),
    # -- environments
    ("env(3)", lambda: sx.env(sx.prop(sx.get_scheduler, 1), 3), TypeError,
     r"^env\(\): argument #1 must be an environment \(an object with a query\(\) method.*got int$"),
    ("dump(42)", lambda: sx.dump(42), TypeError,  # type: ignore[arg-type]
     r"^dump\(\): file must be None \(sys.stderr\) or a text stream with write\(\) and flush\(\), "
     r"got int$"),
]


@pytest.mark.parametrize(("call", "exc", "match"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_is_rejected_when_built(
    call: Callable[[], object], exc: type[Exception], match: str
) -> None:
    if "install_dump_on_signal" in match and not hasattr(signal, "SIGUSR1"):
        pytest.skip("SIGUSR1 is POSIX")
    with pytest.raises(exc, match=match):
        call()


def test_then_none_is_rejected_in_a_fresh_process() -> None:
    """``then(None)`` as the first ``then`` of a process (the one-entry cache of checked
    functions started out as ``None``, so ``None`` passed as already checked)."""
    r = run_child(
        "import structexec as sx\n"
        "try:\n"
        "    sx.then(None)\n"
        "except TypeError as e:\n"
        "    print('rejected:', e)\n"
        "else:\n"
        "    print('accepted')\n",
        timeout=60,
    )
    assert r.stdout.strip() == "rejected: then(f) needs a callable, got NoneType", str(r)


# --------------------------------------------------------------------------- accepted numbers

HALF = [0.5, Fraction(1, 2), Decimal("0.5")]


def _run(sndr: Any) -> Any:
    return sx.sync_wait(sndr)


#: Every API that takes a time, built and run with ``x`` (a half second).
TIME_APIS: list[tuple[str, Callable[[Any], object]]] = [
    ("schedule_after", lambda x: _run(sx.let_value(
        sx.read_env(sx.get_scheduler), lambda sch: sx.schedule_after(sch, x)))),
    ("schedule_at", lambda x: _run(sx.let_value(
        sx.read_env(sx.get_scheduler), lambda sch: sx.schedule_at(sch, x)))),
    ("timeout", lambda x: _run(sx.just(1) | sx.timeout(x))),
    ("timeout(s, x)", lambda x: _run(sx.timeout(sx.just(1), x))),
    ("stop_after", lambda x: _run(sx.just(1) | sx.stop_after(x))),
    ("stop_after(s, x)", lambda x: _run(sx.stop_after(sx.just(1), x))),
    ("retry(delay=, backoff=)", lambda x: _run(sx.just(1) | sx.retry(delay=x, backoff=x))),
    ("set_stop_grace", lambda x: sx.set_stop_grace(x)),
    ("counting_scope(stop_grace=)", lambda x: sx.counting_scope(stop_grace=x)),
    ("simple_counting_scope(stop_grace=)", lambda x: sx.simple_counting_scope(stop_grace=x)),
    ("ManualScheduler.schedule_after", lambda x: ManualScheduler().schedule_after(x)),
    ("ManualScheduler.advance", lambda x: ManualScheduler().advance(x)),
]


@pytest.mark.parametrize("x", HALF, ids=[type(h).__name__ for h in HALF])
@pytest.mark.parametrize("api", [a[1] for a in TIME_APIS], ids=[a[0] for a in TIME_APIS])
def test_every_time_api_takes_the_same_real_numbers(api: Callable[[Any], object], x: Any) -> None:
    api(x)  # no exception


@pytest.mark.parametrize("x", HALF, ids=[type(h).__name__ for h in HALF])
def test_a_fraction_or_decimal_time_is_used_as_its_float(x: Any) -> None:
    # timeout: the TimeoutError names the seconds as a float
    sch = ManualScheduler()
    rec = RecordingReceiver(extra_env=sx.prop(sx.get_scheduler, sch))
    rec.run(sx.schedule_after(sch, 10.0) | sx.timeout(x))
    sch.advance(0.25)
    assert not rec.done
    sch.advance(0.25)  # fires at exactly 0.5 s
    assert rec.kind == "error" and isinstance(rec.error, TimeoutError)
    # stop_grace: kept as a float
    sx.set_stop_grace(x)
    assert sx.set_stop_grace(None) == 0.5
    assert type(sx.counting_scope(stop_grace=x)._stop_grace) is float


# --------------------------------------------------------------------------- async predicates


def test_an_async_call_predicate_completes_with_a_type_error() -> None:
    """A callable object with an ``async def __call__`` is not seen at build: its coroutine is
    closed (no "never awaited" warning) and the loop completes ``set_error(TypeError)`` after
    the first run, instead of taking the coroutine for true."""
    runs: list[int] = []

    class Check:
        async def __call__(self) -> bool:
            return True

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(TypeError, match=r"predicate=Check is an async function"):
            sx.sync_wait(sx.just() | sx.then(lambda: runs.append(1))
                         | sx.repeat_effect_until(Check()))
    assert runs == [1]


# --------------------------------------------------------------------------- signatures


@pytest.mark.parametrize("cls", [sx.counting_scope, sx.simple_counting_scope])
def test_the_scopes_show_their_keywords(cls: type) -> None:
    sig = inspect.signature(cls)
    assert list(sig.parameters) == ["strict_exception_groups", "name", "stop_grace"]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in sig.parameters.values())
    # and they still work, positional-free, with subclasses passing keywords up
    class Named(cls):  # type: ignore[misc,valid-type]
        __slots__ = ()

        def __init__(self) -> None:
            super().__init__(name="n", stop_grace=Fraction(3, 2))

    s = Named()
    assert s._name == "n" and s._stop_grace == 1.5
