"""The longest event-loop stall of a durakv server while it loads or stores a large dataset:

  replicaof  it loads a dataset by REPLICAOF from a redis-server (a full sync)
  rdb        `redis-cli --rdb` takes a backup of it (SYNC: the file is built in a forked child)
  restart    a standalone server restarts on it (its snapshot, then the journal written after the snapshot)
  snapshot   a replica of a 1-shard local cluster stores its snapshot in the object store (BGSAVE on a shard
             replica runs the same snapshot_now as the periodic timer, replica-snapshot-interval-ms)
  rejoin     a replica of that cluster is killed (-9) and restarted: it loads the newest snapshot from the object
             store and replays the journal written after it

Two witnesses per phase: INFO stats `eventloop_longest_stall_ms` (the longest turn or heartbeat lateness,
server/loopstats.py; CONFIG RESETSTAT zeroes it before each phase, a restarted process starts at zero), and a
separate client sending PING every PING_INTERVAL_MS whose round trips give max and p99 (an -LOADING answer counts:
it is an answer; a restarted process is pinged from the moment it accepts connections). Also the load's keys/s.
Every process it starts is stopped by its pid. A measurement, not a test: the target is a stall under 100 ms.
With --report FILE it writes the figures, the command, the commit, the date and the machine's load there.

    .venv/bin/python scripts/measure_stalls.py [--keys 1000000] [--value-bytes 100] [--durability sync]
        [--phases replicaof,rdb,restart,snapshot,rejoin] [--report docs/results/loading-stalls.md]
"""

import argparse
import datetime
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

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "src"))

import valkey  # noqa: E402

from durakv.keyspace import rdbvalue  # noqa: E402

PING_INTERVAL_MS = 10
READY_TIMEOUT_S = 30
POLL_INTERVAL_S = 0.05
PHASES = ("replicaof", "rdb", "restart", "snapshot", "rejoin")
# keys written after the snapshot, as a share of --keys: the journal a restart or a rejoin replays
AFTER_SNAPSHOT_SHARE = 10


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
    """PING every PING_INTERVAL_MS on its own connection; the round trips in ms, and how many were answered
    -LOADING. It connects as soon as the port accepts (a restarted process), within connect_timeout_s. With
    dump_pid: when a PING has waited longer than DUMP_AFTER_MS, `py-spy dump` of that process (the stack that
    keeps the loop busy), at most MAX_DUMPS times."""

    DUMP_AFTER_MS = 60
    MAX_DUMPS = 5

    def __init__(self, port, dump_pid=None, connect_timeout_s=60):
        self.port = port
        self.rtts_ms = []
        self.loading = 0
        self.dumps = []
        self.dump_pid = dump_pid
        self.connect_timeout_s = connect_timeout_s
        self.connected = threading.Event()
        self.error = None
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

    def _connect(self):
        deadline = time.monotonic() + self.connect_timeout_s
        while True:
            try:
                return socket.create_connection(("127.0.0.1", self.port), timeout=120)
            except OSError:
                if time.monotonic() > deadline or self.stop_event.is_set():
                    raise
                time.sleep(0.002)

    def _run(self):
        # A plain socket, not valkey-py: valkey-py takes -LOADING for a connection error and reconnects, so each
        # PING during the load would also time a new connection's handshake.
        try:
            sock = self._connect()
        except OSError as exc:
            self.error = exc
            return
        self.connected.set()
        with sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            f = sock.makefile("rb")
            next_s = time.perf_counter()
            while not self.stop_event.is_set():
                t0 = self.in_flight = time.perf_counter()
                try:
                    sock.sendall(b"*1\r\n$4\r\nPING\r\n")
                    answer = f.readline()           # +PONG or -LOADING ...: one line either way
                except OSError as exc:
                    self.error = exc
                    return
                self.in_flight = None
                if not answer.startswith((b"+PONG", b"-LOADING")):
                    self.error = RuntimeError("PING answered %r" % answer)
                    return
                if answer.startswith(b"-LOADING"):
                    self.loading += 1
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
        if self.error is not None and exc[0] is None:
            raise RuntimeError("the pinger failed: %r" % (self.error,))

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


def log_since(path, offset, pattern):
    with open(path, "rb") as f:
        f.seek(offset)
        return [line.decode("utf-8", "replace").rstrip() for line in f if re.search(pattern, line)]


def row(name, stall_ms, pinger, notes):
    n, ping_max, ping_p99, ping_p50 = pinger.summary()
    return (name, stall_ms, ping_max, ping_p99, ping_p50, n, pinger.loading, notes)


# -- standalone phases ----------------------------------------------------------------------------------------

def standalone_phases(opts, phases, rows, notable, dumps, server_env):
    redis_bin = shutil.which("redis-server")
    with tempfile.TemporaryDirectory(prefix="measure-stalls-") as tmp:
        procs, logs = [], []

        def start_durakv(port, data_dir, log_path):
            logs.append(open(log_path, "ab"))
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "durakv", "server", "--port", str(port), "--bind", "127.0.0.1",
                 "--dir", data_dir, "--durability", opts.durability, "--enable-debug-command", "local"],
                stdout=logs[-1], stderr=subprocess.STDOUT, start_new_session=True, env=server_env))
            return procs[-1]

        try:
            dport = free_port()
            log_path = os.path.join(tmp, "durakv.log")
            proc = start_durakv(dport, os.path.join(tmp, "durakv"), log_path)
            d = valkey.Valkey(host="127.0.0.1", port=dport, socket_timeout=opts.timeout_s)
            wait_until(d.ping, READY_TIMEOUT_S, "durakv")
            dump_pid = proc.pid if opts.py_spy_dump else None
            if "replicaof" in phases or "rdb" in phases:
                if not redis_bin or not shutil.which("redis-cli"):
                    sys.exit("needs redis-server and redis-cli (Debian's redis-server, redis-tools)")
                rport = free_port()
                procs.append(subprocess.Popen(
                    [redis_bin, "--port", str(rport), "--bind", "127.0.0.1", "--dir", tmp, "--save", "",
                     "--appendonly", "no", "--enable-debug-command", "local", "--repl-diskless-sync-delay", "0"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
                primary = valkey.Valkey(host="127.0.0.1", port=rport, socket_timeout=opts.timeout_s)
                wait_until(primary.ping, READY_TIMEOUT_S, "redis-server")
                primary.execute_command("DEBUG", "POPULATE", opts.keys, "key", opts.value_bytes)

                # the full sync
                d.config_resetstat()
                with Pinger(dport, dump_pid) as pinger:
                    started = time.perf_counter()
                    d.execute_command("REPLICAOF", "127.0.0.1", rport)
                    wait_until(lambda: d.execute_command("ROLE")[3] == b"connected", opts.timeout_s, "the full sync")
                    took_s = time.perf_counter() - started
                dumps += pinger.dumps
                stall_ms = d.info("stats")["eventloop_longest_stall_ms"]
                assert d.dbsize() == opts.keys, d.dbsize()
                with open(log_path, "rb") as f:
                    m = re.search(rb"full sync of (\d+) bytes, (\d+) keys in ([\d.]+)s", f.read())
                sync_s = float(m.group(3)) if m else took_s
                rows.append(row("REPLICAOF full sync", stall_ms, pinger,
                                "%d keys in %.2f s: %d keys/s (REPLICAOF to link up %.2f s)"
                                % (opts.keys, sync_s, opts.keys / sync_s, took_s)))
                notable += log_since(log_path, 0, rb"full sync|the sync's load took")
                d.execute_command("REPLICAOF", "NO", "ONE")
            else:
                d.execute_command("DEBUG", "POPULATE", opts.keys, "key", opts.value_bytes)

            if "rdb" in phases:
                # redis-cli --rdb of the loaded dataset
                rdb_path = os.path.join(tmp, "x.rdb")
                d.config_resetstat()
                with Pinger(dport, dump_pid) as pinger:
                    started = time.perf_counter()
                    out = subprocess.run(["redis-cli", "-p", str(dport), "--rdb", rdb_path], capture_output=True,
                                         text=True, timeout=opts.timeout_s)
                    took_s = time.perf_counter() - started
                dumps += pinger.dumps
                stall_ms = d.info("stats")["eventloop_longest_stall_ms"]
                if out.returncode != 0:
                    sys.exit("redis-cli --rdb failed: %s" % out.stderr.strip())
                in_file = sum(1 for rec in rdbvalue.iter_rdb_file(rdb_path) if rec[0] == "key")
                if in_file != opts.keys:
                    sys.exit("redis-cli --rdb's file holds %d keys, not %d" % (in_file, opts.keys))
                with open(log_path, "rb") as f:
                    forked = b"Background RDB transfer started by pid" in f.read()
                rows.append(row("redis-cli --rdb", stall_ms, pinger,
                                "%d bytes in %.2f s, built in a forked child: %s (fork %.1f ms)"
                                % (os.path.getsize(rdb_path), took_s, "yes" if forked else "NO",
                                   d.info("stats")["latest_fork_usec"] / 1000)))
                os.unlink(rdb_path)

            if "restart" in phases:
                # the dataset in a snapshot (BGSAVE: built by the snapshot builder from the journal), then
                # AFTER_SNAPSHOT_SHARE % more keys in the journal after it; a restart loads both
                d.bgsave()
                wait_until(lambda: d.info("persistence")["rdb_bgsave_in_progress"] == 0, opts.timeout_s,
                           "the snapshot")
                after = opts.keys // AFTER_SNAPSHOT_SHARE
                d.execute_command("DEBUG", "POPULATE", after, "late", opts.value_bytes)
                total = d.dbsize()
                stop(proc)
                offset = os.path.getsize(log_path)
                started = time.perf_counter()
                proc = start_durakv(dport, os.path.join(tmp, "durakv"), log_path)
                with Pinger(dport, proc.pid if opts.py_spy_dump else None) as pinger:
                    pinger.connected.wait(READY_TIMEOUT_S)
                    first_s = time.perf_counter() - started
                    wait_until(lambda: d.info("persistence")["loading"] == 0, opts.timeout_s, "the restart's load")
                    took_s = time.perf_counter() - started
                dumps += pinger.dumps
                stall_ms = d.info("stats")["eventloop_longest_stall_ms"]
                keys = d.dbsize()
                if keys != total:
                    sys.exit("the restarted server holds %d keys, not %d" % (keys, total))
                loaded = log_since(log_path, offset, rb"loaded snapshot index")
                m = re.search(r"in ([\d.]+)s", loaded[0]) if loaded else None
                load_s = float(m.group(1)) if m else took_s
                rows.append(row("standalone restart", stall_ms, pinger,
                                "%d keys (%d in the journal after the snapshot) loaded in %.2f s: %d keys/s; "
                                "connected %.2f s after the start" % (total, after, load_s, total / load_s, first_s)))
                notable += log_since(log_path, offset, rb"loaded|recovered|ready")
        finally:
            for p in reversed(procs):
                stop(p)
            for f in logs:
                f.close()


# -- cluster phases -------------------------------------------------------------------------------------------

def load_keys(port, prefix, count, value, connections=4, batch=1000, timeout_s=600):
    """count keys prefix:0.. of `value` by pipelined SETs over several connections (a sync shard commits one
    journal entry per loop iteration, so parallel pipelines fill the entries)."""
    errors = []

    def worker(k):
        try:
            with valkey.Valkey(port=port, socket_timeout=timeout_s) as c:
                for start in range(k * batch, count, connections * batch):
                    p = c.pipeline(transaction=False)
                    for i in range(start, min(start + batch, count)):
                        p.set("%s:%d" % (prefix, i), value)
                    p.execute()
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def cluster_phases(opts, phases, rows, notable, dumps, server_env):
    from durakv.cluster.local import LocalCluster
    value = b"v" * opts.value_bytes
    d = tempfile.mkdtemp(prefix="measure-stalls-cluster-")
    # no periodic snapshot while the keys are written: the snapshot phase asks for one (BGSAVE, the same
    # snapshot_now the timer runs) when the dataset is complete
    # password "": the nodes answer this script's plain PINGs and INFOs on 127.0.0.1 only (protected mode), as
    # the test harness's clusters do; NATS stays locked
    cluster = LocalCluster.up(d, shards=1, replicas=2, durability=opts.durability, timeout_s=120, password="",
                              extra_server_args=("--replica-snapshot-interval-ms", "0"),
                              env={"PYTHONPATH": server_env["PYTHONPATH"]} if opts.server_src else None)
    try:
        primary = cluster.primary(0)
        started = time.perf_counter()
        load_keys(primary.port, "key", opts.keys, value)
        notable.append("cluster: %d keys written to the primary in %.1f s" % (opts.keys,
                                                                             time.perf_counter() - started))
        keeper, victim = cluster.replicas(0)[:2]
        with valkey.Valkey(port=primary.port, socket_timeout=60) as c:
            target = int(c.info("replication")["master_repl_offset"])
        with valkey.Valkey(port=keeper.port, socket_timeout=opts.timeout_s) as r:
            wait_until(lambda: int(r.info("replication")["slave_repl_offset"]) >= target, opts.timeout_s,
                       "the replica catching up")
            r.config_resetstat()
            stored = int(r.info("replication")["snapshots_stored"])
            with Pinger(keeper.port, keeper.pid if opts.py_spy_dump else None) as pinger:
                t0 = time.perf_counter()
                r.execute_command("BGSAVE")
                wait_until(lambda: int(r.info("replication")["snapshots_stored"]) > stored, opts.timeout_s,
                           "the replica's snapshot stored")
                took_s = time.perf_counter() - t0
                # then the store is pruned and the stream purged below the snapshot
                wait_until(lambda: r.info("persistence")["rdb_bgsave_in_progress"] == 0, opts.timeout_s,
                           "the store's end")
            dumps += pinger.dumps
            stats = r.info("stats")
            rep = r.info("replication")
            if "snapshot" in phases:
                rows.append(row("replica snapshot", stats["eventloop_longest_stall_ms"], pinger,
                                "%d keys written (forked child) and stored in the object store in %.2f s "
                                "(fork %.1f ms; %d bytes in the store)"
                                % (opts.keys, took_s, stats["latest_fork_usec"] / 1000,
                                   rep["snapshot_store_bytes"])))
        if "rejoin" not in phases:
            return
        after = opts.keys // AFTER_SNAPSHOT_SHARE
        load_keys(primary.port, "late", after, value)
        total = opts.keys + after
        with valkey.Valkey(port=primary.port, socket_timeout=60) as c:
            target = int(c.info("replication")["master_repl_offset"])
        cluster.kill(victim.name, signal.SIGKILL)
        wait_until(lambda: cluster.get(victim.name).state == "dead", 30, "the replica killed")
        offset = os.path.getsize(victim.log)
        started = time.perf_counter()
        cluster.restart(victim.name, wait=False)
        dump_pid = cluster.reload().get(victim.name).pid if opts.py_spy_dump else None
        with valkey.Valkey(port=victim.port, socket_timeout=opts.timeout_s) as r:
            with Pinger(victim.port, dump_pid) as pinger:
                pinger.connected.wait(READY_TIMEOUT_S)
                first_s = time.perf_counter() - started

                def caught_up():
                    rep = r.info("replication")
                    return (rep.get("durakv_phase") == "following" and r.info("persistence")["loading"] == 0
                            and int(rep["slave_repl_offset"]) >= target)
                wait_until(caught_up, opts.timeout_s, "the restarted replica catching up")
                took_s = time.perf_counter() - started
            dumps += pinger.dumps
            stall_ms = r.info("stats")["eventloop_longest_stall_ms"]
            keys = r.dbsize()
        if keys != total:
            sys.exit("the rejoined replica holds %d keys, not %d" % (keys, total))
        lines = log_since(victim.log, offset, rb"loaded snapshot of shard|following shard")
        rows.append(row("replica rejoin", stall_ms, pinger,
                        "%d keys (%d in the journal after the snapshot), caught up %.2f s after the restart "
                        "(connected after %.2f s)" % (total, after, took_s, first_s)))
        notable += [line.split(" I ", 1)[-1] for line in lines]
    finally:
        cluster.down()
        shutil.rmtree(d, ignore_errors=True)


# -- the report -----------------------------------------------------------------------------------------------

def machine():
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "?")
    except OSError:
        model = "?"
    return "%d CPUs (%s), %s" % (os.cpu_count() or 0, model, os.uname().release)


def commit():
    out = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                           text=True).stdout.strip()
    return (out.stdout.strip() or "?") + (" (with uncommitted changes)" if dirty else "")


def table(rows):
    lines = ["| phase | loop stall ms | PING max ms | PING p99 ms | PING p50 ms | PINGs | of them -LOADING | notes |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    for name, stall_ms, ping_max, ping_p99, ping_p50, n, loading, notes in rows:
        lines.append("| %s | %d | %.1f | %.1f | %.2f | %d | %d | %s |" % (name, stall_ms, ping_max, ping_p99,
                                                                          ping_p50, n, loading, notes))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--durability", default="sync", choices=("sync", "async", "none"))
    ap.add_argument("--phases", default=",".join(PHASES), help="comma-separated, of: " + ", ".join(PHASES))
    ap.add_argument("--timeout-s", type=int, default=600, help="bound of each phase")
    ap.add_argument("--server-src", help="run the server from this source tree (PYTHONPATH), e.g. a baseline's")
    ap.add_argument("--report", help="write the figures to this markdown file (docs/results/loading-stalls.md)")
    ap.add_argument("--show-log", action="store_true", help="print the server's log lines about the loads")
    ap.add_argument("--py-spy-dump", action="store_true",
                    help="py-spy dump the server under test when a PING waits past %d ms (py-spy from PyPI; a dump "
                         "pauses the server, so the figures of such a run are not the measurement)"
                    % Pinger.DUMP_AFTER_MS)
    opts = ap.parse_args()
    phases = [p.strip() for p in opts.phases.split(",") if p.strip()]
    unknown = set(phases) - set(PHASES)
    if unknown:
        sys.exit("unknown phase(s): %s" % ", ".join(sorted(unknown)))
    if opts.durability == "none" and ("snapshot" in phases or "rejoin" in phases):
        sys.exit("a shard refuses durability none: the snapshot and rejoin phases need sync or async")
    server_env = dict(os.environ)
    src = opts.server_src or os.path.join(ROOT, "src")
    server_env["PYTHONPATH"] = os.pathsep.join(filter(None, (src, os.environ.get("PYTHONPATH"))))
    if opts.server_src:
        server_env["PYTHONDONTWRITEBYTECODE"] = "1"
    load_before = os.getloadavg()
    started = datetime.datetime.now(datetime.timezone.utc)
    rows, notable, dumps = [], [], []
    if set(phases) & {"replicaof", "rdb", "restart"}:
        standalone_phases(opts, phases, rows, notable, dumps, server_env)
    if set(phases) & {"snapshot", "rejoin"}:
        cluster_phases(opts, phases, rows, notable, dumps, server_env)
    load_after = os.getloadavg()
    head = "%d keys of %d bytes, durability %s, PING every %d ms" % (opts.keys, opts.value_bytes, opts.durability,
                                                                     PING_INTERVAL_MS)
    print(head)
    print("%-20s %14s %12s %12s %12s %7s %8s  %s" % ("phase", "loop stall ms", "PING max ms", "PING p99 ms",
                                                     "PING p50 ms", "PINGs", "LOADING", "notes"))
    for name, stall_ms, ping_max, ping_p99, ping_p50, n, loading, notes in rows:
        print("%-20s %14d %12.1f %12.1f %12.2f %7d %8d  %s" % (name, stall_ms, ping_max, ping_p99, ping_p50, n,
                                                               loading, notes))
    print("load average before: %.2f %.2f %.2f, after: %.2f %.2f %.2f" % (load_before + load_after))
    if opts.show_log:
        print("\n".join(notable))
    for dump in dumps:
        print(dump)
    if opts.report:
        argv = ["python", "scripts/measure_stalls.py"] + sys.argv[1:]
        text = ["# Loading stalls: the longest event-loop stall while durakv loads or stores a dataset", "",
                "Written by `scripts/measure_stalls.py --report` (the target: every stall under 100 ms on a quiet "
                "machine).", "",
                "- command: `%s`" % " ".join(argv),
                "- commit: %s" % commit(),
                "- date: %s (UTC)" % started.strftime("%Y-%m-%d %H:%M"),
                "- machine: %s" % machine(),
                "- load average (1, 5, 15 min) before: %.2f %.2f %.2f, after: %.2f %.2f %.2f"
                % (load_before + load_after),
                "- %s" % head, "",
                table(rows), "",
                "`loop stall ms` is INFO stats `eventloop_longest_stall_ms` of the server under test over the phase "
                "(the longest turn of its loop, or the lateness of its 100 ms heartbeat); the PING columns are the "
                "round trips of a client that pinged it meanwhile (-LOADING answers count).", ""]
        if notable:
            text += ["Log lines of the loads:", "", "```"] + notable + ["```", ""]
        os.makedirs(os.path.dirname(os.path.abspath(opts.report)), exist_ok=True)
        with open(opts.report, "w") as f:
            f.write("\n".join(text))
        print("wrote %s" % opts.report)


if __name__ == "__main__":
    main()
