"""Latency-over-time plot (PNG) of a run's timeline: matplotlib when installed, else a small built-in renderer."""

from ..pngplot import Canvas as _Canvas

_SERIES = [("SET", "p50", (120, 160, 230)), ("SET", "p99", (20, 60, 170)),
           ("GET", "p50", (250, 170, 90)), ("GET", "p99", (200, 40, 30))]


def write_plot(path, timeline, title="durakv bench"):
    """Writes the PNG; returns a note for the user (which renderer was used)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        _write_basic_png(path, timeline, title)
        return (f"wrote {path} (matplotlib is not installed: basic built-in plot; "
                "`pip install matplotlib` for a labelled one)")
    t = [p["t"] for p in timeline]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 6), sharex=True, gridspec_kw={"height_ratios": [2, 1]})
    for cmd, pct, color in _SERIES:
        ys = [p.get(cmd, {}).get(pct) for p in timeline]
        if any(y is not None for y in ys):
            ax1.plot(t, ys, label=f"{cmd} {pct}", color=tuple(c / 255 for c in color))
    ax1.set_ylabel("latency (ms)")
    ax1.set_yscale("log")
    ax1.grid(True, which="both", alpha=0.3)
    ax1.legend(loc="upper right")
    ax1.set_title(title)
    ax2.plot(t, [p["ops_per_sec"] for p in timeline], color="green")
    ax2.set_ylabel("ops/s")
    ax2.set_xlabel("time (s)")
    ax2.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return f"wrote {path}"


def _panel(cv, x0, y0, x1, y1, series, tmax, ymax, unit):
    grey = (200, 200, 200)
    for frac in (0.0, 0.25, 0.5, 0.75, 1.0):
        y = y1 - int(frac * (y1 - y0))
        cv.line(x0, y, x1, y, grey)
        cv.text(4, y - 5, _num(ymax * frac))
    cv.line(x0, y0, x0, y1, (0, 0, 0))
    cv.line(x0, y1, x1, y1, (0, 0, 0))
    cv.text(4, y0 - 16, unit)
    for points, color in series:
        prev = None
        for t, v in points:
            if v is None:
                prev = None
                continue
            xy = (x0 + int(t / tmax * (x1 - x0)), y1 - int(min(v, ymax) / ymax * (y1 - y0)))
            if prev is not None:
                cv.line(prev[0], prev[1], xy[0], xy[1], color, thick=2)
            else:
                cv.dot(xy[0], xy[1], color)
            prev = xy


def _num(v):
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}" if v >= 1 else f"{v:.3f}"


def _write_basic_png(path, timeline, title):
    width, height = 900, 560
    cv = _Canvas(width, height)
    cv.text(70, 8, title[:90])
    tmax = max([p["t"] for p in timeline] or [1])
    lat_series, ymax = [], 0.0
    for cmd, pct, color in _SERIES:
        pts = [(p["t"], p.get(cmd, {}).get(pct)) for p in timeline]
        if any(v is not None for _, v in pts):
            lat_series.append((pts, color))
            ymax = max([ymax] + [v for _, v in pts if v is not None])
    _panel(cv, 70, 50, width - 20, 330, lat_series, tmax, (ymax * 1.1) or 1.0, "MS")
    x = 300
    for cmd, pct, color in _SERIES:
        if any(cmd in p for p in timeline):
            cv.line(x, 34, x + 20, 34, color, thick=3)
            cv.text(x + 26, 30, f"{cmd} {pct}")
            x += 130
    ops = [(p["t"], p["ops_per_sec"]) for p in timeline]
    _panel(cv, 70, 380, width - 20, 520, [(ops, (30, 150, 60))], tmax, (max([v for _, v in ops] or [1]) * 1.1) or 1, "OPS/S")
    for frac in (0.0, 0.25, 0.5, 0.75, 1.0):
        cv.text(70 + int(frac * (width - 90)) - 8, 530, _num(tmax * frac))
    cv.text(width // 2 - 40, 545, "TIME (S)")
    with open(path, "wb") as f:
        f.write(cv.png())
