"""--metrics-port: durakv's own metrics in Prometheus text format, parsed with prometheus_client's own parser.
A standalone server's counters move with writes; on a real cluster, the new primary's scrape after the old one
is killed shows the epoch and the failover counter move, and each role publishes only the facts it has."""

import base64
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from conftest import free_port, scaled, wait_new_primary, wait_until


def scrape(port) -> dict:
    """{sample name: {labels tuple: value}} of one scrape of 127.0.0.1:port/metrics."""
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=scaled(10)) as resp:
        text = resp.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def value(samples, name, **labels):
    return samples[name][tuple(sorted(labels.items()))]


def test_standalone_metrics_move_with_writes(server_factory):
    mport = free_port()
    srv = server_factory("--durability", "sync", "--metrics-port", str(mport))
    before = wait_until(lambda: scrape(mport), 10, what="the metrics port")
    assert value(before, "durakv_durability_mode", mode="sync") == 1
    assert value(before, "durakv_durability_mode", mode="async") == 0
    assert value(before, "durakv_durability_lag_seconds") == 0       # sync: nothing acknowledged ahead
    commits0 = value(before, "durakv_commit_latency_seconds_count")
    index0 = value(before, "durakv_journal_commit_index")
    with srv.client() as c:
        for i in range(50):
            c.set("k%d" % i, "v")
    # the loop publishes at each cron tick: poll until the scrape shows the 50 commits
    after = wait_until(lambda: (lambda s: s if value(s, "durakv_journal_commit_index") >= index0 + 50 else None)(
        scrape(mport)), 10, what="the commits in a scrape")
    assert value(after, "durakv_commit_latency_seconds_count") >= commits0 + 1
    assert value(after, "durakv_commit_latency_seconds_sum") > 0
    assert value(after, "durakv_commit_latency_seconds_bucket", le="+Inf") == value(
        after, "durakv_commit_latency_seconds_count")
    assert value(after, "durakv_event_loop_stall_seconds_count") > 0
    assert value(after, "durakv_journal_append_errors_total") == 0
    assert value(after, "durakv_held_replies") == 0                     # every reply left with its commit
    # a standalone server has no shard, lease or epoch: those are left out, not published as 0
    for name in ("durakv_epoch", "durakv_failovers_seen_total", "durakv_lease_held",
                 "durakv_lease_remaining_seconds", "durakv_replica_apply_lag_seconds"):
        assert name not in after, name


def test_cluster_failover_moves_epoch_and_failover_counter(local_cluster):
    cluster = local_cluster(durability="sync")
    nodes = {p.name: p for p in cluster.nodes}
    assert all(p.ports.get("metrics") for p in nodes.values())
    old = cluster.primary(0)
    replicas = [p for p in nodes.values() if p.name != old.name]

    def epoch_known(p):
        s = scrape(p.ports["metrics"])
        return s if s.get("durakv_epoch") and value(s, "durakv_epoch") > 0 else None

    def leading(p):
        # on a loaded machine the lease can be between renewals at the first scrape: poll for it
        s = epoch_known(p)
        return s if s and value(s, "durakv_lease_held") == 1 and value(s, "durakv_lease_remaining_seconds") > 0 \
            else None
    primary_before = wait_until(lambda: leading(old), 30, what="the primary's epoch and lease in its metrics")
    assert value(primary_before, "durakv_lease_held") == 1
    assert value(primary_before, "durakv_lease_remaining_seconds") > 0
    assert "durakv_replica_apply_lag_seconds" not in primary_before     # a primary applies nothing behind
    seen = {p.name: wait_until(lambda p=p: epoch_known(p), 30, what="%s's epoch" % p.name) for p in replicas}
    for s in seen.values():
        assert value(s, "durakv_role", role="replica") == 1
        assert value(s, "durakv_lease_held") == 0
        assert "durakv_lease_remaining_seconds" not in s
        assert "durakv_replica_apply_lag_seconds" in s
        assert "durakv_commit_latency_seconds_count" not in s            # a replica journals nothing itself
    epoch0 = value(primary_before, "durakv_epoch")

    cluster.kill(old.name)
    new, _seconds = wait_new_primary(cluster, old.name, timeout_s=60)
    before = seen[new.name]

    def moved():
        # every fact of the new primary's scrape is polled for, not read once: a published snapshot may predate
        # the wait_new_primary probe's write, or the new lease's first renewal, by a cron tick (more under load)
        s = scrape(new.ports["metrics"])
        return s if (value(s, "durakv_role", role="primary") == 1 and value(s, "durakv_epoch") > epoch0
                     and s.get("durakv_commit_latency_seconds_count")
                     and value(s, "durakv_commit_latency_seconds_count") > 0
                     and value(s, "durakv_lease_held") == 1
                     and value(s, "durakv_failovers_seen_total") >= value(before, "durakv_failovers_seen_total") + 1
                     and "durakv_replica_apply_lag_seconds" not in s) else None
    after = wait_until(moved, 30, what="the new primary's metrics to show the failover")
    assert value(after, "durakv_failovers_seen_total") >= value(before, "durakv_failovers_seen_total") + 1
    assert value(after, "durakv_lease_held") == 1
    assert "durakv_replica_apply_lag_seconds" not in after
    assert value(after, "durakv_commit_latency_seconds_count") > 0     # the probe's write, at least


def _status(port, user=None, password=None):
    req = urllib.request.Request("http://127.0.0.1:%d/metrics" % port)
    if user is not None:
        import base64
        req.add_header("Authorization", "Basic " + base64.b64encode(("%s:%s" % (user, password)).encode()).decode())
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_the_metrics_port_asks_for_a_password_when_the_node_does(server_factory):
    """Locked like the RESP port: while the node asks for a password, a scrape presents one of its users (HTTP
    basic authentication) allowed to run INFO; the finding: every port durakv makes must ask for credentials."""
    import urllib.error  # noqa: F401 - _status catches it
    mport = free_port()
    srv = server_factory("--metrics-port", str(mport), "--requirepass", "scrape-pw", password="scrape-pw")
    with srv.client(password="scrape-pw") as c:
        c.execute_command("ACL", "SETUSER", "prometheus", "on", ">prom-pw", "+info")
        c.execute_command("ACL", "SETUSER", "nosy", "on", ">nosy-pw", "+get", "~*")
    wait_until(lambda: _status(mport, "prometheus", "prom-pw")[0] == 200, 10, what="the new user scraping")
    status, body = _status(mport)
    assert status == 401 and b"durakv_" not in body
    assert _status(mport, "default", "wrong")[0] == 401
    assert _status(mport, "nosy", "nosy-pw")[0] == 401            # not allowed INFO
    status, body = _status(mport, "default", "scrape-pw")
    assert status == 200 and b"durakv_durability_mode" in body
    # no password: the node serves loopback only (protected mode) and so does its metrics port, unasked
    with srv.client(password="scrape-pw") as c:
        c.config_set("requirepass", "")
    wait_until(lambda: _status(mport)[0] == 200, 10, what="the metrics port open again without a password")


def test_a_passwordless_node_serves_metrics_to_loopback_only_under_protected_mode():
    """Protected mode covers the metrics port too: with no password anywhere, a scrape from another address is
    refused, as a RESP connection from it is (the HTTP thread decides from the published snapshot)."""
    from durakv.server.metrics import LOOPBACK_ONLY, authorized
    assert authorized(LOOPBACK_ONLY, "", "127.0.0.1") and authorized(LOOPBACK_ONLY, "", "::1")
    assert not authorized(LOOPBACK_ONLY, "", "10.0.3.20")
    assert not authorized(LOOPBACK_ONLY, "Basic " + base64.b64encode(b"default:x").decode(), "10.0.3.20")
    assert authorized(None, "", "10.0.3.20")          # protected-mode no: the operator chose an open port
