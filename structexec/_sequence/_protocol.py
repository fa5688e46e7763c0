"""The sequence-sender protocol: ``set_next``, ``SequenceSender``, sequence closures.

A *sequence sender* is connected like any sender, to a receiver that also has
``set_next(item)``. It produces zero or more *items* (each a lazy sender) by calling
``set_next(rcvr, item)``, which returns the *next sender*; the producer connects and starts
the next sender and pulls its next item only when the next sender completed ``set_value()``.
That handshake is the backpressure of a pipeline. The next sender completes
``set_stopped()`` when the consumer wants no more items (the producer then ends with
``set_value()`` unless a stop was requested on its stop token) and ``set_error(e)`` to end the
sequence with ``e``. The sequence itself completes ``set_value()`` (the end), ``set_error(e)``
or ``set_stopped()`` only after every next sender it started completed ([exec.async.ops]:
nothing outlives the operation).

Items are started by whoever consumes them (a consumer such as ``to_list``, or an adaptor with
``max_concurrency > 1``); their environment is that consumer's, so a stop request on the
consumer's token reaches the producer and every item in flight.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from .._algorithms._just import _JustErrorSender, _JustSender, _JustStoppedSender
from .._algorithms._stop_when import StopTokenEnv, child_token
from .._core._connect import connect_unchecked as connect
from .._core._env import EMPTY_ENV, fwd_env, get_env
from .._core._protocol import twice_started
from .._core._queries import get_stop_token, query_or
from .._core._stop_token import inplace_stop_source, never_stop_token

if TYPE_CHECKING:
    import threading
    from collections.abc import Callable
    from typing import Protocol

__all__ = [
    "SeqClosure",
    "SequenceSender",
    "is_sequence_sender",
    "set_next",
]

T_co = TypeVar("T_co", covariant=True)
In_contra = TypeVar("In_contra", contravariant=True)
Out_co = TypeVar("Out_co", covariant=True)
R = TypeVar("R")
T = TypeVar("T")
#: The type of the operation that owns an :class:`ItemNext`.
OwnerT = TypeVar("OwnerT")

_new = object.__new__

#: Completion kinds used by the sequence operations.
VALUE, ERROR, STOPPED = 0, 1, 2

_NEVER = never_stop_token()


# The Protocols below are for annotations only (nothing checks them at run time), so they are
# defined for type checkers only: no class is built at import.
if TYPE_CHECKING:

    class Rcvr(Protocol):
        """What the sequence operations call on a receiver ([exec.recv]): the three completions.
        (``get_env`` is optional on a receiver; it is read with ``get_env(rcvr)``.)"""

        def set_value(self, *vals: object) -> None: ...
        def set_error(self, err: object) -> None: ...
        def set_stopped(self) -> None: ...

    class SeqRcvr(Rcvr, Protocol):
        """A receiver of a sequence: a :class:`Rcvr` that also accepts items; ``set_next(item)``
        returns the next sender (see :func:`set_next`)."""

        def set_next(self, item: object) -> object: ...

    class OpState(Protocol):
        """An operation state ([exec.opstate]): ``start()``."""

        def start(self) -> None: ...

    class StopToken(Protocol):
        """A stop token as the sequence operations read it ([stoptoken.concepts])."""

        def stop_requested(self) -> bool: ...
        def stop_possible(self) -> bool: ...


def chained_stop(rcvr: object) -> tuple[StopToken, inplace_stop_source, StopToken, object]:
    """A stop source of an operation, chained to its receiver's stop token:
    ``(receiver's token, source, token, env)``; ``token`` is stopped by either, ``env`` is the
    receiver's environment with ``get_stop_token`` answered by ``token`` (forwarding queries,
    [exec.fwd.env])."""
    outer = get_env(rcvr)
    rt = query_or(outer, get_stop_token, _NEVER)
    src = inplace_stop_source()
    tok = child_token(src.get_token(), rt)
    return rt, src, tok, StopTokenEnv(tok, fwd_env(outer))


def set_next(rcvr: SeqRcvr, item: object) -> object:
    """Offer one item to a sequence receiver: ``rcvr.set_next(item)``; returns the next sender.

    ``item`` is a lazy sender (nothing runs until its consumer starts it). The returned *next
    sender* completes ``set_value()`` when the consumer is done with the item and wants
    another, ``set_stopped()`` when it wants no more, ``set_error(e)`` to end the sequence with
    ``e``. A producer connects and starts the next sender, and produces its next item only
    after it completed ``set_value()``: that is the backpressure of a sequence. It is the
    Python spelling of stdexec's ``exec::set_next`` ([exec.async.ops] for the completion
    rules that the next sender follows).

    Raises ``TypeError`` if ``rcvr`` has no ``set_next`` method (a plain receiver cannot
    accept items).
    """
    try:
        m = rcvr.set_next
    except AttributeError:
        raise TypeError(
            f"set_next(rcvr, item): {type(rcvr).__name__} is not a sequence receiver (it has "
            "no set_next method); connect a sequence sender to a consumer such as "
            "sx.to_list or sx.ignore_all_values"
        ) from None
    return m(item)


class SeqEnd:
    """Mixin of the operations that receive the end of a sequence: ``set_value()``,
    ``set_error(e)`` and ``set_stopped()`` all go to one ``_seq_end(kind, data)`` (``kind`` is
    ``VALUE``, ``ERROR`` or ``STOPPED``; ``data`` is the error or ``None``)."""

    __slots__ = ()

    def set_value(self, *vals: object) -> None:
        self._seq_end(VALUE, None)

    def set_error(self, err: object) -> None:
        self._seq_end(ERROR, err)

    def set_stopped(self) -> None:
        self._seq_end(STOPPED, None)

    def _seq_end(self, kind: int, data: object) -> None:
        raise NotImplementedError


class OneShotNext:
    """Base of the *next senders* that are their own operation state (one object per item:
    sender, operation state and often the item's receiver). Connected once, it keeps the
    receiver and returns itself; connected a second time, it connects a fresh copy made by
    ``_copy()`` (a sender may be connected more than once, [exec.connect])."""

    __slots__ = ("_rcvr",)
    _rcvr: Rcvr  # None until connected
    sender_concept = True

    def connect(self, rcvr: Rcvr) -> OpState:
        if self._rcvr is not None:  # connected a second time: a fresh copy
            return self._copy().connect(rcvr)
        self._rcvr = rcvr  # type: ignore[unreachable]  # _rcvr is None until connected
        return self

    def _copy(self) -> OneShotNext:
        raise NotImplementedError

    if TYPE_CHECKING:

        def start(self) -> None: ...  # every subclass has one


class ItemNext(OneShotNext, Generic[OwnerT]):
    """A :class:`OneShotNext` for one item (``_item``, a sender) of an operation
    (``_owner``, of type ``OwnerT``)."""

    __slots__ = ("_item", "_owner")
    _item: object
    _owner: OwnerT

    def _copy(self) -> ItemNext[OwnerT]:
        n = _new(type(self))
        n._owner = self._owner
        n._item = self._item
        n._rcvr = None  # type: ignore[assignment]  # not connected yet
        return n


if TYPE_CHECKING:

    class EnvOwner(Protocol):
        """An operation whose environment (``_env``) its items see."""

        _env: object


EO = TypeVar("EO", bound="EnvOwner")


class ItemRcvrNext(ItemNext[EO]):
    """An :class:`ItemNext` that is also the receiver of its item: it forwards the owner's
    environment (``_owner._env``) to the item."""

    __slots__ = ()

    def get_env(self) -> object:
        return self._owner._env

    def _run_item(self) -> None:
        """Run the item with this object as its receiver (subclasses alias it as ``start``
        or call it once they have a slot: no extra call per item)."""
        item = self._item
        self._item = None
        connect(item, self).start()


def item_set_next(cls: type[ItemNext[OwnerT]]) -> Callable[[OwnerT, object], ItemNext[OwnerT]]:
    """The ``set_next`` method of an :class:`ItemOwner` whose items get a fresh ``cls`` each
    (``cls`` is a closure cell, not a class attribute looked up per item)."""

    def set_next(self: OwnerT, item: object) -> ItemNext[OwnerT]:
        n = _new(cls)
        n._owner = self
        n._item = item
        n._rcvr = None  # type: ignore[assignment]  # not connected yet
        return n

    return set_next


class ItemOwner(SeqEnd):
    """Mixin of the operations that receive a sequence's items one :class:`ItemNext` each:
    ``set_next(item)`` returns a fresh one owned by this operation (a subclass sets it to
    ``item_set_next(its next class)`` once both classes exist). ``start()`` starts the
    upstream operation ``_op`` (once: a second start raises), ``get_env()`` is ``_env``."""

    __slots__ = ()
    _env: object
    _op: OpState | None
    _started: bool

    def start(self) -> None:
        if self._started:
            raise twice_started(self)
        self._started = True  # type: ignore[misc]  # a slot of the subclass
        self._op.start()  # type: ignore[union-attr]  # set by connect

    def get_env(self) -> object:
        return self._env


class FailStops:
    """Mixin of the operations where a failed or stopped item stops everything: ``_fail``
    records the first error (later ones become notes on it, naming ``_name``) or that an
    item completed stopped, then requests stop on the operation's own source ``_src``."""

    __slots__ = ()
    _err: object
    _lock: threading.Lock
    _name: str
    _src: inplace_stop_source
    _stopped: bool

    def _fail(self, kind: int, err: object) -> None:
        """An item failed (``ERROR``) or completed stopped: record it, stop everything."""
        with self._lock:
            if kind == ERROR:
                first = self._err
                if first is None:
                    self._err = err  # type: ignore[misc]  # a slot of the subclass
                else:
                    add_error_note(first, err, self._name)
            else:
                self._stopped = True  # type: ignore[misc]
        self._src.request_stop()


def is_sequence_sender(x: object) -> bool:
    """True for sequence senders: instances of :class:`SequenceSender`, or objects with a
    ``connect`` method and a true class attribute ``sequence_concept``.

    A sequence sender is also a sender in the sense of :func:`is_sender` (it has
    ``connect``), but it must be connected to a receiver with ``set_next``
    ([exec.snd.concepts] for senders in general).
    """
    if isinstance(x, SequenceSender):
        return True
    return bool(getattr(type(x), "sequence_concept", False)) and callable(
        getattr(x, "connect", None)
    )


class SequenceSender(Generic[T_co]):
    """Base class for sequence senders: streams of items ([exec.snd.concepts]).

    ``T_co`` is the type of one item's value (what ``await item`` gives). Subclasses implement
    ``connect(rcvr)``, where ``rcvr`` has ``set_next(item)`` besides the completion methods,
    and may implement ``get_env()``. The pipe operator applies sequence adaptors:
    ``sx.iterate(xs) | sx.then_each(f)``. A sequence sender is not awaitable; consume it with
    ``sx.to_list``, ``sx.reduce``, ``sx.ignore_all_values``, ``sx.into_channel`` or
    ``sx.each``.
    """

    __slots__ = ()
    sequence_concept: ClassVar[bool] = True
    sender_concept: ClassVar[bool] = True

    def connect(self, rcvr: Any) -> Any:
        raise TypeError(
            f"{type(self).__name__} derives from sx.SequenceSender but has no connect()"
        )

    def get_env(self) -> object:
        return EMPTY_ENV

    if TYPE_CHECKING:

        def __or__(self, c: SeqClosure[T_co, R], /) -> SequenceSender[R]: ...


class SeqClosure(Generic[In_contra, Out_co]):
    """A sequence adaptor closure: ``then_each(f)``, ``take(3)``, ... ([exec.adapt.obj]).

    ``seq | c`` is ``c(seq)``; ``c | d`` composes (``seq | (c | d)`` is ``(seq | c) | d``).
    For type checkers it turns a ``SequenceSender[In]`` into a ``SequenceSender[Out]``.
    """

    __slots__ = ("_fn",)
    _fn: Callable[[SequenceSender[In_contra]], SequenceSender[Out_co]]

    def __init__(self, fn: Callable[[SequenceSender[In_contra]], SequenceSender[Out_co]]) -> None:
        self._fn = fn

    def __call__(self, seq: SequenceSender[In_contra]) -> SequenceSender[Out_co]:
        check_sequence("a sequence adaptor closure", "its argument", seq)
        return self._fn(seq)

    def __ror__(self, seq: SequenceSender[In_contra]) -> SequenceSender[Out_co]:
        return self(seq)

    def __or__(self, other: SeqClosure[Out_co, R]) -> SeqClosure[In_contra, R]:
        if not isinstance(other, SeqClosure):
            return NotImplemented
        first = self

        def composed(s: SequenceSender[In_contra]) -> SequenceSender[R]:
            return other(first(s))

        return SeqClosure(composed)


def check_sequence(name: str, arg: str, x: object) -> None:
    """``TypeError`` naming the argument unless ``x`` is a sequence sender."""
    if not is_sequence_sender(x):
        raise TypeError(
            f"{name}: {arg} must be a sequence sender (for example sx.iterate(xs)), got "
            f"{type(x).__name__}"
        )


def check_max_concurrency(name: str, n: object, *, allow_none: bool = False) -> None:
    """``TypeError``/``ValueError`` naming ``max_concurrency`` for a bad value."""
    if n is None and allow_none:
        return
    if type(n) is bool or not isinstance(n, int):
        raise TypeError(
            f"{name}(): max_concurrency must be an int >= 1"
            + (" or None" if allow_none else "")
            + f", got {type(n).__name__}"
        )
    if n < 1:
        raise ValueError(f"{name}(): max_concurrency must be >= 1, got {n}")


def check_callable(name: str, arg: str, f: object) -> Callable[..., object]:
    """``TypeError`` naming the argument unless ``f`` is callable; returns ``f``."""
    if not callable(f):
        raise TypeError(f"{name}(): {arg} must be callable, got {type(f).__name__}")
    return f


def just_vals(vals: tuple[object, ...]) -> _JustSender:
    """``just(*vals)`` without the argument checks (an item of a sequence)."""
    s = _new(_JustSender)
    s._vals = vals
    return s


def just_err(err: object) -> _JustErrorSender:
    s = _new(_JustErrorSender)
    s._err = err
    return s


def just_stopped() -> _JustStoppedSender:
    return _new(_JustStoppedSender)


def await_value(vals: tuple[object, ...]) -> object:
    """What ``await`` of a sender completing ``set_value(*vals)`` gives (None, the datum, or
    the tuple)."""
    n = len(vals)
    if n == 1:
        return vals[0]
    if n == 0:
        return None
    return vals


def add_error_note(err: object, other: object, where: str) -> None:
    """Attach ``other`` (an error that lost to ``err``) as a note on ``err``."""
    if not isinstance(err, BaseException) or other is err:
        return
    note = f"{where}: another error was dropped (only the first is delivered): {other!r}"
    notes = getattr(err, "__notes__", None)
    if notes is None:
        try:
            err.__notes__ = notes = []  # type: ignore[attr-defined,unused-ignore]
        except Exception:  # pragma: no cover - an exception type without a __dict__
            return
    if type(notes) is list and note not in notes:
        notes.append(note)


def pipe_signature(fn: Callable[..., object], *names: str) -> None:
    """Give ``fn`` (an adaptor taking ``(seq, x)`` or ``(x)`` through ``*args``) the runtime
    signature of its pipe form, ``fn(x, /, *, keywords)`` (``inspect.signature``, ``help()``):
    the positional parameters ``names`` and the keyword-only ones of ``fn`` itself."""
    sig = inspect.signature(fn)
    kw = [p for p in sig.parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY]
    pos = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_ONLY) for n in names]
    fn.__signature__ = sig.replace(parameters=[*pos, *kw])  # type: ignore[attr-defined]
