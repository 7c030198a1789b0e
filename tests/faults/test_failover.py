"""Multi-AZ durability on a real three-node NATS cluster with real durakv processes: kill -9 of the primary,
of the JetStream stream leader and of a whole AZ lose no acknowledged sync write; a paused primary is
fenced; planned failover under load has no errors; async loses at most its lag; a replica back from an
outage catches up from snapshot + journal.

The writers, the read-back and the check are the product's (durakv verify's workload and acked-writes
checker): cluster clients that record every write in a history."""

import asyncio
import signal
import threading
import time

import valkey

from conftest import wait_get_refused, wait_new_primary, wait_until
from durakv.journal.base import EpochFilter
from durakv.journal.codec import decode_payload
from durakv.journal.jetstream import JetStreamJournal
from durakv.tools.verify import Recorder, check_acked_writes
from durakv.tools.verify.acked import write_ops
from durakv.tools.verify.workload import Target, read_back, replicas_missing, start_writers, stop_all

STREAM = "DURAKV_SHARD_0"
REFUSALS = ("READONLY", "MOVED", "CLUSTERDOWN", "TRYAGAIN", "LOADING")


class Writers:
    """count cluster-client writers of unique keys on the cluster, recording into one history."""

    def __init__(self, cluster, count):
        self.cluster = cluster
        self.target = Target.from_cluster(cluster)
        self.rec = Recorder()
        self.stop = threading.Event()
        self.threads = start_writers(self.target, self.rec, count, self.stop, timeout_s=5.0, max_s=120)

    @property
    def acked(self):
        return sum(w.acked for w in self.threads)

    def wait_acked(self, n, timeout_s=30):
        wait_until(lambda: self.acked >= n, timeout_s, what=f"{n} acknowledged writes")

    def finish(self, extra=200, timeout_s=40):
        base = self.acked
        self.wait_acked(base + extra, timeout_s)
        stop_all(self.threads, self.stop)

    def check(self, down=()):
        """The acked-writes check on the primaries, then every replica (but those `down`) converging to the
        same values."""
        hist = self.rec.history()
        final = read_back(self.target, [o.key for o in write_ops(hist)])
        res = check_acked_writes(hist, final)
        assert res.lost == [], f"{len(res.lost)} of {res.acked} acknowledged writes lost: {res.lost[:5]}"
        assert res.unexpected == []
        expected = {o.key: o.value for o in write_ops(hist) if o.type == "ok"}
        behind = replicas_missing(self.target, expected, timeout_s=20,
                                  skip={f"127.0.0.1:{self.cluster.get(n).port}" for n in down})
        assert behind and not any(behind.values()), f"replicas missing acknowledged writes: {behind}"
        return res

    def errors(self):
        return [o.error for o in self.rec.history().operations() if o.type == "fail"]


def readonly(client):
    """READONLY on a single-connection client, so that a cluster-mode replica serves its reads."""
    try:
        client.execute_command("READONLY")
    except valkey.exceptions.ResponseError:
        pass


def test_kill9_primary_under_sync_writers(local_cluster):
    cluster = local_cluster(durability="sync")
    old = cluster.primary(0)
    w = Writers(cluster, 8)
    w.wait_acked(1500)
    cluster.kill(old.name, signal.SIGKILL)
    new, seconds = wait_new_primary(cluster, old.name)
    print(f"unplanned failover: {old.name} -> {new.name} in {seconds:.2f}s")
    w.finish()
    w.check(down=[old.name])
    # Refusals only (or a connection refused by the killed node): nothing the server accepted and dropped.
    assert [e for e in w.errors() if not e.startswith(REFUSALS) and "connecting to" not in e] == []
    # The old primary comes back as a replica.
    cluster.restart(old.name)
    wait_until(lambda: cluster.get(old.name).role() == "slave", 30, what="old primary rejoined as replica")


def test_kill9_of_the_stream_leader(local_cluster):
    cluster = local_cluster(durability="sync")
    w = Writers(cluster, 8)
    w.wait_acked(1000)
    leader = cluster.nats_view.leader_of_stream(STREAM)
    assert leader is not None
    cluster.kill(leader, signal.SIGKILL)
    w.finish(extra=300, timeout_s=60)
    w.check()
    # Appends in flight when the leader died were sent again: none may be applied twice.
    survivors = [p.entry["ports"]["client"] for p in cluster.nats if p.name != leader]
    applied = _applied_set_keys(["nats://127.0.0.1:%d" % port for port in survivors], cluster.secrets.operator_creds)
    assert len(applied) == len(set(applied)), "a journal entry was applied twice"
    assert {o.key for o in write_ops(w.rec.history()) if o.type == "ok"} <= set(applied)
    cluster.restart(leader)


def _applied_set_keys(servers, creds, timeout_s=60.0):
    """The keys of every SET a replica applies from the shard's stream (EpochFilter, in order). Read again
    while the stream has no leader yet (it just lost one)."""
    async def read_once():
        j = JetStreamJournal(servers, "0", request_timeout_s=2.0, creds=creds)
        try:
            await j.open()
            f = EpochFilter()
            return [argv[1].decode() async for e in j.read(0) if f.accept(e)
                    for _db, argv in decode_payload(e.payload) if argv[0].upper() == b"SET"]
        finally:
            await j.close()

    async def read():
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return await read_once()
            except Exception:  # noqa: BLE001 - no stream leader yet: poll until the deadline
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
    return asyncio.run(asyncio.wait_for(read(), timeout_s + 30))


def test_whole_az_power_loss(local_cluster):
    cluster = local_cluster(durability="sync")
    primary = cluster.primary(0)
    az = primary.az  # the AZ of the primary (and its NATS node): the worst single-AZ loss
    w = Writers(cluster, 8)
    w.wait_acked(1000)
    cluster.stop_nodes([p.name for p in cluster.az_processes(az)], sig=signal.SIGKILL)
    new, seconds = wait_new_primary(cluster, primary.name, timeout_s=40)
    print(f"AZ {az} lost: new primary {new.name} ({new.az}) in {seconds:.2f}s")
    assert new.az != az
    w.finish(extra=300, timeout_s=60)
    w.check(down=[primary.name])


def test_paused_primary_is_fenced(local_cluster):
    cluster = local_cluster(durability="sync")
    old = cluster.primary(0)
    c_old = valkey.Valkey(host="127.0.0.1", port=old.port, socket_timeout=30)
    c_old.set("before", "1")
    cluster.pause(old.name)
    # Requests sent to the paused primary now sit in its socket buffer, pipelined.
    results = {}

    def send_to_old():
        p = c_old.pipeline(transaction=False)
        for i in range(50):
            p.set(f"{{stale}}:{i}", "x")
        try:
            results["replies"] = p.execute(raise_on_error=False)
        except (valkey.exceptions.ConnectionError, valkey.exceptions.TimeoutError) as exc:
            results["error"] = exc

    sender = threading.Thread(target=send_to_old)
    sender.start()
    new, seconds = wait_new_primary(cluster, old.name, timeout_s=30)
    with valkey.Valkey(host="127.0.0.1", port=new.port, socket_timeout=10) as c_new:
        c_new.set("after-takeover", "1")
        cluster.resume(old.name)
        sender.join(40)
        replies = results.get("replies") or []
        acknowledged = [r for r in replies if r is True]
        assert acknowledged == [], "the deposed primary acknowledged writes after the takeover"
        assert c_new.exists(*[f"{{stale}}:{i}" for i in range(50)]) == 0
        assert c_new.get("before") == b"1" and c_new.get("after-takeover") == b"1"
    # The deposed primary rejoins as a replica and converges to the new primary's data.
    wait_until(lambda: cluster.get(old.name).role() == "slave", 30, what="old primary is a replica")
    with valkey.Valkey(host="127.0.0.1", port=old.port, socket_timeout=5, single_connection_client=True) as c:
        readonly(c)
        wait_until(lambda: c.get("after-takeover") == b"1", 20, what="old primary follows the new one")
        assert c.exists(*[f"{{stale}}:{i}" for i in range(50)]) == 0
    c_old.close()


def test_planned_failover_under_load_without_errors(local_cluster):
    cluster = local_cluster(durability="sync")
    old = cluster.primary(0)
    w = Writers(cluster, 8)
    w.wait_acked(800)
    target = cluster.replicas(0)[0]
    t0 = time.monotonic()
    with valkey.Valkey(host="127.0.0.1", port=target.port, socket_timeout=10) as c:
        assert c.execute_command("CLUSTER", "FAILOVER")
    wait_until(lambda: target.role() == "master", 15, interval_s=0.01, what="target promoted")
    print(f"planned failover {old.name} -> {target.name}: {time.monotonic() - t0:.2f}s")
    w.finish()
    w.check()
    # No application-visible error: the old primary held the writes while it handed over, then answered MOVED
    # to the new primary, which the cluster client follows by itself.
    assert w.errors() == []
    assert [o for o in w.rec.history().operations() if o.type == "info"] == []
    assert old.role() == "slave"


def test_async_loss_is_bounded_by_lag(local_cluster):
    cluster = local_cluster(durability="async")
    old = cluster.primary(0)
    w = Writers(cluster, 8)
    w.wait_acked(1500)
    lag_ms = max(old.info("durability")["durability"]["durability_lag_ms"] for _ in range(5))
    cluster.kill(old.name, signal.SIGKILL)
    killed_at_ns = time.monotonic_ns()
    wait_new_primary(cluster, old.name)
    stop_all(w.threads, w.stop)
    hist = w.rec.history()
    res = check_acked_writes(hist, read_back(w.target, [o.key for o in write_ops(hist)]))
    for lost in res.lost:
        assert killed_at_ns - lost.acked_ns <= 10e9, f"{lost.key} lost though acknowledged long before the kill"
    print(f"async: {len(res.lost)} of {res.acked} acknowledged writes lost; lag seen {lag_ms} ms")


def test_replica_catches_up_from_snapshot_and_journal(local_cluster):
    cluster = local_cluster(durability="sync")
    primary = cluster.primary(0)
    replica, other = cluster.replicas(0)[:2]
    cluster.kill(replica.name, signal.SIGKILL)
    with valkey.Valkey(host="127.0.0.1", port=primary.port, socket_timeout=10) as c:
        for i in range(0, 3000, 100):
            c.mset({f"{{k}}{j}": j for j in range(i, i + 100)})   # one hash tag: one slot, as cluster mode wants
        with valkey.Valkey(host="127.0.0.1", port=other.port, socket_timeout=30, single_connection_client=True) as r:
            readonly(r)   # cluster mode: a replica serves reads to clients that ask for it
            wait_until(lambda: r.get("{k}2999") == b"2999", 20, what="other replica applied")
            assert r.save()  # a replica writes the snapshot to the object store
            snap_index = r.info("durability")["last_snapshot_index"]
            assert snap_index > 0
        for i in range(3000, 3500):
            c.set(f"k{i}", i)
    cluster.restart(replica.name)
    with valkey.Valkey(host="127.0.0.1", port=replica.port, socket_timeout=10, single_connection_client=True) as r:
        readonly(r)
        wait_until(lambda: r.get("k3499") == b"3499", 30,
                   what="restarted replica caught up")
        assert r.get("{k}0") == b"0" and r.dbsize() >= 3500
    log = open(cluster.get(replica.name).log).read()
    assert "loaded snapshot of shard 0" in log


LEASE = "CLUSTERDOWN The primary's lease expired; it is not serving until it is renewed"


def test_primary_without_a_valid_lease_refuses_scripts_and_transactions(local_cluster):
    """The lease rule on every command path, with real processes: when the primary cannot renew its lease
    (all three NATS servers paused), a plain GET, EVAL and FCALL (flagged `stale` in Valkey) and EXEC are all
    refused, a script that writes changes nothing, and everything serves again once it renews."""
    cluster = local_cluster(durability="sync", replicas=0)
    primary = cluster.primary(0)
    c = valkey.Valkey(host="127.0.0.1", port=primary.port, socket_timeout=10)
    c.set("k", "v")
    c.function_load("#!lua name=lib\nserver.register_function('get', function(keys) "
                    "return server.call('GET', keys[1]) end)")
    for n in cluster.nats:
        cluster.pause(n.name)
    try:
        wait_get_refused(c, "k", LEASE, 15, what="the lease to lapse")
        for call in (lambda: c.eval("return server.call('GET',KEYS[1])", 1, "k"),
                     lambda: c.eval("return server.call('SET',KEYS[1],'script')", 1, "k"),
                     lambda: c.fcall("get", 1, "k")):
            try:
                call()
                raise AssertionError("answered without a lease")
            except valkey.exceptions.ResponseError as exc:
                assert str(exc) == LEASE
        raw = c.connection_pool.get_connection("x")
        raw.send_command("MULTI")
        assert raw.read_response() == b"OK"
        raw.send_command("GET", "k")
        try:
            raw.read_response()
            raise AssertionError("queued without a lease")
        except valkey.exceptions.ResponseError as exc:
            assert str(exc) == LEASE
        raw.send_command("EXEC")
        try:
            raw.read_response()
            raise AssertionError("EXEC ran without a lease")
        except valkey.exceptions.ResponseError as exc:
            assert str(exc) == "Transaction discarded because of: " + LEASE
        c.connection_pool.release(raw)
        assert c.ping() is True   # no data touched: answered
    finally:
        for n in cluster.nats:
            cluster.resume(n.name)

    def serving():
        try:
            return c.get("k")
        except valkey.exceptions.ResponseError:
            return None
    wait_until(lambda: serving() is not None, 30, what="the primary to renew and serve again")
    assert c.get("k") == b"v"   # the refused script wrote nothing
    c.close()


def test_losing_a_replicas_az_that_holds_the_nats_leaders_deposes_nobody(local_cluster):
    """Issue 11 item 3. The journal stream's and the lease bucket's Raft leaders sit in a replica's AZ; that AZ
    loses power. The elections that follow (4-9 s) outlast the 2 s lease: the primary stops serving while its
    lease is out, but no replica takes the lease, the primary is never re-executed, and a client connected to
    it before the cut keeps its connection and is served again after it."""
    cluster = local_cluster(durability="sync")
    primary = cluster.primary(0)
    victim = next(p for p in cluster.replicas(0) if p.az != primary.az)
    nats_victim = next(p for p in cluster.nats if p.az == victim.az)
    for stream in (STREAM, "KV_DURAKV_LEASES"):
        assert cluster.nats_view.move_stream_leader(stream, nats_victim.name) == nats_victim.name

    def node_state(p):
        info = p.info("replication", "server", timeout_s=5)
        repl = info["replication"]   # run_id changes when a process re-executes itself
        return repl["role"], int(repl["durakv_epoch"]), int(repl["promotions"]), info["server"]["run_id"]
    before = {p.name: node_state(p) for p in cluster.nodes}
    client = valkey.Valkey(host="127.0.0.1", port=primary.port, socket_timeout=10)
    client_id = client.client_id()
    assert client.set("before-cut", "1")
    results = []                     # ("ok" | error text, monotonic time)
    stop = threading.Event()

    def write_loop():
        i = 0
        deadline = time.monotonic() + 90
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                client.set(f"cut:{i}", i)
                results.append(("ok", time.monotonic()))
            except valkey.exceptions.ResponseError as exc:
                results.append((str(exc), time.monotonic()))
                time.sleep(0.01)
            except (valkey.exceptions.ConnectionError, valkey.exceptions.TimeoutError) as exc:
                results.append((f"connection: {exc!r}", time.monotonic()))
                return
            i += 1
    writer = threading.Thread(target=write_loop, daemon=True)
    writer.start()
    wait_until(lambda: len(results) >= 50, 20, what="writes before the cut")
    cut_at = time.monotonic()
    for p in (victim, nats_victim):
        assert cluster.kill(p.name, signal.SIGKILL)
    # Through both elections and well past the lease: new leaders elected outside the lost AZ, and the primary
    # acknowledging writes again for a couple of seconds.
    elected = {}

    def healed():
        leaders = [cluster.nats_view.leader_of_stream(s) for s in (STREAM, "KV_DURAKV_LEASES")]
        for s, leader in zip((STREAM, "KV_DURAKV_LEASES"), leaders):
            if leader not in (None, nats_victim.name):
                elected.setdefault(s, time.monotonic() - cut_at)
        if None in leaders or nats_victim.name in leaders:
            return False
        oks = [t for r, t in results if r == "ok" and t > cut_at]
        return len(oks) > 100 and oks[-1] - oks[-101] < 3.0 and time.monotonic() - cut_at > 12
    wait_until(healed, 60, what="NATS leaders re-elected and the primary serving writes again")
    stop.set()
    writer.join(15)
    errors = [r for r, t in results if r != "ok"]
    assert not [e for e in errors if e.startswith("connection")], errors[-3:]
    assert all(e.startswith("CLUSTERDOWN") for e in errors), sorted(set(errors))
    after = {p.name: node_state(p) for p in cluster.nodes if p.name != victim.name}
    assert after == {k: v for k, v in before.items() if k != victim.name}, (before, after)
    assert client.client_id() == client_id     # the same connection, on the same (not re-executed) process
    print(f"AZ {victim.az} lost with the NATS leaders: new leaders after "
          + ", ".join(f"{s} {t:.1f}s" for s, t in elected.items())
          + f"; {len(errors)} writes refused while the lease was out, no failover, no dropped connection")
    client.close()
