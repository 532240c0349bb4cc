#!/usr/bin/env bash
# One round of GPU checks on a lent device machine, sized to a short lease:
# every GPU test (tools/gpu_check.sh run), the gpt_oss fixture against
# transformers itself (on the CPU, in parallel), a short GPU decode benchmark
# and the transformers GPU peer at the same shape. Each stage has its own
# time limit, so the logs are packed even when one hangs.
#
# The device tool sends the working tree plus the carried paths, 64 MiB in
# all; the tree alone is ~100 MB (tokenizer test data, training goldens) and
# the bundle 62 MB. So, here:
#   bash tools/device_round.sh prepare   builds the bundle (tools/gpu_check.sh
#       bundle), packs it into .device/pkg/bundle.tar.xz (~6 MB) and deletes
#       from the working tree the tracked files no GPU test reads (they must
#       be unmodified; ~70 MB); prints what would travel
#   run(command="bash tools/device_round.sh", carry=[".device/pkg"], timeout_s=440)
#   bash tools/device_round.sh restore   puts those files back (git checkout)
# Stages can be chosen there: DEVICE_STAGES="tests hf bench peer" (default).
# Everything lands in $OUT/round.tgz plus $OUT/summary.txt (the device tool
# returns at most 8 files).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

# Tracked files the GPU tests do not read: left behind while the tree travels.
bulky_files() { git ls-files models/tokenizer/testdata '*train_golden.json'; }
case "${1:-}" in
  prepare)
    if [ -n "$(git status --porcelain -- models/tokenizer/testdata '*train_golden.json')" ]; then
      echo "uncommitted changes under the files prepare would delete; commit them first"
      exit 2
    fi
    bash tools/gpu_check.sh bundle || exit 1
    mkdir -p .device/pkg
    tar cJf .device/pkg/bundle.tar.xz -C .device cuda || exit 1
    bulky_files | xargs rm -f
    travels=$( (git ls-files -z; git ls-files -z --others --exclude-standard) \
      | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
    carried=$(du -cb .device/pkg | tail -1 | cut -f1)
    echo "travels: tree $((travels / 1048576)) MiB + .device/pkg $((carried / 1048576)) MiB (limit 64)"
    echo "afterwards: bash tools/device_round.sh restore"
    exit 0
    ;;
  restore)
    git checkout -- models/tokenizer/testdata
    git ls-files -z '*train_golden.json' | xargs -0 git checkout --
    git status --short
    exit 0
    ;;
esac
FINAL=${OUT:-/tmp/expertd-final}
LOGS=/tmp/expertd-out
mkdir -p "$FINAL" "$LOGS"
stages=${DEVICE_STAGES:-tests hf bench peer}
summary="$FINAL/summary.txt"
: > "$summary"
if [ ! -d .device/cuda ] && [ -f .device/pkg/bundle.tar.xz ]; then
  tar xJf .device/pkg/bundle.tar.xz -C .device || exit 2
fi
pack() { tar czf "$FINAL/round.tgz" -C "$LOGS" . 2>/dev/null; }
trap pack EXIT

# NCCL and cuBLAS may live in the Python wheels rather than the toolkit.
extra=""
for d in $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
  for lib in "$d"/nvidia/*/lib "$d"/nvidia/cu13/lib; do
    [ -d "$lib" ] && extra="$extra:$lib"
  done
done
export LD_LIBRARY_PATH="/usr/local/cuda/lib64${extra}:${LD_LIBRARY_PATH:-}"
{
  nvidia-smi -L
  echo "libraries:" /usr/local/cuda/lib64/libnccl* /usr/local/cuda/lib64/libcublasLt*
  echo "wheel lib dirs: $extra"
} 2>&1 | tee -a "$summary"

hf_pid=""
if [[ " $stages " == *" hf "* ]]; then
  timeout 240 python3 tools/fixtures/check_with_transformers.py tests/data/fixtures/gpt_oss \
    > "$LOGS/hf_gpt_oss.txt" 2>&1 &
  hf_pid=$!
fi

if [[ " $stages " == *" tests "* ]]; then
  OUT=$LOGS GPU_CHECK_TIMEOUT_S=${GPU_CHECK_TIMEOUT_S:-60} timeout 240 \
    bash tools/gpu_check.sh run "${DEVICE_TEST_FILTER:-}" 2>&1 | tee -a "$summary"
fi

if [[ " $stages " == *" bench "* ]]; then
  echo "== cuda_decode_benchmark (OLMoE shape, 2 layers)" | tee -a "$summary"
  OUT=$LOGS timeout 80 bash engine/backend/cuda/tools/run_on_device.sh bench --models=olmoe \
    --layers=2 --steps=32 --warmup=8 --routing_steps=8 --batches=1,8 --skews=0 --offload \
    --prefetch=none,all --pack_dir=/tmp/expertd-packs 2>&1 | tee -a "$summary"
  tail -20 "$LOGS/bench.stderr" >> "$summary" 2>/dev/null
fi

if [[ " $stages " == *" peer "* ]]; then
  echo "== transformers peer (same shape)" | tee -a "$summary"
  OUT=$LOGS timeout 70 bash engine/backend/cuda/tools/run_on_device.sh peer --models=olmoe \
    --layers=2 --batches=1,8 --steps=32 --warmup=8 2>&1 | tee -a "$summary"
  tail -5 "$LOGS/peer.stderr" >> "$summary" 2>/dev/null
fi

if [ -n "$hf_pid" ]; then
  wait "$hf_pid"
  echo "== gpt_oss fixture vs transformers (exit $?)" >> "$summary"
  tail -12 "$LOGS/hf_gpt_oss.txt" >> "$summary"
fi
echo "round done" >> "$summary"
