#!/usr/bin/env bash
# Trains the perplexity model: an OLMoE-shaped zoo model (hidden 256, 2 layers, 16 experts of
# width 256, top-4, vocab 2048, fp32) trained with expertd-train on the training part of
# tools/peer/corpus.py's text (Debian's licence texts, ~63k tokens) in 128-token rows, 16 rows
# a step, 240 AdamW steps (cosine, 20 warm-up, lr 3e-3): about 8 epochs, ~10 minutes on 2 cores.
#
#   tools/bazel.sh build //models/zoo:expertd-zoo //models/tokenizer:tokenize \
#       //engine/train/tools:expertd-train
#   tools/peer/make_ppl_model.sh WORK_DIR
# Writes WORK_DIR/corpus/{train,eval}.txt, WORK_DIR/model/ (config, tokenizer, the initial
# model.safetensors and the trained weights as trained.safetensors) and WORK_DIR/train.json
# (expertd-train's per-step losses).
set -euo pipefail
cd "$(dirname "$0")/../.."
W="${1:?usage: make_ppl_model.sh WORK_DIR}"
B=bazel-bin
STEPS="${STEPS:-240}"
THREADS="${THREADS:-2}"
python3 tools/peer/corpus.py "$W/corpus"
"$B/models/zoo/expertd-zoo" --arch=olmoe --hidden=256 --layers=2 --experts=16 --top_k=4 \
  --moe_intermediate=256 --heads=4 --kv_heads=4 --vocab=2048 --dtype=f32 --out="$W/model"
"$B/models/tokenizer/tokenize" --tokenizer="$W/model/tokenizer.json" < "$W/corpus/train.txt" \
  > "$W/train_ids.json"
python3 tools/peer/make_batch.py "$W/train_ids.json" 128 "$W/train_batch.json"
nice -n 19 "$B/engine/train/tools/expertd-train" --model="$W/model" --batch="$W/train_batch.json" \
  --rows_per_step=16 --steps="$STEPS" --lr=3e-3 --schedule=cosine --warmup_steps=20 \
  --threads="$THREADS" --weights_out="$W/model/trained.safetensors" > "$W/train.json"
rm -f "$W/train_batch.json"
python3 -c "
import json, sys
s = json.load(open(sys.argv[1]))['steps']
print('trained: ce loss %.3f (step 1) -> %.3f (step %d)'
      % (s[0]['ce_loss'], s[-1]['ce_loss'], len(s)))
" "$W/train.json"
