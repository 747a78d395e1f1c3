#!/usr/bin/env bash
# One-shot `flowtrace probe engine --device cuda` on a GPU machine: install the regular vLLM wheel
# into its own venv, probe three architectures (Llama, Qwen3, Qwen3-MoE) with a draft config
# carrying ids 1,2,3, and print one flowtrace.probe-engine/1 JSON document per architecture.
#
#   scripts/gpu-engine-probe.sh                  # vllm from the package index (VLLM_SPEC=vllm==0.33.0 to pin)
#   VLLM_WHEEL=/path/vllm-0.33.0-...whl scripts/gpu-engine-probe.sh     # from a local wheel
#   FLOWTRACE_GPU_ENGINE_VENV=DIR ...            # venv location (default ~/.cache/flowtrace/engines/vllm-gpu)
#
# Exit 0 when every architecture agrees with the static trace, 1 otherwise, 2 on setup errors.
# Each probe is cut at FLOWTRACE_GPU_ENGINE_STEP_TIMEOUT seconds (default 240). flowtrace itself runs
# from this checkout with the caller's python (PYTHON, default python3; needs flowtrace's deps).
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
PY=${PYTHON:-python3}
VENV=${FLOWTRACE_GPU_ENGINE_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/flowtrace/engines/vllm-gpu}
SPEC=${VLLM_WHEEL:-${VLLM_SPEC:-vllm}}
step_timeout=${FLOWTRACE_GPU_ENGINE_STEP_TIMEOUT:-240}

if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import vllm" >/dev/null 2>&1; then
  echo "installing $SPEC into $VENV" >&2
  "$PY" -m venv --clear "$VENV" || exit 2
  "$VENV/bin/python" -m pip install --quiet --upgrade pip || exit 2
  "$VENV/bin/python" -m pip install --quiet "$SPEC" || exit 2
fi
"$VENV/bin/python" -c "import torch, vllm; assert torch.cuda.is_available(), 'no CUDA device'; print('engine: vllm', vllm.__version__, 'torch', torch.__version__, torch.cuda.get_device_name(0))" >&2 || exit 2

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
printf '{"architectures": ["LlamaForCausalLMEagle3"], "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 3]}}\n' > "$work/draft.json"
status=0
for arch in llama qwen3 qwen3_moe; do
  start=$(date +%s)
  PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" timeout "$step_timeout" "$PY" -m flowtrace probe engine --engine vllm \
    --device cuda --engine-python "$VENV/bin/python" --target-config "$root/tests/probe/engine_configs/$arch.json" \
    --draft-config "$work/draft.json" --format json -o "$work/$arch.json"
  rc=$?
  echo "$arch: exit $rc in $(( $(date +%s) - start )) s" >&2
  [ -f "$work/$arch.json" ] && cat "$work/$arch.json"
  [ "$rc" -eq 0 ] || status=1
done
exit $status
