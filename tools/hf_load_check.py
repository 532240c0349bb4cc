#!/usr/bin/env python3
"""Does Hugging Face transformers load an expertd fine-tune checkpoint, and compute what we do?

For a checkpoint directory a job wrote (DATA_DIR/jobs/ftjob-.../checkpoint-N; its path is in the
`checkpoints` table, docs/jobs.md):

  1. AutoModelForCausalLM.from_pretrained(CKPT), fp32, eager attention, and
     GenerationConfig.from_pretrained(CKPT): the directory must be a plain HF model directory.
  2. Its logits at the last prompt position against `expertd-run --model=CKPT` on the same
     token ids (max |ours - hf| / max |hf|).
  3. A LoRA checkpoint (CKPT/adapter present) with --base=DIR, the model the job trained:
     PeftModel.from_pretrained(base, CKPT/adapter), unmerged, against expertd-run on CKPT, whose
     root holds the merged weights.

Prints one line per check and then "VERDICT: PASS" or "VERDICT: FAIL"; exit status 0 / 1, and
2 with "VERDICT: NOT RUN" when transformers (or, for step 3, peft) cannot be imported. Not part
of CI: this repository's machines have no transformers (Debian 12 does not package it).

  bazel build -c opt //engine/tools:expertd-run
  python3 tools/hf_load_check.py --checkpoint=CKPT [--base=BASE_DIR] [--tokens=1,5,9,200]

Tolerances: 1e-4 for the merged/full weights (both sides compute in fp32 from the same stored
weights; the fixtures agree with transformers to ~1e-6). The unmerged adapter gets --adapter_tol
(default 2e-2): the checkpoint's merged weights were rounded to their stored dtype (bf16 moves
a weight by up to 2^-9 of itself), PEFT's unmerged forward was not.
"""
import argparse
import json
import os
import subprocess
import sys


def rel_error(ours, ref):
    diff = max(abs(a - b) for a, b in zip(ours, ref))
    return diff / max(abs(b) for b in ref)


def expertd_logits(binary, model_dir, ids, threads):
    cmd = [binary, "--model=" + model_dir, "--tokens=" + ",".join(map(str, ids)),
           "--threads=%d" % threads]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit("expertd-run failed: %s\n%s" % (" ".join(cmd), p.stderr))
    return json.loads(p.stdout)["last_logits"]


def hf_logits(model, ids):
    import torch
    with torch.no_grad():
        out = model(torch.tensor([ids]))
    return out.logits[0, -1].float().tolist()


def check(name, ours, ref, tol, results):
    if len(ours) != len(ref):
        results.append(False)
        print("FAIL %s: %d logits from expertd, %d from transformers" % (name, len(ours), len(ref)))
        return
    err = rel_error(ours, ref)
    ok = err <= tol
    results.append(ok)
    argmax = max(range(len(ours)), key=ours.__getitem__) == max(range(len(ref)), key=ref.__getitem__)
    print("%s %s: max|diff|/max|ref| = %.3g (tolerance %g), same argmax: %s"
          % ("PASS" if ok else "FAIL", name, err, tol, argmax))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", required=True, help="a job's checkpoint directory")
    ap.add_argument("--base", default="", help="the model the job trained (LoRA checkpoints)")
    ap.add_argument("--tokens", default="1,5,9,200,31,77", help="prompt token ids")
    ap.add_argument("--run", default="bazel-bin/engine/tools/expertd-run")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--adapter_tol", type=float, default=2e-2)
    ap.add_argument("--trust_remote_code", action="store_true",
                    help="for models transformers only has as remote code (DeepSeek-V3 before 4.51)")
    a = ap.parse_args()
    ids = [int(t) for t in a.tokens.split(",")]
    ckpt = os.path.abspath(a.checkpoint)
    adapter = os.path.join(ckpt, "adapter")
    try:
        import torch
        import transformers
        from transformers import AutoModelForCausalLM, GenerationConfig
    except ImportError as e:
        print("transformers is not importable here (%s)\nVERDICT: NOT RUN" % e)
        return 2

    print("transformers %s, torch %s" % (transformers.__version__, torch.__version__))
    results = []
    ours = expertd_logits(a.run, ckpt, ids, a.threads)
    gen = GenerationConfig.from_pretrained(ckpt)
    print("generation_config.json: bos %s eos %s pad %s"
          % (gen.bos_token_id, gen.eos_token_id, gen.pad_token_id))
    model = AutoModelForCausalLM.from_pretrained(
        ckpt, torch_dtype=torch.float32, attn_implementation="eager",
        trust_remote_code=a.trust_remote_code).eval()
    check("AutoModelForCausalLM(%s)" % ckpt, ours, hf_logits(model, ids), a.tol, results)
    del model

    if os.path.isdir(adapter):
        if not a.base:
            print("FAIL %s is a LoRA adapter: pass --base=DIR (the model the job trained)" % adapter)
            results.append(False)
        else:
            try:
                from peft import PeftModel
            except ImportError as e:
                print("peft is not importable here (%s)\nVERDICT: NOT RUN" % e)
                return 2
            base = AutoModelForCausalLM.from_pretrained(
                os.path.abspath(a.base), torch_dtype=torch.float32, attn_implementation="eager",
                trust_remote_code=a.trust_remote_code)
            peft_model = PeftModel.from_pretrained(base, adapter).eval()
            check("PeftModel(%s, %s)" % (a.base, adapter), ours, hf_logits(peft_model, ids),
                  a.adapter_tol, results)

    print("VERDICT: %s" % ("PASS" if all(results) else "FAIL"))
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
