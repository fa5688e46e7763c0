"""Run a snippet of Python in a child process with a hard timeout (failure-semantics tests).

The snippet can call ``ready()`` (print the marker that triggers the SIGINT) and
``leaf_names(exc)`` (the type names of an exception or of a group's leaves).

A test of behaviour that used to hang (or may abort the process, or needs a real SIGINT) runs
its code in a child interpreter, so a hang fails the test after ``timeout`` seconds instead of
stalling the suite, and an abort is seen as an exit status.

The child first restores Python's default SIGINT handler (CI may start the suite with SIGINT
ignored, and trio turns SIGINT into ``KeyboardInterrupt`` only with the default handler).
A snippet may call ``ready()`` (print the marker that triggers the SIGINT) and
``leaf_names(exc)`` (the type names of an exception, or of the leaves of a group).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from typing import Any

#: Printed by the child (``ready()`` in the snippet) when it is at the point to interrupt.
READY = "@@READY@@"

_PRELUDE = f"""\
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup, ExceptionGroup
def ready():
    print({READY!r}, flush=True)
def leaf_names(e):
    \"\"\"The type names of the leaves of e (itself, or the exceptions of a group, nested).\"\"\"
    if isinstance(e, BaseExceptionGroup):
        return [n for x in e.exceptions for n in leaf_names(x)]
    return [type(e).__name__]
"""


@dataclass
class Result:
    """What the child did: exit status, output, and whether it had to be killed."""

    returncode: int
    stdout: str
    stderr: str
    timed_out: bool

    def __str__(self) -> str:
        return (
            f"returncode={self.returncode} timed_out={self.timed_out}\n"
            f"--- stdout ---\n{self.stdout}\n--- stderr ---\n{self.stderr}"
        )


def run_child(code: str, *, timeout: float = 30.0, sigint_after_ready: bool = False,
              sigint_delay: float = 0.05) -> Result:
    """Run ``code`` (dedented) in a fresh interpreter; kill it after ``timeout`` seconds.

    With ``sigint_after_ready``, wait until the child prints :data:`READY` (call ``ready()``
    in the snippet), wait ``sigint_delay`` seconds more and send it a real SIGINT.
    """
    src = _PRELUDE + textwrap.dedent(code)
    env = dict(os.environ)
    env.pop("PYTHONWARNINGS", None)
    proc = subprocess.Popen(
        [sys.executable, "-c", src],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    deadline = time.monotonic() + timeout
    out_lines: list[str] = []
    if sigint_after_ready:
        assert proc.stdout is not None
        while True:
            line = proc.stdout.readline()
            if not line:
                break
            if line.strip() == READY:
                time.sleep(sigint_delay)
                proc.send_signal(signal.SIGINT)
                break
            out_lines.append(line)
    try:
        out, err = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
        timed_out = False
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        timed_out = True
    return Result(proc.returncode, "".join(out_lines) + out, err, timed_out)


class HangGuard:
    """A watchdog for an in-process trio test that could hang if a regression came back.

    After ``seconds`` of real time it crashes the test's trio run (a ``run_sync_soon``
    callback that raises ends the run with ``TrioInternalError``), so the test fails with
    "hang guard" in its traceback instead of stalling the suite. Shielded waits, which no
    trio deadline can end, are ended too, as long as the run loop itself is alive.
    """

    def __init__(self, token: Any, seconds: float) -> None:
        import threading

        self._done = threading.Event()
        self._lock = threading.Lock()
        self._token = token
        self._seconds = seconds
        self._deadline = time.monotonic() + seconds
        self._thread = threading.Thread(target=self._watch, daemon=True, name="hang-guard")
        self._thread.start()

    def extend(self, seconds: float) -> None:
        """Allow ``seconds`` more real time: for a wait that has a bound of its own (a child
        process's timeout), so that the guard never ends the test before that bound does."""
        with self._lock:
            self._deadline += seconds
            self._seconds += seconds

    def _watch(self) -> None:
        while True:
            with self._lock:
                remaining = self._deadline - time.monotonic()
            if remaining <= 0:
                break
            if self._done.wait(remaining):
                return

        def abort() -> None:
            raise RuntimeError(f"hang guard: the test was still running after {self._seconds}s")

        try:
            self._token.run_sync_soon(abort)
        except Exception:
            pass

    def close(self) -> None:
        self._done.set()
        self._thread.join()
