"""The local journal's writer: LocalJournal, segmented append-only files with group commit (one fsync a batch).

The file format is journal/walformat.py's, the start-up check and repair journal/walcheck.py's (open() starts
from its report), the readers journal/walscan.py's.

Group commit: append() queues the record and returns a future. One writer task takes everything queued,
and in a dedicated single thread does one pwrite of all the frames, one pwrite of the state slot and one
fsync, so the event loop never waits for the disk; appends that arrive during that fsync form the next batch.

Two writers do that: the compiled one (journal/_walwriter.c: a C thread that never takes the GIL, and an eventfd
the loop watches) for every batch that stays in the current segment of a journal on the default SysIO, and the
Python one (_Writer, _write_items, _flush: the reference) for batches that rotate a segment, for a journal whose
io is a test's SysIO (the fault-injection seam), during DEBUG JOURNAL-STALL, and where the module is not built or
DURAKV_PURE_PYTHON=1. Only one batch is written at a time, so the two never race for the segment.
"""

import asyncio
import concurrent.futures
import errno as errno_mod
import logging
import os
import queue
import threading
import time

from ..errors import JournalCorrupt, with_path
from .base import Journal, JournalClosed, JournalFailed, JournalTruncated
from .walcheck import Segment, check_journal
from .walformat import (HEADER_SIZE, MAX_ENTRY_BYTES, encode_header, encode_segment_head, encode_slot,
                        fsync_dir, journal_dir, segment_name, slot_offset)
from .walscan import segment_entries

log = logging.getLogger("durakv.journal")

# The compiled writer's class (journal/_walwriter.c), or None: not built, or DURAKV_PURE_PYTHON=1
CWriter = None
if os.environ.get("DURAKV_PURE_PYTHON", "") not in ("1", "true", "yes"):
    try:
        from ._walwriter import Writer as CWriter
    except ImportError:   # built without a C compiler: the Python writer (the reference) does it all
        CWriter = None

DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024

_APPEND = 0
_ROTATE = 1


class _Notify:
    """An append_notify's callback in the place of the append's future: settled like one (done, set_result,
    set_exception), and its fn called by _batch_done once the batch's outcome is settled (once: a failure path may
    list an item twice, and _batch_done clears the outcome as it calls)."""
    __slots__ = ("fn", "outcome")

    def __init__(self, fn):
        self.fn = fn
        self.outcome = None          # (index, None) or (None, exception) once settled

    def done(self):
        return self.outcome is not None

    def set_result(self, index):
        self.outcome = (index, None)

    def set_exception(self, exc):
        self.outcome = (None, exc)




class _Writer:
    """The journal's writer thread: batches in order from a queue. (A ThreadPoolExecutor's submit cost a Future,
    a work item, a semaphore and their locks per batch: a third of a sync SET's commit path.)"""

    def __init__(self, fn, name):
        self._queue = queue.SimpleQueue()
        self._fn = fn
        self.put = self._queue.put
        # daemon: a process ending without close() is a crash to the journal, which recovery is for
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self):
        get, fn = self._queue.get, self._fn
        while True:
            items = get()
            if items is None:
                return
            try:
                fn(items)
            except Exception:  # noqa: BLE001 - _thread_batch reports its own failures; this one is a bug
                log.exception("journal writer: a batch raised")
            # Not held while waiting for the next batch: its payloads (a DEBUG POPULATE of a million keys is
            # 53 MB of them) would stay alive, and resident, until another write came.
            del items

    def stop(self):
        """Returns once every batch put before it was written."""
        self._queue.put(None)
        self._thread.join()

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
    path = getattr(exc, "filename", None)
    if path is not None and getattr(exc, "strerror", None):
        text = "%s (%s)" % (text, path)     # which segment file the disk refused
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

    Test hooks: `io` (a SysIO), `stall_ms` (sleep before each fsync, in the writer thread; setting it to 0
    ends a stall under way too), counters
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
        # the compiled writer makes its system calls itself: only a journal on the plain SysIO may use it
        self._use_c = CWriter is not None and type(self.io) is SysIO
        self._cwriter = None
        self._c_batch = None      # (items, segment, start) of the batch the compiled writer has
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
        self._idle = True             # no batch is being written: what close() waits for
        self._idle_waiters = []       # ... its futures (a flag, not an asyncio.Event: set and cleared every batch)
        self._loop = None
        self._executor = None
        self._writer = None
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
        self._idle = True
        self._idle_waiters = []
        self._writer = _Writer(self._thread_batch, "durakv-journal-writer")
        if self._use_c:
            self._cwriter = CWriter()
            self._loop.add_reader(self._cwriter.fd, self._c_done)
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
                    try:
                        self.io.pwrite(fd, encode_slot(last.state(last.seq, fsync=self.fsync,
                                                                  batch_start=last.batch_start)),
                                       slot_offset(last.seq))
                        if self.fsync:
                            self.io.fsync(fd)
                    except OSError as exc:
                        self.io.close(fd)
                        raise with_path(exc, last.path) from exc
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
        the directory fsynced. Returns (fd, Segment). On failure nothing is left behind; raises OSError,
        or _Broken when the half-made segment cannot be removed."""
        io = self.io
        directory = directory or self.dir
        path = os.path.join(directory, segment_name(first_index))
        tmp = path + ".tmp"
        seg = Segment(first_index, path)
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
            named = with_path(exc, tmp)
            self._discard(fd, tmp, named)
            if named is exc:
                raise
            raise named from exc
        try:
            self._dir_sync(directory)
        except BaseException as exc:
            # The rename may not be durable: never seal the previous segment on the strength of it.
            named = with_path(exc, directory)
            self._discard(fd, path, named)
            if named is exc:
                raise
            raise named from exc
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
        fut = self._loop.create_future()
        self._queue(payload, epoch, fut)
        return fut

    def append_notify(self, payload, notify, epoch: int = 0) -> int:
        """append() without a future: notify(index, None) once the entry is durable, or notify(None, exc),
        called on the event loop in the same iteration as the batch's completion. A future's done callbacks
        run one loop iteration after set_result, and the server's replies waited for that iteration (issue
        18). Raises as append() does when the journal refuses at call time. Returns the entry's index."""
        if not self._open:
            raise JournalClosed("journal is closed")
        if self._failed is not None:
            raise JournalFailed(str(self._failed))
        # _queue and _kick inline: this runs once per sync batch, and each Python frame is ~1k instructions
        index = self._next
        self._next = index + 1
        # with the compiled writer the header is made there: its slot holds the epoch until then
        self._pending.append((_APPEND, index, payload, epoch if self._cwriter is not None
                              else encode_header(index, epoch, payload), _Notify(notify)))
        if self.group_per_iteration or self.writing:
            self._kick()
        else:
            self._kick_now()
        return index

    def _queue(self, payload, epoch, fut):
        if not self._open:
            raise JournalClosed("journal is closed")
        if self._failed is not None:
            raise JournalFailed(str(self._failed))
        index = self._next
        self._next = index + 1
        # stamped with the time it is queued, just before its write and fsync (by the compiled writer: when its
        # thread writes the batch): never later than the acknowledgement of any write it carries (point-in-time
        # restore replays up to a time)
        self._pending.append((_APPEND, index, payload, epoch if self._cwriter is not None
                              else encode_header(index, epoch, payload), fut))
        self._kick()
        return index

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
        self._idle = False
        cw = self._cwriter
        if cw is not None and not self.stall_ms:
            seg = self._segments[-1]
            start = seg.file_end
            if cw.submit(items, self._fd, start, seg.size, self.segment_bytes, seg.seq + 1,
                         seg.first_index + seg.count - 1, self.fsync):
                self._c_batch = (items, seg, start)
                return
        self._writer.put(items)

    def _c_done(self):
        """The loop's reader callback on the compiled writer's eventfd: settles its finished batch as
        _thread_batch and _flush do for the Python writer's (the same counters, the same failures)."""
        for err, written, cut_err, size, count in self._cwriter.results():
            items, seg, start = self._c_batch
            self._c_batch = None
            self.batch_count += 1
            self.write_count += written
            if not err:
                seg.seq += 1
                seg.batch_start = start
                seg.size += size
                seg.count += count
                if self.fsync:
                    self.fsync_count += 1
                self._batch_done(items, len(items), None, False)
                continue
            exc = with_path(OSError(err, os.strerror(err)), seg.path)
            broken = False
            if cut_err:
                exc, broken = _Broken(exc, with_path(OSError(cut_err, os.strerror(cut_err)), seg.path)), True
            self._batch_done(items, 0, exc, broken)

    def _thread_batch(self, items):
        """Runs in the journal thread: write + fsync, then completes the batch on the event loop in one
        hop (no task or executor-future round trips, which each cost an event-loop iteration)."""
        done, exc, broken = self._write_items(items)
        try:
            self._loop.call_soon_threadsafe(self._batch_done, items, done, exc, broken)
        except RuntimeError:
            pass  # the loop is gone: the process is exiting

    def _batch_done(self, items, done, exc, broken):
        """Settles a written batch: the journal's state first, then the append_notify callbacks, so that
        what they append (the next batch) sees the outcome (appends after a failure are refused)."""
        failed_pending = self._settle(items, done, exc, broken)
        for group in (items, failed_pending):
            for item in group:
                fut = item[4]
                if type(fut) is _Notify and fut.outcome is not None:
                    outcome, fut.outcome = fut.outcome, None   # fire(), inline: once (see _Notify)
                    try:
                        fut.fn(*outcome)
                    except Exception:  # noqa: BLE001 - as the loop does for a future's callback: the
                        # other entries of the batch must still be reported
                        log.exception("journal %s: an append's completion callback failed", self.dir)
        if not self.writing and not self._pending and exc is None:
            self._set_idle()

    def _set_idle(self):
        self._idle = True
        if self._idle_waiters:
            waiters, self._idle_waiters = self._idle_waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    def _settle(self, items, done, exc, broken):
        """The journal's side of _batch_done. Returns the queued appends failed with it (empty on success)."""
        self.writing = False
        self._inflight = 0
        commit = self._commit
        for kind, index, _payload, _header, _fut in items[:done]:
            if kind == _APPEND:
                commit = index
        self._commit = commit
        for _kind, index, _payload, _header, fut in (items if done == len(items) else items[:done]):
            if type(fut) is _Notify:
                fut.outcome = (index, None)     # (set_result's body: two method frames less per append)
            elif not fut.done():
                fut.set_result(index)
        if exc is None:
            if self._pending:
                self._kick_now()  # appends that arrived during the fsync: the next batch, at once
            return ()
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
        failed_pending = self._pending
        for item in failed_pending:
            if not item[4].done():
                item[4].set_exception(later)
        self._pending = []
        self._next = commit + 1
        self._set_idle()
        return failed_pending

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
                if type(header) is int:
                    # the compiled writer's item (the epoch): this batch rotates, or a stall is on
                    header = encode_header(index, header, payload)
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

    def _stall(self, stall_ms):
        """DEBUG JOURNAL-STALL's sleep before an fsync, in the writer thread. Polled, so that JOURNAL-STALL 0
        ends the stall of the batch already being written: a shutdown or a test lifting the stall must not wait
        out the whole delay (with a 30 s stall, SIGTERM waited 10 s for the drain and was then killed)."""
        deadline = time.monotonic() + stall_ms / 1000.0
        while self.stall_ms and time.monotonic() < deadline:
            time.sleep(min(0.01, max(0.0, deadline - time.monotonic())))

    def _flush(self, seg, parts, size, count):
        """Writes records and then the state slot describing them, then one fsync. On failure the segment is
        cut back to where the batch began (raises the failure, or _Broken when the cut fails)."""
        io = self.io
        data = b"".join(parts)
        fd = self._fd
        start = seg.file_end
        seq = seg.seq + 1
        try:
            written = io.pwrite(fd, data, start)
            if written < size:    # a short write (a signal, a full disk's last bytes): the rest from there
                view = memoryview(data)
                while written < size:
                    written += io.pwrite(fd, view[written:], start + written)
            self.write_count += 1
            # the slot's fields in SegmentState's order: a plain tuple (a NamedTuple's __new__ is a Python call,
            # ~2k instructions of every batch's writer-thread work)
            state = (seq, start + size, start, seg.first_index + seg.count + count - 1, 0, int(self.fsync))
            io.pwrite(fd, encode_slot(state), slot_offset(seq))
            if self.stall_ms:
                self._stall(self.stall_ms)
            if self.fsync:
                io.fsync(fd)
                self.fsync_count += 1
        except BaseException as exc:
            named = with_path(exc, seg.path)
            try:
                io.ftruncate(fd, start)
            except OSError as cut:
                raise _Broken(named, with_path(cut, seg.path)) from exc
            if named is exc:
                raise
            raise named from exc
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
                entries = await loop.run_in_executor(None, segment_entries, seg.path, seg.first_index, pos, upto)
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
            if not self._idle:
                waiter = self._loop.create_future()
                self._idle_waiters.append(waiter)
                await waiter
        finally:
            if self._writer is not None:
                self._writer.stop()
                self._writer = None
            if self._cwriter is not None:
                self._loop.remove_reader(self._cwriter.fd)
                self._cwriter.stop()
                self._cwriter = None
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
            self._executor.shutdown(wait=True)
            self._executor = None
