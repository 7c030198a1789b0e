"""The local journal: the Journal contract plus group commit, torn tails, corruption, segments, the segment
state that tells a torn last append from lost acknowledged entries, the old format, journal-load-truncated,
and the failure contract (ENOSPC, EMFILE, EIO: what is on disk after a failed append and what a retry does)."""

import asyncio
import errno
import json
import logging
import os
import shutil
import subprocess
import struct
import sys
import textwrap
import time

import pytest

from durakv.errors import JournalCorrupt
from durakv.journal import LocalJournal, iter_entries
from durakv.journal.base import Entry, JournalFailed, JournalTruncated
from durakv.journal.local import SysIO
from durakv.journal.walcheck import check_journal
from durakv.journal.walformat import (DATA_START, HEADER_SIZE, MAGIC, SLOT_OFFSETS, decode_slot, encode_frame,
                                      legacy_segment_name, list_segments, segment_name)
from helpers.journal_contract import JournalContract, collect

from conftest import ROOT  # noqa: E402 - the repository, wherever this file sits under tests/


class TestLocalJournalContract(JournalContract):
    def make_journal(self, tmp_path):
        # Small segments so truncation has whole segments to drop.
        return LocalJournal(tmp_path, segment_bytes=16 * 1024)


def run(coro):
    return asyncio.run(coro)


async def write_entries(tmp_path, payloads, segment_bytes=64 * 1024 * 1024, epoch=0):
    j = LocalJournal(tmp_path, segment_bytes=segment_bytes)
    await j.open()
    for p in payloads:
        await j.append(p, epoch=epoch)
    await j.close()


def seg_path(tmp_path, first=1):
    return os.path.join(str(tmp_path), "journal", segment_name(first))


def legacy_path(tmp_path, first=1):
    return os.path.join(str(tmp_path), "journal", legacy_segment_name(first))


def offsets(payloads, start=DATA_START):
    """Byte offset of each record in a segment holding these payloads, then the end."""
    out = [start]
    for p in payloads:
        out.append(out[-1] + HEADER_SIZE + len(p))
    return out


PAYLOADS = [b"first", b"second entry", b"x" * 300, b"fourth", b"the last one, long enough" * 3]


# -- format -------------------------------------------------------------------------------------------

def test_segment_files_are_named_by_first_index_and_framed(tmp_path):
    run(write_entries(tmp_path, PAYLOADS, epoch=3))
    path = seg_path(tmp_path)
    assert os.path.basename(path) == "00000000000000000001.seg"
    with open(path, "rb") as f:
        data = f.read()
    # each record carries the wall-clock time it was queued at (format 3: point-in-time restore replays by it)
    times = [struct.unpack_from("<Q", data, off + 25)[0] for off in offsets(PAYLOADS)[:-1]]
    assert all(abs(t - time.time() * 1000) < 600_000 for t in times) and times == sorted(times)
    expected = b"".join(encode_frame(i + 1, 3, p, times[i]) for i, p in enumerate(PAYLOADS))
    assert data[:8] == b"DKVJSEG\n"
    assert data[DATA_START:] == expected
    assert data[DATA_START] == MAGIC
    assert len(data) == offsets(PAYLOADS)[-1]
    # The state slot of the last batch: where it began and ended, which entry it ended with.
    states = [decode_slot(data, off) for off in SLOT_OFFSETS]
    newest = max((st for st in states if st), key=lambda st: st.seq)
    offs = offsets(PAYLOADS)
    assert (newest.end, newest.batch_start, newest.last_index, newest.sealed) == (offs[5], offs[4], 5, 0)


# -- group commit ---------------------------------------------------------------------------------------

def test_concurrent_appends_share_one_write_and_fsync(tmp_path):
    async def main():
        j = LocalJournal(tmp_path)
        await j.open()
        j.stall_ms = 20
        futures = [j.append(b"v%d" % i) for i in range(500)]
        assert await asyncio.gather(*futures) == list(range(1, 501))
        assert j.fsync_count == 1
        assert j.write_count == 1
        assert j.batch_count == 1
        await j.close()
    run(main())


def test_appends_arriving_during_an_fsync_form_the_next_batch(tmp_path):
    async def main():
        j = LocalJournal(tmp_path)
        await j.open()
        j.stall_ms = 50
        first = j.append(b"first")
        while not j.writing:          # the writer has taken the first batch and is in its fsync
            await asyncio.sleep(0)
        ticks = 0
        later = [j.append(b"later-%d" % i) for i in range(200)]
        while not first.done():       # the loop keeps running while the disk works
            ticks += 1
            await asyncio.sleep(0)
        assert ticks > 10
        assert await first == 1
        assert await asyncio.gather(*later) == list(range(2, 202))
        assert j.batch_count == 2
        assert j.fsync_count == 2
        assert j.commit_index == 201
        await j.close()
    run(main())


def test_many_sequential_awaited_appends_fsync_each(tmp_path):
    async def main():
        j = LocalJournal(tmp_path)
        await j.open()
        for i in range(5):
            await j.append(b"s")
        assert j.fsync_count == 5
        await j.close()
    run(main())


def test_fsync_disabled_still_commits_in_order(tmp_path):
    async def main():
        j = LocalJournal(tmp_path, fsync=False)
        await j.open()
        assert await asyncio.gather(*[j.append(b"n") for _ in range(10)]) == list(range(1, 11))
        assert j.fsync_count == 0
        await j.close()
    run(main())


# -- torn tails ---------------------------------------------------------------------------------------

def _reopen_after_cut(tmp_path, caplog, cut_offset):
    """Opens the damaged journal, checks the cut was made and logged, appends, reopens."""
    path = seg_path(tmp_path)

    async def main():
        j = LocalJournal(tmp_path)
        with caplog.at_level(logging.WARNING, logger="durakv.journal"):
            await j.open()
        assert j.commit_index == 4
        assert j.torn_tail_cuts == 1
        messages = [r.getMessage() for r in caplog.records if r.name == "durakv.journal"]
        assert any(path in m and "byte offset %d" % cut_offset in m for m in messages), messages
        assert os.path.getsize(path) == cut_offset
        assert await j.append(b"replacement") == 5
        await j.close()
        j = LocalJournal(tmp_path)
        await j.open()
        assert j.torn_tail_cuts == 0
        assert [e.payload for e in await collect(j, 0)] == PAYLOADS[:4] + [b"replacement"]
        await j.close()
    run(main())


def test_torn_tail_inside_the_last_header_is_cut(tmp_path, caplog):
    run(write_entries(tmp_path, PAYLOADS))
    offs = offsets(PAYLOADS)
    with open(seg_path(tmp_path), "r+b") as f:
        f.truncate(offs[4] + 10)
    _reopen_after_cut(tmp_path, caplog, offs[4])


def test_torn_tail_inside_the_last_payload_is_cut(tmp_path, caplog):
    run(write_entries(tmp_path, PAYLOADS))
    offs = offsets(PAYLOADS)
    with open(seg_path(tmp_path), "r+b") as f:
        f.truncate(offs[5] - 7)
    _reopen_after_cut(tmp_path, caplog, offs[4])


def test_last_record_with_wrong_crc_at_eof_is_cut(tmp_path, caplog):
    run(write_entries(tmp_path, PAYLOADS))
    offs = offsets(PAYLOADS)
    with open(seg_path(tmp_path), "r+b") as f:
        f.seek(offs[5] - 1)
        last = f.read(1)
        f.seek(offs[5] - 1)
        f.write(bytes([last[0] ^ 0xFF]))
    _reopen_after_cut(tmp_path, caplog, offs[4])


def test_zero_filled_tail_is_cut(tmp_path, caplog):
    run(write_entries(tmp_path, PAYLOADS[:4]))
    offs = offsets(PAYLOADS)
    with open(seg_path(tmp_path), "ab") as f:
        f.write(b"\x00" * 4096)
    _reopen_after_cut(tmp_path, caplog, offs[4])


def test_iter_entries_stops_quietly_at_an_incomplete_tail(tmp_path):
    run(write_entries(tmp_path, PAYLOADS))
    offs = offsets(PAYLOADS)
    with open(seg_path(tmp_path), "r+b") as f:
        f.truncate(offs[5] - 3)
    assert [e.payload for e in iter_entries(tmp_path)] == PAYLOADS[:4]
    assert os.path.getsize(seg_path(tmp_path)) == offs[5] - 3  # a reader never cuts
    with pytest.raises(JournalCorrupt, match="ends at index 4"):
        list(iter_entries(tmp_path, upto=5))


# -- corruption before the tail ------------------------------------------------------------------------

def _assert_corrupt(tmp_path, pattern, path=None):
    path = path or seg_path(tmp_path)
    size = os.path.getsize(path)

    async def main():
        j = LocalJournal(tmp_path)
        with pytest.raises(JournalCorrupt, match=pattern) as info:
            await j.open()
        return str(info.value)
    message = run(main())
    assert os.path.getsize(path) == size, "a corrupt journal must not be cut"
    with pytest.raises(JournalCorrupt):
        list(iter_entries(tmp_path))
    return message


def test_crc_mismatch_in_the_middle_raises_naming_file_and_offset(tmp_path):
    run(write_entries(tmp_path, PAYLOADS))
    offs = offsets(PAYLOADS)
    with open(seg_path(tmp_path), "r+b") as f:
        f.seek(offs[1] + HEADER_SIZE + 2)
        f.write(b"#")
    message = _assert_corrupt(tmp_path, "CRC mismatch")
    assert seg_path(tmp_path) in message
    assert "byte offset %d" % offs[1] in message


def test_bad_magic_in_the_middle_raises(tmp_path):
    run(write_entries(tmp_path, PAYLOADS))
    offs = offsets(PAYLOADS)
    with open(seg_path(tmp_path), "r+b") as f:
        f.seek(offs[2])
        f.write(b"\x00")
    message = _assert_corrupt(tmp_path, "bad magic")
    assert seg_path(tmp_path) in message and "byte offset %d" % offs[2] in message


def test_damaged_length_with_valid_records_after_raises(tmp_path):
    run(write_entries(tmp_path, PAYLOADS))
    offs = offsets(PAYLOADS)
    with open(seg_path(tmp_path), "r+b") as f:
        f.seek(offs[1] + 1)
        f.write((10**6).to_bytes(4, "little"))  # claims to run past EOF, but records follow
    message = _assert_corrupt(tmp_path, "followed by a valid record")
    assert "byte offset %d" % offs[1] in message


def test_index_gap_inside_a_segment_raises(tmp_path):
    os.makedirs(os.path.join(str(tmp_path), "journal"))
    frames = [encode_frame(1, 0, b"a"), encode_frame(2, 0, b"b"), encode_frame(4, 0, b"d"), encode_frame(5, 0, b"e")]
    with open(legacy_path(tmp_path), "wb") as f:
        f.write(b"".join(frames))
    message = _assert_corrupt(tmp_path, "index gap", legacy_path(tmp_path))
    assert "byte offset %d" % (len(frames[0]) + len(frames[1])) in message
    assert "expected 3" in message


def test_wrong_index_in_the_last_record_is_not_a_torn_tail(tmp_path):
    os.makedirs(os.path.join(str(tmp_path), "journal"))
    with open(legacy_path(tmp_path), "wb") as f:
        f.write(encode_frame(1, 0, b"a") + encode_frame(7, 0, b"b"))
    _assert_corrupt(tmp_path, "index gap", legacy_path(tmp_path))


def test_missing_segment_is_an_index_gap(tmp_path):
    run(write_entries(tmp_path, [b"p" * 100] * 30, segment_bytes=400))
    segs = list_segments(os.path.join(str(tmp_path), "journal"))
    assert len(segs) >= 4
    os.unlink(segs[1][1])

    async def main():
        j = LocalJournal(tmp_path, segment_bytes=400)
        with pytest.raises(JournalCorrupt, match="index gap between segments") as info:
            await j.open()
        assert segs[2][1] in str(info.value)
    run(main())


def test_torn_end_of_a_closed_segment_is_corruption(tmp_path):
    run(write_entries(tmp_path, [b"p" * 100] * 12, segment_bytes=400))
    segs = list_segments(os.path.join(str(tmp_path), "journal"))
    with open(segs[0][1], "r+b") as f:
        f.truncate(os.path.getsize(segs[0][1]) - 5)

    async def main():
        j = LocalJournal(tmp_path, segment_bytes=400)
        with pytest.raises(JournalCorrupt, match="not the end of the journal") as info:
            await j.open()
        assert segs[0][1] in str(info.value)
    run(main())


# -- segments, rotation, truncation ---------------------------------------------------------------------

def test_segments_rotate_at_the_size_limit(tmp_path):
    payloads = [b"%03d" % i * 30 for i in range(60)]  # 90-byte payloads, 115-byte records

    async def main():
        j = LocalJournal(tmp_path, segment_bytes=1000)
        await j.open()
        await asyncio.gather(*[j.append(p) for p in payloads[:30]])   # one batch spanning segments
        for p in payloads[30:]:
            await j.append(p)
        segs = j.segments
        assert len(segs) == 8  # 8 records (920 bytes) per segment
        for first, path in segs:
            assert os.path.basename(path) == segment_name(first)
            assert os.path.getsize(path) - DATA_START <= 1000   # the limit counts record bytes
        assert [s[0] for s in segs] == [1 + 8 * k for k in range(8)]
        assert j.dir_fsync_count >= 7
        assert [e.payload for e in await collect(j, 0)] == payloads
        await j.close()
        assert [e.payload for e in iter_entries(tmp_path, after=10, upto=50)] == payloads[10:50]
    run(main())


def test_a_record_larger_than_a_segment_gets_its_own(tmp_path):
    async def main():
        j = LocalJournal(tmp_path, segment_bytes=100)
        await j.open()
        assert await j.append(b"small") == 1
        assert await j.append(b"B" * 500) == 2
        assert await j.append(b"small again") == 3
        assert [s[0] for s in j.segments] == [1, 2, 3]
        await j.close()
        j = LocalJournal(tmp_path, segment_bytes=100)
        await j.open()
        assert [e.payload for e in await collect(j, 0)] == [b"small", b"B" * 500, b"small again"]
        await j.close()
    run(main())


def test_rotate_then_truncate_drops_every_closed_segment(tmp_path):
    async def main():
        j = LocalJournal(tmp_path)
        await j.open()
        for i in range(1, 11):
            await j.append(b"e%d" % i)
        assert await j.rotate() == 11
        assert [s[0] for s in j.segments] == [1, 11]
        assert os.path.getsize(j.segments[-1][1]) == DATA_START   # a header, no record
        assert await j.rotate() == 11          # nothing new: no empty segment is closed
        assert [s[0] for s in j.segments] == [1, 11]
        assert await j.truncate_before(11) == 11
        assert [s[0] for s in j.segments] == [11]
        assert not os.path.exists(seg_path(tmp_path, 1))
        assert j.commit_index == 10 and j.first_index == 11 and j.bytes_size == 0
        assert await collect(j, 10) == []
        with pytest.raises(JournalTruncated):
            await collect(j, 5)
        await j.close()
        j = LocalJournal(tmp_path)
        await j.open()
        assert j.commit_index == 10 and j.first_index == 11
        assert await j.append(b"e11") == 11
        assert await collect(j, 10) == [Entry(11, 0, b"e11")]
        await j.close()
    run(main())


def test_rotate_orders_after_appends_called_before_it(tmp_path):
    async def main():
        j = LocalJournal(tmp_path)
        await j.open()
        futures = [j.append(b"before") for _ in range(5)]
        rotated = j.rotate()   # queued by the call itself, not awaited yet
        after = j.append(b"after")
        assert await rotated == 6
        assert await asyncio.gather(*futures) == [1, 2, 3, 4, 5]
        assert await after == 6
        assert [s[0] for s in j.segments] == [1, 6]
        await j.close()
    run(main())


def test_truncate_before_keeps_the_segment_holding_the_index(tmp_path):
    async def main():
        j = LocalJournal(tmp_path, segment_bytes=400)
        await j.open()
        for i in range(1, 31):
            await j.append(b"%02d" % i * 40)   # 105-byte records: 3 per segment
        assert [s[0] for s in j.segments] == [1 + 3 * k for k in range(10)]
        first = await j.truncate_before(9)      # segment 7..9 holds 9: kept
        assert first == 7
        assert [e.index for e in await collect(j, 6)] == list(range(7, 31))
        assert [e.index for e in iter_entries(tmp_path, after=6)] == list(range(7, 31))
        with pytest.raises(JournalTruncated):
            list(iter_entries(tmp_path, after=2))
        await j.close()
    run(main())


def test_iter_entries_bounds(tmp_path):
    run(write_entries(tmp_path, [b"%d" % i for i in range(1, 21)], segment_bytes=200))
    assert [e.index for e in iter_entries(tmp_path, after=3, upto=7)] == [4, 5, 6, 7]
    assert [e.payload for e in iter_entries(tmp_path, after=18)] == [b"19", b"20"]
    assert list(iter_entries(tmp_path, after=20)) == []
    assert list(iter_entries(tmp_path, after=5, upto=5)) == []
    with pytest.raises(JournalCorrupt, match="before the requested index 25"):
        list(iter_entries(tmp_path, after=3, upto=25))
    assert list(iter_entries(os.path.join(str(tmp_path), "nowhere"))) == []


def test_read_from_another_thread_while_appending(tmp_path):
    """iter_entries is synchronous and works while a writer appends (the builder reads that way)."""
    async def main():
        j = LocalJournal(tmp_path, segment_bytes=2000)
        await j.open()
        for i in range(1, 101):
            await j.append(b"w%d" % i * 10)
        loop = asyncio.get_running_loop()
        reader = loop.run_in_executor(None, lambda: list(iter_entries(tmp_path, upto=100)))
        more = [j.append(b"more") for _ in range(300)]
        entries = await reader
        await asyncio.gather(*more)
        assert [e.index for e in entries] == list(range(1, 101))
        assert all(e.payload == b"w%d" % e.index * 10 for e in entries)
        await j.close()
    run(main())


def test_base_index_renumbers_a_journal_holding_no_entry(tmp_path):
    async def main():
        j = LocalJournal(tmp_path)
        await j.open()
        await j.close()                       # an empty segment numbered 1
        j = LocalJournal(tmp_path)
        await j.open(base_index=50)           # a snapshot covers 50: numbering continues after it
        assert j.commit_index == 50 and j.first_index == 51
        assert [s[0] for s in j.segments] == [51]
        assert await j.append(b"x") == 51
        await j.close()
        j = LocalJournal(tmp_path)
        await j.open(base_index=50)
        assert j.commit_index == 51
        await j.close()
    run(main())


def test_base_index_beyond_the_stored_entries_is_refused(tmp_path):
    run(write_entries(tmp_path, PAYLOADS))

    async def main():
        j = LocalJournal(tmp_path)
        with pytest.raises(JournalCorrupt, match="ends at index 5, but the snapshot it continues covers index 9"):
            await j.open(base_index=9)
        j = LocalJournal(tmp_path)
        await j.open(base_index=5)            # exactly covered: fine
        assert j.commit_index == 5
        await j.close()
    run(main())


# -- damage beyond the last append: the segment state ------------------------------------------------------

def _batches(tmp_path, sizes, segment_bytes=64 * 1024 * 1024):
    """Appends batches of the given sizes (each batch one write + fsync); returns the payloads."""
    payloads = []

    async def main():
        j = LocalJournal(tmp_path, segment_bytes=segment_bytes)
        await j.open()
        n = 0
        for size in sizes:
            batch = [b"entry-%04d-" % (n + k) + b"p" * 40 for k in range(size)]
            n += size
            payloads.extend(batch)
            assert await asyncio.gather(*[j.append(p) for p in batch]) == list(range(n - size + 1, n + 1))
        await j.close()
    run(main())
    return payloads


def _open_fails(tmp_path, pattern):
    async def main():
        j = LocalJournal(tmp_path)
        with pytest.raises(JournalCorrupt, match=pattern) as info:
            await j.open()
        return str(info.value)
    return run(main())


def test_zeroed_second_half_of_the_last_segment_is_refused_not_cut(tmp_path):
    payloads = _batches(tmp_path, [1] * 40)
    path = seg_path(tmp_path)
    size = os.path.getsize(path)
    offs = offsets(payloads)
    half = DATA_START + (size - DATA_START) // 2
    with open(path, "r+b") as f:
        f.seek(half)
        f.write(b"\0" * (size - half))
    message = _open_fails(tmp_path, "entries are missing|are missing")
    first_bad = next(i for i, off in enumerate(offs) if off + HEADER_SIZE + len(payloads[0]) > half)
    assert path in message and "byte offset %d" % offs[first_bad] in message
    assert "entries %d..40 are missing" % (first_bad + 1) in message
    assert "journal-load-truncated yes" in message
    assert os.path.getsize(path) == size, "nothing is cut when start-up refuses"
    with pytest.raises(JournalCorrupt, match="are missing"):
        list(iter_entries(tmp_path))          # recovery's reader judges it the same way


def test_truncated_second_half_of_the_last_segment_is_refused(tmp_path):
    payloads = _batches(tmp_path, [1] * 40)
    path = seg_path(tmp_path)
    offs = offsets(payloads)
    with open(path, "r+b") as f:
        f.truncate(offs[20] + 7)           # inside record 21: looks like a torn write, but 19 more were acked
    message = _open_fails(tmp_path, "entries 21..40 are missing")
    assert "byte offset %d" % offs[20] in message


def test_truncated_at_a_record_boundary_is_refused(tmp_path):
    payloads = _batches(tmp_path, [1] * 10)
    with open(seg_path(tmp_path), "r+b") as f:
        f.truncate(offsets(payloads)[6])
    _open_fails(tmp_path, "entries 7..10 are missing")


def test_damage_inside_the_last_multi_record_batch_is_a_torn_tail(tmp_path, caplog):
    payloads = _batches(tmp_path, [3, 3, 4])      # the last batch wrote entries 7..10 in one write
    offs = offsets(payloads)
    with open(seg_path(tmp_path), "r+b") as f:
        f.truncate(offs[8] + 5)                   # entries 9 and 10 of the last batch are gone
    j = LocalJournal(tmp_path)
    with caplog.at_level(logging.WARNING, logger="durakv.journal"):
        run(j.open())
    assert j.commit_index == 8 and j.torn_tail_cuts == 1
    run(j.close())
    # ... but the same cut one batch earlier loses acknowledged entries.
    _batches(tmp_path / "b", [3, 3, 4])
    with open(seg_path(tmp_path / "b"), "r+b") as f:
        f.truncate(offs[5] + 5)
    _open_fails(tmp_path / "b", "entries 6..10 are missing")


def test_a_flipped_byte_in_the_last_record_is_cut_with_a_warning(tmp_path, caplog):
    payloads = _batches(tmp_path, [1] * 30)
    offs = offsets(payloads)
    with open(seg_path(tmp_path), "r+b") as f:
        f.seek(offs[29] + HEADER_SIZE + 3)
        f.write(b"#")
    j = LocalJournal(tmp_path)
    with caplog.at_level(logging.WARNING, logger="durakv.journal"):
        run(j.open())
    assert j.commit_index == 29
    assert any("incomplete tail at byte offset %d" % offs[29] in r.getMessage() for r in caplog.records)
    run(j.close())


def test_deleted_newest_segment_is_refused(tmp_path):
    _batches(tmp_path, [1] * 30, segment_bytes=400)
    segs = list_segments(os.path.join(str(tmp_path), "journal"))
    assert len(segs) >= 4
    os.unlink(segs[-1][1])
    message = _open_fails(tmp_path, "is missing")
    assert segs[-2][1] in message and os.path.basename(segs[-1][1]) in message
    with pytest.raises(JournalCorrupt, match="is missing"):
        list(iter_entries(tmp_path))


def test_emptied_newest_segment_is_refused(tmp_path):
    _batches(tmp_path, [1] * 30, segment_bytes=400)
    segs = list_segments(os.path.join(str(tmp_path), "journal"))
    with open(segs[-1][1], "r+b") as f:
        f.truncate(0)
    message = _open_fails(tmp_path, "segment header incomplete")
    assert segs[-1][1] in message and "entries from index %d are lost" % segs[-1][0] in message


def test_emptied_only_segment_is_refused(tmp_path):
    _batches(tmp_path, [1] * 10)
    with open(seg_path(tmp_path), "r+b") as f:
        f.truncate(0)
    _open_fails(tmp_path, "segment header incomplete")


def test_a_journal_directory_without_segments_is_refused_when_one_was_expected(tmp_path):
    _batches(tmp_path, [1] * 5)
    os.unlink(seg_path(tmp_path))
    with pytest.raises(JournalCorrupt, match="holds no segment, but because: the entries after index 0 are lost"):
        check_journal(tmp_path, expect_after=0, expect_reason="because")
    report = check_journal(tmp_path, load_truncated=True, expect_after=0, expect_reason="because")
    assert report.segments == [] and report.dropped


def test_crash_states_of_a_rotation_are_not_damage(tmp_path):
    """Rotation: the next segment is made (as .seg.tmp, then renamed), then the current one sealed."""
    _batches(tmp_path, [1] * 12, segment_bytes=400)
    jdir = os.path.join(str(tmp_path), "journal")
    segs = list_segments(jdir)
    # a crash before the rename: a half-made .tmp is removed
    with open(os.path.join(jdir, segment_name(99)) + ".tmp", "wb") as f:
        f.write(b"DKVJ")
    # a crash after creating the last segment but before sealing the one before: write an unsealed state
    last_first, last_path = segs[-1]
    prev_path = segs[-2][1]
    with open(prev_path, "r+b") as f:
        head = f.read(DATA_START)
    states = [decode_slot(head, off) for off in SLOT_OFFSETS]
    newest = max((st for st in states if st), key=lambda st: st.seq)
    assert newest.sealed == 1
    from durakv.journal.walformat import encode_slot, slot_offset
    unsealed = newest._replace(seq=newest.seq + 1, sealed=0)
    with open(prev_path, "r+b") as f:
        f.seek(slot_offset(unsealed.seq))
        f.write(encode_slot(unsealed))
    j = LocalJournal(tmp_path, segment_bytes=400)
    run(j.open())
    assert j.commit_index == 12
    assert not os.path.exists(os.path.join(jdir, segment_name(99)) + ".tmp")
    run(j.close())


def test_a_half_made_journal_directory_is_removed(tmp_path):
    os.makedirs(os.path.join(str(tmp_path), "journal.tmp"))
    with open(os.path.join(str(tmp_path), "journal.tmp", segment_name(1) + ".tmp"), "wb") as f:
        f.write(b"x")
    j = LocalJournal(tmp_path)
    run(j.open())
    assert not os.path.exists(os.path.join(str(tmp_path), "journal.tmp"))
    assert [s[0] for s in j.segments] == [1]
    run(j.close())


def test_journal_load_truncated_cuts_at_the_first_damage_and_logs_what_it_dropped(tmp_path, caplog):
    payloads = _batches(tmp_path, [1] * 30, segment_bytes=400)
    jdir = os.path.join(str(tmp_path), "journal")
    segs = list_segments(jdir)
    assert len(segs) >= 4
    victim_first, victim = segs[1]
    rec = HEADER_SIZE + len(payloads[0])
    with open(victim, "r+b") as f:           # damage in a closed segment: everything from there on goes
        f.seek(DATA_START + rec + HEADER_SIZE + 2)
        f.write(b"#")
    _open_fails(tmp_path, "not the end of the journal")
    j = LocalJournal(tmp_path, segment_bytes=400, load_truncated=True)
    with caplog.at_level(logging.WARNING, logger="durakv.journal"):
        run(j.open())
    assert j.commit_index == victim_first       # the first record of the damaged segment survives
    messages = "\n".join(r.getMessage() for r in caplog.records)
    assert "journal-load-truncated yes" in messages and "dropped entries %d.." % (victim_first + 1) in messages
    for first, path in segs[2:]:
        assert "dropped segment %s" % path in messages and os.path.exists(path + ".dropped")
    assert os.path.exists(victim + ".cut-at-%d.dropped" % (DATA_START + rec))

    async def more():
        j = LocalJournal(tmp_path, segment_bytes=400)
        await j.open()                           # the cut journal is whole again
        assert await j.append(b"after") == victim_first + 1
        await j.close()
    run(more())
    assert _reopened_payloads(tmp_path, segment_bytes=400) == payloads[:victim_first] + [b"after"]


def test_journal_load_truncated_continues_after_a_missing_newest_segment(tmp_path):
    _batches(tmp_path, [1] * 30, segment_bytes=400)
    segs = list_segments(os.path.join(str(tmp_path), "journal"))
    os.unlink(segs[-1][1])

    async def main():
        j = LocalJournal(tmp_path, segment_bytes=400, load_truncated=True)
        await j.open()
        assert j.commit_index == segs[-1][0] - 1
        assert await j.append(b"next") == segs[-1][0]
        await j.close()
        j = LocalJournal(tmp_path, segment_bytes=400)
        await j.open()
        assert j.commit_index == segs[-1][0]
        await j.close()
    run(main())


# -- the old format (.wal, no header) ----------------------------------------------------------------------

def _write_legacy(tmp_path, segments):
    """Old-format segments: {first_index: [payloads]}."""
    jdir = os.path.join(str(tmp_path), "journal")
    os.makedirs(jdir, exist_ok=True)
    for first, payloads in segments.items():
        with open(os.path.join(jdir, legacy_segment_name(first)), "wb") as f:
            f.write(b"".join(encode_frame(first + k, 0, p) for k, p in enumerate(payloads)))


def test_old_format_journal_is_read_and_continued_in_the_new_format(tmp_path):
    _write_legacy(tmp_path, {1: [b"a", b"b", b"c"], 4: [b"d", b"e"]})
    assert [e.payload for e in iter_entries(tmp_path)] == [b"a", b"b", b"c", b"d", b"e"]

    async def main():
        j = LocalJournal(tmp_path)
        await j.open()
        assert j.commit_index == 5
        assert [os.path.basename(p) for _f, p in j.segments] == [legacy_segment_name(1), legacy_segment_name(4),
                                                                    segment_name(6)]
        assert await j.append(b"f") == 6
        await j.close()
    run(main())
    assert _reopened_payloads(tmp_path) == [b"a", b"b", b"c", b"d", b"e", b"f"]
    assert [e.payload for e in iter_entries(tmp_path)] == [b"a", b"b", b"c", b"d", b"e", b"f"]


def test_old_format_torn_tail_is_cut_and_an_empty_old_segment_replaced(tmp_path, caplog):
    _write_legacy(tmp_path, {1: [b"a", b"b"]})
    with open(legacy_path(tmp_path), "ab") as f:
        f.write(b"\xd7\x00\x00")
    j = LocalJournal(tmp_path)
    with caplog.at_level(logging.WARNING, logger="durakv.journal"):
        run(j.open())
    assert j.commit_index == 2 and j.torn_tail_cuts == 1
    run(j.close())
    # an empty old segment (rotated, nothing written) is replaced by a new-format one of the same index
    _write_legacy(tmp_path / "e", {1: [b"a"], 2: []})

    async def main():
        j = LocalJournal(tmp_path / "e")
        await j.open()
        assert [os.path.basename(p) for _f, p in j.segments] == [legacy_segment_name(1), segment_name(2)]
        assert await j.append(b"b") == 2
        await j.close()
    run(main())
    assert _reopened_payloads(tmp_path / "e") == [b"a", b"b"]


# -- a reader beside a live writer -----------------------------------------------------------------------

def test_live_reader_relists_when_the_writer_rotates_under_it(tmp_path):
    """A sealed newest segment seen by a reader with upto means the writer rotated after the listing."""
    async def main():
        j = LocalJournal(tmp_path, segment_bytes=300)
        await j.open()
        loop = asyncio.get_running_loop()
        for i in range(1, 40):
            await j.append(b"%03d" % i * 20)
        upto = j.commit_index
        reads = [loop.run_in_executor(None, lambda: [e.index for e in iter_entries(tmp_path, upto=upto)])
                 for _ in range(3)]
        more = [j.append(b"more" * 20) for _ in range(60)]
        got = await asyncio.gather(*reads)
        await asyncio.gather(*more)
        assert all(g == list(range(1, upto + 1)) for g in got)
        await j.close()
    run(main())


# -- the failure contract ----------------------------------------------------------------------------------

class FaultyIO(SysIO):
    """Fails the n-th next call of one system call with an errno, optionally after a short write."""

    def __init__(self):
        self.faults = {}
        self.calls = {}

    def fail(self, op, err, skip=0, short=None, times=1):
        self.faults[op] = [skip, err, short, times]

    def _check(self, op):
        self.calls[op] = self.calls.get(op, 0) + 1
        fault = self.faults.get(op)
        if fault is None:
            return None
        if fault[0] > 0:
            fault[0] -= 1
            return None
        return fault

    def _raise(self, op, fault):
        fault[3] -= 1
        if fault[3] <= 0:
            del self.faults[op]
        raise OSError(fault[1], os.strerror(fault[1]))

    def open(self, path, flags, mode=0o644):
        fault = self._check("open")
        if fault:
            self._raise("open", fault)
        return super().open(path, flags, mode)

    def pwrite(self, fd, data, offset):
        fault = self._check("pwrite")
        if fault:
            if fault[2]:                 # a short write first, the error on the next call (as ENOSPC does)
                n = super().pwrite(fd, bytes(data[:fault[2]]), offset)
                fault[2] = None
                return n
            self._raise("pwrite", fault)
        return super().pwrite(fd, data, offset)

    def fsync(self, fd):
        fault = self._check("fsync")
        if fault:
            self._raise("fsync", fault)
        super().fsync(fd)

    def ftruncate(self, fd, length):
        fault = self._check("ftruncate")
        if fault:
            self._raise("ftruncate", fault)
        super().ftruncate(fd, length)

    def fsync_dir(self, path):
        fault = self._check("fsync_dir")
        if fault:
            self._raise("fsync_dir", fault)
        super().fsync_dir(path)

    def unlink(self, path):
        fault = self._check("unlink")
        if fault:
            self._raise("unlink", fault)
        super().unlink(path)


def _reopened_payloads(tmp_path, **kw):
    async def main():
        j = LocalJournal(tmp_path, **kw)
        await j.open()
        out = [e.payload for e in await collect(j, 0)]
        await j.close()
        return out
    return run(main())


@pytest.mark.parametrize("op,err,short", [("pwrite", errno.ENOSPC, 7), ("pwrite", errno.EIO, None),
                                          ("fsync", errno.EIO, None), ("fsync", errno.ENOSPC, None)])
def test_a_failed_append_leaves_nothing_and_a_retry_takes_its_index(tmp_path, op, err, short):
    io = FaultyIO()

    async def main():
        j = LocalJournal(tmp_path, io=io)
        await j.open()
        assert await j.append(b"one") == 1 and await j.append(b"two") == 2
        size = os.path.getsize(seg_path(tmp_path))
        io.fail(op, err, short=short)
        with pytest.raises(JournalFailed, match=errno.errorcode[err]) as info:
            await j.append(b"three" * 20)
        failure = info.value
        assert failure.errno == err and isinstance(failure.__cause__, OSError)
        assert "resume() and append again to retry (the retry gets index 3)" in str(failure)
        assert j.commit_index == 2 and j.next_index == 3 and j.failed and not j.broken
        assert j.append_failures == 1 and j.last_failure is failure
        assert os.path.getsize(seg_path(tmp_path)) == size       # the partly written record is cut away
        assert [e.payload for e in iter_entries(tmp_path)] == [b"one", b"two"]
        with pytest.raises(JournalFailed, match="resume"):
            j.append(b"not yet")                                  # latched until the owner says so
        assert j.resume() == 3 and not j.failed
        assert await j.append(b"three, retried") == 3             # the retry: resume, append again
        await j.close()
    run(main())
    assert _reopened_payloads(tmp_path) == [b"one", b"two", b"three, retried"]


def test_appends_queued_behind_a_failed_batch_fail_and_numbering_restarts(tmp_path):
    io = FaultyIO()

    async def main():
        j = LocalJournal(tmp_path, io=io)
        await j.open()
        assert await j.append(b"ok") == 1
        j.stall_ms = 50
        io.fail("fsync", errno.EIO)
        failing = j.append(b"fails")
        while not j.writing:
            await asyncio.sleep(0)
        queued = [j.append(b"queued-%d" % i) for i in range(5)]
        rotated = j.rotate()
        results = await asyncio.gather(failing, *queued, rotated, return_exceptions=True)
        assert all(isinstance(r, JournalFailed) for r in results)
        assert "entry 2 before it failed" in str(results[1])
        j.stall_ms = 0
        assert j.pending == 0 and j.next_index == 2 and j.resume() == 2
        assert await asyncio.gather(*[j.append(b"again-%d" % i) for i in range(3)]) == [2, 3, 4]
        await j.close()
    run(main())
    assert _reopened_payloads(tmp_path) == [b"ok", b"again-0", b"again-1", b"again-2"]


def test_emfile_at_rotation_keeps_what_was_written_before_it(tmp_path):
    io = FaultyIO()
    payload = b"r" * (100 - HEADER_SIZE)     # 100-byte records: 4 per 400-byte segment

    async def main():
        j = LocalJournal(tmp_path, segment_bytes=400, io=io)
        await j.open()
        io.fail("open", errno.EMFILE)
        results = await asyncio.gather(*[j.append(payload) for _ in range(6)], return_exceptions=True)
        assert results[:4] == [1, 2, 3, 4]                     # fsynced before the rotation failed
        assert all(isinstance(r, JournalFailed) and r.errno == errno.EMFILE for r in results[4:])
        assert "EMFILE" in str(results[4]) and j.commit_index == 4 and j.next_index == 5
        assert [s[0] for s in j.segments] == [1]
        assert not [n for n in os.listdir(j.dir) if n.endswith(".tmp")]
        assert j.resume() == 5
        assert await asyncio.gather(*[j.append(payload) for _ in range(2)]) == [5, 6]   # rotation retried
        assert [s[0] for s in j.segments] == [1, 5]
        await j.close()
    run(main())
    assert len(_reopened_payloads(tmp_path, segment_bytes=400)) == 6


def test_a_rotation_whose_directory_fsync_fails_removes_the_new_segment(tmp_path):
    io = FaultyIO()

    async def main():
        j = LocalJournal(tmp_path, io=io)
        await j.open()
        assert await j.append(b"a") == 1
        io.fail("fsync_dir", errno.EIO)
        with pytest.raises(JournalFailed, match="EIO"):
            await j.rotate()
        assert not os.path.exists(seg_path(tmp_path, 2)) and [s[0] for s in j.segments] == [1]
        j.resume()
        assert await j.rotate() == 2 and await j.append(b"b") == 2
        await j.close()
    run(main())
    assert _reopened_payloads(tmp_path) == [b"a", b"b"]


def test_a_failed_seal_is_logged_and_the_rotation_stands(tmp_path, caplog):
    io = FaultyIO()

    async def main():
        j = LocalJournal(tmp_path, io=io)
        await j.open()
        assert await j.append(b"a") == 1
        io.fail("fsync", errno.EIO, skip=1)      # the new segment's fsync passes, the seal's fails
        with caplog.at_level(logging.WARNING, logger="durakv.journal"):
            assert await j.rotate() == 2
        assert j.seal_failures == 1 and any("could not seal" in r.getMessage() for r in caplog.records)
        assert await j.append(b"b") == 2
        await j.close()
    run(main())
    assert _reopened_payloads(tmp_path) == [b"a", b"b"]


def test_when_the_cut_fails_too_the_journal_is_broken_until_reopened(tmp_path):
    io = FaultyIO()

    async def main():
        j = LocalJournal(tmp_path, io=io)
        await j.open()
        assert await j.append(b"a") == 1
        io.fail("fsync", errno.EIO)
        io.fail("ftruncate", errno.EIO)
        with pytest.raises(JournalFailed, match="refuses appends until it is reopened"):
            await j.append(b"b")
        assert j.broken
        with pytest.raises(JournalFailed):
            j.append(b"c")                       # refused at call time
        with pytest.raises(JournalFailed):
            j.rotate()
        with pytest.raises(JournalFailed, match="close and reopen"):
            j.resume()
        await j.close()
        j = LocalJournal(tmp_path)
        await j.open()                           # recovery: the failed entry is whole and in place, or absent
        entries = await collect(j, 0)
        assert [e.payload for e in entries] in ([b"a"], [b"a", b"b"])
        assert await j.append(b"next") == len(entries) + 1
        await j.close()
    run(main())


def _run_isolated(script, *args, timeout=120, prefix=()):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "src")] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return subprocess.run(list(prefix) + [sys.executable, "-c", textwrap.dedent(script), *args], capture_output=True,
                          env=env, timeout=timeout)


_DISK_FULL = """
    import asyncio, errno, json, os, sys
    from durakv.journal import LocalJournal, iter_entries
    from durakv.journal.base import JournalFailed
    d = sys.argv[1]
    async def main():
        filler = os.path.join(d, "filler")
        with open(filler, "wb") as f:
            f.write(b"f" * 64 * 1024)
        j = LocalJournal(d, segment_bytes=32 * 1024)
        await j.open()
        acked, failure = [], None
        for i in range(1000):
            try:
                acked.append(await j.append(b"%04d" % i + b"x" * 3000))
            except JournalFailed as exc:
                failure = exc
                break
        out = {"acked": len(acked), "errno": failure.errno if failure else None,
               "commit": j.commit_index, "next": j.next_index, "broken": j.broken,
               "on_disk": len(list(iter_entries(d)))}
        os.unlink(filler)
        j.resume()
        out["retry"] = await j.append(b"retry")
        await j.close()
        j = LocalJournal(d, segment_bytes=32 * 1024)
        await j.open()
        out["reopened"] = j.commit_index
        await j.close()
        print(json.dumps(out))
    asyncio.run(main())
"""


def test_disk_full_on_a_small_tmpfs_then_space_freed(tmp_path):
    """A real ENOSPC: the journal on a 256 KiB tmpfs (in a private mount namespace)."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare is not installed: cannot mount a private tmpfs")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    mount = "mount -t tmpfs -o size=256k tmpfs %s && exec \"$0\" \"$@\"" % mnt
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", "mount -t tmpfs -o "
                            "size=256k tmpfs %s" % mnt], capture_output=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip("mounting a tmpfs is not allowed here: %s" % probe.stderr.decode(errors="replace").strip())
    proc = _run_isolated(_DISK_FULL, str(mnt), prefix=["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
                                                       mount])
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    out = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    assert out["errno"] == errno.ENOSPC and out["acked"] > 10 and not out["broken"]
    assert out["commit"] == out["acked"] == out["on_disk"] and out["next"] == out["acked"] + 1
    assert out["retry"] == out["acked"] + 1 and out["reopened"] == out["acked"] + 1


_FEW_FDS = """
    import asyncio, json, os, resource, sys
    from durakv.journal import LocalJournal
    from durakv.journal.base import JournalFailed
    d = sys.argv[1]
    async def main():
        j = LocalJournal(d, segment_bytes=1000)
        await j.open()
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        lowest_free = os.open(os.devnull, os.O_RDONLY)
        os.close(lowest_free)
        resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free, hard))   # no descriptor for a new segment
        results = await asyncio.gather(*[j.append(b"y" * 200) for _ in range(8)], return_exceptions=True)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        ok = [r for r in results if isinstance(r, int)]
        errs = sorted({getattr(r, "errno", None) for r in results if isinstance(r, JournalFailed)})
        j.resume()
        retry = await j.append(b"retry")
        await j.close()
        print(json.dumps({"ok": ok, "errnos": errs, "retry": retry}))
    asyncio.run(main())
"""


def test_descriptor_exhaustion_at_rotation_with_a_low_rlimit(tmp_path):
    proc = _run_isolated(_FEW_FDS, str(tmp_path))
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    out = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    assert out["ok"] == [1, 2, 3, 4] and out["errnos"] == [errno.EMFILE] and out["retry"] == 5


def test_open_reuses_the_start_up_check_only_while_no_segment_changed(tmp_path, monkeypatch):
    import durakv.journal.walcheck as walcheck
    _batches(tmp_path, [1] * 10)
    check_journal(tmp_path, remember=True)
    reads = []
    real = walcheck.read_file
    monkeypatch.setattr(walcheck, "read_file", lambda path: reads.append(path) or real(path))
    j = LocalJournal(tmp_path)
    run(j.open())
    assert reads == [] and j.commit_index == 10      # nothing changed since the check: not read again
    run(j.close())
    check_journal(tmp_path, remember=True)
    with open(seg_path(tmp_path), "ab") as f:         # a change after the check is seen
        f.write(encode_frame(12, 0, b"out of place"))
    _open_fails(tmp_path, "index gap")
