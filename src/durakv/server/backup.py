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
