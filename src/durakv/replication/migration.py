"""Online resharding: a shard's primary moves the keys of its migrating slots to the target shard.

The coordination store's topology says which slots migrate where (`Topology.migrating`, set by `durakv
cluster reshard`); the source shard's primary does the moving, so the work survives any participant's crash:

1. While a slot migrates, the source serves the keys it still has, sends clients asking for a missing key to
   the target (-ASK), and the target serves them after ASKING (routing/decide.py). Multi-key commands whose keys
   are split answer -TRYAGAIN.
2. For each key still in a migrating slot the source primary, in order: locks it (a write to it answers
   -TRYAGAIN until the move is over; reads are served), reads its value and TTL (DUMP, PTTL through the
   pipeline), sends `ASKING` + `RESTORE key ttl payload REPLACE ABSTTL` to the target's primary and waits for
   +OK (in sync mode the target acknowledges only once the key is in its journal), then deletes the key
   through the pipeline (journaled like any write) and unlocks it once that DEL is committed.
3. When a round leaves slots with no key any more, the source primary moves them to the target in the
   topology (one compare-and-set); every node applies the new topology and the slots are the target's.

What a crash leaves: locks live in memory only. If the source primary dies between the target's +OK and its
own DEL, the key is in both shards; the new source primary (which took the journal over) still serves it,
writes go to it, and the resumed migration copies it again with REPLACE, so the target ends with the newest
value and nothing is applied twice (the target's copy received no writes: clients were served by the
source). If the target dies, its acknowledged RESTOREs are in its journal; unacknowledged ones are retried.
If the reshard command dies, the topology still says what migrates and the nodes finish it.
"""

import asyncio
import logging
import ssl

import hiredis

from ..commands.session import Session
from ..protocol.resp import ErrorReply, encode_command
from ..routing import key_slot

log = logging.getLogger("durakv.migration")

BATCH_KEYS = 200          # keys moved per round before the loop yields
IDLE_S = 0.05             # between rounds while slots migrate
RETRY_S = 0.5             # after a failed move (target down, failover under way)


class _RespConnection:
    """A minimal asyncio RESP client for the target primary (requests in order, one at a time)."""

    def __init__(self, reader, writer):
        self.reader = reader
        self.writer = writer
        self.parser = hiredis.Reader()

    @classmethod
    async def open(cls, host, port, tls_ctx, timeout_s):
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port, ssl=tls_ctx), timeout_s)
        return cls(reader, writer)

    async def call(self, *args, timeout_s=10.0):
        self.writer.write(encode_command(args))
        while True:
            reply = self.parser.gets()
            if reply is not False:
                return reply
            data = await asyncio.wait_for(self.reader.read(65536), timeout_s)
            if not data:
                raise ConnectionError("the target closed the connection")
            self.parser.feed(data)

    def close(self):
        self.writer.close()


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
        self._target = None            # (node id, connection)
        self._task = None

    def start(self):
        if self._task is None or self._task.done():
            self._task = self.server.loop.create_task(self._run())

    async def _run(self):
        routing = self.server.cluster_routing
        while self.node.role == "primary":
            topology = routing.topology
            mine = routing.router.my_shard if routing.router is not None else None
            outgoing = {} if topology is None or mine is None else {
                s: dst for s, (src, dst) in topology.migrating.items() if src == mine.id}
            if not outgoing:
                self._close_target()
                return
            try:
                await self._round(topology, outgoing)
            except Exception as exc:  # noqa: BLE001 - the target may be failing over: retry the round
                log.warning("slot migration round failed (%r); retrying", exc)
                self._close_target()
                await asyncio.sleep(RETRY_S)
                continue
            await asyncio.sleep(IDLE_S)

    async def _round(self, topology, outgoing):
        """One pass: every key of the outgoing slots, found with one scan of the keyspace, is moved; a slot
        found empty is handed over. (New keys of a migrating slot are created on the target: a key missing
        here is sent there with -ASK, so one scan finds every key that has to move.)"""
        by_slot = self._keys_by_slot(outgoing)
        for slot in sorted(by_slot):
            target = topology.shard_by_id[outgoing[slot]].primary
            conn = await self._connect(target)
            for i, key in enumerate(by_slot[slot]):
                await self._move(conn, key)
                if i % BATCH_KEYS == BATCH_KEYS - 1:
                    await asyncio.sleep(0)   # let clients in between batches
        remaining = self._keys_by_slot(outgoing)
        empty = [s for s in outgoing if s not in remaining]
        if empty:
            await self._finish_slots(empty, outgoing)

    def _keys_by_slot(self, outgoing):
        by_slot = {}
        for key in list(self.server.keyspace.dbs[0].data):
            slot = key_slot(key)
            if slot in outgoing:
                by_slot.setdefault(slot, []).append(key)
        return by_slot

    async def _connect(self, target):
        if self._target is not None and self._target[0] == target.id:
            return self._target[1]
        self._close_target()
        cfg = self.server.config
        if target.port:
            host, port, ctx = target.ip, target.port, None
        else:
            host, port = target.ip, target.tls_port
            ctx = ssl.create_default_context(cafile=cfg["tls-ca-cert-file"] or None)
        conn = await _RespConnection.open(host, port, ctx, timeout_s=5.0)
        self._target = (target.id, conn)
        return conn

    def _close_target(self):
        if self._target is not None:
            self._target[1].close()
            self._target = None

    def _local(self, *args):
        pipeline = self.server.pipeline
        pipeline.mark()
        reply, ticket, _cmd = pipeline.process(self.session, list(args))
        return reply, ticket

    async def _move(self, conn, key):
        routing = self.server.cluster_routing
        routing.moving.add(key)
        try:
            payload, _t = self._local(b"DUMP", key)
            if payload is None:
                return                      # gone meanwhile (deleted, expired)
            pttl, _t = self._local(b"PEXPIRETIME", key)
            if type(payload) is ErrorReply or type(pttl) is ErrorReply:
                raise RuntimeError("reading %r for migration failed" % key)
            ttl = b"0" if pttl < 0 else b"%d" % pttl
            await conn.call(b"ASKING")
            answer = await conn.call(b"RESTORE", key, ttl, payload, b"REPLACE", b"ABSTTL")
            if answer != b"OK":
                raise RuntimeError("the target refused RESTORE of %r: %r" % (key, answer))
            reply, ticket = self._local(b"DEL", key)
            if type(reply) is ErrorReply:
                raise RuntimeError("deleting the moved key %r failed: %s" % (key, reply.text))
            if ticket:
                done = self.server.loop.create_future()
                self.server.durability.when_committed(ticket, lambda: done.done() or done.set_result(None))
                await done
            self.moved_keys += 1
        finally:
            routing.moving.discard(key)

    async def _finish_slots(self, slots, outgoing):
        """Slots empty here belong to their targets from now on: one compare-and-set for all of them (re-read
        and skipped when the topology changed meanwhile; the next round tries again)."""
        store = self.node.store
        topology, revision = await store.get_topology()
        if topology is None:
            return
        by_target = {}
        for slot in slots:
            if topology.migrating.get(slot, (None, None))[1] == outgoing[slot]:
                by_target.setdefault(outgoing[slot], []).append(slot)
        if not by_target:
            return
        for target, moved in by_target.items():
            topology = topology.with_slots_assigned(moved, target)
        await store.put_topology(topology, revision)
        self.moved_slots += sum(len(m) for m in by_target.values())
        for target, moved in by_target.items():
            log.info("%d slot(s) moved to shard %s", len(moved), topology.shard_by_id[target].name)
