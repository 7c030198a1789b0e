"""The local journal: the Journal contract plus group commit, torn tails, corruption, segments."""

import asyncio
import errno
import logging
import os

import pytest

from durakv.errors import JournalCorrupt
from durakv.journal import LocalJournal, iter_entries
from durakv.journal.base import Entry, JournalFailed, JournalTruncated
from durakv.journal.local import HEADER_SIZE, MAGIC, encode_frame, list_segments, segment_name
from journal_contract import JournalContract, collect


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


def offsets(payloads):
    """Byte offset of each record in a segment holding these payloads, then the end."""
    out = [0]
    for p in payloads:
        out.append(out[-1] + HEADER_SIZE + len(p))
    return out


PAYLOADS = [b"first", b"second entry", b"x" * 300, b"fourth", b"the last one, long enough" * 3]


# -- format -------------------------------------------------------------------------------------------

def test_segment_files_are_named_by_first_index_and_framed(tmp_path):
    run(write_entries(tmp_path, PAYLOADS, epoch=3))
    path = seg_path(tmp_path)
    assert os.path.basename(path) == "00000000000000000001.wal"
    with open(path, "rb") as f:
        data = f.read()
    expected = b"".join(encode_frame(i + 1, 3, p) for i, p in enumerate(PAYLOADS))
    assert data == expected
    assert data[0] == MAGIC
    assert len(data) == offsets(PAYLOADS)[-1]


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


def test_fsync_failure_fails_the_batch_and_later_appends(tmp_path, monkeypatch):
    async def main():
        j = LocalJournal(tmp_path)
        await j.open()
        assert await j.append(b"ok") == 1

        def broken_fsync(fd):
            raise OSError(errno.EIO, "injected EIO")
        monkeypatch.setattr(os, "fsync", broken_fsync)
        failed = j.append(b"lost?")
        with pytest.raises(JournalFailed, match="EIO"):
            await failed
        with pytest.raises(JournalFailed):
            j.append(b"refused")
        assert j.commit_index == 1
        await j.close()
        monkeypatch.undo()
        j = LocalJournal(tmp_path)
        await j.open()
        # The failed append was written (not fsynced): it may survive, whole and in its place.
        entries = await collect(j, 0)
        assert [e.payload for e in entries] in ([b"ok"], [b"ok", b"lost?"])
        assert await j.append(b"next") == len(entries) + 1
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

def _assert_corrupt(tmp_path, pattern):
    path = seg_path(tmp_path)
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
    with open(seg_path(tmp_path), "wb") as f:
        f.write(b"".join(frames))
    message = _assert_corrupt(tmp_path, "index gap")
    assert "byte offset %d" % (len(frames[0]) + len(frames[1])) in message
    assert "expected 3" in message


def test_wrong_index_in_the_last_record_is_not_a_torn_tail(tmp_path):
    os.makedirs(os.path.join(str(tmp_path), "journal"))
    with open(seg_path(tmp_path), "wb") as f:
        f.write(encode_frame(1, 0, b"a") + encode_frame(7, 0, b"b"))
    _assert_corrupt(tmp_path, "index gap")


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
            assert os.path.getsize(path) <= 1000
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
        assert os.path.getsize(j.segments[-1][1]) == 0
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
