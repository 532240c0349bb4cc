#!/usr/bin/env python3
"""Logits error of quantized experts against the fixtures' bf16 golden.

For every fixture and every expert storage format, runs expertd-run on the
fixture's bf16 weights (model.bf16.safetensors) with --expert_dtype and
compares the last position's logits with the golden's
`bf16_weights_fp32_compute` case (Hugging Face, bf16 weights upcast to fp32).
Prints one markdown row per (fixture, format): the largest relative error
max|a - b| / max|b| over the cases, and how many cases keep the golden's
greedy argmax. A format whose group size does not divide a fixture's expert
widths is reported as such (expertd-run's error), not skipped silently.

  bazel build -c opt //engine/tools:expertd-run
  python3 tools/quant_accuracy.py [--run bazel-bin/engine/tools/expertd-run]
"""
import argparse
import json
import os
import subprocess
import tempfile

FIXTURES = ["mixtral", "qwen2_moe", "qwen2_moe_mixed", "olmoe", "qwen3_moe", "deepseek_v3"]
FORMATS = [("bf16", "bf16", 0), ("int8-g32", "int8", 32), ("int4-g32", "int4", 32),
           ("int4-g16", "int4", 16), ("int4-g128", "int4", 128), ("mxfp4", "mxfp4", 0),
           ("fp8", "fp8", 0)]


def run(binary, fixture_dir, ids, dtype, group, pack_dir):
    cmd = [binary, "--model=" + fixture_dir, "--weights=model.bf16.safetensors",
           "--tokens=" + ",".join(str(i) for i in ids), "--threads=1",
           "--expert_dtype=" + dtype, "--expert_group_size=%d" % group,
           "--expert_pack_dir=" + pack_dir]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return None, p.stderr.strip().splitlines()[-1]
    return json.loads(p.stdout)["last_logits"], None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", default="bazel-bin/engine/tools/expertd-run")
    ap.add_argument("--fixtures", default="tests/data/fixtures")
    a = ap.parse_args()
    print("| fixture | experts | max rel. logits error vs bf16 golden | argmax kept |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for fx in FIXTURES:
            d = os.path.abspath(os.path.join(a.fixtures, fx))
            golden = json.load(open(os.path.join(d, "golden.json")))
            cases = golden["bf16_weights_fp32_compute"]["cases"]
            for name, dtype, group in FORMATS:
                worst, kept, err = 0.0, 0, None
                for case in cases:
                    got, err = run(a.run, d, case["input_ids"], dtype, group,
                                   os.path.join(tmp, fx + name))
                    if got is None:
                        break
                    want = case["logits_last"]
                    num = max(abs(x - y) for x, y in zip(got, want))
                    worst = max(worst, num / max(abs(y) for y in want))
                    kept += int(got.index(max(got)) == want.index(max(want)))
                if err is not None:
                    print("| %s | %s | n/a: %s | |" % (fx, name, err.split(": ", 1)[-1][:90]))
                else:
                    print("| %s | %s | %.2e | %d/%d |" % (fx, name, worst, kept, len(cases)))


if __name__ == "__main__":
    main()
