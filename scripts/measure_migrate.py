"""Measures `durakv import` and `durakv migrate` (issue 20): keys/s of an import of a large RDB file, and a
migration under a paced write load (full-sync keys/s, time to the cut-over, lag at the cut-over, writes lost).

    python scripts/measure_migrate.py [--import-keys 1000000] [--migrate-keys 200000] [--rate 1000] [--cluster]

Every server is started here on 127.0.0.1 (Debian's redis-server as the source, `--enable-debug-command local`
for DEBUG POPULATE; durakv `--durability sync`, or with --cluster a 2-shard local cluster on JetStream) and
stopped by its pid at the end. A measurement, not a test."""

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

import valkey

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait(predicate, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except (OSError, valkey.exceptions.ConnectionError):
            pass
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {what}")


def durakv(*args, timeout_s=1800):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"))
    return subprocess.run([sys.executable, "-m", "durakv", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=timeout_s)


class Procs:
    def __init__(self):
        self.procs = []

    def start(self, cmd, **kw):
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, **kw)
        self.procs.append(p)
        return p

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


def redis_source(procs, work, keys):
    port = free_port()
    d = os.path.join(work, f"redis-{port}")
    os.makedirs(d)
    procs.start([shutil.which("redis-server"), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--dir", d, "--dbfilename", "dump.rdb", "--enable-debug-command", "local"])
    c = valkey.Valkey(port=port, socket_timeout=600)
    wait(c.ping, 10, "redis-server")
    c.execute_command("DEBUG", "POPULATE", keys, "key", 100)
    return port, c, d


def durakv_target(procs, work, cluster):
    if cluster:
        sys.path.insert(0, os.path.join(ROOT, "src"))
        from durakv.cluster.local import LocalCluster
        # a directory of its own each time: the import's cluster left its journal and NATS data in the last one
        lc = LocalCluster.up(tempfile.mkdtemp(prefix="cluster-", dir=work), shards=2, replicas=0, durability="sync",
                             timeout_s=120)
        return lc.primary(0).port, lc
    port = free_port()
    d = os.path.join(work, f"durakv-{port}")
    os.makedirs(d)
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"))
    procs.start([sys.executable, "-m", "durakv", "server", "--port", str(port), "--bind", "127.0.0.1", "--dir", d,
                 "--durability", "sync"], env=env)
    wait(lambda: valkey.Valkey(port=port).ping(), 30, "durakv")
    return port, None


def measure_import(work, keys, cluster):
    procs = Procs()
    lc = None
    try:
        port, src, d = redis_source(procs, work, keys)
        src.save()
        path = os.path.join(d, "dump.rdb")
        target, lc = durakv_target(procs, work, cluster)
        r = durakv("import", path, "--target", f"127.0.0.1:{target}", "--quiet")
        if r.returncode:
            raise RuntimeError(r.stderr)
        m = re.search(r"in ([\d.]+) s: ([\d,]+) keys/s", r.stdout)
        return {"keys": keys, "bytes": os.path.getsize(path), "seconds": float(m.group(1)),
                "keys_per_s": int(m.group(2).replace(",", "")), "line": r.stdout.strip()}
    finally:
        if lc is not None:
            lc.down()
        procs.stop()


def measure_migrate(work, keys, rate_per_s, cluster):
    procs = Procs()
    lc = None
    try:
        port, src, _d = redis_source(procs, work, keys)
        target, lc = durakv_target(procs, work, cluster)
        acked, stop = [], threading.Event()

        def writer():
            c = valkey.Valkey(port=port, socket_timeout=3)
            start = time.monotonic()
            i = 0
            while not stop.is_set() and time.monotonic() - start < 600:
                ahead = start + i / rate_per_s - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
                try:
                    c.set(f"live:{i}", i)
                except (valkey.exceptions.ConnectionError, valkey.exceptions.TimeoutError):
                    return
                acked.append((time.monotonic(), f"live:{i}", str(i).encode()))
                i += 1
        t = threading.Thread(target=writer, daemon=True)
        t.start()
        r = durakv("migrate", "--source", f"127.0.0.1:{port}", "--target", f"127.0.0.1:{target}", "--cutover",
                   "--verify", "--quiet")
        cut_s = time.monotonic()
        stop.set()
        if r.returncode:
            raise RuntimeError(r.stderr + r.stdout)
        if cluster:
            from valkey.cluster import ValkeyCluster
            dk = ValkeyCluster(host="127.0.0.1", port=target)
        else:
            dk = valkey.Valkey(port=target)
        before = [(k, v) for ts, k, v in acked if ts < cut_s]
        lost = sum(1 for k, v in before if dk.get(k) != v)
        full = re.search(r"full sync: ([\d,]+) keys .* in ([\d.]+) s \(([\d,]+) keys/s\)", r.stdout)
        cut = re.search(r"lag at the pause ([\d,]+) bytes \(([\d.]+) s\), every source offset acknowledged by the "
                        r"target after ([\d.]+) s \(([\d.]+) s since the start\)", r.stdout)
        fwd = re.search(r"forwarded ([\d,]+) write", r.stdout)
        return {"keys": keys, "full_sync_keys_per_s": full.group(3), "full_sync_s": full.group(2),
                "cutover_after_s": cut.group(4), "cutover_wait_s": cut.group(3), "lag_bytes": cut.group(1),
                "lag_s": cut.group(2),
                "forwarded": fwd.group(1), "acked_before_cutover": len(before), "lost": lost,
                "verify": "equal" if "verify: per-slot key counts equal" in r.stdout else "DIFFERENT"}
    finally:
        if lc is not None:
            lc.down()
        procs.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--import-keys", type=int, default=1_000_000)
    ap.add_argument("--migrate-keys", type=int, default=200_000)
    ap.add_argument("--rate", type=int, default=1000, help="writes/s on the source during the migration")
    ap.add_argument("--cluster", action="store_true", help="a 2-shard durakv cluster as the target")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="durakv-measure-migrate-")
    try:
        target = "2-shard cluster (JetStream, sync)" if args.cluster else "standalone durakv (local journal, sync)"
        imp = measure_import(work, args.import_keys, args.cluster)
        print(f"import: {imp['keys']:,} keys ({imp['bytes']:,} B RDB from redis-server DEBUG POPULATE) into {target}: "
              f"{imp['seconds']:.2f} s, {imp['keys_per_s']:,} keys/s")
        mig = measure_migrate(work, args.migrate_keys, args.rate, args.cluster)
        print(f"migrate: {mig['keys']:,} keys + SETs at {args.rate}/s from a standalone redis-server into {target}: "
              f"full sync {mig['full_sync_s']} s ({mig['full_sync_keys_per_s']} keys/s), cut-over after "
              f"{mig['cutover_after_s']} s (the last offsets acknowledged {mig['cutover_wait_s']} s after the pause), "
              f"lag at the cut-over {mig['lag_bytes']} bytes ({mig['lag_s']} s), {mig['forwarded']} writes forwarded "
              f"from the stream, "
              f"{mig['acked_before_cutover']:,} writes acknowledged by the source before the cut-over, "
              f"{mig['lost']} lost, verify {mig['verify']}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
