"""The Journal contract, as a reusable test class.

A backend's test module subclasses JournalContract (with a name starting with Test) and implements
`make_journal(tmp_path)`: a new, not yet opened Journal over the storage named by tmp_path. Calling it
twice with the same tmp_path must give journals over the same storage (that is how reopening is tested).

Tests run their coroutine with asyncio.run (no pytest-asyncio).
"""

import asyncio
import os

import pytest

from durakv.journal.base import Entry, JournalClosed, JournalTruncated


async def collect(journal, after):
    return [e async for e in journal.read(after)]


class JournalContract:
    # Payload size used by the truncation test; backends with coarse truncation make enough entries
    # with it to fill several storage units.
    truncate_entries = 200
    truncate_payload = 512

    def make_journal(self, tmp_path):
        raise NotImplementedError

    async def opened(self, tmp_path, base_index=0):
        journal = self.make_journal(tmp_path)
        await journal.open(base_index)
        return journal

    def test_empty_journal(self, tmp_path):
        async def main():
            j = await self.opened(tmp_path)
            assert j.commit_index == 0
            assert j.first_index == 1
            assert await collect(j, 0) == []
            await j.close()
        asyncio.run(main())

    def test_append_returns_contiguous_indices_and_reads_back(self, tmp_path):
        async def main():
            j = await self.opened(tmp_path)
            indices = []
            for i in range(1, 21):
                indices.append(await j.append(b"entry-%d" % i, epoch=7))
                assert j.commit_index == i
            assert indices == list(range(1, 21))
            entries = await collect(j, 0)
            assert entries == [Entry(i, 7, b"entry-%d" % i) for i in range(1, 21)]
            await j.close()
        asyncio.run(main())

    def test_issue_order_is_index_and_completion_order(self, tmp_path):
        async def main():
            j = await self.opened(tmp_path)
            completed = []
            futures = []
            for i in range(300):
                fut = asyncio.ensure_future(j.append(b"p%d" % i))
                fut.add_done_callback(lambda f: completed.append(f.result()))
                futures.append(fut)
            results = await asyncio.gather(*futures)
            assert results == list(range(1, 301))
            assert completed == list(range(1, 301)), "an append completed before an earlier one"
            assert [e.payload for e in await collect(j, 0)] == [b"p%d" % i for i in range(300)]
            assert j.commit_index == 300
            await j.close()
        asyncio.run(main())

    def test_read_after_a_position(self, tmp_path):
        async def main():
            j = await self.opened(tmp_path)
            for i in range(1, 11):
                await j.append(b"%d" % i)
            assert [e.index for e in await collect(j, 4)] == [5, 6, 7, 8, 9, 10]
            assert [e.index for e in await collect(j, 9)] == [10]
            assert await collect(j, 10) == []
            assert await collect(j, 15) == []
            await j.close()
        asyncio.run(main())

    def test_payloads_are_opaque_bytes(self, tmp_path):
        payloads = [b"", b"\x00" * 10, b"*1\r\n$3\r\nSET\r\n", bytes(range(256)) * 4, os.urandom(1 << 20), b"\xd7" * 40]

        async def main():
            j = await self.opened(tmp_path)
            for p in payloads:
                await j.append(p)
            assert [e.payload for e in await collect(j, 0)] == payloads
            await j.close()
            j = await self.opened(tmp_path)
            assert [e.payload for e in await collect(j, 0)] == payloads
            await j.close()
        asyncio.run(main())

    def test_epochs_are_stored_per_entry(self, tmp_path):
        async def main():
            j = await self.opened(tmp_path)
            for epoch in (0, 1, 1, 5, 2**40):
                await j.append(b"x", epoch=epoch)
            await j.close()
            j = await self.opened(tmp_path)
            assert [e.epoch for e in await collect(j, 0)] == [0, 1, 1, 5, 2**40]
            await j.close()
        asyncio.run(main())

    def test_close_and_reopen_keeps_entries_and_numbering(self, tmp_path):
        async def main():
            j = await self.opened(tmp_path)
            for i in range(1, 6):
                await j.append(b"a%d" % i)
            await j.close()
            j = await self.opened(tmp_path)
            assert j.commit_index == 5
            assert j.first_index == 1
            assert await j.append(b"a6") == 6
            await j.close()
            j = await self.opened(tmp_path)
            assert [(e.index, e.payload) for e in await collect(j, 0)] == [(i, b"a%d" % i) for i in range(1, 7)]
            await j.close()
        asyncio.run(main())

    def test_base_index_numbers_an_empty_journal(self, tmp_path):
        async def main():
            j = await self.opened(tmp_path, base_index=41)
            assert j.commit_index == 41
            assert j.first_index == 42
            assert await j.append(b"x") == 42
            await j.close()
            j = await self.opened(tmp_path, base_index=41)
            assert j.commit_index == 42
            assert [e.index for e in await collect(j, 41)] == [42]
            await j.close()
        asyncio.run(main())

    def test_close_completes_appends_already_called(self, tmp_path):
        async def main():
            j = await self.opened(tmp_path)
            futures = [j.append(b"c%d" % i) for i in range(50)]  # the call itself fixes the position
            await j.close()
            assert [f.result() for f in futures] == list(range(1, 51))
            j = await self.opened(tmp_path)
            assert j.commit_index == 50
            await j.close()
        asyncio.run(main())

    def test_append_after_close_raises(self, tmp_path):
        async def main():
            j = await self.opened(tmp_path)
            await j.append(b"x")
            await j.close()
            with pytest.raises(JournalClosed):
                await j.append(b"y")
            await j.close()  # closing twice is harmless
        asyncio.run(main())

    def test_bytes_size_grows_with_entries(self, tmp_path):
        async def main():
            j = await self.opened(tmp_path)
            before = j.bytes_size
            await j.append(b"z" * 1000)
            assert j.bytes_size >= before + 1000
            await j.close()
        asyncio.run(main())

    def test_truncate_before_drops_only_earlier_entries(self, tmp_path):
        n = self.truncate_entries
        cut = n * 3 // 4

        async def main():
            j = await self.opened(tmp_path)
            for i in range(1, n + 1):
                await j.append(i.to_bytes(4, "big") * (self.truncate_payload // 4))
            first = await j.truncate_before(cut)
            assert first == j.first_index
            assert 1 <= first <= cut
            kept = await collect(j, first - 1)
            assert [e.index for e in kept] == list(range(first, n + 1))
            assert all(e.payload == e.index.to_bytes(4, "big") * (self.truncate_payload // 4) for e in kept)
            if first > 1:
                with pytest.raises(JournalTruncated):
                    await collect(j, 0)
            assert await j.append(b"after") == n + 1
            await j.close()
            j = await self.opened(tmp_path)
            assert j.first_index == first
            assert j.commit_index == n + 1
            assert [e.index for e in await collect(j, cut - 1)] == list(range(cut, n + 2))
            await j.close()
        asyncio.run(main())

    def test_reader_sees_a_consistent_prefix_during_appends(self, tmp_path):
        async def main():
            j = await self.opened(tmp_path)
            for i in range(1, 101):
                j.append(b"r%d" % i)
            writer_done = asyncio.ensure_future(asyncio.gather(*[j.append(b"r%d" % i) for i in range(101, 401)]))
            seen = await collect(j, 0)
            assert [e.index for e in seen] == list(range(1, len(seen) + 1))
            assert all(e.payload == b"r%d" % e.index for e in seen)
            await writer_done
            assert len(await collect(j, 0)) == 400
            await j.close()
        asyncio.run(main())

    # -- entry size and continuation parts (docs/design.md "Bounds on the write path") -------------------------
    def test_an_entry_of_max_entry_bytes_is_stored_whole(self, tmp_path):
        async def main():
            j = await self.opened(tmp_path)
            limit = j.max_entry_bytes
            assert limit > 0
            payload = bytes(range(256)) * (limit // 256) + b"x" * (limit % 256)
            assert len(payload) == limit
            index = await j.append(payload, epoch=1)
            assert [e.payload for e in await collect(j, index - 1)] == [payload]
            await j.close()
        asyncio.run(main())

    def test_a_command_larger_than_an_entry_reads_back_through_its_parts(self, tmp_path):
        from durakv.journal.codec import PartAssembler, encode_effects, encode_parts

        async def main():
            j = await self.opened(tmp_path)
            limit = j.max_entry_bytes
            value = os.urandom(limit * 2 + 12345)
            effects = [(0, (b"SET", b"small", b"1")), (2, (b"SET", b"big", value))]
            parts = encode_parts(encode_effects(effects), limit)
            assert len(parts) >= 3 and all(len(p) <= limit for p in parts)
            first = None
            for p in parts:
                index = await j.append(p, epoch=1)
                first = first or index
            await j.close()
            j = await self.opened(tmp_path)     # and after reopening
            assembler = PartAssembler()
            applied = []
            for e in await collect(j, first - 1):
                applied.extend(assembler.feed(e.payload, e.index))
            assert applied == [(0, [b"SET", b"small", b"1"]), (2, [b"SET", b"big", value])]
            await j.close()
        asyncio.run(main())

    def test_an_unfinished_tail_of_parts_is_dropped_by_the_next_entry(self, tmp_path):
        from durakv.journal.codec import PartAssembler, encode_effects, encode_parts

        async def main():
            j = await self.opened(tmp_path)
            limit = j.max_entry_bytes
            parts = encode_parts(encode_effects([(0, (b"SET", b"lost", b"v" * (limit * 2)))]), limit)
            first = await j.append(parts[0], epoch=1)
            await j.append(parts[1], epoch=1)         # the writer died before the last part
            await j.append(encode_effects([(0, (b"SET", b"next", b"1"))]), epoch=1)
            await j.append(parts[2], epoch=1)         # a part out of sequence is dropped too
            assembler = PartAssembler()
            applied = []
            for e in await collect(j, first - 1):
                applied.extend(assembler.feed(e.payload, e.index))
            assert applied == [(0, [b"SET", b"next", b"1"])]
            assert assembler.discarded == 1 and assembler.pending == 0
            await j.close()
        asyncio.run(main())
