"""The local journal's format 3 (issue 31): every record carries its commit time; records of format 2 are still
read (time 0) and appended after; a segment of a newer version is refused by name, not read as damage."""

import asyncio
import os
import time

import pytest

from durakv.errors import JournalCorrupt
from durakv.journal.local import LocalJournal
from durakv.journal.walformat import (SEG_VERSION, SegmentState, encode_frame_v2, encode_segment_head, encode_slot,
                                      journal_dir, segment_name, slot_offset)
from durakv.journal.walscan import iter_entries
from helpers.waiting import scaled


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def test_entries_carry_a_commit_time_no_later_than_their_acknowledgement(tmp_path):
    async def main():
        j = LocalJournal(tmp_path)
        await j.open()
        acks = []
        for i in range(5):
            before = time.time() * 1000
            await j.append(b"entry %d" % i, epoch=1)
            acks.append((before, time.time() * 1000))
        await j.close()
        return acks
    acks = run(main())
    entries = list(iter_entries(str(tmp_path)))
    assert [e.payload for e in entries] == [b"entry %d" % i for i in range(5)]
    for e, (sent, acked) in zip(entries, acks):
        assert sent - 1 <= e.time_ms <= acked + 1
    assert entries[0] == (1, 1, b"entry 0")          # equality and unpacking stay (index, epoch, payload)


def _segment_of_v2_records(tmp_path, payloads, version=2):
    """A segment as durakv before format 3 wrote it: the version-2 header and records without a time."""
    jdir = journal_dir(str(tmp_path))
    os.makedirs(jdir)
    records = b"".join(encode_frame_v2(i + 1, 0, p) for i, p in enumerate(payloads))
    from durakv.journal.walformat import DATA_START
    state = SegmentState(1, DATA_START + len(records), DATA_START, len(payloads), 0, 1)
    head = bytearray(encode_segment_head(1, state))
    head[8:10] = version.to_bytes(2, "little")          # the version field, then the header's CRC again
    from crc32c import crc32c
    from durakv.journal.walformat import SEG_HEAD, U32
    head[SEG_HEAD.size:SEG_HEAD.size + 4] = U32.pack(crc32c(bytes(head[:SEG_HEAD.size])))
    slot = encode_slot(state)
    head[slot_offset(1):slot_offset(1) + len(slot)] = slot
    with open(os.path.join(jdir, segment_name(1)), "wb") as f:
        f.write(bytes(head) + records)


def test_a_journal_of_format_2_is_read_and_continued(tmp_path):
    _segment_of_v2_records(tmp_path, [b"old one", b"old two"])
    assert [(e.index, e.payload, e.time_ms) for e in iter_entries(str(tmp_path))] == [
        (1, b"old one", 0), (2, b"old two", 0)]

    async def main():
        j = LocalJournal(tmp_path)
        await j.open()
        assert j.commit_index == 2
        assert await j.append(b"new", epoch=0) == 3
        await j.close()
        j = LocalJournal(tmp_path)
        await j.open()                               # a segment mixing both kinds recovers whole
        assert j.commit_index == 3
        await j.close()
    run(main())
    entries = list(iter_entries(str(tmp_path)))
    assert [e.payload for e in entries] == [b"old one", b"old two", b"new"]
    assert entries[0].time_ms == 0 and entries[2].time_ms > 0


def test_a_segment_of_a_newer_version_is_refused_by_name(tmp_path):
    _segment_of_v2_records(tmp_path, [b"x"], version=SEG_VERSION + 1)

    async def main():
        await LocalJournal(tmp_path).open()
    with pytest.raises(JournalCorrupt, match="unsupported segment version %d" % (SEG_VERSION + 1)):
        run(main())


def test_the_writer_thread_keeps_no_payload_once_written(tmp_path):
    """A written batch's payloads were held by the writer thread until the next batch came: a DEBUG POPULATE of a
    million keys in `sync` kept its 53 MB entry alive and resident (307 B per key against 159 with `none`)."""
    freed = []

    class Payload(bytes):
        def __del__(self):
            freed.append(len(self))

    async def main():
        j = LocalJournal(tmp_path)
        await j.open()
        await j.append(Payload(b"x" * 100000), epoch=1)
        # the write's answer comes from the writer thread's batch: poll, with a deadline, for it to let go
        deadline = time.monotonic() + scaled(10)
        while not freed and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        held = list(freed)
        await j.close()
        return held
    assert run(main()) == [100000]
