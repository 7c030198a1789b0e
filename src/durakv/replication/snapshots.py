"""A shard member's snapshots in the object store: the newest loaded at start-up, a replica's periodic
snapshot stored, the store pruned and the stream purged below what is kept."""

import asyncio
import logging
import os
import tempfile
import time

from ..errors import with_path
from ..snapshot.forked import write_snapshot_forked

log = logging.getLogger("durakv.replication")

# A snapshot fetched from the object store or written for it goes through a temporary file in the data dir
SNAPSHOT_TEMP_PREFIX = "snap-"


class Snapshotter:
    """A shard member's snapshots in the object store (loading, storing, pruning): `node.snapshotter`.

    Owns what it knows of them: `index` (the newest this node loaded or stored), `stored` (how many it stored),
    `store_view` (the store as its last pruning saw it), `started_s` (monotonic s since a snapshot is being
    written and stored, else None: INFO rdb_bgsave_in_progress) and the periodic task. Interface: `load()` (the
    newest snapshot into the keyspace; it sets the node's follow position to it), `start()` (the periodic
    snapshots of a replica), `snapshot_now()` (BGSAVE on a replica), `forget()` (the dataset was cleared),
    `remove_stale_temps()` (start-up). It reads the node's role, whole index, epoch filter, store, journal,
    loading slicer and the replicas' statuses."""

    def __init__(self, node):
        self.node = node
        self.server = node.server
        self.shard = node.shard
        self.index = 0
        self.stored = 0
        self.store_view = {"kept": [], "bytes": 0, "messages": 0, "objects": 0}
        self.started_s = None
        self._lock = asyncio.Lock()     # one snapshot stored at a time (the periodic one and a BGSAVE)
        self._task = None

    def forget(self):
        self.index = 0

    def start(self):
        self._task = self.server.loop.create_task(self._loop())

    async def load(self):
        """The shard's newest snapshot from the object store, streamed into a file (not into memory) and loaded
        in slices of the loop (recovery/loading.py: the node answers -LOADING and INFO meanwhile)."""
        from ..snapshot.format import load_snapshot_steps
        node = self.node
        fd, path = tempfile.mkstemp(prefix=SNAPSHOT_TEMP_PREFIX, suffix=".dks", dir=self.server.dir)
        try:
            started = time.monotonic()
            progress = self.server.load_progress
            total_before = progress.total_bytes if progress is not None else 0

            def sized(n):
                # INFO loading_total_bytes: the snapshot (the one tried, if an earlier one failed) from the start
                if progress is not None:
                    progress.total_bytes = total_before + n
            try:
                with os.fdopen(fd, "wb") as f:
                    snap = await node.store.latest_snapshot(self.shard, into=f, sized=sized)
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
                apply = self.server.delayed_load(self.server.apply_effect)
                await node.follower.slicer.run(load_snapshot_steps(path, ks, apply, progress, count_total=False))
            finally:
                ks.expire_enabled = saved
            size = os.path.getsize(path)
        finally:
            os.unlink(path)
        self.index = index
        node.follower.loaded_snapshot(index, epoch)
        keys = sum(len(db) for db in self.server.keyspace.dbs)
        loaded = time.monotonic()
        log.info("loaded snapshot of shard %s at index %d (epoch %d): %d bytes fetched in %.2fs, %d keys loaded in "
                 "%.2fs (%.0f keys/s)", self.shard, index, epoch, size, fetched - started, keys, loaded - fetched,
                 keys / max(loaded - fetched, 1e-6))

    def remove_stale_temps(self):
        """The files a killed process of this node left while fetching or writing a snapshot (this process has
        none yet: it calls this at start-up, holding the data directory's lock)."""
        for name in os.listdir(self.server.dir):
            if name.startswith(SNAPSHOT_TEMP_PREFIX) and name.endswith(".dks"):
                try:
                    os.unlink(os.path.join(self.server.dir, name))
                except OSError:
                    pass

    async def _loop(self):
        interval_ms = self.server.config["replica-snapshot-interval-ms"]
        if not interval_ms:
            return
        while True:
            await asyncio.sleep(interval_ms / 1000.0)
            if self.node.role != "replica" or self.node.applied_index <= self.index:
                continue
            try:
                await self.snapshot_now()
            except Exception as exc:  # noqa: BLE001
                log.warning("replica snapshot failed: %r", exc)

    async def snapshot_now(self):
        """Writes this replica's state at its applied index to the object store, then prunes the store (the
        SNAPSHOTS_KEPT newest of this shard stay; older ones, tombstones and chunks a crash left behind go) and
        drops stream entries that no kept snapshot needs."""
        async with self._lock:
            self.started_s = time.monotonic()   # INFO rdb_bgsave_in_progress meanwhile
            try:
                return await self._store()
            finally:
                self.started_s = None

    async def _store(self):
        node = self.node
        index = node.whole_index   # never inside a command carried in parts: its first parts are not applied
        epoch = node.follower.filter.epoch  # both as memory stands at the fork
        fd, path = tempfile.mkstemp(prefix=SNAPSHOT_TEMP_PREFIX, suffix=".dks", dir=self.server.dir)
        os.close(fd)
        try:
            # Written by a forked child from memory as it is now (as Valkey's BGSAVE forks): the loop goes on
            # applying entries and answering clients while the image is encoded, and the store reads the file
            # in chunks on a worker thread (nats-py's object store), never the whole of it in the loop.
            size = await write_snapshot_forked(path, self.server.keyspace, index, forked=self.server.note_fork,
                                               key_save_delay_us=self.server.config["rdb-key-save-delay"])
            with open(path, "rb") as f:
                await node.store.put_snapshot(self.shard, index, epoch, f)
        finally:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        self.index = index
        self.stored += 1
        # (a snapshot past the journal's end is not this journal's: dropped, never kept in place of this one)
        pruned = await node.store.prune_snapshots(self.shard, journal_last=node.journal.last_index)
        self.store_view = pruned
        kept = pruned["kept"]
        if kept:
            # Entries a kept snapshot needs stay, and so do those a replica heard from recently still has to
            # apply (a restarted node catching up from an older point would otherwise lose them mid-way).
            floor = kept[0] + 1
            for peer in node.members.replica_statuses():
                if peer.loading and not peer.applied:
                    continue    # not yet at its snapshot: it will start from a kept one, not from entry 1
                floor = min(floor, peer.applied + 1)
            # ... and what a backup is copying or the next backup continues from (durakv/backup); when that
            # cannot be read, nothing is purged this time
            try:
                keep = await node.store.backup_keep_from(self.shard)
            except Exception as exc:  # noqa: BLE001 - purge next time
                log.warning("not purging the journal of shard %s: the backup document cannot be read: %r",
                            self.shard, exc)
                keep = 0
            if keep is not None:
                floor = min(floor, keep)
            if floor > 1:
                await node.journal.truncate_before(floor)
        log.info("snapshot of shard %s at index %d stored (%d bytes); journal kept from index %d; snapshot store "
                 "%d bytes in %d messages", self.shard, index, size, node.journal.first_index,
                 pruned["bytes"], pruned["messages"])
        return index
