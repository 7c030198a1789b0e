"""Resharding as an operator asks for it: which slots move where, written into the topology (compare-and-set);
the source shards' primaries move the keys (replication/migration.py) and hand each slot over when it is
empty, so this only marks the work and waits for it.

    reshard(store, count, source, target)   move `count` slots of shard `source` to shard `target`
    rebalance(store)                        move slots until every shard owns the same number (+-1)

Two writers, two documents (routing/shardstate.py): the operator changes the topology (`change_topology`,
which first folds every shard's state into it); a node changes only its own shard's state (`change_state`:
the slot words a node runs, CLUSTER MIGRATESLOTS / CANCELSLOTMIGRATIONS / ADDSLOTS / DELSLOTS, and the
hand-over of an emptied slot).
"""

import asyncio
import time
from dataclasses import replace

from ..routing.shardstate import fold
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
    """The operator's one compare-and-set path of every topology change: reads the topology and every shard's
    state, folds them (the composed topology), applies change(composed) (which returns the next one, or raises
    ReshardError when the change no longer applies), writes it conditional on the revision read, retries on
    races, then removes from each state exactly the entries it folded. Returns the new revision."""
    from .store import StaleRevision
    for _ in range(50):
        base, revision = await store.get_base_topology()
        if base is None:
            raise ReshardError("no topology in the coordination store (was the cluster created?)")
        states = {name: st for name, (st, _rev) in (await store.get_states(base)).items()}
        composed, _folded = fold(base, states)
        updated = change(composed)
        try:
            new_revision = await store.put_topology(updated, revision)
        except StaleRevision:
            await asyncio.sleep(0.05)
            continue
        for name, read in states.items():
            if read != read.folded:
                await store.update_state(name, lambda current, read=read: current.without(read))
        return new_revision
    raise ReshardError("the topology kept changing; try again")


async def change_state(store, shard_name, change):
    """A node's change of its own shard's state: change(ShardState) -> ShardState, compare-and-set, retried.
    Returns the state's new revision (0 when there was nothing to change)."""
    return await store.update_state(shard_name, change)


async def mark_migrations(store, moves, fresh_only=False):
    """The operator's: writes the migrations into the topology, retrying the compare-and-set on races.
    fresh_only: a slot already migrating is an error, not redirected to the new target."""
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


def _check_owned(topology, mine, slots, migrating_ok=False):
    for s in slots:
        owner = topology.shard_by_slot[s]
        if owner is None or owner.id != mine.id:
            raise ReshardError("slot %d is not owned by this node's shard %s" % (s, mine.name))
        if not migrating_ok and s in topology.migrating:
            raise ReshardError("slot %d is already migrating" % s)


async def node_mark_migrations(store, topology, mine, moves):
    """CLUSTER MIGRATESLOTS on a node: moves [(slots, target shard id)] out of its own shard `mine`."""
    for slots, dst in moves:
        _check_owned(topology, mine, slots)
        if dst not in topology.shard_by_id or dst == mine.id:
            raise ReshardError("unknown target shard %s" % dst)
    marks = {s: dst for slots, dst in moves for s in slots}
    return await change_state(store, mine.name, lambda st: replace(
        st, marks={**st.marks, **marks}, unmarked=st.unmarked - set(marks)))


async def unmark_migrations(store, slots, source, target, shard_name=None):
    """A node's cancellation of moves out of its own shard (replication/migration.py's cancel): the slots of
    `slots` still migrating source -> target stay with the source. Only for slots none of whose keys is on the
    target (the caller knows). Returns (new revision, the slots unmarked), (0, []) when none was."""
    topology, _rev = await store.get_topology()
    unmarked = [s for s in slots if topology.migrating.get(s) == (source, target)]
    if not unmarked:
        return 0, []
    name = shard_name or topology.shard_by_id[source].name
    revision = await change_state(store, name, lambda st: replace(
        st, unmarked=st.unmarked | set(unmarked), marks={s: t for s, t in st.marks.items() if s not in unmarked}))
    return revision, list(unmarked)


async def hand_over(store, shard_name, slots: dict):
    """The source's hand-over of emptied slots {slot: target shard id} (each still migrating there)."""
    return await change_state(store, shard_name, lambda st: replace(st, handed={**st.handed, **slots}))


async def assign_slots(store, slots, shard_id, shard_name=None):
    """CLUSTER ADDSLOTS / SETSLOT NODE on an unowned slot: slots nobody owns become shard_id's (a node's own)."""
    topology, _rev = await store.get_topology()
    for s in slots:
        owner = topology.shard_by_slot[s]
        if owner is not None:
            raise ReshardError("slot %d is already owned by shard %s" % (s, owner.name))
    name = shard_name or topology.shard_by_id[shard_id].name
    return await change_state(store, name, lambda st: replace(
        st, claimed=st.claimed | set(slots), released=st.released - set(slots)))


async def unassign_slots(store, slots, shard_id, shard_name=None):
    """CLUSTER DELSLOTS / FLUSHSLOTS: shard_id's slots (not migrating) become nobody's (a node's own)."""
    topology, _rev = await store.get_topology()
    for s in slots:
        owner = topology.shard_by_slot[s]
        if owner is None or owner.id != shard_id:
            raise ReshardError("slot %d is not owned by shard %s" % (s, topology.shard_by_id[shard_id].name))
        if s in topology.migrating:
            raise ReshardError("slot %d is migrating" % s)
    name = shard_name or topology.shard_by_id[shard_id].name
    return await change_state(store, name, lambda st: replace(
        st, released=st.released | set(slots), claimed=st.claimed - set(slots)))


def _migrated_keys(topology, source_ids, client) -> int:
    """The keys the source shards' primaries report moved so far (INFO cluster `durakv_migrated_keys`), summed;
    a primary that does not answer counts 0 this time. client(node) -> that node's count."""
    total = 0
    for sid in source_ids:
        shard = topology.shard_by_id.get(sid)
        primary = shard.primary if shard is not None else None
        if primary is None:
            continue
        try:
            total += client(primary)
        except Exception:  # noqa: BLE001 - down or failing over: no figure this time
            continue
    return total


def plain_client(tls_ca=None, password=None):
    """A client(node) for wait_moved: the node's INFO cluster over RESP (its TLS port with tls_ca)."""
    def count(node):
        # with the cluster's CA at hand the probe goes over TLS even where a plain port is open too
        port, ca = (node.tls_port, tls_ca) if node.tls_port and (tls_ca or not node.port) else (node.port, None)
        with RespClient(node.ip, port, timeout_s=2.0, tls_ca=ca) as c:
            if password:
                c.execute("AUTH", password)
            return int(c.info("cluster").get("cluster", {}).get("durakv_migrated_keys", 0))
    return count


async def wait_moved(store, moves, stall_timeout_s, progress=None, client=None, probe_interval_s=1.0):
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
            keys = await loop.run_in_executor(None, _migrated_keys, topology, sources, client or plain_client())
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


async def reshard(store, count, source, target, timeout_s=600.0, progress=None, client=None):
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
    return await wait_moved(store, moves, timeout_s, progress, client)


async def rebalance(store, timeout_s=600.0, progress=None, client=None):
    """timeout_s: how long the move may go without progress before this gives up (the nodes keep going)."""
    topology, _rev = await store.get_topology()
    if topology is None:
        raise ReshardError("no topology in the coordination store (is this a cluster-mode cluster?)")
    moves = plan_rebalance(topology)
    if not moves:
        return 0.0
    await mark_migrations(store, moves)
    return await wait_moved(store, moves, timeout_s, progress, client)
