"""run_loop: a tiny event loop you drive yourself, fed from any thread.

A `run_loop` is a FIFO queue of work. Anyone, on any thread, can `schedule` onto it; the
work runs on the thread that calls `loop.run()`, in the order it was scheduled. `sync_wait`
uses a private run_loop to block the calling thread until a sender completes.

Run: python examples/run_loop.py
"""

from __future__ import annotations

import threading

import structexec as sx


def main() -> None:
    loop = sx.run_loop()
    sch = loop.get_scheduler()
    results: list[str] = []
    remaining = [8]
    lock = threading.Lock()

    class Collect(sx.Receiver):
        def set_value(self, *vals: object) -> None:
            results.append(str(vals[0]))
            with lock:
                remaining[0] -= 1
                if remaining[0] == 0:
                    loop.finish()  # run() returns once the queue is empty

        def set_error(self, err: object) -> None:
            raise AssertionError(err)

        def set_stopped(self) -> None:
            raise AssertionError("stopped")

    def producer(name: str) -> None:
        for i in range(4):
            work = sx.schedule(sch) | sx.then(
                lambda i=i: f"{name}#{i} ran on {threading.current_thread().name}"
            )
            sx.start(sx.connect(work, Collect()))

    threads = [threading.Thread(target=producer, args=(n,), name=n) for n in ("A", "B")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    loop.run()  # everything runs here, on the main thread
    print("\n".join(results))

    # sync_wait is the same thing packaged: it drives a private run_loop until done.
    print("sync_wait ->", sx.sync_wait(sx.just(20) | sx.then(lambda x: x + 22)))


if __name__ == "__main__":
    main()
