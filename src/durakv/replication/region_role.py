"""A shard member's part in a pair of regions (cluster/region.py; docs/multi-az.md, "A second region").

It holds this region's record (read at start-up, then watched), and, when the region has a peer, the peer's
record as last read over the region link (once a second). From both it derives the fence
(cluster/region.fence_reason): a fenced node refuses writes in the pipeline's one gate (LeaseMixin.
serving_error) and does not take a lease (ineligible); a follower region's node never takes one.

Mixed into ClusterNode (replication/node.py), whose __init__ holds the state these methods share."""

import logging

from .clock import monotonic_ms

log = logging.getLogger("durakv.replication")

PEER_CHECK_S = 1.0      # how often a node of a region with a peer reads the peer's record


class RegionRoleMixin:

    async def _start_region(self, retry_transient):
        self.region, rev = await retry_transient("reading the region record", self.store.get_region)
        self._region_revision = rev
        # the restart rule: a node that starts in a region with a peer takes no writes until it has read the
        # peer's record once (a region that gets its peer while this node runs is not held up for it)
        self._needs_peer_read = self.region is not None and bool(self.region.peer_domain)
        self._update_fence()
        self.region_watch = await retry_transient("watching the region record",
                                                  lambda: self.store.watch_region(self._on_region))

    def _on_region(self, record, revision):
        if revision <= self._region_revision:
            return
        old, self.region, self._region_revision = self.region, record, revision
        log.info("region record (revision %d): %s %s, peer %s, region epoch %d (was %s)", revision, record.role,
                 record.domain, record.peer_domain or "none", record.epoch, old.role if old else "none")
        self._update_fence()

    async def _check_peer_region(self):
        """Reads the peer region's record (the control loop runs it once per PEER_CHECK_S): while the peer does not
        answer, what was last read stands (a region partitioned from its peer keeps serving: the fence reaches it
        only with the link; docs/multi-az.md says so)."""
        from ..cluster.region import read_peer_region
        region = self.region
        if region is None or not region.peer_domain:
            return
        try:
            peer = await read_peer_region(self.nc, region.peer_domain, self.node_id)
        except Exception as exc:  # noqa: BLE001 - a dark peer region, a bad answer: retried next time
            self._region_log("peer", "cannot read region %s's record: %s", region.peer_domain, exc)
            return
        self._region_log.clear("peer", "read region %s's record again", region.peer_domain)
        self.peer_region, self.peer_region_read_ms = peer, monotonic_ms()
        self._update_fence()

    def _update_fence(self):
        from ..cluster.region import fence_reason
        reason = fence_reason(self.region, self.peer_region,
                              self.peer_region_read_ms is not None or not self._needs_peer_read)
        if reason != self.region_fence:
            if reason:
                log.warning("region fence: %s; refusing writes and not taking the lease", reason)
            elif self.region_fence:
                log.info("region fence lifted")
            self.region_fence = reason

    def region_ineligible(self):
        """Why this node must not take the lease for its region's sake (None: it may)."""
        region = self.region
        if region is not None and region.follower:
            # its journal is a mirror of another region's: nothing may be appended here until promote-region
            return "this region follows region %s (read-only until `durakv cluster promote-region`)" % (
                region.peer_domain)
        return self.region_fence
