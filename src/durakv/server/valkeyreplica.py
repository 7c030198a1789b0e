"""REPLICAOF host port: a standalone durakv server follows a Valkey (or Redis, or durakv) primary over Valkey's
replication protocol, e.g. to move a dataset from Valkey or ElastiCache into durakv without downtime.

The link (replicationSetPrimary / syncWithPrimary / readSyncBulkPayload in Valkey's replication.c):
PING, AUTH with primaryuser / primaryauth if set, REPLCONF listening-port, capa eof psync2 and version, PSYNC ? -1
(a full resynchronization every time: durakv keeps no replication backlog), the RDB payload (sized, or
diskless with an EOF mark), then the command stream.

The full sync stays off the event loop's critical path: the RDB is streamed from the socket to a temporary file
in the data dir (never whole in memory; removed afterwards, also on errors), then read back record by record
(rdbvalue.iter_rdb) and applied in slices of the loop (recovery/loading.py Slicer: SLICE_MAX_MS), yielding
to the loop between slices. Meanwhile the server is loading (server.loading, as at start-up): other clients get
-LOADING to data commands, INFO and the like answer. What the primary sends is
run through the pipeline on one session marked `from_primary` (the only one a replica accepts writes from), so
every key loaded and every command applied is journaled like a client's write: a kill -9 of a durakv replica
loses nothing it had applied. The replica answers REPLCONF GETACK and sends REPLCONF ACK <offset> every
second, so the primary keeps it online. On any error the link is dropped and tried again after a second, with
a full resynchronization; REPLICAOF NO ONE stops it and the server is a primary again with the data it has.

An ACK names only what the journal holds: the offset up to which every write applied is committed (with a
journal, in sync or async mode; without one, what was applied). So a WAIT on the primary counts this replica
only for writes a kill -9 of it would keep. A GETACK answered short of the offset applied then is answered
again as commits catch up, so such a WAIT returns as soon as the journal has the writes, not at the next
periodic ACK.

While it is a replica: writes from clients answer -READONLY; with replica-serve-stale-data no, commands
without the `stale` flag answer -MASTERDOWN while the link is not up; keys are not expired here (the
primary's DELs remove them, as on a Valkey replica).
"""

import asyncio
import collections
import logging
import os
import tempfile
import time

import hiredis

from .. import fastpath, messages
from ..commands.session import Session
from ..errors import with_path
from ..keyspace import rdbvalue
from ..recovery.loading import LoadProgress, Slicer
from ..protocol.resp import ErrorReply, encode_command

log = logging.getLogger("durakv.replicaof")

CONNECT_TIMEOUT_S = 5.0
# REPLCONF VERSION: the Valkey release whose RDB format (version 80: RDB_TYPE_HASH_2) rdbvalue reads
REPLICA_RDB_VERSION_OF = b"9.0.0"
RETRY_S = 1.0
ACK_INTERVAL_S = 1.0
EOF_MARK_BYTES = 40
# The RDB's bytes are taken from the socket and written to the temporary file in pieces of this size.
SYNC_READ_BYTES = 1 << 20
SYNC_READ_TIMEOUT_S = 300
# The temporary file of a full sync in the data dir: temp-replicaof-<pid>-<random>.rdb
SYNC_FILE_PREFIX = "temp-replicaof-"


class LinkError(Exception):
    pass


def _remove_stale_sync_files(data_dir):
    """Removes the sync files a killed server left behind (this process' own are removed by their sync)."""
    mine = "%s%d-" % (SYNC_FILE_PREFIX, os.getpid())
    for name in os.listdir(data_dir):
        if name.startswith(SYNC_FILE_PREFIX) and not name.startswith(mine):
            try:
                os.unlink(os.path.join(data_dir, name))
            except OSError:
                pass


class ValkeyReplicaLink:
    """The pipeline's gate while this server is a replica of host:port (see commands/pipeline.py admit)."""

    checks_stale = True

    def __init__(self, server, host: str, port: int):
        self.server = server
        self.host = host
        self.port = port
        self.state = "connect"          # connect, connecting, sync, connected (ROLE's words)
        self.offset = 0                 # replication offset applied
        self.durable_offset = 0         # the offset up to which the writes applied are committed (REPLCONF ACK)
        self._marks = collections.deque()   # (journal index, offset): offsets waiting for that index's commit
        self._owed = 0                  # a GETACK was answered short of this offset: ACK again on commits
        self._ack_writer = None         # the link's writer while it streams
        self.replid = "?"
        self.last_io_s = time.monotonic()
        self.sync_started_s = 0.0
        self.full_syncs = 0
        self._writer = None
        self._stopped = False
        self.session = Session(authenticated=True)
        self.session.from_primary = True
        self.session.addr = "%s:%d" % (host, port)
        server.pipeline.new_context(self.session).may_block = False
        self._task = server.loop.create_task(self._run())

    # -- the gate ---------------------------------------------------------------------------------------
    def is_replica(self) -> bool:
        return True

    @property
    def redirect_to(self) -> str:
        """Where a client with CLIENT CAPA redirect is sent (-REDIRECT host:port)."""
        return "%s:%d" % (self.host, self.port)

    def serving_error(self, write):
        if self.state != "connected" and not self.server.config["replica-serve-stale-data"]:
            return messages.MASTERDOWN_STALE
        return None

    # -- control ----------------------------------------------------------------------------------------
    def stop(self):
        self._stopped = True
        if self._writer is not None:
            self._writer.close()
        self._task.cancel()

    def info_fields(self) -> dict:
        up = self.state == "connected"
        return {"master_host": self.host, "master_port": self.port,
                "master_link_status": "up" if up else "down",
                "master_last_io_seconds_ago": int(time.monotonic() - self.last_io_s) if up else -1,
                "master_sync_in_progress": 1 if self.state == "sync" else 0,
                "slave_read_repl_offset": self.offset, "slave_repl_offset": self.offset,
                "slave_priority": 100, "slave_read_only": 1, "replica_announced": 1}

    # -- the link ---------------------------------------------------------------------------------------
    async def _run(self):
        while not self._stopped:
            try:
                await self._sync_once()
            except asyncio.CancelledError:
                raise
            except (OSError, EOFError, asyncio.TimeoutError, LinkError, rdbvalue.RdbError,
                    hiredis.ProtocolError) as exc:
                if not self._stopped:
                    log.warning("replication link with %s:%d: %s; retrying", self.host, self.port, exc or type(exc))
            finally:
                if self._writer is not None:
                    self._writer.close()
                    self._writer = None
            self.state = "connect"
            if not self._stopped:
                await asyncio.sleep(RETRY_S)

    async def _sync_once(self):
        self.state = "connecting"
        reader, writer = await asyncio.wait_for(asyncio.open_connection(self.host, self.port), CONNECT_TIMEOUT_S)
        self._writer = writer
        cfg = self.server.config

        async def call(*args):
            writer.write(encode_command(args))
            while True:
                line = await asyncio.wait_for(reader.readline(), 60)
                if not line:
                    raise EOFError("the primary closed the connection")
                if line.strip():                 # a primary sends bare newlines as keep-alives
                    return line.rstrip(b"\r\n")

        if (await call(b"PING"))[:1] == b"-" and not cfg["primaryauth"]:
            raise LinkError("the primary wants AUTH: set primaryauth (and primaryuser)")
        if cfg["primaryauth"]:
            auth = [cfg["primaryuser"].encode()] if cfg["primaryuser"] else []
            answer = await call(b"AUTH", *auth, cfg["primaryauth"].encode())
            if answer != b"+OK":
                raise LinkError("AUTH refused: %s" % answer.decode("utf-8", "replace"))
        await call(b"REPLCONF", b"listening-port", b"%d" % (cfg["port"] or cfg["tls-port"]))
        await call(b"REPLCONF", b"capa", b"eof", b"capa", b"psync2")
        # Valkey 9 sends a replica the newest RDB version its version reads, else RDB 11, where a hash with
        # field TTLs cannot be written (the sync fails). This loader reads Valkey 9.0's RDB 80; a primary that
        # has no REPLCONF VERSION (Redis, Valkey 8) answers an error, which changes nothing.
        await call(b"REPLCONF", b"version", REPLICA_RDB_VERSION_OF)
        answer = await call(b"PSYNC", b"?", b"-1")
        if not answer.startswith(b"+FULLRESYNC"):
            raise LinkError("PSYNC answered %s" % answer.decode("utf-8", "replace"))
        _, replid, offset = answer.split(b" ")
        self.state = "sync"
        self.sync_started_s = time.monotonic()
        _remove_stale_sync_files(self.server.dir)
        fd, path = tempfile.mkstemp(prefix="%s%d-" % (SYNC_FILE_PREFIX, os.getpid()), suffix=".rdb",
                                    dir=self.server.dir)
        try:
            try:
                with open(fd, "wb") as f:
                    rdb_bytes = await self._read_payload(reader, f)
            except OSError as exc:
                raise with_path(exc, path) from exc     # a full data directory: say which file
            self._marks.clear()
            self.durable_offset, self._owed = 0, 0
            keys = await self._load(path, writer)
        finally:
            os.unlink(path)
        self.replid = replid.decode()
        self._applied_to(int(offset))     # the stream's start counts once the loaded data is committed
        self.full_syncs += 1
        self.state = "connected"
        took_s = time.monotonic() - self.sync_started_s
        log.info("replica of %s:%d: full sync of %d bytes, %d keys in %.2fs; streaming from offset %d", self.host,
                 self.port, rdb_bytes, keys, took_s, self.offset)
        durability = self.server.durability
        self._ack_writer = writer
        durability.commit_listeners.append(self._on_commit)
        acks = self.server.loop.create_task(self._ack_loop(writer))
        try:
            await self._stream(reader, writer)
        finally:
            acks.cancel()
            self._ack_writer = None
            if self._on_commit in durability.commit_listeners:
                durability.commit_listeners.remove(self._on_commit)

    async def _read_payload(self, reader, f) -> int:
        """Writes the primary's RDB to the file f; returns its size in bytes."""
        while True:
            line = await asyncio.wait_for(reader.readline(), SYNC_READ_TIMEOUT_S)
            if not line:
                raise EOFError("the primary closed the connection during the sync")
            self.last_io_s = time.monotonic()
            if line in (b"\n", b"\r\n"):
                continue                   # keep-alive newlines while the primary prepares the RDB
            if line[:1] == b"-":
                raise LinkError("the primary refused the sync: %s" % line.strip().decode("utf-8", "replace"))
            if line[:1] != b"$":
                raise LinkError("unexpected sync header %r" % line[:40])
            break
        header = line[1:].rstrip(b"\r\n")
        written = 0
        if header.startswith(b"EOF:"):
            # diskless: the size is not known; the payload ends with the 40-byte mark, held back until the
            # next bytes show it was not the end
            mark = header[4:]
            if len(mark) != EOF_MARK_BYTES:
                raise LinkError("bad EOF mark")
            tail = b""
            while True:
                chunk = await asyncio.wait_for(reader.read(SYNC_READ_BYTES), SYNC_READ_TIMEOUT_S)
                if not chunk:
                    raise EOFError("the primary closed the connection during the sync")
                self.last_io_s = time.monotonic()
                data = tail + chunk
                done = data.endswith(mark)
                f.write(data[:-EOF_MARK_BYTES])
                written += max(0, len(data) - EOF_MARK_BYTES)
                if done:
                    return written
                tail = data[-EOF_MARK_BYTES:]
        if not header.isdigit():
            raise LinkError("bad sync header %r" % line[:40])
        remaining = int(header)
        while remaining:
            chunk = await asyncio.wait_for(reader.read(min(remaining, SYNC_READ_BYTES)), SYNC_READ_TIMEOUT_S)
            if not chunk:
                raise EOFError("the primary closed the connection during the sync")
            self.last_io_s = time.monotonic()
            f.write(chunk)
            remaining -= len(chunk)
            written += len(chunk)
        return written

    def _apply(self, argv):
        """One command from the primary, through the pipeline as the primary's session (journaled)."""
        pipeline = self.server.pipeline
        pipeline.mark()
        reply, _ticket, _cmd = pipeline.process(self.session, argv)
        if type(reply) is ErrorReply and not reply.text.startswith((messages.UNKNOWN_COMMAND_PREFIX, "NOSCRIPT")):
            # a write that did not happen here would leave this replica behind for good: sync again
            raise LinkError("applying %r failed: %s" % (argv[0], reply.text))

    async def _load(self, path, writer) -> int:
        """Replaces the dataset with the RDB file's, as the primary's session (journaled), in slices of the loop
        (recovery/loading.py); returns the number of keys. Each key is RESTOREd from its payload as the file has
        it (no decode and re-dump). Meanwhile the primary gets a newline every second, as Valkey's replica sends
        while it loads (replicationSendNewlineToPrimary): the primary counts this replica online once the RDB is
        sent and drops one it heard nothing from for repl-timeout (60 s), which a long load would pass, and each
        resync would then fail the same way; a newline refreshes its clock without an ACK, which would start a
        diskless sync's command stream before this replica reads it."""
        server = self.server
        server.load_progress = progress = LoadProgress(os.path.getsize(path))
        server.loading = True
        slicer = Slicer()
        keepalive = server.loop.create_task(self._newlines(writer))
        try:
            return await slicer.run(self._load_steps(path, progress))
        finally:
            keepalive.cancel()
            server.loading = False
            server.load_progress = None
            log.info("replica of %s:%d: the sync's load took %s", self.host, self.port, slicer.summary())

    def _load_steps(self, path, progress):
        """_load's work as a generator: yields after each key, library and record read."""
        server = self.server
        apply = self._apply
        apply([b"FLUSHALL"])
        apply([b"FUNCTION", b"FLUSH"])
        restore = server.delayed_load(apply)
        selected, keys = None, 0
        with open(path, "rb", buffering=0) as f:
            def read(n):
                data = f.read(n)
                progress.loaded_bytes += len(data)
                return data
            for rec in rdbvalue.iter_rdb(read, server.keyspace.clock_ms):
                kind = rec[0]
                if kind == "key":
                    _, db_id, key, payload, expire_at_ms = rec
                    if db_id != selected:
                        apply([b"SELECT", b"%d" % db_id])
                        selected = db_id
                    restore([b"RESTORE", key, b"%d" % (expire_at_ms or 0), payload, b"REPLACE", b"ABSTTL"])
                    keys += 1
                elif kind == "function":
                    apply([b"FUNCTION", b"LOAD", b"REPLACE", rec[1]])
                elif kind == "resizedb" and fastpath.core is not None and rec[1] < len(server.keyspace.dbs):
                    # the dicts sized for the whole load first: no insert rebuilds one (a stall of its own)
                    server.keyspace.dbs[rec[1]].reserve(rec[2], rec[3], fastpath.core.presized_dict)
                elif kind == "aux" and rec[1] == b"used-mem" and rec[2].isdigit():
                    progress.rdb_used_mem = int(rec[2])     # INFO loading_rdb_used_mem, as Valkey reads it
                yield
        apply([b"SELECT", b"0"])
        return keys

    async def _stream(self, reader, writer):
        parser = hiredis.Reader()
        while not self._stopped:
            data = await reader.read(1 << 16)
            if not data:
                raise EOFError("the primary closed the connection")
            self.last_io_s = time.monotonic()
            parser.feed(data)
            while True:
                argv = parser.gets()
                if argv is False:
                    break
                if not isinstance(argv, list) or not argv:
                    raise LinkError("unexpected data in the replication stream")
                log.debug("from the primary: %r", argv[:3])
                name = argv[0].lower()
                if name == b"replconf" and len(argv) > 1 and argv[1].lower() == b"getack":
                    self._ack(writer)
                    if self.durable_offset < self.offset:
                        self._owed = self.offset
                elif name != b"ping":
                    self._apply(argv)
                # the primary sends canonical multibulk
                self._applied_to(self.offset + len(encode_command(argv)))

    # -- acknowledgements: committed offsets only ---------------------------------------------------------
    def _applied_to(self, offset):
        """Everything up to `offset` is applied: durable at once when nothing issued to the journal is
        uncommitted, else once the newest entry issued so far commits."""
        self.offset = offset
        durability = self.server.durability
        pending = durability.assigned
        if pending <= durability.committed:
            self._marks.clear()
            self.durable_offset = offset
            return
        marks = self._marks
        if marks and marks[-1][0] == pending:
            marks[-1] = (pending, offset)
        else:
            marks.append((pending, offset))

    def _on_commit(self, index):
        """A commit listener (Durability.on_commit) while the link streams."""
        marks = self._marks
        advanced = False
        while marks and marks[0][0] <= index:
            self.durable_offset = marks.popleft()[1]
            advanced = True
        if advanced and self._owed and self._ack_writer is not None:
            self._ack(self._ack_writer)
            if self.durable_offset >= self._owed:
                self._owed = 0

    def _ack(self, writer):
        writer.write(encode_command([b"REPLCONF", b"ACK", b"%d" % self.durable_offset]))

    async def _newlines(self, writer):
        while True:
            await asyncio.sleep(ACK_INTERVAL_S)
            writer.write(b"\n")

    async def _ack_loop(self, writer):
        # the first ACK at once: a primary that sent the RDB diskless streams commands only after it
        while True:
            self._ack(writer)
            await asyncio.sleep(ACK_INTERVAL_S)
