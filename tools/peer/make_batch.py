#!/usr/bin/env python3
"""Cuts a JSON array of token ids into expertd-train's BATCH.json rows.

  python3 tools/peer/make_batch.py IDS.json ROW_LEN OUT.json
Rows are consecutive, non-overlapping ROW_LEN-token slices (the short tail is dropped).
"""
import json
import sys


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: make_batch.py IDS.json ROW_LEN OUT.json")
    ids = json.load(open(sys.argv[1]))
    n = int(sys.argv[2])
    rows = [ids[i:i + n] for i in range(0, len(ids) - n + 1, n)]
    if not rows:
        sys.exit("fewer than ROW_LEN ids")
    with open(sys.argv[3], "w") as f:
        json.dump({"input_ids": rows}, f)
    print("%d rows of %d tokens" % (len(rows), n))


if __name__ == "__main__":
    main()
