"""`durakv migrate --source HOST:PORT --target HOST:PORT`: a running Valkey/Redis (standalone, or every primary of
a cluster) into a running durakv server or cluster, online, over the replication protocol.

For each source primary the tool is a replica (replication.c's replica side, run by a client): AUTH, REPLCONF
listening-port / capa eof / capa psync2, PSYNC ? -1; the RDB of the full sync goes to a temporary file as it
arrives (sized or diskless, never whole in memory) and is imported from there (importer.py: RESTORE on the
owning durakv primary); then every command of the replication stream is forwarded to the durakv primary that
owns its keys (durakv's own command table finds them, as COMMAND GETKEYS does), and the replication offset
the target has acknowledged goes back as REPLCONF ACK (every second, and on GETACK), so the source's WAIT
and INFO see what durakv holds. A durakv target in `sync` mode acknowledges a write only once it is
committed, so "acknowledged" is durable.

The cut-over (--cutover) pauses writes on every source primary (CLIENT PAUSE WRITE), waits until each one's
master_repl_offset is acknowledged by the target, and reports the lag it had; clients may switch then.
--verify compares the key count of every slot and the value (DUMP payloads decoded by keyspace/rdbvalue and
compared re-encoded) of every key, or of --verify-sample N of them.

A dropped link (the source restarted, or a cluster source failed over) is synced again from scratch, from the
node that serves the link's slots now; the target's keys of those slots that the new RDB lacks were deleted
meanwhile and are deleted on the target too (it holds only what migrate wrote). MULTI/EXEC in the stream are
forwarded as their commands (a transaction's keys may belong to different target shards).
"""

import os
import random
import sys
import tempfile
import threading
import time

from ... import commands
from ...commands import registry
from ...keyspace import rdbvalue
from ...protocol.client import RespClient, RespError
from ...protocol.resp import encode_command
from ...routing import SLOTS, key_slot
from ..bench.slots import parse_cluster_slots
from .importer import import_rdb
from .target import Target, TargetError

ACK_INTERVAL_S = 1.0
IDLE_READ_S = 0.05                 # a quiet stream: forward what was read after this long
FORWARD_BATCH = 2000               # commands read before the target is flushed
CUTOVER_TIMEOUT_S = 60.0
VERIFY_BATCH = 1000
PAUSE_MS = 60_000                  # CLIENT PAUSE WRITE at the cut-over: longer than any wait for the last offset
SKIP = {b"ping", b"multi", b"exec", b"select", b"replconf"}


class MigrateError(Exception):
    pass


class LinkLost(MigrateError):
    """The replication link to a source dropped: the link syncs again from scratch (RESUME_*)."""


RESUME_ATTEMPTS = 8                # full resynchronizations a link tries after its link dropped ...
RESUME_DEADLINE_S = 180.0          # ... within this long
RESUME_FIRST_S = 1.0


def _info(conn, section):
    text = conn.execute("INFO", section).decode("utf-8", "replace")
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line and not line.startswith("#"))


def source_primaries(host, port, ssl_context=None, user=None, password=None):
    """{(host, port): [(first, last) slot ranges] or None (a standalone server: every slot)} of the source."""
    with _connect(host, port, ssl_context, user, password) as c:
        if _info(c, "cluster").get("cluster_enabled") != "1":
            return {(host, port): None}
        ranges = parse_cluster_slots(c.execute("CLUSTER", "SLOTS"), host)
    out = {}
    for first, last, addr in ranges:
        out.setdefault(addr, []).append((first, last))
    return out


def _owner_now(known, slot, ssl_context, user, password):
    """The source node that serves `slot` now, asked of any node in `known` (after a source failover)."""
    for addr in known:
        try:
            with _connect(addr[0], addr[1], ssl_context, user, password, timeout_s=5.0) as c:
                for first, last, owner in parse_cluster_slots(c.execute("CLUSTER", "SLOTS"), addr[0]):
                    if first <= slot <= last:
                        return owner
        except (OSError, RespError):
            continue
    return None


def _connect(host, port, ssl_context, user, password, timeout_s=30.0):
    c = RespClient(host, port, timeout_s=timeout_s, ssl_context=ssl_context)
    if password is not None:
        c.execute(*(("AUTH", user, password) if user else ("AUTH", password)))
    return c


class SourceLink(threading.Thread):
    """One source primary followed as a replica, its writes forwarded to the target."""

    def __init__(self, addr, source_auth, target_args, tmp_dir, slot_ranges=None, known_sources=()):
        super().__init__(daemon=True, name=f"source {addr[0]}:{addr[1]}")
        self.addr = addr
        self.slot_ranges = slot_ranges          # this source's slots (a cluster's primary), None: every slot
        self.known_sources = list(known_sources) or [addr]
        self.source_auth = source_auth          # (ssl_context, user, password)
        self.target_args = target_args          # Target's (host, port, kwargs)
        self.tmp_dir = tmp_dir
        self.state = "connecting"               # connecting, sync, loading, streaming, done, failed
        self.error = None
        self.offset = 0                         # the replication offset of the last command read
        self.acked = 0                          # ... of the last one the target acknowledged
        self.rdb_bytes = 0
        self.loaded = None                      # importer Counts of the full sync
        self.forwarded = 0
        self.resyncs = 0                        # full resynchronizations after a dropped link
        self.stale_deleted = 0                  # target keys a resynchronization found gone from the source
        self.stop_event = threading.Event()
        self.loaded_event = threading.Event()
        self.target = None

    def run(self):
        try:
            self._run()
            self.state = "done"
        except Exception as exc:  # noqa: BLE001 - reported by the main thread
            self.error = exc
            self.state = "failed"
            self.loaded_event.set()

    def _run(self):
        commands.load_all()                     # the table that finds a forwarded command's keys
        host, port, kw = self.target_args
        self.target = Target(host, port, **kw)
        deadline = time.monotonic() + RESUME_DEADLINE_S
        delay_s = RESUME_FIRST_S
        try:
            while True:
                try:
                    self._sync_and_stream()
                    return
                except (LinkLost, OSError) as exc:
                    if self.stop_event.is_set():
                        return
                    if self.resyncs >= RESUME_ATTEMPTS or time.monotonic() > deadline:
                        raise MigrateError(f"the link dropped ({exc}) and did not come back after "
                                           f"{self.resyncs} resynchronization(s)") from exc
                    self.state = "reconnecting"
                    time.sleep(delay_s)
                    delay_s = min(delay_s * 2, 10.0)
                    self.resyncs += 1
                    if self.slot_ranges:
                        owner = _owner_now(self.known_sources + [self.addr], self.slot_ranges[0][0],
                                           *self.source_auth)
                        if owner is not None:
                            self.addr = owner
                            if owner not in self.known_sources:
                                self.known_sources.append(owner)
        finally:
            self.target.close()

    def _sync_and_stream(self):
        ssl_context, user, password = self.source_auth
        conn = _connect(self.addr[0], self.addr[1], ssl_context, user, password, timeout_s=300.0)
        try:
            conn.execute("REPLCONF", "listening-port", str(conn.sock.getsockname()[1]))
            conn.execute("REPLCONF", "capa", "eof", "capa", "psync2")
            conn.send("PSYNC", "?", "-1")
            answer = conn.read_line()        # the RDB follows on the same bytes: not through the RESP reader
            words = answer.split()
            if not words or words[0] != b"FULLRESYNC":
                raise MigrateError(f"PSYNC answered {answer!r}")
            self.offset = self.acked = int(words[2])
            self.state = "sync"
            fd, path = tempfile.mkstemp(prefix="durakv-migrate-", suffix=".rdb", dir=self.tmp_dir)
            try:
                with os.fdopen(fd, "wb") as f:
                    def write(chunk):
                        f.write(chunk)
                        self.rdb_bytes += len(chunk)
                    conn.read_payload_into(write)
                self.state = "loading"
                restored = set() if self.resyncs else None
                loaded = import_rdb(path, self.target, restored=restored)
            finally:
                os.unlink(path)
            if restored is not None:
                self._drop_stale(restored, loaded.databases)
            else:
                self.loaded = loaded
            self.loaded_event.set()
            self.state = "streaming"
            self._stream(conn)
        finally:
            conn.close()

    def _mine(self, slot):
        return self.slot_ranges is None or any(a <= slot <= b for a, b in self.slot_ranges)

    def _drop_stale(self, restored, databases):
        """After a resynchronization: the target's keys of this source's slots that the new RDB does not hold
        were deleted on the source while the link was down (the target holds only what migrate wrote)."""
        target = self.target
        for db in sorted(set(databases) | {0}):
            for addr in target.primaries():
                with _connect(addr[0], addr[1], target.ssl_context, target.user, target.password) as c:
                    keys = _scan_keys(c, db)
                for k in keys:
                    if (db, k) not in restored and self._mine(key_slot(k)):
                        target.write(db, ("DEL", k), k)
                        self.stale_deleted += 1
        target.flush()

    def _stream(self, conn):
        conn.settimeout(IDLE_READ_S)
        db = 0
        last_ack = 0.0
        while not self.stop_event.is_set():
            ack_now = False
            for _ in range(FORWARD_BATCH):
                try:
                    argv = conn.read()
                except (TimeoutError, OSError) as exc:
                    if isinstance(exc, TimeoutError) or "timed out" in str(exc):
                        break
                    raise LinkLost(f"the source closed the replication link: {exc}") from exc
                if isinstance(argv, RespError) or not isinstance(argv, list) or not argv:
                    raise MigrateError(f"unexpected data in the replication stream: {argv!r:.80}")
                self.offset += len(encode_command(argv))
                name = argv[0].lower()
                if name in SKIP:
                    if name == b"select":
                        db = int(argv[1])
                        self.target.check_db(db)
                    elif name == b"replconf" and len(argv) > 1 and argv[1].lower() == b"getack":
                        ack_now = True
                    continue
                self._forward(db, argv)
            self.target.flush()
            self.acked = self.offset
            if ack_now or time.monotonic() - last_ack >= ACK_INTERVAL_S:
                conn.settimeout(30.0)
                conn.send("REPLCONF", "ACK", str(self.acked))
                conn.settimeout(IDLE_READ_S)
                last_ack = time.monotonic()

    def _forward(self, db, argv):
        cmd = registry.lookup(argv)
        if cmd is None:
            raise MigrateError(f"the source sent {argv[0]!r}, a command durakv does not have")
        keys = cmd.keys(argv)
        if keys:
            slots = {key_slot(k) for k in keys}
            if len(slots) > 1 and self.target.cluster:
                raise MigrateError(f"{argv[0]!r} writes keys of {len(slots)} slots; the target cluster takes "
                                   f"one slot per command")
            self.target.write(db, tuple(argv), keys[0])
        else:
            self.target.write(db, tuple(argv))          # keyless (FLUSHALL, FUNCTION LOAD ...): every primary
        self.forwarded += 1


def cutover(links, source_auth, timeout_s=CUTOVER_TIMEOUT_S):
    """Pauses writes on every source primary and waits until the target acknowledged each one's offset.
    Returns {addr: lag in bytes when the pause began}."""
    ssl_context, user, password = source_auth
    offsets, lags = {}, {}
    for link in links:
        with _connect(link.addr[0], link.addr[1], ssl_context, user, password) as c:
            c.execute("CLIENT", "PAUSE", str(PAUSE_MS), "WRITE")
            offsets[link.addr] = int(_info(c, "replication")["master_repl_offset"])
            lags[link.addr] = max(0, offsets[link.addr] - link.acked)
    deadline = time.monotonic() + timeout_s
    while any(link.acked < offsets[link.addr] for link in links):
        for link in links:
            if link.error is not None:
                raise MigrateError(f"{link.name}: {link.error}")
        if time.monotonic() > deadline:
            raise MigrateError("the target did not acknowledge the sources' last writes within %g s" % timeout_s)
        time.sleep(0.01)
    return lags


def _scan_keys(conn, db):
    conn.execute("SELECT", str(db))
    cursor, keys = b"0", []
    while True:
        cursor, batch = conn.execute("SCAN", cursor, "COUNT", "1000")
        keys.extend(batch)
        if cursor == b"0":
            return keys


def _normalized(payload):
    value, ttls = rdbvalue.load_with_field_ttls(payload)
    return rdbvalue.dump(value, ttls)


def _shown(payload):
    value = rdbvalue.load_with_field_ttls(payload)[0]
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def verify(source_addrs, source_auth, target, dbs=(0,), sample=None, rng=None):
    """Per-slot key counts and values compared; returns a list of differences (empty: the same)."""
    ssl_context, user, password = source_auth
    problems = []
    for db in dbs:
        src_slots, src_keys = [0] * SLOTS, []
        for addr in source_addrs:
            with _connect(addr[0], addr[1], ssl_context, user, password) as c:
                keys = _scan_keys(c, db)
            src_keys.extend((addr, k) for k in keys)
            for k in keys:
                src_slots[key_slot(k)] += 1
        dst_slots = [0] * SLOTS
        for addr in target.primaries():
            with _connect(addr[0], addr[1], target.ssl_context, target.user, target.password) as c:
                for k in _scan_keys(c, db):
                    dst_slots[key_slot(k)] += 1
        diff = [s for s in range(SLOTS) if src_slots[s] != dst_slots[s]]
        if diff:
            problems.append(f"db {db}: {len(diff)} slot(s) with other key counts, e.g. slot {diff[0]}: "
                            f"source {src_slots[diff[0]]}, target {dst_slots[diff[0]]}")
        chosen = src_keys if sample is None else (rng or random).sample(src_keys, min(sample, len(src_keys)))
        by_source = {}
        for addr, k in chosen:
            by_source.setdefault(addr, []).append(k)
        for addr, keys in by_source.items():
            for at in range(0, len(keys), VERIFY_BATCH):
                part = keys[at:at + VERIFY_BATCH]
                with _connect(addr[0], addr[1], ssl_context, user, password) as c:
                    c.execute("SELECT", str(db))
                    theirs = dict(zip(part, c.pipeline([("DUMP", k) for k in part])))
                by_owner = {}
                for k in part:
                    owner = target.slots.node_for(key_slot(k)) if target.cluster else (target.host, target.port)
                    by_owner.setdefault(owner, []).append(k)
                for owner, owned in by_owner.items():
                    with _connect(owner[0], owner[1], target.ssl_context, target.user, target.password) as d:
                        d.execute("SELECT", str(db))
                        ours = d.pipeline([("DUMP", k) for k in owned])
                    for k, payload in zip(owned, ours):
                        if theirs[k] is None:
                            continue                  # gone from the source meanwhile (expired)
                        if payload is None or isinstance(payload, RespError):
                            problems.append(f"db {db}: key {k!r} is missing on the target ({payload})")
                        elif _normalized(payload) != _normalized(theirs[k]):
                            problems.append(f"db {db}: key {k!r} differs: source {_shown(theirs[k])}, "
                                            f"target {_shown(payload)}")
    return problems


def progress_line(links, stream=sys.stderr):
    parts = []
    for link in links:
        loaded = link.loaded.keys if link.loaded else 0
        parts.append(f"{link.addr[0]}:{link.addr[1]} {link.state} rdb {link.rdb_bytes:,} B, {loaded:,} keys, "
                     f"{link.forwarded:,} cmds, lag {max(0, link.offset - link.acked):,} B")
    stream.write("\rmigrate: " + " | ".join(parts) + "   ")
    stream.flush()
