"""The capture-site shapes of flowtrace.index.sites: found by the package walk, each running
its own VALID / INVALID example loops.

Each VALID example lists the (mechanism, point) of every site it holds, written from
reading the snippet: which side of the layer call records, and which label is tested."""

from __future__ import annotations

import ast
import pkgutil
import textwrap
from pathlib import Path

import pytest

import flowtrace.index.sites as sites_pkg
from flowtrace.engines.profiles import Conventions, select_profiles
from flowtrace.index import sites
from flowtrace.index.sites.base import PointDecision, SiteShape
from flowtrace.index.visitors import FileAnalyzer
from flowtrace.model import facts as F


@pytest.fixture(scope="module")
def conv() -> Conventions:
    return Conventions.merge(select_profiles(Path("."), None))


def _sites(source: str, conv: Conventions) -> list[F.CaptureSiteFact]:
    body = textwrap.indent(textwrap.dedent(source).strip("\n"), "    ")
    text = f"class ExampleModel:\n{body}\n"
    return list(FileAnalyzer("pkg/example.py", text, ast.parse(text), conv).facts().capture_sites)


def test_every_module_of_the_package_is_a_registered_shape() -> None:
    """A new module is found by the walk, or this fails (a module without SHAPE)."""
    modules = {m.name for m in pkgutil.iter_modules(sites_pkg.__path__)} - sites.INFRASTRUCTURE
    assert modules == set(sites.shape_modules())
    assert {s.name for s in sites.registered()} == {"append", "buffer", "callback", "dict", "flagged", "helper", "hook"}
    assert len(sites.registered()) == len(modules)


def test_every_mechanism_a_loop_records_with_belongs_to_a_shape() -> None:
    emitted = {m for s in sites.registered() for m in s.mechanisms}
    # dict_store is the setter-less dict capture of index/config_sources; unknown is no site.
    assert emitted == set(F.Mechanism) - {F.Mechanism.DICT_STORE, F.Mechanism.UNKNOWN}


_SHAPES = {s.name: s for s in sites.registered()}


@pytest.mark.parametrize("name", sorted(_SHAPES))
def test_valid_examples_find_exactly_their_sites(name: str, conv: Conventions) -> None:
    shape: SiteShape = _SHAPES[name]
    assert shape.VALID, f"{name} has no VALID example"
    for source, expected in shape.VALID:
        found = [(s.mechanism, s.point) for s in _sites(source, conv)]
        assert found == list(expected), source
        assert all(m in shape.mechanisms for m, _ in found)


@pytest.mark.parametrize("name", sorted(_SHAPES))
def test_invalid_examples_find_nothing(name: str, conv: Conventions) -> None:
    shape: SiteShape = _SHAPES[name]
    assert shape.INVALID, f"{name} has no INVALID example"
    for source in shape.INVALID:
        assert _sites(source, conv) == [], source


def test_point_decision_is_asked_of_the_shape(conv: Conventions) -> None:
    """Resolution follows callbacks and flagged dict stores into the layer's forward and hooks
    to where the layer calls them; every other site is decided in the loop."""
    decided = {}
    for shape in sites.registered():
        for source, _ in shape.VALID:
            for site in _sites(source, conv):
                decided[(str(site.mechanism), site.callback_parameter is not None)] = sites.point_decision(site)
    assert decided == {
        ("append", False): PointDecision.IN_LOOP,
        ("helper", False): PointDecision.IN_LOOP,
        ("buffer", False): PointDecision.IN_LOOP,
        ("dict", False): PointDecision.IN_LOOP,
        ("dict", True): PointDecision.LAYER_FORWARD,
        ("callback", True): PointDecision.LAYER_FORWARD,
        ("flagged", True): PointDecision.LAYER_FORWARD,
        ("hook", True): PointDecision.HOOK_CALL,
    }


def test_sites_of_one_loop_keep_the_calls_order(conv: Conventions) -> None:
    """An append and a helper call in one loop are listed in the order the loop makes them."""
    source = """
    def forward(self, h, r):
        aux = []
        for i, layer in enumerate(self.layers):
            self._keep(aux, i, h, r)
            h, r = layer(h, r)
            if i + 1 in self.layers_to_capture:
                aux.append(h + r)
        return h, aux
    """
    found = [(s.mechanism, s.point, s.location.line) for s in _sites(source, conv)]
    assert found == [(F.Mechanism.HELPER, F.Point.INPUT, 5), (F.Mechanism.APPEND, F.Point.INPUT, 8)]


def test_calls_with_tests_in_walk_order_with_the_ifs_around_each():
    """The calls the shapes read: pre-order, each with the tests of the ``if`` statements
    around it (an ``if``'s own test for the calls in it, its ``else`` arm included), inside
    lambdas and class bodies but not nested functions."""
    from flowtrace.index.sites.context import calls_with_tests

    source = textwrap.dedent(
        """
        a()
        if b(c()):
            d(e())
            def g():
                h()
            k = lambda: m(p=q())
        else:
            if r:
                n()
        class C:
            o()
        """
    )
    calls = calls_with_tests(ast.parse(source).body)
    found = [(ast.unparse(call), [ast.unparse(t) for t in tests]) for call, tests in calls]
    assert found == [
        ("a()", []),
        ("b(c())", ["b(c())"]),
        ("c()", ["b(c())"]),
        ("d(e())", ["b(c())"]),
        ("e()", ["b(c())"]),
        ("m(p=q())", ["b(c())"]),
        ("q()", ["b(c())"]),
        ("n()", ["b(c())", "r"]),
        ("o()", []),
    ]
