#!/usr/bin/env bash
# Serving latency with and without a training load on the same machine:
# Generate TPOT p50/p99 from expert-bench against one expertd, measured in
# alternating rounds: idle, then while training runs, repeated ROUNDS times
# (the machine may be shared and noisy, so the A/B pairs are interleaved
# rather than run in two blocks).
#
#   tools/bench_serving_under_training.sh MODEL_DIR OUT_DIR
# Environment (defaults): LOAD=job SERVE_THREADS=1 TRAIN_THREADS=1 ROUNDS=2
#   CONCURRENCY=1 DURATION_S=20 PORT=50481
# LOAD=job: the load is a real fine-tune job inside the daemon. expertd runs
#   with --data_dir (a fresh one under OUT_DIR), --train_threads=TRAIN_THREADS
#   and an admin token. The dataset is uploaded once (`expertctl files
#   upload`); each training window submits one full fine-tune job over it
#   (`expertctl finetune create`) whose single epoch outlasts the window,
#   waits until the job has finished a step, measures, then cancels the job
#   (`expertctl finetune cancel`).
# LOAD=trainer: the load is a standalone `expertd-train` process with
#   --threads=TRAIN_THREADS (the stand-in used before the job system landed).
# Needs: bazel-bin/server/expertd, bazel-bin/client/expert-bench,
#   bazel-bin/client/expertctl, and for LOAD=trainer
#   bazel-bin/engine/train/tools/expertd-train (tools/bazel.sh build them).
# Prints one line per measurement (with the 1-minute load average at its
# end) and writes OUT_DIR/<label>.json.
set -euo pipefail
model_dir="$1"
out_dir="$2"
load="${LOAD:-job}"
serve_threads="${SERVE_THREADS:-1}"
train_threads="${TRAIN_THREADS:-1}"
rounds="${ROUNDS:-2}"
concurrency="${CONCURRENCY:-1}"
duration="${DURATION_S:-20}"
port="${PORT:-50481}"
case "$load" in job | trainer) ;; *) echo "LOAD must be job or trainer" >&2; exit 2 ;; esac
mkdir -p "$out_dir"
ctl=(bazel-bin/client/expertctl --server=127.0.0.1:"$port")

# Training data, seeded random token ids: for the trainer one 4 x 128 batch;
# for a job 4096 examples of 128 tokens (rows of max_seq_len 128: 1024 steps
# of 4 rows, so one epoch outlasts a window and the job never checkpoints).
python3 - "$out_dir" <<'PY'
import json, random, sys
r = random.Random(1)
json.dump({"input_ids": [[r.randrange(3, 2048) for _ in range(128)] for _ in range(4)]},
          open(sys.argv[1] + "/train_batch.json", "w"))
with open(sys.argv[1] + "/train.jsonl", "w") as f:
    for _ in range(4096):
        f.write(json.dumps({"token_ids": [r.randrange(3, 2048) for _ in range(128)]}) + "\n")
PY

daemon_flags=()
if [ "$load" = job ]; then
  rm -rf "$out_dir/data"
  mkdir -p "$out_dir/data"
  head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$out_dir/admin-token"
  chmod 600 "$out_dir/admin-token"
  daemon_flags=(--data_dir="$out_dir/data" --train_threads="$train_threads"
    --admin_token_file="$out_dir/admin-token")
  ctl+=(--admin_token_file="$out_dir/admin-token")
  # Rows of 128 tokens, as the trainer's batch (unset, packing fills rows up
  # to the model's context and one step takes minutes).
  echo '{"hyperparameters": {"max_seq_len": 128}}' > "$out_dir/job_spec.json"
fi
bazel-bin/server/expertd --model_dir="$model_dir" --listen=127.0.0.1:"$port" \
  --backend=cpu --threads="$serve_threads" --log_requests=false --log_format=text \
  "${daemon_flags[@]}" > "$out_dir/expertd.log" 2>&1 &
daemon=$!
train=""
job=""
cleanup() {
  if [ -n "$train" ]; then kill "$train" 2> /dev/null || true; fi
  if [ -n "$job" ]; then "${ctl[@]}" finetune cancel "$job" > /dev/null 2>&1 || true; fi
  kill "$daemon" 2> /dev/null || true
  wait 2> /dev/null || true
}
trap cleanup EXIT
for _ in $(seq 1 600); do
  "${ctl[@]}" health > /dev/null 2>&1 && break
  sleep 0.1
done
"${ctl[@]}" health > /dev/null || { echo "expertd did not come up:"; cat "$out_dir/expertd.log"; exit 1; }

json_field() {  # $1 = field; reads one JSON object on stdin
  python3 -c 'import json, sys; print(json.load(sys.stdin).get(sys.argv[1], ""))' "$1"
}

file_id=""
if [ "$load" = job ]; then
  file_id=$("${ctl[@]}" files upload "$out_dir/train.jsonl" | json_field id)
  echo "uploaded $file_id"
fi

measure() {  # $1 = label
  bazel-bin/client/expert-bench --server=127.0.0.1:"$port" --concurrency="$concurrency" \
    --duration_s="$duration" --warmup_s=3 --input_len=128 --output_len=128 --ignore_eos \
    --seed=1 --out_dir="$out_dir" --label="$1" > "$out_dir/$1.txt" 2>&1
  python3 - "$out_dir/$1.json" "$1" <<'PY'
import json, os, sys
j = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]:>14}  completed={j.get('completed')}  failed={j.get('failed')}  "
      f"TPOT p50={j['median_tpot_ms']:.2f} ms  p99={j['p99_tpot_ms']:.2f} ms  "
      f"ITL p99={j['p99_itl_ms']:.2f} ms  output tok/s={j.get('output_throughput', 0):.0f}  "
      f"loadavg={os.getloadavg()[0]:.2f}")
PY
}

start_job() {  # $1 = round; sets $job once the job has finished a step
  job=$("${ctl[@]}" finetune create --spec_json="$out_dir/job_spec.json" \
    --training_file="$file_id" --epochs=1 --batch_size=4 --learning_rate=1e-5 --scope=full --job_seed=1 --suffix="bench-$1" | json_field id)
  local step=0 status=""
  for _ in $(seq 1 1200); do  # 120 s for validation, loading and a first step
    "${ctl[@]}" finetune get "$job" > "$out_dir/job-$1.json"
    status=$(json_field status < "$out_dir/job-$1.json")
    step=$(python3 -c 'import json, sys; print(json.load(sys.stdin).get("progress", {}).get("step", 0))' \
      < "$out_dir/job-$1.json")
    case "$status" in *RUNNING* | *running*) [ "$step" -ge 1 ] && return 0 ;; esac
    case "$status" in *SUCCEEDED* | *FAILED* | *CANCELLED* | *succeeded* | *failed* | *cancelled*)
      echo "job $job ended before the window:"; cat "$out_dir/job-$1.json"; exit 1 ;;
    esac
    sleep 0.1
  done
  echo "job $job did not reach its first step in 120 s:"; cat "$out_dir/job-$1.json"; exit 1
}

stop_job() {  # $1 = round
  "${ctl[@]}" finetune get "$job" > "$out_dir/job-$1-end.json"
  local status
  status=$(json_field status < "$out_dir/job-$1-end.json")
  case "$status" in *RUNNING* | *running*) ;; *)
    echo "job $job was no longer running at the end of the window:"
    cat "$out_dir/job-$1-end.json"; exit 1 ;;
  esac
  "${ctl[@]}" finetune cancel "$job" > /dev/null
  job=""
}

start_trainer() {  # $1 = round
  bazel-bin/engine/train/tools/expertd-train --model="$model_dir" \
    --batch="$out_dir/train_batch.json" --steps=100000 --lr=1e-4 --weight_decay=0.01 \
    --clip_norm=1.0 --threads="$train_threads" > /dev/null 2> "$out_dir/train-$1.log" &
  train=$!
  sleep 5  # let the trainer get past loading into its step loop
  kill -0 "$train" || { echo "expertd-train exited early:"; cat "$out_dir/train-$1.log"; exit 1; }
}

stop_trainer() {
  kill "$train"
  wait "$train" 2> /dev/null || true
  train=""
}

for round in $(seq 1 "$rounds"); do
  measure "idle-$round"
  if [ "$load" = job ]; then start_job "$round"; else start_trainer "$round"; fi
  measure "training-$round"
  if [ "$load" = job ]; then stop_job "$round"; else stop_trainer; fi
done
