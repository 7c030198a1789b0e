"""The scenarios of `durakv verify`, end to end: a real workload (tools/verify/workload.py) through a cluster
client, a fault injected mid-stream by the nemesis (`durakv chaos`, a separate process, or the user's
--fault-cmd), the heal, the read-back, the checkers (acked.py, linearizable.py) and the report (report.py).

Each scenario returns a Result: the Report (tables, plots, data), `status` ("ok", "fail" or "unknown") and the
reasons behind it. The seed (shared/seeds/000_e664b13db1353243.txt) is what they reproduce:
- acked_writes: Test 1, every acknowledged write survives a fault (sync);
- async_rpo: Test 2, what async loses against the durability lag seen just before the fault;
- switch: Test 3, CONFIG SET durability sync (and back) during writes: time until effective, errors, stalls;
- failover: Test 4, planned against unplanned failover, write unavailability per run and the median;
- linearizable: reads, writes and CAS (WATCH/MULTI/EXEC, Lua) on a few keys under faults, checked;
- dirty_reads: readers on GET, XREAD BLOCK, keyspace notifications and SYNC while commits stall and the
  primary fails over: nothing a reader saw may belong to a write never acknowledged and gone after recovery;
- bench: the seed's two latency tables per durability mode at a fixed rate.
"""

import collections
import heapq
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field, replace

from ...cluster.local import LocalCluster
from ...cluster.manifest import ClusterError
from ...cluster.readiness import ClusterNotReady
from ...cluster.procs import package_env
from ..chaos import events_path, log_size, read_events, wait_healthy
from ..chaos.events import START, STOP
from .acked import check_acked_writes, write_ops
from .history import FAULT_START, FAULT_STOP, INFO, NEMESIS, OK, WRITE_KEY, History, Op, Recorder
from .dirty import CHANNELS, DIRTY_COLUMNS, check_dirty_reads, dirty_reads_table_rows, first_dirty
from .linearizable import check_registers
from .report import (Report, Table, acked_writes_report, async_rpo_table, failover_report, latency_report,
                     linearizability_report)
from .workload import (NOTIFY_EVENTS, BulkWriter, DirtyWriter, FeedObserver, GetObserver, InfoSampler,
                       NotifyObserver, RdbObserver, RegisterClient, Target, XreadObserver, read_back,
                       read_stream_values, replicas_missing, start_writers, stop_all)

PASS, FAILED, UNKNOWN = "ok", "fail", "unknown"
FAULT_DEFAULT_S = {"az-power": 30.0, "kill": 10.0, "pause": 5.0, "partition": 20.0, "failover": 0.0}


@dataclass
class Result:
    report: Report
    status: str
    reasons: list = field(default_factory=list)

    def to_dict(self):
        d = self.report.to_dict()
        d["status"] = self.status
        d["reasons"] = list(self.reasons)
        return d


# -- where the run goes ------------------------------------------------------------------------------------------

class Env:
    """The target of a run: a local cluster (given with --dir, or started here in a temp dir) or any RESP
    endpoint (--target), and how faults are injected there (`durakv chaos` or the user's --fault-cmd)."""

    def __init__(self, target, cluster=None, fault_cmd=None, say=print, own_dir=None, keep=False):
        self.target = target
        self.cluster = cluster
        self.fault_cmd = fault_cmd
        self.say = say
        self.own_dir = own_dir  # a directory this run made (removed at close unless kept)
        self.keep = keep        # leave the run's own cluster running, with its data
        self.keep_data = False  # keep own_dir (the standalone server's, with --keep)
        self.active = set()     # FaultRuns whose process still runs

    @classmethod
    def local(cls, dir, fault_cmd=None, say=print):
        cluster = LocalCluster.load(dir)
        return cls(Target.from_cluster(cluster), cluster, fault_cmd, say)

    @classmethod
    def endpoint(cls, host, port, tls=False, tls_ca=None, fault_cmd=None, password=None, say=print):
        target = Target.from_endpoint(host, port, tls, tls_ca, password)
        target.learn_nodes()
        return cls(target, None, fault_cmd, say)

    @classmethod
    def start_own(cls, durability="sync", tls=True, partitionable=False, shards=1, server_args=(), env=None,
                  say=print, keep=False, parent=None):
        d = tempfile.mkdtemp(prefix="durakv-verify-", dir=parent)
        say(f"no --dir given: starting a local cluster in {d} (3 NATS + {shards} x 3 durakv nodes, durability "
            f"{durability}{', TLS' if tls else ''}{', partitionable' if partitionable else ''}); "
            + ("it is left running with its data (--keep)" if keep else
               "it is stopped and its directory removed at the end, also on failure or interrupt (--keep "
               "leaves both)"))
        own = cls(None, None, None, say, own_dir=d, keep=keep)
        try:
            # a start that failed or was interrupted stops whatever it started (up_or_down)
            own.cluster = LocalCluster.up_or_down(os.path.join(d, "cluster"), shards=shards, durability=durability,
                                                  tls=tls, partitionable=partitionable,
                                                  extra_server_args=tuple(server_args), env=env, timeout_s=90.0)
            own.target = Target.from_cluster(own.cluster)
        except BaseException as exc:
            # ... and its data is removed unless kept
            own.keep = False                # a half-started cluster is never left running
            own.close(keep_data=keep)
            if isinstance(exc, ClusterNotReady):
                # its text tells to stop processes that are stopped now, in a directory that may be gone
                lines = [line for line in str(exc).splitlines() if not line.startswith("processes are left")]
                lines.append("the cluster's processes are stopped; " + (
                    f"its directory {d} is kept (--keep)" if keep else "its directory is removed (--keep keeps "
                    "it, with the logs)"))
                raise ClusterError("\n".join(lines)) from None
            raise
        return own

    @classmethod
    def start_standalone(cls, durability="none", tls=True, server_args=(), say=print, parent=None, keep=False):
        """One durakv server of its own (the bench's `none` row: a shard follows its journal, so a cluster
        cannot run none; the seed's none is a non-durable cluster of one shard, which one server stands for).
        TLS like the cluster's when tls, so the rows differ by durability only. It is stopped at the end and
        its directory removed (keep: the directory is kept)."""
        from ...cluster.processes import free_ports, spawn, wait_for
        from ...cluster.tls import make_certs
        d = tempfile.mkdtemp(prefix="durakv-verify-", dir=parent)
        port, = free_ports(1)
        argv = [sys.executable, "-m", "durakv", "server", "--dir", os.path.join(d, "data"),
                "--durability", durability, "--bind", "127.0.0.1"]
        ca = None
        if tls:
            certs = make_certs(d)
            ca = certs["ca"]
            argv += ["--port", "0", "--tls-port", str(port), "--tls-cert-file", certs["cert"], "--tls-key-file",
                     certs["key"], "--tls-ca-cert-file", ca, "--tls-auth-clients", "no"]
        else:
            argv += ["--port", str(port)]
        argv += list(server_args)
        pid, start = spawn(argv, os.path.join(d, "server.log"), env=package_env())
        say(f"durability {durability}: a standalone durakv server of its own on 127.0.0.1:{port} (pid {pid}, "
            f"{d}){', TLS' if tls else ''}: a shard cannot run none")
        env = cls(None, None, None, say, own_dir=d)
        env.keep_data = keep
        env.server_pid = (pid, start)
        try:
            target = Target("127.0.0.1", port, tls=tls, tls_ca=ca, cluster_mode=False,
                            label=f"standalone server 127.0.0.1:{port}")

            def up():
                with target.node_client("127.0.0.1", port, 1.0) as c:
                    return c.ping()
            wait_for(up, 30.0, f"the standalone server on port {port}")
        except BaseException:
            env.close()
            raise
        env.target = target
        return env

    def close(self, keep_data=None):
        """Ends the run's use of the target: the nemesis heals, and what this run started (its own cluster or
        standalone server) is stopped and its directory removed (data, logs, certificates, the chaos event
        log), unless kept (--keep: the cluster is left running with its data; the standalone server's
        directory is kept). Runs to the end through a second Ctrl-C, which would otherwise leave both."""
        with _no_interrupts(self.say):
            for fr in list(self.active):
                fr.interrupt()   # a run cut short (an error, Ctrl-C): the nemesis heals before anything else
            if self.own_dir and self.cluster is not None and not self.keep:
                self.cluster.down()
                self.say(f"local cluster in {self.cluster.dir} stopped")
            pid = getattr(self, "server_pid", None)
            if pid is not None:
                from ...cluster.processes import stop_many
                self.server_pid = None
                stop_many({"server": pid})
                self.say(f"standalone server (pid {pid[0]}) stopped")
            if keep_data is None:
                keep_data = self.keep or self.keep_data
            if self.own_dir and not keep_data:
                self.remove_own_dir()

    def remove_own_dir(self):
        d, self.own_dir = self.own_dir, None
        if not d or not os.path.isdir(d):
            return
        size = dir_bytes(d)
        errors = []
        shutil.rmtree(d, onerror=lambda _fn, path, exc: errors.append(f"{path}: {exc[1]}"))
        if errors:
            self.say(f"could not remove all of {d}: {'; '.join(errors[:3])}")
        else:
            self.say(f"removed {d} ({size / 1e6:.1f} MB; --keep keeps it)")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def healthy(self, timeout_s=90.0):
        if self.cluster is not None:
            wait_healthy(self.cluster, timeout_s)

    def nodes(self) -> list:
        """(name, host, port) of every node: the manifest's, or those a cluster client discovers."""
        if self.cluster is not None:
            return [(p.name, "127.0.0.1", p.port) for p in self.cluster.reload().nodes]
        self.target.learn_nodes()
        return [(f"{h}:{p}", h, p) for h, p in self.target.nodes]

    def config_set_primaries(self, name, value) -> list:
        """CONFIG SET on every primary; returns [(primary, seconds the reply took)]."""
        out = []
        for host, port in self.target.primaries():
            with self.target.node_client(host, port, 10.0) as c:
                t0 = time.monotonic()
                c.config_set(name, value)
                out.append((f"{host}:{port}", time.monotonic() - t0))
        return out


def dir_bytes(d) -> int:
    """The bytes of the files under d (what a run leaves behind if it is not removed)."""
    total = 0
    for root, _dirs, files in os.walk(d):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


class _no_interrupts:
    """SIGINT and SIGTERM ignored (with a word) while a cleanup runs in the main thread: a second Ctrl-C (or
    TERM) must not leave processes running or data behind halfway through stopping them."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, say):
        self.say = say
        self.old = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self.old[sig] = signal.getsignal(sig)
                signal.signal(sig, lambda *_: self.say("still stopping what the run started ..."))
        return self

    def __exit__(self, *exc):
        for sig, handler in self.old.items():
            signal.signal(sig, handler)
        self.old = {}


class FaultRun:
    """One fault, injected from a separate process while the workload runs: `durakv chaos DIR <fault> ...` for a
    local cluster (its event log gives the exact window), or the user's --fault-cmd (the window is from its start
    to its exit)."""

    def __init__(self, env, chaos_args=None, label=None, timeout_s=600.0):
        self.env = env
        self.chaos_args = list(chaos_args or [])
        self.label = label or (env.fault_cmd if env.fault_cmd else " ".join(self.chaos_args))
        self.timeout_s = timeout_s
        self.proc = None
        self.thread = None
        self.lines = []
        self.started_ns = self.ended_ns = None
        self.returncode = None
        self._log_offset = 0
        self._log_end = None

    def start(self):
        env = self.env
        if env.fault_cmd:
            argv, shell = env.fault_cmd, True
        else:
            if env.cluster is None:
                raise ClusterError("a fault against --target needs --fault-cmd")
            argv = [sys.executable, "-m", "durakv", "chaos", env.cluster.dir] + self.chaos_args
            shell = False
            self._log_offset = log_size(events_path(env.cluster.dir))
        self.started_ns = time.monotonic_ns()
        self.proc = subprocess.Popen(argv, shell=shell, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     env=package_env(), text=True, bufsize=1)
        self.thread = threading.Thread(target=self._pump, daemon=True, name="verify-nemesis-output")
        self.thread.start()
        self.env.active.add(self)
        return self

    def interrupt(self, timeout_s=120.0):
        """SIGINT to the nemesis (durakv chaos heals on it), then wait for it to exit."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.env.active.discard(self)

    def _pump(self):
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            self.lines.append(line)
            self.env.say(f"  | {line}")

    def wait(self):
        try:
            self.returncode = self.proc.wait(self.timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()   # our own child, by its Popen handle
            self.returncode = self.proc.wait(10)
            self.lines.append(f"fault command killed after {self.timeout_s:g}s")
        self.ended_ns = time.monotonic_ns()
        self.env.active.discard(self)
        self.thread.join(5)
        if self.env.cluster is not None and not self.env.fault_cmd:
            self._log_end = log_size(events_path(self.env.cluster.dir))
        if self.returncode != 0:
            raise RuntimeError(f"fault {self.label!r} exited with {self.returncode}: "
                               + " / ".join(self.lines[-5:]))
        return self

    def windows(self) -> list:
        """[(start_ns, stop_ns, label)] of the fault as it happened."""
        if self.env.fault_cmd or self.env.cluster is None:
            return [(self.started_ns, self.ended_ns, self.label)]
        events = self.events()
        by_id = {}
        for e in events:
            by_id.setdefault(e["id"], {"fault": e["fault"]}).setdefault(e["event"], e)
        out = []
        for d in by_id.values():
            if START in d:
                stop = d.get(STOP)
                what = d[START].get("detail") or {}
                where = what.get("node") or what.get("az") or (f"shard {what['shard']}" if "shard" in what else "")
                out.append((d[START]["monotonic_ns"], stop["monotonic_ns"] if stop else self.ended_ns,
                            f"{d['fault']} {where}".strip()))
        return sorted(out) or [(self.started_ns, self.ended_ns, self.label)]

    def events(self) -> list:
        if self.env.cluster is None or self.env.fault_cmd:
            return []
        events, end = read_events(events_path(self.env.cluster.dir), self._log_offset)
        if self._log_end is not None and end > self._log_end:
            # Only this fault's lines: what a later fault appended is not ours.
            events, _ = read_events(events_path(self.env.cluster.dir), self._log_offset, self._log_end)
        return events


def chaos_args(fault, duration_s=None, shard=0, on="primary") -> list:
    """The `durakv chaos` arguments of a scenario's fault, aimed at the primary of `shard` (or its AZ)."""
    d = FAULT_DEFAULT_S[fault] if duration_s is None else duration_s
    if fault == "az-power":
        return ["az-power", "--az", on, "--duration", f"{d:g}", "--shard", str(shard)]
    if fault == "kill":
        return ["kill", "--node", on, "--restart-after", f"{d:g}", "--shard", str(shard)]
    if fault == "pause":
        return ["pause", "--node", on, "--duration", f"{d:g}", "--shard", str(shard)]
    if fault == "partition":
        return ["partition", "--az", on, "--duration", f"{d:g}", "--shard", str(shard)]
    if fault == "failover":
        return ["failover", "--shard", str(shard)]
    raise ValueError(f"unknown fault {fault!r}")


def with_faults(history, windows) -> History:
    """The history with the fault windows as nemesis start/stop records at their own times."""
    nemesis = []
    for a, b, label in windows:
        nemesis.append(Op(0, NEMESIS, INFO, FAULT_START, None, label, a))
        if b is not None:
            nemesis.append(Op(0, NEMESIS, INFO, FAULT_STOP, None, label, b))
    nemesis.sort(key=lambda o: o.time_ns)
    merged = heapq.merge(history.ops, nemesis, key=lambda o: o.time_ns)
    return History([replace(o, index=i) for i, o in enumerate(merged)], dict(history.meta))


def _wait(cond, timeout_s, interval_s=0.05):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(interval_s)
    return cond()


def _acked_times(history, since_ns=0) -> list:
    return sorted(o.complete_ns for o in write_ops(history) if o.type == OK and o.complete_ns >= since_ns)


def gap_after(history, t_ns, until_ns=None):
    """The longest stretch without an acknowledged write that ends after t_ns (the fault's start): (start_ns,
    end_ns), from the last acknowledgement before it to the first after. until_ns bounds where it may begin."""
    acks = _acked_times(history)
    best = None
    prev = None
    for t in acks:
        if prev is not None and t > t_ns and (until_ns is None or prev <= until_ns):
            if best is None or t - prev > best[1] - best[0]:
                best = (prev, t)
        prev = t
    return best


# What the seed (shared/seeds/000_e664b13db1353243.txt: ElastiCache for Valkey with durability and MemoryDB,
# r7g.large, TLS, cluster mode, AZ faults by AWS FIS) measured, printed next to each result.
SEED = {
    "acked-writes": "Seed (ElastiCache Sync, FIS power cut of the primary's AZ): 0 acknowledged keys lost in 6/6 "
                    "runs.",
    "async-rpo": "Seed (ElastiCache Async, same fault): 1,346, 1,141 and 967 acknowledged keys lost in 3 runs, "
                 "well under what the 10 s buffer allows.",
    "switch": "Seed (ElastiCache, modify-replication-group --durability sync): Async -> Sync effective after about "
              "14.6 s, zero errors or write stalls (measured once).",
    "failover": "Seed: ElastiCache planned (test-failover) 16.2-18.5 s, unplanned (FIS power cut) 15.3-22.4 s; "
                "MemoryDB planned (failover-shard) 18.3-22.3 s.",
    "bench": "Seed (30,000 ops/s, 100 connections, 50% writes, 256 B): write p50 none 0.255 / async 0.247 / sync "
             "3.535 ms (sync about 13-14x), p99 0.775 / 0.775 / 5.567 ms; read p50 0.151 / 0.159 / 0.159 ms "
             "(equal across modes once reads have their own connections).",
    "linearizable": "The seed checks no history; MemoryDB documents linearizable primaries (Jepsen-style checks are "
                    "how such claims are tested).",
}


def _tag():
    return uuid.uuid4().hex[:6]


# -- acked writes (Test 1) and async RPO (Test 2) ---------------------------------------------------------------------

def acked_writes(env, fault="az-power", runs=1, writers=4, warmup_s=5.0, fault_s=None, after_s=10.0,
                 value_bytes=0, retry_refused=False, rpo=False, title=None, bulk=None,
                 bulk_timeout_s=300.0) -> Result:
    """Writers record every acknowledged key while the fault hits the primary; after the heal every
    acknowledged key must be there with its value (sync). rpo: the async variant (loss is reported against the
    durability lag seen just before the fault, and a loss within the buffer is not a failure).
    bulk: a bulk load step before the fault, next to the writers: {"clients": n, and BulkWriter's arguments
    (batches, batch, value_bytes, large, large_bytes)}: pipelined batches and large values from several
    clients, recorded and checked like every other write, counted in the "Bulk load" table."""
    say = env.say
    if env.fault_cmd:
        fault = "fault-cmd"
    results, histories, details = [], [], []
    lags, buffers, rejections, bulk_rows = [], [], [], []
    reasons = []
    tag = _tag()
    for run in range(1, runs + 1):
        env.healthy()
        say(f"run {run}/{runs}: {writers} writers, fault {fault} after {warmup_s:g}s")
        rec = Recorder(meta={"scenario": "async-rpo" if rpo else "acked-writes", "run": run, "fault": fault})
        stop = threading.Event()
        sampler = None
        if rpo:
            sampler = InfoSampler(env.target, env.target.primaries(), ("durability",), 0.05, stop)
            sampler.start()
        ws = start_writers(env.target, rec, writers, stop, prefix=f"acked:{tag}:{run}", value_bytes=value_bytes,
                           retry_refused=retry_refused or rpo)
        bws = []
        if bulk:
            spec = dict(bulk)
            bws = [BulkWriter(env.target, rec, n, stop, f"acked:{tag}:{run}", **{k: v for k, v in spec.items()
                                                                                   if k != "clients"})
                   for n in range(spec.get("clients", 2))]
            for b in bws:
                b.start()
        t_start = time.monotonic()
        try:
            if not _wait(lambda: sum(w.acked for w in ws) > 0 and time.monotonic() - t_start >= warmup_s,
                         warmup_s + 60):
                raise RuntimeError("no write was acknowledged before the fault")
            if bws:
                if not _wait(lambda: not any(b.is_alive() for b in bws), bulk_timeout_s, interval_s=0.2):
                    reasons.append(f"run {run}: the bulk load step did not finish within {bulk_timeout_s:g}s "
                                   f"({sum(b.acked + b.large_acked for b in bws):,} of "
                                   f"{sum(b.sent + b.large_sent for b in bws):,} writes acknowledged)")
                bulk_rows.append(_bulk_row(run, bws))
                errs = sum(sum(b.errors.values()) for b in bws)
                if errs:
                    reasons.append(f"run {run}: the bulk load step had {errs:,} error(s): "
                                   + ", ".join(f"{k} ({v})" for b in bws for k, v in b.errors.most_common(3)))
            fr = FaultRun(env, None if env.fault_cmd else chaos_args(fault, fault_s)).start()
            fr.wait()
            healed = time.monotonic()
            acked_at_heal = sum(w.acked for w in ws)
            if not _wait(lambda: sum(w.acked for w in ws) > acked_at_heal
                         and time.monotonic() - healed >= after_s, after_s + 60):
                reasons.append(f"run {run}: no write acknowledged within {after_s + 60:g}s after the heal")
        finally:
            alive = stop_all(ws + bws + ([sampler] if sampler else []), stop)
        if alive:
            reasons.append(f"run {run}: writers still blocked at the end: {', '.join(alive)}")
        env.healthy()
        windows = fr.windows()
        hist = with_faults(rec.history(), windows)
        keys = [o.key for o in write_ops(hist)]
        final = read_back(env.target, keys)
        res = check_acked_writes(hist, final)
        expected = {}
        for o in write_ops(hist):
            if o.type == OK and final.get(o.key) == o.value:
                expected[o.key] = o.value
        behind = replicas_missing(env.target, expected)
        results.append(res)
        histories.append(hist)
        fault_start = windows[0][0]
        gap = gap_after(hist, fault_start)
        down = [e for e in fr.events() if e["event"] == "start"]
        what = (down[0].get("detail") or {}) if down else {}
        detail = {"run": run, "fault": fault, "target": what.get("node") or what.get("az") or fr.label,
                  "fault_s": round((windows[0][1] - windows[0][0]) / 1e9, 3) if windows[0][1] else None,
                  "unavailable_s": round((gap[1] - gap[0]) / 1e9, 3) if gap else None,
                  "replicas_behind": behind, "acked": res.acked, "lost": len(res.lost),
                  "events": [f"{e['ts']} {e['event']}: {e['message']}" for e in fr.events()]}
        if rpo:
            lag = sampler.last_before(fault_start, "durability_lag_ms")
            buf = sampler.last_before(fault_start, "durability_buffer_ms")
            lags.append(lag[1] if lag else None)
            buffers.append(buf[1] if buf else None)
            rejections.append(sum(w.rejections for w in ws))
            ages = [(fault_start - x.acked_ns) / 1e6 for x in res.lost]
            detail["lost_ack_age_ms"] = {"max": round(max(ages), 3), "min": round(min(ages), 3)} if ages else None
            if ages and buf and max(ages) > buf[1]:
                reasons.append(f"run {run}: lost a write acknowledged {max(ages):.0f} ms before the fault, more "
                               f"than the {buf[1]} ms buffer")
        elif res.lost:
            reasons.append(f"run {run}: {len(res.lost)} acknowledged write(s) lost")
        if res.unexpected:
            reasons.append(f"run {run}: {len(res.unexpected)} write(s) reported failed are present")
        if any(v is None or v > 0 for v in behind.values()):
            reasons.append(f"run {run}: replicas missing acknowledged writes 30 s after recovery (None: not "
                           f"answering): {behind}")
        details.append(detail)
        say(f"run {run}: acked {res.acked:,}, failed {res.failed:,}, indefinite {res.indefinite:,}, "
            f"lost {len(res.lost):,}, write gap {detail['unavailable_s']} s")
    name = "async-rpo" if rpo else "acked-writes"
    rep = acked_writes_report(results, histories, title=title or f"durakv verify {name} --fault {fault}",
                              text=[_env_text(env), SEED[name]])
    rep.tables.append(_fault_table(details, rpo))
    if bulk:
        rep.tables.append(_bulk_table(bulk_rows, bulk))
        rep.data["bulk"] = [dict(zip(BULK_COLUMNS, r)) for r in bulk_rows]
    if rpo:
        rep.tables.insert(0, async_rpo_table(results, lags, buffers, rejections))
    rep.data["details"] = details
    if rpo:
        rep.data["lag_ms_before_fault"] = lags
        rep.data["buffer_ms"] = buffers
        rep.data["buffer_rejections"] = rejections
    return Result(rep, FAILED if reasons else PASS, reasons)


BULK_COLUMNS = ["Run", "Clients", "Pipelined SETs acked", "Pipelined SETs sent", "Large values acked",
                "Large values sent", "MB acked", "Seconds", "MB/s", "Errors"]


def _bulk_row(run, bws) -> list:
    start = min(b.started_ns for b in bws if b.started_ns is not None)
    end = max((b.ended_ns or time.monotonic_ns()) for b in bws)
    seconds = (end - start) / 1e9
    mb = sum(b.bytes_acked for b in bws) / 1e6
    return [str(run), len(bws), sum(b.acked for b in bws), sum(b.sent for b in bws),
            sum(b.large_acked for b in bws), sum(b.large_sent for b in bws), round(mb, 3), round(seconds, 3),
            round(mb / seconds, 3) if seconds > 0 else None, sum(sum(b.errors.values()) for b in bws)]


def _bulk_table(rows, spec) -> Table:
    note = (f"Before the fault, next to the writers: {spec.get('clients', 2)} client(s), each pipelining "
            f"{spec.get('batches', 3)} batch(es) of {spec.get('batch', 1000):,} SETs of "
            f"{spec.get('value_bytes', 4096):,} B and, between them, {spec.get('large', 0)} SET(s) of "
            f"{spec.get('large_bytes', 2 << 20):,} B. Every one of them is checked after recovery with the other "
            "writes.")
    return Table("Bulk load", BULK_COLUMNS, rows, notes=[note], name="bulk",
                 formats={"MB acked": "{:.1f}", "Seconds": "{:.2f}", "MB/s": "{:.1f}"})


def _fault_table(details, rpo) -> Table:
    cols = ["Run", "Fault", "Target", "Fault held (s)", "Write unavailability (s)", "Replicas missing keys"]
    if rpo:
        cols.append("Lost acked within (ms before fault)")
    rows = []
    for d in details:
        behind = d["replicas_behind"]
        row = [str(d["run"]), d["fault"], d["target"], d["fault_s"], d["unavailable_s"],
               ("not answering" if None in behind.values() else sum(behind.values())) if behind else 0]
        if rpo:
            row.append(d["lost_ack_age_ms"]["max"] if d.get("lost_ack_age_ms") else None)
        rows.append(row)
    return Table("Faults", cols, rows, formats={"Fault held (s)": "{:.2f}", "Write unavailability (s)": "{:.3f}"},
                 name="faults")


def _env_text(env) -> str:
    t = env.target
    where = f"local cluster {env.cluster.dir}" if env.cluster is not None else f"endpoint {t.label}"
    return (f"Target: {where} ({'cluster' if t.cluster_mode else 'standalone'} client"
            f"{', TLS' if t.tls else ''}); faults by "
            + (f"`{env.fault_cmd}`" if env.fault_cmd else "`durakv chaos`") + ".")


# -- dirty reads ------------------------------------------------------------------------------------------------

DIRTY_FAULTS = ("partition", "pause-nats", "kill", "pause")


def dirty_chaos_args(env, fault, duration_s, heal_after_failover_s=None):
    """The nemesis of dirty-reads: commits stall on the primary while the others elect a new one.
    partition: the primary's AZ is cut off (its own NATS node is in the minority; clients still reach it);
    pause-nats: SIGSTOP of the NATS node of the primary's AZ (a node connects to a NATS server picked at random
    and moves after about 3 missed pings, so this stalls it only sometimes); kill / pause: the primary itself."""
    if fault == "pause-nats":
        primary = env.cluster.reload().primary(0) if env.cluster is not None else None
        if primary is None:
            raise ClusterError("pause-nats needs a local cluster with a primary")
        return ["pause", "--node", f"nats-{primary.az}", "--duration", f"{duration_s:g}"]
    args = chaos_args(fault, duration_s)
    if fault == "partition" and heal_after_failover_s is not None:
        args += ["--heal-after-failover", f"{heal_after_failover_s:g}"]
    return args


def dirty_reads(env, fault="partition", runs=1, writers=4, rate_per_writer=50.0, warmup_s=3.0, fault_s=15.0,
                after_s=3.0, write_timeout_s=15.0, heal_after_failover_s=None) -> Result:
    """Writers write unique values (SET of keys written once, XADD to one stream) while readers record what
    they see: GET of the key in flight (a cluster client), XREAD BLOCK, keyspace notifications and a SYNC
    connection (its RDB file and the command stream after it), the last three attached to the primary. The
    fault stalls the primary's commits until another node takes over; after the heal everything is read back
    and the pure checker (dirty.py) flags every observed value whose write was never acknowledged and is gone."""
    say = env.say
    if env.fault_cmd:
        fault = "fault-cmd"
    rows, run_rows, reasons, data = [], [], [], []
    for run in range(1, runs + 1):
        env.healthy()
        tag = _tag()
        # One hash tag: every key and the stream live on one shard, so the node-local readers see them all.
        prefix, stream = f"dirty:{{{tag}}}", f"dirty:{{{tag}}}:s"
        rec = Recorder(meta={"scenario": "dirty-reads", "run": run, "fault": fault})
        stop = threading.Event()
        ws = [DirtyWriter(env.target, rec, f"w{n}", stop, prefix, stream, timeout_s=write_timeout_s,
                          rate_per_s=rate_per_writer) for n in range(writers)]
        obs = [cls(env.target, rec, name, stop, prefix, stream)
               for cls, name in ((XreadObserver, "xread"), (NotifyObserver, "notify"), (FeedObserver, "feed"),
                                 (RdbObserver, "rdb"))]
        getter = GetObserver(env.target, rec, "get", stop, ws, timeout_s=write_timeout_s)
        for t in obs + [getter] + ws:
            t.start()
        t_start = time.monotonic()
        fr = None
        try:
            if not _wait(lambda: sum(w.acked for w in ws) > 0 and all(o.seen for o in obs)
                         and time.monotonic() - t_start >= warmup_s, warmup_s + 60):
                raise RuntimeError("before the fault: no acknowledged write, or a reader saw nothing ("
                                   + ", ".join(f"{o.via} {o.seen} ({o.last_error})" for o in obs) + ")")
            say(f"run {run}/{runs}: readers attached to {obs[0].attached[-1][1]}; fault {fault}")
            fr = FaultRun(env, None if env.fault_cmd else dirty_chaos_args(env, fault, fault_s,
                                                                           heal_after_failover_s)).start()
            fr.wait()
            healed = time.monotonic()
            acked_at_heal = sum(w.acked for w in ws)
            if not _wait(lambda: sum(w.acked for w in ws) > acked_at_heal and time.monotonic() - healed >= after_s,
                         after_s + 60):
                reasons.append(f"run {run}: no write acknowledged within {after_s + 60:g}s after the heal")
        finally:
            alive = stop_all(ws + obs + [getter], stop, timeout_s=write_timeout_s + 15)
            if fr is not None and fr.proc is not None and fr.returncode is None:
                fr.interrupt()
        if alive:
            reasons.append(f"run {run}: clients still blocked at the end: {', '.join(alive)}")
        env.healthy()
        hist = with_faults(rec.history(), fr.windows())
        keys = sorted({o.key for o in hist.operations() if o.f == WRITE_KEY})
        final = read_back(env.target, keys)
        final[stream] = read_stream_values(env.target, stream)
        res = check_dirty_reads(hist, final)
        for row in dirty_reads_table_rows(res):
            rows.append([str(run)] + row)
        window = fr.windows()[0]
        held_s = round((window[1] - window[0]) / 1e9, 3) if window[1] else None
        run_rows.append([str(run), fault, held_s, res.writes, res.acked, res.failed, res.indefinite,
                         res.unacked_gone, len(res.lost), len(res.dirty)])
        if res.dirty:
            reasons.append(f"run {run}: {len(res.dirty)} dirty read(s): values of writes never acknowledged and "
                           "gone after recovery were shown to clients\n" + "\n".join(first_dirty(res)))
        if res.lost:
            reasons.append(f"run {run}: {len(res.lost)} acknowledged write(s) lost")
        d = res.to_dict()
        d["run"], d["fault"], d["fault_s"] = run, fault, held_s
        d["readers_attached"] = {o.via: [a for _t, a in o.attached] for o in obs}
        data.append(d)
        say(f"run {run}: {res.writes:,} writes ({res.acked:,} acked, {res.unacked_gone:,} unacked and gone), "
            f"{sum(c.observed for c in res.channels.values()):,} observations, {len(res.dirty)} dirty read(s)")
    cols = ["Run"] + DIRTY_COLUMNS
    table = Table("Observed values per channel", cols, rows, name="dirty_reads", formats={cols[5]: "{:.1f}"},
                  notes=["Dirty read: an observed value whose write was never acknowledged (failed, timed out, or "
                         "its connection was lost) and that is gone after recovery. Seen before the ack: observed "
                         "before the writer had its reply (the write was then acknowledged and kept)."])
    rcols = ["Run", "Fault", "Fault held (s)", "Writes", "Acked", "Failed", "Indefinite",
             "Unacked and gone", "Acked lost", "Dirty reads"]
    runs_table = Table("Dirty reads: writes and outcome", rcols, run_rows, name="dirty_runs",
                       formats={"Fault held (s)": "{:.2f}"})
    text = [_env_text(env), "Readers: " + ", ".join(CHANNELS) + ". A write's value is unique, so what a reader "
            "saw names the write. Nothing derived from an uncommitted write may leave the process before its "
            "commit (DESIGN: reads and uncommitted writes); MONITOR is the documented exception and is not read.",
            f"Keyspace notifications are switched on (notify-keyspace-events {NOTIFY_EVENTS}) on each node the "
            "notification reader attaches to."]
    rep = Report(f"durakv verify dirty-reads --fault {fault}", [runs_table, table], text=text,
                 data={"runs": data})
    return Result(rep, FAILED if reasons else PASS, reasons)


# -- switch (Test 3) ----------------------------------------------------------------------------------------------

def switch(env, to="sync", back=True, writers=4, warmup_s=5.0, hold_s=5.0, after_s=3.0,
           effective_timeout_s=30.0) -> Result:
    """CONFIG SET durability <to> on every primary while writers run, then back: for each switch, the time
    until every node reports it effective (INFO durability effective_durability), and every error or stall the
    writers saw meanwhile."""
    say = env.say
    env.healthy()
    modes = [to] + ([_other(to)] if back else [])
    rec = Recorder(meta={"scenario": "switch", "modes": modes})
    nodes = env.nodes()
    poller = _ModePoller(env, nodes)
    stop = threading.Event()
    ws = start_writers(env.target, rec, writers, stop, prefix=f"switch:{_tag()}")
    t_start = time.monotonic()
    switches = []
    reasons = []
    try:
        if not _wait(lambda: sum(w.acked for w in ws) > 0 and time.monotonic() - t_start >= warmup_s,
                     warmup_s + 60):
            raise RuntimeError("no write was acknowledged before the switch")
        for i, mode in enumerate(modes):
            if i:
                time.sleep(hold_s)
            switches.append(_one_switch(env, mode, effective_timeout_s, poller, nodes))
            s = switches[-1]
            say(f"durability {mode}: CONFIG SET answered in {s['reply_ms']:.1f} ms; effective on the primaries "
                f"after {_fmt_s(s['primaries_s'])}, on every node after {_fmt_s(s['all_s'])}")
        time.sleep(after_s)
    finally:
        stop_all(ws, stop)
        poller.close()
    hist = rec.history()
    ops = write_ops(hist)
    rows = []
    for s in switches:
        t0 = s["t0_ns"]
        t1 = t0 + int(((s["all_s"] or effective_timeout_s) + 1.0) * 1e9)
        window = [o for o in ops if o.complete_ns is not None and t0 - 1e9 <= o.complete_ns <= t1]
        errors = [o for o in window if o.type != OK]
        gap = gap_after(hist, t0 - int(1e9), t1)
        lat = [(o.complete_ns - o.invoke_ns) / 1e6 for o in window if o.type == OK]
        s.update(errors=len(errors), error_texts=sorted({o.error or "" for o in errors})[:5],
                 longest_gap_ms=round((gap[1] - gap[0]) / 1e6, 3) if gap else None,
                 max_latency_ms=round(max(lat), 3) if lat else None, writes=len(window))
        rows.append([f"{s['from']} -> {s['to']}", s["reply_ms"], s["primaries_s"], s["all_s"],
                     ", ".join(f"{n} ({m})" for n, m in s["not_effective"].items()) or "-",
                     s["writes"], s["errors"], s["longest_gap_ms"], s["max_latency_ms"]])
        if s["errors"]:
            reasons.append(f"{s['from']} -> {s['to']}: {s['errors']} write error(s): {s['error_texts']}")
        if s["not_effective"]:
            reasons.append(f"{s['from']} -> {s['to']}: not effective within {effective_timeout_s:g}s on "
                           + ", ".join(f"{n} (reports {m})" for n, m in s["not_effective"].items()))
    final = read_back(env.target, [o.key for o in ops])
    res = check_acked_writes(hist, final)
    if not res.ok:
        reasons.append(f"{len(res.lost)} acknowledged write(s) lost, {len(res.unexpected)} unexpected")
    cols = ["Switch", "CONFIG SET reply (ms)", "Effective on primaries (s)", "Effective on every node (s)",
            "Not effective", "Writes meanwhile", "Errors", "Longest write gap (ms)", "Max write latency (ms)"]
    table = Table("Live durability switch during writes", cols, rows,
                  formats={cols[1]: "{:.1f}", cols[2]: "{:.3f}", cols[3]: "{:.3f}", cols[7]: "{:.1f}",
                           cols[8]: "{:.1f}"}, name="switch",
                  notes=["Effective: the node's INFO durability effective_durability (and durability_mode) "
                         "report the new mode, polled every 5 ms on every node from a separate process. Window for errors and stalls: "
                         "1 s before the CONFIG SET to 1 s after the mode is effective everywhere."])
    rep = Report("durakv verify switch", [table], text=[_env_text(env), SEED["switch"]],
                 data={"switches": switches, "acked": res.to_dict()})
    return Result(rep, FAILED if reasons else PASS, reasons)


def _other(mode):
    return "async" if mode == "sync" else "sync"


def _fmt_s(v):
    return "-" if v is None else f"{v:.3f}s"


def _mode_poller(conn, target, nodes):
    """A separate process (the workload's threads would delay a poll in this one by the GIL): on (mode,
    timeout_s) it polls INFO durability of every node every 5 ms and answers ({name: monotonic ns at which it
    first reported the mode}, {name: last effective_durability seen})."""
    clients = {}

    def info(name, host, port):
        c = clients.get(name)
        if c is None:
            c = clients[name] = target.node_client(host, port, 1.0)
        return c.info("durability")
    for name, host, port in nodes:
        try:
            info(name, host, port)
        except Exception:  # noqa: BLE001 - polled again later
            clients.pop(name, None)
    conn.send("ready")
    while True:
        msg = conn.recv()
        if msg is None:
            break
        mode, timeout_s = msg
        seen, last = {}, {}
        deadline = time.monotonic() + timeout_s
        while len(seen) < len(nodes) and time.monotonic() < deadline:
            for name, host, port in nodes:
                if name in seen:
                    continue
                try:
                    fields = info(name, host, port)
                except Exception:  # noqa: BLE001
                    clients.pop(name, None)
                    continue
                last[name] = fields.get("effective_durability")
                if fields.get("effective_durability") == mode and fields.get("durability_mode", mode) == mode:
                    seen[name] = time.monotonic_ns()
            time.sleep(0.005)
        conn.send((seen, last))


class _ModePoller:
    def __init__(self, env, nodes, timeout_s=60.0):
        import multiprocessing
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_mode_poller, args=(child, env.target, nodes), daemon=True,
                                name="verify-mode-poller")
        self.proc.start()
        if not self.conn.poll(timeout_s):
            self.close()
            raise RuntimeError("the durability-mode poller did not start")
        self.conn.recv()

    def poll(self, mode, timeout_s):
        self.conn.send((mode, timeout_s))

    def result(self, timeout_s):
        if not self.conn.poll(timeout_s + 30):
            raise RuntimeError("the durability-mode poller did not answer")
        return self.conn.recv()

    def close(self):
        try:
            self.conn.send(None)
        except (OSError, ValueError):
            pass
        self.proc.join(5)
        if self.proc.is_alive():
            self.proc.terminate()   # our own child, by its handle
            self.proc.join(5)


def _one_switch(env, mode, timeout_s, poller, nodes) -> dict:
    prim_addrs = env.target.primaries()
    primaries = {f"{h}:{p}" for h, p in prim_addrs}
    before = {}
    for name, host, port in nodes:
        try:
            with env.target.node_client(host, port, 2.0) as c:
                before[name] = c.info("durability").get("effective_durability")
        except Exception:  # noqa: BLE001
            before[name] = None
    # Connected before the clock starts: the time measured is the switch's, not a TLS handshake's.
    conns = [env.target.node_client(h, p, 10.0) for h, p in prim_addrs]
    try:
        for c in conns:
            c.ping()
        t0 = time.monotonic_ns()
        poller.poll(mode, timeout_s)
        reply_ms = 0.0
        for c in conns:
            t = time.monotonic()
            c.config_set("durability", mode)
            reply_ms = max(reply_ms, (time.monotonic() - t) * 1000)
    finally:
        for c in conns:
            c.close()
    seen, last = poller.result(timeout_s)
    effective = {n: max(0, ns - t0) / 1e9 for n, ns in seen.items()}
    prim = [effective.get(n) for n, h, p in nodes if f"{h}:{p}" in primaries]
    prim_before = sorted({str(before.get(n)) for n, h, p in nodes if f"{h}:{p}" in primaries})
    return {"to": mode, "from": ",".join(prim_before), "before": before, "t0_ns": t0,
            "reply_ms": round(reply_ms, 3), "per_node_s": effective,
            "primaries_s": max(prim) if prim and None not in prim else None,
            "all_s": max(effective.values()) if len(effective) == len(nodes) else None,
            "not_effective": {n: last.get(n) for n, _h, _p in nodes if n not in effective}}


# -- failover (Test 4) ------------------------------------------------------------------------------------------

def failover(env, runs=3, kinds=("planned", "unplanned"), unplanned="kill", writers=4, warmup_s=3.0,
             after_s=3.0, restart_after_s=5.0) -> Result:
    """Planned (CLUSTER FAILOVER) and unplanned (kill -9 of the primary, or the power cut of its AZ) failovers
    under writes, `runs` of each: the write unavailability a cluster client sees, per run and the median, and
    the errors the clients saw (a planned failover must show them none: the old primary holds writes and then
    redirects them, as Valkey's manual failover does)."""
    say = env.say
    series, rows, reasons = {}, [], []
    for kind in kinds:
        label = "planned" if kind == "planned" else "unplanned (%s)" % {
            "kill": "kill -9", "az-power": "power cut of the primary's AZ",
            "az-power-stream-leader": "power cut of the stream leader's AZ"}[unplanned]
        series[label] = []
        for run in range(1, runs + 1):
            env.healthy()
            old = env.cluster.primary(0).name if env.cluster is not None else None
            rec = Recorder(meta={"scenario": "failover", "kind": kind, "run": run})
            stop = threading.Event()
            ws = start_writers(env.target, rec, writers, stop, prefix=f"fo:{_tag()}")
            t_start = time.monotonic()
            try:
                if not _wait(lambda: sum(w.acked for w in ws) > 0 and time.monotonic() - t_start >= warmup_s,
                             warmup_s + 60):
                    raise RuntimeError("no write was acknowledged before the failover")
                if kind == "planned":
                    args = chaos_args("failover")
                elif unplanned == "az-power-stream-leader":
                    args = chaos_args("az-power", restart_after_s, on="stream-leader")
                else:
                    args = chaos_args(unplanned, restart_after_s)
                fr = FaultRun(env, args).start().wait()
                acked = sum(w.acked for w in ws)
                _wait(lambda: sum(w.acked for w in ws) > acked, 60)
                time.sleep(after_s)
            finally:
                stop_all(ws, stop)
            windows = fr.windows()
            hist = with_faults(rec.history(), windows)
            gap = gap_after(hist, windows[0][0])
            seconds = (gap[1] - gap[0]) / 1e9 if gap else None
            series[label].append(round(seconds, 4) if seconds is not None else None)
            env.healthy()
            final = read_back(env.target, [o.key for o in write_ops(hist)])
            res = check_acked_writes(hist, final)
            new = env.cluster.primary(0).name if env.cluster is not None else None
            errors = collections.Counter()
            for w in ws:
                errors.update(w.errors)
            n_errors = sum(errors.values())
            seen = "; ".join(f"{n} x {text}" for text, n in errors.most_common(3))
            rows.append([label, str(run), old, new, seconds, res.acked, len(res.lost), n_errors])
            if res.lost or res.unexpected:
                reasons.append(f"{label} run {run}: {len(res.lost)} acknowledged write(s) lost, "
                               f"{len(res.unexpected)} unexpected")
            if kind == "planned" and n_errors:
                reasons.append(f"{label} run {run}: {n_errors} client error(s): {seen}")
            say((f"{label} run {run}: {old} -> {new}, writes unavailable {seconds:.3f} s" if seconds is not None
                 else f"{label} run {run}: no gap measured")
                + f", {n_errors} client error(s)" + (f" ({seen})" if n_errors else ""))
    rep = failover_report(series, text=[_env_text(env), SEED["failover"], "Write unavailability: the longest stretch without an "
                                        "acknowledged write (any writer) that ends after the fault began, as the "
                                        "cluster client saw it."])
    cols = ["Kind", "Run", "Old primary", "New primary", "Write unavailability (s)", "Acked", "Lost", "Client errors"]
    rep.tables.append(Table("Failover runs", cols, rows, formats={cols[4]: "{:.3f}"}, name="failover_runs"))
    return Result(rep, FAILED if reasons else PASS, reasons)


# -- linearizable -------------------------------------------------------------------------------------------------

def linearizable(env, faults=("kill", "pause", "failover"), clients=5, keys=4, rate_per_client=50.0,
                 warmup_s=3.0, gap_s=3.0, after_s=3.0, time_limit_s=60.0, timeout_s=1.0, fault_s=None) -> Result:
    """Concurrent reads, writes and compare-and-sets (WATCH/MULTI/EXEC and a Lua script) on a few keys while
    the faults run one after the other; the history is checked for linearizability (per key, WGL search with
    a time bound: a key that runs out is `unknown`)."""
    say = env.say
    env.healthy()
    tag = _tag()
    key_names = [f"lin:{tag}:{k}" for k in range(keys)]
    rec = Recorder(meta={"scenario": "linearizable", "faults": list(faults)})
    stop = threading.Event()
    cs = [RegisterClient(env.target, rec, p, stop, key_names, timeout_s=timeout_s, rate_per_s=rate_per_client,
                         seed=p) for p in range(clients)]
    for c in cs:
        c.start()
    runs = []
    try:
        time.sleep(warmup_s)
        for i, f in enumerate(faults):
            if i:
                time.sleep(gap_s)
                env.healthy()
            d = (fault_s or {}).get(f) if isinstance(fault_s, dict) else fault_s
            if f == "pause" and d is None:
                d = 5.0
            if f == "kill" and d is None:
                d = 3.0
            if f == "partition" and d is None:
                d = 10.0
            say(f"fault {i + 1}/{len(faults)}: {f}")
            fr = FaultRun(env, label=env.fault_cmd) if env.fault_cmd else FaultRun(env, chaos_args(f, d))
            runs.append(fr.start().wait())
        env.healthy()
        time.sleep(after_s)
    finally:
        stop_all(cs, stop)
    windows = [w for fr in runs for w in fr.windows()]
    hist = with_faults(rec.history(), windows)
    say(f"checking {len(hist.client_ops()) // 2:,} operations on {keys} keys (bound {time_limit_s:g}s)")
    result = check_registers(hist, time_limit_s=time_limit_s)
    counts = {}
    for c in cs:
        for f, n in c.counts.items():
            counts[f] = counts.get(f, 0) + n
    outcomes = {}
    for o in hist.operations():
        outcomes[o.type] = outcomes.get(o.type, 0) + 1
    text = [_env_text(env), SEED["linearizable"], f"{clients} clients at {rate_per_client:g} ops/s each on {keys} keys; operations: "
            + ", ".join(f"{k} {v:,}" for k, v in sorted(counts.items())) + "; outcomes: "
            + ", ".join(f"{k} {v:,}" for k, v in sorted(outcomes.items()))
            + ". A timeout or a lost connection is `info` (it may have happened).",
            "Faults: " + "; ".join(f"{w[2]} ({(w[1] - w[0]) / 1e9:.1f} s)" for w in windows if w[1])]
    rep = linearizability_report(result, text=text)
    rep.data["history"] = {"operations": len(hist.operations()), "outcomes": outcomes, "faults": [
        {"label": w[2], "seconds": round((w[1] - w[0]) / 1e9, 3) if w[1] else None} for w in windows]}
    status = {"ok": PASS, "fail": FAILED}.get(result.status, UNKNOWN)
    reasons = [] if status == PASS else [result.render()]
    res = Result(rep, status, reasons)
    res.history = hist
    res.check = result
    return res


# -- bench (the seed's tables) -----------------------------------------------------------------------------------

def bench_one(target, rate, clients, duration_s, key_maximum, data_size, prefill, say=print):
    """One fixed-rate run, SETs and GETs on separate connections: {"SET": {...}, "GET": {...}} per command."""
    from ..bench.config import BenchConfig
    from ..bench.runner import run_bench
    # processes=0: the load is split over worker processes until the generator keeps its schedule (a generator
    # behind schedule puts its own lag into every latency of the table)
    cfg = BenchConfig(host=target.host, port=target.port, rate=rate, clients=clients, ratio=(1, 1),
                      data_size=data_size, key_maximum=key_maximum, prefill=prefill, duration=duration_s,
                      separate=True, cluster=target.cluster_mode, tls=target.tls, tls_cacert=target.tls_ca or "",
                      password=target.password or "", processes=0)
    result = run_bench(cfg)
    rep = result.report
    sched = rep.get("schedule") or {}
    out = {"errors": rep["errors"], "ops_per_sec": rep["ops_per_sec"], "notes": rep["notes"],
           "processes": rep["generator"]["processes"],
           "schedule": {"kept": sched.get("kept"), "late_pct": sched.get("late_pct"),
                        "lag_p99_ms": (sched.get("lag_ms") or {}).get("p99"),
                        "lag_max_ms": (sched.get("lag_ms") or {}).get("max")}}
    for cmd in ("SET", "GET"):
        c = rep["commands"].get(cmd)
        if c:
            lat = c["latency_ms"]
            out[cmd] = {"p50": lat["p50"], "p99": lat["p99"], "p99.9": lat.get("p99.9"), "max": lat["max"],
                        "ops_per_sec": c["ops_per_sec"], "errors": sum(c["errors"].values())}
    return out


def bench(groups, rate=5000.0, clients=50, duration_s=30.0, key_maximum=100_000, data_size=256, repeat=1,
          say=print) -> Result:
    """groups: [(open_env, [(mode label, prepare)])]: open_env() gives an Env that is closed once its modes ran
    (one cluster at a time on a small machine); prepare(env) switches it to the mode (None: it runs it). Each
    mode runs `repeat` times; the tables show the median p50/p99 per mode (the seed: median of 3)."""
    write_modes, read_modes, effective, reasons = {}, {}, {}, []
    raw = {}
    for open_env, modes in groups:
        env = open_env()
        try:
            prefilled = False
            for mode, prepare in modes:
                if prepare is not None:
                    prepare(env)
                effective[mode] = _effective_modes(env)
                runs = []
                for i in range(repeat):
                    say(f"bench {mode} ({i + 1}/{repeat}): {rate:,.0f} ops/s over {clients} connections (SET and "
                        f"GET on separate ones), {duration_s:g}s, {key_maximum:,} keys of {data_size} B")
                    runs.append(bench_one(env.target, rate, clients, duration_s, key_maximum, data_size,
                                          0 if prefilled else key_maximum, say))
                    prefilled = True
                raw[mode] = runs
                for cmd, table in (("SET", write_modes), ("GET", read_modes)):
                    vals = [r[cmd] for r in runs if cmd in r]
                    if vals:
                        table[mode] = {k: statistics.median([v[k] for v in vals if v.get(k) is not None])
                                       for k in ("p50", "p99", "p99.9", "ops_per_sec")}
                errs = {}
                for r in runs:
                    for k, n in r["errors"].items():
                        errs[k] = errs.get(k, 0) + n
                if errs:
                    reasons.append(f"{mode}: errors {errs}")
        finally:
            env.close()
    text = [f"Fixed rate {rate:,.0f} ops/s, {clients} connections (SETs and GETs on separate connections, so a "
            f"slow write never delays a read), ratio 1:1, {data_size} B values, {key_maximum:,} keys (prefilled), "
            f"{duration_s:g}s per run, median of {repeat} run(s) per mode.",
            "Effective durability reported by the primaries during each mode's run: "
            + "; ".join(f"{m}: {', '.join(sorted(set(v))) or '-'}" for m, v in effective.items()) + ".",
            SEED["bench"]]
    behind = [(m, r) for m, runs in raw.items() for r in runs if r["schedule"]["kept"] is False]
    if behind:
        text.append("The load generator fell behind its schedule (more than 1% of requests sent over 1 ms late) "
                    "in " + "; ".join(f"{m} ({r['processes']} process(es): {r['schedule']['late_pct']:.1f}% late, "
                                      f"send lag p99 {r['schedule']['lag_p99_ms']:.1f} ms, max "
                                      f"{r['schedule']['lag_max_ms']:.1f} ms)" for m, r in behind)
                    + ": those latencies include its own lag (a machine short of CPU for the generator).")
    # A mode whose primaries run something else is labelled with what they run (the table must not claim it).
    def label(m):
        runs = set(effective.get(m) or [])
        if not runs or not runs <= {"none", "async", "sync"} or runs == {m}:
            return m
        return f"{m} (runs {','.join(sorted(runs))})"
    names = {m: label(m) for m in write_modes}
    write_modes = {names[m]: v for m, v in write_modes.items()}
    read_modes = {names.get(m, m): v for m, v in read_modes.items()}
    rep = latency_report(write_modes, read_modes, text=text)
    rep.data["runs"] = raw
    rep.data["effective"] = effective
    return Result(rep, FAILED if reasons else PASS, reasons)


def _effective_modes(env) -> list:
    out = []
    for host, port in env.target.primaries():
        try:
            with env.target.node_client(host, port, 2.0) as c:
                out.append(str(c.info("durability").get("effective_durability", "-")))
        except Exception:  # noqa: BLE001
            out.append("?")
    return out
