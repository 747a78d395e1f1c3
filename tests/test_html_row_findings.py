"""Which findings the HTML report shows on a model row (issue 27: a broken row always shows the
finding that explains it). One finding per root cause sits on one class; the report also shows
it on every row the cause concerns, decided from the scan document's chain fields, never from
message text. The document below is written by hand, so each expectation follows from it."""

from __future__ import annotations

from flowtrace.render.html import build_context


def _model(qualname: str, file: str, line: int, capture: dict | None) -> dict:
    return {"class": qualname.rsplit(".", 1)[-1], "qualname": qualname, "file": file, "line": line, "registered": True, "support": "broken", "category": "broken", "capture": capture}


def _setter_capture(kinds: list[str], outcome_at: str = "pkg/a.py:10") -> dict:
    return {"setter": {"qualname": "pkg.a.Base.set_x", "file": "pkg/a.py", "line": 10}, "problem_kinds": kinds, "outcome_at": outcome_at}


def _source_capture(outcome_at: str) -> dict:
    return {"setter": None, "id_source": {"kind": "config", "label": "aux_layers", "at": "pkg/f.py:3"}, "problem_kinds": [], "outcome_at": outcome_at}


def _finding(rule: str, symbol: str, file: str, line: int, kind: str, related: list | None = None) -> dict:
    return {"rule": rule, "name": rule.lower(), "severity": "info", "file": file, "line": line, "message": "m", "symbol": symbol, "fingerprint": rule + symbol, "kind": kind, "related": related or []}


DOC = {
    "schema": "flowtrace.scan/1",
    "root": "/nonexistent",
    "models": [
        _model("pkg.a.Base", "pkg/a.py", 5, _setter_capture(["setter_writes_nothing"])),
        _model("pkg.b.Child", "pkg/b.py", 7, _setter_capture(["setter_writes_nothing"])),
        _model("pkg.c.Other", "pkg/c.py", 9, _setter_capture(["no_capture_site"], outcome_at="pkg/cfg.py:88")),
        _model("pkg.amd.m.Vl", "pkg/amd/m.py", 20, _setter_capture(["delegate_lacks_setter"])),
        _model("pkg.nv.m.Vl", "pkg/nv/m.py", 30, _setter_capture(["delegate_lacks_setter"])),
        _model("pkg.f.F", "pkg/f.py", 12, _source_capture("pkg/cfg.py:88")),
        _model("pkg.g.G", "pkg/g.py", 14, _source_capture("pkg/cfg.py:88")),
        _model("pkg.h.RegForCausalLM", "pkg/h.py", 3, None),
        _model("pkg.h.RegModel", "pkg/h.py", 20, _setter_capture(["capture_without_setter"])),
    ],
    "findings": [
        # on the class defining the setter, about the setter's own body
        _finding("FT017", "pkg.a.Base", "pkg/a.py", 10, "setter_writes_nothing"),
        # one class per platform: merged, the other copy's place kept in related
        _finding("FT021", "pkg.amd.m.Vl", "pkg/amd/m.py", 20, "interface_holder_cannot_capture", [{"file": "pkg/nv/m.py", "line": 30}]),
        # at the config builder line that decides two setter-less rows
        _finding("FT023", "pkg.f.F", "pkg/cfg.py", 88, "method_refused"),
        # on an inner model, its path running through the registered class that builds it
        {**_finding("FT002", "pkg.h.RegModel", "pkg/h.py", 24, "capture_without_setter"), "flow": [{"file": "pkg/h.py", "line": 3, "label": "registered class"}]},
    ],
}


def _shown() -> dict[str, set[str]]:
    return {m.qualname: {f.rule for f in m.findings} for m in build_context(DOC)["models"]}


def test_a_setter_defect_shows_on_every_row_whose_chain_has_it():
    shown = _shown()
    assert shown["pkg.a.Base"] == {"FT017"}
    assert shown["pkg.b.Child"] == {"FT017"}  # inherits Base's setter and has the same problem
    assert "FT017" not in shown["pkg.c.Other"]  # same setter, another problem: not explained by it


def test_a_merged_per_platform_copy_shows_the_finding_at_its_own_place():
    shown = _shown()
    assert shown["pkg.amd.m.Vl"] == {"FT021"} and shown["pkg.nv.m.Vl"] == {"FT021"}


def test_a_setter_less_row_shows_the_finding_where_its_outcome_is_decided():
    shown = _shown()
    assert shown["pkg.f.F"] == {"FT023"} and shown["pkg.g.G"] == {"FT023"}
    assert "FT023" not in shown["pkg.c.Other"]  # a setter row's outcome_at is not a cause of its own


def test_a_finding_shows_on_the_classes_its_path_runs_through():
    shown = _shown()
    assert shown["pkg.h.RegModel"] == {"FT002"} and shown["pkg.h.RegForCausalLM"] == {"FT002"}
    assert "FT002" not in shown["pkg.g.G"]
