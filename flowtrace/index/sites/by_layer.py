"""A dict keyed by layer: ``by_layer[i] = x`` under a membership test.

The point follows the key's offset and the side of the layer call, as for an append. A
variant stores what the layer returns under a flag it is handed (``h, r, out = layer(...,
kw=i in self.<attr>)``; ``if out is not None: by_layer[i] = out``): which boundary the layer
returns is then decided in its forward, as for a callback. The order the dict is read back
(``[d[i] for i in self.<attr>]`` or insertion order) is the concat order.
"""

from __future__ import annotations

import ast

from flowtrace.index.layer_dicts import dict_store
from flowtrace.index.sites.base import Found, PointDecision, SiteShape
from flowtrace.index.sites.context import LoopContext, Reach, Tests, depends_on_residual, offset_of, point_for
from flowtrace.index.syntax import start_of
from flowtrace.model import facts as F


class DictShape(SiteShape):
    name = "dict"
    mechanisms = (F.Mechanism.DICT,)
    rank = 20
    summary = "a dict keyed by layer written under a membership test (or with what a flagged layer returns)"
    VALID = (
        (
            """
            def forward(self, h, r):
                by_layer = {}
                for i, layer in enumerate(self.layers):
                    h, r = layer(h, r)
                    if i in self.layers_to_capture:
                        by_layer[i] = h + r
                return h, [by_layer[i] for i in self.layers_to_capture]
            """,
            ((F.Mechanism.DICT, F.Point.OUTPUT),),
        ),
        (
            """
            def forward(self, h, r):
                by_layer = {}
                for i, layer in enumerate(self.layers):
                    h, r, out = layer(h, r, keep=i in self.layers_to_capture)
                    if out is not None:
                        by_layer[i] = out
                return h, list(by_layer.values())
            """,
            ((F.Mechanism.DICT, F.Point.UNKNOWN),),
        ),
    )
    INVALID = (
        """
        def forward(self, h, r):
            by_layer = {}
            for i, layer in enumerate(self.layers):
                h, r = layer(h, r)
                by_layer[i] = h + r
            return h, by_layer
        """,
    )

    def find(self, ctx: LoopContext) -> list[Found]:
        found: list[Found] = []
        for stmt, tests in ctx.assignments():
            store = dict_store(stmt)
            if store is None or ctx.forward.containers.get(store.container) != "dict":
                continue
            fact = self.site(ctx, stmt, store.target, store.container, tests)
            if fact is not None:
                found.append(Found(0, fact))
        return found

    def site(
        self, ctx: LoopContext, stmt: ast.Assign, target: ast.Subscript, container: str, tests: Tests
    ) -> F.CaptureSiteFact | None:
        fwd = ctx.forward
        label = offset_of(target.slice, ctx.index)
        attribute = next((a for a in map(fwd.condition_attribute, tests) if a), None)
        flagged = ctx.flagged_output(tests) if attribute is None else None
        if flagged is not None and flagged[2] == label == 0:  # the point is then relative to layer i itself
            return flagged_site(ctx, stmt, target, container, flagged)
        if label is None or attribute is None:
            return None
        after = start_of(stmt) > start_of(ctx.layer_call)
        return ctx.fact(
            stmt,
            F.Mechanism.DICT,
            point_for(1 if after else 0, label),
            attribute,
            container,
            f"{container}[{ctx.file.code(target.slice)}] = ... {'after' if after else 'before'} layer {ctx.index} runs,"
            f" when {ctx.file.code(tests[-1])}",
            reach=ctx.reach(after),
            captured=ctx.file.code(stmt.value),
            uses_residual=depends_on_residual(stmt.value, ctx.bound),
            label=label,
            concat_order=fwd.read_order(container),
            first=None if after else ctx.first_iteration(stmt, stmt.value, tests),
        )

    def decision(self, site: F.CaptureSiteFact) -> PointDecision:
        return PointDecision.LAYER_FORWARD if site.callback_parameter else PointDecision.IN_LOOP


def flagged_site(
    ctx: LoopContext, stmt: ast.Assign, target: ast.Subscript, container: str, flagged: tuple[str, str, int | None]
) -> F.CaptureSiteFact:
    """A dict store of what the layer returns under a flag it is handed: which boundary the
    layer returns is decided in its forward, as for a callback handed to it."""
    attribute, keyword, label = flagged
    return ctx.fact(
        stmt,
        F.Mechanism.DICT,
        F.Point.UNKNOWN,
        attribute,
        container,
        f"{container}[{ctx.file.code(target.slice)}] = what layer {ctx.index} returns when handed {keyword}=; point"
        " decided in the layer's forward",
        reach=Reach(),
        callback_parameter=keyword,
        label=label,
        concat_order=ctx.forward.read_order(container),
    )  # what the layer returns is built in its forward, not here: no recorded expression


SHAPE = DictShape()
