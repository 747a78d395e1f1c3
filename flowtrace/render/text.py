"""Human-readable text: the model matrix and findings, sized for a terminal."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flowtrace.model import facts as F

if TYPE_CHECKING:
    from flowtrace.analysis.resolve import ModelRow
    from flowtrace.analysis.scan import ScanResult
    from flowtrace.checks.base import Finding
    from flowtrace.model.links import CaptureChain


def _yn(value: bool | None) -> str:
    return "?" if value is None else "yes" if value else "no"


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = min(max(widths[i], len(cell)), 60)
    def fmt(row: list[str]) -> str:
        return "  ".join((c if len(c) <= 60 else c[:59] + "…").ljust(widths[i]) for i, c in enumerate(row)).rstrip()
    lines = [fmt(headers), fmt(["-" * w for w in widths])]
    lines.extend(fmt(r) for r in rows)
    return "\n".join(lines)


def categories(result: ScanResult) -> dict[str, str]:
    """qualname -> the one category every output shows (see :mod:`flowtrace.analysis.categories`)."""
    from flowtrace.analysis.categories import categories as row_categories

    return row_categories(result)


def finding_counts(models: list[dict[str, Any]]) -> dict[str, str]:
    """qualname -> "1 error, 2 info": the findings that concern each row (the scan JSON's
    ``models[].findings``, decided once in render/finding_rows.py), worst first."""
    out = {}
    for m in models:
        severities = [f.get("severity") for f in m.get("findings") or ()]
        said = [f"{severities.count(s)} {s}" for s in ("error", "warning", "info") if s in severities]
        if said:
            out[str(m.get("qualname"))] = ", ".join(said)
    return out


def method_finding_counts(models: list[dict[str, Any]]) -> dict[tuple[str, str], str]:
    """(qualname, method name) -> "1 warning": :func:`finding_counts` of each row's answer under
    every other method (``models[].methods``, ``--method all``)."""
    return {
        (str(m.get("qualname")), name): said
        for m in models
        for name, answer in (m.get("methods") or {}).items()
        if (said := finding_counts([{"qualname": "", "findings": answer.get("findings")}]).get(""))
    }


def model_matrix(
    result: ScanResult, category: dict[str, str] | None = None, counts: dict[str, str] | None = None,
    method_counts: dict[tuple[str, str], str] | None = None,
) -> str:
    """Registered classes first, then classes that only hold or inherit a setter; with
    ``counts`` (:func:`finding_counts`) a last column names the findings concerning each row.
    ``--method all``: a ``method`` column, and under each class's line (the default method's
    answer) one line per other method the class serves as a target (not ``none``, not a
    draft: :data:`flowtrace.render.scan_json.UNSERVED`), with
    that method's answer and findings (``method_counts``, :func:`method_finding_counts`)."""
    category = category if category is not None else categories(result)
    ordered = sorted(result.rows, key=lambda r: (not r.registered, r.name, r.qualname))
    rows = [_cells(r, category.get(r.qualname, r.support)) for r in ordered]
    # "id source": a setter, a config attribute, a build context or the serving config (a
    # hook engine has no setter); the same columns for every engine.
    headers = [
        "class",
        "registered",
        "support",
        "id transform",
        "default layers",
        "capture point",
        "emb",
        "last",
        "id source",
        "capture site",
        "class at",
    ]
    if counts is not None:
        headers.append("findings")
        rows = [row + [counts.get(r.qualname, "-")] for row, r in zip(rows, ordered)]
    if result.every_method and result.method is not None and len(result.project.conv.methods_served) > 1:
        headers.insert(1, "method")
        rows = _method_lines(result, ordered, rows, method_counts if counts is not None else None)
    return _table(headers, rows)


def _method_lines(
    result: ScanResult, ordered: list[ModelRow], rows: list[list[str]], counts: dict[tuple[str, str], str] | None
) -> list[list[str]]:
    """Each class's line labelled with the default method, then a line per other method that
    the class serves, labelled with that method's profile label."""
    from flowtrace.render.scan_json import UNSERVED

    assert result.method is not None
    labels = {m.name: m.title for m in result.project.conv.methods_served}
    others = [
        (name, {r.qualname: r for r in other.rows}, categories(other)) for name, other in result.method_results.items()
    ]
    out = []
    for row, r in zip(rows, ordered):
        out.append([row[0], result.method.title, *row[1:]])
        for name, by_qualname, kinds in others:
            answer = by_qualname.get(r.qualname)
            kind = kinds.get(r.qualname, answer.support) if answer is not None else "none"
            if answer is None or kind in UNSERVED:
                continue
            cells = _cells(answer, kind)
            if counts is not None:
                cells.append(counts.get((r.qualname, name), "-"))
            out.append([cells[0], labels.get(name, name), *cells[1:]])
    return out


def _cells(r: ModelRow, kind: str) -> list[str]:
    """A row's cells of the matrix (its answer under the scan's method), findings aside."""
    c = r.capture
    if c is None and r.chain is not None and not r.chain.setter_driven:
        return _source_row(r, r.chain, kind)
    if c is None:
        return [r.name, "reg" if r.registered else "-", kind, "-", "-", "-", "-", "-", "-", "-", f"{r.location}"]
    setter = f"setter: {c.setter.location}" + (" (inherited)" if c.inherited else "")
    same = c.effective_transform == c.id_transform
    transform = c.id_transform if same else f"{c.id_transform}->{c.effective_transform}"
    site = f"{c.site.location}" if c.site else "-"
    return [
        r.name,
        "reg" if r.registered else "-",
        kind,
        transform,
        " ".join((c.default_layers or "-").split()),
        c.point + (f" ({c.site.mechanism})" if c.site else ""),
        _yn(c.embedding_capturable),
        _yn(c.last_layer_capturable),
        setter,
        site,
        f"{r.location}",
    ]


def _source_row(r: ModelRow, chain: CaptureChain, kind: str) -> list[str]:
    """A row whose ids come from a config attribute, build context or metadata hook."""
    from flowtrace.analysis.answer import capturability, mechanism, point

    source, production, site = chain.source, chain.production, chain.site
    stated = production.decision
    outcome = stated.outcome if stated is not None else F.Outcome.UNKNOWN
    where = f"{source.location}" if source.location else "-"
    if production.layout is not None:
        default = production.layout.expression
    elif production.default is not None and outcome == F.Outcome.CAPTURES:
        default = f"{production.default.owner.rsplit('.', 1)[-1]}.{production.default.method}"
    else:
        default = str(outcome).replace("_", " ") if outcome != F.Outcome.CAPTURES else "-"
    how = mechanism(chain)
    shown = f"{point(chain)}" + (f" ({how})" if how else "")
    emb, last = capturability(chain)
    return [
        r.name,
        "reg" if r.registered else "-",
        kind,
        str(production.id_transform),
        " ".join(default.split()),
        shown,
        _yn(emb),
        _yn(last),
        f"{source.word}: {where}",
        f"{site.location}" if site is not None else "-",
        f"{r.location}",
    ]


def findings_text(findings: list[Finding], *, concise: bool = False) -> str:
    lines = []
    for f in sorted(findings, key=lambda f: (f.file, f.line, f.rule)):
        lines.append(f"{f.file}:{f.line}: {f.rule} [{f.severity}] {f.message}")
        if not concise and f.hint:
            lines.append(f"    hint: {f.hint}")
    return "\n".join(lines)


CAPTURING = frozenset({"supported", "inherited", "delegated", "conditional"})


def row_counts(result: ScanResult) -> tuple[int, int]:
    """(model classes, those that can capture): what the summary line says of the rows, counted
    over the same categories the matrix, the JSON and the HTML report show."""
    kinds = categories(result)
    return len(result.rows), sum(1 for kind in kinds.values() if kind in CAPTURING)


def summary_line(
    result: ScanResult, findings: list[Finding] | None = None, counts: tuple[int, int] | None = None
) -> str:
    """The one stderr line of a scan; ``counts``: :func:`row_counts`, when already known (a
    warm scan keeps them with the facts they follow from, and then resolves no row)."""
    s = result.index.stats
    classes, supported = counts if counts is not None else row_counts(result)
    parts = [
        f"{s.files_total} files",
        f"{s.files_parsed} parsed",
        f"{s.files_cached} from cache",
        f"{s.files_skipped} skipped by prefilter",
        f"{s.parse_errors} errors",
        f"{classes} model classes ({supported} can capture)",
    ]
    if findings is not None:
        parts.append(f"{len(findings)} findings")
    parts.append(f"{s.seconds:.2f}s")
    return "flowtrace: " + ", ".join(parts)


def serving_text(result: ScanResult) -> list[str]:
    """The serving path under the matrix: which ids each phase holds (grouped: most rows share
    the runner's answer), and the batches that raise on a path without the capture."""
    from flowtrace.analysis.serving_phase import row_serving

    groups: dict[tuple[Any, ...], list[str]] = {}
    paths: dict[tuple[Any, ...], list[str]] = {}
    for r in sorted(result.rows, key=lambda r: r.name):
        found = row_serving(r)
        if found is None:
            continue
        key = tuple((p["words"], p["ids"], p["at"]) for p in found["phases"])
        if key:
            groups.setdefault(key, []).append(r.name)
        for b in found["batch_paths"]:
            paths.setdefault((b["batches"], b["at"], b["how"]), []).append(r.name)
    if not groups and not paths:
        return []
    out = ["", "serving path:"]
    for key, names in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        out.append(f"  {_names(names)}:")
        out += [f"    {words}: {ids}  [{at}]" for words, ids, at in key]
    for (batches, at, how), names in sorted(paths.items(), key=lambda kv: kv[0][1]):
        out.append(f"  raises on {batches}: {_names(names)}  [{at}]: {how}")
    return out


def _names(names: list[str]) -> str:
    return ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")


def scan_text(result: ScanResult, findings: list[Finding] | None) -> str:
    chosen = f" (by {result.choice.how}: {result.choice.reason})" if result.choice is not None else ""
    out = [
        f"engine profile(s): {result.engine}{chosen}    root: {result.root}",
        "",
        model_matrix(result),
        *serving_text(result),
    ]
    if findings:
        out += ["", f"findings ({len(findings)}):", findings_text(findings, concise=True)]
    if result.index.diagnostics:
        out += ["", f"diagnostics ({len(result.index.diagnostics)}):"]
        out += [f"{d.file}:{d.line}: {d.kind}: {d.reason}" for d in result.index.diagnostics[:50]]
        if len(result.index.diagnostics) > 50:
            out.append(f"... {len(result.index.diagnostics) - 50} more (see --format json)")
    return "\n".join(out) + "\n"
