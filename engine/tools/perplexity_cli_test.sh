#!/usr/bin/env bash
# expertd-perplexity end to end on a zoo model: its mean negative log-likelihood equals the one
# computed from expertd-run's last-position logits for every scored prefix (an independent path:
# RunGreedy's prefill of each prefix, not one all-logits step per window); quantized experts
# change it a little; bad inputs fail with a clear error.
set -euo pipefail
ZOO="models/zoo/expertd-zoo"
PPL="engine/tools/expertd-perplexity"
RUN="engine/tools/expertd-run"
T="$TEST_TMPDIR"

"$ZOO" --arch=olmoe --preset=tiny --out="$T/m" > /dev/null
printf '[5, 300, 17, 42, 99, 7, 256, 3, 511, 64, 128]' > "$T/ids.json"

# Windows of 4 over 11 ids: [5 300 17 42] [99 7 256 3] [511 64 128]: 3 + 3 + 2 predictions.
"$PPL" --model="$T/m" --token_ids="$T/ids.json" --ctx=4 --threads=1 > "$T/ppl.json"
/usr/bin/python3 - "$T" "$RUN" <<'PY'
import json, math, subprocess, sys
t, run = sys.argv[1], sys.argv[2]
got = json.load(open(t + "/ppl.json"))
ids = json.load(open(t + "/ids.json"))
assert got["tokens"] == 11 and got["windows"] == 3 and got["scored"] == 8, got
nll = []
for start in range(0, len(ids), 4):
    window = ids[start:start + 4]
    for i in range(1, len(window)):
        out = subprocess.run([run, "--model=" + t + "/m", "--threads=1",
                              "--tokens=" + ",".join(map(str, window[:i]))],
                             check=True, capture_output=True, text=True).stdout
        logits = json.loads(out)["last_logits"]
        peak = max(logits)
        lse = peak + math.log(sum(math.exp(x - peak) for x in logits))
        nll.append(lse - logits[window[i]])
want = sum(nll) / len(nll)
assert abs(got["mean_nll"] - want) < 1e-4 * max(1.0, abs(want)), (got, want)
assert abs(got["perplexity"] - math.exp(want)) < 1e-3 * math.exp(want), (got, want)
print("mean_nll", got["mean_nll"], "reference", want)
PY

# int8 experts (group 32): a nearby, not identical, perplexity.
"$PPL" --model="$T/m" --token_ids="$T/ids.json" --ctx=4 --threads=1 --expert_dtype=int8 \
  --expert_group_size=32 --expert_pack_dir="$T/pack" > "$T/ppl8.json" 2> /dev/null
/usr/bin/python3 - "$T" <<'PY'
import json, sys
a = json.load(open(sys.argv[1] + "/ppl.json"))["mean_nll"]
b = json.load(open(sys.argv[1] + "/ppl8.json"))["mean_nll"]
assert a != b and abs(a - b) < 0.05 * abs(a), (a, b)
PY

# Text input goes through the model's tokenizer.
printf 'The quick brown fox jumps over the lazy dog.' > "$T/text.txt"
"$PPL" --model="$T/m" --text="$T/text.txt" --threads=1 > "$T/text.json"
grep -q '"windows":1' "$T/text.json"

expect_error() {  # expected-status message args...
  local want="$1" msg="$2"; shift 2
  set +e; "$PPL" "$@" > "$T/out" 2> "$T/err"; local got=$?; set -e
  [ "$got" = "$want" ] || { echo "status $got, want $want: $*"; cat "$T/err"; exit 1; }
  grep -q -- "$msg" "$T/err" || { echo "no '$msg' in:"; cat "$T/err"; exit 1; }
  [ ! -s "$T/out" ] || { echo "stdout on error"; exit 1; }
}
expect_error 1 "exactly one of" --model="$T/m"
expect_error 1 "exactly one of" --model="$T/m" --text="$T/text.txt" --token_ids="$T/ids.json"
expect_error 1 "missing.json" --model="$T/m" --token_ids="$T/missing.json"
printf '[1, "x"]' > "$T/bad.json"
expect_error 1 "integer" --model="$T/m" --token_ids="$T/bad.json"
printf '[1, 9999]' > "$T/oob.json"
expect_error 1 "" --model="$T/m" --token_ids="$T/oob.json"
expect_error 2 "ctx" --model="$T/m" --token_ids="$T/ids.json" --ctx=1
expect_error 1 "expert_dtype" --model="$T/m" --token_ids="$T/ids.json" --expert_dtype=int3
echo PASS
