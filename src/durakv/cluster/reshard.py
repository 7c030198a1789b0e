"""Resharding as an operator asks for it: which slots move where, written into the topology (compare-and-set);
the source shards' primaries move the keys (replication/migration.py) and hand each slot over when it is
empty, so this only marks the work and waits for it.

    reshard(store, count, source, target)   move `count` slots of shard `source` to shard `target`
    rebalance(store)                        move slots until every shard owns the same number (+-1)
"""

import asyncio
import time

from ..routing.slots import SLOTS
from .respclient import RespClient


class ReshardError(Exception):
    pass


def _shard(topology, name):
    for sh in topology.shards:
        if sh.name == str(name) or sh.id == str(name):
            return sh
    raise ReshardError("no shard %r (shards: %s)" % (name, ", ".join(sh.name for sh in topology.shards)))


def _owned(shard):
    return [s for a, b in shard.slots for s in range(a, b + 1)]


def plan_rebalance(topology) -> list:
    """[(slots, source shard id, target shard id)] that leave every shard with SLOTS // n or one more slot,
    moving the fewest slots (from the highest slots of the fullest shards to the emptiest ones)."""
    shards = sorted(topology.shards, key=lambda sh: sh.name)
    n = len(shards)
    want = {sh.id: SLOTS // n + (1 if i < SLOTS % n else 0) for i, sh in enumerate(shards)}
    owned = {sh.id: _owned(sh) for sh in shards}
    spare = []
    for sh in shards:
        extra = len(owned[sh.id]) - want[sh.id]
        if extra > 0:
            spare.extend((s, sh.id) for s in owned[sh.id][-extra:])
    moves = {}
    for sh in shards:
        need = want[sh.id] - len(owned[sh.id])
        while need > 0 and spare:
            slot, src = spare.pop()
            moves.setdefault((src, sh.id), []).append(slot)
            need -= 1
    return [(sorted(slots), src, dst) for (src, dst), slots in moves.items()]


async def change_topology(store, change):
    """The one compare-and-set path of every slot change: reads the topology, applies change(topology) (which
    returns the next one, or raises ReshardError when the change no longer applies), writes it conditional on the
    revision read, and retries on races (a failover's promotion, another shard's hand-over). Returns the new
    revision."""
    for _ in range(50):
        topology, revision = await store.get_topology()
        if topology is None:
            raise ReshardError("no topology in the coordination store (is this a cluster-mode cluster?)")
        updated = change(topology)
        try:
            return await store.put_topology(updated, revision)
        except Exception:  # noqa: BLE001 - a concurrent change (a failover's promotion): read again
            await asyncio.sleep(0.05)
    raise ReshardError("the topology kept changing; try again")


async def mark_migrations(store, moves, fresh_only=False):
    """Writes the migrations into the topology, retrying the compare-and-set on races. fresh_only: a slot
    already migrating is an error (CLUSTER MIGRATESLOTS), not redirected to the new target."""
    def change(topology):
        for slots, src, dst in moves:
            for s in slots:
                owner = topology.shard_by_slot[s]
                if owner is None or owner.id != src:
                    raise ReshardError("slot %d is not owned by shard %s" % (s, topology.shard_by_id[src].name))
                if fresh_only and s in topology.migrating:
                    raise ReshardError("slot %d is already migrating" % s)
            topology = topology.with_migration(slots, dst)
        return topology
    return await change_topology(store, change)


async def unmark_migrations(store, slots, source, target):
    """Reshard's abort path: the migration marks of `slots` (source -> target) are removed, the source keeps
    them. Only for slots none of whose keys is on the target (the caller knows: replication/migration.py's
    cancel); a slot no longer migrating that way is left alone. Returns (new revision, the slots unmarked),
    (0, []) when none was."""
    unmarked = []

    def change(topology):
        unmarked[:] = [s for s in slots if topology.migrating.get(s) == (source, target)]
        if not unmarked:
            raise _NothingToDo
        return topology.without_migration(unmarked)
    try:
        return await change_topology(store, change), list(unmarked)
    except _NothingToDo:
        return 0, []


async def assign_slots(store, slots, shard_id):
    """CLUSTER ADDSLOTS / SETSLOT NODE on an unowned slot: slots nobody owns become shard_id's."""
    def change(topology):
        for s in slots:
            owner = topology.shard_by_slot[s]
            if owner is not None:
                raise ReshardError("slot %d is already owned by shard %s" % (s, owner.name))
        return topology.with_slots_assigned(slots, shard_id)
    return await change_topology(store, change)


async def unassign_slots(store, slots, shard_id):
    """CLUSTER DELSLOTS / FLUSHSLOTS: shard_id's slots (not migrating) become nobody's."""
    def change(topology):
        for s in slots:
            owner = topology.shard_by_slot[s]
            if owner is None or owner.id != shard_id:
                raise ReshardError("slot %d is not owned by shard %s" % (s, topology.shard_by_id[shard_id].name))
            if s in topology.migrating:
                raise ReshardError("slot %d is migrating" % s)
        return topology.with_slots_unassigned(slots)
    return await change_topology(store, change)


class _NothingToDo(Exception):
    pass


def _migrated_keys(topology, source_ids, tls_ca=None) -> int:
    """The keys the source shards' primaries report moved so far (INFO cluster `durakv_migrated_keys`), summed;
    a primary that does not answer counts 0 this time."""
    total = 0
    for sid in source_ids:
        shard = topology.shard_by_id.get(sid)
        primary = shard.primary if shard is not None else None
        if primary is None:
            continue
        # with the cluster's CA at hand the probe goes over TLS even where a plain port is open too
        port, ca = (primary.tls_port, tls_ca) if primary.tls_port and (tls_ca or not primary.port) else \
            (primary.port, None)
        try:
            with RespClient(primary.ip, port, timeout_s=2.0, tls_ca=ca) as c:
                total += int(c.info("cluster").get("cluster", {}).get("durakv_migrated_keys", 0))
        except Exception:  # noqa: BLE001 - down or failing over: no figure this time
            continue
    return total


async def wait_moved(store, moves, stall_timeout_s, progress=None, tls_ca=None, probe_interval_s=1.0):
    """Waits until every slot of `moves` is owned by its target; returns the seconds it took. It waits as long
    as the move progresses (a slot handed over, or the source primaries' count of moved keys changing) and
    gives up only after `stall_timeout_s` with no progress at all. progress(slots_done, slots_total,
    keys_moved) is called when either figure changes."""
    loop = asyncio.get_running_loop()
    started = last_change = time.monotonic()
    wanted = {s: dst for slots, _src, dst in moves for s in slots}
    sources = sorted({src for _slots, src, _dst in moves})
    last = None
    keys = 0
    next_probe = started
    while True:
        topology, _rev = await store.get_topology()
        pending = [s for s, dst in wanted.items()
                   if topology.shard_by_slot[s] is None or topology.shard_by_slot[s].id != dst]
        now = time.monotonic()
        if pending and now >= next_probe:
            keys = await loop.run_in_executor(None, _migrated_keys, topology, sources, tls_ca)
            next_probe = now + probe_interval_s
        state = (len(pending), keys)
        if state != last:
            if progress is not None:
                progress(len(wanted) - len(pending), len(wanted), keys)
            last, last_change = state, now
        if not pending:
            return now - started
        if now - last_change > stall_timeout_s:
            raise ReshardError("%d of %d slots still migrating, no progress for %.0fs (the nodes keep going; "
                               "check `cluster status`)" % (len(pending), len(wanted), stall_timeout_s))
        await asyncio.sleep(0.1)


async def reshard(store, count, source, target, timeout_s=600.0, progress=None, tls_ca=None):
    """timeout_s: how long the move may go without progress before this gives up (the nodes keep going)."""
    topology, _rev = await store.get_topology()
    if topology is None:
        raise ReshardError("no topology in the coordination store (is this a cluster-mode cluster?)")
    src, dst = _shard(topology, source), _shard(topology, target)
    if src.id == dst.id:
        raise ReshardError("source and target are the same shard")
    owned = [s for s in _owned(src) if s not in topology.migrating]
    if count < 1 or count > len(owned):
        raise ReshardError("shard %s owns %d slots not already migrating; cannot move %d"
                           % (src.name, len(owned), count))
    moves = [(owned[-count:], src.id, dst.id)]
    await mark_migrations(store, moves)
    return await wait_moved(store, moves, timeout_s, progress, tls_ca)


async def rebalance(store, timeout_s=600.0, progress=None, tls_ca=None):
    """timeout_s: how long the move may go without progress before this gives up (the nodes keep going)."""
    topology, _rev = await store.get_topology()
    if topology is None:
        raise ReshardError("no topology in the coordination store (is this a cluster-mode cluster?)")
    moves = plan_rebalance(topology)
    if not moves:
        return 0.0
    await mark_migrations(store, moves)
    return await wait_moved(store, moves, timeout_s, progress, tls_ca)
