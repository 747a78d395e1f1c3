"""Options shared by the commands: the scan options (scan, trace, compat, graph, check, diff,
fix) and the output options every command that writes output takes, spelled one way."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, overload

import click

from flowtrace.cli.ui import Command

if TYPE_CHECKING:
    from flowtrace.index.build import IndexOptions


@overload
def scan_options(f: Command, *, config_aware: bool = False) -> Command: ...
@overload
def scan_options(f: None = None, *, config_aware: bool = False) -> Callable[[Command], Command]: ...
def scan_options(
    f: Command | None = None, *, config_aware: bool = False
) -> Command | Callable[[Command], Command]:
    """Add --profile, --profile-file, --exclude, --jobs, --no-cache and --cache-dir to a command.

    ``config_aware`` words the help for commands that also read ``[tool.flowtrace]``.
    """

    def decorate(f: Command) -> Command:
        profile_help = (
            "Force an engine profile (default: [tool.flowtrace] profile, else detected)."
            if config_aware
            else "Force an engine profile (default: detected from the tree)."
        )
        exclude_help = "Skip paths matching this gitignore-style pattern (repeatable" + (
            "; added to [tool.flowtrace] exclude)." if config_aware else ")."
        )
        f = click.option("--profile", help=profile_help)(f)
        file_help = (
            "Add an engine profile from this TOML file (repeatable; merged with the bundled profiles, replacing one of"
            " the same name; see docs/profiles.md)"
            + ("; added to [tool.flowtrace] profile-files." if config_aware else ".")
        )
        f = click.option(
            "--profile-file",
            "profile_file",
            multiple=True,
            type=click.Path(dir_okay=False),
            metavar="PATH",
            help=file_help,
        )(f)
        f = click.option("--exclude", multiple=True, metavar="PATTERN", help=exclude_help)(f)
        f = click.option(
            "--jobs",
            "-j",
            type=click.IntRange(min=1),
            default=None,
            help="Parser processes (default: one per core; 1 = serial).",
        )(f)
        f = click.option("--no-cache", is_flag=True, help="Do not read or write the fact cache.")(f)
        f = click.option(
            "--cache-dir",
            type=click.Path(file_okay=False),
            default=None,
            help=(
                "Fact cache folder (default: .flowtrace_cache in the scanned folder, written at the end of a scan of"
                " engine code, never when the command refuses; $XDG_CACHE_HOME/flowtrace/... when the folder is"
                " read-only)."
            ),
        )(f)
        from flowtrace.cli.ui import ui_options

        return ui_options(f)

    return decorate(f) if f is not None else decorate


@overload
def drafts_option(f: Command, *, config_aware: bool = False) -> Command: ...
@overload
def drafts_option(f: None = None, *, config_aware: bool = False) -> Callable[[Command], Command]: ...
def drafts_option(
    f: Command | None = None, *, config_aware: bool = False
) -> Command | Callable[[Command], Command]:
    """Add --drafts FILE: the user's own draft catalogue files (docs/drafts.md)."""

    def decorate(f: Command) -> Command:
        help_text = (
            "Add the published drafts of this TOML file to the draft catalogue the findings are graded against "
            "(repeatable; an entry replaces a shipped one of the same name; see docs/drafts.md)"
        ) + ("; added to [tool.flowtrace] drafts." if config_aware else ".")
        return click.option(
            "--drafts", "drafts", multiple=True, type=click.Path(dir_okay=False), metavar="FILE", help=help_text
        )(f)

    return decorate(f) if f is not None else decorate


def output_options(
    formats: tuple[str, ...],
    default: str,
    *,
    help: str | None = None,
    output_help: str = "Write to FILE instead of stdout.",
    output_default: str | None = None,
) -> Callable[[Command], Command]:
    """``--format``/``--output-format`` (the value is ``fmt``) and ``-o``/``--output``/
    ``--output-file`` (``output``): the one spelling of both on every command that writes
    output (tests/test_cli_options.py walks the command tree for them)."""

    def decorate(f: Command) -> Command:
        f = click.option(
            "-o", "--output", "--output-file", "output", type=click.Path(dir_okay=False), default=output_default,
            show_default=output_default is not None, metavar="FILE", help=output_help,
        )(f)
        return click.option(
            "--format",
            "--output-format",
            "fmt",
            type=click.Choice(formats),
            default=default,
            show_default=True,
            help=help,
        )(f)

    return decorate


def method_option(f: Command) -> Command:
    """Add --method NAME: the speculative method to answer for (a profile's [methods.<name>])."""
    return click.option(
        "--method", "method", metavar="NAME", default=None,
        help=(
            "Answer for this speculative method: a [methods.<name>] of the engine profile, by name or label "
            "(default: the profile's default method; scan and check: 'all' for every method, one matrix line "
            "per method a class serves and every method's findings; docs/profiles.md)."
        ),
    )(f)


# The format names every command that reports findings accepts (scan and check alike).
FINDING_FORMATS = ("text", "full", "concise", "json", "json-lines", "sarif", "github", "html")


def index_options(
    jobs: int | None,
    no_cache: bool,
    cache_dir: str | None,
    exclude: tuple[str, ...],
    progress: bool | None = None,
) -> IndexOptions:
    """The IndexOptions those flags mean."""
    from flowtrace.index.build import IndexOptions

    return IndexOptions(
        jobs=jobs,
        use_cache=not no_cache,
        cache_dir=Path(cache_dir) if cache_dir else None,
        excludes=tuple(exclude),
        progress=progress,
    )
