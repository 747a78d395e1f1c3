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
import dataclasses
import functools
import re
from collections.abc import Callable, Sequence
from typing import Any

from flowtrace.model import facts as F
from flowtrace.index.context import ClassInfo, FileContext
from flowtrace.index.helpers import helper_definition
from flowtrace.index.layer_runs import layer_runs
from flowtrace.index.loops import LoopAnalyzer
from flowtrace.index.setters import SetterAnalyzer
from flowtrace.index.class_table import Structure, module_tables, package_of
from flowtrace.index.stream_facts import function_facts, self_calls
from flowtrace.index.syntax import (
    line_numbers,
    find_all,
    FunctionNode,
    SourceText,
    arguments,
    canonical,
    child_nodes,
    clip,
    dotted,
    last_name,
    module_name,
    parameters,
    string_value,
    visit_each,
    walk_statements,
)
from flowtrace.engines.profiles import Conventions

_CAT_NAMES = {"cat", "concat", "concatenate"}


class _Collector:
    """Collects the sites that need the enclosing function's name.

    A site is an ``Attribute``, ``Call`` or ``Subscript`` whose own text names a
    capture-mode enum, a layer-id key, ``cat`` or ``pack`` (see the ``visit_`` methods), so
    the expressions of a statement are walked only when one of their lines names one
    (``hit_lines``): most of a file's nodes are never visited, and the sites, their order and
    their enclosing functions are those of a walk over every node. What the module declares
    (imports, classes, registrations) is read by :class:`flowtrace.index.class_table.Structure`."""

    def __init__(self, conv: Conventions, lines: list[str]) -> None:
        self.conv = conv
        self.modes: list[tuple[int, str, str]] = []
        self.concats: list[tuple[int, ast.Call, str]] = []
        self.config_reads: list[tuple[int, str, ast.expr | None, str, ast.AST]] = []
        self._class_stack: list[str] = []
        self._func_stack: list[str] = []
        self._key_names = {k.rsplit(".", 1)[-1] for k in conv.layer_id_keys}
        self._hits = _hit_lines(lines, _site_words(conv))

    # -- the walk ----------------------------------------------------------------
    def walk(self, module: ast.Module) -> None:
        if self._hits:  # no line names a site word: no site to find
            # bound here, not kept: the collector holding its own methods would be a cycle that
            # keeps the nodes it found alive until the cyclic collector runs
            visits: dict[type, Callable[[Any], None]] = {
                ast.Attribute: self.visit_Attribute,
                ast.Call: self.visit_Call,
                ast.Subscript: self.visit_Subscript,
            }
            self._children(module.body, visits)

    def _children(self, children: Sequence[ast.AST], visits: dict[type, Callable[[Any], None]]) -> None:
        """Walk the children (of a statement, or a module's statements) that a hit line falls
        in, tested here rather than in a call per child: most children of a block hold none;
        ``visits``: the site handlers by node class."""
        hits = self._hits
        count = len(hits)
        for child in children:
            nesting = isinstance(child, _NESTING)  # a statement, an except clause, a match case
            first = getattr(child, "lineno", None)
            if first is not None:  # else a parameter list, a with item, a match case: small, walked
                last = child.end_lineno or first  # type: ignore[attr-defined]
                at = bisect.bisect_left(hits, _first_line(child, first) if child.__class__ in _DEFINITIONS else first)
                if at == count or hits[at] > last:
                    continue  # no line of it names a site word: no site below it
            if nesting:
                self._statement(child, visits)
            else:
                visit_each(child, visits)

    def _statement(self, stmt: ast.AST, visits: dict[type, Callable[[Any], None]]) -> None:
        kind = type(stmt)
        if kind is ast.ClassDef:
            self._class_stack.append(stmt.name)  # type: ignore[attr-defined]
        elif kind in _FUNCTIONS:
            self._func_stack.append(stmt.name)  # type: ignore[attr-defined]
        self._children(child_nodes(stmt), visits)
        if kind is ast.ClassDef:
            self._class_stack.pop()
        elif kind in _FUNCTIONS:
            self._func_stack.pop()

    def function_name(self) -> str:
        if not self._func_stack:
            return "<module>"
        prefix = f"{self._class_stack[-1]}." if self._class_stack else ""
        return prefix + self._func_stack[-1]

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


def _first_line(stmt: ast.AST, line: int) -> int:
    """Where a statement's text starts: a decorated definition's first decorator."""
    decorators = getattr(stmt, "decorator_list", None)
    return min(line, *(d.lineno for d in decorators)) if decorators else line


_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_DEFINITIONS = frozenset({*_FUNCTIONS, ast.ClassDef})  # what can have decorators
_NESTING = (ast.stmt, ast.excepthandler, ast.match_case)


SiteWords = tuple[tuple[str, ...], tuple[str, ...]]  # (words as written, words in any case)


def _site_words(conv: Conventions) -> SiteWords:
    """What a site's text must name (the ``visit_`` conditions): an enum, a key, cat, pack
    (the last in any case)."""
    words = sorted({*conv.capture_mode_enums, *(k.rsplit(".", 1)[-1] for k in conv.layer_id_keys)} - {""})
    return (*words, "cat"), ("pack",)


def _hit_lines(lines: list[str], words: SiteWords) -> list[int]:
    """The (1-based, ascending) numbers of the lines naming one of ``words`` (no word holds a
    line break): the exact words found with ``str.find`` over the whole text, the others in
    any case with ``str.find`` over the lowered text when text and words are ASCII (lowering
    then keeps every offset and is what a case-insensitive match compares), else with one
    case-insensitive expression (four times slower); the offsets mapped to lines by counting
    line breaks between them. A single expression of every word, tried at every character,
    takes twice as long again."""
    text = "\n".join(lines)
    offsets: list[int] = []
    exact, folded = words
    for word in exact:
        offsets += find_all(text, word)
    if folded and text.isascii() and all(w.isascii() for w in folded):
        lowered = text.lower()
        for word in folded:
            offsets += find_all(lowered, word.lower())
    elif folded:
        offsets += [m.start() for m in _any_case(folded).finditer(text)]
    return line_numbers(text, offsets)


@functools.lru_cache(maxsize=16)
def _any_case(words: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(f"(?i:{re.escape(w)})" for w in words))


class FileAnalyzer(FileContext):
    """Builds :class:`FileFacts` for one module's stdlib tree."""

    def __init__(self, path: str, source: str, module: ast.Module, conv: Conventions) -> None:
        modname = module_name(path, conv.package)
        text = SourceText(source, module)
        self.module = module
        self.structure = Structure(module, modname, package_of(path, modname))
        super().__init__(path, modname, text, conv, self.structure.imports, self.structure.local_classes)
        self.collector = _Collector(conv, text.lines)
        self.collector.walk(module)
        self.watched = conv.attributes | conv.flags

    # -- the whole file ----------------------------------------------------------
    def facts(self) -> F.FileFacts:
        """The module's tables (shared with the cheap tier) and its capture facts."""
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
        for info in self.structure.classes:
            loops_before = len(loops)
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
                    streams.extend(
                        function_facts(
                            self.path, info.qualname, f"{info.name}.{name}", fn, site_facts, self.conv.pp_guards
                        )
                    )
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
                    call = self_calls(self.path, info.qualname, f"{info.name}.{name}", fn)
                    if call is not None:
                        streams.append(call)
        return dataclasses.replace(
            module_tables(self, self.structure, self.module),
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
                    in_arg = (
                        keywords.get("in_features") or keywords.get("input_size") or (unnamed[0] if unnamed else None)
                    )
                    out_arg = (
                        keywords.get("out_features")
                        or keywords.get("output_size")
                        or (unnamed[1] if len(unnamed) > 1 else None)
                    )
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
                    out.append(
                        F.AttributeUseFact(info.qualname, function, target.attr, F.UseKind.WRITE, analyzer.loc(target))
                    )

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
        # (line, col, kind, detail, call arguments)
        events: list[tuple[int, int, str, str | None, tuple[str, ...]]] = []
        names = {p.name for p in params}
        analyzer = self

        def visit_call(node: ast.Call) -> None:
            # most calls are no event: their place and their arguments' text are read only for one
            # (the events are sorted after, so the order they are found in does not matter)
            func = dotted(node.func)
            if func and func.startswith("self.") and func.count(".") == 1:
                events.append((*analyzer.start(node), "compute", func, ()))
            callee = node.func
            if isinstance(callee, ast.Name) and callee.id in names:
                events.append((*analyzer.start(node), "use:" + callee.id, "called", unnamed_of(node)))
            elif isinstance(callee, ast.Attribute) and isinstance(callee.value, ast.Name) and callee.value.id in names:
                detail = f"{callee.value.id}.{callee.attr}"
                events.append((*analyzer.start(node), "use:" + callee.value.id, detail, unnamed_of(node)))
            for arg in node.args:
                value = arg.value if isinstance(arg, ast.Starred) else arg
                if isinstance(value, ast.Name) and value.id in names:
                    events.append((*analyzer.start(arg), "use:" + value.id, func, ()))
            for keyword in node.keywords:
                if isinstance(keyword.value, ast.Name) and keyword.value.id in names:
                    events.append((*analyzer.start(keyword), "use:" + keyword.value.id, func, ()))

        def unnamed_of(node: ast.Call) -> tuple[str, ...]:
            return tuple(analyzer.code(a.value) for a in arguments(node) if a.keyword is None)

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
            position = (
                F.LayerSide.BEFORE
                if not compute_before
                else F.LayerSide.AFTER if not compute_after else F.LayerSide.MIDDLE
            )
            ev = events[first]
            out.append(
                F.CallbackUse(info.qualname, fn.name, name, position, F.Location(self.path, ev[0]), ev[3], ev[4])
            )
        return out

    # -- module-level ----------------------------------------------------------
    def concat_facts(self) -> list[F.ConcatFact]:
        out = []
        for ln, node, function in self.collector.concats:
            # the arguments' text lies in the call's lines: lines naming neither cannot hold it
            lines = "\n".join(self.lines[node.lineno - 1 : node.end_lineno])
            if "aux" not in lines.lower() and not any(a in lines for a in self.conv.attributes):
                continue
            args_text = " ".join(self.code(a.node) for a in arguments(node))
            if "aux" in args_text.lower() or any(a in args_text for a in self.conv.attributes):
                out.append(F.ConcatFact(F.Location(self.path, ln), clip(self.code(node)), function))
        return out

    def config_read_facts(self) -> list[F.ConfigReadFact]:
        out = []
        for ln, key, default, function, node in self.collector.config_reads:
            out.append(
                F.ConfigReadFact(
                    key,
                    self.code(default) if default is not None else None,
                    F.Location(self.path, ln),
                    function,
                    clip(self.code(node)),
                )
            )
        return out
