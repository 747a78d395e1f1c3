"""Package ``__init__`` files: what each imports when it runs, under which branch tests.

Engines pick per-platform copies of a model in a package's ``__init__.py`` and re-export
names from other packages there::

    if platform.is_a():
        from .vendor_a.model import XForCausalLM
    elif platform.is_b():
        from .vendor_b.model import XForCausalLM as YForCausalLM
    else:
        from generic.x import XForCausalLM

    def __getattr__(name):          # PEP 562: a lazy re-export
        if name == "Z":
            from .lazy import Z
            return Z

One walk records every ``from ... import`` that can run, with the tests of the branches around
it as the engine's source text (:class:`flowtrace.model.facts.PackageImport`); the re-exports
a registry entry naming the package may load and the per-platform selection of a copy
(``analysis/platform_copies``) are both read from it. The shape is structural: no platform
is named here. ``TYPE_CHECKING`` blocks never run and are left out; in a function, a test
of its own parameters says which name was asked for, not which copy runs, so it is no branch.

The index reads the ``__init__.py`` files above every indexed file (a few levels: the
dispatch sits next to the copies), whether or not the prefilter selected them, and the
``Name:`` of the tree's top-level ``*.dist-info`` (an unpacked wheel names its build), so
both are facts of the index and keyed with it, never read later from disk.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path, PurePosixPath

from flowtrace.model import facts as F

MAX_LEVELS = 3  # pkg/vendor_b/model.py -> pkg/vendor_b/__init__.py, pkg/__init__.py, parent/__init__.py
_STATIC_ONLY = ("TYPE_CHECKING", "typing.TYPE_CHECKING")
_MAX_DIST_INFOS = 8


def package_imports(path: str, tree: ast.Module, package: str) -> tuple[F.PackageImport, ...]:
    """Every ``from ... import`` of a package ``__init__`` that can run (nothing for another file)."""
    if not path.endswith("__init__.py"):
        return ()
    out: list[F.PackageImport] = []
    _Walk(package, out).block(tree.body, (), frozenset(), "")
    return tuple(out)


class _Walk:
    def __init__(self, package: str, out: list[F.PackageImport]) -> None:
        self.package, self.out = package, out

    def block(
        self, body: list[ast.stmt], branches: tuple[F.Branch, ...], params: frozenset[str], function: str
    ) -> None:
        for node in body:
            if isinstance(node, ast.If):
                self.branch(node, branches, params, function)
            elif isinstance(node, ast.ImportFrom):
                self.imported(node, branches, function)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = frozenset(a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs))
                self.block(node.body, branches, params | names, function or node.name)
            elif not isinstance(node, ast.ClassDef):
                for inner in _blocks(node):  # try / with / for / while / match: no test of their own
                    self.block(inner, branches, params, function)

    def branch(self, node: ast.If, branches: tuple[F.Branch, ...], params: frozenset[str], function: str) -> None:
        test = _runtime(node.test)
        if isinstance(test, str) and params & {n.id for n in ast.walk(node.test) if isinstance(n, ast.Name)}:
            self.block(node.body, branches, params, function)  # which name was asked for: no branch
            self.block(node.orelse, branches, params, function)
            return
        if test is not False:
            self.block(node.body, branches if test is True else (*branches, F.Branch(test, True)), params, function)
        if test is not True:
            self.block(
                node.orelse,
                branches if test is False else (*branches, _excluded(node.test, test)),
                params,
                function,
            )

    def imported(self, node: ast.ImportFrom, branches: tuple[F.Branch, ...], function: str) -> None:
        base = absolute_base(node, self.package)
        module = node.module or ""
        for alias in node.names:
            qualified = f"{base}.{alias.name}" if base else alias.name
            self.out.append(
                F.PackageImport(
                    module,
                    node.level,
                    alias.name,
                    alias.asname or alias.name,
                    qualified,
                    branches,
                    node.lineno,
                    function,
                )
            )


def _blocks(node: ast.stmt) -> list[list[ast.stmt]]:
    out: list[list[ast.stmt]] = []
    for field in ("body", "handlers", "orelse", "finalbody", "cases"):
        value = getattr(node, field, None)
        if not isinstance(value, list):
            continue
        if field in ("handlers", "cases"):
            out.extend(clause.body for clause in value)
        else:
            out.append(value)
    return out


def absolute_base(node: ast.ImportFrom, package: str) -> str:
    """The absolute module a (possibly relative) ``from ... import`` reads from."""
    base = node.module or ""
    if not node.level:
        return base
    parts = package.split(".") if package else []
    anchor = ".".join(parts[: max(len(parts) - (node.level - 1), 0)])
    return ".".join(x for x in (anchor, base) if x)


def _static_only(node: ast.expr) -> bool:
    return ast.unparse(node) in _STATIC_ONLY if isinstance(node, (ast.Name, ast.Attribute)) else False


def _runtime(test: ast.expr) -> str | bool:
    """The test as it runs: ``TYPE_CHECKING`` is False at run time (``TYPE_CHECKING or X`` is
    X); True/False when decided, else the source text of what remains."""
    if _static_only(test):
        return False
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
        rest = [v for v in test.values if not _static_only(v)]
        if not rest:
            return False
        if len(rest) < len(test.values):
            return _runtime(rest[0]) if len(rest) == 1 else " or ".join(ast.unparse(v) for v in rest)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _runtime(test.operand)
        return (not inner) if isinstance(inner, bool) else f"not {inner}"
    return ast.unparse(test)


def _excluded(node: ast.expr, text: str) -> F.Branch:
    """The branch of an ``else``: the test excluded; ``not X`` excluded is X itself."""
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
        rest = [v for v in node.values if not _static_only(v)]
        if len(rest) == 1:
            return _excluded(rest[0], text)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        inner = _runtime(node.operand)
        if isinstance(inner, str):
            return F.Branch(inner, True)
    return F.Branch(text, False)


# -- which packages the index reads ----------------------------------------------------------
def ancestors(path: str) -> list[str]:
    """The ``__init__.py`` files of the packages around ``path`` (a tree-relative module path),
    up to :data:`MAX_LEVELS` levels, nearest first."""
    parts = PurePosixPath(path).with_suffix("").parts
    return [
        PurePosixPath(*parts[:-up], "__init__.py").as_posix() for up in range(1, min(MAX_LEVELS, len(parts) - 1) + 1)
    ]


def read_package(path: str, module: str, data: bytes) -> F.PackageFacts:
    """One ``__init__.py``'s imports (none when it does not parse: it then imports nothing
    a branch could pick, and its own diagnostic is the business of the tier that reads it)."""
    try:
        tree = ast.parse(data, filename=path)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return F.PackageFacts(path, module, ())
    return F.PackageFacts(path, module, package_imports(path, tree, module))


def distributions(root: Path) -> tuple[str, ...]:
    """The normalised ``Name:`` of each ``*.dist-info/METADATA`` at the top of ``root``."""
    out = set()
    for meta in sorted(root.glob("*.dist-info/METADATA"))[:_MAX_DIST_INFOS] if root.is_dir() else ():
        try:
            with meta.open(encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    if line.startswith("Name:"):
                        out.add(normalised(line[5:]))
                        break
                    if not line.strip():
                        break
        except OSError:
            continue
    return tuple(sorted(out))


def normalised(name: str) -> str:
    """A distribution name as packaging compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name.strip().lower())
