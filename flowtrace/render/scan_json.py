"""The ``flowtrace.scan/1`` JSON document: the public, versioned scan interface.

Fields are only ever added; renaming or removing one means bumping the schema version.
Output is deterministic: lists are sorted, and timing lives only under ``stats.seconds``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Callable

from flowtrace import __version__
from flowtrace.model import facts as F

if TYPE_CHECKING:
    from flowtrace.model.links import CaptureChain
    from flowtrace.analysis.scan import ScanResult
    from flowtrace.checks.base import Finding
    from flowtrace.analysis.resolve import ModelRow

SCHEMA = "flowtrace.scan/1"


def _site(chain: CaptureChain) -> dict[str, Any] | None:
    """Link 4 (with the recorded expression of link 5)."""
    site = chain.site
    if site is None:
        return None
    owner = site.owner or ""
    return {
        "qualname": site.function if "." not in owner else f"{owner.rsplit('.', 1)[0]}.{site.function}",
        "file": site.location.file,
        "line": site.location.line,
        "mechanism": site.mechanism,
        "point": site.point,
        "note": site.note,
        "loop_range": " ".join((site.loop_range or "").split()) or None,
        "attribute": site.attribute,
        "captured_expression": chain.stream.expression if chain.stream is not None else None,
    }


def _stream(c: CaptureChain) -> dict[str, Any] | None:
    s = c.stream
    if s is None:
        return None
    return {
        "kind": str(s.kind),
        "raising_index": s.raising_index,
        "raises_at": str(s.raises_at) if s.raises_at else None,
        "reason": s.reason,
    }


def _slots(c: CaptureChain) -> dict[str, Any] | None:
    s = c.slots
    if s is None:
        return None
    return {
        "collector": s.collector,
        "sized_by": s.sized_by,
        "check": s.check,
        "check_at": str(s.check_at) if s.check_at else None,
        "finalize_at": str(s.finalize_at) if s.finalize_at else None,
    }


def _returns(c: CaptureChain) -> dict[str, Any] | None:
    """Link 6: whether the captured states reach the runner, and the statement that decides it."""
    r = c.returns
    if r is None:
        return None
    return {
        "kind": str(r.kind),
        "at": str(r.location) if r.location else None,
        "raises": r.raises,
        "decided": r.decided,
        "reason": r.reason,
    }


def _capture(row: ModelRow) -> dict[str, Any] | None:
    """A setter row's ``capture`` object: a view of its chain's links (the entry transform,
    holder, site, stream, slots, concat); the row adds what no link holds (defaults found
    through a getter, the delegate, the problems' texts, the pipeline guard)."""
    c, chain = row.capture, row.chain
    if c is None or chain is None or not chain.transforms:
        return None
    entry, holder, site = chain.transforms[0], chain.holder, chain.site
    return {
        "setter": {
            "qualname": f"{entry.owner}.{entry.method}",
            "file": entry.location.file,
            "line": entry.location.line,
            "inherited": entry.owner != row.qualname,
        },
        "id_transform": entry.transform,
        "transform_note": entry.note,
        "delegates_to": c.delegates_to,
        "default_layers": c.default_layers,
        "capture_site": _site(chain),
        "embedding_capturable": site.embedding_capturable if site is not None else None,
        "last_layer_capturable": site.last_layer_capturable if site is not None else None,
        "effective_transform": chain.effective_transform,
        "holder": holder.holder if holder is not None else None,
        "pp_guard": c.setter.pp_guard,
        "problems": list(c.problems),
        # additive (issue 11): typed links of the chain
        "problem_kinds": sorted({str(p.kind) for p in chain.problems}),
        "holder_kind": str(holder.kind if holder is not None else c.holder_kind),
        "depends_on": holder.depends_on if holder is not None else None,
        "concat_order": str(chain.concat.order if chain.concat is not None else F.ConcatOrder.LOOP),
        "stream": _stream(chain),
        "slots": _slots(chain),
        "returns": _returns(chain),
    }


def model_json(row: ModelRow) -> dict[str, Any]:
    capture = _capture(row)
    return {
        "class": row.name,
        "qualname": row.qualname,
        "file": row.location.file,
        "line": row.location.line,
        "registered": row.registered,
        "generation_target": row.generation_target,
        "architectures": list(row.architectures),
        "support": row.support,
        "capture": capture,
        **({"id_source": source_json(row.source)} if row.source is not None else {}),
    }


def _where(loc: F.Location | None) -> str | None:
    return f"{loc.file}:{loc.line}" if loc is not None else None


def source_json(src) -> dict[str, Any]:  # noqa: ANN001 - a config_capture.SourceCapture
    """A setter-less capture path (config attribute, build context, metadata hook)."""
    site = src.site
    return {
        "kind": src.kind,
        "key": src.key,
        "read_at": _where(src.source.location) if src.source else None,
        "holder": src.holder,
        "id_transform": src.transform,
        "outcome": src.outcome,
        "reason": src.reason,
        "decided_at": _where(src.reason_location),
        "written_layout": src.write.expression if src.write is not None else None,
        "builder": src.builder.class_qualname if src.builder is not None else None,
        "capture_site": {"file": site.location.file, "line": site.location.line, "mechanism": src.mechanism, "point": src.point, "note": src.point_note} if site is not None else None,
        "concat_order": src.concat_order,
        "defaults_at": _where(src.default.location) if src.default is not None else None,
        "problems": list(src.problems),
    }


def drafts_json(files) -> list[dict[str, Any]]:  # noqa: ANN001
    """Draft classes: their fc width expression and where their module reads layer ids."""
    out = []
    for ff in files:
        for fc in ff.fc_definitions:
            reads = [{"key": r.key, "default": r.default, "file": r.location.file, "line": r.location.line, "function": r.function} for r in ff.config_reads]
            out.append({"class": fc.class_qualname, "file": fc.location.file, "line": fc.location.line, "fc_in_features": fc.in_features, "reads_ids": reads})
    return sorted(out, key=lambda d: (d["file"], d["line"], d["class"]))


def finding_json(f: Finding) -> dict[str, Any]:
    """A finding as every JSON output writes it (one shape for scan and check)."""
    from flowtrace.render.findings_json import finding_dict

    return finding_dict(f)


# A member of the document: its name, whether it follows from the facts alone (so that a memo
# keyed by the index fingerprint may keep its text), and how to compute it (``ABSENT``: left out).
Member = tuple[str, bool, Callable[[], Any]]
ABSENT = object()
# ``keep(name, compute)``: the text of a facts-only member, from a memo or ``compute()``.
Keep = Callable[[str, Callable[[], Any]], Any]


def members(result: ScanResult, findings: list[Finding] | None = None) -> list[Member]:
    """The document's members in order (see :func:`scan_document`)."""
    from flowtrace.analysis.drafts import draft_classes

    files = result.files
    stats = result.index.stats

    def models() -> list[dict[str, Any]]:
        drafts = draft_classes(files)
        # category: the one word text, JSON and HTML show (support, or "draft" for a draft)
        return [{**model_json(r), "draft": r.qualname in drafts, "category": "draft" if r.qualname in drafts else r.support} for r in sorted(result.rows, key=lambda r: r.qualname)]

    return [
        ("schema", False, lambda: SCHEMA),
        ("tool", False, lambda: {"name": "flowtrace", "version": __version__}),
        ("root", False, lambda: result.root.resolve().as_posix()),
        ("profiles", False, lambda: sorted(p.name for p in result.profiles)),
        ("stats", False, lambda: {
            "files_total": stats.files_total,
            "files_parsed": stats.files_parsed + stats.files_cached,
            "parse_errors": stats.parse_errors,
            "seconds": stats.seconds,
            "files_skipped": stats.files_skipped,
            "files_from_cache": stats.files_cached,
        }),
        ("models", True, models),
        ("capture_modes", True, lambda: sorted(
            ({"file": m.location.file, "line": m.location.line, "mode": m.mode, "function": m.function} for ff in files for m in ff.capture_modes),
            key=lambda d: (d["file"], d["line"], d["mode"]),
        )),
        ("concat_sites", True, lambda: sorted(
            ({"file": c.location.file, "line": c.location.line, "expression": c.expression, "function": c.function} for ff in files for c in ff.concat_sites),
            key=lambda d: (d["file"], d["line"], d["expression"]),
        )),
        ("drafts", True, lambda: drafts_json(files) if any(r.source is not None for r in result.rows) else ABSENT),
        ("diagnostics", True, lambda: [{"file": d.file, "line": d.line, "kind": d.kind, "reason": d.reason} for d in result.index.diagnostics]),
        ("findings", False, lambda: [finding_json(f) for f in sorted(findings or [], key=lambda f: (f.file, f.line, f.rule, f.fingerprint))]),
    ]  # fmt: skip


def scan_document(result: ScanResult, findings: list[Finding] | None = None, *, include_graph: bool = False) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    for name, _, compute in members(result, findings):
        value = compute()
        if value is not ABSENT:
            doc[name] = value
    return doc


def value_text(value: Any) -> str:
    """One value as :func:`dumps` writes it at the top level."""
    return json.dumps(value, indent=2, ensure_ascii=False)


def object_text(items: list[tuple[str, str]]) -> str:
    """``json.dumps(dict(...), indent=2)`` assembled from each member's :func:`value_text`:
    nesting one level deeper only indents every line of a member's text by two spaces (a
    JSON string never holds a raw newline), so texts kept from an earlier scan fit as they are."""
    if not items:
        return "{}"
    return "{\n" + ",\n".join(f"  {json.dumps(name, ensure_ascii=False)}: {text.replace(chr(10), chr(10) + '  ')}" for name, text in items) + "\n}"


def member_texts(result: ScanResult, findings: list[Finding] | None = None, keep: Keep | None = None) -> list[tuple[str, str]]:
    """``(name, text)`` of every member present; ``keep`` supplies the facts-only ones."""
    out = []
    for name, facts_only, compute in members(result, findings):

        def text(compute: Callable[[], Any] = compute) -> str:
            value = compute()
            return "" if value is ABSENT else value_text(value)

        written = keep(f"json:{name}", text) if keep is not None and facts_only else text()
        if written:
            out.append((name, written))
    return out


def dumps(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, sort_keys=False, ensure_ascii=False) + "\n"
