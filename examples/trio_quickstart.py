"""structexec for trio users: awaiting senders, and cancellation in both directions.

Sections (each prints what it shows):

A. `await sndr` in any trio task: values, errors, stopped.
B. The trio scheduler: `sx.trio_scheduler()`, `await sx.schedule(sch)`, work started on other
   threads that completes on the trio thread.
C. trio cancellation -> stop request: a cancelled task asks the operation to stop, waits
   (shielded) until it has, then raises trio's `Cancelled`.
D. stop request -> trio cancellation: a coroutine passed as a sender runs in its own trio
   task and cancel scope; a stop request from any thread cancels that scope, and the
   operation completes "stopped" (not an error).
E. Senders that need a stop token: a custom operation that listens to the token it gets
   from the awaiting task.

Run: python examples/trio_quickstart.py   (about a quarter of a second)
"""

from __future__ import annotations

import threading
from typing import Any

import trio

import structexec as sx


def section(title: str) -> None:
    print(f"\n== {title}")


# --------------------------------------------------------------------------- A


async def awaiting() -> None:
    section("A. await sndr: values, errors, stopped")
    # docs/trio.md "Awaiting a sender": no datum -> None, one datum -> the datum, several -> a
    # tuple.
    print("await just()        ->", await sx.just())
    print("await just(1)       ->", await sx.just(1))
    print("await just(1, 2)    ->", await sx.just(1, 2))
    # An error datum is raised as it is (anything that is not an exception: sx.ErrorValue).
    try:
        await (sx.just("x") | sx.then(int))
    except ValueError as e:
        print("then(int) on 'x'    -> raised ValueError:", e)
    # Stopped that did not come from our own cancel scope raises sx.Stopped, which is a
    # BaseException: `except Exception` does not swallow a stop.
    try:
        await sx.just_stopped()
    except sx.Stopped:
        print("await just_stopped() -> raised sx.Stopped")


# --------------------------------------------------------------------------- B


async def scheduler() -> None:
    section("B. the trio scheduler")
    sch = sx.trio_scheduler()
    print("same object in one run:", sch is sx.trio_scheduler())
    await sx.schedule(sch)  # one trip through the trio scheduler, like a checkpoint
    print("await schedule(sch): resumed after a checkpoint")

    # Work started from a plain thread completes on the trio thread, in FIFO order.
    done = trio.Event()
    order: list[int] = []
    trio_thread = threading.get_ident()

    class Receiver:
        def __init__(self, i: int) -> None:
            self.i = i

        def set_value(self) -> None:
            assert threading.get_ident() == trio_thread
            order.append(self.i)
            if len(order) == 3:
                done.set()

        def set_error(self, err: object) -> None: ...

        def set_stopped(self) -> None: ...

    def from_thread() -> None:
        for i in range(3):
            sx.connect(sx.schedule(sch), Receiver(i)).start()

    t = threading.Thread(target=from_thread)
    t.start()
    await trio.to_thread.run_sync(t.join)
    await done.wait()
    print("started on another thread, completed on the trio thread in order:", order)


# --------------------------------------------------------------------------- C


async def cancel_trio_to_stop() -> None:
    section("C. trio cancellation -> stop request")

    async def download(name: str) -> str:
        try:
            await trio.sleep(10)
            return name
        finally:
            print(f"  {name}: stopped and cleaned up")

    with trio.move_on_after(0.05) as scope:
        await sx.when_all(download("first"), download("second"))
    # Both downloads were cancelled *before* the await raised Cancelled: the operation never
    # outlives the await that started it.
    print("scope.cancelled_caught =", scope.cancelled_caught)


# --------------------------------------------------------------------------- D


async def cancel_stop_to_trio() -> None:
    section("D. stop request -> trio cancellation")

    async def worker() -> str:
        try:
            await trio.sleep(10)
            return "finished"
        except trio.Cancelled:
            print("  worker: got trio.Cancelled (from the stop request)")
            raise

    class Recorder:
        """A receiver: how the operation completed."""

        def __init__(self, source: sx.inplace_stop_source) -> None:
            self.source = source
            self.result = trio.Event()
            self.how = ""

        def get_env(self) -> Any:
            return sx.prop(sx.get_stop_token, self.source.get_token())

        def set_value(self, *vals: Any) -> None:
            self._done(f"set_value{vals}")

        def set_error(self, err: Any) -> None:
            self._done(f"set_error({err!r})")

        def set_stopped(self) -> None:
            self._done("set_stopped()")

        def _done(self, how: str) -> None:
            self.how = how
            self.result.set()

    source = sx.inplace_stop_source()
    rec = Recorder(source)
    op = sx.connect(worker(), rec)  # a coroutine object is a sender
    op.start()  # it now runs in its own trio task
    await trio.sleep(0.02)
    t = threading.Thread(target=source.request_stop)  # stop it from another thread
    t.start()
    await trio.to_thread.run_sync(t.join)
    await rec.result.wait()
    print("the operation completed with", rec.how)


# --------------------------------------------------------------------------- E


class WaitForStop(sx.Sender[str]):
    """A hand-written sender: completes only when its stop token is triggered."""

    def connect(self, rcvr: Any) -> Any:
        return _WaitForStopOp(rcvr)


class _WaitForStopOp:
    def __init__(self, rcvr: Any) -> None:
        self.rcvr = rcvr
        self.callback: Any = None

    def start(self) -> None:
        token = sx.get_stop_token(sx.get_env(self.rcvr))
        print("  op started; its token can stop:", token.stop_possible())
        self.callback = sx.stop_callback_for(token, self.on_stop)

    def on_stop(self) -> None:
        print("  op: stop requested -> completing set_stopped()")
        self.callback.close()
        self.rcvr.set_stopped()


async def custom_sender() -> None:
    section("E. a custom sender sees the awaiting task's cancellation as a stop token")
    with trio.move_on_after(0.02) as scope:
        await WaitForStop()
    print("scope.cancelled_caught =", scope.cancelled_caught)


async def main() -> None:
    await awaiting()
    await scheduler()
    await cancel_trio_to_stop()
    await cancel_stop_to_trio()
    await custom_sender()


if __name__ == "__main__":
    trio.run(main)
