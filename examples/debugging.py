"""A program that hangs on purpose, and how to see what it is waiting for.

Run: python examples/debugging.py   (docs/debugging.md explains the output)

1. A small "server" gets stuck: its connection handlers wait for data that never comes, a
   heartbeat timer is pending, a config future was never awaited and a checksum runs on the
   parallel scheduler. After 0.3 s the program prints ``sx.dump()``, the tree of its scopes and
   their outstanding operations, then stops everything (a real hang would not; see 3.).
2. Work that fails carries a note: where it was spawned and which scope recorded it.
3. ``sx.install_dump_on_signal()``: ``kill -USR1 <pid>`` prints the tree of a running program.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from typing import Any

import trio
import trio.lowlevel

import structexec as sx

release = threading.Event()


def parse_config(text: str) -> dict[str, Any]:
    config: dict[str, Any] = json.loads(text)
    return config


def send_heartbeat() -> None:
    print("heartbeat")


def checksum(blob: bytes) -> None:
    release.wait(5)  # a slow computation on a worker thread


async def handle(conn_id: int) -> None:
    await trio.sleep_forever()  # waits for data that never comes


async def serve(task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    async with sx.counting_scope(name="connections") as conns:
        for conn_id in range(2):
            conns.start_soon(handle, conn_id)
        task_status.started()
        await trio.sleep_forever()


async def stuck_server() -> None:
    par = sx.get_parallel_scheduler()
    async with sx.counting_scope(name="app") as app:
        await app.start(serve)
        app.spawn(sx.schedule_after(sx.trio_scheduler(), 60.0) | sx.then(send_heartbeat))
        config = app.spawn_future(sx.just('{"debug": true}') | sx.then(parse_config))
        app.spawn(sx.starts_on(par, sx.just(b"payload") | sx.then(checksum)))
        with trio.move_on_after(0.3):
            await trio.sleep_forever()  # "the program hangs here"
        print("1. the program seems stuck; sx.dump() prints:")
        sx.dump(sys.stdout)
        release.set()
        app.request_stop()  # a stuck program would not get here: see 3.
        print(f"   (config was {await config})")


def parse_strict(line: str) -> int:
    return int(line)


async def failing() -> None:
    try:
        async with sx.counting_scope(name="parsers") as scope:
            scope.spawn(sx.just("not a number") | sx.then(parse_strict))
    except Exception as group:  # an ExceptionGroup
        err = group.exceptions[0]  # type: ignore[attr-defined]
        print(f"2. {err!r}, noted: {err.__notes__}")
        del err  # (its traceback would keep the scope alive for the next dump)


async def on_signal() -> None:
    if not hasattr(signal, "SIGUSR1"):  # pragma: no cover - Windows
        print("3. (no SIGUSR1 here)")
        return
    old = sx.install_dump_on_signal(signal.SIGUSR1, file=sys.stdout)
    try:
        async with sx.simple_counting_scope(name="background") as scope:
            scope.spawn(sx.schedule_after(sx.trio_scheduler(), 0.2))
            print("3. after kill -USR1 <pid>:")
            os.kill(os.getpid(), signal.SIGUSR1)
            await trio.lowlevel.checkpoint()
    finally:
        signal.signal(signal.SIGUSR1, old)


async def main() -> None:
    await stuck_server()
    await failing()
    await on_signal()


if __name__ == "__main__":
    trio.run(main)
