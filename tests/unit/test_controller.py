"""The failover controller without sockets: fake store, fake node, injected clock; assertions on reasons."""

import asyncio

from durakv.cluster.controller import Controller
from durakv.cluster.store import CoordinationStore, Lease, StaleRevision


class FakeStore(CoordinationStore):
    def __init__(self):
        self.lease = None
        self.revision = 0
        self.request = None
        self.fail_next = None

    async def get_lease(self, shard):
        if self.fail_next:
            exc, self.fail_next = self.fail_next, None
            raise exc
        return self.lease, self.revision

    async def put_lease(self, shard, lease, revision):
        if revision != self.revision:
            raise StaleRevision("stale")
        self.lease = lease
        self.revision += 1
        return self.revision

    async def request_failover(self, shard, to_node):
        self.request = to_node

    async def failover_request(self, shard):
        return self.request

    async def clear_failover_request(self, shard):
        self.request = None

    async def put_snapshot(self, shard, index, epoch, data):
        raise NotImplementedError

    # The controller never touches the topology (promotion's topology update is the node's).
    async def get_topology(self):
        raise NotImplementedError

    async def put_topology(self, topology, expected_revision):
        raise NotImplementedError

    async def watch_topology(self, cb):
        raise NotImplementedError

    async def get_shard_settings(self, shard):
        raise NotImplementedError

    async def put_shard_settings(self, shard, settings, expected_revision):
        raise NotImplementedError

    async def watch_shard_settings(self, shard, cb):
        raise NotImplementedError

    async def latest_snapshot(self, shard, into=None):
        return None

    async def snapshot_indexes(self, shard):
        return []

    async def delete_snapshot(self, shard, index):
        raise NotImplementedError


class FakeNode:
    def __init__(self, node_id):
        self.node_id = node_id
        self.addr = f"127.0.0.1:{7000 + int(node_id[-1])}"
        self.az = "az" + node_id[-1]
        self.role = "replica"
        self.epoch = 0
        self.lease_valid_until_ms = 0
        self.events = []

    async def promote(self, epoch, old_primary_failed=False):
        self.role, self.epoch = "primary", epoch
        self.events.append(("promote", epoch))

    async def step_down(self, reason):
        self.role = "replica"
        self.events.append(("step_down", reason))

    drains = True           # what hand_over() reports: everything issued was committed
    renewals_while_draining = 0

    async def hand_over(self, keep_lease=None):
        self.holding = "writes"
        self.events.append(("hand_over",))
        for _ in range(self.renewals_while_draining):
            await keep_lease()
        return self.drains

    def hold_data(self):
        self.holding = "data"
        self.events.append(("hold_data",))

    def end_hold(self):
        self.holding = None
        self.events.append(("end_hold",))

    async def become_replica(self):
        self.role = "replica"
        self.holding = None
        self.events.append(("become_replica",))


class Clock:
    def __init__(self):
        self.ms = 1_000_000

    def __call__(self):
        return self.ms


def tick(c):
    return asyncio.run(c.tick())


def _primary_and_replica():
    """A store, its clock, node n1 (primary after its first tick) and n2 (its replica), with their controllers."""
    store, clock = FakeStore(), Clock()
    a, b = FakeNode("n1"), FakeNode("n2")
    ca, cb = make(store, a, clock), make(store, b, clock)
    tick(ca)
    tick(cb)
    return store, clock, a, b, ca, cb


def make(store, node, clock, ttl=2000):
    return Controller(store, node, "0", lease_ttl_ms=ttl, clock_ms=clock)


def advance(clock, ms, *controllers, step_ms=200):
    """Moves the clock on by ms, ticking the controllers every step_ms (as their loops do); the last reasons."""
    reasons = []
    while ms > 0:
        clock.ms += min(step_ms, ms)
        ms -= step_ms
        reasons = [tick(c) for c in controllers]
    return reasons


def test_first_node_takes_the_free_lease_and_renews():
    store, clock = FakeStore(), Clock()
    a = FakeNode("n1")
    ca = make(store, a, clock)
    assert tick(ca) == "no lease; acquired epoch 1 and promoted"
    assert a.role == "primary" and a.epoch == 1
    clock.ms += 300
    assert tick(ca).startswith("renewed lease epoch 1 until")
    assert a.lease_valid_until_ms == clock.ms + 2000 - ca.margin_ms


def test_replica_waits_while_lease_valid_then_takes_over_with_next_epoch():
    store, clock = FakeStore(), Clock()
    a, b = FakeNode("n1"), FakeNode("n2")
    ca, cb = make(store, a, clock), make(store, b, clock)
    tick(ca)
    assert tick(cb).startswith("replica of n1 (epoch 1")
    advance(clock, 2000, cb)  # a whole lease watched: still within grace
    assert tick(cb).startswith("replica of n1 (epoch 1, lease unchanged for 2000 ms of 2100)")
    clock.ms += cb.grace_ms + 1
    assert tick(cb) == "lease of n1 expired; acquired epoch 2 and promoted"
    assert b.role == "primary" and b.epoch == 2
    # The old primary, back, sees the lease gone and steps down.
    assert tick(ca) == "lease lost to n2 (epoch 2); stepped down"
    assert a.events[-1][0] == "step_down"


def test_two_replicas_race_only_one_wins():
    store, clock = FakeStore(), Clock()
    b, c = FakeNode("n2"), FakeNode("n3")
    cb, cc = make(store, b, clock), make(store, c, clock)
    store.lease, store.revision = Lease("n1", 4, "x:1", "az1", clock.ms - 10_000), 7
    # A lease long expired by the wall clock is still watched for a whole lease first (by each replica's own
    # clock), so both start watching revision 7 now.
    assert tick(cb).startswith("replica of n1 (epoch 4, lease unchanged for 0 ms")
    assert tick(cc).startswith("replica of n1")
    assert [r.startswith("replica of n1") for r in advance(clock, 2000, cb, cc)] == [True, True]
    clock.ms += cb.grace_ms + 1
    # Both read revision 7; b writes first, c's compare-and-set must lose.
    lease, rev = asyncio.run(store.get_lease("0"))
    assert tick(cb) == "lease of n1 expired; acquired epoch 5 and promoted"
    store_lease_after_b = store.lease

    async def c_races_with_stale_revision():
        return await cc._replica_tick(lease, rev)
    assert asyncio.run(c_races_with_stale_revision()) == "lost the race for the expired lease"
    assert store.lease == store_lease_after_b and c.role == "replica"


def test_planned_handover():
    store, clock, a, b, ca, cb = _primary_and_replica()
    asyncio.run(store.request_failover("0", "n2"))
    assert tick(ca) == "handed the lease over to n2 (epoch 2)"
    assert [e[0] for e in a.events[-3:]] == ["hand_over", "hold_data", "become_replica"] and a.role == "replica"
    assert tick(cb) == "promoted by planned handover (epoch 2)"
    assert b.role == "primary" and store.lease.addr == b.addr and store.request is None
    assert tick(ca).startswith("replica of n2 (epoch 2")


def test_planned_handover_that_did_not_drain_steps_down_instead_of_becoming_a_replica():
    store, clock, a, b, ca, cb = _primary_and_replica()
    a.drains = False
    asyncio.run(store.request_failover("0", "n2"))
    assert tick(ca) == "handed the lease over to n2 (epoch 2) undrained; stepped down"
    assert [e[0] for e in a.events[-3:]] == ["hand_over", "hold_data", "step_down"]
    assert "become_replica" not in [e[0] for e in a.events]
    assert store.lease.holder == "n2" and store.request is None
    assert tick(cb) == "promoted by planned handover (epoch 2)"


def test_a_long_hand_over_keeps_renewing_its_lease_and_hands_over_the_renewed_one():
    store, clock, a, b, ca, cb = _primary_and_replica()
    a.renewals_while_draining = 3
    asyncio.run(store.request_failover("0", "n2"))
    revision = store.revision
    assert tick(ca) == "handed the lease over to n2 (epoch 2)"
    assert store.revision == revision + 4 and store.lease.holder == "n2"   # 3 renewals, then the hand-over
    assert tick(cb) == "promoted by planned handover (epoch 2)"


def test_planned_handover_whose_lease_write_fails_keeps_serving_and_retries():
    store, clock, a, b, ca, cb = _primary_and_replica()
    asyncio.run(store.request_failover("0", "n2"))
    real_put = store.put_lease

    async def unreachable(shard, lease, revision):
        raise TimeoutError("nats: timeout")
    store.put_lease = unreachable
    assert tick(ca).startswith("coordination store unreachable")
    assert a.role == "primary" and a.holding is None and a.events[-1] == ("end_hold",)
    store.put_lease = real_put
    assert tick(ca) == "handed the lease over to n2 (epoch 2)"
    assert a.role == "replica"


def test_store_unreachable_is_a_reason_not_a_crash():
    store, clock = FakeStore(), Clock()
    a = FakeNode("n1")
    ca = make(store, a, clock)
    tick(ca)
    store.fail_next = TimeoutError("nats down")
    assert tick(ca) == "coordination store unreachable (TimeoutError: nats down)"
    assert a.role == "primary"  # it keeps serving only until its own lease_valid_until_ms


class FlakyStore(FakeStore):
    """A store that is down (every call raises) while `down` is set: a NATS leader election."""

    def __init__(self):
        super().__init__()
        self.down = False

    async def get_lease(self, shard):
        if self.down:
            raise TimeoutError("nats: timeout")
        return await super().get_lease(shard)

    async def put_lease(self, shard, lease, revision):
        if self.down:
            raise TimeoutError("nats: timeout")
        return await super().put_lease(shard, lease, revision)


def test_a_store_outage_longer_than_the_lease_does_not_depose_the_primary():
    """Issue 11 item 3: the stream/KV leaders' AZ is lost, the election takes 4-9 s (longer than the 2 s lease).
    The primary stops serving when its lease runs out, but when the store answers again it renews before any
    replica may take the lease, and serves again without re-executing."""
    store, clock = FlakyStore(), Clock()
    a, b, c = FakeNode("n1"), FakeNode("n2"), FakeNode("n3")
    ca, cb, cc = make(store, a, clock), make(store, b, clock), make(store, c, clock)
    tick(ca)
    for _ in range(10):                       # steady state: renewals every 200 ms, replicas watching
        clock.ms += 200
        tick(ca), tick(cb), tick(cc)
    store.down = True
    for _ in range(35):                       # 7 s without a store
        clock.ms += 200
        for ctl in (ca, cb, cc):
            assert tick(ctl).startswith("coordination store unreachable")
    assert clock.ms > a.lease_valid_until_ms  # the primary's lease ran out: it does not serve meanwhile
    store.down = False
    # The replicas see the store first, and the lease record is 7 s past its expires_ms: they must not take it.
    assert tick(cb).startswith("replica of n1 (epoch 1, lease unchanged for 0 ms")
    assert tick(cc).startswith("replica of n1")
    clock.ms += 200
    assert tick(ca) == "renewed lease epoch 1 after 35 failed attempts; serving again"
    assert a.lease_valid_until_ms > clock.ms and a.role == "primary"
    for _ in range(20):
        clock.ms += 200
        assert tick(ca).startswith("renewed lease epoch 1 until")
        assert tick(cb).startswith("replica of n1") and tick(cc).startswith("replica of n1")
    assert [e for e in a.events if e[0] == "step_down"] == [] and b.role == c.role == "replica"


def test_a_dead_primary_is_replaced_one_lease_after_its_last_renewal():
    store, clock, a, b, ca, cb = _primary_and_replica()
    renewed_at = clock.ms
    clock.ms += 100
    tick(cb)                                  # first sees the renewal's revision 100 ms after it was sent
    seen_at = clock.ms
    # the primary dies here; the replica keeps watching every 200 ms
    while b.role == "replica":
        assert clock.ms - renewed_at < 10_000
        clock.ms += 200
        reason = tick(cb)
    assert reason == "lease of n1 expired; acquired epoch 2 and promoted"
    # strictly after the dead primary stopped serving by its own clock, and within one tick of the bound
    assert clock.ms > a.lease_valid_until_ms
    assert seen_at + 2000 + cb.grace_ms < clock.ms <= seen_at + 2000 + cb.grace_ms + 200


def test_a_gap_in_a_replicas_observation_starts_its_watch_again():
    """A replica that was paused (or whose reads answered late) has not watched the lease meanwhile: the
    primary may have renewed and been unable to again. It must watch a whole lease from its next read."""
    store, clock, a, b, ca, cb = _primary_and_replica()
    clock.ms += 5000                          # b was stopped for 5 s; a is gone too
    assert tick(cb).startswith("replica of n1 (epoch 1, lease unchanged for 0 ms")
    watch_started = clock.ms
    while b.role == "replica":
        assert clock.ms - watch_started < 5000
        clock.ms += 200
        tick(cb)
    assert b.epoch == 2 and clock.ms - watch_started > 2000 + cb.grace_ms


def test_a_replica_whose_claim_timed_out_watches_again():
    """The store could read but not write (the claim timed out): the primary could not renew either, so the
    replica's watch starts over rather than winning the race when the store recovers."""
    store, clock = FlakyStore(), Clock()
    a, b = FakeNode("n1"), FakeNode("n2")
    ca, cb = make(store, a, clock), make(store, b, clock)
    tick(ca)
    tick(cb)
    real_put = FakeStore.put_lease
    failing = {"on": True}

    async def put_lease(shard, lease, revision):
        if failing["on"]:
            raise TimeoutError("nats: timeout")
        return await real_put(store, shard, lease, revision)
    store.put_lease = put_lease
    while True:
        clock.ms += 200
        reason = tick(cb)
        if reason.startswith("coordination store unreachable"):
            break
        assert clock.ms < 1_000_000 + 10_000
    failing["on"] = False
    assert tick(cb).startswith("replica of n1 (epoch 1, lease unchanged for 0 ms")
    assert tick(ca).startswith("renewed lease epoch 1") and a.role == "primary"
    assert advance(clock, 1000, ca, cb)[1].startswith("replica of n1")
