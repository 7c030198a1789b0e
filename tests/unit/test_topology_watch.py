"""The composed topology watch and the node's check of it (cluster/store.py ComposedTopologyWatch,
replication/topology_sync.py TopologyWatcher.check_watch), driven with in-process stand-ins for the two NATS KV
watchers and the store: the order in which the two watchers deliver, and a watch that stops delivering."""

import asyncio
from types import SimpleNamespace

import pytest

from durakv.cluster import natsnames as nn
from durakv.cluster.store import ComposedTopologyWatch
from durakv.replication import topology_sync
from durakv.replication.topology_sync import TopologyWatcher
from durakv.routing import Node, Shard, Topology
from durakv.routing.shardstate import ShardState

pytestmark = pytest.mark.unit


def nid(n):
    return "%040x" % n


def two_shards(migrating=()):
    shards = [Shard(nid(0x5000 + s), str(s), s + 1, ranges, Node(nid(s + 1), "127.0.0.1", 7000 + s), ())
              for s, ranges in enumerate([((0, 8191),), ((8192, 16383),)])]
    topology = Topology(shards, 2)
    return topology.with_migration(migrating, nid(0x5001)) if migrating else topology


class Watcher:
    """A KV watcher: an async iterator of entries fed by the test."""

    def __init__(self):
        self.queue = asyncio.Queue()
        self.stopped = False

    def feed(self, key, value, revision):
        self.queue.put_nowait(SimpleNamespace(key=key, value=value, revision=revision, operation="PUT"))

    def __aiter__(self):
        return self

    async def __anext__(self):
        return await self.queue.get()

    async def stop(self):
        self.stopped = True


async def settle():
    for _ in range(10):
        await asyncio.sleep(0)


def test_an_older_topology_arriving_after_a_newer_state_is_delivered():
    """The operator's topology and the shards' states come from two watchers that deliver independently. A
    reshard's migration marks (topology revision 500) that arrive after a shard's state of revision 510 must
    still reach the node: skipped as "not newer", they left the source primary deaf to the marks."""
    async def main():
        base, states, seen = Watcher(), Watcher(), []
        watch = ComposedTopologyWatch(base, states, lambda t, rev: seen.append((t, rev)))
        base.feed("topology", two_shards().to_json(), 400)
        await settle()
        states.feed(nn.KEY_STATE % "1", ShardState(primary=nid(2), epoch=3).to_json(), 510)
        await settle()
        base.feed("topology", two_shards(migrating=range(0, 100)).to_json(), 500)
        await settle()
        assert [rev for _t, rev in seen] == [400, 510, 510]
        assert len(seen[-1][0].migrating) == 100
        assert watch.revisions() == (500, {"1": 510})
        for task in watch._tasks:
            task.cancel()
    asyncio.run(main())


class Store:
    """The coordination store's topology documents as the node reads them, with watches the test controls."""

    def __init__(self):
        self.base, self.base_revision, self.states = two_shards(), 10, {}
        self.watches = []

    async def get_base_topology(self):
        return self.base, self.base_revision

    async def get_states(self, _topology, log_invalid=True):
        return dict(self.states)

    async def watch_topology(self, cb):
        base, states = Watcher(), Watcher()
        watch = ComposedTopologyWatch(base, states, cb)
        base.feed("topology", self.base.to_json(), self.base_revision)
        self.watches.append((watch, base, states))
        return watch


def test_a_watch_that_stops_delivering_is_replaced(monkeypatch):
    """A stored revision the watch has not delivered for a whole check period: the node watches again and gets
    the stored topology (the first check only notes it: a delivery may be on its way)."""
    async def main():
        store, installed = Store(), []
        node = SimpleNamespace(server=SimpleNamespace(loop=asyncio.get_running_loop()), node_id=nid(1),
                               shard="0", role="replica")
        watcher = TopologyWatcher(node, routing=None)
        watcher.on_topology = lambda t, rev: installed.append((t, rev))
        await watcher.start(store)
        await settle()
        assert installed[-1][1] == 10
        # the operator marks a move; the watch (dead: nothing is fed to it) never delivers it
        store.base, store.base_revision = two_shards(migrating=range(0, 100)), 11
        now = 1000.0
        watcher.check_watch(now)
        await settle()
        assert len(store.watches) == 1             # noted, not acted on yet
        watcher.check_watch(now + topology_sync.WATCH_CHECK_S / 2)
        await settle()
        assert watcher._check_task is None or watcher._check_task.done()
        assert len(store.watches) == 1             # not due yet
        watcher.check_watch(now + topology_sync.WATCH_CHECK_S)
        await settle()
        assert len(store.watches) == 2 and store.watches[0][1].stopped and store.watches[0][2].stopped
        assert installed[-1][1] == 11 and len(installed[-1][0].migrating) == 100
        # a watch that delivers is left alone
        watcher.check_watch(now + 2 * topology_sync.WATCH_CHECK_S)
        await settle()
        watcher.check_watch(now + 3 * topology_sync.WATCH_CHECK_S)
        await settle()
        assert len(store.watches) == 2
        for watch, _b, _s in store.watches:
            for task in watch._tasks:
                task.cancel()
    asyncio.run(main())
