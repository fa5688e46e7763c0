"""Domains and sender transforms ([exec.domain.default], [exec.snd.transform],
[exec.snd.transform.env], [exec.snd.apply]).

A *domain* customises algorithms: at ``connect`` (``_connect``) the library asks the sender's
late domain to ``transform_sender`` it ([exec.connect], [exec.snd.expos]), which is how
``parallel_scheduler`` replaces ``bulk_chunked`` with its own implementation
([exec.par.scheduler]). Custom domains derive from :class:`default_domain` and override what they
customise; everything else falls back to the default.

The transform machinery costs nothing while no custom domain is alive: :data:`DISPATCH` (one
:class:`DomainDispatch`) says whether some live custom domain class may transform senders of a
tag (:func:`may_transform`). A domain class registers when its first instance is made and is
held weakly: once the class is gone (``gc.collect()`` for a class defined in a function) its
tags stop costing, and ``connect`` is back on the fast path.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from ._env import EMPTY_ENV, fwd_env, get_env
from ._queries import _MISSING, get_completion_scheduler, get_domain, get_scheduler, query_or
from ._tags import set_error_t, set_stopped_t, set_value_t

if TYPE_CHECKING:
    from typing import Protocol

    from ._contracts import OpState, Rcvr

    class _Connectable(Protocol):
        def connect(self, rcvr: Rcvr) -> OpState: ...

    #: ``hook(sndr, rcvr)``: a then-chain's remote form to connect instead, or ``None``.
    ThenHook = Callable[[object, object], _Connectable | None]

__all__ = ["apply_sender", "default_domain", "transform_env", "transform_sender"]

_D = TypeVar("_D", bound="default_domain")


class DomainDispatch:
    """What the live custom domains may transform: the one state behind :func:`may_transform`
    ([exec.domain.default], [exec.snd.transform]).

    Fields, read on hot paths as ``DISPATCH.on and (DISPATCH.all or tag in DISPATCH.tags)``
    (:func:`may_transform`, inlined where a call costs too much):

    * ``on``: some custom domain class is alive;
    * ``all``: one of them may transform senders of any tag (``customized_tags`` is ``None``);
    * ``tags``: the tags the others declared (``customized_tags``);
    * ``apply``: one of them overrides ``apply_sender`` (``sync_wait`` dispatch, [exec.sync.wait]);
    * ``then_hook``: ``hook(sndr, rcvr)``, asked by every ``then``/``upon_*`` chain at
      ``connect`` once set (a remote parallel scheduler exists; see ``_parallel``): the
      sender to connect instead (the domain's transform of the chain, [exec.snd.transform]),
      or ``None``. Chains that :func:`cannot_run_remotely` skip it.
    * ``hit``: for each group of tags a module watches (:meth:`watch`), whether some live
      domain may transform a sender of one of them (``then`` reads ``hit[i]`` instead of
      intersecting its tags with ``tags`` at every ``connect``);
    * ``pinned``: tests that set the fields themselves pin them (and call :meth:`derive`), so
      that a domain class collected meanwhile does not recompute them.

    Registrations are weak references to the domain classes: when a class is collected its
    registration goes and the fields are recomputed from the classes still alive.
    """

    __slots__ = (
        "_groups",
        "_lock",
        "_refs",
        "all",
        "apply",
        "hit",
        "on",
        "pinned",
        "tags",
        "then_hook",
    )

    def __init__(self) -> None:
        self.on = False
        self.all = False
        self.tags: frozenset[object] = frozenset()
        self.apply = False
        self.then_hook: ThenHook | None = None
        self.pinned = False
        self.hit: list[bool] = []
        self._groups: list[frozenset[object]] = []
        self._refs: dict[int, weakref.ref[type]] = {}
        # Reentrant: a class collected (its weakref callback) while this thread registers.
        self._lock = threading.RLock()

    def register(self, cls: type) -> None:
        """Count the custom domain class ``cls`` (its first instance is being made)."""
        ref = self._refs.get(id(cls))
        if ref is not None and ref() is cls:
            return
        with self._lock:
            self._refs[id(cls)] = weakref.ref(cls, self._gone)
            self._recompute()

    def watch(self, tags: Iterable[object]) -> int:
        """Watch a group of tags: ``hit[i]`` (``i`` returned) is then true while some live
        domain may transform a sender of one of them."""
        with self._lock:
            self._groups.append(frozenset(tags))
            self.derive()
            return len(self._groups) - 1

    def derive(self) -> None:
        """Recompute ``hit`` from ``all`` and ``tags``."""
        every, tags = self.all, self.tags
        self.hit = [every or not g.isdisjoint(tags) for g in self._groups]

    def classes(self) -> list[type]:
        """The registered domain classes still alive."""
        return [c for c in (r() for r in list(self._refs.values())) if c is not None]

    def restore(self, classes: Iterable[type]) -> None:
        """Forget every registration but those of ``classes`` (tests: undo what a test made)."""
        with self._lock:
            keep = {id(c) for c in classes}
            for k in [k for k in self._refs if k not in keep]:
                del self._refs[k]
            self._recompute()

    def refresh(self) -> None:
        """Recompute the fields from the live registrations (tests: after unpinning)."""
        with self._lock:
            self._recompute()

    def _gone(self, ref: weakref.ref[type]) -> None:
        # weakref callback: a registered class was collected (any thread, any time).
        with self._lock:
            for k, r in list(self._refs.items()):
                if r is ref:
                    del self._refs[k]
            self._recompute()

    def _recompute(self) -> None:
        if self.pinned:
            return
        every = apply = False
        tags: set[object] = set()
        classes = self.classes()
        for cls in classes:
            declared = getattr(cls, "customized_tags", None)
            if declared is None:
                every = True
            else:
                tags.update(declared)
            if getattr(cls, "apply_sender", None) is not default_domain.apply_sender:
                apply = True
        # Readers do not lock: write what widens the slow path before ``on``, and turn ``on``
        # off first, so that a reader never skips a live domain.
        if not classes:
            self.on = False
        self.tags = frozenset(tags)
        self.all = every
        self.apply = apply
        self.derive()
        if classes:
            self.on = True


#: The process's domain dispatch state.
DISPATCH = DomainDispatch()

#: Receiver classes whose environment never answers ``get_domain``, declared by the modules
#: that own them (``sync_wait``'s receiver, ``spawn``'s state): a then-chain connected to one
#: of them whose predecessor has no completion scheduler cannot run on a remote scheduler,
#: and ``then`` skips :data:`DomainDispatch.then_hook` for it without asking the environment.
NO_DOMAIN_ENV: set[type] = set()


def declare_no_domain_env(cls: type) -> None:
    """Declare that the environment of ``cls``'s instances never answers ``get_domain``."""
    NO_DOMAIN_ENV.add(cls)


class default_domain:
    """The default domain ([exec.domain.default]).

    * ``transform_sender(sndr, env=None)``: ``tag.transform_sender(sndr, env)`` if the sender's
      tag defines it, else ``sndr``.
    * ``transform_env(sndr, env)``: ``tag.transform_env(sndr, env)`` if defined, else
      ``FWD-ENV(env)``.
    * ``apply_sender(tag, sndr, *args)``: ``tag.apply_sender(sndr, *args)``.

    Derive a custom domain from this class; creating the first instance of a subclass turns
    on the domain dispatch in ``connect`` and in the adaptors for the tags it declares (until
    then ``connect`` skips the transform, which can only return the sender unchanged). The
    dispatch stays on while the subclass exists: a subclass that is collected stops costing.
    """

    #: The algorithm tags (``sx.bulk_chunked``, ...) whose senders this domain may transform.
    #: ``None``, the default, means any: ``connect`` then asks the domain about every sender.
    #: A domain that customises a few algorithms should list them, so that connecting other
    #: senders costs nothing extra.
    customized_tags: ClassVar[frozenset[object] | None] = None

    def __new__(cls: type[_D], *args: object, **kwargs: object) -> _D:
        if cls is not default_domain:
            DISPATCH.register(cls)
        return super().__new__(cls)

    def transform_sender(self, sndr: object, env: object = None) -> Any:
        tag = getattr(sndr, "tag", None)
        f = getattr(tag, "transform_sender", None)
        if f is None:
            return sndr
        return f(sndr, env)

    def transform_env(self, sndr: object, env: object) -> Any:
        tag = getattr(sndr, "tag", None)
        f = getattr(tag, "transform_env", None)
        if f is None:
            return fwd_env(env)
        return f(sndr, env)

    def apply_sender(self, tag: object, sndr: object, *args: object) -> Any:
        f = getattr(tag, "apply_sender", None)
        if f is None:
            raise TypeError(f"{tag!r} cannot be applied to a sender (it has no apply_sender)")
        return f(sndr, *args)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self)

    def __hash__(self) -> int:
        return hash(type(self))

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


_DEFAULT = default_domain()


def completion_domain(sndr: object, default: object = _DEFAULT) -> object:
    """The common domain of ``sndr``'s completion schedulers ([exec.snd.expos])."""
    attrs = get_env(sndr)
    if attrs is EMPTY_ENV:
        return default
    found: object = _MISSING
    for tag in (set_value_t, set_error_t, set_stopped_t):
        sch = query_or(attrs, get_completion_scheduler[tag], _MISSING)
        if sch is _MISSING:
            continue
        d = query_or(sch, get_domain, _DEFAULT)
        if found is _MISSING:
            found = d
        elif found != d:
            raise TypeError(
                f"the completion schedulers of {type(sndr).__name__} have different domains "
                f"({found!r} and {d!r}) ([exec.snd.expos] completion-domain); give them schedulers "
                "of one domain"
            )
    return default if found is _MISSING else found


def get_domain_early(sndr: object) -> object:
    """``get-domain-early(sndr)`` ([exec.snd.expos])."""
    d = query_or(get_env(sndr), get_domain, _MISSING)
    if d is not _MISSING:
        return d
    return completion_domain(sndr)


def get_domain_late(sndr: object, env: object) -> object:
    """``get-domain-late(sndr, env)`` ([exec.snd.expos])."""
    late = getattr(sndr, "_sx_late_domain", None)
    if late is not None:
        return late()
    d = query_or(get_env(sndr), get_domain, _MISSING)
    if d is not _MISSING:
        return d
    d = completion_domain(sndr, _MISSING)
    if d is not _MISSING:
        return d
    d = query_or(env, get_domain, _MISSING)
    if d is not _MISSING:
        return d
    sch = query_or(env, get_scheduler, _MISSING)
    if sch is not _MISSING:
        d = query_or(sch, get_domain, _MISSING)
        if d is not _MISSING:
            return d
    return _DEFAULT


def transform_sender(dom: object, sndr: object, env: object = None) -> Any:
    """``transform_sender(dom, sndr, env)`` ([exec.snd.transform]).

    Uses ``dom.transform_sender`` if present, else the default domain's, and repeats while the
    result is a different sender whose tag differs, until a fixed point.
    """
    for _ in range(1000):
        f = getattr(dom, "transform_sender", None)
        new = f(sndr, env) if f is not None else _DEFAULT.transform_sender(sndr, env)
        if new is sndr:
            return new
        same_tag = getattr(new, "tag", None) is getattr(sndr, "tag", None)
        if same_tag and type(new) is type(sndr):
            return new
        sndr = new
    raise RuntimeError("transform_sender did not reach a fixed point after 1000 transforms")


def transform_env(dom: object, sndr: object, env: object) -> Any:
    """``transform_env(dom, sndr, env)`` ([exec.snd.transform.env])."""
    f = getattr(dom, "transform_env", None)
    if f is None:
        return _DEFAULT.transform_env(sndr, env)
    return f(sndr, env)


def apply_sender(dom: object, tag: object, sndr: object, *args: object) -> Any:
    """``apply_sender(dom, tag, sndr, *args)`` ([exec.snd.apply])."""
    f = getattr(dom, "apply_sender", None)
    if f is None:
        return _DEFAULT.apply_sender(tag, sndr, *args)
    return f(tag, sndr, *args)


def may_transform(tag: object) -> bool:
    """True if some live custom domain may transform senders whose tag is ``tag``
    (:data:`DISPATCH`)."""
    d = DISPATCH
    return d.on and (d.all or tag in d.tags)


def apply_customized() -> bool:
    """True if some live custom domain overrides ``apply_sender`` (``sync_wait`` dispatch,
    [exec.sync.wait])."""
    return DISPATCH.apply


def domains_active() -> bool:
    """True while a custom domain class is alive (the transform machinery is then on)."""
    return DISPATCH.on
