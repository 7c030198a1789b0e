"""maxmemory-clients: client eviction (Valkey 7+'s evictClients, networking.c).

Valkey keeps the memory of every normal and pub/sub client in buckets and, while their total passes the limit,
closes the clients using the most ("Evicting client: <CLIENT LIST line>", INFO stats evicted_clients). The
limit is maxmemory-clients in bytes, or N% of maxmemory; never under 128 KiB ("to avoid cases where we can't
communicate at all with the server because of bad configuration"). Clients marked CLIENT NO-EVICT ON count in the
total but are never closed; replicas (a SYNC stream) are neither counted nor closed.

A durakv client's memory is what it holds in buffers: request bytes read but not yet parsed into commands, the
requests parked behind a blocked or paused command, replies written but not yet sent, and replies waiting for
their journal commit (sync durability). The total is summed at every cron tick (hz) while a limit is set, and
after a read that leaves the reading client alone over the limit (a client pushing a huge request is closed
before the next tick).
"""

import logging

log = logging.getLogger("durakv.server")

MIN_LIMIT_BYTES = 128 * 1024


def eviction_limit(config) -> int:
    """getClientEvictionLimit: bytes, or 0 for no limit."""
    setting = config["maxmemory-clients"]
    if setting < 0:
        maxmemory = config["maxmemory"]
        if not maxmemory:
            return 0
        limit = int(maxmemory * -setting / 100)
    elif setting > 0:
        limit = setting
    else:
        return 0
    return max(limit, MIN_LIMIT_BYTES)


def client_memory(conn) -> int:
    """What one connection holds in buffers (see the module's docstring)."""
    used = conn.parser.pending_bytes if conn.parser is not None else 0
    backlog = conn.backlog
    if backlog:
        used += sum(sum(map(len, args)) for args in backlog)
    return used + conn.output_memory()


def _counted(conn) -> bool:
    return conn.replica_feed is None and not conn.closing


class ClientEviction:
    def __init__(self, server):
        self.server = server
        self.limit = 0
        self.evicted = 0          # INFO stats evicted_clients

    def configure(self):
        self.limit = eviction_limit(self.server.config)
        self.sweep()

    def after_read(self, conn):
        """A read just buffered or ran: if this client alone is over the limit, sweep now."""
        if self.limit and _counted(conn) and client_memory(conn) >= self.limit:
            self.sweep()

    def sweep(self):
        """Closes the clients using the most memory while the total is at or over the limit."""
        limit = self.limit
        if not limit:
            return
        clients = [c for c in list(self.server.clients.values()) if _counted(c)]
        usage = [(client_memory(c), c) for c in clients]
        total = sum(u for u, _c in usage)
        if total < limit:
            return
        evictable = sorted(((u, c) for u, c in usage if not c.no_evict), key=lambda uc: uc[0], reverse=True)
        from .services import client_line
        now_ms = self.server.clock_ms()
        for used, conn in evictable:
            if total < limit:
                return
            log.info("Evicting client: %s", client_line(conn, now_ms))
            # dropped with what it holds (freeClient): not closed after sending megabytes of unsent replies
            conn.closing = True
            if conn.transport is not None:
                conn.transport.abort()
            self.evicted += 1
            total -= used
        if total >= limit:
            log.warning("Over client maxmemory after evicting all evictable clients")
