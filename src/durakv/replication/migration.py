"""Online resharding: a shard's primary moves the keys of its migrating slots to the target shard.

The coordination store's topology says which slots migrate where (`Topology.migrating`, set by `durakv
cluster reshard`); the source shard's primary does the moving, so the work survives any participant's crash:

1. While a slot migrates, the source serves the keys it still has, sends clients asking for a missing key to
   the target (-ASK), and the target serves them after ASKING (routing/decide.py). Multi-key commands whose keys
   are split answer -TRYAGAIN. So no key of a migrating slot is ever created on the source: the set of keys
   a migrating slot holds here only shrinks, and the slot index (keyspace/slotindex.py, kept by every write)
   lists them without a scan of the keyspace.
2. Keys move in pipelined batches, as Valkey's `MIGRATE host port "" 0 timeout REPLACE KEYS k1 k2 ...`: up to
   BATCH_KEYS keys (or BATCH_BYTES of values) of slots bound for one target, WINDOW batches on the wire. For a
   batch the source primary, in order: locks its keys (a write to one answers -TRYAGAIN until the move is
   over, from a script too; reads are served); waits until every write to them it had taken is committed (it
   must not hand over a value a crash could take back); reads each key's value and absolute expiry in one
   step, with no await and one clock between them (a key gone by then is not sent, so a key whose TTL passes
   while it is read never reaches the target without it); sends for each key `ASKING` + `SET key value [PXAT
   at]` (a string: the same result as RESTORE REPLACE ABSTTL without a DUMP payload's CRC-64 on both ends,
   most of a key's cost in Python) or `RESTORE-ASKING key at payload REPLACE ABSTTL` (any other type), then
   `WAITAOF 1 0 timeout`, in one write; takes the batch as moved only when every reply is +OK and WAITAOF
   reports the local commit: in sync mode the target's +OK already waits for its journal, in async mode it
   does not, and WAITAOF is the barrier that makes "acknowledged" mean "in the target's journal" in both; then
   deletes the moved keys through the pipeline (one DEL per slot, journaled like any write) and unlocks them
   once that DEL is committed.
   A slot's keys are those of every database (cluster-databases, Valkey 9): a batch holds keys of one
   database; the target connection is switched to it with `SELECT n` first (in the same write), and the local
   DEL runs in the same database, so a key of db n arrives in db n.
3. A slot with no key left in any database (its last DEL committed) is handed to the target in the topology by compare-and-set
   without waiting for the other migrating slots: the slots emptied within HANDOVER_S (or HANDOVER_SLOTS of
   them) go together in one compare-and-set, and every node applies the new topology.

What a crash leaves: locks live in memory only. If the source primary dies between the target's commit and its
own DEL, the key is in both shards; the new source primary (which took the journal over) still serves it,
writes go to it, and the resumed migration copies it again with REPLACE, so the target ends with the newest
value and nothing is applied twice (the target's copy received no writes: clients were served by the
source). If the target dies, its committed RESTOREs are in its journal; the others are sent again (REPLACE
makes that idempotent). If the reshard command dies, the topology still says what migrates (the marks) and
the nodes finish it.

Cancelling (CLUSTER CANCELSLOTMIGRATIONS, `cancel()` below) works slot by slot, so that every key ends in
exactly one shard and every slot has one owner that holds all its keys: the slots to cancel are held (no new
batch takes them), the batches on the wire finish, then a slot none of whose keys was ever sent and of which the
target holds no key (CLUSTER COUNTKEYSINSLOT there: clients sent on with -ASK create keys on the target) loses its
mark by compare-and-set and stays here; every other slot finishes its move. A client that was sent on with -ASK
just before and reaches the target after that count finds the target no longer importing the slot once it has
installed the new topology; what it wrote before that install is caught by the target, which marks such a slot
as migrating to itself again (replication/topology_sync.py), so the move of that slot completes instead.
"""

import asyncio
import collections
import logging
import time


from ..cluster.peers import PeerError, peer_address, peer_credentials
from ..commands.generic import dump_payload
from ..commands.session import Session
from ..protocol.aclient import REPLY_TIMEOUT_S, AsyncRespConnection
from ..protocol.resp import ErrorReply, encode_command
from ..routing import key_slot

log = logging.getLogger("durakv.migration")

BATCH_KEYS = 1000               # keys per pipelined batch (one round trip)
BATCH_BYTES = 4 * 1024 * 1024   # ... or fewer, once their payloads reach this many bytes
WINDOW = 4                      # batches sent before the replies of the oldest are awaited
HANDOVER_S = 0.25               # emptied slots wait at most this long to be handed over together
HANDOVER_SLOTS = 512            # ... or until this many are waiting
COMMIT_WAIT_MS = 10000          # WAITAOF's timeout on the target: past it the batch is sent again
IDLE_S = 0.05                   # between rounds while slots migrate and nothing could move
RETRY_S = 0.5                   # after a failed move (target down, failover under way)


_ASKING = encode_command((b"ASKING",))


class MigrationError(Exception):
    pass


class _Batch:
    """Keys of one or more slots (one target) on their way: locked from read to committed DEL."""

    __slots__ = ("db_id", "keys", "slots", "sent", "replies")

    def __init__(self, db_id, keys, slots):
        self.db_id = db_id      # the database all its keys are in (here and on the target)
        self.keys = keys        # every key locked for this batch
        self.slots = slots      # slot -> [keys of the batch in it]
        self.sent = []          # keys whose copy went out
        self.replies = 0        # replies expected ([SELECT,] ASKING + SET or RESTORE-ASKING per key, WAITAOF)


class SlotMigrator:
    """Runs on a shard's primary while its topology has slots migrating out of the shard."""

    def __init__(self, node):
        self.node = node
        self.server = node.server
        self.session = Session(authenticated=True)   # the migrator's own client: its DEL passes its locks
        self.server.pipeline.new_context(self.session)
        self.server.cluster_routing.migrator_session = self.session
        self.moved_keys = 0
        self.moved_slots = 0
        self.skipped_gone = 0          # listed keys found gone (expired, deleted) when read: not sent
        self.batches = 0
        self._target = None            # (node id, connection)
        self._task = None
        self._pending = {}             # slot -> target shard id: emptied, waiting to be handed over
        self._pending_since = 0.0
        self._last_del_ticket = 0      # the newest DEL of moved keys: committed before any hand-over
        self.touched = set()           # slots some batch of which was sent (or was about to be): keys may be there
        self.held = {}                 # slot -> topology revision: cancelled, not moved until that one is installed
        self._in_flight = collections.Counter()   # slot -> batches of it read and not finished yet
        self._round_lock = asyncio.Lock()          # one round at a time: they share the target connection

    def start(self):
        if self._task is None or self._task.done():
            self._task = self.server.loop.create_task(self._run())

    def _outgoing(self):
        routing = self.server.cluster_routing
        topology = routing.topology
        mine = routing.router.my_shard if routing.router is not None else None
        if topology is None or mine is None:
            return topology, {}
        return topology, {s: dst for s, (src, dst) in topology.migrating.items() if src == mine.id}

    async def _run(self):
        _topology, outgoing = self._outgoing()
        if outgoing:
            log.info("moving %d slot(s) out of this shard", len(outgoing))
        while self.node.role == "primary":
            topology, outgoing = self._outgoing()
            self._release_held(outgoing)
            if not outgoing:
                self._pending.clear()
                self._close_target()
                return
            try:
                async with self._round_lock:
                    moved = await self._round(topology, outgoing)
            except Exception as exc:  # noqa: BLE001 - the target may be failing over: retry the round
                log.warning("slot migration round failed (%r); retrying", exc)
                self._close_target()
                await asyncio.sleep(RETRY_S)
                continue
            if not moved:
                await asyncio.sleep(IDLE_S)

    def return_keys(self, slots, owner_id):
        """Sends the keys `slots` hold here to the slots' owner (shard id), as a migration round sends them, and
        deletes them here once the owner committed them: keys written here after a cancelled move
        (replication/topology_sync.py). Retried until done or this node is no longer primary."""
        async def run():
            while self.node.role == "primary":
                topology = self.server.cluster_routing.topology
                owner = topology.shard_by_id.get(owner_id) if topology is not None else None
                if owner is None or any(topology.shard_by_slot[s] is None or topology.shard_by_slot[s].id != owner_id
                                        for s in slots):
                    return      # the slots changed hands again meanwhile: what holds now decides
                try:
                    async with self._round_lock:
                        await self._round(topology, {s: owner_id for s in slots})
                    if not any(self._slot_count(s) for s in slots):
                        return
                except Exception as exc:  # noqa: BLE001 - the owner may be failing over: try again
                    log.warning("returning keys of slot(s) %s to their owner failed (%r); retrying", sorted(slots),
                                exc)
                    self._close_target()
                await asyncio.sleep(RETRY_S)
        self.server.loop.create_task(run())

    def _slot_indexes(self):
        """Every database's slot index, each checked against its keyspace: a size mismatch would mean a write
        path that bypassed it (a bug), and a slot must never be handed over with a key left behind, so it is
        rebuilt. [(db, index)]"""
        ks = self.server.keyspace
        if any(db.slots is None for db in ks.dbs):
            ks.index_slots(key_slot)
        for db in ks.dbs:
            if len(db.slots) != len(db.data):
                log.error("db %d: the slot index holds %d keys, the keyspace %d: rebuilding it", db.id,
                          len(db.slots), len(db.data))
                db.slots.rebuild(db.data)
        return [(db, db.slots) for db in ks.dbs]

    def _slot_count(self, slot) -> int:
        """The keys a slot still has here, in every database."""
        return sum(db.slots.count(slot) for db in self.server.keyspace.dbs if db.slots is not None)

    async def _round(self, topology, outgoing) -> int:
        """One pass over the outgoing slots, in slot order and grouped by target: their keys move in pipelined
        batches; a slot found empty joins the hand-over queue. Returns the keys moved."""
        indexes = self._slot_indexes()
        routing = self.server.cluster_routing
        by_target = {}
        for slot in sorted(outgoing):
            if slot in self._pending or slot in self.held:
                continue
            if self._slot_count(slot) == 0:
                self._queue_handover(slot, outgoing[slot])
                continue
            by_target.setdefault(outgoing[slot], []).append(slot)
        moved = 0
        for target_id, slots in by_target.items():
            target = topology.shard_by_id[target_id].primary
            conn = await self._connect(target)
            in_flight = collections.deque()   # batches sent, replies not read yet (oldest first)
            try:
                for batch in self._batches(indexes, slots):
                    self._in_flight.update(list(batch.slots))
                    in_flight.append(batch)
                    await self._read_and_send(conn, batch)
                    # WINDOW batches on the wire keep the target busy while this node reads the next one
                    while len(in_flight) >= WINDOW:
                        moved += await self._finish(conn, in_flight[0], outgoing)
                        self._in_flight.subtract(list(in_flight.popleft().slots))
                    await self._handover_if_due(outgoing)
                while in_flight:
                    moved += await self._finish(conn, in_flight[0], outgoing)
                    self._in_flight.subtract(list(in_flight.popleft().slots))
            except BaseException:
                # a batch sent but not finished keeps no lock: its keys are still here and will be sent again
                for batch in in_flight:
                    routing.moving.difference_update(batch.keys)
                    self._in_flight.subtract(list(batch.slots))
                raise
        await self._handover_if_due(outgoing, force=True)
        return moved

    def _batches(self, indexes, slots):
        """Batches of the slots' keys, database by database (consecutive slots of one database share a batch).
        Each slot's key list is taken once, when the pass reaches it: no key of a migrating slot is created
        here, so the list holds every key the slot has; a key gone since (moved, deleted, expired) is passed
        over."""
        for db, index in indexes:
            if not len(index):
                continue
            keys, by_slot, size = [], {}, 0
            data = db.data
            for slot in slots:
                if slot in self.held:
                    continue        # cancelled while this pass ran
                self.touched.add(slot)
                for k in index.keys(slot):
                    v = data.get(k)
                    if v is None:
                        continue
                    keys.append(k)
                    by_slot.setdefault(slot, []).append(k)
                    size += len(v) if type(v) is bytes else 64
                    if len(keys) >= BATCH_KEYS or size >= BATCH_BYTES:
                        yield _Batch(db.id, keys, by_slot)
                        keys, by_slot, size = [], {}, 0
            if keys:
                yield _Batch(db.id, keys, by_slot)

    async def _connect(self, target):
        if self._target is not None and self._target[0] == target.id:
            return self._target[1]
        self._close_target()
        conn = await self._open(target)
        self._target = (target.id, conn)
        return conn

    async def _open(self, target):
        """A connection to a target primary, authenticated when this node has credentials for it."""
        conn = await AsyncRespConnection.open(*self._address(target), timeout_s=5.0)
        try:
            auth = self._credentials()
            if auth is not None:
                answer = await conn.call(b"AUTH", *auth)
                if answer != b"OK":
                    raise MigrationError("the target %s:%s refused this node's AUTH (primaryuser/primaryauth, else "
                                         "requirepass): %s" % (target.ip, target.tls_port or target.port, answer))
        except BaseException:
            conn.close()
            raise
        return conn

    def _credentials(self):
        """AUTH's arguments for a target primary, or None (cluster/peers.py: one rule for every node-to-node link)."""
        return peer_credentials(self.server.config, getattr(self.node, "auth", None))

    def _address(self, target):
        """(host, port, TLS context or None) of a target primary (cluster/peers.py)."""
        try:
            return peer_address(self.server.config, target)
        except PeerError as exc:
            raise MigrationError(str(exc)) from None

    def _close_target(self):
        if self._target is not None:
            self._target[1].close()
            self._target = None

    def _use_db(self, db_id):
        """The migrator's own session runs its next commands (DEL, EXISTS) in database db_id."""
        session = self.session
        if session.db_id != db_id:
            session.db_id = db_id
            session.ctx.db = self.server.keyspace.dbs[db_id]

    def _local(self, *args):
        pipeline = self.server.pipeline
        pipeline.mark()
        reply, ticket, _cmd = pipeline.process(self.session, list(args))
        return reply, ticket

    def _committed(self, ticket):
        """An awaitable done once journal entry `ticket` is committed (at once for 0); it raises MigrationError
        if the entry could not be persisted (without that the round waited forever, and the slots with it)."""
        done = self.server.loop.create_future()

        def failed(reason):
            if not done.done():
                done.set_exception(MigrationError("journal entry %d of this shard was not persisted (%s)"
                                                  % (ticket, reason)))
        self.server.durability.when_committed(ticket, lambda: done.done() or done.set_result(None), failed)
        return done

    async def _read_and_send(self, conn, batch):
        """Locks the batch's keys, reads them once every write to them is committed and sends their RESTOREs
        and the commit barrier (not awaited here)."""
        routing = self.server.cluster_routing
        routing.moving.update(batch.keys)
        try:
            # A write to one of them the source took before the lock may still be uncommitted (sync mode):
            # what goes to the target must be what this shard's journal holds.
            ticket = self.server.durability.read_ticket(batch.db_id, batch.keys)
            if ticket:
                await self._committed(ticket)
            out = []
            ks = self.server.keyspace
            db = ks.dbs[batch.db_id]
            self._use_db(batch.db_id)
            if conn.db_id != batch.db_id:
                # the target runs what follows in the same database (its reply, +OK, is checked with the rest)
                out.append(encode_command((b"SELECT", b"%d" % batch.db_id)))
                batch.replies += 1
            expires = db.expires
            for key in batch.keys:
                # The value and its absolute expiry are read together, with no await and one clock reading
                # between them: a key gone (expired or deleted: what PTTL answers -2 for) is not sent, so a key
                # that expires while it is read is never restored without its expiry.
                value = ks.peek(db, key)
                if value is None:
                    if key in db.data:
                        self._local(b"EXISTS", key)    # expired but still stored: lazy expiry deletes it
                    self.skipped_gone += 1
                    continue
                at_ms = expires.get(key)
                if type(value) is bytes:
                    # A string goes as SET (after ASKING: the slot is being imported there): the same value and
                    # expiry as RESTORE REPLACE ABSTTL would give, without the DUMP payload's encoding and parsing
                    # (measured with the CRC-64 compiled: RESTORE-ASKING for strings moved 14,895 keys/s, this
                    # 19,185, scripts/measure_reshard.py --keys 200000 --slots 1000)
                    out.append(_ASKING)
                    out.append(encode_command((b"SET", key, value) if at_ms is None else
                                              (b"SET", key, value, b"PXAT", b"%d" % at_ms)))
                    batch.replies += 2
                else:
                    out.append(encode_command((b"RESTORE-ASKING", key, b"0" if at_ms is None else b"%d" % at_ms,
                                               dump_payload(value, db.hexpires.get(key)), b"REPLACE",
                                               b"ABSTTL")))
                    batch.replies += 1
                batch.sent.append(key)
            if batch.sent:
                out.append(encode_command((b"WAITAOF", b"1", b"0", b"%d" % COMMIT_WAIT_MS)))
                batch.replies += 1
                conn.send(b"".join(out))
                conn.db_id = batch.db_id
            else:
                batch.replies = 0   # nothing sent (every key gone): no SELECT either
        except BaseException:
            routing.moving.difference_update(batch.keys)
            raise

    async def _finish(self, conn, batch, outgoing) -> int:
        """Awaits the batch's replies; once the target committed every key, deletes them here (one DEL per
        slot) and unlocks them when that DEL is committed. Returns the keys moved."""
        routing = self.server.cluster_routing
        unlock = True
        try:
            if not batch.replies:
                self._queue_emptied(batch, outgoing)
                return 0
            replies = await conn.replies(batch.replies)
            for answer in replies[:-1]:
                if answer != b"OK":
                    raise MigrationError("the target refused a key of the batch: %r" % (answer,))
            barrier = replies[-1]
            if not isinstance(barrier, list) or not barrier or barrier[0] != 1:
                raise MigrationError("the target did not commit the batch within %d ms (WAITAOF: %r)"
                                     % (COMMIT_WAIT_MS, barrier))
            sent = set(batch.sent)
            data = self.server.keyspace.dbs[batch.db_id].data
            self._use_db(batch.db_id)
            ticket = 0
            for slot, keys in batch.slots.items():
                # only keys still here: one that expired meanwhile is gone (and a DEL naming a missing key of a
                # migrating slot next to present ones would be refused with -TRYAGAIN)
                present = [k for k in keys if k in sent and k in data and self._exists(batch.db_id, k)]
                if not present:
                    continue
                reply, t = self._local(b"DEL", *present)
                if type(reply) is ErrorReply:
                    raise MigrationError("deleting the moved keys of slot %d failed: %s" % (slot, reply.text))
                ticket = max(ticket, t)
            self.batches += 1
            self.moved_keys += len(batch.sent)
            for slot in batch.slots:
                if slot in outgoing:
                    routing.migrations.acked(outgoing[slot], int(time.time()))
                    break
            keys = batch.keys
            if ticket:
                self._last_del_ticket = max(self._last_del_ticket, ticket)
                unlock = False
                # (a DEL that is not persisted unlocks them too: the next round finds them and sends them again)
                def unlock_keys(_reason=None):
                    routing.moving.difference_update(keys)
                self.server.durability.when_committed(ticket, unlock_keys, unlock_keys)
            self._queue_emptied(batch, outgoing)
            return len(batch.sent)
        finally:
            if unlock:
                routing.moving.difference_update(batch.keys)

    def _exists(self, db_id, key):
        ks = self.server.keyspace
        return not ks.is_expired(ks.dbs[db_id], key)

    def _queue_emptied(self, batch, outgoing):
        for slot in batch.slots:
            if slot in outgoing and self._slot_count(slot) == 0:
                self._queue_handover(slot, outgoing[slot])

    def _queue_handover(self, slot, target_id):
        if not self._pending:
            self._pending_since = time.monotonic()
        self._pending[slot] = target_id

    async def _handover_if_due(self, outgoing, force=False):
        if not self._pending:
            return
        if not force and len(self._pending) < HANDOVER_SLOTS and time.monotonic() - self._pending_since < HANDOVER_S:
            return
        # A slot's keys are gone from the target's point of view only once their DEL is committed here (a
        # crash before would bring them back on this shard after the slot was handed over).
        if self._last_del_ticket:
            await self._committed(self._last_del_ticket)
        self._slot_indexes()
        slots = {s: t for s, t in self._pending.items() if self._slot_count(s) == 0}
        self._pending.clear()
        if slots:
            await self._finish_slots(slots)

    async def _finish_slots(self, slots):
        """Slots empty here belong to their targets from now on: one change of this shard's state for all of them
        (routing/shardstate.py: a hand-over counts only while the slot still migrates to that target, so one
        whose move was changed meanwhile is left alone, and the next round sees it)."""
        from ..cluster.reshard import hand_over
        topology, _revision = await self.node.store.get_topology()
        if topology is None:
            return
        moved = {slot: target for slot, target in slots.items()
                 if topology.migrating.get(slot, (None, None))[1] == target}
        if not moved:
            return
        await hand_over(self.node.store, self.node.shard, moved)
        self.moved_slots += len(moved)
        by_target = {}
        for slot, target in moved.items():
            by_target.setdefault(target, []).append(slot)
        for target, group in by_target.items():
            log.info("%d slot(s) moved to shard %s", len(group), topology.shard_by_id[target].name)

    # -- cancelling ------------------------------------------------------------------------------------------
    def _release_held(self, outgoing):
        """A cancelled slot is held until the topology without its mark is installed here (then it is not
        outgoing any more); one still marked after that was marked again, and moves."""
        if not self.held:
            return
        revision = self.server.cluster_routing.revision
        for slot in [s for s, rev in self.held.items() if rev is not None and rev <= revision]:
            del self.held[slot]

    async def cancel(self, slots):
        """Cancels the move of `slots` (this shard's, migrating): returns (kept, finishing, revision), the slots
        that stay here, those whose keys had started to move and finish moving (see the module's text), and the
        topology revision that unmarked the kept ones (0: none)."""
        from ..cluster.reshard import unmark_migrations
        topology, outgoing = self._outgoing()
        slots = [s for s in slots if s in outgoing]
        for s in slots:
            self.held[s] = None
        try:
            deadline = time.monotonic() + REPLY_TIMEOUT_S
            while any(self._in_flight[s] > 0 for s in slots):
                if time.monotonic() > deadline:
                    raise MigrationError("batches of the slots to cancel did not finish")
                await asyncio.sleep(0.01)
            candidates = [s for s in slots if s not in self.touched]
            by_target = {}
            for s in candidates:
                by_target.setdefault(outgoing[s], []).append(s)
            mine = self.server.cluster_routing.router.my_shard.id
            kept, revision = [], 0
            for target_id, group in by_target.items():
                empty = await self._empty_on_target(topology.shard_by_id[target_id].primary, group)
                if empty:
                    rev, unmarked = await unmark_migrations(self.node.store, empty, mine, target_id,
                                                            shard_name=self.node.shard)
                    kept.extend(unmarked)
                    revision = max(revision, rev)
            for s in kept:
                self.held[s] = revision
            return sorted(kept), sorted(set(slots) - set(kept)), revision
        finally:
            for s in slots:
                if self.held.get(s, 0) is None:
                    del self.held[s]

    async def _empty_on_target(self, target, slots):
        """The slots of which the target primary holds no key (CLUSTER COUNTKEYSINSLOT there)."""
        conn = await self._open(target)
        try:
            for s in slots:
                conn.send(encode_command((b"CLUSTER", b"COUNTKEYSINSLOT", b"%d" % s)))
            counts = await conn.replies(len(slots))
        finally:
            conn.close()
        return [s for s, n in zip(slots, counts) if n == 0]
