#!/bin/bash
# Offloaded experts over several training devices: the zoo Mixtral with 64
# experts a layer (as offload_sweep.sh builds it), --offload_experts on a
# device budget per device, --train_devices=1..4. Prints one line per run
# (mean of steps 2..N): step seconds, what the placement modelled the experts
# to move against what the devices moved (bytes, seconds), pinned experts per
# MoE layer, each device's peak bytes and cached experts. Usage (from the
# repository root, after
# `tools/bazel.sh build //engine/train/tools:expertd-train //models/zoo:expertd-zoo`):
#   engine/train/bench/devices_offload_sweep.sh [DEVICE_BYTES] [STEPS]
set -euo pipefail
device=${1:-40000000}
steps=${2:-4}
work=${TMPDIR:-/tmp}/expertd_devices_offload_sweep
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
zoo=bazel-bin/models/zoo/expertd-zoo
train=bazel-bin/engine/train/tools/expertd-train
python3 -c "
import json, random
random.seed(1)
json.dump({'input_ids': [[random.randrange(512) for _ in range(64)] for _ in range(4)]},
          open('$work/batch.json', 'w'))"
"$zoo" --arch=mixtral --preset=tiny --hidden=128 --layers=2 --experts=64 --top_k=2 \
  --moe_intermediate=256 --heads=4 --kv_heads=2 --head_dim=32 --vocab=512 --dtype=f32 \
  --out="$work/e64" --if_missing >/dev/null
for n in 1 2 3 4; do
  "$train" --model="$work/e64" --batch="$work/batch.json" --steps=$steps --threads=2 \
    --offload_experts --device_memory_bytes=$device --train_devices=$n | python3 -c "
import json, sys
j = json.load(sys.stdin)['schedule'][1:]
mean = lambda k: sum(s.get(k, 0) for s in j) / len(j)
last = j[-1]
print('N $n', '| step %.3f s' % mean('step_seconds'),
      '| uploaded %.0f B %.4f s' % (mean('uploaded_bytes'), mean('upload_seconds')),
      '| modelled %.0f B %.5f s' % (mean('placed_upload_bytes'), mean('placed_upload_seconds')),
      '| measured %.0f B %.5f s' % (mean('measured_placed_upload_bytes'),
                                     mean('measured_placed_upload_seconds')),
      '| pinned', last.get('pinned_experts', []),
      '| device peaks', last.get('device_peak_bytes', [last['peak_device_bytes']]),
      '| cached', last.get('device_cached_experts', []))"
done
