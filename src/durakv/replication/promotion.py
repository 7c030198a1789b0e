"""A shard member's role changes the failover controller calls: promotion to primary (catch up, fence with an
epoch marker, serve), stepping down, and re-executing the process to rejoin as a replica."""

import logging
import os
import sys
import time

log = logging.getLogger("durakv.replication")


def reexec():
    """Re-executes this process with the same arguments: it restarts as a replica (its memory may hold writes
    that never committed, so it rejoins from snapshot + journal like any new node)."""
    logging.shutdown()
    # `-m durakv` whichever way it was started (console script or python -m): same arguments.
    os.execv(sys.executable, [sys.executable, "-m", "durakv"] + sys.argv[1:])


class Promotion:
    """Promotion, stepping down and re-execution: `node.promotion`.

    Owns `promotions` (how many times this process became primary) and `old_primary_failed` (the last promotion
    took over an expired lease rather than a hand-over: the topology marks the old primary failed). Handed the
    node, whose shared state it switches (`role`, `phase`, `epoch`; it reads `journal`, `renewer`, `shard`,
    `topology_watcher`), the Follower (caught up and stopped before the epoch marker, then moved to it), the
    LeaseGate (its lease ends at once when the journal fails) and the ShardSettingsWatcher (read again on
    promotion). Offers the controller's `promote(epoch, old_primary_failed)` and `step_down(reason)` (the node
    forwards them: cluster/controller.py's contract), and the durability layer's journal failure and stall hooks
    it installs when it promotes."""

    def __init__(self, node, follower, lease, shard_settings):
        self.node = node
        self.server = node.server
        self.follower = follower
        self.lease = lease
        self.shard_settings = shard_settings
        self.promotions = 0
        self.old_primary_failed = False   # promoted over an expired lease: the topology marks the old one "fail"

    async def promote(self, epoch, old_primary_failed=False):
        """old_primary_failed: taken over from an expired lease (not handed over): the topology marks the old
        primary failed."""
        srv, node, follower = self.server, self.node, self.follower
        self.old_primary_failed = old_primary_failed
        started = time.monotonic()
        await follower.catch_up(timeout_s=60)
        await follower.unfollow()
        await follower.settle_apply()   # (an entry still being applied in slices of the load finishes first)
        journal = node.journal
        # Entries may have landed between catch_up and the unsubscribe: read them too.
        async for entry in journal.read(node.applied_index):
            follower.apply_entry(entry)
        journal.set_last(node.applied_index)
        journal.epoch = epoch
        await journal.open_writer()
        journal.on_fenced = lambda exc: srv.loop.create_task(self.step_down(str(exc)))
        marker_index = await journal.append_marker(epoch)
        if marker_index > node.applied_index + 1:
            # The deposed primary's appends landed after our read and before our marker (the marker was sent
            # again after them): every replica applies them, and they may have been acknowledged, so must we.
            async for entry in journal.read(node.applied_index):
                if entry.index >= marker_index:
                    break
                follower.apply_entry(entry)
        node.epoch = epoch
        follower.promoted(marker_index, epoch)
        srv.keyspace.expire_enabled = True
        srv.keyspace.hide_expired = False
        await self.shard_settings.refresh()
        srv.durability.attach(journal, srv.config["durability"], srv.config["durability-buffer-ms"])
        tracker = srv.durability.tracker
        tracker.stall_ms = srv.config["journal-append-stall-ms"]
        tracker.on_stall = self._journal_stalled
        if self._journal_failed not in srv.durability.failure_listeners:
            srv.durability.failure_listeners.append(self._journal_failed)
        node.role = "primary"
        node.phase = "primary"
        self.promotions += 1
        log.info("promoted to primary of shard %s at epoch %d (marker %d) in %.3fs", node.shard, epoch,
                 marker_index, time.monotonic() - started)
        lead_here = getattr(journal, "lead_here", None)
        if lead_here is not None:
            srv.loop.create_task(lead_here())   # the stream leader next to this primary (best effort)
        if node.topology_watcher is not None:
            node.topology_watcher.promoted()   # also goes on with a migration the previous primary did not finish

    def _journal_failed(self, first, exc):
        """The journal failed from entry `first` on (a definite refusal, the writer fenced or stopped): the
        held replies were answered with an error, and memory holds those writes' effects, which no journal
        has. Serving from it would show values never committed (the tracker has dropped the marks of their
        uncommitted keys), so the primary steps down at once: it stops renewing its lease (a replica takes
        over, or this node again after it re-executed) and re-executes, rebuilding its state from snapshot +
        journal."""
        if self.node.role != "primary":
            return
        log.error("the journal failed from entry %d (%s); stepping down and restarting as a replica", first, exc)
        self.lease.end()
        reexec()

    def _journal_stalled(self, age_ms):
        """Nothing committed for journal-append-stall-ms (a NATS outage longer than any election, a writer
        stuck): a primary keeping its lease would block the shard for ever, so it steps down. The held replies
        get no answer (their appends may still land: the outcome is unknown, the connection closes)."""
        if self.node.role != "primary":
            return
        log.error("journal appends unacknowledged for %d ms (journal-append-stall-ms %d); stepping down", age_ms,
                  self.server.config["journal-append-stall-ms"])
        self.lease.end()
        reexec()

    async def step_down(self, reason):
        node = self.node
        if node.role != "primary":
            return
        if node.renewer is not None:
            node.renewer.revoke()
        log.warning("stepping down: %s; restarting as a replica", reason)
        reexec()
