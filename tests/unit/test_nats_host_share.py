"""A local cluster's NATS servers share one host: each gets GOMAXPROCS of its share of the cores
(cluster/nats_procs.py host_share), unless the operator's environment sets GOMAXPROCS."""

import pytest

from durakv.cluster import nats_procs
from durakv.cluster.nats_procs import host_share, nats_env


@pytest.mark.parametrize("cores, servers, share", [(2, 3, 1), (1, 3, 1), (6, 3, 2), (16, 3, 5), (8, 6, 1), (4, 1, 4)])
def test_each_server_gets_its_share_of_the_cores_and_at_least_one(monkeypatch, cores, servers, share):
    monkeypatch.setattr(nats_procs.os, "cpu_count", lambda: cores)
    assert host_share(servers) == share


def test_the_share_goes_into_the_environment_unless_the_operator_set_one(monkeypatch):
    monkeypatch.delenv("GOMAXPROCS", raising=False)
    monkeypatch.setenv("DURAKV_SOMETHING", "kept")
    env = nats_env(2)
    assert env["GOMAXPROCS"] == "2" and env["DURAKV_SOMETHING"] == "kept"
    assert nats_env(None) is None                  # a node placed by hand: Go's default, the process's environment
    monkeypatch.setenv("GOMAXPROCS", "7")
    assert nats_env(2) is None                     # the operator's setting wins (inherited unchanged)
