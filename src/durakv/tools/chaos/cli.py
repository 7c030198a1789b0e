"""`durakv chaos DIR <fault> ...`: inject one fault into a local cluster, heal it, log every step."""

import argparse
import json
import sys

from ...cluster.local import LocalCluster
from ...cluster.manifest import ClusterError
from ...cluster.processes import ProcessError
from .faults import FaultError, Nemesis, wait_healthy

EPILOG = """\
examples:
  durakv chaos /tmp/dk az-power --az primary --duration 30   power cut of the primary's AZ (durakv and NATS)
  durakv chaos /tmp/dk kill --node 0-0 --restart-after 5
  durakv chaos /tmp/dk pause --node primary --duration 5       SIGSTOP past the lease, then SIGCONT
  durakv chaos /tmp/dk partition --az az1 --duration 20        needs `cluster up --partitionable`
  durakv chaos /tmp/dk failover --shard 0                      planned
  durakv chaos /tmp/dk heal                                    undo whatever a fault left behind

Names: a process of the manifest (0-0, nats-az2), or primary / replica / stream-leader of --shard; an AZ may be
primary or stream-leader. Events are printed and appended to DIR/chaos/events.jsonl.
"""


def build_parser():
    p = argparse.ArgumentParser(prog="durakv chaos", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
                                description="Faults on a local cluster (durakv cluster up), each with an automatic heal.")
    p.add_argument("dir", help="the cluster directory (its manifest.json)")
    sub = p.add_subparsers(dest="fault", required=True)

    def common(sp):
        sp.add_argument("--shard", type=int, default=0, help="the shard `primary` and the like refer to")
        sp.add_argument("--json", action="store_true", help="print the result as JSON at the end")
        sp.add_argument("--healthy-timeout", type=float, default=0.0,
                        help="after the heal, wait up to this many seconds for the whole cluster to be healthy")
        return sp

    az = common(sub.add_parser("az-power", help="SIGKILL every process of an AZ, keep it down, restart it"))
    az.add_argument("--az", required=True)
    az.add_argument("--duration", type=float, default=30.0, help="seconds the AZ stays down (default 30)")
    kl = common(sub.add_parser("kill", help="SIGKILL one process (and restart it after --restart-after)"))
    kl.add_argument("--node", required=True)
    kl.add_argument("--restart-after", type=float, default=None, metavar="S")
    pa = common(sub.add_parser("pause", help="SIGSTOP one process, SIGCONT after --duration"))
    pa.add_argument("--node", required=True)
    pa.add_argument("--duration", type=float, default=5.0)
    pt = common(sub.add_parser("partition", help="cut an AZ off the others both ways, heal after --duration"))
    pt.add_argument("--az", required=True)
    pt.add_argument("--duration", type=float, default=20.0)
    pt.add_argument("--heal-after-failover", type=float, default=None, metavar="S",
                    help="heal S seconds after another node of --shard serves as its primary (--duration is then "
                         "the longest cut)")
    fo = common(sub.add_parser("failover", help="planned failover of a shard"))
    fo.add_argument("--to", default=None, help="the replica to promote (default: the most caught-up)")
    fo.add_argument("--timeout", type=float, default=30.0)
    common(sub.add_parser("heal", help="heal the network, SIGCONT paused processes, start stopped ones"))
    return p


def run(args, out=sys.stdout) -> dict:
    cluster = LocalCluster.load(args.dir)
    nem = Nemesis(cluster, out=out)
    if args.fault == "az-power":
        result = nem.az_power(args.az, args.duration, shard=args.shard)
    elif args.fault == "kill":
        result = nem.kill(args.node, args.restart_after, shard=args.shard)
    elif args.fault == "pause":
        result = nem.pause(args.node, args.duration, shard=args.shard)
    elif args.fault == "partition":
        if args.heal_after_failover is not None and not 0 <= args.heal_after_failover <= args.duration:
            raise FaultError("--heal-after-failover must be between 0 and --duration")
        result = nem.partition(args.az, args.duration, shard=args.shard, heal_after_failover_s=args.heal_after_failover)
    elif args.fault == "failover":
        result = nem.failover(args.shard, to=args.to, timeout_s=args.timeout)
    else:
        result = nem.heal()
    if args.healthy_timeout:
        result["healthy_s"] = round(wait_healthy(cluster, args.healthy_timeout), 3)
    return result


def main(argv) -> int:
    args = build_parser().parse_args(argv)
    try:
        result = run(args)
    except (FaultError, ClusterError, ProcessError, KeyError, TimeoutError) as exc:
        print(f"durakv chaos {args.fault}: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result, indent=2, default=str))
    return 0
