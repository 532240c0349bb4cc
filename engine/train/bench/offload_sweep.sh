#!/bin/bash
# Expert offload sweep: zoo models with 8..64 experts, trained with and
# without --offload_experts on one device budget. Prints one line per run:
# experts, mode, placement, peak device bytes, tokens/s (mean of steps 2..N),
# step seconds, upload seconds. Usage (from the repository root, after
# `tools/bazel.sh build //engine/train/tools:expertd-train //models/zoo:expertd-zoo`):
#   engine/train/bench/offload_sweep.sh [DEVICE_BYTES] [STEPS] [EXTRA expertd-train FLAGS...]
set -euo pipefail
device=${1:-40000000}
steps=${2:-4}
shift 2 || true
work=${TMPDIR:-/tmp}/expertd_offload_sweep
mkdir -p "$work"
zoo=bazel-bin/models/zoo/expertd-zoo
train=bazel-bin/engine/train/tools/expertd-train
python3 -c "
import json, random
random.seed(1)
json.dump({'input_ids': [[random.randrange(512) for _ in range(64)] for _ in range(4)]},
          open('$work/batch.json', 'w'))"
tokens=256
for e in 8 16 32 64; do
  "$zoo" --arch=mixtral --preset=tiny --hidden=128 --layers=2 --experts=$e --top_k=2 \
    --moe_intermediate=256 --heads=4 --kv_heads=2 --head_dim=32 --vocab=512 --dtype=f32 \
    --out="$work/e$e" --if_missing >/dev/null
  for mode in unlimited resident offload; do
    flags="--device_memory_bytes=$device"
    [[ $mode == unlimited ]] && flags="--device_memory_bytes=$((1 << 40))"
    [[ $mode == offload ]] && flags="$flags --offload_experts"
    if out=$("$train" --model="$work/e$e" --batch="$work/batch.json" --steps=$steps --threads=2 \
        $flags "$@" 2>"$work/err"); then
      echo "$out" | python3 -c "
import json, sys
j = json.load(sys.stdin)['schedule'][1:]
step = sum(s['step_seconds'] for s in j) / len(j)
up = sum(s['upload_seconds'] for s in j) / len(j)
print('$e', '$mode', j[-1]['expert_placement'], max(s['peak_device_bytes'] for s in j),
      '%.0f' % ($tokens / step), '%.4f' % step, '%.4f' % up)"
    else
      echo "$e $mode FAILED: $(head -c 160 "$work/err")"
    fi
  done
done
