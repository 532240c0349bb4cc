#!/usr/bin/env python3
"""The PyTorch + Hugging Face transformers peer of cuda_decode_benchmark.

Builds models with the same shapes as the benchmark's synthetic ones
(OLMoE-1B-7B, Qwen1.5-MoE-A2.7B; random bf16 weights initialised on the GPU),
GPU-only, and times greedy decode steps at batch 1 and 8 the same way: a
prompt of --prompt_len random tokens per sequence, --warmup untimed steps,
then --steps timed steps, each step = one forward over the batch's new tokens
with the KV cache + argmax, until the next tokens are on the host (our
Engine::Step is synchronous in the same way). Prints the median ms/step.

  python3 engine/backend/cuda/bench/hf_peer.py --models=olmoe,qwen --batches=1,8

Needs torch with CUDA and transformers (OlmoeConfig, Qwen2MoeConfig).
"""
import argparse
import statistics
import sys
import time

import torch
import transformers
from transformers import AutoModelForCausalLM, OlmoeConfig, Qwen2MoeConfig

# Keep in sync with Spec() in cuda_decode_benchmark.cc.
SPECS = {
    "olmoe": (OlmoeConfig, dict(
        vocab_size=50304, hidden_size=2048, intermediate_size=1024, num_hidden_layers=16,
        num_attention_heads=16, num_key_value_heads=16, num_experts=64, num_experts_per_tok=8,
        max_position_embeddings=4096, rope_theta=10000.0, norm_topk_prob=False, clip_qkv=None,
        tie_word_embeddings=False)),
    "qwen": (Qwen2MoeConfig, dict(
        vocab_size=151936, hidden_size=2048, intermediate_size=5632, moe_intermediate_size=1408,
        shared_expert_intermediate_size=5632, num_hidden_layers=24, num_attention_heads=16,
        num_key_value_heads=16, num_experts=60, num_experts_per_tok=4, decoder_sparse_step=1,
        mlp_only_layers=[], norm_topk_prob=False, max_position_embeddings=8192,
        tie_word_embeddings=False)),
}


def build(name, layers, attn):
    cls, kwargs = SPECS[name]
    kwargs = dict(kwargs)
    if layers:
        kwargs["num_hidden_layers"] = layers
    config = cls(**kwargs)
    torch.manual_seed(0)
    with torch.device("cuda"):
        try:
            model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation=attn)
        except TypeError:  # transformers 4.x spells it torch_dtype
            model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.bfloat16, attn_implementation=attn)
    return model.eval()


@torch.inference_mode()
def decode(model, vocab, batch, prompt_len, warmup, steps):
    ids = torch.randint(0, vocab, (batch, prompt_len), device="cuda")
    out = model(ids, use_cache=True)
    past = out.past_key_values
    nxt = out.logits[:, -1].argmax(-1, keepdim=True)
    times = []
    for i in range(warmup + steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = model(nxt, past_key_values=past, use_cache=True)
        past = out.past_key_values
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        nxt.cpu()  # the tokens reach the host: the step is over
        if i >= warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="olmoe,qwen")
    p.add_argument("--batches", default="1,8")
    p.add_argument("--steps", type=int, default=64)
    p.add_argument("--warmup", type=int, default=16)
    p.add_argument("--prompt_len", type=int, default=16)
    p.add_argument("--layers", type=int, default=0, help="override the layer count (0 = the real model's)")
    p.add_argument("--attn", default="sdpa", help="attn_implementation: sdpa or eager")
    a = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("hf_peer needs a CUDA GPU")
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {torch.cuda.get_device_name()}",
          file=sys.stderr)
    rows = []
    for name in a.models.split(","):
        model = build(name, a.layers, a.attn)
        params = sum(t.numel() for t in model.parameters())
        print(f"{name}: {params / 1e9:.2f} B parameters", file=sys.stderr)
        for b in a.batches.split(","):
            batch = int(b)
            ms = decode(model, model.config.vocab_size, batch, a.prompt_len, a.warmup, a.steps)
            rows.append((name, batch, ms))
        del model
        torch.cuda.empty_cache()
    print("\n| model | batch | transformers ms/step | tok/s |")
    print("|---|---|---|---|")
    for name, batch, ms in rows:
        print(f"| {name} | {batch} | {ms:.3f} | {batch * 1e3 / ms:.1f} |")


if __name__ == "__main__":
    main()
