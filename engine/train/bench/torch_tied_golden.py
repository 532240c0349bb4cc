#!/usr/bin/python3
"""Writes the tied-embeddings reference that //engine/train:tied_embeddings_test checks
(engine/train/testdata/mixtral_tied_golden.json), with the PyTorch restatement of the HF
modules in torch_train_step.py (transformers is not packaged for Debian 12; python3-torch is).

The model is tests/data/fixtures/mixtral with "tie_word_embeddings": true and without
lm_head.weight, so the LM head is the embedding matrix; the test builds the same directory.
Before writing anything, the restatement is checked against the fixture's own transformers
reference (train_golden.json, untied): every gradient within 1e-5 relative per tensor and the
10 AdamW step losses within 1e-6. It exits 1 if they differ.

  /usr/bin/python3 engine/train/bench/torch_tied_golden.py \
      > engine/train/testdata/mixtral_tied_golden.json
"""
import base64
import json
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_train_step as peer  # noqa: E402

FIXTURE = "tests/data/fixtures/mixtral"
LR, WEIGHT_DECAY, MAX_NORM, STEPS = 1e-3, 0.01, 1.0, 10


def build(config, weights):
    m = peer.CausalLM(config)
    missing, unexpected = m.load_state_dict(weights, strict=False)
    missing = [n for n in missing if not (config.get("tie_word_embeddings") and n == "lm_head.weight")]
    if missing or unexpected:
        raise SystemExit("weights do not match: missing %s unexpected %s" % (missing, unexpected))
    return m


def unpack(b64):
    raw = base64.b64decode(b64)
    return torch.tensor(struct.unpack("<%df" % (len(raw) // 4), raw))


def losses(m, ids):
    total, ce, aux = m(ids)
    return {"total": total.item(), "ce": ce.item(), "aux": aux.item()}


def train(m, ids):
    """Gradients at the initial weights, then STEPS AdamW steps as the fixtures' oracle runs them."""
    opt = torch.optim.AdamW(m.parameters(), lr=LR, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=WEIGHT_DECAY, foreach=False)
    first_grads, steps = None, []
    for s in range(STEPS):
        opt.zero_grad(set_to_none=True)
        total, ce, aux = m(ids)
        total.backward()
        if s == 0:
            first_grads = {n: p.grad.detach().clone() for n, p in m.named_parameters()
                           if p.grad is not None}
        norm = torch.nn.utils.clip_grad_norm_(m.parameters(), MAX_NORM)
        opt.step()
        steps.append({"loss_total": total.item(), "ce": ce.item(), "aux": aux.item(),
                      "grad_norm_before_clip": norm.item()})
    with torch.no_grad():
        final = losses(m, ids)
    return first_grads, steps, final


def check_restatement(config, weights, golden, ids):
    grads, steps, _ = train(build(config, weights), ids)
    worst = 0.0
    for name, ref in golden["grads"]["params"].items():
        want = unpack(ref["b64"])
        got = grads[name].flatten()
        worst = max(worst, ((got - want).abs().max() / want.abs().max()).item())
    loss_diff = max(abs(a["loss_total"] - b["loss_total"]) for a, b in zip(steps, golden["steps"]))
    print("restatement vs transformers (untied): gradients %.2e relative, step losses %.2e"
          % (worst, loss_diff), file=sys.stderr)
    if worst > 1e-5 or loss_diff > 1e-6:
        raise SystemExit("the restatement no longer matches the transformers reference")


def main():
    torch.set_num_threads(1)
    with open(FIXTURE + "/config.json") as f:
        config = json.load(f)
    with open(FIXTURE + "/train_golden.json") as f:
        golden = json.load(f)
    weights = peer.load_safetensors(FIXTURE + "/model.safetensors")
    ids = torch.tensor(golden["batch"]["input_ids"])
    check_restatement(config, weights, golden, ids)

    tied_config = dict(config, tie_word_embeddings=True)
    tied_weights = {n: w for n, w in weights.items() if n != "lm_head.weight"}
    m = build(tied_config, tied_weights)
    with torch.no_grad():
        initial = losses(m, ids)
    grads, steps, final = train(m, ids)
    embed = grads["model.embed_tokens.weight"]
    global_norm = torch.norm(torch.stack([g.norm() for g in grads.values()])).item()
    out = {
        "source": "engine/train/bench/torch_tied_golden.py (torch %s, the restatement of "
                  "torch_train_step.py, checked against %s/train_golden.json)"
                  % (torch.__version__, FIXTURE),
        "model": FIXTURE + " with tie_word_embeddings=true, without lm_head.weight",
        "input_ids": golden["batch"]["input_ids"],
        "optimizer": {"lr": LR, "weight_decay": WEIGHT_DECAY, "max_norm": MAX_NORM},
        "loss": initial,
        "global_l2_norm": global_norm,
        "embed_tokens_grad": {
            "shape": list(embed.shape),
            "b64": base64.b64encode(embed.flatten().numpy().astype("<f4").tobytes()).decode(),
        },
        "steps": steps,
        "loss_after_final_step": final,
    }
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
