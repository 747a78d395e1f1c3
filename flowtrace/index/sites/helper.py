"""A call of a capture helper method with a label that is an offset of the loop index.

``self.<helper>(aux, i + 1, h, r)``: a helper named by the profile (which also fixes the
label's position), or any ``self.<m>(...)`` call handing over a collector and exactly one
offset of the loop index; the latter's body is checked at resolution against the holder's
methods (:class:`flowtrace.model.facts.HelperDefFact`: the helper may live on a mixin). A
method of the class itself is read here: when it tests the label it is handed against the
ids and records the stream, its call is a site whatever the collector is (built by a call,
handed in, or kept on ``self``), and its own parameters say where the label is.
"""

from __future__ import annotations

import ast

from flowtrace.index.sites.base import Found, SiteShape
from flowtrace.index.sites.context import LoopContext, depends_on_residual, is_local, is_none, offset_of, side_point
from flowtrace.index.syntax import arguments, last_name, positional
from flowtrace.model import facts as F


class HelperShape(SiteShape):
    name = "helper"
    mechanisms = (F.Mechanism.HELPER,)
    rank = 50  # the same rank as append: both read the loop's calls, in the calls' order
    summary = "a helper method handed the collector and a label that is an offset of the loop index"
    VALID = (
        (
            """
            def forward(self, h, r):
                aux = []
                for i, layer in enumerate(self.layers):
                    h, r = layer(h, r)
                    self._keep(aux, i + 1, h, r)
                return h, aux
            """,
            ((F.Mechanism.HELPER, F.Point.INPUT),),  # recorded after layer i, labelled i + 1: index k is boundary k
        ),
        (
            """
            def _stash(self, into, label, h):
                if label in self.layers_to_capture:
                    into.append(h)

            def forward(self, h):
                aux = list()
                for i, layer in enumerate(self.layers):
                    self._stash(aux, i, h)
                    h = layer(h)
                return h, aux
            """,
            ((F.Mechanism.HELPER, F.Point.INPUT),),  # a method of the class, whatever the collector
        ),
    )
    INVALID = (
        """
        def _stash(self, into, label, h):
            into.append(h)

        def forward(self, h):
            aux = list()
            for i, layer in enumerate(self.layers):
                self._stash(aux, i, h)
                h = layer(h)
            return h, aux
        """,
        """
        def forward(self, h, r):
            aux = []
            for i, layer in enumerate(self.layers):
                h, r = layer(h, r)
                self._keep(aux, i + 1, i, h, r)
            return h, aux
        """,
    )

    def find(self, ctx: LoopContext) -> list[Found]:
        found: list[Found] = []
        for anchor, call, _, after in ctx.side_calls:
            fact = site(ctx, call, after)
            if fact is not None:
                found.append(Found(anchor, fact))
        return found


def site(ctx: LoopContext, call: ast.Call, after: bool) -> F.CaptureSiteFact | None:
    """The helper site of one call, if it is one."""
    method = last_name(call.func)
    helper = next((h for h in ctx.forward.conv.helpers if h.name == method), None)
    label_arg, structural = (helper.label_arg, None) if helper is not None else (structural_label(ctx, call), method)
    args = arguments(call)
    container_arg = 0
    if label_arg is None and helper is None:
        label_arg, container_arg = own_helper(ctx, call)
    if label_arg is None or not isinstance(call.func, ast.Attribute) or len(args) <= label_arg:
        return None
    label = offset_of(args[label_arg].value, ctx.index)
    stored = [a.value for a in args[label_arg + 1 :][:2] if not is_none(a.value)]
    return ctx.fact(
        call,
        F.Mechanism.HELPER,
        side_point(after, label),
        None,
        ctx.file.code(args[container_arg].value) if 0 <= container_arg < len(args) else None,
        f"{method} labels the stream {'after' if after else 'before'} layer {ctx.index} as"
        f" {ctx.file.code(args[label_arg].value)}",
        reach=ctx.reach(after),  # recorded before layer idx: boundaries from 0; after it: up to L
        captured=" + ".join(ctx.file.code(a) for a in stored),
        uses_residual=any(depends_on_residual(a, ctx.bound) for a in stored),
        label=label,
        helper_method=structural,
    )


def own_helper(ctx: LoopContext, call: ast.Call) -> tuple[int | None, int]:
    """(label position, collector position) for ``self.<m>(..., i + k, ...)`` where ``m`` is a
    method of this class that tests the label it is handed against the ids and records the
    stream, whatever collector it records into: a list built by a call (``aux = list()``), one
    handed in as a parameter, or one kept on ``self`` (position -1). The label must be an
    offset of the loop index."""
    helper = ctx.forward.local_helper_def(call)
    args = arguments(call)
    if helper is None or helper.label_arg >= len(args) or offset_of(args[helper.label_arg].value, ctx.index) is None:
        return None, 0
    return helper.label_arg, helper.container_arg


def structural_label(ctx: LoopContext, call: ast.Call) -> int | None:
    """For ``self.<m>(aux, i + k, ...)`` not named by the profile: the position of the label
    (an offset of the loop index) when a collector is also handed over."""
    func = call.func
    if not (isinstance(func, ast.Attribute) and is_local(func.value, "self")):
        return None
    args = [a.value for a in positional(call)]
    if not any(isinstance(a, ast.Name) and a.id in ctx.forward.containers for a in args):
        return None
    labels = [n for n, a in enumerate(args) if offset_of(a, ctx.index) is not None]
    return labels[0] if len(labels) == 1 else None


SHAPE = HelperShape()
