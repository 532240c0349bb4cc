#!/usr/bin/env bash
# Prefill tokens/s, expertd against llama.cpp and PyTorch, on the same model shape and threads,
# in alternating rounds (the machine is shared): expertd's quant_decode_benchmark --prefill
# (OLMoE-1B-7B layer shapes, --layers 2, vocab 2048, every weight bf16) with fp32 and with bf16
# activations (--matmul_activations), llama.cpp (llama_peer prefill) on a BF16 GGUF of the zoo
# checkpoint with the same spec (expertd-zoo --arch=olmoe --preset=olmoe_1b7b_4l --layers=2
# --seed=7, written by gguf_write.py), and PyTorch eager bf16 (torch_prefill.py: same shapes,
# random weights).
#
#   tools/bazel.sh build -c opt //models/zoo:expertd-zoo //engine/bench:quant_decode_benchmark
#   tools/peer/prefill_ab.sh WORK_DIR NODE_LLAMA_CPP_BINS_DIR [ROUNDS]
# Needs ~2 GB under WORK_DIR (checkpoint + GGUF), deleted at the end. PROMPTS (default
# "128 512") and THREADS (default 2) from the environment.
set -euo pipefail
cd "$(dirname "$0")/../.."
W="${1:?usage: prefill_ab.sh WORK_DIR NODE_LLAMA_CPP_BINS_DIR [ROUNDS]}"
LIB="${2:?usage: prefill_ab.sh WORK_DIR NODE_LLAMA_CPP_BINS_DIR [ROUNDS]}"
ROUNDS="${3:-3}"
THREADS="${THREADS:-2}"
PROMPTS="${PROMPTS:-128 512}"
B=bazel-bin
mkdir -p "$W"
trap 'rm -rf "$W/big" "$W/big_bf16.gguf" "$W/packs"' EXIT
gcc -O2 -o "$W/llama_peer" tools/peer/llama_peer.c -L"$LIB" -l:libllama.v0.5.0.so \
  -l:libggml.v0.5.0.so -Wl,-rpath,"$LIB" -lm
export LLAMA_PEER_LIBDIR="$LIB"
[ -f "$W/big/config.json" ] || "$B/models/zoo/expertd-zoo" --arch=olmoe --preset=olmoe_1b7b_4l \
  --layers=2 --seed=7 --out="$W/big" > /dev/null
[ -f "$W/big_bf16.gguf" ] || python3 tools/peer/gguf_write.py "$W/big" "$W/big_bf16.gguf" \
  --type=bf16 --scope=all > /dev/null
csv=$(echo "$PROMPTS" | tr ' ' ',')
for r in $(seq "$ROUNDS"); do
  for act in fp32 bf16; do
    # Each length three times; the first timing of each is cold and left out.
    line=$("$B/engine/bench/quant_decode_benchmark" --layers=2 --vocab=2048 --threads="$THREADS" \
      --steps=8 --rounds=1 --formats=bf16 --prefill="$csv,$csv,$csv" --pack_dir="$W/packs" \
      --matmul_activations="$act" 2>&1 | grep '| resident' | grep -o 'prefill.*')
    echo "round $r expertd ($act activations): $line"
  done
  for p in $PROMPTS; do
    echo "round $r llama.cpp BF16: $("$W/llama_peer" "$W/big_bf16.gguf" prefill "$p" 3 "$THREADS")"
  done
  echo "round $r PyTorch eager bf16: $(/usr/bin/python3 tools/peer/torch_prefill.py --layers=2 \
    --vocab=2048 --threads="$THREADS" --prefill="$csv,$csv" 2>&1 | tr '\n' ' ')"
done
