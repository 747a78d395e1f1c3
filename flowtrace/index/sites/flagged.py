"""A layer marked by a flag computed from the ids, whose returned stream the loop records.

``h, r, prev = layer(h, r, keep_prev=idx in self.<attr>)`` then ``if prev is not None:
aux.append(prev)``: no membership test guards the record; the layer returns a state only
when it is flagged, so the None test stands for it. Which boundary the layer returns is
decided in its forward (where it uses the flag), as for a callback handed to it. The dict
form (``by_layer[idx] = prev``) is the dict shape's.
"""

from __future__ import annotations

import ast

from flowtrace.index.sites.base import Found, PointDecision, SiteShape
from flowtrace.index.sites.context import LoopContext, Reach, Tests
from flowtrace.index.syntax import arguments, dotted, last_name
from flowtrace.model import facts as F


class FlaggedShape(SiteShape):
    name = "flagged"
    mechanisms = (F.Mechanism.FLAGGED,)
    rank = 25
    summary = "a collector records what layer i returns when it is handed a flag computed from the ids"
    VALID = (
        (
            """
            def forward(self, h, r):
                aux = []
                for idx, layer in enumerate(self.layers):
                    h, r, prev = layer(h, r, keep_prev=idx in self.layers_to_capture)
                    if prev is not None:
                        aux.append(prev)
                return h, aux
            """,
            ((F.Mechanism.FLAGGED, F.Point.UNKNOWN),),  # decided in the layer's forward
        ),
    )
    INVALID = (
        """
        def forward(self, h, r):
            aux = []
            for idx, layer in enumerate(self.layers):
                h, r, prev = layer(h, r, keep_prev=idx > 2)
                if prev is not None:
                    aux.append(prev)
            return h, aux
        """,
    )

    def find(self, ctx: LoopContext) -> list[Found]:
        found: list[Found] = []
        for anchor, call, tests, after in ctx.side_calls:
            fact = site(ctx, call, tests) if after else None
            if fact is not None:
                found.append(Found(anchor, fact))
        return found

    def decision(self, site: F.CaptureSiteFact) -> PointDecision:
        return PointDecision.LAYER_FORWARD


def site(ctx: LoopContext, call: ast.Call, tests: Tests) -> F.CaptureSiteFact | None:
    """``aux.<record>(v)`` of a value the flagged layer call returned, under ``v is not None``."""
    fwd = ctx.forward
    if not isinstance(call.func, ast.Attribute) or last_name(call.func) not in fwd.conv.container_methods:
        return None
    container = dotted(call.func.value) or ""
    args = arguments(call)
    if container not in fwd.containers or len(args) != 1 or any(fwd.condition_attribute(t) for t in tests):
        return None
    flagged = ctx.flagged_output(tests)
    value = args[0].value
    if flagged is None or flagged[2] != 0 or not (isinstance(value, ast.Name) and value.id in ctx.layer_outputs()):
        return None  # the record is relative to layer i itself only for a flag `i in self.<attr>`
    attribute, keyword, label = flagged
    return ctx.fact(
        call,
        F.Mechanism.FLAGGED,
        F.Point.UNKNOWN,
        attribute,
        container,
        f"{container}.{last_name(call.func)}({value.id}) of what layer {ctx.index} returns when handed {keyword}=;"
        " point decided in the layer's forward",
        reach=Reach(),
        callback_parameter=keyword,
        label=label,
    )


SHAPE = FlaggedShape()
