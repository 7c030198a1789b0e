"""Hash commands. A hash is a dict mapping field bytes -> value bytes.

Effects: HSET/HMSET/HSETNX/HDEL/HINCRBY are deterministic and propagate themselves; HINCRBYFLOAT
propagates `HSET key field <result>` so replicas and recovery never redo float arithmetic.
"""

from itertools import islice

from .. import messages
from ..errors import CommandError
from ..keyspace import encoding
from ..protocol.resp import OK
from .base import INT64_MAX, INT64_MIN, parse_int, syntax_error, wrong_arity
from .numeric import format_long_double_human, parse_long_double, round_long_double
from .registry import command
from .scanning import scan_collection


@command("hset")
def hset(ctx, args):
    n = len(args)
    if n % 2:
        raise wrong_arity(args[0].decode("utf-8", "replace").lower())
    key = args[1]
    h = ctx.lookup_hash(key)
    new_key = h is None
    if new_key:
        h = {}
        ctx.store(key, h)
    before = len(h)
    if n == 4:
        h[args[2]] = args[3]
    else:
        it = iter(args[2:])
        h.update(zip(it, it))
    written(ctx, key, h, args[2:], new_key)
    ctx.propagate_args(args)
    return len(h) - before


def written(ctx, key, h, argv_values, new_key=False):
    """Fields were set: the hash may leave its listpack encoding (keyspace/encoding.py)."""
    encoding.hash_written(ctx.keyspace.encoding_rules, ctx.db, key, h, argv_values, new_key)


@command("hmset")
def hmset(ctx, args):
    hset(ctx, args)
    return OK


@command("hsetnx")
def hsetnx(ctx, args):
    key, field = args[1], args[2]
    h = ctx.lookup_hash(key)
    new_key = h is None
    if new_key:
        h = {field: args[3]}
        ctx.store(key, h)
    elif field in h:
        return 0
    else:
        h[field] = args[3]
    written(ctx, key, h, args[2:4], new_key)
    ctx.propagate_args(args)
    return 1


@command("hget")
def hget(ctx, args):
    h = ctx.lookup_hash(args[1])
    return None if h is None else h.get(args[2])


@command("hmget")
def hmget(ctx, args):
    h = ctx.lookup_hash(args[1])
    if h is None:
        return [None] * (len(args) - 2)
    get = h.get
    return [get(f) for f in args[2:]]


@command("hdel")
def hdel(ctx, args):
    key = args[1]
    h = ctx.lookup_hash(key)
    if h is None:
        return 0
    deleted = 0
    for field in args[2:]:
        if h.pop(field, None) is not None:
            deleted += 1
            if not h:
                break
    if deleted:
        ctx.delete_if_empty(key, h)
        ctx.propagate_args(args)
    return deleted


@command("hlen")
def hlen(ctx, args):
    h = ctx.lookup_hash(args[1])
    return 0 if h is None else len(h)


@command("hstrlen")
def hstrlen(ctx, args):
    h = ctx.lookup_hash(args[1])
    if h is None:
        return 0
    value = h.get(args[2])
    return 0 if value is None else len(value)


@command("hexists")
def hexists(ctx, args):
    h = ctx.lookup_hash(args[1])
    return 1 if h is not None and args[2] in h else 0


@command("hkeys")
def hkeys(ctx, args):
    h = ctx.lookup_hash(args[1])
    return [] if h is None else list(h)


@command("hvals")
def hvals(ctx, args):
    h = ctx.lookup_hash(args[1])
    return [] if h is None else list(h.values())


@command("hgetall")
def hgetall(ctx, args):
    h = ctx.lookup_hash(args[1])
    # A copy: inside MULTI the reply is encoded after later commands may have changed the hash.
    return {} if h is None else dict(h)


@command("hincrby")
def hincrby(ctx, args):
    incr = parse_int(args[3])
    key, field = args[1], args[2]
    h = ctx.lookup_hash(key)
    old = None if h is None else h.get(field)
    value = 0 if old is None else parse_int(old, messages.HASH_VALUE_NOT_INTEGER)
    value += incr
    if not INT64_MIN <= value <= INT64_MAX:
        raise CommandError(messages.OVERFLOW)
    new_key = h is None
    if new_key:
        h = {}
        ctx.store(key, h)
    h[field] = b"%d" % value
    written(ctx, key, h, (field, h[field]), new_key)
    ctx.propagate_args(args)
    return value


@command("hincrbyfloat")
def hincrbyfloat(ctx, args):
    incr = parse_long_double(args[3])
    if incr is None:
        raise CommandError(messages.NOT_FLOAT)
    if type(incr) is float:  # +-inf (NaN is never accepted)
        raise CommandError(messages.VALUE_NAN_OR_INF)
    key, field = args[1], args[2]
    h = ctx.lookup_hash(key)
    old = None if h is None else h.get(field)
    if old is None:
        value = incr
    else:
        current = parse_long_double(old)
        if current is None:
            raise CommandError(messages.HASH_VALUE_NOT_FLOAT)
        if type(current) is float:
            raise CommandError(messages.INCR_NAN)
        value = round_long_double(current + incr)
        if value is None:
            raise CommandError(messages.INCR_NAN)
    text = format_long_double_human(value)
    new_key = h is None
    if new_key:
        h = {}
        ctx.store(key, h)
    h[field] = text
    written(ctx, key, h, (field, text), new_key)
    ctx.propagate(b"HSET", key, field, text)
    return text


@command("hrandfield")
def hrandfield(ctx, args):
    n = len(args)
    if n == 2:
        h = ctx.lookup_hash(args[1])
        if h is None:
            return None
        return next(islice(h, ctx.keyspace.rng.randrange(len(h)), None))
    count = parse_int(args[2])
    if count < -INT64_MAX:
        raise CommandError(messages.VALUE_MUST_BETWEEN.format(-INT64_MAX, INT64_MAX))
    withvalues = False
    if n > 4 or (n == 4 and args[3].lower() != b"withvalues"):
        raise syntax_error()
    if n == 4:
        withvalues = True
        if not -(INT64_MAX // 2) <= count <= INT64_MAX // 2:
            raise CommandError(messages.VALUE_OUT_OF_RANGE)
    h = ctx.lookup_hash(args[1])
    if h is None or count == 0:
        return []
    rng = ctx.keyspace.rng
    size = len(h)
    if count < 0 or count == 1:
        # May repeat, random order. O(size) to index the fields, then O(count).
        if count == 1 or count == -1:
            picked = [next(islice(h.items() if withvalues else h, rng.randrange(size), None))]
        else:
            picked = rng.choices(list(h.items()) if withvalues else list(h), k=-count)
    elif count >= size:
        picked = list(h.items()) if withvalues else list(h)
    else:
        picked = rng.sample(list(h.items()) if withvalues else list(h), count)
    if not withvalues:
        return picked
    if ctx.resp3:
        return [[f, v] for f, v in picked]
    out = []
    for f, v in picked:
        out.append(f)
        out.append(v)
    return out


@command("hscan")
def hscan(ctx, args):
    return scan_collection(ctx, args, dict)
