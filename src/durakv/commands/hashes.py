"""Hash commands. A hash is a dict mapping field bytes -> value bytes.

Effects: HSET/HMSET/HSETNX/HDEL/HINCRBY are deterministic and propagate themselves; HINCRBYFLOAT
propagates `HSET key field <result>` so replicas and recovery never redo float arithmetic.

Field TTLs (commands/hash_ttl.py) keep a field whose TTL passed in the dict until active expiry removes it:
readers skip such a field (ctx.read_hash, _get), HLEN counts it (as Valkey's does), a write treats it as
absent. Where a write's own effect would replay differently on a node where that field has not expired
(replay and replicas expire nothing), the effect says what happened: HSETNX or HINCRBY of an expired field
-> `HSET key field value`, HINCRBYFLOAT of a field that keeps its TTL -> `HSETEX key KEEPTTL FIELDS 1 field
value`; HDEL names only the fields it deleted. HSET clears the TTL of the fields it sets.
"""

from itertools import islice

from .. import messages
from ..errors import CommandError
from ..keyspace import encoding
from ..keyspace.events import HASH
from ..protocol.resp import OK
from .base import INT64_MAX, INT64_MIN, parse_int, syntax_error, wrong_arity
from .numeric import format_long_double_human, parse_long_double, round_long_double
from .registry import command
from .scanning import scan_collection


@command("hset", core=True)
def hset(ctx, args):
    n = len(args)
    if n % 2:
        raise wrong_arity(args[0].decode("utf-8", "replace").lower())
    key = args[1]
    h = ctx.lookup_hash(key)
    new_key = h is None
    revived = 0
    if new_key:
        h = {}
        ctx.store(key, h)
    elif ctx.db.hexpires and key in ctx.db.hexpires:
        revived = _clear_ttls(ctx, key, args[2::2])
    before = len(h)
    if n == 4:
        h[args[2]] = args[3]
    else:
        it = iter(args[2:])
        h.update(zip(it, it))
    written(ctx, key, h, args[2:], new_key)
    ctx.propagate_args(args)
    ctx.notify(HASH, b"hset", key)
    return len(h) - before + revived


def _clear_ttls(ctx, key, fields) -> int:
    """HSET's fields lose their TTL; returns how many distinct ones had expired (they count as new)."""
    db = ctx.db
    ks = ctx.keyspace
    revived = 0
    for f in set(fields) if len(fields) > 1 else fields:
        if ks.field_expired(db, key, f):
            revived += 1
        db.clear_field_expire(key, f)
    return revived


def _expired(ctx, key, field) -> bool:
    db = ctx.db
    return bool(db.hexpires) and ctx.keyspace.field_expired(db, key, field)


def _get(ctx, key, h, field):
    """The value of a live field of h (at key), or None."""
    value = h.get(field)
    if value is not None and ctx.db.hexpires and ctx.keyspace.field_expired(ctx.db, key, field):
        return None
    return value


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
        if not _expired(ctx, key, field):
            return 0
        # an expired field is set as a new one, without its TTL: replay, where it has not expired, would
        # see HSETNX fail
        h[field] = args[3]
        ctx.db.clear_field_expire(key, field)
        written(ctx, key, h, args[2:4])
        ctx.propagate(b"HSET", key, field, args[3])
        ctx.notify(HASH, b"hset", key)
        return 1
    else:
        h[field] = args[3]
    written(ctx, key, h, args[2:4], new_key)
    ctx.propagate_args(args)
    ctx.notify(HASH, b"hset", key)
    return 1


@command("hget", core=True)
def hget(ctx, args):
    h = ctx.lookup_hash(args[1])
    if h is None:
        return None
    if ctx.db.hexpires:
        return _get(ctx, args[1], h, args[2])
    return h.get(args[2])


@command("hmget")
def hmget(ctx, args):
    key = args[1]
    h = ctx.lookup_hash(key)
    if h is None:
        return [None] * (len(args) - 2)
    if ctx.db.hexpires and key in ctx.db.hexpires:
        return [_get(ctx, key, h, f) for f in args[2:]]
    get = h.get
    return [get(f) for f in args[2:]]


@command("hdel")
def hdel(ctx, args):
    key = args[1]
    h = ctx.lookup_hash(key)
    if h is None:
        return 0
    db = ctx.db
    if db.hexpires and key in db.hexpires:
        # a field whose TTL passed is not deleted (Valkey's HDEL does not find it): the effect names the
        # fields that went, which replay, where nothing has expired, deletes the same
        gone = []
        for field in args[2:]:
            if field in h and not ctx.keyspace.field_expired(db, key, field):
                del h[field]
                db.clear_field_expire(key, field)
                gone.append(field)
                if not h:
                    break
        if gone:
            ctx.notify(HASH, b"hdel", key)
            ctx.remove_if_empty(key, h)
            ctx.propagate(b"HDEL", key, *gone)
        return len(gone)
    deleted = 0
    for field in args[2:]:
        if h.pop(field, None) is not None:
            deleted += 1
            if not h:
                break
    if deleted:
        ctx.notify(HASH, b"hdel", key)
        ctx.remove_if_empty(key, h)
        ctx.propagate_args(args)
    return deleted


@command("hlen")
def hlen(ctx, args):
    # Valkey's hashTypeLength: fields whose TTL passed count until active expiry removes them
    h = ctx.lookup_hash(args[1])
    return 0 if h is None else len(h)


@command("hstrlen")
def hstrlen(ctx, args):
    h = ctx.lookup_hash(args[1])
    if h is None:
        return 0
    value = _get(ctx, args[1], h, args[2])
    return 0 if value is None else len(value)


@command("hexists")
def hexists(ctx, args):
    h = ctx.lookup_hash(args[1])
    return 1 if h is not None and args[2] in h and not _expired(ctx, args[1], args[2]) else 0


@command("hkeys")
def hkeys(ctx, args):
    h = ctx.read_hash(args[1])
    return [] if h is None else list(h)


@command("hvals")
def hvals(ctx, args):
    h = ctx.read_hash(args[1])
    return [] if h is None else list(h.values())


@command("hgetall")
def hgetall(ctx, args):
    h = ctx.read_hash(args[1])
    # A copy: inside MULTI the reply is encoded after later commands may have changed the hash.
    return {} if h is None else dict(h)


@command("hincrby")
def hincrby(ctx, args):
    incr = parse_int(args[3])
    key, field = args[1], args[2]
    h = ctx.lookup_hash(key)
    old = None if h is None else h.get(field)
    expired = old is not None and _expired(ctx, key, field)
    if expired:
        old = None
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
    if expired:
        # counted from 0 and without its old TTL: replay, where the field has not expired, must not add
        ctx.db.clear_field_expire(key, field)
        ctx.propagate(b"HSET", key, field, h[field])
    else:
        ctx.propagate_args(args)   # a live field keeps its TTL (hincrbyCommand), here and on replay
    ctx.notify(HASH, b"hincrby", key)
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
    keeps_ttl = False
    if old is not None and ctx.db.hexpires and key in ctx.db.hexpires:
        if _expired(ctx, key, field):
            old = None
            ctx.db.clear_field_expire(key, field)   # a new field, without the old TTL
        else:
            keeps_ttl = field in ctx.db.hexpires[key]
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
    if keeps_ttl:
        # HSET would drop the field's TTL on replay; HSETEX KEEPTTL sets the value and keeps it
        ctx.propagate(b"HSETEX", key, b"KEEPTTL", b"FIELDS", b"1", field, text)
    else:
        ctx.propagate(b"HSET", key, field, text)
    ctx.notify(HASH, b"hincrbyfloat", key)
    return text


@command("hrandfield")
def hrandfield(ctx, args):
    n = len(args)
    if n == 2:
        h = ctx.read_hash(args[1])
        if h is None:
            return None
        if not h:
            return None    # only fields whose TTL passed: Valkey finds none to return
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
    h = ctx.read_hash(args[1])
    if h is None or count == 0 or not h:
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
