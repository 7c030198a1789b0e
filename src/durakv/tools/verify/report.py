"""Report rendering: tables as Markdown and as plain text for the terminal, JSON, and a report directory
(report.md with the PNG plots inline, report.txt, report.json).

Builders turn checker results into the seed's tables: acked writes per run, async loss against the lag,
linearizability per key, failover durations per run, latency per durability mode.
"""

import json
import os
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from .history import plain


def fmt_cell(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.3f}"
    return str(v)


def _numeric(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


@dataclass
class Table:
    title: str
    columns: list
    rows: list                      # lists of raw cells: numbers, text, None
    notes: list = field(default_factory=list)
    formats: dict = field(default_factory=dict)   # column -> format string ("{:.1f} s") or callable
    name: str = ""                  # key in JSON; derived from the title when empty

    def _cell(self, col, v) -> str:
        f = self.formats.get(col)
        if v is None or f is None:
            return fmt_cell(v)
        return f(v) if callable(f) else f.format(v)

    def cells(self) -> list:
        return [[self._cell(c, v) for c, v in zip(self.columns, row)] for row in self.rows]

    def _right(self) -> list:
        """A column is right-aligned when every non-empty cell in it is a number."""
        out = []
        for j in range(len(self.columns)):
            vals = [r[j] for r in self.rows if j < len(r) and r[j] is not None]
            out.append(bool(vals) and all(_numeric(v) for v in vals))
        return out

    def to_markdown(self) -> str:
        def esc(s):
            return str(s).replace("|", "\\|").replace("\n", " ")
        right = self._right()
        lines = [f"### {self.title}", "", "| " + " | ".join(esc(c) for c in self.columns) + " |",
                 "|" + "|".join("---:" if r else "---" for r in right) + "|"]
        lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in self.cells()]
        for n in self.notes:
            lines += ["", n]
        return "\n".join(lines) + "\n"

    def to_text(self) -> str:
        cells = self.cells()
        right = self._right()
        widths = [max([len(str(c))] + [len(r[j]) for r in cells]) for j, c in enumerate(self.columns)]

        def line(items):
            return "  ".join((s.rjust(w) if r else s.ljust(w)) for s, w, r in zip(items, widths, right)).rstrip()
        out = [self.title, line([str(c) for c in self.columns]), "  ".join("-" * w for w in widths)]
        out += [line(r) for r in cells]
        out += self.notes
        return "\n".join(out) + "\n"

    def to_dict(self) -> dict:
        return {"title": self.title, "columns": list(self.columns),
                "rows": [[plain(v) for v in r] for r in self.rows], "notes": list(self.notes)}

    @property
    def key(self) -> str:
        return self.name or "".join(ch if ch.isalnum() else "_" for ch in self.title.lower()).strip("_")


@dataclass
class Plot:
    filename: str
    caption: str
    draw: Callable[[str], Any]


@dataclass
class Report:
    title: str
    tables: list = field(default_factory=list)
    plots: list = field(default_factory=list)
    text: list = field(default_factory=list)      # paragraphs (already plain text)
    data: dict = field(default_factory=dict)      # anything else for the JSON (raw results)

    def to_markdown(self) -> str:
        parts = [f"# {self.title}", ""]
        for t in self.text:
            parts += [t, ""]
        for t in self.tables:
            parts.append(t.to_markdown())
        for p in self.plots:
            parts += [f"![{p.caption}]({p.filename})", "", f"*{p.caption}*", ""]
        return "\n".join(parts).rstrip() + "\n"

    def to_text(self) -> str:
        parts = [self.title, "=" * len(self.title), ""]
        for t in self.text:
            parts += [t, ""]
        for t in self.tables:
            parts.append(t.to_text())
        return "\n".join(parts).rstrip() + "\n"

    def to_dict(self) -> dict:
        return {"title": self.title, "text": list(self.text), "tables": {t.key: t.to_dict() for t in self.tables},
                "plots": [{"file": p.filename, "caption": p.caption} for p in self.plots],
                "data": plain(self.data)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=str)


def write_report(directory, report: Report) -> dict:
    """Writes report.md, report.txt, report.json and every plot into directory; returns {what: path}."""
    os.makedirs(directory, exist_ok=True)
    paths = {}
    for p in report.plots:
        path = os.path.join(directory, p.filename)
        p.draw(path)
        paths[p.filename] = path
    for name, body in (("report.md", report.to_markdown()), ("report.txt", report.to_text()),
                       ("report.json", report.to_json())):
        path = os.path.join(directory, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(body)
        paths[name] = path
    return paths


# --- builders --------------------------------------------------------------------------------------------

def acked_writes_table(results: list, title="Acknowledged writes after recovery", labels=None,
                       show_keys: int = 5) -> Table:
    """One row per run (AckedWritesResult), and a total row when there is more than one run."""
    labels = labels or [str(i + 1) for i in range(len(results))]
    min_window = results[0].min_window_s if results else 1.0
    cols = ["Run", "Attempts", "Acked", "Failed", "Indefinite", "Indefinite landed", "Lost", "Unexpected",
            "Longest write gap (s)", f"Windows >= {min_window:g} s"]
    rows = []
    for label, r in zip(labels, results):
        rows.append([label, r.attempts, r.acked, r.failed, r.indefinite, r.indefinite_present, len(r.lost),
                     len(r.unexpected), r.longest_gap.duration_s if r.longest_gap else None, len(r.windows)])
    if len(results) > 1:
        gaps = [r.longest_gap.duration_s for r in results if r.longest_gap]
        rows.append(["all", *(sum(row[j] for row in rows) for j in range(1, 8)), max(gaps) if gaps else None,
                     sum(len(r.windows) for r in results)])
    notes = []
    lost_runs = sum(1 for r in results if r.lost)
    notes.append(f"{len(results) - lost_runs}/{len(results)} runs lost no acknowledged write." if results
                 else "no runs.")
    for label, r in zip(labels, results):
        if r.lost:
            sample = ", ".join(f"{_s(x.key)} (found {_s(x.found)})" for x in r.lost[:show_keys])
            notes.append(f"run {label}: lost {len(r.lost)}: {sample}{' ...' if len(r.lost) > show_keys else ''}")
        if r.unexpected:
            sample = ", ".join(_s(k) for k, _ in r.unexpected[:show_keys])
            notes.append(f"run {label}: {len(r.unexpected)} writes reported failed are present: {sample}")
    return Table(title, cols, rows, notes, formats={cols[8]: "{:.3f}"}, name="acked_writes")


def async_rpo_table(results: list, lag_ms: list, buffer_ms: list, rejections: list,
                    title="Async: acknowledged writes lost against the durability lag") -> Table:
    """results: AckedWritesResult per run; lag_ms: durability_lag_ms seen just before each fault; buffer_ms:
    the configured buffer; rejections: buffer-exceeded rejections the writers saw (and retried)."""
    cols = ["Run", "Acked", "Lost", "durability_lag_ms before fault", "Buffer (ms)", "Buffer-exceeded rejections"]
    rows = [[str(i + 1), r.acked, len(r.lost), lag, buf, rej]
            for i, (r, lag, buf, rej) in enumerate(zip(results, lag_ms, buffer_ms, rejections))]
    return Table(title, cols, rows, name="async_rpo")


def linearizability_table(result, title="Linearizability per key") -> Table:
    cols = ["Key", "Operations", "Searched", "Result", "Time (s)"]
    rows = [[_s(k.key), k.recorded, k.ops, k.status, k.elapsed_s] for k in result.keys]
    word = {"ok": "linearizable", "fail": "NOT linearizable", "unknown": "unknown (time bound reached)"}
    notes = [f"History: {result.ops:,} operations on {len(result.keys)} keys, {word[result.status]} "
             f"in {result.elapsed_s:.2f} s (bound {result.time_limit_s:g} s)."]
    for k in result.failures:
        notes.append("```\n" + k.counterexample.render() + "\n```")
    return Table(title, cols, rows, notes, formats={"Time (s)": "{:.3f}"}, name="linearizability")


def failover_table(runs: dict, title="Failover: write unavailability per run (s)") -> Table:
    """runs: {label: [seconds per run]}; one column per label, a median row."""
    labels = list(runs)
    n = max([len(v) for v in runs.values()] + [0])
    cols = ["Run"] + [f"{label} (s)" for label in labels]
    rows = [[str(i + 1)] + [runs[label][i] if i < len(runs[label]) else None for label in labels]
            for i in range(n)]
    meds = []
    for label in labels:
        vals = [v for v in runs[label] if v is not None]
        meds.append(statistics.median(vals) if vals else None)
    rows.append(["median"] + meds)
    return Table(title, cols, rows, formats={c: "{:.3f}" for c in cols[1:]}, name="failover")


def latency_table(modes: dict, what="Write", title=None, baseline: Optional[str] = None) -> Table:
    """modes: {mode: {"p50": ms, "p99": ms, "ops_per_sec": n}}, as the seed's table; a ratio column against
    the baseline mode's p50 (the first mode by default)."""
    names = list(modes)
    base = baseline if baseline is not None else (names[0] if names else None)
    base_p50 = modes.get(base, {}).get("p50") if base is not None else None
    cols = ["Mode", f"{what} P50 (ms)", f"{what} P99 (ms)", "Throughput (ops/sec)", f"P50 vs {base}"]
    rows = []
    for m in names:
        d = modes[m]
        ratio = (d["p50"] / base_p50) if d.get("p50") is not None and base_p50 else None
        tput = d.get("ops_per_sec")
        rows.append([m, d.get("p50"), d.get("p99"), int(round(tput)) if tput is not None else None, ratio])
    return Table(title or f"{what} latency per durability mode", cols, rows,
                 formats={cols[1]: "{:.3f}", cols[2]: "{:.3f}", cols[4]: "{:.1f}x"}, name=f"{what.lower()}_latency")


def _s(v):
    v = plain(v)
    return "nil" if v is None else str(v)


# --- scenario reports ------------------------------------------------------------------------------------

def acked_writes_report(results: list, histories: list, title="durakv verify acked-writes",
                        bucket_s: float = 1.0, text=()) -> Report:
    """The tables, plus one writes-per-second plot per run (fault windows from the history's nemesis records,
    the longest gap marked)."""
    from .acked import write_rate
    from .plots import plot_write_rate
    rep = Report(title, [acked_writes_table(results)], text=list(text),
                 data={"runs": [r.to_dict() for r in results]})
    for i, (res, hist) in enumerate(zip(results, histories), 1):
        t0 = res.start_ns
        rate = write_rate(hist, bucket_s, t0_ns=t0)
        faults = [((w.start_ns - t0) / 1e9, None if w.stop_ns is None else (w.stop_ns - t0) / 1e9,
                   _s(w.description) if w.description is not None else "fault") for w in hist.fault_windows()]
        gap = ((res.longest_gap.start_ns - t0) / 1e9, (res.longest_gap.end_ns - t0) / 1e9) if res.longest_gap \
            else None

        def draw(path, rate=rate, faults=faults, gap=gap, i=i):
            plot_write_rate(path, rate, faults, gap, title=f"run {i}: acknowledged writes per second")
        rep.plots.append(Plot(f"writes_run{i}.png", f"Run {i}: acknowledged writes per second; fault window "
                              "shaded, longest write gap marked", draw))
    return rep


def failover_report(runs: dict, title="durakv verify failover", text=()) -> Report:
    """runs: {label: [seconds per run]} (planned / unplanned, or per mode)."""
    from .plots import plot_failover
    return Report(title, [failover_table(runs)], text=list(text), data={"runs": runs},
                  plots=[Plot("failover.png", "Write unavailability per failover run; dashed: median",
                              lambda path: plot_failover(path, runs))])


def latency_report(write_modes: dict, read_modes: Optional[dict] = None, title="durakv verify bench",
                   text=()) -> Report:
    """The seed's two tables (writes and reads per durability mode) and the percentile plots."""
    from .plots import plot_latency
    tables = [latency_table(write_modes, "Write")]
    plots = [Plot("latency_write.png", "Write latency percentiles per durability mode (log scale)",
                  lambda path: plot_latency(path, write_modes, title="write latency per mode"))]
    if read_modes:
        tables.append(latency_table(read_modes, "Read"))
        plots.append(Plot("latency_read.png", "Read latency percentiles per durability mode (log scale)",
                          lambda path: plot_latency(path, read_modes, title="read latency per mode")))
    return Report(title, tables, plots, list(text), {"write": write_modes, "read": read_modes})


def linearizability_report(result, title="durakv verify linearizable", text=()) -> Report:
    """The per-key table with every counterexample rendered under it, and the full result in the JSON."""
    return Report(title, [linearizability_table(result)], text=list(text), data={"result": result.to_dict()})
