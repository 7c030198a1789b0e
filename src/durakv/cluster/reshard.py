"""Resharding as an operator asks for it: which slots move where, written into the topology (compare-and-set);
the source shards' primaries move the keys (replication/migration.py) and hand each slot over when it is
empty, so this only marks the work and waits for it.

    reshard(store, count, source, target)   move `count` slots of shard `source` to shard `target`
    rebalance(store)                        move slots until every shard owns the same number (+-1)
"""

import asyncio
import time

from ..routing.slots import SLOTS


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


async def mark_migrations(store, moves):
    """Writes the migrations into the topology, retrying the compare-and-set on races."""
    for _ in range(50):
        topology, revision = await store.get_topology()
        if topology is None:
            raise ReshardError("no topology in the coordination store (is this a cluster-mode cluster?)")
        for slots, src, dst in moves:
            for s in slots:
                owner = topology.shard_by_slot[s]
                if owner is None or owner.id != src:
                    raise ReshardError("slot %d is not owned by shard %s" % (s, topology.shard_by_id[src].name))
            topology = topology.with_migration(slots, dst)
        try:
            return await store.put_topology(topology, revision)
        except Exception:  # noqa: BLE001 - a concurrent change (a failover's promotion): read again
            await asyncio.sleep(0.05)
    raise ReshardError("the topology kept changing; try again")


async def wait_moved(store, moves, timeout_s, progress=None):
    """Waits until every slot of `moves` is owned by its target; returns the seconds it took."""
    started = time.monotonic()
    wanted = {s: dst for slots, _src, dst in moves for s in slots}
    last = None
    while True:
        topology, _rev = await store.get_topology()
        pending = [s for s, dst in wanted.items()
                   if topology.shard_by_slot[s] is None or topology.shard_by_slot[s].id != dst]
        if progress is not None and len(pending) != last:
            progress(len(wanted) - len(pending), len(wanted))
            last = len(pending)
        if not pending:
            return time.monotonic() - started
        if time.monotonic() - started > timeout_s:
            raise ReshardError("%d of %d slots still migrating after %.0fs (the nodes keep going; check "
                               "`cluster status`)" % (len(pending), len(wanted), timeout_s))
        await asyncio.sleep(0.1)


async def reshard(store, count, source, target, timeout_s=600.0, progress=None):
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
    return await wait_moved(store, moves, timeout_s, progress)


async def rebalance(store, timeout_s=600.0, progress=None):
    topology, _rev = await store.get_topology()
    if topology is None:
        raise ReshardError("no topology in the coordination store (is this a cluster-mode cluster?)")
    moves = plan_rebalance(topology)
    if not moves:
        return 0.0
    await mark_migrations(store, moves)
    return await wait_moved(store, moves, timeout_s, progress)
