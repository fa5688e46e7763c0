"""The association state of a counting scope: the one owner of its lock, count and state.

[exec.counting.scopes.general], [exec.scope.simple.counting], [exec.scope.join];
the scopes guide explains the Python decisions (errors, futures, Ctrl-C).

:class:`AssociationState` is an object each ``simple_counting_scope`` and ``counting_scope``
owns (``scope._assoc``, made by the scope's ``__init__``; their tokens hold it too). It holds
the lock (``_lock``), the number of associations (``_count``), the state (``_state``, one of
the seven below), the registered joins and what the join reports (errors of spawned work,
errors of unconsumed futures, interrupts), and it is the only code that reads or writes them:
the tokens, ``spawn``, ``spawn_future``, the join sender and the nursery face call its methods
(``tests/test_scope_state_owner.py`` checks that no other module of ``structexec._scopes``
touches ``_lock``, ``_count`` or ``_state``). It holds no reference to its scope: what a scope
does when an error is recorded (``counting_scope`` cancels its body and requests stop) is the
scope's own ``_record_error``, which records here first; errors enter only through it.

The seven states ([exec.counting.scopes.general]):

.. code-block:: text

                try_associate                close
      unused ----------------> open -----------------> closed
        |  \\                    |                        |
        |   \\ start join        | start join             | start join
        |    \\                  v          close         v
  close |     \\          open-and-joining ---------> closed-and-joining
        |      \\                |                        |
        v       \\               | count reaches 0        | count reaches 0
  unused-and-closed \\           v                        v
        |            '------> joined <--------------------'
        '---- start join ------^

A join started while the count is already 0 goes straight to ``joined`` and completes inline
([exec.scope.join]). Every operation takes the one lock, so all of them appear in one total
order ([exec.counting.scopes]) and any thread may associate work or release it.

The methods are the exposition-only members of [exec.counting.scopes] (``try_associate``,
``disassociate``, ``start_join``, ``close``); the state is not a scope token (it has no
``wrap``, [exec.scope.concepts]): the scope's token forwards to them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from .._core._snapshot import no_children

if TYPE_CHECKING:
    from .._core._contracts import JoinWaiter

__all__ = ["AssociationState"]

_W = TypeVar("_W", bound="JoinWaiter")

# The seven states of [exec.counting.scopes.general].
UNUSED, OPEN, CLOSED, OPEN_JOINING, CLOSED_JOINING, UNUSED_CLOSED, JOINED = range(7)
#: Their names, as in the spec (``scope.state``).
NAMES = (
    "unused",
    "open",
    "closed",
    "open-and-joining",
    "closed-and-joining",
    "unused-and-closed",
    "joined",
)
#: ``ACCEPTS[state]``: does try-associate succeed in this state (count permitting)?
#: ([exec.scope.simple.counting])
ACCEPTS = (True, True, False, True, False, False, False)
#: ``JOINING[state]``: is a join waiting for the count to reach zero? ([exec.scope.simple.counting])
JOINING = (False, False, False, True, True, False, False)
#: ``AFTER_CLOSE[state]``: the state ``close()`` leads to ([exec.scope.simple.counting]).
AFTER_CLOSE = (
    UNUSED_CLOSED,  # unused
    CLOSED,  # open
    CLOSED,  # closed: no effect
    CLOSED_JOINING,  # open-and-joining
    CLOSED_JOINING,  # closed-and-joining: no effect
    UNUSED_CLOSED,  # unused-and-closed: no effect
    JOINED,  # joined: no effect
)
#: The states a scope may be dropped in ([exec.counting.scopes]).
GOOD_TO_DROP = (UNUSED, UNUSED_CLOSED, JOINED)
#: The states in which a join completes at once ([exec.scope.join]).
JOIN_AT_ONCE = GOOD_TO_DROP


class AssociationState:
    """The association state machine of a counting scope ([exec.counting.scopes.general]),
    and what its join reports; every member is atomic under ``_lock``. ``limit``: the
    scope's ``max_associations``; ``label``: the scope's kind and name, for messages and
    ``repr``."""

    __slots__ = (
        "_count",
        "_errors",
        "_interrupts",
        "_joiners",
        "_label",
        "_limit",
        "_lock",
        "_pending",
        "_state",
    )

    #: A walk down pending work (``sx.operation_tree()``) ends here: the registered joins are
    #: found as operations of their own.
    _sx_children = no_children

    def __init__(self, limit: int, label: str) -> None:
        self._lock = threading.Lock()
        self._count = 0
        self._state = UNUSED
        self._limit = limit
        self._label = label
        # Made when first needed (None until then: most scopes never fill them): the joins
        # registered, the errors recorded, the errors of finished spawn_futures that nobody
        # has consumed yet ({id(state): error}), the interrupts.
        self._joiners: list[JoinWaiter] | None = None
        self._errors: list[object] | None = None
        self._pending: dict[int, object] | None = None
        self._interrupts: list[BaseException] | None = None

    # -- the exposition-only members ([exec.counting.scopes]), atomic under self._lock

    def try_associate(self) -> bool:
        """``try-associate``: one more association if the state accepts work and the count
        is below the limit (unused becomes open); ``False`` otherwise
        ([exec.scope.simple.counting])."""
        lock = self._lock
        lock.acquire()
        st = self._state
        if ACCEPTS[st] and self._count < self._limit:
            self._count += 1
            if st == UNUSED:
                self._state = OPEN
            lock.release()
            return True
        lock.release()
        return False

    def disassociate(self) -> None:
        """``disassociate``: release one association; the last one while joining moves the
        scope to joined and completes the registered joins, outside the lock
        ([exec.scope.simple.counting])."""
        lock = self._lock
        lock.acquire()
        c = self._count - 1
        if c < 0:
            lock.release()
            raise RuntimeError(
                f"disassociate() on {self!r}, which holds no association: every "
                "disassociate() must match a successful try_associate() ([exec.scope.concepts])"
            )
        self._count = c
        if c == 0 and JOINING[self._state]:
            self._state = JOINED
            joiners = self._joiners or ()
            self._joiners = None
            lock.release()
            # Completing a join may drop the last reference to the scope (Note 1).
            for j in joiners:
                j._sx_join_complete()
            return
        lock.release()

    def start_join(self, op: JoinWaiter) -> bool:
        """``start-join-sender``: ``True`` to complete inline, else ``op`` is registered and
        its ``_sx_join_complete()`` is called when the count reaches zero ([exec.scope.join])."""
        return self.join_or_register(lambda: op) is None

    def join_or_register(self, factory: Callable[[], _W]) -> _W | None:
        """``start-join-sender`` for the ``async with`` exit: ``None`` if the join completes
        inline (as ``start_join`` returning ``True``), else the join ``factory()`` made and
        registered under the lock. The waiter is made only when there is something to wait
        for (an empty block makes none: benchmarks/README.md, the scope rows)."""
        lock = self._lock
        lock.acquire()
        st = self._state
        if self._count == 0 or st in JOIN_AT_ONCE:
            # [exec.scope.join]: a scope whose associations are all released joins at once.
            self._state = JOINED
            lock.release()
            return None
        try:
            op = factory()
        except BaseException:  # pragma: no cover - making a trio Event does not fail
            lock.release()
            raise
        self._state = OPEN_JOINING if ACCEPTS[st] else CLOSED_JOINING
        joiners = self._joiners
        if joiners is None:
            self._joiners = [op]
        else:
            joiners.append(op)
        lock.release()
        return op

    def close(self) -> None:
        """``close``: refuse new associations from now on ([exec.counting.scopes]; the
        transitions are ``AFTER_CLOSE``)."""
        lock = self._lock
        lock.acquire()
        self._state = AFTER_CLOSE[self._state]
        lock.release()

    # -- questions about the state (snapshots)

    def is_joined(self) -> bool:
        return self._state == JOINED

    def joining_or_joined(self) -> bool:
        """Whether a join was started (the scope cannot host new work in ``async with``)."""
        return self._state in (OPEN_JOINING, CLOSED_JOINING, JOINED)

    def good_to_drop(self) -> bool:
        """Whether the scope may be dropped now ([exec.counting.scopes])."""
        return self._state in GOOD_TO_DROP

    @property
    def state(self) -> str:
        """The current state's name, as in the spec ("unused", "open-and-joining", ...)."""
        return NAMES[self._state]

    @property
    def count(self) -> int:
        """The number of associations held right now (a snapshot)."""
        return self._count

    # -- what the join reports: errors of spawned work, of unconsumed futures, interrupts

    def record_error(self, err: object) -> None:
        """Keep ``err`` for the join (called by the scope's ``_record_error`` only)."""
        lock = self._lock
        lock.acquire()
        errors = self._errors
        if errors is None:
            self._errors = [err]
        else:
            errors.append(err)
        lock.release()

    def error_count(self) -> int:
        """How many errors have been recorded so far."""
        with self._lock:
            return len(self._errors or ())

    def errors_unlocked(self) -> int:
        """How many errors the join would report, read without the lock: for a tree printed
        by a signal handler, which may interrupt a holder of the lock on its own thread
        (``_introspect``; a snapshot, possibly stale by one)."""
        return len(self._errors or ()) + len(self._pending or ())

    def has_report(self) -> bool:
        """Whether the ``async with`` exit has errors or interrupts to report (a snapshot
        without the lock: the exit's short path asks once the join is complete)."""
        return bool(self._errors or self._interrupts or self._pending)

    def errors_snapshot(self) -> list[object]:
        """The errors the scope reports: those recorded, then those of finished futures
        that nobody has consumed (``take_exit_report`` takes them for good)."""
        with self._lock:
            errors = list(self._errors or ())
            if self._pending:
                errors.extend(self._pending.values())
        return errors

    def take_exit_report(self) -> tuple[list[object], list[BaseException]]:
        """What the ``async with`` exit reports, taken for good in one step (as a nursery, it
        keeps nothing alive after raising them): the errors (those ``errors_snapshot`` gives)
        and the interrupts."""
        lock = self._lock
        lock.acquire()
        errors = self._errors or []
        interrupts = self._interrupts or []
        self._errors = self._interrupts = None
        if self._pending:
            errors = errors + list(self._pending.values())
            self._pending = None
        lock.release()
        return errors, interrupts

    def park_future_error(self, st: object, err: object) -> None:
        """A future's work failed and nobody consumes the future yet: if nobody has when the
        scope's join delivers, the join reports the error (``errors_snapshot``)."""
        with self._lock:
            pending = self._pending
            if pending is None:
                pending = self._pending = {}
            pending[id(st)] = err

    def unpark_future_error(self, st: object) -> None:
        """The error was delivered to a consumer: no longer the scope's to report."""
        with self._lock:
            if self._pending:
                self._pending.pop(id(st), None)

    def drop_future_error(self, st: object) -> bool:
        """The future ``st`` of failed work was dropped or closed unconsumed: ``True`` if its
        error is now an unhandled error of spawned work, for the scope to record; ``False``
        once the scope has joined (the join reports it already)."""
        with self._lock:
            if self._state == JOINED:
                return False  # the work finished before the join: the join reports its error
            if self._pending:
                self._pending.pop(id(st), None)
        return True

    def add_interrupt(self, exc: BaseException) -> None:
        """Keep a ``KeyboardInterrupt``/``SystemExit``/... for the ``async with`` exit."""
        with self._lock:
            interrupts = self._interrupts
            if interrupts is None:
                self._interrupts = [exc]
            else:
                interrupts.append(exc)

    def __repr__(self) -> str:
        """The scope's ``repr``: its kind and name, its state and count."""
        return f"<{self._label} {NAMES[self._state]}, {self._count} associated>"
