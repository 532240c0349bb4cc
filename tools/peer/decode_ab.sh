#!/usr/bin/env bash
# Decode ms/token, expertd against llama.cpp, on the same model shape and threads, in
# alternating rounds (the machine is shared): expertd's quant_decode_benchmark (OLMoE-1B-7B
# layer shapes, --layers 2, vocab 2048, routed experts in each of FORMATS through the
# ExpertStore, every other weight bf16) with each of ACTIVATIONS, then llama.cpp (llama_peer
# decode) on GGUFs of the zoo checkpoint with the same spec (expertd-zoo --arch=olmoe
# --preset=olmoe_1b7b_4l --layers=2 --seed=7): BF16 written by gguf_write.py; q8_0 / q4_0 by
# llama.cpp's own quantizer from it (its standard mix: attention and the LM head quantized
# too); q8_0x / q4_0x the BF16 file with the routed experts of those spliced in
# (gguf_splice.py): expertd's mix, the same bits on the same tensors.
#
#   tools/bazel.sh build -c opt //models/zoo:expertd-zoo //engine/bench:quant_decode_benchmark
#   tools/peer/decode_ab.sh WORK_DIR NODE_LLAMA_CPP_BINS_DIR [ROUNDS]
# Needs ~8 GB under WORK_DIR (checkpoint + GGUFs), deleted at the end. From the environment:
# THREADS (default 2), STEPS (default 24), FORMATS (expertd's expert formats, default
# bf16,int8,int4), ACTIVATIONS (expertd's --matmul_activations, default fp32) and GGUF_TYPES
# (default "bf16 q8_0 q4_0").
set -euo pipefail
cd "$(dirname "$0")/../.."
W="${1:?usage: decode_ab.sh WORK_DIR NODE_LLAMA_CPP_BINS_DIR [ROUNDS]}"
LIB="${2:?usage: decode_ab.sh WORK_DIR NODE_LLAMA_CPP_BINS_DIR [ROUNDS]}"
ROUNDS="${3:-3}"
THREADS="${THREADS:-2}"
STEPS="${STEPS:-24}"
FORMATS="${FORMATS:-bf16,int8,int4}"
ACTIVATIONS="${ACTIVATIONS:-fp32}"
GGUF_TYPES="${GGUF_TYPES:-bf16 q8_0 q4_0}"
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
  q="${t%x}"  # q4_0x: the experts of q4_0
  [ "$q" = bf16 ] || [ -f "$W/big_$q.gguf" ] || "$W/llama_peer" "$W/big_bf16.gguf" quantize \
    "$W/big_$q.gguf" "$q" "$THREADS" > /dev/null
  [ "$q" = "$t" ] || [ -f "$W/big_$t.gguf" ] || python3 tools/peer/gguf_splice.py \
    "$W/big_bf16.gguf" "$W/big_$q.gguf" "$W/big_$t.gguf" > /dev/null
done
for r in $(seq "$ROUNDS"); do
  for act in $ACTIVATIONS; do
    echo "## round $r expertd, $act activations"
    nice -n 19 "$B/engine/bench/quant_decode_benchmark" --layers=2 --vocab=2048 \
      --threads="$THREADS" --steps="$STEPS" --rounds=1 --formats="$FORMATS" \
      --pack_dir="$W/packs" --matmul_activations="$act"
  done
  echo "## round $r llama.cpp"
  for t in $GGUF_TYPES; do
    echo "llama.cpp $t $(nice -n 19 "$W/llama_peer" "$W/big_$t.gguf" decode 8 "$STEPS" "$THREADS")"
  done
done
