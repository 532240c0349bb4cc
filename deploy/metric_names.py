#!/usr/bin/env python3
"""Checks that every expertd metric a dashboard or rule file queries is exported.

usage: metric_names.py SCRAPE.txt FILE...
SCRAPE.txt is a GET /metrics answer of a running expertd. Each FILE is a
Grafana dashboard (.json: every target's "expr") or a Prometheus rules file
(.yaml: every rule's "expr"). A name counts as exported when the scrape has a
sample or a "# TYPE" line for it; for a histogram family F, F_bucket, F_sum
and F_count count too. Prints each unknown name with where it is used;
exit status 1 when there is one, or when the files query no expertd metric.
"""
import json
import re
import sys

import yaml

NAME = re.compile(r"\bexpertd:[a-zA-Z_][a-zA-Z0-9_]*")


def exported_names(scrape):
    names = set()
    for line in scrape.splitlines():
        if line.startswith("# TYPE "):
            _, _, family, kind = line.split(" ", 3)
            names.add(family)
            if kind == "histogram":
                names.update(family + s for s in ("_bucket", "_sum", "_count"))
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, 1)[0])
    return names


def exprs_in_dashboard(node):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "expr" and isinstance(value, str):
                yield value
            elif key == "query" and isinstance(value, str):
                yield value
            else:
                yield from exprs_in_dashboard(value)
    elif isinstance(node, list):
        for item in node:
            yield from exprs_in_dashboard(item)


def exprs_in_rules(rules):
    for group in rules.get("groups", []):
        for rule in group.get("rules", []):
            yield rule["expr"]


def main(argv):
    with open(argv[1]) as f:
        exported = exported_names(f.read())
    if not any(n.startswith("expertd:") for n in exported):
        print(f"{argv[1]}: no expertd metric in the scrape")
        return 1
    unknown = 0
    queried = 0
    for path in argv[2:]:
        with open(path) as f:
            if path.endswith(".json"):
                exprs = list(exprs_in_dashboard(json.load(f)))
            else:
                exprs = list(exprs_in_rules(yaml.safe_load(f)))
        for expr in exprs:
            for name in NAME.findall(expr):
                queried += 1
                if name not in exported:
                    unknown += 1
                    print(f"{path}: {name} is not exported by expertd (in: {expr.strip()[:120]})")
    if queried == 0:
        print("no expertd metric queried at all")
        return 1
    print(f"metric names: {queried} uses checked, {unknown} unknown")
    return 1 if unknown else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
