#!/usr/bin/env python3
"""Renders an expertd-train --trace_out Chrome trace as an SVG timeline.

One row per lane (expert upload, expert compute, dispatch, combine,
optimizer, the trainer's step phases); one rectangle per event. --step=N
shows optimizer step N (0-based) alone, from its "step N: ..." events.
Usage:
  trace_to_svg.py TRACE.json OUT.svg [--from_ms=A --to_ms=B | --step=N]
"""
import json
import sys

COLORS = {1: "#4c78a8", 2: "#f58518", 3: "#54a24b", 4: "#b279a2", 5: "#e45756",
          6: "#bab0ac"}
STEP_LANE = 6


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    opts = dict(a[2:].split("=", 1) for a in argv[1:] if a.startswith("--"))
    if len(args) != 2:
        sys.exit(__doc__)
    trace = json.load(open(args[0]))["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in trace if e["ph"] == "M"}
    events = [e for e in trace if e["ph"] == "X"]
    if "step" in opts:
        phases = [e for e in events if e["tid"] == STEP_LANE and
                  e["name"].startswith("step %s:" % opts["step"])]
        if not phases:
            sys.exit("no events of step %s in %s" % (opts["step"], args[0]))
        opts["from_ms"] = min(e["ts"] for e in phases) / 1e3
        opts["to_ms"] = max(e["ts"] + e["dur"] for e in phases) / 1e3
    lo = float(opts.get("from_ms", min(e["ts"] for e in events) / 1e3)) * 1e3
    hi = float(opts.get("to_ms", max(e["ts"] + e["dur"] for e in events) / 1e3)) * 1e3
    lanes = sorted({e["tid"] for e in events})
    width, left, row = 1200, 230, 34
    height = row * len(lanes) + 60
    scale = (width - left - 20) / max(1.0, hi - lo)
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="sans-serif" font-size="12">' % (width, height),
           '<rect width="100%" height="100%" fill="white"/>']
    for i, lane in enumerate(lanes):
        y = 20 + i * row
        out.append('<text x="8" y="%d">%s</text>' % (y + 20, names.get(lane, lane)))
        out.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#ddd"/>' %
                   (left, y + row - 2, width - 20, y + row - 2))
        for e in events:
            if e["tid"] != lane or e["ts"] + e["dur"] < lo or e["ts"] > hi:
                continue
            x = left + (max(e["ts"], lo) - lo) * scale
            w = max(0.5, (min(e["ts"] + e["dur"], hi) - max(e["ts"], lo)) * scale)
            color = COLORS.get(lane, "#888")
            if lane == STEP_LANE and "forward" not in e["name"]:
                color = "#79706e"  # what runs after backward, darker
            out.append('<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s">'
                       '<title>%s %.3f ms</title></rect>' %
                       (x, y + 4, w, row - 10, color, e["name"], e["dur"] / 1e3))
            if lane == STEP_LANE and w > 8 * len(e["name"]):  # the phase's name, if it fits
                out.append('<text x="%.1f" y="%d">%s</text>' % (x + 4, y + 21, e["name"]))
    axis_y = 20 + len(lanes) * row + 18
    for k in range(11):
        t = lo + (hi - lo) * k / 10
        x = left + (t - lo) * scale
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%.1f ms</text>' %
                   (x, axis_y, (t - lo) / 1e3))
    out.append("</svg>")
    open(args[1], "w").write("\n".join(out) + "\n")


if __name__ == "__main__":
    main(sys.argv)
