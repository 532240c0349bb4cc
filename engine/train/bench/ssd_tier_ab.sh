#!/bin/bash
# SSD tier A/B: the same model and device budget trained host-only
# (--offload_experts) and host+SSD (plus --host_memory_bytes, --ssd_dir),
# alternating runs (the machine is shared and noisy). Prints one line per run:
# mode, placement, peak device bytes, step seconds and tokens/s (mean of
# steps 2..N), SSD bytes read / written per step, pins that waited, prefetches,
# seconds waited. Usage (from the repository root, after
# `tools/bazel.sh build //engine/train/tools:expertd-train //models/zoo:expertd-zoo`):
#   engine/train/bench/ssd_tier_ab.sh [EXPERTS] [HOST_BYTES] [PAIRS] [STEPS] [EXTRA expertd-train FLAGS...]
set -euo pipefail
experts=${1:-64}
host=${2:-25165824}
pairs=${3:-3}
steps=${4:-4}
shift 4 || shift $#
work=${TMPDIR:-/tmp}/expertd_ssd_tier_ab
mkdir -p "$work/ssd"
trap 'rm -rf "$work"' EXIT  # the model, the batch and any SSD tier file
zoo=bazel-bin/models/zoo/expertd-zoo
train=bazel-bin/engine/train/tools/expertd-train
python3 -c "
import json, random
random.seed(1)
json.dump({'input_ids': [[random.randrange(512) for _ in range(64)] for _ in range(4)]},
          open('$work/batch.json', 'w'))"
"$zoo" --arch=mixtral --preset=tiny --hidden=128 --layers=2 --experts="$experts" --top_k=2 \
  --moe_intermediate=256 --heads=4 --kv_heads=2 --head_dim=32 --vocab=512 --dtype=f32 \
  --out="$work/model" --if_missing >/dev/null
for ((pair = 0; pair < pairs; ++pair)); do
  for mode in host ssd; do
    flags="--offload_experts --device_memory_bytes=40000000"
    [[ $mode == ssd ]] && flags="$flags --host_memory_bytes=$host --ssd_dir=$work/ssd"
    "$train" --model="$work/model" --batch="$work/batch.json" --steps="$steps" --threads=2 \
      $flags "$@" 2>"$work/err" | python3 -c "
import json, sys
j = json.load(sys.stdin)['schedule'][1:]
mean = lambda k: sum(s.get(k, 0) for s in j) / len(j)
step = mean('step_seconds')
print('$mode', j[-1]['expert_placement'], max(s['peak_device_bytes'] for s in j),
      '%.3f s' % step, '%.0f tok/s' % (256 / step), 'read %d' % mean('ssd_read_bytes'),
      'written %d' % mean('ssd_written_bytes'), 'waits %.0f' % mean('ssd_waits'),
      'prefetches %.0f' % mean('ssd_prefetches'), 'waited %.3f s' % mean('ssd_wait_seconds'),
      'early %.0f' % mean('early_expert_updates'),
      'skipped %.0f unplanned %.0f' % (mean('ssd_skipped_uses'), mean('ssd_unplanned_pins')),
      'host peak %d of %d experts' % (max(s.get('ssd_host_peak_experts', 0) for s in j),
                                      j[-1].get('ssd_host_capacity_experts', 0)))"
  done
done
