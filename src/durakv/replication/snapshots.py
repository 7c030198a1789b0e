"""A shard member's snapshots in the object store: the newest loaded at start-up, a replica's periodic
snapshot stored, the store pruned and the stream purged below what is kept."""

import asyncio
import logging
import os
import tempfile
import time

from ..errors import with_path
from ..journal.base import EpochFilter
from ..journal.codec import PartAssembler

log = logging.getLogger("durakv.replication")


class SnapshotsMixin:
    """Snapshots in the object store (loading, storing, pruning).

    Mixed into ClusterNode (replication/node.py), whose __init__ holds the state these methods share."""

    async def _load_snapshot(self):
        """The shard's newest snapshot from the object store, streamed into a file (not into memory) and loaded."""
        from ..snapshot.format import load_snapshot
        fd, path = tempfile.mkstemp(prefix="snap-", suffix=".dks", dir=self.server.dir)
        try:
            started = time.monotonic()
            try:
                with os.fdopen(fd, "wb") as f:
                    snap = await self.store.latest_snapshot(self.shard, into=f)
            except OSError as exc:
                raise with_path(exc, path) from exc     # a full data directory: say which file
            if snap is None:
                return
            index, epoch, _ = snap
            fetched = time.monotonic()
            ks = self.server.keyspace
            saved = ks.expire_enabled
            ks.expire_enabled = False
            try:
                load_snapshot(path, ks, self.server.apply_effect)
            finally:
                ks.expire_enabled = saved
            size = os.path.getsize(path)
        finally:
            os.unlink(path)
        self.applied_index = self.snapshot_index = self.whole_index = index
        self.filter = EpochFilter(epoch)
        self.parts = PartAssembler()
        self.epoch = max(self.epoch, epoch)
        keys = sum(len(db) for db in self.server.keyspace.dbs)
        loaded = time.monotonic()
        log.info("loaded snapshot of shard %s at index %d (epoch %d): %d bytes fetched in %.2fs, %d keys loaded in "
                 "%.2fs (%.0f keys/s)", self.shard, index, epoch, size, fetched - started, keys, loaded - fetched,
                 keys / max(loaded - fetched, 1e-6))

    async def _snapshot_loop(self):
        interval_ms = self.server.config["replica-snapshot-interval-ms"]
        if not interval_ms:
            return
        while True:
            await asyncio.sleep(interval_ms / 1000.0)
            if self.role != "replica" or self.applied_index <= self.snapshot_index:
                continue
            try:
                await self.snapshot_now()
            except Exception as exc:  # noqa: BLE001
                log.warning("replica snapshot failed: %r", exc)

    async def snapshot_now(self):
        """Writes this replica's state at its applied index to the object store, then prunes the store (the
        SNAPSHOTS_KEPT newest of this shard stay; older ones, tombstones and chunks a crash left behind go) and
        drops stream entries that no kept snapshot needs."""
        from ..snapshot.format import write_snapshot
        index = self.whole_index   # never inside a command carried in parts: its first parts are not applied
        fd, path = tempfile.mkstemp(prefix="snap-", suffix=".dks", dir=self.server.dir)
        os.close(fd)
        try:
            write_snapshot(path, self.server.keyspace, index)
            with open(path, "rb") as f:
                data = f.read()
        finally:
            os.unlink(path)
        await self.store.put_snapshot(self.shard, index, self.filter.epoch, data)
        self.snapshot_index = index
        self.snapshots_stored += 1
        pruned = await self.store.prune_snapshots(self.shard)
        self.snapshot_store = pruned
        kept = pruned["kept"]
        if kept:
            # Entries a kept snapshot needs stay, and so do those a replica heard from recently still has to
            # apply (a restarted node catching up from an older point would otherwise lose them mid-way).
            floor = kept[0] + 1
            for peer in self.replica_statuses():
                floor = min(floor, peer.applied + 1)
            # ... and what a backup is copying or the next backup continues from (durakv/backup); when that
            # cannot be read, nothing is purged this time
            try:
                keep = await self.store.backup_keep_from(self.shard)
            except Exception as exc:  # noqa: BLE001 - purge next time
                log.warning("not purging the journal of shard %s: the backup document cannot be read: %r",
                            self.shard, exc)
                keep = 0
            if keep is not None:
                floor = min(floor, keep)
            if floor > 1:
                await self.journal.truncate_before(floor)
        log.info("snapshot of shard %s at index %d stored (%d bytes); journal kept from index %d; snapshot store "
                 "%d bytes in %d messages", self.shard, index, len(data), self.journal.first_index,
                 pruned["bytes"], pruned["messages"])
        return index
