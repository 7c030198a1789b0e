"""How long `redis-cli --rdb` of a large dataset keeps a durakv server from answering others.

Starts a server (the sources on PYTHONPATH), fills it with DEBUG POPULATE, then runs `redis-cli --rdb` while
one client sends PING after PING; prints the transfer time and the longest PING round trip seen meanwhile
(the longest event-loop stall the export caused), then the same against redis-server (or valkey-server) in the
same run, and the ratios. A measurement, not a test: run it on a quiet machine.

    PYTHONPATH=src python scripts/measure_rdb_export_stall.py [--keys 1000000]
"""

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import valkey


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(name, argv, keys, tmp):
    """Starts a server (argv, given the port), fills it with DEBUG POPULATE keys, runs `redis-cli --rdb` while
    a client sends PING after PING; prints the transfer time and the longest PING round trip meanwhile."""
    port = free_port()
    log = open(os.path.join(tmp, "%s.log" % name), "wb")
    proc = subprocess.Popen(argv(port), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        c = valkey.Valkey(host="127.0.0.1", port=port, socket_timeout=120)
        deadline = time.monotonic() + 30
        while True:
            try:
                c.ping()
                break
            except valkey.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        c.execute_command("DEBUG", "POPULATE", str(keys))
        stop = threading.Event()
        worst = [0.0]

        def pinger():
            p = valkey.Valkey(host="127.0.0.1", port=port, socket_timeout=120)
            while not stop.is_set():
                t0 = time.perf_counter()
                p.ping()
                worst[0] = max(worst[0], time.perf_counter() - t0)
        t = threading.Thread(target=pinger)
        t.start()
        time.sleep(0.5)
        rdb = os.path.join(tmp, "%s.rdb" % name)
        t0 = time.perf_counter()
        r = subprocess.run(["redis-cli", "-p", str(port), "--rdb", rdb], capture_output=True, text=True)
        transfer_s = time.perf_counter() - t0
        time.sleep(0.2)
        stop.set()
        t.join()
        size = os.path.getsize(rdb) if r.returncode == 0 else 0
        print("%-13s keys=%d rdb_bytes=%d transfer_s=%.2f longest_ping_ms=%.1f redis-cli=%s" % (
            name, keys, size, transfer_s, worst[0] * 1000, "ok" if r.returncode == 0 else r.stderr.strip()))
        return transfer_s, worst[0]
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        log.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--durability", default="sync")
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ours = measure("durakv", lambda port: [sys.executable, "-m", "durakv", "server", "--port", str(port),
                                               "--bind", "127.0.0.1", "--dir", tmp, "--durability",
                                               opts.durability, "--enable-debug-command", "yes"], opts.keys, tmp)
        redis = shutil.which("valkey-server") or shutil.which("redis-server")
        if redis:
            theirs = measure(os.path.basename(redis), lambda port: [
                redis, "--port", str(port), "--bind", "127.0.0.1", "--dir", tmp, "--save", "", "--appendonly",
                "no", "--enable-debug-command", "yes"], opts.keys, tmp)
            print("durakv / %s: transfer %.2fx, longest PING %.2fx" % (
                os.path.basename(redis), ours[0] / theirs[0], ours[1] / max(theirs[1], 1e-9)))


if __name__ == "__main__":
    main()
