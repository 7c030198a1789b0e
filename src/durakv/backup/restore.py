"""Restoring: which backups an instant needs, their files checked, each shard replayed, and the outputs.

`plan(storage, backup_id, at_ms)`: without an instant, the named backup (default: the newest complete one) to
its end. With one (point-in-time restore), for each shard the newest backup of the same source whose snapshot
was written at or before the instant is the base, and its journal is taken, entry after entry, from that
backup and the later ones (each backup's journal continues the one before: sources.py), up to the last entry
committed at or before the instant. The shard layout is that of the first backup whose end is at or after the
instant. What it gives across shards: each shard exactly at its own last entry committed at or before the
instant; the shards' entries are stamped by different clocks (a local journal's writer; a JetStream stream's
leader), so across shards the cut is the same wall-clock instant within the clocks' skew, which the lease
already assumes bounded (docs/multi-az.md).

`materialize(...)` replays each shard (snapshot, then entries, through the same pipeline as recovery; on a
cluster's journal with the epoch rule and the continuation parts of journal/codec.py, exactly as a replica
applies them) and merges the shards into one keyspace, keeping each key from the shard that owned its slot
when the layout was recorded. Outputs: `write_datadir` (a snapshot a server started on the directory loads),
`write_rdb` (an RDB file valkey-server loads), `key_records` (what tools/backup sends a running cluster).

`verify(storage, backup_id)`: every checksum (manifest, pieces, files, the snapshot's own CRC, every journal
record's CRC), then each shard replayed to its recorded end.
"""

import hashlib
import logging
import os
import shutil
import tempfile
import time
from typing import NamedTuple

from .create import list_backups, read_manifest, read_piece
from .format import (MANIFEST, BackupCorrupt, BackupError, iso_ms, piece_dir, read_chunk)

log = logging.getLogger("durakv.backup")


class ShardPlan(NamedTuple):
    name: str
    slots: object            # [[start, end], ...] or None (a single server: every slot)
    base_backup: str
    base: dict               # the piece whose snapshot is the base
    sources: list            # [(backup_id, piece)] whose journals are read, in order
    databases: int
    epochs: bool


class Plan(NamedTuple):
    at_ms: object            # the instant, or None: to the end of the backup
    source_id: str
    kind: str
    shards: list             # [ShardPlan]
    databases: int
    backups: list            # the backup ids used


def plan(storage, backup_id=None, at_ms=None) -> Plan:
    if backup_id is not None:
        if backup_id not in storage.backup_ids():
            raise BackupError("no backup %s in %s" % (backup_id, storage.url))
        if not storage.exists("%s/%s" % (backup_id, MANIFEST)):
            raise BackupError("backup %s is incomplete: %s is missing" % (
                backup_id, storage.describe("%s/%s" % (backup_id, MANIFEST))))
        read_manifest(storage, backup_id)            # says what is wrong with it, naming the file
    all_rows = list_backups(storage)
    rows = [r for r in all_rows if r["complete"]]
    if backup_id is not None and backup_id not in [r["id"] for r in rows]:
        raise BackupError(next(r["error"] for r in all_rows if r["id"] == backup_id))
    if not rows:
        damaged = [r["error"] for r in all_rows if r["error"]]
        raise BackupError("%s holds no complete backup%s" % (storage.url, ": " + damaged[-1] if damaged else ""))
    ids = [r["id"] for r in rows]
    if at_ms is None:
        chosen = backup_id or ids[-1]
        manifest = read_manifest(storage, chosen)
        shards = []
        for e in manifest["shards"]:
            piece = read_piece(storage, chosen, e)
            shards.append(ShardPlan(e["name"], e.get("slots"), chosen, piece, [(chosen, piece)],
                                    piece.get("databases", 16), bool(piece.get("epochs"))))
        return Plan(None, manifest.get("source_id"), manifest["kind"], shards, manifest.get("databases", 16),
                    [chosen])
    source_id = read_manifest(storage, backup_id or ids[-1]).get("source_id")
    same = [i for i in ids if read_manifest(storage, i).get("source_id") == source_id]
    manifests = {i: read_manifest(storage, i) for i in same}
    pieces = {i: {e["name"]: (e, read_piece(storage, i, e)) for e in manifests[i]["shards"]} for i in same}
    # the layout: the first backup whose journal reaches the instant
    covering = next((i for i in same if min(p["end_time_ms"] for _e, p in pieces[i].values()) >= at_ms), None)
    if covering is None:
        last = same[-1]
        end = min(p["end_time_ms"] for _e, p in pieces[last].values())
        raise BackupError("%s is after the newest backup's end (%s, backup %s): nothing records what happened "
                          "after it" % (iso_ms(at_ms), iso_ms(end), last))
    shards = []
    used = set()
    for name, (entry, _piece) in pieces[covering].items():
        bases = [i for i in same if name in pieces[i]
                 and (pieces[i][name][1]["snapshot"] or {}).get("created_ms", 0) <= at_ms]
        if not bases:
            first = min((pieces[i][name][1]["snapshot"] or {}).get("created_ms", 0) for i in same if name in pieces[i])
            raise BackupError("%s is before the oldest snapshot of shard %s kept in %s (%s): restore to a later "
                              "instant" % (iso_ms(at_ms), name, storage.url, iso_ms(first)))
        base_id = bases[-1]
        base = pieces[base_id][name][1]
        following = [i for i in same if i >= base_id and name in pieces[i]]
        sources = [(i, pieces[i][name][1]) for i in following]
        used.update(following)
        shards.append(ShardPlan(name, entry.get("slots"), base_id, base, sources, base.get("databases", 16),
                                bool(base.get("epochs"))))
    return Plan(at_ms, source_id, manifests[covering]["kind"], shards, manifests[covering].get("databases", 16),
                sorted(used))


# -- files -----------------------------------------------------------------------------------------------------

def fetch(storage, key, sha256, workdir) -> str:
    """Downloads key into workdir, checking its SHA-256; returns the local path."""
    path = os.path.join(workdir, key.replace("/", "_"))
    h = hashlib.sha256()
    src = storage.open_read(key)
    try:
        with open(path, "wb") as f:
            while True:
                block = src.read(1 << 20)
                if not block:
                    break
                h.update(block)
                f.write(block)
    finally:
        src.close()
    if h.hexdigest() != sha256:
        os.unlink(path)
        raise BackupCorrupt("%s is damaged: its SHA-256 is not the one its piece holds" % storage.describe(key))
    return path


def _entries(storage, shard, sources, after, workdir):
    """(index, epoch, time_ms, payload) of the shard's journal after `after`, from the sources' chunks in order,
    each chunk checked; raises BackupError at a gap."""
    pos = after
    for backup_id, piece in sources:
        for chunk in piece["journal"]:
            if chunk["last"] <= pos:
                continue
            if chunk["first"] > pos + 1:
                raise BackupError("shard %s: the backups hold no journal entries %d..%d (backup %s starts at %d): "
                                  "the instant cannot be reached from the kept backups"
                                  % (shard, pos + 1, chunk["first"] - 1, backup_id, chunk["first"]))
            key = "%s/%s/%s" % (backup_id, piece_dir(shard), chunk["file"])
            path = fetch(storage, key, chunk["sha256"], workdir)
            try:
                with open(path, "rb") as f:
                    for rec in read_chunk(f, storage.describe(key), expect_first=chunk["first"]):
                        if rec[0] > pos:
                            yield rec
                            pos = rec[0]
            finally:
                os.unlink(path)


class ShardResult(NamedTuple):
    name: str
    snapshot_index: int
    last_index: int          # the last entry applied (or stepped over: epoch markers, older epochs)
    last_time_ms: int
    entries: int
    keys: int


def replay_shard(storage, sp: ShardPlan, at_ms, workdir, keyspace=None, to_end=False):
    """The shard's keyspace at the plan's instant (or its backup's end). Returns (keyspace, ShardResult)."""
    from ..journal.base import EpochFilter, Entry
    from ..journal.codec import PartAssembler
    from ..keyspace import Keyspace
    from ..recovery import RecoveryError, pipeline_apply_fn
    from ..snapshot.format import SnapshotCorrupt, load_snapshot
    ks = keyspace or Keyspace(num_dbs=max(16, sp.databases))
    ks.expire_enabled = False
    apply_fn = pipeline_apply_fn(ks)
    snap = sp.base["snapshot"]
    snap_index = 0
    epoch = 0
    if snap:
        key = "%s/%s/%s" % (sp.base_backup, piece_dir(sp.name), snap["file"])
        path = fetch(storage, key, snap["sha256"], workdir)
        try:
            snap_index = load_snapshot(path, ks, apply_fn)
        except SnapshotCorrupt as exc:
            raise BackupCorrupt("%s is damaged: %s" % (storage.describe(key), exc)) from None
        finally:
            os.unlink(path)
        if snap_index != snap["index"]:
            raise BackupCorrupt("%s is damaged: it covers index %d, its piece says %d"
                                % (storage.describe(key), snap_index, snap["index"]))
        epoch = snap.get("epoch", 0)
    filt = EpochFilter(epoch) if sp.epochs else None
    parts = PartAssembler()
    last, last_time, count = snap_index, 0, 0
    end = sp.sources[-1][1]["end_index"] if to_end or at_ms is None else None
    for index, entry_epoch, time_ms, payload in _entries(storage, sp.name, sp.sources, snap_index, workdir):
        if at_ms is not None and time_ms > at_ms:
            break
        if end is not None and index > end:
            break
        entry = Entry(index, entry_epoch, payload)
        try:
            if not payload:
                parts.reset()
            if filt is None or filt.accept(entry):
                for db_id, argv in parts.feed(payload, index):
                    apply_fn(db_id, argv)
        except (ValueError, RecoveryError) as exc:
            raise BackupError("shard %s: journal entry %d does not apply: %s" % (sp.name, index, exc)) from None
        except Exception as exc:  # noqa: BLE001 - InvalidEntry: an entry no primary of the shard wrote
            raise BackupError("shard %s: journal entry %d: %s" % (sp.name, index, exc)) from None
        last, last_time = index, time_ms
        count += 1
    if end is not None and last < end:
        raise BackupError("shard %s: the journal in the backup ends at entry %d, before its recorded end %d"
                          % (sp.name, last, end))
    keys = sum(len(db.data) for db in ks.dbs)
    return ks, ShardResult(sp.name, snap_index, last, last_time, count, keys)


def _owned(slots):
    if slots is None:
        return None
    owned = bytearray(16384)
    for start, stop in slots:
        for s in range(start, stop + 1):
            owned[s] = 1
    return owned


def materialize(storage, p: Plan, workdir=None, progress=None):
    """One keyspace holding every shard of the plan (each key from the shard that owned its slot). Returns
    (keyspace, [ShardResult])."""
    from ..keyspace import Keyspace
    from ..recovery import pipeline_apply_fn
    from ..routing.slots import key_slot
    from ..snapshot.format import iter_commands
    own_tmp = workdir is None
    workdir = workdir or tempfile.mkdtemp(prefix="durakv-restore-")
    try:
        results = []
        target = None
        apply_fn = None
        for sp in p.shards:
            t0 = time.monotonic()
            ks, res = replay_shard(storage, sp, p.at_ms, workdir)
            results.append(res)
            owned = _owned(sp.slots)
            if target is None and owned is None:
                target = ks
            else:
                if target is None:
                    target = Keyspace(num_dbs=len(ks.dbs))
                    target.expire_enabled = False
                    apply_fn = pipeline_apply_fn(target)
                    first = True
                else:
                    first = False
                for db_id, argv in iter_commands(ks):
                    if argv[0] in (b"FUNCTION", b"FT.CREATE"):
                        if first:                  # every shard holds the libraries and index definitions
                            apply_fn(db_id, argv)
                        continue
                    if owned is not None and not owned[key_slot(argv[1])]:
                        continue
                    apply_fn(db_id, argv)
            if progress:
                progress(res, time.monotonic() - t0)
        return target, results
    finally:
        if own_tmp:
            shutil.rmtree(workdir, ignore_errors=True)


# -- outputs ---------------------------------------------------------------------------------------------------

def write_datadir(keyspace, datadir, index, databases=None):
    """A data directory a server started on it serves the keyspace from: one snapshot, no journal. Refuses a
    directory that already holds a snapshot or a journal."""
    from ..journal.walformat import journal_dir
    from ..snapshot.format import list_snapshots, snapshot_path, write_snapshot
    if list_snapshots(datadir) or os.path.exists(journal_dir(datadir)):
        raise BackupError("%s already holds a dataset (snapshots or a journal): restore into an empty directory"
                          % datadir)
    used = [db.id for db in keyspace.dbs if db.data]
    if databases is not None and used and max(used) >= databases:
        raise BackupError("the backup has keys in database %d; the server has %d database(s)" % (max(used), databases))
    os.makedirs(datadir, exist_ok=True)
    return write_snapshot(snapshot_path(datadir, index), keyspace, index)


def _key_items(keyspace):
    now_ms = int(time.time() * 1000)
    for db in keyspace.dbs:
        items = []
        for key, value in db.data.items():
            at = db.expires.get(key) if db.expires else None
            if at is not None and at <= now_ms:
                continue
            ttls = db.hexpires.get(key) if db.hexpires else None
            items.append((key, value, at, ttls) if ttls else (key, value, at))
        yield db.id, items


def write_rdb(keyspace, path):
    """An RDB file of the keyspace (what valkey-server loads): its keys, their TTLs, the function libraries."""
    from ..keyspace import rdbvalue
    from ..scripting.functions import get_functions
    libraries = [lib.code for lib in get_functions(keyspace).ctx.libraries.values()] \
        if getattr(keyspace, "functions", None) is not None else []
    aux = [(b"redis-bits", b"64"), (b"ctime", b"%d" % time.time())]
    data = rdbvalue.rdb_file(list(_key_items(keyspace)), libraries, aux)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return len(data)


def key_records(keyspace):
    """(db, key, DUMP payload, expire_at_ms or 0) of every key, and ("function", code) of every library: what
    a running server or cluster is sent (RESTORE ... REPLACE ABSTTL, FUNCTION LOAD REPLACE)."""
    from ..keyspace import rdbvalue
    from ..scripting.functions import get_functions
    if getattr(keyspace, "functions", None) is not None:
        for lib in get_functions(keyspace).ctx.libraries.values():
            yield ("function", lib.code)
    for db_id, items in _key_items(keyspace):
        for item in items:
            key, value, at = item[:3]
            yield (db_id, key, rdbvalue.dump(value, item[3] if len(item) > 3 else None), at or 0)


# -- verify ----------------------------------------------------------------------------------------------------

def verify(storage, backup_id, progress=None) -> list:
    """Checks every checksum of a backup and replays each shard to its recorded end. Returns [ShardResult];
    raises BackupCorrupt / BackupError naming what failed."""
    p = plan(storage, backup_id)
    workdir = tempfile.mkdtemp(prefix="durakv-verify-")
    try:
        results = []
        for sp in p.shards:
            _ks, res = replay_shard(storage, sp, None, workdir, to_end=True)
            results.append(res)
            if progress:
                progress(res)
        return results
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
