"""Checking and repairing the local journal at start-up (check_journal), before anything is replayed.

`check_journal` scans every segment in order and checks every record (magic, CRC, index) against the
segments' state. Damage at the end of the last segment that lies within its last append, with no valid
record after it, is an append that never completed (never acknowledged): it is cut and logged. Anything
else (damage in a closed segment, a valid record after damage, records ending before what the state says
was committed, an index gap between segments, a sealed newest segment whose successor is missing, a
damaged segment header) raises JournalCorrupt naming the file, the byte offset and the entries missing,
unless the operator set `journal-load-truncated yes`: then the journal is cut at the first damage and every
dropped entry range is logged (cut bytes and dropped segment files are kept aside as `*.dropped`).
Nothing is skipped silently. Its report (`JournalReport`, the `Segment`s found) is what LocalJournal.open()
continues from.
"""

import logging
import os
from typing import NamedTuple

from ..errors import JournalCorrupt, with_path
from .walformat import (DATA_START, TMP_RE, SegmentState, encode_slot, fsync_dir, journal_dir, list_segments,
                        read_file, slot_offset)
from .walscan import SEALED, TORN, SegScan, gap_message

log = logging.getLogger("durakv.journal")


class Segment:
    """A segment as the writer sees it. `size` counts record bytes only (the header is not in it)."""

    __slots__ = ("first_index", "path", "size", "count", "legacy", "file_start", "seq", "batch_start", "sealed")

    def __init__(self, first_index, path, size=0, count=0, legacy=False, seq=0, batch_start=None, sealed=False):
        self.first_index = first_index
        self.path = path
        self.size = size
        self.count = count
        self.legacy = legacy
        # where its records start: a legacy segment has no header (fixed with the segment; an attribute, not a
        # property, since the writer reads file_end on every batch)
        self.file_start = 0 if legacy else DATA_START
        self.seq = seq
        self.batch_start = self.file_start if batch_start is None else batch_start
        self.sealed = sealed

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
    segments: list          # [Segment], oldest first
    next_index: int         # the index the next record gets (first index of the journal when it holds none)
    existed: bool           # the journal directory was there
    torn_tail_cuts: int
    dropped: list           # log lines of what journal-load-truncated dropped


def _describe(path, first):
    """'entries a..b (n bytes)' of a segment about to be dropped, as far as it reads."""
    try:
        buf = read_file(path)
    except OSError as exc:
        return "%s (unreadable: %s)" % (path, exc)
    scan = SegScan(path, first)
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
    try:
        _cut_file(path, offset, keep_copy)
    except OSError as exc:
        raise with_path(exc, path) from exc      # a full data directory at start-up: say which file


def _cut_file(path, offset, keep_copy):
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
            problem = (gap_message(path, first, expected, prev_path), ("drop_from", i))
            break
        buf = read_file(path)
        scan = SegScan(path, first)
        head_problem = scan.head(buf)
        if head_problem is not None:
            problem = ("journal %s: %s: the entries from index %d are lost" % (path, head_problem, first),
                       ("drop_from", i))
            break
        for _rec in scan.records(buf, first):
            pass
        is_last = i == len(found) - 1
        st = scan.state
        seg = Segment(first, path, scan.end - scan.start, scan.count, legacy=scan.legacy,
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
    segs = [Segment(s.first_index, s.path, s.size, s.count, s.legacy, s.seq, s.batch_start, s.sealed)
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
        buf_scan = SegScan(path, seg.first_index)
        buf = read_file(path)
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
        if TMP_RE.match(name):
            os.unlink(os.path.join(jdir, name))
            log.info("journal %s: removed %s (a segment creation that never completed)", jdir, name)
            removed = True
    if removed:
        fsync_dir(jdir)
