#!/usr/bin/env bash
# Runs test targets many times under a CPU-hogging neighbour: the condition CI
# flakes under (a fresh, busy, small machine). Any failure is a flake to fix at
# its cause (a condition with a deadline, a fake clock), never by retrying.
#
#   tools/stress_tests.sh [--runs=N] [--hogs=N] [--one_core] [TARGET...] [-- BAZEL_ARGS...]
#
#   --runs=N     runs per target (default 200)
#   --hogs=N     busy-loop processes beside the tests (default: one per core)
#   --one_core   pin the tests (and the hogs) to CPU 0 with taskset
#   TARGET...    default: the unit-level threaded targets (UNIT below);
#                `e2e` names the slow end-to-end set (E2E below)
#
# Prints Bazel's per-target summary; exits non-zero when any run failed.
set -uo pipefail
cd "$(dirname "$0")/.."

# Unit-level targets whose tests use threads (the CPU backend's pool, the
# transfer engine, the expert store), sleeps or notifications.
UNIT=(
  //base:log_test
  //engine/backend/cpu:thread_pool_test
  //engine/backend/cpu:cpu_backend_test
  //engine/backend:backend_factory_test
  //engine/experts:transfer_pool_test
  //engine/experts:expert_store_test
  //engine/experts/pack:expert_pack_test
  //engine/experts:pregate_engine_test
  //engine/experts/trace:routing_trace_test
  //engine/kv:kv_cache_test
  //engine:engine_test
  //server/metrics:registry_test
  //server/metrics:serving_metrics_test
  //server:scheduler_test
  //server/metrics:http_server_test
  //server/jobs:job_store_test
  //server/jobs:job_manager_test
)
# End-to-end targets: real daemons, sockets and subprocesses (slow: fewer runs).
E2E=(
  //models/tokenizer:tokenize_cli_test
  //models/zoo:zoo_cli_test
  //tests/golden:expertd_run_test
  //tests/golden:expertd_train_test
  //tests:daemon_test
  //tests:lifecycle_test
  //tests:openai_http_test
  //tests/openai:openai_client_test
  //tests:offload_daemon_test
  //tests:jobs_daemon_test
  //tests/ops:tls_test
  //tests/ops:metrics_endpoint_test
  //tests/interop:python_client_test
  //engine/experts:offload_engine_test
  //tests:generate_test
  //tests/bench:expert_bench_test
)

runs=200
hogs=$(nproc)
one_core=0
targets=()
bazel_args=()
while (($#)); do
  case "$1" in
    --runs=*) runs="${1#--runs=}" ;;
    --hogs=*) hogs="${1#--hogs=}" ;;
    --one_core) one_core=1 ;;
    e2e) targets+=("${E2E[@]}") ;;
    --) shift; bazel_args=("$@"); break ;;
    *) targets+=("$1") ;;
  esac
  shift
done
((${#targets[@]})) || targets=("${UNIT[@]}")

pin=()
((one_core)) && pin=(taskset -c 0)

hog_pids=()
stop_hogs() {
  local pid
  for pid in "${hog_pids[@]}"; do kill "$pid" 2>/dev/null; done
  wait 2>/dev/null
}
trap stop_hogs EXIT
for ((i = 0; i < hogs; ++i)); do
  "${pin[@]}" bash -c 'while :; do :; done' &
  hog_pids+=($!)
done

# --run_under pins every test process (Bazel itself stays unpinned).
under=()
((one_core)) && under=(--run_under="taskset -c 0")
tools/bazel.sh test "${targets[@]}" --runs_per_test="$runs" --test_output=errors \
  --keep_going --test_summary=short "${under[@]}" "${bazel_args[@]}" 2>&1 |
  grep --line-buffered -v 'src/main/tools/linux-sandbox'
exit "${PIPESTATUS[0]}"
