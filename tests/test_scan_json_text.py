"""``scan --format json`` writes its document member by member, so that a warm scan can reuse
the text of what follows from the facts alone. The text must be exactly what ``json.dumps`` of
the whole document (with its ``report`` member) writes, with and without reused texts."""

from __future__ import annotations

import json

import pytest

from flowtrace import api
from flowtrace.render.report_data import report_extras, scan_json_with_report
from flowtrace.render.scan_json import dumps, object_text, scan_document, value_text


def _reference(result, findings) -> str:
    return dumps({**scan_document(result, findings), "report": report_extras(result, findings)})


@pytest.mark.parametrize("which", ["sglang_scan", "vllm_scan"])
def test_the_member_text_is_the_whole_document_text(which, request):
    result = request.getfixturevalue(which)
    findings = api.findings(result)
    assert findings and result.rows, "the fixture has findings and models"
    assert scan_json_with_report(result, findings) == _reference(result, findings)


def test_texts_kept_from_an_earlier_scan_fit_in_place(sglang_scan):
    findings = api.findings(sglang_scan)
    kept: dict[str, object] = {}
    computed: list[str] = []

    def keep(name, compute):
        if name not in kept:
            computed.append(name)
            kept[name] = compute()
        return kept[name]

    first = scan_json_with_report(sglang_scan, findings, keep)
    # the rows' facts are kept as values: each row's findings are added afresh
    assert {"json:models:rows", "json:diagnostics", "json:report"} <= set(computed)
    computed.clear()
    again = scan_json_with_report(sglang_scan, findings, keep)
    assert computed == []  # every facts-only member came from the kept texts
    assert again == first == _reference(sglang_scan, findings)
    # the findings are not kept: fewer findings, the same kept texts, a different document
    fewer = findings[:1]
    assert scan_json_with_report(sglang_scan, fewer, keep) == _reference(sglang_scan, fewer)
    rows = json.loads(scan_json_with_report(sglang_scan, fewer, keep))["models"]
    assert {f["fingerprint"] for r in rows for f in r["findings"]} == {fewer[0].fingerprint}


@pytest.mark.parametrize("value", [{}, [], {"a": [1, {"b": "x\ny"}], "c": {}}, {"é": ["\u2028", None, 1.5]}])
def test_object_text_nests_like_json_dumps(value):
    doc = {"k": value, "other": [value, 2]}
    assert object_text([(k, value_text(v)) for k, v in doc.items()]) == json.dumps(doc, indent=2, ensure_ascii=False)
    assert object_text([]) == json.dumps({}, indent=2)
