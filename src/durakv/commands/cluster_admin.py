"""Valkey 9.1's cluster words durakv had no handler for: CLUSTER SLOT-STATS, CLUSTERSCAN, COUNT-FAILURE-REPORTS,
GETSLOTMIGRATIONS and FLUSHSLOT answer from this node's data, the routing snapshot and its migration log; the slot
words that can mean a change of the coordination store's topology (ADDSLOTS, ADDSLOTSRANGE, DELSLOTS,
DELSLOTSRANGE, FLUSHSLOTS, SETSLOT NODE, MIGRATESLOTS, CANCELSLOTMIGRATIONS) check their arguments as Valkey does
and then make it by compare-and-set, the path `durakv cluster reshard` takes; the words that would change
membership, roles, epochs or a nodes.conf (MEET, FORGET, REPLICATE, SAVECONFIG, SET-CONFIG-EPOCH, BUMPEPOCH), the
manual SETSLOT states and SYNCSLOTS check their arguments and refuse, naming the reason and the durakv way.

Replies and error texts are Valkey 9.1.2's (tests/compat/test_valkey91_words.py, tests/cluster/test_cluster_slot_migration_words.py
compare them with the binary).
"""

from .. import messages
from ..errors import CommandError
from ..keyspace.db import estimate_key, type_name
from ..protocol.numbers import string2ll
from ..protocol.resp import OK
from ..routing import key_slot
from .args import ArgCursor
from .base import parse_int, syntax_error
from .cluster import _cluster
from .registry import command
from .scanning import parse_scan_options

SLOTS = 16384


def _slot(arg: bytes) -> int:
    """getSlotOrReply: a strict integer in 0..16383, else Valkey's one error for both."""
    slot = string2ll(arg)
    if slot is None or not 0 <= slot < SLOTS:
        raise CommandError(messages.CLUSTER_BAD_SLOT)
    return slot


def _subcommand_syntax(args):
    return CommandError(messages.SUBCOMMAND_SYNTAX.format(args[1].decode("utf-8", "replace"), "CLUSTER"))


def _refuse(args, why):
    raise CommandError(messages.CLUSTER_TOPOLOGY_UNSUPPORTED.format(args[1].decode("utf-8", "replace").upper(), why))


def _node(topology, arg: bytes):
    node = topology.nodes.get(arg.decode("utf-8", "replace"))
    if node is None:
        raise CommandError(messages.CLUSTER_UNKNOWN_NODE.format(arg.decode("utf-8", "replace")))
    return node


def _my_slots(routing):
    """The slots this node's shard owns, as a set."""
    mine = routing.router.my_shard if routing.router is not None else None
    out = set()
    for start, end in (mine.slots if mine is not None else ()):
        out.update(range(start, end + 1))
    return out


def _slot_keys(db, slot):
    """The keys of `slot` in database `db`, from the slot index a cluster node keeps (or a scan without one)."""
    if db.slots is not None:
        return db.slots.keys(slot)
    return [k for k in db.data if key_slot(k) == slot]


def _slot_count(db, slot):
    if db.slots is not None:
        return db.slots.count(slot)
    return sum(1 for k in db.data if key_slot(k) == slot)


def _slot_count_all(dbs, slot):
    """A slot's keys in every database: what SLOT-STATS' key-count counts (Valkey 9.1 sums the databases,
    whichever one the client selected)."""
    return sum(_slot_count(db, slot) for db in dbs)


# ---- CLUSTER SLOT-STATS ------------------------------------------------------------------------------------------

@command("cluster|slot-stats")
def cluster_slot_stats(ctx, args):
    """clusterSlotStatsCommand with cluster-slot-stats-enabled no (Valkey's default): key-count only. durakv
    keeps no per-slot CPU or network counters, so it shows what Valkey shows when it does not collect them."""
    routing, _topology = _cluster(ctx)
    n = len(args)
    kind = args[2].upper()
    if kind == b"SLOTSRANGE" and n == 5:
        start, end = _slot(args[3]), _slot(args[4])
        if start > end:
            raise CommandError(messages.SLOT_STATS_START_GT_END.format(start, end))
        mine = _my_slots(routing)
        slots = [s for s in range(start, end + 1) if s in mine]
    elif kind == b"ORDERBY" and n >= 4:
        if args[3].lower() != b"key-count":
            raise CommandError(messages.SLOT_STATS_BAD_METRIC)
        limit, desc, seen_limit, seen_order = 16384, True, False, False
        c = ArgCursor(args, 4)
        while c:
            opt = c.next_upper()
            if opt == b"LIMIT" and c.left():
                if seen_limit:
                    raise CommandError(messages.SLOT_STATS_REPEATED)
                seen_limit = True
                limit = c.int(messages.SLOT_STATS_BAD_LIMIT)     # getRangeLongFromObjectOrReply's one text
                if not 1 <= limit <= SLOTS:
                    raise CommandError(messages.SLOT_STATS_BAD_LIMIT)
            elif opt in (b"ASC", b"DESC"):
                if seen_order:
                    raise CommandError(messages.SLOT_STATS_REPEATED)
                seen_order, desc = True, opt == b"DESC"
            else:
                raise syntax_error()
        dbs = ctx.keyspace.dbs
        counted = sorted(((_slot_count_all(dbs, s), s) for s in _my_slots(routing)),
                         key=(lambda cs: (-cs[0], cs[1])) if desc else (lambda cs: (cs[0], cs[1])))
        slots = [s for _c, s in counted[:limit]]
    else:
        raise _subcommand_syntax(args)
    dbs = ctx.keyspace.dbs
    return [[s, {b"key-count": _slot_count_all(dbs, s)}] for s in slots]


# ---- CLUSTERSCAN -------------------------------------------------------------------------------------------------

_TAGS = None
_ALPHABET = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _slot_tag(slot: int) -> bytes:
    """A short hash tag whose CRC16 is `slot` (a cursor carries its slot in a tag, so a cluster client sends the
    next call to the slot's owner as it would a key). Built once: every slot has a tag of at most 3 characters."""
    global _TAGS
    if _TAGS is None:
        tags = [None] * SLOTS
        left = SLOTS
        for a in _ALPHABET:
            for b in _ALPHABET:
                for c in _ALPHABET:
                    t = bytes((a, b, c))
                    s = key_slot(t)
                    if tags[s] is None:
                        tags[s] = t
                        left -= 1
                if left == 0:
                    break
            if left == 0:
                break
        _TAGS = tags
    return _TAGS[slot]


def _parse_cluster_cursor(cursor: bytes):
    """'0' (start) -> None, or (fingerprint, slot) from '<fingerprint>-{tag}-<n>', Valkey's cursor shape."""
    if cursor == b"0":
        return None
    parts = cursor.rsplit(b"-", 1)
    if len(parts) != 2 or not parts[1].isdigit():
        raise CommandError(messages.CLUSTERSCAN_BAD_CURSOR)
    head = parts[0]
    dash = head.find(b"-")
    if dash < 0:
        raise CommandError(messages.CLUSTERSCAN_BAD_CURSOR)
    return head[:dash], key_slot(head[dash + 1:])


def _cursor(slot: int, fingerprint: bytes) -> bytes:
    return b"%s-{%s}-%d" % (fingerprint, _slot_tag(slot), slot)


@command("clusterscan")
def clusterscan(ctx, args):
    """Valkey 9.1's cluster-wide SCAN. The cursor names a slot (in a hash tag, so a client routes it): a fresh
    '0' answers the cursor of the first slot (or SLOT's) and no keys; a slot's cursor scans this node's slots from
    it upwards, each slot whole, until COUNT keys were looked at, and answers the cursor of the next slot that holds
    keys here, or of the next slot another shard owns, or '0' when none is left."""
    routing, topology = _cluster(ctx)
    only = None
    rest = []
    c = ArgCursor(args, 2)
    while c:
        arg = c.next()
        if arg.lower() == b"slot" and c.left():
            only = _slot(c.next())
        else:
            rest.append(arg)            # SCAN's own options, parsed as SCAN parses them
    opts = parse_scan_options(rest, 0, "db")
    parsed = _parse_cluster_cursor(args[1])
    if parsed is None:
        return [b"0-{%s}-0" % _slot_tag(only if only is not None else 0), []]
    _fp, start = parsed
    if only is not None and only != start:
        raise CommandError(messages.CLUSTERSCAN_SLOT_MISMATCH)
    db = ctx.db              # the selected database's keys, as Valkey 9.1 scans them
    ks = ctx.keyspace
    mine = _my_slots(routing)
    last = start if only is not None else SLOTS - 1
    found = []
    visited = 0             # COUNT bounds the keys looked at, as SCAN's does, not those MATCH/TYPE let through
    slot = start
    while slot <= last:
        if slot in mine:
            if visited >= opts.count:
                if _slot_count(db, slot):
                    return [_cursor(slot, _fingerprint(topology)), found]
            else:
                keys = list(_slot_keys(db, slot))
                visited += len(keys)
                for key in keys:
                    if db.expires and key in db.expires and ks.is_expired(db, key):
                        ks.server_delete(db, key, "expired")
                        continue
                    if opts.type is not None and type_name(db.data[key]) != opts.type:
                        continue
                    if opts.match is not None and not opts.match(key):
                        continue
                    found.append(key)
        elif topology.shard_by_slot[slot] is not None:
            return [_cursor(slot, b"0"), found]     # another shard's: its owner scans it from the start
        slot += 1
    return [b"0", found]


def _fingerprint(topology) -> bytes:
    """The cursor's first part: the topology's epoch, so a cursor says which topology issued it."""
    return b"%d" % (topology.current_epoch + 1)


# ---- COUNT-FAILURE-REPORTS / GETSLOTMIGRATIONS / FLUSHSLOT -----------------------------------------------------------

@command("cluster|count-failure-reports")
def cluster_count_failure_reports(ctx, args):
    """Failure detection is the failover controller's (leases in the coordination store), not gossip: no node
    ever files a failure report, so a known node has none."""
    _routing, topology = _cluster(ctx)
    _node(topology, args[2])
    return 0


@command("cluster|getslotmigrations")
def cluster_getslotmigrations(ctx, args):
    """The node's log of slot moves that involve its shard (routing/migrations.py, fed by every topology it
    installs), newest first, with Valkey 9.1's fields and states."""
    routing, _topology = _cluster(ctx)
    return routing.migrations.entries()


@command("cluster|flushslot")
def cluster_flushslot(ctx, args):
    """Deletes the keys of a slot in every database (Valkey 9.1 does, whichever one is selected) through the write
    path: one DEL per database that had some, journaled and replicated as any."""
    _cluster(ctx)
    slot = _slot(args[2])
    if len(args) > 4:
        raise _subcommand_syntax(args)
    if len(args) == 4 and args[3].upper() not in (b"ASYNC", b"SYNC"):
        raise syntax_error()
    ks = ctx.keyspace
    for db in ks.dbs:
        keys = list(_slot_keys(db, slot))
        if not keys:
            continue
        freed = 0
        for key in keys:
            freed += estimate_key(key, db.data[key])
            ks.delete(db, key)
            ctx.touch(db.id, key)
        ks.used_bytes -= freed   # keyless: the pipeline measures no key of this command
        ctx.propagate_in(db.id, b"DEL", *keys)
    return OK


# ---- the slot words on the stored topology --------------------------------------------------------------------
# Carried out by compare-and-set on the coordination store's topology (cluster/reshard.py, the path `durakv cluster
# reshard` takes), after Valkey's own argument checks; a one-node cluster on the local journal has no store and
# refuses them. The words that would change membership, roles, epochs or a nodes.conf refuse, naming the durakv way.

def _check_ranges(args, start, error_text):
    if (len(args) - start) % 2:
        raise CommandError(messages.WRONG_ARITY.format(("cluster|" + args[1].decode("utf-8", "replace")).lower()))
    slots = []
    for j in range(start, len(args), 2):
        a, b = _slot(args[j]), _slot(args[j + 1])
        if a > b:
            raise CommandError(error_text.format(a, b))
        slots.append((a, b))
    return slots


class _OwnerRefusal(CommandError):
    """A slot word refused by the owners a topology shows (not by its arguments): this node's copy may be
    behind the store's, which is asked before the refusal stands (_change_slots)."""
    __slots__ = ()


def _slot_list(topology, ranges, delete):
    """clusterAddSlots / clusterDelSlots's checks: each slot owned (DEL) or unowned (ADD), and named once."""
    seen = set()
    out = []
    for a, b in ranges:
        for s in range(a, b + 1):
            owner = topology.shard_by_slot[s]
            if delete and owner is None:
                raise _OwnerRefusal(messages.DELSLOTS_UNASSIGNED.format(s))
            if not delete and owner is not None:
                raise _OwnerRefusal(messages.ADDSLOTS_BUSY.format(s))
            if s in seen:
                raise CommandError(messages.ADDSLOTS_TWICE.format(s))
            seen.add(s)
            out.append(s)
    return out


def _my_shard(routing, args):
    mine = routing.router.my_shard if routing.router is not None else None
    if mine is None:
        _refuse(args, messages.CLUSTER_ROLES_IN_STORE)
    return mine


def _change_slots(ctx, args, ranges, delete):
    routing, topology = _cluster(ctx)
    name = args[1].decode("utf-8", "replace").upper()
    mine = routing.router.my_shard if routing.router is not None else None

    def check(topology):
        """The slots to change by `topology`'s owners, or Valkey's refusal (arguments first, as it checks)."""
        slots = _slot_list(topology, ranges, delete)
        if mine is None:
            _refuse(args, messages.CLUSTER_ROLES_IN_STORE)
        if delete:
            for s in slots:
                if topology.shard_by_slot[s].id != mine.id:
                    raise _OwnerRefusal(messages.CLUSTER_SLOT_OTHER_SHARD.format(s, topology.shard_by_slot[s].name))
        return slots
    change = ctx.services.cluster.unassign_slots if delete else ctx.services.cluster.assign_slots
    try:
        slots = check(topology)
    except _OwnerRefusal:
        if mine is None:
            raise
        # This node's copy of the topology may be behind the store's: a DELSLOTS another node committed (and
        # answered OK) reaches this one a moment later. The store's topology is the cluster's, so the change
        # checks that copy, and Valkey's refusal stands only if it refuses too.
        return change(name, None, mine.id, check=check)
    return change(name, slots, mine.id)


@command("cluster|addslots")
def cluster_addslots(ctx, args):
    """Slots nobody owns become this node's shard's."""
    _cluster(ctx)
    return _change_slots(ctx, args, [(s, s) for s in (_slot(a) for a in args[2:])], delete=False)


@command("cluster|delslots")
def cluster_delslots(ctx, args):
    """This node's shard's slots become nobody's (their keys stay, unserved, as in Valkey)."""
    _cluster(ctx)
    return _change_slots(ctx, args, [(s, s) for s in (_slot(a) for a in args[2:])], delete=True)


@command("cluster|addslotsrange")
def cluster_addslotsrange(ctx, args):
    _cluster(ctx)
    return _change_slots(ctx, args, _check_ranges(args, 2, messages.CLUSTER_RANGE_START_GT_END), delete=False)


@command("cluster|delslotsrange")
def cluster_delslotsrange(ctx, args):
    _cluster(ctx)
    return _change_slots(ctx, args, _check_ranges(args, 2, messages.CLUSTER_RANGE_START_GT_END), delete=True)


@command("cluster|flushslots")
def cluster_flushslots(ctx, args):
    """Every slot of this node's shard becomes nobody's, only while database 0 here is empty (Valkey's rule)."""
    routing, _topology = _cluster(ctx)
    if len(ctx.keyspace.dbs[0].data):
        raise CommandError(messages.FLUSHSLOTS_NOT_EMPTY)
    mine = _my_shard(routing, args)
    return ctx.services.cluster.unassign_slots("FLUSHSLOTS", sorted(_my_slots(routing)), mine.id)


@command("cluster|setslot")
def cluster_setslot(ctx, args):
    """SETSLOT <slot> NODE <id>: an unowned slot becomes id's shard's; one another shard owns is moved there
    (a reshard of that slot, answered once it is id's shard's). IMPORTING/MIGRATING/STABLE refuse: durakv moves
    a slot's keys itself."""
    routing, topology = _cluster(ctx)
    slot = _slot(args[2])
    action = args[3].upper()
    n = len(args)
    if action in (b"IMPORTING", b"MIGRATING") and n >= 5:
        mine = slot in _my_slots(routing)
        if action == b"MIGRATING" and not mine:
            raise CommandError(messages.SETSLOT_NOT_OWNER.format(slot))
        if action == b"IMPORTING" and mine:
            raise CommandError(messages.SETSLOT_ALREADY_OWNER.format(slot))
        if topology.nodes.get(args[4].decode("utf-8", "replace")) is None:
            raise CommandError(messages.SETSLOT_UNKNOWN_NODE.format(args[4].decode("utf-8", "replace")))
    elif action == b"NODE" and n >= 5:
        node = _node(topology, args[4])
    elif action != b"STABLE":
        raise CommandError(messages.SETSLOT_BAD_ACTION)
    if n >= 6 and args[n - 2].upper() == b"TIMEOUT":
        parse_int(args[n - 1], messages.TIMEOUT_NOT_INTEGER)
    if action != b"NODE":
        _refuse(args, messages.CLUSTER_MANUAL_MIGRATION)
    if node.role != "primary":
        raise CommandError(messages.CLUSTER_NOT_A_MASTER)
    owner = topology.shard_by_slot[slot]
    if owner is None:
        return ctx.services.cluster.assign_slots("SETSLOT", [slot], node.shard_id)
    if owner.id == node.shard_id:
        return OK
    return ctx.services.cluster.hand_over_slot(slot, node.shard_id)


# ---- atomic slot migration words (Valkey 9.1, cluster_migrateslots.c) ------------------------------------------

def _is_integer(arg: bytes) -> bool:
    """getLongLongFromObject's test: what parseSlotRangesOrReply takes for the next slot of a range."""
    return string2ll(arg) is not None


@command("cluster|migrateslots")
def cluster_migrateslots(ctx, args):
    """clusterCommandMigrateSlots: (SLOTSRANGE start end [start end ...] NODE node-id)+, checked as Valkey does,
    then one compare-and-set marks every group's slots as moving from this node's shard to the shard the named
    node is the primary of; this shard's primary moves their keys (replication/migration.py) and hands each
    slot over. +OK once the marks are stored and installed here (GETSLOTMIGRATIONS then lists the moves)."""
    routing, topology = _cluster(ctx)
    me = topology.nodes.get(routing.myself_id)
    if me is None or me.role != "primary":
        raise CommandError(messages.MIGRATESLOTS_NOT_PRIMARY)
    mine = routing.router.my_shard
    c = ArgCursor(args, 2)
    groups = []
    while c:
        if c.next_upper() != b"SLOTSRANGE":
            raise syntax_error()
        ranges, owner = [], None
        while c and _is_integer(c.peek()):
            a = _slot(c.next())
            if not c:
                raise CommandError(messages.MIGRATESLOTS_NO_END)
            b = _slot(c.next())
            if a > b:
                raise CommandError(messages.MIGRATESLOTS_START_GT_END.format(a, b))
            for s in range(a, b + 1):
                shard = topology.shard_by_slot[s]
                if shard is None:
                    raise CommandError(messages.MIGRATESLOTS_UNSERVED_SLOT.format(s))
                if owner is None:
                    owner = shard
                elif owner.id != shard.id:
                    raise CommandError(messages.MIGRATESLOTS_SPANS_SHARDS)
            for lo, hi in ranges:
                if a <= hi and lo <= b:
                    raise CommandError(messages.MIGRATESLOTS_RANGE_OVERLAP.format(a, b, lo, hi))
            ranges.append((a, b))
        if not ranges:
            raise CommandError(messages.MIGRATESLOTS_NO_RANGES)
        if owner.id != mine.id:
            raise CommandError(messages.MIGRATESLOTS_NOT_SERVED)
        slots = [s for a, b in ranges for s in range(a, b + 1)]
        for s in slots:
            if topology.migrating.get(s, (None,))[0] == mine.id:
                raise CommandError(messages.MIGRATESLOTS_ALREADY.format(s))
        if any(set(slots) & set(other) for other, _dst in groups):
            raise CommandError(messages.MIGRATESLOTS_GROUPS_OVERLAP)
        if c.left() < 2 or c.next_upper() != b"NODE":
            raise syntax_error()
        node_id = c.next()
        name = node_id.decode("utf-8", "replace")
        if len(node_id) != 40:
            raise CommandError(messages.MIGRATESLOTS_BAD_NODE.format(name))
        target = topology.nodes.get(name)
        if target is None:
            raise CommandError(messages.MIGRATESLOTS_UNKNOWN_NODE.format(name))
        if target.id == routing.myself_id:
            raise CommandError(messages.MIGRATESLOTS_TO_MYSELF)
        if target.role != "primary":
            raise CommandError(messages.MIGRATESLOTS_TARGET_REPLICA.format(name))
        groups.append((slots, target.shard_id))
    return ctx.services.cluster.migrate_slots(groups)


@command("cluster|cancelslotmigrations")
def cluster_cancelslotmigrations(ctx, args):
    """Cancels every move out of this node's shard, slot by slot (replication/migration.py's cancel): a slot
    none of whose keys has reached the target stays here, one whose keys had started to move finishes moving, so
    every key keeps exactly one owner. +OK once the marks are removed and installed here."""
    routing, topology = _cluster(ctx)
    me = topology.nodes.get(routing.myself_id)
    mine = routing.router.my_shard
    if (me is None or me.role != "primary" or mine is None
            or not any(src == mine.id for src, _dst in topology.migrating.values())):
        raise CommandError(messages.NO_SLOT_MIGRATIONS)
    return ctx.services.cluster.cancel_slot_migrations()


@command("cluster|syncslots")
def cluster_syncslots(ctx, args):
    """The node-to-node half of Valkey's atomic slot migration; durakv's moves go through the target's journal."""
    _cluster(ctx)
    _refuse(args, messages.CLUSTER_SYNCSLOTS_INTERNAL)


# ---- refusals ------------------------------------------------------------------------------------------------------

@command("cluster|forget")
def cluster_forget(ctx, args):
    routing, topology = _cluster(ctx)
    node = _node(topology, args[2])
    if node.id == routing.myself_id:
        raise CommandError(messages.CLUSTER_FORGET_MYSELF)
    _refuse(args, messages.CLUSTER_NODES_IN_STORE)


def _port(arg: bytes, text: str):
    value = string2ll(arg)
    if value is None:
        raise CommandError(text.format(arg.decode("utf-8", "replace")))
    return value


@command("cluster|meet")
def cluster_meet(ctx, args):
    _cluster(ctx)
    if len(args) > 5:
        raise _subcommand_syntax(args)
    _port(args[3], messages.CLUSTER_MEET_BAD_PORT)
    if len(args) == 5:
        _port(args[4], messages.CLUSTER_MEET_BAD_BUS_PORT)
    _refuse(args, messages.CLUSTER_NODES_IN_STORE)


@command("cluster|replicate")
def cluster_replicate(ctx, args):
    _routing, topology = _cluster(ctx)
    if len(args) == 4:
        if args[2].upper() != b"NO" or args[3].upper() != b"ONE":
            raise _subcommand_syntax(args)
    elif len(args) == 3:
        _node(topology, args[2])
    else:
        raise _subcommand_syntax(args)
    _refuse(args, messages.CLUSTER_ROLES_IN_STORE)


@command("cluster|saveconfig")
def cluster_saveconfig(ctx, args):
    _cluster(ctx)
    _refuse(args, messages.CLUSTER_CONFIG_IN_STORE)


@command("cluster|set-config-epoch")
def cluster_set_config_epoch(ctx, args):
    _cluster(ctx)
    epoch = parse_int(args[2])
    if epoch < 0:
        raise CommandError(messages.CLUSTER_BAD_CONFIG_EPOCH.format(epoch))
    _refuse(args, messages.CLUSTER_EPOCHS_IN_STORE)


@command("cluster|bumpepoch")
def cluster_bumpepoch(ctx, args):
    _cluster(ctx)
    _refuse(args, messages.CLUSTER_EPOCHS_IN_STORE)
