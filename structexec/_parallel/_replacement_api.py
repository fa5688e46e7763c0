"""``system_context_replaceability``: the interface between ``parallel_scheduler`` and its backend.

[exec.sysctxrepl] ([exec.sysctxrepl.recvproxy], [exec.sysctxrepl.psb], [exec.sysctxrepl.query],
[exec.par.scheduler], the parallel guide "Data parallelism: `bulk`"). The *frontend*
(``parallel_scheduler``, in ``_parallel_scheduler.py``) turns each operation into a *receiver
proxy* and hands it to the *backend*; the backend runs the work on its execution agents and
completes the proxy. Python has no link time, so the backend is replaced at run time with
:func:`set_parallel_scheduler_backend` (the parallel guide "Data parallelism: `bulk`"); existing
schedulers keep the backend they were created with ([exec.par.scheduler]).

Python renderings of the C++ interface (the parallel guide):

* ``span<byte>`` preallocated storage: every call passes an empty writable
  ``memoryview``; Python backends keep per-operation state in ordinary objects.
* ``exception_ptr``: any exception object.
* ``execute(b, e)`` is ``noexcept`` in C++. Here it raises whatever the bulk function raises,
  and the *backend* turns it into ``set_error`` (the TRY-EVAL of the C++ frontend, moved to
  where Python can act on it): it starts no further chunks and completes ``set_error(exc)``
  once the running ones have returned. A ``BaseException`` (``KeyboardInterrupt``,
  ``SystemExit``) is never an error datum: the thread-pool backend stops the hand-out the
  same way and then gives it to the consumer that waits for the work (``await`` and
  ``sync_wait`` raise it; the private ``raised_sink`` query of the proxy finds it), or, with
  no such consumer, completes ``set_stopped()`` and delivers a ``KeyboardInterrupt`` as a
  Ctrl-C (anything else: terminate). The default bulk implementation below lets it
  propagate to the agent that ran ``set_value``.
* ``try_query<P>(q)`` is ``try_query(q)`` or ``try_query(q, P)`` (``try_query(P, q)`` in the
  C++ argument order is accepted too) and returns ``None`` for ``nullopt``.
* Remote execution (an extension for process and cluster backends): a bulk proxy also offers
  :meth:`~system_context_replaceability.bulk_item_receiver_proxy.remote_work`, a picklable
  callable that runs chunks in another process (``RemoteBulkWork``, in ``_remote_work.py``),
  and :meth:`~system_context_replaceability.bulk_item_receiver_proxy.merge`, which brings a
  chunk's results back into this process.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

from .._core._queries import _MISSING, get_stop_token
from .._core._stop_token import inplace_stop_token
from ._remote_work import RemoteBulkWork

if TYPE_CHECKING:
    from typing import Protocol

    from ._remote_call import RemoteThenOp
    from ._remote_work import RemoteCallWork

__all__ = [
    "system_context_replaceability",
    "query_parallel_scheduler_backend",
    "set_parallel_scheduler_backend",
]


#: The ``span<byte>`` argument of every backend call: empty, writable, shared.
NO_STORAGE = memoryview(bytearray(0))


def _parse_try_query(args: tuple[object, ...]) -> tuple[object, Any]:
    if len(args) == 1:
        return args[0], None
    if len(args) == 2:
        a, b = args
        if isinstance(a, type) and not isinstance(b, type):
            return b, a  # C++ order: try_query<P>(q)
        return a, b  # b: the result type (a non-type fails in the isinstance check)
    raise TypeError(f"try_query() takes (query) or (query, result_type), got {len(args)} arguments")


# --------------------------------------------------------------------------- the namespace


class system_context_replaceability:
    """Facilities to replace the implementation of ``parallel_scheduler`` ([exec.sysctxrepl]).

    A namespace (not instantiable), spelled as in the spec:

    * :class:`receiver_proxy`, :class:`bulk_item_receiver_proxy`: what the frontend gives a
      backend ([exec.sysctxrepl.recvproxy]);
    * :class:`parallel_scheduler_backend`: what a backend implements
      ([exec.sysctxrepl.psb]);
    * :func:`query_parallel_scheduler_backend` and :func:`set_parallel_scheduler_backend`
      ([exec.sysctxrepl.query], the parallel guide "Data parallelism: `bulk`").

    A backend is installed with ``sx.set_parallel_scheduler_backend(lambda: backend)``.
    """

    def __new__(cls, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError("system_context_replaceability is a namespace; it has no instances")

    class receiver_proxy:
        """A type-erased receiver handed to a backend ([exec.sysctxrepl.recvproxy]).

        * ``set_value()``, ``set_error(exc)``, ``set_stopped()``: complete the operation; a
          backend calls exactly one of them, exactly once ([exec.sysctxrepl.psb]). Completing
          a frontend proxy twice raises ``RuntimeError``.
        * ``try_query(q)`` / ``try_query(q, P)``: ``q(env)`` for the environment of the
          receiver the proxy stands for, or ``None`` (C++ ``nullopt``) when the environment
          does not answer ``q`` or the answer is not an instance of ``P``; it never raises
          ([exec.sysctxrepl.recvproxy]). ``try_query(get_stop_token)`` returns an
          ``inplace_stop_token`` when the consumer can be stopped and ``None`` otherwise
          (for a ``never_stop_token``). A consumer whose stop token is of another stoppable
          type gets an ``inplace_stop_token`` linked to it, so backends need only support
          ``inplace_stop_token`` (the canonical way of cancelling).

        Backends may be written against any object with these methods; subclass this class
        to write a proxy of your own (for example a checking proxy in a conformance test)
        and override ``try_query`` or the two protected hooks ``_sx_stop_token()`` and
        ``_sx_query_env(q)`` (the exposition-only *query-env*; return ``_MISSING`` from
        ``structexec._core._queries`` for "unsupported").
        """

        __slots__ = ()

        def set_value(self) -> None:
            """Complete the operation successfully (on one of the backend's agents)."""
            raise NotImplementedError(f"{type(self).__name__}.set_value()")

        def set_error(self, err: BaseException) -> None:
            """Complete the operation with the error ``err`` (C++ ``exception_ptr``)."""
            raise NotImplementedError(f"{type(self).__name__}.set_error()")

        def set_stopped(self) -> None:
            """Complete the operation as stopped (the work was cancelled)."""
            raise NotImplementedError(f"{type(self).__name__}.set_stopped()")

        def try_query(self, *args: object) -> Any:
            """``q(env)`` of the consumer, or ``None`` ([exec.sysctxrepl.recvproxy]); see the
            class."""
            q, result_type = _parse_try_query(args)
            try:
                if q is get_stop_token:
                    if result_type is not None and result_type is not inplace_stop_token:
                        return None
                    return self._sx_stop_token()
                v = self._sx_query_env(q)
            except Exception:
                return None
            if v is _MISSING or (result_type is not None and not isinstance(v, result_type)):
                return None
            return v

        def _sx_stop_token(self) -> inplace_stop_token | None:
            return None

        def _sx_query_env(self, q: object) -> object:
            return _MISSING

    class bulk_item_receiver_proxy(receiver_proxy):
        """A receiver proxy that also runs bulk iterations ([exec.sysctxrepl.recvproxy]).

        * ``execute(b, e)``: for a chunked proxy, ``f(b, e, *vals)``; for an unchunked proxy
          (and for ``bulk``, which lowers to ``bulk_chunked``), ``f(i, *vals)`` for each
          ``i`` in ``[b, e)``. Raises what ``f`` raises (see the module docstring).
        * ``remote_work()`` (extension): a picklable callable ``w`` with ``w(b, e,
          should_stop=None) -> (stopped, parts)`` that does what ``execute(b, e)`` does, in
          whatever process unpickles it, on copies of the values.
        * ``merge(b, e, parts)`` (extension): write the results of a remote chunk back into
          this process's values: for each value that is a list, ``bytearray``,
          ``array.array`` or numpy array with at least ``shape`` elements, elements
          ``[b, e)``. Call it, like ``execute``, before completing the proxy.
        """

        __slots__ = ()

        def execute(self, b: int, e: int) -> None:
            """Run the iterations ``[b, e)`` here (see the class docstring)."""
            raise NotImplementedError(f"{type(self).__name__}.execute()")

        def remote_work(self) -> RemoteBulkWork:
            """A picklable callable that runs chunks in another process (extension)."""
            raise NotImplementedError(
                f"{type(self).__name__} does not support remote execution (remote_work())"
            )

        def merge(self, b: int, e: int, parts: tuple[object, ...]) -> None:
            """Write a remote chunk's results into this process's values (extension)."""
            raise NotImplementedError(
                f"{type(self).__name__} does not support remote execution (merge())"
            )

    class parallel_scheduler_backend:
        """The interface a parallel scheduler backend implements ([exec.sysctxrepl.psb]).

        * ``schedule(r, s)``: eventually call exactly one of ``r.set_value()`` (on one of the
          backend's execution agents), ``r.set_error(exc)`` or ``r.set_stopped()``
          ([exec.sysctxrepl.psb]). ``s`` is the preallocated storage (an empty ``memoryview``
          in Python).
        * ``schedule_bulk_chunked(n, r, s)``: call ``r.execute(b, e)`` with
          ``0 <= b < e <= n``, each index in at most one call, and, if it then calls
          ``r.set_value()``, in exactly one; every ``execute`` happens before the completion;
          ``execute`` and ``set_value`` run on the backend's agents; exactly one completion
          ([exec.sysctxrepl.psb]). When ``execute`` raises, complete ``set_error`` with that
          exception after the running calls have returned.
        * ``schedule_bulk_unchunked(n, r, s)``: the same with ``e == b + 1``
          ([exec.sysctxrepl.psb]).

        None of them may raise; if ``schedule*`` raises anyway, the frontend completes the
        operation with a :class:`~structexec.backends.BackendError` saying so. ``schedule``
        must be overridden. The two bulk methods have defaults built on ``schedule``: all the
        iterations run, in order, on the one agent that ``schedule`` completes on. A backend
        that wants to honour stop requests asks ``r.try_query(get_stop_token)``.
        """

        __slots__ = ()

        def schedule(self, r: receiver_proxy, s: memoryview) -> None:
            """Complete ``r`` on one of the backend's agents ([exec.sysctxrepl.psb])."""
            raise NotImplementedError(f"{type(self).__name__}.schedule()")

        def schedule_bulk_chunked(
            self, n: int, r: system_context_replaceability.bulk_item_receiver_proxy, s: memoryview
        ) -> None:
            """Run ``r.execute(b, e)`` over ``[0, n)``, then complete ``r``
            ([exec.sysctxrepl.psb])."""
            self.schedule(_RunAllProxy(r, n, False), s)

        def schedule_bulk_unchunked(
            self, n: int, r: system_context_replaceability.bulk_item_receiver_proxy, s: memoryview
        ) -> None:
            """Run ``r.execute(i, i + 1)`` for each ``i`` in ``[0, n)``, then complete
            ([exec.sysctxrepl.psb])."""
            self.schedule(_RunAllProxy(r, n, True), s)

    @staticmethod
    def query_parallel_scheduler_backend() -> Any:
        """See :func:`structexec.query_parallel_scheduler_backend`."""
        return query_parallel_scheduler_backend()

    @staticmethod
    def set_parallel_scheduler_backend(
        factory: Callable[[], Any] | None,
    ) -> Callable[[], Any] | None:
        """See :func:`structexec.set_parallel_scheduler_backend`."""
        return set_parallel_scheduler_backend(factory)


receiver_proxy = system_context_replaceability.receiver_proxy
bulk_item_receiver_proxy = system_context_replaceability.bulk_item_receiver_proxy
parallel_scheduler_backend = system_context_replaceability.parallel_scheduler_backend


class _RunAllProxy(receiver_proxy):
    """The default bulk implementation: once ``schedule`` completes, run every iteration."""

    __slots__ = ("_n", "_r", "_unchunked")

    def __init__(self, r: bulk_item_receiver_proxy, n: int, unchunked: bool) -> None:
        self._r = r
        self._n = n
        self._unchunked = unchunked

    def set_value(self) -> None:
        r = self._r
        n = self._n
        try:
            if self._unchunked:
                for i in range(n):
                    r.execute(i, i + 1)
            elif n > 0:
                r.execute(0, n)
        except Exception as e:
            r.set_error(e)
            return
        r.set_value()

    def set_error(self, err: BaseException) -> None:
        self._r.set_error(err)

    def set_stopped(self) -> None:
        self._r.set_stopped()

    def try_query(self, *args: object) -> Any:
        return self._r.try_query(*args)


if TYPE_CHECKING:  # annotations only: no class built at import

    class RemoteCallHandle(Protocol):
        """A remote call in flight, as a remote backend's ``_sx_submit_call`` returns it (for
        annotations): ``cancel()`` on a stop request, ``where()`` for ``sx.operation_tree()``."""

        def cancel(self) -> None:
            """Cancel the call if it has not started (the backend then reports it stopped)."""

        def where(self) -> str:
            """Where the call is, in words."""


    class BackendHooks(Protocol):
        """A backend as the parallel scheduler's operations see it (for annotations): the three
        calls of [exec.sysctxrepl.psb], and the optional hooks ``_sx_submit_anywhere``
        (contracts.SubmitAnywhere) and ``_sx_submit_call`` (contracts.SubmitCall), which the
        operations use only on backends that have them (checked at ``connect``)."""

        def schedule(self, r: receiver_proxy, s: memoryview) -> None: ...

        def schedule_bulk_chunked(self, n: int, r: bulk_item_receiver_proxy, s: memoryview) -> None:
            ...

        def schedule_bulk_unchunked(
            self, n: int, r: bulk_item_receiver_proxy, s: memoryview
        ) -> None: ...

        @property
        def _sx_submit_anywhere(self) -> bool: ...

        def _sx_submit_call(self, work: RemoteCallWork, op: RemoteThenOp) -> RemoteCallHandle: ...


# --------------------------------------------------------------------------- replacement

_lock = threading.RLock()
_factory: Callable[[], object] | None = None
_backend: object = None


def _no_default_backend() -> NoReturn:
    raise RuntimeError(
        "no default parallel scheduler backend is installed: import structexec (the package), "
        "not only its private modules"
    )


#: The factory that :func:`query_parallel_scheduler_backend` calls while no other is installed
#: ([exec.sysctxrepl.query]). This module does not know the backends that implement its interface;
#: The package facade (structexec/__init__.py) installs the factory of the process-wide
#: thread pool here with :func:`install_default_backend_factory`.
_default_factory: Callable[[], object] = _no_default_backend


def install_default_backend_factory(factory: Callable[[], object]) -> None:
    """Make ``factory`` the default backend factory ([exec.sysctxrepl.query]).

    It is called by the next :func:`query_parallel_scheduler_backend` when no factory was installed
    with :func:`set_parallel_scheduler_backend` (or after ``set_parallel_scheduler_backend(None)``).
    A backend already obtained is kept.
    """
    global _default_factory
    with _lock:
        _default_factory = factory


def query_parallel_scheduler_backend() -> Any:
    """The current parallel scheduler backend ([exec.sysctxrepl.query]).

    The first call after start-up or after :func:`set_parallel_scheduler_backend` calls the
    installed factory (by default one that returns the process-wide
    :class:`~structexec.backends.ThreadPoolBackend`, sized to ``os.cpu_count()``) and keeps
    the result; later calls return that same object. Thread-safe. It returns ``None`` if the
    factory returned ``None`` (``get_parallel_scheduler`` then calls the terminate handler,
    [exec.par.scheduler]); an exception from the factory propagates. Replace the backend with
    :func:`set_parallel_scheduler_backend`, not by assigning to this name.
    """
    global _backend
    b = _backend
    if b is not None:
        return b
    with _lock:
        if _backend is None:
            f = _factory if _factory is not None else _default_factory
            b = f()
            if b is not None and not callable(getattr(b, "schedule", None)):
                raise TypeError(
                    f"the parallel scheduler backend factory {f!r} returned {type(b).__name__}, "
                    "which is not a parallel_scheduler_backend (it has no schedule() method)"
                )
            _backend = b
        return _backend


def set_parallel_scheduler_backend(
    factory: Callable[[], Any] | None,
) -> Callable[[], Any] | None:
    """Replace the parallel scheduler backend at run time; return the previous factory.

    ``factory`` is a callable that returns a backend (an object implementing
    ``system_context_replaceability.parallel_scheduler_backend``), for example
    ``lambda: DaskBackend(client)``; ``None`` restores the default thread pool. The factory
    is called lazily, by the next :func:`query_parallel_scheduler_backend` (so by the next
    ``get_parallel_scheduler()``), once. Schedulers obtained before the call keep their
    backend and keep working: work already started continues where it is, and for a while
    two backends may be in use ([exec.par.scheduler]); new schedulers
    compare unequal to the old ones. The old backend is not shut down. Passing a backend
    object instead of a factory raises ``TypeError``.
    """
    global _factory, _backend
    obj: object = factory
    if obj is not None and not callable(obj):
        hint = (
            " (it looks like a backend: pass a factory, e.g. `lambda: backend`)"
            if callable(getattr(obj, "schedule", None))
            else ""
        )
        raise TypeError(
            "set_parallel_scheduler_backend() needs a callable that returns a backend, or None, "
            f"got {type(obj).__name__}{hint}"
        )
    with _lock:
        previous = _factory
        _factory = factory
        _backend = None
    return previous
