"""Bounded journal entries (issue 16 item 1, docs/design.md "Bounds on the write path"): every value Valkey accepts
and every pipelined bulk load is journaled in entries no larger than the journal's limit (continuation parts
for one larger command), on the local journal and on JetStream, with NATS's max_payload at 64 MB (`cluster
up`) and at its 1 MB default; everything acknowledged is read back after kill -9 (local: restart; JetStream: a
failover) and the shard takes new writes at once.

All against real processes over real sockets with valkey-py; the heavy cases are bounded by polls with
deadlines, never by an upper time bound."""

import functools
import random
import signal
import threading

import pytest
import valkey

from conftest import wait_new_primary, wait_until
from durakv.cluster import nats_procs
from durakv.journal.walscan import iter_entries

MB = 1024 * 1024
LARGE_SIZES = (900_000, 2 * MB, 10 * MB, 70 * MB)
PIPE_CONNECTIONS = 4
PIPE_SETS = 20_000
PIPE_VALUE_BYTES = 4096


@functools.lru_cache(maxsize=len(LARGE_SIZES) + 1)
def large_value(size) -> bytes:
    # made once per size (83 MB in all): the checks poll, and making them again was 10 CPU-s of the cluster tier
    return random.Random(size).randbytes(size)


def pipe_value(key: bytes) -> bytes:
    return key + b":" + b"v" * (PIPE_VALUE_BYTES - len(key) - 1)


def pipe_keys(conn):
    return [b"bulk:%d:%05d" % (conn, i) for i in range(PIPE_SETS)]


def write_large_values(client):
    for size in LARGE_SIZES:
        assert client.set(b"large:%d" % size, large_value(size)) is True


def write_pipelined(port, timeout_s=180):
    """PIPE_CONNECTIONS connections each pipelining PIPE_SETS SETs at once; returns the replies per connection."""
    results = {}
    errors = []

    def run(conn):
        try:
            with valkey.Valkey(port=port, socket_timeout=timeout_s) as c:
                pipe = c.pipeline(transaction=False)
                for key in pipe_keys(conn):
                    pipe.set(key, pipe_value(key))
                results[conn] = pipe.execute(raise_on_error=False)
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(repr(exc))

    threads = [threading.Thread(target=run, args=(n,)) for n in range(PIPE_CONNECTIONS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s + 30)
    assert errors == [], errors
    for conn in range(PIPE_CONNECTIONS):
        bad = [r for r in results[conn] if r is not True]
        assert bad == [], "connection %d: %d SETs not acknowledged, first %r" % (conn, len(bad), bad[:1])


def set_answers(port, timeout_s=30):
    """A new SET is acknowledged within a bounded poll (the shard is not jammed)."""
    def ok():
        try:
            with valkey.Valkey(port=port, socket_timeout=5) as c:
                return c.set("after", "1") is True
        except (valkey.exceptions.ConnectionError, valkey.exceptions.TimeoutError, valkey.exceptions.ResponseError):
            return False
    wait_until(ok, timeout_s, interval_s=0.1, what="a new SET acknowledged")


# -- the local journal ---------------------------------------------------------------------------------------

@pytest.mark.long_pole(46)     # seconds on the 2-core machine: xdist starts it first
def test_local_journal_large_values_and_pipelined_bulk_survive_kill9(server_factory):
    srv = server_factory("--durability", "sync")
    with srv.client(socket_timeout=120) as c:
        write_large_values(c)
        write_pipelined(srv.port)
        info = c.info("durability")
        limit = info.get("journal_max_entry_bytes", 0)
        assert limit > 0, "the local journal has no entry limit"
        assert info["journal_part_entries"] > 0 and info["journal_oldest_append_age_ms"] == 0
    srv.kill(signal.SIGKILL)
    # No entry on disk is larger than the journal's own limit: the 70 MB value went in parts.
    biggest = max(len(e.payload) for e in iter_entries(srv.data_dir))
    assert biggest <= limit, "an entry of %d bytes, over the limit %d" % (biggest, limit)
    srv.start(wait=False)
    srv.wait_ready(timeout_s=300)
    with srv.client(socket_timeout=120) as c:
        check_large_values(c)
        check_pipelined(c)
    set_answers(srv.port)


def test_local_journal_async_value_in_parts_commits_and_lag_returns_to_zero(server_factory):
    """async mode: a value carried in parts is acknowledged at once, commits, and the lag falls back to 0
    (the parts before the last are not uncommitted batches of their own)."""
    srv = server_factory("--durability", "async")
    size = 3 * 16 * MB // 2
    with srv.client(socket_timeout=120) as c:
        assert c.set("big", large_value(size)) is True
        wait_until(lambda: c.info("durability")["durability_lag_ms"] == 0
                   and c.info("durability")["journal_commit_index"] >= 2, 60, what="the parts committed")
        assert c.info("durability")["journal_part_entries"] >= 2
        assert c.set("after", "1") is True
    srv.kill(signal.SIGKILL)
    srv.start(wait=False)
    srv.wait_ready(timeout_s=120)
    with srv.client(socket_timeout=120) as c:
        assert c.get("big") == large_value(size)


# -- JetStream: NATS at 64 MB (cluster up) and at its 1 MB default ---------------------------------------------

@pytest.fixture(params=["max_payload_64mb", "max_payload_default_1mb"])
def nats_payload(request, monkeypatch):
    """The NATS servers' max_payload: as `cluster up` writes it (64 MB), or absent (NATS's 1 MB default, as in
    docs/multi-az.md's configuration)."""
    if request.param == "max_payload_default_1mb":
        original = nats_procs.NatsNode.config_text

        def without_max_payload(self):
            text = original(self)
            assert "max_payload: 67108864\n" in text
            return text.replace("max_payload: 67108864\n", "")
        monkeypatch.setattr(nats_procs.NatsNode, "config_text", without_max_payload)
        return 1 * MB
    return 64 * MB


def _failover_and_check(cluster, old, check):
    """kill -9 of the primary; the new primary and the other replica hold everything check() looks at, and
    the shard takes a new SET at once."""
    cluster.kill(old.name, signal.SIGKILL)
    new, seconds = wait_new_primary(cluster, old.name, timeout_s=120)
    print("failover: %s -> %s in %.2fs" % (old.name, new.name, seconds))
    # Until the new primary has installed the topology naming it, it may still answer MOVED: poll. The primary
    # is looked up again at each attempt: on a loaded machine the new one's loop can stall past its lease while
    # it serves these values and the other replica take over (four workers on two cores: 0-1 promoted, its loop
    # stopped for 2.5 s, 0-2 promoted 4 s later, and 0-1 answered MOVED until the deadline).
    new = _check_on_primary(cluster, check)
    set_answers(new.port)
    # The other replica applied everything too (it read the parts from the stream and applied them once whole).
    others = [p for p in cluster.replicas(0) if p.name not in (old.name, new.name)]
    assert others
    with valkey.Valkey(port=others[0].port, socket_timeout=120, single_connection_client=True) as r:
        r.execute_command("READONLY")
        wait_until(lambda: r.get("after") == b"1", 60, what="the replica caught up")
        _check_until(r, check)


def _check_on_primary(cluster, check, timeout_s=60):
    """check() passes on the shard's primary of the moment within timeout_s; returns that primary."""
    def passes():
        primary = cluster.primary(0)
        assert primary is not None, "no primary"
        with valkey.Valkey(port=primary.port, socket_timeout=120) as c:
            check(c)
        return primary
    return wait_until(passes, timeout_s, interval_s=0.5, what="%s on the shard's primary" % check.__name__)


def _check_until(client, check, timeout_s=60):
    """check(client) passes within timeout_s; a MOVED meanwhile (a topology not yet installed) is retried, and
    the last failure is raised at the deadline."""
    def passes():
        check(client)
        return True
    wait_until(passes, timeout_s, interval_s=0.5, what="%s on port %s" % (check.__name__,
                                                                    client.connection_pool.connection_kwargs["port"]))


def check_large_values(client):
    for size in LARGE_SIZES:
        got = client.get(b"large:%d" % size)
        assert got is not None and len(got) == size and got == large_value(size), "value of %d bytes" % size


def check_pipelined(client):
    for conn in range(PIPE_CONNECTIONS):
        keys = pipe_keys(conn)
        for start in range(0, len(keys), 2000):
            chunk = keys[start:start + 2000]
            # GETs, not MGET (in cluster mode the keys span slots), on a pipeline connection of its own, which
            # a replica serves only after READONLY (a primary answers OK to it, a server off cluster mode an error).
            pipe = client.pipeline(transaction=False)
            pipe.execute_command("READONLY")
            for k in chunk:
                pipe.get(k)
            values = pipe.execute(raise_on_error=False)[1:]   # READONLY: an error off cluster mode
            missing = [k for k, v in zip(chunk, values) if v != pipe_value(k)]
            assert missing == [], "%d pipelined SETs missing, first %r" % (len(missing), missing[:3])


@pytest.mark.long_pole(25)     # seconds on the 2-core machine: xdist starts it first
def test_jetstream_large_values_survive_failover(local_cluster, nats_payload):
    """900 KB, 2 MB, 10 MB and 70 MB values on a sync shard (main: the 2 MB one jams a shard on NATS's 1 MB
    default, the 70 MB one at 64 MB; the primary keeps its lease and answers nothing)."""
    cluster = local_cluster(durability="sync")
    old = cluster.primary(0)
    with valkey.Valkey(port=old.port, socket_timeout=120) as c:
        write_large_values(c)
        info = c.info("durability")
        assert 0 < info["journal_max_entry_bytes"] < nats_payload
        assert info["journal_part_entries"] > 0 and info["journal_failed"] == 0
    _failover_and_check(cluster, old, check_large_values)


@pytest.mark.long_pole(26)     # seconds on the 2-core machine: xdist starts it first
def test_jetstream_pipelined_bulk_survives_failover(local_cluster, nats_payload):
    """4 connections x 20,000 pipelined SETs of 4 KB on a sync shard with the default held-replies limit (main:
    batches grow past max_payload and the shard jams for good; the primary's loop, flooded with 320 MB of
    pipelined SETs, also renewed its lease too late). Held replies count the bytes of their writes and the lease
    is renewed off the loop, so the load is throttled by backpressure, not by a lapsed lease."""
    cluster = local_cluster(durability="sync")
    old = cluster.primary(0)
    write_pipelined(old.port)
    with valkey.Valkey(port=old.port, socket_timeout=60) as c:
        info = c.info("durability")
        assert info["journal_sealed_batches"] > 0 and info["journal_failed"] == 0
    _failover_and_check(cluster, old, check_pipelined)
