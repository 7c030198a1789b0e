"""The topology in the coordination store (NatsStore on a real three-node NATS cluster): round trip,
compare-and-set conflicts, and the watch that every node applies snapshots from."""

import asyncio
import uuid

import pytest

from durakv.cluster.store import Lease, NatsStore, StaleRevision
from durakv.replication.retry import retry_transient
from durakv.routing import Node, Shard, Topology, TopologyError
from helpers.clusters import async_wait_for, run


def nid(n: int) -> str:
    return "%040x" % n


def three_shard_topology(epoch=4):
    def node(i, port, **kw):
        return Node(nid(i), "10.0.%d.1" % (i % 7), port, tls_port=port + 1000, bus_port=port + 10000,
                    az="az%d" % (i % 3 + 1), repl_offset=i, **kw)
    shards = [Shard(nid(0x5000 + s), str(s), s + 1, ranges, node(s * 10 + 1, 7000 + s),
                    (node(s * 10 + 2, 7100 + s), node(s * 10 + 3, 7200 + s, health="pfail")))
              for s, ranges in enumerate([((0, 5460),), ((5461, 10922),), ((10923, 16383),)])]
    return Topology(shards, epoch).with_migration(range(5000, 5010), nid(0x5001)).with_migration([12000], nid(0x5000))


async def open_store(nats_cluster, bucket):
    nc = await nats_cluster.connect(name="test-topology")
    store = NatsStore(nc)
    # A bucket per test: the topology key is one per bucket.
    store.LEASES = "T_LEASES_" + bucket
    await store.create_cluster(timeout_s=30)
    return store


@pytest.fixture
def bucket():
    return uuid.uuid4().hex[:12].upper()


def test_round_trip_of_a_three_shard_topology_with_migrating_slots(module_nats, bucket):
    async def main():
        store = await open_store(module_nats, bucket)
        try:
            assert await store.get_topology() == (None, 0)
            t = three_shard_topology()
            revision = await store.put_topology(t, 0)
            assert revision > 0
            back, rev = await store.get_topology()
            assert rev == revision and back == t and back.to_json() == t.to_json()
            assert back.migrating[5005] == (nid(0x5000), nid(0x5001)) and back.migrating[12000] == (nid(0x5002),
                                                                                                     nid(0x5000))
            assert back.nodes[nid(3)].health == "pfail" and back.nodes[nid(12)].role == "replica"
            assert back.shard_by_slot[10922].id == nid(0x5001) and back.current_epoch == 4
            # Another process sees the same.
            other = await open_store(module_nats, bucket)
            try:
                assert await other.get_topology() == (t, revision)
            finally:
                await other.nc.close()
        finally:
            await store.nc.close()
    run(main())


def test_compare_and_set_conflicts(module_nats, bucket):
    async def main():
        one = await open_store(module_nats, bucket)
        two = await open_store(module_nats, bucket)
        try:
            t = three_shard_topology()
            r1 = await one.put_topology(t, 0)
            with pytest.raises(StaleRevision):
                await two.put_topology(t, 0)            # create-only: it exists
            _, seen_one = await one.get_topology()
            _, seen_two = await two.get_topology()
            assert seen_one == seen_two == r1
            # A lease write in the same bucket does not disturb the topology's compare-and-set.
            await one.put_lease("0", Lease(nid(1), 1, "10.0.1.1:7000", "az2", 10**13), 0)
            promoted = t.promote(nid(2))
            r2 = await one.put_topology(promoted, seen_one)
            assert r2 > r1
            with pytest.raises(StaleRevision):
                await two.put_topology(t.promote(nid(3)), seen_two)   # lost the race
            stored, rev = await two.get_topology()
            assert (stored, rev) == (promoted, r2)
            # The loser re-reads, re-applies its change and wins.
            r3 = await two.put_topology(stored.promote(nid(3)), rev)
            final, rev = await one.get_topology()
            assert rev == r3 and final.shard_by_id[nid(0x5000)].primary.id == nid(3)
            assert final.current_epoch == 6
        finally:
            await one.nc.close()
            await two.nc.close()
    run(main())


async def watch_topology(store, cb):
    """store.watch_topology(cb) as the nodes set it up (replication/topology_sync.py): again while NATS cannot
    answer yet. A suite run's watch timed out once creating its consumer (5 s) on the loaded machine."""
    return await retry_transient("watching the topology", lambda: store.watch_topology(cb), timeout_s=30.0)


def test_watch_delivers_the_current_topology_and_every_update_in_order(module_nats, bucket):
    async def main():
        store = await open_store(module_nats, bucket)
        seen, seen2 = [], []
        try:
            t0 = three_shard_topology()
            r0 = await store.put_topology(t0, 0)
            watch = await watch_topology(store, lambda t, rev: seen.append((t, rev)))

            async def got(n):
                return len(seen) >= n
            await async_wait_for(lambda: got(1), 20, "the stored topology")
            assert seen == [(t0, r0)]
            t1 = t0.promote(nid(2))
            r1 = await store.put_topology(t1, r0)
            t2 = t1.with_slots_assigned(range(5000, 5010), nid(0x5001))
            r2 = await store.put_topology(t2, r1)
            await async_wait_for(lambda: got(3), 20, "two updates")
            assert seen == [(t0, r0), (t1, r1), (t2, r2)] and watch.revision == r2
            # A document that does not validate is skipped; the next good one arrives.
            bad_rev = await store.kv.put(NatsStore.TOPOLOGY_KEY, b'{"version": 1, "shards": "nope"}')
            with pytest.raises(TopologyError):
                await store.get_topology()
            t3 = t2.with_node(nid(1), health="fail")
            r3 = await store.put_topology(t3, bad_rev)
            await async_wait_for(lambda: got(4), 20, "the update after a bad document")
            assert seen[3] == (t3, r3) and len(seen) == 4
            await watch.stop()
            # After stop nothing more arrives: a second watch sees the next write, the stopped one does not.
            t4 = t3.with_node(nid(1), health="online")
            r4 = await store.put_topology(t4, r3)
            watch2 = await watch_topology(store, lambda t, rev: seen2.append((t, rev)))

            async def got2():
                return seen2 and seen2[-1][1] == r4
            await async_wait_for(got2, 20, "the second watch")
            assert seen2 == [(t4, r4)] and len(seen) == 4
            await watch2.stop()
        finally:
            await store.nc.close()
    run(main())


def test_watch_starts_empty_and_survives_a_failing_callback(module_nats, bucket):
    """The callback raises on its first call and the watch goes on: a later revision reaches it, and the watch's
    tasks still run. Which revisions arrive, in order, is test_watch_delivers_..._in_order's point; here, once, on
    a fresh clone with five workers, the first call was for the second revision and nothing came after it for
    60 s (a watch's consumer recreated late, from the last value per key, would do that), so while nothing
    arrives after the failing call one more revision is written, at most twice."""
    async def main():
        store = await open_store(module_nats, bucket)
        calls = []

        def cb(t, rev):
            calls.append(rev)
            if len(calls) == 1:
                raise RuntimeError("subscriber bug")
        try:
            watch = await watch_topology(store, cb)
            t = three_shard_topology()
            written = [await store.put_topology(t, 0)]
            t = t.promote(nid(2))
            written.append(await store.put_topology(t, written[-1]))

            async def after_the_failure():
                assert len(calls) >= 2 and calls[-1] == written[-1], (
                    "calls %r, written %r; delivered %r; the watch's tasks done: %r"
                    % (calls, written, watch.revisions(), [task.done() for task in watch._tasks]))
                return True
            for more in range(3):
                try:
                    await async_wait_for(after_the_failure, 10, "a revision after the failing call")
                    break
                except TimeoutError:
                    if more == 2:
                        raise
                t = t.with_node(nid(1), health="fail" if more == 0 else "online")
                written.append(await store.put_topology(t, written[-1]))
            assert calls == sorted(set(calls)) and calls[0] in written[:2], (calls, written)
            assert not any(task.done() for task in watch._tasks)
            await watch.stop()
        finally:
            await store.nc.close()
    run(main())


def test_put_refuses_what_is_not_a_topology(module_nats, bucket):
    async def main():
        store = await open_store(module_nats, bucket)
        try:
            with pytest.raises(TypeError):
                await store.put_topology({"version": 1}, 0)
            assert await store.get_topology() == (None, 0)
        finally:
            await store.nc.close()
    run(main())


def test_watch_task_runs_on_the_callers_loop(module_nats, bucket):
    """The callback runs on the event loop that started the watch (a node swaps its snapshot there)."""
    async def main():
        store = await open_store(module_nats, bucket)
        loops = []
        try:
            watch = await watch_topology(store, lambda t, rev: loops.append(asyncio.get_running_loop()))
            await store.put_topology(three_shard_topology(), 0)

            async def called():
                return loops
            await async_wait_for(called, 20, "a delivery")
            assert loops == [asyncio.get_running_loop()]
            await watch.stop()
        finally:
            await store.nc.close()
    run(main())


def test_a_node_watches_again_when_its_watch_stops_delivering(module_nats, bucket):
    """The node's check (replication/topology_sync.py) against the real store: the watch's consumer of the
    operator's topology is stopped under it (as a consumer lost with its NATS server), the operator marks a
    migration, and the next checks find it undelivered, watch again and install it."""
    from types import SimpleNamespace

    from durakv.replication import topology_sync
    from durakv.replication.topology_sync import TopologyWatcher

    async def main():
        store = await open_store(module_nats, bucket)
        installed = []
        try:
            t0 = three_shard_topology()
            r0 = await store.put_topology(t0, 0)
            node = SimpleNamespace(server=SimpleNamespace(loop=asyncio.get_running_loop()), node_id=nid(1),
                                   shard="0", role="replica")
            watcher = TopologyWatcher(node, routing=None)
            watcher.on_topology = lambda t, rev: installed.append((t, rev))
            await watcher.start(store)
            await async_wait_for(lambda: _true(installed and installed[-1][1] == r0), 20, "the stored topology")
            deaf = watcher.watch
            await deaf._watchers[0].stop()          # the base document's consumer is gone; nothing says so
            t1 = t0.with_migration(range(100, 110), nid(0x5001))
            r1 = await store.put_topology(t1, r0)
            now = 1000.0
            for i in range(2):
                watcher.check_watch(now + i * topology_sync.WATCH_CHECK_S)
                await watcher._check_task
            assert watcher.watch is not deaf
            await async_wait_for(lambda: _true(installed[-1][1] >= r1), 20, "the marks through the new watch")
            assert set(range(100, 110)) <= set(installed[-1][0].migrating)
            await watcher.watch.stop()
        finally:
            await store.nc.close()
    run(main())


async def _true(value):
    return bool(value)
