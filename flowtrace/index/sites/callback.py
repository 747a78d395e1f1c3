"""A callback or collector handed to the layer call under a membership test.

``layer(..., capture_output=aux.capture if i in self.<attr> else None)`` (directly, or
through a loop local): the layer itself records, so the point is decided later by following
the keyword into the layer's forward (:class:`flowtrace.model.facts.CallbackUse`). A
fixed-slot packer handed the same way is a ``packer``.
"""

from __future__ import annotations

import ast

from flowtrace.index.sites.base import Found, PointDecision, SiteShape
from flowtrace.index.sites.context import LoopContext, Reach, is_none
from flowtrace.index.syntax import Arg, arguments, dotted
from flowtrace.model import facts as F


class CallbackShape(SiteShape):
    name = "callback"
    mechanisms = (F.Mechanism.CALLBACK, F.Mechanism.PACKER)
    rank = 10
    summary = "a callback or collector handed to layer i under a membership test; the layer's forward decides the point"
    VALID = (
        (
            """
            def forward(self, h):
                aux = []
                for i, layer in enumerate(self.layers):
                    h = layer(h, capture_output=aux.append if i in self.layers_to_capture else None)
                return h, aux
            """,
            ((F.Mechanism.CALLBACK, F.Point.UNKNOWN),),
        ),
    )
    INVALID = (
        """
        def forward(self, h):
            aux = []
            for i, layer in enumerate(self.layers):
                h = layer(h, capture_output=aux.append if i > 2 else None)
            return h, aux
        """,
    )

    def find(self, ctx: LoopContext) -> list[Found]:
        found: list[Found] = []
        for arg in arguments(ctx.layer_call):
            value = arg.value
            if isinstance(value, ast.Name) and value.id in ctx.bound:
                value = ctx.bound[value.id]
            if isinstance(value, ast.IfExp) and is_none(value.orelse):
                fact = self.site(ctx, arg, value)
                if fact is not None:
                    found.append(Found(0, fact))
        return found

    def site(self, ctx: LoopContext, arg: Arg, value: ast.IfExp) -> F.CaptureSiteFact | None:
        fwd = ctx.forward
        carried = dotted(value.body) or ctx.file.code(value.body)
        container = carried.split(".")[0]
        attribute, label = fwd.condition_attribute(value.test), fwd.condition_label(value.test, ctx.index)
        if attribute is None and container in fwd.containers:
            attribute, label = ctx.layer_mark(value.test), 0  # a collector handed to the layers a setter marked
        if attribute is None:
            return None
        mechanism = F.Mechanism.PACKER if fwd.is_packer(container) else F.Mechanism.CALLBACK
        keyword = arg.keyword
        note = (
            f"{carried} handed to layer {ctx.index} as {keyword}=; point decided in the layer's forward"
            if keyword
            else f"{carried} handed to layer {ctx.index} positionally; cannot follow it"
        )
        return ctx.fact(
            arg.node,
            mechanism,
            F.Point.UNKNOWN,
            attribute,
            container,
            note,
            reach=Reach(),
            callback_parameter=keyword,
            label=label,
            slots=fwd.slots(container, ctx.loop),
        )

    def decision(self, site: F.CaptureSiteFact) -> PointDecision:
        return PointDecision.LAYER_FORWARD


SHAPE = CallbackShape()
