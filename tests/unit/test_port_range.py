"""A local cluster's ports from a range (`durakv cluster up --port-range LOW-HIGH`, the test harness's clusters):
the launcher's port choice, which a node restarted at its port relies on. Found by a suite run: a primary killed
by `durakv chaos kill --restart-after 1` could not start again because another test's NATS server had been given
its port meanwhile; both came from the kernel's ephemeral range."""

import socket

import pytest

from durakv.cluster.processes import ProcessError, free_ports, parse_port_range
from durakv.cluster.proxyctl import choose_proxy_ports
from helpers.clusters import free_port_range


def _free_span(width):
    """A range of `width` ports, all free now, in this worker's slice (helpers/clusters.py free_port_range)."""
    base = free_port_range(width)
    return base, base + width - 1


def test_parse_port_range():
    assert parse_port_range("30000-30999") == (30000, 30999)
    assert parse_port_range("5-5") == (5, 5)
    for bad in ("30000", "a-b", "-5", "30000-", "30999-30000", "0-10", "1-65536", " 1-2", "1_0-20", "01-20",
                "\u0661-\u0662"):
        with pytest.raises(ValueError):
            parse_port_range(bad)


def test_free_ports_come_from_the_range_lowest_first_and_skip_what_is_taken():
    low, high = _free_span(8)
    assert free_ports(3, port_range=(low, high)) == [low, low + 1, low + 2]
    assert free_ports(2, port_range=(low, high), exclude={low, low + 2}) == [low + 1, low + 3]
    with socket.socket() as listener:
        # as every server binds (asyncio's, Valkey's), and as port_is_free probes: an earlier test of this worker
        # may have left the port in TIME_WAIT, which refuses a bind without it (a suite run's EADDRINUSE here)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", low))
        listener.listen()
        assert free_ports(2, port_range=(low, high)) == [low + 1, low + 2]
    with pytest.raises(ProcessError, match="fewer than 9 free ports"):
        free_ports(9, port_range=(low, high))
    with pytest.raises(ValueError):
        free_ports(1, port_range=(high, low))


def test_the_partition_proxy_ports_come_from_the_range_too():
    low, high = _free_span(12)
    taken = {low, low + 3}
    ports = choose_proxy_ports(None, (low, high), exclude=taken)
    chosen = [p for links in ports.values() for p in links.values()]
    assert len(set(chosen)) == len(chosen) == 6
    assert all(low <= p <= high and p not in taken for p in chosen), ports
