"""User-space instructions a server executes per request, counted by valgrind's callgrind: a measure of the
per-request work that, unlike ops/s on a shared machine, does not move with the load of other processes (the
same binary, input and environment give the same count). Kernel time (the read, write and epoll syscalls, the
same for every server) is not counted.

Starts each target under `valgrind --tool=callgrind` on 127.0.0.1 (durakv from the sources on PYTHONPATH, with
--durability MODE; redis-server with no persistence, or `appendonly yes appendfsync always` for redis-aof),
warms it up, then for each workload zeroes the counters, runs redis-benchmark (one connection, -d 256,
-r 100000, -n REQUESTS, pipeline 1 or 16) and reads the count. Prints instructions per request and, for durakv,
the ratio to redis-server's. Slow (valgrind runs the server ~50x slower); a measurement, not a test.

    PYTHONPATH=src python scripts/count_instructions.py [--targets redis,none,sync] [--requests 16000] \
        [--results docs/results]

durakv runs with a stand-in `hnswlib` module that refuses to import: hnswlib's wheel is built for CPU
instructions valgrind does not emulate (it dies with SIGILL while the search module loads), and no workload
here builds an HNSW index.
"""

import argparse
import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
from durakv.tools.bench import results as bench_results  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ping(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def total_instructions(path):
    """The summary line of a callgrind dump: 'summary: N' (Ir, the only event recorded)."""
    with open(path) as f:
        for line in f:
            if line.startswith("summary:") or line.startswith("totals:"):
                return int(line.split()[1])
    raise RuntimeError("no totals in %s" % path)


_NO_HNSWLIB = 'raise ImportError("hnswlib is kept out of servers run under valgrind")\n'


def _durakv_env(work):
    """The server's environment: the sources first (PYTHONPATH as given), behind a stand-in hnswlib."""
    shim = os.path.join(work, "shim", "hnswlib")
    os.makedirs(shim, exist_ok=True)
    with open(os.path.join(shim, "__init__.py"), "w") as f:
        f.write(_NO_HNSWLIB)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.dirname(shim), env.get("PYTHONPATH")) if p)
    return env


def measure(target, requests, workloads, work):
    port = free_port()
    out = os.path.join(work, target + ".cg")
    data = os.path.join(work, target + "-data")
    os.makedirs(data, exist_ok=True)
    if target.startswith("redis"):
        cmd = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", data]
        cmd += ["--appendonly", "yes", "--appendfsync", "always"] if target == "redis-aof" else ["--appendonly", "no"]
    else:
        cmd = [sys.executable, "-m", "durakv", "server", "--port", str(port), "--bind", "127.0.0.1",
               "--durability", target, "--dir", data]
    env = None if target.startswith("redis") else _durakv_env(work)
    proc = subprocess.Popen(["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out] + cmd,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=env)
    results = {}
    try:
        # (a server under valgrind on a busy machine takes minutes to import and open its journal)
        deadline = time.monotonic() + 400
        while not ping(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("%s did not start under valgrind (%s)" % (
                    target, "exit status %s" % proc.returncode if proc.returncode is not None else "timed out"))
            time.sleep(0.5)
        bench = ["redis-benchmark", "-p", str(port), "-c", "1", "-d", "256", "-r", "100000", "-q"]
        subprocess.run(bench + ["-n", "3000", "-t", "set,get"], capture_output=True, check=True)
        for test, pipeline in workloads:
            subprocess.run(["callgrind_control", "-z", str(proc.pid)], capture_output=True, check=True)
            subprocess.run(bench + ["-n", str(requests), "-P", str(pipeline), "-t", test], capture_output=True,
                           check=True)
            before = set(glob.glob(out + ".*"))
            subprocess.run(["callgrind_control", "-d", str(proc.pid)], capture_output=True, check=True)
            dumps = sorted(set(glob.glob(out + ".*")) - before, key=os.path.getmtime)
            # every thread dumps its own part (--separate-threads is off: one file per dump)
            results[(test, pipeline)] = total_instructions(dumps[-1]) / requests
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--targets", default="redis,none,sync",
                    help="comma-separated: redis, redis-aof, none, async, sync (durakv's durability modes)")
    ap.add_argument("--requests", type=int, default=16000)
    ap.add_argument("--results", default="", help="write instructions-<date>.md/.json into this directory")
    args = ap.parse_args()
    load_before = bench_results.machine_load()
    for tool in ("valgrind", "callgrind_control", "redis-benchmark"):
        if shutil.which(tool) is None:
            sys.exit("needs %s on PATH" % tool)
    workloads = [("set", 1), ("get", 1), ("set", 16), ("get", 16)]
    work = tempfile.mkdtemp(prefix="durakv-instr-")
    try:
        table = {t: measure(t, args.requests, workloads, work) for t in args.targets.split(",")}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ref = table.get("redis")
    lines = ["%-10s %s" % ("target", "  ".join("%14s" % ("%s P%d" % w) for w in workloads))]
    for target, res in table.items():
        cells = []
        for w in workloads:
            cell = "%7d" % res[w]
            if ref and target != "redis":
                cell += " %5.2fx" % (res[w] / ref[w])
            cells.append("%14s" % cell)
        lines.append("%-10s %s" % (target, "  ".join(cells)))
    lines.append("(user-space instructions per request, callgrind; for durakv the ratio to redis-server's)")
    text = "\n".join(lines)
    print(text)
    if args.results:
        report = {"requests": args.requests,
                  "rows": {t: {"%s P%d" % w: res[w] for w in workloads} for t, res in table.items()}}
        path = bench_results.write_results(args.results, "instructions", report, text, load_before,
                                           tool="PYTHONPATH=src python scripts/count_instructions.py",
                                           title="Instructions per request (callgrind)")
        print("written: %s" % path)


if __name__ == "__main__":
    main()
