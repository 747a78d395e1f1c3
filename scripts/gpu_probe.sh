#!/usr/bin/env bash
# Runtime probe at realistic size: a Llama-3-8B-shaped synthetic target with random weights
# (hidden 4096, 32 layers, 32 heads, 8 KV heads, intermediate 14336, vocab 128256), built
# directly on the GPU in bfloat16, then `probe capture` and `probe draft` with timings.
#
#   scripts/gpu_probe.sh                                   # cuda, bfloat16, llama3-8b, 512 tokens
#   scripts/gpu_probe.sh --device cpu --dtype float32 --preset tiny    # CPU smoke test
#   scripts/gpu_probe.sh --out DIR                         # keep the JSON reports in DIR
#
# Expected: capture CONFIRMED (exit 0); draft NO CLEAR WINNER (exit 1: the draft is untrained,
# the run is about time). The script fails only on errors (exit 2+) or a wrong capture.
# Needs torch and safetensors; nothing is downloaded. Budget: well under 5 minutes on one H200.
set -uo pipefail

device=cuda dtype=bfloat16 preset=llama3-8b tokens=512 out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --device) device=$2; shift 2 ;;
    --dtype) dtype=$2; shift 2 ;;
    --preset) preset=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
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
echo "== probe capture"
t0=$(date +%s)
$PY -m flowtrace.probe.cli capture "${common[@]}" --expect "$expect" --format json -o "$work/capture.json"
rc=$?
echo "  exit $rc, wall $(( $(date +%s) - t0 ))s"
if [ -f "$work/capture.json" ]; then summary "$work/capture.json"; fi
[ $rc -eq 0 ] || { echo "FAIL: capture did not confirm $expect" >&2; status=1; }

echo "== write an untrained draft checkpoint (shares the target's embeddings)"
t0=$(date +%s)
$PY -c "from flowtrace.probe.synthetic import write_random_draft as w; w('$work/draft', preset='$preset', aux_layer_ids=$ids, device='$device', dtype='$dtype')" || exit 2
echo "  $(du -sh "$work/draft" | cut -f1), wall $(( $(date +%s) - t0 ))s"

echo "== probe draft"
t0=$(date +%s)
$PY -m flowtrace.probe.cli draft "$work/draft" "${common[@]}" --random-tokens "$tokens" --format json -o "$work/draft.json"
rc=$?
echo "  exit $rc (1 expected: untrained draft, no clear winner), wall $(( $(date +%s) - t0 ))s"
if [ -f "$work/draft.json" ]; then summary "$work/draft.json"; fi
[ $rc -le 1 ] || { echo "FAIL: probe draft errored" >&2; status=1; }

[ -n "$out" ] && cp "$work"/capture.json "$work"/draft.json "$out"/ 2>/dev/null
echo "gpu_probe: $([ $status -eq 0 ] && echo OK || echo FAILED)"
exit $status
