"""Snapshot retention in the JetStream object store: a replica stores a snapshot every
replica-snapshot-interval-ms; after many of them the bucket holds only the newest SNAPSHOTS_KEPT of the shard,
and the leftovers of earlier runs and crashes (older snapshots, tombstones of deleted ones, chunks of a put that
died before its meta message) are gone from the bucket's stream too, not only hidden. INFO reports the size."""

import asyncio
import base64
import threading
import time

import valkey

from conftest import scaled, wait_until
from durakv.cluster import store as store_module
from durakv.cluster.natsnames import snapshot_bucket
from durakv.cluster.store import NatsStore

SNAPSHOTS_KEPT = getattr(store_module, "SNAPSHOTS_KEPT", 2)   # (main before retention: 2, in node.py)
BUCKET = snapshot_bucket("0")      # one bucket per shard
STREAM = "OBJ_" + BUCKET


def _repl(node):
    return node.info("replication")["replication"]


def _snapshots_logged(nodes):
    """Snapshots the nodes say they stored (their logs: a count that does not depend on the INFO fields tested).
    Only a replica stores one; which node that is can change if the primary is starved past its lease."""
    count = 0
    for node in nodes:
        with open(node.entry["log"], errors="replace") as f:
            count += sum(1 for line in f if "snapshot of shard 0 at index" in line and "stored" in line)
    return count


def _on_store(cluster, fn):
    async def go():
        nc = await cluster.nats_connect()
        try:
            store = await NatsStore(nc).open()
            return await fn(store, nc.jetstream(timeout=10.0))
        finally:
            await nc.close()
    return asyncio.run(go())


async def _leave_leftovers(store, js):
    """What earlier runs and crashes leave: old snapshots of this shard, the tombstone of a snapshot deleted the
    way nats-py deletes (meta message kept, marked deleted), and chunks whose put never wrote its meta."""
    for index in (1, 2, 3):
        await store.put_snapshot("0", index, 1, b"old run %d " % index * 1000)
    obs = await store._bucket("0")
    await obs.put("00000000000000000005", b"x" * 300000)
    await obs.delete("00000000000000000005")
    for i in range(3):
        await js.publish("$O.%s.C.leftover-of-a-crashed-put" % BUCKET, b"c" * 1000 + b"%d" % i)


async def _bucket(store, js):
    objects = await (await store._bucket("0")).list(ignore_deletes=False)
    info = await js.stream_info(STREAM, subjects_filter="$O.%s.>" % BUCKET)
    state = (await js.stream_info(STREAM)).state
    return ([(o.name, bool(o.deleted), o.nuid, o.chunks) for o in objects], dict(info.state.subjects or {}),
            state.messages, state.bytes)


def test_the_store_keeps_only_the_newest_snapshots_and_drops_leftovers(local_cluster):
    cluster = local_cluster(shards=1, replicas=1, durability="sync",
                            extra_server_args=("--replica-snapshot-interval-ms", "300"),
                            env={"DURAKV_SNAPSHOT_ORPHAN_AGE_MS": "1000"})
    # An earlier run's leftovers are older than anything this run's replica will snapshot, as real ones are: the
    # replica applies past them first. (Put at the very start, a loaded replica's first snapshot could land below
    # them, at index 1, where no real older snapshot can be.)
    with valkey.Valkey(port=cluster.primary(0).port, socket_timeout=scaled(10)) as c:
        for i in range(8):
            c.set("warm%d" % i, "x")
    replica = cluster.replicas(0)[0]
    wait_until(lambda: _repl(replica)["journal_applied_index"] >= 8, 30, what="the replica applying the warm-up")
    _on_store(cluster, _leave_leftovers)
    nodes = cluster.shard_nodes(0)
    stop = threading.Event()
    write_errors = []

    def write():
        # a new journal index between snapshots, so that every interval stores one. A write that stalls or fails
        # (a loaded machine can starve the primary past its lease, and the other node takes over) is not what
        # this test checks: the writer reconnects to whichever node is primary now and goes on.
        i = 0
        while not stop.is_set():
            primary = cluster.primary(0)
            if primary is None:
                stop.wait(0.1)
                continue
            try:
                with valkey.Valkey(port=primary.port, socket_timeout=scaled(10)) as c:
                    while not stop.is_set():
                        c.set(f"k{i % 500}", "v" * 200)
                        i += 1
                        time.sleep(0.01)
            except valkey.exceptions.ValkeyError as exc:
                write_errors.append(repr(exc))
    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        wait_until(lambda: _snapshots_logged(nodes) >= 8, 90, interval_s=0.2,
                   what="8 snapshots stored by the shard's replica")
    finally:
        stop.set()
        writer.join(scaled(30))
    # one more snapshot after the writes stopped, and after the leftover chunks passed the orphan age
    stored = _snapshots_logged(nodes)

    def one_more_write():
        with valkey.Valkey(port=cluster.primary(0).port, socket_timeout=scaled(10)) as c:
            return c.set("last", "write")
    wait_until(one_more_write, 30, interval_s=0.1, what="a write after the writer stopped")
    wait_until(lambda: _snapshots_logged(nodes) > stored, 30, interval_s=0.1,
               what="a snapshot after the writes stopped")
    seen = {}

    def only_the_kept_ones():
        # polled: a snapshot the replica is storing right now has chunks before its meta message
        objects, subjects, messages, size = _on_store(cluster, _bucket)
        live = [(name, nuid, chunks) for name, deleted, nuid, chunks in objects if not deleted]
        wanted = {"$O.%s.C.%s" % (BUCKET, nuid): chunks for _name, nuid, chunks in live}
        wanted.update({"$O.%s.M.%s" % (BUCKET, base64.urlsafe_b64encode(name.encode()).decode()): 1
                       for name, _n, _c in live})
        seen.update(objects=objects, live=live, subjects=subjects, wanted=wanted, messages=messages, size=size)
        return subjects == wanted and messages == sum(wanted.values())
    try:
        wait_until(only_the_kept_ones, 30, interval_s=0.3, what="the bucket's stream holding only kept snapshots")
    except TimeoutError:
        raise AssertionError("the stream holds more than the kept snapshots: %r" % (seen,)) from None
    objects, live = seen["objects"], seen["live"]
    assert [name for name, deleted, _n, _c in objects if deleted] == []        # no tombstones left
    assert len(live) <= SNAPSHOTS_KEPT and all(name.isdigit() for name, _n, _c in live), objects
    assert all(int(name) > 5 for name, _n, _c in live), objects   # the old run's are gone
    infos = [_repl(node) for node in nodes]
    info = next(i for i in infos if i["role"] != "master")
    assert sum(i.get("snapshots_stored", 0) for i in infos) >= 9, infos
    assert 1 <= info["snapshot_store_shard_count"] <= SNAPSHOTS_KEPT
    assert 1 <= info["snapshot_store_count"] <= SNAPSHOTS_KEPT
    assert 0 < info["snapshot_store_bytes"] and info["snapshot_store_messages"] >= 2
    print(f"after {info['snapshots_stored']} snapshots: {len(live)} kept, {seen['messages']} messages, "
          f"{seen['size']} bytes")


async def _put_foreign(store, _js):
    """Snapshots of an earlier shard 0 whose stream was created again: indexes far past this journal's end."""
    for index in (1000000, 1000001):
        await store.put_snapshot("0", index, 1, b"an earlier shard's snapshot %d " % index * 100)


def test_snapshots_past_the_journals_end_are_dropped_not_kept(local_cluster):
    """The finding (a loaded run of the test above): leftovers with higher indexes than the journal had reached
    were kept as "the newest" in place of the snapshot just written, the journal was purged up to them, and every
    node that restarted loaded one and could not start. A snapshot past the journal's end is not of this journal:
    it is dropped, the journal is purged only below this journal's snapshots, and a restarted replica loads one."""
    cluster = local_cluster(shards=1, replicas=1, durability="sync",
                            extra_server_args=("--replica-snapshot-interval-ms", "300"))
    with valkey.Valkey(port=cluster.primary(0).port, socket_timeout=scaled(10)) as c:
        for i in range(20):
            c.set("k%d" % i, "v%d" % i)
    replica = cluster.replicas(0)[0]
    stored = _repl(replica)["snapshots_stored"]
    _on_store(cluster, _put_foreign)
    for n in (1, 2):    # two snapshots: the first may have listed the store before the foreign ones were put
        with valkey.Valkey(port=cluster.primary(0).port, socket_timeout=scaled(10)) as c:
            c.set("after", str(n))
        wait_until(lambda: _repl(replica)["snapshots_stored"] > stored, 30, what="a snapshot after a write")
        stored = _repl(replica)["snapshots_stored"]

    async def names(store, _js):
        return sorted(int(o.name) for o in await (await store._bucket("0")).list() if o.name.isdigit())
    wait_until(lambda: all(i < 1000000 for i in _on_store(cluster, names)), 30, interval_s=0.3,
               what="the foreign snapshots gone from the store")
    assert _on_store(cluster, names), "no snapshot of this journal kept"
    with open(replica.entry["log"], errors="replace") as f:
        assert "past the journal's end" in f.read()
    # a replica that starts again loads a snapshot of this journal and serves every key
    cluster.restart(replica.name)
    replica = next(p for p in cluster.reload().nodes if p.name == replica.name)
    with valkey.Valkey(port=replica.port, socket_timeout=scaled(10)) as c:
        wait_until(lambda: c.execute_command("READONLY") and c.get("after") == b"2", 60,
                   what="the restarted replica serving the keys")
        assert [c.get("k%d" % i) for i in range(20)] == [b"v%d" % i for i in range(20)]
