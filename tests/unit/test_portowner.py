"""cluster/portowner.py: which process holds a TCP socket. The kernel's socket diagnostics (netlink sock_diag)
answer for the listening sockets and for one named connection; /proc/net/tcp{,6} is the fallback and must agree.
Real sockets of this process, compared with what fstat says their inodes are."""

import os
import socket

import pytest

from durakv.cluster import portowner


def _inode(sock):
    return os.fstat(sock.fileno()).st_ino


@pytest.fixture
def sockets():
    opened = []

    def keep(s):
        opened.append(s)
        return s
    yield keep
    for s in opened:
        s.close()


def _listener(keep, family=socket.AF_INET, host="127.0.0.1", v6only=None):
    s = keep(socket.socket(family))
    if v6only is not None:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, v6only)
    s.bind((host, 0))
    s.listen()
    return s


def test_listening_inodes_by_sock_diag_and_by_proc_agree(sockets):
    v4 = _listener(sockets)
    v6 = _listener(sockets, socket.AF_INET6, "::1")
    ports = [v4.getsockname()[1], v6.getsockname()[1]]
    found = portowner.listening_inodes(ports)
    assert found == {ports[0]: {_inode(v4)}, ports[1]: {_inode(v6)}}
    by_proc = {p: {int(parts[9]) for parts in portowner._lines()
                   if parts[3] == portowner.LISTEN and int(parts[1].rpartition(":")[2], 16) == p} for p in ports}
    assert by_proc == found
    # a port nobody listens on
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    free = closed.getsockname()[1]
    closed.close()
    assert portowner.listening_inodes(free) == {free: set()}


@pytest.mark.parametrize("family,host,v6only", [
    (socket.AF_INET, "127.0.0.1", None),
    (socket.AF_INET6, "::1", None),
    (socket.AF_INET6, "::", 0),          # a dual-stack listener: an IPv4 client's peer shows as ::ffff:127.0.0.1
])
def test_connection_inode_finds_the_clients_end(sockets, family, host, v6only):
    server = _listener(sockets, family, host, v6only)
    port = server.getsockname()[1]
    client = sockets(socket.create_connection(("127.0.0.1" if family == socket.AF_INET or v6only == 0 else "::1",
                                               port)))
    accepted, peer = server.accept()
    sockets(accepted)
    expected = _inode(client)
    assert portowner.connection_inode(peer[:2], accepted.getsockname()[:2]) == expected
    assert portowner._connection_inode_proc(peer[:2], accepted.getsockname()[:2]) == expected
    # no such connection
    assert portowner.connection_inode(("127.0.0.1", 1), ("127.0.0.1", port)) is None


def test_ports_owners_reads_the_expected_pids_first(sockets):
    s = _listener(sockets)
    port = s.getsockname()[1]
    me = os.getpid()
    assert portowner.ports_owners([port]) == {port: [me]}
    assert portowner.ports_owners([port], expected=[me]) == {port: [me]}
    # a wrong guess still finds the holder among every process
    assert portowner.ports_owners([port], expected=[1]) == {port: [me]}
    assert portowner.port_owners(port) == [me]
