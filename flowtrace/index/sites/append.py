"""``aux.<record>(x)`` under a membership test of a capture attribute, before or after the
layer call: an append to a list, or a record into a fixed-slot collector (``packer``).

The point follows the tested label and the side of the layer call. The recorded value is
followed through loop locals (``x = h + r``) for the stream facts: a None operand at the
first iteration, a later in-place update of the stored reference.
"""

from __future__ import annotations

import ast

from flowtrace.index.sites.base import Found, SiteShape
from flowtrace.index.sites.context import LoopContext, Tests, side_point
from flowtrace.index.syntax import arguments, dotted, last_name
from flowtrace.model import facts as F


class AppendShape(SiteShape):
    name = "append"
    mechanisms = (F.Mechanism.APPEND, F.Mechanism.PACKER)
    rank = 50  # the same rank as helper: both read the loop's calls, in the calls' order
    summary = "a collector's record method called under a membership test, before or after layer i"
    VALID = (
        (
            """
            def forward(self, h, r):
                aux = []
                for i, layer in enumerate(self.layers):
                    if i in self.layers_to_capture:
                        aux.append(h + r)
                    h, r = layer(h, r)
                return h, aux
            """,
            ((F.Mechanism.APPEND, F.Point.INPUT),),
        ),
        (
            """
            def forward(self, h, r):
                aux = []
                for i, layer in enumerate(self.layers):
                    h, r = layer(h, r)
                    if i in self.layers_to_capture:
                        aux.append(h + r)
                return h, aux
            """,
            ((F.Mechanism.APPEND, F.Point.OUTPUT),),
        ),
    )
    INVALID = (
        """
        def forward(self, h, r):
            aux = []
            for i, layer in enumerate(self.layers):
                h, r = layer(h, r)
                aux.append(h + r)
            return h, aux
        """,
    )

    def find(self, ctx: LoopContext) -> list[Found]:
        found: list[Found] = []
        for anchor, call, tests, after in ctx.side_calls:
            fact = site(ctx, call, tests, after)
            if fact is not None:
                found.append(Found(anchor, fact))
        return found


def site(ctx: LoopContext, call: ast.Call, tests: Tests, after: bool) -> F.CaptureSiteFact | None:
    """The append site of one call, if it is one."""
    fwd = ctx.forward
    if not isinstance(call.func, ast.Attribute):
        return None
    method = last_name(call.func)
    container = dotted(call.func.value) or ""
    if container not in fwd.containers:
        return None
    if method not in fwd.conv.container_methods and not (fwd.fixed_slots(container) and len(arguments(call)) == 1):
        return None  # a fixed-slot collector records through whatever method it has
    tested = _tested(ctx, tests)
    if tested is None:
        return None
    attribute, label = tested
    stored = ctx.stored(call, tests, after)
    return ctx.fact(
        call,
        F.Mechanism.PACKER if fwd.is_packer(container) else F.Mechanism.APPEND,
        side_point(after, label),
        attribute,
        container,
        f"{container}.{method}(...) {'after' if after else 'before'} layer {ctx.index} runs, when"
        f" {ctx.file.code(tests[-1])}",
        reach=ctx.reach(after),
        captured=stored.expression,
        uses_residual=stored.uses_residual,
        label=label,
        first=stored.first,
        mutation=stored.mutation,
        slots=fwd.slots(container, ctx.loop),
    )


def _tested(ctx: LoopContext, tests: Tests) -> tuple[str, int | None] | None:
    """(attribute, label) of the first enclosing test that checks a capture attribute."""
    for test in tests:
        attribute = ctx.forward.condition_attribute(test)
        if attribute is not None:
            return attribute, ctx.forward.condition_label(test, ctx.index)
    return None


SHAPE = AppendShape()
