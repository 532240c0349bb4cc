#!/usr/bin/env bash
# Prefill tokens/s, expertd against llama.cpp and PyTorch, on the same model shape and threads,
# in alternating rounds (the machine is shared): expertd's quant_decode_benchmark --prefill
# (OLMoE-1B-7B layer shapes, --layers 2, vocab 2048, every other weight bf16, the routed experts
# in each of FORMATS) with fp32, bf16 and int8 activations (--matmul_activations); llama.cpp
# (llama_peer prefill) on GGUFs of the zoo checkpoint with the same spec (expertd-zoo
# --arch=olmoe --preset=olmoe_1b7b_4l --layers=2 --seed=7): BF16 written by gguf_write.py, Q8_0 /
# Q4_0 by llama.cpp's own quantizer from it; and PyTorch eager bf16 (torch_prefill.py: same
# shapes, random weights).
#
#   tools/bazel.sh build -c opt //models/zoo:expertd-zoo //engine/bench:quant_decode_benchmark
#   tools/peer/prefill_ab.sh WORK_DIR NODE_LLAMA_CPP_BINS_DIR [ROUNDS]
# Needs ~4 GB under WORK_DIR (checkpoint + GGUFs), deleted at the end. From the environment:
# PROMPTS (default "128 512"), THREADS (default 2), FORMATS (expertd's expert formats, default
# bf16,int8,int4), ACTIVATIONS (expertd's --matmul_activations, default "fp32 bf16 int8") and
# GGUF_TYPES (default "bf16 q8_0 q4_0").
set -euo pipefail
cd "$(dirname "$0")/../.."
W="${1:?usage: prefill_ab.sh WORK_DIR NODE_LLAMA_CPP_BINS_DIR [ROUNDS]}"
LIB="${2:?usage: prefill_ab.sh WORK_DIR NODE_LLAMA_CPP_BINS_DIR [ROUNDS]}"
ROUNDS="${3:-3}"
THREADS="${THREADS:-2}"
PROMPTS="${PROMPTS:-128 512}"
FORMATS="${FORMATS:-bf16,int8,int4}"
GGUF_TYPES="${GGUF_TYPES:-bf16 q8_0 q4_0}"
ACTIVATIONS="${ACTIVATIONS:-fp32 bf16 int8}"
B=bazel-bin
mkdir -p "$W"
trap 'rm -rf "$W/big" "$W"/big_*.gguf "$W/packs"' EXIT
gcc -O2 -o "$W/llama_peer" tools/peer/llama_peer.c -L"$LIB" -l:libllama.v0.5.0.so \
  -l:libggml.v0.5.0.so -Wl,-rpath,"$LIB" -lm
export LLAMA_PEER_LIBDIR="$LIB"
[ -f "$W/big/config.json" ] || "$B/models/zoo/expertd-zoo" --arch=olmoe --preset=olmoe_1b7b_4l \
  --layers=2 --seed=7 --out="$W/big" > /dev/null
[ -f "$W/big_bf16.gguf" ] || python3 tools/peer/gguf_write.py "$W/big" "$W/big_bf16.gguf" \
  --type=bf16 --scope=all > /dev/null
for t in $GGUF_TYPES; do
  [ "$t" = bf16 ] || [ -f "$W/big_$t.gguf" ] || "$W/llama_peer" "$W/big_bf16.gguf" quantize \
    "$W/big_$t.gguf" "$t" "$THREADS" > /dev/null
done
csv=$(echo "$PROMPTS" | tr ' ' ',')
for r in $(seq "$ROUNDS"); do
  for act in $ACTIVATIONS; do
    # Each length three times per format; the first timing of each is cold and left out.
    "$B/engine/bench/quant_decode_benchmark" --layers=2 --vocab=2048 --threads="$THREADS" \
      --steps=8 --rounds=1 --formats="$FORMATS" --prefill="$csv,$csv,$csv" \
      --pack_dir="$W/packs" --matmul_activations="$act" 2>&1 | grep '^| .* | resident |' |
      while read -r line; do echo "round $r expertd, $act activations: $line"; done
  done
  for t in $GGUF_TYPES; do
    for p in $PROMPTS; do
      echo "round $r llama.cpp $t: $("$W/llama_peer" "$W/big_$t.gguf" prefill "$p" 3 "$THREADS")"
    done
  done
  echo "round $r PyTorch eager bf16: $(/usr/bin/python3 tools/peer/torch_prefill.py --layers=2 \
    --vocab=2048 --threads="$THREADS" --prefill="$csv,$csv" 2>&1 | tr '\n' ' ')"
done
