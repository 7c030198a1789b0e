"""A module-scoped three-node NATS cluster (for suites with many short tests)."""

import pytest

from nats_fixtures import started_nats


@pytest.fixture(scope="module")
def module_nats(tmp_path_factory):
    yield from started_nats(tmp_path_factory.mktemp("nats-module"))
