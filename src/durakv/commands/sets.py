"""Set commands. A set is a Python set of bytes members.

Effects: SADD/SREM/SMOVE and the *STORE commands are deterministic given the state and propagate
themselves (a *STORE whose result is empty propagates `DEL dst`, and nothing if dst did not exist).
SPOP's random choice becomes `SREM key m1 m2 ...` (batches of 1024 members), or `DEL key` when it
takes the whole set.

Random members: a Python set has no random access, so picking one element is O(n). For sets
larger than _SAMPLER_MIN, SPOP / SRANDMEMBER keep a per-set sampler: a list snapshot of the
members, indexed in O(1), in which every live member has exactly one entry. A member removed by
SREM/SMOVE/SPOP-with-count keeps its (now stale) entry and is remembered in `removed`; a draw that
lands on a stale entry swap-removes it and draws again; a member added back while its stale entry
is still there revives that entry, any other new member is appended. So draws stay uniform and
every operation stays O(1) amortized; the snapshot is rebuilt when stale entries outnumber the
members, or when the sizes disagree (a mutation the sampler did not see).
Samplers are found by id(set) and dropped by a weakref callback when their set is freed.
"""

import weakref
from itertools import islice

from .. import messages
from ..errors import CommandError, WrongType
from ..keyspace import encoding
from ..keyspace.events import GENERIC, SET
from ..protocol.resp import RespSet
from .args import ArgCursor
from .base import INT64_MAX, parse_int, syntax_error
from .scanning import scan_collection
from .registry import command

_SREM_BATCH = 1024
_SAMPLER_MIN = 64


# -- random member sampling -----------------------------------------------------------------------

class _Sampler:
    __slots__ = ("items", "removed", "ref")

    def __init__(self, s):
        self.items = list(s)
        self.removed = set()  # former members whose entries are still in items
        self.ref = None


_samplers = {}  # id(set) -> _Sampler


def _sampler(s):
    sid = id(s)
    sm = _samplers.get(sid)
    if sm is None:
        sm = _Sampler(s)
        sm.ref = weakref.ref(s, lambda _ref, sid=sid: _samplers.pop(sid, None))
        _samplers[sid] = sm
    elif len(sm.items) - len(sm.removed) != len(s) or len(sm.removed) > len(s) + _SAMPLER_MIN:
        sm.items = list(s)
        sm.removed = set()
    return sm


def _draw(sm, s, rng):
    """(index in sm.items, member) of a uniformly random member of non-empty s."""
    items = sm.items
    while True:
        if not items:  # only after a mutation the sampler did not see
            items = sm.items = list(s)
            sm.removed = set()
        i = rng.randrange(len(items))
        m = items[i]
        if m in s:
            return i, m
        _swap_remove(items, i)
        sm.removed.discard(m)


def _swap_remove(items, i):
    last = items.pop()
    if i < len(items):
        items[i] = last


def _add_members(s, members):
    """Adds members to s keeping its sampler (if any) exact; returns how many were new."""
    sm = _samplers.get(id(s)) if _samplers else None
    if sm is None:
        before = len(s)
        s.update(members)
        return len(s) - before
    added = 0
    removed = sm.removed
    append = sm.items.append
    for m in members:
        if m not in s:
            s.add(m)
            if m in removed:
                removed.discard(m)  # its old entry is live again
            else:
                append(m)
            added += 1
    return added


def _remove_members(s, members):
    """Removes members from s keeping its sampler (if any) exact; returns how many were there."""
    sm = _samplers.get(id(s)) if _samplers else None
    before = len(s)
    if sm is None:
        s.difference_update(members)
        return before - len(s)
    note = sm.removed.add
    for m in members:
        if m in s:
            s.remove(m)
            note(m)
    return before - len(s)


def _random_member(ctx, s):
    n = len(s)
    if n <= _SAMPLER_MIN and (not _samplers or id(s) not in _samplers):
        return next(islice(s, ctx.keyspace.rng.randrange(n), None))
    return _draw(_sampler(s), s, ctx.keyspace.rng)[1]


def _random_members_unique(ctx, s, count):
    """count (< len(s)) distinct random members."""
    rng = ctx.keyspace.rng
    size = len(s)
    if count * 3 > size or size <= _SAMPLER_MIN:
        return rng.sample(list(s), count)
    sm = _sampler(s)
    out = set()
    while len(out) < count:
        out.add(_draw(sm, s, rng)[1])
    return list(out)


def _random_members_repeat(ctx, s, count):
    """count random members, possibly repeated, in random order."""
    rng = ctx.keyspace.rng
    size = len(s)
    if count * 4 >= size or size <= _SAMPLER_MIN:
        return rng.choices(list(s), k=count)
    sm = _sampler(s)
    return [_draw(sm, s, rng)[1] for _ in range(count)]


# -- commands ---------------------------------------------------------------------------------------

@command("sadd", core=True)
def sadd(ctx, args):
    key = args[1]
    s = ctx.lookup_set(key)
    rules = ctx.keyspace.encoding_rules
    if s is None:
        members = list(dict.fromkeys(args[2:]))
        s = set(members)
        ctx.store(key, s)
        encoding.set_added(rules, ctx.db, key, s, members, len(args) - 2, created=True)
        ctx.propagate_args(args)
        ctx.notify(SET, b"sadd", key)
        return len(s)
    # Once a hashtable, a set stays one: only smaller encodings need the new members.
    track = ctx.db.enc.get(key) is not encoding.HASHTABLE
    if len(args) == 3 and not _samplers:
        m = args[2]
        if m in s:
            return 0
        s.add(m)
        added = 1
        new = (m,)
    else:
        new = [m for m in dict.fromkeys(args[2:]) if m not in s] if track else ()
        added = _add_members(s, args[2:])
    if track:
        encoding.set_added(rules, ctx.db, key, s, new, len(args) - 2)
    if added:
        ctx.propagate_args(args)
        ctx.notify(SET, b"sadd", key)
    return added


@command("srem")
def srem(ctx, args):
    key = args[1]
    s = ctx.lookup_set(key)
    if s is None:
        return 0
    deleted = _remove_members(s, args[2:])
    if deleted:
        ctx.notify(SET, b"srem", key)
        ctx.remove_if_empty(key, s)
        ctx.propagate_args(args)
    return deleted


@command("smove")
def smove(ctx, args):
    src_key, dst_key, member = args[1], args[2], args[3]
    src = ctx.lookup(src_key)
    dst = ctx.lookup(dst_key)
    if src is None:
        return 0
    if type(src) is not set or (dst is not None and type(dst) is not set):
        raise WrongType()
    if src is dst:
        return 1 if member in src else 0
    if member not in src:
        return 0
    _remove_members(src, (member,))
    ctx.notify(SET, b"srem", src_key)
    ctx.remove_if_empty(src_key, src)
    rules = ctx.keyspace.encoding_rules
    if dst is None:
        dst = {member}
        ctx.store(dst_key, dst)
        encoding.set_added(rules, ctx.db, dst_key, dst, (member,), 1, created=True)
    elif member not in dst:
        _add_members(dst, (member,))
        encoding.set_added(rules, ctx.db, dst_key, dst, (member,))
    else:
        # Already in the destination: only the source changed (Valkey touches the destination only
        # when the member is added, so a WATCH on it survives).
        ctx.propagate(b"SREM", src_key, member)
        ctx.touch(ctx.db.id, src_key, exact=True)
        return 1
    ctx.propagate_args(args)
    ctx.notify(SET, b"sadd", dst_key)
    return 1


@command("scard")
def scard(ctx, args):
    s = ctx.lookup_set(args[1])
    return 0 if s is None else len(s)


@command("sismember")
def sismember(ctx, args):
    s = ctx.lookup_set(args[1])
    return 1 if s is not None and args[2] in s else 0


@command("smismember")
def smismember(ctx, args):
    s = ctx.lookup_set(args[1])
    if s is None:
        return [0] * (len(args) - 2)
    return [1 if m in s else 0 for m in args[2:]]


@command("smembers")
def smembers(ctx, args):
    key = args[1]
    s = ctx.lookup_set(key)
    if s is None:
        return RespSet()
    if encoding.set_encoding(ctx.keyspace.encoding_rules, ctx.db, key, s) == encoding.INTSET:
        # an intset is an array of sorted integers: Valkey answers in ascending numeric order
        return RespSet(sorted(s, key=int))
    return RespSet(s)


@command("srandmember")
def srandmember(ctx, args):
    n = len(args)
    if n > 3:
        raise syntax_error()
    if n == 2:
        s = ctx.lookup_set(args[1])
        return None if s is None else _random_member(ctx, s)
    count = parse_int(args[2])
    if count < -INT64_MAX:
        raise CommandError(messages.VALUE_MUST_BETWEEN.format(-INT64_MAX, INT64_MAX))
    s = ctx.lookup_set(args[1])
    if s is None or count == 0:
        return []
    if count == 1 or count == -1:
        return [_random_member(ctx, s)]
    if count < 0:
        return _random_members_repeat(ctx, s, -count)
    if count >= len(s):
        return list(s)
    return _random_members_unique(ctx, s, count)


@command("spop")
def spop(ctx, args):
    n = len(args)
    if n > 3:
        raise syntax_error()
    key = args[1]
    if n == 2:
        s = ctx.lookup_set(key)
        if s is None:
            return None
        if len(s) <= _SAMPLER_MIN and (not _samplers or id(s) not in _samplers):
            member = next(islice(s, ctx.keyspace.rng.randrange(len(s)), None))
        else:
            sm = _sampler(s)
            i, member = _draw(sm, s, ctx.keyspace.rng)
            _swap_remove(sm.items, i)
        s.remove(member)
        ctx.notify(SET, b"spop", key)
        ctx.remove_if_empty(key, s)
        ctx.propagate(b"SREM", key, member)
        return member
    count = parse_int(args[2], messages.VALUE_OUT_OF_RANGE_POSITIVE)
    if count < 0:
        raise CommandError(messages.VALUE_OUT_OF_RANGE_POSITIVE)
    s = ctx.lookup_set(key)
    if s is None or count == 0:
        return RespSet()
    ctx.notify(SET, b"spop", key)
    if count >= len(s):
        ctx.delete(key)
        ctx.propagate(b"UNLINK" if ctx.keyspace.unlink_server_del else b"DEL", key)   # lazyfree-lazy-server-del
        ctx.notify(GENERIC, b"del", key)
        return RespSet(s)
    popped = _random_members_unique(ctx, s, count)
    _remove_members(s, popped)
    for i in range(0, count, _SREM_BATCH):
        ctx.propagate(b"SREM", key, *popped[i:i + _SREM_BATCH])
    return RespSet(popped)


def _lookup_sets(ctx, keys):
    """The sets at keys (None for a missing key); WRONGTYPE if any key holds another type. Each a read's lookup
    (lookupKeyRead), in the *STORE commands too."""
    out = []
    lookup = ctx.lookup_read
    for k in keys:
        v = lookup(k)
        if v is not None and type(v) is not set:
            raise WrongType()
        out.append(v)
    return out


def _inter(sets):
    if None in sets:
        return set()
    if len(sets) == 1:
        return set(sets[0])
    sets = sorted(sets, key=len)
    return sets[0].intersection(*sets[1:])


def _union(sets):
    return set().union(*[s for s in sets if s is not None])


def _diff(sets):
    first = sets[0]
    if first is None:
        return set()
    return first.difference(*[s for s in sets[1:] if s is not None])


def _store(ctx, args, result, event):
    dst = args[1]
    if result:
        ctx.store(dst, result)
        encoding.set_stored(ctx.keyspace.encoding_rules, ctx.db, dst, result)
        ctx.propagate_args(args)
        ctx.notify(SET, event, dst)
        return len(result)
    if ctx.delete(dst):
        ctx.propagate(b"DEL", dst)
        ctx.notify(GENERIC, b"del", dst)
    return 0


@command("sinter")
def sinter(ctx, args):
    sets = _lookup_sets(ctx, args[1:])
    if len(sets) == 1:  # no copy before the reply's own
        return RespSet() if sets[0] is None else RespSet(sets[0])
    return RespSet(_inter(sets))


@command("sinterstore")
def sinterstore(ctx, args):
    return _store(ctx, args, _inter(_lookup_sets(ctx, args[2:])), b"sinterstore")


@command("sunion")
def sunion(ctx, args):
    return RespSet(_union(_lookup_sets(ctx, args[1:])))


@command("sunionstore")
def sunionstore(ctx, args):
    return _store(ctx, args, _union(_lookup_sets(ctx, args[2:])), b"sunionstore")


@command("sdiff")
def sdiff(ctx, args):
    return RespSet(_diff(_lookup_sets(ctx, args[1:])))


@command("sdiffstore")
def sdiffstore(ctx, args):
    return _store(ctx, args, _diff(_lookup_sets(ctx, args[2:])), b"sdiffstore")


@command("sintercard")
def sintercard(ctx, args):
    numkeys = parse_int(args[1], messages.NUMKEYS_ZERO)
    if numkeys < 1:
        raise CommandError(messages.NUMKEYS_ZERO)
    n = len(args)
    if numkeys > n - 2:
        raise CommandError(messages.NUMKEYS_GT_ARGS)
    limit = 0
    c = ArgCursor(args, 2 + numkeys)
    while c:
        if c.next_lower() == b"limit" and c.left():
            limit = c.int(messages.LIMIT_NEGATIVE)
            if limit < 0:
                raise CommandError(messages.LIMIT_NEGATIVE)
        else:
            raise syntax_error()
    sets = _lookup_sets(ctx, args[2:2 + numkeys])
    if None in sets:
        return 0
    if not limit:
        return len(_inter(sets))
    sets.sort(key=len)
    first, others = sets[0], [s for s in sets[1:] if s is not sets[0]]
    count = 0
    for m in first:
        for o in others:
            if m not in o:
                break
        else:
            count += 1
            if count >= limit:
                break
    return count


@command("sscan")
def sscan(ctx, args):
    return scan_collection(ctx, args, set)
