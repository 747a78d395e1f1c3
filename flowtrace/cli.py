"""The ``flowtrace`` command line: a thin click layer over :mod:`flowtrace.api`.

Commands parse options, call one API function and render its result. Summaries go to
stderr so stdout holds only the requested format. User mistakes are one line and exit 2,
never a traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from flowtrace import __version__

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


class FlowtraceGroup(click.Group):
    """Turns known user errors into one line and exit code 2."""

    def invoke(self, ctx: click.Context):
        from flowtrace.api import UsageError
        from flowtrace.profiles import ProfileError

        try:
            return super().invoke(ctx)
        except (UsageError, ProfileError) as exc:
            click.echo(f"flowtrace: error: {exc}", err=True)
            ctx.exit(EXIT_ERROR)
        except BrokenPipeError:
            ctx.exit(EXIT_ERROR)


def emit(text: str, output: str | None) -> None:
    if output:
        from flowtrace.render.output import write_atomic

        write_atomic(output, text)
    else:
        click.echo(text, nl=False)


def index_options(jobs, no_cache, cache_dir, exclude, progress=None):
    from flowtrace.index.build import IndexOptions

    return IndexOptions(jobs=jobs, use_cache=not no_cache, cache_dir=Path(cache_dir) if cache_dir else None, excludes=tuple(exclude), progress=progress)


def scan_options(f):
    """Options every command that scans a tree shares."""
    f = click.option("--profile", help="Force an engine profile (default: detected from the tree).")(f)
    f = click.option("--exclude", multiple=True, metavar="PATTERN", help="Skip paths matching this gitignore-style pattern (repeatable).")(f)
    f = click.option("--jobs", "-j", type=click.IntRange(min=1), default=None, help="Parser processes (default: one per core; 1 = serial).")(f)
    f = click.option("--no-cache", is_flag=True, help="Do not read or write the fact cache.")(f)
    f = click.option("--cache-dir", type=click.Path(file_okay=False), default=None, help="Fact cache folder (default: .flowtrace_cache in the root).")(f)
    return f


@click.group(cls=FlowtraceGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="flowtrace")
def main() -> None:
    """Trace EAGLE-3 auxiliary hidden states through LLM inference engines.

    \b
    Start with:   flowtrace scan PATH              model matrix + findings
    In CI:        flowtrace check PATH --output-format sarif -o flowtrace.sarif
    For a draft:  flowtrace compat PATH --target-config T/config.json --draft-config D/config.json

    PATH is an engine checkout, an unpacked wheel, or pypi:NAME==VERSION.
    """


@main.command()
@click.argument("path")
@scan_options
@click.option("--format", "fmt", type=click.Choice(["text", "json", "html"]), default="text", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write to FILE instead of stdout.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False), help="Also write the HTML report to FILE.")
@click.option("--link-base", help="Source links in the HTML report: URL prefix (e.g. a blob URL at a commit) instead of vscode://.")
def scan(path, profile, exclude, jobs, no_cache, cache_dir, fmt, output, html_path, link_base):
    """Scan PATH: the model matrix (capture support, id transform, capture point, file:line) and findings."""
    from flowtrace import api
    from flowtrace.render import text as text_render

    result = api.scan(path, profile=profile, options=index_options(jobs, no_cache, cache_dir, exclude))
    findings = api.findings(result)
    if fmt == "json":
        from flowtrace.render.scan_json import dumps, scan_document

        emit(dumps(scan_document(result, findings)), output)
    elif fmt == "html":
        emit(api.html_report(result, findings, link_base=link_base), output)
    else:
        emit(text_render.scan_text(result, findings), output)
    if html_path:
        from flowtrace.render.output import write_atomic

        write_atomic(html_path, api.html_report(result, findings, link_base=link_base))
        click.echo(f"flowtrace: wrote {html_path}", err=True)
    click.echo(text_render.summary_line(result, findings), err=True)


def _register_optional_commands() -> None:
    """Commands living in their own modules (probe needs torch only when it runs)."""
    try:
        from flowtrace.probe.cli import probe
    except Exception:  # noqa: BLE001 - a broken optional part must not break scan
        return
    main.add_command(probe)


_register_optional_commands()

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
