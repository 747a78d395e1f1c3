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

import io
import re
import tokenize
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

from flowtrace.errors import UsageError
from flowtrace.checks.base import SEVERITIES, Finding
from flowtrace.checks.selection import SelectionLayer, resolve_selection, specificity  # noqa: F401  (re-exported)
from flowtrace.model.facts import Location
from flowtrace.lint.display_paths import read_source
from flowtrace.lint.config import Config, ConfigError, load_config, parse_selectors, rule_codes
from flowtrace.lint.memo import ResultMemo

if TYPE_CHECKING:
    from flowtrace.analysis.scan import ScanResult

UNUSED_SUPPRESSION = "FT016"

# A comment token (or, where the file does not tokenize, a line) holding a suppression.
_SUPPRESSION = re.compile(r"#\s*flowtrace:\s*ignore(?:\[(?P<codes>[^\]]*)\]|(?=[\s#]|$))")


def severity_rank(severity: str) -> int:
    return SEVERITIES.index(severity) if severity in SEVERITIES else len(SEVERITIES)


@dataclass(frozen=True)
class PerFileIgnores:
    entries: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def __post_init__(self) -> None:
        specs: tuple = ()
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


def _comments(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comment; lines with '#' when the file does not tokenize."""
    try:
        return [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(source).readline) if tok.type == tokenize.COMMENT]
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return [(n, line[line.index("#") :]) for n, line in enumerate(source.splitlines(), 1) if "#" in line]


def parse_suppressions(file: str, source: str) -> list[SuppressionComment]:
    if "flowtrace:" not in source:
        return []
    out = []
    for line, text in _comments(source):
        m = _SUPPRESSION.search(text)
        if not m:
            continue
        raw = m.group("codes") or ""
        codes = tuple(dict.fromkeys(c.upper() for c in re.split(r"[,\s]+", raw) if c))
        out.append(SuppressionComment(file, line, codes, m.group(0).strip()))
    return out


def collect_suppressions(result: ScanResult, extra_files: Iterable[str] = ()) -> dict[tuple[str, int], SuppressionComment]:
    """Suppression comments of every indexed file (and of any other file a finding names).

    Comments are read with :mod:`tokenize`, so a docstring that merely mentions the syntax
    is not a suppression; the index's line-based ``FileFacts.suppressions`` is not used.
    """
    files = dict.fromkeys([ff.path for ff in result.files] + list(extra_files))
    out: dict[tuple[str, int], SuppressionComment] = {}
    for file in files:
        source = read_source(result.root, file)
        if source is None:
            continue
        for s in parse_suppressions(file, source):
            out.setdefault((s.file, s.line), s)
    return out


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
    memo: ResultMemo | None = field(default=None, compare=False, repr=False)  # for the report, when the scan used a cache

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
            f"{n(len(self.findings), 'finding')} ({n(c['error'], 'error')}, {n(c['warning'], 'warning')}, {c['info']} info); "
            f"{self.suppressed_inline} suppressed inline, {self.suppressed_baseline} by baseline"
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


def run_check(
    path: str | Path,
    *,
    select: Sequence[str] | None = None,
    ignore: Sequence[str] = (),
    extend_select: Sequence[str] = (),
    per_file_ignores: Mapping[str, Sequence[str]] | None = None,
    fail_on: str | None = None,
    exit_zero: bool = False,
    baseline: str | Path | None = None,
    write_baseline: str | Path | None = None,
    profile: str | None = None,
    profile_files: Sequence[str | Path] = (),
    exclude: Sequence[str] = (),
    jobs: int | None = None,
    use_cache: bool = True,
    cache_dir: str | Path | None = None,
    config: str | Path | None = None,
    isolated: bool = False,
    progress: bool | None = False,
    require_engine_code: bool = True,
) -> CheckOutcome:
    """Scan ``path`` and apply the CI contract; see the module docstring for the order.

    Selectors are code prefixes (``FT0``, ``FT003``) or ``ALL``; each string may hold several,
    comma-separated. ``select=None`` keeps the configured selection; ``config`` names a TOML
    file to read instead of ``PATH/pyproject.toml``; ``isolated`` reads none.
    ``require_engine_code`` makes a path without engine code a :class:`UsageError` (the CI
    contract); ``scan`` turns it off and reports an empty matrix instead.
    """
    from flowtrace.analysis.scan import resolve_root, scan
    from flowtrace.checks.run import run_rules
    from flowtrace.lint import baseline as baselines
    from flowtrace.index.build import IndexOptions

    source = str(path)
    if isolated:
        cfg = Config()
    elif source.startswith("pypi:"):
        cfg = load_config(Path("."), config) if config is not None else Config()
    else:
        cfg = load_config(resolve_root(path), config)

    codes = rule_codes()
    cli_layer = SelectionLayer(
        select=_selectors(select, "--select", codes),
        extend_select=_selectors(extend_select, "--extend-select", codes) or (),
        ignore=_selectors(ignore, "--ignore", codes) or (),
    )
    pfi_entries = list(cfg.per_file_ignores)
    for pattern, values in (per_file_ignores or {}).items():
        pfi_entries.append((pattern, _selectors(values, f"per-file-ignores {pattern!r}", codes) or ()))
    per_file = PerFileIgnores(tuple(pfi_entries))
    level = fail_on or cfg.fail_on or "warning"
    if level not in SEVERITIES:
        raise ConfigError(f"--fail-on: expected one of {', '.join(SEVERITIES)}, got {level!r}")
    accepted = baselines.read(baseline) if baseline is not None and write_baseline is None else None

    options = IndexOptions(
        jobs=jobs,
        use_cache=use_cache,
        cache_dir=Path(cache_dir) if cache_dir else None,
        excludes=tuple(cfg.exclude) + tuple(exclude),
        progress=progress,
    )
    result = scan(path, profile=profile or cfg.profile, options=options, profile_files=tuple(cfg.profile_files) + tuple(profile_files))
    if require_engine_code:
        _require_engine_code(result, source)
    enabled = resolve_selection(codes, [SelectionLayer(cfg.select, cfg.extend_select, cfg.ignore), cli_layer])

    rule_run = tuple(sorted(enabled - {UNUSED_SUPPRESSION}))
    memo = _memo(result, options, (rule_run, tuple(sorted(enabled)), pfi_entries))

    def rules() -> list[Finding]:
        return [f for f in run_rules(result, select=rule_run) if f.rule in enabled] if rule_run else []

    raw = memo.get("rules", (), rules) if memo is not None else rules()

    # per-file-ignores
    kept: list[Finding] = []
    ignored_per_file = 0
    for f in raw:
        if per_file.ignores(f.file, f.rule):
            ignored_per_file += 1
        else:
            kept.append(f)

    # inline suppressions
    files = {f.file for f in kept}
    # suppression comments are text, not facts: keyed by the content of every file they are read from
    read_key = text_key(result, [ff.path for ff in result.files] + sorted(files))
    if memo is not None and read_key is not None:
        comments = memo.get("suppressions", read_key, lambda: collect_suppressions(result, files))
    else:
        comments = collect_suppressions(result, files)
    used: dict[tuple[str, int], set[str]] = defaultdict(set)
    reported: list[Finding] = []
    suppressed_inline = 0
    for f in kept:
        comment = comments.get((f.file, f.line))
        if comment is not None and f.rule in comment.codes:
            suppressed_inline += 1
            used[(f.file, f.line)].add(f.rule)
        else:
            reported.append(f)

    # FT016: suppressions that suppress nothing
    if UNUSED_SUPPRESSION in enabled:
        from flowtrace.checks.base import Rule

        rule = Rule.registry[UNUSED_SUPPRESSION]
        for key in sorted(comments):
            comment = comments[key]
            if per_file.ignores(comment.file, UNUSED_SUPPRESSION):
                continue
            f = _unused_finding(rule, comment, used[key], codes, enabled, per_file)
            if f is None:
                continue
            if UNUSED_SUPPRESSION in comment.codes:
                suppressed_inline += 1
            else:
                reported.append(f)

    reported.sort(key=lambda f: (f.file, f.line, f.rule, f.fingerprint))

    written = None
    if write_baseline is not None:
        baselines.write(write_baseline, reported)
        written = Path(write_baseline)
        accepted = baselines.from_findings(reported)
    suppressed_baseline = 0
    if accepted is not None:
        reported, suppressed_baseline = accepted.apply(reported)

    return CheckOutcome(
        root=result.root,
        result=result,
        findings=tuple(reported),
        fail_on=level,
        exit_zero=exit_zero,
        enabled=tuple(sorted(enabled)),
        config=cfg,
        suppressed_inline=suppressed_inline,
        suppressed_baseline=suppressed_baseline,
        ignored_per_file=ignored_per_file,
        baseline_written=written,
        memo=memo,
    )


def text_key(result: ScanResult, files: Iterable[str]) -> list[tuple[str, str]] | None:
    """``files`` with their content hashes: the part of a memo key for what is read from the
    files' text rather than from their facts (the index fingerprint hashes facts only). None
    when one of them is not an indexed file (its content is not known): then no memo."""
    digests = dict(result.index.file_digests)
    key = [(file, digests.get(file)) for file in sorted(set(files))]
    return None if any(digest is None for _, digest in key) else key  # type: ignore[return-value]


def _memo(result: ScanResult, options, shape: object) -> ResultMemo | None:  # noqa: ANN001
    """This root's memo of derived answers, when the scan used the fact cache and every rule
    is flowtrace's own (a rule defined elsewhere, a plugin's or a test's, is not in the code
    digest that keys the memo)."""
    from flowtrace.checks.base import Rule

    if not options.use_cache or not result.index.fingerprint:
        return None
    if any(not rule.__module__.startswith("flowtrace.") for rule in Rule.registry.values()):
        return None
    from flowtrace.index.cache import default_cache_dir

    return ResultMemo.open(options.cache_dir or default_cache_dir(result.root), result.root, result.index.fingerprint, shape)


def _require_engine_code(result: ScanResult, source: str) -> None:
    """A check of a path without engine code is a usage error, not a green "0 findings".

    Engine code is anything the profiles recognise: a registry entry, a capture setter, a
    capture site or a decoder-layer loop. A file, an empty folder or the wrong folder has none.
    """
    if any(ff.registry or ff.setters or ff.capture_sites or ff.layer_loops for ff in result.files):
        return
    total = result.index.stats.files_total
    what = "no Python files, so no" if total == 0 else f"{total} Python file{'s' if total != 1 else ''}, none with a"
    engines = " or ".join(p.name for p in result.profiles) or "any known engine"
    looked = " or ".join(p.detect_paths[0] for p in result.profiles if p.detect_paths)
    raise UsageError(
        f"{source}: no engine code to check ({what} model registry, capture setter or decoder-layer loop of {engines}); "
        f"point check at an engine checkout, e.g. the folder holding {looked}"
    )


def _unused_finding(rule, comment: SuppressionComment, used: set[str], codes: tuple[str, ...], enabled: frozenset[str], per_file: PerFileIgnores) -> Finding | None:
    if not comment.codes:
        problems = ["needs codes"]
        message = f"`{comment.text}` needs codes and suppresses nothing: write `# flowtrace: ignore[FT001]` with the codes to silence"
    else:
        unknown = [c for c in comment.codes if c not in codes]
        unused = [
            c
            for c in comment.codes
            if c in codes and c != UNUSED_SUPPRESSION and c not in used and c in enabled and not per_file.ignores(comment.file, c)
        ]
        if not unknown and not unused:
            return None
        parts = []
        if unused:
            parts.append(f"unused suppression for {', '.join(unused)} (no such finding on this line)")
        if unknown:
            parts.append(f"unknown rule code{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} in suppression")
        problems = unused + unknown
        message = "; ".join(parts)
    # Rule.finding builds the record (fingerprint from the file, comment and problems, no line).
    return rule().finding(Location(comment.file, comment.line), message, None, f"{comment.file}|{comment.text}|{','.join(problems)}")


# --------------------------------------------------------------------------- paths and rendering
