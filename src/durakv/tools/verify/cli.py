"""`durakv verify <scenario>`: the seed's verification scenarios, end to end, with a table at the end."""

import argparse
import json
import os
import signal
import sys

from ...cluster.manifest import ClusterError
from ...cluster.processes import ProcessError
from ...cluster.passwords import SecretsError, add_password_options, password_from
from . import scenarios as sc
from .report import write_report

SCENARIOS = ("acked-writes", "async-rpo", "switch", "failover", "linearizable", "dirty-reads", "bench",
             "backup-restore", "region-loss")
TARGET_OK = ("acked-writes", "linearizable", "bench")

EPILOG = """\
Where it runs: --dir DIR (a cluster from `durakv cluster up`), --target HOST:PORT (any RESP endpoint, cluster
or standalone; faults by --fault-cmd), or neither: a local cluster is started in a temp dir for the run.

examples:
  durakv verify acked-writes --fault az-power --runs 6        the seed's Test 1 (sync: 0 lost, every run)
  durakv verify acked-writes --fault kill --bulk              and a bulk load step: pipelined 4 KB, 2 MB values
  durakv verify async-rpo --runs 3                            Test 2: async loss against the durability lag
  durakv verify switch                                        Test 3: async -> sync -> async during writes
  durakv verify failover --runs 4                             Test 4: planned vs unplanned, median
  durakv verify linearizable --faults kill,pause,failover,partition
  durakv verify dirty-reads --fault partition                 no client sees a write a failover takes back
  durakv verify bench --rate 5000 --duration 30               the seed's two tables, none/async/sync
  durakv verify backup-restore --phase 5                      back up during writes, restore an instant between
  durakv verify region-loss --rate 5000                       power-cut region A, promote B: the RPO at the cut
  durakv verify acked-writes --target 10.0.0.5:6379 --tls --tls-ca ca.pem \\
      --fault-cmd "aws elasticache test-failover --replication-group-id g --node-group-id 0001"
"""


def _hostport(text):
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: expected HOST:PORT")
    return host, int(port)


def _csv(text):
    return [x for x in text.split(",") if x]


def build_parser():
    p = argparse.ArgumentParser(prog="durakv verify", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
                                description="Verification scenarios with faults injected mid-stream: a real workload "
                                            "through a cluster client, the fault, the heal, the read-back, a table.")
    sub = p.add_subparsers(dest="scenario", required=True)

    def common(sp, name):
        g = sp.add_argument_group("where")
        g.add_argument("--dir", help="a local cluster started by `durakv cluster up`")
        if name in TARGET_OK:
            g.add_argument("--target", type=_hostport, metavar="HOST:PORT", help="any RESP endpoint")
            g.add_argument("--tls", action="store_true", help="--target over TLS")
            g.add_argument("--tls-ca", help="CA file to verify --target's certificate")
            add_password_options(g, who="--target's")
        g.add_argument("--fault-cmd", help="inject the fault by running this shell command (its start and exit "
                                           "are the fault window) instead of `durakv chaos`")
        o = sp.add_argument_group("a cluster started for the run (no --dir, no --target)")
        o.add_argument("--no-tls", action="store_true", help="plain TCP (default: TLS, as the seed's cluster)")
        o.add_argument("--shards", type=int, default=1)
        o.add_argument("--server-arg", action="append", default=[], metavar="ARG",
                       help="extra argument for every durakv node (repeat it)")
        o.add_argument("--keep", action="store_true",
                       help="leave that cluster running and keep its directory (default: it is stopped and its "
                            "directory removed at the end, also when the run fails or is interrupted)")
        o.add_argument("--workdir", default=None, help="where its temp dir goes (default: the system's)")
        out = sp.add_argument_group("output")
        out.add_argument("--json", metavar="FILE", help="write the result as JSON")
        out.add_argument("--report", metavar="DIR", help="write report.md, report.json, report.txt and PNG plots")
        out.add_argument("-q", "--quiet", action="store_true", help="only the tables")
        return sp

    aw = common(sub.add_parser("acked-writes", help="Test 1: every acknowledged write survives the fault"),
                "acked-writes")
    rp = common(sub.add_parser("async-rpo", help="Test 2: async's loss against the durability lag"), "async-rpo")
    for sp, fault in ((aw, "az-power"), (rp, "az-power")):
        sp.add_argument("--fault", choices=sc.FAULT_DEFAULT_S, default=fault)
        sp.add_argument("--runs", type=int, default=1 if sp is aw else 3)
        sp.add_argument("--writers", type=int, default=4, help="concurrent writers (default 4)")
        sp.add_argument("--warmup", type=float, default=5.0, help="seconds of writes before the fault")
        sp.add_argument("--fault-duration", type=float, default=None,
                        help="seconds the fault lasts (az-power 30, kill: restart after 10, pause 5, partition 20)")
        sp.add_argument("--after", type=float, default=10.0, help="seconds of writes after the heal")
        sp.add_argument("--value-bytes", type=int, default=0, help="padding added to each value")
    bk = aw.add_argument_group("bulk load step (before the fault, next to the writers)")
    bk.add_argument("--bulk", action="store_true", help="pipelined batches and large values from several clients")
    bk.add_argument("--bulk-clients", type=int, default=2)
    bk.add_argument("--bulk-batches", type=int, default=3, help="pipelined batches per client (default 3)")
    bk.add_argument("--bulk-batch", type=int, default=1000, help="SETs per pipelined batch (default 1000)")
    bk.add_argument("--bulk-value-bytes", type=int, default=4096, help="value size in a batch (default 4096)")
    bk.add_argument("--bulk-large", type=int, default=2, help="large values per client (default 2)")
    bk.add_argument("--bulk-large-bytes", type=int, default=2 << 20, help="large value size (default 2 MiB)")
    sw = common(sub.add_parser("switch", help="Test 3: CONFIG SET durability sync (and back) during writes"),
                "switch")
    sw.add_argument("--to", choices=("sync", "async"), default="sync")
    sw.add_argument("--no-back", action="store_true", help="do not switch back afterwards")
    sw.add_argument("--writers", type=int, default=4)
    sw.add_argument("--warmup", type=float, default=5.0)
    sw.add_argument("--hold", type=float, default=5.0, help="seconds between the switch and the switch back")
    sw.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for every node to report it")
    fo = common(sub.add_parser("failover", help="Test 4: planned vs unplanned failover, N runs each"), "failover")
    fo.add_argument("--runs", type=int, default=3)
    fo.add_argument("--kinds", type=_csv, default=["planned", "unplanned"])
    fo.add_argument("--planned", dest="kinds", action="store_const", const=["planned"],
                    help="planned failovers only (same as --kinds planned)")
    fo.add_argument("--unplanned", choices=("kill", "az-power", "az-power-stream-leader"), default="kill",
                    help="the unplanned fault: kill -9 of the primary (default), the power cut of its AZ, or of "
                         "the AZ of the journal stream's NATS leader")
    fo.add_argument("--restart-after", type=float, default=5.0, help="seconds before the failed node restarts")
    fo.add_argument("--writers", type=int, default=4)
    fo.add_argument("--warmup", type=float, default=3.0)
    li = common(sub.add_parser("linearizable", help="reads, writes, CAS under faults; checked for linearizability"),
                "linearizable")
    li.add_argument("--faults", type=_csv, default=["kill", "pause", "failover"],
                    help="comma-separated, run one after the other: kill,pause,failover,partition")
    li.add_argument("--clients", type=int, default=5)
    li.add_argument("--keys", type=int, default=4)
    li.add_argument("--rate", type=float, default=50.0, help="operations per second per client")
    li.add_argument("--warmup", type=float, default=3.0)
    li.add_argument("--gap", type=float, default=3.0, help="seconds between faults")
    li.add_argument("--time-limit", type=float, default=60.0, help="seconds the checker may search")
    li.add_argument("--op-timeout", type=float, default=1.0, help="client timeout per operation (then: info)")
    li.add_argument("--history", metavar="FILE", help="save the recorded history (JSON lines)")
    dr = common(sub.add_parser("dirty-reads", help="readers (GET, XREAD BLOCK, keyspace notifications, SYNC) "
                                                   "must never see a write that is unacknowledged and then lost"),
                "dirty-reads")
    dr.add_argument("--fault", choices=sc.DIRTY_FAULTS, default="partition",
                    help="what stalls the primary's commits: partition (its AZ cut off, default: the reliable "
                         "one), pause-nats (SIGSTOP of its AZ's NATS node: it stalls the primary only where its "
                         "NATS connections are, picked at random, until they move), kill or pause (of the primary)")
    dr.add_argument("--fault-duration", type=float, default=15.0,
                    help="seconds the fault lasts (default 15: NATS may first need 4-9 s to elect leaders in the "
                         "majority, then a replica watches a whole lease before it takes over)")
    dr.add_argument("--heal-after-failover", type=float, default=None, metavar="S",
                    help="partition: heal S seconds after another node serves as the shard's primary "
                         "(--fault-duration is then the longest cut)")
    dr.add_argument("--runs", type=int, default=1)
    dr.add_argument("--writers", type=int, default=4)
    dr.add_argument("--rate", type=float, default=50.0, help="writes per second per writer")
    dr.add_argument("--warmup", type=float, default=3.0)
    dr.add_argument("--after", type=float, default=3.0, help="seconds of writes after the heal")
    be = common(sub.add_parser("bench", help="the seed's tables: write and read latency per durability mode"),
                "bench")
    be.add_argument("--modes", type=_csv, default=["none", "async", "sync"])
    be.add_argument("--rate", type=float, default=5000.0, help="ops/s over all connections (default 5000)")
    be.add_argument("--clients", type=int, default=50)
    be.add_argument("--duration", type=float, default=30.0)
    be.add_argument("--key-maximum", type=int, default=100_000)
    be.add_argument("--data-size", type=int, default=256)
    be.add_argument("--repeat", type=int, default=1, help="runs per mode (the tables show the median)")
    br = common(sub.add_parser("backup-restore", help="write, back up, write more, back up, restore an instant "
                                                      "between: exactly the writes acknowledged by then"),
                "backup-restore")
    br.add_argument("--writers", type=int, default=4)
    br.add_argument("--phase", type=float, default=5.0, help="seconds of writes before, between and after")
    br.add_argument("--to", default=None, help="where the backups go (default: a temp dir, removed after)")
    rl = sub.add_parser("region-loss", help="two regions on this machine: power-cut every process of region A "
                                            "under writes, promote B, count the acknowledged writes lost against "
                                            "the lag at the cut; A's old primaries must be fenced when back")
    rl.add_argument("--shards", type=int, default=1)
    rl.add_argument("--replicas", type=int, default=1, help="replicas per shard in each region (default 1)")
    rl.add_argument("--writers", type=int, default=8)
    rl.add_argument("--rate", type=float, default=5000.0, help="writes/s over all writers (default 5000)")
    rl.add_argument("--warmup", type=float, default=10.0, help="seconds of writes before the power cut")
    rl.add_argument("--timeout", type=float, default=180.0, help="seconds each region may take to start")
    rl.add_argument("--keep", action="store_true", help="leave both regions' processes and directories")
    rl.add_argument("--workdir", default=None, help="where the regions' temp dir goes (default: the system's)")
    rl.add_argument("--json", metavar="FILE", help="write the result as JSON")
    rl.add_argument("--report", metavar="DIR", help="write report.md, report.json, report.txt")
    rl.add_argument("-q", "--quiet", action="store_true", help="only the tables")
    for scenario in sub.choices.values():
        scenario.add_argument("--results", metavar="DIR", help="also write <scenario>-<date>.md and .json to DIR "
                              "(docs/results) with the command, commit, date and the machine's load")
    return p


def _say(args):
    if args.quiet:
        return lambda msg: None
    return lambda msg: print(msg, flush=True)


def _env(args, durability="sync", partitionable=False):
    say = _say(args)
    target = getattr(args, "target", None)
    if target and args.dir:
        raise ClusterError("give --dir or --target, not both")
    if target:
        return sc.Env.endpoint(target[0], target[1], tls=args.tls, tls_ca=args.tls_ca, fault_cmd=args.fault_cmd,
                               password=password_from(args), say=say)
    if args.dir:
        return sc.Env.local(args.dir, fault_cmd=args.fault_cmd, say=say)
    env = sc.Env.start_own(durability=durability, tls=not args.no_tls, partitionable=partitionable,
                           shards=args.shards, server_args=args.server_arg, say=say, keep=args.keep,
                           parent=args.workdir)
    env.fault_cmd = args.fault_cmd
    return env


def _needs_fault(args, env):
    if env.cluster is None and not env.fault_cmd:
        raise ClusterError(f"{args.scenario} against --target needs --fault-cmd (the fault to inject)")


def run(args) -> sc.Result:
    s = args.scenario
    if s in ("acked-writes", "async-rpo"):
        rpo = s == "async-rpo"
        env = _env(args, "async" if rpo else "sync", partitionable=args.fault == "partition")
        with env:
            _needs_fault(args, env)
            restore = _ensure_mode(env, "async") if rpo else None
            try:
                bulk = None
                if getattr(args, "bulk", False):
                    bulk = {"clients": args.bulk_clients, "batches": args.bulk_batches, "batch": args.bulk_batch,
                            "value_bytes": args.bulk_value_bytes, "large": args.bulk_large,
                            "large_bytes": args.bulk_large_bytes}
                return sc.acked_writes(env, fault=args.fault, runs=args.runs, writers=args.writers,
                                       warmup_s=args.warmup, fault_s=args.fault_duration, after_s=args.after,
                                       value_bytes=args.value_bytes, rpo=rpo, bulk=bulk)
            finally:
                if restore:
                    restore()
    if s == "switch":
        start = "async" if args.to == "sync" else "sync"
        with _env(args, start) as env:
            restore = _ensure_mode(env, start)
            try:
                return sc.switch(env, to=args.to, back=not args.no_back, writers=args.writers,
                                 warmup_s=args.warmup, hold_s=args.hold, effective_timeout_s=args.timeout)
            finally:
                if restore:
                    restore()
    if s == "failover":
        with _env(args, "sync") as env:
            if env.cluster is None:
                raise ClusterError("failover needs a local cluster (--dir, or none to start one)")
            return sc.failover(env, runs=args.runs, kinds=args.kinds, unplanned=args.unplanned,
                               writers=args.writers, warmup_s=args.warmup, restart_after_s=args.restart_after)
    if s == "linearizable":
        with _env(args, "sync", partitionable="partition" in args.faults) as env:
            _needs_fault(args, env)
            result = sc.linearizable(env, faults=args.faults if not env.fault_cmd else ["fault-cmd"],
                                     clients=args.clients, keys=args.keys, rate_per_client=args.rate,
                                     warmup_s=args.warmup, gap_s=args.gap, time_limit_s=args.time_limit,
                                     timeout_s=args.op_timeout)
            if args.history:
                result.history.save_jsonl(args.history)
            return result
    if s == "dirty-reads":
        with _env(args, "sync", partitionable=args.fault == "partition") as env:
            if env.cluster is None and not env.fault_cmd:
                raise ClusterError("dirty-reads needs a local cluster (--dir, or none to start one) or --fault-cmd")
            return sc.dirty_reads(env, fault=args.fault, runs=args.runs, writers=args.writers,
                                  rate_per_writer=args.rate, warmup_s=args.warmup, fault_s=args.fault_duration,
                                  after_s=args.after, heal_after_failover_s=args.heal_after_failover)
    if s == "bench":
        return _bench(args)
    if s == "region-loss":
        from .regions import region_loss
        return region_loss(shards=args.shards, replicas=args.replicas, writers=args.writers, rate=args.rate,
                           warmup_s=args.warmup, parent=args.workdir, keep=args.keep, say=_say(args),
                           timeout_s=args.timeout)
    if s == "backup-restore":
        from .backups import backup_restore
        with _env(args, "sync") as env:
            return backup_restore(env, writers=args.writers, phase_s=args.phase, dest=args.to)
    raise ValueError(s)


def _ensure_mode(env, mode):
    """Switches the primaries of a cluster given with --dir to `mode` for the run; returns how to switch back."""
    if env.own_dir or env.cluster is None:
        return None
    current = sc._effective_modes(env)
    if set(current) == {mode}:
        return None
    env.say(f"switching the primaries to durability {mode} for the run (they report {', '.join(current)})")
    env.config_set_primaries("durability", mode)
    back = current[0]
    return lambda: env.config_set_primaries("durability", back) if back in ("sync", "async") else None


def _bench(args):
    say = _say(args)
    kw = dict(rate=args.rate, clients=args.clients, duration_s=args.duration, key_maximum=args.key_maximum,
              data_size=args.data_size, repeat=args.repeat, say=say)

    def switch_to(mode):
        return lambda env: env.config_set_primaries("durability", mode)
    if getattr(args, "target", None) or args.dir:
        env = _env(args)
        current = sc._effective_modes(env)
        modes = []
        if not current or not set(current) <= {"none", "async", "sync"}:
            # Not durakv (Valkey, Redis, a managed service): no mode to switch, one run as it is.
            say("the target reports no durakv durability mode: one run, labelled `target`")
            return sc.bench([(lambda: env, [("target", None)])], **kw)
        for mode in args.modes:
            if mode in ("async", "sync") and "none" not in current:
                modes.append((mode, switch_to(mode)))
            elif mode == "none" and set(current) == {"none"}:
                modes.append((mode, None))
            else:
                say(f"skipping {mode}: the target runs {', '.join(current)} and cannot switch to it live")
        if not modes:
            modes = [(current[0], None)]

        def restore():
            if current and current[0] in ("sync", "async") and "none" not in current:
                env.config_set_primaries("durability", current[0])
        try:
            return sc.bench([(lambda: env, modes)], **kw)
        finally:
            restore()
    groups = []
    if "none" in args.modes:
        groups.append((lambda: sc.Env.start_standalone("none", tls=not args.no_tls, server_args=args.server_arg,
                                                      say=say, parent=args.workdir, keep=args.keep),
                       [("none", None)]))
    durable = [m for m in args.modes if m in ("async", "sync")]
    if durable:
        groups.append((lambda: _env(args, durable[0]), [(m, switch_to(m)) for m in durable]))
    return sc.bench(groups, **kw)


def _terminate_on_sigterm():
    """SIGTERM unwinds like Ctrl-C (SystemExit through the `with env` blocks), so what the run started is
    stopped and its data removed; by default it would end the process on the spot and leave both."""
    def handler(signum, frame):
        raise SystemExit(128 + signum)
    try:
        signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        pass


def main(argv) -> int:
    args = build_parser().parse_args(argv)
    from ..bench.results import machine_load, write_results
    load_before = machine_load()
    _terminate_on_sigterm()
    try:
        result = run(args)
    except (ClusterError, ProcessError, SecretsError, TimeoutError, RuntimeError, KeyError, OSError) as exc:
        print(f"durakv verify {args.scenario}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\ndurakv verify {args.scenario}: interrupted ("
              + ("--keep: its own cluster is left with its data" if getattr(args, "keep", False)
                 else "what it started was stopped and its data removed") + ")", file=sys.stderr)
        return 130
    print()
    print(result.report.to_text())
    word = {sc.PASS: "ok", sc.FAILED: "FAIL", sc.UNKNOWN: "unknown"}[result.status]
    print(f"verify {args.scenario}: {word}" + ("" if not result.reasons else ""))
    for r in result.reasons:
        print("  " + r.replace("\n", "\n  "))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result.to_dict(), f, indent=2, default=str)
    if args.report:
        paths = write_report(args.report, result.report)
        if not args.quiet:
            print(f"report: {os.path.join(args.report, 'report.md')} ({len(paths)} files)")
    if args.results:
        path = write_results(args.results, args.scenario, result.to_dict(), result.report.to_text(), load_before,
                             argv=argv, tool="durakv verify", title=f"durakv verify {args.scenario}")
        print(f"results: {path}")
    return {sc.PASS: 0, sc.FAILED: 1, sc.UNKNOWN: 2}[result.status]
