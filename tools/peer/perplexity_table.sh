#!/usr/bin/env bash
# Perplexity of the trained model (tools/peer/make_ppl_model.sh) on the held-out text, per
# expert storage format in expertd, and, when the node-llama-cpp binaries are given, in
# llama.cpp on GGUF files written by tools/peer/gguf_write.py (experts in F32 / BF16 / Q8_0 /
# Q4_0, every other tensor F32, as in expertd's rows). Both score the same token ids the same
# way: 256-token non-overlapping windows, every next-token prediction inside a window.
#
#   tools/bazel.sh build //engine/tools:expertd-perplexity //models/tokenizer:tokenize
#   tools/peer/perplexity_table.sh WORK_DIR [NODE_LLAMA_CPP_BINS_DIR]
# e.g. NODE_LLAMA_CPP_BINS_DIR=/tmp/npm/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
# after `npm install node-llama-cpp --ignore-scripts` in /tmp/npm (outside the repository).
# Prints markdown rows; packs and GGUF files are written under WORK_DIR and deleted after.
# ACTIVATIONS (default "fp32"): expertd's --matmul_activations modes to score, e.g. "fp32 int8"
# (the trained model's rows repeated per mode).
set -euo pipefail
cd "$(dirname "$0")/../.."
W="${1:?usage: perplexity_table.sh WORK_DIR [NODE_LLAMA_CPP_BINS_DIR]}"
LIB="${2:-}"
B=bazel-bin
THREADS="${THREADS:-2}"
CTX="${CTX:-256}"
ACTIVATIONS="${ACTIVATIONS:-fp32}"
M="$W/model"
"$B/models/tokenizer/tokenize" --tokenizer="$M/tokenizer.json" < "$W/corpus/eval.txt" \
  > "$W/eval_ids.json"
row() {  # name json
  python3 -c "
import json, sys
j = json.loads(sys.argv[2])
print('| %s | %.4f | %.3f | %d |' % (sys.argv[1], j['mean_nll'], j['perplexity'], j['scored']))
" "$1" "$2"
}
echo "| engine, experts as | mean NLL (nats) | perplexity | predictions |"
echo "|---|---|---|---|"
for act in $ACTIVATIONS; do
  for weights in model.safetensors trained.safetensors; do
    for fmt in f32:0 bf16:0 int8:32 int8:128 int4:32 int4:128 mxfp4:0 fp8:0; do
      dtype="${fmt%:*}" group="${fmt#*:}"
      name="expertd $dtype"; [ "$group" != 0 ] && name="$name-g$group"
      [ "$act" != fp32 ] && name="$name, $act activations"
      [ "$weights" = model.safetensors ] && name="$name (untrained)"
      [ "$weights" = model.safetensors ] && { [ "$dtype" != f32 ] || [ "$act" != fp32 ]; } && continue
      out=$(nice -n 19 "$B/engine/tools/expertd-perplexity" --model="$M" --weights="$weights" \
        --token_ids="$W/eval_ids.json" --ctx="$CTX" --threads="$THREADS" --expert_dtype="$dtype" \
        --expert_group_size="$group" --expert_pack_dir="$W/packs" --matmul_activations="$act" \
        2> /dev/null)
      row "$name" "$out"
      rm -rf "$W/packs"
    done
  done
done
[ -n "$LIB" ] || exit 0
gcc -O2 -o "$W/llama_peer" tools/peer/llama_peer.c -L"$LIB" -l:libllama.v0.5.0.so \
  -l:libggml.v0.5.0.so -Wl,-rpath,"$LIB" -lm
for t in f32 bf16 q8_0 q4_0; do
  python3 tools/peer/gguf_write.py "$M" "$W/peer.gguf" --type="$t" \
    --weights=trained.safetensors > /dev/null
  out=$(LLAMA_PEER_LIBDIR="$LIB" nice -n 19 "$W/llama_peer" "$W/peer.gguf" ppl \
    "$W/eval_ids.json" "$CTX" "$THREADS")
  row "llama.cpp $t" "$out"
  rm -f "$W/peer.gguf"
done
