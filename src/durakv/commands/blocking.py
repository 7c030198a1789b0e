"""Blocking list and sorted-set pops: BLPOP BRPOP BLMOVE BRPOPLPUSH BLMPOP BZPOPMIN BZPOPMAX BZMPOP.

Each one first tries the non-blocking command's logic (commands/lists.py, commands/zsets.py, reused, not
copied). If nothing can be popped it returns `Blocked` (commands/base.py) and the server parks the client
(server/blocking.py) until a write to one of its keys lets `retry` serve it, the timeout passes, or CLIENT
UNBLOCK. Inside MULTI/EXEC (ctx.may_block False) they answer at once as if the timeout had passed.

Effects are those of the non-blocking logic, as Valkey replicates a served blocking pop: LPOP/RPOP (BLPOP,
BRPOP, BLMPOP), LMOVE/RPOPLPUSH (BLMOVE, BRPOPLPUSH), ZREM (BZPOPMIN/BZPOPMAX/BZMPOP).
"""

import math
from collections import deque

from .. import messages
from ..errors import CommandError
from ..keyspace import ZSet
from ..protocol.resp import NullArray
from . import lists, zsets
from .base import Blocked, INT64_MAX, parse_int
from .numeric import parse_long_double
from .registry import command


def parse_timeout(ctx, arg: bytes) -> int:
    """getTimeoutFromObjectOrReply(UNIT_SECONDS): a long double of seconds (string2ld: numeric's
    parse_long_double, exact) -> milliseconds rounded up (0 = block forever). Returns the relative timeout in
    ms."""
    return _relative_ms(ctx, _seconds_as_ms(arg))


def parse_timeout_ms(ctx, arg: bytes, now_ms=None) -> int:
    """getTimeoutFromObjectOrReply(UNIT_MILLISECONDS): an integer of milliseconds (string2ll) -> the relative
    timeout in ms (0 = forever). WAIT, WAITAOF, XREAD BLOCK and CLIENT PAUSE; `now_ms` when the caller
    measures the end by another clock (CLIENT PAUSE's)."""
    return _relative_ms(ctx, parse_int(arg, messages.TIMEOUT_NOT_INTEGER), now_ms)


def _relative_ms(ctx, tval: int, now_ms=None) -> int:
    """The checks both units share: not negative, and now + tval must fit in a long long."""
    if tval < 0:
        raise CommandError(messages.TIMEOUT_NEGATIVE)
    if tval > 0 and tval > INT64_MAX - (ctx.now_ms() if now_ms is None else now_ms):
        raise CommandError(messages.TIMEOUT_OUT_OF_RANGE)
    return tval


def _seconds_as_ms(arg: bytes) -> int:
    value = parse_long_double(arg)
    if value is None:
        raise CommandError(messages.TIMEOUT_NOT_FLOAT)
    if value == -math.inf:
        raise CommandError(messages.TIMEOUT_NEGATIVE)
    if value == math.inf:
        raise CommandError(messages.TIMEOUT_OUT_OF_RANGE)
    ms = value * 1000
    if ms > INT64_MAX:
        raise CommandError(messages.TIMEOUT_OUT_OF_RANGE)
    return math.ceil(ms)


def _has(ctx, keys, typ) -> bool:
    """True if one of keys holds a non-empty value of type typ (what wakes a blocked pop). Looked at with no
    effect, as Valkey's handleClientsBlockedOnKey does: a key that expired meanwhile keeps the client blocked
    and is deleted (and its UNLINK propagated) by the next command that reads it, not by the wake-up."""
    for key in keys:
        v = ctx.peek(key)
        if v and type(v) is typ:
            return True
    return False


# -- BLPOP / BRPOP --------------------------------------------------------------------------------

def _pop_first(ctx, keys, left):
    for key in keys:
        dq = ctx.lookup_list(key)
        if dq:
            value = lists._pop(ctx, (b"LPOP" if left else b"RPOP", key), left)
            return [key, value]
    return None


def _block_on_first(ctx, args, pop_first, typ, end):
    """BLPOP/BRPOP/BZPOPMIN/BZPOPMAX: pop from the first non-empty key, else park on all of them."""
    timeout = parse_timeout(ctx, args[-1])
    keys = args[1:-1]
    reply = pop_first(ctx, keys, end)
    if reply is not None:
        return reply
    if not ctx.may_block:
        return NullArray

    def retry(rctx):
        if not _has(rctx, keys, typ):
            return None
        return pop_first(rctx, keys, end)

    return Blocked(keys, timeout, retry, NullArray)


@command("blpop")
def blpop(ctx, args):
    return _block_on_first(ctx, args, _pop_first, deque, True)


@command("brpop")
def brpop(ctx, args):
    return _block_on_first(ctx, args, _pop_first, deque, False)


# -- BLMOVE / BRPOPLPUSH --------------------------------------------------------------------------

def _bmove(ctx, args, move_args, src_left, dst_left, timeout):
    src = args[1]
    if ctx.lookup_list(src) is None:
        if not ctx.may_block:
            return None

        def retry(rctx):
            if not _has(rctx, (src,), deque):
                return None
            return lists._move(rctx, move_args, src_left, dst_left)

        return Blocked([src], timeout, retry, NullArray)
    return lists._move(ctx, move_args, src_left, dst_left)


@command("blmove")
def blmove(ctx, args):
    src_left = lists._where(args[3])
    dst_left = lists._where(args[4])
    timeout = parse_timeout(ctx, args[5])
    # served as LMOVE with the directions as the client spelled them (Valkey rewrites its argv)
    move_args = (b"LMOVE", args[1], args[2], args[3], args[4])
    return _bmove(ctx, args, move_args, src_left, dst_left, timeout)


@command("brpoplpush")
def brpoplpush(ctx, args):
    timeout = parse_timeout(ctx, args[3])
    return _bmove(ctx, args, (b"RPOPLPUSH", args[1], args[2]), False, True, timeout)


# -- BLMPOP ---------------------------------------------------------------------------------------

def _block_mpop(ctx, args, name, mpop, ends, typ):
    """BLMPOP/BZMPOP: the options are checked (in Valkey's order, before the timeout), then the
    non-blocking LMPOP/ZMPOP runs now or, if every key is empty, on each wake-up."""
    keys = lists.parse_mpop(args, 2, ends)[0]
    timeout = parse_timeout(ctx, args[1])
    mpop_args = [name, *args[2:]]
    reply = mpop(ctx, mpop_args)
    if reply is not NullArray or not ctx.may_block:
        return reply

    def retry(rctx):
        if not _has(rctx, keys, typ):
            return None
        return mpop(rctx, mpop_args)

    return Blocked(keys, timeout, retry, NullArray)


@command("blmpop")
def blmpop(ctx, args):
    return _block_mpop(ctx, args, b"LMPOP", lists.lmpop, lists.LIST_ENDS, deque)


# -- BZPOPMIN / BZPOPMAX --------------------------------------------------------------------------

def _zpop_first(ctx, keys, from_max):
    for key in keys:
        z = ctx.lookup_zset(key)
        if z:
            (score, member), = zsets._pop_items(ctx, key, z, 1, from_max, count_arg=None)
            return [key, member, score]
    return None


@command("bzpopmin")
def bzpopmin(ctx, args):
    return _block_on_first(ctx, args, _zpop_first, ZSet, False)


@command("bzpopmax")
def bzpopmax(ctx, args):
    return _block_on_first(ctx, args, _zpop_first, ZSet, True)


# -- BZMPOP ---------------------------------------------------------------------------------------

@command("bzmpop")
def bzmpop(ctx, args):
    return _block_mpop(ctx, args, b"ZMPOP", zsets.zmpop, zsets.ZSET_ENDS, ZSet)
