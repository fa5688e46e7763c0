"""Domains and sender transforms ([exec.domain.default], [exec.snd.transform],
[exec.snd.transform.env], [exec.snd.apply]).

A *domain* customises algorithms: at ``connect`` (``_connect``) the library asks the sender's
late domain to ``transform_sender`` it ([exec.connect], [exec.snd.expos]), which is how
``parallel_scheduler`` replaces ``bulk_chunked`` with its own implementation
([exec.par.scheduler]). Custom domains derive from :class:`default_domain` and override what they
customise; everything else falls back to the default. The transform machinery is switched on when
the first custom domain is created (the module flags ``_domains_on``, ``_customize_all``,
``_customized_tags``, ``_apply_customized``), so programs that use only the default domain pay
nothing for it at ``connect``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ._env import EMPTY_ENV, fwd_env, get_env
from ._queries import _MISSING, get_completion_scheduler, get_domain, get_scheduler, query_or
from ._tags import set_error_t, set_stopped_t, set_value_t

__all__ = ["apply_sender", "default_domain", "transform_env", "transform_sender"]


_domains_on = False  # some custom domain exists
_customize_all = False  # ... and one of them may transform senders of any tag
_customized_tags: set[Any] = set()  # the tags the others declared (``customized_tags``)
_apply_customized = False  # some custom domain overrides apply_sender
_registered: set[type] = set()
#: ``hook(sndr, rcvr)``, asked by every ``then``/``upon_*`` sender at ``connect`` once set:
#: the sender to connect instead (a domain's transform of the whole chain of stages), or
#: ``None``. Set when the domain of a parallel scheduler on a remote backend is made (it
#: transforms then-chains that run on that scheduler, [exec.snd.transform]); a hook finds
#: that domain with two queries, where offering every then to ``transform_sender`` through
#: ``get_domain_late`` would cost every then in the program a walk of the environments.
_then_hook: Any = None


def _register(cls: type) -> None:
    global _domains_on, _customize_all, _apply_customized
    if cls in _registered:
        return
    _registered.add(cls)
    tags = getattr(cls, "customized_tags", None)
    if tags is None:
        _customize_all = True
    else:
        _customized_tags.update(tags)
    if getattr(cls, "apply_sender", None) is not default_domain.apply_sender:
        _apply_customized = True
    _domains_on = True


class default_domain:
    """The default domain ([exec.domain.default]).

    * ``transform_sender(sndr, env=None)``: ``tag.transform_sender(sndr, env)`` if the sender's
      tag defines it, else ``sndr``.
    * ``transform_env(sndr, env)``: ``tag.transform_env(sndr, env)`` if defined, else
      ``FWD-ENV(env)``.
    * ``apply_sender(tag, sndr, *args)``: ``tag.apply_sender(sndr, *args)``.

    Derive a custom domain from this class; creating the first instance of a subclass turns
    on the domain dispatch in ``connect`` and in the adaptors (until then ``connect`` skips
    the transform, which can only return the sender unchanged).
    """

    #: The algorithm tags (``sx.bulk_chunked``, ...) whose senders this domain may transform.
    #: ``None``, the default, means any: ``connect`` then asks the domain about every sender.
    #: A domain that customises a few algorithms should list them, so that connecting other
    #: senders costs nothing extra.
    customized_tags: ClassVar[frozenset[Any] | None] = None

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls is not default_domain:
            _register(cls)
        return super().__new__(cls)

    def transform_sender(self, sndr: Any, env: Any = None) -> Any:
        tag = getattr(sndr, "tag", None)
        f = getattr(tag, "transform_sender", None)
        if f is None:
            return sndr
        return f(sndr, env)

    def transform_env(self, sndr: Any, env: Any) -> Any:
        tag = getattr(sndr, "tag", None)
        f = getattr(tag, "transform_env", None)
        if f is None:
            return fwd_env(env)
        return f(sndr, env)

    def apply_sender(self, tag: Any, sndr: Any, *args: Any) -> Any:
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


def completion_domain(sndr: Any, default: Any = _DEFAULT) -> Any:
    """The common domain of ``sndr``'s completion schedulers ([exec.snd.expos])."""
    attrs = get_env(sndr)
    if attrs is EMPTY_ENV:
        return default
    found: Any = _MISSING
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


def get_domain_early(sndr: Any) -> Any:
    """``get-domain-early(sndr)`` ([exec.snd.expos])."""
    d = query_or(get_env(sndr), get_domain, _MISSING)
    if d is not _MISSING:
        return d
    return completion_domain(sndr)


def get_domain_late(sndr: Any, env: Any) -> Any:
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


def transform_sender(dom: Any, sndr: Any, env: Any = None) -> Any:
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


def transform_env(dom: Any, sndr: Any, env: Any) -> Any:
    """``transform_env(dom, sndr, env)`` ([exec.snd.transform.env])."""
    f = getattr(dom, "transform_env", None)
    if f is None:
        return _DEFAULT.transform_env(sndr, env)
    return f(sndr, env)


def apply_sender(dom: Any, tag: Any, sndr: Any, *args: Any) -> Any:
    """``apply_sender(dom, tag, sndr, *args)`` ([exec.snd.apply])."""
    f = getattr(dom, "apply_sender", None)
    if f is None:
        return _DEFAULT.apply_sender(tag, sndr, *args)
    return f(tag, sndr, *args)


def may_transform(tag: Any) -> bool:
    """True if some custom domain may transform senders whose tag is ``tag``."""
    return _customize_all or (_domains_on and tag in _customized_tags)


def apply_customized() -> bool:
    """True if some custom domain overrides ``apply_sender`` (``sync_wait`` dispatch,
    [exec.sync.wait])."""
    return _apply_customized


def domains_active() -> bool:
    """True once a custom domain class exists (the transform machinery is then on)."""
    return _domains_on
