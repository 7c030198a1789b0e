"""A shard member's role changes the failover controller calls: promotion to primary (catch up, fence with an
epoch marker, serve), stepping down, and re-executing the process to rejoin as a replica."""

import logging
import os
import sys
import time

from ..journal.base import EpochFilter

log = logging.getLogger("durakv.replication")


class PromotionMixin:
    """Promotion, stepping down and re-execution.

    Mixed into ClusterNode (replication/node.py), whose __init__ holds the state these methods share."""

    async def promote(self, epoch, old_primary_failed=False):
        """old_primary_failed: taken over from an expired lease (not handed over): the topology marks the old
        primary failed."""
        srv = self.server
        self.old_primary_failed = old_primary_failed
        started = time.monotonic()
        await self.catch_up(timeout_s=60)
        if self.subscription is not None:
            try:
                await self.subscription.unsubscribe()
            except Exception:  # noqa: BLE001
                pass
            self.subscription = None
        await self._settle_apply()   # (an entry still being applied in slices of the load finishes first)
        # Entries may have landed between catch_up and the unsubscribe: read them too.
        async for entry in self.journal.read(self.applied_index):
            self._on_entry(entry)
        self.journal.set_last(self.applied_index)
        self.journal.epoch = epoch
        await self.journal.open_writer()
        self.journal.on_fenced = lambda exc: srv.loop.create_task(self.step_down(str(exc)))
        marker_index = await self.journal.append_marker(epoch)
        if marker_index > self.applied_index + 1:
            # The deposed primary's appends landed after our read and before our marker (the marker was sent
            # again after them): every replica applies them, and they may have been acknowledged, so must we.
            async for entry in self.journal.read(self.applied_index):
                if entry.index >= marker_index:
                    break
                self._on_entry(entry)
        self.epoch = epoch
        self.filter = EpochFilter(epoch)
        self.parts.reset()       # our marker ends any unfinished parts of the deposed primary
        self.applied_index = self.whole_index = marker_index
        srv.keyspace.expire_enabled = True
        srv.keyspace.hide_expired = False
        await self.shard_settings.refresh()
        srv.durability.attach(self.journal, srv.config["durability"], srv.config["durability-buffer-ms"])
        tracker = srv.durability.tracker
        tracker.stall_ms = srv.config["journal-append-stall-ms"]
        tracker.on_stall = self._journal_stalled
        if self._journal_failed not in srv.durability.failure_listeners:
            srv.durability.failure_listeners.append(self._journal_failed)
        self.role = "primary"
        self.phase = "primary"
        self._behind_since_ms = 0
        self.promotions += 1
        log.info("promoted to primary of shard %s at epoch %d (marker %d) in %.3fs", self.shard, epoch,
                 marker_index, time.monotonic() - started)
        lead_here = getattr(self.journal, "lead_here", None)
        if lead_here is not None:
            srv.loop.create_task(lead_here())   # the stream leader next to this primary (best effort)
        if self.topology_watcher is not None:
            self.topology_watcher.promoted()   # also goes on with a migration the previous primary did not finish

    def _journal_failed(self, first, exc):
        """The journal failed from entry `first` on (a definite refusal, the writer fenced or stopped): the
        held replies were answered with an error, and memory holds those writes' effects, which no journal
        has. Serving from it would show values never committed (the tracker has dropped the marks of their
        uncommitted keys), so the primary steps down at once: it stops renewing its lease (a replica takes
        over, or this node again after it re-executed) and re-executes, rebuilding its state from snapshot +
        journal."""
        if self.role != "primary":
            return
        log.error("the journal failed from entry %d (%s); stepping down and restarting as a replica", first, exc)
        self.lease_valid_until_ms = 0
        self.reexec()

    def _journal_stalled(self, age_ms):
        """Nothing committed for journal-append-stall-ms (a NATS outage longer than any election, a writer
        stuck): a primary keeping its lease would block the shard for ever, so it steps down. The held replies
        get no answer (their appends may still land: the outcome is unknown, the connection closes)."""
        if self.role != "primary":
            return
        log.error("journal appends unacknowledged for %d ms (journal-append-stall-ms %d); stepping down", age_ms,
                  self.server.config["journal-append-stall-ms"])
        self.lease_valid_until_ms = 0
        self.reexec()

    async def step_down(self, reason):
        if self.role != "primary":
            return
        if self.renewer is not None:
            self.renewer.revoke()
        log.warning("stepping down: %s; restarting as a replica", reason)
        self.reexec()

    def reexec(self):
        """Re-executes this process with the same arguments: it restarts as a replica."""
        logging.shutdown()
        # `-m durakv` whichever way it was started (console script or python -m): same arguments.
        os.execv(sys.executable, [sys.executable, "-m", "durakv"] + sys.argv[1:])
