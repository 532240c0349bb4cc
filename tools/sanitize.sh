#!/usr/bin/env bash
# Runs the tests under a sanitizer (gcc's, through a Bazel config in
# .bazelrc; outputs go to their own bazel-out directory, so switching
# between sanitizers and the normal build does not rebuild the others):
#
#   tools/sanitize.sh asan   [TARGETS...]   # AddressSanitizer + LeakSanitizer; default //...
#   tools/sanitize.sh ubsan  [TARGETS...]   # UndefinedBehaviorSanitizer (any report fails); default //...
#   tools/sanitize.sh tsan   [TARGETS...]   # ThreadSanitizer; default: the concurrency tests
#
# The CUDA backend is left out (nvcc does not take these flags; GPU tests
# skip here anyway). Extra Bazel flags after `--`, e.g. `-- --runs_per_test=5`.
# Run before landing concurrency changes; CI runs the normal suite.
set -euo pipefail
cd "$(dirname "$0")/.."

# The code that runs threads: scheduler, expert store, transfer engine,
# prefetcher, metrics port, the daemon end to end.
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
EXPERTD_CUDA=0 exec tools/bazel.sh test --config="$kind" --keep_going "${existing[@]}" "${extra[@]}"
