#!/usr/bin/python3
"""PyTorch-eager peer for expertd-train-bench: the same model, batch shape, optimizer and
thread count, written the way Hugging Face transformers' modeling code runs it (eager
attention, the expert loop of MixtralSparseMoeBlock / Qwen2MoeSparseMoeBlock /
OlmoeSparseMoeBlock / Qwen3MoeSparseMoeBlock, load_balancing_loss_func). transformers is
not packaged for Debian 12, so the modules are restated here (torch only: python3-torch).

  python3 engine/train/bench/torch_train_step.py --model=DIR [--batch_size=4]
      [--seq_len=128] [--steps=5] [--threads=2] [--seed=1]
  python3 engine/train/bench/torch_train_step.py --model=tests/data/fixtures/mixtral --check
      (replays the fixture's train_golden.json batch: prints our losses next to HF's)

Prints one JSON object like expertd-train-bench.
"""
import argparse
import json
import math
import statistics
import struct
import time

import torch
import torch.nn.functional as F
from torch import nn

DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}


def load_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = memoryview(blob)[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        s, t = e["data_offsets"]
        tensor = torch.frombuffer(bytearray(data[s:t]), dtype=DTYPES[e["dtype"]])
        out[name] = tensor.reshape(e["shape"]).float()
    return out


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        var = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(var + self.eps))


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention(nn.Module):
    def __init__(self, c, kind):
        super().__init__()
        h, self.nq, self.nkv = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
        self.hd = c.get("head_dim") or h // self.nq
        bias = kind == "qwen2_moe" or c.get("attention_bias", False)
        self.q_proj = nn.Linear(h, self.nq * self.hd, bias=bias)
        self.k_proj = nn.Linear(h, self.nkv * self.hd, bias=bias)
        self.v_proj = nn.Linear(h, self.nkv * self.hd, bias=bias)
        self.o_proj = nn.Linear(self.nq * self.hd, h, bias=False)
        self.kind = kind
        eps = c["rms_norm_eps"]
        if kind == "qwen3_moe":
            self.q_norm, self.k_norm = RMSNorm(self.hd, eps), RMSNorm(self.hd, eps)
        elif kind == "olmoe":
            self.q_norm = RMSNorm(self.nq * self.hd, eps)
            self.k_norm = RMSNorm(self.nkv * self.hd, eps)

    def forward(self, x, cos, sin, mask):
        b, t, _ = x.shape
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        if self.kind == "olmoe":
            q, k = self.q_norm(q), self.k_norm(k)
        q = q.view(b, t, self.nq, self.hd)
        k = k.view(b, t, self.nkv, self.hd)
        if self.kind == "qwen3_moe":
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = v.view(b, t, self.nkv, self.hd).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        rep = self.nq // self.nkv
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.hd) + mask
        p = F.softmax(scores, dim=-1, dtype=torch.float32)
        o = torch.matmul(p, v).transpose(1, 2).reshape(b, t, -1)
        return self.o_proj(o)


class Mlp(nn.Module):
    def __init__(self, h, f):
        super().__init__()
        self.gate_proj = nn.Linear(h, f, bias=False)
        self.up_proj = nn.Linear(h, f, bias=False)
        self.down_proj = nn.Linear(f, h, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class MixtralExpert(nn.Module):
    def __init__(self, h, f):
        super().__init__()
        self.w1 = nn.Linear(h, f, bias=False)
        self.w2 = nn.Linear(f, h, bias=False)
        self.w3 = nn.Linear(h, f, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class MoeBlock(nn.Module):
    def __init__(self, c, kind):
        super().__init__()
        h = c["hidden_size"]
        self.e = c.get("num_local_experts") or c["num_experts"]
        self.k = c["num_experts_per_tok"]
        self.norm = kind == "mixtral" or c.get("norm_topk_prob", False)
        self.gate = nn.Linear(h, self.e, bias=False)
        expert = MixtralExpert if kind == "mixtral" else Mlp
        self.experts = nn.ModuleList(expert(h, c.get("moe_intermediate_size") or c["intermediate_size"])
                                     for _ in range(self.e))
        self.shared = None
        if kind == "qwen2_moe" and c.get("shared_expert_intermediate_size", 0) > 0:
            self.shared_expert = Mlp(h, c["shared_expert_intermediate_size"])
            self.shared_expert_gate = nn.Linear(h, 1, bias=False)
            self.shared = True

    def forward(self, x):
        b, t, h = x.shape
        x = x.view(-1, h)
        logits = self.gate(x)
        w = F.softmax(logits, dim=1, dtype=torch.float)
        w, sel = torch.topk(w, self.k, dim=-1)
        if self.norm:
            w = w / w.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(x)
        mask = F.one_hot(sel, num_classes=self.e).permute(2, 1, 0)
        for e in range(self.e):  # HF's loop: every expert, even on zero rows
            idx, top = torch.where(mask[e])
            cur = self.experts[e](x[None, top].reshape(-1, h)) * w[top, idx, None]
            out.index_add_(0, top, cur)
        if self.shared:
            out = out + torch.sigmoid(self.shared_expert_gate(x)) * self.shared_expert(x)
        return out.view(b, t, h), logits


class Layer(nn.Module):
    def __init__(self, c, kind, moe):
        super().__init__()
        h, eps = c["hidden_size"], c["rms_norm_eps"]
        self.input_layernorm = RMSNorm(h, eps)
        self.post_attention_layernorm = RMSNorm(h, eps)
        self.self_attn = Attention(c, kind)
        self.moe = moe
        ffn = MoeBlock(c, kind) if moe else Mlp(h, c["intermediate_size"])
        if kind == "mixtral":
            self.block_sparse_moe = ffn
        else:
            self.mlp = ffn

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        ffn = getattr(self, "block_sparse_moe", None) or self.mlp
        y = ffn(self.post_attention_layernorm(x))
        if self.moe:
            y, logits = y
            return x + y, logits
        return x + y, None


class CausalLM(nn.Module):
    def __init__(self, c):
        super().__init__()
        kind = c["model_type"]
        self.c = c
        n = c["num_hidden_layers"]
        mlp_only = set(c.get("mlp_only_layers", []))
        step = c.get("decoder_sparse_step", 1)
        moe = [kind in ("mixtral", "olmoe") or (i not in mlp_only and (i + 1) % step == 0)
               for i in range(n)]
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"], c.get("pad_token_id"))
        self.model.layers = nn.ModuleList(Layer(c, kind, moe[i]) for i in range(n))
        self.model.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        if c.get("tie_word_embeddings"):
            self.lm_head.weight = self.model.embed_tokens.weight
        hd = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
        self.inv_freq = 1.0 / (c["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))

    def forward(self, ids):
        b, t = ids.shape
        x = self.model.embed_tokens(ids)
        freqs = torch.arange(t).float()[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[None, None], emb.sin()[None, None]
        mask = torch.full((t, t), torch.finfo(torch.float32).min).triu(1)[None, None]
        router = []
        for layer in self.model.layers:
            x, logits = layer(x, cos, sin, mask)
            if logits is not None:
                router.append(logits)
        logits = self.lm_head(self.model.norm(x)).float()
        ce = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1),
                             ignore_index=-100)
        aux = torch.zeros(())
        if router:
            e = self.c.get("num_local_experts") or self.c["num_experts"]
            k = self.c["num_experts_per_tok"]
            p = F.softmax(torch.cat(router, dim=0), dim=-1)
            _, sel = torch.topk(p, k, dim=-1)
            f = F.one_hot(sel, e).float().mean(dim=0)
            aux = (f * p.mean(dim=0).unsqueeze(0)).sum() * e
        return ce + self.c.get("router_aux_loss_coef", 0.0) * aux, ce, aux


def build(model_dir):
    with open(model_dir + "/config.json") as f:
        c = json.load(f)
    m = CausalLM(c)
    weights = load_safetensors(model_dir + "/model.safetensors")
    missing, unexpected = m.load_state_dict(weights, strict=False)
    missing = [n for n in missing if not (c.get("tie_word_embeddings") and n == "lm_head.weight")]
    if missing or unexpected:
        raise SystemExit("weights do not match the model: missing %s unexpected %s" % (missing, unexpected))
    return m


def train_step(m, opt, ids):
    opt.zero_grad(set_to_none=True)
    total, ce, aux = m(ids)
    total.backward()
    norm = torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
    opt.step()
    return total.item(), ce.item(), aux.item(), norm.item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch_size", type=int, default=4)
    ap.add_argument("--seq_len", type=int, default=128)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    m = build(a.model)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.01, foreach=False)
    if a.check:
        g = json.load(open(a.model + "/train_golden.json"))
        ids = torch.tensor(g["batch"]["input_ids"])
        for s in range(len(g["steps"])):
            got = train_step(m, opt, ids)
            print(s, "ours %.7f %.7f %.7f %.7f" % got, "hf %.7f" % g["steps"][s]["loss_total"])
        return
    gen = torch.Generator().manual_seed(a.seed)
    ids = torch.randint(0, m.c["vocab_size"], (a.batch_size, a.seq_len), generator=gen)
    times, loss = [], 0.0
    for s in range(a.steps + 1):
        t0 = time.perf_counter()
        loss = train_step(m, opt, ids)[0]
        if s > 0:
            times.append(time.perf_counter() - t0)
    step = statistics.median(times)
    print(json.dumps({"peer": "torch %s eager" % torch.__version__, "model": a.model,
                      "batch_size": a.batch_size, "seq_len": a.seq_len, "threads": a.threads,
                      "median_step_s": step, "tokens_per_s": a.batch_size * a.seq_len / step,
                      "last_loss": loss, "step_times_s": times}))


if __name__ == "__main__":
    main()
