"""Taking a backup (of a single server or of every shard of a cluster), listing, deleting and expiring them.

A backup is complete once its manifest.json exists: pieces are uploaded first, each piece's shard.json after
its files, the manifest last (with the SHA-256 of every piece). A backup without a manifest is one still being
written or one that failed; `list` shows it as incomplete, restore and verify refuse it, and expiry removes it
once it is a day old.
"""

import logging
import os
import shutil
import tempfile
import time

from .format import (MANIFEST, PIECE, FORMAT, BackupCorrupt, BackupError, backup_id_time_ms, new_backup_id,
                     open_document, piece_dir, seal)

log = logging.getLogger("durakv.backup")

DAY_MS = 86_400_000
INCOMPLETE_MAX_AGE_MS = DAY_MS


def _now_ms():
    return int(time.time() * 1000)


def read_manifest(storage, backup_id) -> dict:
    key = "%s/%s" % (backup_id, MANIFEST)
    return open_document(storage.get_bytes(key, 16 << 20), storage.describe(key), "backup")


def read_piece(storage, backup_id, entry) -> dict:
    """A shard's piece, checked against the SHA-256 the manifest holds for it."""
    import hashlib
    key = "%s/%s" % (backup_id, entry["piece"])
    data = storage.get_bytes(key, 16 << 20)
    if hashlib.sha256(data).hexdigest() != entry.get("sha256"):
        raise BackupCorrupt("%s is damaged: its SHA-256 is not the one the manifest holds" % storage.describe(key))
    piece = open_document(data, storage.describe(key), "shard")
    if piece.get("shard") != entry.get("name"):
        raise BackupCorrupt("%s is damaged: it is the piece of shard %r, the manifest says %r"
                            % (storage.describe(key), piece.get("shard"), entry.get("name")))
    return piece


def upload_piece(storage, backup_id, workdir, piece) -> dict:
    """Uploads a piece's files from workdir, then its shard.json; returns the manifest's entry for it."""
    import hashlib
    base = "%s/%s" % (backup_id, piece_dir(piece["shard"]))
    files = ([piece["snapshot"]["file"]] if piece["snapshot"] else []) + [c["file"] for c in piece["journal"]]
    for name in files:
        storage.put_file("%s/%s" % (base, name), os.path.join(workdir, name))
    data = seal(piece)
    storage.put_bytes("%s/%s" % (base, PIECE), data)
    return {"name": piece["shard"], "piece": "%s/%s" % (piece_dir(piece["shard"]), PIECE),
            "sha256": hashlib.sha256(data).hexdigest()}


def write_manifest(storage, backup_id, kind, source_id, created_ms, entries, slots, databases, scheduled=False):
    doc = {"kind_of_document": "backup", "format": FORMAT, "id": backup_id, "kind": kind, "source_id": source_id,
           "created_ms": created_ms, "completed_ms": _now_ms(), "scheduled": scheduled, "databases": databases,
           "shards": [dict(e, slots=slots.get(e["name"])) for e in entries]}
    storage.put_bytes("%s/%s" % (backup_id, MANIFEST), seal(doc))
    return doc


def previous_ends(storage, source_id) -> dict:
    """{shard: last journal index} of the newest complete backup of the same source in storage (the next
    backup's journal continues from there when the journal still holds it)."""
    for backup_id in reversed(storage.backup_ids()):
        if not storage.exists("%s/%s" % (backup_id, MANIFEST)):
            continue
        try:
            manifest = read_manifest(storage, backup_id)
            if manifest.get("source_id") != source_id:
                continue
            return {e["name"]: read_piece(storage, backup_id, e)["end_index"] for e in manifest["shards"]}
        except BackupError as exc:
            log.warning("backup %s is not used to continue from: %s", backup_id, exc)
    return {}


def keep_until_ms(retention_days, now_ms=None) -> int:
    """Until when the journal is kept for the next backup: the retention, or 7 days when it is 0 (keep all)."""
    days = retention_days if retention_days else 7
    return (now_ms or _now_ms()) + days * DAY_MS


# -- a single server -------------------------------------------------------------------------------------------

def create_from_server(storage, api, describe, retention_days=0, progress=None, tag=None, backup_id=None,
                       created_ms=None, expire=False) -> dict:
    """Backs up a single server into storage through DURAKV BACKUP's calls (sources.RespSessions over RESP, or
    sources.LocalSessions in the server itself). Blocking: run it off any event loop."""
    from .sources import ServerSource
    source = ServerSource(api, describe)
    created = created_ms or _now_ms()
    backup_id = backup_id or new_backup_id(created, tag)
    source_id = source.source_id()
    after = previous_ends(storage, source_id).get("0")
    workdir = tempfile.mkdtemp(prefix="durakv-backup-")
    try:
        piece = source.copy("0", workdir, after=after, keep_until_ms=keep_until_ms(retention_days), progress=progress)
        entry = upload_piece(storage, backup_id, workdir, piece)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    manifest = write_manifest(storage, backup_id, "server", source_id, created, [entry], {"0": None},
                              piece["databases"], scheduled=tag == "scheduled")
    if expire:
        expire_backups(storage, retention_days)
    return manifest


# -- a cluster -------------------------------------------------------------------------------------------------

async def create_from_cluster(storage, store, nc, cluster_id, retention_days=0, progress=None, tag=None,
                              databases=1) -> dict:
    """Backs up every shard of the cluster behind store/nc (the operator's identity) into storage."""
    import asyncio
    from .sources import ClusterSource
    source = ClusterSource(store, nc)
    topology = await source.topology()
    created = _now_ms()
    backup_id = new_backup_id(created, tag)
    after = previous_ends(storage, cluster_id)
    entries, slots = [], {}
    for shard in topology.shards:
        workdir = tempfile.mkdtemp(prefix="durakv-backup-")
        try:
            piece = await source.copy(shard.name, workdir, after=after.get(shard.name),
                                      keep_until_ms=keep_until_ms(retention_days), databases=databases,
                                      progress=progress)
            entry = await asyncio.get_running_loop().run_in_executor(None, upload_piece, storage, backup_id, workdir,
                                                                     piece)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        entries.append(entry)
        slots[shard.name] = [list(r) for r in shard.slots]
        if progress:
            progress("shard", shard.name, piece["end_index"])
    return write_manifest(storage, backup_id, "cluster", cluster_id, created, entries, slots, databases)


# -- list, delete, expire --------------------------------------------------------------------------------------

def list_backups(storage) -> list:
    """Every backup of the destination, oldest first: {id, complete, created_ms, kind, shards, bytes, end_ms,
    start_ms, error}. start_ms is the earliest instant it can restore to (its oldest snapshot's time), end_ms
    the latest (when its journal was read)."""
    out = []
    for backup_id in storage.backup_ids():
        files = storage.list(backup_id)
        row = {"id": backup_id, "complete": False, "created_ms": backup_id_time_ms(backup_id), "kind": None,
               "shards": 0, "bytes": sum(size for _k, size in files), "end_ms": None, "start_ms": None,
               "scheduled": None, "error": None}
        if any(k == "%s/%s" % (backup_id, MANIFEST) for k, _s in files):
            try:
                manifest = read_manifest(storage, backup_id)
                pieces = [read_piece(storage, backup_id, e) for e in manifest["shards"]]
                row.update(complete=True, kind=manifest["kind"], shards=len(pieces),
                           scheduled=manifest.get("scheduled"), source_id=manifest.get("source_id"),
                           end_ms=min(p["end_time_ms"] for p in pieces),
                           start_ms=max((p["snapshot"] or {}).get("created_ms", 0) for p in pieces))
            except BackupError as exc:
                row["error"] = str(exc)
        out.append(row)
    return out


def delete_backup(storage, backup_id):
    if backup_id not in storage.backup_ids():
        raise BackupError("no backup %s in %s" % (backup_id, storage.url))
    storage.delete_prefix(backup_id)


def expire_backups(storage, retention_days, now_ms=None) -> list:
    """Deletes the complete backups older than retention_days (never the newest complete one: the journal the
    next backup continues from is in it) and incomplete ones older than a day. Returns the ids deleted."""
    now = now_ms or _now_ms()
    rows = list_backups(storage)
    complete = [r for r in rows if r["complete"]]
    newest = complete[-1]["id"] if complete else None
    gone = []
    for r in rows:
        age = now - (r["created_ms"] or now)
        if r["complete"]:
            if retention_days and r["id"] != newest and age > retention_days * DAY_MS:
                gone.append(r["id"])
        elif age > INCOMPLETE_MAX_AGE_MS:
            gone.append(r["id"])
    for backup_id in gone:
        storage.delete_prefix(backup_id)
        log.info("backup %s expired (%s)", backup_id, storage.url)
    return gone
