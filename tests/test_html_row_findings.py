"""Which findings the HTML report shows on a model row (issue 27: a broken row always shows the
finding that explains it). One finding per root cause sits on one class; the report also shows
it on every row the cause concerns, decided from the scan document's chain fields, never from
message text. The document below is written by hand, so each expectation follows from it."""

from __future__ import annotations

from flowtrace.render.html import build_context


def _model(qualname: str, file: str, line: int, capture: dict | None) -> dict:
    return {
        "class": qualname.rsplit(".", 1)[-1],
        "qualname": qualname,
        "file": file,
        "line": line,
        "registered": True,
        "support": "broken",
        "category": "broken",
        "capture": capture,
    }


def _setter_capture(kinds: list[str], outcome_at: str = "pkg/a.py:10") -> dict:
    return {
        "setter": {"qualname": "pkg.a.Base.set_x", "file": "pkg/a.py", "line": 10},
        "problem_kinds": kinds,
        "outcome_at": outcome_at,
    }


def _source_capture(outcome_at: str) -> dict:
    return {
        "setter": None,
        "id_source": {"kind": "config", "label": "aux_layers", "at": "pkg/f.py:3"},
        "problem_kinds": [],
        "outcome_at": outcome_at,
    }


def _finding(rule: str, symbol: str, file: str, line: int, kind: str, related: list | None = None) -> dict:
    return {
        "rule": rule,
        "name": rule.lower(),
        "severity": "info",
        "file": file,
        "line": line,
        "message": "m",
        "symbol": symbol,
        "fingerprint": rule + symbol,
        "kind": kind,
        "related": related or [],
    }


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
        _finding(
            "FT021",
            "pkg.amd.m.Vl",
            "pkg/amd/m.py",
            20,
            "interface_holder_cannot_capture",
            [{"file": "pkg/nv/m.py", "line": 30}],
        ),
        # at the config builder line that decides two setter-less rows
        _finding("FT023", "pkg.f.F", "pkg/cfg.py", 88, "method_refused"),
        # on an inner model, its path running through the registered class that builds it
        {
            **_finding("FT002", "pkg.h.RegModel", "pkg/h.py", 24, "capture_without_setter"),
            "flow": [{"file": "pkg/h.py", "line": 3, "label": "registered class"}],
        },
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


def _chain(entry: str, *through: str, holder: str = "pkg.s.SModel", site: str = "pkg.s.SModel.forward") -> dict:
    """A setter row's capture whose ids pass ``entry`` then each of ``through`` (delegation)."""
    links = [
        {"setter": s, "transform": "delegates" if i < len(through) else "conditional", "file": "pkg/x.py", "line": 1}
        for i, s in enumerate((entry, *through))
    ]
    return {
        "setter": {"qualname": entry, "file": "pkg/x.py", "line": 1},
        "transform_chain": links,
        "holder": holder,
        "capture_site": {"qualname": site},
        "problem_kinds": [],
    }


SETTER = "pkg.s.S.set_x"
CHAIN_DOC = {
    "schema": "flowtrace.scan/1",
    "models": [
        _model("pkg.s.S", "pkg/s.py", 5, _chain(SETTER)),  # defines the setter
        _model("pkg.s.SV3", "pkg/s.py", 40, _chain(SETTER)),  # inherits it
        _model("pkg.k.Wrap", "pkg/k.py", 3, _chain("pkg.k.Wrap.set_x", SETTER)),  # delegates to an S
        {**_model("pkg.s.SNextN", "pkg/s.py", 60, _chain(SETTER)), "draft": True},  # a draft built on S
        _model(
            "pkg.o.Other",
            "pkg/o.py",
            3,
            _chain("pkg.o.Other.set_x", holder="pkg.o.OModel", site="pkg.o.OModel.forward"),
        ),
        _model("pkg.t.T", "pkg/t.py", 3, _chain("pkg.t.T.set_x", holder="pkg.t.TOuter", site="pkg.s.SModel.forward")),
    ],
    "findings": [
        # the setter's own transform: every row whose ids pass through it
        _finding("FT007", SETTER, "pkg/s.py", 12, "transform_inconsistent"),
        # a grouped cause naming its rows
        {**_finding("FT010", "pkg.o.Other", "pkg/o.py", 30, "last_layer_unreachable"), "affects": ["pkg.s.SV3"]},
        # a forward dropping the states: the rows whose site is that class's forward
        _finding("FT020", "pkg.s.SModel", "pkg/s.py", 90, "return_dropped"),
    ],
}


def test_a_setter_finding_shows_on_every_row_that_runs_the_setter():
    from flowtrace.render.finding_rows import finding_rows

    models = CHAIN_DOC["models"]
    names = [[models[i]["qualname"] for i in rows] for rows in finding_rows(models, CHAIN_DOC["findings"])]
    # own class, the inheriting subclass, the wrapper delegating to it; not the draft, not Other
    assert names[0] == ["pkg.s.S", "pkg.s.SV3", "pkg.k.Wrap"]
    assert names[1] == ["pkg.o.Other", "pkg.s.SV3"]  # its symbol's row, then the row it names
    # SModel's forward records for S, SV3, Wrap and T (T's holder is another class); not the draft
    assert sorted(names[2]) == ["pkg.k.Wrap", "pkg.s.S", "pkg.s.SV3", "pkg.t.T"]


def test_the_json_row_findings_are_the_same_decision():
    from flowtrace.render.finding_rows import row_findings

    listed = row_findings(CHAIN_DOC["models"], CHAIN_DOC["findings"])
    by_row = {m["qualname"]: [f["rule"] for f in fs] for m, fs in zip(CHAIN_DOC["models"], listed)}
    assert by_row == {
        "pkg.s.S": ["FT007", "FT020"],
        "pkg.s.SV3": ["FT007", "FT010", "FT020"],
        "pkg.k.Wrap": ["FT007", "FT020"],
        "pkg.s.SNextN": [],
        "pkg.o.Other": ["FT010"],
        "pkg.t.T": ["FT020"],
    }
