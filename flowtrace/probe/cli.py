"""``flowtrace probe``: a click group with ``capture``, ``draft``, ``engine`` and ``merge``.

Importing this module is cheap and torch-free; torch is imported when a command runs, and its
absence is one line saying how to install the ``probe`` extra. User mistakes exit 2 with one line; a refuted
(or unconfirmed) claim exits 1; agreement exits 0.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from flowtrace.probe.errors import ProbeError

if TYPE_CHECKING:  # torch-side result types; this module stays cheap to import
    from flowtrace.probe.engine import EngineProbeResult
    from flowtrace.probe.results import CaptureResult, DraftResult

T = TypeVar("T")
Command = TypeVar("Command", bound=Callable[..., Any])


class ProbeUsageError(click.ClickException):
    """One-line error for user mistakes; exit 2 so it never reads as "refuted" (exit 1)."""

    exit_code = 2

    def show(self, file: Any = None) -> None:
        """The command line's one error shape (``flowtrace: error: ...``), not click's ``Error:``."""
        click.echo(f"flowtrace: error: {self.format_message()}", err=True)


def _progress() -> Callable[[str], None] | None:
    """Progress on stderr, only for a person watching a terminal."""
    if not sys.stderr.isatty():
        return None

    def say(msg: str) -> None:
        click.echo(f"[probe] {msg}", err=True)

    return say


def _parse_factory_args(items: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ProbeUsageError(f"--factory-arg {item!r}: expected KEY=VALUE")
        k, v = item.split("=", 1)
        try:
            out[k] = json.loads(v)
        except json.JSONDecodeError:
            out[k] = v
    return out


def _emit(text: str, output: str | None) -> None:
    """The result to ``-o FILE`` (written atomically, as every command writes) or stdout."""
    if output:
        from flowtrace.sources.output import write_atomic

        try:
            write_atomic(output, text)
        except OSError as exc:
            raise ProbeUsageError(f"cannot write {output}: {exc.strerror or exc}") from None
        click.echo(f"flowtrace: wrote {output}", err=True)
    else:
        click.echo(text, nl=False)


def _run(fn: Callable[[], T]) -> T:
    try:
        return fn()
    except ProbeError as exc:
        if os.environ.get("FLOWTRACE_PROBE_DEBUG"):
            raise
        raise ProbeUsageError(str(exc)) from None


def _target_options(f: Command) -> Command:
    opts = [
        click.option(
            "--factory", metavar="MODULE:FUNCTION", help="Function returning (model, example_inputs[, make_inputs])."
        ),
        click.option(
            "--factory-arg",
            "factory_arg",
            multiple=True,
            metavar="KEY=VALUE",
            help="Keyword argument for the factory (VALUE parsed as JSON if it can be).",
        ),
        click.option(
            "--path",
            "path",
            multiple=True,
            type=click.Path(file_okay=False),
            help="Directory added to sys.path before importing the factory.",
        ),
        click.option(
            "--hf-config",
            metavar="DIR_OR_CONFIG_JSON",
            help="Random-init Hugging Face model from a config (needs transformers).",
        ),
        click.option(
            "--device",
            type=click.Choice(["auto", "cpu", "cuda"]),
            default="auto",
            show_default=True,
            help="auto = cuda if available.",
        ),
        click.option(
            "--dtype",
            type=click.Choice(["auto", "float32", "bfloat16", "float16"]),
            default="auto",
            show_default=True,
            help="auto = float32 on CPU, bfloat16 on CUDA.",
        ),
        click.option("--seed", type=int, default=0, show_default=True),
        click.option("--embed-module", metavar="NAME", help="Token embedding module (default: embed_tokens)."),
        click.option("--layers-module", metavar="NAME", help="Decoder layer ModuleList (default: layers)."),
        click.option("--expect", metavar="B0,B1,...", help="Claimed boundaries, e.g. 0,3,31."),
        click.option(
            "--expect-trace",
            type=click.Path(dir_okay=False),
            metavar="TRACE_JSON",
            help="Claim from `flowtrace trace --format json` (keys boundaries, model).",
        ),
        click.option(
            "--format",
            "--output-format",
            "fmt",
            type=click.Choice(["text", "json"]),
            default="text",
            show_default=True,
            help="json: a flowtrace.probe/1 document (what `flowtrace report --probe` reads).",
        ),
        click.option(
            "-o",
            "--output",
            "--output-file",
            "output",
            type=click.Path(dir_okay=False),
            metavar="FILE",
            help="Write to FILE instead of stdout.",
        ),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


@click.group("probe")
def probe() -> None:
    """Confirm on real tensors which hidden states reach an EAGLE-3 draft (needs the probe extra: docs/probe.md)."""


@probe.command("capture")
@_target_options
@click.option("--fc-module", metavar="NAME", help="Draft fc whose input to split (default: a Linear named fc).")
@click.option("--final-norm-module", metavar="NAME", help="Final norm (default: norm beside the layers).")
@click.option(
    "--aux-from-output/--no-aux-from-output",
    default=True,
    show_default=True,
    help="Treat a (hidden, aux) model output as observed aux states.",
)
@click.option(
    "--num-layers",
    type=click.IntRange(1, 1024),
    help="--hf-config: also shrink the layer count to N (default: as configured, so claims at the real L hold).",
)
@click.option(
    "--full-size",
    is_flag=True,
    help=(
        "--hf-config: build the model as configured (default: a tiny one of the same architecture, as probe engine"
        " does; every change is reported)."
    ),
)
def capture_cmd(factory: str | None, factory_arg: tuple[str, ...], path: tuple[str, ...], hf_config: str | None,
                device: str, dtype: str, seed: int, embed_module: str | None, layers_module: str | None,
                expect: str | None, expect_trace: str | None, fmt: str, output: str | None, fc_module: str | None,
                final_norm_module: str | None, aux_from_output: bool, num_layers: int | None, full_size: bool) -> None:
    """Run the target once and name the boundaries fed to the aux concatenation."""
    from flowtrace.probe.report import capture_text

    prog = _progress()
    if prog:
        prog("execution is eager: no CUDA graphs, no torch.compile")

    def go() -> CaptureResult:
        from flowtrace.probe.api import probe_capture

        return probe_capture(
            factory=factory, factory_args=_parse_factory_args(factory_arg), hf_config=hf_config,
            path=path, device=device, dtype=dtype, seed=seed, embed_module=embed_module,
            layers_module=layers_module, fc_module=fc_module, final_norm_module=final_norm_module,
            aux_from_output=aux_from_output, expect=expect, expect_trace=expect_trace,
            progress=prog, full_size=full_size, num_layers=num_layers,
        )

    result = _run(go)
    _emit(result.to_json() + "\n" if fmt == "json" else capture_text(result), output)
    click.get_current_context().exit(result.exit_code)


@probe.command("draft")
@click.argument("draft_dir", type=click.Path(file_okay=False))
@_target_options
@click.option("--lm-head-module", metavar="NAME", help="Target output head (default: lm_head).")
@click.option("--tokens", type=click.Path(dir_okay=False), metavar="FILE",
              help="Prompts: whitespace-separated token ids, one sequence per line.")
@click.option("--random-tokens", type=int, metavar="N",
              help="Draw N uniform token ids with --seed (default 256 when --tokens is absent).")
@click.option("--exhaustive", is_flag=True, help="Also score every ascending layout of the draft's size.")
@click.option("--min-accuracy", type=float, default=0.05, show_default=True,
              help="No clear winner when the best accuracy is below max(this, 2 x chance).")
@click.option("--min-margin", type=float, default=0.05, show_default=True,
              help="Winner must beat the runner-up by this much (absolute accuracy).")
def draft_cmd(draft_dir: str, factory: str | None, factory_arg: tuple[str, ...], path: tuple[str, ...],
              hf_config: str | None, device: str, dtype: str, seed: int, embed_module: str | None,
              layers_module: str | None, expect: str | None, expect_trace: str | None, fmt: str, output: str | None,
              lm_head_module: str | None, tokens: str | None, random_tokens: int | None, exhaustive: bool,
              min_accuracy: float, min_margin: float) -> None:
    """Rank candidate layouts by an EAGLE-3 draft's teacher-forced step-0 agreement."""
    from flowtrace.probe.report import draft_text

    prog = _progress()
    if prog:
        prog("execution is eager: no CUDA graphs, no torch.compile")

    def go() -> DraftResult:
        from flowtrace.probe.api import probe_draft

        return probe_draft(
            draft_dir, factory=factory, factory_args=_parse_factory_args(factory_arg),
            hf_config=hf_config, path=path, device=device, dtype=dtype, seed=seed,
            embed_module=embed_module, layers_module=layers_module, lm_head_module=lm_head_module,
            tokens=tokens, random_tokens=random_tokens, expect=expect, expect_trace=expect_trace,
            exhaustive=exhaustive, min_accuracy=min_accuracy, min_margin=min_margin, progress=prog,
        )

    result = _run(go)
    _emit(result.to_json() + "\n" if fmt == "json" else draft_text(result), output)
    click.get_current_context().exit(result.exit_code)


@probe.command("engine")
@click.option(
    "--engine",
    help=(
        "The engine to run: a profile with a [probe] table (bundled: sglang, vllm; needed when there are several; see"
        " docs/probe-engine.md)."
    ),
)
@click.option(
    "--install",
    "install",
    is_flag=True,
    help=(
        "Build the engine venv first with the script the profile ships ([probe] install; idempotent). Alone, it only"
        " installs."
    ),
)
@click.option(
    "--target-config",
    type=click.Path(),
    help="The target's config.json (or its folder). Required unless --install is given alone.",
)
@click.option(
    "--draft-config",
    type=click.Path(),
    help="A draft config.json (or folder) of the method probed: its ids, exactly as written (or none).",
)
@click.option(
    "--method",
    metavar="NAME",
    help=(
        "The speculative method whose draft to write and trace: a [methods.<name>] of the engine's profile with"
        " probe_draft_* keys (default: the profile's default method; docs/probe-engine.md)."
    ),
)
@click.option("--layer-ids", metavar="I0,I1,...", help="Ids handed to the engine's setter directly (no draft).")
@click.option("--num-layers", type=click.IntRange(1, 64), help="Layers of the shrunk target (default 4).")
@click.option(
    "--device",
    type=click.Choice(["cpu", "cuda"]),
    default="cpu",
    show_default=True,
    help="cpu: the engine's CPU build; cuda: its regular GPU build.",
)
@click.option(
    "--engine-python",
    type=click.Path(dir_okay=False),
    help="The engine venv's python (default: $FLOWTRACE_ENGINE_VENV or the install script's cache path).",
)
@click.option(
    "--profile-file",
    "profile_files",
    multiple=True,
    type=click.Path(dir_okay=False),
    metavar="PATH",
    help="Add an engine profile from this TOML file (its [probe] table and runner script; repeatable).",
)
@click.option(
    "--format",
    "--output-format",
    "fmt",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="json: a flowtrace.probe-engine/1 document (what `flowtrace report --probe-engine` reads).",
)
@click.option(
    "-o",
    "--output",
    "--output-file",
    "output",
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="Write to FILE instead of stdout.",
)
def engine_cmd(
    engine: str | None,
    install: bool,
    target_config: str | None,
    draft_config: str | None,
    method: str | None,
    layer_ids: str | None,
    num_layers: int | None,
    device: str,
    engine_python: str | None,
    profile_files: tuple[str, ...],
    fmt: str,
    output: str | None,
) -> None:
    """Run the installed engine on a tiny random checkpoint of the target's architecture.

    Records which boundaries reach the draft's fc at runtime and compares them with flowtrace's
    static trace of the same engine's installed source.
    """
    from pathlib import Path

    from flowtrace.probe.engine import Case, draft_case, engine_text, install_engine, parse_layer_ids, probe_engine
    from flowtrace.probe.settings import probe_settings

    if install:
        python = _run(
            lambda: install_engine(probe_settings(engine, tuple(Path(p) for p in profile_files)), device, engine_python)
        )
        engine_python = engine_python or str(python)
        if not target_config:
            if draft_config or layer_ids:
                raise ProbeUsageError("give --target-config to probe after installing")
            click.echo(f"flowtrace: engine venv ready: {python}", err=True)
            return
    if not target_config:
        raise ProbeUsageError("give --target-config T/config.json (or --install alone to build the engine venv)")
    if draft_config and layer_ids:
        raise ProbeUsageError("give --draft-config or --layer-ids, not both")
    if not draft_config and not layer_ids:
        raise ProbeUsageError("give --draft-config D (ids from the draft config) or --layer-ids 1,2,3")

    def go() -> EngineProbeResult:
        settings = probe_settings(engine, tuple(Path(p) for p in profile_files), method)
        case = (
            draft_case(draft_config, settings=settings)
            if draft_config
            else Case("layer-ids", "direct", parse_layer_ids(layer_ids or ""))  # given: checked above
        )
        return probe_engine(settings=settings, target_config=target_config, cases=[case], num_layers=num_layers,
                            device=device, engine_python=engine_python, progress=_progress())[0]

    result = _run(go)
    _emit(result.to_json() + "\n" if fmt == "json" else engine_text(result), output)
    click.get_current_context().exit(result.exit_code)


@probe.command("merge")
@click.argument("results", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option(
    "--format",
    "--output-format",
    "fmt",
    type=click.Choice(["json"]),
    default="json",
    show_default=True,
    help="json: one merged flowtrace.probe/1 document (the only format: `flowtrace report --probe` reads it).",
)
@click.option(
    "-o",
    "--output",
    "--output-file",
    "output",
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="Write to FILE instead of stdout.",
)
def merge_cmd(results: tuple[str, ...], fmt: str, output: str | None) -> None:
    """Merge probe JSON results into one document with a verdict per model.

    The document feeds `flowtrace report --probe`, which marks every model it names.
    """
    from flowtrace.probe.merge import merge_documents, read_documents

    doc = _run(lambda: merge_documents(read_documents(list(results))))
    _emit(json.dumps(doc, indent=2) + "\n", output)
    ok = all(m["verdict"] == "confirmed" for m in doc["models"])
    click.get_current_context().exit(0 if ok else 1)


if __name__ == "__main__":  # python -m flowtrace.probe.cli ...
    probe()
