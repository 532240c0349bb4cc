#!/usr/bin/env bash
# Runs the tests under a sanitizer (gcc's, through a Bazel config in
# .bazelrc; outputs go to their own bazel-out directory, so switching
# between sanitizers and the normal build does not rebuild the others):
#
#   tools/sanitize.sh asan   [TARGETS...]   # AddressSanitizer + LeakSanitizer; default //...
#   tools/sanitize.sh ubsan  [TARGETS...]   # UndefinedBehaviorSanitizer (any report fails); default //...
#   tools/sanitize.sh tsan   [TARGETS...]   # ThreadSanitizer; default: the concurrency tests
#
# tsan needs an abseil built with -fsanitize=thread (Debian's is not, and an
# uninstrumented absl::Mutex makes every handoff look like a race): build it
# once with tools/build_tsan_abseil.sh; the tests load it through
# LD_LIBRARY_PATH ($EXPERTD_TSAN_ABSL, default ~/.cache/expertd/absl-tsan).
# tools/tsan.supp holds the few suppressions, each with its reason;
# tools/lsan.supp the one LeakSanitizer needs (a leak inside Debian's c-ares).
#
# The CUDA backend is left out (nvcc does not take these flags; GPU tests
# skip here anyway). Extra Bazel flags after `--`, e.g. `-- --runs_per_test=5`.
# Run before landing concurrency changes; CI runs the normal suite.
set -euo pipefail
cd "$(dirname "$0")/.."

# The code that runs threads: scheduler, expert store, transfer engine,
# prefetcher, metrics port, the daemon end to end, and the threaded code below.
TSAN_TARGETS=(
  //server:scheduler_test
  //server/metrics:http_server_test
  //server/metrics:registry_test
  //engine/experts:expert_store_test
  //engine/experts:transfer_pool_test
  //engine/experts:offload_engine_test
  //engine/experts:pregate_engine_test
  //tests:generate_test
  //tests:lifecycle_test
  //tests:daemon_test
  //tests:offload_daemon_test
  # Tokenizer pool and its offload, the OpenAI front end, checkpoint
  # activation, fine-tune jobs, in-process collectives and rank threads,
  # multi-device engine, training offload and pipeline, the CPU thread pool.
  //server:tokenize_pool_test
  //server:tokenize_offload_test
  //server/openai:all
  //server:checkpoint_activation_test
  //server/jobs:job_manager_test
  //engine/parallel:in_process_collectives_test
  //engine/parallel:rank_threads_test
  //engine/parallel:rendezvous_test
  //tests/golden:multi_device_engine_test
  //engine/train:optimizer_worker_test
  //engine/train:device_group_offload_test
  //engine/train:expert_tier_test
  //engine/train:expert_uploader_test
  //engine/train:micro_batch_pipeline_test
  //tests/golden:train_offload_accumulation_test
  //engine/backend/cpu:thread_pool_test
  # Not //server:job_rpcs_test: about 1 run in 13 reports WatchJobReactor's
  # mutex as raced with its own allocation, ordered only through gRPC's
  # uninstrumented core (StartWrite -> OnWriteDone); docs/build.md, Sanitizers.
)

kind=${1:-}
shift || true
targets=()
extra=()
while (($#)); do
  if [ "$1" = -- ]; then shift; extra=("$@"); break; fi
  targets+=("$1"); shift
done
case "$kind" in
  asan|ubsan) ((${#targets[@]})) || targets=(//...) ;;
  tsan) ((${#targets[@]})) || targets=("${TSAN_TARGETS[@]}") ;;
  *) sed -n '2,13p' "$0"; exit 2 ;;
esac
# Only existing test targets (a list may name tests another tree lacks).
existing=()
for t in "${targets[@]}"; do
  if [[ "$t" == *"..."* ]] || bazel query "$t" >/dev/null 2>&1; then existing+=("$t"); fi
done
if [ "$kind" = asan ]; then
  extra=(--test_env=LSAN_OPTIONS="suppressions=$PWD/tools/lsan.supp" "${extra[@]}")
fi
if [ "$kind" = tsan ]; then
  absl=${EXPERTD_TSAN_ABSL:-$HOME/.cache/expertd/absl-tsan}
  if [ ! -f "$absl/lib/libabsl_synchronization.so.20220623" ]; then
    echo "sanitize.sh: no ThreadSanitizer abseil in $absl; run tools/build_tsan_abseil.sh" >&2
    exit 1
  fi
  extra=(--test_env=LD_LIBRARY_PATH="$absl/lib"
    --test_env=TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tools/tsan.supp"
    "${extra[@]}")
fi
EXPERTD_CUDA=0 exec tools/bazel.sh test --config="$kind" --keep_going "${existing[@]}" "${extra[@]}"
