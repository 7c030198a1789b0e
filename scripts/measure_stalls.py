"""The longest event-loop stall of a durakv server while (a) it loads a large dataset by REPLICAOF from a
redis-server, and (b) `redis-cli --rdb` takes a backup of it (SYNC: the file is built in a forked child).

Two witnesses per phase: INFO stats `eventloop_longest_stall_ms` (the longest turn or heartbeat lateness,
server/loopstats.py; CONFIG RESETSTAT zeroes it before each phase), and a separate client sending PING every
PING_INTERVAL_MS whose round trips give max and p99 (an -LOADING answer counts: it is an answer). Also the
load's keys/s. Every process it starts is stopped by its pid. A measurement, not a test: the target is a stall
under 100 ms.

    .venv/bin/python scripts/measure_stalls.py [--keys 1000000] [--value-bytes 100] [--durability sync]
"""

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import valkey

from durakv.keyspace import rdbvalue

PING_INTERVAL_MS = 10
READY_TIMEOUT_S = 30
POLL_INTERVAL_S = 0.05


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except (valkey.ConnectionError, valkey.ResponseError):
            pass
        time.sleep(POLL_INTERVAL_S)
    raise TimeoutError("%s: not within %d s" % (what, timeout_s))


class Pinger:
    """PING every PING_INTERVAL_MS on its own connection; the round trips in ms. With dump_pid: when a PING has
    waited longer than DUMP_AFTER_MS, `py-spy dump` of that process (the stack that keeps the loop busy), at
    most MAX_DUMPS times."""

    DUMP_AFTER_MS = 60
    MAX_DUMPS = 5

    def __init__(self, port, dump_pid=None):
        self.port = port
        self.rtts_ms = []
        self.dumps = []
        self.dump_pid = dump_pid
        self.in_flight = None
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.watchdog = threading.Thread(target=self._watch, daemon=True)

    def _watch(self):
        dumped_for = None
        while not self.stop_event.wait(0.005) and len(self.dumps) < self.MAX_DUMPS:
            t0 = self.in_flight
            if t0 is not None and t0 != dumped_for and (time.perf_counter() - t0) * 1000 > self.DUMP_AFTER_MS:
                dumped_for = t0
                out = subprocess.run([shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable),
                                      "py-spy"), "dump", "--pid", str(self.dump_pid)],
                                     capture_output=True, text=True, timeout=30)
                self.dumps.append("PING waiting %.0f ms:\n%s" % ((time.perf_counter() - t0) * 1000, out.stdout))

    def _run(self):
        # A plain socket, not valkey-py: valkey-py takes -LOADING for a connection error and reconnects, so each
        # PING during the load would also time a new connection's handshake.
        with socket.create_connection(("127.0.0.1", self.port), timeout=120) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            f = sock.makefile("rb")
            next_s = time.perf_counter()
            while not self.stop_event.is_set():
                t0 = self.in_flight = time.perf_counter()
                sock.sendall(b"*1\r\n$4\r\nPING\r\n")
                answer = f.readline()           # +PONG or -LOADING ...: one line either way
                self.in_flight = None
                if not answer.startswith((b"+PONG", b"-LOADING")):
                    raise RuntimeError("PING answered %r" % answer)
                self.rtts_ms.append((time.perf_counter() - t0) * 1000)
                next_s += PING_INTERVAL_MS / 1000
                time.sleep(max(0.0, next_s - time.perf_counter()))

    def __enter__(self):
        self.thread.start()
        if self.dump_pid is not None:
            self.watchdog.start()
        return self

    def __exit__(self, *exc):
        self.stop_event.set()
        self.thread.join(timeout=150)
        if self.dump_pid is not None:
            self.watchdog.join(timeout=60)

    def summary(self):
        rtts = sorted(self.rtts_ms)
        if not rtts:
            return 0, 0.0, 0.0, 0.0
        return len(rtts), rtts[-1], rtts[min(len(rtts) - 1, int(len(rtts) * 0.99))], rtts[len(rtts) // 2]


def stop(proc):
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--durability", default="sync", choices=("sync", "async", "none"))
    ap.add_argument("--timeout-s", type=int, default=600, help="bound of each phase")
    ap.add_argument("--server-src", help="run the server from this source tree (PYTHONPATH), e.g. a baseline's")
    ap.add_argument("--show-log", action="store_true", help="print the server's log lines about the sync")
    ap.add_argument("--py-spy-dump", action="store_true",
                    help="py-spy dump the server when a PING waits past %d ms (py-spy from PyPI; a dump pauses "
                         "the server, so the figures of such a run are not the measurement)" % Pinger.DUMP_AFTER_MS)
    opts = ap.parse_args()
    redis_bin = shutil.which("redis-server")
    if not redis_bin or not shutil.which("redis-cli"):
        sys.exit("needs redis-server and redis-cli (Debian's redis-server, redis-tools)")
    procs, logs, notable, dumps = [], [], [], []
    server_env = dict(os.environ)
    if opts.server_src:
        server_env["PYTHONPATH"] = os.pathsep.join(filter(None, (opts.server_src, os.environ.get("PYTHONPATH"))))
        server_env["PYTHONDONTWRITEBYTECODE"] = "1"
    rows = []
    with tempfile.TemporaryDirectory(prefix="measure-stalls-") as tmp:
        try:
            rport, dport = free_port(), free_port()
            procs.append(subprocess.Popen(
                [redis_bin, "--port", str(rport), "--bind", "127.0.0.1", "--dir", tmp, "--save", "",
                 "--appendonly", "no", "--enable-debug-command", "local", "--repl-diskless-sync-delay", "0"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
            log_path = os.path.join(tmp, "durakv.log")
            logs.append(open(log_path, "wb"))
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "durakv", "server", "--port", str(dport), "--bind", "127.0.0.1",
                 "--dir", os.path.join(tmp, "durakv"), "--durability", opts.durability],
                stdout=logs[-1], stderr=subprocess.STDOUT, start_new_session=True, env=server_env))
            primary = valkey.Valkey(host="127.0.0.1", port=rport, socket_timeout=opts.timeout_s)
            d = valkey.Valkey(host="127.0.0.1", port=dport, socket_timeout=opts.timeout_s)
            wait_until(primary.ping, READY_TIMEOUT_S, "redis-server")
            wait_until(d.ping, READY_TIMEOUT_S, "durakv")
            primary.execute_command("DEBUG", "POPULATE", opts.keys, "key", opts.value_bytes)

            # (a) the full sync
            d.config_resetstat()
            dump_pid = procs[-1].pid if opts.py_spy_dump else None
            with Pinger(dport, dump_pid) as pinger:
                started = time.perf_counter()
                d.execute_command("REPLICAOF", "127.0.0.1", rport)
                wait_until(lambda: d.execute_command("ROLE")[3] == b"connected", opts.timeout_s, "the full sync")
                took_s = time.perf_counter() - started
            stall_ms = d.info("stats")["eventloop_longest_stall_ms"]
            n, ping_max, ping_p99, ping_p50 = pinger.summary()
            assert d.dbsize() == opts.keys, d.dbsize()
            with open(log_path, "rb") as f:
                m = re.search(rb"full sync of (\d+) bytes, (\d+) keys in ([\d.]+)s", f.read())
            sync_s = float(m.group(3)) if m else took_s
            rows.append(("REPLICAOF full sync", stall_ms, ping_max, ping_p99, ping_p50, n,
                         "%d keys in %.2f s: %d keys/s (REPLICAOF to link up %.2f s)"
                         % (opts.keys, sync_s, opts.keys / sync_s, took_s)))
            d.execute_command("REPLICAOF", "NO", "ONE")

            # (b) redis-cli --rdb of the loaded dataset
            rdb_path = os.path.join(tmp, "x.rdb")
            d.config_resetstat()
            dumps = pinger.dumps
            with Pinger(dport, dump_pid) as pinger:
                started = time.perf_counter()
                out = subprocess.run(["redis-cli", "-p", str(dport), "--rdb", rdb_path], capture_output=True,
                                     text=True, timeout=opts.timeout_s)
                took_s = time.perf_counter() - started
            stall_ms = d.info("stats")["eventloop_longest_stall_ms"]
            n, ping_max, ping_p99, ping_p50 = pinger.summary()
            dumps += pinger.dumps
            if out.returncode != 0:
                sys.exit("redis-cli --rdb failed: %s" % out.stderr.strip())
            in_file = sum(1 for rec in rdbvalue.iter_rdb_file(rdb_path) if rec[0] == "key")
            if in_file != opts.keys:
                sys.exit("redis-cli --rdb's file holds %d keys, not %d" % (in_file, opts.keys))
            with open(log_path, "rb") as f:
                forked = b"Background RDB transfer started by pid" in f.read()
            rows.append(("redis-cli --rdb", stall_ms, ping_max, ping_p99, ping_p50, n,
                         "%d bytes in %.2f s, built in a forked child: %s (fork %.1f ms)"
                         % (os.path.getsize(rdb_path), took_s, "yes" if forked else "NO",
                            d.info("stats")["latest_fork_usec"] / 1000)))
            with open(log_path, "rb") as f:
                notable = [line.decode("utf-8", "replace").rstrip() for line in f
                           if re.search(rb"replica|REPLICAOF|retrying|did not run|snapshot|RDB", line)]
        finally:
            for proc in reversed(procs):
                stop(proc)
            for f in logs:
                f.close()
    print("%d keys of %d bytes, durability %s, PING every %d ms" % (
        opts.keys, opts.value_bytes, opts.durability, PING_INTERVAL_MS))
    print("%-20s %14s %12s %12s %12s %7s  %s" % ("phase", "loop stall ms", "PING max ms", "PING p99 ms",
                                                 "PING p50 ms", "PINGs", "notes"))
    for name, stall_ms, ping_max, ping_p99, ping_p50, n, notes in rows:
        print("%-20s %14d %12.1f %12.1f %12.2f %7d  %s" % (name, stall_ms, ping_max, ping_p99, ping_p50, n, notes))
    print("load average at the end: %.2f %.2f %.2f" % os.getloadavg())
    if opts.show_log:
        print("\n".join(notable))
    for dump in dumps:
        print(dump)


if __name__ == "__main__":
    main()
