"""Reading the local journal's files: one segment's records checked and judged, and the synchronous reader.

`SegScan` checks one segment (header, state, every record's magic, CRC and index) and says whether what it
found is whole, a torn tail or damage; `iter_entries` reads a journal with it from another thread or process
(recovery, the snapshot builder), `segment_entries` one segment for LocalJournal.read().
"""

from ..checksum import crc32c

from ..errors import JournalCorrupt
from .base import Entry, JournalTruncated
from .walformat import (CRC_FROM, DATA_START, HEADER_SIZE, HEADER_SIZE_V2, LEGACY_SUFFIX, MAGIC, MAGIC_V2,
                        SEG_HEAD, SEG_MAGIC, SEG_VERSIONS_READ, SLOT_OFFSETS, U32, decode_slot, journal_dir,
                        list_segments, read_file, segment_name, unpack_record_header)

# verdicts of a segment scan
TORN = "torn"          # an append that never completed: cut it
CORRUPT = "corrupt"    # damage beyond the last append: refuse
SEALED = "sealed"      # a sealed segment is the newest one: its successor is missing (or, to a live reader,
                       # the writer rotated after the listing)


class SegScan:
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
        magic, version, _flags, _r, first, _created = SEG_HEAD.unpack_from(buf, 0)
        (crc,) = U32.unpack_from(buf, SEG_HEAD.size)
        if magic != SEG_MAGIC or crc32c(bytes(buf[:SEG_HEAD.size])) != crc:
            return "segment header damaged (bad magic or checksum)"
        if version not in SEG_VERSIONS_READ:
            return ("unsupported segment version %d (this durakv reads versions %s: the journal was written by a "
                    "newer durakv)" % (version, ", ".join(map(str, SEG_VERSIONS_READ))))
        if first != self.first:
            return "segment header says first index %d, its file name %d" % (first, self.first)
        states = [s for s in (decode_slot(buf, off) for off in SLOT_OFFSETS) if s is not None]
        if not states:
            return "both state slots damaged (cannot tell how many entries were committed)"
        self.state = max(states, key=lambda s: s.seq)
        return None

    def records(self, buf, expected, verify_from=0):
        """Yields (offset, index, epoch, payload memoryview, time_ms) for every record (time_ms 0 for a record of
        format version 2), checking that indices continue from `expected`. Records with index < verify_from skip
        the CRC check (a reader skipping to a position); their framing and indices are still checked. Stops at
        the first damage (self.damage)."""
        mv = memoryview(buf)
        n = len(buf)
        pos = self.start
        while pos < n:
            problem = None
            gap = False
            head = unpack_record_header(buf, pos)
            if head is None:
                if buf[pos] not in (MAGIC, MAGIC_V2):
                    problem = "bad magic byte 0x%02x" % buf[pos]
                else:
                    problem = "incomplete record header (%d of %d bytes)" % (
                        n - pos, HEADER_SIZE_V2 if buf[pos] == MAGIC_V2 else HEADER_SIZE)
            else:
                hsize, length, crc, index, epoch, time_ms = head
                end = pos + hsize + length
                if end > n:
                    problem = "incomplete record (%d payload bytes declared, %d present)" % (
                        length, n - pos - hsize)
                elif (index >= verify_from
                      and crc32c(mv[pos + hsize:end], crc32c(mv[pos + CRC_FROM:pos + hsize])) != crc):
                    problem = "CRC mismatch in record of %d payload bytes" % length
                elif index != expected:
                    problem = "record has index %d, expected %d" % (index, expected)
                    gap = True
            if problem is not None:
                self.damage = (pos, problem, gap)
                return
            yield pos, index, epoch, mv[pos + hsize:end], time_ms
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
    max_index = expected + (n - start) // HEADER_SIZE_V2 + 1
    candidates = []
    for magic in (MAGIC, MAGIC_V2):
        pos = buf.find(bytes([magic]), start)
        if pos >= 0:
            candidates.append(pos)
    pos = min(candidates) if candidates else -1
    while 0 <= pos < n:
        head = unpack_record_header(buf, pos)
        if head is not None:
            hsize, length, crc, index, _epoch, _t = head
            end = pos + hsize + length
            if (expected <= index <= max_index and end <= n
                    and crc32c(mv[pos + hsize:end], crc32c(mv[pos + CRC_FROM:pos + hsize])) == crc):
                return pos
        nxt = [p for p in (buf.find(bytes([MAGIC]), pos + 1), buf.find(bytes([MAGIC_V2]), pos + 1)) if p >= 0]
        pos = min(nxt) if nxt else -1
    return None


def segment_entries(path, first_index, after, upto):
    """Entries of one segment file with after < index <= upto (upto None: all)."""
    buf = read_file(path)
    scan = SegScan(path, first_index)
    problem = scan.head(buf)
    if problem is not None:
        raise JournalCorrupt("journal %s: %s" % (path, problem))
    out = []
    for _off, index, epoch, payload, time_ms in scan.records(buf, first_index, verify_from=after + 1):
        if index > after:
            out.append(Entry.timed(index, epoch, bytes(payload), time_ms))
        if upto is not None and index >= upto:
            break  # before looking at the next record, which a concurrent batch may be writing
    return out


def gap_message(path, first, expected, prev_path):
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
                    raise JournalCorrupt(gap_message(path, first, expected, prev))
                try:
                    buf = read_file(path)
                except FileNotFoundError:
                    raise JournalTruncated("journal segment %s was removed while being read" % path) from None
                scan = SegScan(path, first)
                problem = scan.head(buf)
                if problem is not None:
                    raise JournalCorrupt("journal %s: %s" % (path, problem))
                for _off, index, epoch, payload, time_ms in scan.records(buf, first, verify_from=last + 1):
                    if index > end:
                        end = index
                    if index <= last:
                        continue
                    yield Entry.timed(index, epoch, bytes(payload), time_ms)
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
