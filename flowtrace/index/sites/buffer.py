"""A slice of a preallocated buffer written in the loop under a membership test.

``buf[k].copy_(h + r)`` / ``buf[:, k * H:(k + 1) * H] = h``: the state is copied into a
buffer instead of appended. The point follows the test's label and the side of the layer
call, as for an append; a copy is never a reference, so no later in-place update reaches it.
A known local list or dict is left to the append and dict shapes.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from flowtrace.index.sites.base import Found, SiteShape
from flowtrace.index.sites.context import LoopContext, Tests, depends_on_residual, side_point
from flowtrace.index.syntax import arguments, dotted, start_of
from flowtrace.model import facts as F


@dataclass(frozen=True, slots=True)
class _Write:
    node: ast.AST  # the ``copy_`` call or the assignment
    target: ast.Subscript
    value: ast.expr
    tests: Tests


class BufferShape(SiteShape):
    name = "buffer"
    mechanisms = (F.Mechanism.BUFFER,)
    rank = 40
    summary = "a slice of a preallocated buffer written in place under a membership test"
    VALID = (
        (
            """
            def forward(self, h, r):
                k = 0
                for i, layer in enumerate(self.layers):
                    if i in self.layers_to_capture:
                        self.buf[k].copy_(h + r)
                        k += 1
                    h, r = layer(h, r)
                return h, self.buf
            """,
            ((F.Mechanism.BUFFER, F.Point.INPUT),),
        ),
    )
    INVALID = (
        """
        def forward(self, h, r):
            for i, layer in enumerate(self.layers):
                self.buf[i].copy_(h + r)
                h, r = layer(h, r)
            return h, self.buf
        """,
    )

    def find(self, ctx: LoopContext) -> list[Found]:
        found: list[Found] = []
        for write in _writes(ctx):
            test = next((t for t in reversed(write.tests) if ctx.forward.condition_attribute(t) is not None), None)
            if test is not None:
                found.append(Found(0, self.site(ctx, write, test)))
        return found

    def site(self, ctx: LoopContext, write: _Write, test: ast.expr) -> F.CaptureSiteFact:
        fwd, value = ctx.forward, write.value
        label = fwd.condition_label(test, ctx.index)
        after = start_of(write.node) > start_of(ctx.layer_call)
        shown = ctx.bound[value.id] if isinstance(value, ast.Name) and value.id in ctx.bound else value
        captured = ctx.file.code(shown)
        return ctx.fact(
            write.node,
            F.Mechanism.BUFFER,
            side_point(after, label),
            fwd.condition_attribute(test),
            dotted(write.target.value) or "",
            f"{ctx.file.code(write.target)} <- {captured} {'after' if after else 'before'} layer {ctx.index} runs, when"
            f" {ctx.file.code(test)}",
            reach=ctx.reach(after),
            captured=captured,
            uses_residual=depends_on_residual(value, ctx.bound),
            label=label,
            first=None if after else ctx.first_iteration(write.node, value, write.tests),
        )


def _writes(ctx: LoopContext) -> list[_Write]:
    """The loop body's ``buf[...].copy_(x)`` calls and ``buf[...] = x`` assignments, outside
    the containers the forward builds itself."""
    out: list[_Write] = []
    for call, tests in ctx.calls:
        func = call.func
        if (
            isinstance(func, ast.Attribute)
            and func.attr == "copy_"
            and isinstance(func.value, ast.Subscript)
            and (call.args or call.keywords)
        ):
            out.append(_Write(call, func.value, arguments(call)[0].value, tests))
    for stmt, tests in ctx.assignments():
        target = stmt.targets[0] if len(stmt.targets) == 1 else None
        if isinstance(target, ast.Subscript):
            out.append(_Write(stmt, target, stmt.value, tests))
    return [
        w
        for w in out
        if dotted(w.target.value) is not None and (dotted(w.target.value) or "") not in ctx.forward.containers
    ]


SHAPE = BufferShape()
