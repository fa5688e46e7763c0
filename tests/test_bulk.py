"""``bulk``, ``bulk_chunked``, ``bulk_unchunked``:  ([exec.bulk]), [exec.snd.transform],
[exec.par.scheduler] (``bulk`` lowers to ``bulk_chunked``, which a scheduler's domain may
customise), [exec.adapt.general], [exec.adapt.obj], [exec.snd.concepts],
docs/parallel.md "Data parallelism: `bulk`"."""

from __future__ import annotations

import copy
import pickle
import threading
from typing import Any

import pytest
from _helpers import DOMAIN_MODES, domains_off_and_on, restore_domain_dispatch

import structexec as sx
from structexec._algorithms._bulk import chunk_loop
from structexec.testing import ManualScheduler, RecordingReceiver

_restore_domain_dispatch = pytest.fixture(restore_domain_dispatch, autouse=True)


ALGOS = [sx.bulk, sx.bulk_chunked, sx.bulk_unchunked]


# ``bulk`` → ``bulk_chunked`` is lowered by ``transform_sender`` (domains on) or by ``bulk``'s
# own ``connect`` (off); the results must agree ([exec.snd.transform]).
domains = pytest.fixture(domains_off_and_on, params=DOMAIN_MODES, name="domains")


def square_into(i: int, lst: list[int]) -> None:
    lst[i] = i * i


def square_chunk(b: int, e: int, lst: list[int]) -> None:
    for i in range(b, e):
        lst[i] = i * i


# --------------------------------------------------------------------------- arguments, policies


@pytest.mark.parametrize("algo", ALGOS, ids=repr)
def test_bulk_ill_formed_arguments_raise_at_construction(algo: Any) -> None:
    """[exec.bulk]/docs/senders-adaptors.md: non-sender, bad policy, non-integral shape,
    non-callable f → TypeError at construction (a negative shape → ValueError); also in the closure
    form."""
    s = sx.just()
    with pytest.raises(TypeError, match="sender"):
        algo(42, sx.par, 3, print)
    with pytest.raises(TypeError, match="policy"):
        algo(s, "par", 3, print)
    with pytest.raises(TypeError, match="policy"):
        algo(None, 3, print)
    with pytest.raises(TypeError, match="shape"):
        algo(s, sx.seq, 2.0, print)
    with pytest.raises(TypeError, match="shape"):
        algo(sx.seq, "3", print)
    with pytest.raises(TypeError, match="callable"):
        algo(s, sx.par, 3, 17)
    with pytest.raises(ValueError, match="negative"):
        algo(s, sx.par, -1, print)
    with pytest.raises(TypeError, match="policy is missing"):
        algo(s, 3, print)  # P2079's bulk(sndr, shape, f) is not accepted: the policy is required
    with pytest.raises(TypeError):
        algo(s, sx.par, 3, print, 5)


def test_execution_policies_are_distinct_singletons() -> None:
    """[exec.bulk]: the four policies exist, are distinct, and keep their identity."""
    pols = [sx.seq, sx.par, sx.par_unseq, sx.unseq]
    assert len({id(p) for p in pols}) == 4
    for p in pols:
        assert copy.copy(p) is p and copy.deepcopy(p) is p
        assert pickle.loads(pickle.dumps(p)) is p
        assert repr(p) == f"sx.{p.name}"
    assert [p.parallel for p in pols] == [False, True, True, False]


# --------------------------------------------------------------------------- calls of f


def test_bulk_squares_the_list_in_place(domains: str) -> None:
    """[exec.bulk]: ``just(lst) | bulk(par, n, lambda i, l: l.__setitem__(i, i*i))`` returns the
    squared list, the very same object."""
    lst = [0] * 6
    out = sx.sync_wait(sx.just(lst) | sx.bulk(sx.par, 6, lambda i, ll: ll.__setitem__(i, i * i)))
    assert out is not None and out[0] is lst and lst == [0, 1, 4, 9, 16, 25]


def test_bulk_calls_f_for_every_index_with_all_datums(domains: str) -> None:
    """[exec.bulk]: ``f(i, *args)`` for each ``i`` in [0, shape); all value datums are passed and
    forwarded unchanged."""
    calls: list[tuple[Any, ...]] = []
    a, b = object(), "b"
    rec = RecordingReceiver()
    rec.run(sx.bulk(sx.just(a, b), sx.seq, 4, lambda *xs: calls.append(xs)))
    assert sorted(calls, key=lambda c: c[0]) == [(i, a, b) for i in range(4)]
    assert rec.value == (a, b)


def test_unchunked_calls_each_index_once(domains: str) -> None:
    """[exec.bulk]: ``bulk_unchunked`` calls ``f(i, *args)`` once per index."""
    calls: list[int] = []
    assert sx.sync_wait(sx.just(5) | sx.bulk_unchunked(sx.par, 3, lambda i, v: calls.append(i + v)))
    assert sorted(calls) == [5, 6, 7]


def test_bulk_chunked_default_makes_a_single_call(domains: str) -> None:
    """[exec.bulk]: the default ``bulk_chunked`` makes one call ``f(0, shape, *args)``."""
    calls: list[tuple[int, int]] = []
    lst = [0] * 5

    def f(b: int, e: int, ll: list[int]) -> None:
        calls.append((b, e))
        square_chunk(b, e, ll)

    assert sx.sync_wait(sx.bulk_chunked(sx.just(lst), sx.par, 5, f)) == ([0, 1, 4, 9, 16],)
    assert calls == [(0, 5)]


@pytest.mark.parametrize("algo", ALGOS, ids=repr)
def test_shape_zero_makes_no_call(algo: Any, domains: str) -> None:
    """[exec.bulk]: with ``shape == 0`` f is never called (no ``(0, 0)`` chunk); values pass on."""
    calls: list[Any] = []
    assert sx.sync_wait(algo(sx.just(1), sx.par, 0, lambda *a: calls.append(a))) == (1,)
    assert calls == []


def test_bulk_runs_on_the_completing_agent() -> None:
    """[exec.bulk]: the default implementations run f on the agent where the child completed."""
    ms = ManualScheduler()
    seen: list[Any] = []
    rec = RecordingReceiver()
    rec.run(
        sx.schedule(ms) | sx.bulk(sx.seq, 3, lambda i: seen.append((i, ManualScheduler.current())))
    )
    assert seen == []
    ms.run_one()
    assert seen == [(0, ms), (1, ms), (2, ms)] and rec.value == ()


# ------------------------------------------------------------------------- errors, stop, forwarding


@pytest.mark.parametrize("algo", ALGOS, ids=repr)
def test_exception_from_f_is_the_error(algo: Any, domains: str) -> None:
    """[exec.bulk]: an exception from f → ``set_error(exc)``; earlier invocations may have run."""
    boom = ValueError("at 2")
    calls: list[int] = []

    def f(*a: Any) -> None:
        calls.append(a[0])
        if algo is not sx.bulk_chunked and a[0] == 2:
            raise boom
        if algo is sx.bulk_chunked:
            raise boom

    rec = RecordingReceiver()
    rec.run(algo(sx.just(), sx.seq, 5, f))
    assert rec.error is boom
    assert calls == ([0] if algo is sx.bulk_chunked else [0, 1, 2])


def test_base_exceptions_are_not_errors() -> None:
    """[exec.bulk]/docs/senders.md "What happens when things fail": a BaseException from f is not
    turned into an error completion."""

    class Fatal(BaseException):
        pass

    def f(i: int) -> None:
        raise Fatal

    rec = RecordingReceiver()
    with pytest.raises(Fatal):
        rec.run(sx.just() | sx.bulk(sx.seq, 1, f))
    assert not rec.done


@pytest.mark.parametrize("algo", ALGOS, ids=repr)
@pytest.mark.parametrize("child_kind", ["error", "stopped"])
def test_error_and_stopped_of_the_child_are_forwarded(
    algo: Any, child_kind: str, domains: str
) -> None:
    """[exec.bulk]: errors and stopped from the child pass through; f never runs."""
    e = KeyError("k")
    child = sx.just_error(e) if child_kind == "error" else sx.just_stopped()
    calls: list[Any] = []
    rec = RecordingReceiver()
    rec.run(algo(child, sx.par, 3, lambda *a: calls.append(a)))
    assert calls == []
    assert (rec.error is e) if child_kind == "error" else rec.stopped


def test_default_bulk_ignores_stop_requests() -> None:
    """[exec.bulk] (Note 2): the default implementation may ignore stop requests: all iterations run
    and the values are sent."""
    ms = ManualScheduler()
    calls: list[int] = []
    rec = RecordingReceiver()
    rec.run(sx.unstoppable(sx.schedule(ms)) | sx.bulk(sx.par, 3, lambda i: calls.append(i)))
    rec.request_stop()
    ms.drain()
    assert calls == [0, 1, 2] and rec.value == ()


# -------------------------------------------------------------------- laziness, closures, structure


def test_bulk_is_lazy() -> None:
    """[exec.adapt.general]: nothing runs at construction or at connect."""
    for algo, expected in zip(ALGOS, [3, 1, 3]):
        calls: list[int] = []
        s = algo(sx.just(), sx.par, 3, lambda *a, calls=calls: calls.append(1))
        rec = RecordingReceiver()
        op = rec.connect(s)
        assert calls == []
        rec.start(op)
        assert len(calls) == expected and rec.value == ()


def test_bulk_closures_compose() -> None:
    """[exec.adapt.obj]: ``bulk(policy, shape, f)`` is a closure; closures compose."""
    lst = [0] * 3
    c = sx.bulk(sx.par, 3, square_into) | sx.then(lambda ll: sum(ll))
    assert isinstance(c, sx.Closure)
    assert sx.sync_wait(sx.just(lst) | c) == (5,)
    assert sx.sync_wait(c(sx.just([7] * 4))) == (12,)  # index 3 untouched


def test_bulk_structure_is_visible_to_backends() -> None:
    """[exec.snd.concepts]: a backend finds policy, shape, f and child on the sender (and
    tag/data/children)."""
    child = sx.just([0])
    for algo in ALGOS:
        s = algo(child, sx.par_unseq, 1, square_into)
        assert s.tag is algo
        assert (s.policy, s.shape, s.f, s.child) == (sx.par_unseq, 1, square_into, child)
        assert s.data == (sx.par_unseq, 1, square_into) and s.children == (child,)


def test_bulk_signatures_and_attributes() -> None:
    """[exec.bulk], [exec.adapt.general]: child's signatures plus ``set_error_t(Exception)``;
    attributes are the child's (so a parallel scheduler's completion domain is found)."""
    cs = sx.get_completion_signatures(sx.just(1) | sx.bulk(sx.seq, 2, print))
    assert cs == sx.completion_signatures(sx.set_value_t(int), sx.set_error_t(Exception))
    cs2 = sx.get_completion_signatures(sx.just_stopped() | sx.bulk(sx.seq, 2, print))
    assert cs2 == sx.completion_signatures(sx.set_stopped_t())
    ms = ManualScheduler()
    attrs = sx.get_env(sx.schedule(ms) | sx.bulk(sx.par, 2, print))
    assert sx.get_completion_scheduler[sx.set_value_t](attrs) is ms


def test_chunk_loop_pickles_and_loops() -> None:
    """[exec.bulk]: the function ``bulk`` lowers to loops ``f(i, *vs)`` over ``[b, e)`` and pickles
    whenever ``f`` does (process-pool and dask backends need that)."""
    cl = chunk_loop(square_into)
    lst = [0] * 6
    cl(2, 5, lst)
    assert lst == [0, 0, 4, 9, 16, 0]
    cl2 = pickle.loads(pickle.dumps(cl))
    assert cl2.f is square_into
    low = sx.bulk(sx.just(), sx.par, 4, square_into).lower()
    assert low.tag is sx.bulk_chunked and isinstance(low.f, chunk_loop) and low.f.f is square_into


def test_transform_sender_lowers_bulk_to_bulk_chunked() -> None:
    """[exec.snd.transform]: ``default_domain().transform_sender(bulk(...), env)`` is the
    ``bulk_chunked`` sender; without an env (the early transform) the sender is unchanged."""
    s = sx.bulk(sx.just(), sx.par, 4, square_into)
    assert sx.default_domain().transform_sender(s) is s
    low = sx.transform_sender(sx.default_domain(), s, sx.env())
    assert low.tag is sx.bulk_chunked and low.shape == 4 and low.policy is sx.par


# --------------------------------------------------------------------------- domains


class InterceptingDomain(sx.default_domain):
    """A custom domain that replaces ``bulk_chunked`` with its own operation: it runs the
    chunks [0, 2), [2, shape) on a ManualScheduler-like path and records what it saw."""

    def __init__(self, log: list[Any]) -> None:
        self.log = log

    def transform_sender(self, sndr: Any, env: Any = None) -> Any:
        if sndr.tag is sx.bulk_chunked and env is not None:
            self.log.append(("bulk_chunked", sndr.policy, sndr.shape, threading.get_ident()))
            f, n = sndr.f, sndr.shape

            def two_chunks(*vals: Any) -> Any:
                mid = min(2, n)
                if mid:
                    f(0, mid, *vals)
                if n > mid:
                    f(mid, n, *vals)
                return sx.values(*vals)

            return sx.then(sndr.child, two_chunks)
        return super().transform_sender(sndr, env)

    def __eq__(self, other: object) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)


class DomainScheduler(ManualScheduler):
    """A test scheduler with its own domain ([exec.par.scheduler])."""

    def __init__(self, domain: Any) -> None:
        super().__init__("dom")
        self.domain = domain

    def query(self, q: Any, *args: Any) -> Any:
        if q is sx.get_domain:
            return self.domain
        return super().query(q, *args)


def test_domain_intercepting_bulk_chunked_sees_plain_bulk() -> None:
    """[exec.par.scheduler]: a custom domain on a test scheduler intercepts ``bulk_chunked``, and a
    plain ``bulk`` on that scheduler reaches the interceptor (through the completion domain of
    ``schedule(sch)``, [exec.snd.expos])."""
    log: list[Any] = []
    sch = DomainScheduler(InterceptingDomain(log))
    lst = [0] * 5
    rec = RecordingReceiver()
    rec.run(sx.schedule(sch) | sx.then(lambda: lst) | sx.bulk(sx.par, 5, square_into))
    assert log == [("bulk_chunked", sx.par, 5, threading.get_ident())]
    sch.drain()
    assert rec.value == (lst,) and lst == [0, 1, 4, 9, 16]


def test_bulk_domain_is_found_from_the_receivers_scheduler() -> None:
    """[exec.par.scheduler], [exec.snd.transform]: the interceptor is also found through
    ``get_scheduler`` of the environment, e.g. for work started on that scheduler with
    ``starts_on``; ``bulk_unchunked`` and ``bulk_chunked`` themselves are not lowered to anything
    else."""
    log: list[Any] = []
    sch = DomainScheduler(InterceptingDomain(log))
    calls: list[tuple[int, int]] = []
    rec = RecordingReceiver()
    rec.run(sx.starts_on(sch, sx.just() | sx.bulk(sx.seq, 3, lambda i: calls.append((i, 0)))))
    sch.drain()
    assert [entry[:3] for entry in log] == [("bulk_chunked", sx.seq, 3)]
    assert calls == [(0, 0), (1, 0), (2, 0)] and rec.value == ()
    rec2 = RecordingReceiver()
    rec2.run(sx.starts_on(sch, sx.just() | sx.bulk_unchunked(sx.seq, 2, lambda i: None)))
    sch.drain()
    assert len(log) == 1 and rec2.value == ()
