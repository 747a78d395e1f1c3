"""Link 6 of the capture chain: do the captured states reach the runner?

The holder's forward may return before handing them back; the wrapper the runner calls may
hand them on only under a flag its setter never sets, keep only the first element of the
inner output, or unpack ``(hidden, aux)`` from an inner forward that returns one value (an
override that dropped the capture: Python raises at the unpacking). Each is decided from the
return-path facts of :mod:`flowtrace.index.returns`, the early returns of
:mod:`flowtrace.index.stream_facts` and the setter chain (which flags it sets, on which
object); what cannot be decided is left as "returned" with ``decided=False``, never guessed.
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Sequence

from flowtrace.index.returns import CONSUME, DROP, SINGLE, UNPACK, flag_test
from flowtrace.model import facts as F
from flowtrace.model.links import ReturnLink

if TYPE_CHECKING:
    from flowtrace.analysis.holders import Holders

R = F.ReturnKind


@dataclass(frozen=True, slots=True)
class _Chain:
    """The setters that run, each with the class of the object it runs on."""

    setters: tuple[F.SetterFact, ...]
    targets: tuple[str, ...]


@lru_cache(maxsize=4096)
def _assigned(source: str) -> tuple[tuple[str, object], ...]:
    """(target text, constant or None) of every ``self.<...> = value`` a setter makes."""
    try:
        tree = ast.parse(textwrap.dedent(source))
    except (SyntaxError, ValueError, RecursionError):
        return ()
    out: list[tuple[str, object]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            value = node.value.value if isinstance(node.value, ast.Constant) else None
            out.extend((ast.unparse(t), value) for t in node.targets if ast.unparse(t).startswith("self."))
    return tuple(out)


def _short(qualname: str) -> str:
    return qualname.rsplit(".", 1)[-1]


def _forward_owner(holders: Holders, qualname: str | None) -> str | None:
    """The class whose ``forward`` an instance of ``qualname`` runs."""
    for q in holders.lookup.mro(qualname) if qualname else ():
        cls = holders.lookup.classes.get(q)
        if cls is not None and "forward" in cls.methods:
            return q
    return None


def _flag_state(holders: Holders, owner: str, flag: str, chain: _Chain) -> tuple[bool | None, bool, F.Location | None]:
    """(value, never set, where its value comes from) of ``self.<flag>`` on an ``owner``
    object: set by a setter of the chain (on that object, or as ``self.<attr>.<flag>`` on the
    object built as that attribute), else the ``__init__`` value when nothing else assigns it."""
    mro = holders.lookup.mro(owner)
    if any(flag in getattr(holders.lookup.classes.get(q), "methods", ()) for q in mro):
        return None, False, None  # a property or method: decided at run time
    for setter, target in zip(chain.setters, chain.targets):
        for text, value in _assigned(setter.source):
            parts = text.split(".")
            if parts[-1] != flag or len(parts) not in (2, 3):
                continue
            on = target if len(parts) == 2 else holders.attribute_class(target, parts[1])
            if on == owner:
                return value is not False, False, setter.location
    default = next((d for q in mro for d in holders.lookup.flag_defaults.get(q, ()) if d.attribute == flag), None)
    if default is None:
        return None, False, None
    setters = {s.method for s in chain.setters}
    if set(default.written_in) - setters:
        return None, False, default.location  # another method turns it on or off
    return default.value, True, default.location


def _leads_to(holders: Holders, inner: str | None, holder: str | None) -> bool:
    """Whether the object built as a wrapper's attribute is the holder or builds it (two levels)."""
    if inner is None or holder is None:
        return False
    if inner == holder:
        return True
    first = holders.constructed(inner)
    held = list(holders.instance_attributes(inner).values())  # what a subclass's factory builds instead
    return holder in first or holder in held or any(holder in holders.constructed(c) for c in first)


def _effective(uses: Sequence[F.OutputUseFact], value: bool | None) -> F.OutputUseFact | None:
    """The first use a forward reaches with the flag at ``value`` (None: unknown)."""
    for use in uses:
        if use.flag is None:
            return use
        if value is None:
            return None
        if use.flag_on == value:
            return use
    return None


def _bare_inner(holders: Holders, inner: str | None) -> tuple[str, F.ReturnShapeFact] | None:
    """(forward owner, a return) when the inner object's forward returns one value on every path."""
    owner = _forward_owner(holders, inner)
    shapes = holders.lookup.return_shapes.get(owner, []) if owner else []
    shapes = [s for s in shapes if s.function.endswith(".forward")]
    if owner and shapes and all(s.shape == SINGLE for s in shapes):
        return owner, shapes[0]
    return None


def _overrides_capture(holders: Holders, owner: str) -> str | None:
    """A base class of ``owner`` whose own forward captures (``owner`` overrides it)."""
    for q in holders.lookup.mro(owner)[1:]:
        if any(s.function.endswith(".forward") for s in holders.lookup.sites.get(q, [])):
            return q
    return None


def _early_return(
    holders: Holders, holder: str | None, site: F.CaptureSiteFact | None, chain: _Chain
) -> ReturnLink | None:
    """A return ahead of the one that hands the states back, in the capturing function."""
    if holder is None or site is None:
        return None
    facts = [f for f in holders.lookup.early_returns.get(site.class_qualname, []) if f.function == site.function]
    for fact in facts:
        try:
            test = ast.parse(fact.detail, mode="eval").body
        except SyntaxError:
            test = None
        flag = flag_test(test) if test is not None else None
        value, _, evidence = _flag_state(holders, holder, flag[0], chain) if flag else (None, False, None)
        if value is not None and flag is not None and value != flag[1]:
            continue  # the test never holds: the return is never taken
        decided = value is not None
        why = f" (self.{flag[0]} is {value}, {evidence})" if decided and flag else ""
        reason = f"{site.function} returns without the captured states at {fact.location} when `{fact.detail}`{why}"
        return ReturnLink(
            R.EARLY_RETURN,
            fact.location,
            reason,
            decided=decided,
            evidence=(site.location,) + ((evidence,) if evidence else ()),
        )
    return None


def _unpacked(
    holders: Holders, qualname: str, use: F.OutputUseFact, inner: str | None, early: ReturnLink | None
) -> ReturnLink | None:
    """The wrapper unpacks (hidden, aux): Python raises when the inner forward returns one value."""
    bare = _bare_inner(holders, inner)
    if bare is not None:
        owner, shape = bare
        base = _overrides_capture(holders, owner)
        kind = R.OVERRIDDEN if base else R.BARE_OUTPUT
        over = f" (it overrides {_short(base)}.forward, which captures)" if base else ""
        reason = (
            f"{use.function} unpacks `{use.text}` ({use.location}), but {_short(owner)}.forward{over} returns one value"
            f" on every path (`{shape.text}`, {shape.location}): ValueError at the unpacking"
        )
        return ReturnLink(kind, use.location, reason, raises=True, evidence=(shape.location,))
    if early is not None and early.decided:
        reason = (
            f"{use.function} unpacks `{use.text}` ({use.location}), but {early.reason}: ValueError at the unpacking"
        )
        return ReturnLink(
            R.EARLY_RETURN, use.location, reason, raises=True, evidence=(early.location,) if early.location else ()
        )
    return None


def return_link(
    holders: Holders,
    qualname: str,
    setters: Sequence[F.SetterFact],
    targets: Sequence[str],
    holder: str | None,
    site: F.CaptureSiteFact | None,
) -> ReturnLink | None:
    """Link 6 for the row ``qualname``: how its forward hands the states to the runner."""
    chain = _Chain(tuple(setters), tuple(targets))
    early = _early_return(holders, holder, site, chain)
    wrapper = _forward_owner(holders, qualname)
    # a routed output: FT020's
    uses = [u for u in holders.lookup.output_uses.get(wrapper, []) if u.via is None] if wrapper else []
    attribute = next(
        (u.attribute for u in uses if _leads_to(holders, holders.attribute_class(qualname, u.attribute), holder)), None
    )
    if attribute is None:
        return early  # no call of the object that holds the capture (a logits processor, a pooler...)
    uses = [u for u in uses if u.attribute == attribute]
    flags = list(dict.fromkeys(u.flag for u in uses if u.flag))
    value, never, flag_at = _flag_state(holders, qualname, flags[0], chain) if len(flags) == 1 else (None, False, None)
    use = _effective(uses, value)
    if use is None:
        return early or ReturnLink(R.RETURNED, uses[0].location, None, decided=False)
    inner = holders.attribute_class(qualname, attribute)
    if use.kind == DROP:
        if never and use.flag:
            reason = (
                f"no setter of the chain sets self.{use.flag} (it stays {value}, {flag_at}); with it off,"
                f" {use.function} returns `{use.text.removeprefix('return ')}` ({use.location}): the captured states"
                " are dropped"
            )
            return ReturnLink(
                R.FLAG_NEVER_SET, use.location, reason, evidence=tuple(x for x in (flag_at,) if x), flag=use.flag
            )
        reason = (
            f"{use.function} keeps only the first element of what self.{attribute}(...) returns: "
            f"`{use.text.removeprefix('return ')}` ({use.location}); the captured states are dropped"
        )
        return ReturnLink(R.NOT_UNPACKED, use.location, reason)
    if use.kind == CONSUME and site is None:
        return early  # nothing is recorded to lose: the missing site is the root cause
    if use.kind == CONSUME:  # an overriding head forward never hands the states to the runner
        reason = (
            f"{use.function} hands what self.{attribute}(...) returns on as one value: "
            f"`{use.text.removeprefix('return ')}` ({use.location}); the captured states never reach the runner"
        )
        return ReturnLink(R.NOT_UNPACKED, use.location, reason)
    if use.kind == UNPACK:
        raised = _unpacked(holders, qualname, use, inner, early)
        if raised is not None:
            return raised
    return early or ReturnLink(R.RETURNED, use.location, None)
