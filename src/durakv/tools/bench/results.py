"""`durakv bench --results FILE.md`: a run's figures as a results page (docs/results/), written by the tool so
that every number there comes with the command that produced it, the commit it ran on, when, and the load."""

import datetime
import os
import shlex
import subprocess
import sys

from .config import WORKLOADS


def _commit():
    """The commit of the source tree the tool runs from ("unknown" outside a git checkout)."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        out = subprocess.run(["git", "-C", here, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                             timeout=10)
        dirty = subprocess.run(["git", "-C", here, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if out.returncode != 0:
        return "unknown"
    return out.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "")


def _server_line(report):
    return report.get("server", {}).get("description", "")


def results_markdown(report, argv, title=None) -> str:
    cfg = report["config"]
    writes, reads = WORKLOADS[cfg.get("workload", "kv")]
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    mode = (f"open loop at {cfg['rate']:,.0f} ops/s" if report["mode"] == "open-loop" else "closed loop")
    lines = [
        f"## {title or 'durakv bench: ' + cfg.get('workload', 'kv') + ' workload'}",
        "",
        f"- command: `{' '.join(shlex.quote(a) for a in ['durakv', 'bench', *argv])}`",
        f"- commit: {_commit()}; date: {when}; machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}",
        f"- load: {mode}, {report['duration_s']:g} s, {report['connections']['total']} connections, "
        f"pipeline {cfg['pipeline']}, ratio {cfg['ratio']} ({writes} : {reads}), {cfg['data_size']} B values, "
        f"{cfg['key_maximum']:,} keys" + (f", prefilled {cfg['prefill']:,}" if cfg.get("prefill") else ""),
        f"- target: {report['target']}" + (f" ({_server_line(report)})" if _server_line(report) else ""),
        "",
        "| command | ops | ops/s | p50 ms | p99 ms | p99.9 ms | errors |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    names = {"SET": writes.split()[0], "GET": reads.split()[0]}
    for name, c in report["commands"].items():
        lat = c["latency_ms"]
        lines.append(f"| {names.get(name, name)} | {c['ops']:,} | {c['ops_per_sec']:,.1f} | {lat['p50']:.3f} | "
                     f"{lat['p99']:.3f} | {lat['p99.9']:.3f} | {sum(c['errors'].values()):,} |")
    lines.append(f"| total | {report['ops']:,} | {report['ops_per_sec']:,.1f} | | | | |")
    if report["errors"]:
        lines.append("")
        lines.append("errors by type: " + ", ".join(f"{k} {v:,}" for k, v in sorted(report["errors"].items())))
    lines.append("")
    return "\n".join(lines)


def append_results(path, report, argv, title=None):
    """Appends the run's section to the results page at path (created with its directory if missing)."""
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    with open(path, "a") as f:
        f.write(results_markdown(report, argv, title) + "\n")
