"""The HTML report: one self-contained, offline, deterministic file for a ``flowtrace.scan/1`` doc.

Why it is built this way:

* **One file, no network.** The report is attached to CI runs and bug reports and opened on
  machines without internet, so CSS, JS and the data-flow graphs (inline SVG laid out in Python
  by :mod:`flowtrace.render.svg_layout`) are all inside it. The only URLs are the source links
  the user configured (``vscode://file/...`` or ``{link_base}/{file}#L{line}``).
* **Scanned code is hostile input.** Class names, file paths, expressions and messages come
  from the scanned tree. Everything reaches the page through jinja2 with autoescape on; the
  embedded JSON is escaped so that ``</script>`` or ``<!--`` in a string cannot end the block.
  Nothing in the page's JS ever turns data into markup (no ``innerHTML``).
* **Deterministic bytes.** Same doc, same options -> byte-identical HTML, so the example
  report can be kept in git and compared by a test. No clock, no random ids, no set order.
* **Degrades gracefully.** ``rules``, ``paths``, ``examples``, ``graph`` and ``sources`` are
  optional keys; each section says what it would show when its key is absent.

``python tests/example_report.py`` rewrites ``reports/example.html``.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import math
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable
from urllib.parse import quote

import jinja2
from markupsafe import Markup, escape

from flowtrace.render import svg_layout
from flowtrace.render.finding_rows import RowIndex, file_line
from flowtrace.render.scan_json import UNSERVED

TEMPLATES = Path(__file__).parent / "templates"

# Sort order of the Support column: what needs attention first (broken), then what captures.
SUPPORT_ORDER = ("broken", "supported", "inherited", "delegated", "conditional", "draft", "none")
# The matrix legend: every support word, and the id transform a reader stumbles on.
LEGEND = (
    (
        "supported",
        "support-supported",
        (
            "captures in its own code: its id source (a capture setter, config attribute or serving-config hook)"
            " reaches a layer loop that reads the ids"
        ),
    ),
    ("inherited", "support-inherited", "captures through a setter and loop inherited from a base class"),
    (
        "delegated",
        "support-delegated",
        "hands the ids to an inner model (self.model, self.language_model) that captures",
    ),
    (
        "conditional",
        "transform",
        "id transform that depends on the ids themselves, e.g. add one only if the first id is 1",
    ),
    (
        "draft",
        "support-draft",
        "an EAGLE-3 draft model: it consumes the captured states (an fc over their concatenation), it does not capture",
    ),
    (
        "broken",
        "support-broken",
        (
            "EAGLE-3 can be enabled, but the ids reach no capture loop (or cannot be followed): nothing, or the wrong"
            " thing, is captured"
        ),
    ),
    (
        "1 error",
        "support-supported flagged sev-error",
        (
            "a support word outlined in red, with the count (amber: a warning): an error finding concerns this class,"
            " whatever its support says; a served draft may get other states than it was trained on, or crash the"
            " engine (see Start here)"
        ),
    ),
    (
        "none",
        "support-none",
        (
            "no capture path (no capture setter, config attribute or serving-config hook): EAGLE-3 cannot be enabled"
            " for this class"
        ),
    ),
    # A finding's severity is its own consequence's (flowtrace.model.consequence); a rule's
    # listed severity is its default consequence's.
    (
        "error",
        "sev-error",
        (
            "the draft silently receives other states than it was trained on (silent_wrong), or a request accepted at"
            " start-up raises (crash_serving)"
        ),
    ),
    (
        "warning",
        "sev-warning",
        (
            "the model claims support and start-up dies on an error that does not say why (crash_startup), or it works"
            " today and breaks on another convention (fragile)"
        ),
    ),
    (
        "info",
        "sev-info",
        (
            "the engine refuses the model at start-up with its own message (refused_startup), or a capability note; a"
            " finding's severity follows its own consequence, a rule's listed severity is its default consequence's"
        ),
    ),
)
SEVERITY_ORDER = ("error", "warning", "info")
# What the "start here" section lists, and what turns a matrix row from its support colour to the
# finding's: an error (silent wrong tensors, a crash while serving) or a warning.
TRIAGE_SEVERITIES = ("error", "warning")
# Consequences in the order a reader should meet them (flowtrace.model.consequence).
CONSEQUENCE_ORDER = ("silent_wrong", "crash_serving", "crash_startup", "fragile", "refused_startup")
PATH_KINDS = ("config", "setter", "attribute", "loop", "container", "concat", "fc")
# Section ids are reserved before any data-derived id is handed out, so a rule code or class
# name can never steal them.
RESERVED_IDS = (
    "top", "summary", "probe", "matrix", "matrix-table", "filter", "only-registered", "only-findings",
    "hide-unsupported", "matrix-count", "inspector", "model-select", "findings", "diagnostics",
    "flowtrace-data", "toc", "legend",
)  # fmt: skip
SNIPPET_CONTEXT = 3
# Keys shown in the page but left out of its embedded JSON copy of the doc: they are bulky and
# derived (graph, paths, examples, snippets); the copy keeps the flowtrace.scan/1 data + rules.
RENDER_ONLY_KEYS = ("sources", "graph", "paths", "examples")
# probe-engine runs (flowtrace probe engine): the installed engine agreed / disagreed with the static trace
PROBE_MARKS = {
    "confirmed": "confirmed",
    "refuted": "refuted",
    "runtime-confirmed": "confirmed",
    "runtime-refuted": "refuted",
}


# --------------------------------------------------------------------------------------------
# small pure helpers


def _str(value: Any) -> str:
    return "" if value is None else str(value)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else []


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _slug(text: str) -> str:
    """An id fragment: keeps letters, digits, ``_ . -``; anything else becomes ``-``."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "x"


def _tristate(value: Any) -> tuple[str, str]:
    """(text, css class) for a yes/no/unknown capturability flag."""
    if value is True:
        return "yes", "yes"
    if value is False:
        return "no", "no"
    if value is None:
        return "—", "unknown"
    return _str(value), "unknown"


def _one_line(expr: str) -> str:
    """Source expressions spread over lines (``[\n    2,\n    n // 2,\n]``) as one line."""
    text = " ".join(expr.split())
    return re.sub(r"([\[(]) ", r"\1", re.sub(r",? ([\])])", r"\1", text))


def wbr(text: Any) -> Markup:
    """Escaped text with ``<wbr>`` break opportunities after dots and before camel-case humps,
    so that long qualified names wrap in narrow table columns instead of widening them."""
    parts = re.split(r"(?<=\.)|(?<=[a-z0-9_])(?=[A-Z])", _str(text))
    return Markup("<wbr>").join(escape(p) for p in parts if p)


def _setter_owner(model: str, setter: str) -> str:
    owner = setter.rsplit(".", 1)[0] if "." in setter else setter
    return "own" if owner == model else owner.rsplit(".", 1)[-1]


def _short_qualname(qualname: str, parts: int = 2) -> str:
    return ".".join(qualname.split(".")[-parts:]) if qualname else ""


def _finite(obj: Any) -> Any:
    """JSON without NaN/Infinity (``JSON.parse`` rejects them, which would break the page)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    if obj is None or isinstance(obj, (str, int, bool)):
        return obj
    return str(obj)


def json_for_script(obj: Any) -> Markup:
    """JSON safe inside ``<script type="application/json">``.

    ``<``, ``>`` and ``&`` become ``\\u003c`` etc. (still the same JSON value), so neither
    ``</script>`` nor ``<!--`` in a string can end or confuse the block; U+2028/U+2029 are
    escaped too for any consumer that evaluates the text as JS.
    """
    text = json.dumps(_finite(obj), ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False)
    for raw, esc in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(raw, esc)
    return Markup(text)  # noqa: S704 - escaped above for the script-data context


class IdAllocator:
    """Hands out unique element ids; a collision gets ``_2``, ``_3``... in allocation order,
    which is fixed by the doc, so ids stay stable."""

    def __init__(self, reserved: Iterable[str] = RESERVED_IDS) -> None:
        self.used: set[str] = set(reserved)

    def take(self, wanted: str) -> str:
        candidate, n = wanted, 1
        while candidate in self.used:
            n += 1
            candidate = f"{wanted}_{n}"
        self.used.add(candidate)
        return candidate


@dataclass(frozen=True, slots=True)
class SourceLinks:
    """Builds source links: ``vscode://file/{root}/{file}:{line}``, or
    ``{link_base}/{file}#L{line}`` (GitHub/GitLab blob URLs) when a base is configured."""

    root: str
    link_base: str | None = None

    @property
    def prefix(self) -> str:
        if self.link_base:
            return self.link_base.rstrip("/") + "/"
        return "vscode://file/"

    def __call__(self, file: Any, line: Any = None) -> str | None:
        if not file or not isinstance(file, str):
            return None
        n = _int(line)
        path = quote(file.lstrip("/") if self.link_base else file, safe="/:@._-~+")
        if self.link_base:
            return f"{self.prefix}{path}" + (f"#L{n}" if n and n > 0 else "")
        if file.startswith("/"):
            full = file
        else:
            full = f"{self.root.rstrip('/')}/{file}" if self.root else file
        full_q = quote(full.lstrip("/"), safe="/:@._-~+")
        return f"{self.prefix}{full_q}" + (f":{n}" if n and n > 0 else "")


# --------------------------------------------------------------------------------------------
# source snippets


def _normalise_source(entry: Any) -> dict[int, str]:
    """Accepted shapes of ``doc["sources"][file]``: the whole file as a list of lines (line 1
    first); ``{"start": n, "lines": [...]}``; a list of such windows; or ``{"12": text}``."""
    out: dict[int, str] = {}
    if isinstance(entry, dict) and "lines" in entry:
        entry = [entry]
    if isinstance(entry, list) and all(isinstance(x, str) for x in entry):
        return {i + 1: x for i, x in enumerate(entry)}
    if isinstance(entry, list):
        for window in entry:
            w = _dict(window)
            start = _int(w.get("start")) or 1
            for i, text in enumerate(_list(w.get("lines"))):
                out[start + i] = _str(text)
        return out
    if isinstance(entry, dict):
        for k, v in entry.items():
            if str(k).isdigit():
                out[int(k)] = _str(v)
    return out


@dataclass(frozen=True, slots=True)
class SnippetLine:
    number: int
    text: str
    hit: bool


class Sources:
    def __init__(self, raw: Any) -> None:
        self.raw = _dict(raw)
        self.cache: dict[str, dict[int, str]] = {}

    def snippet(self, file: Any, line: Any, context: int = SNIPPET_CONTEXT) -> tuple[SnippetLine, ...]:
        n = _int(line)
        if not isinstance(file, str) or n is None or file not in self.raw:
            return ()
        if file not in self.cache:
            self.cache[file] = _normalise_source(self.raw[file])
        lines = self.cache[file]
        if n not in lines:
            return ()
        return tuple(
            SnippetLine(i, lines[i].rstrip("\r\n"), i == n) for i in range(n - context, n + context + 1) if i in lines
        )


# --------------------------------------------------------------------------------------------
# view models: what the template reads


@dataclass(slots=True)
class FindingView:
    anchor: str
    index: int
    rule: str
    name: str
    severity: str
    file: str
    line: int | None
    href: str | None
    message: str
    symbol: str
    fingerprint: str
    snippet: tuple[SnippetLine, ...]
    model_id: str | None = None
    model_class: str | None = None
    probe_mark: str | None = None
    hint: str = ""
    consequence: str = ""  # what it does to a served draft (silent_wrong, crash_serving, ...)
    effect: str = ""  # the same in words
    entry_path: str = ""
    # every model row the finding concerns (render/finding_rows.py), its symbol's first
    rows: list[ModelView] = field(default_factory=list)
    method: str = ""  # the label of the method it was found under (``--method``), else ""

    @property
    def severity_rank(self) -> int:
        return _severity_rank(self.severity)

    @property
    def triage(self) -> bool:
        """Shown under "start here": what breaks a served draft or may (errors, warnings)."""
        return self.severity in TRIAGE_SEVERITIES


@dataclass(slots=True)
class RuleGroup:
    code: str
    anchor: str
    name: str
    severity: str  # the worst of its findings' (the catalogue's when the document has none)
    summary: str
    rationale: str
    fix: str
    findings: list[FindingView]


@dataclass(frozen=True, slots=True)
class PathStep:
    kind: str
    label: str
    file: str | None
    line: int | None
    href: str | None


@dataclass(frozen=True, slots=True)
class ExampleView:
    num_layers: int | None
    layer_ids: list[Any] | None  # None: the setter's default ids
    boundaries: list[Any] | None  # None: the trace could not resolve a layout (see note)
    note: str
    strip: svg_layout.BoundaryStrip | None


@dataclass(frozen=True, slots=True)
class ProbeView:
    command: str
    status: str  # the verdict that marks the model: claim verdict for draft, verdict for capture
    mark: str  # "confirmed" | "refuted" | "other"
    verdict: str
    target: str
    num_layers: int | None
    claim_model: str | None
    claim_source: str
    claim_boundaries: list[Any]
    observed: list[Any] | None
    slots: list[dict[str, Any]]
    candidates: list[dict[str, Any]]
    reason: str
    evidence: str
    warnings: list[str]
    strip: svg_layout.BoundaryStrip | None
    model_id: str | None
    device: str


@dataclass(slots=True)
class ModelView:
    id: str
    index: int
    qualname: str
    cls: str
    module: str
    file: str
    line: int | None
    href: str | None
    support: str
    support_title: str
    support_css: str
    support_rank: int
    registered: bool
    architectures: list[str]
    capture: dict[str, Any] | None
    setter: dict[str, Any] | None
    site: dict[str, Any] | None
    setter_href: str | None
    site_href: str | None
    transform: str
    effective: str
    point: str
    mechanism: str
    default_layers: str
    delegates: str  # short form of capture.delegates_to for the matrix
    setter_owner: str  # "own" when the class defines its setter, else the defining class
    # A row without a setter: (kind, label, where) of its id source (config attribute, build
    # context, serving-config hook), what the matrix's "Id source" column shows instead.
    id_source: tuple[str, str, str] | None
    id_source_href: str | None
    emb: tuple[str, str]
    last: tuple[str, str]
    problems: list[str]
    search: str
    findings: list[FindingView] = field(default_factory=list)
    path: list[PathStep] = field(default_factory=list)
    example: ExampleView | None = None
    graph: svg_layout.GraphLayout | None = None
    probe: ProbeView | None = None
    setter_snippet: tuple[SnippetLine, ...] = ()
    site_snippet: tuple[SnippetLine, ...] = ()
    # ``--method all``: the label of the method this view answers for (the default method's for
    # a class's own row), and the class's answers under every other method it serves
    method: str = ""
    methods: list[ModelView] = field(default_factory=list)

    @property
    def worst(self) -> str:
        """The worst severity of the findings that concern this row ("" without one)."""
        severities = {f.severity for f in self.findings}
        return next((s for s in SEVERITY_ORDER if s in severities), "")

    @property
    def flag(self) -> str:
        """``error`` / ``warning`` when such a finding names the row: the matrix then shows the
        row in that colour, never its support's green, whatever the support word says."""
        return self.worst if self.worst in TRIAGE_SEVERITIES else ""

    def count(self, severity: str) -> int:
        return sum(1 for f in self.findings if f.severity == severity)


def _search_text(parts: list[str]) -> str:
    """What the matrix filter matches, lower-cased; parts already contained are left out,
    since 500 rows of repeated qualnames would double the size of the page."""
    text = ""
    for part in parts:
        part = part.lower()
        if part and part not in text:
            text = f"{text} {part}" if text else part
    return text


def _support_css(support: str) -> str:
    return support if support in SUPPORT_ORDER else "other"


def _kind_css(kind: str) -> str:
    return kind if kind in svg_layout.KIND_ORDER else "other"


def _severity_css(severity: str) -> str:
    return severity if severity in SEVERITY_ORDER else "other"


def _model_view(raw: dict[str, Any], index: int, ids: IdAllocator, link: SourceLinks, sources: Sources) -> ModelView:
    qualname = _str(raw.get("qualname")) or _str(raw.get("class"))
    cls = _str(raw.get("class")) or qualname.rsplit(".", 1)[-1]
    capture = raw.get("capture") if isinstance(raw.get("capture"), dict) else None
    c = capture or {}
    setter = c.get("setter") if isinstance(c.get("setter"), dict) else None
    source = c.get("id_source") if isinstance(c.get("id_source"), dict) else None
    site = c.get("capture_site") if isinstance(c.get("capture_site"), dict) else None
    verdict = _str(raw.get("support")) or "none"
    draft = raw.get("draft") is True
    support = _str(raw.get("category")) or ("draft" if draft else verdict)  # the scan JSON's one category
    transform = _str(c.get("id_transform"))
    effective = _str(c.get("effective_transform"))
    point = _str((site or {}).get("point"))
    mechanism = _str((site or {}).get("mechanism"))
    archs = [_str(a) for a in _list(raw.get("architectures"))]
    search_parts = [
        cls, qualname, _str(raw.get("file")), support, " ".join(archs), _str(c.get("default_layers")), transform,
        effective, point, mechanism, _str((setter or {}).get("qualname")), _str((site or {}).get("qualname")),
        _str(c.get("delegates_to")), _str(c.get("holder")), "draft" if raw.get("draft") is True else "",
        _str((source or {}).get("label")),
    ]  # fmt: skip
    return ModelView(
        id=ids.take("model-" + _slug(qualname)),
        index=index,
        qualname=qualname,
        cls=cls,
        module=qualname.rsplit(".", 1)[0] if "." in qualname else "",
        file=_str(raw.get("file")),
        line=_int(raw.get("line")),
        href=link(raw.get("file"), raw.get("line")),
        support=support,
        support_title=(
            f"EAGLE-3 draft: consumes the aux hidden states (capture analysis: {verdict})"
            if draft
            else dict((t, d) for t, _, d in LEGEND).get(support, "")
        ),
        support_css=_support_css(support),
        support_rank=SUPPORT_ORDER.index(support) if support in SUPPORT_ORDER else len(SUPPORT_ORDER),
        registered=bool(raw.get("registered")),
        architectures=archs,
        capture=capture,
        setter=setter,
        site=site,
        setter_href=link((setter or {}).get("file"), (setter or {}).get("line")),
        site_href=link((site or {}).get("file"), (site or {}).get("line")),
        transform=transform,
        effective=effective,
        point=point,
        mechanism=mechanism,
        default_layers=_one_line(_str(c.get("default_layers"))),
        setter_owner=_setter_owner(qualname, _str((setter or {}).get("qualname"))),
        id_source=(
            (_str(source.get("kind")), _str(source.get("label")), _str(source.get("at")))
            if source and not setter
            else None
        ),
        id_source_href=link(*file_line(_str(source.get("at")))) if source and not setter else None,
        delegates=(
            _short_qualname(_str(c.get("delegates_to")), 1)
            if "." in _str(c.get("delegates_to")).removeprefix("self.")
            else _str(c.get("delegates_to"))
        ),
        emb=_tristate(c.get("embedding_capturable")) if capture else ("—", "unknown"),
        last=_tristate(c.get("last_layer_capturable")) if capture else ("—", "unknown"),
        problems=[_str(p) for p in _list(c.get("problems"))],
        search=_search_text(search_parts),
        setter_snippet=sources.snippet((setter or {}).get("file"), (setter or {}).get("line"), 2),
        site_snippet=sources.snippet((site or {}).get("file"), (site or {}).get("line"), 2),
    )


class ModelIndex:
    """The model views, found by what names them (:class:`flowtrace.render.finding_rows.RowIndex`
    over the same rows, in the same order): a finding's rows, a probe claim's class."""

    def __init__(
        self, models: list[ModelView], raw: list[dict[str, Any]],
        by_method: dict[str, ModelIndex] | None = None, labels: dict[str, str] | None = None,
    ) -> None:
        self.models = models
        self.rows = RowIndex(raw)
        # ``--method all``: the classes' answers under each other method, by method name, and
        # each method's label by name (what a finding that names its method shows)
        self.by_method = by_method or {}
        self.labels = labels or {}

    def rows_of(self, f: dict[str, Any]) -> list[ModelView]:
        """Every model the finding concerns, its symbol's first (a finding found under another
        method: that method's answers of the classes)."""
        other = self.by_method.get(_str(f.get("method")))
        if other is not None:
            return other.rows_of(f)
        return [self.models[i] for i in self.rows.rows_of(f)]

    def find(self, name: Any) -> ModelView | None:
        i = self.rows.find(name)
        return self.models[i] if i is not None else None


# What a class's row answers for the default method alone (left out of another method's answer).
OWN_ANSWER = ("methods", "id_source", "findings")


def served_methods(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """(name, label) of every method a ``--method all`` document answers for, the default
    first (its ``method.served``); one method (or none named): an empty list."""
    listed = [_dict(m) for m in _list(_dict(doc.get("method")).get("served"))]
    served = [(_str(m.get("name")), _str(m.get("label")) or _str(m.get("name"))) for m in listed]
    return served if len(served) > 1 else []


def _method_views(
    doc: dict[str, Any], raw: list[dict[str, Any]], models: list[ModelView], link: SourceLinks, sources: Sources
) -> ModelIndex:
    """The model index; for a ``--method all`` document each class's answer under every other
    method it serves as a target (``models[].methods``, not :data:`UNSERVED`) as a view of its own,
    which shares the class's anchor and lists the findings found under that method."""
    served = served_methods(doc)
    if not served:
        return ModelIndex(models, raw)
    labels = dict(served)
    by_method: dict[str, ModelIndex] = {}
    for name, label in served[1:]:
        pairs = [(m, view) for m, view in zip(raw, models) if isinstance(_dict(m.get("methods")).get(name), dict)]
        # the class's own members, its answer's in place of the default method's
        answers = [{**{k: v for k, v in m.items() if k not in OWN_ANSWER}, **m["methods"][name]} for m, _ in pairs]
        views = [_answer_view(answer, view, label, link, sources) for answer, (_, view) in zip(answers, pairs)]
        by_method[name] = ModelIndex(views, answers, labels=labels)
        for view, (_, own) in zip(views, pairs):
            if view.support not in UNSERVED:
                own.methods.append(view)
    for view in models:
        view.method = served[0][1]
    return ModelIndex(models, raw, by_method, labels)


def _answer_view(answer: dict[str, Any], own: ModelView, label: str, link: SourceLinks, sources: Sources) -> ModelView:
    """A class's answer under another method, as a view sharing the class's anchor."""
    view = _model_view(answer, own.index, IdAllocator(reserved=()), link, sources)
    view.id, view.method = own.id, label
    return view


def _rules_meta(raw: Any) -> dict[str, dict[str, Any]]:
    if isinstance(raw, dict):
        return {str(k): _dict(v) for k, v in raw.items()}
    out: dict[str, dict[str, Any]] = {}
    for item in _list(raw):
        d = _dict(item)
        if d.get("code"):
            out[str(d["code"])] = d
    return out


def _finding_view(
    f: dict[str, Any], code: str, i: int, ids: IdAllocator, link: SourceLinks, sources: Sources, index: ModelIndex
) -> FindingView:
    """One finding, attached to every row it concerns (each row lists it in its class view)."""
    rows = index.rows_of(f)
    model = index.find(f.get("symbol"))
    view = FindingView(
        anchor=ids.take(f"{_slug(code)}-{i}"),
        index=i,
        rule=code,
        name=_str(f.get("name")),
        severity=_str(f.get("severity")) or "info",
        file=_str(f.get("file")),
        line=_int(f.get("line")),
        href=link(f.get("file"), f.get("line")),
        message=_str(f.get("message")),
        symbol=_str(f.get("symbol")),
        fingerprint=_str(f.get("fingerprint")),
        snippet=sources.snippet(f.get("file"), f.get("line")),
        model_id=model.id if model else None,
        model_class=model.cls if model else None,
        hint=_str(f.get("hint")),
        consequence=_str(f.get("consequence")),
        effect=_str(f.get("effect")),
        entry_path=_str(f.get("entry_path")),
        rows=rows,
        method=index.labels.get(_str(f.get("method")), ""),
    )
    for row in rows:
        row.findings.append(view)
    return view


def _worst(severities: Iterable[str], default: str = "info") -> str:
    listed = set(severities)
    return next((s for s in SEVERITY_ORDER if s in listed), next(iter(sorted(listed)), default))


def _severity_rank(severity: str) -> int:
    return SEVERITY_ORDER.index(severity) if severity in SEVERITY_ORDER else len(SEVERITY_ORDER)


def _rule_groups(
    doc: dict[str, Any], ids: IdAllocator, link: SourceLinks, sources: Sources, index: ModelIndex
) -> list[RuleGroup]:
    """The findings by rule, the rules ordered by consequence (errors first, then warnings,
    then info; by code within one severity), each rule's findings by place."""
    meta = _rules_meta(doc.get("rules"))
    by_rule: dict[str, list[dict[str, Any]]] = {}
    for f in _list(doc.get("findings")):
        if isinstance(f, dict):
            by_rule.setdefault(_str(f.get("rule")) or "?", []).append(f)
    # Finding anchors first, by code: they are the ids users paste into tickets (#FT003-2).
    pending: list[tuple[str, list[FindingView]]] = []
    for code in sorted(by_rule):
        items = sorted(
            by_rule[code],
            key=lambda f: (
                _str(f.get("file")),
                _int(f.get("line")) or 0,
                _str(f.get("fingerprint")),
                _str(f.get("message")),
                _str(f.get("symbol")),
            ),
        )
        pending.append((code, [_finding_view(f, code, i, ids, link, sources, index) for i, f in enumerate(items, 1)]))
    groups: list[RuleGroup] = []
    for code, views in pending:
        m = meta.get(code, {})
        groups.append(
            RuleGroup(
                code=code,
                anchor=ids.take(f"rule-{_slug(code)}"),
                name=_str(m.get("name")) or (views[0].name if views else ""),
                severity=_worst((v.severity for v in views), _str(m.get("severity")) or "info"),
                summary=_str(m.get("summary")),
                rationale=_str(m.get("rationale")),
                fix=_str(m.get("fix")),
                findings=views,
            )
        )
    return sorted(groups, key=lambda g: (_severity_rank(g.severity), g.code))


def start_here(groups: list[RuleGroup]) -> list[FindingView]:
    """The errors, then the warnings, each by what it does to a served draft (silent wrong
    states before crashes), then by rule and place: what a reader should look at first."""

    def key(f: FindingView) -> tuple[object, ...]:
        consequence = (
            CONSEQUENCE_ORDER.index(f.consequence) if f.consequence in CONSEQUENCE_ORDER else len(CONSEQUENCE_ORDER)
        )
        return (_severity_rank(f.severity), consequence, f.rule, f.file, f.line or 0)

    return sorted((f for g in groups for f in g.findings if f.triage), key=key)


def _probe_view(probe: dict[str, Any], index: ModelIndex) -> ProbeView:
    command = _str(probe.get("command")) or "capture"
    claim = _dict(probe.get("claim"))
    if command == "draft" and claim:
        status = _str(probe.get("claim_verdict")) or _str(probe.get("verdict"))
    else:
        status = _str(probe.get("verdict"))
    target = _dict(probe.get("target"))
    num_layers = _int(target.get("num_layers"))
    observed = probe.get("boundaries")
    observed = _list(observed) if observed is not None else None
    rows: list[tuple[str, list[Any]]] = []
    if claim.get("boundaries") is not None:
        rows.append(("claimed", _list(claim.get("boundaries"))))
    if observed is not None:
        rows.append(("observed", observed))
    model = index.find(claim.get("model"))
    return ProbeView(
        command=command,
        status=status,
        mark=PROBE_MARKS.get(status, "other"),
        verdict=_str(probe.get("verdict")),
        target=_str(target.get("name")),
        num_layers=num_layers,
        claim_model=_str(claim.get("model")) or None,
        claim_source=_str(claim.get("source")),
        claim_boundaries=_list(claim.get("boundaries")),
        observed=observed,
        slots=[_dict(s) for s in _list(probe.get("slots"))],
        candidates=[_dict(c) for c in _list(probe.get("candidates"))[:10]],
        reason=_str(probe.get("reason")),
        evidence=_str(probe.get("claim_evidence")),
        warnings=[_str(w) for w in _list(probe.get("warnings"))],
        strip=svg_layout.boundary_strip(num_layers, rows) if num_layers is not None and rows else None,
        model_id=model.id if model else None,
        device=" ".join(
            p for p in (_str(probe.get("device")), _str(probe.get("dtype")), _str(probe.get("execution"))) if p
        ),
    )


_MARK_RANK = {"refuted": 0, "other": 1, "confirmed": 2}


def _probe_views(probe: Any, index: ModelIndex) -> tuple[ProbeView | None, dict[str, ProbeView]]:
    """The report's probe panel and the view shown on each model. A merged document
    (``flowtrace probe merge``: ``results``, one per run) marks every model it names, a model
    probed several times with its worst run; its panel sums the runs up."""
    if not isinstance(probe, dict):
        return None, {}
    docs = [_dict(r) for r in _list(probe.get("results"))] if "results" in probe else [probe]
    views = [_probe_view(d, index) for d in docs if d]
    per_model: dict[str, ProbeView] = {}
    for v in views:
        old = per_model.get(v.model_id or "")
        if v.model_id and (old is None or _MARK_RANK.get(v.mark, 1) < _MARK_RANK.get(old.mark, 1)):
            per_model[v.model_id] = v
    if "results" not in probe:
        return (views[0] if views else None), per_model
    counts = Counter(v.status or "no verdict" for v in views)
    worst = min((v.mark for v in views), key=lambda m: _MARK_RANK.get(m, 1), default="other")
    panel = ProbeView(
        command="merge", status=", ".join(f"{n} {s}" for s, n in sorted(counts.items())), mark=worst,
        verdict="", target=f"{len(per_model)} models in this matrix, {len(views)} runs", num_layers=None,
        claim_model=None, claim_source="", claim_boundaries=[], observed=None, slots=[], candidates=[],
        reason="", evidence="", warnings=[], strip=None, model_id=None, device="",
    )
    return panel, per_model


def _example_view(raw: Any, probe: ProbeView | None) -> ExampleView | None:
    ex = _dict(raw)
    if not ex:
        return None
    num_layers = _int(ex.get("num_layers"))
    boundaries = _list(ex.get("boundaries")) if ex.get("boundaries") is not None else None
    rows: list[tuple[str, list[Any]]] = [("predicted", boundaries)] if boundaries is not None else []
    if probe is not None and probe.observed is not None and probe.num_layers == num_layers:
        rows.append(("observed", probe.observed))
    return ExampleView(
        num_layers=num_layers,
        layer_ids=_list(ex.get("layer_ids")) if ex.get("layer_ids") is not None else None,
        boundaries=boundaries,
        note=_str(ex.get("note")),
        strip=svg_layout.boundary_strip(num_layers, rows) if num_layers is not None and rows else None,
    )


def _path_steps(raw: Any, link: SourceLinks) -> list[PathStep]:
    steps = []
    for s in _list(raw):
        d = _dict(s)
        if not d:
            continue
        steps.append(
            PathStep(
                kind=_str(d.get("kind")),
                label=_str(d.get("label")),
                file=_str(d.get("file")) or None,
                line=_int(d.get("line")),
                href=link(d.get("file") or None, d.get("line")),
            )
        )
    return steps


def _default_model(models: list[ModelView], probe: ProbeView | None) -> ModelView | None:
    """The model the inspector opens on: the probed one, else the first with findings, else the
    first that can capture and has a graph, else the first row."""
    if not models:
        return None
    if probe is not None and probe.model_id:
        return next(m for m in models if m.id == probe.model_id)
    tests: tuple[Callable[[ModelView], bool], ...] = (
        lambda m: bool(m.findings),
        lambda m: m.support == "supported" and m.graph is not None,
        lambda m: m.support == "supported",
        lambda m: m.graph is not None,
    )
    for test in tests:
        hit = next((m for m in models if test(m)), None)
        if hit is not None:
            return hit
    return models[0]


def _attach_probe(models: list[ModelView], probe: dict[str, Any] | None, index: ModelIndex) -> ProbeView | None:
    """Phase 3: the probe's verdict on each model it names (and on those models' findings);
    returns the report's probe panel."""
    panel, per_model = _probe_views(probe, index)
    for m in models:
        if m.id in per_model:
            m.probe = per_model[m.id]
            for f in m.findings:
                f.probe_mark = m.probe.mark
    return panel


def _attach_pictures(doc: dict[str, Any], models: list[ModelView], link: SourceLinks) -> dict[str, bool]:
    """Phase 4: each model's capture path, worked example and data-flow graph; says which of
    the document's optional keys were there (a section says what is missing)."""
    paths = _dict(doc.get("paths"))
    examples = _dict(doc.get("examples"))
    graph = svg_layout.parse_graph(doc["graph"]) if isinstance(doc.get("graph"), dict) else None
    for m in models:
        m.path = _path_steps(paths.get(m.qualname), link)
        m.example = _example_view(examples.get(m.qualname), m.probe)
        if graph is not None:
            sub, cut = svg_layout.model_subgraph(graph, m.qualname)
            sub = svg_layout.collapse_config_readers(sub)
            # A class alone with no edges says nothing the matrix does not; skip its picture.
            if sub.number_of_edges():
                m.graph = svg_layout.layout_graph(sub, cut)
    return {"has_graph": graph is not None, "has_paths": bool(paths), "has_examples": bool(examples)}


def _counted(values: Iterable[str], order: tuple[str, ...]) -> list[tuple[str, int]]:
    """(value, count) for every value of ``order`` (zeros included), then any others by name."""
    counts = Counter(values)
    return [(s, counts.get(s, 0)) for s in order] + sorted((s, n) for s, n in counts.items() if s not in order)


def _summary(doc: dict[str, Any], models: list[ModelView], findings: list[FindingView]) -> dict[str, Any]:
    """Phase 5: the header's facts and counts, and the inspector's groups."""
    stats = _dict(doc.get("stats"))
    tool = _dict(doc.get("tool"))
    seconds = stats.get("seconds")
    support_counts = _counted((m.support for m in models), SUPPORT_ORDER)
    return {
        "tool_name": _str(tool.get("name")) or "flowtrace",
        "tool_version": _str(tool.get("version")),
        "schema": _str(doc.get("schema")),
        "profiles": [_str(p) for p in _list(doc.get("profiles"))],
        "stats": stats,
        "seconds": f"{seconds:.2f} s" if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) else "—",
        "severity_counts": _counted((f.severity for f in findings), SEVERITY_ORDER),
        "support_counts": support_counts,
        "groups_by_support": [(s, [m for m in models if m.support == s]) for s, n in support_counts if n],
        "registered_count": sum(1 for m in models if m.registered),
        "flagged_count": sum(1 for m in models if m.flag),
    }


def _matrix_order(m: ModelView) -> tuple[int, int, int]:
    """The matrix's first order: rows an error names, then a warning, then by support."""
    return (TRIAGE_SEVERITIES.index(m.flag) if m.flag else len(TRIAGE_SEVERITIES), m.support_rank, m.index)


def build_context(
    doc: dict[str, Any],
    *,
    link_base: str | None = None,
    probe: dict[str, Any] | None = None,
    title: str | None = None,
    link_origin: str | None = None,
) -> dict[str, Any]:
    """Everything the template reads, computed once in Python (sorting, anchors, layouts), in
    named phases: 1 the model views, 2 the findings on the rows they concern, 3 the probe,
    4 the pictures, 5 the summary, 6 the page's script data and assets."""
    root = _str(doc.get("root"))
    link = SourceLinks(root=root, link_base=link_base)
    sources = Sources(doc.get("sources"))
    ids = IdAllocator()
    raw = [m for m in _list(doc.get("models")) if isinstance(m, dict)]
    models = [_model_view(m, i, ids, link, sources) for i, m in enumerate(raw)]  # 1
    index = _method_views(doc, raw, models, link, sources)
    groups = _rule_groups(doc, ids, link, sources, index)  # 2
    findings = [f for g in groups for f in g.findings]
    probe_view = _attach_probe(models, probe, index)  # 3
    pictures = _attach_pictures(doc, models, link)  # 4
    summary = _summary(doc, models, findings)  # 5
    default = _default_model(models, probe_view)
    return {
        **summary,
        **pictures,
        **_page(doc, probe, findings, default, link),  # 6
        "title": title or f"flowtrace report — {', '.join(summary['profiles']) or 'scan'} — {root or '.'}",
        "doc": doc,
        "root": root,
        "models": models,
        "matrix": sorted(models, key=_matrix_order),
        "methods_served": served_methods(doc),
        "matrix_lines": len(models) + sum(len(m.methods) for m in models),
        "groups": groups,
        "findings": findings,
        "start_here": start_here(groups),
        "probe": probe_view,
        "default_model": default,
        "has_rules": "rules" in doc,
        "has_sources": bool(sources.raw),
        "link": link,
        "link_base": link_base,
        "link_origin": link_origin or ("--link-base" if link_base else None),
        **_TEMPLATE_HELPERS,
    }


def _page(
    doc: dict[str, Any],
    probe: dict[str, Any] | None,
    findings: list[FindingView],
    default: ModelView | None,
    link: SourceLinks,
) -> dict[str, Any]:
    """Phase 6: the page's embedded data (the scan document without its bulky derived keys,
    the probe, what the script needs), its assets and their CSP, and the plain tables."""
    data = {
        "doc": {k: v for k, v in doc.items() if k not in RENDER_ONLY_KEYS},
        "probe": probe,
        "ui": {
            "findings": [f.anchor for f in findings],
            "default_model": default.id if default else None,
            "link_prefix": link.prefix,
        },
    }
    css, js = _asset("report.css"), _asset("report.js")
    # --method all: the method filters' script, only on such a page (a plain report is unchanged)
    methods_js = _asset("report_methods.js") if served_methods(doc) else None
    return {
        "data_json": json_for_script(data),
        "css": css,
        "js": js,
        "methods_js": methods_js,
        "csp": content_security_policy(css, js, *([methods_js] if methods_js else [])),
        "diagnostics": [_dict(d) for d in _list(doc.get("diagnostics"))],
        "capture_modes": [_dict(d) for d in _list(doc.get("capture_modes"))],
        "concat_sites": [_dict(d) for d in _list(doc.get("concat_sites"))],
    }


_TEMPLATE_HELPERS = {
    "fmt": svg_layout.fmt,
    "severity_css": _severity_css,
    "support_css": _support_css,
    "kind_css": _kind_css,
    "wbr": wbr,
    "short_qualname": _short_qualname,
    "path_kinds": PATH_KINDS,
    "legend": LEGEND,
}


def _csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


def content_security_policy(css: str, js: str, *more_js: str) -> str:
    """Defence in depth behind the escaping: only our own inline style and scripts may apply
    (pinned by hash), and the page may load nothing at all, so even a string that somehow
    became markup could neither run nor phone home."""
    return "; ".join(
        (
            "default-src 'none'",
            f"script-src {' '.join(_csp_hash(text) for text in (js, *more_js))}",
            f"style-src {_csp_hash(css)}",
            "img-src 'none'",
            "base-uri 'none'",
            "form-action 'none'",
        )
    )


def _asset(name: str) -> Markup:
    """Inline CSS/JS, read raw (not through jinja, whose ``{{``/``{%`` would clash with JS).
    Refuses text that could close its own ``<style>``/``<script>`` element early."""
    text = "\n" + (TEMPLATES / name).read_text(encoding="utf-8")
    if re.search(r"</(script|style)", text, re.IGNORECASE) or "<!--" in text:
        raise ValueError(f"{name} must not contain '</script', '</style' or '<!--'")
    return Markup(text)  # noqa: S704 - our own static asset, checked above


_ENV: jinja2.Environment | None = None


def _environment() -> jinja2.Environment:
    global _ENV
    if _ENV is None:
        _ENV = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(TEMPLATES)),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
            keep_trailing_newline=True,
        )
    return _ENV


def render_html(
    doc: dict[str, Any],
    *,
    link_base: str | None = None,
    probe: dict[str, Any] | None = None,
    title: str | None = None,
    link_origin: str | None = None,
) -> str:
    """One self-contained HTML report for a ``flowtrace.scan/1`` document (see module doc);
    ``link_origin`` says in the footer where ``link_base`` came from (a git remote, a release)."""
    context = build_context(doc, link_base=link_base, probe=probe, title=title, link_origin=link_origin)
    return _environment().get_template("report.html.j2").render(**context)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m flowtrace.render.html", description="Render a flowtrace.scan/1 JSON document to HTML."
    )
    parser.add_argument("doc", nargs="?", help="scan JSON (flowtrace scan PATH --format json)")
    parser.add_argument("-o", "--output", help="write here instead of stdout")
    parser.add_argument("--link-base", help="source links as {link_base}/{file}#L{line}")
    parser.add_argument("--probe", help="a flowtrace.probe/1 JSON to merge")
    parser.add_argument("--title")
    args = parser.parse_args(argv)
    if not args.doc:
        parser.error("give a scan JSON document")
    doc = json.loads(Path(args.doc).read_text(encoding="utf-8"))
    probe = json.loads(Path(args.probe).read_text(encoding="utf-8")) if args.probe else None
    text = render_html(doc, link_base=args.link_base, probe=probe, title=args.title)
    if args.output:
        from flowtrace.sources.output import write_atomic

        write_atomic(args.output, text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
