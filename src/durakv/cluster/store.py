"""The coordination store behind one abstract class (patroni's DCS pattern): leases, the cluster topology and
snapshots.

Implemented on the same NATS cluster as the journal: a JetStream KV bucket for leases and the topology
(compare-and-set on the entry revision) and an object store bucket for snapshots. All times are wall-clock
milliseconds from the injected clock; a lease is valid until `expires_ms`, and every holder stops serving at its own
`valid_until` (computed from the time it *sent* the renewal, minus a margin), which is never later than
what any other node can observe, so two primaries never serve at once on a clock-synchronised machine set.
"""

import abc
import asyncio
import base64
import json
import logging
import os
import time
from dataclasses import asdict, dataclass

from ..journal.jetstream import is_transient
from ..routing.shardstate import ShardState, compose
from ..routing.topology import MAX_DOCUMENT_BYTES, Topology, TopologyError
from . import natsnames as nn
from .settings import SettingsError, ShardSettings

log = logging.getLogger("durakv.store")

SNAPSHOTS_KEPT = 2   # per shard: the newest and the one before it (a damaged newest is not fatal)
# Chunks no snapshot refers to are removed once their newest chunk is this old: a put in progress writes its
# chunks before its meta message, and a put whose publishing stalls that long has failed (5 s requests).
# DURAKV_SNAPSHOT_ORPHAN_AGE_MS lowers it for tests.
ORPHAN_AGE_S = 60.0


def orphan_age_default_s() -> float:
    raw = os.environ.get("DURAKV_SNAPSHOT_ORPHAN_AGE_MS")
    return int(raw) / 1000.0 if raw and raw.isdigit() else ORPHAN_AGE_S


@dataclass
class Lease:
    holder: str          # node id
    epoch: int           # the holder's journal epoch (fencing)
    addr: str            # host:port clients should use
    az: str
    expires_ms: int      # wall clock; after this, any replica may take the lease
    handover_to: str = ""  # planned failover: the node the holder is handing over to
    # The TTL the holder serves by (its valid_until is its send time + this - a margin): a replica watches the
    # lease for longer than the larger of this and its own TTL, so nodes that disagree on the TTL for a moment
    # (a shard setting being changed) never let two primaries serve. 0: written before leases carried it.
    ttl_ms: int = 0

    def encode(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def decode(cls, raw: bytes):
        """The lease of a stored document, checked (InvalidLease with the reason): data from NATS is untrusted,
        and a lease that does not decode is nobody's to serve by."""
        if not isinstance(raw, (bytes, bytearray)) or len(raw) > 4096:
            raise InvalidLease("the lease document is not text of at most 4096 bytes")
        try:
            doc = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise InvalidLease("the lease document is not JSON: %s" % exc) from None
        if not isinstance(doc, dict):
            raise InvalidLease("the lease document is not an object")
        # Fields a newer version may add are ignored, so mixed versions read each other's leases.
        try:
            lease = cls(**{k: v for k, v in doc.items() if k in _LEASE_FIELDS})
        except TypeError as exc:
            raise InvalidLease("the lease document misses a field: %s" % exc) from None
        for f in ("holder", "addr", "az", "handover_to"):
            v = getattr(lease, f)
            if not isinstance(v, str) or len(v) > 255:
                raise InvalidLease("lease %s must be a string of at most 255 characters" % f)
        for f in ("epoch", "expires_ms", "ttl_ms"):
            v = getattr(lease, f)
            if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < 2 ** 62:
                raise InvalidLease("lease %s must be an integer in 0..2^62" % f)
        return lease


_LEASE_FIELDS = frozenset(Lease.__dataclass_fields__)


class InvalidLease(ValueError):
    """A stored lease that does not decode or validate."""


class StaleRevision(Exception):
    """A compare-and-set lost: somebody else wrote the key since the revision we read."""


class CoordinationStore(abc.ABC):
    """Atomicity and failure contracts:

    * get_lease returns the lease and its revision as one consistent read (revision 0 = no lease).
    * put_lease(shard, lease, revision) is atomic compare-and-set: it succeeds only if the stored revision is
      still `revision` (0 = create only if absent) and returns the new revision; otherwise StaleRevision.
      A timeout or connection error raises another exception: the write may or may not have happened, so
      the caller must re-read before assuming anything (and a primary keeps serving only until its own
      valid_until).
    * Snapshots: put_snapshot stores bytes under (shard, index) atomically (readers see all or nothing);
      latest_snapshot returns the newest complete one.
    * get_topology returns the topology and its revision as one consistent read ((None, 0) = none stored yet);
      a stored document that does not validate raises TopologyError (it is never half-applied).
    * put_topology(topology, expected_revision) is compare-and-set like put_lease: it succeeds only if the stored
      revision is still expected_revision (0 = create only if absent) and returns the new revision; otherwise
      StaleRevision, and the caller re-reads, re-applies its change to what it read, and tries again. A timeout
      or connection error raises another exception: the write may or may not have happened (re-read).
    * watch_topology(cb) calls cb(topology, revision) on the event loop with the stored topology (if any) and
      then after every later change, the revision never going back; documents that do not validate are logged
      and skipped (the node keeps its last good snapshot). A topology composed of several documents delivers
      a document that arrives after a newer one of another document too (with the newest revision seen).
      It returns a handle whose `await stop()` ends the deliveries and whose `revisions()` says what it
      delivered, for a check against the store (replication/topology_sync.py).
    * get_shard_settings / put_shard_settings / watch_shard_settings: a shard's settings (cluster/settings.py),
      with exactly the contracts of the topology's three (consistent read with revision, compare-and-set with
      StaleRevision, ordered deliveries of valid documents only).
    """

    @abc.abstractmethod
    async def get_lease(self, shard: str):
        """(Lease | None, revision)."""

    @abc.abstractmethod
    async def put_lease(self, shard: str, lease: Lease, revision: int) -> int:
        """Compare-and-set; returns the new revision or raises StaleRevision."""

    @abc.abstractmethod
    async def request_failover(self, shard: str, to_node: str):
        """Asks the primary of shard to hand its lease over to to_node (planned failover)."""

    @abc.abstractmethod
    async def failover_request(self, shard: str):
        """The pending planned-failover target node id, or None."""

    @abc.abstractmethod
    async def clear_failover_request(self, shard: str):
        """Removes a pending request."""

    @abc.abstractmethod
    async def get_topology(self):
        """(Topology | None, revision)."""

    @abc.abstractmethod
    async def put_topology(self, topology: Topology, expected_revision: int) -> int:
        """Compare-and-set; returns the new revision or raises StaleRevision."""

    @abc.abstractmethod
    async def watch_topology(self, cb):
        """Delivers the current and every later topology to cb(topology, revision); returns a handle with
        `async stop()`."""

    @abc.abstractmethod
    async def get_shard_settings(self, shard: str):
        """(ShardSettings | None, revision)."""

    @abc.abstractmethod
    async def put_shard_settings(self, shard: str, settings: ShardSettings, expected_revision: int) -> int:
        """Compare-and-set; returns the new revision or raises StaleRevision."""

    @abc.abstractmethod
    async def watch_shard_settings(self, shard: str, cb):
        """Delivers the current and every later settings of shard to cb(settings, revision); returns a handle
        with `async stop()`."""

    @abc.abstractmethod
    async def put_snapshot(self, shard: str, index: int, epoch: int, data: bytes):
        """Stores a snapshot covering journal index `index`."""

    @abc.abstractmethod
    async def latest_snapshot(self, shard: str, into=None, sized=None):
        """(index, epoch, bytes) of the newest snapshot, or None. With `into` (a binary file), the bytes are
        written there as they arrive and None is returned in their place (a snapshot may be larger than memory
        should hold twice). sized(n), if given, is told the snapshot's size before it is fetched."""

    @abc.abstractmethod
    async def snapshot_indexes(self, shard: str):
        """Indexes of the stored snapshots, oldest first."""

    @abc.abstractmethod
    async def delete_snapshot(self, shard: str, index: int):
        """Drops one snapshot."""

    async def prune_snapshots(self, shard: str, keep: int = None, orphan_age_s=None, journal_last=None) -> dict:
        """Keeps the `keep` newest snapshots of `shard`, drops the others; returns {"kept": [indexes], "bytes",
        "messages", "objects"} (the sizes are the store's own, 0 where it has none to tell). journal_last: an
        async function answering the shard journal's last index, asked after the snapshots are listed; a snapshot
        past it is not of this journal (foreign_snapshots) and is dropped, never kept."""
        keep = SNAPSHOTS_KEPT if keep is None else keep
        indexes = await self.snapshot_indexes(shard)
        indexes, foreign = await foreign_snapshots(shard, indexes, journal_last)
        for index in foreign:
            await self.delete_snapshot(shard, index)
        for index in indexes[:-keep] if keep > 0 else indexes:
            await self.delete_snapshot(shard, index)
        kept = indexes[-keep:] if keep > 0 else []
        return {"kept": kept, "bytes": 0, "messages": 0, "objects": len(kept)}


async def foreign_snapshots(shard, indexes, journal_last):
    """(indexes of this journal, indexes past its end) of a shard's stored snapshots, listed before
    journal_last() is asked: a snapshot is taken at an index the journal had reached, and a journal's last index
    never goes back, so one past the end comes from an earlier shard of the same name (its stream created again)
    or is garbage. Kept as "the newest", it replaced the snapshot just written and the journal was purged up to
    it: the nodes then loaded it and could not start. No journal_last, or no answer: nothing is foreign."""
    if journal_last is None or not indexes:
        return indexes, []
    try:
        last = await journal_last()
    except Exception as exc:  # noqa: BLE001 - the stream's leader may be moving: judge next time
        log.debug("the journal's last index for pruning snapshots: %r", exc)
        return indexes, []
    foreign = [i for i in indexes if i > last]
    if foreign:
        log.warning("snapshot(s) of shard %s at index %s are past the journal's end (%d): not of this journal, "
                    "dropped", shard, ", ".join(str(i) for i in foreign), last)
    return [i for i in indexes if i <= last], foreign


def backup_floor(doc, now_ms):
    """The lowest journal index a backup document asks purges to keep, among its unexpired pins and retention."""
    floor = None

    def lower(value):
        nonlocal floor
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            floor = value if floor is None else min(floor, value)
    pins = doc.get("pins")
    if isinstance(pins, dict):
        for pin in pins.values():
            if isinstance(pin, dict) and isinstance(pin.get("until_ms"), int) and pin["until_ms"] > now_ms:
                lower(pin.get("from"))
    until = doc.get("keep_until_ms")
    if isinstance(until, int) and until > now_ms:
        lower(doc.get("keep_from"))
    return floor


class TopologyWatch:
    """A running watch of one KV key holding a document: `await stop()` ends it; `revision` is the last
    delivered revision. `parse` turns the stored bytes into the document (raising `invalid` when they do not
    validate)."""

    def __init__(self, watcher, cb, parse=None, invalid=TopologyError, what="topology"):
        self._watcher = watcher
        self._cb = cb
        self._parse = parse or Topology.from_json
        self._invalid = invalid
        self._what = what
        self.revision = 0
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self):
        async for entry in self._watcher:
            if entry is None:            # nats-py's "caught up with the stored value" marker
                continue
            if entry.operation in ("DEL", "PURGE") or not entry.value or entry.revision <= self.revision:
                continue
            try:
                document = self._parse(entry.value)
            except self._invalid as exc:
                log.warning("%s revision %d is invalid, kept the previous one: %s", self._what, entry.revision, exc)
                continue
            self.revision = entry.revision
            try:
                self._cb(document, entry.revision)
            except Exception:  # noqa: BLE001 - a failing subscriber must not end the watch
                log.exception("%s watcher callback failed at revision %d", self._what, entry.revision)

    async def stop(self):
        try:
            await self._watcher.stop()
        finally:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass


class ComposedTopologyWatch:
    """Two KV watches (the operator's topology, every shard's state) delivering the composed topology to
    cb(topology, revision) after every valid change of either; `await stop()` ends both."""

    def __init__(self, base_watcher, state_watcher, cb):
        self._cb = cb
        self._base = None
        self._base_revision = 0
        self._states = {}           # shard name -> (ShardState, revision)
        self.revision = 0
        self._watchers = (base_watcher, state_watcher)
        loop = asyncio.get_running_loop()
        self._tasks = (loop.create_task(self._run(base_watcher, self._on_base)),
                       loop.create_task(self._run(state_watcher, self._on_state)))

    async def _run(self, watcher, handle):
        async for entry in watcher:
            if entry is None:            # nats-py's "caught up with the stored value" marker
                continue
            try:
                if handle(entry):
                    self._deliver()
            except Exception:  # noqa: BLE001 - a failing subscriber must not end the watch
                log.exception("topology watcher failed at revision %d", entry.revision)

    def _on_base(self, entry):
        if entry.operation in ("DEL", "PURGE") or not entry.value or entry.revision <= self._base_revision:
            return False
        try:
            self._base = Topology.from_json(entry.value)
        except TopologyError as exc:
            log.warning("topology revision %d is invalid, kept the previous one: %s", entry.revision, exc)
            return False
        self._base_revision = entry.revision
        return True

    def _on_state(self, entry):
        name = entry.key[len(nn.KEY_STATE % ""):]
        previous = self._states.get(name)
        if previous is not None and entry.revision <= previous[1]:
            return False
        if entry.operation in ("DEL", "PURGE") or not entry.value:
            self._states.pop(name, None)
            return True
        try:
            self._states[name] = (ShardState.from_json(entry.value), entry.revision)
        except TopologyError as exc:
            log.warning("the state of shard %s (revision %d) is invalid, kept the previous one: %s", name,
                        entry.revision, exc)
            return False
        return True

    def _deliver(self):
        """The composed topology after a change of any document. Not gated on the composed revision growing:
        the two watchers deliver independently, so a shard's state (revision 510) can arrive before an older
        change of the operator's topology (revision 500, e.g. a reshard's migration marks); skipping that one
        because 500 <= 510 would leave the node routing by the old topology until some later change."""
        if self._base is None:
            return
        self.revision = max([self.revision, self._base_revision] + [rev for _st, rev in self._states.values()])
        self._cb(compose(self._base, {n: st for n, (st, _rev) in self._states.items()}), self.revision)

    def revisions(self):
        """(the operator's topology's revision, {shard name: its state's revision}) as delivered: what
        replication/topology_sync.py compares with the store to find a watch that stopped delivering."""
        return self._base_revision, {name: rev for name, (_st, rev) in self._states.items()}

    async def stop(self):
        try:
            for w in self._watchers:
                await w.stop()
        finally:
            for t in self._tasks:
                t.cancel()
                try:
                    await t
                except asyncio.CancelledError:
                    pass


class _ChunkWriter:
    """What nats-py's object store get(writeinto=) writes each chunk to (in an executor thread): a file, or a
    list collecting the chunks."""

    def __init__(self, target):
        self._target = target

    def write(self, data):
        if isinstance(self._target, list):
            self._target.append(bytes(data))
        else:
            self._target.write(data)
        return len(data)


class NatsStore(CoordinationStore):
    """The coordination store on NATS: the KV bucket DURAKV_LEASES (leases, failover requests, the operator's
    topology, each shard's settings and state, the cluster's auth and its format document) and one object store
    bucket of snapshots per shard. Names: cluster/natsnames.py.

    A node binds what exists (`open`); it may not create anything (its NATS identity has no such permission):
    `create_cluster` and `create_shard` are the operator's (cluster/admin.py). `shard`: the node's shard, whose
    snapshot bucket it binds; None for an operator's store, which binds each shard's bucket when asked."""
    LEASES = nn.LEASES_BUCKET
    TOPOLOGY_KEY = nn.KEY_TOPOLOGY

    def __init__(self, nc, replicas=3, clock_ms=None, shard=None):
        self.nc = nc
        self.js = nc.jetstream(timeout=5.0)
        # Lease reads and writes must fail fast while the KV bucket elects a leader (an AZ loss), so the
        # controller's next tick retries instead of one request waiting out a long timeout.
        self.js_fast = nc.jetstream(timeout=1.0)
        self.replicas = replicas
        self.clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self.shard = shard
        self.kv = None
        self.kv_watch = None
        self._obs = {}
        # How long a KV request the bucket's stream did not answer at all (no responders, 503: it stored
        # nothing) is sent again. 0 for a node (its controller's next tick retries, and a lease must fail fast);
        # the operator's tools set it, so an operation started while the bucket's leader moves (a cluster just
        # formed) does not fail on its first request.
        self.unanswered_retry_s = 0.0

    # -- buckets ---------------------------------------------------------------------------------------------
    async def open(self, timeout_s: float = 60.0):
        """Binds the coordination bucket, retrying until the deadline while the NATS cluster is still forming
        or the bucket's stream has no leader yet. It must exist (the operator made it)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        last_exc = None
        while self.kv is None:
            try:
                self.kv = await self.js.key_value(self.LEASES)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - not there yet, or JetStream not ready
                last_exc = exc
                if loop.time() > deadline:
                    raise TimeoutError("the coordination bucket %s is unavailable (was the cluster created? "
                                       "`durakv cluster create`): %r" % (self.LEASES, last_exc)) from None
                await asyncio.sleep(0.2)
        # A bucket just created may not have elected its stream's leader yet: the first put would get "no
        # responders". Ready means its leader answers (STREAM.INFO is answered by the leader).
        while True:
            try:
                await self.kv.status()
                break
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - sorted by is_transient
                if not is_transient(exc) or loop.time() > deadline:
                    raise
                await asyncio.sleep(0.1)
        # Lease reads and writes go through the context with short requests (see js_fast); a watch is set up
        # once, with the patient context.
        self.kv_watch = self.kv
        self.kv = await self.js_fast.key_value(self.LEASES)
        return self

    async def open_leases(self):
        """Binds only the lease bucket (with the short requests of js_fast), for a connection that renews leases
        and nothing else (cluster/renewer.py); the buckets exist already (open() of the node's own store)."""
        self.kv = await self.js_fast.key_value(self.LEASES)
        return self

    async def create_cluster(self, timeout_s: float = 60.0):
        """The operator's: makes the coordination bucket (replicated, file-backed, one value per key) if it is
        not there, then binds it."""
        from nats.js.api import KeyValueConfig, StorageType
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            try:
                await self.js.key_value(self.LEASES)
                break
            except Exception:  # noqa: BLE001 - absent: create it (or JetStream not ready: retried)
                try:
                    await self.js.create_key_value(KeyValueConfig(
                        bucket=self.LEASES, history=1, replicas=self.replicas, storage=StorageType.FILE))
                    break
                except Exception as exc:  # noqa: BLE001 - created concurrently, or not placeable yet
                    if loop.time() > deadline:
                        raise TimeoutError("cannot create the coordination bucket: %r" % (exc,)) from None
                    await asyncio.sleep(0.2)
        return await self.open(max(1.0, deadline - loop.time()))

    async def create_shard(self, shard, timeout_s: float = 60.0):
        """The operator's: makes a shard's journal stream and snapshot bucket if they are not there. Neither can
        be deleted or have a message deleted through the API by anyone but the operator (deny_delete on the
        journal: a node's identity may purge its own shard's prefix, never remove single entries)."""
        from nats.js.api import ObjectStoreConfig, StorageType, StreamConfig
        from nats.js.errors import NotFoundError
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        stream = nn.journal_stream(shard)
        while True:
            try:
                try:
                    await self.js.stream_info(stream)
                except NotFoundError:
                    await self.js.add_stream(StreamConfig(
                        name=stream, subjects=[nn.journal_subject(shard)], storage=StorageType.FILE,
                        num_replicas=self.replicas, allow_direct=True, deny_delete=True))
                bucket = nn.snapshot_bucket(shard)
                try:
                    await self.js.object_store(bucket)
                except Exception:  # noqa: BLE001 - absent
                    await self.js.create_object_store(bucket, ObjectStoreConfig(
                        bucket=bucket, replicas=self.replicas, storage=StorageType.FILE))
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - JetStream cannot place an R3 stream yet
                if loop.time() > deadline:
                    raise TimeoutError("cannot create the stream and snapshot bucket of shard %s: %r"
                                       % (shard, exc)) from None
                await asyncio.sleep(0.2)

    async def _bucket(self, shard):
        """The snapshot object store of `shard` (bound once)."""
        shard = str(shard)
        obs = self._obs.get(shard)
        if obs is None:
            obs = self._obs[shard] = await self.js.object_store(nn.snapshot_bucket(shard))
        return obs

    @staticmethod
    def _lease_key(shard):
        return "lease.%s" % shard

    @staticmethod
    def _failover_key(shard):
        return "failover.%s" % shard

    async def _unanswered_retried(self, call):
        """await call(); while unanswered_retry_s lasts, again after a reply that says the stream did not take
        the request at all (no responders, 503), which left nothing stored, so sending it again is safe (a
        timeout is not retried here: the request may have been stored)."""
        import nats.errors
        import nats.js.errors
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.unanswered_retry_s
        while True:
            try:
                return await call()
            except (nats.errors.NoRespondersError, nats.js.errors.NoStreamResponseError,
                    nats.js.errors.ServiceUnavailableError) as exc:
                if loop.time() + 0.2 > deadline:
                    raise
                log.info("coordination store: %s; asking again while the bucket elects", exc)
                await asyncio.sleep(0.2)

    async def _get(self, key, decode):
        """(decoded value, revision) of key; (None, revision or 0) when it is absent or deleted."""
        from nats.js.errors import KeyNotFoundError
        try:
            entry = await self._unanswered_retried(lambda: self.kv.get(key))
        except KeyNotFoundError:
            return None, 0
        if entry.value is None or entry.operation in ("DEL", "PURGE"):
            return None, entry.revision or 0
        return decode(entry.value), entry.revision

    async def get_lease(self, shard):
        return await self._get(self._lease_key(shard), Lease.decode)

    async def put_lease(self, shard, lease, revision):
        return await self._compare_and_set(self._lease_key(shard), lease.encode(), revision)

    async def request_failover(self, shard, to_node):
        await self._unanswered_retried(lambda: self.kv.put(self._failover_key(shard), to_node.encode()))

    async def failover_request(self, shard):
        from nats.js.errors import KeyNotFoundError
        try:
            entry = await self.kv.get(self._failover_key(shard))
        except KeyNotFoundError:
            return None
        if not entry.value:
            return None
        return entry.value.decode()

    async def clear_failover_request(self, shard):
        await self._unanswered_retried(lambda: self.kv.put(self._failover_key(shard), b""))

    async def get_base_topology(self):
        """(the operator's topology, its revision), (None, 0) when none is stored."""
        return await self._get(self.TOPOLOGY_KEY, Topology.from_json)

    async def get_states(self, topology, log_invalid=True):
        """{shard name: (ShardState, revision)} of the shards of `topology` that have a state; a state that does
        not validate is left out (logged, unless log_invalid is False: a periodic check): it changes nothing."""
        out = {}
        for sh in topology.shards:
            try:
                state, revision = await self._get(nn.KEY_STATE % sh.name, ShardState.from_json)
            except TopologyError as exc:
                if log_invalid:
                    log.warning("the state of shard %s is invalid and is not used: %s", sh.name, exc)
                continue
            if state is not None:
                out[sh.name] = (state, revision)
        return out

    async def get_topology(self):
        """(the topology to route by, revision): the operator's topology composed with every shard's state
        (routing/shardstate.py). The revision is the newest of the documents it was composed from (KV revisions
        are the bucket's sequence numbers, so it grows with every change of any of them)."""
        base, revision = await self.get_base_topology()
        if base is None:
            return None, 0
        states = await self.get_states(base)
        for _state, rev in states.values():
            revision = max(revision, rev)
        return compose(base, {name: st for name, (st, _rev) in states.items()}), revision

    async def put_topology(self, topology, expected_revision):
        """The operator's topology, compare-and-set on its own revision (get_base_topology's)."""
        if not isinstance(topology, Topology):
            raise TypeError("put_topology needs a Topology")
        raw = topology.to_json()
        if len(raw) > MAX_DOCUMENT_BYTES:
            raise TopologyError("the topology document exceeds %d bytes" % MAX_DOCUMENT_BYTES)
        return await self._compare_and_set(self.TOPOLOGY_KEY, raw, expected_revision)

    async def get_state(self, shard):
        """(ShardState | None, revision) of one shard."""
        return await self._get(nn.KEY_STATE % shard, ShardState.from_json)

    async def update_state(self, shard, change, attempts=50):
        """Applies change(current ShardState) -> new ShardState (or None: nothing to do) by compare-and-set,
        re-reading on races; returns the new revision (0 when nothing changed)."""
        for _ in range(attempts):
            try:
                current, revision = await self.get_state(shard)
            except TopologyError as exc:
                log.warning("the state of shard %s is invalid; replacing it: %s", shard, exc)
                current, revision = None, (await self.kv.get(nn.KEY_STATE % shard)).revision
            wanted = change(current or ShardState())
            if wanted is None or wanted == current:
                return 0
            try:
                return await self._compare_and_set(nn.KEY_STATE % shard, wanted.to_json(), revision)
            except StaleRevision:
                await asyncio.sleep(0.02)
        raise StaleRevision("the state of shard %s kept changing" % shard)

    # -- the cluster's users and its format --------------------------------------------------------------------
    async def get_auth(self):
        """(AuthSettings | None, revision): the users of every shard (cluster/settings.py)."""
        from .settings import AuthSettings
        return await self._get(nn.KEY_AUTH, AuthSettings.from_json)

    async def put_auth(self, auth, expected_revision):
        return await self._compare_and_set(nn.KEY_AUTH, auth.to_json(), expected_revision)

    async def watch_auth(self, cb):
        from .settings import AuthSettings
        watcher = await self.kv_watch.watch(nn.KEY_AUTH)
        return TopologyWatch(watcher, cb, parse=AuthSettings.from_json, invalid=SettingsError, what="cluster auth")

    async def get_cluster(self):
        """(ClusterDocument | None, revision): the cluster's id and format (cluster/settings.py)."""
        from .settings import ClusterDocument
        return await self._get(nn.KEY_CLUSTER, ClusterDocument.from_json)

    async def put_cluster(self, doc, expected_revision):
        return await self._compare_and_set(nn.KEY_CLUSTER, doc.to_json(), expected_revision)

    # -- a second region (cluster/region.py) --------------------------------------------------------------------
    async def get_region(self):
        """(RegionRecord | None, revision): this region's role; None for a cluster with no second region."""
        from .region import RegionRecord
        return await self._get(nn.KEY_REGION, RegionRecord.from_json)

    async def put_region(self, record, expected_revision):
        return await self._compare_and_set(nn.KEY_REGION, record.to_json(), expected_revision)

    async def watch_region(self, cb):
        """Delivers every new region record to cb(record, revision) (an invalid one is logged and skipped)."""
        from .region import RegionError, RegionRecord
        watcher = await self.kv_watch.watch(nn.KEY_REGION)
        return TopologyWatch(watcher, cb, parse=RegionRecord.from_json, invalid=RegionError, what="region record")

    # -- backups (durakv/backup): what purges must keep --------------------------------------------------------
    async def get_backup_doc(self, shard):
        """(dict, revision) of the shard's backup document ({} when absent): `pins` {token: {"from", "until_ms"}}
        (journal a backup is copying) and `keep_from`/`keep_until_ms` (journal the next backup continues from).
        Data from NATS is untrusted: a document that does not decode counts as empty."""
        def decode(raw):
            if len(raw) > 64 * 1024:
                return {}
            try:
                doc = json.loads(raw)
            except (ValueError, RecursionError):
                return {}
            return doc if isinstance(doc, dict) else {}
        doc, revision = await self._get(nn.KEY_BACKUP % shard, decode)
        return doc or {}, revision

    async def update_backup_doc(self, shard, change, attempts=50):
        """Applies change(doc) -> doc by compare-and-set, re-reading on races."""
        for _ in range(attempts):
            doc, revision = await self.get_backup_doc(shard)
            new = change(dict(doc))
            try:
                return await self._compare_and_set(nn.KEY_BACKUP % shard, json.dumps(new).encode(), revision)
            except StaleRevision:
                await asyncio.sleep(0.02)
        raise StaleRevision("the backup document of shard %s kept changing" % shard)

    async def get_backup_run(self, shard):
        """(dict, revision) of the shard's scheduled-backup claim (durakv/backup/schedule.py), {} when absent or
        not a JSON object."""
        def decode(raw):
            try:
                doc = json.loads(raw) if len(raw) < 4096 else {}
            except (ValueError, RecursionError):
                doc = {}
            return doc if isinstance(doc, dict) else {}
        doc, revision = await self._get(nn.KEY_BACKUP_RUN % shard, decode)
        return doc or {}, revision

    async def put_backup_run(self, shard, doc, expected_revision):
        """Compare-and-set of the claim; StaleRevision when another node wrote it first."""
        return await self._compare_and_set(nn.KEY_BACKUP_RUN % shard, json.dumps(doc).encode(), expected_revision)

    async def backup_keep_from(self, shard, now_ms=None):
        """The first journal index a purge must keep for backups (None: no constraint)."""
        doc, _rev = await self.get_backup_doc(shard)
        return backup_floor(doc, self.clock_ms() if now_ms is None else now_ms)

    async def _compare_and_set(self, key, raw, expected_revision):
        from nats.js.errors import KeyWrongLastSequenceError
        try:
            if expected_revision == 0:
                return await self._unanswered_retried(lambda: self.kv.create(key, raw))
            return await self._unanswered_retried(lambda: self.kv.update(key, raw, last=expected_revision))
        except KeyWrongLastSequenceError as exc:
            raise StaleRevision(str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - create() on an existing key
            if "wrong last sequence" in str(exc).lower() or "key exists" in str(exc).lower():
                raise StaleRevision(str(exc)) from None
            raise

    async def watch_topology(self, cb):
        """Delivers the composed topology (get_topology) to cb(topology, revision) on every change of the
        operator's topology or of any shard's state, in revision order."""
        base_watcher = await self.kv_watch.watch(self.TOPOLOGY_KEY)
        state_watcher = await self.kv_watch.watch(nn.KEY_STATE % "*")
        return ComposedTopologyWatch(base_watcher, state_watcher, cb)

    @staticmethod
    def _settings_key(shard):
        return "settings.%s" % shard

    async def get_shard_settings(self, shard):
        return await self._get(self._settings_key(shard), ShardSettings.from_json)

    async def put_shard_settings(self, shard, settings, expected_revision):
        if not isinstance(settings, ShardSettings):
            raise TypeError("put_shard_settings needs ShardSettings")
        return await self._compare_and_set(self._settings_key(shard), settings.to_json(), expected_revision)

    async def watch_shard_settings(self, shard, cb):
        watcher = await self.kv_watch.watch(self._settings_key(shard))
        return TopologyWatch(watcher, cb, parse=ShardSettings.from_json, invalid=SettingsError,
                             what="settings of shard %s" % shard)

    @staticmethod
    def _snap_name(index):
        return "%020d" % index

    @staticmethod
    def _obs_stream(shard):
        return "OBJ_%s" % nn.snapshot_bucket(shard)

    @staticmethod
    def _meta_subject(shard, name):
        return "$O.%s.M.%s" % (nn.snapshot_bucket(shard), base64.urlsafe_b64encode(name.encode()).decode())

    @staticmethod
    def _chunk_subject(shard, nuid):
        return "$O.%s.C.%s" % (nn.snapshot_bucket(shard), nuid)

    async def put_snapshot(self, shard, index, epoch, data):
        from nats.js.api import ObjectMeta
        meta = ObjectMeta(name=self._snap_name(index), description=json.dumps({"epoch": epoch}))
        await (await self._bucket(shard)).put(meta.name, data, meta=meta)

    async def _objects(self, shard):
        """Every object of the shard's snapshot bucket, deleted ones (tombstones) included."""
        try:
            return await (await self._bucket(shard)).list(ignore_deletes=False)
        except Exception as exc:  # noqa: BLE001 - nats-py raises NotFound for an empty bucket
            if type(exc).__name__.endswith("NotFoundError"):
                return []
            raise

    async def snapshot_indexes(self, shard):
        return sorted(int(o.name) for o in await self._objects(shard) if not o.deleted and o.name.isdigit())

    async def latest_snapshot(self, shard, into=None, sized=None):
        obs = await self._bucket(shard)
        for index in reversed(await self.snapshot_indexes(shard)):
            name = self._snap_name(index)
            try:
                if sized is not None:
                    sized((await obs.get_info(name)).size or 0)
                if into is not None:
                    into.seek(0)
                    into.truncate()
                    res = await obs.get(name, writeinto=_ChunkWriter(into))
                else:
                    # nats-py concatenates the chunks into one bytes object (quadratic): collect them instead
                    chunks = []
                    res = await obs.get(name, writeinto=_ChunkWriter(chunks))
                    res.data = b"".join(chunks)
            except Exception:  # noqa: BLE001 - deleted meanwhile, or damaged: try the one before
                continue
            epoch = 0
            try:
                epoch = json.loads(res.info.description or "{}").get("epoch", 0)
            except (ValueError, AttributeError):
                pass
            if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
                epoch = 0
            if into is not None:
                into.flush()
                return index, epoch, None
            return index, epoch, res.data
        return None

    async def delete_snapshot(self, shard, index):
        """Removes the snapshot and everything of it from the bucket's stream: its meta message (nats-py's
        delete would leave a tombstone there per snapshot, for ever) first, so no reader finds it any more,
        then its chunks."""
        from nats.js.errors import NotFoundError
        name = self._snap_name(index)
        try:
            info = await (await self._bucket(shard)).get_info(name, show_deleted=True)
        except NotFoundError:
            return
        await self.js.purge_stream(self._obs_stream(shard), subject=self._meta_subject(shard, name))
        if info.nuid:
            await self.js.purge_stream(self._obs_stream(shard), subject=self._chunk_subject(shard, info.nuid))

    async def prune_snapshots(self, shard, keep=None, orphan_age_s=None, journal_last=None):
        """Keeps the `keep` newest snapshots of `shard` (none past the journal's end: foreign_snapshots) and
        removes the rest, plus what earlier runs and
        crashes left in the bucket: tombstones of deleted snapshots and chunks no snapshot refers to (a put
        that died before its meta message), once their newest chunk is `orphan_age_s` old (a put in progress
        elsewhere writes its chunks before its meta). Returns the kept indexes and the bucket's size:
        {"kept": [...], "bytes": n, "messages": n, "objects": n}."""
        from nats.js.errors import NotFoundError
        keep = SNAPSHOTS_KEPT if keep is None else keep
        if orphan_age_s is None:
            orphan_age_s = orphan_age_default_s()
        objects = await self._objects(shard)
        mine = sorted((int(o.name), o) for o in objects if not o.deleted and o.name.isdigit())
        ours, foreign = await foreign_snapshots(shard, [index for index, _o in mine], journal_last)
        for index in foreign:
            await self.delete_snapshot(shard, index)
        ours = set(ours)
        mine = [(index, o) for index, o in mine if index in ours]
        for index, _o in mine[:-keep] if keep > 0 else mine:
            await self.delete_snapshot(shard, index)
        kept = [index for index, _o in (mine[-keep:] if keep > 0 else [])]
        referenced = set()
        stream = self._obs_stream(shard)
        for o in objects:
            if o.deleted:
                await self.js.purge_stream(stream, subject=self._meta_subject(shard, o.name))
            elif o.nuid:
                referenced.add(o.nuid)
        chunk_prefix = self._chunk_subject(shard, "")
        info = await self.js.stream_info(stream, subjects_filter=chunk_prefix + ">")
        now = time.time()
        for subject in (info.state.subjects or {}):
            if subject[len(chunk_prefix):] in referenced:
                continue
            try:
                last = await self.js.get_last_msg(stream, subject)
            except NotFoundError:
                continue
            if last.time is not None and now - last.time.timestamp() >= orphan_age_s:
                await self.js.purge_stream(stream, subject=subject)
                log.info("removed %d snapshot chunk(s) no snapshot refers to (%s)",
                         info.state.subjects[subject], subject)
        state = (await self.js.stream_info(stream)).state
        live = sum(1 for o in objects if not o.deleted)
        return {"kept": kept, "bytes": state.bytes, "messages": state.messages,
                "objects": live - len(foreign) - max(0, len(mine) - keep)}
