"""The association state of a counting scope: the one owner of its lock, count and state.

[exec.counting.scopes.general], [exec.scope.simple.counting], [exec.scope.join];
the scopes guide explains the Python decisions (errors, futures, Ctrl-C).

:class:`AssociationState` is the base of ``simple_counting_scope`` and ``counting_scope``
(``_counting_scope``). It holds the scope's lock (``_lock``), the number of associations
(``_count``), the state (``_state``, one of the seven below), the registered joins and what
the join reports (errors of spawned work, errors of unconsumed futures, interrupts), and it is
the only code that reads or writes them: ``spawn``, ``spawn_future``, the join sender and the
nursery face call its methods (``tests/test_scope_state_owner.py`` checks that no other
module of ``structexec._scopes`` touches ``_lock``, ``_count`` or ``_state``).

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

The methods keep their exposition-only names with a leading underscore (``_try_associate``,
``_disassociate``, ``_start_join``): a scope is not a scope token ([exec.scope.concepts]), its
token forwards to them.
"""

from __future__ import annotations

import sys
import threading
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

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
    and what its join reports; every member is atomic under ``_lock``."""

    __slots__ = (
        "__weakref__",
        "_count",
        "_errors",
        "_interrupts",
        "_joiners",
        "_lock",
        "_pending",
        "_state",
    )

    #: The most associations the scope holds at once ([exec.counting.scopes]); a subclass
    #: may lower it.
    max_associations: ClassVar[int] = sys.maxsize

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0
        self._state = UNUSED
        self._joiners: list[JoinWaiter] = []
        self._errors: list[object] = []
        # Errors of finished spawn_futures that nobody has consumed yet: {id(state): error}
        self._pending: dict[int, Any] = {}
        self._interrupts: list[BaseException] = []

    # -- the exposition-only members ([exec.counting.scopes]), atomic under self._lock

    def _try_associate(self) -> bool:
        """``try-associate``: one more association if the state accepts work and the count
        is below ``max_associations`` (unused becomes open); ``False`` otherwise
        ([exec.scope.simple.counting])."""
        lock = self._lock
        lock.acquire()
        st = self._state
        if ACCEPTS[st] and self._count < self.max_associations:
            self._count += 1
            if st == UNUSED:
                self._state = OPEN
            lock.release()
            return True
        lock.release()
        return False

    def _disassociate(self) -> None:
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
            joiners = self._joiners
            self._joiners = []
            lock.release()
            # Completing a join may drop the last reference to the scope (Note 1).
            for j in joiners:
                j._sx_join_complete()
            return
        lock.release()

    def _start_join(self, op: JoinWaiter) -> bool:
        """``start-join-sender``: ``True`` to complete inline, else ``op`` is registered and
        its ``_sx_join_complete()`` is called when the count reaches zero ([exec.scope.join])."""
        return self._join_or_register(lambda: op) is None

    def _join_or_register(self, factory: Callable[[], _W]) -> _W | None:
        """``start-join-sender`` for the ``async with`` exit: ``None`` if the join completes
        inline (as ``_start_join`` returning ``True``), else the join ``factory()`` made and
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
        self._joiners.append(op)
        lock.release()
        return op

    def close(self) -> None:
        """Refuse new associations from now on; state changes as in [exec.counting.scopes].

        unused → unused-and-closed, open → closed, open-and-joining → closed-and-joining;
        otherwise no effect. Afterwards every ``try_associate()`` returns ``False``, so
        ``spawn`` drops its work and ``associate``/``spawn_future`` complete stopped.
        """
        lock = self._lock
        lock.acquire()
        self._state = AFTER_CLOSE[self._state]
        lock.release()

    # -- questions about the state (snapshots)

    def _is_joined(self) -> bool:
        return self._state == JOINED

    def _joining_or_joined(self) -> bool:
        """Whether a join was started (the scope cannot host new work in ``async with``)."""
        return self._state in (OPEN_JOINING, CLOSED_JOINING, JOINED)

    def _state_name(self) -> str:
        return NAMES[self._state]

    @property
    def state(self) -> str:
        """The current state's name, as in the spec ("unused", "open-and-joining", ...)."""
        return NAMES[self._state]

    @property
    def count(self) -> int:
        """The number of associations held right now (a snapshot, for debugging and tests)."""
        return self._count

    # -- what the join reports: errors of spawned work, of unconsumed futures, interrupts

    def _record_error(self, err: object) -> None:
        lock = self._lock
        lock.acquire()
        self._errors.append(err)
        lock.release()

    def _error_count(self) -> int:
        """How many errors have been recorded so far."""
        with self._lock:
            return len(self._errors)

    def _errors_unlocked(self) -> int:
        """How many errors the join would report, read without the lock: for a tree printed
        by a signal handler, which may interrupt a holder of the lock on its own thread
        (``_introspect``; a snapshot, possibly stale by one)."""
        return len(self._errors) + len(self._pending)

    def _errors_snapshot(self, forget: bool = False) -> list[object]:
        """The errors the scope reports: those recorded, then those of finished futures
        that nobody has consumed. ``forget``: the ``async with`` exit reports them for good
        (as a nursery, it keeps nothing alive after raising them)."""
        with self._lock:
            errors = list(self._errors)
            if self._pending:
                errors.extend(self._pending.values())
            if forget:
                self._errors = []
                self._pending = {}
        return errors

    def _take_exit_report(self) -> tuple[list[object], list[BaseException]]:
        """What the ``async with`` exit reports, taken for good in one step: the errors (as
        ``_errors_snapshot(forget=True)``) and the interrupts (as ``_take_interrupts``)."""
        lock = self._lock
        lock.acquire()
        errors = self._errors
        interrupts = self._interrupts
        if errors:
            self._errors = []
        if self._pending:
            errors = errors + list(self._pending.values())
            self._pending = {}
        if interrupts:
            self._interrupts = []
        lock.release()
        return errors, interrupts

    def _park_future_error(self, st: object, err: object) -> None:
        """A future's work failed and nobody consumes the future yet: if nobody has when the
        scope's join delivers, the join reports the error (``_errors_snapshot``)."""
        with self._lock:
            self._pending[id(st)] = err

    def _unpark_future_error(self, st: object) -> None:
        """The error was delivered to a consumer: no longer the scope's to report."""
        with self._lock:
            self._pending.pop(id(st), None)

    def _future_error_dropped(self, st: object, err: object) -> None:
        """The future of failed work was dropped or closed unconsumed: an unhandled error of
        spawned work. Once the scope has joined it is reported by the join already."""
        with self._lock:
            if self._state == JOINED:
                return  # the work finished before the join: the join reports its error
            self._pending.pop(id(st), None)
        self._record_error(err)

    def _add_interrupt(self, exc: BaseException) -> None:
        """Keep a ``KeyboardInterrupt``/``SystemExit``/... for the ``async with`` exit."""
        with self._lock:
            self._interrupts.append(exc)

    def _take_interrupts(self) -> list[BaseException]:
        """The interrupts kept so far, forgotten by the scope."""
        with self._lock:
            interrupts = self._interrupts
            self._interrupts = []
        return interrupts

    # -- representation and dropping

    def _dropped_quietly(self) -> bool:
        """Whether dropping the scope in a state not good to drop is already reported
        otherwise (a misnested nursery block), so ``__del__`` warns no more."""
        return False

    def __repr__(self) -> str:
        name = getattr(self, "_name", None)  # a named scope (docs/debugging.md)
        label = type(self).__name__ if name is None else f"{type(self).__name__} {name!r}"
        return f"<{label} {NAMES[self._state]}, {self._count} associated>"

    def __del__(self) -> None:
        st = getattr(self, "_state", UNUSED)
        if st not in GOOD_TO_DROP and not self._dropped_quietly():
            warnings.warn(
                f"{type(self).__name__} garbage-collected in state {NAMES[st]!r} with "
                f"{self._count} associations: a scope must be joined before it is dropped "
                "([exec.counting.scopes.general]): leave its `async with` block, or await "
                "scope.join()",
                ResourceWarning,
                stacklevel=1,
            )
