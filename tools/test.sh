#!/usr/bin/env bash
# Runs every test: installs missing packages, builds everything (CUDA too when
# the toolkit exists; GPU tests skip without a GPU), runs all tests, and ends
# with one line "N passed, N failed" counting individual test cases.
set -uo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh || { echo "0 passed, 1 failed"; exit 1; }
mkdir -p out
# Debian's Bazel runs linux-sandbox in debug mode; its per-action trace lines
# go to out/test.log only, not to the terminal.
tools/bazel.sh test //... --keep_going --test_summary=short "$@" 2>&1 | tee out/test.log |
  grep --line-buffered -v 'src/main/tools/linux-sandbox'
rc=${PIPESTATUS[0]}
python3 tools/count_tests.py out/test.log "$(bazel info bazel-testlogs 2>/dev/null)"
count_rc=$?
[ "$rc" = 0 ] && [ "$count_rc" = 0 ] && exit 0
exit 1
