#!/usr/bin/env bash
# Soak: the daemon on a zoo model under a steady expert-bench load, with
# deadlines and client cancels mixed in, for a long time; the daemon's RSS,
# open fds and threads are sampled into a CSV and drawn as an SVG.
#
#   tools/soak.sh [--minutes=30] [--rate=4] [--sample_s=5] [--out=out/soak]
#                 [--svg=docs/images/soak.svg] [-- EXPERTD_FLAGS...]
#
# Load, all at once for the whole run:
#   * expert-bench at --rate requests/s (Poisson), prompts 16..128 tokens,
#     8..64 new tokens, 60 s deadline: these must all end OK;
#   * expert-bench at rate/4, 8..2048 new tokens, with a 0.25 s deadline: many
#     end DEADLINE_EXCEEDED (expected), mid-prefill or mid-decode;
#   * a loop of expertctl generate calls (4000 new tokens) killed (SIGKILL)
#     after 0.3..0.8 s: the daemon sees the stream cancelled.
# Writes OUT/samples.csv (t_s,rss_kib,fds,threads), OUT/metrics_end.txt, the
# bench reports and OUT/summary.txt (every status with its message); exits
# non-zero if the daemon died or the steady bench saw an error. Needs:
# tools/bazel.sh build //server:expertd //client:expert-bench //client:expertctl
# //tests/data:zoo_default.
set -uo pipefail
cd "$(dirname "$0")/.."

minutes=30 rate=4 sample_s=5 out=out/soak svg=docs/images/soak.svg
extra=()
while (($#)); do
  case "$1" in
    --minutes=*) minutes="${1#*=}" ;;
    --rate=*) rate="${1#*=}" ;;
    --sample_s=*) sample_s="${1#*=}" ;;
    --out=*) out="${1#*=}" ;;
    --svg=*) svg="${1#*=}" ;;
    --) shift; extra=("$@"); break ;;
    *) sed -n '2,20p' "$0"; exit 2 ;;
  esac
  shift
done
# The default configuration's outputs (bazel-bin follows the last build's
# configuration, e.g. a sanitizer's).
bin=bazel-out/k8-fastbuild/bin
model=$bin/tests/data/zoo_default
for f in $bin/server/expertd $bin/client/expert-bench $bin/client/expertctl $model/config.json; do
  [ -e "$f" ] || { echo "soak.sh: missing $f (build it first, see the header)" >&2; exit 2; }
done
mkdir -p "$out/bin"
rm -f "$out/ports.json"
# Copies: a later build (another config moves bazel-bin) must not pull the
# binaries from under a running soak.
cp -f $bin/server/expertd $bin/client/expert-bench $bin/client/expertctl "$out/bin/"
rm -rf "$out/model" && cp -rL "$model" "$out/model"
bin_dir=$out/bin
model=$out/model
duration=$((minutes * 60))

$bin_dir/expertd --model_dir="$model" --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 \
  --port_file="$out/ports.json" --backend=cpu --threads=1 --log_format=json \
  --log_requests=true "${extra[@]}" \
  >"$out/expertd.log" 2>&1 &
daemon=$!
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  kill "$daemon" 2>/dev/null
  wait 2>/dev/null
}
trap cleanup EXIT
for _ in $(seq 600); do
  [ -s "$out/ports.json" ] && break
  kill -0 "$daemon" 2>/dev/null || { echo "soak.sh: expertd exited" >&2; cat "$out/expertd.log"; exit 1; }
  sleep 0.1
done
grpc=$(sed 's/.*"grpc_port":\([0-9]*\).*/\1/' "$out/ports.json")
metrics=$(sed 's/.*"metrics_port":\([0-9]*\).*/\1/' "$out/ports.json")
until $bin_dir/expertctl --server=127.0.0.1:$grpc health >/dev/null 2>&1; do
  kill -0 "$daemon" 2>/dev/null || { echo "soak.sh: expertd exited" >&2; exit 1; }
  sleep 0.5
done
echo "soak: expertd pid $daemon grpc $grpc metrics $metrics, $minutes min at $rate req/s" >&2

bench=(--server=127.0.0.1:$grpc --duration_s="$duration" --input_len=uniform:16,128
  --ignore_eos --out_dir="$out" --progress_interval_s=0)
$bin_dir/expert-bench "${bench[@]}" --output_len=uniform:8,64 --request_rate="$rate" \
  --timeout_s=60 --label=steady >"$out/steady.txt" 2>&1 &
steady=$!
pids+=($steady)
# Outputs up to 2048 tokens and kills of calls asking for 4000: on an idle
# machine the zoo model decodes ~3500 tokens/s, so shorter requests would all
# finish before their deadline or their kill (no cancel, no deadline tested).
$bin_dir/expert-bench "${bench[@]}" --output_len=uniform:8,2048 \
  --request_rate="$(echo "$rate / 4" | bc -l)" --timeout_s=0.25 --label=deadlines \
  >"$out/deadlines.txt" 2>&1 &
deadlines=$!
pids+=($deadlines)
(
  end=$((SECONDS + duration)) n=0
  while ((SECONDS < end)); do
    n=$((n + 1))
    timeout -s KILL "0.$((3 + n % 6))" $bin_dir/expertctl --server=127.0.0.1:$grpc generate \
      --prompt="cancel me $n" --max_new_tokens=4000 --temperature=0 >/dev/null 2>&1
    echo "$n" >"$out/cancels.count"
    sleep 1
  done
) 2>/dev/null &
pids+=($!)

echo "t_s,rss_kib,fds,threads" >"$out/samples.csv"
start=$SECONDS
while ((SECONDS - start < duration)); do
  kill -0 "$daemon" 2>/dev/null || { echo "soak.sh: expertd died" >&2; break; }
  rss=$(awk '/^VmRSS/ {print $2}' /proc/$daemon/status)
  threads=$(awk '/^Threads/ {print $2}' /proc/$daemon/status)
  fds=$(ls /proc/$daemon/fd | wc -l)
  echo "$((SECONDS - start)),$rss,$fds,$threads" >>"$out/samples.csv"
  sleep "$sample_s"
done
wait "$steady"
steady_rc=$?
wait "$deadlines"  # its CSV is read below
alive=0
kill -0 "$daemon" 2>/dev/null && alive=1
curl -s "http://127.0.0.1:$metrics/metrics" >"$out/metrics_end.txt" || true
{
  echo "duration_s=$((SECONDS - start)) samples=$(($(wc -l <"$out/samples.csv") - 1))" \
    "daemon_alive=$alive steady_bench_rc=$steady_rc cancels=$(cat "$out/cancels.count" 2>/dev/null)"
  grep '^expertd:requests_total' "$out/metrics_end.txt"
  # Every status with its message, the daemon's (from the request log) and
  # each bench's; statuses other than OK, CANCELLED and DEADLINE_EXCEEDED are
  # marked.
  python3 tools/soak_statuses.py "$out/expertd.log" "$out/steady.csv" "$out/deadlines.csv"
  python3 tools/soak_plot.py "$out/samples.csv" "$svg"
} | tee "$out/summary.txt"
((alive && steady_rc == 0))
