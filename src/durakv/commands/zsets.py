"""Sorted set commands. A sorted set is a keyspace.ZSet (member -> float score + sorted order).

Effects: ZINCRBY and ZADD INCR propagate `ZADD key score member` with the exact resulting score;
pops (ZPOPMIN/ZPOPMAX/ZMPOP and the blocking ones) propagate `ZPOPMIN|ZPOPMAX key [n popped]` as Valkey does
(deterministic on the same state); every other write (ZADD, ZREM,
ZREMRANGEBY*, the *STORE commands) is deterministic given the prior state and propagates itself.
Scores in replies are Python floats: a double in RESP3, a bulk string in RESP2.
"""

import math

from .. import messages
from ..errors import CommandError, WrongType
from ..keyspace import ZSet, encoding
from ..keyspace.events import GENERIC, ZSET
from ..keyspace.scan import parse_cursor, scan_page, scan_reply
from ..protocol.numbers import string2d, valkey_strtod
from ..protocol.resp import NullArray, format_double
from .args import ArgCursor
from .base import normalize_range, parse_int, syntax_error, wrong_arity
from .lists import LONG_MAX, parse_mpop, positive_long, range_long
from .registry import command
from .scanning import parse_scan_options

_INF = math.inf


# -- number parsing (protocol/numbers.py: Valkey's string2d, and valkey_strtod for range bounds) ---------------

def parse_score(value: bytes, message=messages.NOT_FLOAT) -> float:
    """A score argument: Valkey's string2d, or the error `message`."""
    f = string2d(value)
    if f is None:
        raise CommandError(message)
    return f


def format_score(score: float) -> bytes:
    """Exact text of a score for effects (keeps the sign of -0)."""
    if score == 0.0 and math.copysign(1.0, score) < 0:
        return b"-0"
    return format_double(score)


def _parse_score_bound(arg: bytes):
    """One end of a score range ('(1.5' exclusive); (value, exclusive). zslParseRange's rules."""
    excl = arg[:1] == b"("
    text = arg[1:] if excl else arg
    if not text:
        return 0.0, excl  # strtod of "" converts nothing and stops at the terminator
    f = valkey_strtod(text)
    if f is None or f != f:
        raise CommandError(messages.MIN_MAX_NOT_FLOAT)
    return f, excl


def _parse_score_range(min_arg, max_arg):
    lo, lo_ex = _parse_score_bound(min_arg)
    hi, hi_ex = _parse_score_bound(max_arg)
    return lo, lo_ex, hi, hi_ex


# A lex bound: (kind, value, exclusive) with kind -1 for '-', +1 for '+', 0 for a string.
def _parse_lex_bound(arg: bytes):
    c = arg[:1]
    if c == b"+":
        if len(arg) != 1:
            raise CommandError(messages.MIN_MAX_NOT_LEX)
        return 1, None, True
    if c == b"-":
        if len(arg) != 1:
            raise CommandError(messages.MIN_MAX_NOT_LEX)
        return -1, None, True
    if c == b"(":
        return 0, arg[1:], True
    if c == b"[":
        return 0, arg[1:], False
    raise CommandError(messages.MIN_MAX_NOT_LEX)


def _parse_lex_range(min_arg, max_arg):
    return _parse_lex_bound(min_arg), _parse_lex_bound(max_arg)


def _lex_slice(z, lex):
    """Index range [i, j) of the members in a parsed lex range."""
    (lo_kind, lo, lo_ex), (hi_kind, hi, hi_ex) = lex
    if lo_kind == 1 or hi_kind == -1:
        return 0, 0
    return z.lex_bounds(lo, lo_ex, hi, hi_ex)


# -- replies --------------------------------------------------------------------------------------

def _items_reply(ctx, items, withscores):
    """items: (score, member) pairs. WITHSCORES: flat in RESP2, [member, score] pairs in RESP3."""
    if not withscores:
        return [m for _, m in items]
    if ctx.resp3:
        return [[m, s] for s, m in items]
    out = []
    append = out.append
    for s, m in items:
        append(m)
        append(s)
    return out


# -- ZADD / ZINCRBY -------------------------------------------------------------------------------

_ZADD_NX, _ZADD_XX, _ZADD_CH, _ZADD_INCR, _ZADD_GT, _ZADD_LT = 1, 2, 4, 8, 16, 32
_ZADD_OPTIONS = {b"NX": _ZADD_NX, b"XX": _ZADD_XX, b"CH": _ZADD_CH, b"INCR": _ZADD_INCR,
                 b"GT": _ZADD_GT, b"LT": _ZADD_LT}


def _zadd(ctx, args, incr):
    flags = 0
    c = ArgCursor(args, 2)
    options = _ZADD_OPTIONS
    while c:   # the options, up to the first score
        f = options.get(c.peek().upper())
        if f is None:
            break
        flags |= f
        c.skip()
    nx = flags & _ZADD_NX
    xx = flags & _ZADD_XX
    gt = flags & _ZADD_GT
    lt = flags & _ZADD_LT
    ch = flags & _ZADD_CH
    incr = incr or flags & _ZADD_INCR
    i = c.pos
    elements = c.left()
    if elements % 2 or not elements:
        raise syntax_error()
    elements //= 2
    if nx and xx:
        raise CommandError(messages.XX_NX_INCOMPATIBLE)
    if (gt and nx) or (lt and nx) or (gt and lt):
        raise CommandError(messages.GT_LT_NX_INCOMPATIBLE)
    if incr and elements > 1:
        raise CommandError(messages.INCR_ONE_PAIR)
    pairs = [(parse_score(args[k]), args[k + 1]) for k in range(i, len(args), 2)]

    key = args[1]
    z = ctx.lookup_zset(key)
    new_key = z is None
    if new_key:
        if xx:
            return None if incr else 0
        z = ZSet()
        ctx.store(key, z)
    scores = z.scores
    added = updated = processed = 0
    changed = {}
    score = 0.0
    for score, member in pairs:
        cur = scores.get(member)
        if cur is not None:
            if nx:
                continue
            if incr:
                score += cur
                if score != score:
                    ctx.delete_if_empty(key, z)
                    raise CommandError(messages.SCORE_NAN)
            if (lt and score >= cur) or (gt and score <= cur):
                continue
            processed += 1
            if score != cur:
                z.add(member, score)
                updated += 1
                changed[member] = score
        elif not xx:
            z.add(member, score)
            added += 1
            processed += 1
            changed[member] = score
    if z:
        # zsetTypeCreate / zsetTypeMaybeConvert on (elements, longest member), then the inserts.
        encoding.zset_added(ctx.keyspace.encoding_rules, ctx.db, key, z, [m for _s, m in pairs], elements,
                            new_key)
    if not changed:
        ctx.delete_if_empty(key, z)
    elif incr:
        # The exact resulting score, so that replay does no arithmetic.
        member, s = next(iter(changed.items()))
        ctx.propagate(b"ZADD", key, format_score(s), member)
        ctx.notify(ZSET, b"zincr", key)
    else:
        ctx.propagate_args(args)
        ctx.notify(ZSET, b"zadd", key)
    if incr:
        return score if processed else None
    return added + updated if ch else added


@command("zadd")
def zadd(ctx, args):
    return _zadd(ctx, args, False)


@command("zincrby")
def zincrby(ctx, args):
    return _zadd(ctx, args, True)


# -- simple reads and removal ---------------------------------------------------------------------

@command("zrem")
def zrem(ctx, args):
    key = args[1]
    z = ctx.lookup_zset(key)
    if z is None:
        return 0
    deleted = 0
    remove = z.remove
    for member in args[2:]:
        if remove(member):
            deleted += 1
            if not z:
                break
    if deleted:
        ctx.notify(ZSET, b"zrem", key)
        ctx.remove_if_empty(key, z)
        ctx.propagate_args(args)
    return deleted


@command("zcard")
def zcard(ctx, args):
    z = ctx.lookup_zset(args[1])
    return 0 if z is None else len(z)


@command("zscore")
def zscore(ctx, args):
    z = ctx.lookup_zset(args[1])
    if z is None:
        return None
    return z.scores.get(args[2])


@command("zmscore")
def zmscore(ctx, args):
    z = ctx.lookup_zset(args[1])
    if z is None:
        return [None] * (len(args) - 2)
    get = z.scores.get
    return [get(m) for m in args[2:]]


def _zrank(ctx, args, reverse):
    n = len(args)
    if n > 4:
        raise wrong_arity("zrevrank" if reverse else "zrank")
    withscore = False
    if n == 4:
        if args[3].upper() != b"WITHSCORE":
            raise syntax_error()
        withscore = True
    z = ctx.lookup_zset(args[1])
    if z is None:
        return NullArray if withscore else None
    rank = z.rev_rank(args[2]) if reverse else z.rank(args[2])
    if rank is None:
        return NullArray if withscore else None
    if withscore:
        return [rank, z.scores[args[2]]]
    return rank


@command("zrank")
def zrank(ctx, args):
    return _zrank(ctx, args, False)


@command("zrevrank")
def zrevrank(ctx, args):
    return _zrank(ctx, args, True)


@command("zcount")
def zcount(ctx, args):
    lo, lo_ex, hi, hi_ex = _parse_score_range(args[2], args[3])
    z = ctx.lookup_zset(args[1])
    if z is None:
        return 0
    i, j = z.score_bounds(lo, lo_ex, hi, hi_ex)
    return j - i


@command("zlexcount")
def zlexcount(ctx, args):
    lex = _parse_lex_range(args[2], args[3])
    z = ctx.lookup_zset(args[1])
    if z is None:
        return 0
    i, j = _lex_slice(z, lex)
    return j - i


# -- ZRANGE and its relatives ---------------------------------------------------------------------

_AUTO, _RANK, _SCORE, _LEX = 0, 1, 2, 3


def _zrange_generic(ctx, args, start_idx, store, rangetype, reverse):
    """ZRANGE / ZRANGESTORE / Z[REV]RANGE[BYSCORE|BYLEX]. reverse is None for 'auto' (REV allowed).
    Returns the reply, or for a store the (score, member) items of the result."""
    minidx, maxidx = start_idx + 1, start_idx + 2
    withscores = False
    offset, limit = 0, -1
    direction_auto = reverse is None
    type_auto = rangetype == _AUTO
    reverse = bool(reverse)
    c = ArgCursor(args, start_idx + 3)
    while c:
        opt = c.next_upper()
        if not store and opt == b"WITHSCORES":
            withscores = True
        elif opt == b"LIMIT" and c.left() >= 2:
            offset = c.int()
            limit = c.int()
        elif direction_auto and opt == b"REV":
            reverse = True
            direction_auto = False
        elif type_auto and opt == b"BYLEX":
            rangetype = _LEX
            type_auto = False
        elif type_auto and opt == b"BYSCORE":
            rangetype = _SCORE
            type_auto = False
        else:
            raise syntax_error()
    if rangetype == _AUTO:
        rangetype = _RANK
    if limit != -1 and rangetype == _RANK:
        raise CommandError(messages.ZRANGE_LIMIT_NEEDS_BY)
    if withscores and rangetype == _LEX:
        raise CommandError(messages.ZRANGE_WITHSCORES_BYLEX)
    if reverse and rangetype != _RANK:
        minidx, maxidx = maxidx, minidx

    if rangetype == _RANK:
        start = parse_int(args[minidx])
        end = parse_int(args[maxidx])
    elif rangetype == _SCORE:
        score_range = _parse_score_range(args[minidx], args[maxidx])
    else:
        lex = _parse_lex_range(args[minidx], args[maxidx])

    # ZRANGESTORE's source is a read's lookup (lookupKeyRead) as ZRANGE's
    z = ctx.read_type(args[start_idx], ZSet) if store else ctx.lookup_zset(args[start_idx])
    if z is None:
        return []
    order = z.order
    size = len(order)
    if rangetype == _RANK:
        bounds = normalize_range(start, end, size)
        if bounds is None:
            return []
        start, end = bounds
        if reverse:
            items = order[size - 1 - end:size - start]
            items.reverse()
        else:
            items = order[start:end + 1]
    else:
        if rangetype == _SCORE:
            i, k = z.score_bounds(*score_range)
        else:
            i, k = _lex_slice(z, lex)
        if offset < 0 or (offset > 0 and offset >= size):
            return []
        if reverse:
            top = k - offset
            bottom = i if limit < 0 else max(i, top - limit)
            if top <= bottom:
                return []
            items = order[bottom:top]
            items.reverse()
        else:
            first = i + offset
            last = k if limit < 0 else min(k, first + limit)
            if first >= last:
                return []
            items = order[first:last]
    if store:
        return items
    return _items_reply(ctx, items, withscores)


def _store_result(ctx, args, dst, scores, event):
    """Sets dst to a sorted set of `scores` (member -> score), deleting it when empty."""
    if scores:
        z = ZSet.from_scores(scores)
        ctx.store(dst, z)
        encoding.zset_stored(ctx.keyspace.encoding_rules, ctx.db, dst, z)
        ctx.propagate_args(args)
        ctx.notify(ZSET, event, dst)
        return len(scores)
    if ctx.delete(dst):
        ctx.propagate_args(args)
        ctx.notify(GENERIC, b"del", dst)
    return 0


@command("zrange")
def zrange(ctx, args):
    return _zrange_generic(ctx, args, 1, False, _AUTO, None)


@command("zrangestore")
def zrangestore(ctx, args):
    items = _zrange_generic(ctx, args, 2, True, _AUTO, None)
    return _store_result(ctx, args, args[1], {m: s for s, m in items}, b"zrangestore")


@command("zrevrange")
def zrevrange(ctx, args):
    return _zrange_generic(ctx, args, 1, False, _RANK, True)


@command("zrangebyscore")
def zrangebyscore(ctx, args):
    return _zrange_generic(ctx, args, 1, False, _SCORE, False)


@command("zrevrangebyscore")
def zrevrangebyscore(ctx, args):
    return _zrange_generic(ctx, args, 1, False, _SCORE, True)


@command("zrangebylex")
def zrangebylex(ctx, args):
    return _zrange_generic(ctx, args, 1, False, _LEX, False)


@command("zrevrangebylex")
def zrevrangebylex(ctx, args):
    return _zrange_generic(ctx, args, 1, False, _LEX, True)


# -- range removal --------------------------------------------------------------------------------

_ZREMRANGE_EVENTS = {_RANK: b"zremrangebyrank", _SCORE: b"zremrangebyscore", _LEX: b"zremrangebylex"}


def _zremrange(ctx, args, rangetype):
    if rangetype == _RANK:
        start = parse_int(args[2])
        end = parse_int(args[3])
    elif rangetype == _SCORE:
        score_range = _parse_score_range(args[2], args[3])
    else:
        lex = _parse_lex_range(args[2], args[3])
    key = args[1]
    z = ctx.lookup_zset(key)
    if z is None:
        return 0
    if rangetype == _RANK:
        bounds = normalize_range(start, end, len(z))
        if bounds is None:
            return 0
        i, k = bounds[0], bounds[1] + 1
    elif rangetype == _SCORE:
        i, k = z.score_bounds(*score_range)
    else:
        i, k = _lex_slice(z, lex)
    removed = len(z.delete_slice(i, k))
    if removed:
        ctx.notify(ZSET, _ZREMRANGE_EVENTS[rangetype], key)
        ctx.remove_if_empty(key, z)
        ctx.propagate_args(args)
    return removed


@command("zremrangebyrank")
def zremrangebyrank(ctx, args):
    return _zremrange(ctx, args, _RANK)


@command("zremrangebyscore")
def zremrangebyscore(ctx, args):
    return _zremrange(ctx, args, _SCORE)


@command("zremrangebylex")
def zremrangebylex(ctx, args):
    return _zremrange(ctx, args, _LEX)


# -- pops -----------------------------------------------------------------------------------------

_POPPED = object()


def _pop_items(ctx, key, z, count, from_max, count_arg=_POPPED):
    """Pops and propagates ZPOPMIN/ZPOPMAX key [n] (deterministic on the same state), as Valkey rewrites
    ZMPOP, BZPOPMIN/MAX and BZMPOP: n is how many were popped; `count_arg` None: the one-element form
    (ZPOPMIN key), bytes: that count as the client gave it (ZPOPMIN propagates itself)."""
    items = z.pop(count, from_max)
    ctx.notify(ZSET, b"zpopmax" if from_max else b"zpopmin", key)
    ctx.remove_if_empty(key, z)
    name = b"ZPOPMAX" if from_max else b"ZPOPMIN"
    if count_arg is None:
        ctx.propagate(name, key)
    else:
        ctx.propagate(name, key, b"%d" % len(items) if count_arg is _POPPED else count_arg)
    return items


def _zpop(ctx, args, from_max):
    n = len(args)
    if n > 3:
        raise syntax_error()
    count = positive_long(args[2]) if n == 3 else -1
    key = args[1]
    z = ctx.lookup_zset(key)
    if z is None or count == 0:
        return []
    items = _pop_items(ctx, key, z, 1 if count == -1 else count, from_max, count_arg=args[2] if n == 3 else None)
    if ctx.resp3 and count != -1:
        return [[m, s] for s, m in items]
    out = []
    for s, m in items:
        out.append(m)
        out.append(s)
    return out


@command("zpopmin")
def zpopmin(ctx, args):
    return _zpop(ctx, args, False)


@command("zpopmax")
def zpopmax(ctx, args):
    return _zpop(ctx, args, True)


ZSET_ENDS = {b"MIN": False, b"MAX": True}


@command("zmpop")
def zmpop(ctx, args):
    keys, from_max, count = parse_mpop(args, 1, ZSET_ENDS)
    for key in keys:
        z = ctx.lookup_zset(key)
        if not z:
            continue
        items = _pop_items(ctx, key, z, count, from_max)
        return [key, [[m, s] for s, m in items]]
    return NullArray


# -- ZRANDMEMBER ----------------------------------------------------------------------------------

@command("zrandmember")
def zrandmember(ctx, args):
    n = len(args)
    key = args[1]
    if n == 2:
        z = ctx.lookup_zset(key)
        if z is None:
            return None
        order = z.order
        return order[ctx.keyspace.rng.randrange(len(order))][1]
    count = range_long(args[2], -LONG_MAX, LONG_MAX)
    if n > 4 or (n == 4 and args[3].upper() != b"WITHSCORES"):
        raise syntax_error()
    withscores = n == 4
    if withscores and (count < -(LONG_MAX // 2) or count > LONG_MAX // 2):
        raise CommandError(messages.VALUE_OUT_OF_RANGE)
    z = ctx.lookup_zset(key)
    if z is None or count == 0:
        return []
    order = z.order
    size = len(order)
    rng = ctx.keyspace.rng
    if count < 0:
        rand = rng.randrange
        items = [order[rand(size)] for _ in range(-count)]
    elif count >= size:
        items = order
    else:
        items = [order[i] for i in rng.sample(range(size), count)]
    return _items_reply(ctx, items, withscores)


# -- ZUNION / ZINTER / ZDIFF (and STORE, ZINTERCARD) ----------------------------------------------

_UNION, _INTER, _DIFF = 0, 1, 2
_SUM, _MIN, _MAX = 0, 1, 2


def _aggregate(target, value, how):
    if how == _SUM:
        target += value
        return 0.0 if target != target else target
    if how == _MIN:
        return value if value < target else target
    return value if value > target else target


def _src_items(src):
    """(member, score) pairs of a source: a ZSet, a set (score 1) or None."""
    if src is None:
        return ()
    if type(src) is ZSet:
        return src.scores.items()
    return ((m, 1.0) for m in src)


def _src_score(src, member):
    if type(src) is ZSet:
        return src.scores.get(member)
    return 1.0 if member in src else None


def _setop(ctx, args, name, dst, numkeys_idx, op, card_only=False):
    setnum = parse_int(args[numkeys_idx])
    if setnum < 1:
        raise CommandError(messages.ZSET_AT_LEAST_ONE_KEY.format(name))
    n = len(args)
    if setnum > n - (numkeys_idx + 1):
        raise syntax_error()
    srcs = []
    j = numkeys_idx + 1
    for _ in range(setnum):
        v = ctx.lookup_read(args[j])
        if v is not None and type(v) is not ZSet and type(v) is not set:
            raise WrongType()
        srcs.append(v)
        j += 1
    weights = [1.0] * setnum
    how = _SUM
    withscores = False
    limit = 0
    c = ArgCursor(args, j)
    while c:
        remaining = c.left()   # this option included
        opt = c.next_upper()
        if op != _DIFF and not card_only and remaining >= setnum + 1 and opt == b"WEIGHTS":
            for k in range(setnum):
                weights[k] = parse_score(c.next(), messages.WEIGHT_NOT_FLOAT)
        elif op != _DIFF and not card_only and remaining >= 2 and opt == b"AGGREGATE":
            a = c.next_upper()
            if a == b"SUM":
                how = _SUM
            elif a == b"MIN":
                how = _MIN
            elif a == b"MAX":
                how = _MAX
            else:
                raise syntax_error()
        elif dst is None and not card_only and opt == b"WITHSCORES":
            withscores = True
        elif card_only and remaining >= 2 and opt == b"LIMIT":
            limit = positive_long(c.next(), messages.LIMIT_NEGATIVE)
        else:
            raise syntax_error()

    result = {}
    if op == _INTER:
        # Smallest input first (a stable sort keeps the result independent of anything but the
        # inputs, so a store replays to the same floating point sums).
        idx = sorted(range(setnum), key=lambda k: 0 if srcs[k] is None else len(srcs[k]))
        first = srcs[idx[0]]
        if first:
            w0 = weights[idx[0]]
            rest = [(srcs[k], weights[k]) for k in idx[1:]]
            cardinality = 0
            for member, s in _src_items(first):
                score = w0 * s
                if score != score:
                    score = 0.0
                for src, w in rest:
                    v = _src_score(src, member)
                    if v is None:
                        break
                    score = _aggregate(score, v * w, how)
                else:
                    if card_only:
                        cardinality += 1
                        if limit and cardinality >= limit:
                            break
                    else:
                        result[member] = score
            if card_only:
                return cardinality
        elif card_only:
            return 0
    elif op == _UNION:
        idx = sorted(range(setnum), key=lambda k: 0 if srcs[k] is None else len(srcs[k]))
        for k in idx:
            src = srcs[k]
            if not src:
                continue
            w = weights[k]
            for member, s in _src_items(src):
                score = w * s
                if score != score:
                    score = 0.0
                cur = result.get(member)
                result[member] = score if cur is None else _aggregate(cur, score, how)
    else:
        first = srcs[0]
        if first:
            others = [s for s in srcs[1:] if s]
            for member, s in _src_items(first):
                for src in others:
                    if member in src:
                        break
                else:
                    result[member] = s

    if dst is not None:
        return _store_result(ctx, args, dst, result, name.encode())
    items = sorted([(s, m) for m, s in result.items()])
    return _items_reply(ctx, items, withscores)


@command("zunion")
def zunion(ctx, args):
    return _setop(ctx, args, "zunion", None, 1, _UNION)


@command("zinter")
def zinter(ctx, args):
    return _setop(ctx, args, "zinter", None, 1, _INTER)


@command("zdiff")
def zdiff(ctx, args):
    return _setop(ctx, args, "zdiff", None, 1, _DIFF)


@command("zintercard")
def zintercard(ctx, args):
    return _setop(ctx, args, "zintercard", None, 1, _INTER, card_only=True)


@command("zunionstore")
def zunionstore(ctx, args):
    return _setop(ctx, args, "zunionstore", args[1], 2, _UNION)


@command("zinterstore")
def zinterstore(ctx, args):
    return _setop(ctx, args, "zinterstore", args[1], 2, _INTER)


@command("zdiffstore")
def zdiffstore(ctx, args):
    return _setop(ctx, args, "zdiffstore", args[1], 2, _DIFF)


# -- ZSCAN ----------------------------------------------------------------------------------------

# Sorted sets this small are returned whole at cursor 0, as Valkey does for its listpack encoding
# (zset-max-listpack-entries defaults to 128); there scores print as ZSCORE prints them, while the
# skiplist encoding of larger sets prints them with "%.17Lg".
ZSCAN_WHOLE_LIMIT = 128


@command("zscan")
def zscan(ctx, args):
    cursor = parse_cursor(args[2])
    z = ctx.lookup_zset(args[1])
    if z is None:
        return [b"0", []]
    opts = parse_scan_options(args, 3, "zset")
    scores = z.scores
    cursor, members = scan_page(scores, cursor, opts.count, ZSCAN_WHOLE_LIMIT)
    match = opts.match
    if match is not None:
        members = [m for m in members if match(m)]
    if opts.only_keys:
        return scan_reply(cursor, members)
    compact = len(scores) <= ZSCAN_WHOLE_LIMIT
    out = []
    for m in members:
        out.append(m)
        s = scores[m]
        if compact or s == _INF or s == -_INF:
            out.append(format_score(s))
        else:
            out.append(b"%.17g" % s)
    return scan_reply(cursor, out)
