"""What a backup copies a shard from: a single server over RESP, or a cluster shard's object store and stream.

Both copy the newest snapshot the shard already has and the journal entries after it (from the previous
backup's last entry when the journal still holds it, so the backups of one destination carry an unbroken
journal), into a local working directory: `snapshot.dks` (checked with its own CRC once it is there) and
journal chunks (format.ChunkWriter). Neither asks the primary for anything: a single server reads the files on
its off-loop workers (server/backup.py); a cluster's snapshots were stored by its replicas and its journal is
read from JetStream, not from any node.

copy() returns the piece's document (format.py: shard.json) without its checksum; create.py uploads the files.
"""

import asyncio
import logging
import os
import secrets
import time

from ..snapshot.format import SnapshotCorrupt, read_info, verify_snapshot
from .format import SNAPSHOT_FILE, BackupError, ChunkWriter, FORMAT, sha256_file

log = logging.getLogger("durakv.backup")

READ_BYTES = 16 * 1024 * 1024          # one DURAKV BACKUP READ: bytes of snapshot, or journal payload
PIN_MS = 30 * 60 * 1000                # a cluster backup's pin on the journal lasts this long at most


def _now_ms():
    return int(time.time() * 1000)


def _snapshot_doc(path, index, epoch, created_ms):
    try:
        verify_snapshot(path)
    except SnapshotCorrupt as exc:
        raise BackupError("the shard's newest snapshot does not verify: %s" % exc) from None
    return {"file": SNAPSHOT_FILE, "index": index, "epoch": epoch, "bytes": os.path.getsize(path),
            "sha256": sha256_file(path), "created_ms": created_ms}


def piece_doc(shard, kind, databases, snapshot, chunks, journal_from, end_index, end_time_ms, epochs):
    return {"kind_of_document": "shard", "format": FORMAT, "shard": str(shard), "source": kind,
            "databases": databases, "epochs": epochs, "snapshot": snapshot,
            "journal": [{k: c[k] for k in ("file", "first", "last", "entries", "bytes", "sha256", "first_time_ms",
                                           "last_time_ms")} for c in chunks],
            "journal_from": journal_from, "end_index": end_index, "end_time_ms": end_time_ms}


# -- a single server -------------------------------------------------------------------------------------------

class RespSessions:
    """DURAKV BACKUP over an authenticated protocol.client.RespClient (`durakv backup create --host/--port`)."""

    def __init__(self, conn):
        self.conn = conn

    def begin(self, after=None) -> dict:
        reply = self.conn.execute("DURAKV", "BACKUP", "BEGIN", *(["AFTER", str(after)] if after is not None else []))
        info = {reply[i].decode(): reply[i + 1] for i in range(0, len(reply), 2)}
        for k in ("token", "source-id"):
            info[k] = info[k].decode()
        return info

    def read_snapshot(self, token, offset, count) -> bytes:
        return self.conn.execute("DURAKV", "BACKUP", "READ", token, "SNAPSHOT", str(offset), str(count))

    def read_journal(self, token, after, max_bytes) -> list:
        return self.conn.execute("DURAKV", "BACKUP", "READ", token, "JOURNAL", str(after), str(max_bytes))

    def end(self, token, keep_from=None, keep_until_ms=None):
        keep = ["KEEP-JOURNAL-FROM", str(keep_from), str(keep_until_ms)] if keep_from is not None else []
        self.conn.execute("DURAKV", "BACKUP", "END", token, *keep)


class LocalSessions:
    """The same calls on a server's own BackupSessions (server/backup.py), for its scheduled backups: run from a
    worker thread (they read files), never on the event loop."""

    def __init__(self, sessions):
        self.sessions = sessions

    def begin(self, after=None) -> dict:
        return self.sessions.begin(after)

    def read_snapshot(self, token, offset, count) -> bytes:
        return self.sessions.read_snapshot(self.sessions.session(token), offset, count)

    def read_journal(self, token, after, max_bytes) -> list:
        return self.sessions.read_journal(self.sessions.session(token), after, max_bytes)

    def end(self, token, keep_from=None, keep_until_ms=None):
        self.sessions.end(token, keep_from, keep_until_ms)


class ServerSource:
    """A single durakv server's snapshot and journal, through DURAKV BACKUP's calls (RespSessions or
    LocalSessions)."""

    kind = "server"

    def __init__(self, api, describe):
        self.api = api
        self.describe = describe

    def source_id(self) -> str:
        info = self.api.begin()
        self.api.end(info["token"])
        return info["source-id"]

    def copy(self, shard, workdir, after=None, keep_until_ms=0, progress=None) -> dict:
        api = self.api
        info = api.begin(after)
        token = info["token"]
        try:
            snapshot = None
            if info["snapshot-index"]:
                path = os.path.join(workdir, SNAPSHOT_FILE)
                with open(path, "wb") as f:
                    offset = 0
                    while offset < info["snapshot-bytes"]:
                        data = api.read_snapshot(token, offset, READ_BYTES)
                        if not data:
                            raise BackupError("%s: the snapshot ended at byte %d of %d" % (
                                self.describe, offset, info["snapshot-bytes"]))
                        f.write(data)
                        offset += len(data)
                        if progress:
                            progress("snapshot", offset, info["snapshot-bytes"])
                    f.flush()
                    os.fsync(f.fileno())
                snapshot = _snapshot_doc(path, info["snapshot-index"], 0, info["snapshot-created-ms"])
            writer = ChunkWriter(workdir)
            pos = info["journal-from"] - 1
            upto = info["journal-upto"]
            while pos < upto:
                entries = api.read_journal(token, pos, READ_BYTES)
                if not entries:
                    raise BackupError("%s: the journal ended at entry %d, before %d" % (self.describe, pos, upto))
                for index, epoch, time_ms, payload in entries:
                    writer.add(index, epoch, time_ms, payload)
                    pos = index
                if progress:
                    progress("journal", pos, upto)
            chunks = writer.finish()
            api.end(token, upto + 1 if keep_until_ms else None, keep_until_ms or None)
            token = None
        finally:
            if token is not None:
                try:
                    api.end(token)
                except Exception:  # noqa: BLE001 - it expires on its own
                    pass
        piece = piece_doc(shard, "server", info["databases"], snapshot, chunks,
                          info["journal-from"] if chunks else None, upto, info["end-time-ms"], epochs=False)
        piece["source_id"] = info["source-id"]
        return piece


# -- a cluster's shard, through NATS ---------------------------------------------------------------------------

class ClusterSource:
    """The shards of a cluster, read with `store` (a NatsStore of an identity allowed to read them: the
    operator's, or a node's for its own shard) and `nc` (its NATS connection). Async: call copy() in a loop."""

    kind = "cluster"

    def __init__(self, store, nc, describe="cluster"):
        self.store = store
        self.nc = nc
        self.js = nc.jetstream(timeout=10.0)
        self.describe = describe

    async def topology(self):
        topology, _rev = await self.store.get_topology()
        if topology is None:
            raise BackupError("%s: the coordination store holds no topology (was the cluster created?)"
                              % self.describe)
        return topology

    async def copy(self, shard, workdir, after=None, keep_until_ms=0, databases=1, progress=None) -> dict:
        from ..cluster import natsnames as nn
        store = self.store
        token = secrets.token_hex(8)
        stream = nn.journal_stream(shard)

        def pin(doc, start):
            pins = doc.get("pins") if isinstance(doc.get("pins"), dict) else {}
            pins = {t: p for t, p in pins.items() if isinstance(p, dict) and p.get("until_ms", 0) > _now_ms()}
            pins[token] = {"from": start, "until_ms": _now_ms() + PIN_MS}
            doc["pins"] = pins
            return doc

        # Pin from the first entry the stream holds now: a purge running meanwhile keeps it.
        info = await self.js.stream_info(stream)
        await store.update_backup_doc(shard, lambda doc: pin(doc, info.state.first_seq))
        try:
            path = os.path.join(workdir, SNAPSHOT_FILE)
            with open(path, "wb") as f:
                found = await store.latest_snapshot(shard, into=f)
            snapshot = None
            snap_index = 0
            if found is not None:
                snap_index, epoch, _ = found
                snapshot = _snapshot_doc(path, snap_index, epoch, read_info(path).created_ms)
            else:
                os.unlink(path)
            end_ms = _now_ms()          # every entry committed before this instant is at or below `last`
            info = await self.js.stream_info(stream)
            first, last = info.state.first_seq, info.state.last_seq
            start = snap_index + 1
            if after is not None and first <= after + 1 <= start:
                start = after + 1
            if start < first and last >= start:
                raise BackupError("shard %s: its stream starts at entry %d, the snapshot at %d needs %d on (a purge "
                                  "ran meanwhile: take the backup again)" % (shard, first, snap_index, start))
            await store.update_backup_doc(shard, lambda doc: pin(doc, start))
            writer = ChunkWriter(workdir)
            if last >= start:
                await self._read(stream, nn.journal_subject(shard), start, last, writer, progress)
            chunks = writer.finish()
        finally:
            def unpin(doc, done=False):
                pins = doc.get("pins") if isinstance(doc.get("pins"), dict) else {}
                pins.pop(token, None)
                doc["pins"] = pins
                return doc
            try:
                await store.update_backup_doc(shard, unpin)
            except Exception as exc:  # noqa: BLE001 - the pin expires on its own
                log.warning("shard %s: cannot remove the backup's pin (it expires in %d min): %r", shard,
                            PIN_MS // 60000, exc)
        if keep_until_ms:
            def keep(doc):
                doc["keep_from"] = last + 1
                doc["keep_until_ms"] = keep_until_ms
                return doc
            await store.update_backup_doc(shard, keep)
        return piece_doc(shard, "cluster", databases, snapshot, chunks, start if chunks else None, last, end_ms,
                         epochs=True)

    async def _read(self, stream, subject, start, last, writer, progress, timeout_s=60.0):
        """Entries start..last of the stream into writer, with an ordered push consumer (flow controlled, no
        gaps or redeliveries); fails when no entry arrives for timeout_s."""
        from nats.js.api import ConsumerConfig, DeliverPolicy
        from ..journal.jetstream import _msg_entry
        queue = asyncio.Queue(maxsize=10000)

        async def on_msg(msg):
            await queue.put(msg)

        sub = await self.js.subscribe(subject, cb=on_msg, ordered_consumer=True, stream=stream,
                                      config=ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                                                            opt_start_seq=start),
                                      pending_msgs_limit=20000, pending_bytes_limit=256 << 20)
        try:
            pos = start - 1
            while pos < last:
                try:
                    msg = await asyncio.wait_for(queue.get(), timeout_s)
                except asyncio.TimeoutError:
                    raise BackupError("stream %s: no entry after %d within %.0f s (reading up to %d)"
                                      % (stream, pos, timeout_s, last)) from None
                entry = _msg_entry(msg)
                if entry.index <= pos:
                    continue
                if entry.index != pos + 1:
                    raise BackupError("stream %s: entry %d follows %d (entries were purged meanwhile?)"
                                      % (stream, entry.index, pos))
                await asyncio.get_running_loop().run_in_executor(
                    None, writer.add, entry.index, entry.epoch, entry.time_ms, entry.payload) \
                    if len(entry.payload) > (1 << 20) else writer.add(entry.index, entry.epoch, entry.time_ms,
                                                                      entry.payload)
                pos = entry.index
                if progress and pos % 1000 == 0:
                    progress("journal", pos, last)
        finally:
            try:
                await sub.unsubscribe()
            except Exception:  # noqa: BLE001
                pass
