#!/usr/bin/env python3
"""Counts every status a soak saw, with its message, so that none goes unexplained.

  tools/soak_statuses.py EXPERTD_LOG [BENCH_CSV...]

From the daemon's JSON log (--log_format=json --log_requests): one line per
(rpc, code, error message) of the "request" lines, with its count. From each
expert-bench CSV: one line per (outcome, error). Exits 1 when a daemon status
is not one the soak expects (OK, CANCELLED, DEADLINE_EXCEEDED).
"""
import collections
import csv
import json
import sys

EXPECTED = {"OK", "CANCELLED", "DEADLINE_EXCEEDED"}


def daemon_statuses(path):
    counts = collections.Counter()
    with open(path, errors="replace") as f:
        for line in f:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if not isinstance(entry, dict) or entry.get("msg") != "request":
                continue
            counts[(entry.get("rpc", "?"), entry.get("code", "?"), entry.get("error", ""))] += 1
    return counts


def bench_outcomes(path):
    with open(path, newline="") as f:
        return collections.Counter((r["outcome"], r["error"]) for r in csv.DictReader(f))


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    daemon = daemon_statuses(argv[1])
    print("daemon statuses (rpc, code, message: count):")
    unexpected = 0
    for (rpc, code, error), n in sorted(daemon.items(), key=lambda kv: -kv[1]):
        mark = "" if code in EXPECTED else "   <- unexpected"
        unexpected += 0 if code in EXPECTED else n
        print(f"  {rpc} {code} {error!r}: {n}{mark}")
    for path in argv[2:]:
        print(f"{path} (outcome, message: count):")
        for (outcome, error), n in sorted(bench_outcomes(path).items(), key=lambda kv: -kv[1]):
            print(f"  {outcome} {error!r}: {n}")
    print(f"unexpected daemon statuses: {unexpected}")
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
