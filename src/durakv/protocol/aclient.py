"""The one asyncio RESP client of node-to-node links that run on a server's event loop (slot migration's
connection to the target primary): requests pipelined, replies read in order, hiredis parsing.

Its blocking sibling is client.py (tools, the control plane, threads). What is not a client of this kind, and
why it reads its own bytes: a replica of a Valkey primary (server/valkeyreplica.py) reads the handshake's
lines, where a primary sends bare newlines as keep-alives that no RESP parser takes, then the RDB payload;
MIGRATE (server/migrate.py) reads reply lines as Valkey's connSyncReadLine does, at most 1024 bytes, from a
cached socket on a worker thread; the load generator (tools/bench/worker.py) is an asyncio.Protocol built for
throughput.
"""

import asyncio

import hiredis

from .resp import encode_command

READ_BYTES = 1 << 20
REPLY_TIMEOUT_S = 30.0          # no byte from the peer for this long: the connection is given up


class AsyncRespConnection:
    """One connection: send() pipelines, replies(count) reads them in order (an error reply comes back as a
    hiredis.ReplyError value, not raised), call(*args) does both for one command."""

    def __init__(self, reader, writer):
        self.reader = reader
        self.writer = writer
        self.parser = hiredis.Reader()
        self.db_id = 0          # the database the peer runs this connection's commands in (SELECT)

    @classmethod
    async def open(cls, host, port, tls_ctx, timeout_s):
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port, ssl=tls_ctx), timeout_s)
        return cls(reader, writer)

    def send(self, data: bytes):
        self.writer.write(data)

    async def replies(self, count, timeout_s=REPLY_TIMEOUT_S):
        """The next `count` replies (errors as hiredis.ReplyError values)."""
        out = []
        while len(out) < count:
            reply = self.parser.gets()
            if reply is not False:
                out.append(reply)
                continue
            data = await asyncio.wait_for(self.reader.read(READ_BYTES), timeout_s)
            if not data:
                raise ConnectionError("the peer closed the connection")
            self.parser.feed(data)
        return out

    async def call(self, *args, timeout_s=10.0):
        self.send(encode_command(args))
        return (await self.replies(1, timeout_s))[0]

    def close(self):
        self.writer.close()
