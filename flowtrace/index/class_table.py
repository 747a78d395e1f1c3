"""The cheap tier: classes, bases, imports and registrations with the stdlib parser.

Most files a scan must know about only register a model class or subclass one (an
``EntryClass = Foo`` file, a ``class Bar(LlamaForCausalLM): pass``). They carry no capture
facts, so running the full analysers over them (index/visitors.py and the loop, setter
and stream analysers) buys nothing. This module reads just the table the cross-file
resolution needs. Files that name a capture marker go to the full analysers instead.
"""

from __future__ import annotations

import ast
import gc
import re
from dataclasses import dataclass

from flowtrace.model import facts as F
from flowtrace.index.returns import module_facts, nodes as _walk
from flowtrace.index.syntax import all_statements, dotted, module_name, string_value
from flowtrace.engines.profiles import Conventions


def _layer_loops(method: ast.FunctionDef | ast.AsyncFunctionDef, layers_attributes: frozenset[str], source: _Source) -> list[int]:
    """Lines of `for` loops that run the decoder layers (iterate or index self.<layers>);
    only loops whose text names a layers attribute are walked."""
    loops = [n for n in all_statements(method.body) if n.__class__ is ast.For and source.may_loop_layers(source.of(n))]
    if len(loops) > 1:  # in the order ast.walk meets them (breadth first), as they always were
        loops = [n for n in _walk(method) if n.__class__ is ast.For and source.may_loop_layers(source.of(n))]
    lines = []
    for node in loops:
        touches = any(
            isinstance(sub, ast.Attribute) and sub.attr in layers_attributes and isinstance(sub.value, ast.Name) and sub.value.id == "self"
            for part in [node.iter, *node.body]
            for sub in _walk(part)
        )
        if touches:
            lines.append(node.lineno)
    return lines


class _Source:
    """The file's lines, to gate the per-method walks on the method's own text: walking every
    method of a 3,000-line file for loops, ``super()`` calls, raises and returns costs more
    than parsing it, and a walk can only find what the text names."""

    def __init__(self, data: bytes, layers_attributes: frozenset[str]) -> None:
        self.lines = data.splitlines(keepends=True)  # bytes split on \n, \r\n, \r: the parser's lines
        self.layers = tuple(a.encode() for a in layers_attributes)

    def of(self, node: ast.stmt) -> bytes:
        return b"".join(self.lines[node.lineno - 1 : node.end_lineno])

    def may_loop_layers(self, text: bytes) -> bool:
        return b"for" in text and any(a in text for a in self.layers)


@dataclass(frozen=True, slots=True)
class _Names:
    """How a name written in this module resolves: its imports, then its own classes."""

    module: str
    imports: dict[str, str]
    local: dict[str, str]  # class name -> qualified name

    def resolve(self, name: str) -> str:
        head, _, rest = name.partition(".")
        if head in self.imports:
            return f"{self.imports[head]}.{rest}" if rest else self.imports[head]
        if head in self.local and not rest:
            return self.local[head]
        return name


def _package(path: str, modname: str) -> str:
    return modname if path.endswith("__init__.py") else modname.rpartition(".")[0]


def _from_base(node: ast.ImportFrom, package: str) -> str:
    """The absolute module a (possibly relative) ``from ... import`` reads from."""
    base = node.module or ""
    if not node.level:
        return base
    parts = package.split(".") if package else []
    anchor = ".".join(parts[: max(len(parts) - (node.level - 1), 0)])
    return ".".join(x for x in (anchor, base) if x)


def _module_statements(body: list[ast.stmt]) -> list[ast.stmt]:
    """Module-level statements in source order, into ``if``/``try``/``with`` blocks (a package
    ``__init__`` that picks its re-exports per platform) but not into defs or classes."""
    out: list[ast.stmt] = []
    for node in body:
        out.append(node)
        if isinstance(node, (ast.If, ast.With)):
            out += _module_statements(node.body + getattr(node, "orelse", []))
        elif isinstance(node, ast.Try):
            handlers = [stmt for h in node.handlers for stmt in h.body]
            out += _module_statements(node.body + handlers + node.orelse + node.finalbody)
    return out


def _imports(body: list[ast.stmt], package: str) -> dict[str, str]:
    """Module-level imports: local name -> what it refers to (as the full analysers record them:
    in source order, a later binding of a name replacing an earlier one)."""
    imports: dict[str, str] = {}
    for node in _module_statements(body):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    imports[alias.asname] = alias.name
                else:
                    head = alias.name.split(".")[0]
                    imports.setdefault(head, head)
        elif isinstance(node, ast.ImportFrom):
            base = _from_base(node, package)
            for alias in node.names:
                if alias.name != "*":
                    imports[alias.asname or alias.name] = f"{base}.{alias.name}" if base else alias.name
    return imports


def package_reexports(path: str, body: list[ast.stmt], package: str) -> tuple[F.ImportFact, ...]:
    """Every module-level ``from X import Y [as Z]`` of a package ``__init__`` (branches
    included, none replacing another; those of a module ``__getattr__`` too, not those only
    for type checkers): what a registry entry naming the package may load, one per platform
    (``from .gpu import A as B`` / ``from other.pkg import B``)."""
    if not path.endswith("__init__.py"):
        return ()
    runtime: list[ast.stmt] = []
    for n in body:  # what runs: an `if TYPE_CHECKING:` block's body is for type checkers only
        typing_only = isinstance(n, ast.If) and dotted(n.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
        runtime.extend(n.orelse if typing_only else [n])  # type: ignore[attr-defined]
    lazy = [n for n in body if isinstance(n, ast.FunctionDef) and n.name == "__getattr__"]  # PEP 562 lazy re-exports
    statements = _module_statements(runtime) + [s for f in lazy for s in ast.walk(f) if isinstance(s, ast.ImportFrom)]
    out: list[F.ImportFact] = []
    for node in statements:
        if isinstance(node, ast.ImportFrom):
            base = _from_base(node, package)
            out.extend(F.ImportFact(a.asname or a.name, f"{base}.{a.name}" if base else a.name) for a in node.names if a.name != "*")
    return tuple(out)


def _is_class_name(dotted_name: str | None) -> bool:
    return bool(dotted_name) and dotted_name.split(".")[-1][:1].isupper()  # type: ignore[union-attr]


def _bases(node: ast.ClassDef, names: _Names) -> tuple[str, ...]:
    bases = []
    for b in node.bases:
        text = dotted(b.value if isinstance(b, ast.Subscript) else b)  # Generic[T] -> Generic
        if text:
            bases.append(names.resolve(text))
    return tuple(bases)


def _init_mentions(init_nodes: list[ast.AST], names: _Names, values: dict[str, str]) -> list[F.AttributeAssignment]:
    """``self.x = Cls(...)`` in ``__init__`` (all its nodes, breadth first), plus every class
    constructed or named there (``*``)."""
    found = []
    call, name, load, local = ast.Call, ast.Name, ast.Load, names.local  # parsed nodes: exact classes
    for sub in init_nodes:
        kind = sub.__class__
        if kind is call:
            callee = dotted(sub.func)  # type: ignore[attr-defined]
            if _is_class_name(callee):
                found.append(F.AttributeAssignment("*", names.resolve(callee), sub.lineno))  # type: ignore[arg-type, attr-defined]
        elif kind is name:
            if sub.id in local and sub.ctx.__class__ is load:  # type: ignore[attr-defined]
                found.append(F.AttributeAssignment("*", local[sub.id], sub.lineno))  # type: ignore[attr-defined]
        elif kind in _ASSIGNS and sub.value.__class__ is call:  # type: ignore[attr-defined]
            found += _self_assignments(sub, names, values)  # type: ignore[arg-type]
    return found


_ASSIGNS = frozenset({ast.Assign, ast.AnnAssign})


def _self_assignments(sub: ast.Assign | ast.AnnAssign, names: _Names, values: dict[str, str]) -> list[F.AttributeAssignment]:
    """``self.x = Cls(...)`` (plain or annotated): x's class; ``self.x = build(...,
    architectures=["Arch"])``: the class the registry names for that architecture (``arch:``);
    ``self.x = self.model_cls(...)``: the class attribute's class, which a subclass may set."""
    call = sub.value
    callee = dotted(call.func)  # type: ignore[union-attr]  # a Call: checked by the caller
    via = None
    if callee and callee.startswith("self.") and callee.count(".") == 1 and callee[5:] in values:
        built: str | None = values[callee[5:]]
        via = f"attr:{callee[5:]}"
    else:
        built = names.resolve(callee) if _is_class_name(callee) else _registry_built(call)  # type: ignore[arg-type]
    if built is None:
        return []
    found = []
    for target in sub.targets if isinstance(sub, ast.Assign) else [sub.target]:
        t = dotted(target)
        if t and t.startswith("self.") and t.count(".") == 1:
            found.append(F.AttributeAssignment(t[5:], built, sub.lineno, via))
    return found


def _registry_built(call: ast.Call) -> str | None:
    """A factory handed a literal architecture list builds the registry's class for its first
    name (as the full analysers record it): the wrapper's own construction, whatever its base
    builds."""
    for kw in call.keywords:
        if kw.arg == "architectures" and isinstance(kw.value, (ast.List, ast.Tuple)) and kw.value.elts:
            first = string_value(kw.value.elts[0])
            return f"arch:{first}" if first is not None else None
    return None


def class_values(node: ast.ClassDef, resolve) -> tuple[F.AttributeAssignment, ...]:  # noqa: ANN001 - name -> qualified name
    """Class-body ``name = Cls`` / ``name: T = Cls`` naming a class (``model_cls = FooModel``),
    as both extraction tiers record them."""
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
                out.append(F.AttributeAssignment(target.id, resolve(value), stmt.lineno))
    return tuple(out)


def _default_mentions(init: ast.FunctionDef | ast.AsyncFunctionDef, names: _Names) -> list[F.AttributeAssignment]:
    """Classes handed in as parameter defaults: ``def __init__(..., layer_type=FooLayer)``."""
    defaults = init.args.defaults + [d for d in init.args.kw_defaults if d is not None]
    found = []
    for default in defaults:
        name = dotted(default)
        if _is_class_name(name):
            found.append(F.AttributeAssignment("*", names.resolve(name), default.lineno))  # type: ignore[arg-type]
    return found


def _assignments(init: ast.FunctionDef | ast.AsyncFunctionDef | None, init_nodes: list[ast.AST], names: _Names, values: dict[str, str]) -> tuple[F.AttributeAssignment, ...]:
    if init is None:
        return ()
    unique: dict[tuple[str, str], F.AttributeAssignment] = {}
    for a in _init_mentions(init_nodes, names, values) + _default_mentions(init, names):
        unique.setdefault((a.attribute, a.callee), a)
    return tuple(sorted(unique.values(), key=lambda a: (a.line, a.attribute != "*")))


def _class_facts(node: ast.ClassDef, names: _Names, path: str, conv: Conventions, source: _Source) -> tuple[F.ClassFact, list[F.LayerLoopFact]]:
    qualname = names.local[node.name]
    methods = {m.name: m for m in node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))}
    texts = {name: source.of(m) for name, m in methods.items()}
    init = methods.get("__init__")
    init_nodes = _walk(init) if init is not None else []  # read twice: the assignments and the super() check
    loops = [
        # No capture marker in this file, so any layer loop here runs without capturing.
        F.LayerLoopFact(qualname, f"{node.name}.{method_name}", F.Location(path, loop_line), False)
        for method_name, method in sorted(methods.items())
        if source.may_loop_layers(texts[method_name])
        for loop_line in _layer_loops(method, conv.layers_attributes, source)
    ]
    values = class_values(node, names.resolve)
    fact = F.ClassFact(
        node.name, qualname, F.Location(path, node.lineno), _bases(node, names), tuple(sorted(methods)),
        _assignments(init, init_nodes, names, {v.attribute: v.callee for v in values}),
        class_values=values,
        factories=_factories({n: m for n, m in methods.items() if b"return" in texts[n]}, names),
        super_args=_super_args(init, names),
        extends=tuple(sorted(n for n, fn in methods.items() if b"super" in texts[n] and _calls_super(init_nodes if fn is init else _walk(fn), n))),
        raise_checks=_raise_checks({n: m for n, m in methods.items() if b"raise" in texts[n]}, path),
        method_lines=tuple(sorted((n, m.lineno) for n, m in methods.items())),
    )
    return fact, loops


def _raise_checks(methods: dict, path: str) -> tuple[F.RaiseCheck, ...]:
    """``if <condition>: raise`` per method, as the full analysers record them (canonical text)."""
    out = []
    for name, fn in methods.items():
        for sub in _statements(fn.body):
            if isinstance(sub, ast.If) and any(isinstance(b, ast.Raise) for b in sub.body):
                out.append(F.RaiseCheck(name, ast.unparse(sub.test), F.Location(path, sub.lineno)))
    return tuple(out)


def _calls_super(fn_nodes: list[ast.AST], name: str) -> bool:
    """``super().<name>(...)`` anywhere in the method (all its nodes): it runs the base's version too."""
    for sub in fn_nodes:
        func = sub.func if isinstance(sub, ast.Call) else None
        if isinstance(func, ast.Attribute) and func.attr == name and isinstance(func.value, ast.Call) and dotted(func.value.func) == "super":
            return True
    return False


def _factories(methods: dict, names: _Names) -> tuple[F.AttributeAssignment, ...]:
    """Methods returning a newly built class (as the full analysers record them)."""
    out = []
    for name, fn in methods.items():
        if name.startswith("__"):
            continue
        for sub in _statements(fn.body):
            if isinstance(sub, ast.Return) and isinstance(sub.value, ast.Call) and _is_class_name(dotted(sub.value.func)):
                out.append(F.AttributeAssignment(name, names.resolve(dotted(sub.value.func)), sub.lineno))  # type: ignore[arg-type]
                break
    return tuple(out)


# Statements not entered by _statements: defs and classes, and those that hold no block.
_LEAF_STATEMENTS = frozenset(
    {ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef}
    | {c for c in ast.stmt.__subclasses__() if not {"body", "orelse", "finalbody", "handlers"} & set(c._fields)}
)


def _statements(body: list[ast.stmt]) -> list[ast.stmt]:
    """Statements of a body in source order, into compound statements but not nested defs
    (a ``try``: its body, ``else``, ``finally``, then its handlers)."""
    out: list[ast.stmt] = []
    for stmt in body:
        out.append(stmt)
        if stmt.__class__ in _LEAF_STATEMENTS:
            continue
        for field in ("body", "orelse", "finalbody"):
            inner = getattr(stmt, field, None)
            if inner:
                out += _statements(inner)
        for handler in getattr(stmt, "handlers", None) or ():
            out += _statements(handler.body)
    return out


def _super_args(init, names: _Names) -> tuple[F.AttributeAssignment, ...]:
    """Classes handed to the base's ``__init__`` through ``super().__init__(...)``."""
    if init is None:
        return ()
    params = init.args.args + init.args.kwonlyargs
    defaults_list = [None] * (len(init.args.args) - len(init.args.defaults)) + list(init.args.defaults) + list(init.args.kw_defaults)
    defaults = {p.arg: dotted(d) for p, d in zip(params, defaults_list) if d is not None}
    out = []
    for sub in _statements(init.body):
        call = sub.value if isinstance(sub, ast.Expr) else None
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "__init__"):
            continue
        if not (isinstance(call.func.value, ast.Call) and dotted(call.func.value.func) == "super"):
            continue
        given = [(f"#{n}", a) for n, a in enumerate(call.args)] + [(k.arg, k.value) for k in call.keywords if k.arg]
        for key, value in given:
            ref = dotted(value) or ""
            ref = defaults.get(ref) or ref
            if _is_class_name(ref):
                out.append(F.AttributeAssignment(key, names.resolve(ref), value.lineno))
    return tuple(out)


def _module_assignments(body: list[ast.stmt]) -> list[tuple[str, ast.expr, int]]:
    """(target, value, line) of module-level ``x = v`` and ``x: T = v`` (the full analysers read both)."""
    out: list[tuple[str, ast.expr, int]] = []
    for node in body:
        if isinstance(node, ast.Assign):
            out.extend((name, node.value, node.lineno) for name in map(dotted, node.targets) if name)
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            name = dotted(node.target)
            if name:
                out.append((name, node.value, node.lineno))
    return out


def _entry_classes(value: ast.expr, line: int, names: _Names, path: str) -> list[F.RegistryFact]:
    values = value.elts if isinstance(value, (ast.List, ast.Tuple)) else [value]
    refs = [ref for ref in map(dotted, values) if ref]
    return [F.RegistryFact(ref.split(".")[-1], names.resolve(ref), F.Location(path, line), F.RegistryKind.ENTRY_CLASS) for ref in refs]


def _dict_entries(name: str, value: ast.Dict, prefix: str, path: str) -> list[F.RegistryFact]:
    """``{"Arch": ("module", "Class"), ...}``: an architecture registry dict."""
    out = []
    for key, entry in zip(value.keys, value.values):
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str) and isinstance(entry, ast.Tuple) and len(entry.elts) >= 2):
            continue
        mod, cls = entry.elts[0], entry.elts[1]
        if isinstance(mod, ast.Constant) and isinstance(cls, ast.Constant) and isinstance(mod.value, str) and isinstance(cls.value, str):
            out.append(F.RegistryFact(key.value, f"{registry_module(prefix, mod.value)}.{cls.value}", F.Location(path, key.lineno), F.RegistryKind.REGISTRY_DICT, name))
    return out


def _registrations(body: list[ast.stmt], names: _Names, path: str, conv: Conventions) -> list[F.RegistryFact]:
    dict_file = conv.is_dict_file(path)
    patterns = [re.compile(p) for p in conv.dict_name_patterns]
    prefix = conv.dict_module_prefixes[0] if conv.dict_module_prefixes else ""
    registry: list[F.RegistryFact] = []
    for name, value, line in _module_assignments(body):
        if name in conv.entry_variables:
            registry.extend(_entry_classes(value, line, names, path))
        elif dict_file and isinstance(value, ast.Dict) and any(p.match(name) for p in patterns):
            registry.extend(_dict_entries(name, value, prefix, path))
    return registry


def table_facts(path: str, data: bytes, conv: Conventions) -> F.FileFacts:
    """Classes, bases, methods, ``__init__`` assignments, layer loops, imports, registrations.

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
    modname = module_name(path, conv.package)
    try:
        tree = ast.parse(data, filename=path)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        line = getattr(exc, "lineno", 0) or 0
        return F.FileFacts.unparsed(path, modname, f"syntax error: {exc}", F.DiagnosticKind.PARSE_ERROR, line)
    local = {n.name: f"{modname}.{n.name}" for n in tree.body if isinstance(n, ast.ClassDef)}
    names = _Names(modname, _imports(tree.body, _package(path, modname)), local)
    classes: list[F.ClassFact] = []
    loops: list[F.LayerLoopFact] = []
    source = _Source(data, conv.layers_attributes)
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            fact, class_loops = _class_facts(node, names, path, conv, source)
            classes.append(fact)
            loops.extend(class_loops)
    uses, shapes, flags = module_facts(path, modname, tree)
    return F.FileFacts(
        output_uses=uses,
        return_shapes=shapes,
        flag_defaults=flags,
        layer_loops=tuple(loops),
        path=path,
        module=modname,
        imports=tuple(F.ImportFact(k, v) for k, v in sorted(names.imports.items())),
        classes=tuple(classes),
        registry=tuple(_registrations(tree.body, names, path, conv)) + _setterless_registrations(tree, path, modname, conv),
        reexports=package_reexports(path, tree.body, _package(path, modname)),
    )


def _setterless_registrations(tree: ast.Module, path: str, modname: str, conv: Conventions) -> tuple[F.RegistryFact, ...]:
    """``NAME.update({...})`` registries and ``@register("Arch")`` decorators (config_sources)."""
    if not (conv.registry_decorators or conv.dict_files):
        return ()
    from flowtrace.index.config_sources import registry_decorators, registry_updates

    out: list[F.RegistryFact] = []
    if conv.is_dict_file(path):
        out += registry_updates(tree, path, conv, [re.compile(p) for p in conv.dict_name_patterns])
    if conv.registry_decorators:
        out += registry_decorators(tree, path, modname, conv)
    return tuple(out)


def registry_module(prefix: str, module: str) -> str:
    """The module a registry entry names: relative to the profile's prefix, unless it already
    starts at the prefix's top package (an absolute ``pkg.models.x`` is not prefixed twice)."""
    top = prefix.split(".", 1)[0]
    if top and module.startswith(top + "."):
        return module
    return f"{prefix}{module}"
