"""The ``flowtrace.scan/1`` JSON document: the public, versioned scan interface.

Fields are only ever added; renaming or removing one means bumping the schema version.
Output is deterministic: lists are sorted, and timing lives only under ``stats.seconds``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Callable, Iterable

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


def _answer(row: ModelRow, point: str | None) -> dict[str, Any]:
    """The members every ``capture`` object carries whatever the engine (docs/scan-json.md):
    where the ids come from, the point, and the row's outcome without concrete ids."""
    from flowtrace.analysis.answer import id_source, verdict

    source, v = id_source(row), verdict(row)
    return {
        "id_source": {
            "kind": source.kind,
            "label": source.label,
            "at": _where(source.location),
            "inherited": source.inherited,
        } if source is not None else None,
        "point": point,
        "outcome": str(v.outcome),
        "outcome_reason": v.reason,
        "outcome_at": _where(v.location),
    }  # fmt: skip


def _capture(row: ModelRow, project: Any = None) -> dict[str, Any] | None:
    """A row's ``capture`` object, one shape for every engine: a setter row's view of its
    chain's links, or a setter-less row's (config attribute, build context, metadata hook)
    in the same members (:func:`_source_capture`)."""
    c, chain = row.capture, row.chain
    if c is None and chain is not None and not chain.setter_driven:
        return _source_capture(row, chain)
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
        # link 2 whole: every setter the ids pass through, outermost first
        "transform_chain": [
            {
                "setter": f"{t.owner}.{t.method}",
                "transform": t.transform,
                "file": t.location.file,
                "line": t.location.line,
            }
            for t in chain.transforms
        ],
        "delegates_to": c.delegates_to,
        "default_layers": c.default_layers,
        "capture_site": _site(chain),
        "embedding_capturable": site.embedding_capturable if site is not None else None,
        "last_layer_capturable": site.last_layer_capturable if site is not None else None,
        "effective_transform": chain.effective_transform,
        "holder": holder.holder if holder is not None else None,
        "pp_guard": c.setter.pp_guard,
        "problems": list(c.problems),
        # additive: typed links of the chain
        "problem_kinds": sorted({str(p.kind) for p in chain.problems}),
        "holder_kind": str(holder.kind if holder is not None else c.holder_kind),
        "depends_on": holder.depends_on if holder is not None else None,
        "concat_order": str(chain.concat.order if chain.concat is not None else F.ConcatOrder.LOOP),
        "stream": _stream(chain),
        "slots": _slots(chain),
        "returns": _returns(chain),
        **_answer(row, str(site.point) if site is not None else None),
        "serving": _serving(row, project),
    }


def _serving(row: ModelRow, project: Any) -> dict[str, Any] | None:
    """Link 8: the ids each phase of serving holds, the batches that raise on a path without
    the capture (``null`` when the runner's start-up was not read and no such path exists)."""
    if project is None:
        return None
    from flowtrace.analysis.serving_phase import row_serving

    return row_serving(row)


def _default_layers(chain: CaptureChain) -> str | None:
    """What a setter-less row serves when no draft says otherwise: the layout a builder
    writes, or the metadata method that applies defaults."""
    production = chain.production
    if production.layout is not None:
        return production.layout.expression
    d = production.default
    return f"{d.owner.rsplit('.', 1)[-1]}.{d.method}" if d is not None else None


def _source_capture(row: ModelRow, chain: CaptureChain) -> dict[str, Any]:
    """A setter-less row in the setter rows' members: no setter, the source's transform
    (``ignored``: the engine's own layout; ``serving_config``: the engine's serving ids), its
    holder and site, capturability from the site or the point (analysis/answer.py)."""
    from flowtrace.analysis.answer import capturability, point

    emb, last = capturability(chain)
    site, holder = chain.site, chain.holder
    owner = site.owner if site is not None else None
    transform = chain.production.id_transform
    return {
        "setter": None,
        "id_transform": transform,
        "transform_note": None,
        "transform_chain": [],
        "delegates_to": None,
        "default_layers": _default_layers(chain),
        "capture_site": {
            "qualname": f"{owner}.{site.function.rsplit('.', 1)[-1]}" if owner else None,
            "file": site.location.file,
            "line": site.location.line,
            "mechanism": site.mechanism,
            "point": site.point,
            "note": site.note,
            "loop_range": " ".join((site.loop_range or "").split()) or None,
            "attribute": site.attribute,
            "captured_expression": site.captured_expression,
        } if site is not None else None,
        "embedding_capturable": emb,
        "last_layer_capturable": last,
        "effective_transform": transform,
        "holder": holder.holder if holder is not None else None,
        "pp_guard": False,
        "problems": [p.text for p in chain.problems],
        "problem_kinds": sorted({str(p.kind) for p in chain.problems}),
        "holder_kind": str(F.HolderKind.DIRECT),
        "depends_on": None,
        "concat_order": chain.concat.order if chain.concat is not None else F.ConcatOrder.LOOP,
        "stream": _stream(chain),
        "slots": None,
        "returns": _returns(chain),
        **_answer(row, point(chain)),
        "serving": None,
    }  # fmt: skip


def model_json(row: ModelRow, project: Any = None) -> dict[str, Any]:
    capture = _capture(row, project)
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
        **(
            {"id_source": source_json(row.chain)}
            if row.capture is None and row.chain is not None and not row.chain.setter_driven
            else {}
        ),
    }


def _where(loc: F.Location | None) -> str | None:
    return f"{loc.file}:{loc.line}" if loc is not None else None


def source_json(chain: CaptureChain) -> dict[str, Any]:
    """A setter-less capture path (config attribute, build context, metadata hook)."""
    from flowtrace.analysis.answer import mechanism, point

    source, production, site = chain.source, chain.production, chain.site
    stated, layout = production.decision, production.layout
    return {
        "kind": source.word,
        "key": source.key,
        # where the model reads its ids (the serving config has no such line: a hook is called)
        "read_at": _where(source.location) if source.kind != F.SourceKind.SERVING_CONFIG else None,
        "holder": chain.holder.holder if chain.holder is not None else None,
        "id_transform": production.id_transform,
        "outcome": stated.outcome if stated is not None else None,
        "reason": stated.reason if stated is not None else None,
        "decided_at": _where(stated.location) if stated is not None else None,
        "written_layout": layout.expression if layout is not None else None,
        "builder": layout.builder if layout is not None else None,
        "capture_site": (
            {
                "file": site.location.file,
                "line": site.location.line,
                "mechanism": mechanism(chain),
                "point": point(chain),
                "note": site.note,
            }
            if site is not None
            else None
        ),
        "concat_order": chain.concat.order if chain.concat is not None else F.ConcatOrder.LOOP,
        "defaults_at": _where(production.default.location) if production.default is not None else None,
        "problems": [p.text for p in chain.problems],
    }


def _choice(result: ScanResult) -> Any:
    """Which profile(s) the scan applied, how (forced, user, path, content, all) and why."""
    c = result.choice
    if c is None:
        return ABSENT
    return {
        "profiles": list(c.names),
        "how": c.how,
        "reason": c.reason,
        "package_map": {a: b for a, b in c.package_map},
    }


def drafts_json(files: Iterable[F.FileFacts]) -> list[dict[str, Any]]:
    """Draft classes: their fc width expression and where their module reads layer ids."""
    out = []
    for ff in files:
        for fc in ff.fc_definitions:
            reads = [
                {
                    "key": r.key,
                    "default": r.default,
                    "file": r.location.file,
                    "line": r.location.line,
                    "function": r.function,
                }
                for r in ff.config_reads
            ]
            out.append(
                {
                    "class": fc.class_qualname,
                    "file": fc.location.file,
                    "line": fc.location.line,
                    "fc_in_features": fc.in_features,
                    "reads_ids": reads,
                }
            )
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


def _method(result: ScanResult) -> Any:
    """The method answered for, when ``--method`` names one other than the default, or every
    served method with ``--method all`` (added members: absent otherwise)."""
    chosen = result.method
    if chosen is None or (result.method_asked is None and not result.every_method):
        return ABSENT
    doc: dict[str, Any] = {"name": chosen.name, "label": chosen.title}
    if result.every_method:
        doc["served"] = [{"name": m.name, "label": m.title} for m in result.project.conv.methods_served]
    return doc


# What a row's answer under another method carries (``models[].methods.<name>``): the members of
# a row that a method changes, as the row writes its own, and the findings under that method.
METHOD_ANSWER = ("support", "category", "capture", "id_source")
# The categories of a class that serves no method as a target: the text matrix and the HTML
# report give it no line of its own under another method (the JSON keeps every answer).
UNSERVED = ("none", "draft")


def row_facts(result: ScanResult) -> list[dict[str, Any]]:
    """Each row's facts as ``models`` writes them, by qualname, findings aside."""
    from flowtrace.analysis.categories import DRAFT, categories

    # category: the one word text, JSON and HTML show (support, or "draft" for a draft)
    kinds = categories(result)
    return [
        {**model_json(r, result.project), "draft": kinds[r.qualname] == DRAFT, "category": kinds[r.qualname]}
        for r in sorted(result.rows, key=lambda r: r.qualname)
    ]


def method_answers(result: ScanResult, findings: list[Finding]) -> dict[str, dict[str, Any]]:
    """qualname -> method name -> that method's answer for the class (:data:`METHOD_ANSWER`,
    and ``findings``: those of ``findings`` found under the method that concern the class, as a
    row lists its own), for every other method the profiles serve."""
    from flowtrace.render.finding_rows import row_findings

    out: dict[str, dict[str, Any]] = {}
    for name, other in result.method_results.items():
        facts = row_facts(other)
        named = row_findings(facts, [finding_json(f) for f in findings if f.method == name])
        for row, own in zip(facts, named):
            answer = {k: row[k] for k in METHOD_ANSWER if k in row}
            out.setdefault(row["qualname"], {})[name] = {**answer, "findings": own}
    return out


def annotated_models(result: ScanResult, findings: list[Finding], keep: Keep | None = None) -> list[dict[str, Any]]:
    """The ``models`` member: each row's facts (kept by ``keep`` while the facts are unchanged)
    and the findings that concern it (render/finding_rows.py: what every output shows on it).
    ``--method all``: a row's own ``findings`` are the default method's, and ``methods`` holds
    every other method's answer with its findings."""
    from flowtrace.render.finding_rows import row_findings

    if not result.every_method:
        facts = keep("json:models:rows", lambda: row_facts(result)) if keep is not None else row_facts(result)
        named = row_findings(facts, [finding_json(f) for f in findings])
        return [{**row, "findings": own} for row, own in zip(facts, named)]
    own_method = result.method.name if result.method is not None else None
    facts = row_facts(result)
    named = row_findings(facts, [finding_json(f) for f in findings if f.method in (None, own_method)])
    per_method = method_answers(result, findings)
    return [{**row, "methods": per_method.get(row["qualname"], {}), "findings": own} for row, own in zip(facts, named)]


def members(result: ScanResult, findings: list[Finding] | None = None, keep: Keep | None = None) -> list[Member]:
    """The document's members in order (see :func:`scan_document`); ``keep`` supplies the
    rows' facts-only part from a memo (their ``findings`` are added afresh)."""
    files = result.files
    stats = result.index.stats
    from flowtrace.checks.run import finding_order

    listed = sorted(findings or [], key=finding_order(result))

    def models() -> list[dict[str, Any]]:
        return annotated_models(result, listed, keep)

    return [
        ("schema", False, lambda: SCHEMA),
        ("method", False, lambda: _method(result)),
        ("tool", False, lambda: {"name": "flowtrace", "version": __version__}),
        ("root", False, lambda: result.root.resolve().as_posix()),
        ("profiles", False, lambda: sorted(p.name for p in result.profiles)),
        ("profile_choice", False, lambda: _choice(result)),
        ("stats", False, lambda: {
            "files_total": stats.files_total,
            "files_parsed": stats.files_parsed + stats.files_cached,
            "parse_errors": stats.parse_errors,
            "seconds": stats.seconds,
            "files_skipped": stats.files_skipped,
            "files_from_cache": stats.files_cached,
        }),
        ("models", False, models),
        ("capture_modes", True, lambda: sorted(
            ({"file": m.location.file, "line": m.location.line, "mode": m.mode, "function": m.function}
             for ff in files for m in ff.capture_modes),
            key=lambda d: (d["file"], d["line"], d["mode"]),
        )),
        ("concat_sites", True, lambda: sorted(
            ({"file": c.location.file, "line": c.location.line, "expression": c.expression, "function": c.function}
             for ff in files for c in ff.concat_sites),
            key=lambda d: (d["file"], d["line"], d["expression"]),
        )),
        ("drafts", True, lambda: drafts_json(files)
         if any(r.chain is not None and not r.chain.setter_driven for r in result.rows) else ABSENT),
        ("diagnostics", True, lambda: [{"file": d.file, "line": d.line, "kind": d.kind, "reason": d.reason}
                                       for d in result.index.diagnostics]),
        ("findings", False, lambda: [finding_json(f) for f in listed]),
    ]  # fmt: skip


def scan_document(
    result: ScanResult, findings: list[Finding] | None = None, *, include_graph: bool = False
) -> dict[str, Any]:
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
    return (
        "{\n"
        + ",\n".join(
            f"  {json.dumps(name, ensure_ascii=False)}: {text.replace(chr(10), chr(10) + '  ')}" for name, text in items
        )
        + "\n}"
    )


def member_texts(
    result: ScanResult, findings: list[Finding] | None = None, keep: Keep | None = None
) -> list[tuple[str, str]]:
    """``(name, text)`` of every member present; ``keep`` supplies the facts-only ones."""
    out = []
    for name, facts_only, compute in members(result, findings, keep):

        def text(compute: Callable[[], Any] = compute) -> str:
            value = compute()
            return "" if value is ABSENT else value_text(value)

        written = keep(f"json:{name}", text) if keep is not None and facts_only else text()
        if written:
            out.append((name, written))
    return out


def dumps(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, sort_keys=False, ensure_ascii=False) + "\n"
