"""Pub/sub: channel, pattern and shard-channel subscriptions and message delivery (Valkey's pubsub.c).

Subscriptions live here (channel -> subscribers) and on each connection (`conn.subs`, a ClientSubs).
Messages are pushed to subscribers through Connection.push, encoded once per protocol: a message is an
array of bulk strings in RESP2 and the same as a push ('>') in RESP3. Nothing here is journaled.
"""

from ..keyspace.glob import glob_match
from ..protocol.resp import Raw, encode


class ClientSubs:
    """One connection's subscriptions (dicts used as insertion-ordered sets)."""

    __slots__ = ("channels", "patterns", "shard")

    def __init__(self):
        self.channels = {}
        self.patterns = {}
        self.shard = {}

    def count(self) -> int:
        """Channels + patterns: the count SUBSCRIBE/PSUBSCRIBE confirmations carry."""
        return len(self.channels) + len(self.patterns)

    def total(self) -> int:
        return len(self.channels) + len(self.patterns) + len(self.shard)


def _bulk(b: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(b), b)


def _frames(parts):
    """(RESP2, RESP3) encodings of an array of bulk strings that is a push in RESP3."""
    body = b"".join(_bulk(p) for p in parts)
    return b"*%d\r\n" % len(parts) + body, b">%d\r\n" % len(parts) + body


def _deliver(members, frames, hooks, current, ticket) -> int:
    """Pushes a message (frames: its RESP2 and RESP3 encodings) to each subscribed connection; the publishing
    connection (`current`) gets it after its own reply. Returns how many it was pushed to."""
    targets = list(members)   # a push over the output buffer limit closes the client, which leaves members
    for conn in targets:
        data = Raw(frames[conn.session.resp == 3])
        if conn is current:
            hooks.push_after_reply(data, ticket)
        else:
            conn.push(data, ticket)
    return len(targets)


def _confirm(kind: bytes, name, count: int, resp3: bool) -> bytes:
    head = b">3\r\n" if resp3 else b"*3\r\n"
    if name is None:
        middle = b"_\r\n" if resp3 else b"$-1\r\n"
    else:
        middle = _bulk(name)
    return b"%s%s%s:%d\r\n" % (head, _bulk(kind), middle, count)


_UNSUBSCRIBE_WORD = {"channel": b"unsubscribe", "pattern": b"punsubscribe", "shard": b"sunsubscribe"}


class PubSub:
    def __init__(self, server):
        self.server = server
        self.channels = {}   # channel -> {conn: None}
        self.patterns = {}   # pattern -> {conn: None}
        self.shard = {}      # shard channel -> {conn: None}
        self.clients = 0     # connections with at least one subscription (INFO pubsub_clients)

    # -- subscribing ----------------------------------------------------------------------------
    def _subs(self, conn):
        subs = conn.subs
        if subs is None:
            subs = conn.subs = ClientSubs()
        return subs

    def _mark(self, conn, before_total):
        after = conn.subs.total() if conn.subs is not None else 0
        if before_total == 0 and after:
            self.clients += 1
        elif before_total and after == 0:
            self.clients -= 1
        session = conn.session
        session.subscribed = after  # what the pipeline's pub/sub-context check reads
        session.refresh_special()

    def subscribe(self, conn, names, kind):
        """SUBSCRIBE (kind 'channel'), PSUBSCRIBE ('pattern') or SSUBSCRIBE ('shard'): the confirmations."""
        subs = self._subs(conn)
        before = subs.total()
        resp3 = conn.session.resp == 3
        mine, table, word = self._kind(subs, kind)
        out = []
        for name in names:
            if name not in mine:
                mine[name] = None
                table.setdefault(name, {})[conn] = None
            count = len(subs.shard) if kind == "shard" else subs.count()
            out.append(_confirm(word, name, count, resp3))
        self._mark(conn, before)
        return Raw(b"".join(out))

    def unsubscribe(self, conn, names, kind, notify=True):
        """UNSUBSCRIBE / PUNSUBSCRIBE / SUNSUBSCRIBE; no names = all. Returns the confirmations."""
        subs = conn.subs
        if subs is None:
            subs = ClientSubs()
        before = subs.total()
        resp3 = conn.session.resp == 3
        mine, table, word = self._kind(subs, kind)
        word = _UNSUBSCRIBE_WORD[kind]
        out = []
        targets = list(mine) if not names else names
        for name in targets:
            if name in mine:
                del mine[name]
                members = table.get(name)
                if members is not None:
                    members.pop(conn, None)
                    if not members:
                        del table[name]
            if notify:
                count = len(subs.shard) if kind == "shard" else subs.count()
                out.append(_confirm(word, name, count, resp3))
        if notify and not targets:
            count = len(subs.shard) if kind == "shard" else subs.count()
            out.append(_confirm(word, None, count, resp3))
        if conn.subs is not None:
            self._mark(conn, before)
        return Raw(b"".join(out))

    def _kind(self, subs, kind):
        if kind == "channel":
            return subs.channels, self.channels, b"subscribe"
        if kind == "pattern":
            return subs.patterns, self.patterns, b"psubscribe"
        return subs.shard, self.shard, b"ssubscribe"

    def drop_client(self, conn):
        """Removes every subscription of a connection (disconnect, RESET)."""
        subs = conn.subs
        if subs is None or not subs.total():
            return
        for kind in ("channel", "pattern", "shard"):
            self.unsubscribe(conn, (), kind, notify=False)

    # -- publishing -----------------------------------------------------------------------------
    def publish(self, channel: bytes, message: bytes, shard=False, ticket=0) -> int:
        """Delivers a message; returns the number of receivers (Valkey's count: one per matching
        subscription, so a client subscribed by channel and by two patterns counts three times). ticket: the
        journal entry the message is derived from (a keyspace event), which must commit before it leaves."""
        receivers = 0
        hooks = self.server.hooks
        current = hooks.current     # a client publishing to itself gets the message after its own reply
        members = (self.shard if shard else self.channels).get(channel)
        if members:
            receivers += _deliver(members, _frames((b"smessage" if shard else b"message", channel, message)),
                                  hooks, current, ticket)
        if shard or not self.patterns:
            return receivers
        for pattern, members in list(self.patterns.items()):
            if not glob_match(pattern, channel):
                continue
            receivers += _deliver(members, _frames((b"pmessage", pattern, channel, message)), hooks, current, ticket)
        return receivers

    def has_subscribers(self) -> bool:
        return bool(self.channels or self.patterns)

    def push_message(self, conn, channel: bytes, payload):
        """A 'message' whose payload is any reply value (tracking invalidations over RESP2)."""
        conn.push(Raw(b"*3\r\n" + _bulk(b"message") + _bulk(channel) + encode(payload, conn.session.resp == 3)))

    # -- introspection --------------------------------------------------------------------------
    def channel_list(self, pattern=None, shard=False):
        table = self.shard if shard else self.channels
        if pattern is None:
            return list(table)
        return [ch for ch in table if glob_match(pattern, ch)]

    def numsub(self, channel, shard=False) -> int:
        members = (self.shard if shard else self.channels).get(channel)
        return len(members) if members else 0
