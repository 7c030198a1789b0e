"""A shard member's part in a pair of regions (cluster/region.py; docs/multi-az.md, "A second region"):
`node.region_role`, the RegionRole.

It holds this region's record (read at start-up, then watched), and, when the region has a peer, the peer's
record as last read over the region link (once a second). From both it derives the fence
(cluster/region.fence_reason): a fenced node refuses writes in the pipeline's one gate (LeaseGate.
serving_error) and does not take a lease (`ineligible`); a follower region's node never takes one. In a follower
region it also keeps the lag: what the shard's mirror lacks of the source region's stream, and since when."""

import logging

from ..logs import Recurring
from .clock import monotonic_ms

log = logging.getLogger("durakv.replication")

PEER_CHECK_S = 1.0      # how often a node of a region with a peer reads the peer's record


class RegionRole:
    """Owns: `record` (this region's record; None: no second region), `peer` and `peer_read_ms` (the peer's
    record as last read, and when), `fence` (why this node refuses writes for its region's sake, else None),
    `mirror_lag` (entries the shard's mirror knows it lacks, as of the last probe) and since when the node has
    been behind. Interface: `start(store)`, `tick(now_s)` (the control loop), `note_mirror(stream_info)` (a
    replica's probe), `ineligible()`, `lag_entries()`, `lag_ms()`, `info_fields()`. It reads the node's NATS
    connection, id, role, applied index, stream end and durability tracker."""

    def __init__(self, node):
        self.node = node
        self.record = None
        self.peer = None
        self.peer_read_ms = None
        self.fence = None
        self.mirror_lag = 0
        self.watch = None
        self._revision = 0
        self._needs_peer_read = False
        self._behind_since_ms = 0
        self._last_peer_check_s = 0.0
        self._peer_task = None
        self._log = Recurring(log)

    async def start(self, store, retry_transient):
        self.record, self._revision = await retry_transient("reading the region record", store.get_region)
        # the restart rule: a node that starts in a region with a peer takes no writes until it has read the
        # peer's record once (a region that gets its peer while this node runs is not held up for it)
        self._needs_peer_read = self.record is not None and bool(self.record.peer_domain)
        self._update_fence()
        self.watch = await retry_transient("watching the region record", lambda: store.watch_region(self._on_record))

    def _on_record(self, record, revision):
        if revision <= self._revision:
            return
        old, self.record, self._revision = self.record, record, revision
        log.info("region record (revision %d): %s %s, peer %s, region epoch %d (was %s)", revision, record.role,
                 record.domain, record.peer_domain or "none", record.epoch, old.role if old else "none")
        self._update_fence()

    def tick(self, now_s):
        """The control loop's turn: the peer region's record is read again once per PEER_CHECK_S."""
        record = self.record
        if record is None or not record.peer_domain or now_s - self._last_peer_check_s < PEER_CHECK_S:
            return
        if self._peer_task is not None and not self._peer_task.done():
            return
        self._last_peer_check_s = now_s
        self._peer_task = self.node.server.loop.create_task(self._check_peer())

    async def _check_peer(self):
        """Reads the peer region's record: while the peer does not answer, what was last read stands (a region
        partitioned from its peer keeps serving: the fence reaches it only with the link; docs/multi-az.md)."""
        from ..cluster.region import read_peer_region
        record = self.record
        if record is None or not record.peer_domain:
            return
        try:
            peer = await read_peer_region(self.node.nc, record.peer_domain, self.node.node_id)
        except Exception as exc:  # noqa: BLE001 - a dark peer region, a bad answer: retried next time
            self._log("peer", "cannot read region %s's record: %s", record.peer_domain, exc)
            return
        self._log.clear("peer", "read region %s's record again", record.peer_domain)
        self.peer, self.peer_read_ms = peer, monotonic_ms()
        self._update_fence()

    def _update_fence(self):
        from ..cluster.region import fence_reason
        reason = fence_reason(self.record, self.peer, self.peer_read_ms is not None or not self._needs_peer_read)
        if reason != self.fence:
            if reason:
                log.warning("region fence: %s; refusing writes and not taking the lease", reason)
            elif self.fence:
                log.info("region fence lifted")
            self.fence = reason

    def ineligible(self):
        """Why this node must not take the lease for its region's sake (None: it may)."""
        record = self.record
        if record is not None and record.follower:
            # its journal is a mirror of another region's: nothing may be appended here until promote-region
            return "this region follows region %s (read-only until `durakv cluster promote-region`)" % (
                record.peer_domain)
        return self.fence

    # -- a follower region's lag --------------------------------------------------------------------------
    def note_mirror(self, stream_info):
        """A replica's probe of its stream: in a follower region, what the mirror lacks of the source's."""
        if self.record is not None and self.record.follower:
            from ..cluster.region import mirror_lag
            self.mirror_lag, _active_ms = mirror_lag(stream_info)
            self.lag_entries()

    def lag_entries(self) -> int:
        """Entries of the source region's journal this follower has not applied: what its mirror lacks (as
        last measured) plus what the mirror holds and it has not applied yet."""
        node = self.node
        lag = self.mirror_lag + max(0, node.follower.stream_last - node.applied_index)
        if lag == 0:
            self._behind_since_ms = 0
        elif not self._behind_since_ms:
            self._behind_since_ms = monotonic_ms()
        return lag

    def lag_ms(self) -> int:
        """How long this follower has been behind the source region (0: caught up at the last look)."""
        return monotonic_ms() - self._behind_since_ms if self._behind_since_ms else 0

    def _fenced_drained(self) -> bool:
        """A fenced primary has every write it took committed (a planned switchover waits for this before it
        reads the old region's journal end: nothing acknowledged after that read)."""
        node = self.node
        if node.role != "primary":
            return True
        t = node.server.durability.tracker
        return t is None or t.all_committed

    def info_fields(self) -> dict:
        """INFO replication's region fields (none without a second region)."""
        record = self.record
        if record is None:
            return {}
        follower = record.follower
        fenced = self.fence is not None
        return {"region_role": record.role, "region_domain": record.domain,
                "region_peer_domain": record.peer_domain, "region_epoch": record.epoch,
                "region_lag_entries": self.lag_entries() if follower else 0,
                "region_lag_ms": self.lag_ms() if follower else 0,
                "region_fenced": int(fenced),
                "region_fenced_drained": int(fenced and self._fenced_drained()),
                "region_fence": (self.fence or "").replace(",", ";")}
