"""What every command shares with ruff's and Semgrep's command lines: ``-q``/``-v``,
``--color``, writing ``-o`` files with a one-line error, and status lines on stderr.

The options store their values in the click context (``expose_value=False``), so a command
adds them with one decorator and reads them with :func:`settings`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import click

from flowtrace.errors import UsageError

if TYPE_CHECKING:
    from flowtrace.analysis.scan import ScanResult
    from flowtrace.checks.base import Finding
    from flowtrace.engines.profiles import Profile

# A click command function (or command) an option decorator hands back as it received it.
Command = TypeVar("Command", bound=Callable[..., object])

_KEY = "flowtrace.ui"


@dataclass(slots=True)
class UI:
    quiet: bool = False
    verbose: bool = False
    color: str = "auto"


def settings() -> UI:
    """The current command's -q / -v / --color (defaults outside a click context)."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return UI()
    ui: UI = ctx.find_root().meta.setdefault(_KEY, UI())
    return ui


def _store(name: str) -> Callable[[click.Context, click.Parameter, object], object]:
    def callback(ctx: click.Context, _param: click.Parameter, value: object) -> object:
        if value is not None:
            setattr(ctx.find_root().meta.setdefault(_KEY, UI()), name, value)
        return value

    return callback


def ui_options(f: Command) -> Command:
    """-q/--quiet, -v/--verbose, --color auto|always|never."""
    f = click.option(
        "--color",
        type=click.Choice(["auto", "always", "never"]),
        default="auto",
        show_default=True,
        expose_value=False,
        callback=_store("color"),
        help="Colour the text output (auto: only on a terminal).",
    )(f)
    f = click.option(
        "-v",
        "--verbose",
        is_flag=True,
        default=None,
        expose_value=False,
        callback=_store("verbose"),
        help="Say which settings were applied (config file, profiles).",
    )(f)
    f = click.option(
        "-q",
        "--quiet",
        is_flag=True,
        default=None,
        expose_value=False,
        callback=_store("quiet"),
        help="Print only the requested output and errors (no summary or status lines).",
    )(f)
    return f


def status(message: str) -> None:
    """A status line on stderr (``flowtrace: ...``), unless --quiet."""
    if not settings().quiet:
        click.echo(message, err=True)


def verbose(message: str) -> None:
    """A line only --verbose prints."""
    ui = settings()
    if ui.verbose and not ui.quiet:
        click.echo(f"flowtrace: {message}", err=True)


_SEVERITY = re.compile(r"\[(error|warning|info)\]|^(MATCH|MISMATCH)\b", re.M)
_COLOURS = {"error": "red", "warning": "yellow", "info": "blue", "MATCH": "green", "MISMATCH": "red"}


def paint(text: str) -> str:
    """Severities and verdicts in colour, unless --color never."""
    if settings().color == "never":
        return text

    def one(m: re.Match[str]) -> str:
        word = m.group(1) or m.group(2)
        styled = click.style(word, fg=_COLOURS[word], bold=True)
        return f"[{styled}]" if m.group(1) else styled

    return _SEVERITY.sub(one, text)


def echo_output(text: str) -> None:
    """The requested output on stdout: coloured on a terminal (or with --color always)."""
    mode = settings().color
    click.echo(paint(text), nl=False, color=True if mode == "always" else None)


def write_output(path: str, text: str) -> None:
    """Write an ``-o`` file atomically; an unwritable place is one line and exit 2."""
    from flowtrace.sources.output import write_atomic

    try:
        write_atomic(path, text)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


def emit_output(text: str, output: str | None) -> None:
    """The requested output to ``-o FILE`` (with a ``wrote`` status line) or stdout."""
    if output:
        write_output(output, text)
        status(f"flowtrace: wrote {output}")
    else:
        echo_output(text)


def distinct_outputs(*named: tuple[str, str | None]) -> None:
    """Refuse one file named for two outputs (``-o F --html F``): one would silently overwrite
    the other. ``named`` pairs an option's name with the file it names (None: not given)."""
    from pathlib import Path

    seen: dict[Path, str] = {}
    for option, target in named:
        if not target or target == "-":
            continue
        key = Path(target).expanduser().resolve()
        if key in seen:
            raise UsageError(f"{target} is named for two outputs ({seen[key]} and {option}): give each its own file")
        seen[key] = option


def refuse_non_python_file(path: str) -> None:
    """A file that is not Python (README.md) has no engine code: the same error for every command."""
    from pathlib import Path

    p = Path(path)
    if not path.startswith("pypi:") and p.is_file() and p.suffix not in (".py", ".pyi"):
        raise UsageError(
            f"no Python engine code in {path}: not a Python file (give an engine checkout, a .py file or"
            " pypi:NAME==VERSION)"
        )


def statistics_text(findings: Iterable[Finding]) -> str:
    """ruff's --statistics: one line per rule with findings, most frequent first, with its
    findings counted by severity (a rule's findings differ in severity only through their
    consequences, so one rule can count errors, warnings and notes)."""
    from collections import Counter

    from flowtrace.checks.base import SEVERITIES

    totals = Counter((f.rule, f.name) for f in findings)
    by_severity = Counter((f.rule, f.severity) for f in findings)
    rows = sorted(totals.items(), key=lambda item: (-item[1], item[0][0]))
    order = SEVERITIES[::-1]  # error first

    def split(rule: str) -> str:
        return ", ".join(f"{by_severity[rule, s]} {s}" for s in order if by_severity[rule, s])

    return "".join(f"{n:>5}  {rule}  {name}  [{split(rule)}]\n" for (rule, name), n in rows)


def html_report(result: ScanResult, findings: list[Finding], link_base: str | None) -> str:
    """The report, its source links on the web when the tree's origin is known: ``--link-base``,
    else the git remote at the checked-out commit, else the release's project URL."""
    from flowtrace.render.html import render_html
    from flowtrace.render.report_data import report_document
    from flowtrace.sources.weblinks import infer_link_base

    origin = None
    if not link_base:
        inferred = infer_link_base(result.root, repository_subdir(result.profiles))
        if inferred is not None:
            link_base, origin = inferred.url, inferred.origin
    return render_html(report_document(result, findings), link_base=link_base, link_origin=origin)


def repository_subdir(profiles: Iterable[Profile]) -> str:
    """The package's folder in its repository (``[source] repository_subdir``) when every
    applied profile says the same; "" otherwise (a tree scanned with several engines' profiles
    must not borrow one engine's layout)."""
    values = {p.repository_subdir for p in profiles}
    return values.pop() if len(values) == 1 else ""


def repository_subdir_of(names: object) -> str:
    """:func:`repository_subdir` of the bundled profiles a saved scan document names."""
    from flowtrace.engines.profiles import available_profiles, load_profile
    from flowtrace.errors import ProfileError

    if not isinstance(names, list) or not names:
        return ""
    try:
        files = available_profiles()
        if not all(isinstance(n, str) and n in files for n in names):
            return ""  # a user's own profile (not bundled): its layout is unknown here
        return repository_subdir([load_profile(files[n]) for n in names])
    except ProfileError:
        return ""


def several_paths(paths: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """(root, exclude patterns) that scan exactly the given paths, as ruff's ``check a b``.

    The analysis is cross-file, so one tree is scanned: the paths' deepest common folder,
    with gitignore-style patterns that leave out everything but the given paths (each level:
    exclude the folder's entries, re-include the ones on the way to a given path). No path or
    one path is scanned as it is (default ``.``).
    """
    import os
    from pathlib import Path

    if len(paths) <= 1:
        return (paths[0] if paths else "."), ()
    if any(p.startswith("pypi:") for p in paths):
        raise UsageError("a pypi: source is scanned on its own: give it as the only PATH")
    for p in paths:
        if not Path(p).exists():
            raise UsageError(f"{p}: no such file or directory")
        refuse_non_python_file(p)
    resolved = [Path(p).resolve() for p in paths]
    root = Path(os.path.commonpath(resolved))
    if root in resolved:
        return str(root), ()  # one path holds all the others
    rels = sorted({r.relative_to(root).parts for r in resolved})
    children: dict[tuple[str, ...], set[tuple[tuple[str, ...], bool]]] = {}
    for parts in rels:
        for k in range(len(parts)):
            is_dir = k < len(parts) - 1 or (root.joinpath(*parts)).is_dir()
            children.setdefault(parts[:k], set()).add((parts[: k + 1], is_dir))

    def pattern(parts: tuple[str, ...]) -> str:
        return "/" + "/".join(re.sub(r"([*?\[\]!#\\ ])", r"\\\1", part) for part in parts)

    patterns: list[str] = []
    for folder in sorted(children, key=lambda parts: (len(parts), parts)):
        patterns.append((pattern(folder) if folder else "") + "/*")
        patterns += ["!" + pattern(child) + ("/" if is_dir else "") for child, is_dir in sorted(children[folder])]
    return str(root), tuple(patterns)
