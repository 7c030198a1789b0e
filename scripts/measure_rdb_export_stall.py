"""How long `redis-cli --rdb` of a large dataset keeps a durakv server from answering others.

Starts a server (the sources on PYTHONPATH), fills it with DEBUG POPULATE, then runs `redis-cli --rdb` while
one client sends PING after PING; prints the transfer time and the longest PING round trip seen meanwhile
(the longest event-loop stall the export caused). A measurement, not a test: run it on a quiet machine.

    PYTHONPATH=src python scripts/measure_rdb_export_stall.py [--keys 1000000]
"""

import argparse
import os
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--durability", default="sync")
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        log = open(os.path.join(tmp, "server.log"), "wb")
        proc = subprocess.Popen([sys.executable, "-m", "durakv", "server", "--port", str(port), "--bind",
                                 "127.0.0.1", "--dir", tmp, "--durability", opts.durability],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
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
            c.execute_command("DEBUG", "POPULATE", str(opts.keys))
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
            t0 = time.perf_counter()
            r = subprocess.run(["redis-cli", "-p", str(port), "--rdb", os.path.join(tmp, "dump.rdb")],
                               capture_output=True, text=True)
            transfer_s = time.perf_counter() - t0
            time.sleep(0.2)
            stop.set()
            t.join()
            size = os.path.getsize(os.path.join(tmp, "dump.rdb")) if r.returncode == 0 else 0
            print("keys=%d rdb_bytes=%d transfer_s=%.2f longest_ping_ms=%.1f redis-cli=%s" % (
                opts.keys, size, transfer_s, worst[0] * 1000, "ok" if r.returncode == 0 else r.stderr.strip()))
        finally:
            os.kill(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
            log.close()


if __name__ == "__main__":
    main()
