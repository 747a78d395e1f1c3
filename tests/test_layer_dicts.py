"""The one recogniser of a dict keyed by layer (index/layer_dicts.py) that the setter path's
``dict`` site shape and the setter-less path's config sources both read."""

from __future__ import annotations

import ast

import pytest

from flowtrace.index.layer_dicts import dict_store, ids_order_read, membership


def _ids_of(node: ast.expr) -> str | None:
    """As a reader would: ``self.<attr>`` names the ids when the attribute is one of them."""
    if isinstance(node, ast.Attribute) and node.attr in {"layers_to_capture", "aux_layers"}:
        return node.attr
    return None


def _stmt(code: str) -> ast.stmt:
    return ast.parse(code).body[0]


def _expr(code: str) -> ast.expr:
    return ast.parse(code, mode="eval").body


def test_a_store_of_one_key_of_a_local_is_a_dict_store():
    store = dict_store(_stmt("by_layer[i + 1] = h + r"))
    assert store is not None
    assert (store.container, ast.unparse(store.target.slice)) == ("by_layer", "i + 1")


@pytest.mark.parametrize(
    "code",
    [
        "by_layer[i:j] = h",  # a slice, not one key
        "by_layer[i, j] = h",  # several keys
        "self.by_layer[i] = h",  # an attribute, not a local
        "a = by_layer[i] = h",  # two targets
        "by_layer[i] += h",  # an update, not a store
        "h = by_layer[i]",  # a read
    ],
)
def test_what_is_not_a_dict_store(code):
    assert dict_store(_stmt(code)) is None


@pytest.mark.parametrize(
    ("code", "attribute"),
    [
        ("i in self.layers_to_capture", "layers_to_capture"),
        ("i + 1 in self.aux_layers", "aux_layers"),
        ("i not in self.layers_to_capture", None),  # the opposite test
        ("0 < i in self.layers_to_capture", None),  # a chain: not one membership
        ("i in self.other", None),  # not the ids
        ("i == self.layers_to_capture", None),
    ],
)
def test_membership_names_the_ids_attribute(code, attribute):
    assert membership(_expr(code), _ids_of) == attribute


@pytest.mark.parametrize(
    ("code", "attribute"),
    [
        ("[by_layer[i] for i in self.layers_to_capture]", "layers_to_capture"),
        ("(by_layer[i] for i in self.aux_layers if i in by_layer)", "aux_layers"),
        ("[other[i] for i in self.layers_to_capture]", None),  # another container
        ("[by_layer[i] for i in range(4)]", None),  # not in ids order
        ("list(by_layer.values())", None),  # insertion order
        ("{i: by_layer[i] for i in self.layers_to_capture}", None),  # a dict, not a sequence
    ],
)
def test_a_read_in_ids_order(code, attribute):
    assert ids_order_read(_expr(code), "by_layer", _ids_of) == attribute
