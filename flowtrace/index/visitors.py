"""One pass per file over its stdlib tree: turn a module's syntax into facts.

The pass works in two steps over the same tree: a visitor collects the module's structure
(imports, classes, functions, module-level assignments, and the sites that need an enclosing
function: capture modes, concatenations, config-key reads), then small analysers read the
function bodies it kept (setters, capture loops, layer forwards). Nothing here knows an
engine: every name comes from :class:`flowtrace.engines.profiles.Conventions`.
"""

from __future__ import annotations

import ast
import bisect
import re
from collections.abc import Callable
from typing import Any

from flowtrace.model import facts as F
from flowtrace.index.context import ClassInfo, FileContext
from flowtrace.index.helpers import helper_definition
from flowtrace.index.layer_runs import layer_runs
from flowtrace.index.loops import LoopAnalyzer
from flowtrace.index.setters import SetterAnalyzer
from flowtrace.index.class_table import class_values, package_reexports, registry_module
from flowtrace.index.stream_facts import function_facts, self_calls
from flowtrace.index.syntax import FunctionNode, SourceText, all_statements, arguments, canonical, child_nodes, clip, dotted, is_name, iter_nodes, last_name, module_name, parameters, string_value, visit_each, walk_statements
from flowtrace.engines.profiles import Conventions

_CAT_NAMES = {"cat", "concat", "concatenate"}


class _Collector:
    """Collects structure and the few sites that need the enclosing function's name.

    The structure (imports, classes, methods, module assignments) is read statement by
    statement. A site is an ``Attribute``, ``Call`` or ``Subscript`` whose own text names a
    capture-mode enum, a layer-id key, ``cat`` or ``pack`` (see the ``visit_`` methods), so
    the expressions of a statement are walked only when one of their lines names one
    (``hit_lines``): most of a file's nodes are never visited, and the sites, their order and
    their enclosing functions are those of a walk over every node."""

    def __init__(self, module: str, conv: Conventions, package: str, lines: list[str]) -> None:
        self.module = module
        self.package = package
        self.conv = conv
        self.imports: dict[str, str] = {}
        self.classes: list[ClassInfo] = []
        self.module_assigns: list[ast.Assign | ast.AnnAssign] = []
        self.modes: list[tuple[int, str, str]] = []
        self.concats: list[tuple[int, ast.Call, str]] = []
        self.config_reads: list[tuple[int, str, ast.expr | None, str, ast.AST]] = []
        self._class_stack: list[ClassInfo] = []
        self._func_stack: list[str] = []
        self._key_names = {k.rsplit(".", 1)[-1] for k in conv.layer_id_keys}
        self._hits = _hit_lines(lines, _site_words(conv))

    # -- the walk ----------------------------------------------------------------
    def walk(self, module: ast.Module) -> None:
        self._statements(module.body)

    def _statements(self, block: list) -> None:
        for stmt in block:
            self._statement(stmt)

    def _statement(self, stmt: ast.AST) -> None:
        kind = type(stmt)
        visit = _STRUCTURE.get(kind)
        if visit is not None:
            visit(self, stmt)
        for child in child_nodes(stmt):
            if isinstance(child, _NESTING):
                self._statement(child)  # a statement, an except clause, a match case
            elif self._hit(child):
                self._sites(child)
        if kind is ast.ClassDef:
            self._class_stack.pop()
        elif kind in _FUNCTIONS:
            self._func_stack.pop()

    def _hit(self, node: ast.AST) -> bool:
        first = getattr(node, "lineno", None)
        if first is None:
            return True  # a parameter list, a with item: small, walked
        hits = self._hits
        at = bisect.bisect_left(hits, first)
        return at < len(hits) and hits[at] <= (node.end_lineno or first)  # type: ignore[attr-defined]

    def _sites(self, node: ast.AST) -> None:
        get = _SITES.get
        for current in iter_nodes(node):
            visit = get(type(current))
            if visit is not None:
                visit(self, current)

    def function_name(self) -> str:
        if not self._func_stack:
            return "<module>"
        prefix = f"{self._class_stack[-1].name}." if self._class_stack else ""
        return prefix + self._func_stack[-1]

    # -- imports ---------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.asname:
                self.imports[alias.asname] = alias.name
            else:
                head = alias.name.split(".")[0]
                self.imports.setdefault(head, head)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = node.module or ""
        dots = node.level
        if dots:
            pkg = self.package.split(".") if self.package else []
            keep = len(pkg) - (dots - 1)
            anchor = ".".join(pkg[: max(keep, 0)])
            base = ".".join(x for x in (anchor, base) if x)
        if any(alias.name == "*" for alias in node.names):
            return
        for alias in node.names:
            local = alias.asname or alias.name
            self.imports[local] = f"{base}.{alias.name}" if base else alias.name

    # -- classes and functions -------------------------------------------------
    def visitClassInfoDef(self, node: ast.ClassDef) -> None:
        outer = self._class_stack[-1].qualname if self._class_stack else self.module
        qual = f"{outer}.{node.name}" if outer else node.name
        info = ClassInfo(node, qual, node.name)
        if not self._func_stack:
            self.classes.append(info)
        self._class_stack.append(info)

    def visit_FunctionDef(self, node: FunctionNode) -> None:
        if self._class_stack and not self._func_stack:
            self._class_stack[-1].methods.setdefault(node.name, node)
        self._func_stack.append(node.name)


    # -- module-level assignments (registries) ---------------------------------
    def visit_Assign(self, node: ast.Assign) -> None:
        if not self._func_stack and not self._class_stack:
            self.module_assigns.append(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if not self._func_stack and not self._class_stack and node.value is not None:
            self.module_assigns.append(node)

    # -- sites -----------------------------------------------------------------
    def visit_Attribute(self, node: ast.Attribute) -> None:
        head = last_name(node.value)
        if head and head in self.conv.capture_mode_enums:
            self.modes.append((node.lineno, node.attr, self.function_name()))
        if node.attr in self._key_names:
            self.config_reads.append((node.lineno, node.attr, None, self.function_name(), node))

    def visit_Call(self, node: ast.Call) -> None:
        name = last_name(node.func)
        args = arguments(node) if node.args or node.keywords else []
        if name in _CAT_NAMES and args:
            self.concats.append((node.lineno, node, self.function_name()))
        elif name and "pack" in name.lower() and args and "aux" in name.lower():
            self.concats.append((node.lineno, node, self.function_name()))
        if name in {"getattr", "get"} and args:
            index = 1 if name == "getattr" else 0
            if len(args) > index:
                key = string_value(args[index].value)
                if key is not None and key in self._key_names:
                    default = args[index + 1].value if len(args) > index + 1 else None
                    self.config_reads.append((node.lineno, key, default, self.function_name(), node))

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if not isinstance(node.slice, (ast.Slice, ast.Tuple)):
            key = string_value(node.slice)
            if key is not None and key in self._key_names:
                self.config_reads.append((node.lineno, key, None, self.function_name(), node))


_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_NESTING = (ast.stmt, ast.excepthandler, ast.match_case)
_STRUCTURE: dict[type, Callable[[_Collector, Any], None]] = {
    ast.Import: _Collector.visit_Import,
    ast.ImportFrom: _Collector.visit_ImportFrom,
    ast.ClassDef: _Collector.visitClassInfoDef,
    ast.FunctionDef: _Collector.visit_FunctionDef,
    ast.AsyncFunctionDef: _Collector.visit_FunctionDef,
    ast.Assign: _Collector.visit_Assign,
    ast.AnnAssign: _Collector.visit_AnnAssign,
}
_SITES: dict[type, Callable[[_Collector, Any], None]] = {ast.Attribute: _Collector.visit_Attribute, ast.Call: _Collector.visit_Call, ast.Subscript: _Collector.visit_Subscript}


def _site_words(conv: Conventions) -> re.Pattern[str]:
    """What a site's text must name (the ``visit_`` conditions): an enum, a key, cat, pack."""
    words = sorted({*conv.capture_mode_enums, *(k.rsplit(".", 1)[-1] for k in conv.layer_id_keys)} - {""})
    return re.compile("|".join([*map(re.escape, words), "cat", "(?i:pack)"]))


def _hit_lines(lines: list[str], words: re.Pattern[str]) -> list[int]:
    """The (1-based, ascending) numbers of the lines ``words`` finds something on."""
    search = words.search
    return [number for number, line in enumerate(lines, 1) if search(line)]


class FileAnalyzer(FileContext):
    """Builds :class:`FileFacts` for one module's stdlib tree."""

    def __init__(self, path: str, source: str, module: ast.Module, conv: Conventions) -> None:
        modname = module_name(path, conv.package)
        package = modname if path.endswith("__init__.py") else modname.rpartition(".")[0]
        text = SourceText(source, module)
        self.collector = _Collector(modname, conv, package, text.lines)
        self.collector.walk(module)
        self.reexports = package_reexports(path, module.body, package)
        super().__init__(path, modname, text, conv, self.collector.imports, {c.name: c.qualname for c in self.collector.classes})
        self.watched = conv.attributes | conv.flags

    # -- the whole file ----------------------------------------------------------
    def facts(self) -> F.FileFacts:
        classes: list[F.ClassFact] = []
        setters: list[F.SetterFact] = []
        getters: list[F.DefaultGetterFact] = []
        sites: list[F.CaptureSiteFact] = []
        loops: list[F.LayerLoopFact] = []
        fcs: list[F.FcFact] = []
        uses: list[F.AttributeUseFact] = []
        callbacks: list[F.CallbackUse] = []
        streams: list[F.StreamFact] = []
        helper_defs: list[F.HelperDefFact] = []
        runs: list[F.LayerRunFact] = []
        for info in self.collector.classes:
            loops_before = len(loops)
            classes.append(self.class_fact(info))
            fcs.extend(self.fc_facts(info))
            for name, fn in info.methods.items():
                text = self.text_of(fn)
                if name in self.conv.setters:
                    setters.append(SetterAnalyzer(self, info, fn).fact())
                if name in self.conv.default_getters:
                    getters.append(self.getter_fact(info, fn))
                # Cheap substring gates on the method's own source lines keep the
                # per-method passes off the (many) methods that cannot matter.
                site_facts: list[F.CaptureSiteFact] = []
                if "for " in text and any(a in text for a in self.conv.layers_attributes):
                    loop_facts, site_facts = LoopAnalyzer(self, info, fn).facts()
                    loops.extend(loop_facts)
                    sites.extend(site_facts)
                if site_facts:
                    runs.extend(layer_runs(self, info, fn, site_facts))
                if site_facts or (name == "forward" and "residual" in text):
                    streams.extend(function_facts(self.path, info.qualname, f"{info.name}.{name}", text, self.line(fn), site_facts, self.conv.pp_guards))
                if any(a in text for a in self.watched):
                    uses.extend(self.attribute_uses(info, fn))
                    if " in self." in text:
                        helper = helper_definition(self, info, fn)
                        if helper is not None:
                            helper_defs.append(helper)
                if name == "forward" or name.startswith("forward"):
                    callbacks.extend(self.callback_uses(info, fn))
            if len(loops) > loops_before:  # a class with a layer loop: which paths reach it
                for name, fn in info.methods.items():
                    call = self_calls(self.path, info.qualname, f"{info.name}.{name}", self.text_of(fn), self.line(fn))
                    if call is not None:
                        streams.append(call)
        return F.FileFacts(
            path=self.path,
            module=self.modname,
            imports=tuple(F.ImportFact(k, v) for k, v in sorted(self.imports.items())),
            reexports=self.reexports,
            classes=tuple(classes),
            registry=tuple(self.registry_facts()),
            setters=tuple(setters),
            default_getters=tuple(getters),
            capture_sites=tuple(sites),
            helper_defs=tuple(helper_defs),
            layer_loops=tuple(loops),
            layer_runs=tuple(runs),
            capture_modes=tuple(
                F.CaptureModeFact(F.Location(self.path, ln), mode, fn) for ln, mode, fn in self.collector.modes
            ),
            concat_sites=tuple(self.concat_facts()),
            fc_definitions=tuple(fcs),
            config_reads=tuple(self.config_read_facts()),
            attribute_uses=tuple(uses),
            callback_uses=tuple(callbacks),
            stream_facts=tuple(streams),
        )

    def class_fact(self, info: ClassInfo) -> F.ClassFact:
        bases = []
        for base in info.node.bases:
            text = dotted(base)
            if text is None and isinstance(base, ast.Subscript):
                text = dotted(base.value)  # Generic[T] -> Generic
            if text is not None:
                bases.append(self.resolve(text))
        assignments: list[F.AttributeAssignment] = []
        init = info.methods.get("__init__")
        if init is not None:
            assignments.extend(self.init_assignments(info, init))
        return F.ClassFact(
            name=info.name,
            qualname=info.qualname,
            location=self.loc(info.node),
            bases=tuple(bases),
            methods=tuple(sorted(info.methods)),
            assignments=tuple(assignments),
            raise_checks=self.raise_checks(info),
            factories=self.factories(info),
            super_args=self.super_args(info, init),
            extends=tuple(sorted(n for n, fn in info.methods.items() if f"super().{n}(" in "".join(self.text_of(fn).split()))),
            class_values=class_values(info.node, self.resolve),
            method_lines=tuple(sorted((n, fn.lineno) for n, fn in info.methods.items())),
        )

    def assignment_via(self, info: ClassInfo, value: ast.expr) -> str | None:
        """How a subclass could change the class built here (see AttributeAssignment.via)."""
        if not isinstance(value, ast.Call):
            return None
        name = dotted(value.func) or ""
        if name.startswith("self.") and name.count(".") == 1 and name[5:] in info.methods:
            return f"method:{name[5:]}"
        if name.startswith("self.") and name.count(".") == 1 and self.class_attribute(info, name[5:]):
            return f"attr:{name[5:]}"  # model_cls = FooModel; self.model_cls(...): a subclass may set it
        init = info.methods.get("__init__")
        if init is not None and "." not in name:
            params = [p.name for p in parameters(init) if p.name != "self"]
            if name in params:
                return f"param:{name}#{params.index(name)}"
        return None

    def factories(self, info: ClassInfo) -> tuple[F.AttributeAssignment, ...]:
        """Methods that return a newly built class (``def _init_model(...): return Cls(...)``)."""
        out: list[F.AttributeAssignment] = []
        for name, fn in info.methods.items():
            if name.startswith("__"):
                continue
            for stmt in walk_statements(fn.body):
                if isinstance(stmt, ast.Return) and isinstance(stmt.value, ast.Call):
                    callee = dotted(stmt.value.func)
                    if callee and callee.split(".")[-1][:1].isupper():
                        out.append(F.AttributeAssignment(name, self.resolve(callee), self.line(stmt)))
                        break
        return tuple(out)

    def super_args(self, info: ClassInfo, init: FunctionNode | None) -> tuple[F.AttributeAssignment, ...]:
        """Classes a subclass hands to its base's ``__init__`` (``super().__init__(c, q, p, Cls)``),
        a parameter of its own resolved to its default."""
        if init is None:
            return ()
        defaults = {p.name: dotted(p.default) for p in parameters(init, kwonly=True) if p.default is not None}
        out: list[F.AttributeAssignment] = []
        for stmt in walk_statements(init.body):
            call = stmt.value if isinstance(stmt, ast.Expr) else None
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "__init__" and isinstance(call.func.value, ast.Call)):
                continue
            if last_name(call.func.value.func) != "super":
                continue
            args = arguments(call)
            unnamed = [a for a in args if a.keyword is None]
            for arg in args:
                ref = dotted(arg.value) or ""
                ref = defaults.get(ref) or ref
                if ref and ref.split(".")[-1][:1].isupper():
                    key = arg.keyword if arg.keyword is not None else f"#{unnamed.index(arg)}"
                    out.append(F.AttributeAssignment(key, self.resolve(ref), self.line(arg.node)))
        return tuple(out)

    def raise_checks(self, info: ClassInfo) -> tuple[F.RaiseCheck, ...]:
        """``if <condition>: raise ...`` in each method: a fixed-slot collector's count check
        (read when a trace counts fewer captures than slots)."""
        out: list[F.RaiseCheck] = []
        for name, fn in info.methods.items():
            if "raise" not in self.text_of(fn):
                continue  # cheap gate: no raise statement, no check
            for node in all_statements(fn.body):  # an if is a statement: no expression walk
                if isinstance(node, ast.If) and any(isinstance(b, ast.Raise) for b in node.body):
                    out.append(F.RaiseCheck(name, ast.unparse(node.test), F.Location(self.path, node.lineno)))
        out.sort(key=lambda c: (c.location.line, c.method))
        return tuple(out)

    def init_assignments(self, info: ClassInfo, init: FunctionNode) -> list[F.AttributeAssignment]:
        """``self.x = Cls(...)`` (or via a ``self._make()`` that returns ``Cls(...)``), plus every
        class constructed anywhere in ``__init__`` under the pseudo-attribute ``*``."""
        out: list[F.AttributeAssignment] = []
        analyzer = self

        def assigned(node: ast.Assign | ast.AnnAssign, target: ast.expr, value: ast.expr) -> None:
            name = dotted(target)
            if name and name.startswith("self.") and name.count(".") == 1:
                callee = analyzer.constructed_class(info, value) or analyzer.dynamic_build(value)
                if callee:
                    out.append(F.AttributeAssignment(name[5:], callee, analyzer.line(node), analyzer.assignment_via(info, value)))

        def visit_assign(node: ast.Assign) -> None:
            for target in node.targets:
                assigned(node, target, node.value)

        def visit_ann_assign(node: ast.AnnAssign) -> None:
            # `self.language_model: FooForCausalLM = build(...)`: the annotation changes nothing
            if node.value is not None:
                assigned(node, node.target, node.value)

        def visit_call(node: ast.Call) -> None:
            name = dotted(node.func)
            if name and name.split(".")[-1][:1].isupper():
                mention(name, node)

        def visit_name(node: ast.Name) -> None:
            # a class referenced without being called: `decoder_layer_type or FooLayer`
            if node.id[:1].isupper() and node.id in analyzer.local_classes:
                mention(node.id, node)

        seen: set[str] = set()

        def mention(name: str, node: ast.AST) -> None:
            resolved = analyzer.resolve(name)
            if resolved not in seen:
                seen.add(resolved)
                out.append(F.AttributeAssignment("*", resolved, analyzer.line(node)))

        visit_each(init.body, {ast.Assign: visit_assign, ast.AnnAssign: visit_ann_assign, ast.Call: visit_call, ast.Name: visit_name})
        for default, node in _class_defaults(init):
            mention(default, node)
        return out

    def dynamic_build(self, value: ast.expr) -> str | None:
        """``init_model(..., hf_config=config.text_config)``: an object built at run time
        from a sub-config of the target's config; which class it is depends on that
        config's ``architectures``. Recorded as ``dynamic:<sub-config>``."""
        if not isinstance(value, ast.Call):
            return None
        name = last_name(value.func) or ""
        if name[:1].isupper():
            return None
        for arg in arguments(value):
            ref = dotted(arg.value) or ""
            parts = ref.split(".")
            if len(parts) >= 2 and parts[-1].endswith("_config") and any(p == "config" or p.endswith("_config") or p == "hf_config" for p in parts[:-1]):
                return f"dynamic:{parts[-1]}"
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
        if name.split(".")[-1][:1].isupper():
            return self.resolve(name)
        default = self.parameter_class(info, name)
        return self.resolve(default) if default else _factory_class(value, self.resolve)

    def built_by_self(self, info: ClassInfo, attribute: str) -> str | None:
        """The class ``self.<attribute>(...)`` builds: what the method of that name returns
        (``def _init_model(...): return Cls(...)``), else a class attribute
        (``model_cls = FooModel``)."""
        method = info.methods.get(attribute)
        if method is not None:
            for stmt in walk_statements(method.body):
                if isinstance(stmt, ast.Return) and stmt.value is not None:
                    return self.constructed_class(info, stmt.value)
        alias = self.class_attribute(info, attribute)
        return self.resolve(alias) if alias else None

    def parameter_class(self, info: ClassInfo, name: str) -> str | None:
        """A class handed in as an ``__init__`` parameter: ``def __init__(..., model_cls=FooModel)``."""
        init = info.methods.get("__init__")
        if init is None or "." in name:
            return None
        for param in parameters(init, kwonly=True):
            if param.name == name and param.default is not None:
                default = dotted(param.default)
                if default and default.split(".")[-1][:1].isupper():
                    return default
        return None

    def class_attribute(self, info: ClassInfo, attribute: str) -> str | None:
        """``attribute = SomeName`` in the class body, as dotted text."""
        for stmt in info.node.body:
            if isinstance(stmt, ast.Assign) and any(is_name(t, attribute) for t in stmt.targets):
                return dotted(stmt.value)
            if isinstance(stmt, ast.AnnAssign) and is_name(stmt.target, attribute) and stmt.value is not None:
                return dotted(stmt.value)
        return None

    def fc_facts(self, info: ClassInfo) -> list[F.FcFact]:
        init = info.methods.get("__init__")
        if init is None:
            return []
        out: list[F.FcFact] = []
        for stmt in walk_statements(init.body):
            if not isinstance(stmt, ast.Assign) or not isinstance(stmt.value, ast.Call):
                continue
            for target in stmt.targets:
                name = dotted(target)
                if name and name.startswith("self.") and name[5:] in self.conv.fc_attributes:
                    args = arguments(stmt.value)
                    unnamed = [a for a in args if a.keyword is None]
                    keywords = {a.keyword: a for a in args if a.keyword is not None}
                    in_arg = keywords.get("in_features") or keywords.get("input_size") or (unnamed[0] if unnamed else None)
                    out_arg = keywords.get("out_features") or keywords.get("output_size") or (unnamed[1] if len(unnamed) > 1 else None)
                    out.append(
                        F.FcFact(
                            info.qualname,
                            self.loc(stmt),
                            self.code(in_arg.value) if in_arg else None,
                            self.code(out_arg.value) if out_arg else None,
                        )
                    )
        return out

    def getter_fact(self, info: ClassInfo, fn: FunctionNode) -> F.DefaultGetterFact:
        expression = None
        for stmt in walk_statements(fn.body):
            if isinstance(stmt, ast.Return) and stmt.value is not None:
                expression = canonical(self.code(stmt.value))
        return F.DefaultGetterFact(info.qualname, fn.name, self.loc(fn), expression, self.code(fn))

    def attribute_uses(self, info: ClassInfo, fn: FunctionNode) -> list[F.AttributeUseFact]:
        watched = self.conv.attributes | self.conv.flags
        out: list[F.AttributeUseFact] = []
        analyzer = self
        function = f"{info.name}.{fn.name}"
        written: set[int] = set()

        def visit_assign(node: ast.Assign) -> None:
            for target in node.targets:
                if isinstance(target, ast.Attribute) and target.attr in watched:
                    written.add(id(target))
                    out.append(F.AttributeUseFact(info.qualname, function, target.attr, F.UseKind.WRITE, analyzer.loc(target)))

        def visit_attribute(node: ast.Attribute) -> None:
            if node.attr in watched and id(node) not in written:
                out.append(F.AttributeUseFact(info.qualname, function, node.attr, F.UseKind.READ, analyzer.loc(node)))

        visit_each(fn.body, {ast.Assign: visit_assign, ast.Attribute: visit_attribute})
        return out

    def callback_uses(self, info: ClassInfo, fn: FunctionNode) -> list[F.CallbackUse]:
        """Where each optional parameter of a layer forward is used, relative to its compute."""
        params = [p for p in parameters(fn, kwonly=True) if p.default is not None]
        if not params:
            return []
        events: list[tuple[int, int, str, str | None, tuple[str, ...]]] = []  # (line, col, kind, detail, call arguments)
        names = {p.name for p in params}
        analyzer = self

        def visit_call(node: ast.Call) -> None:
            func = dotted(node.func)
            line, column = analyzer.start(node)
            args = arguments(node)
            unnamed = tuple(analyzer.code(a.value) for a in args if a.keyword is None)
            if func and func.startswith("self.") and func.count(".") == 1:
                events.append((line, column, "compute", func, ()))
            callee = node.func
            if isinstance(callee, ast.Name) and callee.id in names:
                events.append((line, column, "use:" + callee.id, "called", unnamed))
            elif isinstance(callee, ast.Attribute) and isinstance(callee.value, ast.Name) and callee.value.id in names:
                events.append((line, column, "use:" + callee.value.id, f"{callee.value.id}.{callee.attr}", unnamed))
            for arg in args:
                if isinstance(arg.value, ast.Name) and arg.value.id in names:
                    at = analyzer.start(arg.node)
                    events.append((at[0], at[1], "use:" + arg.value.id, func, ()))

        def visit_test(node: ast.If | ast.IfExp) -> None:
            # `if <flag>:` guards what a flagged layer records: a use of the flag where it is tested
            if isinstance(node.test, ast.Name) and node.test.id in names:
                line, column = analyzer.start(node.test)
                events.append((line, column, "use:" + node.test.id, None, ()))

        visit_each(fn.body, {ast.Call: visit_call, ast.If: visit_test, ast.IfExp: visit_test})
        events.sort()
        out: list[F.CallbackUse] = []
        for name in sorted(names):
            idx = [i for i, e in enumerate(events) if e[2] == "use:" + name]
            if not idx:
                continue
            first, last = idx[0], idx[-1]
            compute_before = any(e[2] == "compute" for e in events[:first])
            compute_after = any(e[2] == "compute" for e in events[last + 1 :])
            position = F.LayerSide.BEFORE if not compute_before else F.LayerSide.AFTER if not compute_after else F.LayerSide.MIDDLE
            ev = events[first]
            out.append(
                F.CallbackUse(info.qualname, fn.name, name, position, F.Location(self.path, ev[0]), ev[3], ev[4])
            )
        return out

    # -- module-level ----------------------------------------------------------
    def registry_facts(self) -> list[F.RegistryFact]:
        out: list[F.RegistryFact] = []
        dict_file = self.conv.is_dict_file(self.path)
        patterns = [re.compile(p) for p in self.conv.dict_name_patterns]
        prefix = self.conv.dict_module_prefixes[0] if self.conv.dict_module_prefixes else ""
        for node in self.collector.module_assigns:
            value = node.value
            assert value is not None  # the collector keeps annotated assignments with a value only
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                name = dotted(target)
                if not name:
                    continue
                if name in self.conv.entry_variables:
                    for element in value.elts if isinstance(value, (ast.List, ast.Tuple)) else [value]:
                        ref = dotted(element.value if isinstance(element, ast.Starred) else element)
                        if ref:
                            out.append(F.RegistryFact(ref.split(".")[-1], self.resolve(ref), self.loc(node), F.RegistryKind.ENTRY_CLASS))
                elif dict_file and any(p.match(name) for p in patterns) and isinstance(value, ast.Dict):
                    out += self.registry_dict(value, name, prefix)
        return out

    def registry_dict(self, table: ast.Dict, name: str, prefix: str) -> list[F.RegistryFact]:
        """``{"Arch": ("module", "Class"), ...}`` entries of a registry dict named ``name``."""
        out: list[F.RegistryFact] = []
        for key, value in zip(table.keys, table.values):
            architecture = string_value(key)
            if key is None or architecture is None:
                continue
            if isinstance(value, ast.Tuple) and len(value.elts) >= 2:
                mod, cls = string_value(value.elts[0]), string_value(value.elts[1])
                if mod is not None and cls is not None:
                    out.append(F.RegistryFact(architecture, f"{registry_module(prefix, mod)}.{cls}", self.loc(key), F.RegistryKind.REGISTRY_DICT, name))
        return out

    def concat_facts(self) -> list[F.ConcatFact]:
        out = []
        for ln, node, function in self.collector.concats:
            text = self.code(node)
            args_text = " ".join(self.code(a.node) for a in arguments(node))
            if "aux" in args_text.lower() or any(a in args_text for a in self.conv.attributes):
                out.append(F.ConcatFact(F.Location(self.path, ln), clip(text), function))
        return out

    def config_read_facts(self) -> list[F.ConfigReadFact]:
        out = []
        for ln, key, default, function, node in self.collector.config_reads:
            out.append(
                F.ConfigReadFact(
                    key, self.code(default) if default is not None else None, F.Location(self.path, ln), function, clip(self.code(node))
                )
            )
        return out


def _class_defaults(init: FunctionNode) -> list[tuple[str, ast.AST]]:
    """Classes handed in as parameter defaults: ``def __init__(..., layer_type=FooLayer)``."""
    out: list[tuple[str, ast.AST]] = []
    for param in parameters(init, kwonly=True):
        default = dotted(param.default) if param.default is not None else None
        if default and default.split(".")[-1][:1].isupper():
            out.append((default, param.node))
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
        if ref and ref.split(".")[-1][:1].isupper() and (arg.keyword is None or "cls" in arg.keyword or "class" in arg.keyword):
            return resolve(ref)
    return None
