"""The ``flowtrace`` command line: a thin click layer over :mod:`flowtrace.api`.

Commands parse options, call one API function and render its result. Summaries go to
stderr so stdout holds only the requested format. User mistakes are one line and exit 2,
never a traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from flowtrace import DISTRIBUTION, __version__
from flowtrace.cli.messages import error_line, internal_error_line
from flowtrace.cli.options import (
    FINDING_FORMATS,
    drafts_option,
    index_options,
    method_option,
    output_options,
    scan_options,
)
from flowtrace.cli.ui import ui_options

if TYPE_CHECKING:
    from flowtrace.analysis.scan import ScanResult
    from flowtrace.index.build import IndexOptions
    from flowtrace.lint.runner import CheckOutcome
    from flowtrace.render.scan_json import Keep

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it


class FlowtraceGroup(click.Group):
    """Turns known user errors into one line and exit code 2."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,  # click's own: handed to the context
    ) -> Any:  # click's own: what the command returned (non-standalone), else it exits
        """Click's own errors (bad option, bad value) in the same one-line shape, exit 2.

        Click would print a usage block and ``Error: ...``; scripts and people grep for
        ``flowtrace: error:``, so every error, click's included, starts with it.
        """
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, False, **extra)
        except click.ClickException as exc:
            hint = ""
            if isinstance(exc, click.UsageError) and exc.ctx is not None:
                hint = f" (see '{exc.ctx.command_path} --help')"
            click.echo(error_line(exc.format_message()) + hint, err=True)
            sys.exit(EXIT_ERROR)
        except (click.exceptions.Abort, KeyboardInterrupt):  # click turns Ctrl-C into Abort
            click.echo("flowtrace: interrupted", err=True)
            sys.exit(EXIT_INTERRUPTED)
        sys.exit(rv if isinstance(rv, int) else EXIT_CLEAN)

    def invoke(self, ctx: click.Context) -> Any:  # click's own: the command's return value
        from flowtrace.errors import ProfileError, UsageError

        try:
            return super().invoke(ctx)
        except (UsageError, ProfileError) as exc:
            click.echo(error_line(str(exc)), err=True)
            ctx.exit(EXIT_ERROR)
        except BrokenPipeError:
            ctx.exit(EXIT_ERROR)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 - the contract: exit 2 with one line, never a traceback
            click.echo(internal_error_line(exc), err=True)
            ctx.exit(EXIT_ERROR)


def emit(text: str, output: str | None) -> None:
    """The requested output to ``-o FILE`` (one-line error when unwritable) or stdout."""
    from flowtrace.cli.ui import echo_output, write_output

    if output:
        write_output(output, text)
    else:
        echo_output(text)


@click.group(cls=FlowtraceGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="flowtrace", message=f"%(prog)s ({DISTRIBUTION} %(version)s)")
def main() -> None:
    """Trace EAGLE-3 auxiliary hidden states through LLM inference engines.

    \b
    Start with:   flowtrace scan PATH              model matrix + findings
    In CI:        flowtrace check PATH --output-format sarif -o flowtrace.sarif
    For a draft:  flowtrace compat PATH --target-config T/config.json --draft-config D/config.json

    PATH is an engine checkout, an unpacked wheel, or pypi:NAME==VERSION.
    """


@main.command()
@click.argument("paths", nargs=-1, metavar="[PATH]...")
@drafts_option(config_aware=True)
@scan_options(config_aware=True)
@method_option
@output_options(
    FINDING_FORMATS,
    "text",
    help=(
        "text: matrix and findings; full/concise/json-lines/sarif/github: the findings as `check` writes them; json:"
        " the scan document; html: the report."
    ),
)
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False),
    help=(
        "Also write the HTML report to FILE (then the text output is the findings and the report's path; --matrix adds"
        " the matrix)."
    ),
)
@click.option(
    "--matrix/--no-matrix",
    "matrix",
    default=None,
    help="Print the model matrix in the text output (default: yes, unless --html writes it to the report).",
)
@click.option("--statistics", is_flag=True, help="Count the findings per rule instead of listing them.")
@click.option(
    "--link-base",
    help=(
        "Source links in the HTML report: URL prefix (e.g. a blob URL at a commit); default: inferred from the git"
        " remote or the release's project URL, else vscode://."
    ),
)
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
def scan(
    paths: tuple[str, ...],
    drafts: tuple[str, ...],
    profile: str | None,
    profile_file: tuple[str, ...],
    exclude: tuple[str, ...],
    jobs: int | None,
    no_cache: bool,
    cache_dir: str | None,
    method: str | None,
    fmt: str,
    output: str | None,
    html_path: str | None,
    matrix: bool | None,
    statistics: bool,
    link_base: str | None,
    config_file: str | None,
    isolated: bool,
    show_settings: bool,
) -> None:
    """Scan PATH (default: .; several paths are scanned as one tree): the model matrix (capture support, id transform,
    capture point, file:line) and findings.

    The findings are those `flowtrace check` reports: [tool.flowtrace] (select, ignore,
    per-file-ignores, exclude, profile) and inline suppressions apply; baselines and
    fail-on do not, scan always exits 0 when it ran.
    """
    from flowtrace.cli.ui import (
        distinct_outputs,
        emit_output,
        html_report,
        refuse_non_python_file,
        several_paths,
        status,
    )
    from flowtrace.lint.runner import CheckOptions, run_check
    from flowtrace.render import text as text_render

    path, only = several_paths(paths)
    exclude = only + tuple(exclude)

    if show_settings:
        from flowtrace.lint.config import settings_text

        click.echo(settings_text(path, config_file, isolated, profile), nl=False)
        return
    refuse_non_python_file(path)
    distinct_outputs(("-o", output), ("--html", html_path))
    outcome = run_check(path, CheckOptions.of(
        profile=profile, profile_files=profile_file, drafts=drafts, exclude=exclude, jobs=jobs, use_cache=not no_cache,
        cache_dir=cache_dir, config=config_file, isolated=isolated, exit_zero=True, progress=None, method=method,
    ))  # fmt: skip
    result, findings = outcome.result, list(outcome.findings)
    _say_profiles(result, profile)
    # what follows from the facts alone comes from the memo while the facts are unchanged
    memo = outcome.memo
    keep = (lambda name, compute: memo.get(name, (), compute)) if memo is not None else None
    if fmt == "json":
        from flowtrace.render.report_data import scan_json_with_report

        emit_output(scan_json_with_report(result, findings, keep), output)
    elif fmt == "html":
        emit_output(html_report(result, findings, link_base), output)
    elif statistics:
        from flowtrace.cli.ui import statistics_text

        emit_output(statistics_text(findings), output)
    elif fmt == "text":
        show_matrix = matrix if matrix is not None else not html_path
        emit_output(_scan_text(outcome, show_matrix, keep), output)
    else:
        from flowtrace.render.check_output import render_check

        emit_output(render_check(outcome, fmt, cwd=Path.cwd()), output)
    if html_path:
        emit_output(html_report(result, findings, link_base), html_path)
    counts = keep("summary:rows", lambda: text_render.row_counts(result)) if keep is not None else None
    status(text_render.summary_line(result, findings, counts))


def _scan_text(outcome: CheckOutcome, show_matrix: bool, keep: Keep | None) -> str:
    """scan's text: the matrix (when asked), then the findings as `check --output-format concise`
    writes them (paths relative to the working folder), then diagnostics; ``keep``: scan's memo
    of what follows from the facts alone."""
    from flowtrace.render import text as text_render
    from flowtrace.render.check_output import render_check

    result = outcome.result
    out: list[str] = []
    if show_matrix:
        from flowtrace.render.scan_json import annotated_models

        models = annotated_models(result, list(outcome.findings), keep)
        counts, by_method = text_render.finding_counts(models), text_render.method_finding_counts(models)
        matrix = text_render.model_matrix(result, counts=counts, method_counts=by_method)
        head = f"engine profile(s): {result.engine}    root: {result.root}"
        out = [head, "", matrix, *text_render.serving_text(result), ""]
    if outcome.findings:
        out += [f"findings ({len(outcome.findings)}):", render_check(outcome, "concise", cwd=Path.cwd()).rstrip("\n")]
    diagnostics = result.index.diagnostics
    if diagnostics:
        out += ["", f"diagnostics ({len(diagnostics)}):"] + [
            f"{d.file}:{d.line}: {d.kind}: {d.reason}" for d in diagnostics[:50]
        ]
        if len(diagnostics) > 50:
            out.append(f"... {len(diagnostics) - 50} more (see --format json)")
    return "\n".join(out).strip("\n") + "\n" if out else ""


def _one_method(method: str | None) -> None:
    """trace and compat answer for one method: ``--method all`` is scan's."""
    from flowtrace.analysis.scan import ALL_METHODS

    if method == ALL_METHODS:
        raise click.BadParameter(
            "'all' is for scan (every method's answer per row); trace and compat answer for one method: name it",
            param_hint="--method",
        )


def _say_profiles(result: ScanResult, forced: str | None) -> None:
    """When no engine layout was recognised, say so and which profiles were applied."""
    from flowtrace.cli.ui import status, verbose

    root = result.root if result.root.is_dir() else result.root.parent
    names = ", ".join(p.name for p in result.profiles)
    if forced:
        verbose(f"profile {forced} (forced)")
        return
    recognised = [p for p in result.profiles if any((root / d).is_dir() for d in p.detect_paths)]
    if recognised or len(result.profiles) <= 1 or not result.root.is_dir():
        verbose(f"profile(s) {names} (detected)")
        return
    status(
        f"flowtrace: warning: no known engine layout under {result.root} (looked for each profile's detect paths);"
        f" applied every profile: {names} (force one with --profile)"
    )


def _engine_scan(
    path: str,
    profile: str | None,
    profile_files: tuple[str, ...],
    options: IndexOptions,
    drafts: tuple[str, ...] = (),
    method: str | None = None,
) -> ScanResult:
    """The scan of PATH for trace, compat and graph: refused (one line, exit 2) as check
    refuses it when PATH holds no engine code. ``method``: the speculative method it answers for."""
    from flowtrace import api
    from flowtrace.analysis.scan import require_engine_code
    from flowtrace.cli.ui import refuse_non_python_file

    refuse_non_python_file(path)
    result = api.scan(
        path, profile=profile, profile_files=profile_files, options=options, drafts_files=tuple(drafts), method=method
    )
    require_engine_code(result, path)
    return result


@main.command()
@click.argument("path")
@click.option("--model", "-m", required=True, help="Model class (simple or qualified name) or registered architecture.")
@click.option("--layer-ids", default="default", show_default=True, help="Draft config ids, e.g. -1,2,30, or 'default'.")
@click.option("--num-layers", "-L", type=int, help="Number of decoder layers of the target.")
@click.option(
    "--target-config", type=click.Path(), help="Target config.json (or its folder): layer count and hidden size."
)
@click.option("--hidden-size", type=int, help="Target hidden size (for the fc width).")
@click.option(
    "--draft-layers",
    type=click.IntRange(min=1),
    help=(
        "The draft's layer count, for a method whose runner computes its default ids from it (a profile's [methods.*]"
        " default_function)."
    ),
)
@scan_options
@method_option
@output_options(("text", "json"), "text", help="json: a flowtrace.trace/1 document.")
def trace(
    path: str,
    model: str,
    layer_ids: str,
    num_layers: int | None,
    target_config: str | None,
    hidden_size: int | None,
    draft_layers: int | None,
    profile: str | None,
    profile_file: tuple[str, ...],
    exclude: tuple[str, ...],
    jobs: int | None,
    no_cache: bool,
    cache_dir: str | None,
    method: str | None,
    fmt: str,
    output: str | None,
) -> None:
    """Which boundaries will MODEL capture on this engine, step by step with file:line.

    Boundary b = residual stream after b decoder layers: 0 = embedding, k = output of layer
    k-1, L = last layer's output before the final norm.
    """
    from flowtrace import api
    from flowtrace.analysis.trace import parse_ids, trace_json, trace_text

    try:
        ids = parse_ids(layer_ids)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--layer-ids") from None
    if num_layers is not None and num_layers <= 0:
        raise click.BadParameter(
            f"{num_layers}: the target needs at least one decoder layer (give its num_hidden_layers, or --target-config"
            " config.json)",
            param_hint="-L/--num-layers",
        )
    if target_config:
        from flowtrace.analysis.compat import target_info
        from flowtrace.sources.configs import ConfigError, read_config

        try:
            target_doc = read_config(target_config, "target")
            info = target_info(target_doc, target_config)
        except ConfigError as exc:
            raise api.UsageError(str(exc)) from None
        num_layers = num_layers or info.num_layers
        hidden_size = hidden_size or info.hidden_size
    if not num_layers:
        raise click.UsageError("give --num-layers N or --target-config config.json")
    _one_method(method)
    result = _engine_scan(path, profile, profile_file, index_options(jobs, no_cache, cache_dir, exclude), method=method)
    traced = api.trace(
        result, model, ids, num_layers, hidden_size, target_doc if target_config else None, draft_layers=draft_layers
    )
    if fmt == "json":
        import json

        emit(json.dumps(trace_json(traced), indent=2) + "\n", output)
    else:
        emit(trace_text(traced), output)
    sys.exit(EXIT_CLEAN if traced.ok else EXIT_FINDINGS)


@main.command()
@click.argument("path")
@click.option(
    "--target-config",
    type=click.Path(),
    help="The target model's config.json (or its folder); with --draft, defaults to the catalogue's target.",
)
@click.option(
    "--draft-config",
    type=click.Path(),
    help="The EAGLE-3 draft's config.json, or its folder (then the safetensors header gives the fc width).",
)
@click.option(
    "--draft",
    "draft_name",
    metavar="NAME",
    help=(
        "A draft of the catalogue instead of --draft-config (docs/drafts.md; `flowtrace compat PATH --draft"
        " specforge/qwen3-8b-eagle3`)."
    ),
)
@drafts_option
@click.option(
    "--trained-with",
    help="Training convention (rules/training): specforge, eagle, hf-index, speculators, boundary. Default: detected.",
)
@click.option(
    "--trained-boundaries",
    metavar="B0,B1,...",
    help="The boundaries the draft was trained on (0 = embedding); overrides --trained-with.",
)
@scan_options
@method_option
@output_options(
    ("text", "json"),
    "text",
    help="json: a flowtrace.compat/1 document.",
    output_help="Write to FILE instead of stdout (with --fix --diff: the diff).",
)
@click.option(
    "--fix",
    "fix_config",
    is_flag=True,
    help=(
        "Rewrite the draft's config.json with verified ids that serve its trained layout, recording that layout (a"
        " plain rerun then says MATCH); then print the verdict on the rewritten config."
    ),
)
@click.option(
    "--diff",
    "show_diff",
    is_flag=True,
    help="With --fix: print the rewrite as a unified diff instead of writing it (exit 1 when there is one).",
)
def compat(
    path: str,
    target_config: str | None,
    draft_config: str | None,
    draft_name: str | None,
    drafts: tuple[str, ...],
    trained_with: str | None,
    trained_boundaries: str | None,
    profile: str | None,
    profile_file: tuple[str, ...],
    exclude: tuple[str, ...],
    jobs: int | None,
    no_cache: bool,
    cache_dir: str | None,
    method: str | None,
    fmt: str,
    output: str | None,
    fix_config: bool,
    show_diff: bool,
) -> None:
    """MATCH or MISMATCH: will the engine at PATH feed this draft what it was trained on?"""
    from flowtrace import api
    from flowtrace.render.compat_json import compat_json
    from flowtrace.render.compat_text import compat_text

    if (draft_config is None) == (draft_name is None):
        raise click.UsageError(
            "give the draft as --draft-config FILE|DIR or as --draft NAME (a catalogue entry), one of the two"
        )
    if draft_name is None and target_config is None:
        raise click.UsageError("--target-config is required with --draft-config")
    if draft_name is not None and (fix_config or trained_with or trained_boundaries):
        raise click.UsageError(
            "--draft NAME takes its convention and layout from the catalogue: no --fix, --trained-with or"
            " --trained-boundaries"
        )
    if show_diff and not fix_config:
        raise click.UsageError("--diff goes with --fix")
    if show_diff and fmt == "json":
        raise click.UsageError(
            "--fix --diff prints a diff; without --diff, --format json writes the verdict on the rewritten config"
        )
    _one_method(method)
    options = index_options(jobs, no_cache, cache_dir, exclude)
    result = _engine_scan(path, profile, profile_file, options, drafts, method)
    why = None
    if method is None:  # the draft says which method it is for
        picked = api.draft_method(result, draft_config, draft_name)
        if picked is not None and result.method is not None and picked.method.name != result.method.name:
            result = _engine_scan(path, profile, profile_file, options, drafts, picked.method.name)
        if picked is not None:
            why = picked.why
            from flowtrace.cli.ui import verbose

            verbose(f"method {picked.method.title}: {picked.why}")
    if fix_config:
        from flowtrace.cli.fix import compat_fix

        # checked above: --fix goes with --draft-config, and --draft-config with --target-config
        assert target_config is not None and draft_config is not None

        code = compat_fix(result, target_config, draft_config, trained_with, trained_boundaries, show_diff, output)
        if show_diff or code == EXIT_ERROR:
            sys.exit(code)
        # as `check --fix` reports what is left: the verdict on the config as it now is
    if draft_name is not None:
        verdict = api.compat_draft(result, draft_name, target_config)
    else:
        assert target_config is not None and draft_config is not None  # checked above, with --draft-config
        verdict = api.compat(result, target_config, draft_config, trained_with, trained_boundaries)
    verdict = api.answered_for(verdict, result, why)
    from flowtrace.cli.ui import verbose

    for line in verdict.assumed:
        verbose(line)
    if fmt == "json":
        import json

        emit(json.dumps(compat_json(verdict), indent=2) + "\n", output)
    else:
        emit(compat_text(verdict), output)
    sys.exit(verdict.exit_code)


@main.command()
@click.argument("old")
@click.argument("new")
@scan_options
@output_options(("text", "json"), "text", help="json: a flowtrace.diff/1 document.")
def diff(
    old: str,
    new: str,
    profile: str | None,
    profile_file: tuple[str, ...],
    exclude: tuple[str, ...],
    jobs: int | None,
    no_cache: bool,
    cache_dir: str | None,
    fmt: str,
    output: str | None,
) -> None:
    """What changed in capture support from OLD to NEW (paths or pypi:NAME==VER).

    Classes that gained or lost capture support, and changed facts (id transform, default
    layers, capture point, embedding / last-layer capturability, support). A side without
    engine code is refused, as check refuses it.
    """
    from flowtrace import api
    from flowtrace.analysis.diff import diff_document
    from flowtrace.render.diff_text import diff_text

    from flowtrace.cli.ui import refuse_non_python_file

    refuse_non_python_file(old)
    refuse_non_python_file(new)
    changes = api.diff(
        old, new, profile=profile, profile_files=profile_file, options=index_options(jobs, no_cache, cache_dir, exclude)
    )
    if fmt == "json":
        import json

        emit(json.dumps(diff_document(changes, old, new), indent=2) + "\n", output)
    else:
        emit(diff_text(changes, old, new), output)
    sys.exit(EXIT_FINDINGS if changes else EXIT_CLEAN)


@main.command()
@click.argument("path")
@click.option("--model", "-m", help="Only the subgraph of this model class.")
@scan_options
@output_options(("json", "graphml", "dot"), "json", help="json: node-link JSON (networkx); graphml; dot (Graphviz).")
def graph(
    path: str,
    model: str | None,
    profile: str | None,
    profile_file: tuple[str, ...],
    exclude: tuple[str, ...],
    jobs: int | None,
    no_cache: bool,
    cache_dir: str | None,
    fmt: str,
    output: str | None,
) -> None:
    """Export the data-flow graph (node-link JSON, GraphML or DOT)."""
    from flowtrace.analysis import graph as graphs

    result = _engine_scan(path, profile, profile_file, index_options(jobs, no_cache, cache_dir, exclude))
    g = result.graph
    if model:
        g = graphs.model_subgraph(g, result.model(model).qualname)
    render = {"json": graphs.to_json, "graphml": graphs.to_graphml, "dot": graphs.to_dot}[fmt]
    emit(render(g), output)
    from flowtrace.cli.ui import status

    status(f"flowtrace: graph with {g.number_of_nodes()} nodes, {g.number_of_edges()} edges")


@main.command()
@click.option(
    "--scan",
    "scan_json",
    required=True,
    type=click.Path(dir_okay=False),
    help="A `flowtrace scan --format json` document.",
)
@click.option(
    "--probe",
    "probe_json",
    type=click.Path(dir_okay=False),
    help="A `flowtrace probe ... --format json` result to merge in.",
)
@click.option(
    "--probe-engine",
    "engine_json",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="`flowtrace probe engine --format json` results: runtime-confirmed / refuted per model row.",
)
@output_options(
    ("html",),
    "html",
    help="html: one self-contained page (the only format: the JSON is what --scan reads).",
    output_help="Write the page to FILE.",
    output_default="reports/flowtrace-report.html",
)
@click.option(
    "--link-base",
    help="Source links: URL prefix (default: inferred from the scanned root's git remote or release, else vscode://).",
)
@ui_options
def report(
    scan_json: str,
    probe_json: str | None,
    engine_json: tuple[str, ...],
    fmt: str,
    output: str | None,
    link_base: str | None,
) -> None:
    """Render the HTML report from saved scan (and probe) results."""
    import json

    from flowtrace.cli.ui import distinct_outputs
    from flowtrace.errors import UsageError
    from flowtrace.render.html import render_html

    # the page must not replace what it is made from
    distinct_outputs(
        ("--scan", scan_json), ("--probe", probe_json), *(("--probe-engine", p) for p in engine_json), ("-o", output)
    )

    def load(path: str, schema: str) -> dict[str, object]:
        try:
            doc = json.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise UsageError(f"{path}: cannot read ({exc.strerror or exc})") from None
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
            raise UsageError(f"{path}: not valid JSON ({exc})") from None
        if not isinstance(doc, dict) or not str(doc.get("schema", "")).startswith(schema):
            raise UsageError(
                f"{path}: not a {schema} document (schema {doc.get('schema') if isinstance(doc, dict) else None!r})"
            )
        return doc

    def load_any(path: str) -> object:
        try:
            return json.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise UsageError(f"{path}: cannot read ({exc.strerror or exc})") from None
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
            raise UsageError(f"{path}: not valid JSON ({exc})") from None

    from flowtrace.render.report_data import report_document_from_scan

    doc, complete = report_document_from_scan(load(scan_json, "flowtrace.scan/"))
    if not complete:
        click.echo(
            f"flowtrace: warning: {scan_json} has no report data (an older flowtrace wrote it): no capture paths,"
            " graphs or snippets; rescan with this version",
            err=True,
        )
    probe = load(probe_json, "flowtrace.probe/") if probe_json else None
    if engine_json:
        from flowtrace.probe.engine_report import engine_documents, merged_probe

        runs = [d for p in engine_json for d in engine_documents(load_any(p))]
        if not runs:
            raise UsageError(f"{', '.join(engine_json)}: no flowtrace.probe-engine/1 document")
        probe = merged_probe(runs, probe)
    origin = None
    if not link_base and isinstance(doc.get("root"), str) and Path(doc["root"]).is_dir():
        from flowtrace.cli.ui import repository_subdir_of
        from flowtrace.sources.weblinks import infer_link_base

        inferred = infer_link_base(doc["root"], repository_subdir_of(doc.get("profiles")))
        if inferred is not None:
            link_base, origin = inferred.url, inferred.origin
    from flowtrace.cli.ui import emit_output

    emit_output(render_html(doc, link_base=link_base, probe=probe, link_origin=origin), output)


def _register_optional_commands() -> None:
    """Commands living in their own modules (probe needs torch only when it runs)."""
    from flowtrace.cli.check import check, explain, rules

    main.add_command(check)
    main.add_command(rules)
    main.add_command(explain)
    from flowtrace.cli.fix import fix

    main.add_command(fix)
    try:
        from flowtrace.probe.cli import probe

        main.add_command(probe)
    except Exception:  # noqa: BLE001 - a broken optional part must not break scan
        pass
    _attach_exit_codes(main, ())


def _attach_exit_codes(group: click.Group, prefix: tuple[str, ...]) -> None:
    """End every command's --help with its exit codes, from the one table (cli/exits.py)."""
    from flowtrace.cli.exits import EXIT_CODES, epilog

    for name, cmd in group.commands.items():
        path = " ".join((*prefix, name))
        if isinstance(cmd, click.Group):
            _attach_exit_codes(cmd, (*prefix, name))
        elif path in EXIT_CODES:
            cmd.epilog = epilog(path)


_register_optional_commands()

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
