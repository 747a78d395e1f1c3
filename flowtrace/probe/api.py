"""Plain Python API: :func:`probe_capture` and :func:`probe_draft`.

The CLI is a thin shell over these two functions, so notebooks and other tools get the same
results (``result.to_json()``) without click.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flowtrace.probe.claims import (
    check_range,
    compare,
    compare_outcome,
    load_trace_claim,
    parse_boundary_list,
)
from flowtrace.probe.errors import ProbeError, require_torch
from flowtrace.probe.results import (
    CLEAR_WINNER,
    CONFIRMED,
    INCONCLUSIVE,
    REFUTED,
    CAPTURES,
    CAPTURES_DELTAS,
    CandidateScore,
    CaptureResult,
    Claim,
    DraftInfo,
    Raised,
    DraftResult,
    Observation,
    layout_label,
)

if TYPE_CHECKING:  # torch and the torch-side modules load lazily, inside the functions that need them
    import torch

    from flowtrace.probe.aux_sources import FcInputHook
    from flowtrace.probe.boundaries import Tape
    from flowtrace.probe.concat_spy import ConcatSpy
    from flowtrace.probe.layout_scoring import TeacherData
    from flowtrace.probe.observed import RawObservation
    from flowtrace.probe.targets import Target, TargetSpec

Progress = Callable[[str], None] | None
DEBUG_ENV = "FLOWTRACE_PROBE_DEBUG"


class _Timer:
    """Seconds per phase; synchronises CUDA so GPU work is charged to the right phase."""

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self.phases: list[tuple[str, float]] = []
        self._start = time.perf_counter()

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            if self.cuda:
                import torch

                torch.cuda.synchronize()
            self.phases.append((name, time.perf_counter() - t0))

    def done(self) -> tuple[tuple[str, float], ...]:
        return tuple(self.phases) + (("total", time.perf_counter() - self._start),)


def force_eager() -> bool:
    """Hooks and the concat spy need eager execution: disable torch.compile (dynamo) for this process.

    We never capture CUDA graphs ourselves; an engine that does so internally is outside our reach.
    """
    cfg = sys.modules.get("torch._dynamo.config")
    if cfg is not None:
        cfg.disable = True  # type: ignore[attr-defined]
    else:
        os.environ.setdefault("TORCH_COMPILE_DISABLE", "1")
    return True


def _claim(expect: str | Sequence[int] | None, expect_trace: str | None) -> Claim | None:
    if expect is not None and expect_trace is not None:
        raise ProbeError("give --expect or --expect-trace, not both")
    if expect_trace is not None:
        return load_trace_claim(expect_trace)
    if expect is None:
        return None
    if isinstance(expect, str):
        return Claim("--expect", parse_boundary_list(expect))
    bs = tuple(int(b) for b in expect)
    if not bs or any(b < 0 for b in bs):
        raise ProbeError(f"--expect: boundaries must be non-negative ints, got {list(expect)}")
    return Claim("--expect", bs)


def _spec(**kw: Any) -> TargetSpec:
    from flowtrace.probe.targets import TargetSpec

    kw["path"] = tuple(kw.get("path") or ())
    kw["factory_args"] = dict(kw.get("factory_args") or {})
    return TargetSpec(**kw)


def _run_forward(target: Target, inputs: Any) -> Any:  # the target's own output, whatever it returns
    from flowtrace.probe.targets import call_model

    try:
        return call_model(target.model, inputs)
    except ProbeError:
        raise
    except Exception as exc:
        if os.environ.get(DEBUG_ENV):
            raise
        raise ProbeError(
            f"the target's forward raised {type(exc).__name__}: {exc} "
            f"(set {DEBUG_ENV}=1 for the traceback)"
        ) from None


_OWN_CODE = (os.sep + os.path.join("flowtrace", "probe") + os.sep, os.sep + "torch" + os.sep)


def _raised(exc: BaseException) -> Raised:
    """The exception and the frames of the target's own code it passed (probe and torch left out)."""
    import traceback

    frames = tuple(
        f"{fs.filename}:{fs.lineno}"
        for fs in traceback.extract_tb(exc.__traceback__)
        if not any(part in fs.filename for part in _OWN_CODE)
    )
    message = str(exc).splitlines()[0] if str(exc) else ""
    return Raised(type(exc).__name__, message[:300], frames)


def _run_claimed_forward(target: Target, inputs: Any, claim: Claim | None) -> tuple[Any, Raised | None]:
    """(output, None), or (None, Raised) when a claim is given: then a raise is an observation
    (confirming a ``raises`` claim, refuting the others), not a usage error."""
    if claim is None:
        return _run_forward(target, inputs), None
    from flowtrace.probe.targets import call_model

    try:
        return call_model(target.model, inputs), None
    except Exception as exc:
        if os.environ.get(DEBUG_ENV):
            raise
        return None, _raised(exc)


def _resembles_boundaries(o: Observation) -> bool:
    """An incidental observation is kept only if some chunk (nearly) is a recorded boundary."""
    return any(
        c.kind in ("exact", "allclose") or (c.cosine is not None and c.cosine >= 0.98)
        for c in o.chunks
    )


def _match_all(raws: Sequence[RawObservation], tape: Tape) -> tuple[list[Observation], int]:
    """Match every raw observation; drop incidental ones that resemble no boundary (counted)."""
    from flowtrace.probe.match import match_observation

    observations: list[Observation] = []
    ignored = 0
    for r in raws:
        o = match_observation(r, tape)
        if r.incidental and not _resembles_boundaries(o):
            ignored += 1
            continue
        observations.append(o)
    return observations, ignored


def _capture_warnings(target: Target, fc_hook: FcInputHook | None, spy: ConcatSpy, ignored: int) -> list[str]:
    """What the user should know about where aux states were (not) looked for."""
    warnings = []
    if fc_hook is not None and fc_hook.problem:
        warnings.append(fc_hook.problem)
    if fc_hook is not None and not fc_hook.observations:
        warnings.append(f"{target.fc_name} was found but did not run during the forward")
    if ignored:
        warnings.append(
            f"ignored {ignored} hidden-size concatenation(s)/output(s) that match no boundary "
            "(e.g. a draft's own cat([embeds, hidden]) or logits k*H wide)"
        )
    if spy.dropped:
        warnings.append(f"{spy.dropped} further concatenations were not recorded")
    return warnings


def _say(progress: Progress, msg: str) -> None:
    if progress is not None:
        progress(msg)


def probe_capture(
    *,
    factory: str | None = None,
    factory_args: Mapping[str, Any] | None = None,
    hf_config: str | None = None,
    path: Sequence[str] = (),
    device: str = "auto",
    dtype: str = "auto",
    seed: int = 0,
    embed_module: str | None = None,
    layers_module: str | None = None,
    fc_module: str | None = None,
    final_norm_module: str | None = None,
    aux_from_output: bool = True,
    expect: str | Sequence[int] | None = None,
    expect_trace: str | None = None,
    progress: Progress = None,
    full_size: bool = False,
    num_layers: int | None = None,
) -> CaptureResult:
    """Run the target once, record every boundary, observe the aux concatenation, match, judge."""
    require_torch()
    claim = _claim(expect, expect_trace)
    eager = force_eager()
    import torch

    from flowtrace.probe.aux_sources import FcInputHook, aux_from_output as output_aux
    from flowtrace.probe.boundaries import BoundaryRecorder
    from flowtrace.probe.concat_spy import ConcatSpy
    from flowtrace.probe.match import pick_primary
    from flowtrace.probe.targets import dtype_name, load_target, resolve_device, resolve_dtype

    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    timer = _Timer(dev.type == "cuda")
    if num_layers is not None and (not hf_config or full_size):
        raise ProbeError("--num-layers shrinks an --hf-config target (not with --factory or --full-size)")
    spec = _spec(
        factory=factory, factory_args=factory_args, hf_config=hf_config, path=path,
        embed_module=embed_module, layers_module=layers_module,
        final_norm_module=final_norm_module, fc_module=fc_module,
        shrink=bool(hf_config) and not full_size, num_layers=num_layers,
    )
    _say(progress, f"building target on {dev} ({dtype_name(dt)})")
    with timer.phase("build_target"):
        target = load_target(spec, dev, dt, seed)
    if claim is not None:
        check_range(claim.boundaries, target.num_layers, claim.source)
    H = target.hidden_size
    _say(progress, f"running one eager forward ({target.num_layers} layers, hidden {H})")
    with timer.phase("forward"):
        with contextlib.ExitStack() as stack:
            stack.enter_context(torch.no_grad())
            rec = stack.enter_context(BoundaryRecorder(target.embed, target.layers, H, target.final_norm))
            fc_hook = None
            if target.fc is not None and target.fc_name is not None:
                fc_hook = stack.enter_context(FcInputHook(target.fc, target.fc_name, H))
            spy = stack.enter_context(ConcatSpy(H))
            out, raised = _run_claimed_forward(target, target.inputs, claim)
    _say(progress, "matching observed chunks to boundaries")
    with timer.phase("match"):
        tape = rec.tape()
        raws = list(fc_hook.observations) if fc_hook is not None else []
        if aux_from_output and raised is None:
            raws += output_aux(out, H)
        raws += spy.observations
        observations, ignored = _match_all(raws, tape)
        primary = pick_primary(observations)
    warnings = list(target.warnings) + list(tape.warnings) + _capture_warnings(
        target, fc_hook, spy, ignored
    )
    if primary is None and raised is None and (claim is None or claim.outcome in (CAPTURES, CAPTURES_DELTAS)):
        warnings.append(
            "no aux hidden states were observed: no hidden-size concatenation along the last "
            "dim, no draft fc input (--fc-module NAME) and no (hidden, aux) model output; make "
            "the factory run the EAGLE-3 capture path (e.g. call set_eagle3_layers_to_capture)"
        )
    seen = observations[primary] if primary is not None else None
    if claim is not None and (raised is not None or claim.outcome not in (CAPTURES, CAPTURES_DELTAS)):
        slots, verdict = compare_outcome(claim, raised, seen)
    else:
        slots, verdict = compare(claim, seen)
    return CaptureResult(
        target=target.info(),
        device=str(dev),
        dtype=dtype_name(dt),
        eager=eager,
        timings=timer.done(),
        observations=tuple(observations),
        primary=primary,
        claim=claim,
        slots=slots,
        verdict=verdict,
        warnings=tuple(warnings),
        raised=raised,
    )


# --------------------------------------------------------------------------- draft


def read_token_file(path: str) -> list[list[int]]:
    """One sequence per non-empty line of whitespace-separated ints."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ProbeError(f"--tokens: {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ProbeError(f"--tokens: cannot read {path}: {exc}") from None
    seqs: list[list[int]] = []
    for ln, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        try:
            seqs.append([int(x) for x in parts])
        except ValueError:
            bad = next(x for x in parts if not x.lstrip("-").isdigit())
            raise ProbeError(
                f"--tokens: {path}:{ln}: {bad!r} is not a token id (expected whitespace-separated ints)"
            ) from None
    if not seqs:
        raise ProbeError(f"--tokens: {path} holds no token ids")
    return seqs


def _logits_from(
    target: Target, out: Any, lm_out: torch.Tensor | None, n_tokens: int, warnings: list[str]
) -> torch.Tensor:
    import torch

    V = target.vocab_size
    if lm_out is not None:
        logits = lm_out
    else:
        cand = getattr(out, "logits", None)
        if cand is None:
            cand = out[0] if isinstance(out, (tuple, list)) and out else out
        if not isinstance(cand, torch.Tensor):
            raise ProbeError(
                "cannot find the target's logits: return them from forward or name the output "
                "head with --lm-head-module NAME"
            )
        if V is not None and cand.shape[-1] == V:
            logits = cand
        elif cand.shape[-1] == target.hidden_size and target.lm_head is not None:
            logits = target.lm_head(cand)
            warnings.append(
                f"the target returned hidden states; applied {target.lm_head_name} to them for logits"
            )
        else:
            raise ProbeError(
                f"cannot find the target's logits (output is {tuple(cand.shape)} wide); name the "
                "output head with --lm-head-module NAME"
            )
    logits = logits.reshape(-1, logits.shape[-1])
    if logits.shape[0] < n_tokens:
        raise ProbeError(
            f"the target computed logits for {logits.shape[0]} of {n_tokens} positions; probe draft "
            "needs every position (make the factory's model return full-sequence logits)"
        )
    return logits[-n_tokens:]


def _teacher_data(
    target: Target, sequences: Sequence[Sequence[int]], progress: Progress, warnings: list[str]
) -> TeacherData:
    import torch

    from flowtrace.probe.boundaries import BoundaryRecorder
    from flowtrace.probe.layout_scoring import TeacherData
    from flowtrace.probe.targets import inputs_for_tokens

    H, L = target.hidden_size, target.num_layers
    data = TeacherData([], [], [])
    for si, seq in enumerate(sequences):
        if progress and (si % 8 == 0 or si == len(sequences) - 1):
            progress(f"target forward {si + 1}/{len(sequences)} ({len(seq)} tokens)")
        toks = torch.tensor(seq, dtype=torch.long, device=target.device)
        inputs = inputs_for_tokens(target, toks)
        lm_out: list[torch.Tensor] = []
        handle = None
        if target.lm_head is not None:
            handle = target.lm_head.register_forward_hook(
                lambda m, a, o: lm_out.append(o.detach()) if not lm_out and isinstance(o, torch.Tensor) else None
            )
        try:
            with torch.no_grad(), BoundaryRecorder(
                target.embed, target.layers, H, None, keep_partials=False
            ) as rec:
                out = _run_forward(target, inputs)
                logits = _logits_from(target, out, lm_out[0] if lm_out else None, len(seq), warnings)
        finally:
            if handle is not None:
                handle.remove()
        tape = rec.tape()
        missing = [b for b in range(L + 1) if b not in tape.streams]
        if missing:
            raise ProbeError(
                f"could not record boundaries {missing} of the target; name the modules with "
                "--embed-module/--layers-module"
            )
        rows = []
        for b in range(L + 1):
            s = tape.streams[b].reshape(-1, H)
            if s.shape[0] < len(seq):
                raise ProbeError(
                    f"boundary {b} holds {s.shape[0]} positions for a {len(seq)}-token prompt"
                )
            rows.append(s[-len(seq):])
        data.tokens.append(toks)
        data.streams.append(torch.stack(rows))
        data.argmax.append(logits.argmax(-1))
        for w in tape.warnings:
            if w not in warnings:
                warnings.append(w)
    return data


def probe_draft(
    draft: str,
    *,
    factory: str | None = None,
    factory_args: Mapping[str, Any] | None = None,
    hf_config: str | None = None,
    path: Sequence[str] = (),
    device: str = "auto",
    dtype: str = "auto",
    seed: int = 0,
    embed_module: str | None = None,
    layers_module: str | None = None,
    lm_head_module: str | None = None,
    tokens: str | Sequence[Sequence[int]] | None = None,
    random_tokens: int | None = None,
    expect: str | Sequence[int] | None = None,
    expect_trace: str | None = None,
    exhaustive: bool = False,
    min_accuracy: float = 0.05,
    min_margin: float = 0.05,
    progress: Progress = None,
) -> DraftResult:
    """Rank candidate layouts by the draft's teacher-forced step-0 agreement with the target.

    ``tokens`` is a token file path or a list of token-id sequences; without it, ``random_tokens``
    (default 256) uniform ids from the target vocabulary are drawn with ``seed``.
    """
    require_torch()
    claim = _claim(expect, expect_trace)
    if tokens is not None and random_tokens is not None:
        raise ProbeError("give --tokens FILE or --random-tokens N, not both")
    if random_tokens is not None and random_tokens < 2:
        raise ProbeError("--random-tokens must be at least 2 (one label needs two positions)")
    eager = force_eager()
    from flowtrace.probe.draft import load_draft
    from flowtrace.probe.layout_scoring import (
        candidate_layouts,
        chance_level,
        decide,
        eagle_default,
        score_layouts,
    )
    from flowtrace.probe.targets import dtype_name, load_target, resolve_device, resolve_dtype

    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    timer = _Timer(dev.type == "cuda")
    warnings: list[str] = []
    _say(progress, f"loading draft {draft}")
    with timer.phase("load_draft"):
        loaded = load_draft(draft)
    warnings += loaded.warnings
    cfg = loaded.config
    spec = _spec(
        factory=factory, factory_args=factory_args, hf_config=hf_config, path=path,
        embed_module=embed_module, layers_module=layers_module, lm_head_module=lm_head_module,
    )
    _say(progress, f"building target on {dev} ({dtype_name(dt)})")
    with timer.phase("build_target"):
        target = load_target(spec, dev, dt, seed)
    warnings = list(target.warnings) + warnings
    L = target.num_layers
    if claim is not None:
        check_range(claim.boundaries, L, claim.source)
    if cfg.target_hidden_size != target.hidden_size:
        raise ProbeError(
            f"draft {draft}: fc takes {cfg.n_aux} x {cfg.target_hidden_size} but the target's "
            f"hidden size is {target.hidden_size}: this draft belongs to another target"
        )
    if target.vocab_size is not None and cfg.vocab_size != target.vocab_size:
        warnings.append(
            f"draft vocab_size {cfg.vocab_size} != target vocabulary {target.vocab_size}"
        )
    module = loaded.module
    if not loaded.has_embeddings:
        w = getattr(target.embed, "weight", None)
        if w is None or w.shape[-1] != cfg.hidden_size:
            raise ProbeError(
                f"draft {draft}: no embed_tokens.weight, and the target's embeddings "
                f"({target.embed_name}) are not {cfg.hidden_size} wide; the draft cannot share them"
            )
        module.use_embeddings(target.embed)
    module.to(device=dev, dtype=dt)
    sequences, token_source = _draft_sequences(tokens, random_tokens, seed, target.vocab_size)
    with timer.phase("target_forward"):
        data = _teacher_data(target, sequences, progress, warnings)
    named: list[tuple[str, tuple[int, ...] | None]] = []
    if claim is not None:
        named.append(("claim" if claim.source == "--expect" else f"claim ({claim.source})", claim.boundaries))
    named.append(("draft config", cfg.config_boundaries))
    named.append(("EAGLE default", eagle_default(L)))
    cands = candidate_layouts(named, L, cfg.n_aux, exhaustive)
    with timer.phase("score_layouts"):
        ranked = score_layouts(module, data, cands, progress)
    chance = chance_level(data)
    verdict, reason = decide(ranked, chance, min_accuracy, min_margin)
    claim_verdict, claim_evidence = None, ""
    if claim is not None:
        claim_verdict, claim_evidence = _judge_claim(claim, ranked, verdict, cfg.n_aux)
    if cfg.config_boundaries is not None and any(b > L for b in cfg.config_boundaries):
        warnings.append(
            f"the draft config's eagle_aux_hidden_state_layer_ids {list(cfg.aux_layer_ids or ())} "
            f"point past this target's {L} layers"
        )
    info = DraftInfo(
        path=str(draft),
        weights_file=loaded.weights_file,
        n_aux=cfg.n_aux,
        hidden_size=cfg.hidden_size,
        target_hidden_size=cfg.target_hidden_size,
        vocab_size=cfg.vocab_size,
        draft_vocab_size=cfg.draft_vocab_size,
        config_boundaries=cfg.config_boundaries,
        norm_before_residual=cfg.norm_before_residual,
        embeddings="draft" if loaded.has_embeddings else "target",
    )
    return DraftResult(
        target=target.info(),
        draft=info,
        device=str(dev),
        dtype=dtype_name(dt),
        eager=eager,
        timings=timer.done(),
        sequences=len(sequences),
        positions=data.positions,
        token_source=token_source,
        chance=chance,
        candidates=tuple(ranked),
        verdict=verdict,
        reason=reason,
        claim=claim,
        claim_verdict=claim_verdict,
        claim_evidence=claim_evidence,
        warnings=tuple(warnings),
        min_accuracy=min_accuracy,
        min_margin=min_margin,
    )


def _draft_sequences(
    tokens: str | Sequence[Sequence[int]] | None, random_tokens: int | None, seed: int, vocab_size: int | None
) -> tuple[list[list[int]], str]:
    """The token sequences to teacher-force, and how to name their source in the report.

    A phase of its own because it depends only on the options and the target's vocabulary:
    random ids drawn with ``seed``, or the given ones checked against the vocabulary."""
    import torch

    if tokens is None:
        n = 256 if random_tokens is None else random_tokens
        if vocab_size is None:
            raise ProbeError("cannot draw random tokens: the target's vocabulary size is unknown; use --tokens")
        gen = torch.Generator().manual_seed(seed)
        sequences = [torch.randint(0, vocab_size, (n,), generator=gen).tolist()]
        token_source = f"{n} random tokens (seed {seed})"
    else:
        sequences = read_token_file(tokens) if isinstance(tokens, str) else [list(s) for s in tokens]
        token_source = tokens if isinstance(tokens, str) else "given sequences"
        if vocab_size is not None:
            for si, s in enumerate(sequences):
                bad = [t for t in s if t < 0 or t >= vocab_size]
                if bad:
                    raise ProbeError(
                        f"--tokens {token_source}: sequence {si + 1} has id {bad[0]} outside the "
                        f"target vocabulary 0..{vocab_size - 1}"
                    )
        if not any(len(s) >= 2 for s in sequences):
            raise ProbeError(f"--tokens {token_source}: every sequence needs at least 2 tokens")
    return sequences, token_source


def _judge_claim(claim: Claim, ranked: Sequence[CandidateScore], verdict: str, n_aux: int) -> tuple[str, str]:
    if len(claim.boundaries) != n_aux:
        return REFUTED, (
            f"the draft's fc takes {n_aux} aux states but the claim {layout_label(claim.boundaries)} "
            f"has {len(claim.boundaries)}"
        )
    mine = next((i for i, c in enumerate(ranked) if c.boundaries == claim.boundaries), None)
    acc = "" if mine is None else f"{ranked[mine].accuracy:.1%}, rank {mine + 1}"
    if verdict != CLEAR_WINNER:
        return INCONCLUSIVE, f"no clear winner, so the draft cannot confirm or refute the claim ({acc})"
    best = ranked[0]
    if best.boundaries == claim.boundaries:
        return CONFIRMED, f"the claim is the clear winner at {best.accuracy:.1%}"
    return REFUTED, (
        f"the draft predicts best with {layout_label(best.boundaries)} ({best.accuracy:.1%}); "
        f"the claim {layout_label(claim.boundaries)} gets {acc}"
    )
