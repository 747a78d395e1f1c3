"""A metadata object built from the capture attribute and handed to each layer.

``meta = Cls(..., self.<attr>, ...)`` before the loop, then ``layer(..., kw=meta)``: the
layer records through a method of the object it is handed. No membership test is in the
loop; the object carries the indices. The point is decided where the layer's forward calls
it (:meth:`flowtrace.analysis.holders.Holders.hook_point`).
"""

from __future__ import annotations

import ast

from flowtrace.index.sites.base import Found, PointDecision, SiteShape
from flowtrace.index.sites.context import LoopContext, Reach, Slots
from flowtrace.index.syntax import Arg, arguments, dotted
from flowtrace.model import facts as F


class HookShape(SiteShape):
    name = "hook"
    mechanisms = (F.Mechanism.HOOK,)
    rank = 30
    summary = "an object built from the capture attribute handed to layer i; the layer's call of it decides the point"
    VALID = (
        (
            """
            def forward(self, h):
                meta = CaptureMeta(self.layers_to_capture)
                for i, layer in enumerate(self.layers):
                    h = layer(h, meta=meta)
                return h, meta.states
            """,
            ((F.Mechanism.HOOK, F.Point.UNKNOWN),),
        ),
    )
    INVALID = (
        """
        def forward(self, h):
            meta = CaptureMeta(self.hidden_size)
            for i, layer in enumerate(self.layers):
                h = layer(h, meta=meta)
            return h, meta.states
        """,
    )

    def find(self, ctx: LoopContext) -> list[Found]:
        found: list[Found] = []
        for arg in arguments(ctx.layer_call):
            value = arg.value
            if (
                arg.keyword is not None
                and isinstance(value, ast.Name)
                and value.id not in ctx.bound
                and value.id in ctx.forward.hook_objects
            ):
                found.append(Found(0, self.site(ctx, arg, value.id)))
        return found

    def site(self, ctx: LoopContext, arg: Arg, name: str) -> F.CaptureSiteFact:
        call, attribute = ctx.forward.hook_objects[name]
        cls = dotted(call.func)
        return ctx.fact(
            arg.node,
            F.Mechanism.HOOK,
            F.Point.UNKNOWN,
            attribute,
            name,
            f"{name} = {ctx.file.code(call.func)}(...self.{attribute}...) handed to layer {ctx.index} as"
            f" {arg.keyword}=; point decided where the layer's forward calls it",
            reach=Reach(),
            callback_parameter=arg.keyword,
            slots=Slots(container_class=ctx.file.resolve(cls) if cls else None),
            label=0,  # the layer passes its own index
        )

    def decision(self, site: F.CaptureSiteFact) -> PointDecision:
        return PointDecision.HOOK_CALL


SHAPE = HookShape()
