#!/usr/bin/env bash
# Runtime probe at realistic size: a Llama-3-8B-shaped synthetic target with random weights
# (hidden 4096, 32 layers, 32 heads, 8 KV heads, intermediate 14336, vocab 128256), built
# directly on the GPU in bfloat16, then `probe capture` and `probe draft` with timings.
#
#   scripts/gpu_probe.sh                                   # cuda, bfloat16, llama3-8b, 512 tokens
#   scripts/gpu_probe.sh --device cpu --dtype float32 --preset tiny    # CPU smoke test
#   FLOWTRACE_GPU_PROBE_DRY_RUN=1 scripts/gpu_probe.sh     # the same CPU dry run (tiny, 32 tokens)
#   scripts/gpu_probe.sh --out DIR                         # keep the JSON reports in DIR
#
# Expected: capture CONFIRMED (exit 0); draft NO CLEAR WINNER (exit 1: the draft is untrained,
# the run is about time). Each step prints its wall time, the probe's own phase timings and the
# peak memory of its process (GPU: torch.cuda.max_memory_allocated; host: max RSS).
# The script fails only on errors (exit 2+) or a wrong capture; each step is cut at
# FLOWTRACE_GPU_PROBE_STEP_TIMEOUT seconds (default 240). Needs torch and safetensors; nothing is
# downloaded. Budget: well under 5 minutes on one H200.
set -uo pipefail

device=cuda dtype=bfloat16 preset=llama3-8b tokens=512 out=""
if [ -n "${FLOWTRACE_GPU_PROBE_DRY_RUN:-}" ]; then
  device=cpu dtype=float32 preset=tiny tokens=32
fi
step_timeout=${FLOWTRACE_GPU_PROBE_STEP_TIMEOUT:-240}
while [ $# -gt 0 ]; do
  case "$1" in
    --device) device=$2; shift 2 ;;
    --dtype) dtype=$2; shift 2 ;;
    --preset) preset=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "gpu_probe.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

root="$(cd "$(dirname "$0")/.." && pwd)"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
[ -n "$out" ] && mkdir -p "$out"

$PY - <<PY || exit 2
import torch, safetensors
print(f"torch {torch.__version__}, cuda available: {torch.cuda.is_available()}")
if "$device" == "cuda":
    assert torch.cuda.is_available(), "--device cuda but torch sees no GPU"
    p = torch.cuda.get_device_properties(0)
    print(f"gpu: {p.name}, {p.total_memory / 2**30:.0f} GiB")
PY

L=$($PY -c "from flowtrace.probe.synthetic import PRESETS; print(PRESETS['$preset']['num_hidden_layers'])") || exit 2
ids="[-1,$((L / 2 - 1)),$((L - 4))]"   # engine layer ids: embedding, output of L/2-1, output of L-4
expect="0,$((L / 2)),$((L - 3))"        # the same as boundaries
common=(--factory flowtrace.probe.synthetic:llama --factory-arg "preset=$preset"
        --factory-arg "aux_layer_ids=$ids" --factory-arg "tokens=$tokens"
        --device "$device" --dtype "$dtype")
echo "preset $preset ($L layers), $tokens tokens, $device $dtype; engine ids $ids -> expect boundaries $expect"

# Run one step in-process (probe subcommand or a Python statement) and print its peak memory.
step() {  # step probe ARGS... | step python CODE
  timeout "$step_timeout" $PY - "$@" <<'PY'
import resource, sys, time
import click, torch
kind, args = sys.argv[1], sys.argv[2:]
t0, rc = time.perf_counter(), 0
if kind == "probe":
    from flowtrace.probe.cli import probe
    try:
        rc = probe.main(args=args, prog_name="flowtrace probe", standalone_mode=False) or 0
    except click.ClickException as exc:
        exc.show()
        rc = exc.exit_code
else:
    exec(args[0])
wall = time.perf_counter() - t0
host = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB (Linux)
gpu = f"{torch.cuda.max_memory_allocated() / 2**30:.2f} GiB GPU, " if torch.cuda.is_initialized() else ""
print(f"  exit {rc}, wall {wall:.1f}s, peak memory: {gpu}{host:.2f} GiB host RSS")
sys.exit(rc)
PY
}

summary() {  # $1 = json report
  $PY - "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
t = d["target"]
print(f"  target: {t['num_layers']} layers, hidden {t['hidden_size']}, {t['parameters'] / 1e9:.2f}B params, {d['device']} {d['dtype']}, {d['execution']}")
print(f"  boundaries: {d['boundaries']}   verdict: {d['verdict']}" + (f"   claim: {d['claim_verdict']}" if d.get('claim_verdict') else ""))
if d["command"] == "draft":
    for c in d["candidates"][:5]:
        print(f"    {c['accuracy']:7.2%}  {c['boundaries']}  {'; '.join(c['sources'])}")
    print(f"  {len(d['candidates'])} candidates, {d['tokens']['positions']} positions; {d['reason']}")
for w in d["warnings"]:
    print(f"  warning: {w}")
print("  timings: " + ", ".join(f"{k} {v:.2f}s" for k, v in d["timings"].items()))
PY
}

status=0
start=$(date +%s)
echo "== probe capture"
step probe capture "${common[@]}" --expect "$expect" --format json -o "$work/capture.json"
rc=$?
if [ -f "$work/capture.json" ]; then summary "$work/capture.json"; fi
[ $rc -eq 0 ] || { echo "FAIL: capture did not confirm $expect" >&2; status=1; }

echo "== write an untrained draft checkpoint (shares the target's embeddings)"
step python "from flowtrace.probe.synthetic import write_random_draft as w; w('$work/draft', preset='$preset', aux_layer_ids=$ids, device='$device', dtype='$dtype')" || exit 2
echo "  draft checkpoint: $(du -sh "$work/draft" | cut -f1)"

echo "== probe draft"
step probe draft "$work/draft" "${common[@]}" --random-tokens "$tokens" --format json -o "$work/draft.json"
rc=$?
echo "  (exit 1 expected: untrained draft, no clear winner)"
if [ -f "$work/draft.json" ]; then summary "$work/draft.json"; fi
[ $rc -le 1 ] || { echo "FAIL: probe draft errored" >&2; status=1; }

[ -n "$out" ] && cp "$work"/capture.json "$work"/draft.json "$out"/ 2>/dev/null
echo "total wall $(( $(date +%s) - start ))s"
echo "gpu_probe: $([ $status -eq 0 ] && echo OK || echo FAILED)"
exit $status
