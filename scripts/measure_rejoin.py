"""Measures how fast a restarted shard member rejoins (issue 11 item 6): load N keys into a local 3-AZ cluster,
optionally let a replica store a snapshot, write more, kill -9 a replica, restart it, and time: its first reply,
the moment it serves reads (caught up), and the rate (keys/s) of the snapshot load and of the journal replay,
from its own log lines.

    python scripts/measure_rejoin.py --keys 100000 --after 20000 [--snapshot] [--value-bytes 100]
"""

import argparse
import os
import re
import signal
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))

import valkey  # noqa: E402

from durakv.cluster.local import LocalCluster  # noqa: E402


def load(port, first, count, value, batch=1000):
    with valkey.Valkey(port=port, socket_timeout=60) as c:
        for start in range(first, first + count, batch):
            p = c.pipeline(transaction=False)
            for i in range(start, min(start + batch, first + count)):
                p.set("key:%d" % i, value)
            p.execute()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--after", type=int, default=20_000, help="keys written after the snapshot")
    ap.add_argument("--snapshot", action="store_true", help="have a replica store a snapshot after --keys")
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--durability", default="sync")
    args = ap.parse_args()
    value = b"v" * args.value_bytes
    d = tempfile.mkdtemp(prefix="durakv-rejoin-")
    cluster = LocalCluster.up(d, durability=args.durability, timeout_s=90)
    try:
        primary = cluster.primary(0)
        t0 = time.monotonic()
        load(primary.port, 0, args.keys, value)
        print("loaded %d keys in %.1fs" % (args.keys, time.monotonic() - t0))
        victim = cluster.replicas(0)[0]
        if args.snapshot:
            with valkey.Valkey(port=victim.port, socket_timeout=300) as c:
                t0 = time.monotonic()
                c.execute_command("BGSAVE")
                print("replica snapshot stored in %.1fs" % (time.monotonic() - t0))
        load(primary.port, args.keys, args.after, value)
        total = args.keys + args.after
        with valkey.Valkey(port=primary.port, socket_timeout=60) as c:
            target = int(c.info("replication")["master_repl_offset"])
        cluster.kill(victim.name, signal.SIGKILL)
        time.sleep(0.5)
        log_size = os.path.getsize(victim.log)
        t0 = time.monotonic()
        cluster.restart(victim.name, wait=False)
        first_reply = serving = None
        deadline = t0 + 600
        while time.monotonic() < deadline and serving is None:
            try:
                with valkey.Valkey(port=victim.port, socket_timeout=5, socket_connect_timeout=0.2) as c:
                    try:
                        c.ping()
                    except valkey.exceptions.BusyLoadingError:
                        pass
                    if first_reply is None:
                        first_reply = time.monotonic() - t0
                    info = c.info("replication")
                    if int(info.get("slave_repl_offset", 0)) >= target and info.get("role") == "slave":
                        c.execute_command("READONLY")
                        if c.get("key:%d" % (total - 1)) == value:
                            serving = time.monotonic() - t0
            except (valkey.exceptions.ConnectionError, valkey.exceptions.TimeoutError,
                    valkey.exceptions.ResponseError):
                pass
            time.sleep(0.02)
        with open(victim.log, "rb") as f:
            f.seek(log_size)
            text = f.read().decode("utf-8", "replace")
        print("restarted replica: first reply after %s s, serving reads (caught up to %d) after %s s"
              % ("%.2f" % first_reply if first_reply else "-", target, "%.2f" % serving if serving else "-"))
        print("  %d keys: %.0f keys/s end to end" % (total, total / serving if serving else 0))
        for line in text.splitlines():
            if re.search(r"snapshot|following|ready", line):
                print("  log:", line.split(" I ", 1)[-1][:200])
    finally:
        cluster.down()


if __name__ == "__main__":
    main()
