"""A second region (docs/multi-az.md, "A second region"): region A, a local cluster with a JetStream domain and
leafnode ports, and region B, a follower region of it: three NATS servers of its own (its own domain, a
leafnode link with credentials to A), each shard journal a mirror of A's, read-only durakv nodes following the
mirror. Real processes, real sockets, valkey-py; small data, bounded loops, polled waits."""

import asyncio
import json
import os
import signal
import threading
import time
import urllib.request

import pytest
import valkey

from conftest import durakv_cli, scaled, wait_until
from helpers.servers import processes_on
from durakv.cluster.manifest import ClusterError

MAX_WRITES = 3000
MAX_WRITE_S = 20.0


def _client(proc):
    return valkey.Valkey(host="127.0.0.1", port=proc.port, socket_timeout=10)


def _replication(proc):
    with _client(proc) as c:
        return c.info("replication")


class Writer:
    """One thread SETting {w}:<n> = n on region A's primary until stopped, or until a write fails (bounded in
    count and time); `acked` is the number of acknowledged writes (keys {w}:0 .. {w}:acked-1), `errors` what
    ended it."""

    def __init__(self, proc):
        self.proc = proc
        self.acked = 0
        self.errors = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="region-writer")
        self.thread.start()

    def _run(self):
        deadline = time.monotonic() + MAX_WRITE_S
        with _client(self.proc) as c:
            while not self.stop.is_set() and self.acked < MAX_WRITES and time.monotonic() < deadline:
                try:
                    c.set("{w}:%d" % self.acked, self.acked)
                except valkey.ValkeyError as exc:
                    self.errors.append(repr(exc))
                    return
                self.acked += 1

    def finish(self, errors_ok=False):
        self.stop.set()
        self.thread.join(MAX_WRITE_S + 10)
        assert not self.thread.is_alive()
        if not errors_ok:
            assert not self.errors, self.errors
        return self.acked


def _missing(proc, acked):
    """The acknowledged writes {w}:0 .. {w}:acked-1 that proc does not hold."""
    with _client(proc) as c:
        values = c.mget(["{w}:%d" % n for n in range(acked)]) if acked else []
    return [n for n, v in enumerate(values) if v != str(n).encode()]


def _primary(cluster):
    return next(p for p in cluster.nodes if _replication(p)["role"] == "master")


@pytest.fixture
def regions(local_cluster):
    a = local_cluster(shards=1, replicas=0, region_domain="ra")
    b = local_cluster(shards=1, replicas=0, follow_region=a.dir, region_domain="rb")
    return a, b


@pytest.fixture(scope="module")
def following_regions(tmp_path_factory):
    """Region A and its follower B, shared by the tests that leave both as they found them (B following A, no
    promotion, no process stopped): two regions are six NATS servers and two nodes, 5-10 s of set-up each."""
    from helpers.clusters import ClusterFactory
    factory = ClusterFactory(tmp_path_factory.mktemp("following-regions"))
    try:
        a = factory(shards=1, replicas=0, region_domain="ra")
        b = factory(shards=1, replicas=0, follow_region=a.dir, region_domain="rb")
        yield a, b
    finally:
        factory.teardown()


def test_follower_region_serves_reads_under_load_and_catches_up(following_regions):
    a, b = following_regions
    primary = a.nodes[0]
    follower = b.nodes[0]
    info = _replication(follower)
    assert info["role"] == "slave"
    assert info["region_role"] == "follower"
    assert info["region_domain"] == "rb" and info["region_peer_domain"] == "ra"

    writer = Writer(primary)
    try:
        # reads are served while A writes: a key A acknowledged shows up in B
        wait_until(lambda: writer.acked >= 200, 20, what="region A taking writes")
        wait_until(lambda: _client(follower).get("{w}:100") == b"100", 20, what="B serving a key written in A")
        # B is read-only: a write answers -READONLY, as a Valkey replica's does
        with pytest.raises(valkey.exceptions.ReadOnlyError):
            _client(follower).set("{w}:from-b", 1)
    finally:
        acked = writer.finish()
    assert acked >= 200

    # once the load stops the lag reaches 0 (B has applied A's last entry, and says so) and every acknowledged
    # write is in B. (region_lag_* is as of B's last look at its mirror, once a second: the index decides.)
    a_last = _replication(primary)["journal_applied_index"]

    def caught_up():
        r = _replication(follower)
        return (r["journal_applied_index"] == a_last and r["region_lag_entries"] == 0 and r["region_lag_ms"] == 0
                and r["replica_lag_entries"] == 0)

    wait_until(caught_up, 30, what="region B's lag reaching 0")
    with _client(follower) as c:
        values = c.mget(["{w}:%d" % n for n in range(acked)])
    missing = [n for n, v in enumerate(values) if v != str(n).encode()]
    assert not missing, "B lacks %d of %d acknowledged writes (first %s)" % (len(missing), acked, missing[:5])
    # B's nodes never took a lease: the controller says why
    assert "follows region ra" in _replication(follower)["controller_reason"]

    # the lag is in the metrics too
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % follower.ports["metrics"], timeout=10).read()
    lines = {ln.split(" ")[0]: ln.split(" ")[1] for ln in text.decode().splitlines()
             if ln.startswith("durakv_region_lag")}
    assert float(lines["durakv_region_lag_entries"]) == 0.0
    assert float(lines["durakv_region_lag_seconds"]) == 0.0


def test_region_link_carries_only_the_mirrors(following_regions):
    """The leafnode link's identity lets the mirrors through and nothing else: a publish on a shard's journal
    subject in region B does not reach region A's journal (without the link's permissions it did: measured)."""
    a, b = following_regions
    from durakv.cluster.natsnames import journal_stream, journal_subject
    stream = journal_stream("0")

    async def forge():
        nb = await b.nats_connect()
        try:
            await nb.publish(journal_subject("0"), b"forged-in-b")
            await nb.flush()
        finally:
            await nb.close()

    asyncio.run(forge())
    # A's next write still reaches B (the mirror runs) ...
    with _client(a.nodes[0]) as c:
        c.set("after-forge", 1)
    wait_until(lambda: _client(b.nodes[0]).get("after-forge") == b"1", 20, what="B following after the forgery")

    async def payloads():
        na = await a.nats_connect()
        try:
            js = na.jetstream()
            info = await js.stream_info(stream)
            return [(await js.get_msg(stream, seq=n)).data for n in range(info.state.first_seq, info.state.last_seq + 1)]
        finally:
            await na.close()

    # ... and A's journal never got the forged entry
    data = asyncio.run(payloads())
    assert data and b"forged-in-b" not in data


def test_different_shard_layout_is_refused(local_cluster):
    a = local_cluster(shards=1, replicas=0, region_domain="ra")
    with pytest.raises(ClusterError) as err:
        local_cluster(shards=2, replicas=0, follow_region=a.dir, region_domain="rb")
    text = str(err.value)
    assert "shard layouts differ" in text and "1 shard(s) (0: 0-16383)" in text and "this region 2" in text


def test_planned_switchover_loses_nothing(regions):
    a, b = regions
    writer = Writer(a.nodes[0])
    wait_until(lambda: writer.acked >= 200, 20, what="region A taking writes")
    # the switchover runs under the write load, through the operator's command: A is fenced (the writer's next
    # write is refused), B takes every entry A's journal has, then B is promoted
    out = durakv_cli("cluster", "promote-region", "--dir", b.dir, "--source-dir", a.dir, "--timeout", "60",
                     timeout_s=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "shard 0: cut at index" in out.stdout and "(planned: nothing lost)" in out.stdout
    report = json.loads(out.stdout.strip().splitlines()[-1])
    acked = writer.finish(errors_ok=True)
    assert writer.errors and "fenced region" in writer.errors[0], writer.errors
    assert report["mode"] == "planned" and report["region_epoch"] == 2
    shard = report["shards"]["0"]
    assert shard["lag_entries_at_cut"] == 0 and shard["cut_index"] == shard["source_last_index"]

    # 0 acknowledged writes lost: every one is in B, which now serves writes
    new_primary = _primary(b)
    assert _missing(new_primary, acked) == []
    with _client(new_primary) as c:
        assert c.set("{w}:after", "b") is True
        assert c.get("{w}:after") == b"b"
    assert _replication(new_primary)["region_role"] == "primary"
    # A refuses writes, naming the fence
    with pytest.raises(valkey.exceptions.ReadOnlyError) as err:
        _client(a.nodes[0]).set("{w}:a-after", 1)
    assert "fenced region" in str(err.value) and "switchover to region rb" in str(err.value)


def test_region_loss_reports_rpo_and_fences_the_old_region(regions):
    a, b = regions
    writer = Writer(a.nodes[0])
    wait_until(lambda: writer.acked >= 300, 20, what="region A taking writes")
    # power cut: every process of region A at once (SIGKILL by pid), under the write load
    a.stop_nodes([p.name for p in a.processes], sig=9)
    acked = writer.finish(errors_ok=True)
    report = asyncio.run(asyncio.wait_for(b.admin().promote_region(timeout_s=60), 90))
    assert report["mode"] == "disaster" and report["region_epoch"] == 2
    shard = report["shards"]["0"]
    new_primary = _primary(b)
    lost = _missing(new_primary, acked)
    # what B lacks is only a tail of what A acknowledged (never a hole), and the report names the cut
    assert lost == list(range(acked - len(lost), acked))
    assert shard["cut_index"] == shard["mirror_last_index"] and shard["lag_entries_at_cut"] >= 0

    # region A comes back: its old primary refuses writes, naming the fence; B serves writes
    a.start_nodes([p.name for p in a.processes], timeout_s=60)

    def refused():
        try:
            _client(a.nodes[0]).set("{w}:a-after", 1)
        except valkey.exceptions.ReadOnlyError as exc:
            return str(exc)
        return None

    text = wait_until(refused, 30, what="region A's old primary refusing writes")
    assert "fenced region" in text
    wait_until(lambda: "promoted over region ra" in _replication(a.nodes[0])["region_fence"], 30,
               what="A's node naming B's promotion")
    with _client(new_primary) as c:
        assert c.set("{w}:after", "b") is True
    # and how many entries A had that B did not take: one writer waiting for each reply (sync) puts each write
    # in an entry of its own, so at least one per lost acknowledged write
    out = durakv_cli("cluster", "region-gap", "--dir", b.dir, "--source-dir", a.dir, timeout_s=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "shard 0: the old region has" in out.stdout
    gap = json.loads(out.stdout.strip().splitlines()[-1])["0"]
    assert gap == asyncio.run(asyncio.wait_for(a.admin().region_gap(_region_record(b)), 60))["0"]
    assert gap["cut_index"] == shard["cut_index"]
    assert gap["entries_not_taken"] >= len(lost)
    print("region loss: %d acknowledged, %d lost; lag at the cut %d entries; A had %d entries B did not take"
          % (acked, len(lost), shard["lag_entries_at_cut"], gap["entries_not_taken"]))


def test_restarted_node_waits_for_the_peer_region_and_the_override(regions):
    """The fence's restart rule: a node of region A that restarts while region B is dark takes no writes (it
    cannot know whether B was promoted over it); the operator's override (region-unpair) lets it serve again."""
    a, b = regions
    b.stop_nodes([p.name for p in b.processes], sig=9)          # region B dark: power cut
    node = a.nodes[0]
    a.stop_nodes([node.name], sig=9)
    a.start_nodes([node.name], timeout_s=60)

    def refusal():
        try:
            _client(node).set("{w}:after-restart", 1)
        except valkey.exceptions.ReadOnlyError as exc:
            return str(exc)
        return None

    text = wait_until(refusal, 30, what="the restarted node refusing writes")
    assert "has not read region rb's record since this node started" in text
    out = durakv_cli("cluster", "region-unpair", "--dir", a.dir, timeout_s=60)
    assert out.returncode == 0, out.stdout + out.stderr

    def served():
        try:
            return _client(node).set("{w}:after-unpair", 1)
        except valkey.ValkeyError:
            return False

    wait_until(served, 30, what="region A serving writes after the override")
    assert _replication(node)["region_peer_domain"] == ""


def _region_record(cluster):
    return cluster._store_call(lambda store: store.get_region())[0]


def test_verify_region_loss_prints_its_table(tmp_path):
    """`durakv verify region-loss`, small: its two regions, the power cut, the promotion, the table, the JSON."""
    out_json = tmp_path / "region-loss.json"
    out = durakv_cli("verify", "region-loss", "--replicas", "0", "--writers", "2", "--rate", "200", "--warmup", "2",
                     "--workdir", tmp_path, "--json", out_json, timeout_s=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Region loss: acknowledged writes lost against the lag at the cut" in out.stdout
    assert "verify region-loss: ok" in out.stdout
    result = json.loads(out_json.read_text())
    (table,) = result["tables"].values()
    row = dict(zip(table["columns"], table["rows"][0]))
    assert row["Acked before the cut"] > 0 and row["A fenced on return"] == "yes"
    assert row["Acked lost"] <= row["Entries A had beyond the cut"]
    assert result["data"]["promote_report"]["mode"] == "disaster"
    # everything it started is gone with its directory
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("durakv-verify-regions-")]


def test_verify_region_loss_stops_a_region_whose_start_failed(tmp_path, monkeypatch):
    """Region B's `cluster create` failed once in a run ("no suitable peers for placement"): the tool removed its
    directory and left B's NATS servers and nodes running, with no manifest left to stop them by. Now whatever
    a failed start started is stopped, for both regions."""
    from durakv.cluster.admin import ClusterAdmin
    from durakv.tools.verify.regions import region_loss

    async def refused(self, *args, **kwargs):
        raise RuntimeError("no suitable peers for placement (injected by the test)")
    monkeypatch.setattr(ClusterAdmin, "create_follower", refused)
    try:
        with pytest.raises(ClusterError, match="injected by the test"):
            region_loss(shards=1, replicas=0, writers=1, rate=50, warmup_s=0.5, parent=str(tmp_path),
                        say=lambda *a: None, timeout_s=scaled(60))
        wait_until(lambda: processes_on(tmp_path) == [], scaled(10), what="no process of either region left")
        assert not [p for p in tmp_path.iterdir() if p.name.startswith("durakv-verify-regions-")]
    finally:
        for pid in processes_on(tmp_path):     # what a failure of this test would leave: by pid
            os.kill(pid, signal.SIGKILL)
