#!/usr/bin/env bash
# bazel with the right configuration for this machine: --config=cuda when the
# CUDA toolkit is installed (no GPU is needed to build), CPU-only otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
cmd="$1"; shift
extra=()
if [ -x /usr/local/cuda/bin/nvcc ] && [ "${EXPERTD_CUDA:-auto}" != 0 ]; then
  extra+=(--config=cuda)
fi
exec bazel "$cmd" "${extra[@]}" "$@"
