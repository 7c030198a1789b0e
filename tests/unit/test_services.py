"""The handler services' groups (commands/services.py) and the server's implementation of them (server/services.py)."""

import inspect

from durakv.commands import services as base
from durakv.server import services as served

from helpers.replay import Direct

GROUPS = ("clients", "pubsub", "admin", "persistence", "replication", "cluster", "faults", "off_loop")


def _public(cls):
    return {n for n, v in vars(cls).items() if not n.startswith("_") and callable(v)}


def test_wait_and_waitaof_after_a_write_on_a_pipeline_without_a_server():
    # The in-process services had no replication_index, which WAIT and WAITAOF ask for after a client's write:
    # both answered "ERR internal error" instead of Valkey's counts (no replicas, no AOF).
    d = Direct()
    assert d("SET", "k", "v") == b"+OK\r\n"
    assert d.s.last_write_index > 0
    assert d("WAIT", "0", "0") == 0
    assert d("WAITAOF", "0", "0", "0") == [0, 0]


def test_every_server_group_method_is_declared_by_its_base_group():
    # A handler may run on either implementation: a method only the server's group has would fail on the other one.
    services = base.Services()
    for name in GROUPS:
        group = getattr(services, name)
        server_cls = getattr(served, "Server" + type(group).__name__)
        assert issubclass(server_cls, type(group))
        extra = _public(server_cls) - _public(type(group))
        assert extra == set(), (name, extra)
        for method in _public(server_cls):
            want = inspect.signature(getattr(type(group), method)).parameters.keys()
            have = inspect.signature(getattr(server_cls, method)).parameters.keys()
            assert list(have) == list(want), (name, method)
    assert _public(served.ServerServices) <= _public(base.Services)


def test_the_server_services_expose_a_server_group_for_every_group():
    class FakeServer:
        config = {}

    services = served.ServerServices(FakeServer())
    for name in GROUPS:
        group = getattr(services, name)
        assert type(group).__name__ == "Server" + type(getattr(base.Services(), name)).__name__
        assert group.server is services.server
