"""A module-scoped three-node NATS cluster (for suites with many short tests)."""

import pytest

from durakv.cluster.nats_procs import NatsCluster


@pytest.fixture(scope="module")
def module_nats(tmp_path_factory):
    cluster = NatsCluster(tmp_path_factory.mktemp("nats-module"))
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        raise
    yield cluster
    cluster.stop()
