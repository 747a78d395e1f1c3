"""Id sources that are not setters: config attributes, build contexts, config builders, hooks.

Some engines never call a setter with the draft's ids. The inner model reads a config attribute
in ``__init__`` (``self.x = getattr(config, "x", ())``) or a field of a build context; the
attribute is written by *config builders* elsewhere, each selected by a condition on the
architecture or ``model_type`` and gated by the speculative method; or the decoder layer calls
a metadata hook (``spec_metadata.<hook>(self.layer_idx, h, r)``) whose ids come from the
serving config. This module finds those shapes with the stdlib parser; which names to look for
is profile data (``[config_capture]``, ``[metadata_hook]``), the shapes are found structurally.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterable

from flowtrace.engines.profiles import Conventions
from flowtrace.index.layer_dicts import DictStore, dict_store, ids_order_read, membership
from flowtrace.index.returns import nodes  # ast.walk's nodes and order, less the contexts, faster
from flowtrace.model import facts as F

_Truth = "bool | None"


def wanted(conv: Conventions) -> bool:
    """Does any selected profile ask for these facts (else the extractor is skipped)?"""
    return bool(
        conv.config_keys or conv.context_fields or conv.hooks or conv.metadata_attributes or conv.registry_decorators
    )


def registry_decorators(tree: ast.Module, path: str, modname: str, conv: Conventions) -> list[F.RegistryFact]:
    """``@<decorator>("Arch")`` on a module-level class registers it under that architecture."""
    out = []
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        for deco in node.decorator_list:
            if isinstance(deco, ast.Call) and (_dotted(deco.func) or "").rsplit(".", 1)[-1] in conv.registry_decorators:
                for arg in deco.args:
                    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                        out.append(
                            F.RegistryFact(
                                arg.value,
                                f"{modname}.{node.name}",
                                F.Location(path, deco.lineno),
                                F.RegistryKind.DECORATOR,
                                (_dotted(deco.func) or ""),
                            )
                        )
    return out


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr}" if head else None
    return None


def _strings_of(node: ast.AST) -> tuple[str, ...] | None:
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)) and all(
        isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts
    ):
        return tuple(str(e.value) for e in node.elts if isinstance(e, ast.Constant))
    return None


# -- the speculative-method gate ------------------------------------------------------------------
def method_truth(test: ast.AST, variables: frozenset[str], method: str) -> bool | None:
    """The value of ``test`` when the method variable holds ``method``; None when the test does
    not depend on it alone (``is_draft_model``, a layer count) and could go either way."""
    if isinstance(test, ast.BoolOp):
        parts = [method_truth(v, variables, method) for v in test.values]
        if isinstance(test.op, ast.And):
            return False if False in parts else (True if all(p is True for p in parts) else None)
        return True if True in parts else (False if all(p is False for p in parts) else None)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = method_truth(test.operand, variables, method)
        return None if inner is None else not inner
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, op, right = test.left, test.ops[0], test.comparators[0]
        name = _dotted(left)
        if name is None or name.rsplit(".", 1)[-1] not in variables:
            return None
        if isinstance(op, (ast.Is, ast.IsNot)) and isinstance(right, ast.Constant) and right.value is None:
            return isinstance(op, ast.IsNot)
        if isinstance(right, ast.Constant) and isinstance(right.value, str):
            if isinstance(op, ast.Eq):
                return method == right.value
            if isinstance(op, ast.NotEq):
                return method != right.value
        values = _strings_of(right)
        if values is not None and isinstance(op, (ast.In, ast.NotIn)):
            return (method in values) == isinstance(op, ast.In)
    return None


def _ends(body: list[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], (ast.Return, ast.Raise))


class _Gated:
    """Walks a function body keeping the tests that guard each statement, an early
    ``if cond: return``/``raise`` turning into ``not cond`` for what follows."""

    def __init__(self, conv: Conventions, path: str) -> None:
        self.conv = conv
        self.path = path
        self.writes: list[F.GatedWrite] = []
        self.allowed: tuple[str, ...] | None = None
        self.gate_line: int | None = None
        self.bindings: list[tuple[str, str]] = []
        self.calls: list[str] = []

    def methods_for(self, tests: list[ast.AST]) -> tuple[str, ...]:
        out = []
        for m in sorted(self.conv.methods):
            if all(method_truth(t, self.conv.method_variables, m) is not False for t in tests):
                out.append(m)
        return tuple(out)

    def walk(self, body: list[ast.stmt], tests: list[ast.AST], keys: frozenset[str]) -> None:
        tests = list(tests)
        for stmt in body:
            if isinstance(stmt, ast.If):
                self.walk(stmt.body, tests + [stmt.test], keys)
                self.walk(stmt.orelse, tests + [ast.UnaryOp(ast.Not(), stmt.test)], keys)
                if _ends(stmt.body) and not stmt.orelse:
                    tests.append(ast.UnaryOp(ast.Not(), stmt.test))
                    self._gate_from_raise(stmt)
                continue
            if isinstance(stmt, ast.Assert):
                self._gate_from_assert(stmt)
            if isinstance(stmt, (ast.With, ast.For, ast.While, ast.Try)):
                for part in ("body", "orelse", "finalbody"):
                    self.walk(getattr(stmt, part, []) or [], tests, keys)
                for handler in getattr(stmt, "handlers", []):
                    self.walk(handler.body, tests, keys)
                continue
            self._record(stmt, tests, keys)

    def _record(self, stmt: ast.stmt, tests: list[ast.AST], keys: frozenset[str]) -> None:
        for node in nodes(stmt):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in self.conv.builder_methods
            ):
                self._call(node, tests)
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            flat = [e for t in targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
            for target in flat:
                name = _dotted(target)
                if name is None:
                    continue
                last = name.rsplit(".", 1)[-1]
                relay = any(isinstance(n, ast.Attribute) and n.attr == last for n in nodes(stmt.value))
                if (
                    last in keys
                    and not relay
                    and not (isinstance(stmt.value, ast.Constant) and stmt.value.value is None)
                ):
                    condition = " and ".join(ast.unparse(t) for t in tests)
                    self.writes.append(
                        F.GatedWrite(
                            last,
                            ast.unparse(stmt.value),
                            condition,
                            self.methods_for(tests),
                            tuple(self.bindings),
                            F.Location(self.path, stmt.lineno),
                        )
                    )
                elif isinstance(target, ast.Name):
                    self.bindings.append((target.id, ast.unparse(stmt.value)))

    def _call(self, node: ast.Call, tests: list[ast.AST]) -> None:
        """Another builder's build, kept when it runs for a profile method and hands the method
        on (``spec_method=None`` or a gate that excludes the method stops its gates applying)."""
        if not self.methods_for(tests):
            return
        if any(
            kw.arg in self.conv.method_variables and isinstance(kw.value, ast.Constant) and kw.value.value is None
            for kw in node.keywords
        ):
            return
        value = node.func.value  # type: ignore[attr-defined]  # callers pass attribute calls (self.x.build(...))
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "super":
            self.calls.append("super()")  # the base class's build: resolved by the caller
            return
        callee = _dotted(value)
        if callee and callee != "cls":
            self.calls.append(callee)

    def _gate_from_assert(self, stmt: ast.Assert) -> None:
        test = stmt.test
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.In, ast.Eq)):
            name = _dotted(test.left)
            right = test.comparators[0]
            values = _strings_of(right) or (
                (right.value,) if isinstance(right, ast.Constant) and isinstance(right.value, str) else None
            )
            if name and name.rsplit(".", 1)[-1] in self.conv.method_variables and values is not None:
                self.allowed, self.gate_line = values, stmt.lineno

    def _gate_from_raise(self, stmt: ast.If) -> None:
        """``if m is not None and m not in {...}: raise`` or ``if m != 'x': raise``."""
        if not isinstance(stmt.body[-1], ast.Raise):
            return
        for node in nodes(stmt.test):
            if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.NotIn, ast.NotEq)):
                name = _dotted(node.left)
                right = node.comparators[0]
                values = _strings_of(right) or (
                    (right.value,) if isinstance(right, ast.Constant) and isinstance(right.value, str) else None
                )
                if name and name.rsplit(".", 1)[-1] in self.conv.method_variables and values is not None:
                    self.allowed, self.gate_line = values, stmt.lineno


# -- config builders ----------------------------------------------------------------------------
def _selector(method: ast.FunctionDef | None) -> tuple[str, F.SelectorKind, tuple[str, ...]]:
    if method is None:
        return "", F.SelectorKind.OTHER, ()
    returns = [n for n in nodes(method) if isinstance(n, ast.Return) and n.value is not None]
    if len(returns) != 1:
        return "", F.SelectorKind.OTHER, ()
    expr = returns[0].value
    if expr is None:  # filtered above; tells the type checker
        return "", F.SelectorKind.OTHER, ()
    text = ast.unparse(expr)
    if isinstance(expr, ast.Constant) and expr.value is True:
        return text, F.SelectorKind.ALWAYS, ()
    if isinstance(expr, ast.Compare) and len(expr.ops) == 1:
        right = expr.comparators[0]
        values = _strings_of(right) or (
            (right.value,) if isinstance(right, ast.Constant) and isinstance(right.value, str) else None
        )
        left = ast.unparse(expr.left)
        if values is not None and isinstance(expr.ops[0], (ast.In, ast.Eq)):
            if "architectures" in left:
                return text, F.SelectorKind.ARCHITECTURES, values
            if "model_type" in left:
                return text, F.SelectorKind.MODEL_TYPE, values
    return text, F.SelectorKind.OTHER, ()


def _selector_strings(select: ast.FunctionDef, functions: dict[str, ast.FunctionDef]) -> tuple[str, ...]:
    """String constants of a selector that delegates to a module function (``_is_x(hf_config)``):
    the architecture names it compares against, in source order."""
    found: list[str] = []
    bodies = [select] + [
        functions[n.func.id]
        for n in nodes(select)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in functions
    ]
    for body in bodies:
        for node in nodes(body):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and node.value[:1].isupper()
                and node.value.isidentifier()
            ):
                found.append(node.value)
    return tuple(dict.fromkeys(found))


def _builders(
    tree: ast.Module, path: str, modname: str, conv: Conventions, resolve: Callable[[str], str]
) -> list[F.BuilderFact]:
    out = []
    keys = conv.config_keys
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        methods = {m.name: m for m in node.body if isinstance(m, ast.FunctionDef)}
        build = next((methods[n] for n in conv.builder_methods if n in methods), None)
        select = next((methods[n] for n in conv.builder_selectors if n in methods), None)
        if build is None or select is None:
            continue
        walker = _Gated(conv, path)
        walker.walk(build.body, [], keys)
        text, kind, values = _selector(select)
        if kind == "other":
            named = _selector_strings(select, functions)
            if named:
                kind, values = F.SelectorKind.ARCHITECTURES, named
        base = next((resolve(_dotted(b) or "") for b in node.bases if _dotted(b)), "")
        walker.calls = [base if c == "super()" else c for c in walker.calls]
        out.append(
            F.BuilderFact(
                f"{modname}.{node.name}",
                F.Location(path, node.lineno),
                text,
                kind,
                values,
                tuple(walker.writes),
                walker.allowed,
                F.Location(path, walker.gate_line) if walker.gate_line else None,
                tuple(resolve(c) for c in walker.calls),
            )
        )
    return out


def _feeds(tree: ast.Module, path: str, conv: Conventions) -> list[F.GatedWrite]:
    """Writes of the names that fill a build-context field, with their method gates."""
    if not conv.context_feeds:
        return []
    out = []
    fields = conv.context_feeds | {f.rsplit(".", 1)[-1] for f in conv.context_fields}
    for node in nodes(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        # only locals this function hands on as `feed=...` to a constructor count as a fill
        passed = {
            n.id for call in nodes(node) if isinstance(call, ast.Call)
            for kw in call.keywords if kw.arg in fields for n in nodes(kw.value) if isinstance(n, ast.Name)
        }
        keys = frozenset(passed & conv.context_feeds)
        if keys:
            walker = _Gated(conv, path)
            walker.walk(node.body, [], keys)
            out.extend(walker.writes)
    return out


# -- model side: where the ids are read, and how they are captured --------------------------------
def _id_source(value: ast.AST, conv: Conventions) -> tuple[F.IdSourceKind, str, str | None] | None:
    for sub in nodes(value):
        if (
            isinstance(sub, ast.Call)
            and isinstance(sub.func, ast.Name)
            and sub.func.id == "getattr"
            and len(sub.args) >= 2
        ):
            key = sub.args[1]
            if isinstance(key, ast.Constant) and key.value in conv.config_keys:
                default = ast.unparse(sub.args[2]) if len(sub.args) > 2 else None
                return F.IdSourceKind.CONFIG, key.value, default
        if isinstance(sub, ast.Attribute):
            text = ast.unparse(sub)
            if sub.attr in conv.config_keys and text.split(".")[0] in ("config", "self") and "config" in text:
                return F.IdSourceKind.CONFIG, sub.attr, None
            for field in conv.context_fields:
                if text == field or text.endswith("." + field):
                    return F.IdSourceKind.CONTEXT, field, None
    return None


def _id_sources(cls: ast.ClassDef, path: str, qualname: str, conv: Conventions) -> list[F.IdSourceFact]:
    init = next((m for m in cls.body if isinstance(m, ast.FunctionDef) and m.name == "__init__"), None)
    if init is None:
        return []
    out: list[F.IdSourceFact] = []
    for node in nodes(init):
        if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            name = _dotted(target)
            if not name or not name.startswith("self.") or name.count(".") != 1:
                continue
            found = _id_source(node.value, conv)
            if found:
                out.append(
                    F.IdSourceFact(qualname, name[5:], found[0], found[1], found[2], F.Location(path, node.lineno))
                )
                continue
            read = {(_dotted(s) or "")[5:] for s in nodes(node.value) if isinstance(s, ast.Attribute)}
            origin = next((s for s in out if s.attribute in read and s.alias_of is None), None)
            if origin is not None:
                out.append(
                    F.IdSourceFact(
                        qualname,
                        name[5:],
                        origin.kind,
                        origin.key,
                        origin.default,
                        F.Location(path, node.lineno),
                        origin.attribute,
                    )
                )
    return out


def _sub_calls(body: list[ast.stmt], stop: ast.AST) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``self.<module>(...)`` calls before and after the statement ``stop``, in source order."""
    before: list[str] = []
    after: list[str] = []
    seen = False
    for stmt in body:
        if stmt is stop:
            seen = True
            continue
        for node in nodes(stmt):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "self"
            ):
                (after if seen else before).append(node.func.attr)
    return tuple(before), tuple(after)


def _flag_uses(cls: ast.ClassDef, path: str, qualname: str) -> list[F.FlagUseFact]:
    """A layer forward's boolean parameter that switches a recorded value on
    (``x = r.clone() if flag else None`` then returned)."""
    out = []
    for method in cls.body:
        if not isinstance(method, ast.FunctionDef) or method.name != "forward":
            continue
        flags = {
            a.arg
            for a, d in zip(method.args.args[::-1], method.args.defaults[::-1])
            if isinstance(d, ast.Constant) and d.value is False
        }
        flags |= {
            a.arg
            for a, d in zip(method.args.kwonlyargs, method.args.kw_defaults)
            if isinstance(d, ast.Constant) and d.value is False
        }
        for stmt in method.body:
            if (
                isinstance(stmt, ast.Assign)
                and isinstance(stmt.value, ast.IfExp)
                and isinstance(stmt.value.test, ast.Name)
                and stmt.value.test.id in flags
            ):
                before, after = _sub_calls(method.body, stmt)
                out.append(
                    F.FlagUseFact(
                        qualname,
                        stmt.value.test.id,
                        ast.unparse(stmt.value.body),
                        before,
                        after,
                        F.Location(path, stmt.lineno),
                    )
                )
    return out


def _dict_captures(cls: ast.ClassDef, path: str, qualname: str, attributes: set[str]) -> list[F.DictCaptureFact]:
    """``flag = idx in self.<ids>``; ``out = layer(..., kw=flag)``; ``if flag: d[idx] = out[k]``;
    ``cat([d[i] for i in <ids>])``."""
    out = []
    for method in cls.body:
        if not isinstance(method, ast.FunctionDef):
            continue
        aliases = {
            n.targets[0].id: n.value.attr
            for n in nodes(method)
            if isinstance(n, ast.Assign)
            and len(n.targets) == 1
            and isinstance(n.targets[0], ast.Name)
            and isinstance(n.value, ast.Attribute)
            and n.value.attr in attributes
        }
        for loop in (n for n in nodes(method) if isinstance(n, ast.For)):
            site = _dict_site(loop, method, path, qualname, attributes, aliases)
            if site is not None:
                out.append(site)
    return out


def _ids_name(node: ast.AST, attributes: set[str], aliases: dict[str, str]) -> str | None:
    if isinstance(node, ast.Attribute) and node.attr in attributes:
        return node.attr
    if isinstance(node, ast.Name) and node.id in aliases:
        return aliases[node.id]
    return None


def _dict_site(
    loop: ast.For, method: ast.FunctionDef, path: str, qualname: str, attributes: set[str], aliases: dict[str, str]
) -> F.DictCaptureFact | None:
    flagged = _loop_flag(loop, attributes, aliases)
    if flagged is None:
        return None
    flag, attribute = flagged
    found = _flagged_store(loop, flag)
    if found is None:
        return None
    store = found.stmt
    index = ast.unparse(store.value.slice) if isinstance(store.value, ast.Subscript) else None
    concat = _concat_in_ids_order(method, path, found.container, attribute, attributes, aliases)
    return F.DictCaptureFact(
        qualname,
        f"{qualname.rsplit('.', 1)[-1]}.{method.name}",
        F.Location(path, store.lineno),
        attribute,
        flag,
        _flag_keyword(loop, flag),
        index,
        concat,
    )


def _loop_flag(loop: ast.For, attributes: set[str], aliases: dict[str, str]) -> tuple[str, str] | None:
    """(flag, attribute) of the loop body's last ``flag = i in self.<attr>``."""
    found = None
    for stmt in loop.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            attribute = membership(stmt.value, lambda node: _ids_name(node, attributes, aliases))
            if attribute:
                found = (stmt.targets[0].id, attribute)
    return found


def _flag_keyword(loop: ast.For, flag: str) -> str | None:
    """The keyword of the last call in the loop that is handed the flag."""
    keyword = None
    for node in nodes(loop):
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                if isinstance(kw.value, ast.Name) and kw.value.id == flag:
                    keyword = kw.arg
    return keyword


def _flagged_store(loop: ast.For, flag: str) -> DictStore | None:
    """The last ``d[...] = x`` directly under an ``if <flag>:`` in the loop."""
    store = None
    for node in nodes(loop):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == flag:
            for sub in node.body:
                store = dict_store(sub) or store
    return store


def _concat_in_ids_order(
    method: ast.FunctionDef, path: str, container: str, attribute: str, attributes: set[str], aliases: dict[str, str]
) -> F.Location | None:
    """The last ``cat([d[i] for i in self.<attr>])`` of the method: the states read in ids order."""
    concat = None
    for node in nodes(method):
        if isinstance(node, ast.Call) and (_dotted(node.func) or "").endswith("cat") and node.args:
            if ids_order_read(node.args[0], container, lambda ids: _ids_name(ids, attributes, aliases)) == attribute:
                concat = F.Location(path, node.lineno)
    return concat


def _hook_calls(cls: ast.ClassDef, path: str, qualname: str, conv: Conventions) -> list[F.HookCallFact]:
    out = []
    for method in cls.body:
        if not isinstance(method, ast.FunctionDef):
            continue
        for stmt in method.body:
            for node in nodes(stmt):
                if not (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr in conv.hooks
                    and node.args
                ):
                    continue
                index = ast.unparse(node.args[0])
                if isinstance(node.func.value, ast.Name) and node.func.value.id == "self":
                    continue  # the metadata's own definition calling itself
                before, after = _sub_calls(method.body, stmt)
                stream = node.args[1].id if len(node.args) > 1 and isinstance(node.args[1], ast.Name) else None
                residual = node.args[2].id if len(node.args) > 2 and isinstance(node.args[2], ast.Name) else None
                fed_by, reworked = _stream_flow(method, node.lineno, stream, residual) if stream else (None, ())
                out.append(
                    F.HookCallFact(
                        qualname,
                        f"{cls.name}.{method.name}",
                        node.func.attr,
                        index,
                        tuple(ast.unparse(a) for a in node.args[1:]),
                        before,
                        after,
                        F.Location(path, node.lineno),
                        fed_by,
                        reworked,
                    )
                )
    return out


def _self_call(value: ast.expr) -> str | None:
    """``self.<m>(...)`` -> ``m``."""
    if (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and isinstance(value.func.value, ast.Name)
        and value.func.value.id == "self"
    ):
        return value.func.attr
    return None


def _names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _stream_flow(
    method: ast.FunctionDef, line: int, stream: str, residual: str | None
) -> tuple[str | None, tuple[str, ...]]:
    """The sub-module whose output the hook records as ``stream`` (the last ``stream = self.m(...)``
    before the hook line), and the sub-modules applied to ``stream`` without ``residual`` after
    it, until ``stream`` is rebound (the layer keeps computing on the recorded state)."""
    assigns = sorted((n for n in nodes(method) if isinstance(n, ast.Assign)), key=lambda n: (n.lineno, n.col_offset))
    fed_by: str | None = None
    reworked: list[str] = []
    for a in assigns:
        targets = set().union(*(_names_in(t) for t in a.targets))
        if a.lineno < line and stream in targets:
            fed_by = _self_call(a.value)
        elif a.lineno > line:
            callee = _self_call(a.value)
            used = _names_in(a.value)
            if callee and stream in used and (residual is None or residual not in used):
                reworked.append(callee)
            if stream in targets:
                break
    return fed_by, tuple(reworked)


def _metadata_defaults(
    cls: ast.ClassDef, path: str, qualname: str, conv: Conventions, source: str
) -> list[F.MetadataDefaultFact]:
    out = []
    for method in cls.body:
        if not isinstance(method, ast.FunctionDef):
            continue
        for node in nodes(method):
            wanted = {f"self.{a}" for a in conv.metadata_attributes}
            target = (
                next((d for t in node.targets if (d := _dotted(t)) in wanted), None)
                if isinstance(node, ast.Assign)
                else None
            )
            if target is not None:
                text = ast.get_source_segment(source, method) or ""
                out.append(
                    F.MetadataDefaultFact(qualname, method.name, target[5:], F.Location(path, method.lineno), text)
                )
                break
    return out


def source_facts(
    path: str, modname: str, source: str, tree: ast.Module, conv: Conventions, resolve: Callable[[str], str]
) -> F.SourceFacts:
    """All setter-less id-source facts of one parsed module."""
    id_sources: list[F.IdSourceFact] = []
    dicts, flags, hooks, defaults = [], [], [], []
    for node in nodes(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        qualname = f"{modname}.{node.name}"
        found = _id_sources(node, path, qualname, conv)
        id_sources += found
        dicts += _dict_captures(node, path, qualname, {s.attribute for s in found} | set(conv.config_keys))
        flags += _flag_uses(node, path, qualname)
        if conv.hooks:
            hooks += _hook_calls(node, path, qualname, conv)
        if conv.metadata_attributes:
            defaults += _metadata_defaults(node, path, qualname, conv, source)
    serving = [
        F.Location(path, n.lineno) for n in nodes(tree) if isinstance(n, ast.Attribute) and n.attr in conv.serving_keys
    ]
    return F.SourceFacts(
        tuple(id_sources),
        tuple(_builders(tree, path, modname, conv, resolve)) if conv.builder_methods else (),
        tuple(_feeds(tree, path, conv)),
        tuple(dicts),
        tuple(flags) if dicts or id_sources else (),
        tuple(hooks),
        tuple(defaults),
        tuple(serving[:20]),
    )


def registry_updates(
    tree: ast.Module, path: str, conv: Conventions, patterns: Iterable[re.Pattern[str]]
) -> list[F.RegistryFact]:
    """``NAME.update({"Arch": f"{PREFIX}.module.Class"})`` (and ``NAME.update(Arch=...)``) in a
    registry file: values are dotted strings, plain or f-strings over module string constants."""
    constants = {
        n.targets[0].id: n.value.value
        for n in tree.body
        if isinstance(n, ast.Assign)
        and len(n.targets) == 1
        and isinstance(n.targets[0], ast.Name)
        and isinstance(n.value, ast.Constant)
        and isinstance(n.value.value, str)
    }
    out = []
    for stmt in tree.body:
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "update"):
            continue
        name = _dotted(call.func.value)
        if not name or not any(p.match(name) for p in patterns):
            continue
        pairs: list[tuple[str, ast.AST, int]] = []
        for arg in call.args:
            if isinstance(arg, ast.Dict):
                pairs += [
                    (k.value, v, k.lineno)
                    for k, v in zip(arg.keys, arg.values)
                    if isinstance(k, ast.Constant) and isinstance(k.value, str)
                ]
        pairs += [(kw.arg, kw.value, kw.value.lineno) for kw in call.keywords if kw.arg]
        for arch, value, line in pairs:
            target = _string_value(value, constants)
            if target and "." in target:
                out.append(F.RegistryFact(arch, target, F.Location(path, line), F.RegistryKind.REGISTRY_DICT, name))
    return out


def _string_value(node: ast.AST, constants: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for part in node.values:
            if isinstance(part, ast.Constant):
                parts.append(str(part.value))
            elif (
                isinstance(part, ast.FormattedValue) and isinstance(part.value, ast.Name) and part.value.id in constants
            ):
                parts.append(constants[part.value.id])
            else:
                return None
        return "".join(parts)
    return None
