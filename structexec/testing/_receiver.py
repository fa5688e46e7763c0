"""``RecordingReceiver``: a receiver that records its completion and checks the contract.

[exec.async.ops], [exec.recv.concepts] ("Rec"), 2.2, 2.3, 2.13, 2.16.
"""

from __future__ import annotations

import threading
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from .._core._connect import connect as _connect
from .._core._env import env as _env
from .._core._env import prop
from .._core._queries import get_stop_token
from .._core._stop_token import inplace_stop_source
from ._manual import ManualScheduler

if TYPE_CHECKING:
    import trio

    from .._core._contracts import Env
    from ._thread_sched import ThreadScheduler

__all__ = ["RecordingReceiver"]

_KINDS = ("value", "error", "stopped")


class RecordingReceiver:
    """A receiver that records how it was completed and checks the completion contract.

     (test vocabulary ``Rec``), 2.2 (exactly once), 2.3 (never before start),
    2.13 (stop callbacks deregistered before the completion), 2.16 (where it completed).

    ``RecordingReceiver(env=None, *, extra_env=None)``:

    * ``get_env()`` returns ``env`` when given. By default it returns an environment whose
      ``get_stop_token`` is the token of the receiver's own :attr:`stop_source` (an
      ``inplace_stop_source``), preceded by ``extra_env`` when given (so
      ``RecordingReceiver(extra_env=sx.prop(sx.get_scheduler, sch))`` has both a scheduler and
      a stop token).
    * :meth:`run` connects a sender, marks the receiver started and starts the operation
      (returning it); :meth:`connect` and :meth:`start` do the two halves separately, so a test
      can check that nothing completes during ``connect``.
    * Each completion appends ``(kind, args)`` to :attr:`events` (``kind`` is ``"value"``,
      ``"error"`` or ``"stopped"``; ``args`` is the tuple of datums, ``(err,)`` or ``()``) and
      records :attr:`thread` (``threading.get_ident()`` of the completing thread),
      :attr:`scheduler` (``ManualScheduler.current()`` at that moment, [exec.get.compl.sched]) and
      :attr:`live_callbacks_at_completion` (how many stop callbacks were still registered on
      :attr:`stop_source`; the contract says 0, [exec.recv.concepts]).
    * A second completion, or a completion before :meth:`run`/:meth:`start`, is a violation:
      an ``AssertionError`` is appended to :attr:`violations` and raised from the completion
      function. A stop callback still registered at completion is appended to
      :attr:`violations` but not raised (so the completion itself is still recorded). Since a
      library may swallow what a completion function raises, every accessor (:attr:`value`,
      :attr:`error`, :attr:`stopped`, :attr:`outcome`, :meth:`wait`, :meth:`check`) raises
      the first violation again.
    * :meth:`wait` blocks until completed (work completing on other threads);
      :meth:`wait_trio` does the same from a trio task without blocking the run loop.

    Thread-safe: completions may arrive on any thread.
    """

    def __init__(self, env: object = None, *, extra_env: Env | None = None) -> None:
        self.stop_source = inplace_stop_source()
        token_env = prop(get_stop_token, self.stop_source.get_token())
        if env is not None:
            self._env = env
        elif extra_env is not None:
            self._env = _env(extra_env, token_env)
        else:
            self._env = token_env
        self.events: list[tuple[str, tuple[Any, ...]]] = []
        self.violations: list[AssertionError] = []
        self.thread: int | None = None
        self.scheduler: ManualScheduler | ThreadScheduler | None = None
        self.live_callbacks_at_completion: int | None = None
        self.started = False
        self.op: Any = None
        self._cond = threading.Condition(threading.Lock())
        self._trio_waiters: list[tuple[trio.lowlevel.TrioToken, trio.Event]] = []

    # ------------------------------------------------------------------ receiver protocol

    def get_env(self) -> Any:
        """The environment given at construction, or one with this receiver's stop token."""
        return self._env

    def set_value(self, *vals: object) -> None:
        """Record ``("value", vals)``; raise ``AssertionError`` on a contract violation."""
        self._complete("value", vals)

    def set_error(self, err: object) -> None:
        """Record ``("error", (err,))``; raise ``AssertionError`` on a contract violation."""
        self._complete("error", (err,))

    def set_stopped(self) -> None:
        """Record ``("stopped", ())``; raise ``AssertionError`` on a contract violation."""
        self._complete("stopped", ())

    def _complete(self, kind: str, args: tuple[object, ...]) -> None:
        ident = threading.get_ident()
        current = ManualScheduler.current()
        live = len(self.stop_source._callbacks)
        with self._cond:
            violation: AssertionError | None = None
            if not self.started:
                violation = AssertionError(
                    f"completion set_{kind}{args!r} before the operation was started "
                    "(no completion before start, [exec.async.ops])"
                )
            elif self.events:
                violation = AssertionError(
                    f"second completion set_{kind}{args!r} after {self.events[0][0]}"
                    f"{self.events[0][1]!r} (an operation completes exactly once, "
                    "[exec.async.ops])"
                )
            self.events.append((kind, args))
            if violation is None:
                self.thread = ident
                self.scheduler = current
                self.live_callbacks_at_completion = live
                if live:
                    self.violations.append(
                        AssertionError(
                            f"{live} stop callback(s) still registered on the receiver's stop "
                            f"source when it completed with set_{kind} (an operation "
                            "deregisters its stop callbacks before it completes, "
                            "[exec.recv.concepts])"
                        )
                    )
            else:
                self.violations.append(violation)
            waiters, self._trio_waiters = self._trio_waiters, []
            self._cond.notify_all()
        for token, event in waiters:
            try:
                token.run_sync_soon(event.set)
            except (RuntimeError, OSError):  # that trio run has finished (or crashed)
                pass
        if violation is not None:
            raise violation

    # ------------------------------------------------------------------ driving

    def connect(self, sndr: object) -> Any:
        """``sx.connect(sndr, self)``; keeps the operation in :attr:`op` and returns it."""
        self.op = _connect(sndr, self)
        return self.op

    def start(self, op: Any = None) -> Any:
        """Mark the receiver started, then start ``op`` (default: the one from :meth:`connect`)."""
        if op is None:
            op = self.op
        if op is None:
            raise RuntimeError("RecordingReceiver.start(): nothing connected; call connect() first")
        self.started = True
        op.start()
        return op

    def run(self, sndr: object) -> Any:
        """Connect ``sndr`` to this receiver, mark it started and start it; return the op.

        Completions during ``connect`` count as "before start" violations ([exec.async.ops]).
        """
        return self.start(self.connect(sndr))

    def request_stop(self) -> bool:
        """``self.stop_source.request_stop()``: request stop on the operation."""
        return self.stop_source.request_stop()

    # ------------------------------------------------------------------ results

    @property
    def done(self) -> bool:
        """Whether the receiver has been completed (at least once)."""
        return bool(self.events)

    @property
    def completions(self) -> int:
        """How many completions arrived (the contract says at most one)."""
        return len(self.events)

    def check(self) -> None:
        """Raise the first recorded violation, if any."""
        if self.violations:
            raise self.violations[0]

    def _first(self) -> tuple[str, tuple[Any, ...]]:
        self.check()
        if not self.events:
            raise AssertionError("the receiver has not been completed")
        return self.events[0]

    @property
    def kind(self) -> str:
        """``"value"``, ``"error"`` or ``"stopped"``; ``AssertionError`` if not completed."""
        return self._first()[0]

    @property
    def value(self) -> tuple[Any, ...]:
        """The tuple of value datums; ``AssertionError`` unless it completed with a value."""
        kind, args = self._first()
        if kind != "value":
            raise AssertionError(f"expected a value completion, got set_{kind}{args!r}")
        return args

    @property
    def error(self) -> Any:
        """The error datum; ``AssertionError`` unless it completed with an error."""
        kind, args = self._first()
        if kind != "error":
            raise AssertionError(f"expected an error completion, got set_{kind}{args!r}")
        return args[0]

    @property
    def stopped(self) -> bool:
        """Whether it completed ``set_stopped()``; ``AssertionError`` if not completed."""
        return self._first()[0] == "stopped"

    @property
    def outcome(self) -> tuple[Any, ...]:
        """``("value", args)``, ``("error", err)`` or ``("stopped",)``: the model's format."""
        kind, args = self._first()
        if kind == "value":
            return ("value", args)
        if kind == "error":
            return ("error", args[0])
        return ("stopped",)

    def wait(self, timeout: float = 5) -> RecordingReceiver:
        """Block until completed; ``AssertionError`` after ``timeout`` seconds. Returns self.

        Do not call it on the trio thread while the work needs trio: use :meth:`wait_trio`.
        """
        with self._cond:
            if not self._cond.wait_for(lambda: bool(self.events), timeout):
                raise AssertionError(f"the receiver was not completed within {timeout} s")
        self.check()
        return self

    async def wait_trio(self) -> RecordingReceiver:
        """In a trio task: wait (without blocking trio) until completed. Returns self.

        Completions on any thread wake it through ``TrioToken.run_sync_soon``. Put a
        ``trio.fail_after`` around it to bound the wait.
        """
        import trio

        with self._cond:
            if self.events:
                event = None
            else:
                event = trio.Event()
                self._trio_waiters.append((trio.lowlevel.current_trio_token(), event))
        if event is not None:
            await event.wait()
        self.check()
        return self

    def __await__(self) -> Generator[object, None, RecordingReceiver]:
        return self.wait_trio().__await__()

    def __repr__(self) -> str:
        state = f"{self.events[0][0]}{self.events[0][1]!r}" if self.events else "pending"
        return f"<RecordingReceiver {state}>"
