"""The control plane lets no one in: each finding of "Across machines, and locked" (tried from outside against
`durakv cluster up --tls` clusters) as a test against a real locked cluster (NATS in operator mode, mutual TLS,
route password; nodes with the cluster's password).

What an attacker was able to do before, and what each test checks now:
- with no credentials: list the streams, read settings and journals, publish forged entries, patch settings,
  rewrite the topology, write a lease, purge streams -> NATS refuses the connection itself, with or without a CA
  and a client certificate;
- holding one node's identity (its DIR/cluster/node.creds): it cannot purge or delete another shard's stream,
  delete a stream or a message, write the topology or another shard's keys or journal;
- a forged or malformed entry in a shard's journal (which only that shard's nodes can write): never applied;
  replicas stop applying, say so in INFO replication, and do not restart in a loop;
- a rogue nats-server without the route password cannot join the routes;
- auth is cluster-wide: CONFIG SET requirepass on one shard's node changes every shard's, and a shard added later
  inherits it; `durakv cluster status` takes the credentials.
"""

import asyncio
import json
import os
import subprocess
import time

import nats
import pytest
import valkey

from conftest import TIME_SCALE, durakv_cli, wait_until
from durakv.cluster.local import LocalCluster
from durakv.cluster.nats_procs import nats_server_binary
from durakv.cluster.processes import free_ports
from durakv.cluster.tls import client_context
from durakv.journal.jetstream import EPOCH_HEADER, EXPECTED_LAST
from helpers.clusters import run
from helpers.servers import cluster_port_range



@pytest.fixture(scope="module")
def locked(tmp_path_factory):
    """A locked two-shard cluster, one replica each, mutual TLS: as `durakv cluster up --tls` makes it."""
    d = tmp_path_factory.mktemp("locked") / "c"
    cluster = LocalCluster.up(d, shards=2, replicas=1, tls=True, password=None, timeout_s=120 * TIME_SCALE,
                             port_range=cluster_port_range())
    try:
        yield cluster
    finally:
        cluster.down()


def _client(cluster, p, password=None, **kw):
    """A TLS client of node p with the cluster's password (or `password`)."""
    return valkey.Valkey(host="127.0.0.1", port=p.port, ssl=True, ssl_ca_certs=cluster.manifest["tls"]["ca"],
                         password=password or cluster.secrets.resp_password, socket_timeout=10, **kw)


async def _refused(coro, errors=None, subject=None):
    """The refusal's text when NATS refuses, None when the operation succeeds: an authorization error, or the
    server's permissions violation for `subject` (a denied publish gets no answer: the server tells the
    connection's error callback, which appends to `errors`), or else the request's own timeout. Ending on the
    violation instead of the timeout is what keeps a dozen refused operations from costing 2 s each."""
    seen = len(errors) if errors is not None else 0
    task = asyncio.ensure_future(coro)
    deadline = asyncio.get_running_loop().time() + 3.0
    try:
        while not task.done():
            if subject is not None:
                for text in errors[seen:]:      # (the client's text has the subject in lower case)
                    if "permissions violation" in text and ('"%s"' % subject).lower() in text.lower():
                        return text
            if asyncio.get_running_loop().time() >= deadline:
                raise asyncio.TimeoutError()
            await asyncio.wait({task}, timeout=0.01)
        task.result()
    except (nats.errors.Error, asyncio.TimeoutError, nats.errors.TimeoutError, OSError) as exc:
        return str(exc) or type(exc).__name__
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    return None


def test_nats_refuses_every_client_without_credentials(locked):
    urls = [u for u in locked.nats_servers.split(",") if u]
    ca = locked.manifest["tls"]["ca"]
    cert = locked.secrets.operator_cert()

    async def attempt(**kw):
        try:
            nc = await nats.connect(urls, allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=3, **kw)
        except Exception as exc:  # noqa: BLE001 - the refusal is what we want
            return "refused: %s" % (str(exc) or type(exc).__name__)
        await nc.close()
        return "connected"

    # no credentials, only the CA (what a client that can reach the port has): refused by mutual TLS
    assert run(attempt(tls=client_context(ca))).startswith("refused")
    # a certificate of the cluster's CA but no JWT: refused by operator mode
    assert run(attempt(tls=client_context(ca, cert["cert"], cert["key"]))).startswith("refused")
    # the operator's credentials without a certificate: refused by mutual TLS
    assert run(attempt(tls=client_context(ca), user_credentials=locked.secrets.operator_creds)).startswith("refused")
    # both: the operator is let in
    assert run(attempt(tls=client_context(ca, cert["cert"], cert["key"]),
                       user_credentials=locked.secrets.operator_creds)) == "connected"


def _node_connect(cluster, proc):
    """NATS as that node (its own credentials file and certificate): what a thief of one machine holds."""
    from durakv.cluster.natsnames import inbox_prefix
    creds = os.path.join(proc.dir, "cluster", "node.creds")
    tls = cluster.manifest["tls"]
    node_id = json.load(open(os.path.join(proc.dir, "cluster", "member.json")))   # noqa: SIM115 - read once
    assert node_id["shard"] == str(proc.shard)
    errors = []

    async def on_error(exc):
        errors.append(str(exc))

    async def go():
        nc = await nats.connect([u for u in cluster.nats_servers.split(",") if u], user_credentials=creds,
                                tls=client_context(tls["ca"], tls["cert"], tls["key"]), error_cb=on_error,
                                inbox_prefix=inbox_prefix(cluster.node_id_of(proc)), allow_reconnect=False)
        return nc
    return go, errors


def test_a_node_identity_cannot_touch_other_shards_or_the_topology(locked):
    replica = next(p for p in locked.replicas(0))
    connect, errors = _node_connect(locked, replica)

    def refused(coro, subject):
        return _refused(coro, errors, subject)

    async def go():
        nc = await connect()
        js = nc.jetstream(timeout=2.0)
        try:
            out = {}
            api = "$JS.API.STREAM."     # the subject each operation publishes to, named by its violation
            out["own stream info"] = await refused(js.stream_info("DURAKV_SHARD_0"), api + "INFO.DURAKV_SHARD_0")
            out["purge other shard"] = await refused(js.purge_stream("DURAKV_SHARD_1"), api + "PURGE.DURAKV_SHARD_1")
            out["delete own stream"] = await refused(js.delete_stream("DURAKV_SHARD_0"),
                                                     api + "DELETE.DURAKV_SHARD_0")
            out["delete other stream"] = await refused(js.delete_stream("DURAKV_SHARD_1"),
                                                       api + "DELETE.DURAKV_SHARD_1")
            out["delete a message"] = await refused(js.delete_msg("DURAKV_SHARD_0", 1),
                                                    api + "MSG.DELETE.DURAKV_SHARD_0")
            out["read other shard"] = await refused(js.get_msg("DURAKV_SHARD_1", seq=1),
                                                    api + "MSG.GET.DURAKV_SHARD_1")
            out["purge the coordination bucket"] = await refused(js.purge_stream("KV_DURAKV_LEASES"),
                                                                 api + "PURGE.KV_DURAKV_LEASES")
            out["purge other snapshots"] = await refused(js.purge_stream("OBJ_DURAKV_SNAPSHOTS_1"),
                                                         api + "PURGE.OBJ_DURAKV_SNAPSHOTS_1")
            out["write other journal"] = await refused(js.publish("durakv.shard.1.journal", b"*1\r\n$4\r\nPING\r\n",
                                                                  headers={EPOCH_HEADER: "99"}),
                                                       "durakv.shard.1.journal")
            kv = await js.key_value("DURAKV_LEASES")
            key = "$KV.DURAKV_LEASES."
            out["read topology"] = await refused(kv.get("topology"), key + "topology")
            out["write topology"] = await refused(kv.put("topology", b"{}"), key + "topology")
            out["write other lease"] = await refused(kv.put("lease.1", b'{"holder": "attacker"}'), key + "lease.1")
            out["write other settings"] = await refused(kv.put("settings.1", b"{}"), key + "settings.1")
            out["write other state"] = await refused(kv.put("state.1", b"{}"), key + "state.1")
            out["write cluster document"] = await refused(kv.put("cluster", b"{}"), key + "cluster")
            return out
        finally:
            await nc.close()
    out = run(go())
    assert out.pop("own stream info") is None, "a node reads its own shard's stream"
    assert out.pop("read topology") is None, "a node reads the topology"
    allowed = {k: v for k, v in out.items() if v is None}
    assert not allowed, "a node's identity was allowed: %s" % sorted(allowed)
    assert any("permissions violation" in e for e in errors), errors
    # and nothing changed: every shard still serves, the topology still routes every slot
    for shard in (0, 1):
        with _client(locked, locked.primary(shard)) as c:
            assert c.ping()
    with _client(locked, locked.primary(0)) as c:
        info = c.execute_command("CLUSTER", "INFO").decode()
    assert "cluster_state:ok" in info and "cluster_slots_assigned:16384" in info


def _rogue_cannot_join(cluster, tmp_path):
    """A nats-server with the cluster's name and routes to every server, but without the route password (nor a
    certificate of the cluster's CA): it tries, and no real server ever lists it as a route."""
    from durakv.cluster.nats_procs import http_json
    route_ports = [p.ports["cluster"] for p in cluster.nats]
    client, route, monitor = free_ports(3)
    conf = tmp_path / "rogue.conf"
    conf.write_text('server_name: "rogue"\nlisten: "127.0.0.1:%d"\nhttp: "127.0.0.1:%d"\njetstream { store_dir: "%s" }\n'
                    'cluster { name: "%s"\n  listen: "127.0.0.1:%d"\n  routes: [%s]\n}\n'
                    % (client, monitor, tmp_path / "js", "durakv-" + cluster.secrets.cluster_id[:12], route,
                       ", ".join('"nats-route://127.0.0.1:%d"' % p for p in route_ports)))
    log_path = tmp_path / "rogue.log"
    with open(log_path, "wb") as log:
        rogue = subprocess.Popen([nats_server_binary(), "-c", str(conf)], stdout=log, stderr=subprocess.STDOUT)
    try:
        def tried():
            with open(log_path, "rb") as f:
                return f.read().count(b"Route connection created") >= 2 * len(route_ports)
        wait_until(tried, 30, what="the rogue server trying every route")
        for p in cluster.nats:
            _status, routez = http_json(p.ports["monitor"], "/routez")
            names = {r.get("remote_name") for r in (routez or {}).get("routes") or []}
            assert "rogue" not in names, names
            assert len(names) == len(route_ports) - 1, names     # the real routes are all there
        _status, rogue_routes = http_json(monitor, "/routez")
        assert not (rogue_routes or {}).get("routes"), rogue_routes
    finally:
        rogue.kill()
        rogue.wait(10)


def test_a_rogue_nats_server_cannot_join_the_routes_with_tls(locked, tmp_path):
    _rogue_cannot_join(locked, tmp_path)


def test_a_rogue_nats_server_cannot_join_the_routes_without_tls(one_shard, tmp_path):
    """The finding: without --tls a rogue server joined the routes (and the quorum stayed raised after it
    left). Routes ask for the route password in every layout."""
    _rogue_cannot_join(one_shard, tmp_path)


def _key_of_shard(cluster, shard):
    """A key whose slot the shard owns."""
    from durakv.routing import key_slot
    node = cluster.primary(shard)
    with _client(cluster, node) as c:
        ranges = [(r[0], r[1]) for r in c.execute_command("CLUSTER", "SLOTS")
                  if any(n[1] == node.port for n in r[2:])]
    return next(k for k in ("k%d" % i for i in range(10000))
                if any(a <= key_slot(k.encode()) <= b for a, b in ranges))


def test_auth_is_cluster_wide_and_cluster_status_takes_credentials(locked):
    old = locked.secrets.resp_password
    new = "a-new-cluster-password"
    p0, p1 = locked.primary(0), locked.primary(1)
    key0 = _key_of_shard(locked, 0)
    try:
        with _client(locked, p0) as c:
            assert c.config_set("requirepass", new)

        def shard1_uses_the_new_one():
            try:
                with _client(locked, p1, password=new) as c:
                    return c.ping()
            except valkey.exceptions.AuthenticationError:
                return False
        wait_until(shard1_uses_the_new_one, 20, what="shard 1 asking for the password set on shard 0")
        with pytest.raises(valkey.exceptions.AuthenticationError):
            with _client(locked, p1) as c:     # the old password
                c.ping()
        # a user made on shard 1 exists on shard 0
        with _client(locked, p1, password=new) as c:
            c.execute_command("ACL", "SETUSER", "reader", "on", ">readerpw", "~*", "+@read")

        def reader_on_shard0():
            try:
                with valkey.Valkey(host="127.0.0.1", port=p0.port, ssl=True, username="reader", password="readerpw",
                                   ssl_ca_certs=locked.manifest["tls"]["ca"], socket_timeout=5) as c:
                    return c.get(key0) is None   # a read: the user's only right
            except valkey.exceptions.AuthenticationError:
                return False
        wait_until(reader_on_shard0, 20, what="shard 0 knowing the user made on shard 1")
        # status with the credentials, and a clear refusal without the right ones
        r = durakv_cli("cluster", "status", "--secrets", locked.manifest["secrets"], "--pass", new)
        assert r.returncode == 0, r.stderr
        assert "DURAKV_SHARD_0" in r.stdout and "DURAKV_SHARD_1" in r.stdout
        r = durakv_cli("cluster", "status", "--secrets", locked.manifest["secrets"], "--pass", "wrong")
        assert "WRONGPASS" in r.stdout + r.stderr or "invalid username-password" in r.stdout + r.stderr, r
        assert "Traceback" not in r.stderr
    finally:
        with _client(locked, p0, password=new) as c:
            c.config_set("requirepass", old)

        def back():
            try:
                with _client(locked, p1) as c:
                    return c.ping()
            except valkey.exceptions.AuthenticationError:
                return False
        wait_until(back, 20, what="the password restored on every shard")


@pytest.fixture
def one_shard(tmp_path):
    """A locked one-shard cluster (primary + two replicas), without TLS, for the tests that break it."""
    cluster = LocalCluster.up(tmp_path / "c", shards=1, replicas=2, password=None, timeout_s=120 * TIME_SCALE,
                             port_range=cluster_port_range())
    try:
        yield cluster
    finally:
        cluster.down()


def _publish_raw(cluster, proc, payload, epoch_header, expect_last=None):
    """Publishes one message to shard 0's journal as `proc` (a node of shard 0: the residual risk of a stolen
    node identity is writing its own shard's journal) and returns its stream sequence."""
    connect, _errors = _node_connect_plain(cluster, proc)

    async def go():
        nc = await connect()
        try:
            js = nc.jetstream(timeout=5.0)
            headers = {} if epoch_header is None else {EPOCH_HEADER: epoch_header}
            if expect_last is not None:
                headers[EXPECTED_LAST] = str(expect_last)
            ack = await js.publish("durakv.shard.0.journal", payload, headers=headers or None)
            return ack.seq
        finally:
            await nc.close()
    return run(go())


def _node_connect_plain(cluster, proc):
    from durakv.cluster.natsnames import inbox_prefix
    creds = os.path.join(proc.dir, "cluster", "node.creds")
    errors = []

    async def on_error(exc):
        errors.append(str(exc))

    async def go():
        return await nats.connect([u for u in cluster.nats_servers.split(",") if u], user_credentials=creds,
                                  error_cb=on_error, inbox_prefix=inbox_prefix(cluster.node_id_of(proc)),
                                  allow_reconnect=False)
    return go, errors


def _client_plain(cluster, p, **kw):
    return valkey.Valkey(host="127.0.0.1", port=p.port, password=cluster.secrets.resp_password, socket_timeout=10,
                         **kw)


def _info(cluster, p):
    with _client_plain(cluster, p) as c:
        return c.info("replication")


def _run_ids(cluster, names):
    out = {}
    for name in names:
        with _client_plain(cluster, cluster.get(name)) as cl:
            out[name] = cl.info("server")["run_id"]
    return out


def _stay_up(cluster, names, window_s=6.0):
    """Watches the nodes for a while (the finding was a restart every 7 s, by re-executing in place: same pid,
    new run_id): any run_id change fails at once."""
    first = _run_ids(cluster, names)
    deadline = time.monotonic() + window_s * TIME_SCALE
    while time.monotonic() < deadline:
        assert _run_ids(cluster, names) == first, "a node restarted"
        time.sleep(0.2)


def test_forged_and_malformed_entries_are_never_applied_and_replicas_stop_without_looping(one_shard):
    c = one_shard
    primary = c.primary(0)
    replicas = c.replicas(0)
    with _client_plain(c, primary) as cl:
        cl.set("before", "1")
    epoch = _info(c, primary)["durakv_epoch"]
    wait_until(lambda: all(_info(c, r).get("journal_applied_index") == _info(c, primary).get("journal_applied_index")
                           for r in replicas), 30, what="replicas caught up")

    # An entry of an older epoch (what a deposed primary's late append looks like) is skipped by every reader.
    stale = b"*3\r\n$3\r\nSET\r\n$5\r\nstale\r\n$5\r\nowned\r\n"
    _publish_raw(c, replicas[0], stale, str(max(1, epoch - 1)) if epoch > 1 else "1")
    # An entry that announces a newer epoch without its marker: no primary wrote it.
    forged = b"*3\r\n$3\r\nSET\r\n$8\r\ninjected\r\n$5\r\nowned\r\n"
    _publish_raw(c, replicas[0], forged, str(epoch + 5))
    pids = {r.name: r.pid for r in replicas}

    def stopped():
        return all(_info(c, r).get("replica_apply_stopped") for r in replicas)
    wait_until(stopped, 30, what="every replica reporting that it stopped applying")
    for r in replicas:
        info = _info(c, r)
        assert "newer than the newest marker" in info["replica_apply_stopped"], info
        assert info["master_link_status"] == "down"
        with _client_plain(c, r) as cl:
            with pytest.raises(valkey.exceptions.ResponseError, match="stopped applying"):
                cl.execute_command("READONLY")
                cl.get("injected")
    # no node serves the forged value, and none restarts in a loop: same pids, one critical line each
    _stay_up(c, [r.name for r in replicas])
    for r in c.reload().nodes:
        if r.name in pids:
            log = open(r.log, encoding="utf-8", errors="replace").read()   # noqa: SIM115
            assert log.count("C durakv.replication: stopped applying the journal at entry") == 1, log[-2000:]
    for r in c.nodes:
        try:
            with _client_plain(c, r) as cl:
                assert cl.get("injected") is None
        except valkey.exceptions.ResponseError:
            pass   # refused outright (a stopped replica, or a primary fenced by the forged epoch)


def test_a_malformed_entry_stops_replicas_once_instead_of_a_restart_loop(one_shard):
    c = one_shard
    primary = c.primary(0)
    replicas = c.replicas(0)
    epoch = _info(c, primary)["durakv_epoch"]
    # SET with one argument, under the current epoch: it does not apply (the finding: replicas restarted 6 times
    # in 45 s, without end)
    _publish_raw(c, replicas[1], b"*2\r\n$3\r\nSET\r\n$10\r\nonlyonearg\r\n", str(epoch))
    pids = {r.name: r.pid for r in replicas}
    wait_until(lambda: all(_info(c, r).get("replica_apply_stopped") for r in replicas), 30,
               what="replicas stopping at the malformed entry")
    _stay_up(c, [r.name for r in replicas])
    # and none was restarted from outside either (a supervisor's restart is a new pid)
    assert {r.name: r.pid for r in c.reload().nodes if r.name in pids} == pids
    for r in replicas:
        assert "entry" in _info(c, r)["replica_apply_stopped"]



def test_a_shard_added_to_a_protected_cluster_is_protected(locked):
    """The finding: `cluster add-shard` on a protected cluster created an open shard that took 5,461 slots."""
    name = locked.add_shard(replicas=1, timeout_s=120 * TIME_SCALE)
    new = [p for p in locked.reload().nodes if str(p.shard) == name]
    assert len(new) == 2
    for p in new:
        with pytest.raises(valkey.exceptions.AuthenticationError):
            with valkey.Valkey(host="127.0.0.1", port=p.port, ssl=True, ssl_ca_certs=locked.manifest["tls"]["ca"],
                               socket_timeout=10) as c:
                c.ping()
        with _client(locked, p) as c:
            assert c.ping()


def test_a_node_of_another_format_refuses_to_join_and_to_start(one_shard, tmp_path, server_factory):
    """A journal or topology format change has a version and a refusal message: the cluster document says the
    format, a node of another format is refused by DURAKV JOIN and refuses to start in that cluster."""
    c = one_shard
    # DURAKV JOIN of a document of another format, to an unassigned node
    node = server_factory("--journal-backend", "jetstream", "--cluster-enabled", "yes")
    with node.client() as cl:
        ident = dict(zip(*[iter(cl.execute_command("DURAKV", "IDENTITY"))] * 2))
        assert ident[b"state"] == b"unassigned"
        doc = {"format": 3, "cluster_id": c.secrets.cluster_id, "shard": "0", "nats": ["nats://127.0.0.1:1"],
               "jwt": c.secrets.node_jwt(ident[b"nkey"].decode(), ident[b"node-id"].decode(), "0")}
        with pytest.raises(valkey.exceptions.ResponseError, match="format 3 and this node .durakv format 2."):
            cl.execute_command("DURAKV", "JOIN", json.dumps(doc))
        assert dict(zip(*[iter(cl.execute_command("DURAKV", "IDENTITY"))] * 2))[b"state"] == b"unassigned"

    # the coordination store says format 3: a member restarting refuses to run by it, and names both formats
    from durakv.cluster.settings import ClusterDocument

    async def bump(store):
        doc, rev = await store.get_cluster()
        await store.put_cluster(ClusterDocument(doc.cluster_id, 3), rev)
    c._store_call(bump)
    replica = c.replicas(0)[0]
    c.stop(replica.name)
    c.start_nodes([replica.name], wait=False)

    def refused():
        with open(replica.log, encoding="utf-8", errors="replace") as f:
            return "the cluster is of format 3 and this node of format 2" in f.read()
    wait_until(refused, 60, what="the restarted node refusing the cluster's format")
