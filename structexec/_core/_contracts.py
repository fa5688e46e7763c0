"""The private hooks the library's modules use among themselves, declared as ``Protocol`` s.

The modules talk to each other through duck-typed private attributes named ``_sx_*``: a caller
looks the attribute up with ``getattr(obj, name, default)`` (or calls it on an object it
knows provides it), so any object may provide it and nothing imports the provider
(the internals guide §2 "Internal hooks"). This module gives each hook a name, a meaning, its
providers and its callers, so that signatures can say "an object with this hook" instead of
an untyped object.

The classes here are for annotations only (every module uses ``from __future__ import
annotations``): nothing calls ``isinstance`` with them on a hot path, and no provider
inherits from them (a provider is checked structurally, by mypy, where it flows into an
annotation that names one). They are ``runtime_checkable`` so that tests can check
providers with ``isinstance``.

This module is at the bottom of the layers: it imports nothing above ``_core`` and not trio.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from ._stop_token import inplace_stop_token

__all__ = [
    "AffineSender",
    "AwaitableSendersState",
    "CompletesInline",
    "Describable",
    "Env",
    "HandOff",
    "HasChildren",
    "JoinWaiter",
    "LateDomain",
    "OpState",
    "PerInstanceSigs",
    "ProxyQueryHooks",
    "RangeProxy",
    "Rcvr",
    "Sched",
    "Sndr",
    "StartSink",
    "StopToken",
    "SubmitAnywhere",
    "SubmitCall",
    "TrioSchedulerMark",
    "TryQuery",
]


# --------------------------------------------------------------------------- the basic shapes
# Receivers, operation states, environments, senders and schedulers as the library's modules
# see each other's. Completions are read-only ``Callable[..., None]`` members, so that a
# receiver whose ``set_value`` takes exactly its values (or a slot holding another receiver's
# bound method) satisfies ``Rcvr``.


@runtime_checkable
class Rcvr(Protocol):
    """A receiver ([exec.recv]): ``set_value(*vals)``, ``set_error(err)``, ``set_stopped()``.

    None of them may raise; exactly one is called, once ([exec.async.ops]). The environment
    is asked through ``_env.get_env(rcvr)`` (``get_env()`` is optional).

    Provided by: every receiver of the library (adaptors' child receivers, ``ChildOp``
    operation states, ``_AwaitRcvr``, the task and scope receivers) and the user's receivers
    given to ``connect``.

    Called by: the operation states that complete them (the ``rcvr`` they were connected
    with).
    """

    @property
    def set_value(self) -> Callable[..., None]:
        """Complete with values."""

    @property
    def set_error(self) -> Callable[..., None]:
        """Complete with one error datum (never ``None``)."""

    @property
    def set_stopped(self) -> Callable[[], None]:
        """Complete as stopped."""


@runtime_checkable
class OpState(Protocol):
    """An operation state ([exec.opstate]): ``start()``, called at most once; never raises
    (the library's raise ``RuntimeError`` when started twice).

    Provided by: what ``connect`` returns, for every sender of the library and the user's.

    Called by: whoever connected the sender (adaptors start their children's operations,
    ``await``, ``sync_wait``, the scopes and the task driver).
    """

    def start(self) -> None:
        """Start the operation; it may complete inside ``start``."""


@runtime_checkable
class Env(Protocol):
    """An environment ([exec.queryable]): ``query(q, *args)`` answers ``q`` or raises
    ``QueryError``. The answer is whatever the query is about, hence ``Any``.

    Provided by: ``_env``'s environments (``prop``, ``env``, ``FWD-ENV``, ``JOIN-ENV``, ...),
    receivers' and senders' ``get_env()``, schedulers (their attributes) and the user's.

    Called by: the queries (``Query.__call__``) and ``_queries.query_or`` (which prefers the
    ``TryQuery`` hook).
    """

    @property
    def query(self) -> Callable[..., Any]:
        """``query(q, *args)``: the answer to ``q``; ``QueryError`` when unsupported."""


@runtime_checkable
class Sndr(Protocol):
    """A sender with ``connect`` ([exec.snd.concepts]); awaitables are senders too, so code
    that takes any sender annotates ``object`` and converts it first.

    Provided by: every sender class of the library (``Sender`` subclasses) and the user's.

    Called by: ``_connect.connect`` and the adaptors that connect their children.
    """

    @property
    def connect(self) -> Callable[..., OpState]:
        """Connect the sender to a receiver; returns the operation state."""


@runtime_checkable
class Sched(Protocol):
    """A scheduler ([exec.sched]): ``schedule()`` returns a sender that completes on one of the
    scheduler's agents.

    Provided by: ``inline_scheduler``, ``trio_scheduler``, the task scheduler,
    ``parallel_scheduler`` and the user's.

    Called by: the adaptors that hop (``starts_on``, ``continues_on``, ``affine_on``) and the
    task driver.
    """

    def schedule(self) -> Sndr:
        """A sender completing on the scheduler."""


@runtime_checkable
class TryQuery(Protocol):
    """``_sx_try(q, default)``: the fast query lookup of an environment.

    Meaning: the answer to query ``q`` (called without extra arguments), or ``default`` when the
    environment does not support ``q``; it never raises ``QueryError`` and never allocates an
    exception for "unsupported".

    Provided by: ``_env.TryEnv`` and its subclasses (``prop``, ``env``, ``fwd_env``, the empty
    environment, scheduler attributes), and the library's environments and receivers that
    answer queries themselves: ``_AwaitRcvr`` and the nursery state (``_await``), ``_SyncWaitEnv``,
    ``_ScopeSpawnState``/``_FastSpawnState`` (``_spawn``), ``_FutureState`` (``_spawn_future``),
    task frames and environments (``_task``, ``_task_scheduler``), the schedule senders' and
    schedulers' attributes (``_schedule_sender``, ``_inline_scheduler``, ``_trio_scheduler``,
    ``_parallel_scheduler``), ``_affine_on``/``_when_all``/``_stop_when``'s environments,
    ``_trio_bridge``'s host environment and ``testing``'s manual scheduler.

    Called by: ``_env.query_or`` (before falling back to ``query()``), and ``query()`` of the
    providers themselves (``TryEnv.query`` is built on it).
    """

    def _sx_try(self, q: object, default: object) -> Any:
        """The answer to ``q``, or ``default``."""


@runtime_checkable
class CompletesInline(Protocol):
    """``_sx_completes_inline``: the sender always completes inside ``start``, on the agent
    that called ``start``.

    Provided by: ``True`` as a class attribute on ``just``, ``just_error``, ``just_stopped``,
    ``read_env`` and ``inline_scheduler``'s schedule sender; a property that forwards to the
    child on the ``_adaptor_util.InlineAsChild`` mixin (``write_env``, ``unstoppable``,
    ``into_variant``, ``stopped_as_error``), on ``then``/``upon_*`` chains (the innermost
    child) and on ``affine_on``; a property that is true when every child's is, on
    ``when_all``'s sender.

    Called by: ``_affine_on.completes_inline`` (``affine_on`` connects such a child directly,
    with no hop back), and the forwarding providers above. Absent means ``False``.
    """

    @property
    def _sx_completes_inline(self) -> bool:
        """``True`` when the sender completes inside ``start``."""


@runtime_checkable
class AffineSender(Protocol):
    """``_sx_affine``: the sender completes on the scheduler of the receiver it is connected
    to (the receiver's ``get_scheduler``).

    Provided by: ``_task``'s task sender (``True`` unless the task runs on
    ``inline_scheduler``).

    Called by: ``affine_on``'s ``connect`` and the task driver (``_task_driver``), which then
    skip the hop back to the scheduler. Absent means ``False``.
    """

    @property
    def _sx_affine(self) -> bool:
        """``True`` when the sender completes on its receiver's scheduler."""


@runtime_checkable
class LateDomain(Protocol):
    """``_sx_late_domain()``: the sender answers *get-domain-late* itself ([exec.snd.expos]).

    Provided by: ``continues_on``/``schedule_from``'s sender (the destination scheduler's
    domain) and ``parallel_scheduler``'s schedule sender.

    Called by: ``_domain.get_domain_late``, before it asks the sender's attributes and the
    receiver's environment.
    """

    def _sx_late_domain(self) -> object:
        """The domain ``transform_sender`` uses for this sender at ``connect``."""


@runtime_checkable
class StartSink(Protocol):
    """``_sx_start_failed(exc)``: the start of an operation handed to the trampoline with this
    sink (``trampoline_start(op, sink)``) raised the ``Exception`` ``exc``. If the operation
    never completed, complete the adaptor's receiver with ``set_error(exc)`` (the operation
    never started, so nothing is orphaned); if it did (a contract violation, or a completion
    that raised), re-raise ``exc``: never a second completion.

    Provided by: ``_starts_on._ChildReceiver`` (the child), ``_let._LetReceiver2`` (the
    sender the function returned), ``_continues_on._ScheduleFromOp`` and ``_join._JoinOp``
    (their scheduling operation).

    Called by: ``_trampoline.trampoline_start`` (a start made now) and ``_trampoline.drain``
    (a queued start, run by the outermost ``trampoline_start`` of the thread). Never for a
    ``BaseException`` that is not an ``Exception``: that propagates.
    """

    def _sx_start_failed(self, exc: Exception) -> None: ...


@runtime_checkable
class JoinWaiter(Protocol):
    """``_sx_join_complete()``: a registered join of a counting scope; the scope has reached
    the ``joined`` state (its count of associated work reached 0 while joining).

    Provided by: ``_counting_scope._JoinOp`` (the operation of ``scope.join()``: starts its
    ``schedule`` operation through the trampoline) and ``_counting_scope._TrioJoinWaiter``
    (the ``async with`` exit: sets a ``trio.Event``, through ``run_sync_soon`` off the trio
    thread).

    Registered by: ``_state.AssociationState.start_join`` (which completes inline instead,
    without calling the hook, when the scope can join at once) and ``join_or_register``.

    Called by: ``_state.AssociationState.disassociate``, once per registered waiter, after
    releasing the scope's lock. Must not raise.
    """

    def _sx_join_complete(self) -> None:
        """The scope is joined: complete the waiter."""


@runtime_checkable
class TrioSchedulerMark(Protocol):
    """``_sx_trio_scheduler``: the object is a ``trio_scheduler``; its ``_run`` is the trio
    run's ``RunState`` (``_trio_bridge``).

    Provided by: ``_trio_scheduler.trio_scheduler`` (a class attribute, ``True``).

    Called by: ``_trio_bridge.run_of_env`` (looked up on the type of an environment's
    ``get_scheduler``), to find the trio run that work scheduled there belongs to.
    """

    @property
    def _sx_trio_scheduler(self) -> bool:
        """``True`` on a trio scheduler."""

    @property
    def _run(self) -> object:
        """The ``RunState`` of the scheduler's trio run."""


@runtime_checkable
class PerInstanceSigs(Protocol):
    """``_sx_per_instance_sigs``: a scheduler class whose instances differ in fallibility;
    the P3941R1 infallibility check (``_infallible.infallible_reason``) must then ask every
    instance instead of caching the answer per class.

    Provided by: no class of the library (the schedulers of ``structexec.testing``, the only
    ones whose instances differ, are never cached anyway). Kept as the documented way out for
    a user's scheduler class (``_infallible``'s module docstring); it costs one ``getattr`` per
    scheduler class.

    Called by: ``_infallible.infallible_reason`` (looked up on the class).
    """

    @property
    def _sx_per_instance_sigs(self) -> bool:
        """``True``: do not cache the infallibility answer for this class."""


@runtime_checkable
class ProxyQueryHooks(Protocol):
    """``_sx_stop_token()`` and ``_sx_query_env(q)``: the protected hooks of
    ``system_context_replaceability.receiver_proxy`` behind ``try_query``
    ([exec.sysctxrepl.recvproxy]).

    ``_sx_stop_token()`` is the consumer's stop token as an ``inplace_stop_token`` (``None``
    when it can never be stopped); ``_sx_query_env(q)`` is the exposition-only *query-env*:
    the consumer environment's answer to ``q``, or ``_env._MISSING`` when unsupported.

    Provided by: ``receiver_proxy`` (defaults: ``None``, ``_MISSING``) and
    ``_parallel_scheduler``'s two proxies (the schedule and bulk operations); a user's proxy
    subclass may override them.

    Called by: ``receiver_proxy.try_query`` only (backends call ``try_query``).
    """

    def _sx_stop_token(self) -> inplace_stop_token | None:
        """The consumer's stop token, or ``None`` when it is never stopped."""

    def _sx_query_env(self, q: object) -> object:
        """The consumer environment's answer to ``q``, or ``_MISSING``."""


@runtime_checkable
class RangeProxy(Protocol):
    """``_sx_range_ok``: an unchunked bulk proxy's ``execute(b, e)`` does what the calls
    ``execute(i, i + 1)`` for each ``i`` in ``[b, e)`` would do.

    Provided by: ``_parallel_scheduler``'s bulk proxy (a class attribute, ``True``).

    Called by: ``backends/_thread_pool`` (hands such a proxy ranges instead of single
    indices for ``bulk_unchunked``). Absent means ``False``.
    """

    @property
    def _sx_range_ok(self) -> bool:
        """``True`` when ranges may replace single indices."""


@runtime_checkable
class HandOff(Protocol):
    """``_sx_handoff``: the receiver's completion only records the result and wakes whoever
    waits for it on another agent: it runs no user code, never blocks and is safe on any
    thread, so a remote backend may call it on the thread that learned the result instead
    of hopping to one of its own agents first (no one can tell the agents apart).

    Provided by: ``_await._AwaitRcvr`` (``await sndr`` in a trio task: hands the wake-up to
    trio), ``_sync_wait._SyncWaitReceiver`` (class attributes, ``True``); a property
    forwarding to the downstream receiver on ``_parallel_scheduler``'s bulk proxy.

    Called by: ``backends/_remote.RemoteJob.finish`` (the process pool completes on the
    executor's result thread, dask on the client's callback thread). Absent means ``False``.
    """

    @property
    def _sx_handoff(self) -> bool:
        """``True`` when completing from any thread is cheap and runs nothing else."""


@runtime_checkable
class SubmitAnywhere(Protocol):
    """``_sx_submit_anywhere``: the backend's bulk methods only hand the work to something
    else (worker processes, a cluster) and return at once, so they may be called on any
    thread, for example the one that starts ``schedule(sch) | bulk(...)``, instead of on one of
    the backend's agents after a ``schedule`` hop. Read at ``start``: ``False`` means "not now"
    (the hop is taken).

    Provided by: ``backends/_remote.RemoteBackend`` (dask: ``True``; the process pool: while
    its executor is running, so that starting worker processes never happens on the caller's
    thread).

    Called by: ``_parallel_scheduler._BulkOp.start``. Absent means the hop is always taken.
    """

    @property
    def _sx_submit_anywhere(self) -> bool:
        """``True`` when the bulk methods may be called from the caller's thread now."""


@runtime_checkable
class SubmitCall(Protocol):
    """``_sx_submit_call(work, op)``: the backend runs ``then``/``upon_*`` functions in other
    processes (the parallel guide "Running any function remotely"). It pickles ``work`` (a
    ``RemoteCallWork``) at once, raising ``UnpicklableWorkError`` naming what fails, sends it
    to a worker and returns a handle with ``cancel()`` (a stop request) and ``where()`` (for
    ``sx.operation_tree()``); the outcome reaches ``op.remote_done(kind, data)`` once.

    Provided by: ``backends/_remote.RemoteBackend`` (``ProcessPoolBackend``,
    ``DaskBackend``).

    Called by: ``_remote_call.RemoteThenOp``; its presence on the backend's class makes a
    parallel scheduler's domain the remote one (``_remote_call.is_remote_backend``). Absent
    means ``then`` functions run on the backend's agents, as on the thread pool.
    """

    def _sx_submit_call(self, work: Any, op: Any) -> Any:
        """Send one call; return its handle."""


@runtime_checkable
class AwaitableSendersState(Protocol):
    """``_sx_continuation`` and ``_sx_stopped_handler``: the state of the
    ``with_awaitable_senders`` promise mixin ([exec.with.awaitable.senders]), not a hook
    between modules.

    Provided and used by: ``_as_awaitable.with_awaitable_senders`` only
    (``set_continuation`` writes them; ``continuation()`` and ``unhandled_stopped()`` read
    them). Named ``_sx_*`` so that they do not clash with the attributes of the user's promise
    class that mixes it in.
    """

    _sx_continuation: object
    _sx_stopped_handler: Callable[[], object] | None


@runtime_checkable
class Describable(Protocol):
    """``_sx_describe()``: what a state that can be pending is doing now, for
    ``sx.operation_tree()`` and ``sx.dump()``: one of the records of ``_core._snapshot``, or
    ``None`` while there is nothing to show (not started, completed, being set up or torn down
    by another thread). Never raises, takes no lock, reads the state's own fields as they are.

    Provided by: the scopes, the spawn and future states, the associate operation, the
    sequence stages and their items (the roots a snapshot finds on the heap, registered with
    ``_snapshot.snapshot_roots``), and what pending work waits on: ``TimerOp``,
    ``TrioHostedOp``, the parallel scheduler's schedule operation, ``RemoteThenOp``, the
    scope join. Called by: ``_scopes._introspect_scan`` only (the internals guide
    "Introspection").
    """

    def _sx_describe(self) -> object | None: ...


@runtime_checkable
class HasChildren(Protocol):
    """``_sx_children()``: the operation states directly below this one (its child
    operations, never its receiver or environment), for ``sx.operation_tree()``'s walk from a
    root down to what the work waits on. A state without it is walked through its slots.

    Provided by: ``TimerOp`` (none), the scope join (its schedule operation). Called by:
    ``_scopes._introspect_scan`` only.
    """

    def _sx_children(self) -> tuple[object, ...]: ...


@runtime_checkable
class StopToken(Protocol):
    """A stoppable token ([stoptoken.concepts]).

    Provided by: ``inplace_stop_token``, ``never_stop_token``, ``combined_stop_token``, the
    trio bridge's token and a user's token.

    Called by: the operations that watch a stop request (``stop_when``'s ``child_token``,
    ``stop_callback_for``, ``is_unstoppable``).
    """

    def stop_requested(self) -> bool:
        """``True`` once a stop was requested."""

    def stop_possible(self) -> bool:
        """``True`` while a stop may still be requested."""


# The names the algorithms' annotations use for the two basic shapes above.
Receiver = Rcvr
OperationState = OpState
