"""How long DUMP and RESTORE of a large hash keep a server from answering others: durakv and redis-server.

Starts a durakv server (the sources on PYTHONPATH, durability none) and, in the same run, the reference
(valkey-server where installed, else redis-server, no persistence), fills one hash with --fields fields on
each, then runs DUMP of it and RESTORE of the payload to another key while one client sends PING after PING.
Prints, per server and command: the command's time, the PINGs answered meanwhile and their p50 / p99 / max
round trip (the max is the longest event-loop stall the command caused), and durakv's ratio to the reference
for the command time and the max PING. Valkey and Redis run DUMP/RESTORE on their one thread, so a PING waits
for the whole command there; durakv encodes and decodes large values on a worker thread. A measurement, not a
test: run it on a quiet machine.

    PYTHONPATH=src python scripts/measure_offloop_stall.py [--fields 1000000] [--no-reference]
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


def percentile(sorted_values, q):
    if not sorted_values:
        return 0.0
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def timed_with_pings(port, args):
    """Runs args on its own client while another PINGs in a loop: (the command's reply, seconds it took,
    the sorted PING round trips in seconds)."""
    out = {}

    def run():
        c = valkey.Valkey(host="127.0.0.1", port=port, socket_timeout=300)
        t0 = time.perf_counter()
        out["reply"] = c.execute_command(*args)
        out["s"] = time.perf_counter() - t0

    worker = threading.Thread(target=run)
    pinger = valkey.Valkey(host="127.0.0.1", port=port, socket_timeout=300)
    pinger.ping()
    rtts = []
    worker.start()
    while worker.is_alive():
        t0 = time.perf_counter()
        pinger.ping()
        rtts.append(time.perf_counter() - t0)
    worker.join()
    return out["reply"], out["s"], sorted(rtts)


def start(argv, log_path):
    log = open(log_path, "wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    port = int(argv[argv.index("--port") + 1])
    c = valkey.Valkey(host="127.0.0.1", port=port, socket_timeout=300)
    deadline = time.monotonic() + 30
    while True:
        try:
            c.ping()
            return proc, c, port
        except valkey.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def measure(name, c, port, fields):
    p = c.pipeline(transaction=False)
    for first in range(0, fields, 2000):
        p.hset("h", mapping={"f%d" % i: "v%d" % i for i in range(first, min(first + 2000, fields))})
    p.execute()
    payload, dump_s, dump_rtts = timed_with_pings(port, ("DUMP", "h"))
    _reply, restore_s, restore_rtts = timed_with_pings(port, ("RESTORE", "h2", 0, payload))
    assert c.hlen("h2") == fields
    rows = {}
    for cmd, seconds, rtts in (("DUMP", dump_s, dump_rtts), ("RESTORE", restore_s, restore_rtts)):
        rows[cmd] = (seconds, rtts[-1] if rtts else seconds)
        print("%-14s %-8s %6.2f s  %6d PINGs  p50 %7.2f ms  p99 %8.2f ms  max %8.1f ms"
              % (name, cmd, seconds, len(rtts), percentile(rtts, 0.50) * 1e3, percentile(rtts, 0.99) * 1e3,
                 (rtts[-1] if rtts else 0) * 1e3))
    return len(payload), rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fields", type=int, default=1000000)
    ap.add_argument("--no-reference", action="store_true")
    opts = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="durakv-offloop-")
    procs = []
    try:
        port = free_port()
        proc, c, port = start([sys.executable, "-m", "durakv", "server", "--port", str(port), "--bind",
                               "127.0.0.1", "--dir", tmp, "--durability", "none"], os.path.join(tmp, "durakv.log"))
        procs.append(proc)
        size, ours = measure("durakv", c, port, opts.fields)
        print("(a %d-field hash, its DUMP payload %.1f MB)" % (opts.fields, size / 1e6))
        server = shutil.which("valkey-server") or shutil.which("redis-server")
        if opts.no_reference or server is None:
            return
        ref_dir = os.path.join(tmp, "ref")
        os.makedirs(ref_dir)
        port = free_port()
        proc, c, port = start([server, "--port", str(port), "--bind", "127.0.0.1", "--dir", ref_dir, "--save", "",
                               "--appendonly", "no"], os.path.join(tmp, "reference.log"))
        procs.append(proc)
        name = os.path.basename(server)
        _size, ref = measure(name, c, port, opts.fields)
        for cmd in ("DUMP", "RESTORE"):
            (s, worst), (rs, rworst) = ours[cmd], ref[cmd]
            print("%-8s durakv / %s: command time %.2fx, longest PING %.2fx" % (cmd, name, s / rs, worst / rworst))
    finally:
        for proc in procs:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
