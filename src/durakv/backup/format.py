"""The files of a backup, and their checksums.

    <id>/manifest.json                   the backup: kind, when, the shards and their slots, each piece's sha256
    <id>/shard-<name>/shard.json         one shard's piece: its snapshot and journal chunks, their sha256
    <id>/shard-<name>/snapshot.dks       the shard's snapshot file as the shard built it (snapshot/format.py)
    <id>/shard-<name>/journal-<first:020d>.dkj   journal entries, in order, in chunks of at most 64 MB

`<id>` is `YYYYmmddTHHMMSS.mmmZ-<tag>` (UTC; the tag is random for `durakv backup create`, `scheduled` for a
scheduled backup, which every shard's elected node writes into the same directory), so names sort by time.

A journal chunk (`.dkj`) is

    header   magic b"DKVBJRN\\n" | version u16 (1) | reserved u16 | first index u64
    record   index u64 | epoch u64 | time_ms u64 | length u32 | crc u32 | payload (length bytes)
    trailer  magic b"DKVBJEND" | records u64 | crc u32 (CRC32C of every byte before it)

little-endian; a record's crc is CRC32C of the 28 bytes before it and its payload. An entry is copied as the
journal holds it (its payload the effect codec's bytes, an epoch marker an empty payload), with its commit time.

Every JSON document carries `checksum`, the SHA-256 of its canonical form without that field; the manifest
names each piece's SHA-256 and each piece every file's, so one damaged byte anywhere is found and named.
"""

import hashlib
import json
import os
import re
import secrets
import struct
import time

from ..checksum import crc32c

from ..errors import DurakvError

FORMAT = 1
MANIFEST = "manifest.json"
PIECE = "shard.json"
SNAPSHOT_FILE = "snapshot.dks"
CHUNK_MAGIC = b"DKVBJRN\n"
CHUNK_TRAILER_MAGIC = b"DKVBJEND"
CHUNK_VERSION = 1
CHUNK_HEAD = struct.Struct("<8sHHQ")
RECORD = struct.Struct("<QQQII")
TRAILER = struct.Struct("<8sQI")
CHUNK_MAX_BYTES = 64 * 1024 * 1024
# A backup's documents are small; anything larger is not one of ours (bounded before it is parsed).
MAX_DOCUMENT_BYTES = 16 * 1024 * 1024
# The largest record a chunk may hold: a journal entry is at most 16 MiB (journal/walformat.py MAX_ENTRY_BYTES).
MAX_RECORD_BYTES = 64 * 1024 * 1024
ID_RE = re.compile(r"^(\d{8}T\d{6}\.\d{3}Z)-([a-z0-9]{1,32})$")


class BackupError(DurakvError):
    """A backup cannot be taken, found or restored (the message says why)."""


class BackupCorrupt(BackupError):
    """A file of a backup failed a check (its name is in the message)."""


# -- names and times -------------------------------------------------------------------------------------------

def iso_ms(ms: int) -> str:
    """UTC ISO-8601 with milliseconds: 2026-12-06T05:00:00.123Z."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000.0)) + ".%03dZ" % (ms % 1000)


def parse_time(text: str) -> int:
    """An ISO-8601 time (`2026-12-06T05:00:00Z`, `...T05:00:00.250+01:00`; no zone means UTC) or a Unix time in
    seconds or milliseconds (`@1765000000`, `@1765000000123`), as ms since the Unix epoch. Raises BackupError."""
    import datetime
    t = text.strip()
    if t.startswith("@") and t[1:].isdigit() and len(t) <= 20:
        n = int(t[1:])
        return n if n >= 10 ** 11 else n * 1000
    try:
        dt = datetime.datetime.fromisoformat(t.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise BackupError("%r is not a time: give ISO-8601 (2026-12-06T05:00:00Z) or @unix-seconds" % text) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=datetime.timezone.utc)
    return int(round(dt.timestamp() * 1000))


def new_backup_id(now_ms: int, tag: str = None) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now_ms / 1000.0)) + ".%03dZ" % (now_ms % 1000)
    return "%s-%s" % (stamp, tag or secrets.token_hex(3))


def backup_id_time_ms(backup_id: str):
    """The time in a backup id, or None when the name is not a backup id."""
    import calendar
    m = ID_RE.match(backup_id)
    if not m:
        return None
    stamp = m.group(1)
    secs = calendar.timegm(time.strptime(stamp[:15], "%Y%m%dT%H%M%S"))
    return secs * 1000 + int(stamp[16:19])


def piece_dir(shard) -> str:
    return "shard-%s" % shard


def chunk_name(first: int) -> str:
    return "journal-%020d.dkj" % first


# -- documents -------------------------------------------------------------------------------------------------

def _canonical(doc) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def seal(doc: dict) -> bytes:
    """The document's bytes with its checksum."""
    body = {k: v for k, v in doc.items() if k != "checksum"}
    body["checksum"] = hashlib.sha256(_canonical(body)).hexdigest()
    return json.dumps(body, sort_keys=True, indent=1).encode() + b"\n"


def open_document(data: bytes, name: str, kind: str) -> dict:
    """A sealed document, its checksum verified; BackupCorrupt naming `name` otherwise."""
    if len(data) > MAX_DOCUMENT_BYTES:
        raise BackupCorrupt("%s: %d bytes, more than a backup document holds" % (name, len(data)))
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise BackupCorrupt("%s is damaged: not JSON (%s)" % (name, exc)) from None
    if not isinstance(doc, dict) or doc.get("kind_of_document") != kind:
        raise BackupCorrupt("%s is damaged: not a backup %s" % (name, kind))
    stored = doc.get("checksum")
    body = {k: v for k, v in doc.items() if k != "checksum"}
    if stored != hashlib.sha256(_canonical(body)).hexdigest():
        raise BackupCorrupt("%s is damaged: its checksum does not match its content" % name)
    if doc.get("format") != FORMAT:
        raise BackupError("%s is of backup format %r; this durakv reads format %d" % (name, doc.get("format"),
                                                                                     FORMAT))
    return doc


# -- files and their digests -----------------------------------------------------------------------------------

def sha256_file(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            block = f.read(1 << 20)
            if not block:
                return h.hexdigest()
            h.update(block)


class ChunkWriter:
    """Writes journal entries into chunk files under a local directory, starting a new chunk past
    CHUNK_MAX_BYTES. `chunks` lists what was written: {"file", "path", "first", "last", "entries", "bytes",
    "sha256", "first_time_ms", "last_time_ms"}."""

    def __init__(self, directory, max_bytes=CHUNK_MAX_BYTES):
        self.directory = directory
        self.max_bytes = max_bytes
        self.chunks = []
        self._f = None
        self._cur = None
        self._crc = 0
        self._sha = None
        self.last_index = None

    def add(self, index: int, epoch: int, time_ms: int, payload: bytes):
        if self.last_index is not None and index != self.last_index + 1:
            raise BackupError("journal entry %d follows %d: the copy has a gap" % (index, self.last_index))
        if self._f is None or self._cur["bytes"] >= self.max_bytes:
            self._close()
            self._open(index)
        head = RECORD.pack(index, max(0, epoch), time_ms, len(payload), 0)[:-4]
        rec = head + struct.pack("<I", crc32c(payload, crc32c(head))) + payload
        self._write(rec)
        c = self._cur
        c["last"] = index
        c["entries"] += 1
        c["first_time_ms"] = c["first_time_ms"] or time_ms
        c["last_time_ms"] = time_ms
        self.last_index = index

    def _open(self, first):
        name = chunk_name(first)
        path = os.path.join(self.directory, name)
        self._f = open(path, "wb")
        self._crc = 0
        self._sha = hashlib.sha256()
        self._cur = {"file": name, "path": path, "first": first, "last": first - 1, "entries": 0, "bytes": 0,
                     "first_time_ms": 0, "last_time_ms": 0}
        self._write(CHUNK_HEAD.pack(CHUNK_MAGIC, CHUNK_VERSION, 0, first))

    def _write(self, data):
        self._f.write(data)
        self._crc = crc32c(data, self._crc)
        self._sha.update(data)
        self._cur["bytes"] += len(data)

    def _close(self):
        if self._f is None:
            return
        tail = CHUNK_TRAILER_MAGIC + struct.pack("<Q", self._cur["entries"])
        tail += struct.pack("<I", crc32c(tail, self._crc))
        self._f.write(tail)
        self._sha.update(tail)
        self._cur["bytes"] += len(tail)
        self._f.flush()
        os.fsync(self._f.fileno())
        self._f.close()
        self._f = None
        self._cur["sha256"] = self._sha.hexdigest()
        self.chunks.append(self._cur)
        self._cur = None

    def finish(self) -> list:
        self._close()
        return self.chunks


def read_chunk(f, name, expect_first=None):
    """Yields (index, epoch, time_ms, payload) of a chunk file object, checking every record's CRC, the index
    sequence, the trailer's count and the whole file's CRC; BackupCorrupt naming `name` at the first problem."""
    head = f.read(CHUNK_HEAD.size)
    if len(head) < CHUNK_HEAD.size:
        raise BackupCorrupt("%s is damaged: too short for a journal chunk header" % name)
    magic, version, _r, first = CHUNK_HEAD.unpack(head)
    if magic != CHUNK_MAGIC:
        raise BackupCorrupt("%s is damaged: not a journal chunk (bad magic)" % name)
    if version != CHUNK_VERSION:
        raise BackupError("%s is a journal chunk of version %d; this durakv reads version %d"
                          % (name, version, CHUNK_VERSION))
    if expect_first is not None and first != expect_first:
        raise BackupCorrupt("%s is damaged: it starts at index %d, its piece says %d" % (name, first, expect_first))
    crc = crc32c(head)
    count = 0
    expected = first
    offset = CHUNK_HEAD.size
    while True:
        rec = f.read(RECORD.size)
        if len(rec) >= 8 and rec[:8] == CHUNK_TRAILER_MAGIC:
            rest = f.read(TRAILER.size - len(rec))
            trailer = rec + rest
            if len(trailer) != TRAILER.size or f.read(1):
                raise BackupCorrupt("%s is damaged: bad trailer at byte offset %d" % (name, offset))
            _m, stored_count, stored_crc = TRAILER.unpack(trailer)
            crc = crc32c(trailer[:-4], crc)
            if stored_count != count:
                raise BackupCorrupt("%s is damaged: %d records, its trailer says %d" % (name, count, stored_count))
            if stored_crc != crc:
                raise BackupCorrupt("%s is damaged: file checksum mismatch" % name)
            return
        if len(rec) < RECORD.size:
            raise BackupCorrupt("%s is damaged: ends at byte offset %d inside a record (no trailer)" % (name, offset))
        index, epoch, time_ms, length, rcrc = RECORD.unpack(rec)
        if length > MAX_RECORD_BYTES:
            raise BackupCorrupt("%s is damaged: record at byte offset %d declares %d bytes" % (name, offset, length))
        payload = f.read(length)
        if len(payload) != length:
            raise BackupCorrupt("%s is damaged: record at byte offset %d is incomplete" % (name, offset))
        if crc32c(payload, crc32c(rec[:-4])) != rcrc:
            raise BackupCorrupt("%s is damaged: CRC mismatch in the record at byte offset %d (entry %d)"
                                % (name, offset, index))
        if index != expected:
            raise BackupCorrupt("%s is damaged: record at byte offset %d has index %d, expected %d"
                                % (name, offset, index, expected))
        crc = crc32c(payload, crc32c(rec, crc))
        offset += RECORD.size + length
        count += 1
        expected += 1
        yield index, epoch, time_ms, payload
