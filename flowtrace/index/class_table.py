"""The one reader of what a module declares: imports, classes, methods, construction,
registrations; and the cheap tier, which reads nothing else.

Cross-file resolution needs each module's class table (bases, methods, what ``__init__``
builds, class attributes, factory methods, registrations) whichever tier reads the file, so
it is extracted here once and both tiers take it: the full analysers (index/visitors.py)
add the capture facts of files that name a capture marker on top of it; the cheap tier
(:func:`table_facts`, for files that only register or subclass a model: an
``EntryClass = Foo`` file, a ``class Bar(LlamaForCausalLM): pass``) adds only a cheap
approximation of the layer loops. Adding a marker to a file therefore never changes its
class table.
"""

from __future__ import annotations

import ast
import bisect
import dataclasses
import gc
import re
from collections.abc import Callable
from typing import Any, TypeGuard

from flowtrace.engines.profiles import Conventions
from flowtrace.index.context import ClassInfo, FileContext
from flowtrace.index.packages import absolute_base, package_imports
from flowtrace.index.returns import module_facts, nodes as _walk
from flowtrace.index.syntax import (
    line_numbers,
    find_all,
    BLOCK_FIELDS,
    FunctionNode,
    Param,
    SourceText,
    all_statements,
    arguments,
    decode,
    dotted,
    inner_blocks,
    is_name,
    last_name,
    module_name,
    parameters,
    string_value,
    visit_each,
    walk_statements,
)
from flowtrace.model import facts as F

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


# -- the module's structure: one statement walk ----------------------------------------------
class Structure:
    """What a module declares, read in one walk over its statements (never its expressions):

    * ``imports``: every ``import`` and ``from ... import`` statement, wherever it stands,
      in source order, a later binding of a name replacing an earlier one (``import a.b``
      binds ``a`` only if nothing did; a statement with a ``*`` binds nothing);
    * ``classes``: every class not defined inside a function (module level, in ``if`` /
      ``try`` blocks, nested in a class: ``pkg.mod.Outer.Inner``), each with its methods,
      the first definition of a name winning;
    * ``module_assigns``: the module-level ``x = v`` / ``x: T = v`` a registry is read from.

    Inside a function only its imports count (its classes are not the module's), so a caller
    that knows the ``import_lines`` (:func:`import_lines`) spares the walk every function whose
    lines hold none: most of a module's statements.
    """

    def __init__(self, module: ast.Module, modname: str, package: str, import_lines: list[int] | None = None) -> None:
        self.modname, self.package = modname, package
        self.import_lines = import_lines
        self.imports: dict[str, str] = {}
        self.classes: list[ClassInfo] = []
        self.module_assigns: list[ast.Assign | ast.AnnAssign] = []
        self._block(module.body, None, False)

    @property
    def local_classes(self) -> dict[str, str]:
        """Class name -> qualified name (a later class of the same name wins)."""
        return {c.name: c.qualname for c in self.classes}

    def _block(self, body: list[ast.stmt], cls: ClassInfo | None, in_function: bool) -> None:
        for stmt in body:
            kind = stmt.__class__
            if kind is ast.Assign or kind is ast.AnnAssign:
                if cls is None and not in_function and stmt.value is not None:  # type: ignore[attr-defined]
                    self.module_assigns.append(stmt)  # type: ignore[arg-type]
            elif kind is ast.Import:
                self._import(stmt)  # type: ignore[arg-type]
            elif kind is ast.ImportFrom:
                self._import_from(stmt)  # type: ignore[arg-type]
            elif kind is ast.ClassDef:
                self._class(stmt, cls, in_function)  # type: ignore[arg-type]
            elif kind is ast.FunctionDef or kind is ast.AsyncFunctionDef:
                if cls is not None and not in_function:
                    cls.methods.setdefault(stmt.name, stmt)  # type: ignore[attr-defined, arg-type]
                if self._may_import(stmt):
                    self._block(stmt.body, cls, True)  # type: ignore[attr-defined]
            else:
                if kind in BLOCK_FIELDS:
                    for inner in inner_blocks(stmt):
                        self._block(inner, cls, in_function)

    def _may_import(self, node: ast.stmt) -> bool:
        """Whether an ``import`` may stand in ``node``'s lines (unknown: it may)."""
        lines = self.import_lines
        if lines is None:
            return True
        at = bisect.bisect_left(lines, node.lineno)
        return at < len(lines) and lines[at] <= node.end_lineno  # type: ignore[operator]

    def _class(self, node: ast.ClassDef, outer: ClassInfo | None, in_function: bool) -> None:
        if in_function:  # a class built inside a function is not one of the module's
            self._block(node.body, None, True)
            return
        prefix = outer.qualname if outer is not None else self.modname
        info = ClassInfo(node, f"{prefix}.{node.name}" if prefix else node.name, node.name)
        self.classes.append(info)
        self._block(node.body, info, False)

    def _import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.asname:
                self.imports[alias.asname] = alias.name
            else:
                head = alias.name.split(".")[0]
                self.imports.setdefault(head, head)

    def _import_from(self, node: ast.ImportFrom) -> None:
        if any(alias.name == "*" for alias in node.names):
            return
        base = absolute_base(node, self.package)
        for alias in node.names:
            self.imports[alias.asname or alias.name] = f"{base}.{alias.name}" if base else alias.name


def import_lines(source: str) -> list[int]:
    """The numbers of the lines whose text holds ``import``, in order, as the parser numbers
    lines (``\\n``, ``\\r\\n`` and ``\\r`` end one): every import statement stands on one."""
    if "\r" in source:
        source = source.replace("\r\n", "\n").replace("\r", "\n")
    return line_numbers(source, find_all(source, "import"))


def package_of(path: str, modname: str) -> str:
    """The package relative imports of ``path`` start from."""
    return modname if path.endswith("__init__.py") else modname.rpartition(".")[0]


# -- one class's facts ------------------------------------------------------------------------
def _is_class_name(name: str | None) -> bool:
    return bool(name) and name.split(".")[-1][:1].isupper()  # type: ignore[union-attr]


def _is_self_attribute(node: ast.expr) -> TypeGuard[ast.Attribute]:
    """``self.<name>``: what ``dotted`` spells ``self.<name>`` with one dot, read without
    spelling it (every assignment target of an ``__init__`` is asked)."""
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"


class MethodTexts:
    """A module's method texts (``FileContext.text_of``), each joined once: the class table
    gates three walks on a method's text (``super``, ``raise``, ``return``), the return facts
    one per flag (``self.<flag>``), the cheap tier its layer loops."""

    def __init__(self, ctx: FileContext) -> None:
        self.text_of = ctx.text_of
        self.texts: dict[ast.stmt, str] = {}

    def __call__(self, node: ast.stmt) -> str:
        text = self.texts.get(node)
        if text is None:
            text = self.texts[node] = self.text_of(node)
        return text


class ClassReader:
    """A class's facts, read from its node through the module's names (``ctx``)."""

    def __init__(self, ctx: FileContext, text_of: Callable[[ast.stmt], str] | None = None) -> None:
        self.ctx = ctx
        self.text_of = text_of or ctx.text_of
        # The local classes a bare name can mention (see init_assignments), and each
        # ``__init__``'s parameters, read once: every assignment in it may ask for them.
        self.capitalised = frozenset(name for name in ctx.local_classes if name[:1].isupper())
        self._parameters: dict[FunctionNode, list[Param]] = {}

    def parameters(self, init: FunctionNode) -> list[Param]:
        """``parameters(init, kwonly=True)``, computed once per ``__init__``."""
        params = self._parameters.get(init)
        if params is None:
            params = self._parameters[init] = parameters(init, kwonly=True)
        return params

    def fact(self, info: ClassInfo) -> F.ClassFact:
        ctx = self.ctx
        bases = []
        for base in info.node.bases:
            text = dotted(base)
            if text is None and isinstance(base, ast.Subscript):
                text = dotted(base.value)  # Generic[T] -> Generic
            if text is not None:
                bases.append(ctx.resolve(text))
        init = info.methods.get("__init__")
        return F.ClassFact(
            name=info.name,
            qualname=info.qualname,
            location=ctx.loc(info.node),
            bases=tuple(bases),
            methods=tuple(sorted(info.methods)),
            assignments=tuple(self.init_assignments(info, init)) if init is not None else (),
            raise_checks=self.raise_checks(info),
            factories=self.factories(info),
            super_args=self.super_args(init),
            extends=self.extends(info),
            class_values=class_values(info.node, ctx.resolve),
            method_lines=tuple(sorted((n, fn.lineno) for n, fn in info.methods.items())),
        )

    def extends(self, info: ClassInfo) -> tuple[str, ...]:
        """Methods that call ``super().<their name>(...)``: they run the base's version too."""
        out = []
        for name, fn in info.methods.items():
            text = self.text_of(fn)
            if "super" in text and f"super().{name}(" in "".join(text.split()):
                out.append(name)
        return tuple(sorted(out))

    def raise_checks(self, info: ClassInfo) -> tuple[F.RaiseCheck, ...]:
        """``if <condition>: raise ...`` in each method: a fixed-slot collector's count check
        (read when a trace counts fewer captures than slots)."""
        out: list[F.RaiseCheck] = []
        for name, fn in info.methods.items():
            if "raise" not in self.text_of(fn):
                continue  # cheap gate: no raise statement, no check
            for node in all_statements(fn.body):  # an if is a statement: no expression walk
                if isinstance(node, ast.If) and any(isinstance(b, ast.Raise) for b in node.body):
                    out.append(F.RaiseCheck(name, ast.unparse(node.test), F.Location(self.ctx.path, node.lineno)))
        out.sort(key=lambda c: (c.location.line, c.method))
        return tuple(out)

    def factories(self, info: ClassInfo) -> tuple[F.AttributeAssignment, ...]:
        """Methods that return a newly built class (``def _init_model(...): return Cls(...)``)."""
        out: list[F.AttributeAssignment] = []
        for name, fn in info.methods.items():
            if name.startswith("__") or "return" not in self.text_of(fn):
                continue
            for stmt in walk_statements(fn.body):
                if isinstance(stmt, ast.Return) and isinstance(stmt.value, ast.Call):
                    callee = dotted(stmt.value.func)
                    if _is_class_name(callee):
                        out.append(F.AttributeAssignment(name, self.ctx.resolve(callee), self.ctx.line(stmt)))  # type: ignore[arg-type]
                        break
        return tuple(out)

    def super_args(self, init: FunctionNode | None) -> tuple[F.AttributeAssignment, ...]:
        """Classes a subclass hands to its base's ``__init__`` (``super().__init__(c, q, p, Cls)``),
        a parameter of its own resolved to its default."""
        if init is None:
            return ()
        defaults = {p.name: dotted(p.default) for p in self.parameters(init) if p.default is not None}
        out: list[F.AttributeAssignment] = []
        for stmt in walk_statements(init.body):
            call = stmt.value if isinstance(stmt, ast.Expr) else None
            if not (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and call.func.attr == "__init__"
                and isinstance(call.func.value, ast.Call)
            ):
                continue
            if last_name(call.func.value.func) != "super":
                continue
            args = arguments(call)
            unnamed = [a for a in args if a.keyword is None]
            for arg in args:
                ref = dotted(arg.value) or ""
                ref = defaults.get(ref) or ref
                if _is_class_name(ref):
                    key = arg.keyword if arg.keyword is not None else f"#{unnamed.index(arg)}"
                    out.append(F.AttributeAssignment(key, self.ctx.resolve(ref), self.ctx.line(arg.node)))
        return tuple(out)

    def init_assignments(self, info: ClassInfo, init: FunctionNode) -> list[F.AttributeAssignment]:
        """``self.x = Cls(...)`` (or via a ``self._make()`` that returns ``Cls(...)``), plus every
        class constructed anywhere in ``__init__`` under the pseudo-attribute ``*``."""
        out: list[F.AttributeAssignment] = []
        ctx, seen, names, assigned = self.ctx, set(), set(), self.assigned

        def mention(name: str, node: ast.AST) -> None:
            if name in names:  # resolved and seen already
                return
            names.add(name)
            resolved = ctx.resolve(name)
            if resolved not in seen:
                seen.add(resolved)
                out.append(F.AttributeAssignment("*", resolved, ctx.line(node)))

        def visit_assign(node: ast.Assign) -> None:
            for target in node.targets:
                assigned(info, node, target, node.value, out)

        def visit_ann_assign(node: ast.AnnAssign) -> None:
            # `self.language_model: FooForCausalLM = build(...)`: the annotation changes nothing
            if node.value is not None:
                assigned(info, node, node.target, node.value, out)

        def visit_call(node: ast.Call) -> None:
            name = _called_class(node)
            if name is not None:
                mention(name, node)

        capitalised = self.capitalised

        def visit_name(node: ast.Name) -> None:
            # a class referenced without being called: `decoder_layer_type or FooLayer`
            if node.id in capitalised:
                mention(node.id, node)

        handlers: dict[type, Callable[[Any], None]] = {
            ast.Assign: visit_assign,
            ast.AnnAssign: visit_ann_assign,
            ast.Call: visit_call,
        }
        if capitalised:  # else no name is worth a call per name node
            handlers[ast.Name] = visit_name
        visit_each(init.body, handlers)
        for default, node in _class_defaults(self.parameters(init)):
            mention(default, node)
        return out

    def assigned(
        self,
        info: ClassInfo,
        node: ast.Assign | ast.AnnAssign,
        target: ast.expr,
        value: ast.expr,
        out: list[F.AttributeAssignment],
    ) -> None:
        """``self.<name> = <what builds a class>`` in ``info``'s ``__init__``, added to ``out``."""
        if _is_self_attribute(target):  # self.<name> = ...
            callee = self.constructed_class(info, value) or dynamic_build(value)
            if callee:
                out.append(
                    F.AttributeAssignment(target.attr, callee, self.ctx.line(node), self.assignment_via(info, value))
                )

    def assignment_via(self, info: ClassInfo, value: ast.expr) -> str | None:
        """How a subclass could change the class built here (see AttributeAssignment.via)."""
        if not isinstance(value, ast.Call):
            return None
        name = dotted(value.func) or ""
        if name.startswith("self.") and name.count(".") == 1 and name[5:] in info.methods:
            return f"method:{name[5:]}"
        if name.startswith("self.") and name.count(".") == 1 and class_attribute(info, name[5:]):
            return f"attr:{name[5:]}"  # model_cls = FooModel; self.model_cls(...): a subclass may set it
        init = info.methods.get("__init__")
        if init is not None and "." not in name:  # parameters(init): the first of them, keyword-only ones after
            params = [p.name for p in self.parameters(init)[: len(init.args.args)] if p.name != "self"]
            if name in params:
                return f"param:{name}#{params.index(name)}"
        return None

    def constructed_class(self, info: ClassInfo, value: ast.expr) -> str | None:
        if isinstance(value, ast.IfExp):
            return self.constructed_class(info, value.body) or self.constructed_class(info, value.orelse)
        if not isinstance(value, ast.Call):
            return None
        name = dotted(value.func)
        if not name:
            return None
        if name.startswith("self.") and name.count(".") == 1:
            return self.built_by_self(info, name[5:])
        if _is_class_name(name):
            return self.ctx.resolve(name)
        init = info.methods.get("__init__")
        default = parameter_class(self.parameters(init), name) if init is not None else None
        return self.ctx.resolve(default) if default else _factory_class(value, self.ctx.resolve)

    def built_by_self(self, info: ClassInfo, attribute: str) -> str | None:
        """The class ``self.<attribute>(...)`` builds: what the method of that name returns
        (``def _init_model(...): return Cls(...)``), else a class attribute
        (``model_cls = FooModel``)."""
        method = info.methods.get(attribute)
        if method is not None:
            for stmt in walk_statements(method.body):
                if isinstance(stmt, ast.Return) and stmt.value is not None:
                    return self.constructed_class(info, stmt.value)
        alias = class_attribute(info, attribute)
        return self.ctx.resolve(alias) if alias else None


def _called_class(call: ast.Call) -> str | None:
    """The callee of ``call`` spelt out (``dotted``) when it names a class (:func:`_is_class_name`),
    its last part tested first: most calls are not, and are not spelt."""
    last = last_name(call.func)
    return dotted(call.func) if last is not None and last[:1].isupper() else None


def dynamic_build(value: ast.expr) -> str | None:
    """``init_model(..., hf_config=config.text_config)``: an object built at run time from a
    sub-config of the target's config; which class it is depends on that config's
    ``architectures``. Recorded as ``dynamic:<sub-config>``."""
    if not isinstance(value, ast.Call):
        return None
    name = last_name(value.func) or ""
    if name[:1].isupper():
        return None
    for arg in arguments(value):
        ref = dotted(arg.value) or ""
        parts = ref.split(".")
        if (
            len(parts) >= 2
            and parts[-1].endswith("_config")
            and any(p == "config" or p.endswith("_config") or p == "hf_config" for p in parts[:-1])
        ):
            return f"dynamic:{parts[-1]}"
    return None


def parameter_class(params: list[Param], name: str) -> str | None:
    """A class handed in as an ``__init__`` parameter (``params``, keyword-only ones included):
    ``def __init__(..., model_cls=FooModel)``."""
    if "." in name:
        return None
    for param in params:
        if param.name == name and param.default is not None:
            default = dotted(param.default)
            if _is_class_name(default):
                return default
    return None


def class_attribute(info: ClassInfo, attribute: str) -> str | None:
    """``attribute = SomeName`` in the class body, as dotted text."""
    for stmt in info.node.body:
        if isinstance(stmt, ast.Assign) and any(is_name(t, attribute) for t in stmt.targets):
            return dotted(stmt.value)
        if isinstance(stmt, ast.AnnAssign) and is_name(stmt.target, attribute) and stmt.value is not None:
            return dotted(stmt.value)
    return None


def class_values(node: ast.ClassDef, resolve: Callable[[str], str]) -> tuple[F.AttributeAssignment, ...]:
    """Class-body ``name = Cls`` / ``name: T = Cls`` naming a class (``model_cls = FooModel``)."""
    out = []
    for stmt in node.body:
        if isinstance(stmt, ast.Assign):
            targets, value = stmt.targets, dotted(stmt.value)
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            targets, value = [stmt.target], dotted(stmt.value)
        else:
            continue
        if not _is_class_name(value):
            continue
        for target in targets:
            if isinstance(target, ast.Name):
                out.append(F.AttributeAssignment(target.id, resolve(value), stmt.lineno))  # type: ignore[arg-type]
    return tuple(out)


def _class_defaults(params: list[Param]) -> list[tuple[str, ast.AST]]:
    """Classes handed in as parameter defaults (``params``, keyword-only ones included):
    ``def __init__(..., layer_type=FooLayer)``."""
    out: list[tuple[str, ast.AST]] = []
    for param in params:
        default = dotted(param.default) if param.default is not None else None
        if _is_class_name(default):
            out.append((default, param.node))  # type: ignore[arg-type]
    return out


def _factory_class(value: ast.Call, resolve: Callable[[str], str]) -> str | None:
    """The class a factory call is handed: an architecture name for the registry
    (``initialize_model(..., architectures=["X"])`` gives ``arch:X``), else a class handed
    positionally or as ``*cls*`` / ``*class*`` (``model_class=FooForCausalLM``)."""
    args = arguments(value)
    for arg in args:
        if arg.keyword == "architectures" and isinstance(arg.value, (ast.List, ast.Tuple)):
            architecture = string_value(arg.value.elts[0] if arg.value.elts else None)
            if architecture is not None:
                return f"arch:{architecture}"  # resolved through the registry
    for arg in args:
        ref = dotted(arg.value)
        if _is_class_name(ref) and (arg.keyword is None or "cls" in arg.keyword or "class" in arg.keyword):
            return resolve(ref)  # type: ignore[arg-type]
    return None


# -- registrations ----------------------------------------------------------------------------
def registrations(ctx: FileContext, structure: Structure, tree: ast.Module) -> tuple[F.RegistryFact, ...]:
    """The models this module registers: entry variables (``EntryClass = [A, B]``), registry
    dicts (``{"Arch": ("module", "Class")}``) in the profile's dict files, and the setter-less
    engines' ``NAME.update({...})`` and ``@register("Arch")`` (index/config_sources)."""
    conv = ctx.conv
    out: list[F.RegistryFact] = []
    dict_file = conv.is_dict_file(ctx.path)
    patterns = [re.compile(p) for p in conv.dict_name_patterns]
    prefix = conv.dict_module_prefixes[0] if conv.dict_module_prefixes else ""
    for node in structure.module_assigns:
        value = node.value
        assert value is not None  # the structure keeps annotated assignments with a value only
        for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
            name = dotted(target)
            if not name:
                continue
            if name in conv.entry_variables:
                out += _entry_classes(ctx, node, value)
            elif dict_file and any(p.match(name) for p in patterns) and isinstance(value, ast.Dict):
                out += _registry_dict(ctx, value, name, prefix)
    if conv.registry_decorators or (dict_file and conv.dict_files):
        from flowtrace.index.config_sources import registry_decorators, registry_updates

        if dict_file:
            out += registry_updates(tree, ctx.path, conv, patterns)
        if conv.registry_decorators:
            out += registry_decorators(tree, ctx.path, ctx.modname, conv)
    return tuple(out)


def _entry_classes(ctx: FileContext, node: ast.stmt, value: ast.expr) -> list[F.RegistryFact]:
    out = []
    for element in value.elts if isinstance(value, (ast.List, ast.Tuple)) else [value]:
        ref = dotted(element.value if isinstance(element, ast.Starred) else element)
        if ref:
            out.append(F.RegistryFact(ref.split(".")[-1], ctx.resolve(ref), ctx.loc(node), F.RegistryKind.ENTRY_CLASS))
    return out


def _registry_dict(ctx: FileContext, table: ast.Dict, name: str, prefix: str) -> list[F.RegistryFact]:
    """``{"Arch": ("module", "Class"), ...}`` entries of a registry dict named ``name``."""
    out: list[F.RegistryFact] = []
    for key, value in zip(table.keys, table.values):
        architecture = string_value(key)
        if key is None or architecture is None:
            continue
        if isinstance(value, ast.Tuple) and len(value.elts) >= 2:
            mod, cls = string_value(value.elts[0]), string_value(value.elts[1])
            if mod is not None and cls is not None:
                out.append(
                    F.RegistryFact(
                        architecture,
                        f"{registry_module(prefix, mod)}.{cls}",
                        ctx.loc(key),
                        F.RegistryKind.REGISTRY_DICT,
                        name,
                    )
                )
    return out


def registry_module(prefix: str, module: str) -> str:
    """The module a registry entry names: relative to the profile's prefix, unless it already
    starts at the prefix's top package (an absolute ``pkg.models.x`` is not prefixed twice)."""
    top = prefix.split(".", 1)[0]
    if top and module.startswith(top + "."):
        return module
    return f"{prefix}{module}"


# -- the tables both tiers share --------------------------------------------------------------
def module_tables(
    ctx: FileContext, structure: Structure, tree: ast.Module, texts: MethodTexts | None = None
) -> F.FileFacts:
    """The facts every tier extracts from a parsed module: imports, classes, registrations,
    a package ``__init__``'s imports (index/packages.py) and the return-path facts
    (index/returns.py). ``texts``: the method texts, when the caller reads them too."""
    texts = texts if texts is not None else MethodTexts(ctx)
    reader = ClassReader(ctx, texts)
    uses, shapes, flags = module_facts(ctx.path, ctx.modname, tree, texts)
    return F.FileFacts(
        path=ctx.path,
        module=ctx.modname,
        imports=tuple(F.ImportFact(k, v) for k, v in sorted(structure.imports.items())),
        classes=tuple(reader.fact(info) for info in structure.classes),
        registry=registrations(ctx, structure, tree),
        package_imports=package_imports(ctx.path, tree, structure.package),
        output_uses=uses,
        return_shapes=shapes,
        flag_defaults=flags,
    )


def module_context(path: str, source: str, tree: ast.Module, conv: Conventions) -> tuple[FileContext, Structure]:
    """The module's structure and the context its facts are read through."""
    modname = module_name(path, conv.package)
    structure = Structure(tree, modname, package_of(path, modname), import_lines(source))
    ctx = FileContext(path, modname, SourceText(source, tree), conv, structure.imports, structure.local_classes)
    return ctx, structure


# -- the cheap tier ---------------------------------------------------------------------------
def table_facts(path: str, data: bytes, conv: Conventions) -> F.FileFacts:
    """The module's tables (:func:`module_tables`) and its layer loops, none of them capturing.

    The cyclic GC is off meanwhile, as in ``parse.analyze_bytes``: an ``ast`` tree is acyclic
    (refcounting frees it), and each collection its allocations set off would also traverse
    every fact the process holds (a quarter of this tier's cost)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _table_facts(path, data, conv)
    finally:
        if enabled:
            gc.enable()


def _table_facts(path: str, data: bytes, conv: Conventions) -> F.FileFacts:
    try:
        tree = ast.parse(data, filename=path)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        line = getattr(exc, "lineno", 0) or 0
        return F.FileFacts.unparsed(
            path, module_name(path, conv.package), f"syntax error: {exc}", F.DiagnosticKind.PARSE_ERROR, line
        )
    ctx, structure = module_context(path, decode(data), tree, conv)
    texts = MethodTexts(ctx)
    loops = tuple(loop for info in structure.classes for loop in _class_loops(info, path, conv, texts))
    return dataclasses.replace(module_tables(ctx, structure, tree, texts), layer_loops=loops)


def _class_loops(info: ClassInfo, path: str, conv: Conventions, texts: MethodTexts) -> list[F.LayerLoopFact]:
    # No capture marker in this file, so any layer loop here runs without capturing.
    return [
        F.LayerLoopFact(info.qualname, f"{info.name}.{method_name}", F.Location(path, loop_line), False)
        for method_name, method in sorted(info.methods.items())
        if _may_loop_layers(texts(method), conv.layers_attributes)
        for loop_line in _layer_loops(method, conv.layers_attributes, texts.text_of)
    ]


def _may_loop_layers(text: str, layers_attributes: frozenset[str]) -> bool:
    """The gate of the per-method and per-loop walks, on their own source text (the class table
    joins each method's text anyway): walking every method of a 3,000-line file for loops costs
    more than parsing it, and a walk can only find a loop whose text says ``for`` and names a
    layers attribute."""
    return "for" in text and any(a in text for a in layers_attributes)


def _layer_loops(method: FunctionNode, layers: frozenset[str], text_of: Callable[[ast.stmt], str]) -> list[int]:
    """Lines of `for` loops that run the decoder layers (iterate or index self.<layers>);
    only loops whose text names a layers attribute are walked."""
    loops = [n for n in all_statements(method.body) if n.__class__ is ast.For and _may_loop_layers(text_of(n), layers)]
    if len(loops) > 1:  # in the order ast.walk meets them (breadth first), as they always were
        loops = [n for n in _walk(method) if n.__class__ is ast.For and _may_loop_layers(text_of(n), layers)]
    lines = []
    for node in loops:
        touches = any(
            isinstance(sub, ast.Attribute)
            and sub.attr in layers
            and isinstance(sub.value, ast.Name)
            and sub.value.id == "self"
            for part in [node.iter, *node.body]
            for sub in _walk(part)
        )
        if touches:
            lines.append(node.lineno)
    return lines
