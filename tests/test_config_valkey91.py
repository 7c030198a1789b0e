"""Valkey 9.1.2's configs durakv was missing (issue 29's config differences), each with its effect:
maxmemory-clients (client eviction, its percent form), replicaof as a config, import-mode (with CLIENT
IMPORT-SOURCE, side by side with Valkey 9.1.2), and the hidden debug configs tests lean on (watchdog-period,
debug-context, key-load-delay, rdb-key-save-delay)."""

import socket
import time

import pytest
import valkey

from conftest import wait_until
from wire_util import error_of


# -- maxmemory-clients ---------------------------------------------------------------------------------------

def _half_sent_request(port, nbytes):
    """A connection holding `nbytes` of a request it never finishes (a query buffer that only grows)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$%d\r\n" % (nbytes * 4))
    chunk = b"x" * 65536
    sent = 0
    try:
        while sent < nbytes:
            s.sendall(chunk)
            sent += len(chunk)
    except OSError:
        pass         # evicted while still sending: what the test waits for anyway
    return s


def _closed_by_server(s, timeout_s):
    s.settimeout(timeout_s)
    try:
        while True:
            data = s.recv(65536)
            if not data:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def test_maxmemory_clients_evicts_the_client_over_the_limit_and_spares_no_evict_ones(server_factory):
    srv = server_factory("--durability", "none")
    with srv.client() as admin:
        assert admin.execute_command("CLIENT", "NO-EVICT", "on") == b"OK"
        assert admin.config_set("maxmemory-clients", "1mb")
        assert admin.config_get("maxmemory-clients") == {"maxmemory-clients": "1048576"}
        big = _half_sent_request(srv.port, 3 * 1024 * 1024)
        try:
            assert _closed_by_server(big, 20), "the client over maxmemory-clients was not evicted"
        finally:
            big.close()
        assert admin.info("stats")["evicted_clients"] >= 1
        assert admin.ping()                                   # the no-evict client stays
        with srv.client() as other:
            assert other.set("after", "1") and other.get("after") == b"1"
        # CLIENT NO-EVICT ON spares a client that holds as much
        pinger = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        pinger.sendall(b"CLIENT NO-EVICT on\r\n")
        assert pinger.recv(100) == b"+OK\r\n"
        pinger.sendall(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$%d\r\n" % (8 * 1024 * 1024) + b"y" * (2 * 1024 * 1024))
        wait_until(lambda: "Over client maxmemory after evicting all evictable clients" in srv.read_log(), 20,
                   what="the sweep to find only unevictable clients over the limit")
        assert not _closed_by_server(pinger, 0.5)
        pinger.close()
        assert "Evicting client: id=" in srv.read_log()
        assert admin.config_set("maxmemory-clients", "0")


def test_maxmemory_clients_percent_of_maxmemory(server_factory):
    srv = server_factory("--durability", "none", "--maxmemory", "10mb", "--maxmemory-clients", "10%")
    with srv.client() as admin:
        assert admin.config_get("maxmemory-clients") == {"maxmemory-clients": "10%"}
        big = _half_sent_request(srv.port, 2 * 1024 * 1024)    # 10% of 10 MiB is 1 MiB
        try:
            assert _closed_by_server(big, 20)
        finally:
            big.close()
        assert admin.info("stats")["evicted_clients"] >= 1
        assert error_of(admin, "CONFIG", "SET", "maxmemory-clients", "101%") == (
            "ERR CONFIG SET failed (possibly related to argument 'maxmemory-clients') - percentage argument must be "
            "less or equal to 100")
