"""List commands (non-blocking). A list is a collections.deque of bytes; an emptied list is deleted.

Effects: every command here is deterministic given the prior state, so a mutation propagates itself,
except LMPOP which propagates as LPOP/RPOP key count (as Valkey replicates it).
"""

from collections import deque
from itertools import islice

from .. import messages
from ..errors import CommandError
from ..keyspace import encoding
from ..keyspace.events import LIST
from ..protocol.resp import OK, NullArray
from .args import ArgCursor
from .base import INT64_MAX, normalize_range, parse_int, syntax_error, wrong_arity
from .registry import command

LONG_MAX = INT64_MAX


def range_long(value: bytes, lo: int, hi: int, message=None) -> int:
    """Valkey's getRangeLongFromObjectOrReply: `message` (when given) covers both a malformed
    number and one outside [lo, hi]."""
    n = parse_int(value, message or messages.NOT_INTEGER)
    if n < lo or n > hi:
        raise CommandError(message or messages.VALUE_MUST_BETWEEN.format(lo, hi))
    return n


def positive_long(value: bytes, message=messages.VALUE_OUT_OF_RANGE_POSITIVE) -> int:
    return range_long(value, 0, LONG_MAX, message)


def list_range(dq, start: int, stop: int):
    """Elements of dq with index in [start, stop] (Valkey normalization); cost O(min side + k)."""
    n = len(dq)
    bounds = normalize_range(start, stop, n)
    if bounds is None:
        return []
    start, stop = bounds
    if start == 0 and stop == n - 1:
        return list(dq)
    if start > n - 1 - stop:
        # Closer to the tail: walk backwards from the end.
        out = list(islice(reversed(dq), n - 1 - stop, n - start))
        out.reverse()
        return out
    return list(islice(dq, start, stop + 1))


def _pop_many(dq, count: int, left: bool):
    n = len(dq)
    if count >= n:
        out = list(dq) if left else list(reversed(dq))
        dq.clear()
        return out
    pop = dq.popleft if left else dq.pop
    return [pop() for _ in range(count)]


def grown(ctx, key, dq, added):
    """`added` were put into the list at key: it may outgrow its listpack (keyspace/encoding.py)."""
    encoding.list_grown(ctx.keyspace.encoding_rules, ctx.db, key, dq, added)


def shrunk(ctx, key, dq, removed=None):
    """Elements were removed; an emptied list is already deleted and has no encoding left to track."""
    if dq:
        encoding.list_shrunk(ctx.keyspace.encoding_rules, ctx.db, key, dq, removed)


def elements_removed(ctx, key, dq, left, popped):
    """listElementsRemoved: "lpop" or "rpop", then an emptied list is deleted ("del")."""
    ctx.notify(LIST, b"lpop" if left else b"rpop", key)
    if not ctx.remove_if_empty(key, dq):
        shrunk(ctx, key, dq, popped)


def _where(arg: bytes) -> bool:
    """True for LEFT, False for RIGHT."""
    a = arg.upper()
    if a == b"LEFT":
        return True
    if a == b"RIGHT":
        return False
    raise syntax_error()


# -- push -----------------------------------------------------------------------------------------

def _push(ctx, args, left: bool, xx: bool):
    key = args[1]
    dq = ctx.lookup_list(key)
    if dq is None:
        if xx:
            return 0
        dq = deque()
        ctx.store(key, dq)
    if left:
        dq.extendleft(args[2:])
    else:
        dq.extend(args[2:])
    grown(ctx, key, dq, args[2:])
    ctx.propagate_args(args)
    ctx.notify(LIST, b"lpush" if left else b"rpush", key)
    return len(dq)


@command("lpush", core=True)
def lpush(ctx, args):
    return _push(ctx, args, True, False)


@command("rpush", core=True)
def rpush(ctx, args):
    return _push(ctx, args, False, False)


@command("lpushx")
def lpushx(ctx, args):
    return _push(ctx, args, True, True)


@command("rpushx")
def rpushx(ctx, args):
    return _push(ctx, args, False, True)


# -- pop ------------------------------------------------------------------------------------------

def _pop(ctx, args, left: bool):
    n = len(args)
    if n > 3:
        raise wrong_arity(args[0].lower().decode())
    count = positive_long(args[2]) if n == 3 else None
    key = args[1]
    dq = ctx.lookup_list(key)
    if dq is None:
        return None if count is None else NullArray
    if count is None:
        value = dq.popleft() if left else dq.pop()
        result = value
    elif count == 0:
        return []
    else:
        result = _pop_many(dq, count, left)
    elements_removed(ctx, key, dq, left, (result,) if count is None else result)
    ctx.propagate_args(args)
    return result


@command("lpop", core=True)
def lpop(ctx, args):
    return _pop(ctx, args, True)


@command("rpop", core=True)
def rpop(ctx, args):
    return _pop(ctx, args, False)


LIST_ENDS = {b"LEFT": True, b"RIGHT": False}


def parse_mpop(args, numkeys_idx, ends):
    """numkeys, the keys, the end (a value of `ends`) and COUNT of LMPOP / ZMPOP and their blocking
    forms (numkeys at numkeys_idx), checked in Valkey's order. Returns (keys, end, count)."""
    numkeys = range_long(args[numkeys_idx], 1, LONG_MAX, messages.NUMKEYS_ZERO)
    where_idx = numkeys_idx + 1 + numkeys
    n = len(args)
    if where_idx >= n:
        raise syntax_error()
    end = ends.get(args[where_idx].upper())
    if end is None:
        raise syntax_error()
    count = -1
    c = ArgCursor(args, where_idx + 1)
    while c:
        if count == -1 and c.next_upper() == b"COUNT" and c.left():
            count = range_long(c.next(), 1, LONG_MAX, messages.COUNT_ZERO)
        else:
            raise syntax_error()
    return args[numkeys_idx + 1:where_idx], end, (1 if count == -1 else count)


@command("lmpop")
def lmpop(ctx, args):
    keys, left, count = parse_mpop(args, 1, LIST_ENDS)
    for key in keys:
        dq = ctx.lookup_list(key)
        if not dq:
            continue
        popped = _pop_many(dq, count, left)
        elements_removed(ctx, key, dq, left, popped)
        ctx.propagate(b"LPOP" if left else b"RPOP", key, b"%d" % len(popped))
        return [key, popped]
    return NullArray


# -- read -----------------------------------------------------------------------------------------

@command("llen")
def llen(ctx, args):
    dq = ctx.lookup_list(args[1])
    return 0 if dq is None else len(dq)


@command("lindex")
def lindex(ctx, args):
    dq = ctx.lookup_list(args[1])
    if dq is None:
        return None
    index = parse_int(args[2])
    n = len(dq)
    if index < 0:
        index += n
    if 0 <= index < n:
        return dq[index]
    return None


@command("lrange")
def lrange(ctx, args):
    start = parse_int(args[2])
    stop = parse_int(args[3])
    dq = ctx.lookup_list(args[1])
    if dq is None:
        return []
    return list_range(dq, start, stop)


@command("lpos")
def lpos(ctx, args):
    ele = args[2]
    rank, count, maxlen = 1, -1, 0
    c = ArgCursor(args, 3)
    while c:
        opt = c.next_upper()
        more = c.left() > 0
        if opt == b"RANK" and more:
            rank = range_long(c.next(), -LONG_MAX, LONG_MAX)
            if rank == 0:
                raise CommandError(messages.LPOS_RANK_ZERO)
        elif opt == b"COUNT" and more:
            count = positive_long(c.next(), messages.LPOS_COUNT_NEGATIVE)
        elif opt == b"MAXLEN" and more:
            maxlen = positive_long(c.next(), messages.LPOS_MAXLEN_NEGATIVE)
        else:
            raise syntax_error()
    dq = ctx.lookup_list(args[1])
    if dq is None:
        return [] if count != -1 else None
    size = len(dq)
    scan = size if maxlen == 0 else min(maxlen, size)
    want = count if count > 0 else (None if count == 0 else 1)  # None: all matches
    found = []
    skip = abs(rank) - 1
    if rank > 0:
        pos = 0
        index = dq.index
        while pos < scan:
            try:
                i = index(ele, pos, scan)
            except ValueError:
                break
            if skip:
                skip -= 1
            else:
                found.append(i)
                if want is not None and len(found) >= want:
                    break
            pos = i + 1
    else:
        for k, item in enumerate(islice(reversed(dq), scan)):
            if item == ele:
                if skip:
                    skip -= 1
                    continue
                found.append(size - 1 - k)
                if want is not None and len(found) >= want:
                    break
    if count == -1:
        return found[0] if found else None
    return found


# -- in-place updates -----------------------------------------------------------------------------

@command("lset")
def lset(ctx, args):
    key = args[1]
    dq = ctx.lookup_list(key)
    if dq is None:
        raise CommandError(messages.NO_SUCH_KEY)
    index = parse_int(args[2])
    n = len(dq)
    if index < 0:
        index += n
    if not 0 <= index < n:
        raise CommandError(messages.INDEX_OUT_OF_RANGE)
    # Valkey checks the new element as if appended (listTypeTryConversionAppend), then sets it and
    # checks for shrinking.
    encoding.list_grown(ctx.keyspace.encoding_rules, ctx.db, key, dq, extra=(args[3],))
    dq[index] = args[3]
    shrunk(ctx, key, dq)
    ctx.propagate_args(args)
    ctx.notify(LIST, b"lset", key)
    return OK


@command("linsert")
def linsert(ctx, args):
    where = args[2].upper()
    if where == b"AFTER":
        after = True
    elif where == b"BEFORE":
        after = False
    else:
        raise syntax_error()
    key = args[1]
    dq = ctx.lookup_list(key)
    if dq is None:
        return 0
    try:
        i = dq.index(args[3])
    except ValueError:
        return -1
    dq.insert(i + 1 if after else i, args[4])
    grown(ctx, key, dq, (args[4],))
    ctx.propagate_args(args)
    ctx.notify(LIST, b"linsert", key)
    return len(dq)


@command("ltrim")
def ltrim(ctx, args):
    start = parse_int(args[2])
    stop = parse_int(args[3])
    key = args[1]
    dq = ctx.lookup_list(key)
    if dq is None:
        return OK
    n = len(dq)
    bounds = normalize_range(start, stop, n)
    if bounds is None:
        left_trim, right_trim = n, 0      # an empty range trims everything, as Valkey
    else:
        left_trim, right_trim = bounds[0], n - 1 - bounds[1]
    trimmed = left_trim + right_trim
    if not trimmed:
        ctx.notify(LIST, b"ltrim", key)   # Valkey tells of a trim that kept everything too
        return OK
    kept = n - trimmed
    if kept == 0:
        dq.clear()
    elif trimmed <= kept:
        for _ in range(left_trim):
            dq.popleft()
        for _ in range(right_trim):
            dq.pop()
    else:
        keep = list(islice(dq, left_trim, left_trim + kept))
        dq.clear()
        dq.extend(keep)
    ctx.notify(LIST, b"ltrim", key)
    if not ctx.remove_if_empty(key, dq):
        shrunk(ctx, key, dq)
    ctx.propagate_args(args)
    return OK


@command("lrem")
def lrem(ctx, args):
    to_remove = range_long(args[2], -LONG_MAX, LONG_MAX)
    ele = args[3]
    key = args[1]
    dq = ctx.lookup_list(key)
    if dq is None:
        return 0
    n = len(dq)
    if to_remove == 0:
        kept = [x for x in dq if x != ele]
        removed = n - len(kept)
        if removed:
            dq.clear()
            dq.extend(kept)
    elif to_remove == 1:
        try:
            dq.remove(ele)
            removed = 1
        except ValueError:
            removed = 0
    else:
        limit = abs(to_remove)
        source = dq if to_remove > 0 else reversed(dq)
        kept = []
        removed = 0
        for x in source:
            if removed < limit and x == ele:
                removed += 1
            else:
                kept.append(x)
        if removed:
            if to_remove < 0:
                kept.reverse()
            dq.clear()
            dq.extend(kept)
    if removed:
        ctx.notify(LIST, b"lrem", key)
        if not ctx.remove_if_empty(key, dq):
            shrunk(ctx, key, dq)
        ctx.propagate_args(args)
    return removed


# -- moves ----------------------------------------------------------------------------------------

def _move(ctx, args, src_left: bool, dst_left: bool):
    src, dst = args[1], args[2]
    sdq = ctx.lookup_list(src)
    if not sdq:
        return None
    ddq = ctx.lookup_list(dst)
    value = sdq.popleft() if src_left else sdq.pop()
    if ddq is None:
        ddq = deque()
        ctx.store(dst, ddq)
    if dst_left:
        ddq.appendleft(value)
    else:
        ddq.append(value)
    grown(ctx, dst, ddq, (value,))
    ctx.notify(LIST, b"lpush" if dst_left else b"rpush", dst)   # lmoveHandlePush, then listElementsRemoved
    ctx.notify(LIST, b"lpop" if src_left else b"rpop", src)
    if not ctx.remove_if_empty(src, sdq) and sdq is not ddq:
        shrunk(ctx, src, sdq, (value,))
    ctx.propagate_args(args)
    return value


@command("lmove")
def lmove(ctx, args):
    src_left = _where(args[3])
    dst_left = _where(args[4])
    return _move(ctx, args, src_left, dst_left)


@command("rpoplpush")
def rpoplpush(ctx, args):
    return _move(ctx, args, False, True)
