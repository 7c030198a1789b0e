"""The local journal: segmented append-only files with group commit (one write + one fsync per batch).

Layout: `<dir>/journal/<first_index:020d>.wal`, each file a run of records:

    magic u8 (0xD7) | length u32 | crc u32 | index u64 | epoch u64 | payload (length bytes)

little-endian; crc is CRC32C over index, epoch and payload. The name of a segment is the index of its first
record, so segment names and record indices together must form one contiguous sequence.

Group commit: append() queues the record and returns a future. One writer task takes everything queued,
and in a dedicated single thread does one os.write of all the frames and one os.fsync, so the event loop
never waits for the disk; appends that arrive during that fsync form the next batch.

Recovery (open()): every segment is scanned in order and every record checked (magic, CRC, index). Damage at
the end of the last segment with no valid record after it is an append that never completed (it was never
acknowledged): it is cut and logged. Damage anywhere else, or damage followed by a valid record, raises
JournalCorrupt naming the file and byte offset. Nothing is skipped silently.
"""

import asyncio
import concurrent.futures
import logging
import os
import re
import struct
import threading
import time

from crc32c import crc32c

from ..errors import JournalCorrupt
from .base import Entry, Journal, JournalClosed, JournalFailed, JournalTruncated

log = logging.getLogger("durakv.journal")

MAGIC = 0xD7
HEADER = struct.Struct("<BIIQQ")
HEADER_SIZE = HEADER.size  # 25
_INDEX_EPOCH = struct.Struct("<QQ")
_CRC_FROM = 9  # offset of index+epoch inside the header
SEGMENT_RE = re.compile(r"^(\d{20})\.wal$")
DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024

_APPEND = 0
_ROTATE = 1


def encode_header(index: int, epoch: int, payload) -> bytes:
    """The 25-byte record header for payload (the record is header + payload)."""
    ie = _INDEX_EPOCH.pack(index, epoch)
    return HEADER.pack(MAGIC, len(payload), crc32c(payload, crc32c(ie)), index, epoch)


def encode_frame(index: int, epoch: int, payload: bytes) -> bytes:
    """One whole record (used by tests and tools; the writer joins header and payload itself)."""
    return encode_header(index, epoch, payload) + bytes(payload)


def segment_name(first_index: int) -> str:
    return "%020d.wal" % first_index


def journal_dir(data_dir) -> str:
    return os.path.join(os.fspath(data_dir), "journal")


def list_segments(jdir):
    """[(first_index, path)] of the segment files in a journal directory, in index order."""
    try:
        names = os.listdir(jdir)
    except FileNotFoundError:
        return []
    out = []
    for name in names:
        m = SEGMENT_RE.match(name)
        if m:
            out.append((int(m.group(1)), os.path.join(jdir, name)))
    out.sort()
    return out


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- scanning -----------------------------------------------------------------------------------------

class _Scan:
    """Walks the records of one segment's bytes, verifying each. `tail` is set to (offset, problem) when
    the walk ended at damage that is an incomplete tail (only allowed when tail_ok)."""

    __slots__ = ("path", "tail_ok", "tail")

    def __init__(self, path, tail_ok):
        self.path = path
        self.tail_ok = tail_ok
        self.tail = None

    def records(self, buf, expected, verify_from=0):
        """Yields (offset, index, epoch, payload memoryview) for every record, checking that indices
        continue from `expected`. Records with index < verify_from skip the CRC check (a reader skipping to
        a position); their framing and indices are still checked."""
        mv = memoryview(buf)
        n = len(buf)
        pos = 0
        unpack = HEADER.unpack_from
        while pos < n:
            problem = None
            if n - pos < HEADER_SIZE:
                problem = "incomplete record header (%d of %d bytes)" % (n - pos, HEADER_SIZE)
            else:
                magic, length, crc, index, epoch = unpack(buf, pos)
                end = pos + HEADER_SIZE + length
                if magic != MAGIC:
                    problem = "bad magic byte 0x%02x" % magic
                elif end > n:
                    problem = "incomplete record (%d payload bytes declared, %d present)" % (
                        length, n - pos - HEADER_SIZE)
                elif (index >= verify_from
                      and crc32c(mv[pos + HEADER_SIZE:end], crc32c(mv[pos + _CRC_FROM:pos + HEADER_SIZE])) != crc):
                    problem = "CRC mismatch in record of %d payload bytes" % length
                elif index != expected:
                    raise JournalCorrupt("journal %s: index gap at byte offset %d: record has index %d, expected %d"
                                         % (self.path, pos, index, expected))
            if problem is not None:
                self._damage(buf, pos, expected, problem)
                return
            yield pos, index, epoch, mv[pos + HEADER_SIZE:end]
            expected += 1
            pos = end

    def _damage(self, buf, pos, expected, problem):
        if not self.tail_ok:
            raise JournalCorrupt("journal %s: %s at byte offset %d (not the end of the journal: corrupt)"
                                 % (self.path, problem, pos))
        after = find_valid_record(buf, pos + 1, expected)
        if after is not None:
            raise JournalCorrupt("journal %s: %s at byte offset %d, followed by a valid record at byte offset %d "
                                 "(corrupt, not an incomplete tail)" % (self.path, problem, pos, after))
        self.tail = (pos, problem)


def find_valid_record(buf, start, expected):
    """Offset of the first intact record at or after `start` whose index could follow `expected`, or None.
    Used to tell an incomplete tail (nothing valid after the damage) from corruption in the middle."""
    n = len(buf)
    mv = memoryview(buf)
    magic = bytes([MAGIC])
    max_index = expected + (n - start) // HEADER_SIZE + 1
    pos = buf.find(magic, start)
    while 0 <= pos <= n - HEADER_SIZE:
        _m, length, crc, index, _epoch = HEADER.unpack_from(buf, pos)
        end = pos + HEADER_SIZE + length
        if (expected <= index <= max_index and end <= n
                and crc32c(mv[pos + HEADER_SIZE:end], crc32c(mv[pos + _CRC_FROM:pos + HEADER_SIZE])) == crc):
            return pos
        pos = buf.find(magic, pos + 1)
    return None


def _read_file(path):
    with open(path, "rb") as f:
        return f.read()


def _segment_entries(path, first_index, after, upto, tail_ok):
    """Entries of one segment file with after < index <= upto (upto None: all)."""
    buf = _read_file(path)
    scan = _Scan(path, tail_ok)
    out = []
    for _off, index, epoch, payload in scan.records(buf, first_index, verify_from=after + 1):
        if index > after:
            out.append(Entry(index, epoch, bytes(payload)))
        if upto is not None and index >= upto:
            break  # before looking at the next record, which a concurrent batch may be writing
    return out


def iter_entries(dir, after=0, upto=None):
    """Synchronous reader of the journal under data directory `dir` (usable without asyncio, from another
    process, while a server appends). Yields Entry for after < index <= upto (upto None: to the end).

    The end of the last segment may be an append in progress: reading stops there quietly. Damage before it
    raises JournalCorrupt. If `upto` is given and the journal ends before it, raises JournalCorrupt; if
    entry after+1 was already dropped by truncation, raises JournalTruncated. Without `upto`, records a
    concurrent writer wrote but has not fsynced yet may be included."""
    jdir = journal_dir(dir)
    last = after
    end = 0  # highest index present (read or skipped)
    stalled = 0
    while upto is None or last < upto:
        segs = list_segments(jdir)
        progressed = False
        if segs:
            end = max(end, segs[-1][0] - 1)
            if last + 1 < segs[0][0]:
                raise JournalTruncated("journal %s: entries from %d were dropped (the journal starts at index %d)"
                                       % (jdir, last + 1, segs[0][0]))
            start = 0
            while start + 1 < len(segs) and segs[start + 1][0] <= last + 1:
                start += 1
            expected = segs[start][0]
            for i in range(start, len(segs)):
                first, path = segs[i]
                if first != expected:
                    raise JournalCorrupt("journal %s: segment starts at index %d, expected %d (index gap between "
                                         "segments)" % (path, first, expected))
                try:
                    buf = _read_file(path)
                except FileNotFoundError:
                    raise JournalTruncated("journal segment %s was removed while being read" % path) from None
                scan = _Scan(path, tail_ok=i == len(segs) - 1)
                for _off, index, epoch, payload in scan.records(buf, first, verify_from=last + 1):
                    expected = index + 1
                    if index > end:
                        end = index
                    if index <= last:
                        continue
                    yield Entry(index, epoch, bytes(payload))
                    last = index
                    progressed = True
                    if index == upto:
                        return
        if upto is None:
            return
        if not progressed:
            # The writer may have rotated while we listed: look once more before giving up.
            stalled += 1
            if stalled >= 2:
                raise JournalCorrupt("journal %s ends at index %d, before the requested index %d"
                                     % (jdir, end, upto))


# -- the journal --------------------------------------------------------------------------------------

class _Segment:
    __slots__ = ("first_index", "path", "size", "count")

    def __init__(self, first_index, path, size=0, count=0):
        self.first_index = first_index
        self.path = path
        self.size = size
        self.count = count

    def __repr__(self):
        return "Segment(%d, %s, %d bytes, %d entries)" % (self.first_index, self.path, self.size, self.count)


class LocalJournal(Journal):
    """Segmented file journal in `<dir>/journal/`.

    Test hooks: `stall_ms` (sleep before each fsync, in the writer thread), counters `fsync_count`
    (segment fsyncs), `dir_fsync_count`, `write_count` (os.write calls of batches), `batch_count`,
    `torn_tail_cuts`; `writing` is True while a batch is being written/fsynced."""

    def __init__(self, dir, segment_bytes=DEFAULT_SEGMENT_BYTES, fsync=True, group_per_iteration=True):
        self.data_dir = os.fspath(dir)
        self.dir = journal_dir(dir)
        self.segment_bytes = segment_bytes
        self.fsync = fsync
        self.stall_ms = 0
        self.group_per_iteration = group_per_iteration
        self._kick_scheduled = False
        self.fsync_count = 0
        self.dir_fsync_count = 0
        self.write_count = 0
        self.batch_count = 0
        self.torn_tail_cuts = 0
        self.writing = False
        self._inflight = 0
        self._segments = []
        self._seg_lock = threading.Lock()
        self._fd = -1
        self._commit = 0
        self._next = 1
        self._pending = []
        self._idle = None
        self._loop = None
        self._executor = None
        self._open = False
        self._failed = None

    # -- properties ------------------------------------------------------------------------------
    @property
    def commit_index(self) -> int:
        return self._commit

    @property
    def first_index(self) -> int:
        segs = self._segments
        return segs[0].first_index if segs else self._commit + 1

    @property
    def bytes_size(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def segments(self):
        """[(first_index, path)] of the held segments, oldest first."""
        with self._seg_lock:
            return [(s.first_index, s.path) for s in self._segments]

    @property
    def next_index(self) -> int:
        """The index the next append() will get."""
        return self._next

    @property
    def pending(self) -> int:
        """Appends (and rotations) called but not yet completed."""
        return len(self._pending) + self._inflight

    # -- open / recovery -------------------------------------------------------------------------
    async def open(self, base_index: int = 0) -> None:
        if self._open:
            raise RuntimeError("journal already open")
        self._loop = asyncio.get_running_loop()
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="durakv-journal")
        try:
            await self._loop.run_in_executor(self._executor, self._recover, base_index)
        except BaseException:
            self._executor.shutdown(wait=False)
            self._executor = None
            raise
        self._failed = None
        self._pending = []
        self._idle = asyncio.Event()
        self._idle.set()
        self._open = True

    def _recover(self, base_index):
        os.makedirs(self.dir, exist_ok=True)
        found = list_segments(self.dir)
        segments = []
        if found:
            expected = found[0][0]
            for i, (first, path) in enumerate(found):
                if first != expected:
                    raise JournalCorrupt("journal %s: segment starts at index %d, expected %d (index gap between "
                                         "segments)" % (path, first, expected))
                last = i == len(found) - 1
                buf = _read_file(path)
                scan = _Scan(path, tail_ok=last)
                count = 0
                for _rec in scan.records(buf, first):
                    count += 1
                expected = first + count
                size = len(buf)
                if scan.tail is not None:
                    offset, problem = scan.tail
                    log.warning("journal %s: incomplete tail at byte offset %d (%s): cut %d bytes "
                                "(an append that never completed)", path, offset, problem, size - offset)
                    with open(path, "r+b") as f:
                        f.truncate(offset)
                        f.flush()
                        os.fsync(f.fileno())
                    size = offset
                    self.torn_tail_cuts += 1
                segments.append(_Segment(first, path, size, count))
            if expected - 1 < base_index:
                if any(seg.count for seg in segments):
                    raise JournalCorrupt("journal %s ends at index %d, but the snapshot it continues covers index %d"
                                         % (self.dir, expected - 1, base_index))
                # Only empty segments, numbered before the snapshot: continue the numbering after it.
                for seg in segments:
                    os.unlink(seg.path)
                segments = []
        if not segments:
            path = os.path.join(self.dir, segment_name(base_index + 1))
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))
            self._dir_sync()
            segments.append(_Segment(base_index + 1, path))
            expected = base_index + 1
        last = segments[-1]
        fd = os.open(last.path, os.O_WRONLY | os.O_APPEND)
        with self._seg_lock:
            self._segments = segments
        self._fd = fd
        self._commit = expected - 1
        self._next = expected
        log.info("journal %s opened: %d segment(s), entries %d..%d", self.dir, len(segments),
                 segments[0].first_index, expected - 1)

    def _dir_sync(self):
        if self.fsync:
            fsync_dir(self.dir)
            self.dir_fsync_count += 1

    # -- appends ---------------------------------------------------------------------------------
    def append(self, payload, epoch: int = 0):
        if not self._open:
            raise JournalClosed("journal is closed")
        if self._failed is not None:
            raise JournalFailed(str(self._failed))
        index = self._next
        self._next = index + 1
        fut = self._loop.create_future()
        self._pending.append((_APPEND, index, payload, encode_header(index, epoch, payload), fut))
        self._kick()
        return fut

    def rotate(self):
        """Closes the current segment (if it holds any entry) and starts a new one, ordered after every
        append called before: once the returned future resolves, all entries <= the commit index at the
        call are in closed segments. The marker is queued by the call itself (awaiting is optional).
        The future resolves to the first index of the now current segment."""
        if not self._open:
            raise JournalClosed("journal is closed")
        if self._failed is not None:
            raise JournalFailed(str(self._failed))
        fut = self._loop.create_future()
        self._pending.append((_ROTATE, self._next, None, None, fut))
        self._kick()
        return fut

    def _kick(self):
        """Hands everything queued to the journal thread as one batch, unless a batch is in progress
        (group commit: what arrives meanwhile forms the next batch). Called on the event loop.

        With group_per_iteration (the default) the batch leaves at the end of the loop iteration, so
        appends issued together share one write and fsync. The server's write tracker already makes one
        append per iteration and turns this off to save that hop."""
        if self.writing or not self._pending or self._failed is not None:
            return
        if self.group_per_iteration and not self._kick_scheduled:
            self._kick_scheduled = True
            self._loop.call_soon(self._kick_now)
            return
        if not self._kick_scheduled:
            self._kick_now()

    def _kick_now(self):
        self._kick_scheduled = False
        if self.writing or not self._pending or self._failed is not None:
            return
        items = self._pending
        self._pending = []
        self.writing = True
        self._inflight = len(items)
        self._idle.clear()
        self._executor.submit(self._thread_batch, items)

    def _thread_batch(self, items):
        """Runs in the journal thread: write + fsync, then completes the batch on the event loop in one
        hop (no task or executor-future round trips, which each cost an event-loop iteration)."""
        try:
            self._write_items(items)
            exc = None
        except BaseException as e:  # noqa: BLE001 - reported on the loop
            exc = e
        try:
            self._loop.call_soon_threadsafe(self._batch_done, items, exc)
        except RuntimeError:
            pass  # the loop is gone: the process is exiting

    def _batch_done(self, items, exc):
        self.writing = False
        self._inflight = 0
        if exc is not None:
            failure = JournalFailed("journal write failed: %s: %s" % (type(exc).__name__, exc))
            failure.__cause__ = exc
            self._failed = failure
            log.error("journal %s: %s; appends are refused until it is reopened", self.dir, failure)
            for item in items + self._pending:
                fut = item[4]
                if not fut.done():
                    fut.set_exception(failure)
            self._pending = []
            self._idle.set()
            return
        commit = self._commit
        for kind, index, _payload, _header, _fut in items:
            if kind == _APPEND:
                commit = index
        self._commit = commit
        for kind, index, _payload, _header, fut in items:
            if not fut.done():
                fut.set_result(index)
        if self._pending:
            self._kick_now()  # appends that arrived during the fsync: the next batch, at once
        else:
            self._idle.set()

    def _write_items(self, items):
        """Runs in the journal thread: writes and fsyncs a batch, rotating segments as needed."""
        self.batch_count += 1
        seg = self._segments[-1]
        parts = []
        size = 0
        count = 0
        limit = self.segment_bytes
        for kind, index, payload, header, fut in items:
            if kind == _ROTATE:
                if seg.size + size > 0:
                    if parts:
                        self._flush(seg, parts, size, count)
                        parts, size, count = [], 0, 0
                    seg = self._rotate_now(index)
                continue  # its future resolves to `index`: the first index of the (new or empty) segment
            rec = HEADER_SIZE + len(payload)
            if seg.size + size > 0 and seg.size + size + rec > limit:
                if parts:
                    self._flush(seg, parts, size, count)
                    parts, size, count = [], 0, 0
                seg = self._rotate_now(index)
            parts.append(header)
            parts.append(payload)
            size += rec
            count += 1
        if parts:
            self._flush(seg, parts, size, count)

    def _flush(self, seg, parts, size, count):
        data = b"".join(parts)
        fd = self._fd
        view = memoryview(data)
        written = 0
        while written < size:
            written += os.write(fd, view[written:])
        self.write_count += 1
        seg.size += size
        seg.count += count
        if self.stall_ms:
            time.sleep(self.stall_ms / 1000.0)
        if self.fsync:
            os.fsync(fd)
            self.fsync_count += 1

    def _rotate_now(self, first_index):
        """Closes the current segment (its data is already fsynced) and creates the next one."""
        path = os.path.join(self.dir, segment_name(first_index))
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_APPEND, 0o644)
        old = self._fd
        self._fd = fd
        os.close(old)
        self._dir_sync()
        seg = _Segment(first_index, path)
        with self._seg_lock:
            self._segments.append(seg)
        log.debug("journal %s: new segment %s", self.dir, path)
        return seg

    # -- reads -----------------------------------------------------------------------------------
    async def read(self, after: int):
        first = self.first_index
        if after + 1 < first and after < self._commit:
            raise JournalTruncated("journal %s: entries from %d were dropped (the journal starts at index %d)"
                                   % (self.dir, after + 1, first))
        loop = asyncio.get_running_loop()
        pos = after
        while pos < self._commit:
            upto = self._commit
            with self._seg_lock:
                segs = list(self._segments)
            seg = None
            for s in segs:
                if s.first_index <= pos + 1:
                    seg = s
                else:
                    break
            if seg is None:
                raise JournalTruncated("journal %s: entry %d was dropped" % (self.dir, pos + 1))
            try:
                entries = await loop.run_in_executor(None, _segment_entries, seg.path, seg.first_index, pos, upto,
                                                     False)
            except FileNotFoundError:
                raise JournalTruncated("journal segment %s was removed while being read" % seg.path) from None
            if not entries or entries[0].index != pos + 1:
                raise JournalCorrupt("journal %s: entry %d not found where expected" % (seg.path, pos + 1))
            for entry in entries:
                yield entry
            pos = entries[-1].index

    # -- truncation ------------------------------------------------------------------------------
    async def truncate_before(self, index: int) -> int:
        """Deletes closed segments whose entries are all < index (the current segment is never deleted)."""
        with self._seg_lock:
            segs = self._segments
            k = 0
            while k + 1 < len(segs) and segs[k + 1].first_index <= index:
                k += 1
            drop = segs[:k]
            if drop:
                self._segments = segs[k:]
        if drop:
            await asyncio.get_running_loop().run_in_executor(None, self._unlink, [s.path for s in drop])
            log.info("journal %s: dropped %d segment(s) before index %d", self.dir, len(drop), index)
        return self.first_index

    def _unlink(self, paths):
        for p in paths:
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass
        self._dir_sync()

    # -- close -----------------------------------------------------------------------------------
    async def close(self) -> None:
        if not self._open:
            return
        self._open = False
        try:
            self._kick_now()
            await self._idle.wait()
        finally:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
            self._executor.shutdown(wait=True)
            self._executor = None
