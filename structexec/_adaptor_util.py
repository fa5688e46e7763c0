"""Small pieces shared by the sender adaptors (private).

* :class:`UnaryAdaptor`: the base of one-argument adaptor objects (``into_variant``,
  ``stopped_as_optional``, ``unstoppable``). Such an object is itself a pipeable sender
  adaptor closure ([exec.adapt.obj]: "if a pipeable sender adaptor object accepts only one
  argument, then it is a pipeable sender adaptor closure object"), so ``s | into_variant``,
  ``s | into_variant()`` and ``into_variant | then(f)`` all work (REQUIREMENTS 7.5-7.7).
* :func:`early`: the construction-time ``transform_sender(get-domain-early(...), ...)`` that
  [exec.adapt] specifies for every adaptor (REQUIREMENTS 9.7); free unless a custom domain is
  involved.
* argument checks that raise ``TypeError`` naming the argument (DESIGN.md 2.3).
"""

from __future__ import annotations

from typing import Any

from ._completion_signatures import completion_signatures, get_completion_signatures
from ._domain import default_domain, domains_active, get_domain_early, transform_sender
from ._env import get_domain, query_or
from ._protocol import Algorithm, Closure, Sender, is_scheduler, is_sender, set_value_t

_DEFAULT = default_domain()


def sched_domain(sch: Any) -> Any:
    """``query-with-default(get_domain, sch, default_domain())`` (REQUIREMENTS 9.10)."""
    return query_or(sch, get_domain, _DEFAULT)


def early(dom: Any, sndr: Any) -> Any:
    """``transform_sender(dom, sndr)`` without an environment, at construction (9.4, 9.7).

    The default domain's env-less transform returns the sender unchanged for every adaptor of
    this library (their lowerings need an environment, as in C++), so it is skipped; only a
    custom domain gets to see (and possibly replace) the freshly built sender.
    """
    if type(dom) is default_domain or not domains_active():
        return sndr
    return transform_sender(dom, sndr, None)


def early_child(child: Any, sndr: Any) -> Any:
    """``early(get-domain-early(child), sndr)``: the rule for single-child adaptors."""
    if not domains_active():
        return sndr
    return early(get_domain_early(child), sndr)


def check_sender(name: str, arg: str, x: Any) -> None:
    if not is_sender(x):
        what = "a sender adaptor closure" if isinstance(x, Closure) else type(x).__name__
        raise TypeError(f"{name}(): {arg} must be a sender, got {what}")


def check_scheduler(name: str, arg: str, x: Any) -> None:
    if not is_scheduler(x):
        raise TypeError(
            f"{name}(): {arg} must be a scheduler (an object with a schedule() method), "
            f"got {type(x).__name__}"
        )


def sigs(sndr: Any, env: Any) -> completion_signatures | None:
    """``get_completion_signatures(sndr, env)``; ``None`` when unknown."""
    return get_completion_signatures(sndr, env)


def value_sigs(cs: completion_signatures) -> list[set_value_t]:
    return [s for s in cs if type(s) is set_value_t]


class UnaryAdaptor(Algorithm, Closure[Any]):
    """A one-argument adaptor object that is also its own closure (see module docstring).

    Subclasses implement ``_apply(sndr)``. ``adaptor(sndr)`` builds the sender,
    ``adaptor()`` returns the adaptor itself (a closure), ``sndr | adaptor`` pipes.
    """

    __slots__ = ()
    _name = "adaptor"

    def __init__(self) -> None:
        Closure.__init__(self, self._apply)

    def _apply(self, sndr: Any) -> Sender[Any]:
        raise NotImplementedError

    def __call__(self, *args: Any) -> Any:
        if not args:
            return self
        if len(args) != 1:
            raise TypeError(f"{self._name}() takes one sender, got {len(args)} arguments")
        check_sender(self._name, "the argument", args[0])
        return self._apply(args[0])

    def __ror__(self, sndr: Any) -> Any:
        if isinstance(sndr, Closure):
            # ``c | adaptor``: Python tries this reflected method first because the adaptor's
            # class derives from Closure; compose as Closure.__or__ would.
            first = sndr
            return Closure(lambda s: self(first(s)))
        return self(sndr)
