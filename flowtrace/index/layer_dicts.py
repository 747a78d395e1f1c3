"""A dict keyed by layer, recognised once.

A layer loop that keeps states as ``d[i] = x`` under a test that ``i`` is one of the ids, and
reads them back as ``[d[i] for i in <ids>]`` (config order) or otherwise (insertion order, the
loop's), is found on both capture paths: a setter's ids (the ``dict`` site shape) and ids read
from a config or build context (``config_sources``). What differs between them is only which
expressions name the ids; the shape of the store, of the membership test and of the
ids-order read is decided here, so that the two paths cannot drift apart.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass

from flowtrace.index.syntax import is_name

IdsOf = Callable[[ast.expr], "str | None"]  # the ids attribute an expression names, if any


@dataclass(frozen=True, slots=True)
class DictStore:
    """``container[key] = value``: one target, a local name, one key."""

    stmt: ast.Assign
    target: ast.Subscript
    container: str


def dict_store(stmt: ast.stmt) -> DictStore | None:
    """The store when ``stmt`` writes one key of a local (not a slice nor several keys)."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
        return None
    target = stmt.targets[0]
    if not (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)):
        return None
    if isinstance(target.slice, (ast.Slice, ast.Tuple)):
        return None
    return DictStore(stmt, target, target.value.id)


def membership(test: ast.AST, ids_of: IdsOf) -> str | None:
    """The ids attribute of ``k in <ids>`` (one ``in``, nothing chained)."""
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.In):
        return ids_of(test.comparators[0])
    return None


def ids_order_read(node: ast.AST, container: str, ids_of: IdsOf) -> str | None:
    """The ids attribute of ``[container[...] for i in <ids> ...]`` (or a generator): the
    dict read back in the order the ids were given."""
    if not (isinstance(node, (ast.ListComp, ast.GeneratorExp)) and node.generators):
        return None
    element = node.elt
    if not (isinstance(element, ast.Subscript) and is_name(element.value, container)):
        return None
    return ids_of(node.generators[0].iter)
