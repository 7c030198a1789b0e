"""The report's PNG plots, drawn with tools/pngplot (no matplotlib): acknowledged writes per second with the
fault windows shaded and the longest gap marked; failover durations per run; latency percentiles per mode."""

import math

from ..pngplot import PALETTE, Chart, num, tint

FAULT_SHADE = (250, 205, 205)
GAP_COLOR = (200, 30, 30)
ACK_COLOR = (44, 120, 200)
MISS_COLOR = (230, 140, 30)


def plot_write_rate(path, rate, faults=(), gap=None, title="acknowledged writes per second"):
    """rate: [RatePoint] (acked/failed/indefinite per bucket, t_s from the start); faults: [(start_s, end_s,
    label)], end_s None = until the end; gap: (start_s, end_s) of the longest write gap, or None."""
    t_end = (rate[-1].t_s + (rate[1].t_s - rate[0].t_s if len(rate) > 1 else 1.0)) if rate else 1.0
    for a, b, _ in faults:
        t_end = max(t_end, a, b or 0)
    if gap:
        t_end = max(t_end, gap[1])
    peak = max([p.acked for p in rate] + [p.failed + p.indefinite for p in rate] + [1])
    ch = Chart(title=title, x_label="time (s)", y_label="writes/s").ranges(0, t_end, 0, peak * 1.25)
    for a, b, label in faults:
        ch.shade_x(a, t_end if b is None else b, FAULT_SHADE, label or "fault")
    ch.frame()
    if rate:
        width = (rate[1].t_s - rate[0].t_s) if len(rate) > 1 else 1.0
        # Each bucket is drawn at its middle, so a stall lands where it happened.
        ch.polyline([(p.t_s + width / 2, p.acked) for p in rate], ACK_COLOR, thick=2)
        misses = [(p.t_s + width / 2, p.failed + p.indefinite) for p in rate]
        if any(v for _, v in misses):
            ch.polyline(misses, MISS_COLOR, thick=1)
    if gap:
        ch.bracket(gap[0], gap[1], peak * 1.12, GAP_COLOR, f"gap {gap[1] - gap[0]:.2f} s")
    items = [("acked", ACK_COLOR)]
    if any(p.failed + p.indefinite for p in rate):
        items.append(("failed+info", MISS_COLOR))
    if faults:
        items.append(("fault", FAULT_SHADE))
    ch.legend(items)
    ch.save(path)
    return path


def plot_failover(path, runs: dict, title="failover: write unavailability per run"):
    """runs: {label: [seconds per run]} (e.g. planned / unplanned); bars grouped by run number, a dashed line
    at each label's median."""
    labels = list(runs)
    n = max([len(v) for v in runs.values()] + [1])
    peak = max([x for v in runs.values() for x in v if x is not None] + [1.0])
    ch = Chart(title=title, x_label="run", y_label="seconds").ranges(0, n, 0, peak * 1.25)
    ch.frame(x_labels=[(i + 0.5, str(i + 1)) for i in range(n)])
    group = 0.8 / max(1, len(labels))
    for j, label in enumerate(labels):
        color = PALETTE[j % len(PALETTE)]
        for i, v in enumerate(runs[label]):
            if v is None:
                continue
            xa = i + 0.1 + j * group
            ch.bar(xa, xa + group, v, color, num(round(v, 1)))
        vals = sorted(v for v in runs[label] if v is not None)
        if vals:
            med = _median(vals)
            ch.cv.dashed_hline(ch.x0, ch.x1, ch.py(med), color)
    ch.legend([(f"{label} (median {num(round(_median(sorted(x for x in runs[label] if x is not None)), 2))} s)"
                if any(x is not None for x in runs[label]) else label, PALETTE[j % len(PALETTE)])
               for j, label in enumerate(labels)])
    ch.save(path)
    return path


def plot_latency(path, modes: dict, percentiles=("p50", "p99", "p99.9"), title="write latency per mode",
                 log_y=True):
    """modes: {mode: {"p50": ms, "p99": ms, ...}}; bars grouped by mode, one colour per percentile, log scale
    by default (sync is an order of magnitude above none)."""
    names = list(modes)
    values = [modes[m].get(p) for m in names for p in percentiles]
    present = [v for v in values if v is not None and v > 0] or [1.0]
    lo, hi = min(present), max(present)
    if log_y:
        ch = Chart(title=title, x_label="mode", y_label="ms (log)").ranges(
            0, len(names), 10 ** _floor_log(lo), hi * 3, log_y=True)
    else:
        ch = Chart(title=title, x_label="mode", y_label="ms").ranges(0, len(names), 0, hi * 1.25)
    ch.frame(x_labels=[(i + 0.5, m) for i, m in enumerate(names)])
    group = 0.8 / max(1, len(percentiles))
    for i, m in enumerate(names):
        for j, p in enumerate(percentiles):
            v = modes[m].get(p)
            if v is None:
                continue
            xa = i + 0.1 + j * group
            ch.bar(xa, xa + group, v, tint(PALETTE[j % len(PALETTE)], 0.1 * j), num(round(v, 3)))
    ch.legend([(p, tint(PALETTE[j % len(PALETTE)], 0.1 * j)) for j, p in enumerate(percentiles)])
    ch.save(path)
    return path


def _median(vals):
    n = len(vals)
    return vals[n // 2] if n % 2 else (vals[n // 2 - 1] + vals[n // 2]) / 2


def _floor_log(v):
    return math.floor(math.log10(v))
