#!/usr/bin/env bash
# expertd-zoo end to end: generates a model, regenerates it identically,
# and fails cleanly on bad flags.
set -euo pipefail
ZOO="models/zoo/expertd-zoo"
OUT="$TEST_TMPDIR/cli"

"$ZOO" --arch=mixtral --preset=tiny --layers=3 --seed=9 --out="$OUT/m" > "$TEST_TMPDIR/summary.json"
grep -q '"architecture":"MixtralForCausalLM"' "$TEST_TMPDIR/summary.json"
grep -q '"layers":3' "$TEST_TMPDIR/summary.json"
for f in config.json generation_config.json tokenizer.json tokenizer_config.json model.safetensors; do
  test -s "$OUT/m/$f" || { echo "missing $f"; exit 1; }
done
grep -q '"num_local_experts": 8' "$OUT/m/config.json"

"$ZOO" --arch=mixtral --preset=tiny --layers=3 --seed=9 --out="$OUT/m2" > /dev/null
cmp "$OUT/m/model.safetensors" "$OUT/m2/model.safetensors"

"$ZOO" --arch=olmoe --preset=tiny --dtype=bf16 --shards=2 --out="$OUT/o" > /dev/null
test -s "$OUT/o/model.safetensors.index.json"
test -s "$OUT/o/model-00002-of-00002.safetensors"

"$ZOO" --arch=deepseek_v3 --preset=tiny --layers=3 --dtype=fp8 --q_lora_rank=0 --out="$OUT/d" \
  > "$TEST_TMPDIR/summary.json"
grep -q '"architecture":"DeepseekV3ForCausalLM"' "$TEST_TMPDIR/summary.json"
grep -q '"quant_method": "fp8"' "$OUT/d/config.json"
grep -q '"q_lora_rank": null' "$OUT/d/config.json"
if "$ZOO" --arch=mixtral --preset=tiny --n_group=2 --out="$OUT/z" 2> "$TEST_TMPDIR/err"; then
  echo "accepted a deepseek_v3 flag for mixtral"; exit 1
fi
grep -q -- "--n_group is for deepseek_v3" "$TEST_TMPDIR/err"
if "$ZOO" --preset=deepseek_v3_2l --out="$OUT/z" 2> "$TEST_TMPDIR/err"; then
  echo "accepted the V3 preset for qwen3_moe"; exit 1
fi
grep -q "needs --arch=deepseek_v3" "$TEST_TMPDIR/err"

if "$ZOO" --arch=llama --out="$OUT/x" 2> "$TEST_TMPDIR/err"; then echo "accepted bad arch"; exit 1; fi
grep -q "unknown zoo architecture 'llama'" "$TEST_TMPDIR/err"
if "$ZOO" --preset=tiny 2> "$TEST_TMPDIR/err"; then echo "accepted missing --out"; exit 1; fi
grep -q -- "--out" "$TEST_TMPDIR/err"
if "$ZOO" --preset=tiny --top_k=20 --out="$OUT/y" 2> "$TEST_TMPDIR/err"; then echo "accepted top_k > experts"; exit 1; fi
grep -q "top_k" "$TEST_TMPDIR/err"
test ! -e "$OUT/y/config.json"
# --if_missing keeps an existing complete model (even with other flags).
before=$(sha256sum "$OUT/m/model.safetensors")
"$ZOO" --arch=mixtral --preset=tiny --seed=1 --if_missing --out="$OUT/m" | grep -q '"layers":3'
test "$before" = "$(sha256sum "$OUT/m/model.safetensors")"
"$ZOO" --preset=tiny --if_missing --out="$OUT/fresh" | grep -q '"architecture":"Qwen3MoeForCausalLM"'

"$ZOO" --help | grep -q -- "--preset"
echo PASS
