#!/usr/bin/env python3
"""Turns a `bazel test` run into one closing line: "N passed, N failed".

Counts individual test cases from each target's JUnit XML (gtest writes one);
a target that failed to build, timed out or left no XML counts as one failure
(or one pass, for a passing non-gtest target). Exit status 1 when anything failed.
"""
import os
import re
import sys
import xml.etree.ElementTree as ET

log_path, testlogs = sys.argv[1], sys.argv[2]
status_re = re.compile(r"^(//\S+)\s+(?:\(cached\)\s+)?(PASSED|FAILED|TIMEOUT|FLAKY|NO STATUS|FAILED TO BUILD|SKIPPED)\b")
targets = {}
with open(log_path, errors="replace") as f:
    for line in f:
        m = status_re.match(line.strip())
        if m:
            targets[m.group(1)] = m.group(2)

passed = failed = skipped = 0
for target, status in sorted(targets.items()):
    pkg, name = target[2:].split(":")
    xml_path = os.path.join(testlogs, pkg, name, "test.xml")
    cases = []
    if status in ("PASSED", "FAILED", "FLAKY") and os.path.exists(xml_path):
        try:
            cases = list(ET.parse(xml_path).getroot().iter("testcase"))
        except ET.ParseError:
            cases = []
    if not cases:
        if status == "SKIPPED":
            skipped += 1  # incompatible with this configuration (CUDA-only targets without --config=cuda)
            continue
        if status in ("PASSED", "FLAKY"):
            passed += 1
        else:
            failed += 1
            print(f"FAILED: {target} ({status})")
        continue
    for case in cases:
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
            print(f"FAILED: {target} {case.get('classname')}.{case.get('name')}")
        elif case.get("result") == "skipped" or case.find("skipped") is not None:
            skipped += 1
        else:
            passed += 1
    if status == "FAILED" and all(c.find("failure") is None for c in cases):
        failed += 1  # crashed after its XML, or a shell-level failure
        print(f"FAILED: {target} (exit status)")

if not targets:
    failed += 1
    print("FAILED: no test target ran (build error?)")
print(f"{passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else ""))
sys.exit(1 if failed else 0)
