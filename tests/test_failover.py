"""Multi-AZ durability on a real three-node NATS cluster with real durakv processes: kill -9 of the primary,
of the JetStream stream leader and of a whole AZ lose no acknowledged sync write; a paused primary is
fenced; planned failover under load has no errors; async loses at most its lag; a replica back from an
outage catches up from snapshot + journal."""

import asyncio
import signal
import threading
import time

import valkey

from durakv.journal.base import EpochFilter
from durakv.journal.codec import decode_payload
from durakv.journal.jetstream import JetStreamJournal

from cluster_util import acked_count, missing_acked, readonly, start_writers, wait_new_primary
from conftest import wait_until

STREAM = "DURAKV_SHARD_0"


def _run_writers_until(cluster, count, target, stop, timeout_s=30):
    writers = start_writers(cluster, count, stop, max_seconds=90)
    wait_until(lambda: acked_count(writers) >= target, timeout_s, what=f"{target} acknowledged writes")
    return writers


def _finish(writers, stop, extra=200, timeout_s=40):
    base = acked_count(writers)
    wait_until(lambda: acked_count(writers) >= base + extra, timeout_s, what="writes after the fault")
    stop.set()
    for w in writers:
        w.join(15)


def _check_no_loss(cluster, writers):
    primary = cluster.primary(0)
    assert primary is not None
    missing = missing_acked(primary.port, writers)
    assert missing == [], f"{len(missing)} of {acked_count(writers)} acknowledged writes lost"
    for replica in cluster.replicas(0):
        wait_until(lambda r=replica: not missing_acked(r.port, writers), 20, what=f"{replica.name} caught up")


def test_kill9_primary_under_sync_writers(local_cluster):
    cluster = local_cluster(durability="sync")
    old = cluster.primary(0)
    stop = threading.Event()
    writers = _run_writers_until(cluster, 8, 1500, stop)
    cluster.kill(old.name, signal.SIGKILL)
    new, seconds = wait_new_primary(cluster, old.name)
    print(f"unplanned failover: {old.name} -> {new.name} in {seconds:.2f}s")
    _finish(writers, stop)
    _check_no_loss(cluster, writers)
    assert not [e for w in writers for _k, e in w.failed if not e.startswith(("READONLY", "MOVED", "CLUSTERDOWN"))]
    # The old primary comes back as a replica.
    cluster.restart(old.name)
    wait_until(lambda: cluster.get(old.name).role() == "slave", 30, what="old primary rejoined as replica")


def test_kill9_of_the_stream_leader(local_cluster):
    cluster = local_cluster(durability="sync")
    stop = threading.Event()
    writers = _run_writers_until(cluster, 8, 1000, stop)
    leader = cluster.nats_leader_of_stream(STREAM)
    assert leader is not None
    cluster.kill(leader, signal.SIGKILL)
    _finish(writers, stop, extra=300, timeout_s=60)
    _check_no_loss(cluster, writers)
    # Appends in flight when the leader died were sent again: none may be applied twice.
    survivors = [p.entry["ports"]["client"] for p in cluster.nats if p.name != leader]
    applied = _applied_set_keys(["nats://127.0.0.1:%d" % port for port in survivors])
    assert len(applied) == len(set(applied)), "a journal entry was applied twice"
    assert set(k for w in writers for k in w.acked) <= set(applied)
    cluster.restart(leader)


def _applied_set_keys(servers, timeout_s=60.0):
    """The keys of every SET a replica applies from the shard's stream (EpochFilter, in order). Read again
    while the stream has no leader yet (it just lost one)."""
    async def read_once():
        j = JetStreamJournal(servers, "0", request_timeout_s=2.0)
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
    stop = threading.Event()
    writers = _run_writers_until(cluster, 8, 1000, stop)
    for p in cluster.az_processes(az):
        cluster.kill(p.name, signal.SIGKILL)
    new, seconds = wait_new_primary(cluster, primary.name, timeout_s=40)
    print(f"AZ {az} lost: new primary {new.name} ({new.az}) in {seconds:.2f}s")
    assert new.az != az
    _finish(writers, stop, extra=300, timeout_s=60)
    _check_no_loss(cluster, writers)


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
    stop = threading.Event()
    writers = _run_writers_until(cluster, 8, 800, stop)
    target = cluster.replicas(0)[0]
    t0 = time.monotonic()
    with valkey.Valkey(host="127.0.0.1", port=target.port, socket_timeout=10) as c:
        assert c.execute_command("CLUSTER", "FAILOVER")
    wait_until(lambda: target.role() == "master", 15, interval_s=0.01, what="target promoted")
    print(f"planned failover {old.name} -> {target.name}: {time.monotonic() - t0:.2f}s")
    _finish(writers, stop)
    _check_no_loss(cluster, writers)
    # No application-visible error: refusals were redirects (READONLY while the old primary hands over, MOVED
    # once the topology names the new one) that the writers retried.
    unexpected = [e for w in writers for _k, e in w.failed if not e.startswith(("READONLY", "MOVED"))]
    assert unexpected == []
    assert old.role() == "slave"


def test_async_loss_is_bounded_by_lag(local_cluster):
    cluster = local_cluster(durability="async")
    old = cluster.primary(0)
    stop = threading.Event()
    writers = _run_writers_until(cluster, 8, 1500, stop)
    lag_ms = max(old.info("durability")["durability"]["durability_lag_ms"] for _ in range(5))
    cluster.kill(old.name, signal.SIGKILL)
    killed_at = time.monotonic()
    wait_new_primary(cluster, old.name)
    stop.set()
    for w in writers:
        w.join(15)
    primary = cluster.primary(0)
    missing = missing_acked(primary.port, writers)
    for key, (acked_at, _port) in missing:
        assert killed_at - acked_at <= 10.0, f"{key} lost though acknowledged {killed_at - acked_at:.1f}s before"
    print(f"async: {len(missing)} of {acked_count(writers)} acknowledged writes lost; lag seen {lag_ms} ms")


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
        def refused():
            try:
                c.get("k")
                return False
            except valkey.exceptions.ResponseError as exc:
                return str(exc) == LEASE
        wait_until(refused, 15, what="the lease to lapse")
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
