"""Journal errors end healed or with the primary stepping down, never in a lease kept while nothing commits
(issue 16 item 5: the JetStream append error, the local journal's failure with TTL keys, WAIT's index).

Real processes, real sockets, valkey-py; every wait is a poll with a deadline."""

import asyncio
import time

import valkey

from conftest import DEBUG_ARGS, scaled, wait_until
from helpers.diskfull import server_on_full_disk
from durakv.journal.codec import encode_effects
from durakv.journal.jetstream import EPOCH_HEADER, EXPECTED_LAST, EXPECTED_STREAM, stream_name, subject_name

STREAM = stream_name("0")


async def _with_js(cluster, fn):
    nc = await cluster.nats_connect()
    try:
        return await fn(nc.jetstream(timeout=10))
    finally:
        await nc.close()


def set_stream_max_msg_size(cluster, size):
    async def update(js):
        info = await js.stream_info(STREAM)
        cfg = info.config
        cfg.max_msg_size = size
        await js.update_stream(cfg)
    asyncio.run(asyncio.wait_for(_with_js(cluster, update), 30))


def masters(cluster):
    return [p for p in cluster.nodes if p.role() == "master"]


def _wait_serving_again(cluster):
    """Polls until some primary takes a write again; returns what GET k answered on each try, in order."""
    seen = []

    def serving_again():
        for p in masters(cluster):
            try:
                with valkey.Valkey(port=p.port, socket_timeout=5) as c:
                    seen.append(c.get("k"))
                    return c.set("after", "1") is True
            except (valkey.exceptions.ConnectionError, valkey.exceptions.TimeoutError,
                    valkey.exceptions.ResponseError):
                continue
        return False
    wait_until(serving_again, 60, interval_s=0.1, what="a primary taking writes again")
    return seen


# -- hole (a): a JetStream append error that is not fencing --------------------------------------------------

def test_jetstream_append_error_steps_down_and_never_serves_the_failed_write(local_cluster):
    """A definite refusal of an append (the stream's max_msg_size, error 10054: not fencing, not a timeout).
    main: the primary keeps its lease, refuses every write for good (MISCONF) and GET answers the value that
    was never committed. Now: its held reply gets the error, it steps down (re-executes), and the shard serves
    the committed value and new writes again within a bounded time."""
    cluster = local_cluster(durability="sync")
    old = cluster.primary(0)
    committed, failed = b"committed", b"f" * 5000
    with valkey.Valkey(port=old.port, socket_timeout=10) as c:
        assert c.set("k", committed) is True
    set_stream_max_msg_size(cluster, 1000)
    try:
        with valkey.Valkey(port=old.port, socket_timeout=10) as c:
            try:
                c.set("k", failed)
                raise AssertionError("a SET the journal refused was acknowledged")
            except valkey.exceptions.ResponseError as exc:
                assert "journal" in str(exc)
            except valkey.exceptions.ConnectionError:
                pass   # the primary re-executed right after answering
            # Whatever the old primary still answers, it is never the value no journal holds.
            try:
                assert c.get("k") != failed, "GET answered a write that was never committed"
            except (valkey.exceptions.ConnectionError, valkey.exceptions.ResponseError):
                pass
    finally:
        set_stream_max_msg_size(cluster, -1)
    seen = _wait_serving_again(cluster)
    assert failed not in seen and seen[-1] == committed, seen[-3:]
    text = "".join(open(p.log, errors="replace").read() for p in cluster.nodes)
    assert "stepping down and restarting as a replica" in text


# -- hole (c): WAIT compares the write's journal position ------------------------------------------------------

def _publish_foreign_entry(cluster, epoch):
    """An entry of an older epoch (what a deposed primary's late append is) at the end of the stream."""
    async def publish(js):
        last = (await js.stream_info(STREAM)).state.last_seq
        await js.publish(subject_name("0"), encode_effects([(0, (b"SET", b"foreign", b"x"))]),
                         headers={EXPECTED_LAST: str(last), EPOCH_HEADER: str(epoch), EXPECTED_STREAM: STREAM})
        return last + 1
    return asyncio.run(asyncio.wait_for(_with_js(cluster, publish), 30))


def test_wait_counts_replicas_that_hold_the_write_after_old_epoch_entries(local_cluster):
    """The primary's writer steps over an older epoch's entry, so its own indices run one behind the stream's.
    main: WAIT compared the client's (tracker) index with the replicas' stream positions and counted replicas
    that did not have the write yet. Now WAIT's count never exceeds the replicas that serve the write."""
    cluster = local_cluster(durability="sync", extra_server_args=DEBUG_ARGS)
    # an older epoch than the primary's needs a primary of epoch 2 at least (epoch 0 is no writer's: readers
    # refuse such an entry, journal/base.py EpochFilter)
    cluster.failover(shard=0)
    primary = cluster.primary(0)
    replicas = cluster.replicas(0)
    assert len(replicas) == 2
    with valkey.Valkey(port=primary.port, socket_timeout=10) as c:
        assert c.set("a", "1") is True
        assert c.execute_command("WAIT", 2, 10000) == 2
        epoch = c.info("replication")["durakv_epoch"]
        assert epoch >= 2
        foreign = _publish_foreign_entry(cluster, epoch - 1)
        for r in replicas:
            wait_until(lambda r=r: r.info("replication")["replication"]["slave_repl_offset"] >= foreign, 20,
                       what="replicas past the foreign entry")
        # The replicas hold what arrives from now on for a while: they have nothing after the foreign entry.
        for r in replicas:
            with valkey.Valkey(port=r.port, socket_timeout=10) as rc:
                assert rc.execute_command("DEBUG", "JOURNAL-FOLLOW-STALL", "6000") == b"OK"
        assert c.set("k", "v") is True        # the writer steps over the foreign entry: lands at foreign + 1
        acked = c.execute_command("WAIT", 2, 1000)
        holding = 0
        for r in replicas:
            with valkey.Valkey(port=r.port, socket_timeout=10, single_connection_client=True) as rc:
                rc.execute_command("READONLY")
                holding += rc.get("k") == b"v"
        assert acked <= holding, "WAIT counted %d replicas, %d hold the write" % (acked, holding)
        # The rejected send and the tail read are counted (INFO durability), as every retry is.
        assert c.info("durability")["journal_retries"] >= 1
        # Once the replicas apply it, WAIT counts them.
        assert c.execute_command("WAIT", 2, 20000) == 2


# -- hole (b): the local journal fails while keys have a TTL ---------------------------------------------------

def test_local_journal_failure_with_ttl_keys_neither_reloads_each_tick_nor_refuses_reads(tmp_path):
    """main: once the disk is full, every cron tick expires a key, its DEL fails, the dataset is reloaded
    (the key back), and a GET of the expired key answers MISCONF. Now expiry waits while the journal cannot
    persist (expired keys read as absent), and resumes once it can."""
    with server_on_full_disk(tmp_path) as disk:
        c = disk.client
        ttl_ms = 10000
        for i in range(20):
            assert c.set("ttl:%d" % i, "v", px=ttl_ms) is True
        set_at = time.monotonic()
        failed = None
        n = 0

        def healed(within_s):
            deadline = time.monotonic() + within_s
            while time.monotonic() < deadline:
                if c.info("durability")["journal_failed"] == 0:
                    return True
                time.sleep(0.05)
            return False
        # Large values first (the disk is full within a few hundred ms), then smaller ones until the journal's
        # own retry (a PING entry) cannot heal it either: not one more byte fits.
        for size in (32768, 1024, 64, 1, 1, 1, 1, 1, 1):
            while True:
                n += 1
                try:
                    c.set("fill:%d" % n, "x" * size)
                except valkey.exceptions.ResponseError as exc:
                    failed = str(exc)
                    break
            if not healed(1.0):
                break
        assert failed is not None and "Errors writing to the journal" in failed
        assert time.monotonic() - set_at < ttl_ms / 1000.0, "the disk filled after the TTL keys expired"
        info = c.info("durability")
        assert info["journal_failed"] == 1, info
        reloads = info["journal_reloads"]
        wait_until(lambda: time.monotonic() - set_at > ttl_ms / 1000.0 + 1.5, 30, what="the TTL keys expired")
        # Reads of expired keys answer (as absent), not MISCONF; nothing reloads the dataset tick after tick.
        for i in range(20):
            assert c.get("ttl:%d" % i) is None
        assert c.exists(*["ttl:%d" % i for i in range(20)]) == 0
        info = c.info("durability")
        assert info["journal_failed"] == 1
        assert info["journal_reloads"] == reloads, "the dataset was reloaded %d more times" % (
            info["journal_reloads"] - reloads)
        # Space comes back: the journal heals by itself and expiry resumes (the keys are deleted, DBSIZE drops).
        disk.free_space()
        disk.wait_writable(30)
        wait_until(lambda: c.info("keyspace").get("db0", {}).get("expires", 0) == 0, 20,
                   what="the expired keys deleted once the journal persists")


# -- a journal that commits nothing: the primary steps down within journal-append-stall-ms ---------------------

def test_a_primary_whose_append_stalls_past_the_bound_steps_down(local_cluster):
    """journal-append-stall-ms bounds how long a primary keeps its lease while its oldest append is
    unacknowledged. The cluster's NATS servers are paused (SIGSTOP), so no append can be acknowledged: with the
    bound at 200 ms the primary steps down on its own clock meanwhile, and its client's write is never
    acknowledged. Resumed, a replica takes over and the shard takes new writes (the restarted node has the
    default bound again). (The test set the bound to 1 ms with NATS running: on tmpfs an append can be
    acknowledged within that millisecond, before the bound's timer, and a run found the write acknowledged.)"""
    cluster = local_cluster(durability="sync")
    old = cluster.primary(0)

    def stepped_down():
        return "journal appends unacknowledged for" in open(old.log, errors="replace").read()
    with valkey.Valkey(port=old.port, socket_timeout=scaled(30)) as c:
        assert c.info("durability")["journal_append_stall_ms"] == 20000
        assert c.config_set("journal-append-stall-ms", "200") is True
        paused = []
        try:
            for n in cluster.nats:
                assert cluster.pause(n.name)
                paused.append(n.name)
            try:
                c.set("k", "v")
                acknowledged = True
            except (valkey.exceptions.ConnectionError, valkey.exceptions.TimeoutError):
                acknowledged = False
            wait_until(stepped_down, 30, what="the primary stepping down on the stalled append")
        finally:
            for name in paused:
                cluster.resume(name)
        assert not acknowledged, "a write was acknowledged while no journal server ran"
    _wait_serving_again(cluster)
