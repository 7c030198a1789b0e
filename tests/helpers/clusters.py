"""Pytest fixtures for tests against a real NATS cluster and real local durakv clusters.

tests/conftest.py registers this module as a plugin, so every test can ask for nats_cluster, module_nats and
local_cluster. Every process started here is stopped by pid at teardown; every wait is a poll with a deadline
scaled by DURAKV_TEST_TIME_SCALE (helpers/waiting.py).
"""

import asyncio
import contextlib
import logging
import os
import time
import warnings

import pytest

from durakv.cluster.local import LocalCluster
from durakv.cluster.manifest import manifest_path
from durakv.cluster.nats_procs import NatsCluster
from durakv.cluster.processes import SLOW_STOP, port_is_free
from durakv.cluster.reshard import mark_migrations
from helpers.servers import cluster_port_range
from helpers.waiting import scaled


def started_nats(directory):
    """The body of a NATS cluster fixture: yields a started NatsCluster in directory and stops it after the
    tests; a start that fails part way stops the nodes it did start."""
    cluster = NatsCluster(directory)
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        raise
    yield cluster
    cluster.stop()


@pytest.fixture
def nats_cluster(tmp_path):
    """Three NATS nodes (nats-az1..3, JetStream, sync_interval always, unique_tag az:) on free ports.
    `.servers` is the comma-separated URL list, `.urls` a list, `.nodes` the NatsNode handles."""
    yield from started_nats(tmp_path / "nats-cluster")


@pytest.fixture(scope="module")
def module_nats(tmp_path_factory):
    """One three-node NATS cluster for a test module (suites with many short tests)."""
    yield from started_nats(tmp_path_factory.mktemp("nats-module"))


class ClusterFactory:
    """local_cluster(**LocalCluster.up options) -> a running LocalCluster in its own tmp dir; down at teardown.
    `track(dir)` registers a cluster started some other way (e.g. the CLI) for the same teardown."""

    def __init__(self, tmp_path):
        self.tmp_path = tmp_path
        self.dirs = []

    def new_dir(self):
        d = self.tmp_path / f"cluster{len(self.dirs)}"
        self.dirs.append(d)
        return d

    def __call__(self, **options):
        options.setdefault("timeout_s", scaled(60.0))
        # The harness's clusters ask their nodes for no password (tests talk to each node directly on 127.0.0.1);
        # NATS is locked as in every layout. Tests of the locked nodes pass password=None.
        options.setdefault("password", "")
        options.setdefault("port_range", cluster_port_range())
        return LocalCluster.up(self.new_dir(), **options)

    def track(self, d):
        self.dirs.append(d)
        return d

    def teardown(self):
        for d in self.dirs:
            if os.path.exists(manifest_path(d)):
                with killed_reports() as killed:
                    LocalCluster.load(d).down()
                for report in killed:
                    # a passing test's teardown that waited out the 10 s bound: shown in the run's warnings summary
                    warnings.warn(f"{d}: {report}", SlowStopWarning)


class SlowStopWarning(UserWarning):
    """A process of a test's cluster outlived its SIGTERM by the whole stop deadline and was killed."""


@contextlib.contextmanager
def killed_reports():
    """Collects the launcher's 'did not exit within ... of SIGTERM' reports (cluster/processes.py) meanwhile."""
    reports = []

    class Collect(logging.Handler):
        def emit(self, record):
            if record.msg == SLOW_STOP:
                reports.append(record.getMessage())
    handler = Collect(logging.WARNING)
    logger = logging.getLogger("durakv.cluster")
    logger.addHandler(handler)
    try:
        yield reports
    finally:
        logger.removeHandler(handler)


@pytest.fixture
def local_cluster(tmp_path):
    factory = ClusterFactory(tmp_path)
    yield factory
    factory.teardown()


def free_port_range(count):
    """A base port P with P..P+count-1 all free on 127.0.0.1 right now, in this worker's slice of the test
    clusters' ports (helpers/servers.py cluster_port_range)."""
    low, high = cluster_port_range()
    for base in range(low, high + 2 - count):
        if all(port_is_free(p) for p in range(base, base + count)):
            return base
    raise RuntimeError("no free port range")


def run(coro, timeout_s=60.0):
    """Run a coroutine to completion (nats-py is asyncio-only) with an overall deadline."""
    return asyncio.run(asyncio.wait_for(coro, scaled(timeout_s)))


async def async_wait_for(predicate, timeout_s, what, interval_s=0.05):
    """Await predicate() (a coroutine function) until truthy or the deadline; returns its value."""
    deadline = time.monotonic() + scaled(timeout_s)
    last = None
    while True:
        try:
            value = await predicate()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - keep polling until the deadline
            last = exc
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out waiting for {what}" + (f": {last!r}" if last else ""))
        await asyncio.sleep(interval_s)


def mark_migration(cluster, slots, source_name, target_name):
    """Marks `slots` as moving from shard `source_name` to `target_name` in a local cluster's topology (what
    `durakv cluster reshard` does), without waiting for the move."""
    async def go(store):
        topology, _r = await store.get_topology()
        src = next(sh for sh in topology.shards if sh.name == source_name)
        dst = next(sh for sh in topology.shards if sh.name == target_name)
        await mark_migrations(store, [(slots, src.id, dst.id)])
    cluster._store_call(go)
