"""Valkey's replication stream for tools that read it (SYNC): the effects of every write as commands.

durakv's replicas follow its journal, not this stream; it exists because clients and tests attach to it
(Valkey's test suite reads what a command propagates: `attach_to_replication_stream`). A SYNC connection gets
an empty RDB as its payload, then each write's effects as RESP commands, with SELECT when the database changes
and MULTI/EXEC around the effects of one command that produced several (as Valkey's propagatePendingCommands).
"""

from ..keyspace.db import ServerDeletion
from ..protocol.resp import Raw

# An RDB with no data: magic + version, EOF opcode, an 8-byte checksum of 0 (checksum not computed).
EMPTY_RDB = b"REDIS0011\xff" + b"\x00" * 8


def _command(argv) -> bytes:
    parts = [b"*%d\r\n" % len(argv)]
    for a in argv:
        if type(a) is not bytes:
            a = str(a).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(parts)


_MULTI = _command((b"MULTI",))
_EXEC = _command((b"EXEC",))


class ReplicaFeed:
    """One SYNC connection's stream."""

    def __init__(self, conn):
        self.conn = conn
        self.db_id = -1

    def payload(self) -> Raw:
        return Raw(b"$%d\r\n" % len(EMPTY_RDB) + EMPTY_RDB)

    def __call__(self, effects):
        if self.conn.closing:
            return
        out = []
        # The server's own deletions (lazy expiry during the command) go out apart and first, as Valkey
        # propagates them at once; the command's own effects follow, wrapped when there are several.
        own = [e for e in effects if type(e[1]) is not ServerDeletion]
        if len(own) != len(effects):
            for db_id, argv in effects:
                if type(argv) is ServerDeletion:
                    self._one(out, db_id, argv)
        wrap = len(own) > 1
        if wrap:
            out.append(_MULTI)
        for db_id, argv in own:
            self._one(out, db_id, argv)
        if wrap:
            out.append(_EXEC)
        if out:
            self.conn.push(Raw(b"".join(out)))

    def _one(self, out, db_id, argv):
        if db_id != self.db_id:
            out.append(_command((b"SELECT", b"%d" % db_id)))
            self.db_id = db_id
        out.append(_command(argv))
