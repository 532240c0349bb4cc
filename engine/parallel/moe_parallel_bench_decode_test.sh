#!/usr/bin/env bash
# moe_parallel_bench --decode at a toy size: one row per (zipf, sequences),
# one device and both strategies timed, and the labelled link model charges
# one call (MoEShard's all-reduce) or three (expert parallelism) per step.
set -euo pipefail
BENCH="engine/parallel/moe_parallel_bench"
"$BENCH" --decode --experts=8 --hidden=64 --intermediate=64 --top_k=2 --devices=2 \
  --zipf=0,1.2 --batches=1,4 --reps=1 > "$TEST_TMPDIR/out.txt"
/usr/bin/python3 - "$TEST_TMPDIR/out.txt" <<'PY'
import sys
lines = open(sys.argv[1]).read().splitlines()
assert any("assumed, not measured" in l for l in lines), lines[:3]
head = next(l for l in lines if l.startswith("| experts"))
cols = [c.strip() for c in head.strip("|").split("|")]
rows = [dict(zip(cols, (c.strip() for c in l.strip("|").split("|"))))
        for l in lines if l.startswith("| 8 |")]
assert [(r["zipf"], r["seqs"]) for r in rows] == [
    ("0.0", "1"), ("0.0", "4"), ("1.2", "1"), ("1.2", "4")], rows
for r in rows:
    seqs, active = int(r["seqs"]), int(r["active experts"])
    assert 2 <= active <= min(8, 2 * seqs), r
    for c in ("1-dev compute ms", "shard compute ms (max)", "EP compute ms (max)"):
        assert float(r[c]) > 0, (c, r)
    shard_us, ep_us = map(float, r["NVLink model coll. us shard/EP"].split("/"))
    assert 10.0 <= shard_us < 10.1 and 30.0 <= ep_us < 30.1, r
print("ok")
PY
