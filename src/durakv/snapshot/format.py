"""Snapshot files: a point-in-time image of a Keyspace as the commands that rebuild it.

`<dir>/snapshots/snapshot-<index:020d>.dks`:

    header   magic b"DKVSNAP\\n" | version u16 (2) | index u64 (journal index covered) | created_ms u64 |
             flags u32 (bit 0 JOURNAL_FOLLOWS: built from the journal, which continues after `index`)
    body     RESP-encoded commands: first `FUNCTION LOAD code` per function library (in db 0) and `FT.CREATE ...`
             per search index (in its db), then
             per non-empty db `SELECT n`, then per key SET / RPUSH / HSET / SADD / ZADD
             (collections in chunks of <= 512 elements) or, for a stream, XADD / XGROUP / XCLAIM / XSETID
             (Stream.rebuild_commands), for a JSON document JSON.SET key . <compact JSON>, for a Bloom
             filter `RESTORE key 0 <its DUMP payload>` (the module type's RDB form, so a restart loads it as
             Valkey loads its RDB), then `HPEXPIREAT key ms FIELDS n field ...` for a hash's field
             TTLs and `PEXPIREAT key ms` when the key has a TTL
    trailer  magic b"DKVSEND\\n" | commands u64 | crc u32 (CRC32C of every byte before it)

little-endian. Version 1 files (the header without flags) are still read. The body goes through the same
path as journal replay: apply_fn(db_id, argv), with `SELECT` handled here. A snapshot is written to a
temporary file and fsynced, then renamed into place and the directory fsynced (by write_snapshot here, or,
for the builder's file, by the server: snapshot/adopt.py), so a snapshot file that exists under its final
name is complete; its checksum is still verified before anything is applied.

JOURNAL_FOLLOWS lets start-up tell "the journal was deleted" from "there never was one after this image":
a snapshot written from memory by a server without a journal (durability none) does not carry it.
"""

import logging
import os
import re
import struct
import time
from collections import deque
from typing import NamedTuple

import hiredis
from ..checksum import crc32c

from ..errors import DurakvError, with_path
from ..keyspace import ZSet
from ..keyspace import rdbvalue
from ..keyspace.bloom import Bloom
from ..keyspace.jsondoc import JsonDoc, dumps as json_dumps
from ..keyspace.stream import Stream
from ..protocol.parser import request_len
from ..protocol.resp import encode_command

log = logging.getLogger("durakv.snapshot")

MAGIC = b"DKVSNAP\n"
TRAILER_MAGIC = b"DKVSEND\n"
VERSION = 2
HEADER = struct.Struct("<8sHQQI")
HEADER_V1 = struct.Struct("<8sHQQ")
_HEADER_SIZES = {1: HEADER_V1.size, 2: HEADER.size}
JOURNAL_FOLLOWS = 1
TRAILER = struct.Struct("<8sQI")
CHUNK = 512
SNAPSHOT_RE = re.compile(r"^snapshot-(\d{20})\.dks$")
_READ_SIZE = 1 << 20
_WRITE_BUFFER = 1 << 20


class SnapshotCorrupt(DurakvError):
    """A snapshot file failed its checks (size, magic, version, checksum, body)."""


def snapshots_dir(data_dir) -> str:
    return os.path.join(os.fspath(data_dir), "snapshots")


def snapshot_path(data_dir, index: int) -> str:
    return os.path.join(snapshots_dir(data_dir), "snapshot-%020d.dks" % index)


def list_snapshots(data_dir):
    """[(index, path)] of the snapshot files under data_dir/snapshots, newest (highest index) first."""
    sdir = snapshots_dir(data_dir)
    try:
        names = os.listdir(sdir)
    except FileNotFoundError:
        return []
    out = []
    for name in names:
        m = SNAPSHOT_RE.match(name)
        if m:
            out.append((int(m.group(1)), os.path.join(sdir, name)))
    out.sort(reverse=True)
    return out


def score_text(score: float) -> bytes:
    """A score as text that parses back to exactly the same double (including -0.0, inf, 1e-300)."""
    return repr(score).encode()


# -- writing ------------------------------------------------------------------------------------------

def iter_commands(keyspace):
    """Yields (db_id, argv) that rebuild keyspace on an empty one (SELECT not included)."""
    functions = getattr(keyspace, "functions", None)  # FUNCTION LOAD libraries (scripting/functions.py)
    if functions:
        for argv in functions.snapshot_commands():
            yield 0, argv
    search = getattr(keyspace, "search", None)   # FT.CREATE definitions (keyspace/search): contents are rebuilt
    if search:
        yield from search.definitions()
    for db in keyspace.dbs:
        expires = db.expires
        for key, value in db.data.items():
            t = type(value)
            if t is bytes:
                yield db.id, (b"SET", key, value)
            elif t is deque:
                items = list(value)
                for i in range(0, len(items), CHUNK):
                    yield db.id, (b"RPUSH", key, *items[i:i + CHUNK])
            elif t is dict:
                items = list(value.items())
                for i in range(0, len(items), CHUNK):
                    argv = [b"HSET", key]
                    for f, v in items[i:i + CHUNK]:
                        argv.append(f)
                        argv.append(v)
                    yield db.id, argv
                field_ttls = db.hexpires.get(key) if db.hexpires else None
                if field_ttls:
                    yield from _field_ttl_commands(db.id, key, field_ttls)
            elif t is set:
                items = list(value)
                for i in range(0, len(items), CHUNK):
                    yield db.id, (b"SADD", key, *items[i:i + CHUNK])
            elif t is ZSet:
                items = list(value.scores.items())
                for i in range(0, len(items), CHUNK):
                    argv = [b"ZADD", key]
                    for m, s in items[i:i + CHUNK]:
                        argv.append(score_text(s))
                        argv.append(m)
                    yield db.id, argv
            elif t is Stream:
                for argv in value.rebuild_commands(key):
                    yield db.id, argv
            elif t is JsonDoc:
                yield db.id, (b"JSON.SET", key, b".", json_dumps(value.root))
            elif t is Bloom:
                yield db.id, (b"RESTORE", key, b"0", rdbvalue.dump(value))
            else:
                raise TypeError("cannot snapshot value of type %s (key %r)" % (t.__name__, key))
            if expires:
                at = expires.get(key)
                if at is not None:
                    yield db.id, (b"PEXPIREAT", key, b"%d" % at)


def _field_ttl_commands(db_id, key, field_ttls):
    """HPEXPIREAT key ms FIELDS n field ... for a hash's field TTLs, one per expire time (in chunks)."""
    by_time = {}
    for field, at in field_ttls.items():
        by_time.setdefault(at, []).append(field)
    for at, fields in by_time.items():
        for i in range(0, len(fields), CHUNK):
            part = fields[i:i + CHUNK]
            yield db_id, (b"HPEXPIREAT", key, b"%d" % at, b"FIELDS", b"%d" % len(part), *part)


def write_snapshot_file(path, keyspace, index: int, created_ms=None, journal_follows=False, on_key=None) -> dict:
    """Writes keyspace as the snapshot covering journal index `index` into `path` itself and fsyncs it (no
    rename: the builder writes its temporary file this way and the server adopts it). Returns {'path',
    'index', 'bytes', 'commands', 'keys', 'crc'}. A file left half-written by a failure is removed.
    `on_key()` is called before each key's first command, about once per key (rdb-key-save-delay in the builder)."""
    path = os.fspath(path)
    created = int(time.time() * 1000) if created_ms is None else created_ms
    crc = 0
    total = 0
    commands = 0
    keys = sum(len(db.data) for db in keyspace.dbs)
    try:
        with open(path, "wb", buffering=0) as f:
            buf = []
            buffered = 0

            def put(data):
                nonlocal crc, total, buffered, buf
                crc = crc32c(data, crc)
                total += len(data)
                buf.append(data)
                buffered += len(data)
                if buffered >= _WRITE_BUFFER:
                    f.write(b"".join(buf))
                    buf = []
                    buffered = 0

            put(HEADER.pack(MAGIC, VERSION, index, created, JOURNAL_FOLLOWS if journal_follows else 0))
            current = None
            last_key = None
            for db_id, argv in iter_commands(keyspace):
                if on_key is not None and (db_id, argv[1]) != last_key:
                    last_key = (db_id, argv[1])
                    on_key()
                if db_id != current:
                    put(encode_command((b"SELECT", b"%d" % db_id)))
                    commands += 1
                    current = db_id
                put(encode_command(argv))
                commands += 1
            tail = TRAILER_MAGIC + struct.pack("<Q", commands)
            crc = crc32c(tail, crc)
            buf.append(tail + struct.pack("<I", crc))
            f.write(b"".join(buf))
            total += TRAILER.size
            os.fsync(f.fileno())
    except BaseException as exc:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        named = with_path(exc, path)      # a full disk's message names the snapshot file
        if named is exc:
            raise
        raise named from exc
    return {"path": path, "index": index, "bytes": total, "commands": commands, "keys": keys, "crc": crc}


def fsync_dir(directory):
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_snapshot(path, keyspace, index: int, created_ms=None, journal_follows=False) -> dict:
    """Writes keyspace as the snapshot covering journal index `index` to `path` (atomically: temporary
    file, fsync, rename, directory fsync). Returns {'path', 'index', 'bytes', 'commands', 'keys', 'crc'}."""
    path = os.fspath(path)
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    tmp = "%s.tmp.%d" % (path, os.getpid())
    info = write_snapshot_file(tmp, keyspace, index, created_ms, journal_follows)
    try:
        os.rename(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    fsync_dir(directory)
    info["path"] = path
    return info


# -- reading ------------------------------------------------------------------------------------------

class SnapshotInfo(NamedTuple):
    index: int
    created_ms: int
    journal_follows: bool
    header_size: int


def read_header(path):
    """(index, created_ms) from a snapshot's header (no checksum verification)."""
    info = read_info(path)
    return info.index, info.created_ms


def read_info(path) -> SnapshotInfo:
    """The header of a snapshot (no checksum verification); raises SnapshotCorrupt or OSError."""
    with open(path, "rb") as f:
        head = f.read(HEADER.size)
    return _parse_header(path, head)


def _parse_header(path, head) -> SnapshotInfo:
    if len(head) < HEADER_V1.size:
        raise SnapshotCorrupt("snapshot %s: too short for a header" % path)
    magic, version = struct.unpack_from("<8sH", head)
    if magic != MAGIC:
        raise SnapshotCorrupt("snapshot %s: bad magic %r" % (path, magic))
    size = _HEADER_SIZES.get(version)
    if size is None:
        raise SnapshotCorrupt("snapshot %s: unsupported version %d" % (path, version))
    if len(head) < size:
        raise SnapshotCorrupt("snapshot %s: too short for a header" % path)
    if version == 1:
        _m, _v, index, created = HEADER_V1.unpack_from(head)
        flags = 0
    else:
        _m, _v, index, created, flags = HEADER.unpack_from(head)
    return SnapshotInfo(index, created, bool(flags & JOURNAL_FOLLOWS), size)


def run_steps(steps):
    """Drives a generator of load steps (load_snapshot_steps, recovery's recover_steps) to its end at once and
    returns what it returns: the caller has no event loop to yield to (the snapshot builder, tools, tests).
    On a server's loop, recovery/loading.py's Slicer runs them in slices instead."""
    while True:
        try:
            next(steps)
        except StopIteration as stop:
            return stop.value


def verify_snapshot(path):
    """Checks size, header, trailer and checksum. Returns (index, created_ms, commands); raises
    SnapshotCorrupt."""
    return run_steps(verify_snapshot_steps(path))


def verify_snapshot_steps(path):
    """verify_snapshot as a generator: yields after each chunk of _READ_SIZE read and checked (a large file is
    checked without holding the caller for the whole of it); returns (index, created_ms, commands)."""
    size = os.path.getsize(path)
    if size < HEADER_V1.size + TRAILER.size:
        raise SnapshotCorrupt("snapshot %s: truncated (%d bytes)" % (path, size))
    crc = 0
    end = size - 4
    with open(path, "rb") as f:
        head = f.read(min(HEADER.size, size - TRAILER.size))
        info = _parse_header(path, head)
        head = head[:info.header_size]
        f.seek(info.header_size)
        crc = crc32c(head)
        pos = info.header_size
        while pos < end:
            chunk = f.read(min(_READ_SIZE, end - pos))
            if not chunk:
                raise SnapshotCorrupt("snapshot %s: shorter than its size while reading" % path)
            crc = crc32c(chunk, crc)
            pos += len(chunk)
            yield
        f.seek(size - TRAILER.size)
        magic, commands, stored = TRAILER.unpack(f.read(TRAILER.size))
    if magic != TRAILER_MAGIC:
        raise SnapshotCorrupt("snapshot %s: bad trailer (incomplete file?)" % path)
    if stored != crc:
        raise SnapshotCorrupt("snapshot %s: checksum mismatch (stored %08x, computed %08x)" % (path, stored, crc))
    return info.index, info.created_ms, commands


def load_snapshot(path, keyspace, apply_fn) -> int:
    """Verifies the snapshot's checksum, then applies its commands with apply_fn(db_id, argv) (expiry off
    in keyspace meanwhile). Returns the journal index it covers. Raises SnapshotCorrupt before applying
    anything when the file is damaged."""
    return run_steps(load_snapshot_steps(path, keyspace, apply_fn))


def load_snapshot_steps(path, keyspace, apply_fn, progress=None, count_total=True):
    """load_snapshot as a generator: yields after each chunk verified and after each command applied, so that
    a server loads in slices of its event loop (recovery/loading.py); returns the journal index the snapshot
    covers. `progress` (recovery/loading.LoadProgress, or None) counts the file's bytes: loaded_bytes grows
    with the commands applied, and the file's size joins total_bytes (unless count_total is False: the caller
    counted it). Expiry is off in keyspace from the first command to the last (between the steps too)."""
    size = os.path.getsize(path)
    if progress is not None and count_total:
        progress.total_bytes += size
    index, _created, commands = yield from verify_snapshot_steps(path)
    header_size = read_info(path).header_size
    end = size - TRAILER.size
    reader = hiredis.Reader()
    db_id = 0
    count = 0
    consumed = 0
    fed = 0
    saved = keyspace.expire_enabled
    keyspace.expire_enabled = False
    try:
        with open(path, "rb") as f:
            f.seek(header_size)
            pos = header_size
            if progress is not None:
                progress.loaded_bytes += header_size
            while pos < end:
                chunk = f.read(min(_READ_SIZE, end - pos))
                if not chunk:
                    raise SnapshotCorrupt("snapshot %s: shorter than its size while reading" % path)
                pos += len(chunk)
                fed += len(chunk)
                reader.feed(chunk)
                while True:
                    try:
                        argv = reader.gets()
                    except hiredis.ProtocolError as exc:
                        raise SnapshotCorrupt("snapshot %s: bad body: %s" % (path, exc)) from None
                    if argv is False:
                        break
                    if type(argv) is not list or not argv or any(type(a) is not bytes for a in argv):
                        raise SnapshotCorrupt("snapshot %s: body holds something other than a command" % path)
                    n = request_len(argv)
                    consumed += n
                    count += 1
                    if len(argv) == 2 and argv[0].upper() == b"SELECT":
                        if not argv[1].isdigit():
                            raise SnapshotCorrupt("snapshot %s: bad SELECT %r" % (path, argv[1]))
                        db_id = int(argv[1])
                    else:
                        apply_fn(db_id, argv)
                    if progress is not None:
                        progress.loaded_bytes += n
                    yield
    finally:
        keyspace.expire_enabled = saved
    if consumed != fed or count != commands:
        raise SnapshotCorrupt("snapshot %s: body ends inside a command or holds %d commands, not %d"
                              % (path, count, commands))
    if progress is not None:
        progress.loaded_bytes += TRAILER.size
    return index


def newest_valid_snapshot(data_dir):
    """(index, path) of the newest snapshot whose checksum verifies, or None. Damaged newer ones are
    logged and passed over (the journal after an older snapshot still rebuilds the state)."""
    for index, path in list_snapshots(data_dir):
        try:
            verify_snapshot(path)
        except (SnapshotCorrupt, OSError) as exc:
            log.error("snapshot %s is not usable, falling back to an older one: %s", path, exc)
            continue
        return index, path
    return None


def load_newest_snapshot(data_dir, keyspace, apply_fn):
    """Loads the newest valid snapshot into keyspace; returns its index and path, or (0, None) when there
    is none. Each candidate's checksum is verified before any of it is applied."""
    return run_steps(load_newest_snapshot_steps(data_dir, keyspace, apply_fn))


def load_newest_snapshot_steps(data_dir, keyspace, apply_fn, progress=None, count_total=True):
    """load_newest_snapshot as a generator of steps (load_snapshot_steps'); returns (index, path)."""
    for index, path in list_snapshots(data_dir):
        total_before = progress.total_bytes if progress is not None else 0
        try:
            yield from load_snapshot_steps(path, keyspace, apply_fn, progress, count_total)
        except SnapshotCorrupt as exc:
            if any(len(db.data) for db in keyspace.dbs):
                raise  # damage found after applying part of it (the count check): cannot fall back
            log.error("snapshot %s is not usable, falling back to an older one: %s", path, exc)
            if progress is not None:
                progress.total_bytes = total_before
            continue
        return index, path
    return 0, None
