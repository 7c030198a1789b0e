"""A planned failover as cluster clients see it, on a real three-AZ NATS cluster with real durakv processes and
valkey-py's ValkeyCluster: the old primary holds writes while it hands over (the client waits, unanswered),
then answers -MOVED to the new primary, which the client follows; no client ever sees an error and every INCR
is applied exactly once. Also: ASKING covers exactly the next command, even when that command is rejected."""

import asyncio
import threading
import time

import valkey
from valkey.cluster import ValkeyCluster

from conftest import wait_until
from helpers.clusters import mark_migration
from durakv.routing import key_slot

WRITERS = 8
FAILOVERS = 10


class IncrWriters:
    """`count` threads, each with its own ValkeyCluster client, INCR-ing its own counter until stopped (bounded
    in count and time). Every reply must be the previous one + 1 (an INCR applied twice, or lost, shows at once);
    every exception is a client error. The clients do not retry a timeout or a lost connection by themselves
    (cluster_error_retry_attempts=0), so an INCR that might have been applied twice cannot hide."""

    def __init__(self, port, count, max_ops=200_000, max_s=600.0):
        self.port = port
        self.keys = [f"pf:counter:{n}" for n in range(count)]
        self.acked = [0] * count
        self.errors = []
        self.mismatches = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(n, max_ops, max_s), daemon=True,
                                         name=f"incr-writer-{n}") for n in range(count)]
        for t in self.threads:
            t.start()

    def _run(self, n, max_ops, max_s):
        # socket_timeout well above the hand-over's hold bound (10 s): a held INCR waits, it does not time out
        client = ValkeyCluster(host="127.0.0.1", port=self.port, socket_timeout=30, cluster_error_retry_attempts=0)
        key = self.keys[n]
        deadline = time.monotonic() + max_s
        try:
            while not self.stop.is_set() and self.acked[n] < max_ops and time.monotonic() < deadline:
                try:
                    reply = client.incr(key)
                except Exception as exc:  # noqa: BLE001 - every error a client sees is what this test counts
                    self.errors.append(f"{type(exc).__name__}: {exc}")
                    self.stop.wait(0.05)
                    continue
                if reply != self.acked[n] + 1:
                    self.mismatches.append((key, self.acked[n], reply))
                self.acked[n] = reply
        finally:
            client.close()

    @property
    def total(self):
        return sum(self.acked)

    def wait_total(self, n, timeout_s):
        wait_until(lambda: self.total >= n or self.errors, timeout_s, what=f"{n} acknowledged INCRs")

    def finish(self, timeout_s=30.0):
        self.stop.set()
        for t in self.threads:
            t.join(timeout_s)
        assert not any(t.is_alive() for t in self.threads), "an INCR writer did not stop"


def test_ten_planned_failovers_under_incr_writers_give_clients_no_error(local_cluster):
    cluster = local_cluster(durability="sync")
    writers = IncrWriters(cluster.primary(0).port, WRITERS)
    try:
        writers.wait_total(400, 60)
        for run in range(1, FAILOVERS + 1):
            old = cluster.primary(0)
            before = writers.total
            t0 = time.monotonic()
            new, seconds = cluster.failover(shard=0, timeout_s=30)   # what `durakv cluster failover` runs
            # Writes flow again, through the new primary (the clients followed -MOVED by themselves).
            writers.wait_total(before + 100, 60)
            print(f"planned failover {run}: {old.name} -> {new.name} in {seconds * 1000:.0f} ms; writes flowing "
                  f"again {time.monotonic() - t0:.2f}s after the request; {len(writers.errors)} client errors")
            assert old.role() == "slave"
    finally:
        writers.finish()
    assert writers.errors == [], f"{len(writers.errors)} client errors, e.g. {writers.errors[:3]}"
    assert writers.mismatches == []
    checker = ValkeyCluster(host="127.0.0.1", port=cluster.primary(0).port, socket_timeout=10)
    try:
        final = [int(checker.get(k) or 0) for k in writers.keys]
    finally:
        checker.close()
    assert final == writers.acked, (final, writers.acked)
    print(f"{FAILOVERS} planned failovers under {WRITERS} INCR writers: {writers.total} INCRs acknowledged, "
          f"0 client errors, counters exact")
    _replicas_redirect_to_their_primary(cluster)


def _replicas_redirect_to_their_primary(cluster):
    """Every replica of the shard (the old primaries among them) answers a write, and a read from a client
    without READONLY, with -MOVED to the primary, as a Valkey cluster replica does; READONLY lets it serve reads."""
    primary = cluster.primary(0)
    key = "pf:moved"
    slot = key_slot(key.encode())
    moved = f"MOVED {slot} 127.0.0.1:{primary.port}"
    with valkey.Valkey(host="127.0.0.1", port=primary.port, socket_timeout=10) as c:
        assert c.set(key, "v")
    for replica in cluster.replicas(0):
        with valkey.Valkey(host="127.0.0.1", port=replica.port, socket_timeout=10,
                           single_connection_client=True) as c:
            assert _error_of(c, "SET", key, "w") == moved
            assert _error_of(c, "INCR", key) == moved
            assert _error_of(c, "GET", key) == moved
            assert c.execute_command("READONLY") is True
            wait_until(lambda: c.execute_command("GET", key) == b"v", 15, what=f"{replica.name} to apply the SET")
            assert _error_of(c, "SET", key, "w") == moved   # READONLY lets reads through, not writes


def _error_of(client, *args):
    try:
        client.execute_command(*args)
    except valkey.exceptions.ResponseError as exc:
        return str(exc)
    return None


def test_asking_covers_only_the_next_command_even_a_rejected_one(local_cluster):
    cluster = local_cluster(shards=2, replicas=0, durability="sync")
    src, dst = cluster.primary(0), cluster.primary(1)
    tag = next(t for t in (f"{{ask{i}}}" for i in range(100)) if key_slot(t.encode()) < 8192)   # in shard 0
    slot = key_slot(tag.encode())
    key = f"{tag}k"
    # The source is stopped, so the slot stays importing on the target for as long as the test needs.
    assert cluster.pause(src.name)
    try:
        mark_migration(cluster, [slot], "0", "1")
        moved = f"MOVED {slot} 127.0.0.1:{src.port}"

        def asking_then(*rejected):
            with valkey.Valkey(host="127.0.0.1", port=dst.port, socket_timeout=10,
                               single_connection_client=True) as c:
                assert c.execute_command("ASKING") is True   # valkey-py turns +OK into True
                if rejected:
                    assert _error_of(c, *rejected) is not None
                first = _error_of(c, "GET", key)
                return first, _error_of(c, "GET", key)

        # the target has the import: ASKING lets one GET be served there, the next one is MOVED
        wait_until(lambda: asking_then() == (None, moved), 15, what="the target to import the slot")
        other = next(f"{{o{i}}}" for i in range(100) if key_slot(f"{{o{i}}}".encode()) != slot)
        for rejected in (("GET",),                          # wrong number of arguments
                         ("NO-SUCH-COMMAND", key),          # unknown command
                         ("MGET", key, other)):             # refused by the slot check (CROSSSLOT)
            assert asking_then(*rejected) == (moved, moved), rejected
    finally:
        cluster.resume(src.name)


async def _limit_journal(cluster, stream, full):
    """full: the shard's stream takes no more messages (max_msgs at its count, discard new), so every append is
    refused with an API error that is not fencing; else its own limits again."""
    from nats.js.api import DiscardPolicy
    nc = await cluster.nats_connect()
    try:
        js = nc.jetstream()
        info = await js.stream_info(stream)
        cfg = info.config
        if full:
            cfg.max_msgs, cfg.discard = info.state.messages, DiscardPolicy.NEW
        else:
            cfg.max_msgs, cfg.discard = -1, DiscardPolicy.OLD
        await js.update_stream(cfg)
    finally:
        await nc.close()


def test_a_hand_over_whose_journal_did_not_drain_leaves_no_phantom_write(local_cluster):
    """The primary's last write is in its memory but its append was refused: a hand-over that became a replica
    in place would keep that write for good (a phantom no other node has). The node re-executes instead and
    rejoins from snapshot + journal: every node ends with the new primary's value."""
    cluster = local_cluster(durability="sync")
    old = cluster.primary(0)
    key = "pf:phantom"
    with valkey.Valkey(host="127.0.0.1", port=old.port, socket_timeout=10) as c:
        assert c.set(key, 1)
    asyncio.run(_limit_journal(cluster, "DURAKV_SHARD_0", True))
    result = {}

    def incr():
        try:
            with valkey.Valkey(host="127.0.0.1", port=old.port, socket_timeout=30) as c:
                result["reply"] = c.incr(key)
        except Exception as exc:  # noqa: BLE001 - refused or cut off: not acknowledged either way
            result["error"] = repr(exc)
    writer = threading.Thread(target=incr, daemon=True)
    writer.start()
    try:
        def append_refused():
            d = old.info("durability")
            return d.get("journal_failed") or d.get("journal_retries") or result
        wait_until(append_refused, 30, what="the primary's append to be refused")
    finally:
        asyncio.run(_limit_journal(cluster, "DURAKV_SHARD_0", False))
    new, seconds = cluster.failover(shard=0, timeout_s=60)
    print(f"planned failover {old.name} -> {new.name} with an append refused: {seconds * 1000:.0f} ms; "
          f"the INCR's client saw {result}")
    writer.join(60)
    with valkey.Valkey(host="127.0.0.1", port=new.port, socket_timeout=10) as c:
        expected = c.get(key)
    assert expected in (b"1", b"2")
    if "reply" in result:
        assert expected == b"2"   # acknowledged, so it must have committed

    def agree():
        views = {}
        for p in cluster.shard_nodes(0):
            with valkey.Valkey(host="127.0.0.1", port=p.port, socket_timeout=5, single_connection_client=True) as c:
                c.execute_command("READONLY")
                views[p.name] = c.get(key)
        return views if set(views.values()) == {expected} else None
    wait_until(agree, 60, what=f"every node to hold {expected!r} (the new primary's value)")
    if new.name != old.name:
        wait_until(lambda: old.role() == "slave", 60, what=f"{old.name} to rejoin as a replica")
    # else: the refused append made the old primary step down and re-execute before the failover was asked
    # for (a replica took the lease meanwhile), and the failover picked it, rebuilt from snapshot + journal,
    # as the new primary: agree() above is what shows no phantom write survived


# Writes at once, then spins ARGV[2] s of CPU, past busy-reply-threshold: its effects leave when it ends.
# (os.clock: the script's TIME is the server's time when the script began.)
WRITE_THEN_RUN = """
redis.call('SET', KEYS[1], ARGV[1])
local started = os.clock()
while os.clock() - started < tonumber(ARGV[2]) do end
return 1
"""


def test_a_hand_over_waits_for_a_busy_script_so_its_acknowledged_write_survives(local_cluster):
    cluster = local_cluster(durability="sync")
    old = cluster.primary(0)
    key = "pf:script"
    with valkey.Valkey(host="127.0.0.1", port=old.port, socket_timeout=10) as c:
        assert c.config_set("busy-reply-threshold", 100)
    result = {}

    def run_script():
        try:
            with valkey.Valkey(host="127.0.0.1", port=old.port, socket_timeout=60) as c:
                # 0.75 s of CPU: longer than the failover request takes to reach the primary on an idle machine,
                # well inside the hand-over's 10 s hold on a loaded one
                result["reply"] = c.eval(WRITE_THEN_RUN, 1, key, "from-the-script", 0.75)
        except Exception as exc:  # noqa: BLE001 - cut off by a re-execution: not acknowledged
            result["error"] = repr(exc)
    script = threading.Thread(target=run_script, daemon=True)
    script.start()

    def busy():
        with valkey.Valkey(host="127.0.0.1", port=old.port, socket_timeout=10) as c:
            try:
                c.ping()
            except valkey.exceptions.ResponseError as exc:
                return str(exc).startswith("BUSY")
        return False
    wait_until(busy, 30, interval_s=0.01, what="the script to run past busy-reply-threshold")
    new, seconds = cluster.failover(shard=0, timeout_s=60)
    script.join(60)
    print(f"planned failover {old.name} -> {new.name} during a busy script: {seconds * 1000:.0f} ms; "
          f"the script's client saw {result}")
    with valkey.Valkey(host="127.0.0.1", port=new.port, socket_timeout=10) as c:
        value = c.get(key)
    if "reply" in result:
        assert result["reply"] == 1
        assert value == b"from-the-script"    # acknowledged, so the new primary has it
    else:
        # the script outlasted the hold: the old primary handed over undrained and re-executed, cutting the
        # script's client off (not acknowledged); no node may keep the write if the journal does not have it
        assert "Connection closed" in result["error"] or "Connection reset" in result["error"], result

    def agree():
        views = set()
        for p in cluster.shard_nodes(0):
            with valkey.Valkey(host="127.0.0.1", port=p.port, socket_timeout=5, single_connection_client=True) as c:
                c.execute_command("READONLY")
                views.add(c.get(key))
        return views == {value}
    wait_until(agree, 60, what=f"every node to hold {value!r} (the new primary's value)")
    wait_until(lambda: old.role() == "slave", 60, what=f"{old.name} to be a replica")


def test_outside_cluster_mode_the_old_primary_answers_readonly_after_a_planned_failover(local_cluster):
    """A shard without cluster mode has no topology to send a client to: its replicas answer writes -READONLY,
    as a standalone Valkey replica does, once the hand-over's hold has let the write go."""
    cluster = local_cluster(durability="sync", cluster_mode=False)
    old = cluster.primary(0)
    new, _seconds = cluster.failover(shard=0, timeout_s=30)
    with valkey.Valkey(host="127.0.0.1", port=old.port, socket_timeout=10) as c:
        wait_until(lambda: c.execute_command("ROLE")[0] == b"slave", 30, what=f"{old.name} to be a replica")
        assert _error_of(c, "SET", "k", "v") == "You can't write against a read only replica."
    with valkey.Valkey(host="127.0.0.1", port=new.port, socket_timeout=10) as c:
        assert c.set("k", "v")
