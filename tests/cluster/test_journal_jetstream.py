"""The JetStream journal backend: the shared Journal contract against a real 3-node NATS cluster (one append
in flight and a pipelined window), plus the fencing rules of docs/design.md measured on real conditional appends:
with two writers whose windows are full, and with the stream's leader killed in the middle of a window."""

import asyncio
import hashlib
import os

import pytest

from durakv.journal.base import Entry, EpochFilter, JournalFenced
from durakv.journal.jetstream import MAX_APPENDS_IN_FLIGHT, JetStreamJournal
from helpers.journal_contract import JournalContract, collect
from helpers.clusters import async_wait_for


@pytest.fixture(autouse=True)
def _servers(request, module_nats):
    _creds[0] = module_nats.secrets.operator_creds
    if request.instance is not None:
        request.instance.servers = module_nats.urls
        request.instance.creds = module_nats.secrets.operator_creds


def shard_for(tmp_path):
    return "t" + hashlib.sha1(str(tmp_path).encode()).hexdigest()[:12]


class TestJetStreamJournalContract(JournalContract):
    """One append in flight (journal-max-appends-in-flight 1: the behaviour before pipelining)."""
    truncate_entries = 60
    truncate_payload = 256
    window = 1

    def make_journal(self, tmp_path):
        return JetStreamJournal(self.servers, shard_for(tmp_path), max_appends_in_flight=self.window, creds=self.creds)

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


class TestJetStreamJournalContractPipelined(TestJetStreamJournalContract):
    """The same contract with a window of 8 appends in flight."""
    window = 8

    def test_window_is_used_after_the_probation(self, tmp_path):
        """The first MAX_APPENDS_IN_FLIGHT positions go one at a time; after them the window fills."""
        async def main():
            j = await self.opened(tmp_path)
            for i in range(MAX_APPENDS_IN_FLIGHT):
                await j.append(b"solo%d" % i)
            assert j.max_in_flight_seen == 1
            n = 400
            results = await asyncio.gather(*[j.append(b"w%d" % i) for i in range(n)])
            assert results == list(range(MAX_APPENDS_IN_FLIGHT + 1, MAX_APPENDS_IN_FLIGHT + n + 1))
            assert j.max_in_flight_seen == self.window
            assert j.retries == 0
            assert [e.payload for e in await collect(j, MAX_APPENDS_IN_FLIGHT)] == [b"w%d" % i for i in range(n)]
            await j.close()
        asyncio.run(main())


def _run(coro, timeout_s=60):
    return asyncio.run(asyncio.wait_for(coro, timeout_s))


def test_marker_fences_a_stale_writer(module_nats, tmp_path):
    """Old writer A (epoch 1) appends; new writer B reads to the end and appends its epoch-2 marker; A's
    next appends are rejected (fenced), never land, and A learns it was deposed."""
    shard = shard_for(tmp_path)

    async def main():
        a = JetStreamJournal(module_nats.urls, shard, creds=module_nats.secrets.operator_creds, epoch=1)
        await a.open()
        fenced = []
        a.on_fenced = fenced.append
        assert await a.append(b"a1") == 1
        assert await a.append(b"a2") == 2
        b = JetStreamJournal(module_nats.urls, shard, creds=module_nats.secrets.operator_creds, epoch=2)
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
        f = EpochFilter(1)   # A wrote no marker: a reader that starts at epoch 1 (from a snapshot)
        assert [e.payload for e in stored if f.accept(e)] == [b"a1", b"a2", b"b1"]
        await a.close()
        await b.close()
    _run(main())


def test_stale_append_landing_before_the_marker_is_kept_and_marker_retries(module_nats, tmp_path):
    """If the old writer's in-flight append lands between the new writer's read and its marker, the marker
    is rejected, the new writer reads the tail (older epoch only), keeps that entry and retries after it."""
    shard = shard_for(tmp_path)

    async def main():
        a = JetStreamJournal(module_nats.urls, shard, creds=module_nats.secrets.operator_creds, epoch=1)
        await a.open()
        await a.append(b"a1")
        b = JetStreamJournal(module_nats.urls, shard, creds=module_nats.secrets.operator_creds, epoch=2)
        await b.open()
        b.set_last(1)                      # B read up to index 1 ...
        assert await a.append(b"a2") == 2  # ... then A's append landed
        marker = await b.append_marker(2)  # rejected once, retried after index 2
        assert marker == 3
        stored = [e async for e in b.read(0)]
        f = EpochFilter(1)
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


class _HoldingProxy:
    """A TCP proxy in front of one NATS server whose client-to-server direction can be held: what the
    client sends meanwhile waits in the proxy (a slow or partitioned old primary) and goes on when released."""

    def __init__(self, upstream_url):
        host_port = upstream_url.split("://", 1)[1]
        self.up_host, port = host_port.rsplit(":", 1)
        self.up_port = int(port)
        self.gate = asyncio.Event()
        self.gate.set()
        self.server = None
        self.tasks = set()

    async def start(self):
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return "nats://127.0.0.1:%d" % self.server.sockets[0].getsockname()[1]

    def hold(self):
        self.gate.clear()

    def release(self):
        self.gate.set()

    async def _serve(self, reader, writer):
        up_reader, up_writer = await asyncio.open_connection(self.up_host, self.up_port)

        async def pump(src, dst, gated):
            try:
                while True:
                    data = await src.read(65536)
                    if not data:
                        break
                    if gated:
                        await self.gate.wait()
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                dst.close()

        for t in (pump(reader, up_writer, True), pump(up_reader, writer, False)):
            task = asyncio.ensure_future(t)
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def close(self):
        self.server.close()
        for t in list(self.tasks):
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


_creds = [None]   # the module's NATS operator credentials (set by the _servers fixture)


async def _stream_entries(urls, shard, creds=None):
    reader = JetStreamJournal(urls, shard, creds=creds or _creds[0])
    await reader.open()
    entries = await collect(reader, 0)
    await reader.close()
    return entries


def _check_fencing(entries, acked):
    """Everything acknowledged is stored at its index; EpochFilter readers see exactly the acknowledged
    entries, in order; no entry is stored twice."""
    by_index = {e.index: e for e in entries}
    for index, payload in acked:
        assert by_index[index].payload == payload, (index, payload)
    f = EpochFilter(1)   # the writers of these tests start at epoch 1 without a marker (as after a snapshot)
    applied = [(e.index, e.payload) for e in entries if f.accept(e)]
    assert applied == sorted(acked), "readers apply something else than the acknowledged entries"
    payloads = [e.payload for e in entries if e.payload]
    assert len(payloads) == len(set(payloads)), "an entry was stored twice"


async def _stale_writer_a(module_nats, shard, appends):
    """Writer A (epoch 1, window 8) behind a proxy that can hold its bytes, after `appends` acknowledged
    appends: (proxy, A's NATS connection, A, [(index, payload)] acknowledged)."""
    import nats
    proxy = _HoldingProxy(module_nats.urls[0])
    url = await proxy.start()
    # Pings every 30 s: the hold must not make A's client drop the connection (and the held bytes).
    nc_a = await nats.connect(servers=[url], ping_interval=30, allow_reconnect=False,
                              user_credentials=module_nats.secrets.operator_creds)
    a = JetStreamJournal(nc_a, shard, epoch=1, max_appends_in_flight=8, request_timeout_s=10)
    await a.ensure_stream()
    await a.refresh()
    await a.open_writer()
    acked = []
    for i in range(appends):
        acked.append((await a.append(b"a-%d" % i), b"a-%d" % i))
    return proxy, nc_a, a, acked


async def _close_all(b, a, nc_a, proxy):
    await b.close()
    await a.close()
    await nc_a.close()
    await proxy.close()


def test_stale_writer_with_a_full_window_is_fenced_by_the_marker(module_nats, tmp_path):
    """Old writer A (epoch 1, window 8, past its probation) has a full window in flight, held on its way to
    NATS, when new writer B (epoch 2) lands its marker. Released, A's conditional chain lands partly after
    the marker (a chain of conditional appends is not a fence by itself), yet none of those appends is
    acknowledged: A fails every pending append with JournalFenced. B, still in its probation, steps over
    A's stale entries one append at a time. Everything acknowledged is in the stream, and EpochFilter
    readers see exactly the acknowledged entries."""
    shard = shard_for(tmp_path)

    async def main():
        proxy, nc_a, a, acked = await _stale_writer_a(module_nats, shard, MAX_APPENDS_IN_FLIGHT + 8)
        fenced = []
        a.on_fenced = fenced.append
        last_a = acked[-1][0]

        proxy.hold()
        a_futs = [a.append(b"a-stale-%d" % i) for i in range(20)]
        await async_wait_for(lambda: _true(a.in_flight == 8), 10, "A's full window in flight")

        b = JetStreamJournal(module_nats.urls[1:], shard, creds=module_nats.secrets.operator_creds, epoch=2, max_appends_in_flight=8)
        await b.open()
        assert b.commit_index == last_a
        marker = await b.append_marker(2)
        assert marker == last_a + 1

        proxy.release()
        # A's chain: the send conditional on last_a is refused (the marker is there), the 7 after it land.
        await async_wait_for(lambda: _last_is(b, marker + 7), 20, "A's stale chain to land after the marker")
        a_results = await asyncio.gather(*a_futs, return_exceptions=True)
        assert all(isinstance(r, JournalFenced) for r in a_results), a_results
        assert fenced and isinstance(fenced[0], JournalFenced)

        b_payloads = [b"b-%d" % i for i in range(40)]
        b_results = await asyncio.gather(*[b.append(p) for p in b_payloads])
        assert b_results == list(range(marker + 8, marker + 8 + 40))
        assert b.skipped_foreign == 7 and b.max_in_flight_seen == 8
        acked += list(zip(b_results, b_payloads))

        entries = await _stream_entries(module_nats.urls, shard)
        stale = [e for e in entries if e.index > marker and e.epoch == 1]
        assert [e.payload for e in stale] == [b"a-stale-%d" % i for i in range(1, 8)]
        _check_fencing(entries, acked)
        await _close_all(b, a, nc_a, proxy)
    _run(main())


def test_new_writer_in_probation_races_a_stale_chain(module_nats, tmp_path):
    """As above, but A's held window is released while B is already appending: B's appends and A's stale
    chain compete for the same positions. B never has two appends in flight there, so its entries stay in
    order, and EpochFilter readers see exactly what was acknowledged."""
    shard = shard_for(tmp_path)

    async def main():
        proxy, nc_a, a, acked = await _stale_writer_a(module_nats, shard, MAX_APPENDS_IN_FLIGHT + 4)
        proxy.hold()
        a_futs = [a.append(b"a-stale-%d" % i) for i in range(8)]
        await async_wait_for(lambda: _true(a.in_flight == 8), 10, "A's full window in flight")
        b = JetStreamJournal(module_nats.urls[1:], shard, creds=module_nats.secrets.operator_creds, epoch=2, max_appends_in_flight=8)
        await b.open()
        marker = await b.append_marker(2)
        b_payloads = [b"b-%d" % i for i in range(60)]
        b_futs = [b.append(p) for p in b_payloads]
        proxy.release()
        b_results = await asyncio.gather(*b_futs)
        a_results = await asyncio.gather(*a_futs, return_exceptions=True)
        assert all(isinstance(r, JournalFenced) for r in a_results), a_results
        assert b_results == sorted(b_results) and b_results[0] > marker
        acked += list(zip(b_results, b_payloads))
        entries = await _stream_entries(module_nats.urls, shard)
        assert all(e.index < marker for e in entries if e.epoch == 1 and e.payload.startswith(b"a-") and
                   not e.payload.startswith(b"a-stale"))
        _check_fencing(entries, acked)
        await _close_all(b, a, nc_a, proxy)
    _run(main())


def test_stream_leader_killed_mid_window_loses_nothing_and_duplicates_nothing(nats_cluster, tmp_path):
    """A writer keeps a window of 8 full; the NATS server leading the stream is killed (SIGKILL) in the
    middle. Appends in flight get no answer or a leaderless error; the writer reads the tail on the new
    leader, acknowledges its entries that landed and sends the rest again. Every append is acknowledged
    once, at consecutive indices, and the stream holds each exactly once, in order."""
    shard = shard_for(tmp_path)

    async def main():
        w = JetStreamJournal(nats_cluster.urls, shard, creds=nats_cluster.secrets.operator_creds, epoch=1,
                             max_appends_in_flight=8, request_timeout_s=2.0)
        await w.open()
        for i in range(MAX_APPENDS_IN_FLIGHT):
            await w.append(b"solo-%d" % i)
        n = 3000
        payloads = [b"p-%d" % i for i in range(n)]
        futs = [w.append(p) for p in payloads]
        await async_wait_for(lambda: _true(w.commit_index >= MAX_APPENDS_IN_FLIGHT + 300), 30, "300 appends")
        info = await w.js.stream_info(w.stream)
        leader = info.cluster.leader
        assert w.in_flight > 0
        nats_cluster.node(leader).kill()
        results = await asyncio.wait_for(asyncio.gather(*futs), 90)
        assert results == list(range(MAX_APPENDS_IN_FLIGHT + 1, MAX_APPENDS_IN_FLIGHT + n + 1))
        assert w.retries >= 1, "the kill did not interrupt any append"
        survivors = [node.url for node in nats_cluster.nodes if node.name != leader]
        entries = await _stream_entries(survivors, shard, nats_cluster.secrets.operator_creds)
        assert [e.payload for e in entries] == [b"solo-%d" % i for i in range(MAX_APPENDS_IN_FLIGHT)] + payloads
        _check_fencing(entries, list(zip(results, payloads)) +
                       [(i + 1, b"solo-%d" % i) for i in range(MAX_APPENDS_IN_FLIGHT)])
        await w.close()
    _run(main(), 150)


async def _true(value):
    return value


async def _last_is(journal, seq):
    return await journal.last_index() >= seq


def test_own_entries_whose_acks_were_lost_are_acknowledged_not_sent_twice(module_nats, tmp_path):
    """Entries of this writer that landed while their answers were lost (here: published for it before it
    sends) are found when the tail is read after the rejection, acknowledged at their index, and not sent
    again; the rest of the window is sent after them."""
    shard = shard_for(tmp_path)

    async def main():
        w = JetStreamJournal(module_nats.urls, shard, creds=module_nats.secrets.operator_creds, epoch=5, max_appends_in_flight=8)
        await w.open()
        assert await w.append(b"first") == 1
        for p in (b"x1", b"x2"):
            await w.js.publish(w.subject, p, headers={"Durakv-Epoch": "5"})
        results = await asyncio.gather(*[w.append(p) for p in (b"x1", b"x2", b"x3")])
        assert results == [2, 3, 4]
        assert w.inspections == 1 and w.skipped_foreign == 0
        assert [e.payload for e in await collect(w, 0)] == [b"first", b"x1", b"x2", b"x3"]
        await w.close()
    _run(main())
