"""Fix 1 (FT022): guard the recorded sum the way the engines' own helpers do.

A split-residual loop starts with ``residual = None``; a capture before layer i that records
``hidden_states + residual`` evaluates ``tensor + None`` when the draft asks for the embedding.
The engines' guarded helpers record ``hidden_states if residual is None else hidden_states +
residual``: at the first layer the stream *is* ``hidden_states`` (the embedding output), later
it is the sum. This codemod rewrites exactly that sum, at the line the index recorded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst
from libcst.metadata import CodeRange, ParentNodeProvider

from flowtrace.fix.model import CannotFix, Expectation, Proposal
from flowtrace.fix.source import Sources, one_class, parse, positions, simple_name

if TYPE_CHECKING:
    from flowtrace.analysis.scan import ScanResult
    from flowtrace.checks.base import Finding
    from flowtrace.model.facts import CaptureSiteFact

# Where an IfExp may stand without parentheses (it binds looser than every operator).
_LOOSE_PARENTS = (cst.Assign, cst.AnnAssign, cst.Arg, cst.Return, cst.Element, cst.AugAssign)


def guarded(node: cst.BinaryOperation, none_name: str, loose: bool) -> cst.BaseExpression:
    """``a + r`` -> ``a if r is None else a + r`` (``r`` the operand that may be None)."""
    other = node.left if _is_name(node.right, none_name) else node.right
    test = cst.Comparison(cst.Name(none_name), [cst.ComparisonTarget(cst.Is(), cst.Name("None"))])
    inner = node.with_changes(lpar=(), rpar=())
    expr = cst.IfExp(
        test=test, body=other.with_changes(lpar=(), rpar=()) if isinstance(other, cst.Name) else other, orelse=inner
    )
    if node.lpar:
        return expr.with_changes(lpar=node.lpar, rpar=node.rpar)
    return expr if loose else expr.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def _is_name(node: cst.BaseExpression, name: str) -> bool:
    return isinstance(node, cst.Name) and node.value == name


class GuardSum(cst.CSTTransformer):
    """Rewrite the first ``X + <name>`` (or ``<name> + X``) starting at ``line`` inside
    ``cls.function``."""

    METADATA_DEPENDENCIES = (ParentNodeProvider,)

    def __init__(self, target: cst.FunctionDef, name: str, line: int, pos: dict[cst.CSTNode, CodeRange]) -> None:
        super().__init__()
        self.target, self.name, self.line, self.pos = target, name, line, pos
        self.inside = 0
        self.done = False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        if node is self.target:
            self.inside += 1
        return True

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        if original is self.target:
            self.inside -= 1
        return updated

    def leave_BinaryOperation(self, original: cst.BinaryOperation, updated: cst.BinaryOperation) -> cst.BaseExpression:
        if self.done or not self.inside or not isinstance(original.operator, cst.Add):
            return updated
        if not (_is_name(original.left, self.name) or _is_name(original.right, self.name)):
            return updated
        if self.pos[original].start.line < self.line:
            return updated
        self.done = True
        parent = self.get_metadata(ParentNodeProvider, original)
        return guarded(updated, self.name, isinstance(parent, _LOOSE_PARENTS))


def plan(result: ScanResult, finding: Finding, sources: Sources) -> Proposal:
    """Guard the finding's sum and every other unguarded capture expression of the same loop and
    None operand (FT022 groups them into one finding): a forward with a second capture branch
    taken at the first index (an all-gather of ``hidden_states + residual``) is fixed whole, or
    the re-run analysis would still see it raise. Branches the first index never takes carry no
    first-iteration fact and are left as they are."""
    site = next(
        (s for ff in result.files for s in ff.capture_sites
         if s.first_none and s.location.file == finding.file and s.location.line == finding.line),
        None,
    )
    if site is None:
        raise CannotFix("no capture site with an unguarded None operand at the finding's line")
    group = sorted(
        {(s.stored_at or s.location).line: s for ff in result.files for s in ff.capture_sites
         if s.first_none == site.first_none and s.class_qualname == site.class_qualname and s.function == site.function
         and (s.stored_at or s.location).file == (site.stored_at or site.location).file}.items()
    )
    stored = site.stored_at or site.location
    text = sources.text(stored.file)
    for line, member in group:
        text = _guard_one(text, member, line)
    from flowtrace.fix.expect import embedding_expectations

    where = ", ".join(str(m.stored_at or m.location) for _, m in group)
    return Proposal(
        rule=finding.rule,
        fingerprint=finding.fingerprint,
        symbol=finding.symbol,
        file=finding.file,
        line=finding.line,
        title=(
            f"record `{site.captured_expression or '...'}` only once {site.first_none} is set: `... if"
            f" {site.first_none} is None else ...` ({where})"
        ),
        edits=(sources.edit(stored.file, text),),
        expect=embedding_expectations(result, site.class_qualname),
    )


def _guard_one(text: str, site: CaptureSiteFact, line: int) -> str:
    """``text`` with the first ``... + <operand>`` at or after ``line`` in the site's method guarded."""
    none_name = site.first_none
    if not none_name:  # plan groups only sites with an operand that may be None
        raise CannotFix(f"{site.class_qualname}.{site.function}: no operand that may be None at line {line}")
    stored = site.stored_at or site.location
    wrapper = parse(text, stored.file)
    pos = positions(wrapper)
    cls = one_class(wrapper.module, simple_name(site.class_qualname), site.location.line, pos, stored.file)
    name = site.function.rsplit(".", 1)[-1]
    function = next((f for f in _functions(cls) if f.name.value == name), None)
    if function is None:
        raise CannotFix(f"{site.class_qualname} has no method {site.function} in {stored.file}")
    transformer = GuardSum(function, none_name, line, pos)
    patched = wrapper.visit(transformer)
    if not transformer.done:
        raise CannotFix(
            f"no `... + {none_name}` at or after {stored.file}:{line}: the recorded expression is not a plain sum"
        )
    return patched.code


def _functions(cls: cst.ClassDef) -> list[cst.FunctionDef]:
    body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ()
    return [s for s in body if isinstance(s, cst.FunctionDef)]


__all__ = ["CannotFix", "Expectation", "plan"]
