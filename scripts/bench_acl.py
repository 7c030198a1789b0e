"""What ACL checks cost: redis-benchmark SET/GET against redis-server and durakv, as the default user (the
check's fast path) and as a restricted user (command rules and a key pattern checked on every command).

Prints ops/s per server and user, durakv's ratio to redis-server measured in the same run, and the server's
CPU time per request (from /proc: steadier than ops/s on a shared machine).

    python scripts/bench_acl.py [--requests 200000] [--pipeline 16] [--clients 50] [--durakv-src DIR]

--durakv-src runs another checkout's durakv (e.g. the commit before ACLs) for a before/after comparison.
"""

import argparse
import csv
import io
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))

from durakv.protocol.client import RespError, command  # noqa: E402
USER_RULES = ["on", ">benchpw", "resetkeys", "~key:*", "-@all", "+get", "+set", "+ping", "+config|get"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ping(port, timeout_s=30.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if command("127.0.0.1", port, "PING", timeout_s=1) == b"PONG":
                return
        except (OSError, RespError):
            pass
        time.sleep(0.05)
    raise RuntimeError("server on port %d did not answer" % port)


def call(port, *args):
    """One command on a new connection: its reply, or the RespError it answered."""
    try:
        return command("127.0.0.1", port, *args, timeout_s=10)
    except RespError as exc:
        return exc


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench(port, pid, args, user):
    cmd = ["redis-benchmark", "-p", str(port), "-t", "set,get", "-n", str(args.requests), "-c", str(args.clients),
           "-P", str(args.pipeline), "-r", "100000", "-q", "--csv"]
    if user:
        cmd += ["--user", "bench", "-a", "benchpw"]
    cpu_before = cpu_seconds(pid)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=True).stdout
    cpu_us = (cpu_seconds(pid) - cpu_before) * 1e6 / (2 * args.requests)
    rows = list(csv.reader(io.StringIO(out)))
    result = {r[0]: float(r[1]) for r in rows[1:] if len(r) > 1}
    result["cpu_us"] = cpu_us
    return result


def start(cmd, env=None):
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                            start_new_session=True)


def stop(proc):
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=20)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=200000)
    ap.add_argument("--pipeline", type=int, default=16)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--durakv-src", default=os.path.join(HERE, "..", "src"))
    args = ap.parse_args()
    if shutil.which("redis-server") is None or shutil.which("redis-benchmark") is None:
        sys.exit("needs redis-server and redis-benchmark")
    tmp = tempfile.mkdtemp(prefix="bench-acl-")
    results = {}
    procs = []
    try:
        rport, dport = free_port(), free_port()
        procs.append(start(["redis-server", "--port", str(rport), "--bind", "127.0.0.1", "--save", "",
                            "--appendonly", "no", "--dir", tmp]))
        env = dict(os.environ, PYTHONPATH=os.path.abspath(args.durakv_src))
        # durability none: the command path alone (the ACL check is part of it), no fsync in the numbers
        procs.append(start([sys.executable, "-m", "durakv", "server", "--port", str(dport), "--bind", "127.0.0.1",
                            "--dir", os.path.join(tmp, "durakv"), "--durability", "none"], env=env))
        for name, port, proc in (("redis-server", rport, procs[0]), ("durakv", dport, procs[1])):
            wait_ping(port)
            acl = call(port, "ACL", "SETUSER", "bench", *USER_RULES) == b"OK"
            results[(name, "default")] = bench(port, proc.pid, args, user=False)
            results[(name, "restricted")] = bench(port, proc.pid, args, user=True) if acl else None
    finally:
        for p in procs:
            stop(p)
        shutil.rmtree(tmp, ignore_errors=True)
    print("redis-benchmark -t set,get -n %d -c %d -P %d -r 100000 (durakv from %s, durability none)"
          % (args.requests, args.clients, args.pipeline, os.path.abspath(args.durakv_src)))
    print("%-8s %-11s %14s %14s %10s" % ("command", "user", "redis ops/s", "durakv ops/s", "ratio"))
    for user in ("default", "restricted"):
        r, d = results[("redis-server", user)], results[("durakv", user)]
        for command in ("SET", "GET"):
            if d is None:
                print("%-8s %-11s %14.0f %14s %10s" % (command, user, r[command], "no ACL", "-"))
                continue
            print("%-8s %-11s %14.0f %14.0f %10.3f" % (command, user, r[command], d[command],
                                                       d[command] / r[command]))
    for user in ("default", "restricted"):
        r, d = results[("redis-server", user)], results[("durakv", user)]
        if d is not None:
            print("server CPU per request, %-10s redis-server %.2f us, durakv %.2f us"
                  % (user + ":", r["cpu_us"], d["cpu_us"]))


if __name__ == "__main__":
    main()
