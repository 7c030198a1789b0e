"""How long DUMP and RESTORE of a large hash keep a durakv server from answering others.

Starts a server (the sources on PYTHONPATH, durability none), fills one hash with --fields fields, then runs
DUMP of it and RESTORE of the payload to another key while one client sends PING after PING; prints each
command's time and the longest PING round trip seen meanwhile (the longest event-loop stall it caused). Run
it with PYTHONPATH pointing at two trees to compare them. A measurement, not a test: run it on a quiet machine.

    PYTHONPATH=src python scripts/measure_offloop_stall.py [--fields 1000000]
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


def timed_with_pings(port, args):
    """Runs args on its own client while another PINGs in a loop: (the command's reply, seconds it took,
    longest PING round trip in seconds)."""
    out = {}

    def run():
        c = valkey.Valkey(host="127.0.0.1", port=port, socket_timeout=300)
        t0 = time.perf_counter()
        out["reply"] = c.execute_command(*args)
        out["s"] = time.perf_counter() - t0

    worker = threading.Thread(target=run)
    pinger = valkey.Valkey(host="127.0.0.1", port=port, socket_timeout=300)
    worst_s = 0.0
    worker.start()
    while worker.is_alive():
        t0 = time.perf_counter()
        pinger.ping()
        worst_s = max(worst_s, time.perf_counter() - t0)
    worker.join()
    return out["reply"], out["s"], worst_s


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fields", type=int, default=1000000)
    opts = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="durakv-offloop-")
    port = free_port()
    log = open(os.path.join(tmp, "server.log"), "wb")
    proc = subprocess.Popen([sys.executable, "-m", "durakv", "server", "--port", str(port), "--bind", "127.0.0.1",
                             "--dir", tmp, "--durability", "none"], stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        c = valkey.Valkey(host="127.0.0.1", port=port, socket_timeout=300)
        deadline = time.monotonic() + 30
        while True:
            try:
                c.ping()
                break
            except valkey.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        p = c.pipeline(transaction=False)
        for start in range(0, opts.fields, 2000):
            p.hset("h", mapping={"f%d" % i: "v%d" % i for i in range(start, min(start + 2000, opts.fields))})
        p.execute()
        payload, dump_s, dump_ping_s = timed_with_pings(port, ("DUMP", "h"))
        print("DUMP of a %d-field hash (%.1f MB): %.2f s, longest PING meanwhile %.0f ms"
              % (opts.fields, len(payload) / 1e6, dump_s, dump_ping_s * 1000))
        _reply, restore_s, restore_ping_s = timed_with_pings(port, ("RESTORE", "h2", 0, payload))
        print("RESTORE of it: %.2f s, longest PING meanwhile %.0f ms" % (restore_s, restore_ping_s * 1000))
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
