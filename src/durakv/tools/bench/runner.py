"""Runs a benchmark: starts the worker processes, synchronises their start, merges what they report.

Open loop, it also judges the generator: a request sent more than late_ms after its scheduled time was late,
and the run kept its schedule when at most LATE_SHARE_MAX of them were (the report's `schedule`). A generator
behind schedule measures itself: its lag is in every latency it records. With processes=0 (automatic) short
probes at the full rate find the number of worker processes that keeps the schedule (1, 2, 4 ... up to the
CPUs the generator may use) before the measured run.

Every worker process is stopped by its pid when the run ends, fails or is interrupted.
"""

import dataclasses
import multiprocessing
import queue as queue_mod
import time

from . import hist as histmod
from .config import KIND_NAMES, LATE_SHARE_MAX, BenchConfig, auto_process_cap, plan_clients
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
    __slots__ = ("ops", "hists", "reported", "errors", "shown", "sent", "late", "lag")

    def __init__(self):
        self.shown = False
        self.ops = [0, 0]
        self.hists = {}
        self.reported = set()
        self.errors = 0
        self.sent = 0       # requests the generator's timers sent in this second
        self.late = 0       # ... of them more than late_ms after their scheduled time
        self.lag = None     # their send lag (histogram)


def run_bench(cfg: BenchConfig, progress=None, before_start=None, after_end=None, on_second=None) -> BenchResult:
    """Runs cfg; progress: a text stream for the live line (None: silent).

    before_start(): called once every worker is connected and prefilled, right before the measured run.
    after_end(): called right after the last worker finished (before the report is built).
    on_second(k, line_dict): called as each second's figures are complete.
    cfg.processes 0 (automatic), open loop: probe runs of cfg.probe_s at the full rate first (prefill in the
    first), then the measured run with the processes that kept the schedule (report["generator"]["probes"]).
    """
    if not cfg.auto_processes:
        return _run_once(cfg, progress, before_start, after_end, on_second)
    if not cfg.open_loop or cfg.duration <= 0:
        # closed loop has no schedule to keep; one process as before (the CPU note says when it saturates)
        result = _run_once(dataclasses.replace(cfg, processes=1), progress, before_start, after_end, on_second)
        result.report["generator"]["auto"] = True
        return result
    live = _ProgressLine(progress, cfg)
    cap = auto_process_cap(cfg)
    probes = []
    prefill = None
    n = 1
    while True:
        probe_cfg = dataclasses.replace(cfg, processes=n, duration=min(cfg.probe_s, cfg.duration),
                                        prefill=cfg.prefill if prefill is None else 0)
        live.message(f"schedule probe: {n} process(es), {probe_cfg.duration:g}s at {cfg.rate:,.0f} ops/s"
                     + (f" (after a prefill of {cfg.prefill:,} keys)" if probe_cfg.prefill else ""))
        rep = _run_once(probe_cfg, None).report
        if prefill is None:
            prefill = rep["prefill"]
        sched = rep["schedule"]
        probes.append({"processes": n, "kept": sched["kept"], "late_pct": sched["late_pct"],
                       "lag_p99_ms": sched["lag_ms"]["p99"], "lag_max_ms": sched["lag_ms"]["max"],
                       "cpu_util": rep["generator"]["cpu_util"]})
        live.message("schedule probe: " + describe_probe(probes[-1], cfg.late_ms))
        if sched["kept"] or n >= cap:
            break
        n = min(cap, n * 2)
    chosen = probes[-1] if probes[-1]["kept"] else min(probes, key=lambda p: (p["late_pct"], p["processes"]))
    result = _run_once(dataclasses.replace(cfg, processes=chosen["processes"], prefill=0), progress,
                       before_start, after_end, on_second)
    report = result.report
    report["prefill"] = prefill
    report["config"]["processes"] = 0
    gen = report["generator"]
    gen["auto"] = True
    gen["probes"] = probes
    gen["process_cap"] = cap
    if not chosen["kept"]:
        report["notes"].append(
            f"no probe kept the schedule up to {cap} process(es) (one per CPU the generator may use): this "
            f"machine does not give the generator CPU time when it is due (other work, too few cores); the run "
            f"used {chosen['processes']}, the probe that was least late")
    return result


def describe_probe(probe, late_ms) -> str:
    return (f"{probe['processes']} process(es): " + ("kept the schedule" if probe["kept"] else "BEHIND schedule")
            + f", {probe['late_pct']:.2f}% of requests more than {late_ms:g} ms late, send lag p99 "
            + (f"{probe['lag_p99_ms']:.3f} ms, max {probe['lag_max_ms']:.3f} ms" if probe["lag_p99_ms"] is not None
               else "-") + (f", generator CPU {probe['cpu_util']:.0%}" if probe["cpu_util"] is not None else ""))


def _run_once(cfg: BenchConfig, progress=None, before_start=None, after_end=None, on_second=None) -> BenchResult:
    """One run of cfg with cfg.processes worker processes."""
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
    held_total = histmod.new_histogram()
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
                    h = histmod.decode(payload["lag"])
                    lag_total.add(h)
                    if sec.lag is None:
                        sec.lag = h
                    else:
                        sec.lag.add(h)
                if "held_lag" in payload:
                    held_total.add(histmod.decode(payload["held_lag"]))
                sec.sent += payload.get("sent", 0)
                sec.late += payload.get("late", 0)
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
    report["generator"] = {"processes": nproc, "auto": False, "cpu_s": round(gen_cpu, 3),
                           "cpu_util": round(gen_cpu / elapsed / cores, 3) if cfg.duration > 0 else None}
    if cfg.duration > 0 and gen_cpu / elapsed / cores > 0.9:
        report["notes"].append(f"the load generator used {gen_cpu / elapsed / cores:.0%} of its CPU: throughput may be "
                               "capped by the generator (add --processes / CPUs, or check with memtier)")
    if cfg.open_loop and cfg.duration > 0:
        report["schedule"] = _schedule(cfg, seconds, lag_total, held_total, errors)
    return BenchResult(report, {**totals, "lag": lag_total, "held_lag": held_total},
                       {k: seconds[k].hists for k in sorted(seconds)})


def _schedule(cfg, seconds, lag_total, held_total, errors) -> dict:
    """Whether the generator sent on time (open loop): how many requests its timers sent late, how late, in
    how many seconds of the run; the requests the server held back (max_outstanding) and those never sent."""
    sent = sum(sec.sent for sec in seconds.values())
    late = sum(sec.late for sec in seconds.values())
    late_seconds = [k + 1 for k in sorted(seconds) if seconds[k].late]
    worst = max(seconds, key=lambda k: (seconds[k].late, seconds[k].lag.get_max_value() if seconds[k].lag else 0),
                default=None)
    unsent = sum(errs.get("UNSENT", 0) for errs in errors.values())
    out = {
        "late_ms": cfg.late_ms,
        "sent": sent,
        "late": late,
        "late_pct": round(100.0 * late / sent, 3) if sent else 0.0,
        "kept": late <= LATE_SHARE_MAX * sent,
        "late_seconds": len(late_seconds),
        "seconds": len(seconds),
        "lag_ms": histmod.summarize(lag_total),
        "held": held_total.get_total_count(),
        "held_lag_ms": histmod.summarize(held_total),
        "unsent": unsent,
    }
    if worst is not None and seconds[worst].late:
        sec = seconds[worst]
        out["worst_second"] = {"t": worst + 1, "late": sec.late, "sent": sec.sent,
                               "lag_max_ms": round(sec.lag.get_max_value() / 1000.0, 3) if sec.lag else None}
    return out


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
    if sec.sent:
        line["late"] = sec.late
        line["lag_max_ms"] = round(sec.lag.get_max_value() / 1000.0, 3) if sec.lag is not None else 0.0
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
        if line.get("late"):
            parts.append(f"generator late {line['late']:,} (lag max {line['lag_max_ms']:.1f} ms)")
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
    gen = report.get("generator") or {}
    procs = f"{gen.get('processes', cfg['processes'])} process(es)" + (" (auto)" if gen.get("auto") else "")
    lines = [
        f"durakv bench -> {report['target']}: {mode}, {report['duration_s']:g} s, "
        f"{sum(roles.values())} clients ({role_text}), {procs}, pipeline {cfg['pipeline']}, "
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
    if report.get("schedule"):
        lines.extend(format_schedule(report))
    if report["prefill"]["keys"]:
        pf = report["prefill"]
        lines.append(f"prefill: {pf['keys']:,} keys in {pf['seconds']:.1f} s"
                     + (f", errors {pf['errors']}" if pf["errors"] else ""))
    for note in report["notes"]:
        lines.append("note: " + note)
    return "\n".join(lines)


def format_schedule(report) -> list:
    """The report's lines on the generator's schedule (open loop): kept or behind, how far, how often; the
    probes of automatic process splitting; what the server held back or what was never sent."""
    sc = report["schedule"]
    lag = sc["lag_ms"]
    lines = []
    if lag["count"]:
        how_late = f"send lag p50 {lag['p50']:.3f} p99 {lag['p99']:.3f} max {lag['max']:.3f} ms"
        if sc["kept"]:
            lines.append(f"generator schedule: kept: {sc['sent'] - sc['late']:,} of {sc['sent']:,} requests sent "
                         f"within {sc['late_ms']:g} ms of their time ({sc['late_pct']:.2f}% later); {how_late}")
        else:
            worst = sc.get("worst_second") or {}
            lines.append(f"generator schedule: BEHIND: {sc['late']:,} of {sc['sent']:,} requests "
                         f"({sc['late_pct']:.2f}%) sent more than {sc['late_ms']:g} ms after their time, in "
                         f"{sc['late_seconds']} of {sc['seconds']} seconds (worst: second {worst.get('t', '-')}, "
                         f"{worst.get('late', 0):,} late, up to {worst.get('lag_max_ms') or 0:.1f} ms); {how_late}")
            lines.append("  the latencies above include this lag: they measure the generator as much as the server "
                         "(--processes auto splits the load until it keeps the schedule; or give it CPUs)")
    for probe in (report.get("generator") or {}).get("probes", ()):
        from_runner = describe_probe(probe, sc["late_ms"])
        lines.append(f"  probe {from_runner}")
    if sc["held"]:
        held = sc["held_lag_ms"]
        lines.append(f"server backpressure: {sc['held']:,} requests waited for a connection under --max-outstanding "
                     f"(up to {held['max']:.1f} ms; counted in their latency, not as generator lag)")
    if sc["unsent"]:
        lines.append(f"never sent: {sc['unsent']:,} requests (UNSENT errors): the server did not answer enough of "
                     f"those in flight before the end")
    return lines