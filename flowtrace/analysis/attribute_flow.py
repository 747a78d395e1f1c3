"""What a row's setters write, joined with what its capturing forward reads.

The chain links a setter to the holder it writes and the holder to its capture site, but the
site's membership test reads one attribute (``i in self.layers_to_capture``) or one per-layer
mark (``getattr(layer, "_is_layer_to_capture", False)``), and the setter may write another: a
list on the model while the forward decides by marks nothing sets, marks while the forward reads
a list nothing fills, or an inherited setter whose list a sibling's model reads but this model
does not. Then the forward never records anything, whatever ids the draft sends: the row
captures nothing, it does not capture. Decided only where both sides are known (a site that
names what it reads, setters whose writes were read); anything else stays with the chain.
"""

from __future__ import annotations

import ast
import textwrap
from functools import lru_cache

from typing import TYPE_CHECKING

from flowtrace.model import facts as F
from flowtrace.model.links import UnreadLink

if TYPE_CHECKING:
    from flowtrace.analysis.class_lookup import ClassLookup


@lru_cache(maxsize=4096)
def _assigned(source: str) -> tuple[str, ...]:
    """Attribute names a method assigns anywhere (``x.<name> = v``, ``setattr(x, "<name>", v)``):
    a mark set on each layer however the loop spells it (``layer.m = i in ids``)."""
    try:
        tree = ast.parse(textwrap.dedent(source))
    except (SyntaxError, ValueError, RecursionError):
        return ()
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            out += [t.attr for t in targets if isinstance(t, ast.Attribute)]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "setattr"
            and len(node.args) >= 2
        ):
            name = node.args[1]
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                out.append(name.value)
    return tuple(dict.fromkeys(out))


def _written(setters: tuple[F.SetterFact, ...]) -> tuple[F.SetterFact | None, list[str], set[str]]:
    """(the last setter that writes ids, the capture attributes and marks written, every attribute
    name any setter of the chain assigns)."""
    writer, names, assigned = None, [], set()
    for setter in setters:
        own = [w.rsplit(".", 1)[-1] for w in setter.writes] + [m.mark for m in setter.marks]
        assigned |= set(own) | set(_assigned(setter.source))
        if own:
            writer = setter
            names += [n for n in own if n not in names]
    return writer, names, assigned


def unread(
    setters: tuple[F.SetterFact, ...], sites: tuple[F.CaptureSiteFact, ...], site: F.CaptureSiteFact
) -> UnreadLink | None:
    """The mismatch of :mod:`this module <flowtrace.analysis.attribute_flow>` for a chain's
    setters and the capture sites of its forward (``site``: the chain's own), or None; the
    chain's link 8 holds it (``ServingLink.unread``)."""
    reads = sorted({s.attribute for s in sites if s.attribute})
    if not reads or any(s.attribute is None for s in sites):
        return None  # a site that does not name what it reads (a hook, a helper): not decided here
    writer, written, assigned = _written(setters)
    if writer is None or set(reads) & assigned:
        return None
    return UnreadLink(
        writer.class_qualname,
        writer.method,
        writer.location,
        tuple(written),
        tuple(reads),
        site.function,
        site.location,
    )


def nothing_recorded(
    project: ClassLookup, qualname: str, holder: str | None
) -> tuple[F.Outcome, str, F.Location | None]:
    """What the engine does when the loop records nothing: the holder's forward returns its
    hidden states alone (a one-value return beside the ``(hidden, aux)`` one) and the wrapper
    unpacks two values under its capture flag: a ValueError there; else nothing is captured."""
    forward = [r for r in project.return_shapes.get(holder or "", []) if r.function.endswith(".forward")]
    alone = next((r for r in forward if r.shape == F.ReturnShape.SINGLE), None)
    unpack = next(
        (
            u
            for u in project.output_uses.get(qualname, [])
            if u.kind == F.OutputUseKind.UNPACK and u.arity == 2 and u.flag_on and u.via is None
        ),
        None,
    )
    if alone is not None and unpack is not None and any(r.shape == F.ReturnShape.TUPLE for r in forward):
        return (
            F.Outcome.RAISES,
            (
                f"nothing is recorded, so {alone.function} returns `{alone.text[len('return '):]}` alone"
                f" ({alone.location}) and {unpack.function} unpacks two values from it (`{unpack.text}`): ValueError"
            ),
            unpack.location,
        )
    return F.Outcome.CAPTURES_NOTHING, "nothing is recorded: the loop never meets a marked layer", None


__all__ = ["nothing_recorded", "unread"]
