#!/usr/bin/env bash
# Every GPU test in one command, for a GPU machine that has no Bazel.
#
#   tools/gpu_check.sh bundle        (here, with the CUDA toolkit) builds every
#       GPU test -- each cc_test that depends on //engine/backend/cuda:cuda_test_util,
#       found by `bazel query`, so a new GPU test joins by itself -- and the GPU
#       decode benchmark into .device/cuda/ (engine/backend/cuda/tools/make_device_bundle.sh).
#   tools/gpu_check.sh run [FILTER]  (there, from the repository root, with
#       .device/cuda carried) runs every test binary in .device/cuda/bin (or those
#       whose name contains FILTER), each under a time limit, and prints one line
#       per binary and a total. Logs and gtest XML go to $OUT (default
#       /tmp/expertd-out).
#   tools/gpu_check.sh list          the GPU test targets the bundle holds.
#
# Exit status of `run`: 0 only when every binary ran, nothing failed, and --
# where nvidia-smi sees a GPU -- nothing was skipped (a skip there means a test
# did not find the device it should have used). With the device tool:
#   run(command="bash tools/gpu_check.sh run", carry=[".device/cuda"])
set -uo pipefail
cd "$(dirname "$0")/.."
B=.device/cuda
mode=${1:-run}
shift || true

gpu_test_targets() {
  bazel query --noshow_progress \
    'kind("cc_test", rdeps(//..., //engine/backend/cuda:cuda_test_util))' 2>/dev/null | sort
}

case "$mode" in
  list)
    gpu_test_targets
    ;;
  bundle)
    targets=$(gpu_test_targets)
    [ -n "$targets" ] || { echo "bazel query found no GPU tests"; exit 1; }
    # shellcheck disable=SC2086
    GPU_TESTS="$targets" bash engine/backend/cuda/tools/make_device_bundle.sh
    ;;
  run)
    filter=${1:-}
    OUT=${OUT:-/tmp/expertd-out}
    limit=${GPU_CHECK_TIMEOUT_S:-300}
    mkdir -p "$OUT/tmp"
    [ -d "$B/bin" ] || { echo "no $B/bin: build it with 'tools/gpu_check.sh bundle' and carry it"; exit 2; }
    has_gpu=0
    if nvidia-smi -L > "$OUT/nvidia-smi-L.txt" 2>&1 && grep -q '^GPU ' "$OUT/nvidia-smi-L.txt"; then
      has_gpu=1
    fi
    nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true
    # Plain start, or the build machine's loader and glibc when the local one is older.
    launch=(env "LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}")
    first=$(ls "$B"/bin/*_test | head -1)
    if ! "${launch[@]}" "$first" --gtest_list_tests > /dev/null 2>&1; then
      launch=("$B/glibc/ld-linux-x86-64.so.2" --library-path "$B/lib:$B/glibc:/usr/local/cuda/lib64")
      echo "using the bundled loader and glibc"
    fi
    : > "$OUT/gpu_check.exit"
    for bin in "$B"/bin/*_test; do
      t=$(basename "$bin")
      [ -z "$filter" ] || [[ "$t" == *"$filter"* ]] || continue
      rm -f "$OUT/$t.xml"
      TEST_TMPDIR="$OUT/tmp" timeout "$limit" "${launch[@]}" "$bin" \
        --gtest_output="xml:$OUT/$t.xml" > "$OUT/$t.log" 2>&1
      echo "$t $?" >> "$OUT/gpu_check.exit"
    done
    python3 - "$OUT" "$has_gpu" "$limit" <<'PY'
import sys, os
import xml.etree.ElementTree as ET
out, has_gpu, limit = sys.argv[1], sys.argv[2] == "1", sys.argv[3]
totals = dict(passed=0, failed=0, skipped=0)
bad = False
print(f"GPU present: {'yes' if has_gpu else 'NO (every GPU test should skip)'}")
print(f"{'binary':32} {'passed':>6} {'failed':>6} {'skipped':>7} {'seconds':>8}  note")
for line in open(os.path.join(out, "gpu_check.exit")):
    name, code = line.split()
    code = int(code)
    xml = os.path.join(out, name + ".xml")
    counts = dict(passed=0, failed=0, skipped=0)
    seconds, note, failed_names = 0.0, "", []
    if os.path.exists(xml):
        root = ET.parse(xml).getroot()
        seconds = float(root.get("time", "0"))
        for case in root.iter("testcase"):
            if case.find("failure") is not None:
                counts["failed"] += 1
                failed_names.append(case.get("classname", "") + "." + case.get("name", ""))
            elif case.get("result") == "skipped" or case.find("skipped") is not None:
                counts["skipped"] += 1
            elif case.get("status", "run") == "run":
                counts["passed"] += 1
    else:
        note = f"NO XML (exit {code}{', time limit ' + limit + ' s' if code == 124 else ''})"
    if code != 0 and not note:
        note = f"exit {code}"
    if counts["failed"] or code != 0 or (has_gpu and counts["skipped"]):
        bad = True
    if has_gpu and counts["skipped"]:
        note = (note + " " if note else "") + "SKIPPED ON A GPU MACHINE"
    for k in totals:
        totals[k] += counts[k]
    print(f"{name:32} {counts['passed']:6} {counts['failed']:6} {counts['skipped']:7} "
          f"{seconds:8.1f}  {note}  (log: {out}/{name}.log)")
    for f in failed_names:
        print(f"    FAILED {f}")
print(f"{'TOTAL':32} {totals['passed']:6} {totals['failed']:6} {totals['skipped']:7}")
print("GPU CHECK: " + ("FAILED" if bad else "OK"))
sys.exit(1 if bad else 0)
PY
    ;;
  *)
    echo "usage: tools/gpu_check.sh bundle | run [FILTER] | list"
    exit 2
    ;;
esac
