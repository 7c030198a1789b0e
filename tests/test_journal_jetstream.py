"""The JetStream journal backend: the shared Journal contract against a real 3-node NATS cluster, plus the
fencing rules of DESIGN.md measured on real conditional appends."""

import asyncio
import hashlib
import os

import pytest

from durakv.journal.base import Entry, EpochFilter, JournalFenced
from durakv.journal.jetstream import JetStreamJournal
from journal_contract import JournalContract


@pytest.fixture(autouse=True)
def _servers(request, module_nats):
    if request.instance is not None:
        request.instance.servers = module_nats.urls


def shard_for(tmp_path):
    return "t" + hashlib.sha1(str(tmp_path).encode()).hexdigest()[:12]


class TestJetStreamJournalContract(JournalContract):
    truncate_entries = 60
    truncate_payload = 256

    def make_journal(self, tmp_path):
        return JetStreamJournal(self.servers, shard_for(tmp_path))

    def test_payloads_are_opaque_bytes(self, tmp_path):
        """As the contract, except the empty payload: on JetStream it is reserved for epoch markers
        (the durability layer never appends an empty batch)."""
        payloads = [b"\x00" * 10, b"*1\r\n$3\r\nSET\r\n", bytes(range(256)) * 4, os.urandom(1 << 20), b"\xd7" * 40]

        async def main():
            j = self.make_journal(tmp_path)
            await j.open()
            for p in payloads:
                await j.append(p)
            assert [e.payload async for e in j.read(0)] == payloads
            await j.close()
        asyncio.run(main())

    def test_base_index_numbers_an_empty_journal(self, tmp_path):
        """Differs from the local backend by design: a stream cannot be renumbered, so an empty stream
        behind a snapshot of a later index is refused instead of numbering entries twice."""
        from durakv.errors import JournalCorrupt

        async def main():
            j = self.make_journal(tmp_path)
            with pytest.raises(JournalCorrupt):
                await j.open(5)
            await j.close()
        asyncio.run(main())


def _run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def test_marker_fences_a_stale_writer(module_nats, tmp_path):
    """Old writer A (epoch 1) appends; new writer B reads to the end and appends its epoch-2 marker; A's
    next appends are rejected (fenced), never land, and A learns it was deposed."""
    shard = shard_for(tmp_path)

    async def main():
        a = JetStreamJournal(module_nats.urls, shard, epoch=1)
        await a.open()
        fenced = []
        a.on_fenced = fenced.append
        assert await a.append(b"a1") == 1
        assert await a.append(b"a2") == 2
        b = JetStreamJournal(module_nats.urls, shard, epoch=2)
        await b.open()
        entries = [e async for e in b.read(0)]
        b.set_last(entries[-1].index)
        marker = await b.append_marker(2)
        assert marker == 3
        # A pipelines three appends: none may land after the marker.
        futs = [a.append(b"stale%d" % i) for i in range(3)]
        results = await asyncio.gather(*futs, return_exceptions=True)
        assert all(isinstance(r, JournalFenced) for r in results), results
        assert fenced and isinstance(fenced[0], JournalFenced)
        assert await b.append(b"b1") == 4
        stored = [e async for e in b.read(0)]
        assert [e.payload for e in stored] == [b"a1", b"a2", b"", b"b1"]
        f = EpochFilter()
        assert [e.payload for e in stored if f.accept(e)] == [b"a1", b"a2", b"b1"]
        await a.close()
        await b.close()
    _run(main())


def test_stale_append_landing_before_the_marker_is_kept_and_marker_retries(module_nats, tmp_path):
    """If the old writer's in-flight append lands between the new writer's read and its marker, the marker
    is rejected, the new writer reads the tail (older epoch only), keeps that entry and retries after it."""
    shard = shard_for(tmp_path)

    async def main():
        a = JetStreamJournal(module_nats.urls, shard, epoch=1)
        await a.open()
        await a.append(b"a1")
        b = JetStreamJournal(module_nats.urls, shard, epoch=2)
        await b.open()
        b.set_last(1)                      # B read up to index 1 ...
        assert await a.append(b"a2") == 2  # ... then A's append landed
        marker = await b.append_marker(2)  # rejected once, retried after index 2
        assert marker == 3
        stored = [e async for e in b.read(0)]
        f = EpochFilter()
        assert [e.payload for e in stored if f.accept(e)] == [b"a1", b"a2"]
        assert b.retries >= 1
        await a.close()
        await b.close()
    _run(main())


def test_reader_ignores_entries_older_than_the_newest_marker(module_nats):
    f = EpochFilter()
    seq = [Entry(1, 1, b""), Entry(2, 1, b"x"), Entry(3, 2, b""), Entry(4, 1, b"late"), Entry(5, 2, b"y")]
    assert [e.payload for e in seq if f.accept(e)] == [b"x", b"y"]
    assert f.epoch == 2
