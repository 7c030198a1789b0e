"""`durakv verify dirty-reads`: the pure checker on hand-made histories, and the scenario end to end on a real
local cluster (NATS + durakv processes, valkey-py clients, a partition of the primary's AZ): no reader (GET,
XREAD BLOCK, keyspace notifications, the SYNC feed and its RDB file) may see a write that was never
acknowledged and is gone after recovery."""

import json
import os

import pytest

from durakv.cluster.local import LocalCluster
from durakv.tools.verify import Recorder
from durakv.tools.verify import scenarios as sc
from durakv.tools.verify.dirty import (OBSERVE, VIA_FEED, VIA_GET, VIA_NOTIFY, VIA_RDB, VIA_XREAD, XADD,
                                       check_dirty_reads, dirty_reads_table_rows, first_dirty)
from durakv.tools.verify.history import WRITE_KEY
from conftest import durakv_cli, scaled
from test_verify_scenarios import quiet
from helpers.servers import cluster_port_range


def clock():
    """A clock ticking 1 ms per reading: record order is time order, as with the real recorder."""
    t = iter(range(0, 10**15, 10**6))
    return lambda: next(t)


def observe(rec, process, key, via, value):
    rec.invoke(process, OBSERVE, key, via)
    rec.ok(process, value)


# -- the pure checker ------------------------------------------------------------------------------------------

def test_a_value_seen_whose_write_was_never_acknowledged_and_is_gone_is_a_dirty_read():
    rec = Recorder(clock_ns=clock())
    rec.invoke("w0", XADD, "s", "v1")
    rec.ok("w0")
    observe(rec, "xread", "s", VIA_XREAD, "v1")            # after the ack: fine
    rec.invoke("w0", XADD, "s", "v2")                      # commits stall: no reply ...
    observe(rec, "xread", "s", VIA_XREAD, "v2")            # ... but the blocked reader got the entry
    observe(rec, "feed", "s", VIA_FEED, "v2")              # and so did a replica's feed
    rec.info("w0", "ConnectionError: Connection closed by server.")   # the old primary re-executed
    res = check_dirty_reads(rec.history(), {"s": ["v1"]})  # after the failover: v2 is gone
    assert not res.ok
    assert [(d.via, d.key, d.value, d.write_outcome) for d in res.dirty] == [
        (VIA_XREAD, "s", "v2", "info"), (VIA_FEED, "s", "v2", "info")]
    assert res.channels[VIA_XREAD].observed == 2 and res.channels[VIA_XREAD].of_acked == 1
    assert res.channels[VIA_XREAD].dirty == 1 and res.channels[VIA_FEED].dirty == 1
    assert (res.writes, res.acked, res.indefinite, res.unacked_gone, res.lost) == (2, 1, 1, 1, [])
    assert "XREAD BLOCK: saw 's' = 'v2'" in first_dirty(res)[0]
    doc = json.loads(json.dumps(res.to_dict()))
    assert doc["dirty"] == 2 and doc["dirty_reads"][0]["write_process"] == "w0"


def test_unacknowledged_writes_that_survive_and_early_observations_are_not_dirty():
    rec = Recorder(clock_ns=clock())
    rec.invoke("w0", WRITE_KEY, "k1", "a")
    observe(rec, "notify", "k1", VIA_NOTIFY, "set")        # before the ack ...
    observe(rec, "get", "k1", VIA_GET, "a")
    rec.ok("w0")                                           # ... then acknowledged and kept: early, not dirty
    rec.invoke("w1", WRITE_KEY, "k2", "b")
    observe(rec, "rdb", "k2", VIA_RDB, "b")
    rec.info("w1", "Timeout reading from socket")          # unknown outcome, but it did land: not dirty
    rec.invoke("w1", WRITE_KEY, "k3", "c")
    rec.fail("w1", "CLUSTERDOWN The primary's lease expired")
    observe(rec, "get", "k3", VIA_GET, None)               # a GET that found nothing shows no value
    observe(rec, "feed", "zz", VIA_FEED, "unknown")        # no recorded write explains it
    res = check_dirty_reads(rec.history(), {"k1": "a", "k2": "b", "k3": None})
    assert res.ok and res.dirty == []
    assert res.channels[VIA_NOTIFY].early == 1 and res.channels[VIA_GET].early == 1
    assert res.channels[VIA_NOTIFY].early_max_ms > 0
    assert res.channels[VIA_RDB].of_unacked_kept == 1
    assert res.channels[VIA_GET].observed == 1             # the nil GET is not an observation
    assert res.channels[VIA_FEED].stray == 1
    assert (res.acked, res.failed, res.indefinite, res.unacked_gone) == (1, 1, 1, 1)
    rows = {r[0]: r for r in dirty_reads_table_rows(res)}
    assert rows[VIA_NOTIFY][1:4] == [1, 1, 1] and rows[VIA_FEED][-1] == 1


def test_a_notification_names_the_write_of_its_key_and_a_lost_acknowledged_write_fails():
    rec = Recorder(clock_ns=clock())
    rec.invoke("w0", WRITE_KEY, "k1", "a")
    observe(rec, "notify", "k1", VIA_NOTIFY, "set")
    rec.fail("w0", "CLUSTERDOWN The primary's lease expired")   # refused, yet it was announced: and it's gone
    rec.invoke("w0", WRITE_KEY, "k2", "b")
    rec.ok("w0")
    res = check_dirty_reads(rec.history(), {"k1": None})          # k2 acknowledged, missing: lost
    assert [(d.via, d.key, d.value, d.write_outcome) for d in res.dirty] == [(VIA_NOTIFY, "k1", "a", "fail")]
    assert res.lost == [("k2", "b")] and not res.ok


# -- end to end --------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def partitionable_cluster(tmp_path_factory):
    d = tmp_path_factory.mktemp("verify-dirty") / "cluster"
    try:
        yield LocalCluster.up(d, durability="sync", partitionable=True, timeout_s=90,
                              port_range=cluster_port_range())
    finally:
        if os.path.exists(os.path.join(d, "manifest.json")):
            LocalCluster.load(d).down()


def test_no_reader_sees_a_write_that_a_failover_takes_back(partitionable_cluster):
    """The primary's AZ is cut off until 2 s after a replica serves as primary, at most 20 s times the time scale
    (NATS may first need 4-9 s to elect leaders in the majority, longer on a loaded machine: a run beside two CPU
    burners saw 20 s pass with the primary still in place): its commits stall, a replica takes the lease, the old
    primary re-executes. Every channel saw
    values, the fault moved the primary, and no observed value belongs to a write that was never acknowledged
    and is gone. Fails on a server that pushes, feeds, exports or wakes blocked readers before the commit (the
    checker lists each dirty read)."""
    env = sc.Env.local(partitionable_cluster.dir, say=quiet)
    before = partitionable_cluster.reload().primary(0).name
    res = sc.dirty_reads(env, fault="partition", writers=4, warmup_s=2.0, fault_s=scaled(20.0), after_s=2.0,
                         heal_after_failover_s=2.0)
    run = res.report.data["runs"][0]
    # the cut ended 2 s after the failover (its own log says so), not at the longest cut
    assert run["fault_s"] is not None and run["fault_s"] < scaled(20.0) - 1, run
    for via in (VIA_GET, VIA_XREAD, VIA_NOTIFY, VIA_FEED, VIA_RDB):
        assert run["channels"][via]["observed"] > 0, (via, run["channels"])
    assert run["acked"] > 0 and run["lost"] == 0
    assert partitionable_cluster.reload().primary(0).name != before, "the partition moved the primary"
    assert res.status == sc.PASS, "\n".join(res.reasons)
    assert run["dirty"] == 0


def test_cli_prints_the_table_and_writes_json(partitionable_cluster, tmp_path):
    out = tmp_path / "dirty.json"
    r = durakv_cli("verify", "dirty-reads", "--dir", partitionable_cluster.dir, "--fault", "kill",
                   "--fault-duration", "1", "--warmup", "1", "--after", "1", "--json", out)
    assert "Observed values per channel" in r.stdout and "Dirty reads: writes and outcome" in r.stdout, \
        r.stdout + r.stderr
    doc = json.loads(out.read_text())
    assert doc["tables"]["dirty_reads"]["columns"][1] == "Channel"
    run = doc["data"]["runs"][0]
    assert run["fault"] == "kill" and run["acked"] > 0
    assert r.returncode == (0 if doc["status"] == "ok" else 1)
    assert doc["status"] == ("ok" if run["dirty"] == 0 and run["lost"] == 0 else "fail")
