"""Scheduled backups (`backup-schedule`, `backup-destination`, `backup-retention-days`).

`backup-schedule` is a daily UTC time (`05:30`, as MemoryDB's daily snapshot window starts) or an interval
(`every 6h`, `every 30m`, `every 90s`). Each schedule has slots: the daily time of each day, or the multiples of
the interval since the Unix epoch; a slot's backup is taken once, as soon as a node sees the slot has begun.

A single server takes its own (in a worker thread, through its DURAKV BACKUP sessions: server/backup.py), and
remembers the last slot done in its data directory. In a cluster, one node per shard takes its shard's piece of
the slot's backup `<slot time>-scheduled`, elected through the coordination store: the key `backuprun.<shard>`
holds {slot, holder, until_ms, done}, written by compare-and-set, so exactly one node claims a slot; a claim
whose holder died is taken over once `until_ms` passed. Replicas claim at once and a primary only after
PRIMARY_GRACE_MS, so the primary, which serves the writes, copies nothing while a replica can. The piece is
read from NATS (the shard's newest stored snapshot and its stream), not from the node's memory. The node that
finds every shard's piece present writes the manifest; then backups older than `backup-retention-days` are
expired (never the newest).
"""

import time
from typing import NamedTuple

from .format import BackupError

DAY_MS = 86_400_000
PRIMARY_GRACE_MS = 30_000
CLAIM_MS = 30 * 60_000           # a claim's lease; a holder that died is replaced after it


class Schedule(NamedTuple):
    every_ms: int            # an interval, or 0
    daily_ms: int            # the time of day (ms after 00:00 UTC) when every_ms is 0


def parse_schedule(text: str):
    """A Schedule, or None for "" (no scheduled backups); ValueError with the reason otherwise (the rule is
    config.py's, which checks backup-schedule)."""
    from ..config import parse_backup_schedule
    parsed = parse_backup_schedule(text)
    return Schedule(*parsed) if parsed else None


def current_slot(schedule: Schedule, now_ms: int) -> int:
    """The start (ms) of the newest slot that has begun by now_ms."""
    if schedule.every_ms:
        return now_ms - now_ms % schedule.every_ms
    day = now_ms - now_ms % DAY_MS
    slot = day + schedule.daily_ms
    return slot if slot <= now_ms else slot - DAY_MS


# -- a cluster shard's election (the key backuprun.<shard>) ----------------------------------------------------

async def claim(store, shard, slot_ms, node_id, now_ms, claim_ms=CLAIM_MS) -> bool:
    """Claims the shard's backup of slot_ms for node_id (compare-and-set); False when it is done or another
    live node holds it."""
    from ..cluster.store import StaleRevision
    doc, revision = await store.get_backup_run(shard)
    slot = doc.get("slot")
    if isinstance(slot, int) and slot > slot_ms:
        return False
    if slot == slot_ms and (doc.get("done") or (doc.get("holder") != node_id
                                                 and isinstance(doc.get("until_ms"), int)
                                                 and doc["until_ms"] > now_ms)):
        return False
    new = {"slot": slot_ms, "holder": node_id, "until_ms": now_ms + claim_ms, "done": False}
    try:
        await store.put_backup_run(shard, new, revision)
    except StaleRevision:
        return False
    return True


async def finish(store, shard, slot_ms, node_id, ok, now_ms, error=""):
    """Marks the claim done (ok), or gives it up so another node retries (not ok)."""
    doc, revision = await store.get_backup_run(shard)
    if not doc or doc.get("slot") != slot_ms or doc.get("holder") != node_id:
        return
    doc.update(done=bool(ok), until_ms=now_ms if not ok else doc.get("until_ms", now_ms), error=error[:300])
    try:
        await store.put_backup_run(shard, doc, revision)
    except Exception:  # noqa: BLE001 - the claim lapses on its own
        pass


async def last_done_slot(store, shard) -> int:
    doc, _rev = await store.get_backup_run(shard)
    return doc["slot"] if doc.get("done") and isinstance(doc.get("slot"), int) else 0


async def run_cluster_shard(store, nc, shard, cluster_id, topology, storage, slot_ms, retention_days, loop):
    """Takes the shard's piece of the slot's scheduled backup, then writes the manifest if every shard's piece
    is there, then expires old backups. Returns the backup id."""
    import shutil
    import tempfile
    from .create import expire_backups, keep_until_ms, previous_ends, upload_piece, write_manifest
    from .format import PIECE, new_backup_id, piece_dir
    from .sources import ClusterSource
    backup_id = new_backup_id(slot_ms, "scheduled")
    after = (await loop.run_in_executor(None, previous_ends, storage, cluster_id)).get(shard)
    workdir = tempfile.mkdtemp(prefix="durakv-backup-")
    try:
        piece = await ClusterSource(store, nc).copy(shard, workdir, after=after,
                                                    keep_until_ms=keep_until_ms(retention_days))
        await loop.run_in_executor(None, upload_piece, storage, backup_id, workdir, piece)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    def complete():
        import hashlib
        entries, slots = [], {}
        for sh in topology.shards:
            key = "%s/%s/%s" % (backup_id, piece_dir(sh.name), PIECE)
            if not storage.exists(key):
                return False
            data = storage.get_bytes(key, 16 << 20)
            entries.append({"name": sh.name, "piece": "%s/%s" % (piece_dir(sh.name), PIECE),
                            "sha256": hashlib.sha256(data).hexdigest()})
            slots[sh.name] = [list(r) for r in sh.slots]
        write_manifest(storage, backup_id, "cluster", cluster_id, slot_ms, entries, slots, piece["databases"],
                       scheduled=True)
        return True
    if await loop.run_in_executor(None, complete):
        await loop.run_in_executor(None, expire_backups, storage, retention_days)
    return backup_id


def now_ms():
    return int(time.time() * 1000)


__all__ = ["BackupError", "Schedule", "parse_schedule", "current_slot", "claim", "finish",
           "run_cluster_shard", "last_done_slot", "PRIMARY_GRACE_MS"]
