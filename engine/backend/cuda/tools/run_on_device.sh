#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, with .device/cuda/ built
# by make_device_bundle.sh. Writes every log under $OUT (default /tmp/expertd-out).
#   run_on_device.sh tests         every GPU test in the bundle, with a summary (tools/gpu_check.sh run)
#   run_on_device.sh sanitize      the kernel tests under compute-sanitizer memcheck + racecheck
#   run_on_device.sh bench ARGS    cuda_decode_benchmark ARGS
#   run_on_device.sh peer ARGS     the transformers peer (hf_peer.py ARGS)
set -uo pipefail
cd "$(dirname "$0")/../../../.."
B=.device/cuda
OUT=${OUT:-/tmp/expertd-out}
mkdir -p "$OUT/tmp"
mode=${1:-tests}
shift || true
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true

# Plain start, or this build machine's loader and glibc when the local one is older.
LAUNCH=(env "LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}")
if ! "${LAUNCH[@]}" "$B/bin/cuda_backend_test" --gtest_list_tests > /dev/null 2>&1; then
  LAUNCH=("$B/glibc/ld-linux-x86-64.so.2" --library-path "$B/lib:$B/glibc:/usr/local/cuda/lib64")
  echo "using the bundled loader and glibc" | tee -a "$OUT/launch.txt"
fi

case "$mode" in
  tests)
    OUT="$OUT" exec bash tools/gpu_check.sh run "$@"
    ;;
  sanitize)
    SAN=${COMPUTE_SANITIZER:-/usr/local/cuda/bin/compute-sanitizer}
    [ -x "$SAN" ] || { echo "no compute-sanitizer at $SAN"; exit 1; }
    status=0
    for tool in memcheck racecheck; do
      for t in cuda_ops_test cuda_attention_test cuda_matmul_test cuda_train_ops_test; do
        [ -x "$B/bin/$t" ] || continue
        "$SAN" --tool "$tool" --error-exitcode 3 "${LAUNCH[@]}" "$B/bin/$t" > "$OUT/$tool-$t.log" 2>&1 || status=1
        echo "== $tool $t: $(tail -1 "$OUT/$tool-$t.log")"
      done
    done
    exit $status
    ;;
  bench)
    "${LAUNCH[@]}" "$B/bin/cuda_decode_benchmark" "$@" 2> "$OUT/bench.stderr" | tee "$OUT/bench.md"
    ;;
  peer)
    python3 engine/backend/cuda/bench/hf_peer.py "$@" 2> "$OUT/peer.stderr" | tee "$OUT/peer.md"
    ;;
  *)
    echo "unknown mode $mode (tests, sanitize, bench, peer)"
    exit 2
    ;;
esac
