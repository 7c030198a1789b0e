"""Runs a benchmark: starts the worker processes, synchronises their start, merges what they report.

Every worker process is stopped by its pid when the run ends, fails or is interrupted.
"""

import multiprocessing
import queue as queue_mod
import time

from . import hist as histmod
from .config import KIND_NAMES, BenchConfig, plan_clients
from .worker import worker_main

START_DELAY_S = 0.25


class BenchError(RuntimeError):
    pass


class BenchResult:
    """report: a JSON-ready dict. hists: command -> merged HdrHistogram (plus "lag" for open loop)."""

    def __init__(self, report, hists, timeline_hists):
        self.report = report
        self.hists = hists
        self.timeline_hists = timeline_hists

    def __getitem__(self, key):
        return self.report[key]


class _Second:
    __slots__ = ("ops", "hists", "reported", "errors", "shown")

    def __init__(self):
        self.shown = False
        self.ops = [0, 0]
        self.hists = {}
        self.reported = set()
        self.errors = 0


def run_bench(cfg: BenchConfig, progress=None, before_start=None, after_end=None, on_second=None) -> BenchResult:
    """Runs cfg; progress: a text stream for the live line (None: silent).

    before_start(): called once every worker is connected and prefilled, right before the measured run.
    after_end(): called right after the last worker finished (before the report is built).
    on_second(k, line_dict): called as each second's figures are complete.
    """
    plan = plan_clients(cfg)
    nproc = len(plan)
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    go = ctx.Event()
    start_value = ctx.Value("d", 0.0)
    procs = [ctx.Process(target=worker_main, args=(wid, nproc, cfg, specs, q, go, start_value), daemon=True,
                         name=f"durakv-bench-{wid}") for wid, specs in enumerate(plan)]
    seconds = {}
    totals = {name: histmod.new_histogram() for name in KIND_NAMES}
    lag_total = histmod.new_histogram()
    errors = {}
    prefill_errors = {}
    redirects = {}
    notes = []
    done = {}
    ready = {}
    live = _ProgressLine(progress, cfg)
    try:
        for p in procs:
            p.start()
        if cfg.prefill and progress is not None:
            live.message(f"prefilling {cfg.prefill:,} keys of {cfg.data_size} B ...")
        prefill_started = time.monotonic()
        while len(ready) < nproc:
            msg = _get(q, procs, ready)
            if msg is None:
                continue
            if msg[0] == "ready":
                ready[msg[1]] = msg[2]
                for key, n in msg[2]["errors"].items():
                    prefill_errors[key[1]] = prefill_errors.get(key[1], 0) + n
            elif msg[0] == "error":
                raise BenchError(f"worker {msg[1]}: {msg[2]}")
        prefill_s = time.monotonic() - prefill_started
        if before_start is not None:
            before_start()
        t0 = time.monotonic() + START_DELAY_S
        start_value.value = t0
        go.set()
        deadline = t0 + max(cfg.duration, 0) + cfg.drain + 15.0
        while len(done) < nproc:
            if time.monotonic() > deadline:
                notes.append("workers did not finish in time; stopped")
                break
            msg = _get(q, procs, done, timeout=0.2)
            if msg is None:
                continue
            kind, wid = msg[0], msg[1]
            if kind == "tick":
                k, payload = msg[2], msg[3]
                sec = seconds.get(k)
                if sec is None:
                    sec = seconds[k] = _Second()
                sec.reported.add(wid)
                for i in (0, 1):
                    sec.ops[i] += payload["ops"][i]
                for name, enc in payload["hist"].items():
                    h = histmod.decode(enc)
                    totals[name].add(h)
                    if name in sec.hists:
                        sec.hists[name].add(h)
                    else:
                        sec.hists[name] = h
                if "lag" in payload:
                    lag_total.add(histmod.decode(payload["lag"]))
                for (cmd, etype), n in payload["errors"].items():
                    errors.setdefault(cmd, {})
                    errors[cmd][etype] = errors[cmd].get(etype, 0) + n
                    sec.errors += n
                for rtype, n in payload["redirects"].items():
                    redirects.setdefault(wid, {})[rtype] = n
                if len(sec.reported) == nproc and not sec.shown:
                    sec.shown = True
                    line = _second_line(k, sec)
                    live.second(line)
                    if on_second is not None:
                        on_second(k, line)
            elif kind == "done":
                done[wid] = msg[2]
                notes.extend(msg[2]["notes"])
            elif kind == "error":
                raise BenchError(f"worker {wid}: {msg[2]}")
        if after_end is not None:
            after_end()
    finally:
        live.close()
        _stop_processes(procs)
        q.close()
        q.cancel_join_thread()

    merged_redirects = {}
    for per in redirects.values():
        for rtype, n in per.items():
            merged_redirects[rtype] = merged_redirects.get(rtype, 0) + n
    last_reply = max([d["last_reply"] for d in done.values()] or [0.0])
    if cfg.open_loop:
        elapsed = max(cfg.duration, last_reply)
    else:
        elapsed = last_reply if last_reply > 0 else cfg.duration
    elapsed = max(elapsed, 1e-9)
    gen_cpu = sum(d.get("cpu_s", 0.0) for d in done.values())
    report = _build_report(cfg, plan, totals, lag_total, errors, merged_redirects, seconds, elapsed, notes,
                           prefill_s, prefill_errors, sum(d.get("connections", 0) for d in done.values()))
    cores = min(nproc, len(cfg.cpus)) if cfg.cpus else nproc
    report["generator"] = {"processes": nproc, "cpu_s": round(gen_cpu, 3),
                           "cpu_util": round(gen_cpu / elapsed / cores, 3) if cfg.duration > 0 else None}
    if cfg.duration > 0 and gen_cpu / elapsed / cores > 0.9:
        report["notes"].append(f"the load generator used {gen_cpu / elapsed / cores:.0%} of its CPU: throughput may be "
                               "capped by the generator (add --processes / CPUs, or check with memtier)")
    return BenchResult(report, {**totals, "lag": lag_total}, {k: seconds[k].hists for k in sorted(seconds)})


def _get(q, procs, finished, timeout=0.5):
    try:
        return q.get(timeout=timeout)
    except queue_mod.Empty:
        for wid, p in enumerate(procs):
            if wid not in finished and not p.is_alive() and p.exitcode not in (None, 0):
                raise BenchError(f"worker {wid} exited with code {p.exitcode}")
        return None


def _stop_processes(procs):
    for p in procs:
        if p.pid is not None and p.is_alive():
            p.terminate()  # SIGTERM to this pid
    for p in procs:
        if p.pid is None:
            continue
        p.join(3)
        if p.is_alive():
            p.kill()
            p.join(3)


def _second_line(k, sec):
    line = {"t": k + 1, "ops_per_sec": sum(sec.ops), "errors": sec.errors}
    for name in KIND_NAMES:
        h = sec.hists.get(name)
        if h is not None and h.get_total_count():
            line[name] = {"ops": sec.ops[KIND_NAMES.index(name)],
                          "p50": round(histmod.percentile_ms(h, 50), 4),
                          "p99": round(histmod.percentile_ms(h, 99), 4),
                          "max": round(h.get_max_value() / 1000.0, 4)}
    return line


def _build_report(cfg, plan, totals, lag_total, errors, redirects, seconds, elapsed, notes, prefill_s,
                  prefill_errors, connections):
    roles = {}
    for specs in plan:
        for spec in specs:
            roles[spec.role] = roles.get(spec.role, 0) + 1
    commands = {}
    total_ops = 0
    for name, shown in zip(KIND_NAMES, cfg.command_names()):
        h = totals[name]
        count = h.get_total_count()
        errs = errors.get(name, {})
        if not count and not errs:
            continue
        total_ops += count
        commands[shown] = {"ops": count, "ops_per_sec": round(count / elapsed, 1),
                          "latency_ms": histmod.summarize(h), "errors": dict(errs)}
    all_errors = {}
    for name, errs in errors.items():
        for etype, n in errs.items():
            all_errors[etype] = all_errors.get(etype, 0) + n
    timeline = [_second_line(k, seconds[k]) for k in sorted(seconds)]
    report = {
        "target": f"{cfg.host}:{cfg.port}",
        "mode": "open-loop" if cfg.open_loop else "closed-loop",
        "config": cfg.to_dict(),
        "connections": {"by_role": roles, "total": connections},
        "duration_s": round(elapsed, 3),
        "ops": total_ops,
        "ops_per_sec": round(total_ops / elapsed, 1),
        "target_ops_per_sec": cfg.rate if cfg.open_loop else None,
        "commands": commands,
        "errors": all_errors,
        "redirects": redirects,
        "prefill": {"keys": cfg.prefill, "seconds": round(prefill_s, 3), "errors": prefill_errors},
        "timeline": timeline,
        "notes": notes,
    }
    if cfg.open_loop:
        report["send_lag_ms"] = histmod.summarize(lag_total)
    return report


class _ProgressLine:
    """Once a second, one line on stderr: rewritten in place on a terminal, appended otherwise."""

    def __init__(self, stream, cfg):
        self.stream = stream
        self.cfg = cfg
        self.tty = bool(stream is not None and getattr(stream, "isatty", lambda: False)())
        self.unflushed = False

    def message(self, text):
        if self.stream is None:
            return
        self._clear()
        print(text, file=self.stream, flush=True)

    def second(self, line):
        if self.stream is None:
            return
        parts = [f"[{line['t']:>4}s/{self.cfg.duration:g}s] {line['ops_per_sec']:>9,.0f} ops/s"]
        for name in KIND_NAMES:
            if name in line:
                d = line[name]
                parts.append(f"{name} p50 {d['p50']:.3f} p99 {d['p99']:.3f} max {d['max']:.3f} ms")
        parts.append(f"errors {line['errors']}")
        text = " | ".join(parts)
        if self.tty:
            self.stream.write("\r\x1b[2K" + text)
            self.unflushed = True
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def _clear(self):
        if self.unflushed:
            self.stream.write("\r\x1b[2K")
            self.unflushed = False

    def close(self):
        if self.stream is not None and self.unflushed:
            self.stream.write("\n")
            self.stream.flush()
            self.unflushed = False


def format_report(report) -> str:
    """The human-readable summary of a run."""
    cfg = report["config"]
    roles = report["connections"]["by_role"]
    role_text = " / ".join(f"{n} {r}" for r, n in roles.items())
    if report["mode"] == "open-loop":
        mode = f"open loop, target {cfg['rate']:,.0f} ops/s"
    else:
        mode = "closed loop"
    lines = [
        f"durakv bench -> {report['target']}: {mode}, {report['duration_s']:g} s, "
        f"{sum(roles.values())} clients ({role_text}), {cfg['processes']} process(es), pipeline {cfg['pipeline']}, "
        f"ratio {cfg['ratio']}, {cfg['data_size']} B values, {cfg['key_maximum']:,} keys"
        + (", cluster" if cfg["cluster"] else "") + (", TLS" if cfg["tls"] else ""),
        "",
        f"{'command':<10}{'ops':>11}{'ops/s':>12}{'p50 ms':>10}{'p90 ms':>10}{'p99 ms':>10}{'p99.9 ms':>10}"
        f"{'max ms':>10}{'errors':>9}",
    ]

    def fmt(v):
        return f"{v:>10.3f}" if v is not None else f"{'-':>10}"

    if cfg.get("workload", "setget") != "setget":
        lines.insert(1, f"workload {cfg['workload']}: {' / '.join(report['commands']) or 'no requests'}"
                        + (" of whole documents (JSON.SET key . doc / JSON.GET key)" if cfg["workload"] == "json"
                           else f" over {cfg['bloom_filters']:,} filters" if cfg["workload"] == "bloom" else ""))
    for name, c in report["commands"].items():
        lat = c["latency_ms"]
        lines.append(f"{name:<10}{c['ops']:>11,}{c['ops_per_sec']:>12,.1f}{fmt(lat['p50'])}{fmt(lat['p90'])}"
                     f"{fmt(lat['p99'])}{fmt(lat['p99.9'])}{fmt(lat['max'])}{sum(c['errors'].values()):>9,}")
    lines.append(f"{'total':<10}{report['ops']:>11,}{report['ops_per_sec']:>12,.1f}")
    if report["errors"]:
        lines.append("errors by type: " + ", ".join(f"{k} {v:,}" for k, v in sorted(report["errors"].items())))
    if report["redirects"]:
        lines.append("redirects followed: " + ", ".join(f"{k} {v:,}" for k, v in report["redirects"].items()))
    if report.get("send_lag_ms") and report["send_lag_ms"]["count"]:
        lag = report["send_lag_ms"]
        lines.append(f"generator send lag behind schedule (included in the latencies above): p50 {lag['p50']:.3f} "
                     f"p99 {lag['p99']:.3f} max {lag['max']:.3f} ms")
    if report["prefill"]["keys"]:
        pf = report["prefill"]
        lines.append(f"prefill: {pf['keys']:,} keys in {pf['seconds']:.1f} s"
                     + (f", errors {pf['errors']}" if pf["errors"] else ""))
    for note in report["notes"]:
        lines.append("note: " + note)
    return "\n".join(lines)
