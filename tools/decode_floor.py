#!/usr/bin/env python3
"""Bytes one bf16 decode step must read, and that over a bandwidth: the
prediction table in docs/cuda.md.

    python3 tools/decode_floor.py [--tbps=4.8]

Shapes are the published Hugging Face config.json values of each model.
Dense bytes: attention q/k/v/o, routers, shared experts and the LM head (the
embedding lookup reads one row). Expert bytes: gate/up/down of one expert.
Distinct experts per layer under uniform routing of `batch` tokens, top-k
each: E * (1 - (1 - k/E)^batch).
"""
import argparse

MODELS = {
    # name: hidden, layers, experts, top_k, expert width, shared width, vocab
    "OLMoE-1B-7B": (2048, 16, 64, 8, 1024, 0, 50304),
    "Qwen1.5-MoE-A2.7B": (2048, 24, 60, 4, 1408, 5632, 151936),
}
BF16 = 2


def step_bytes(shape, batch):
    hidden, layers, experts, top_k, width, shared, vocab = shape
    attention = 4 * hidden * hidden
    router = experts * hidden + (hidden if shared else 0)
    dense = layers * (attention + router + 3 * hidden * shared) + vocab * hidden
    distinct = experts * (1 - (1 - top_k / experts) ** batch)
    return distinct, (dense + layers * distinct * 3 * hidden * width) * BF16


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tbps", type=float, default=4.8, help="bandwidth, TB/s (H200 datasheet: 4.8)")
    args = p.parse_args()
    print("| model | batch | distinct experts / layer (uniform routing) | GB / step | floor |")
    print("|---|---|---|---|---|")
    for name, shape in MODELS.items():
        for batch in (1, 8):
            distinct, nbytes = step_bytes(shape, batch)
            floor_ms = nbytes / (args.tbps * 1e12) * 1e3
            print(f"| {name} | {batch} | {distinct:.3g} | {nbytes / 1e9:.2f} | {floor_ms:.2f} ms |")


if __name__ == "__main__":
    main()
