"""``flowtrace check``: the CI lint contract, as a plain API (modelled on ruff).

:func:`run_check` loads ``[tool.flowtrace]`` (:mod:`flowtrace.lint.config`), scans, runs the enabled
rules and then filters, in this order:

1. rule selection (``select`` / ``extend-select`` / ``ignore`` by code prefix, config first and
   the command line on top, as ruff layers them);
2. ``per-file-ignores`` (gitignore-style pattern -> code prefixes);
3. inline suppressions ``# flowtrace: ignore[FT001,FT002]`` on the finding's line (codes are
   required; a bare ``# flowtrace: ignore`` suppresses nothing);
4. FT016 ``unused-suppression`` findings for suppression comments that suppressed nothing,
   name an unknown code or name no code (themselves subject to 2 and 3);
5. the baseline (``--baseline FILE``; ``--write-baseline FILE`` records what is left after 1-4).

It returns a frozen :class:`CheckOutcome`; nothing here prints or exits. Errors a user can fix
(missing path, bad config, unknown code, bad baseline) raise :class:`flowtrace.errors.UsageError`.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, Sequence

from flowtrace.checks.base import SEVERITIES, Finding
from flowtrace.checks.selection import SelectionLayer, resolve_selection, specificity  # noqa: F401  (re-exported)
from flowtrace.checks.run import finding_order
from flowtrace.index.comments import MARK, comments
from flowtrace.lint.display_paths import read_source
from flowtrace.lint.config import Config, ConfigError, load_config, parse_selectors, rule_codes
from flowtrace.lint.memo import ResultMemo

if TYPE_CHECKING:
    from flowtrace.analysis.scan import ScanResult
    from flowtrace.index.build import IndexOptions

UNUSED_SUPPRESSION = "FT016"

# A comment token (or, where the file does not tokenize, a line) holding a suppression.
_SUPPRESSION = re.compile(r"#\s*flowtrace:\s*ignore(?:\[(?P<codes>[^\]]*)\]|(?=[\s#]|$))")


def severity_rank(severity: str) -> int:
    return SEVERITIES.index(severity) if severity in SEVERITIES else len(SEVERITIES)


@dataclass(frozen=True)
class PerFileIgnores:
    entries: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def __post_init__(self) -> None:
        specs: tuple[Any, ...] = ()
        if self.entries:  # pathspec only for a configuration that has per-file ignores
            import pathspec

            specs = tuple((pathspec.GitIgnoreSpec.from_lines([p]), codes) for p, codes in self.entries)
        object.__setattr__(self, "_specs", specs)

    def ignores(self, file: str, code: str) -> bool:
        for spec, codes in self._specs:  # type: ignore[attr-defined]
            if specificity(code, codes) and spec.match_file(file):
                return True
        return False


# --------------------------------------------------------------------------- suppressions


@dataclass(frozen=True, slots=True)
class SuppressionComment:
    file: str
    line: int
    codes: tuple[str, ...]  # empty: a bare ``# flowtrace: ignore`` (not a suppression)
    text: str  # the comment as written


def parse_suppressions(file: str, source: str) -> list[SuppressionComment]:
    """The suppression comments of a file's text (read as the index reads them)."""
    if MARK not in source:
        return []
    return _suppressions(file, comments(source))


def _suppressions(file: str, found: Iterable[tuple[int, str]]) -> list[SuppressionComment]:
    out = []
    for line, text in found:
        m = _SUPPRESSION.search(text)
        if not m:
            continue
        raw = m.group("codes") or ""
        codes = tuple(dict.fromkeys(c.upper() for c in re.split(r"[,\s]+", raw) if c))
        out.append(SuppressionComment(file, line, codes, m.group(0).strip()))
    return out


def collect_suppressions(
    result: ScanResult, extra_files: Iterable[str] = ()
) -> dict[tuple[str, int], SuppressionComment]:
    """Suppression comments of every indexed file (and of any other file a finding names).

    An indexed file's comments are one of its facts (``FileFacts.flowtrace_comments``, read by
    the index worker from the bytes it parsed); only a file the index did not read whole (too
    large, its worker lost) and a file a finding names outside the index are read from disk.
    """
    out: dict[tuple[str, int], SuppressionComment] = {}
    indexed: set[str] = set()
    for ff in result.files:
        indexed.add(ff.path)
        if ff.flowtrace_comments is None:
            found = _read_suppressions(result, ff.path)
        else:
            found = _suppressions(ff.path, ff.flowtrace_comments)
        for s in found:
            out.setdefault((s.file, s.line), s)
    for file in dict.fromkeys(extra_files):
        if file not in indexed:
            for s in _read_suppressions(result, file):
                out.setdefault((s.file, s.line), s)
    return out


def _read_suppressions(result: ScanResult, file: str) -> list[SuppressionComment]:
    source = read_source(result.root, file)
    return [] if source is None else parse_suppressions(file, source)


def unread_files(result: ScanResult, extra_files: Iterable[str] = ()) -> list[str]:
    """The files :func:`collect_suppressions` reads from disk (the rest come with the facts)."""
    indexed = {ff.path for ff in result.files}
    unread = [ff.path for ff in result.files if ff.flowtrace_comments is None]
    return unread + sorted(set(extra_files) - indexed)


# --------------------------------------------------------------------------- outcome


@dataclass(frozen=True)
class CheckOutcome:
    root: Path
    result: ScanResult
    findings: tuple[Finding, ...]  # what is reported, sorted by file, line, rule
    fail_on: str
    exit_zero: bool
    enabled: tuple[str, ...]  # the rule codes that ran
    config: Config
    suppressed_inline: int = 0
    suppressed_baseline: int = 0
    ignored_per_file: int = 0
    baseline_written: Path | None = None
    # for the report, when the scan used a cache
    memo: ResultMemo | None = field(default=None, compare=False, repr=False)

    @property
    def counts(self) -> dict[str, int]:
        out = {s: 0 for s in SEVERITIES}
        for f in self.findings:
            out[f.severity] = out.get(f.severity, 0) + 1
        return out

    @property
    def failing(self) -> tuple[Finding, ...]:
        """Findings at or above ``fail_on``."""
        level = severity_rank(self.fail_on)
        return tuple(f for f in self.findings if severity_rank(f.severity) >= level)

    @property
    def exit_code(self) -> int:
        return 1 if self.failing and not self.exit_zero else 0

    def summary(self) -> str:
        c = self.counts

        def n(count: int, word: str, plural: str | None = None) -> str:
            return f"{count} {word if count == 1 else (plural or word + 's')}"

        line = (
            f"{n(len(self.findings), 'finding')} ({n(c['error'], 'error')}, {n(c['warning'], 'warning')},"
            f" {c['info']} info); {self.suppressed_inline} suppressed inline, {self.suppressed_baseline} by baseline"
        )
        if self.ignored_per_file:
            line += f", {self.ignored_per_file} by per-file-ignores"
        return line


def _selectors(values: Sequence[str] | None, where: str, codes: tuple[str, ...]) -> tuple[str, ...] | None:
    if values is None:
        return None
    if isinstance(values, str):
        values = (values,)
    return parse_selectors(tuple(values), where=where, codes=codes)


def _strings(values: str | Sequence[str]) -> tuple[str, ...]:
    return (values,) if isinstance(values, str) else tuple(values)


@dataclass(frozen=True, slots=True)
class CheckOptions:
    """What one ``check`` run is asked for on top of ``[tool.flowtrace]`` (the command line's part).

    Selectors are code prefixes (``FT0``, ``FT003``) or ``ALL``; each string may hold several,
    comma-separated. ``select=None`` keeps the configured selection; ``config`` names a TOML
    file to read instead of ``PATH/pyproject.toml``; ``isolated`` reads none.
    ``require_engine_code`` makes a path without engine code a :class:`UsageError` (the CI
    contract); ``scan`` turns it off and reports an empty matrix instead.
    """

    select: tuple[str, ...] | None = None
    ignore: tuple[str, ...] = ()
    extend_select: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    fail_on: str | None = None
    exit_zero: bool = False
    baseline: str | Path | None = None
    write_baseline: str | Path | None = None
    profile: str | None = None
    profile_files: tuple[str | Path, ...] = ()
    drafts: tuple[str | Path, ...] = ()
    exclude: tuple[str, ...] = ()
    jobs: int | None = None
    use_cache: bool = True
    cache_dir: str | Path | None = None
    config: str | Path | None = None
    isolated: bool = False
    progress: bool | None = False
    require_engine_code: bool = True
    method: str | None = None  # the speculative method ([methods.<name>]); None: the profiles' default

    @classmethod
    def of(
        cls,
        *,
        select: str | Sequence[str] | None = None,
        ignore: str | Sequence[str] = (),
        extend_select: str | Sequence[str] = (),
        per_file_ignores: Mapping[str, str | Sequence[str]] | None = None,
        profile_files: Sequence[str | Path] = (),
        drafts: Sequence[str | Path] = (),
        exclude: Sequence[str] = (),
        **rest: Any,
    ) -> CheckOptions:
        """Options from the loose forms a caller has at hand (a string for one selector, lists,
        a mapping of per-file ignores); the scalar options pass through unchanged."""
        return cls(
            select=None if select is None else _strings(select),
            ignore=_strings(ignore),
            extend_select=_strings(extend_select),
            per_file_ignores=tuple((pattern, _strings(codes)) for pattern, codes in (per_file_ignores or {}).items()),
            profile_files=tuple(profile_files),
            drafts=tuple(drafts),
            exclude=tuple(exclude),
            **rest,
        )


@dataclass(frozen=True, slots=True)
class _Plan:
    """Everything decided from the options and the configuration before the scan (so a bad
    selector, severity or baseline is reported before any work)."""

    config: Config
    codes: tuple[str, ...]
    layers: tuple[SelectionLayer, ...]
    per_file_entries: tuple[tuple[str, tuple[str, ...]], ...]
    per_file: PerFileIgnores
    fail_on: str
    accepted: Any  # the baseline to apply (flowtrace.lint.baseline), None without one


@dataclass(frozen=True, slots=True)
class _Inline:
    reported: tuple[Finding, ...]
    used: Mapping[tuple[str, int], frozenset[str]]
    suppressed: int


def run_check(path: str | Path, options: CheckOptions | None = None, /, **values: Any) -> CheckOutcome:
    """Scan ``path`` and apply the CI contract (see the module docstring for the order).

    ``options`` is a :class:`CheckOptions`; keyword arguments instead build one with
    :meth:`CheckOptions.of` (``run_check(path, select=["FT0"], jobs=1)``).
    """
    opts = options if options is not None else CheckOptions.of(**values)
    if options is not None and values:
        raise TypeError("run_check: pass a CheckOptions or keyword options, not both")
    plan = _plan(path, opts)
    result, index_options = _scan(path, opts, plan.config)
    enabled = resolve_selection(plan.codes, plan.layers)
    rule_run = tuple(sorted(enabled - {UNUSED_SUPPRESSION}))
    memo = _memo(result, index_options, (rule_run, tuple(sorted(enabled)), list(plan.per_file_entries)))
    raw = _rule_findings(result, rule_run, enabled, memo)
    kept = [f for f in raw if not plan.per_file.ignores(f.file, f.rule)]
    comments = _suppression_comments(result, kept, memo)
    inline = _apply_inline(kept, comments)
    unused, self_suppressed = _unused_suppressions(comments, inline.used, plan, enabled)
    reported = sorted([*inline.reported, *unused], key=finding_order(result))  # by place, then method
    reported, written, by_baseline = _apply_baseline(reported, opts, plan.accepted)
    return CheckOutcome(
        root=result.root,
        result=result,
        findings=tuple(reported),
        fail_on=plan.fail_on,
        exit_zero=opts.exit_zero,
        enabled=tuple(sorted(enabled)),
        config=plan.config,
        suppressed_inline=inline.suppressed + self_suppressed,
        suppressed_baseline=by_baseline,
        ignored_per_file=len(raw) - len(kept),
        baseline_written=written,
        memo=memo,
    )


def _load(path: str | Path, opts: CheckOptions) -> Config:
    """``[tool.flowtrace]`` of the scanned tree (or of ``--config``; none when isolated)."""
    from flowtrace.analysis.scan import resolve_root

    if opts.isolated:
        return Config()
    if str(path).startswith("pypi:"):
        return load_config(Path("."), opts.config) if opts.config is not None else Config()
    return load_config(resolve_root(path), opts.config)


def _plan(path: str | Path, opts: CheckOptions) -> _Plan:
    from flowtrace.lint import baseline as baselines

    cfg = _load(path, opts)
    codes = rule_codes()
    cli_layer = SelectionLayer(
        select=_selectors(opts.select, "--select", codes),
        extend_select=_selectors(opts.extend_select, "--extend-select", codes) or (),
        ignore=_selectors(opts.ignore, "--ignore", codes) or (),
    )
    entries = tuple(cfg.per_file_ignores) + tuple(
        (pattern, _selectors(values, f"per-file-ignores {pattern!r}", codes) or ())
        for pattern, values in opts.per_file_ignores
    )
    level = opts.fail_on or cfg.fail_on or "warning"
    if level not in SEVERITIES:
        raise ConfigError(f"--fail-on: expected one of {', '.join(SEVERITIES)}, got {level!r}")
    accepted = baselines.read(opts.baseline) if opts.baseline is not None and opts.write_baseline is None else None
    layers = (SelectionLayer(cfg.select, cfg.extend_select, cfg.ignore), cli_layer)
    return _Plan(cfg, codes, layers, entries, PerFileIgnores(entries), level, accepted)


def _after_index() -> Iterator[object]:
    """Import what the stages after the index need (the graph's networkx; the rules, and with
    them the resolver and the analyses they read), a module at a time: handed to a cold scan's
    index, which runs it while its workers parse, instead of before the first of them starts or
    after the last ends."""
    from flowtrace.analysis import graph
    from flowtrace.checks import rule_module_loads

    yield from rule_module_loads()
    graph.prepare()
    yield "networkx"


def _scan(path: str | Path, opts: CheckOptions, cfg: Config) -> tuple[ScanResult, IndexOptions]:
    from flowtrace.analysis.scan import scan
    from flowtrace.index.build import IndexOptions

    options = IndexOptions(
        jobs=opts.jobs,
        use_cache=opts.use_cache,
        cache_dir=Path(opts.cache_dir) if opts.cache_dir else None,
        excludes=tuple(cfg.exclude) + tuple(opts.exclude),
        progress=opts.progress,
        meanwhile=_after_index,
    )
    result = scan(
        path,
        profile=opts.profile or cfg.profile,
        options=options,
        profile_files=tuple(cfg.profile_files) + tuple(opts.profile_files),
        drafts_files=tuple(cfg.drafts) + tuple(opts.drafts),
        method=opts.method,
    )
    if opts.require_engine_code:
        from flowtrace.analysis.scan import require_engine_code

        require_engine_code(result, path)
    return result, options


def _rule_findings(
    result: ScanResult, rule_run: tuple[str, ...], enabled: frozenset[str], memo: ResultMemo | None
) -> list[Finding]:
    """The enabled rules' findings (FT016 aside: it judges the suppressions afterwards)."""
    from flowtrace.checks.run import run_rules

    def rules() -> list[Finding]:
        return [f for f in run_rules(result, select=rule_run) if f.rule in enabled] if rule_run else []

    if memo is None:
        return rules()
    # keyed by the index's fingerprint (what the grading reads beside the files' facts, package
    # __init__ imports and distribution names, is part of the index) and by the draft catalogue,
    # which grades what the rules say (a user's --drafts file changes consequences); ``--method
    # all`` adds the other methods' findings (the same index: keyed apart)
    key = (result.drafts.digest, "all") if result.every_method else (result.drafts.digest,)
    return memo.get("rules", key, rules)  # type: ignore[no-any-return]


def _suppression_comments(
    result: ScanResult, kept: list[Finding], memo: ResultMemo | None
) -> dict[tuple[str, int], SuppressionComment]:
    # a finding grouped at a base class is also suppressed by comments at all its causes' lines
    files = {f.file for f in kept} | {c.file for f in kept if f.grouped for c in f.causes}
    # an indexed file's comments are facts (the memo's fingerprint covers them); those read from
    # disk are text: keyed by the content of every file they are read from
    read_key = text_key(result, unread_files(result, files))
    if memo is not None and read_key is not None:
        return memo.get("suppressions", read_key, lambda: collect_suppressions(result, files))  # type: ignore[no-any-return]
    return collect_suppressions(result, files)


def _apply_inline(kept: list[Finding], comments: Mapping[tuple[str, int], SuppressionComment]) -> _Inline:
    used: dict[tuple[str, int], set[str]] = defaultdict(set)
    reported: list[Finding] = []
    for f in kept:
        comment = comments.get((f.file, f.line))
        if comment is not None and f.rule in comment.codes:
            used[(f.file, f.line)].add(f.rule)
        elif _suppressed_at_causes(f, comments):
            for c in f.causes:
                used[(c.file, c.line)].add(f.rule)
        else:
            reported.append(f)
    return _Inline(tuple(reported), {k: frozenset(v) for k, v in used.items()}, len(kept) - len(reported))


def _suppressed_at_causes(f: Finding, comments: Mapping[tuple[str, int], SuppressionComment]) -> bool:
    """A finding grouped at a base class (it stands for per-wrapper findings) whose every
    wrapper's line carries a suppression of its rule: written before the grouping, still honoured."""
    if not f.grouped or not f.causes:
        return False
    return all((c := comments.get((x.file, x.line))) is not None and f.rule in c.codes for x in f.causes)


def _unused_suppressions(
    comments: Mapping[tuple[str, int], SuppressionComment],
    used: Mapping[tuple[str, int], frozenset[str]],
    plan: _Plan,
    enabled: frozenset[str],
) -> tuple[list[Finding], int]:
    """FT016's findings (its rule judges each comment), and how many of them an
    ``ignore[FT016]`` in the same comment silenced."""
    if UNUSED_SUPPRESSION not in enabled:
        return [], 0
    from flowtrace.checks.ft016_unused_suppression import CommentUse, UnusedSuppression

    rule = UnusedSuppression()
    out: list[Finding] = []
    silenced = 0
    for key in sorted(comments):
        comment = comments[key]
        if plan.per_file.ignores(comment.file, UNUSED_SUPPRESSION):
            continue
        use = CommentUse(comment.file, comment.line, comment.text, comment.codes, used.get(key, frozenset()))
        f = rule.judge(use, plan.codes, enabled, plan.per_file.ignores)
        if f is None:
            continue
        if UNUSED_SUPPRESSION in comment.codes:
            silenced += 1
        else:
            out.append(f)
    return out, silenced


def _apply_baseline(
    reported: list[Finding], opts: CheckOptions, accepted: Any
) -> tuple[list[Finding], Path | None, int]:
    """(findings left, baseline written, how many the baseline accepted)."""
    from flowtrace.lint import baseline as baselines

    written = None
    if opts.write_baseline is not None:
        baselines.write(opts.write_baseline, reported)
        written = Path(opts.write_baseline)
        accepted = baselines.from_findings(reported)
    if accepted is None:
        return reported, written, 0
    left, count = accepted.apply(reported)
    return left, written, count


def text_key(result: ScanResult, files: Iterable[str]) -> list[tuple[str, str]] | None:
    """``files`` with their content hashes: the part of a memo key for what is read from the
    files' text rather than from their facts (the index fingerprint hashes facts only). None
    when one of them is not an indexed file (its content is not known): then no memo."""
    digests = dict(result.index.file_digests)
    key = [(file, digests.get(file)) for file in sorted(set(files))]
    return None if any(digest is None for _, digest in key) else key  # type: ignore[return-value]


def _memo(result: ScanResult, options: IndexOptions, shape: object) -> ResultMemo | None:
    """This root's memo of derived answers, when the scan used the fact cache and every rule
    is flowtrace's own (a rule defined elsewhere, a plugin's or a test's, is not in the code
    digest that keys the memo)."""
    from flowtrace.checks.base import Rule

    if not options.use_cache or not result.index.fingerprint:
        return None
    if any(not rule.__module__.startswith("flowtrace.") for rule in Rule.registry.values()):
        return None
    from flowtrace.index.cache import default_cache_dir

    root = Path(result.root)
    return ResultMemo.open(options.cache_dir or default_cache_dir(root), root, result.index.fingerprint, shape)


# --------------------------------------------------------------------------- paths and rendering
