"""The data an HTML report embeds beyond ``flowtrace.scan/1``: capture paths, worked
examples, the graph, rule texts and source snippets.

Kept separate from the JSON schema so the public document stays small and stable, while the
report (one self-contained file) carries what a reviewer clicks through.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from flowtrace.model import facts as F

if TYPE_CHECKING:
    from flowtrace.analysis.scan import ScanResult
    from flowtrace.checks.base import Finding
    from flowtrace.render.scan_json import Keep

EXAMPLE_LAYERS = 32  # the worked example uses a typical layer count when the target's is unknown
SNIPPET_CONTEXT = 3


def _step(kind: str, label: str, location: F.Location | None) -> dict[str, Any]:
    return {
        "kind": kind,
        "label": label,
        "file": location.file if location else None,
        "line": location.line if location else None,
    }


def capture_paths(result: ScanResult) -> dict[str, list[dict[str, Any]]]:
    paths: dict[str, list[dict[str, Any]]] = {}
    keys = result.engine_keys
    for row in result.rows:
        c = row.capture
        if c is None:
            continue
        steps = [_step("config", " or ".join(keys) or "draft config ids", None)]
        for s in c.chain:
            steps.append(
                _step("setter", f"{s.class_qualname.rsplit('.', 1)[-1]}.{s.method} ({s.id_transform})", s.location)
            )
        if c.site is not None:
            attribute = c.site.attribute or next(
                (w.rsplit(".", 1)[-1] for s in c.chain for w in s.writes), "capture attribute"
            )
            steps.append(_step("attribute", f"{(c.holder or '').rsplit('.', 1)[-1]}.{attribute}", c.site.location))
            steps.append(
                _step(
                    "loop",
                    f"{c.site.function}: for {c.site.loop_variable} in {c.site.loop_range} — {c.site.mechanism}, point"
                    f" {c.point}",
                    c.site.location,
                )
            )
            for evidence in c.point_evidence:
                steps.append(_step("loop", c.point_note, evidence))
            steps.append(_step("container", c.site.container or "aux", c.site.location))
        for ff in result.files:
            for concat in ff.concat_sites:
                if c.holder and ff.module == c.holder.rpartition(".")[0]:
                    steps.append(_step("concat", concat.expression, concat.location))
        # the draft side: an fc next to a concatenation of the captured states
        for ff in result.files:
            if ff.fc_definitions and ff.concat_sites:
                steps.append(_step("concat", ff.concat_sites[0].expression, ff.concat_sites[0].location))
                fc = ff.fc_definitions[0]
                steps.append(
                    _step("fc", f"{fc.class_qualname.rsplit('.', 1)[-1]}.fc(in_features={fc.in_features})", fc.location)
                )
        paths[row.qualname] = steps
    return paths


def worked_examples(result: ScanResult) -> dict[str, dict[str, Any]]:
    from flowtrace.analysis.trace import trace_row

    out: dict[str, dict[str, Any]] = {}
    for row in result.rows:
        if row.capture is None or not row.registered:
            continue
        traced = trace_row(result.project, row, None, EXAMPLE_LAYERS)
        out[row.qualname] = {
            "num_layers": EXAMPLE_LAYERS,
            "layer_ids": None,
            "boundaries": list(traced.boundaries) if traced.boundaries is not None else None,
            "note": "default ids with L = 32" if traced.boundaries is not None else "; ".join(traced.problems),
        }
    return out


def rule_texts() -> dict[str, dict[str, str]]:
    from flowtrace.checks.base import all_rules

    return {
        r.code: {"name": r.name, "severity": r.severity, "summary": r.summary, "rationale": r.rationale, "fix": r.fix}
        for r in all_rules()
    }


def source_snippets(result: ScanResult, findings: list[Finding]) -> dict[str, dict[str, str]]:
    """A few lines around each finding: {file: {line number: text}}."""
    wanted: dict[str, set[int]] = {}
    for f in findings:
        wanted.setdefault(f.file, set()).update(range(max(1, f.line - SNIPPET_CONTEXT), f.line + SNIPPET_CONTEXT + 1))
    out: dict[str, dict[str, str]] = {}
    root = result.root if result.root.is_dir() else result.root.parent
    for file, lines in sorted(wanted.items()):
        try:
            text = (root / file).read_bytes()[:4_000_000].decode("utf-8", errors="replace").splitlines()
        except OSError:
            continue
        out[file] = {str(n): text[n - 1] for n in sorted(lines) if 0 < n <= len(text)}
    return out


REPORT_KEYS = ("paths", "examples", "rules", "graph", "sources")


def derived_extras(result: ScanResult) -> dict[str, Any]:
    """The part of :func:`report_extras` that follows from the facts alone (what a memo keyed
    by the index fingerprint may keep): capture paths, worked examples, rule texts, the graph."""
    from flowtrace.analysis.graph import to_json

    return {
        "paths": capture_paths(result),
        "examples": worked_examples(result),
        "rules": rule_texts(),
        "graph": json.loads(to_json(result.graph)),
    }


def report_extras(result: ScanResult, findings: list[Finding], derived: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the report needs beyond ``flowtrace.scan/1``, computed from the scan itself;
    ``derived``: :func:`derived_extras` when the caller has it already. The source snippets
    are read from the files each time (text, not facts)."""
    return {
        **(derived if derived is not None else derived_extras(result)),
        "sources": source_snippets(result, findings),
    }


def scan_json_with_report(result: ScanResult, findings: list[Finding], keep: Keep | None = None) -> str:
    """What ``scan --format json`` writes: the scan document and, under ``report``, what
    ``flowtrace report --scan`` renders. ``keep`` supplies the texts that follow from the facts
    alone (from the memo of an earlier scan of the same facts); stats, findings and the source
    snippets are written afresh. The same text as ``dumps({**scan_document(), "report": ...})``."""
    from flowtrace.render.scan_json import member_texts, object_text, value_text

    def derived() -> list[tuple[str, str]]:
        return [(name, value_text(value)) for name, value in derived_extras(result).items()]

    report = (keep("json:report", derived) if keep is not None else derived()) + [
        ("sources", value_text(source_snippets(result, findings)))
    ]
    return object_text(member_texts(result, findings, keep) + [("report", object_text(report))]) + "\n"


def report_document(result: ScanResult, findings: list[Finding]) -> dict[str, Any]:
    from flowtrace.render.scan_json import scan_document

    doc = scan_document(result, findings)
    doc.update(report_extras(result, findings))
    return doc


def report_document_from_scan(doc: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The report document from a saved ``scan --format json`` (its ``report`` member, which
    ``scan`` embeds so that ``flowtrace report --scan`` renders what ``scan --html`` did).

    Returns (document, complete): ``complete`` is False for a document without that member
    (written by an older flowtrace), which renders without paths, graph and snippets.
    """
    extras = doc.get("report")
    out = {k: v for k, v in doc.items() if k != "report"}
    if not isinstance(extras, dict):
        return out, False
    out.update({k: extras[k] for k in REPORT_KEYS if k in extras})
    return out, all(k in extras for k in REPORT_KEYS)
