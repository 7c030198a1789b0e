"""The local journal: segmented append-only files with group commit (one write + one fsync per batch).

Layout: `<dir>/journal/<first_index:020d>.seg`, each file a 512-byte segment header, then a run of records:

    record     magic u8 (0xD7) | length u32 | crc u32 | index u64 | epoch u64 | payload (length bytes)
    header     magic b"DKVJSEG\\n" | version u16 (2) | flags u16 | reserved u32 | first_index u64 |
               created_ms u64 | crc u32 (CRC32C of the 32 bytes before it)        at offset 0
    state      two slots (at offsets 64 and 128), the newer (higher seq) valid one counts:
               magic b"DKVS" | reserved u32 | seq u64 | end u64 | batch_start u64 | last_index u64 |
               sealed u8 | fsync u8 | 2 pad | crc u32

little-endian; a record's crc is CRC32C over index, epoch and payload. The name of a segment is the index of
its first record, so segment names and record indices together must form one contiguous sequence.

Why a state slot: only the bytes of the last append can be torn by a crash, but the records alone cannot
tell a torn last append from a cut that took acknowledged entries with it. Every batch writes its records
and then the slot `(end, batch_start = where this batch began, last_index)`, alternating between the two
slots, and one fsync covers both. After a crash the slot is either this batch's or the previous one's, so
in every legitimate case the records reach at least the slot's batch_start: damage that ends the records
before it (zeroed or truncated acknowledged data) is refused, not cut. A segment is *sealed* (its slot
says so) once its successor exists durably, so a missing newest segment is seen too. A segment is created
under a temporary name and renamed once its header is durable, and the journal directory itself the same
way, so an existing segment always has a whole header and an existing journal directory a segment.

The format before it (`<first_index:020d>.wal`, records from offset 0, no header) is still read: such
segments keep their old rules (a damaged tail of the last one is cut), and opening a journal whose current
segment is one starts a new-format segment after it (the old ones are dropped by truncation later).

Group commit: append() queues the record and returns a future. One writer task takes everything queued,
and in a dedicated single thread does one pwrite of all the frames, one pwrite of the state slot and one
fsync, so the event loop never waits for the disk; appends that arrive during that fsync form the next batch.

Recovery: `check_journal` scans every segment in order and checks every record (magic, CRC, index) against
the segments' state. Damage at the end of the last segment that lies within its last append, with no valid
record after it, is an append that never completed (never acknowledged): it is cut and logged. Anything
else (damage in a closed segment, a valid record after damage, records ending before what the state says
was committed, an index gap between segments, a sealed newest segment whose successor is missing, a
damaged segment header) raises JournalCorrupt naming the file, the byte offset and the entries missing,
unless the operator set `journal-load-truncated yes`: then the journal is cut at the first damage and every
dropped entry range is logged (cut bytes and dropped segment files are kept aside as `*.dropped`).
Nothing is skipped silently.
"""

import asyncio
import concurrent.futures
import errno as errno_mod
import logging
import os
import re
import struct
import threading
import time
from typing import NamedTuple, Optional

from crc32c import crc32c

from ..errors import JournalCorrupt
from .base import Entry, Journal, JournalClosed, JournalFailed, JournalTruncated

log = logging.getLogger("durakv.journal")

MAGIC = 0xD7
HEADER = struct.Struct("<BIIQQ")
HEADER_SIZE = HEADER.size  # 25
_INDEX_EPOCH = struct.Struct("<QQ")
_CRC_FROM = 9  # offset of index+epoch inside the header
_U32 = struct.Struct("<I")

SEG_SUFFIX = ".seg"
LEGACY_SUFFIX = ".wal"
SEGMENT_RE = re.compile(r"^(\d{20})\.(seg|wal)$")
_TMP_RE = re.compile(r"^(\d{20})\.seg\.tmp$")
DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024
# The largest payload one record carries (`max_entry_bytes`; the record's length field would allow 4 GiB). A
# bound keeps one batch's write, and what recovery and readers hold of one record, a few MB: the write tracker
# closes batches before it and carries a larger command in continuation parts (journal/codec.py).
MAX_ENTRY_BYTES = 16 * 1024 * 1024

SEG_MAGIC = b"DKVJSEG\n"
SEG_VERSION = 2
_SEG_HEAD = struct.Struct("<8sHHIQQ")
_SLOT = struct.Struct("<4sIQQQQBB2x")
_SLOT_MAGIC = b"DKVS"
SLOT_OFFSETS = (64, 128)
DATA_START = 512  # records of a segment start here; header and slots share its first sector

_APPEND = 0
_ROTATE = 1

# verdicts of a segment scan
TORN = "torn"          # an append that never completed: cut it
CORRUPT = "corrupt"    # damage beyond the last append: refuse
SEALED = "sealed"      # a sealed segment is the newest one: its successor is missing (or, to a live reader,
                       # the writer rotated after the listing)


def encode_header(index: int, epoch: int, payload) -> bytes:
    """The 25-byte record header for payload (the record is header + payload)."""
    ie = _INDEX_EPOCH.pack(index, epoch)
    return HEADER.pack(MAGIC, len(payload), crc32c(payload, crc32c(ie)), index, epoch)


def encode_frame(index: int, epoch: int, payload: bytes) -> bytes:
    """One whole record (used by tests and tools; the writer joins header and payload itself)."""
    return encode_header(index, epoch, payload) + bytes(payload)


class SegmentState(NamedTuple):
    seq: int
    end: int          # file offset after the last record written with this state
    batch_start: int  # file offset where the batch that wrote this state began
    last_index: int   # index of the record ending at `end` (first_index - 1 when none)
    sealed: int       # 1: closed for good, its successor exists
    fsync: int        # 1: the writer fsynced every batch


def encode_slot(state: SegmentState) -> bytes:
    body = _SLOT.pack(_SLOT_MAGIC, 0, *state)
    return body + _U32.pack(crc32c(body))


def decode_slot(buf, offset) -> Optional[SegmentState]:
    end = offset + _SLOT.size + 4
    if len(buf) < end:
        return None
    body = bytes(buf[offset:offset + _SLOT.size])
    (crc,) = _U32.unpack_from(buf, offset + _SLOT.size)
    if crc32c(body) != crc:
        return None
    magic, _r, *fields = _SLOT.unpack(body)
    if magic != _SLOT_MAGIC:
        return None
    return SegmentState(*fields)


def slot_offset(seq: int) -> int:
    return SLOT_OFFSETS[seq % 2]


def encode_segment_head(first_index: int, state: SegmentState, created_ms: Optional[int] = None) -> bytes:
    """The first DATA_START bytes of a new segment: header, the initial state slot, zero padding."""
    created = int(time.time() * 1000) if created_ms is None else created_ms
    head = _SEG_HEAD.pack(SEG_MAGIC, SEG_VERSION, 0, 0, first_index, created)
    out = bytearray(DATA_START)
    out[0:len(head)] = head
    out[len(head):len(head) + 4] = _U32.pack(crc32c(head))
    slot = encode_slot(state)
    off = slot_offset(state.seq)
    out[off:off + len(slot)] = slot
    return bytes(out)


def segment_name(first_index: int) -> str:
    return "%020d%s" % (first_index, SEG_SUFFIX)


def legacy_segment_name(first_index: int) -> str:
    return "%020d%s" % (first_index, LEGACY_SUFFIX)


def journal_dir(data_dir) -> str:
    return os.path.join(os.fspath(data_dir), "journal")


def list_segments(jdir):
    """[(first_index, path)] of the segment files in a journal directory, in index order (an old-format
    `.wal` before a new-format `.seg` of the same index). An empty `.wal` next to a `.seg` of the same index
    is what a crash in the middle of the format migration leaves; it is not listed."""
    try:
        names = os.listdir(jdir)
    except FileNotFoundError:
        return []
    found = {}
    for name in names:
        m = SEGMENT_RE.match(name)
        if m:
            found.setdefault(int(m.group(1)), []).append((m.group(2) == "seg", os.path.join(jdir, name)))
    out = []
    for first in sorted(found):
        kinds = sorted(found[first])
        if len(kinds) == 2 and _is_empty(kinds[0][1]):
            kinds = kinds[1:]
        out.extend((first, path) for _new, path in kinds)
    return out


def _is_empty(path) -> bool:
    try:
        return os.path.getsize(path) == 0
    except OSError:
        return False


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- scanning -----------------------------------------------------------------------------------------

class _SegScan:
    """Checks one segment's bytes: its header and state (new format), then every record. `head()` first,
    then iterate `records()`, then `verdict()` says whether what was found is whole, a torn tail or damage."""

    __slots__ = ("path", "first", "legacy", "state", "start", "end", "count", "damage", "size")

    def __init__(self, path, first):
        self.path = path
        self.first = first
        self.legacy = path.endswith(LEGACY_SUFFIX)
        self.state = None
        self.start = 0 if self.legacy else DATA_START
        self.end = self.start     # offset after the last valid record
        self.count = 0
        self.damage = None        # (offset, problem, is_index_gap)
        self.size = 0

    @property
    def last_index(self):
        return self.first + self.count - 1

    def head(self, buf):
        """Checks a new-format segment's header and picks its newest valid state slot; returns a problem
        text or None."""
        self.size = len(buf)
        if self.legacy:
            return None
        if len(buf) < DATA_START:
            return ("segment header incomplete (%d of %d bytes: the file was cut or emptied after it was "
                    "created)" % (len(buf), DATA_START))
        magic, version, _flags, _r, first, _created = _SEG_HEAD.unpack_from(buf, 0)
        (crc,) = _U32.unpack_from(buf, _SEG_HEAD.size)
        if magic != SEG_MAGIC or crc32c(bytes(buf[:_SEG_HEAD.size])) != crc:
            return "segment header damaged (bad magic or checksum)"
        if version != SEG_VERSION:
            return "unsupported segment version %d" % version
        if first != self.first:
            return "segment header says first index %d, its file name %d" % (first, self.first)
        states = [s for s in (decode_slot(buf, off) for off in SLOT_OFFSETS) if s is not None]
        if not states:
            return "both state slots damaged (cannot tell how many entries were committed)"
        self.state = max(states, key=lambda s: s.seq)
        return None

    def records(self, buf, expected, verify_from=0):
        """Yields (offset, index, epoch, payload memoryview) for every record, checking that indices
        continue from `expected`. Records with index < verify_from skip the CRC check (a reader skipping to
        a position); their framing and indices are still checked. Stops at the first damage (self.damage)."""
        mv = memoryview(buf)
        n = len(buf)
        pos = self.start
        unpack = HEADER.unpack_from
        while pos < n:
            problem = None
            gap = False
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
                    problem = "record has index %d, expected %d" % (index, expected)
                    gap = True
            if problem is not None:
                self.damage = (pos, problem, gap)
                return
            yield pos, index, epoch, mv[pos + HEADER_SIZE:end]
            expected += 1
            self.count += 1
            pos = end
            self.end = pos

    def verdict(self, buf, is_last):
        """(kind, message) for what the scan found, or None when the segment is whole."""
        st = self.state
        p = self.end
        last = self.last_index
        if self.damage is not None:
            pos, problem, gap = self.damage
            if gap:
                return CORRUPT, "journal %s: index gap at byte offset %d: %s" % (self.path, pos, problem)
            if not is_last:
                return CORRUPT, ("journal %s: %s at byte offset %d (not the end of the journal: corrupt)"
                                 % (self.path, problem, pos))
            after = find_valid_record(buf, pos + 1, last + 1)
            if after is not None:
                return CORRUPT, ("journal %s: %s at byte offset %d, followed by a valid record at byte offset %d "
                                 "(corrupt, not an incomplete tail)" % (self.path, problem, pos, after))
        if st is not None:
            if st.sealed:
                if p != st.end or self.damage is not None:
                    return CORRUPT, ("journal %s: sealed at index %d (byte offset %d), but its records end at "
                                     "byte offset %d (after index %d)" % (self.path, st.last_index, st.end, p, last))
                if is_last:
                    return SEALED, ("journal %s: sealed at index %d, but the segment holding the entries from "
                                    "index %d (%s) is missing" % (self.path, st.last_index, st.last_index + 1,
                                                                 segment_name(st.last_index + 1)))
            else:
                floor = st.batch_start if is_last else st.end
                if p < floor:
                    missing = ("its records end at byte offset %d (after index %d), but its state says entries up to "
                               "index %d (byte offset %d) were written and everything before byte offset %d "
                               "was committed: entries %d..%d are missing"
                               % (p, last, st.last_index, st.end, floor, last + 1, st.last_index))
                    if is_last and not st.fsync:
                        return TORN, ("journal %s: %s; it was written with journal-fsync no, so the system may "
                                      "lose that much on a crash" % (self.path, missing))
                    return CORRUPT, "journal %s: %s" % (self.path, missing)
        if self.damage is not None:
            pos, problem, _gap = self.damage
            return TORN, "journal %s: incomplete tail at byte offset %d (%s)" % (self.path, pos, problem)
        if st is not None and is_last and p < st.end:
            return TORN, ("journal %s: the last append (entries %d..%d) never reached the disk (its state did)"
                          % (self.path, last + 1, st.last_index))
        return None


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


def _segment_entries(path, first_index, after, upto):
    """Entries of one segment file with after < index <= upto (upto None: all)."""
    buf = _read_file(path)
    scan = _SegScan(path, first_index)
    problem = scan.head(buf)
    if problem is not None:
        raise JournalCorrupt("journal %s: %s" % (path, problem))
    out = []
    for _off, index, epoch, payload in scan.records(buf, first_index, verify_from=after + 1):
        if index > after:
            out.append(Entry(index, epoch, bytes(payload)))
        if upto is not None and index >= upto:
            break  # before looking at the next record, which a concurrent batch may be writing
    return out


def _gap_message(path, first, expected, prev_path):
    return ("journal %s: segment starts at index %d, expected %d (index gap between segments: entries %d..%d "
            "are missing after %s)" % (path, first, expected, expected, first - 1, prev_path)
            if first > expected else
            "journal %s: segment starts at index %d, expected %d (index gap between segments: it overlaps %s)"
            % (path, first, expected, prev_path))


def iter_entries(dir, after=0, upto=None):
    """Synchronous reader of the journal under data directory `dir` (usable without asyncio, from another
    process, while a server appends). Yields Entry for after < index <= upto (upto None: to the end).

    Without `upto` (start-up: no writer, the data directory is locked) the journal must be whole: a torn
    last append ends the reading quietly, every other damage raises JournalCorrupt, exactly as recovery
    judges it. With `upto` (a reader beside a live writer) the end of the last segment may be an append in
    progress and a sealed newest segment means the writer rotated meanwhile: the reader looks again. If the
    journal ends before `upto`, raises JournalCorrupt; if entry after+1 was already dropped by truncation,
    raises JournalTruncated. Without `upto`, records a concurrent writer wrote but has not fsynced yet may
    be included."""
    jdir = journal_dir(dir)
    last = after
    end = 0  # highest index present (read or skipped)
    stalled = 0
    live = upto is not None
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
            prev = None
            for i in range(start, len(segs)):
                first, path = segs[i]
                if first != expected:
                    raise JournalCorrupt(_gap_message(path, first, expected, prev))
                try:
                    buf = _read_file(path)
                except FileNotFoundError:
                    raise JournalTruncated("journal segment %s was removed while being read" % path) from None
                scan = _SegScan(path, first)
                problem = scan.head(buf)
                if problem is not None:
                    raise JournalCorrupt("journal %s: %s" % (path, problem))
                for _off, index, epoch, payload in scan.records(buf, first, verify_from=last + 1):
                    if index > end:
                        end = index
                    if index <= last:
                        continue
                    yield Entry(index, epoch, bytes(payload))
                    last = index
                    progressed = True
                    if index == upto:
                        return
                found = scan.verdict(buf, is_last=i == len(segs) - 1)
                if found is not None:
                    kind, message = found
                    if kind == CORRUPT or (kind == SEALED and not live):
                        raise JournalCorrupt(message)
                    break  # a torn tail, or (live) a rotation after the listing: look again
                expected = first + scan.count
                prev = path
        if upto is None:
            return
        if not progressed:
            # The writer may have rotated while we listed: look once more before giving up.
            stalled += 1
            if stalled >= 2:
                raise JournalCorrupt("journal %s ends at index %d, before the requested index %d"
                                     % (jdir, end, upto))


# -- checking and repairing at start-up --------------------------------------------------------------

class _Segment:
    """A segment as the writer sees it. `size` counts record bytes only (the header is not in it)."""

    __slots__ = ("first_index", "path", "size", "count", "legacy", "seq", "batch_start", "sealed")

    def __init__(self, first_index, path, size=0, count=0, legacy=False, seq=0, batch_start=None, sealed=False):
        self.first_index = first_index
        self.path = path
        self.size = size
        self.count = count
        self.legacy = legacy
        self.seq = seq
        self.batch_start = self.file_start if batch_start is None else batch_start
        self.sealed = sealed

    @property
    def file_start(self):
        return 0 if self.legacy else DATA_START

    @property
    def file_end(self):
        return self.file_start + self.size

    @property
    def last_index(self):
        return self.first_index + self.count - 1

    def state(self, seq, sealed=False, fsync=True, batch_start=None):
        return SegmentState(seq, self.file_end, self.file_end if batch_start is None else batch_start,
                            self.last_index, int(sealed), int(fsync))

    def __repr__(self):
        return "Segment(%d, %s, %d bytes, %d entries)" % (self.first_index, self.path, self.size, self.count)


class JournalReport(NamedTuple):
    """What check_journal found (after its repairs)."""
    segments: list          # [_Segment], oldest first
    next_index: int         # the index the next record gets (first index of the journal when it holds none)
    existed: bool           # the journal directory was there
    torn_tail_cuts: int
    dropped: list           # log lines of what journal-load-truncated dropped


def _describe(path, first):
    """'entries a..b (n bytes)' of a segment about to be dropped, as far as it reads."""
    try:
        buf = _read_file(path)
    except OSError as exc:
        return "%s (unreadable: %s)" % (path, exc)
    scan = _SegScan(path, first)
    if scan.head(buf) is not None:
        return "%s (%d bytes, header unreadable; entries from %d)" % (path, len(buf), first)
    for _rec in scan.records(buf, first):
        pass
    text = "%s (entries %d..%d, %d bytes" % (path, first, scan.last_index, len(buf)) if scan.count else \
        "%s (no readable entry, %d bytes" % (path, len(buf))
    if scan.state is not None and scan.state.last_index > scan.last_index:
        text += "; its state says up to %d" % scan.state.last_index
    return text + ")"


def _write_state(path, state, fsync=True):
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.pwrite(fd, encode_slot(state), slot_offset(state.seq))
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def _cut(path, offset, keep_copy):
    """Truncates a segment file to `offset`; with keep_copy the cut bytes are saved beside it first."""
    with open(path, "r+b") as f:
        if keep_copy:
            f.seek(offset)
            tail = f.read()
            if tail:
                aside = "%s.cut-at-%d.dropped" % (path, offset)
                with open(aside, "wb") as g:
                    g.write(tail)
                    g.flush()
                    os.fsync(g.fileno())
        f.truncate(offset)
        f.flush()
        os.fsync(f.fileno())


def check_journal(data_dir, load_truncated=False, expect_after=None, expect_reason="", repair=True, remember=False):
    """Checks (and repairs) the journal under data_dir before anything is replayed; returns a JournalReport.

    Cuts a torn last append (logged). Raises JournalCorrupt for any other damage, naming file, byte offset
    and the entries missing, unless load_truncated: then cuts at the first damage, moves what follows aside
    (`*.dropped`) and logs every entry range dropped. `expect_after` (an index) says the journal must hold
    segments (a snapshot built from the journal covers that index, or the journal directory existed): a
    journal without any is then damage too. With repair False nothing on disk changes (a dry check).
    remember (start-up's check, before recovery) lets the LocalJournal.open() that follows reuse this
    result when no segment file changed meanwhile."""
    jdir = journal_dir(data_dir)
    dropped = []
    torn_cuts = 0
    existed = os.path.isdir(jdir)
    if repair:
        _remove_leftovers(data_dir, jdir, existed)
    found = list_segments(jdir)
    cached = _cached_report(jdir, found)
    if cached is not None:
        return cached
    segments = []
    problem = None      # (message, action) of the first damage
    expected = found[0][0] if found else (expect_after or 0) + 1
    prev_path = None
    for i, (first, path) in enumerate(found):
        if first != expected:
            problem = (_gap_message(path, first, expected, prev_path), ("drop_from", i))
            break
        buf = _read_file(path)
        scan = _SegScan(path, first)
        head_problem = scan.head(buf)
        if head_problem is not None:
            problem = ("journal %s: %s: the entries from index %d are lost" % (path, head_problem, first),
                       ("drop_from", i))
            break
        for _rec in scan.records(buf, first):
            pass
        is_last = i == len(found) - 1
        st = scan.state
        seg = _Segment(first, path, scan.end - scan.start, scan.count, legacy=scan.legacy,
                       seq=st.seq if st else 0, batch_start=st.batch_start if st else None,
                       sealed=bool(st and st.sealed))
        verdict = scan.verdict(buf, is_last)
        if verdict is not None:
            kind, message = verdict
            if kind == TORN:
                if scan.end < len(buf):
                    log.warning("%s: cut %d bytes (an append that never completed)", message, len(buf) - scan.end)
                    if repair:
                        _cut(path, scan.end, keep_copy=False)
                else:
                    log.warning("%s", message)
                if repair and st is not None:
                    seg.seq += 1
                    seg.batch_start = seg.file_end
                    _write_state(path, seg.state(seg.seq, fsync=bool(st.fsync)))
                torn_cuts += 1
            elif kind == SEALED:
                segments.append(seg)
                problem = (message, ("unseal", i))
                break
            else:
                problem = (message, ("cut", i, scan.end, len(buf)))
                segments.append(seg)
                break
        segments.append(seg)
        expected = first + scan.count
        prev_path = path
    if problem is None and not found and expect_after is not None:
        where = ("the journal directory %s is missing" % jdir if not existed else
                 "the journal directory %s holds no segment" % jdir)
        problem = ("%s, but %s: the entries after index %d are lost (was the newest segment deleted?)"
                   % (where, expect_reason or "a journal was expected", expect_after), ("restart",))
    if problem is not None:
        message, action = problem
        if not load_truncated:
            raise JournalCorrupt("%s. Start-up stopped: set journal-load-truncated yes to start anyway, cutting "
                                 "the journal there and dropping everything after it" % message)
        if not repair:
            raise JournalCorrupt(message)
        segments = _drop(found, segments, action, message, dropped)
        expected = segments[-1].last_index + 1 if segments else (expect_after or 0) + 1
        if not segments and found:
            expected = max(expected, found[0][0])
    report = JournalReport(segments, expected, existed, torn_cuts, dropped)
    if problem is None and repair and remember and found:
        _remember_report(jdir, found, report)
    return report


# Start-up checks the journal before recovery replays it, and LocalJournal.open() checks it again after;
# nothing writes in between (the directory is locked), so the second check reuses the first when every
# segment file is still the same one with the same size and mtime, instead of reading it all a third time.
_REPORTS = {}


def _fingerprint(found):
    out = []
    for _first, path in found:
        try:
            st = os.stat(path)
        except OSError:
            return None
        out.append((path, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    return tuple(out)


def _copy_report(report, torn_tail_cuts):
    segs = [_Segment(s.first_index, s.path, s.size, s.count, s.legacy, s.seq, s.batch_start, s.sealed)
            for s in report.segments]
    return report._replace(segments=segs, torn_tail_cuts=torn_tail_cuts, dropped=[])


def _remember_report(jdir, found, report):
    fp = _fingerprint(found)
    if fp is not None:
        _REPORTS[jdir] = (fp, _copy_report(report, 0))


def _cached_report(jdir, found):
    entry = _REPORTS.pop(jdir, None)  # used once: a later open() checks afresh
    if entry is None or not found or entry[0] != _fingerprint(found):
        return None
    return _copy_report(entry[1], 0)


def _drop(found, segments, action, message, dropped):
    """journal-load-truncated yes: cuts at the damage and moves everything after it aside."""
    def say(text):
        dropped.append(text)
        log.warning("journal-load-truncated yes: %s", text)

    kind = action[0]
    keep = list(segments)
    drop_from = len(found)
    if kind == "drop_from":
        drop_from = action[1]
        keep = keep[:drop_from]
    elif kind == "cut":
        i, offset, size = action[1], action[2], action[3]
        seg = keep[i]
        path = seg.path
        state_last = None
        buf_scan = _SegScan(path, seg.first_index)
        buf = _read_file(path)
        if buf_scan.head(buf) is None and buf_scan.state is not None:
            state_last = buf_scan.state.last_index
        upto = max(state_last or 0, seg.last_index)
        say("%s; dropped entries %d..%s of %s: cut it at byte offset %d (%d bytes, kept as %s.cut-at-%d.dropped)"
            % (message, seg.last_index + 1, upto if upto > seg.last_index else "?", path, offset, size - offset,
               path, offset))
        _cut(path, offset, keep_copy=True)
        keep = keep[:i + 1]
        drop_from = i + 1
    elif kind == "unseal":
        say("%s; the journal continues in a new segment at index %d: whatever the missing segment held is lost"
            % (message, keep[action[1]].last_index + 1))
        keep = keep[:action[1] + 1]
        drop_from = action[1] + 1
    elif kind == "restart":
        say("%s; starting a new journal" % message)
    for first, path in found[drop_from:]:
        say("dropped segment %s: %s -> %s.dropped" % (path, _describe(path, first), path))
        os.rename(path, path + ".dropped")
    if found[drop_from:]:
        fsync_dir(os.path.dirname(found[0][1]))
    if keep:
        last = keep[-1]
        if not last.legacy:
            last.seq += 1
            last.sealed = False
            last.batch_start = last.file_end
            _write_state(last.path, last.state(last.seq))
    return keep


def _remove_leftovers(data_dir, jdir, existed):
    """Half-made segments (`*.seg.tmp`) and a half-made journal directory: a crash while creating them."""
    tmpdir = jdir + ".tmp"
    if os.path.isdir(tmpdir):
        for name in os.listdir(tmpdir):
            os.unlink(os.path.join(tmpdir, name))
        os.rmdir(tmpdir)
        log.info("journal %s: removed %s (a journal creation that never completed)", jdir, tmpdir)
    if not existed:
        return
    removed = False
    for name in os.listdir(jdir):
        if _TMP_RE.match(name):
            os.unlink(os.path.join(jdir, name))
            log.info("journal %s: removed %s (a segment creation that never completed)", jdir, name)
            removed = True
    if removed:
        fsync_dir(jdir)


# -- the journal --------------------------------------------------------------------------------------

class SysIO:
    """The system calls the journal writer makes. Tests substitute a subclass that fails on cue (ENOSPC,
    EMFILE, EIO) to check the failure contract; production uses this one."""

    def open(self, path, flags, mode=0o644):
        return os.open(path, flags | os.O_CLOEXEC, mode)

    def pwrite(self, fd, data, offset):
        return os.pwrite(fd, data, offset)

    def fsync(self, fd):
        os.fsync(fd)

    def ftruncate(self, fd, length):
        os.ftruncate(fd, length)

    def close(self, fd):
        os.close(fd)

    def rename(self, src, dst):
        os.rename(src, dst)

    def unlink(self, path):
        os.unlink(path)

    def fsync_dir(self, path):
        fsync_dir(path)


class _Broken(Exception):
    """A failure whose clean-up failed too: the journal must be reopened before it appends again."""

    def __init__(self, cause, cleanup):
        super().__init__("%s; restoring the journal after it failed too: %s" % (cause, cleanup))
        self.cause = cause
        self.cleanup = cleanup


def _error_text(exc):
    code = getattr(exc, "errno", None)
    name = errno_mod.errorcode.get(code, "") if code else ""
    text = getattr(exc, "strerror", None) or str(exc)
    return "%s: %s" % (name, text) if name else "%s: %s" % (type(exc).__name__, text)


class LocalJournal(Journal):
    """Segmented file journal in `<dir>/journal/`.

    Failure contract (what the write tracker's retry builds on). An I/O error while writing a batch (ENOSPC
    or EIO from pwrite, EIO from fsync, EMFILE/ENFILE/ENOSPC creating the next segment at rotation) is
    reported on the futures, never raised into the event loop:

    * Entries of the batch that were written and fsynced before the failure (a batch that spans a segment
      rotation) complete normally. The entry that failed, every later entry of the batch and every append
      or rotate called while the batch was in progress fail with JournalFailed, whose __cause__ is the
      OSError (errno kept: `failure.errno`).
    * On disk afterwards: the current segment is cut back (ftruncate) to the end of the last fsynced batch,
      and a segment whose creation failed is removed, so nothing of the failed entries is left in the files.
      The cut is not fsynced by itself: if the machine crashes before the next successful fsync, failed
      entries may still be found by recovery, but only as whole records at their own indices or as a torn
      tail of the last append, which recovery cuts (the base contract: a failed entry may or may not
      survive a crash, never partially, never out of place). Sealing the segment a rotation closes is best
      effort: a failed seal is logged (`seal_failures`) and costs nothing but the missing-segment check.
    * commit_index does not move and next_index goes back to commit_index + 1: the failed indices will be
      given again. So that no owner reuses them unknowingly, the failure latches (as the base contract
      says: every later append fails) until the owner calls resume(). A retry is then resume() followed by
      append() (the same payload or a different one), which gets commit_index + 1 and either commits or
      fails the same way; nothing needs reopening. `append_failures` counts failed batches, `last_failure`
      holds the newest JournalFailed, `failed` says whether appends are refused now.
    * If the cut itself fails (ftruncate fails, or a half-made segment cannot be removed), the files may hold
      bytes the journal no longer accounts for, and writing after them could put stale records in the
      way of new ones: the journal is then *broken* (`broken` is True), resume() raises, and only close()
      and open() (recovery from what is on disk) make it append again.

    Test hooks: `io` (a SysIO), `stall_ms` (sleep before each fsync, in the writer thread), counters
    `fsync_count` (segment fsyncs), `dir_fsync_count`, `write_count` (record writes of batches),
    `batch_count`, `torn_tail_cuts`; `writing` is True while a batch is being written/fsynced."""

    def __init__(self, dir, segment_bytes=DEFAULT_SEGMENT_BYTES, fsync=True, group_per_iteration=True,
                 load_truncated=False, io=None):
        self.data_dir = os.fspath(dir)
        self.dir = journal_dir(dir)
        self.max_entry_bytes = MAX_ENTRY_BYTES
        self.segment_bytes = segment_bytes
        self.fsync = fsync
        self.load_truncated = load_truncated
        self.io = io or SysIO()
        self.stall_ms = 0
        self.group_per_iteration = group_per_iteration
        self._kick_scheduled = False
        self.fsync_count = 0
        self.dir_fsync_count = 0
        self.write_count = 0
        self.batch_count = 0
        self.torn_tail_cuts = 0
        self.append_failures = 0
        self.seal_failures = 0
        self.last_failure = None
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
        self._broken = False

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
        """Record bytes held (segment headers not counted)."""
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

    @property
    def failed(self) -> bool:
        """True after a failed batch until resume() (or, when broken, close() + open())."""
        return self._failed is not None

    @property
    def broken(self) -> bool:
        """True after a failure whose clean-up failed: appends are refused until close() + open()."""
        return self._broken

    def resume(self) -> int:
        """Lets appends go on after a failed batch (the files were already cut back to the last commit).
        Returns the index the next append gets (commit_index + 1). Raises JournalFailed when broken."""
        if not self._open:
            raise JournalClosed("journal is closed")
        if self._broken:
            raise JournalFailed("%s (resume is not possible: close and reopen the journal)" % self._failed)
        if self._failed is not None:
            log.warning("journal %s: appends resume at index %d after: %s", self.dir, self._next, self._failed)
        self._failed = None
        return self._next

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
        self._broken = False
        self._pending = []
        self._idle = asyncio.Event()
        self._idle.set()
        self._open = True

    def _recover(self, base_index):
        report = check_journal(self.data_dir, load_truncated=self.load_truncated)
        self.torn_tail_cuts += report.torn_tail_cuts
        segments = report.segments
        expected = report.next_index
        if segments and expected - 1 < base_index:
            if any(seg.count for seg in segments):
                raise JournalCorrupt("journal %s ends at index %d, but the snapshot it continues covers index %d"
                                     % (self.dir, expected - 1, base_index))
            # Only empty segments, numbered before the snapshot: continue the numbering after it.
            for seg in segments:
                os.unlink(seg.path)
            segments = []
        if not segments:
            expected = base_index + 1
            fd, seg = self._create_first(expected, report.existed)
            segments = [seg]
        else:
            last = segments[-1]
            if last.legacy:
                # The old format has no state slot: continue in a new-format segment after it.
                fd, seg = self._create_segment(expected)
                if last.count == 0 and last.first_index == expected:
                    os.unlink(last.path)
                    segments.pop()
                    self._dir_sync()
                segments.append(seg)
            else:
                fd = self.io.open(last.path, os.O_RDWR)
                if last.sealed:
                    last.sealed = False
                    last.seq += 1
                    self.io.pwrite(fd, encode_slot(last.state(last.seq, fsync=self.fsync,
                                                              batch_start=last.batch_start)),
                                   slot_offset(last.seq))
                    if self.fsync:
                        self.io.fsync(fd)
        with self._seg_lock:
            self._segments = segments
        self._fd = fd
        self._commit = expected - 1
        self._next = expected
        log.info("journal %s opened: %d segment(s), entries %d..%d", self.dir, len(segments),
                 segments[0].first_index, expected - 1)

    def _dir_sync(self, path=None):
        if self.fsync:
            self.io.fsync_dir(path or self.dir)
            self.dir_fsync_count += 1

    def _create_first(self, first_index, existed):
        """The first segment; when there is no journal directory yet, the directory is made under a temporary
        name and renamed once the segment in it is durable (an existing journal directory always has one)."""
        if existed:
            return self._create_segment(first_index)
        tmpdir = self.dir + ".tmp"
        os.makedirs(tmpdir, exist_ok=True)
        fd, seg = self._create_segment(first_index, directory=tmpdir)
        try:
            os.rename(tmpdir, self.dir)
            self._dir_sync(self.data_dir)
        except BaseException:
            self.io.close(fd)
            raise
        seg.path = os.path.join(self.dir, os.path.basename(seg.path))
        return fd, seg

    def _create_segment(self, first_index, directory=None):
        """Creates a new-format segment: header written and fsynced under `<name>.tmp`, then renamed, then
        the directory fsynced. Returns (fd, _Segment). On failure nothing is left behind; raises OSError,
        or _Broken when the half-made segment cannot be removed."""
        io = self.io
        directory = directory or self.dir
        path = os.path.join(directory, segment_name(first_index))
        tmp = path + ".tmp"
        seg = _Segment(first_index, path)
        head = encode_segment_head(first_index, seg.state(0, fsync=self.fsync))
        fd = io.open(tmp, os.O_CREAT | os.O_TRUNC | os.O_RDWR, 0o644)
        try:
            written = 0
            while written < len(head):
                written += io.pwrite(fd, head[written:], written)
            if self.fsync:
                io.fsync(fd)
            io.rename(tmp, path)
        except BaseException as exc:
            self._discard(fd, tmp, exc)
            raise
        try:
            self._dir_sync(directory)
        except BaseException as exc:
            # The rename may not be durable: never seal the previous segment on the strength of it.
            self._discard(fd, path, exc)
            raise
        return fd, seg

    def _discard(self, fd, path, cause):
        try:
            self.io.close(fd)
        except OSError:
            pass
        try:
            self.io.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise _Broken(cause, exc) from cause

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
        done, exc, broken = self._write_items(items)
        try:
            self._loop.call_soon_threadsafe(self._batch_done, items, done, exc, broken)
        except RuntimeError:
            pass  # the loop is gone: the process is exiting

    def _batch_done(self, items, done, exc, broken):
        self.writing = False
        self._inflight = 0
        commit = self._commit
        for kind, index, _payload, _header, _fut in items[:done]:
            if kind == _APPEND:
                commit = index
        self._commit = commit
        for _kind, index, _payload, _header, fut in items[:done]:
            if not fut.done():
                fut.set_result(index)
        if exc is None:
            if self._pending:
                self._kick_now()  # appends that arrived during the fsync: the next batch, at once
            else:
                self._idle.set()
            return
        first_failed = items[done][1]
        if broken:
            state = "the journal could not be restored and refuses appends until it is reopened"
        else:
            state = ("nothing of it was kept; resume() and append again to retry (the retry gets index %d)"
                     % (commit + 1))
        failure = JournalFailed("journal write of entry %d failed: %s; %s" % (first_failed, _error_text(exc), state))
        failure.__cause__ = exc
        failure.errno = getattr(exc, "errno", None)
        later = JournalFailed("journal append not written: entry %d before it failed (%s)"
                              % (first_failed, _error_text(exc)))
        later.__cause__ = exc
        later.errno = failure.errno
        self.append_failures += 1
        self.last_failure = failure
        self._failed = failure
        self._broken = broken
        log.error("journal %s: %s", self.dir, failure)
        for item in items[done:]:
            if not item[4].done():
                item[4].set_exception(failure)
        for item in self._pending:
            if not item[4].done():
                item[4].set_exception(later)
        self._pending = []
        self._next = commit + 1
        self._idle.set()

    def _write_items(self, items):
        """Runs in the journal thread: writes and fsyncs a batch, rotating segments as needed. Returns
        (done, exc, broken): items[:done] are durable; exc is the failure that stopped the rest."""
        self.batch_count += 1
        seg = self._segments[-1]
        parts = []
        size = 0
        count = 0
        done = 0
        limit = self.segment_bytes
        try:
            for k, (kind, index, payload, header, _fut) in enumerate(items):
                if kind == _ROTATE:
                    if seg.size + size > 0:
                        if parts:
                            self._flush(seg, parts, size, count)
                            parts, size, count = [], 0, 0
                            done = k
                        seg = self._rotate_now(index)
                    done = k + 1  # its future resolves to `index`: the first index of the (new or empty) segment
                    continue
                rec = HEADER_SIZE + len(payload)
                if seg.size + size > 0 and seg.size + size + rec > limit:
                    if parts:
                        self._flush(seg, parts, size, count)
                        parts, size, count = [], 0, 0
                        done = k
                    seg = self._rotate_now(index)
                parts.append(header)
                parts.append(payload)
                size += rec
                count += 1
            if parts:
                self._flush(seg, parts, size, count)
            return len(items), None, False
        except _Broken as exc:
            return done, exc, True
        except Exception as exc:  # noqa: BLE001 - OSError mostly; anything else leaves the state unknown
            return done, exc, not isinstance(exc, OSError)

    def _flush(self, seg, parts, size, count):
        """Writes records and then the state slot describing them, then one fsync. On failure the segment is
        cut back to where the batch began (raises the failure, or _Broken when the cut fails)."""
        io = self.io
        data = b"".join(parts)
        fd = self._fd
        start = seg.file_end
        view = memoryview(data)
        seq = seg.seq + 1
        try:
            written = 0
            while written < size:
                written += io.pwrite(fd, view[written:], start + written)
            self.write_count += 1
            state = SegmentState(seq, start + size, start, seg.last_index + count, 0, int(self.fsync))
            io.pwrite(fd, encode_slot(state), slot_offset(seq))
            if self.stall_ms:
                time.sleep(self.stall_ms / 1000.0)
            if self.fsync:
                io.fsync(fd)
                self.fsync_count += 1
        except BaseException as exc:
            try:
                io.ftruncate(fd, start)
            except OSError as cut:
                raise _Broken(exc, cut) from exc
            raise
        seg.seq = seq
        seg.batch_start = start
        seg.size += size
        seg.count += count

    def _rotate_now(self, first_index):
        """Creates the next segment, then seals the current one (its data is already fsynced)."""
        fd, seg = self._create_segment(first_index)
        old = self._segments[-1]
        old_fd = self._fd
        try:
            seq = old.seq + 1
            self.io.pwrite(old_fd, encode_slot(old.state(seq, sealed=True, fsync=self.fsync,
                                                         batch_start=old.batch_start)), slot_offset(seq))
            if self.fsync:
                self.io.fsync(old_fd)
            old.seq = seq
            old.sealed = True
        except OSError as exc:
            self.seal_failures += 1
            log.warning("journal %s: could not seal %s (%s); it stays unsealed, which only weakens the check "
                        "for a missing newest segment", self.dir, old.path, _error_text(exc))
        self._fd = fd
        try:
            self.io.close(old_fd)
        except OSError:
            pass
        with self._seg_lock:
            self._segments.append(seg)
        log.debug("journal %s: new segment %s", self.dir, seg.path)
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
                entries = await loop.run_in_executor(None, _segment_entries, seg.path, seg.first_index, pos, upto)
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
