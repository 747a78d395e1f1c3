"""Fix 2 (FT001): give a wrapper the EAGLE-3 methods its language model already has.

The engine calls the entry setter (and, per the profile's ``target_methods``, more methods such
as the embedding/head getter) on the registered class. A multimodal wrapper that holds a
capture-capable language model as ``self.<attr>`` but lacks those methods makes EAGLE-3
impossible for its architecture. The patch adds each missing method at the end of the class,
with the wrapped method's own parameters (annotations dropped, so no import is needed), handing
the call to ``self.<attr>.<method>(...)``, the way the engines' working wrappers do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from flowtrace.checks.targets import conventions, methods_on_mro, short
from flowtrace.fix.expect import PROBE_LAYERS
from flowtrace.fix.model import CannotFix, Expectation, Proposal
from flowtrace.fix.source import Sources, method, one_class, parse, positions, simple_name

if TYPE_CHECKING:
    from flowtrace.analysis.resolve import ModelRow, Project
    from flowtrace.analysis.scan import ScanResult
    from flowtrace.checks.base import Finding

_PLAIN_DEFAULTS = (cst.Name, cst.Integer, cst.Float, cst.SimpleString)
TRACE_IDS = (1, 15, 28)  # any ids inside PROBE_LAYERS: the wrapper must serve what its model serves


def wrapped(project: Project, row: ModelRow) -> tuple[str, str]:
    """(attribute, inner class) as FT001 finds them: the first built model that has a setter."""
    cls = project.lookup.classes[row.qualname]
    for a in cls.assignments:
        inner = project.lookup.find_class(a.callee) if a.attribute != "*" else None
        if inner and inner != row.qualname and project.lookup.find_setter(inner) is not None:
            return a.attribute, inner
    raise CannotFix(f"{row.name} builds no model with a setter")


def missing_methods(result: ScanResult, row: ModelRow) -> list[str]:
    project = result.project
    entry = next((n for n in project.conv.setter_order if not n.startswith("_")), None)
    required = list(dict.fromkeys([m for m in (entry, *conventions(result).target_methods) if m]))
    present = methods_on_mro(project.lookup, row.qualname)
    return [m for m in required if m not in present]


def _defining_class(project: Project, qualname: str, name: str) -> str | None:
    classes = project.lookup.classes
    return next((q for q in project.lookup.mro(qualname) if q in classes and name in classes[q].methods), None)


def _plain(params: cst.Parameters, where: str) -> cst.Parameters:
    """The parameters without annotations; defaults must be literals or names like None."""
    def strip(p: cst.Param) -> cst.Param:
        if p.default is not None and not isinstance(p.default, _PLAIN_DEFAULTS):
            raise CannotFix(
                f"{where}: a default that is not a literal ({cst.Module([]).code_for_node(p.default)}); copying it"
                " could need imports"
            )
        tight = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))
        return p.with_changes(annotation=None, equal=tight if p.default is not None else cst.MaybeSentinel.DEFAULT)

    star = params.star_arg
    return params.with_changes(
        params=[strip(p) for p in params.params],
        posonly_params=[strip(p) for p in params.posonly_params],
        kwonly_params=[strip(p) for p in params.kwonly_params],
        star_arg=strip(star) if isinstance(star, cst.Param) else star,
        star_kwarg=strip(params.star_kwarg) if params.star_kwarg else None,
    )


def _call_args(params: cst.Parameters) -> list[cst.Arg]:
    names = [*params.posonly_params, *params.params][1:]  # after self
    args = [cst.Arg(cst.Name(p.name.value)) for p in names]
    if isinstance(params.star_arg, cst.Param):
        args.append(cst.Arg(cst.Name(params.star_arg.name.value), star="*"))
    args += [cst.Arg(cst.Name(p.name.value), keyword=cst.Name(p.name.value)) for p in params.kwonly_params]
    if params.star_kwarg:
        args.append(cst.Arg(cst.Name(params.star_kwarg.name.value), star="**"))
    return args


def delegating_method(name: str, params: cst.Parameters, attribute: str, returns: bool = True) -> cst.FunctionDef:
    """``def name(self, ...): return self.<attribute>.name(...)``; a setter (``returns``
    False) calls without ``return``, as the engines' own delegating setters do."""
    target: cst.BaseExpression = cst.Name("self")
    for part in attribute.split("."):
        target = cst.Attribute(target, cst.Name(part))
    call = cst.Call(cst.Attribute(target, cst.Name(name)), _call_args(params))
    return cst.FunctionDef(
        name=cst.Name(name),
        params=params,
        body=cst.IndentedBlock([cst.SimpleStatementLine([cst.Return(call) if returns else cst.Expr(call)])]),
        leading_lines=[cst.EmptyLine(indent=False)],
    )


def _inner_params(result: ScanResult, sources: Sources, inner: str, name: str) -> cst.Parameters:
    project = result.project
    owner = _defining_class(project, inner, name)
    if owner is None:
        hint = (
            f" (this engine supplies it through {' or '.join(sorted(project.conv.interfaces))}: add that to the"
            " wrapper's bases instead)"
            if project.conv.interfaces
            else ""
        )
        raise CannotFix(f"{short(inner)} has no {name}() to hand the call to{hint}")
    fact = project.lookup.classes[owner]
    wrapper = parse(sources.text(fact.location.file), fact.location.file)
    cls = one_class(wrapper.module, fact.name, fact.location.line, positions(wrapper), fact.location.file)
    fn = method(cls, name)
    if fn is None:
        raise CannotFix(f"{fact.location.file}: {fact.name}.{name} not found by libcst")
    if any(not (isinstance(d.decorator, cst.Name) and d.decorator.value == "override") for d in fn.decorators):
        raise CannotFix(f"{short(owner)}.{name} is decorated; a plain delegating method would change it")
    return _plain(fn.params, f"{short(owner)}.{name}")


def _served_by(result: ScanResult, inner: str) -> tuple[int, ...]:
    """What the wrapped model serves for TRACE_IDS: what the wrapper must serve once patched.
    Without a trace of it the fix cannot be confirmed, so it is not offered."""
    from flowtrace.fix.expect import traced

    inner_row = result.project.row(inner)
    served = (
        traced(result, Expectation(inner_row.qualname, TRACE_IDS, PROBE_LAYERS, ())) if inner_row is not None else None
    )
    if served is None or not served.boundaries:
        why = (getattr(served, "reason", None) or "no boundary") if served is not None else "no model row"
        raise CannotFix(
            f"the wrapped {short(inner)}'s own capture cannot be traced ({why}): nothing would confirm the wrapper"
            " serves it"
        )
    return tuple(served.boundaries)


class _AddMethods(cst.CSTTransformer):
    def __init__(self, target: cst.ClassDef, methods: list[cst.FunctionDef]) -> None:
        super().__init__()
        self.target, self.methods = target, methods

    def leave_ClassDef(self, original: cst.ClassDef, updated: cst.ClassDef) -> cst.ClassDef:
        if original is not self.target or not isinstance(updated.body, cst.IndentedBlock):
            return updated
        return updated.with_changes(body=updated.body.with_changes(body=[*updated.body.body, *self.methods]))


def plan(result: ScanResult, finding: Finding, sources: Sources) -> Proposal:
    project = result.project
    row = next((r for r in result.rows if r.qualname == finding.symbol), None)
    if row is None:
        raise CannotFix(f"{finding.symbol}: not a model class of this tree")
    attribute, inner = wrapped(project, row)
    missing = missing_methods(result, row)
    if not missing:
        raise CannotFix(f"{row.name} already has the methods the engine calls; the finding has another cause")
    setters = set(project.conv.setter_order)
    methods = [
        delegating_method(m, _inner_params(result, sources, inner, m), attribute, m not in setters) for m in missing
    ]
    wrapper = parse(sources.text(row.location.file), row.location.file)
    cls = one_class(wrapper.module, simple_name(row.qualname), row.location.line, positions(wrapper), row.location.file)
    if not isinstance(cls.body, cst.IndentedBlock):
        raise CannotFix(f"{row.name} is a one-line class")
    patched = wrapper.module.visit(_AddMethods(cls, methods))
    expect = (Expectation(row.qualname, TRACE_IDS, PROBE_LAYERS, _served_by(result, inner)),)
    return Proposal(
        rule=finding.rule,
        fingerprint=finding.fingerprint,
        symbol=finding.symbol,
        file=finding.file,
        line=finding.line,
        title=(
            f"add {', '.join(m + '()' for m in missing)} to {row.name}, handing each call to"
            f" self.{attribute} ({short(inner)})"
        ),
        edits=(sources.edit(row.location.file, patched.code),),
        expect=expect,
        inherits_from=tuple(project.lookup.mro(inner)),
    )
