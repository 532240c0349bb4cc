#!/usr/bin/env python3
"""Draws tools/soak.sh's samples (t_s,rss_kib,fds,threads) as three stacked
line charts (y axes from zero) in one SVG, and prints per series: min, max, first and last
values and the least-squares slope over the run's second half (after warm-up),
per hour: a flat series has a slope near zero.

    python3 tools/soak_plot.py out/soak/samples.csv docs/images/soak.svg
"""
import csv
import sys

W, H, PAD_L, PAD_R, PAD_T, PANEL_H, GAP = 760, 0, 70, 20, 30, 150, 40
SERIES = [("rss_kib", "RSS (MiB)", 1 / 1024.0, "#1f77b4"),
          ("fds", "open fds", 1.0, "#d62728"),
          ("threads", "threads", 1.0, "#2ca02c")]


def slope_per_hour(ts, ys):
    n = len(ts)
    if n < 2:
        return 0.0
    mt, my = sum(ts) / n, sum(ys) / n
    var = sum((t - mt) ** 2 for t in ts)
    if var == 0:
        return 0.0
    return sum((t - mt) * (y - my) for t, y in zip(ts, ys)) / var * 3600


def panel(out, top, ts, ys, label, color, t_max):
    # From zero: a leak shows as a slope, and noise is not magnified.
    lo, hi = 0.0, max(max(ys) * 1.15, 1.0)
    x0, x1 = PAD_L, W - PAD_R
    y0, y1 = top + PANEL_H, top

    def x(t):
        return x0 + (x1 - x0) * t / max(t_max, 1)

    def y(v):
        return y0 - (y0 - y1) * (v - lo) / (hi - lo)

    out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>'
               % (x0, y1, x1 - x0, PANEL_H))
    out.append('<text x="%d" y="%d" font-size="13">%s</text>' % (x0, top - 6, label))
    for frac in (0, 0.5, 1):
        v = lo + (hi - lo) * frac
        out.append('<text x="%d" y="%.1f" font-size="11" text-anchor="end">%.1f</text>'
                   % (x0 - 4, y(v) + 4, v))
    pts = " ".join("%.1f,%.1f" % (x(t), y(v)) for t, v in zip(ts, ys))
    out.append('<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>'
               % (color, pts))


def main():
    rows = list(csv.DictReader(open(sys.argv[1])))
    if not rows:
        sys.exit("soak_plot.py: no samples")
    ts = [float(r["t_s"]) for r in rows]
    t_max = ts[-1]
    height = PAD_T + len(SERIES) * (PANEL_H + GAP) + 10
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="sans-serif">' % (W, height),
           '<rect width="100%" height="100%" fill="white"/>']
    top = PAD_T
    half = [i for i, t in enumerate(ts) if t >= t_max / 2]
    for key, label, scale, color in SERIES:
        ys = [float(r[key]) * scale for r in rows]
        panel(out, top, ts, ys, label, color, t_max)
        s = slope_per_hour([ts[i] for i in half], [ys[i] for i in half])
        print("%-10s min %.1f max %.1f first %.1f last %.1f second-half slope %+.2f/h"
              % (key if key != "rss_kib" else "rss_mib", min(ys), max(ys), ys[0], ys[-1], s))
        top += PANEL_H + GAP
    out.append('<text x="%d" y="%d" font-size="11" text-anchor="end">time (s), 0..%d</text>'
               % (W - PAD_R, top - GAP + 16, t_max))
    out.append("</svg>")
    with open(sys.argv[2], "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
