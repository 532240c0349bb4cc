#!/usr/bin/env python3
"""PyTorch eager prefill tokens/s on an OLMoE-1B-7B-shaped model (the peer of
quant_decode_benchmark --prefill): hidden 2048, 16 heads of 128 (no GQA), q/k
RMSNorm over the whole projection, RoPE, 64 experts of width 1024, top-8 with
softmax-then-top-k (no renormalisation), SwiGLU experts run per expert on the
tokens that chose it (as Hugging Face's OlmoeSparseMoeBlock does), logits of
the last position. Random bf16 weights (timing only: the outputs are not
compared with expertd's). Prints one line per prompt length:
"torch prefill N tokens: T tok/s" (the best of --reps timed prefills).

  /usr/bin/python3 tools/peer/torch_prefill.py --layers=2 --vocab=2048 --threads=2 \\
      --prefill=128,512
"""
import argparse
import time

import torch
import torch.nn.functional as F

HIDDEN, HEADS, HEAD_DIM, EXPERTS, TOP_K, WIDTH = 2048, 16, 128, 64, 8, 1024


def rms_norm(x, w, eps=1e-5):
    v = x.float().pow(2).mean(-1, keepdim=True)
    return (x.float() * torch.rsqrt(v + eps)).to(x.dtype) * w


def rope(x, pos):  # x [T, H, D]
    inv = 1.0 / (10000.0 ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float32) / HEAD_DIM))
    ang = pos[:, None].float() * inv[None, :]
    cos, sin = ang.cos()[:, None, :], ang.sin()[:, None, :]
    x1, x2 = x[..., : HEAD_DIM // 2].float(), x[..., HEAD_DIM // 2 :].float()
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).to(x.dtype)


class Layer:
    def __init__(self, g):
        def w(*shape):
            return (torch.randn(*shape, generator=g) * 0.02).to(torch.bfloat16)

        self.ln1, self.ln2 = torch.ones(HIDDEN, dtype=torch.bfloat16), torch.ones(
            HIDDEN, dtype=torch.bfloat16)
        self.q_norm = torch.ones(HIDDEN, dtype=torch.bfloat16)
        self.k_norm = torch.ones(HIDDEN, dtype=torch.bfloat16)
        self.wq, self.wk, self.wv, self.wo = (w(HIDDEN, HIDDEN) for _ in range(4))
        self.router = w(EXPERTS, HIDDEN)
        self.gate = [w(WIDTH, HIDDEN) for _ in range(EXPERTS)]
        self.up = [w(WIDTH, HIDDEN) for _ in range(EXPERTS)]
        self.down = [w(HIDDEN, WIDTH) for _ in range(EXPERTS)]

    def attention(self, x, pos):
        t = x.shape[0]
        q = rms_norm(F.linear(x, self.wq), self.q_norm).view(t, HEADS, HEAD_DIM)
        k = rms_norm(F.linear(x, self.wk), self.k_norm).view(t, HEADS, HEAD_DIM)
        v = F.linear(x, self.wv).view(t, HEADS, HEAD_DIM)
        q, k = rope(q, pos).transpose(0, 1), rope(k, pos).transpose(0, 1)
        v = v.transpose(0, 1)
        s = (q @ k.transpose(1, 2)).float() / HEAD_DIM**0.5
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        o = (s.softmax(-1).to(v.dtype) @ v).transpose(0, 1).reshape(t, HIDDEN)
        return F.linear(o, self.wo)

    def moe(self, x):
        probs = F.linear(x, self.router).float().softmax(-1)
        w, ids = probs.topk(TOP_K, -1)
        out = torch.zeros_like(x, dtype=torch.float32)
        for e in range(EXPERTS):
            rows, rank = (ids == e).nonzero(as_tuple=True)
            if rows.numel() == 0:
                continue
            h = x[rows]
            h = F.linear(F.silu(F.linear(h, self.gate[e])) * F.linear(h, self.up[e]), self.down[e])
            out.index_add_(0, rows, h.float() * w[rows, rank, None])
        return out.to(x.dtype)

    def __call__(self, h, pos):
        h = h + self.attention(rms_norm(h, self.ln1), pos)
        return h + self.moe(rms_norm(h, self.ln2))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prefill", default="128,512")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    g = torch.Generator().manual_seed(7)
    embed = (torch.randn(a.vocab, HIDDEN, generator=g) * 0.02).to(torch.bfloat16)
    head = (torch.randn(a.vocab, HIDDEN, generator=g) * 0.02).to(torch.bfloat16)
    norm = torch.ones(HIDDEN, dtype=torch.bfloat16)
    layers = [Layer(g) for _ in range(a.layers)]

    def prefill(tokens):
        h = embed[tokens]
        pos = torch.arange(tokens.numel())
        for layer in layers:
            h = layer(h, pos)
        return F.linear(rms_norm(h[-1:], norm), head)

    with torch.inference_mode():
        for n in (int(s) for s in a.prefill.split(",")):
            tokens = (torch.arange(n) * 7919 + 13) % a.vocab
            prefill(tokens)  # warm-up
            best = 1e30
            for _ in range(a.reps):
                t0 = time.perf_counter()
                prefill(tokens)
                best = min(best, time.perf_counter() - t0)
            print(f"torch prefill {n} tokens: {n / best:.0f} tok/s", flush=True)


if __name__ == "__main__":
    main()
