#!/bin/bash
# MPMoE and multi-device sweep on one zoo Mixtral (16 experts, as offload_sweep.sh
# builds it): activation memory, restore traffic and step time against the
# micro-batch count and restore strategy, then the expert placement's imbalance
# over --train_devices. Prints one line per run (mean of steps 2..N). Usage (from the
# repository root, after
# `tools/bazel.sh build //engine/train/tools:expertd-train //models/zoo:expertd-zoo`):
#   engine/train/bench/mpmoe_sweep.sh [STEPS]
set -euo pipefail
steps=${1:-4}
work=${TMPDIR:-/tmp}/expertd_mpmoe_sweep
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
zoo=bazel-bin/models/zoo/expertd-zoo
train=bazel-bin/engine/train/tools/expertd-train
python3 -c "
import json, random
random.seed(1)
json.dump({'input_ids': [[random.randrange(512) for _ in range(64)] for _ in range(4)]},
          open('$work/batch.json', 'w'))"
"$zoo" --arch=mixtral --preset=tiny --hidden=128 --layers=2 --experts=16 --top_k=2 \
  --moe_intermediate=256 --heads=4 --kv_heads=2 --head_dim=32 --vocab=512 --dtype=f32 \
  --out="$work/e16" --if_missing >/dev/null
run() {
  "$train" --model="$work/e16" --batch="$work/batch.json" --steps=$steps --threads=2 \
    --device_memory_bytes=$((1 << 40)) "$@" | python3 -c "
import json, sys
j = json.load(sys.stdin)['schedule'][1:]
mean = lambda k: sum(s[k] for s in j) / len(j)
last = j[-1]
print('$*' or '(none)', '| n', last['micro_batches'], '| restore', last['activation_restore'],
      '| predicted', max(s['predicted_peak_activation_bytes'] for s in j),
      '| measured', max(s['measured_peak_activation_bytes'] for s in j),
      '| recomputed FLOPs/step %.0f' % mean('recomputed_flops'),
      '| offloaded bytes/step %.0f' % mean('offloaded_activation_bytes'),
      '| step %.3f s' % mean('step_seconds'),
      '| imbalance', [round(v, 3) for v in last.get('device_imbalance', [])],
      'measured', [round(v, 3) for v in last.get('measured_device_imbalance', [])],
      '| pinned', last.get('pinned_experts', []),
      '| GFLOP/s %.1f' % (last.get('placement_flops_per_second', 0) / 1e9))"
}
run
for n in 2 4 8; do
  for restore in recompute offload; do run --micro_batches=$n --activation_restore=$restore; done
done
run --micro_batches=0
for d in 2 4; do run --train_devices=$d; done
