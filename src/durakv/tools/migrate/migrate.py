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

The cut-over (--cutover) first streams until the target acknowledged each source's offset as the catch-up
found it (so the pause does not wait for what was written during the full sync), then pauses writes on every
source primary (CLIENT PAUSE WRITE), waits until each one's master_repl_offset is acknowledged by the target,
and reports the lag it had; clients may switch then.
--verify compares the key count of every slot and the value of every key (or of --verify-sample N of them) as
DEBUG DIGEST-VALUE would: the DUMP payloads decoded by keyspace/rdbvalue and digested as debug.c does (order-free
for sets and hashes), with the key's expire flag and a hash's field TTLs.

A source transaction (MULTI ... EXEC in the stream: a client's, or a script's effects) is sent as one
MULTI/EXEC to the node owning its keys; one whose keys span slots of a cluster target goes as its commands
(a cluster takes one slot per transaction), and so do a standalone source's MSET/DEL of keys in several slots.

A dropped link (the source failed over or restarted, or a target node went away with writes in flight, whose
effect is then unknown) starts that source over: a new full sync is loaded, then the target's keys of its
slots that the new RDB lacks are deleted, at most FULL_SYNCS_MAX times per source.
"""

import os
import random
import sys
import tempfile
import threading
import time

from ... import commands
from ...commands import registry
from ...commands.debugging import object_digest
from ...keyspace import rdbvalue
from ...protocol.client import RespClient, RespError
from ...protocol.resp import encode_command
from ...routing import SLOTS, key_slot
from ..bench.slots import parse_cluster_slots
from .importer import import_rdb
from .target import Target, TargetLost, TargetUnavailable, Transaction

ACK_INTERVAL_S = 1.0
IDLE_READ_S = 0.05                 # a quiet stream: forward what was read after this long
SOURCE_SILENCE_S = 60.0            # nothing from the source this long (it PINGs every 10 s): the link is dead
FORWARD_BATCH = 2000               # commands read before the target is flushed ...
FORWARD_WINDOW_S = 0.05            # ... or this long after the first: the acked offset (the lag) moves on
CUTOVER_TIMEOUT_S = 60.0
VERIFY_BATCH = 1000
PAUSE_MS = 60_000                  # CLIENT PAUSE WRITE at the cut-over: longer than any wait for the last offset
FULL_SYNCS_MAX = 8                 # a source's full syncs in one run (the first and the resumptions)
RESUME_ATTEMPTS_MAX = 24           # tries to start a resumption (a target mid-failover refuses some)
RESYNC_FIRST_S = 0.5               # the wait before a resumption, doubled each time up to RESYNC_MAX_S
RESYNC_MAX_S = 5.0
LAG_SAMPLES = 600                  # source offsets remembered for the lag in seconds (one per progress poll)
SPLIT_PER_KEY = {b"mset": 2, b"msetnx": 2, b"del": 1, b"unlink": 1}   # name -> arguments per key


class MigrateError(Exception):
    pass


class LinkLost(MigrateError):
    """The replication link or a target connection dropped: the source starts over with a full sync."""


def _info(conn, section):
    text = conn.execute("INFO", section).decode("utf-8", "replace")
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line and not line.startswith("#"))


def source_primaries(host, port, ssl_context=None, user=None, password=None):
    """[((host, port), slots)] of every primary of the source: the node itself (slots None: all of them), or
    every master of CLUSTER SLOTS with the frozenset of its slots."""
    with _connect(host, port, ssl_context, user, password) as c:
        if _info(c, "cluster").get("cluster_enabled") != "1":
            return [((host, port), None)]
        ranges = parse_cluster_slots(c.execute("CLUSTER", "SLOTS"), host)
    owned = {}
    for first, last, addr in ranges:
        owned.setdefault(addr, set()).update(range(first, last + 1))
    return sorted((addr, frozenset(slots)) for addr, slots in owned.items())


def _cluster_nodes(reply, default_host):
    """Every node address (masters and replicas) in a CLUSTER SLOTS reply."""
    out = []
    for entry in reply or ():
        for node in entry[2:]:
            host = node[0].decode() if isinstance(node[0], bytes) else (node[0] or "")
            out.append((host if host not in ("", "?") else default_host, int(node[1])))
    return out


def _connect(host, port, ssl_context, user, password, timeout_s=30.0):
    c = RespClient(host, port, timeout_s=timeout_s, ssl_context=ssl_context)
    try:
        if password is not None:
            c.execute(*(("AUTH", user, password) if user else ("AUTH", password)))
    except BaseException:
        c.close()
        raise
    return c


class SourceLink(threading.Thread):
    """One source primary followed as a replica, its writes forwarded to the target. A dropped link (the source
    failed over or restarted, or a target node went away with writes in flight) starts that source over: its
    keys are dropped from the target and a new full sync loads them, up to FULL_SYNCS_MAX times."""

    def __init__(self, addr, source_auth, target_args, tmp_dir, slots=None, seeds=()):
        super().__init__(daemon=True, name=f"source {addr[0]}:{addr[1]}")
        self.addr = addr
        self.slots = slots                      # the source slots this link carries; None: every slot
        self.seeds = list(seeds)                # source nodes that can say who owns them after a failover
        self.source_auth = source_auth          # (ssl_context, user, password)
        self.target_args = target_args          # Target's (host, port, kwargs)
        self.tmp_dir = tmp_dir
        self.state = "connecting"               # connecting, sync, loading, streaming, resync, done, failed
        self.error = None
        self.offset = 0                         # the replication offset of the last command read
        self.acked = 0                          # ... of the last one the target acknowledged
        self.rdb_bytes = 0
        self.loaded = None                      # importer Counts of the last full sync
        self.full_syncs = 0
        self.stale_deleted = 0                  # target keys a resumption found gone from the source
        self._redirects_before = self._retries_before = 0   # of the writers of earlier full syncs
        self.resync_reasons = []
        self._syncs_at_last_reason = 0
        self.forwarded = 0
        self.split_transactions = 0             # source transactions whose keys span target slots
        self.databases = {0}                    # every database this source wrote to
        self.stop_event = threading.Event()
        self.loaded_event = threading.Event()
        self.target = None
        self._samples = []                      # (monotonic s, source master_repl_offset), oldest first

    @property
    def resyncs(self):
        """Full syncs after a dropped link."""
        return max(0, self.full_syncs - 1)

    @property
    def redirects(self):
        return self._redirects_before + (self.target.redirects if self.target is not None else 0)

    @property
    def retries(self):
        return self._retries_before + (self.target.retries if self.target is not None else 0)

    @property
    def label(self):
        return f"{self.addr[0]}:{self.addr[1]}"

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
        delay_s = RESYNC_FIRST_S
        attempts = 0
        while True:
            try:
                self._sync_and_stream()
                return
            except (LinkLost, OSError, TargetUnavailable) as exc:
                if self.stop_event.is_set():
                    return
                attempts += 1
                if not self.resync_reasons or self.full_syncs > self._syncs_at_last_reason:
                    self.resync_reasons.append(str(exc))      # one reason per resumption, not per try
                    self._syncs_at_last_reason = self.full_syncs
                if self.full_syncs >= FULL_SYNCS_MAX or attempts >= RESUME_ATTEMPTS_MAX:
                    raise MigrateError(f"the link dropped {len(self.resync_reasons)} time(s); gave up after "
                                       f"{self.full_syncs} full syncs and {attempts} tries; last: {exc}") from exc
                self.state = "resync"
                if self.stop_event.wait(delay_s):
                    return
                delay_s = min(delay_s * 2, RESYNC_MAX_S)
                self._find_primary()

    def _find_primary(self):
        """After a drop: the node that owns this link's slots now (a cluster source may have failed over)."""
        if self.slots is None:
            return
        ssl_context, user, password = self.source_auth
        for addr in [self.addr] + [a for a in self.seeds if a != self.addr]:
            try:
                with _connect(addr[0], addr[1], ssl_context, user, password, timeout_s=5.0) as c:
                    reply = c.execute("CLUSTER", "SLOTS")
            except (OSError, RespError):
                continue
            self.seeds = list(dict.fromkeys(self.seeds + _cluster_nodes(reply, addr[0])))
            owned = {}
            for first, last, owner in parse_cluster_slots(reply, addr[0]):
                owned.setdefault(owner, set()).update(range(first, last + 1))
            owner = next((o for o, slots in owned.items() if min(self.slots) in slots), None)
            if owner is None:
                continue
            if frozenset(owned[owner]) != self.slots:
                raise MigrateError(f"the source's slots moved while migrating ({len(self.slots)} slots were "
                                   f"on {self.label}, {owner[0]}:{owner[1]} has {len(owned[owner])} now)")
            self.addr = owner
            self.name = f"source {owner[0]}:{owner[1]}"
            return

    def _sync_and_stream(self):
        ssl_context, user, password = self.source_auth
        host, port, kw = self.target_args
        seeds = ()
        if self.target is not None:
            # a new writer: what the old one still had queued belongs to the stream the new RDB replaces
            self.target.close()
            self._redirects_before += self.target.redirects
            self._retries_before += self.target.retries
            seeds = self.target.primaries()
        # the full sync's RESTORE REPLACE may go twice after a dropped connection; the stream's writes may not
        self.target = Target(host, port, seeds=seeds, **kw)
        self.state = "connecting"
        conn = _connect(self.addr[0], self.addr[1], ssl_context, user, password, timeout_s=300.0)
        try:
            conn.execute("REPLCONF", "listening-port", str(conn.sock.getsockname()[1]))
            conn.execute("REPLCONF", "capa", "eof", "capa", "psync2")
            conn.send("PSYNC", "?", "-1")
            answer = conn.read_line()        # the RDB follows on the same bytes: not through the RESP reader
            words = answer.split()
            if not words or words[0] != b"FULLRESYNC":
                raise MigrateError(f"PSYNC answered {answer!r}")
            offset = int(words[2])
            # the source offsets polled so far belong to the stream this one replaces (a restarted source
            # counts from its new start): left in, they would show a lag that never ends
            self._samples = []
            self.full_syncs += 1
            self.state = "sync"
            self.rdb_bytes = 0
            fd, path = tempfile.mkstemp(prefix="durakv-migrate-", suffix=".rdb", dir=self.tmp_dir)
            try:
                with os.fdopen(fd, "wb") as f:
                    def write(chunk):
                        f.write(chunk)
                        self.rdb_bytes += len(chunk)
                    conn.read_payload_into(write)
                self.state = "loading"
                restored = set() if self.full_syncs > 1 else None
                loaded = import_rdb(path, self.target, progress=self._keepalive(conn), restored=restored)
            finally:
                os.unlink(path)
            if restored is not None:
                self._drop_stale(restored, loaded.databases)
            self.loaded = loaded
            self.databases |= loaded.databases
            self.offset = self.acked = offset       # the target holds the source as of the RDB now
            self.loaded_event.set()
            self.state = "streaming"
            self.target.resend_on_drop = False
            self._stream(conn)
        except ConnectionError as exc:
            raise LinkLost(f"the replication link from {self.label} dropped: {exc}") from exc
        except TimeoutError as exc:
            raise LinkLost(f"the replication link from {self.label} timed out: {exc}") from exc
        except TargetLost as exc:
            raise LinkLost(str(exc)) from exc
        finally:
            conn.close()

    @staticmethod
    def _keepalive(conn):
        """The importer's progress callback while the RDB loads: a source drops a replica that sent no
        REPLCONF ACK for repl-timeout (60 s by default; once the RDB is sent after a disk-based sync, the
        replica counts as online), and a large load takes longer. ACK 0 refreshes the source's clock without
        claiming an offset (the source keeps the highest acknowledged), so WAIT still counts only what the
        target holds."""
        last = [time.monotonic()]

        def tick(_counts, _total):
            if time.monotonic() - last[0] >= ACK_INTERVAL_S:
                conn.send("REPLCONF", "ACK", "0")
                last[0] = time.monotonic()
        return tick

    def _drop_stale(self, restored, databases):
        """After a resumption's load: the target's keys of this source's slots that the new RDB does not hold.
        The source deleted them (or let them expire) while the link was down, or a write whose reply a dead
        target node never sent had created them; the target holds only what migrate wrote."""
        target = self.target
        for db in sorted(set(databases) | self.databases):
            target.check_db(db)
            for addr in target.primaries():
                conn = target._connect(addr)
                conn.execute("SELECT", str(db))
                target.db_of[addr] = db
                cursor = b"0"
                while True:
                    cursor, keys = conn.execute("SCAN", cursor, "COUNT", "1000")
                    for k in keys:
                        if (db, k) not in restored and (self.slots is None or key_slot(k) in self.slots):
                            target.write(db, ("DEL", k), k)
                            self.stale_deleted += 1
                    if cursor == b"0":
                        break
            target.flush()

    def note_source_offset(self, offset):
        """The source's master_repl_offset now (polled by the progress line): the lag's clock."""
        samples = self._samples          # one list throughout: a new full sync replaces it from the link thread
        samples.append((time.monotonic(), offset))
        if len(samples) > LAG_SAMPLES:
            del samples[0]

    def sampled_at(self):
        """When the source's offset was last polled (monotonic s), or None since the last full sync began."""
        samples = self._samples
        return samples[-1][0] if samples else None

    def lag(self):
        """(bytes, seconds) the target is behind the source: the last polled master_repl_offset minus the
        acknowledged offset, and how long ago the source first had a byte the target has not acknowledged."""
        samples = self._samples
        if not samples:
            return max(0, self.offset - self.acked), 0.0
        acked = self.acked
        lag_bytes = max(0, samples[-1][1] - acked)
        first = next((t for t, off in samples if off > acked), None)
        return lag_bytes, (time.monotonic() - first) if first is not None else 0.0

    def _stream(self, conn):
        conn.settimeout(IDLE_READ_S)
        db = 0
        last_ack = 0.0
        last_data_s = time.monotonic()
        tx = None                  # [(db, argv)] between MULTI and EXEC
        done_offset = self.offset  # the offset after the last command outside an open transaction
        while not self.stop_event.is_set():
            ack_now = False
            window_end = time.monotonic() + FORWARD_WINDOW_S
            for _ in range(FORWARD_BATCH):
                if time.monotonic() >= window_end:
                    break
                try:
                    argv = conn.read()
                except TimeoutError:
                    if time.monotonic() - last_data_s > SOURCE_SILENCE_S:
                        raise LinkLost(f"nothing from {self.label} for {SOURCE_SILENCE_S:g} s")
                    break
                last_data_s = time.monotonic()
                if isinstance(argv, RespError) or not isinstance(argv, list) or not argv:
                    raise MigrateError(f"unexpected data in the replication stream: {argv!r:.80}")
                # the primary sends each command as the canonical multibulk encode_command writes, so its
                # length is what the primary counted in its offset
                self.offset += len(encode_command(argv))
                name = argv[0].lower()
                if name == b"multi":
                    tx = []
                elif name == b"exec":
                    if tx is not None:
                        self._forward_transaction(tx)
                    tx = None
                elif name == b"select":
                    db = int(argv[1])
                    self.target.check_db(db)
                    self.databases.add(db)
                elif name == b"replconf":
                    ack_now = ack_now or (len(argv) > 1 and argv[1].lower() == b"getack")
                elif name == b"ping":
                    pass
                elif tx is not None:
                    tx.append((db, argv))
                else:
                    self._forward(db, argv)
                if tx is None:
                    done_offset = self.offset
            self.target.flush()
            self.acked = done_offset
            if ack_now or time.monotonic() - last_ack >= ACK_INTERVAL_S:
                conn.settimeout(30.0)
                conn.send("REPLCONF", "ACK", str(self.acked))
                conn.settimeout(IDLE_READ_S)
                last_ack = time.monotonic()

    def _keys(self, argv):
        cmd = registry.lookup(argv)
        if cmd is None:
            raise MigrateError(f"the source sent {argv[0]!r}, a command durakv does not have")
        return cmd.keys(argv)

    def _forward(self, db, argv):
        keys = self._keys(argv)
        if keys:
            slots = {key_slot(k) for k in keys}
            if len(slots) > 1 and self.target.cluster:
                self._forward_split(db, argv, len(slots))
            else:
                self.target.write(db, tuple(argv), keys[0])
        else:
            self.target.write(db, tuple(argv))          # keyless (FLUSHALL, FUNCTION LOAD ...): every primary
        self.forwarded += 1

    def _forward_split(self, db, argv, slot_count):
        """A write of keys in several slots (a standalone source's MSET or DEL) into a cluster, which takes one
        slot per command: the per-key writes it is made of, each to its owner. MSETNX becomes SETs: the
        source propagates it only when it set every key."""
        step = SPLIT_PER_KEY.get(argv[0].lower())
        if step is None:
            raise MigrateError(f"{argv[0]!r} writes keys of {slot_count} slots; the target cluster takes one slot "
                               f"per command and durakv migrate cannot split this one")
        verb = b"SET" if step == 2 else argv[0].upper()
        for at in range(1, len(argv), step):
            self.target.write(db, (verb, *argv[at:at + step]), argv[at])

    def _forward_transaction(self, tx):
        """A source transaction (MULTI ... EXEC, or a script's effects) as one MULTI/EXEC on the node that owns
        its keys; one whose keys span slots of a cluster target (or whose commands change database) goes as
        its separate commands, each atomic alone."""
        if not tx:
            return
        dbs = {db for db, _ in tx}
        keys = [k for _, argv in tx for k in self._keys(argv)]
        slots = {key_slot(k) for k in keys}
        if len(dbs) == 1 and (not self.target.cluster or len(slots) <= 1):
            self.target.write(tx[0][0], Transaction(tuple(argv) for _, argv in tx), keys[0] if keys else None)
            self.forwarded += len(tx)
            return
        self.split_transactions += 1
        for db, argv in tx:
            self._forward(db, argv)


def _current_owners(links, source_auth):
    """{link: (host, port) of the source primary that owns the link's slots now}: a cluster source that failed
    over may still feed a link through its old primary (now a replica of the new one), which a pause of the
    old one would not stop."""
    ssl_context, user, password = source_auth
    owners = {link: link.addr for link in links}
    cluster_links = [link for link in links if link.slots is not None]
    seeds = list(dict.fromkeys(a for link in cluster_links for a in [link.addr] + link.seeds))
    for addr in seeds:
        if not cluster_links:
            break
        try:
            with _connect(addr[0], addr[1], ssl_context, user, password, timeout_s=5.0) as c:
                ranges = parse_cluster_slots(c.execute("CLUSTER", "SLOTS"), addr[0])
        except (OSError, RespError):
            continue
        for link in cluster_links:
            first = min(link.slots)
            owners[link] = next((o for lo, hi, o in ranges if lo <= first <= hi), link.addr)
        break
    return owners


def catch_up(links, poller, timeout_s=CUTOVER_TIMEOUT_S, report=None):
    """Streams until the target acknowledged every source's offset as it was when this began: what the source
    wrote during the full sync is then forwarded before the cut-over pauses its clients, so the pause lasts
    only as long as the writes of the catch-up itself take. Returns False if timeout_s passed first."""
    poller.poll(links)
    goals = {link: (link._samples or [(0, link.offset)])[-1][1] for link in links}
    deadline = time.monotonic() + timeout_s
    last_report = 0.0
    while any(link.acked < goals[link] for link in links):
        for link in links:
            if link.error is not None:
                raise MigrateError(f"{link.name}: {link.error}")
        if time.monotonic() > deadline:
            return False
        if report is not None and time.monotonic() - last_report >= 0.5:
            report()
            last_report = time.monotonic()
        time.sleep(0.01)
    return True


class CutoverTrigger:
    """When the cut-over may begin, asked a few times a second while the sources stream after the full sync.

    The moment is the first at which the hold file (if any) does not exist and either the target has caught up
    (lag_s given: every source's link streaming, its source offset polled within SAMPLE_FRESH_S, and its lag in
    seconds at most lag_s, without a break and without a new full sync, for stable_s) or max_s seconds have
    passed since the full sync. Without lag_s, max_s is the fixed window of --cutover-after (0: at once). The
    catch-up and the pause (catch_up, cutover) follow either way, so the moment chooses how short the pause is,
    never what the target holds."""

    SAMPLE_FRESH_S = 1.0            # an older polled source offset says nothing about the lag now

    def __init__(self, lag_s=None, stable_s=2.0, max_s=None, hold_file=None):
        self.lag_s, self.stable_s, self.max_s, self.hold_file = lag_s, stable_s, max_s, hold_file
        self.started = time.monotonic()
        self.caught_up_since = None     # monotonic s from which every link has been caught up
        self._full_syncs = None         # each link's full_syncs then: a resumption restarts the period
        self.held = False               # ready but for the hold file

    def _caught_up(self, links, now):
        for link in links:
            sampled_at = link.sampled_at()
            if link.error is not None or link.state != "streaming" or sampled_at is None:
                return False
            if now - sampled_at > self.SAMPLE_FRESH_S or link.lag()[1] > self.lag_s:
                return False
        return True

    def ready(self, links, now=None):
        """None while the cut-over waits, else why it may begin now (a phrase for the report). When only the
        hold file keeps it waiting, self.held is True."""
        now = time.monotonic() if now is None else now
        why = self._why(links, now)
        self.held = why is not None and self.hold_file is not None and os.path.exists(self.hold_file)
        return None if self.held else why

    def _why(self, links, now):
        elapsed = now - self.started
        if self.lag_s is None:
            return f"{self.max_s or 0:g} s after the full sync (--cutover-after)" if elapsed >= (self.max_s or 0) \
                else None
        if not self._caught_up(links, now):
            self.caught_up_since = self._full_syncs = None
        elif self._full_syncs != [link.full_syncs for link in links]:
            self.caught_up_since, self._full_syncs = now, [link.full_syncs for link in links]
        if self.caught_up_since is not None and now - self.caught_up_since >= self.stable_s:
            return (f"the target stayed within {self.lag_s:g} s of every source for {self.stable_s:g} s, "
                    f"{elapsed:.2f} s after the full sync")
        if self.max_s is not None and elapsed >= self.max_s:
            return (f"{self.max_s:g} s after the full sync (--cutover-after) without the target staying within "
                    f"{self.lag_s:g} s of every source for {self.stable_s:g} s")
        return None


def cutover(links, source_auth, timeout_s=CUTOVER_TIMEOUT_S):
    """Pauses writes on every source primary and waits until the target acknowledged each one's offset.
    Returns {link: (lag in bytes, lag in seconds) when the pause began}."""
    ssl_context, user, password = source_auth
    owners = _current_owners(links, source_auth)
    offsets, lags = {}, {}
    for addr in sorted(set(owners.values())):
        with _connect(addr[0], addr[1], ssl_context, user, password) as c:
            c.execute("CLIENT", "PAUSE", str(PAUSE_MS), "WRITE")
    for link in links:
        addr = owners[link]
        with _connect(addr[0], addr[1], ssl_context, user, password) as c:
            # after the pause: nothing moves it on. A new primary continues its old primary's offsets (psync2),
            # so a link still fed through the old one is compared with it just the same
            offsets[link] = int(_info(c, "replication")["master_repl_offset"])
        link.note_source_offset(offsets[link])
        lags[link] = link.lag()
    deadline = time.monotonic() + timeout_s
    while any(link.acked < offsets[link] for link in links):
        for link in links:
            if link.error is not None:
                raise MigrateError(f"{link.name}: {link.error}")
        if time.monotonic() > deadline:
            raise MigrateError("the target did not acknowledge the sources' last writes within %g s" % timeout_s)
        time.sleep(0.01)
    return lags


class OffsetPoller:
    """Each source primary's master_repl_offset (INFO replication) on a connection of its own, for the lag."""

    def __init__(self, source_auth):
        self.source_auth = source_auth
        self.conns = {}

    def poll(self, links):
        ssl_context, user, password = self.source_auth
        for link in links:
            conn = self.conns.get(link.addr)
            try:
                if conn is None:
                    conn = self.conns[link.addr] = _connect(link.addr[0], link.addr[1], ssl_context, user,
                                                            password, timeout_s=2.0)
                link.note_source_offset(int(_info(conn, "replication")["master_repl_offset"]))
            except (OSError, RespError, KeyError, ValueError):
                # a source that is down has no offset to show; its link resumes (or fails) on its own
                self.conns.pop(link.addr, None)
                if conn is not None:
                    conn.close()

    def close(self):
        for conn in self.conns.values():
            conn.close()
        self.conns.clear()


def _scan_keys(conn, db):
    conn.execute("SELECT", str(db))
    cursor, keys = b"0", []
    while True:
        cursor, batch = conn.execute("SCAN", cursor, "COUNT", "1000")
        keys.extend(batch)
        if cursor == b"0":
            return keys


def value_digest(payload, has_expire=False):
    """What two copies of a key must agree on: DEBUG DIGEST-VALUE of the value in its DUMP payload (debug.c's
    xorObjectDigest, commands/debugging.py: order-free for sets and hashes, in order for lists and strings,
    zsets by member and score, streams entry by entry, modules by their own digest) and its expire flag, plus
    a hash's field TTLs ({field: expire-at ms}, order-free), which the digest leaves out. A re-encoded payload
    is no such measure: a set's or a hash's members come out in whatever order the decoder's dict or set
    holds them, which differs between equal values built in another order (an intset read back from a
    hashtable)."""
    value, ttls = rdbvalue.load_with_field_ttls(payload)
    return object_digest(bytes(20), value, has_expire), dict(ttls or {})


def _shown(value):
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _members(value):
    """The members of a set or the fields of a hash (None for other types): what 'differs' can name."""
    if isinstance(value, (set, frozenset)):
        return value
    if isinstance(value, dict):
        return {(f, v) for f, v in value.items()}
    return None


def describe_difference(source_payload, target_payload, source_ttl=False, target_ttl=False) -> str:
    """Why two DUMP payloads of a key differ, for the report: the members only one side has (sets, hashes),
    else both values shown short."""
    (a, a_ttls), (b, b_ttls) = (rdbvalue.load_with_field_ttls(p) for p in (source_payload, target_payload))
    if type(a) is not type(b):
        return f"source is a {type(a).__name__} {_shown(a)}, target a {type(b).__name__} {_shown(b)}"
    ma, mb = _members(a), _members(b)
    if ma is not None and ma != mb:
        only_a, only_b = sorted(ma - mb), sorted(mb - ma)
        return (f"{len(only_a)} member(s) only on the source {_shown(only_a)}, {len(only_b)} only on the target "
                f"{_shown(only_b)}")
    if source_ttl != target_ttl:
        return f"the key has {'a' if source_ttl else 'no'} TTL on the source, {'a' if target_ttl else 'no'} TTL on the target"
    if (a_ttls or {}) != (b_ttls or {}):
        return f"field TTLs differ: source {_shown(a_ttls)}, target {_shown(b_ttls)}"
    return f"source {_shown(a)}, target {_shown(b)}"


def _dump_and_pttl(conn, keys):
    """[(DUMP payload or None, PTTL in ms)] of keys, one pipeline: the payload for the value's digest, the PTTL
    for its expire flag (-2: the key went away between the two)."""
    replies = conn.pipeline([cmd for k in keys for cmd in (("DUMP", k), ("PTTL", k))])
    for r in replies[1::2]:
        if isinstance(r, RespError):
            raise r
    return list(zip(replies[0::2], replies[1::2]))


def _count_keys_in_slots(conn, slots, counts):
    """counts[slot] = CLUSTER COUNTKEYSINSLOT slot for every slot given, pipelined."""
    slots = sorted(slots)
    for at in range(0, len(slots), VERIFY_BATCH):
        part = slots[at:at + VERIFY_BATCH]
        for slot, n in zip(part, conn.pipeline([("CLUSTER", "COUNTKEYSINSLOT", str(s)) for s in part])):
            if isinstance(n, RespError):
                raise n
            counts[slot] = n


def verify(source_addrs, source_auth, target, dbs=(0,), sample=None, rng=None, source_slots=None):
    """Per-slot key counts and values compared; returns a list of differences (empty: the same).
    source_slots, {addr: its slots} of a cluster source: with a cluster target too the counts are both sides'
    CLUSTER COUNTKEYSINSLOT (no SCAN of the target), else both are counted from SCAN."""
    ssl_context, user, password = source_auth
    problems = []
    by_slot_counts = source_slots is not None and target.cluster
    for db in dbs:
        src_slots, src_keys = [0] * SLOTS, []
        for addr in source_addrs:
            with _connect(addr[0], addr[1], ssl_context, user, password) as c:
                keys = _scan_keys(c, db)
                if by_slot_counts:
                    _count_keys_in_slots(c, source_slots[addr], src_slots)
            src_keys.extend((addr, k) for k in keys)
            if not by_slot_counts:
                for k in keys:
                    src_slots[key_slot(k)] += 1
        dst_slots = [0] * SLOTS
        for addr in target.primaries():
            with _connect(addr[0], addr[1], target.ssl_context, target.user, target.password) as c:
                if by_slot_counts:
                    _count_keys_in_slots(c, [s for s in range(SLOTS) if target.slots.node_for(s) == addr],
                                         dst_slots)
                else:
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
                    theirs = dict(zip(part, _dump_and_pttl(c, part)))
                by_owner = {}
                for k in part:
                    owner = target.slots.node_for(key_slot(k)) if target.cluster else (target.host, target.port)
                    by_owner.setdefault(owner, []).append(k)
                for owner, owned in by_owner.items():
                    with _connect(owner[0], owner[1], target.ssl_context, target.user, target.password) as d:
                        d.execute("SELECT", str(db))
                        ours = _dump_and_pttl(d, owned)
                    for k, (payload, ttl_ms) in zip(owned, ours):
                        source_payload, source_ttl_ms = theirs[k]
                        if source_payload is None or source_ttl_ms == -2:
                            continue                  # gone from the source meanwhile (expired)
                        if isinstance(source_payload, RespError):
                            problems.append(f"db {db}: key {k!r}: DUMP on the source failed: {source_payload}")
                            continue
                        if payload is None or isinstance(payload, RespError):
                            problems.append(f"db {db}: key {k!r} is missing on the target ({payload})")
                        elif ttl_ms == -2:
                            continue                  # expired on the target meanwhile (its TTL ran out first)
                        elif (value_digest(payload, ttl_ms >= 0)
                              != value_digest(source_payload, source_ttl_ms >= 0)):
                            problems.append(f"db {db}: key {k!r} differs: " + describe_difference(
                                source_payload, payload, source_ttl_ms >= 0, ttl_ms >= 0))
    return problems


def progress_line(links, stream=sys.stderr):
    parts = []
    for link in links:
        loaded = link.loaded.keys if link.loaded else 0
        lag_bytes, lag_s = link.lag()
        resync = f", {link.full_syncs} full syncs" if link.full_syncs > 1 else ""
        parts.append(f"{link.label} {link.state} rdb {link.rdb_bytes:,} B, {loaded:,} keys loaded, "
                     f"{link.forwarded:,} cmds, lag {lag_bytes:,} B / {lag_s:.1f} s{resync}")
    stream.write("\rmigrate: " + " | ".join(parts) + "   ")
    stream.flush()
