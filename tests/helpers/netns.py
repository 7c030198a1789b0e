"""Two network namespaces joined by a veth pair, for tests that need a client that is not on the server's loopback
interface (protected mode, `enable-debug-command local`).

Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN for `ip netns`); `netns_usable()` says why not where it cannot be
done, and the test skips with that reason. The pair is made inside the two namespaces at once, so nothing is added
to the host's own network. Every process started in a namespace is killed by its pid, and both namespaces are
deleted at the end; namespaces of an earlier run that was killed (its pid gone) are removed first. The same way
as tests/test_multi_az_netns.py builds its five machines."""

import ctypes
import os
import re
import signal
import subprocess
import threading

CLONE_NEWNET = 0x40000000


def ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def netns_usable(prefix):
    """None when namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) for ip netns"
    probe = f"{prefix}{os.getpid()}-probe"
    try:
        r = ip("netns", "add", probe, check=False)
    except FileNotFoundError:
        return "the ip command (iproute2) is not installed"
    if r.returncode != 0:
        return f"ip netns add failed: {r.stderr.strip()}"
    ip("netns", "del", probe, check=False)
    return None


def remove_namespace(name):
    """Kills what still runs inside (processes the test started there) and deletes it (its veth goes too)."""
    r = ip("netns", "pids", name, check=False)
    for pid in r.stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    ip("netns", "del", name, check=False)


def sweep_stale(prefix):
    r = ip("netns", "list", check=False)
    for line in r.stdout.splitlines():
        name = line.split()[0] if line.strip() else ""
        m = re.match(re.escape(prefix) + r"(\d+)-", name)
        if m and not os.path.exists(f"/proc/{m.group(1)}"):
            remove_namespace(name)


def in_netns(name, fn, *args, **kwargs):
    """Runs fn in a thread that has joined network namespace `name` (a network namespace is per thread), so
    every socket it opens is inside; returns fn's result or raises its exception."""
    out = {}

    def body():
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = os.open(f"/var/run/netns/{name}", os.O_RDONLY)
            try:
                if libc.setns(fd, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), f"setns({name})")
            finally:
                os.close(fd)
            out["value"] = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
            out["error"] = exc
    t = threading.Thread(target=body, name=f"netns-{name}", daemon=True)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


class VethPair:
    """Namespaces `<prefix><pid>-srv` (SERVER_IP) and `<prefix><pid>-cl` (CLIENT_IP) on one veth pair, each with
    its loopback up. `start(argv)` runs a process in the server namespace; `close()` removes everything."""

    SERVER_IP = "10.77.0.1"
    CLIENT_IP = "10.77.0.2"

    def __init__(self, prefix, log_dir):
        self.tag = f"{prefix}{os.getpid()}"
        self.server_ns = f"{self.tag}-srv"
        self.client_ns = f"{self.tag}-cl"
        self.log_dir = str(log_dir)
        self.namespaces = []
        self.procs = []

    def build(self):
        for name in (self.server_ns, self.client_ns):
            ip("netns", "add", name)
            self.namespaces.append(name)
        inner, outer = f"dks{os.getpid()}", f"dkc{os.getpid()}"     # at most 15 characters
        ip("link", "add", inner, "netns", self.server_ns, "type", "veth", "peer", "name", outer,
           "netns", self.client_ns)
        for name, dev, addr in ((self.server_ns, inner, self.SERVER_IP), (self.client_ns, outer, self.CLIENT_IP)):
            ip("-n", name, "addr", "add", f"{addr}/24", "dev", dev)
            ip("-n", name, "link", "set", dev, "up")
            ip("-n", name, "link", "set", "lo", "up")
        return self

    def start(self, argv, name, env=None):
        """argv run in the server namespace (`ip netns exec` execs it: the pid is the process itself)."""
        log = open(os.path.join(self.log_dir, f"{name}.log"), "ab")
        try:
            proc = subprocess.Popen(["ip", "netns", "exec", self.server_ns] + list(argv), stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                    start_new_session=True)
        finally:
            log.close()
        self.procs.append(proc)
        return proc

    def log_text(self, name):
        try:
            with open(os.path.join(self.log_dir, f"{name}.log"), "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def close(self):
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                pass
        for name in reversed(self.namespaces):
            remove_namespace(name)
