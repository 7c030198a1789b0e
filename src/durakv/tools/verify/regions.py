"""`durakv verify region-loss`: a primary region (A, durability sync) and a follower region (B) on this machine;
writers write unique keys to A through a cluster client at a bounded rate; every process of region A is
power-cut at once (SIGKILL by pid: its NATS servers and its nodes); B is promoted at once (`promote-region`
without the old region); the acknowledged writes B lacks are counted against the lag at the cut (issue 31,
as the seed's async RPO test does for a shard). Then A's processes start again: its old primaries must refuse
writes (the region fence) and the entries A had that B never took are counted.

A follower region is asynchronous: what A acknowledged in the last moments before the cut may not have been
mirrored yet. The check: every acknowledged write B lacks lies in an entry A had beyond B's cut (never a
hole B skipped), B serves writes, and A's old primaries are fenced.
"""

import asyncio
import os
import shutil
import signal
import tempfile
import threading
import time

from .acked import write_ops
from .history import OK, Recorder
from .report import Report, Table
from .scenarios import FAILED, PASS, Result, _tag
from .workload import Target, read_back, start_writers, stop_all

SAMPLE_S = 0.1      # how often B's lag is sampled from INFO (the lag "as last measured" before the cut)


class LagSampler(threading.Thread):
    """Samples B's INFO replication (region_lag_entries, region_lag_ms) every SAMPLE_S until stopped: the last
    sample before the cut is the lag an operator's dashboard showed then."""

    def __init__(self, cluster, stop):
        super().__init__(daemon=True, name="verify-region-lag")
        self.cluster, self.stop = cluster, stop
        self.samples = []       # (monotonic s, max entries, max ms) over B's nodes

    def run(self):
        while not self.stop.is_set():
            entries = ms = 0
            for p in self.cluster.nodes:
                try:
                    info = p.info("replication", timeout_s=1.0).get("replication", {})
                except Exception:  # noqa: BLE001 - a node busy or restarting: the sample skips it
                    continue
                entries = max(entries, int(info.get("region_lag_entries") or 0))
                ms = max(ms, int(info.get("region_lag_ms") or 0))
            self.samples.append((time.monotonic(), entries, ms))
            del self.samples[:-1000]
            self.stop.wait(SAMPLE_S)

    def before(self, t):
        prior = [s for s in self.samples if s[0] <= t]
        return prior[-1] if prior else (t, 0, 0)


def _text(v):
    return v.decode("utf-8", "surrogateescape") if isinstance(v, bytes) else v


def _fenced_refusals(cluster):
    """{node name: the error a write on it got} for region A's nodes once back ("" when a write was taken)."""
    out = {}
    for p in cluster.nodes:
        try:
            with p.client(5.0) as c:
                c.execute("SET", "verify:region-fence-probe", "1")
            out[p.name] = ""
        except Exception as exc:  # noqa: BLE001 - the refusal is what is checked
            out[p.name] = str(exc)
    return out


def region_loss(shards=1, replicas=1, writers=8, rate=5000.0, warmup_s=10.0, parent=None, keep=False, say=print,
                timeout_s=180.0) -> Result:
    from ...cluster.local import LocalCluster
    from ...cluster.processes import wait_for
    root = tempfile.mkdtemp(prefix="durakv-verify-regions-", dir=parent)
    say("starting region A (domain ra, durability sync) and its follower region B (domain rb) in %s" % root)
    a = b = None
    reasons = []
    try:
        a = LocalCluster.up_or_down(os.path.join(root, "a"), shards=shards, replicas=replicas, durability="sync",
                                    region_domain="ra", timeout_s=timeout_s, log=say)
        b = LocalCluster.up_or_down(os.path.join(root, "b"), shards=shards, replicas=replicas, durability="sync",
                                    follow_region=a.dir, region_domain="rb", timeout_s=timeout_s, log=say)
        tag = _tag()
        rec = Recorder(clock_ns=time.time_ns, meta={"scenario": "region-loss"})
        stop = threading.Event()
        sampler_stop = threading.Event()
        sampler = LagSampler(b, sampler_stop)
        sampler.start()
        ws = start_writers(Target.from_cluster(a), rec, writers, stop, prefix="rl:%s" % tag,
                           rate_per_s=rate / writers, timeout_s=2.0)
        t_start = time.monotonic()
        time.sleep(warmup_s)
        load_avg = os.getloadavg()[0]
        say("power cut: every process of region A (SIGKILL by pid)")
        t_cut = time.monotonic()
        cut_ns = time.time_ns()
        a.stop_nodes([p.name for p in a.processes], sig=signal.SIGKILL)
        cut_sample = sampler.before(t_cut)
        sampler_stop.set()
        alive = stop_all(ws, stop)
        if alive:
            reasons.append("writers still blocked at the end: %s" % ", ".join(alive))
        ops = write_ops(rec.history())
        acked = [o for o in ops if o.type == OK and o.complete_ns <= cut_ns]
        rate_reached = len(acked) / max(1e-9, t_cut - t_start)
        say("promoting region B at once (region A is dark)")
        t0 = time.monotonic()
        report = asyncio.run(asyncio.wait_for(b.admin(say=say).promote_region(timeout_s=timeout_s), timeout_s + 30))
        promote_s = time.monotonic() - t0
        values = read_back(Target.from_cluster(b), [_text(o.key) for o in acked])
        lost = [o for o in acked if values.get(_text(o.key)) != _text(o.value)]
        say("region A comes back")
        a.start_nodes([p.name for p in a.processes], timeout_s=timeout_s)
        refusals = {}

        def fenced():
            # a replica redirects a write to its shard's primary (-MOVED, as Valkey's do): that one must refuse
            refusals.clear()
            refusals.update(_fenced_refusals(a))
            answers = [t for t in refusals.values() if not t.startswith("MOVED ")]
            return answers and all("fenced region" in t for t in answers)
        try:
            wait_for(fenced, timeout_s, "region A's nodes refusing writes (the region fence)")
        except TimeoutError:
            reasons.append("region A's nodes did not all refuse writes with the fence: %s" % refusals)
        promoted = b._store_call(lambda store: store.get_region())[0]
        gap = asyncio.run(asyncio.wait_for(a.admin().region_gap(promoted), 60))
        not_taken = sum(g["entries_not_taken"] for g in gap.values())
        if len(lost) > not_taken:
            # (each writer waits for each reply, so each lost write needs an entry of its own beyond the cut)
            reasons.append("%d acknowledged writes are missing in B but A had only %d entries beyond B's cut: "
                           "B skipped entries" % (len(lost), not_taken))
        lag_at_cut = sum(s["lag_entries_at_cut"] for s in report["shards"].values())
    finally:
        for c in (b, a):
            if c is not None and not keep:
                try:
                    c.down()
                except Exception:  # noqa: BLE001 - the other region is still stopped
                    pass
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    rep = Report(title="durakv verify region-loss", text=[
        "Region A (3 NATS servers, %d shard(s) x %d node(s), durability sync) and its follower region B "
        "(its own 3 NATS servers and JetStream domain, a leafnode link, each shard journal a mirror). %d writers "
        "write unique keys to A at up to %.0f writes/s; every process of A is power-cut at once; B is promoted "
        "at once; the acknowledged writes B lacks are the RPO at the cut." % (shards, 1 + replicas, writers, rate)])
    rep.tables.append(Table(
        "Region loss: acknowledged writes lost against the lag at the cut",
        ["Writes/s reached", "Acked before the cut", "Acked lost", "Lag at the cut (entries, promote)",
         "Lag sampled before the cut (entries)", "Lag sampled (ms)", "Entries A had beyond the cut",
         "Promote s", "A fenced on return", "Load avg (1 min)"],
        [[round(rate_reached), len(acked), len(lost), lag_at_cut, cut_sample[1], cut_sample[2], not_taken,
          round(promote_s, 2), "yes" if not reasons or "fence" not in " ".join(reasons) else "no",
          round(load_avg, 2)]],
        notes=["per shard: " + "; ".join("shard %s: cut at %d, A's last %d" % (n, g["cut_index"],
                                                                             g["old_region_last_index"])
                                         for n, g in sorted(gap.items()))]))
    rep.data.update({"promote_report": report, "gap": gap, "rate_target": rate, "rate_reached": rate_reached,
                     "acked": len(acked), "lost": len(lost), "load_avg_1m": load_avg,
                     "cores": os.cpu_count()})
    return Result(rep, FAILED if reasons else PASS, reasons)
