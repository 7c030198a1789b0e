"""Valkey's replication stream for tools that read it (SYNC): the effects of every write as commands.

durakv's replicas follow its journal, not this stream; it exists because clients and tests attach to it
(Valkey's test suite reads what a command propagates: `attach_to_replication_stream`). A SYNC connection gets
an RDB file of the dataset as it is at that moment (keyspace/rdbvalue.py: keys, expire times, function
libraries; `redis-cli --rdb` makes a backup Valkey and Redis 7+ load), then each write's effects as RESP
commands, with SELECT when the database changes and MULTI/EXEC around the effects of one command that produced
several (as Valkey's propagatePendingCommands). The stream that follows starts exactly where the file ends: the
feed is attached at the moment memory is read. A small dataset's file is built in the event loop (a fork costs
more); from FORK_MIN_KEYS keys on it is built in a forked child (`export_rdb_forked`, as Valkey forks), which
sees memory as it was at the fork, writes the file to a temporary file and `os._exit`s (it never logs, never
touches the journal or a socket), so the loop keeps serving while it encodes (about a second per few hundred
thousand keys); the file holds the whole reply, which the loop maps and hands to the transport as it is.

Nothing here leaves before its commit: the RDB reply carries the durability export ticket (everything issued
when memory was read, pipeline.py) and each chunk of the stream the index of the journal entry its effects
joined, so a SYNC client never holds a write a failover could take back. If that entry fails to persist the
chunk is dropped; if the RDB's entries fail, the client gets the journal's error and the connection closes.
"""

import logging
import mmap
import os
import tempfile
import time

from .. import VALKEY_VERSION, messages
from ..config import debug_delay
from ..keyspace import rdbvalue
from ..keyspace.db import ServerDeletion
from ..protocol.resp import Deferred, ErrorReply, Raw, RawView, encode_command
from ..scripting.functions import get_functions
from ..snapshot.forked import fork_child, watch_exit


def dataset_rdb(keyspace, data=True, functions=True, key_delay_us=0) -> bytes:
    """The RDB file of what the keyspace holds now (keys already expired are left out, as a reload would);
    data / functions False: without the keys / the function libraries (REPLCONF rdb-filter-only).
    key_delay_us: rdb-key-save-delay, waited before each key (only ever in the forked child)."""
    now_ms = keyspace.clock_ms()
    databases = []
    for db in keyspace.dbs if data else ():
        expires = db.expires
        items = []
        for key, value in db.data.items():
            if key_delay_us:
                debug_delay(key_delay_us)
            at = expires.get(key) if expires else None
            if at is not None and at <= now_ms:
                continue
            field_ttls = db.hexpires.get(key) if db.hexpires else None
            items.append((key, value, at, field_ttls) if field_ttls else (key, value, at))
        databases.append((db.id, items))
    funcs = getattr(keyspace, "functions", None)
    libraries = ([lib.code for lib in get_functions(keyspace).ctx.libraries.values()]
                 if funcs is not None and functions else [])
    aux = [(b"valkey-ver", VALKEY_VERSION.encode()), (b"redis-bits", b"64"), (b"ctime", b"%d" % time.time()),
           (b"used-mem", b"%d" % keyspace.used_bytes), (b"aof-base", b"0")]
    return rdbvalue.rdb_file(databases, libraries, aux)


log = logging.getLogger("durakv.server")

FORK_MIN_KEYS = 10000   # below this many keys building the file in the loop takes milliseconds: cheaper than a fork


def export_rdb_forked(loop, keyspace, tmp_dir, data=True, functions=True, ticket=0, still_valid=None,
                      preamble=b"", forked=None, key_delay_us=0) -> Deferred:
    """The RDB of memory as it is now, built in a forked child. The Deferred resolves, on the loop, with the
    encoded bulk reply and `ticket` (what must commit before it leaves), or with an error if the child failed
    or `still_valid()` says the writes the file holds can no longer commit (the journal failed meanwhile).
    `preamble` goes out before the file (PSYNC's +FULLRESYNC line); `forked(usec)` is told how long the fork
    took (INFO stats latest_fork_usec)."""
    done = Deferred()
    fd, path = tempfile.mkstemp(prefix="temp-sync-%d-" % os.getpid(), suffix=".rdb", dir=tmp_dir)

    def work():
        # The child: nothing but the file (snapshot/forked.py: no logging, no journal, no loop)
        rdb = dataset_rdb(keyspace, data=data, functions=functions, key_delay_us=key_delay_us)
        # the whole reply, so that the loop sends the file as it is (RawView) without building it
        for part in (preamble + b"$%d\r\n" % len(rdb), rdb):
            view = memoryview(part)
            while view:
                view = view[os.write(fd, view):]

    try:
        pid, fork_usec = fork_child(work, keep_fd=fd)
    except BaseException:
        os.unlink(path)
        raise
    finally:
        os.close(fd)
    if forked is not None:
        forked(fork_usec)
    log.info("Background RDB transfer started by pid %d", pid)

    def child_exited(code):
        try:
            if code != 0:
                log.warning("RDB export child %d failed (exit status %d)", pid, code)
                done.resolve(ErrorReply(messages.RDB_EXPORT_FAILED.format(code)))
                return
            reason = still_valid() if still_valid is not None else None
            if reason is not None:
                done.resolve(ErrorReply(messages.JOURNAL_FAILED_WRITE.format(reason)))
                return
            # Mapped, not read: reading and wrapping a file of 100 MB costs the loop some 200 ms of copies;
            # the mapping stays (unlinked, the pages in the page cache) until the transport has sent it.
            with open(path, "rb") as f:
                mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            log.info("Background RDB transfer terminated with success")
            done.resolve(RawView(memoryview(mapped)), ticket)
        finally:
            os.unlink(path)
    watch_exit(loop, pid, child_exited)
    return done


def _as_valkey_propagates(effects):
    """A command's effects as Valkey's stream has them: XREADGROUP's CREATECONSUMER of a consumer that one of
    its XCLAIMs names is left out (the XCLAIM creates it on a replica; Valkey propagates no CREATECONSUMER
    then). durakv journals it all the same: its replicas and keyspace events need no such inference."""
    claimed = {(db_id, argv[1], argv[2], argv[3]) for db_id, argv in effects
               if len(argv) > 3 and argv[0].lower() == b"xclaim"}
    if not claimed:
        return effects
    return [(db_id, argv) for db_id, argv in effects
            if not (len(argv) == 5 and argv[0].lower() == b"xgroup" and argv[1].lower() == b"createconsumer"
                    and (db_id, argv[2], argv[3], argv[4]) in claimed)]


_MULTI = encode_command((b"MULTI",))
_PING = encode_command((b"ping",))   # as Valkey writes it (replicationCron's argv, lower-case)
_EXEC = encode_command((b"EXEC",))


class ReplicaFeed:
    """One SYNC connection's stream."""

    def __init__(self, conn):
        self.conn = conn
        self.db_id = -1
        self.offset = 0         # bytes of stream sent (INFO replication's slaveN offset)

    def __call__(self, effects, ticket):
        if self.conn.closing:
            return
        out = []
        # The server's own deletions (lazy expiry during the command) go out apart and first, as Valkey
        # propagates them at once; the command's own effects follow, wrapped when there are several.
        own = [e for e in effects if type(e[1]) is not ServerDeletion]
        if len(own) > 1:
            own = _as_valkey_propagates(own)
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
            data = b"".join(out)
            self.offset += len(data)
            self.conn.push(Raw(data), ticket)

    def encode(self, commands) -> bytes:
        """(db_id, argv) commands as this stream writes them (SELECT when the database changes), counted in its
        offset: what the stream carries right after its RDB that the file cannot (search index definitions)."""
        out = []
        for db_id, argv in commands:
            self._one(out, db_id, argv)
        data = b"".join(out)
        self.offset += len(data)
        return data

    def ping(self):
        """replicationCron's PING to its replicas, every repl-ping-replica-period seconds: the stream's
        keep-alive, counted in its offset, queued behind whatever of the stream still waits for a commit."""
        if self.conn.closing:
            return
        self.offset += len(_PING)
        self.conn.push(Raw(_PING))

    def _one(self, out, db_id, argv):
        if db_id != self.db_id:
            out.append(encode_command((b"SELECT", b"%d" % db_id)))
            self.db_id = db_id
        out.append(encode_command(argv))
