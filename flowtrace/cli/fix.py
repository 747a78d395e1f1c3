"""``flowtrace fix`` and the fix flags of ``check`` and ``compat``: thin click glue over
:mod:`flowtrace.fix` (which alone imports libcst, and only when one of these runs).

``fix PATH`` lists what it would patch and what it withholds (and why); ``--diff`` prints one
unified diff (exit 1 when there is one, ruff's contract); ``--write`` writes the verified
patches, each only if the file still reads as it did (exit 2 when a write is refused).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from flowtrace.cli.options import output_options, scan_options
from flowtrace.cli.ui import emit_output

if TYPE_CHECKING:
    from flowtrace.analysis.scan import ScanResult
    from flowtrace.fix.model import FixReport
    from flowtrace.fix.write import WriteResult
    from flowtrace.index.build import IndexOptions
    from flowtrace.lint.runner import CheckOutcome


def report_lines(report: FixReport) -> list[str]:
    """One line per offered patch (with its evidence) and per withheld finding (with why)."""
    out = []
    for v in report.offered:
        p = v.proposal
        out.append(f"{p.file}:{p.line}: {p.rule} fix: {p.title}")
        out += [f"    verified: {e}" for e in v.evidence]
    for w in report.withheld:
        out.append(f"{w.file}:{w.line}: {w.rule} no fix offered: {w.why}")
    return out


def summary(report: FixReport) -> str:
    return (
        f"flowtrace: {len(report.offered)} fix(es) verified, {len(report.withheld)} withheld,"
        f" {report.not_fixable} finding(s) without a codemod"
    )


def write_report(root: Path, report: FixReport, *, echo: bool = True) -> tuple[list[WriteResult], int]:
    """Write the offered edits: (the write results, 0 when all were written, 2 when any was refused)."""
    from flowtrace.fix.write import write_edits

    results = write_edits(root, report.edits())
    if echo:
        for r in results:
            if r.written:
                _status(f"flowtrace: fixed {r.path}")
            else:
                click.echo(f"flowtrace: not written {r.path}: {r.why}", err=True)
    return results, 0 if all(r.written for r in results) else 2


def emit_diff(report: FixReport, label: str = "", output: str | None = None) -> int:
    """The verified patches as one unified diff (to ``output`` when given); 1 when there is one."""
    from flowtrace.fix.run import unified_diff

    text = unified_diff(report, label)
    if output:
        emit_output(text, output)
    elif text:
        click.echo(text, nl=False)
    return 1 if text else 0


@click.command("fix")
@click.argument("path")
@click.option(
    "--select",
    multiple=True,
    metavar="CODES",
    help="Fix only findings of these code prefixes (comma-separated, repeatable; replaces [tool.flowtrace] select).",
)
@click.option("--extend-select", multiple=True, metavar="CODES", help="Add these code prefixes to the selection.")
@click.option("--ignore", multiple=True, metavar="CODES", help="Leave findings of these code prefixes alone.")
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False),
    help="Read settings from this TOML file instead of the nearest pyproject.toml (as check does).",
)
@click.option("--isolated", is_flag=True, help="Ignore [tool.flowtrace] configuration.")
@click.option(
    "--diff",
    "show_diff",
    is_flag=True,
    help="Print the verified patches as one unified diff; exit 1 when there is one. Writes nothing.",
)
@click.option("--write", "write", is_flag=True, help="Write the verified patches into the tree.")
@output_options(
    ("text", "json"),
    "text",
    help="json: one flowtrace.fix/1 document (per finding: verified or refused and why, what was written).",
    output_help="Write the listing, the diff (--diff) or the JSON document to FILE instead of stdout.",
)
@scan_options(config_aware=True)
def fix(
    path: str,
    select: tuple[str, ...],
    extend_select: tuple[str, ...],
    ignore: tuple[str, ...],
    config_file: str | None,
    isolated: bool,
    show_diff: bool,
    write: bool,
    fmt: str,
    output: str | None,
    profile: str | None,
    profile_file: tuple[str, ...],
    exclude: tuple[str, ...],
    jobs: int | None,
    no_cache: bool,
    cache_dir: str | None,
) -> None:
    """Patch the fixable findings of PATH: each patch is verified by re-running the analysis on
    the patched tree (finding gone, nothing new, the trace serving the promised boundaries).

    \b
    The findings are the ones `flowtrace check PATH` reports: [tool.flowtrace] selection,
    per-file-ignores and `# flowtrace: ignore[...]` comments apply, so a suppressed finding is
    never patched. Without --diff or --write it only lists what it would do.
    """
    from flowtrace.fix.document import fix_document

    if show_diff and write:
        raise click.UsageError("--diff and --write exclude each other")
    if show_diff and fmt == "json":
        raise click.UsageError("--diff prints a diff; --format json carries each patch's diff already")
    outcome, report = _fix_run(
        path,
        select,
        extend_select,
        ignore,
        config_file,
        isolated,
        profile,
        profile_file,
        exclude,
        jobs,
        no_cache,
        cache_dir,
    )
    lines = report_lines(report)
    written: Sequence[WriteResult] | None = None
    if show_diff:
        _status("\n".join(lines))
        code = emit_diff(report, output=output)
    elif write:
        if fmt == "text":
            _status("\n".join(lines))
        written, code = write_report(outcome.result.root, report, echo=fmt == "text") if report.offered else ((), 0)
    else:
        if fmt == "text":
            emit_output("\n".join(lines) + ("\n" if lines else ""), output)
        code = 1 if report.offered else 0
    if fmt == "json":
        emit_output(
            json.dumps(fix_document(report, mode="write" if write else "list", written=written), indent=2) + "\n",
            output,
        )
    _status(summary(report))
    sys.exit(code)


def _status(text: str) -> None:
    """What the command did, on stderr, unless -q (errors and refusals are never quiet)."""
    from flowtrace.cli.ui import status

    if text:
        status(text)


def _fix_run(
    path: str,
    select: tuple[str, ...],
    extend_select: tuple[str, ...],
    ignore: tuple[str, ...],
    config_file: str | None,
    isolated: bool,
    profile: str | None,
    profile_file: tuple[str, ...],
    exclude: tuple[str, ...],
    jobs: int | None,
    no_cache: bool,
    cache_dir: str | None,
) -> tuple[CheckOutcome, FixReport]:
    """The findings `check` would report for PATH (config, suppressions and all), then a fix
    report on them, scanned with the same excludes and profiles the check used."""
    from flowtrace.cli.options import index_options
    from flowtrace.fix.run import fix_findings
    from flowtrace.fix.selection import suppressed_by
    from flowtrace.lint.runner import CheckOptions, run_check

    def codes(values: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(c.strip() for v in values for c in v.split(",") if c.strip())

    outcome = run_check(path, CheckOptions.of(
        select=codes(select) or None, extend_select=codes(extend_select), ignore=codes(ignore), exit_zero=True,
        profile=profile, profile_files=profile_file, exclude=tuple(exclude), jobs=jobs, use_cache=not no_cache,
        cache_dir=cache_dir, config=config_file, isolated=isolated, progress=None,
    ))
    cfg = outcome.config
    options = index_options(jobs, no_cache, cache_dir, tuple(cfg.exclude) + tuple(exclude))
    files = tuple(cfg.profile_files) + tuple(profile_file)
    report = fix_findings(
        outcome.result,
        list(outcome.findings),
        profile=profile or cfg.profile,
        options=options,
        profile_files=files,
        suppressed=suppressed_by(outcome),
    )
    return outcome, report


def check_fix(
    ctx: click.Context,
    outcome: CheckOutcome,
    *,
    show_diff: bool,
    options: IndexOptions,
    profile: str | None,
    profile_files: tuple[str | Path, ...],
) -> int | None:
    """``check --fix`` / ``check --diff`` on the reported findings (after suppressions and
    baseline). --diff: the diff only, exit 1 when there is one. --fix: write, then None
    (the caller re-runs the check and reports what is left, as before)."""
    from flowtrace.fix.run import fix_findings
    from flowtrace.fix.selection import suppressed_by

    report = fix_findings(
        outcome.result,
        list(outcome.findings),
        profile=profile,
        options=options,
        profile_files=profile_files,
        suppressed=suppressed_by(outcome),
    )
    if show_diff:
        _status(summary(report))
        return emit_diff(report)
    if report.offered:
        _, code = write_report(outcome.result.root, report)
        if code:
            return code
    _status(summary(report))
    return None


def compat_fix(
    result: ScanResult,
    target_config: str,
    draft_config: str,
    trained_with: str | None,
    trained_boundaries: str | None,
    show_diff: bool,
    output: str | None = None,
) -> int:
    """``compat --fix``: rewrite the draft config (or, with --diff, show the rewrite, to
    ``output`` when given); what it did goes to stderr."""
    from flowtrace.analysis.compat import parse_boundaries
    from flowtrace.fix.draft_config import fix_draft_config
    from flowtrace.fix.model import FixReport, Proposal, Verified

    from flowtrace.sources.configs import ConfigError
    from flowtrace.errors import UsageError

    try:
        given = parse_boundaries(trained_boundaries) if trained_boundaries else None
        planned = fix_draft_config(
            result, target_config, draft_config, trained_with=trained_with, trained_boundaries=given
        )
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    why = planned.why
    if planned.rejected is not None:  # the rewrite compat refused: its differences, in words
        from flowtrace.render.compat_words import differences_text

        why += ": " + "; ".join(differences_text(planned.rejected))
    if planned.edit is None:  # why nothing is offered: always said
        click.echo(f"flowtrace: {planned.path}: {why}", err=True)
        return 0 if planned.matches else 1
    _status(f"flowtrace: {planned.path}: {why}")
    proposal = Proposal("compat", "", None, str(planned.path), 1, planned.why, (planned.edit,))
    report = FixReport((Verified(proposal, ()),), (), 0)
    if show_diff:
        return emit_diff(report, output=output)
    from flowtrace.fix.write import write_edits

    results = write_edits(planned.path.parent, (planned.edit,))
    for r in results:
        if r.written:
            _status(f"flowtrace: rewrote {planned.path}")
        else:
            click.echo(f"flowtrace: not written {planned.path}: {r.why}", err=True)
    return 0 if all(r.written for r in results) else 2
