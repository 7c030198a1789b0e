"""`durakv import FILE --target HOST:PORT`: a Valkey/Redis RDB file into a running durakv server or cluster.

The file is read record by record (keyspace/rdbvalue.iter_rdb_file: one value's bytes in memory at a time,
the file's CRC-64 checked at its end); each key becomes `RESTORE key ttl payload REPLACE ABSTTL` with the
payload exactly as the file holds it, sent to the primary that owns its slot (target.py), function libraries
`FUNCTION LOAD REPLACE` on every primary. The import succeeds only if every write was acknowledged, which on
a `sync` target means committed. A key whose TTL has passed is restored as RESTORE restores it (deleted).
"""

import os
import sys
import time

from ...keyspace import rdbvalue
from .target import Target

PROGRESS_INTERVAL_S = 0.5


class Counts:
    __slots__ = ("keys", "functions", "databases", "bytes", "started_s", "finished_s")

    def __init__(self):
        self.keys = self.functions = self.bytes = 0
        self.databases = set()
        self.started_s = time.monotonic()
        self.finished_s = None

    @property
    def seconds(self):
        return (self.finished_s or time.monotonic()) - self.started_s

    def keys_per_s(self):
        return self.keys / self.seconds if self.seconds > 0 else 0.0


class _CountingFile:
    """A file whose read() counts the bytes read (the progress line's position)."""

    def __init__(self, f, counts):
        self.f, self.counts = f, counts

    def read(self, n):
        data = self.f.read(n)
        self.counts.bytes += len(data)
        return data


def import_rdb(path, target: Target, progress=None, restored=None) -> Counts:
    """Streams the RDB file at path into target; progress(counts, total_bytes) is called now and then;
    `restored`, a set, gets every (db, key) written."""
    counts = Counts()
    total = os.path.getsize(path)
    last_report = 0.0
    with open(path, "rb") as f:
        for record in rdbvalue.iter_rdb(_CountingFile(f, counts).read):
            kind = record[0]
            if kind == "key":
                _, db, key, payload, expire_at_ms = record
                target.check_db(db)
                target.write(db, ("RESTORE", key, str(expire_at_ms or 0), payload, "REPLACE", "ABSTTL"), key)
                counts.keys += 1
                counts.databases.add(db)
                if restored is not None:
                    restored.add((db, key))
            elif kind == "function":
                target.write(0, ("FUNCTION", "LOAD", "REPLACE", record[1]))
                counts.functions += 1
            if progress is not None and time.monotonic() - last_report >= PROGRESS_INTERVAL_S:
                last_report = time.monotonic()
                progress(counts, total)
    target.flush()
    counts.finished_s = time.monotonic()
    if progress is not None:
        progress(counts, total)
    return counts


def progress_line(counts, total_bytes, stream=sys.stderr):
    pct = 100.0 * counts.bytes / total_bytes if total_bytes else 100.0
    stream.write("\rimport: %s keys, %s of %s bytes (%.0f%%), %s keys/s   " % (
        f"{counts.keys:,}", f"{counts.bytes:,}", f"{total_bytes:,}", pct, f"{counts.keys_per_s():,.0f}"))
    stream.flush()
