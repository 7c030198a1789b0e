"""Resharding speed (issue 16 item 7): keys moved per second by online resharding on a local cluster.

Starts a 2-shard cluster (NATS az1..az3, JetStream journals), fills shard 0 with --keys keys of --value-size
bytes spread over --slots of its slots, marks those slots as migrating to shard 1 (what `durakv cluster
reshard` writes), and times the move from the mark until the topology names shard 1 the owner of every one
of them; then checks every key reads back from shard 1 with its value. Prints keys/s, slots/s and the time of
the first slot's hand-over (slots are handed over as they empty, not all at the end).

Then, in the same run, the reference: a redis-server cluster (valkey-server where installed) of 2 primaries with
the same number of replicas each, AOF on with `appendfsync always` (durakv's sync mode acknowledges a key only once
it is in the target's journal), the same keys filled the same way, moved by `redis-cli --cluster reshard
--cluster-pipeline 1000` (MIGRATE ... KEYS with 1000 keys a call, the tool Valkey and Redis users reshard with);
prints its keys/s and the ratio. `--no-reference` skips it.

    python scripts/measure_reshard.py [--keys 200000] [--value-size 100] [--slots 1000]
                                      [--durability sync] [--replicas 1] [--no-reference] [--json out.json]
"""

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))

import valkey  # noqa: E402

from durakv.cluster.local import LocalCluster  # noqa: E402
from durakv.cluster.reshard import mark_migrations  # noqa: E402
from durakv.cluster.store import NatsStore  # noqa: E402
from durakv.journal.jetstream import connect  # noqa: E402
from durakv.routing import key_slot  # noqa: E402


TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pid):
    """CPU seconds (user + system) the process has used, from /proc."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS
    except (OSError, IndexError, ValueError):
        return 0.0


def keys_for_slots(slots, per_slot):
    """per_slot key names hashing to each slot ({tag} picked per slot)."""
    wanted = set(slots)
    tags = {}
    i = 0
    while len(tags) < len(wanted):
        tag = b"t%d" % i
        s = key_slot(tag)
        if s in wanted and s not in tags:
            tags[s] = tag
        i += 1
    return {s: [b"{%s}k%d" % (tags[s], j) for j in range(per_slot)] for s in slots}


def fill(port, by_slot, value):
    with valkey.Valkey(port=port, socket_timeout=60) as c:
        keys = [k for ks in by_slot.values() for k in ks]
        for start in range(0, len(keys), 2000):
            chunk = keys[start:start + 2000]
            p = c.pipeline(transaction=False)
            for k in chunk:
                p.set(k, value)
            p.execute()
        return c.dbsize()


async def move(cluster, slots, src_name, dst_name, timeout_s):
    nc = await connect([u for u in cluster.nats_servers.split(",") if u])
    try:
        store = await NatsStore(nc).open()
        topology, _r = await store.get_topology()
        src = next(sh for sh in topology.shards if sh.name == src_name)
        dst = next(sh for sh in topology.shards if sh.name == dst_name)
        t0 = time.monotonic()
        await mark_migrations(store, [(slots, src.id, dst.id)])
        first = None
        wanted = set(slots)
        while True:
            topology, _r = await store.get_topology()
            owned = sum(1 for s in wanted if topology.shard_by_slot[s] is not None
                        and topology.shard_by_slot[s].id == dst.id)
            now = time.monotonic() - t0
            if owned and first is None:
                first = now
            if owned == len(wanted):
                return now, first
            if now > timeout_s:
                raise TimeoutError("%d of %d slots moved after %.0fs" % (owned, len(wanted), now))
            await asyncio.sleep(0.02)
    finally:
        await nc.close()


def _free_port():
    """A free port whose cluster bus port (+10000) is free too."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + 10000 > 65535:
            continue
        with socket.socket() as b:
            try:
                b.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port


def reference_reshard(server, by_slot, value, replicas, base_dir, timeout_s):
    """The same move on a redis-server/valkey-server cluster with redis-cli --cluster reshard: (keys, seconds)."""
    cli = shutil.which("valkey-cli") or shutil.which("redis-cli")
    procs, ports = [], []
    try:
        for _ in range(2 * (1 + replicas)):
            port = _free_port()
            d = os.path.join(base_dir, "ref-%d" % port)
            os.makedirs(d)
            procs.append(subprocess.Popen(
                [server, "--port", str(port), "--bind", "127.0.0.1", "--dir", d, "--cluster-enabled", "yes",
                 "--cluster-config-file", "nodes.conf", "--save", "", "--appendonly", "yes",
                 "--appendfsync", "always", "--cluster-node-timeout", "5000"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            ports.append(port)
        for port in ports:
            _wait(lambda: _ping(port), 20, "reference node %d" % port)
        # Two primaries (redis-cli --cluster create needs three): slots assigned and nodes met by hand.
        clients = [valkey.Valkey(port=p, socket_timeout=10, decode_responses=True) for p in ports]
        try:
            ids = [c.execute_command("CLUSTER", "MYID") for c in clients]
            clients[0].execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 8191)
            clients[1].execute_command("CLUSTER", "ADDSLOTSRANGE", 8192, 16383)
            for port in ports[1:]:
                clients[0].execute_command("CLUSTER", "MEET", "127.0.0.1", port)
            _wait(lambda: all(len(c.execute_command("CLUSTER", "NODES").splitlines()) == len(ports)
                              for c in clients), 30, "the reference nodes to meet")
            for i, c in enumerate(clients[2:]):
                c.execute_command("CLUSTER", "REPLICATE", ids[i % 2])
            _wait(lambda: all(_cluster_ok(p) for p in ports), 30, "the reference cluster")
            _wait(lambda: all(c.info("replication")["master_link_status"] == "up" for c in clients[2:]), 30,
                  "the reference replicas")
        finally:
            for c in clients:
                c.close()
        src_port, src_id, dst_port, dst_id = ports[0], ids[0], ports[1], ids[1]
        n = fill(src_port, by_slot, value)
        t0 = time.monotonic()
        subprocess.run([cli, "--cluster", "reshard", "127.0.0.1:%d" % src_port, "--cluster-from", src_id,
                        "--cluster-to", dst_id, "--cluster-slots", str(len(by_slot)), "--cluster-yes",
                        "--cluster-pipeline", "1000"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=timeout_s)
        seconds = time.monotonic() - t0
        with valkey.Valkey(port=dst_port) as c:
            moved = c.dbsize()
        if moved != n:
            raise RuntimeError("the reference moved %d of %d keys" % (moved, n))
        return n, seconds
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(10)


def _ping(port):
    try:
        with valkey.Valkey(port=port, socket_timeout=1) as c:
            return c.ping()
    except valkey.exceptions.ConnectionError:
        return False


def _cluster_ok(port):
    with valkey.Valkey(port=port, socket_timeout=2) as c:
        return c.execute_command("CLUSTER", "INFO").decode().find("cluster_state:ok") >= 0


def _wait(fn, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if fn():
            return
        time.sleep(0.05)
    raise TimeoutError("timed out waiting for " + what)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keys", type=int, default=200000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--slots", type=int, default=1000, help="slots moved (the keys are spread over them)")
    ap.add_argument("--durability", default="sync", choices=("sync", "async"))
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--dir", default=None, help="cluster directory (default: a temporary one, removed)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--no-reference", action="store_true", help="skip the redis-server/valkey-server cluster")
    args = ap.parse_args()
    d = args.dir or tempfile.mkdtemp(prefix="durakv-reshard-")
    cluster = LocalCluster.up(d, shards=2, replicas=args.replicas, durability=args.durability, timeout_s=90)
    try:
        src, dst = cluster.primary(0), cluster.primary(1)
        slots = list(range(0, args.slots))           # shard 0 owns 0..8191
        per_slot = max(1, args.keys // len(slots))
        by_slot = keys_for_slots(slots, per_slot)
        value = b"v" * args.value_size
        t = time.monotonic()
        n = fill(src.port, by_slot, value)
        print(f"filled {n} keys of {args.value_size} B over {len(slots)} slots in {time.monotonic() - t:.1f}s",
              flush=True)
        procs = [p for p in cluster.processes if p.pid]
        cpu0 = {p.name: cpu_s(p.pid) for p in procs}
        seconds, first = asyncio.run(move(cluster, slots, "0", "1", args.timeout))
        cpu = {p.name: round(cpu_s(p.pid) - cpu0[p.name], 2) for p in procs}
        with valkey.Valkey(port=dst.port, socket_timeout=60) as c:
            moved = c.dbsize()
            sample = [k for ks in list(by_slot.values())[:50] for k in ks[:20]]
            p = c.pipeline(transaction=False)
            for k in sample:
                p.execute_command("ASKING")   # harmless: the slots are the target's now
                p.get(k)
            bad = [k for k, v in zip(sample, p.execute()[1::2]) if v != value]
        with valkey.Valkey(port=src.port) as c:
            left = c.dbsize()
            info = c.info("cluster")
        result = {"keys": n, "value_bytes": args.value_size, "slots": len(slots), "durability": args.durability,
                  "replicas": args.replicas, "seconds": round(seconds, 3), "keys_per_s": round(n / seconds),
                  "slots_per_s": round(len(slots) / seconds, 1), "first_slot_handed_over_s": round(first, 3),
                  "target_keys": moved, "source_keys_left": left, "sample_mismatches": len(bad),
                  "batches": info.get("durakv_migration_batches"), "cpu_s": cpu}
        print(f"moved {n} keys ({len(slots)} slots, {args.durability}, {args.replicas} replica(s) per shard) in "
              f"{seconds:.2f}s: {n / seconds:,.0f} keys/s, {len(slots) / seconds:,.1f} slots/s; first slot handed "
              f"over after {first:.2f}s; target holds {moved}, source {left}, sample mismatches {len(bad)}")
        print("CPU seconds during the move: " + ", ".join(f"{k} {v}" for k, v in sorted(cpu.items())))
        server = shutil.which("valkey-server") or shutil.which("redis-server")
        if not args.no_reference and server:
            cluster.down()
            ref_n, ref_s = reference_reshard(server, by_slot, value, args.replicas, d, args.timeout)
            ratio = (n / seconds) / (ref_n / ref_s)
            result.update(reference=os.path.basename(server), reference_seconds=round(ref_s, 3),
                          reference_keys_per_s=round(ref_n / ref_s), ratio=round(ratio, 2))
            print(f"{os.path.basename(server)} cluster (appendfsync always, {args.replicas} replica(s) per primary), "
                  f"redis-cli --cluster reshard --cluster-pipeline 1000: {ref_n} keys in {ref_s:.2f}s, "
                  f"{ref_n / ref_s:,.0f} keys/s; durakv / reference = {ratio:.2f}x")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(result, f, indent=2)
        return 0 if moved == n and left == 0 and not bad else 1
    finally:
        cluster.down()
        if args.dir is None:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
