"""The failover controller: a loop whose tick returns a reason string (patroni's HA loop).

One controller runs in every node of a shard. It owns no sockets: it talks to a CoordinationStore (leases)
and to the node through a small interface, so tests drive tick() with fakes and assert on the reasons.

Node interface used here:
    node.node_id, node.addr, node.az         identity
    node.role                                 'primary' | 'replica'
    node.epoch                                epoch the node writes (primary) or has seen (replica)
    node.lease_valid_until_ms                 set by the controller (and by the renewer's thread), on the
                                              MONOTONIC clock (mono_ms): the primary serves only before it
    await node.promote(epoch)                 catch up, append the epoch marker, start serving writes
    await node.step_down(reason)              the lease is gone: stop acknowledging, rejoin as a replica
    await node.hand_over(keep_lease) -> bool  planned: hold writes, wait until all are committed (True if so),
                                              awaiting keep_lease() (a renewal) now and then meanwhile
    node.hold_data()                          planned: the lease is being handed over: hold reads too
    node.end_hold()                           planned: the hand-over stopped short: serve the held commands
    await node.become_replica()               planned: continue as a replica of the new primary (ends the hold)

Who may take a lease (MemoryDB's rule: replicas back off strictly longer than the lease, by their own clock).
A primary serves until `sent + ttl - margin` on its monotonic clock, where `sent` is when it sent its renewal.
A replica takes a lease only after it has watched the SAME lease revision, without a gap in its observation,
for longer than ttl + grace on its own monotonic clock: it first saw that revision after it was written, so
that moment is later than the holder's `sent`, and the holder stopped serving before. Durations on each node's
own clock, never wall clocks compared across machines, decide; `expires_ms` in the record is for people.
The observation restarts whenever a read of the lease fails or comes later than half a lease after the previous
one. That is what keeps a coordination-store outage (a NATS leader election of 4-9 s, longer than the lease)
from deposing a healthy primary: when the store answers again, the primary renews within one tick, while every
replica must watch a whole lease go by first.

Who renews (cluster/renewer.py). With a `renewer`, a primary's renewals run on the renewer's own thread and NATS
connection, so a busy event loop (a script inside busy-reply-threshold, a heavy pipelined load) does not let the
lease lapse; the tick here still reads the lease and decides: it grants the renewals once a promotion finished,
revokes them before a step-down and after a hand-over's drain, and hands over with the revision of the
renewer's last write. Without one (tests with fakes), the tick renews as it always did.

The TTL is the shard's (cluster/settings.py, `set_ttl` when it changes) and every lease records the TTL it was
written with: a replica waits for longer than the larger of its own TTL and the lease's, so a TTL being changed
never lets a replica take a lease its holder still serves by.
"""

import time

from .store import Lease, StaleRevision


def _monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


def margin_ms(ttl_ms: int) -> int:
    """A holder stops serving this long before its lease ends, to absorb scheduling delays."""
    return max(50, ttl_ms // 5)


def grace_ms(ttl_ms: int) -> int:
    """A replica watches an unchanged lease this much longer than the lease itself before taking it."""
    return max(20, ttl_ms // 20)


def max_gap_ms(ttl_ms: int) -> int:
    """Observations further apart than this do not add up (a paused replica, a store that answered late)."""
    return max(grace_ms(ttl_ms), ttl_ms // 2)


class Controller:
    def __init__(self, store, node, shard: str, lease_ttl_ms: int = 2000, clock_ms=None, mono_ms=None,
                 renewer=None):
        self.store = store
        self.node = node
        self.shard = shard
        self.set_ttl(lease_ttl_ms)
        # cluster/renewer.LeaseRenewer, or None: this controller's own ticks renew the lease (tests with fakes)
        self.renewer = renewer
        self.clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self.mono_ms = mono_ms or (clock_ms if clock_ms is not None else _monotonic_ms)
        self.last_reason = "not started"
        self.primary_addr = None
        self.primary_id = None
        self._seen_revision = None      # the lease revision this replica is watching
        self._seen_since_ms = 0         # mono: when it started watching it without a gap
        self._seen_last_ms = 0          # mono: its latest successful read
        self.renewal_failures = 0       # ticks in a row a primary could not renew

    def set_ttl(self, ttl_ms: int):
        """The shard's lease TTL (a shard setting: cluster/settings.py), for the leases this node writes from now
        on. A replica watching a lease written with another TTL waits by the longer of the two (_replica_tick)."""
        self.ttl_ms = ttl_ms
        self.margin_ms = margin_ms(ttl_ms)
        self.grace_ms = grace_ms(ttl_ms)
        self.max_gap_ms = max_gap_ms(ttl_ms)

    @property
    def interval_s(self) -> float:
        return max(0.02, self.ttl_ms / 10000.0)

    async def tick(self) -> str:
        try:
            reason = await self._tick()
        except Exception as exc:  # noqa: BLE001 - the store may be unreachable; the lease clock decides
            self._seen_revision = None  # a gap in the observation: a replica starts watching again
            if self.node.role == "primary":
                self.renewal_failures += 1
            reason = "coordination store unreachable (%s: %s)" % (type(exc).__name__, exc)
        self.last_reason = reason
        return reason

    def _observe(self, revision) -> int:
        """Records a successful read of the lease at `revision`; returns for how long (mono ms) this replica has
        watched that revision without a gap."""
        now = self.mono_ms()
        if revision != self._seen_revision or now - self._seen_last_ms > self.max_gap_ms:
            self._seen_revision, self._seen_since_ms = revision, now
        self._seen_last_ms = now
        return now - self._seen_since_ms

    async def _tick(self) -> str:
        node = self.node
        lease, revision = await self.store.get_lease(self.shard)
        if lease is not None:
            self.primary_addr = lease.addr
            self.primary_id = lease.holder
        if node.role == "primary":
            return await self._primary_tick(lease, revision)
        return await self._replica_tick(lease, revision)

    async def _primary_tick(self, lease, revision):
        node = self.node
        renewer = self.renewer
        if lease is None or lease.holder != node.node_id or lease.epoch != node.epoch:
            holder = "nobody" if lease is None else "%s (epoch %d)" % (lease.holder, lease.epoch)
            if renewer is not None:
                renewer.revoke()
            await node.step_down("lease now held by %s" % holder)
            return "lease lost to %s; stepped down" % holder
        target = await self.store.failover_request(self.shard)
        if target and target != node.node_id:
            return await self._hand_over(lease, revision, target)
        if renewer is not None:
            return self._renewer_reason(revision)
        sent, sent_mono = self.clock_ms(), self.mono_ms()
        renewed = Lease(node.node_id, node.epoch, node.addr, node.az, sent + self.ttl_ms, ttl_ms=self.ttl_ms)
        try:
            await self.store.put_lease(self.shard, renewed, revision)
        except StaleRevision:
            return "renewal lost a compare-and-set race; re-reading the lease next tick"
        lapsed = sent_mono > node.lease_valid_until_ms
        node.lease_valid_until_ms = sent_mono + self.ttl_ms - self.margin_ms
        failures, self.renewal_failures = self.renewal_failures, 0
        if lapsed and failures:
            # Nobody took the lease while the store could not be reached: this node is still the primary.
            return "renewed lease epoch %d after %d failed attempts; serving again" % (node.epoch, failures)
        return "renewed lease epoch %d until %d" % (node.epoch, sent + self.ttl_ms)

    def _renewer_reason(self, revision):
        """The primary's tick when the renewer's thread renews: the lease just read is this node's, so a renewer
        that gave up (its read after a lost compare-and-set came from a lagging store server) is told to go on
        from this revision; the reason says how its renewals go."""
        node, renewer = self.node, self.renewer
        if renewer.lost is not None:
            lost = renewer.lost
            renewer.grant(Lease(node.node_id, node.epoch, node.addr, node.az, 0, ttl_ms=self.ttl_ms), revision)
            return "the lease renewer saw %s, but the lease is this node's (revision %d): renewing again" % (
                lost, revision)
        if renewer.failures:
            return "coordination store unreachable from the lease renewer (%s)" % renewer.last_error
        return "renewed lease epoch %d until %d (renewer thread)" % (node.epoch, renewer.renewed_until_ms)

    async def _hand_over(self, lease, revision, target):
        node = self.node
        renewer = self.renewer
        current = [revision]
        revoked = False

        async def keep_lease():
            # A drain longer than the lease (a busy script, a slow journal) must not look like a dead primary.
            if renewer is not None:
                return      # the renewer's thread renews through the drain (reads are served meanwhile)
            sent, sent_mono = self.clock_ms(), self.mono_ms()
            renewed = Lease(node.node_id, node.epoch, node.addr, node.az, sent + self.ttl_ms, ttl_ms=self.ttl_ms)
            current[0] = await self.store.put_lease(self.shard, renewed, current[0])
            node.lease_valid_until_ms = sent_mono + self.ttl_ms - self.margin_ms

        try:
            drained = await node.hand_over(keep_lease)
            if renewer is not None:
                # The renewals stop now, and the hand-over's compare-and-set needs the revision of the
                # renewer's last write, whenever it landed.
                renewer.revoke()
                revoked = True
                await renewer.quiesce()
                lease, current[0] = await self.store.get_lease(self.shard)
                if lease is None or lease.holder != node.node_id or lease.epoch != node.epoch:
                    await node.step_down("lease changed during the handover")
                    return "handover to %s raced with another lease change; stepped down" % target
            node.hold_data()
            handed = Lease(target, lease.epoch + 1, "", "", self.clock_ms() + self.ttl_ms, handover_to=target,
                           ttl_ms=self.ttl_ms)
            await self.store.put_lease(self.shard, handed, current[0])
        except StaleRevision:
            await node.step_down("lease changed during the handover")
            return "handover to %s raced with another lease change; stepped down" % target
        except BaseException:
            node.end_hold()     # still the primary (the lease is unchanged): the request is retried next tick
            if revoked and node.role == "primary":
                # Renewing again from the last revision known; a renewer whose compare-and-set then loses
                # re-reads the lease and stops if it is no longer this node's.
                self._grant(Lease(node.node_id, node.epoch, node.addr, node.az, 0, ttl_ms=self.ttl_ms), current[0])
            raise
        if not drained:
            # Appends still in flight (or failed): memory may hold writes the journal will have once more, or
            # never. The new primary's marker fences whatever lands late; this node re-executes and rejoins from
            # snapshot + journal instead of becoming a replica in place.
            try:
                await self.store.clear_failover_request(self.shard)
            finally:
                await node.step_down("handed the lease over to %s before the journal drained" % target)
            return "handed the lease over to %s (epoch %d) undrained; stepped down" % (target, lease.epoch + 1)
        try:
            await self.store.clear_failover_request(self.shard)
        finally:
            await node.become_replica()
        return "handed the lease over to %s (epoch %d)" % (target, lease.epoch + 1)

    async def _replica_tick(self, lease, revision):
        node = self.node
        watched_ms = self._observe(revision)
        ineligible = getattr(node, "ineligible", None)
        if ineligible:
            return "not taking the lease: %s" % ineligible
        now, now_mono = self.clock_ms(), self.mono_ms()
        if lease is not None and lease.holder == node.node_id and lease.epoch > node.epoch:
            # Planned failover: the old primary handed us the lease; claim it with our address.
            mine = Lease(node.node_id, lease.epoch, node.addr, node.az, now + self.ttl_ms, ttl_ms=self.ttl_ms)
            try:
                mine_revision = await self.store.put_lease(self.shard, mine, revision)
            except StaleRevision:
                return "handed lease changed before we could claim it"
            node.lease_valid_until_ms = now_mono + self.ttl_ms - self.margin_ms
            await node.promote(lease.epoch)
            self._grant(mine, mine_revision)
            return "promoted by planned handover (epoch %d)" % lease.epoch
        # The holder serves by the TTL it wrote into its lease: wait by that one when it is the longer (a shard
        # whose TTL was just lowered, a holder that has not applied the new setting yet).
        ttl_ms = max(self.ttl_ms, lease.ttl_ms if lease is not None else 0)
        if lease is None or watched_ms > ttl_ms + grace_ms(ttl_ms):
            epoch = (lease.epoch if lease is not None else 0) + 1
            epoch = max(epoch, node.epoch + 1)
            mine = Lease(node.node_id, epoch, node.addr, node.az, now + self.ttl_ms, ttl_ms=self.ttl_ms)
            try:
                mine_revision = await self.store.put_lease(self.shard, mine, revision)
            except StaleRevision:
                return "lost the race for the expired lease"
            node.lease_valid_until_ms = now_mono + self.ttl_ms - self.margin_ms
            await node.promote(epoch, old_primary_failed=lease is not None)
            self._grant(mine, mine_revision)
            previous = "no lease" if lease is None else "lease of %s expired" % lease.holder
            return "%s; acquired epoch %d and promoted" % (previous, epoch)
        return "replica of %s (epoch %d, lease unchanged for %d ms of %d)" % (
            lease.holder, lease.epoch, watched_ms, ttl_ms + grace_ms(ttl_ms))

    def _grant(self, lease, revision):
        """A node that has just become primary: from here on the renewer's thread renews its lease (claimed at
        `revision`), not the event loop. Only once promotion finished: a promotion that failed must not leave
        behind a lease that is renewed for ever and keeps every replica from taking over."""
        if self.renewer is not None and self.node.role == "primary":
            self.renewer.grant(lease, revision)
