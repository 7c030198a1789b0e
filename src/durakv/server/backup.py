"""DURAKV BACKUP: how `durakv backup create --host/--port` copies a single server without pausing it.

The tool never asks the server to build anything: it copies the newest snapshot the server already has (built
off the loop by the snapshot builder process) and the journal entries after it, which the server already wrote.
Both are files in the data directory, read by the off-loop worker threads, never by the event loop:

    DURAKV BACKUP BEGIN [AFTER index]      a session: the snapshot and the journal range it pins (a map)
    DURAKV BACKUP READ token SNAPSHOT offset count         bytes of the pinned snapshot file
    DURAKV BACKUP READ token JOURNAL after max-bytes       entries after `after`, up to the session's end
    DURAKV BACKUP END token [KEEP-JOURNAL-FROM index until-ms]

Why over RESP and not by reading the data directory: the tool may run on another machine, it needs only the
server's address and password (the command is admin-only: ACL @admin @dangerous), and the server knows which
files are safe to read. A session pins what it copies: the snapshot file stays open (a newer snapshot may
replace it on disk; the open descriptor still reads it), and the journal is not truncated below the session's
first entry until END or until the session has been idle for SESSION_IDLE_MS. `AFTER` (the previous backup's
last entry) starts the copy there when the journal still holds it, so the backups of one destination carry an
unbroken journal for point-in-time restore; END's KEEP-JOURNAL-FROM makes the server keep the journal from
that index until that time (backup-retention-days), so the next backup can continue from this one.
"""

import json
import logging
import os
import secrets
import threading
import time

from ..errors import CommandError
from .. import messages

log = logging.getLogger("durakv.backup")

SESSION_IDLE_MS = 120_000
MAX_SESSIONS = 16
MAX_READ_BYTES = 64 * 1024 * 1024
RETENTION_FILE = "backup-retention.json"


class _Session:
    __slots__ = ("token", "fd", "snapshot_index", "snapshot_bytes", "journal_from", "upto", "touched_ms")

    def __init__(self, token, fd, snapshot_index, snapshot_bytes, journal_from, upto):
        self.token = token
        self.fd = fd
        self.snapshot_index = snapshot_index
        self.snapshot_bytes = snapshot_bytes
        self.journal_from = journal_from
        self.upto = upto
        self.touched_ms = _now_ms()


def _now_ms():
    return int(time.time() * 1000)


class BackupSessions:
    """The server's open backup sessions and the journal retention they ask for."""

    def __init__(self, server):
        self.server = server
        self._sessions = {}
        self._lock = threading.Lock()      # sessions are read from the worker threads
        self.retention = self._load_retention()

    # -- sessions ----------------------------------------------------------------------------------------------
    def begin(self, after=None) -> dict:
        srv = self.server
        if srv.cluster_node is not None:
            raise CommandError(messages.BACKUP_IN_CLUSTER)
        journal = srv.journal
        if journal is None or srv.durability.tracker is None:
            raise CommandError(messages.BACKUP_NO_JOURNAL)
        self._expire()
        if len(self._sessions) >= MAX_SESSIONS:
            raise CommandError(messages.BACKUP_TOO_MANY.format(MAX_SESSIONS))
        from ..snapshot.format import list_snapshots, read_info
        end_ms = _now_ms()            # every entry committed before this instant is in the range below
        upto = journal.commit_index
        first = journal.first_index
        snap_index, snap_path, created_ms = 0, None, 0
        for index, path in list_snapshots(srv.dir):
            if index <= upto:
                try:
                    created_ms = read_info(path).created_ms
                except (OSError, Exception):  # noqa: BLE001 - a damaged header: try the one before
                    continue
                snap_index, snap_path = index, path
                break
        start = snap_index + 1
        if after is not None and first <= after + 1 <= start:
            start = after + 1          # continue from the previous backup: an unbroken journal across backups
        if start < first and upto >= start:
            raise CommandError(messages.BACKUP_JOURNAL_GONE.format(start, first))
        fd = -1
        size = 0
        if snap_path is not None:
            fd = os.open(snap_path, os.O_RDONLY | os.O_CLOEXEC)
            size = os.fstat(fd).st_size
        token = secrets.token_hex(16)
        with self._lock:
            self._sessions[token] = _Session(token, fd, snap_index, size, start, upto)
        log.info("backup session %s… began: snapshot %d (%d bytes), journal %d..%d", token[:8], snap_index, size,
                 start, upto)
        from ..cluster.identity import persistent_node_id
        source_id = persistent_node_id(srv.dir, srv.config["node-id"])
        return {"token": token, "source-id": source_id, "databases": srv.config.database_count(),
                "snapshot-index": snap_index,
                "snapshot-bytes": size, "snapshot-created-ms": created_ms, "journal-from": start,
                "journal-upto": upto, "end-time-ms": end_ms, "journal-first": first}

    def session(self, token) -> _Session:
        with self._lock:
            s = self._sessions.get(token)
            if s is None:
                raise CommandError(messages.BACKUP_NO_SESSION)
            s.touched_ms = _now_ms()
            return s

    def read_snapshot(self, s, offset, count) -> bytes:
        """In a worker thread: bytes of the session's snapshot file."""
        if s.fd < 0:
            return b""
        return os.pread(s.fd, min(count, MAX_READ_BYTES), offset)

    def read_journal(self, s, after, max_bytes) -> list:
        """In a worker thread: [(index, epoch, time_ms, payload)] after `after` up to the session's end, at least
        one entry (when any is left) and no more than max_bytes of payloads after the first."""
        from ..journal.walscan import iter_entries
        if after >= s.upto:
            return []
        if after + 1 < s.journal_from:
            raise CommandError(messages.BACKUP_OUTSIDE_RANGE.format(after, s.journal_from, s.upto))
        out = []
        total = 0
        for entry in iter_entries(self.server.dir, after=after, upto=s.upto):
            out.append((entry.index, entry.epoch, entry.time_ms, entry.payload))
            total += len(entry.payload)
            if total >= max_bytes:
                break
        return out

    def end(self, token, keep_from=None, keep_until_ms=None):
        with self._lock:
            s = self._sessions.pop(token, None)
        if s is None:
            raise CommandError(messages.BACKUP_NO_SESSION)
        if s.fd >= 0:
            os.close(s.fd)
        if keep_from is not None:
            self._save_retention(keep_from, keep_until_ms)
        log.info("backup session %s… ended%s", token[:8],
                 "; the journal is kept from index %d until %d" % (keep_from, keep_until_ms) if keep_from else "")

    def _expire(self):
        now = _now_ms()
        with self._lock:
            gone = [t for t, s in self._sessions.items() if now - s.touched_ms > SESSION_IDLE_MS]
            for t in gone:
                s = self._sessions.pop(t)
                if s.fd >= 0:
                    os.close(s.fd)
        for t in gone:
            log.warning("backup session %s… expired after %d s without a request", t[:8], SESSION_IDLE_MS // 1000)

    # -- journal retention -------------------------------------------------------------------------------------
    def journal_keep_from(self, index) -> int:
        """The first journal index truncation may drop to: `index` (what the snapshots need), lowered to what an
        open session copies and to the retention the last backup asked for (while it lasts)."""
        self._expire()
        with self._lock:
            for s in self._sessions.values():
                index = min(index, s.journal_from)
        r = self.retention
        if r and r.get("until_ms", 0) > _now_ms():
            index = min(index, r["keep_from"])
        return index

    def _path(self):
        return os.path.join(self.server.dir, RETENTION_FILE)

    def _load_retention(self):
        try:
            with open(self._path(), "rb") as f:
                doc = json.loads(f.read(4096))
            if isinstance(doc.get("keep_from"), int) and isinstance(doc.get("until_ms"), int):
                return doc
        except (OSError, ValueError, AttributeError):
            pass
        return None

    def _save_retention(self, keep_from, until_ms):
        doc = {"keep_from": int(keep_from), "until_ms": int(until_ms or 0)}
        tmp = self._path() + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._path())
        self.retention = doc

    def close(self):
        with self._lock:
            for s in self._sessions.values():
                if s.fd >= 0:
                    os.close(s.fd)
            self._sessions.clear()


class BackupScheduler:
    """backup-schedule on this server (durakv/backup/schedule.py): a single server backs itself up through its
    own sessions in a worker thread; a cluster node takes part in its shard's election and, when it wins, copies
    its shard's piece from NATS. Checked once a second; a run never overlaps the next."""

    DONE_FILE = "backup-schedule.json"

    def __init__(self, server):
        self.server = server
        self.running = False
        self.last_ok_ms = 0
        self.last_error = ""
        self.last_backup = ""
        self.runs = 0
        self._done_slot = None
        self._checked_ms = 0
        from ..logs import Recurring
        self._log = Recurring(log)

    async def run(self):
        import asyncio
        while True:
            await asyncio.sleep(1.0)
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - reported, tried again at the next tick
                self.last_error = str(exc)[:300]
                self._log("tick", "scheduled backup failed: %s", exc)

    def _storage(self):
        from ..backup.storage import open_storage
        cfg = self.server.config
        return open_storage(cfg["backup-destination"], {
            "endpoint_url": cfg["backup-s3-endpoint-url"] or None, "region": cfg["backup-s3-region"] or None,
            "access_key_id": cfg["backup-s3-access-key-id"] or None,
            "secret_access_key": cfg["backup-s3-secret-access-key"] or None})

    async def tick(self):
        from ..backup.schedule import current_slot, parse_schedule
        srv = self.server
        cfg = srv.config
        schedule = parse_schedule(cfg["backup-schedule"])
        if schedule is None or not cfg["backup-destination"] or self.running:
            return
        now = _now_ms()
        slot = current_slot(schedule, now)
        self.running = True
        try:
            if srv.cluster_node is not None:
                await self._cluster(slot, now)
            elif srv.journal is not None:
                await self._single(slot)
        finally:
            self.running = False

    # -- a single server -------------------------------------------------------------------------------------
    def _load_done(self):
        try:
            with open(os.path.join(self.server.dir, self.DONE_FILE), "rb") as f:
                slot = json.loads(f.read(4096)).get("slot", 0)
            return slot if isinstance(slot, int) else 0
        except (OSError, ValueError, AttributeError):
            return 0

    def _save_done(self, slot):
        path = os.path.join(self.server.dir, self.DONE_FILE)
        with open(path + ".tmp", "w") as f:
            json.dump({"slot": slot}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(path + ".tmp", path)
        self._done_slot = slot

    async def _single(self, slot):
        import asyncio
        from ..backup.create import create_from_server
        from ..backup.format import new_backup_id
        from ..backup.sources import LocalSessions
        if self._done_slot is None:
            self._done_slot = self._load_done()
        if slot <= self._done_slot:
            return
        cfg = self.server.config
        backup_id = new_backup_id(slot, "scheduled")

        def work():
            try:
                return create_from_server(self._storage(), LocalSessions(self.server.backups), "this server",
                                          retention_days=cfg["backup-retention-days"], tag="scheduled",
                                          backup_id=backup_id, created_ms=slot, expire=True)
            except CommandError as exc:
                from ..backup.format import BackupError
                raise BackupError(str(exc).removeprefix(messages.DURAKV_PREFIX)) from None
        t0 = time.monotonic()
        await asyncio.get_running_loop().run_in_executor(self.server.off_loop_pool(), work)
        self._save_done(slot)
        self._done(backup_id, t0)

    def _done(self, backup_id, t0):
        self.runs += 1
        self.last_ok_ms = _now_ms()
        self.last_backup = backup_id
        self.last_error = ""
        self._log.clear("tick")
        log.info("scheduled backup %s taken in %.2f s", backup_id, time.monotonic() - t0)

    # -- a cluster node ---------------------------------------------------------------------------------------
    async def _cluster(self, slot, now):
        import asyncio
        from ..backup import schedule as sch
        node = self.server.cluster_node
        if node.store is None or node.nc is None or node.phase not in ("following", "primary"):
            return
        if self._done_slot is not None and slot <= self._done_slot:
            return
        if node.role == "primary" and now - slot < sch.PRIMARY_GRACE_MS:
            return                   # a replica copies it, if the shard has one that is alive
        if now - self._checked_ms < 2000:
            return
        self._checked_ms = now
        if not await sch.claim(node.store, node.shard, slot, node.node_id, now):
            self._done_slot = max(self._done_slot or 0, await sch.last_done_slot(node.store, node.shard))
            return
        loop = asyncio.get_running_loop()
        cfg = self.server.config
        t0 = time.monotonic()
        try:
            storage = await loop.run_in_executor(None, self._storage)
            topology = node.routing.topology if node.routing is not None and node.routing.topology else None
            if topology is None:
                topology, _rev = await node.store.get_topology()
            backup_id = await sch.run_cluster_shard(node.store, node.nc, node.shard, node.membership.cluster_id,
                                                    topology, storage, slot, cfg["backup-retention-days"], loop)
        except Exception as exc:
            await sch.finish(node.store, node.shard, slot, node.node_id, False, _now_ms(), str(exc))
            raise
        await sch.finish(node.store, node.shard, slot, node.node_id, True, _now_ms())
        self._done_slot = slot
        self._done(backup_id, t0)
