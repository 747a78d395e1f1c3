"""``flowtrace check`` / ``rules`` / ``explain``: thin click commands over :mod:`flowtrace.lint.runner`.

Registered on the main group in ``cli.py``; runnable alone with ``python -m flowtrace.cli.check
--write-rules-doc docs/rules.md`` to regenerate the rules reference.

Exit codes: 0 clean, 1 findings at or above ``--fail-on``, 2 usage or internal error (one line
on stderr, never a traceback). stdout holds only the requested format; the summary goes to
stderr.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, TypeVar

import click

from flowtrace.cli.messages import internal_error_line
from flowtrace.cli.options import FINDING_FORMATS, drafts_option, method_option, output_options, scan_options
from flowtrace.cli.ui import emit_output, ui_options

if TYPE_CHECKING:
    from flowtrace.checks.base import Rule
    from flowtrace.lint.runner import CheckOutcome

T = TypeVar("T")

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


def _fail(ctx: click.Context, message: str) -> NoReturn:
    click.echo(message, err=True)
    ctx.exit(EXIT_ERROR)


def _guard(ctx: click.Context, fn: Callable[[], T]) -> T:
    """Run ``fn``; user errors and unexpected exceptions become one line and exit 2."""
    from flowtrace.errors import ProfileError, UsageError

    try:
        return fn()
    except (UsageError, ProfileError) as exc:
        _fail(ctx, f"flowtrace: error: {exc}")
    except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
        raise
    except BrokenPipeError:
        ctx.exit(EXIT_ERROR)
    except KeyboardInterrupt:
        raise  # the group prints "flowtrace: interrupted" and exits 130, as for every command
    except Exception as exc:  # noqa: BLE001 - the contract: exit 2 with one line, not a traceback
        _fail(ctx, internal_error_line(exc))


@click.command("check")
@click.argument("paths", nargs=-1, metavar="[PATH]...")
@click.option(
    "--select",
    multiple=True,
    metavar="CODES",
    help="Enable only these code prefixes (comma-separated, repeatable; replaces [tool.flowtrace] select).",
)
@click.option(
    "--extend-select", multiple=True, metavar="CODES", help="Enable these code prefixes on top of the selection."
)
@click.option("--ignore", multiple=True, metavar="CODES", help="Disable these code prefixes.")
@click.option(
    "--fail-on",
    type=click.Choice(["error", "warning", "info"]),
    default=None,
    help="Exit 1 on findings at or above this severity (default: [tool.flowtrace] fail-on, else warning).",
)
@click.option(
    "--exit-zero", is_flag=True, help="Exit 0 even when there are findings (2 still means the check could not run)."
)
@click.option(
    "--baseline",
    type=click.Path(dir_okay=False),
    help="Accept the findings recorded in this baseline file; report only new ones.",
)
@click.option(
    "--write-baseline",
    type=click.Path(dir_okay=False),
    help="Record every current finding in this baseline file (and accept them).",
)
@click.option(
    "--output-format",
    "--format",
    "output_format",
    type=click.Choice(FINDING_FORMATS),
    default="full",
    show_default=True,
    help="text is full; html writes the report page.",
)
@click.option(
    "-o",
    "--output",
    "--output-file",
    "output",
    type=click.Path(dir_okay=False),
    help="Write the report to FILE (atomically) instead of stdout.",
)
@click.option(
    "--also-write",
    "also_write",
    multiple=True,
    metavar="FORMAT=FILE",
    help=(
        "Also write the findings in FORMAT to FILE, in the same run (repeatable), e.g. --also-write"
        " sarif=flowtrace.sarif."
    ),
)
@click.option("--statistics", is_flag=True, help="Count the findings per rule instead of listing them.")
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False),
    help=(
        "Read settings from this TOML file ([tool.flowtrace], or top-level keys) instead of the nearest pyproject.toml."
    ),
)
@click.option("--isolated", is_flag=True, help="Ignore [tool.flowtrace] configuration.")
@click.option(
    "--show-settings",
    is_flag=True,
    help="Print the settings that apply to PATH (config file, selection, profile) and exit.",
)
@click.option(
    "--fix",
    "apply_fixes",
    is_flag=True,
    help="Write the verified fixes of the fixable findings, then report what is left.",
)
@click.option(
    "--diff",
    "show_diff",
    is_flag=True,
    help=(
        "Print the verified fixes as a unified diff instead of the findings; exit 1 when there is one. Writes nothing."
    ),
)
@drafts_option(config_aware=True)
@scan_options(config_aware=True)
@method_option
@click.pass_context
def check(
    ctx: click.Context,
    paths: tuple[str, ...],
    select: tuple[str, ...],
    extend_select: tuple[str, ...],
    ignore: tuple[str, ...],
    fail_on: str | None,
    exit_zero: bool,
    baseline: str | None,
    write_baseline: str | None,
    output_format: str,
    output: str | None,
    also_write: tuple[str, ...],
    statistics: bool,
    config_file: str | None,
    isolated: bool,
    show_settings: bool,
    apply_fixes: bool,
    show_diff: bool,
    drafts: tuple[str, ...],
    profile: str | None,
    profile_file: tuple[str, ...],
    exclude: tuple[str, ...],
    jobs: int | None,
    no_cache: bool,
    cache_dir: str | None,
    method: str | None,
) -> None:
    """Lint PATH (default: .; several paths are checked as one tree) for capture-wiring problems, for CI.

    \b
    Silence one finding with `# flowtrace: ignore[FT001]` on its line.
    Configure with [tool.flowtrace] in the nearest pyproject.toml (PATH's folder or above).
    """
    from flowtrace.cli.ui import (
        distinct_outputs,
        echo_output,
        refuse_non_python_file,
        several_paths,
        status,
        write_output,
    )
    from flowtrace.lint.runner import CheckOptions, run_check

    def go() -> int:
        path, only = several_paths(paths)
        if show_settings:
            from flowtrace.lint.config import settings_text

            click.echo(settings_text(path, config_file, isolated, profile), nl=False)
            return EXIT_CLEAN
        refuse_non_python_file(path)
        extra = _also_write(also_write)
        reports = (("-o", output), *((f"--also-write {fmt}", target) for fmt, target in extra))
        distinct_outputs(*reports, ("--write-baseline", write_baseline))
        distinct_outputs(("--baseline", baseline), *reports)  # a report must not replace the baseline it reads

        def run() -> CheckOutcome:
            return run_check(path, CheckOptions.of(
                select=select or None,
                extend_select=extend_select,
                ignore=ignore,
                fail_on=fail_on,
                exit_zero=exit_zero,
                baseline=baseline,
                write_baseline=write_baseline,
                profile=profile,
                profile_files=profile_file,
                drafts=drafts,
                exclude=only + tuple(exclude),
                jobs=jobs,
                use_cache=not no_cache,
                cache_dir=cache_dir,
                config=config_file,
                isolated=isolated,
                progress=None,
                method=method,
            ))

        outcome = run()
        if apply_fixes or show_diff:
            from flowtrace.cli.fix import check_fix
            from flowtrace.cli.options import index_options

            cfg = outcome.config  # the same excludes and profiles the check scanned with
            options = index_options(jobs, no_cache, cache_dir, tuple(cfg.exclude) + only + tuple(exclude))
            files = tuple(cfg.profile_files) + tuple(profile_file)
            fixed = check_fix(
                ctx, outcome, show_diff=show_diff, options=options, profile=profile or cfg.profile, profile_files=files
            )
            if fixed is not None:
                return fixed
            outcome = run()  # after --fix: report what is left, as before
        if statistics:
            from flowtrace.cli.ui import statistics_text

            text = statistics_text(outcome.findings)
        else:
            text = _render(outcome, output_format)
        if output:
            write_output(output, text)
            status(f"flowtrace: wrote {output}")
        elif text:
            echo_output(text)
        for fmt, target in extra:
            write_output(target, _render(outcome, fmt))
            status(f"flowtrace: wrote {target}")
        if outcome.baseline_written is not None:
            status(f"flowtrace: wrote baseline {outcome.baseline_written} ({outcome.suppressed_baseline} findings)")
        status(outcome.summary())
        return outcome.exit_code

    code = _guard(ctx, go)
    ctx.exit(code)


def _also_write(values: tuple[str, ...]) -> list[tuple[str, str]]:
    """``FORMAT=FILE`` pairs, checked before the scan runs (a typo costs no scan)."""
    from flowtrace.errors import UsageError

    pairs = []
    for value in values:
        fmt, sep, target = value.partition("=")
        if not sep or not target or fmt not in FINDING_FORMATS:
            raise UsageError(
                f"--also-write {value!r}: expected FORMAT=FILE with FORMAT one of {', '.join(FINDING_FORMATS)}"
            )
        pairs.append((fmt, target))
    return pairs


def _render(outcome: CheckOutcome, fmt: str) -> str:
    """The findings in one of the format names scan and check share (text is full)."""
    if fmt == "html":
        from flowtrace.cli.ui import html_report

        return html_report(outcome.result, list(outcome.findings), None)
    from flowtrace.render.check_output import render_check

    return render_check(outcome, "full" if fmt == "text" else fmt, cwd=Path.cwd())


def _rule_json(r: type[Rule]) -> dict[str, str]:
    from flowtrace.render.rules_doc import help_uri

    return {
        "code": r.code,
        "name": r.name,
        "severity": r.severity,
        "summary": r.summary,
        "rationale": r.rationale,
        "fix": r.fix,
        "url": help_uri(r.code),
    }


@click.command("rules")
@output_options(
    ("text", "json"), "text", help="json: a list of the rules (code, name, severity, summary, rationale, fix, url)."
)
@ui_options
@click.pass_context
def rules(ctx: click.Context, fmt: str, output: str | None) -> None:
    """List every rule: code, name, severity, summary."""
    from flowtrace.render.rules_doc import registered_rules

    def go() -> None:
        listed = registered_rules()
        if fmt == "json":
            emit_output(json.dumps([_rule_json(r) for r in listed], indent=2, ensure_ascii=False) + "\n", output)
            return
        width = max((len(r.name) for r in listed), default=4)
        emit_output(
            "".join(f"{r.code}  {r.name.ljust(width)}  {r.severity.ljust(7)}  {r.summary}\n" for r in listed), output
        )

    _guard(ctx, go)


@click.command("explain")
@click.argument("code")
@output_options(("text", "json"), "text", help="json: the rule's metadata (as `rules --format json` lists it).")
@ui_options
@click.pass_context
def explain(ctx: click.Context, code: str, fmt: str, output: str | None) -> None:
    """Explain one rule: summary, rationale, fix, valid and invalid examples (for example FT003)."""
    from flowtrace.checks.base import Rule
    from flowtrace.render.rules_doc import registered_rules, rule_text

    def go() -> None:
        listed = registered_rules()
        wanted = code.strip().upper()
        if wanted not in Rule.registry:
            _fail(
                ctx, f"flowtrace: error: unknown rule code {code!r} (valid codes: {', '.join(r.code for r in listed)})"
            )
        rule = Rule.registry[wanted]
        emit_output(
            json.dumps(_rule_json(rule), indent=2, ensure_ascii=False) + "\n" if fmt == "json" else rule_text(rule),
            output,
        )

    _guard(ctx, go)


@click.command("rules-doc", hidden=True)
@click.option(
    "--write-rules-doc",
    "target",
    type=click.Path(dir_okay=False),
    required=True,
    help="Write the rules reference (Markdown) to FILE.",
)
@click.option("--check", "check_only", is_flag=True, help="Exit 1 if FILE is not up to date instead of writing it.")
@click.pass_context
def rules_doc(ctx: click.Context, target: str, check_only: bool) -> None:
    """Regenerate docs/rules.md from the rule metadata."""
    from flowtrace.render.rules_doc import rules_markdown

    def go() -> int:
        text = rules_markdown()
        path = Path(target)
        if check_only:
            current = path.read_text(encoding="utf-8") if path.is_file() else None
            if current != text:
                click.echo(
                    f"flowtrace: {target} is stale; run python -m flowtrace.cli.check --write-rules-doc {target}",
                    err=True,
                )
                return EXIT_FINDINGS
            return EXIT_CLEAN
        from flowtrace.sources.output import write_atomic

        write_atomic(path, text)
        click.echo(f"flowtrace: wrote {target}", err=True)
        return EXIT_CLEAN

    ctx.exit(_guard(ctx, go))


if __name__ == "__main__":  # pragma: no cover
    rules_doc(prog_name="python -m flowtrace.cli.check")
