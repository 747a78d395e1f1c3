"""The cheap tier: classes, bases, imports and registrations with the stdlib parser.

Most files a scan must know about only register a model class or subclass one (an
``EntryClass = Foo`` file, a ``class Bar(LlamaForCausalLM): pass``). They carry no capture
facts, so parsing them with libcst (about 4x slower than ``ast``, and far slower once
visited) buys nothing. This module reads just the table the cross-file resolution needs.
Files that name a capture marker go to the libcst analysers instead.
"""

from __future__ import annotations

import ast
import re

from flowtrace.model import facts as F
from flowtrace.index.syntax import module_name
from flowtrace.engines.profiles import Conventions


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr}" if head else None
    return None


def _layer_loops(method: ast.AST, layers_attributes: frozenset[str]) -> list[int]:
    """Lines of `for` loops that run the decoder layers (iterate or index self.<layers>)."""
    lines = []
    for node in ast.walk(method):
        if not isinstance(node, ast.For):
            continue
        touches = any(
            isinstance(sub, ast.Attribute) and sub.attr in layers_attributes and isinstance(sub.value, ast.Name) and sub.value.id == "self"
            for part in [node.iter, *node.body]
            for sub in ast.walk(part)
        )
        if touches:
            lines.append(node.lineno)
    return lines


def table_facts(path: str, data: bytes, conv: Conventions) -> F.FileFacts:
    modname = module_name(path)
    try:
        tree = ast.parse(data, filename=path)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        line = getattr(exc, "lineno", 0) or 0
        return F.FileFacts(path, modname, diagnostics=(F.Diagnostic(path, line, f"syntax error: {exc}", "parse-error"),))
    package = modname if path.endswith("__init__.py") else modname.rpartition(".")[0]
    imports: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    imports[alias.asname] = alias.name
                else:
                    head = alias.name.split(".")[0]
                    imports.setdefault(head, head)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".") if package else []
                anchor = ".".join(parts[: max(len(parts) - (node.level - 1), 0)])
                base = ".".join(x for x in (anchor, base) if x)
            for alias in node.names:
                if alias.name != "*":
                    imports[alias.asname or alias.name] = f"{base}.{alias.name}" if base else alias.name
    local = {n.name: f"{modname}.{n.name}" for n in tree.body if isinstance(n, ast.ClassDef)}

    def resolve(name: str) -> str:
        head, _, rest = name.partition(".")
        if head in imports:
            return f"{imports[head]}.{rest}" if rest else imports[head]
        if head in local and not rest:
            return local[head]
        return name

    classes = []
    loops: list[F.LayerLoopFact] = []
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        bases = []
        for b in node.bases:
            text = _dotted(b.value if isinstance(b, ast.Subscript) else b)
            if text:
                bases.append(resolve(text))
        methods = {m.name: m for m in node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))}
        for method_name, method in sorted(methods.items()):
            for loop_line in _layer_loops(method, conv.layers_attributes):
                # No capture marker in this file, so any layer loop here runs without capturing.
                loops.append(F.LayerLoopFact(local[node.name], f"{node.name}.{method_name}", F.Location(path, loop_line), False))
        assignments = []
        init = methods.get("__init__")
        if init is not None:
            for sub in ast.walk(init):
                if isinstance(sub, ast.Assign) and isinstance(sub.value, ast.Call):
                    callee = _dotted(sub.value.func)
                    for target in sub.targets:
                        t = _dotted(target)
                        if callee and t and t.startswith("self.") and t.count(".") == 1 and callee.split(".")[-1][:1].isupper():
                            assignments.append(F.AttributeAssignment(t[5:], resolve(callee), sub.lineno))
                if isinstance(sub, ast.Call):
                    callee = _dotted(sub.func)
                    if callee and callee.split(".")[-1][:1].isupper():
                        assignments.append(F.AttributeAssignment("*", resolve(callee), sub.lineno))
                elif isinstance(sub, ast.Name) and sub.id in local and isinstance(sub.ctx, ast.Load):
                    assignments.append(F.AttributeAssignment("*", local[sub.id], sub.lineno))
            defaults = init.args.defaults + [d for d in init.args.kw_defaults if d is not None]
            for default in defaults:
                name = _dotted(default)
                if name and name.split(".")[-1][:1].isupper():
                    assignments.append(F.AttributeAssignment("*", resolve(name), default.lineno))
            unique: dict[tuple[str, str], F.AttributeAssignment] = {}
            for a in assignments:
                unique.setdefault((a.attribute, a.callee), a)
            assignments = list(unique.values())
        assignments.sort(key=lambda a: (a.line, a.attribute != "*"))
        classes.append(
            F.ClassFact(node.name, local[node.name], F.Location(path, node.lineno), tuple(bases), tuple(sorted(methods)), tuple(assignments))
        )

    registry = []
    patterns = [re.compile(p) for p in conv.dict_name_patterns]
    for node in tree.body:
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            name = _dotted(target)
            if name in conv.entry_variables:
                values = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
                for v in values:
                    ref = _dotted(v)
                    if ref:
                        registry.append(F.RegistryFact(ref.split(".")[-1], resolve(ref), F.Location(path, node.lineno), "entry_class"))
            elif name and any(p.match(name) for p in patterns) and any(path.endswith(d) for d in conv.dict_files) and isinstance(node.value, ast.Dict):
                prefix = conv.dict_module_prefixes[0] if conv.dict_module_prefixes else ""
                for key, value in zip(node.value.keys, node.value.values):
                    if isinstance(key, ast.Constant) and isinstance(key.value, str) and isinstance(value, ast.Tuple) and len(value.elts) >= 2:
                        mod, cls = value.elts[0], value.elts[1]
                        if isinstance(mod, ast.Constant) and isinstance(cls, ast.Constant):
                            registry.append(F.RegistryFact(key.value, f"{registry_module(prefix, mod.value)}.{cls.value}", F.Location(path, key.lineno), "registry_dict", name))
    return F.FileFacts(
        layer_loops=tuple(loops),
        path=path,
        module=modname,
        imports=tuple(F.ImportFact(k, v) for k, v in sorted(imports.items())),
        classes=tuple(classes),
        registry=tuple(registry),
    )


def registry_module(prefix: str, module: str) -> str:
    """The module a registry entry names: relative to the profile's prefix, unless it already
    starts at the prefix's top package (an absolute ``pkg.models.x`` is not prefixed twice)."""
    top = prefix.split(".", 1)[0]
    if top and module.startswith(top + "."):
        return module
    return f"{prefix}{module}"
