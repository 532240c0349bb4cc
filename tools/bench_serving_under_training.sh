#!/usr/bin/env bash
# Serving latency with and without a training load on the same machine:
# Generate TPOT p50/p99 from expert-bench against one expertd, measured in
# alternating rounds: idle, then while `expertd-train` runs with a capped
# thread count, repeated ROUNDS times (the machine may be shared and noisy,
# so the A/B pairs are interleaved rather than run in two blocks).
#
#   tools/bench_serving_under_training.sh MODEL_DIR OUT_DIR
# Environment (defaults): SERVE_THREADS=1 TRAIN_THREADS=1 ROUNDS=2
#   CONCURRENCY=1 DURATION_S=20 PORT=50481
# Needs: bazel-bin/server/expertd, bazel-bin/client/expert-bench,
#   bazel-bin/engine/train/tools/expertd-train (tools/bazel.sh build them).
# Prints one line per measurement and writes OUT_DIR/<label>.json.
set -euo pipefail
model_dir="$1"
out_dir="$2"
serve_threads="${SERVE_THREADS:-1}"
train_threads="${TRAIN_THREADS:-1}"
rounds="${ROUNDS:-2}"
concurrency="${CONCURRENCY:-1}"
duration="${DURATION_S:-20}"
port="${PORT:-50481}"
mkdir -p "$out_dir"

# The training batch: 4 sequences of 128 random token ids (seeded).
python3 - "$out_dir/train_batch.json" <<'PY'
import json, random, sys
r = random.Random(1)
json.dump({"input_ids": [[r.randrange(3, 2048) for _ in range(128)] for _ in range(4)]},
          open(sys.argv[1], "w"))
PY

bazel-bin/server/expertd --model_dir="$model_dir" --listen=127.0.0.1:"$port" \
  --backend=cpu --threads="$serve_threads" --log_requests=false --log_format=text \
  > "$out_dir/expertd.log" 2>&1 &
daemon=$!
train=""
cleanup() {
  [ -n "$train" ] && kill "$train" 2> /dev/null || true
  kill "$daemon" 2> /dev/null || true
  wait 2> /dev/null || true
}
trap cleanup EXIT
for _ in $(seq 1 600); do
  bazel-bin/client/expertctl --server=127.0.0.1:"$port" health > /dev/null 2>&1 && break
  sleep 0.1
done

measure() {  # $1 = label
  bazel-bin/client/expert-bench --server=127.0.0.1:"$port" --concurrency="$concurrency" \
    --duration_s="$duration" --warmup_s=3 --input_len=128 --output_len=128 --ignore_eos \
    --seed=1 --out_dir="$out_dir" --label="$1" > "$out_dir/$1.txt" 2>&1
  python3 - "$out_dir/$1.json" "$1" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]:>14}  completed={j.get('completed')}  failed={j.get('failed')}  "
      f"TPOT p50={j['median_tpot_ms']:.2f} ms  p99={j['p99_tpot_ms']:.2f} ms  "
      f"ITL p99={j['p99_itl_ms']:.2f} ms  output tok/s={j.get('output_throughput', 0):.0f}")
PY
}

for round in $(seq 1 "$rounds"); do
  measure "idle-$round"
  bazel-bin/engine/train/tools/expertd-train --model="$model_dir" \
    --batch="$out_dir/train_batch.json" --steps=100000 --lr=1e-4 --weight_decay=0.01 \
    --clip_norm=1.0 --threads="$train_threads" > /dev/null 2> "$out_dir/train-$round.log" &
  train=$!
  sleep 5  # let the trainer get past loading into its step loop
  kill -0 "$train" || { echo "expertd-train exited early:"; cat "$out_dir/train-$round.log"; exit 1; }
  measure "training-$round"
  kill "$train"; wait "$train" 2> /dev/null || true
  train=""
done
