"""Generic key commands: DEL UNLINK EXISTS TYPE TOUCH RENAME RENAMENX COPY MOVE KEYS SCAN RANDOMKEY,
and expiry: EXPIRE PEXPIRE EXPIREAT PEXPIREAT TTL PTTL EXPIRETIME PEXPIRETIME PERSIST.

Effects: every expire variant -> PEXPIREAT key <abs ms>, or DEL when the time is already past;
DEL/UNLINK -> DEL of the keys actually removed; RENAMENX -> RENAME; RENAME, PERSIST, COPY and MOVE
are deterministic and propagate themselves (COPY .. DB n and MOVE are recorded in the source db and
name the destination db explicitly, so replay redoes them exactly).
"""

from collections import deque

from .. import messages
from ..errors import CommandError
from ..keyspace import ZSet, type_name
from ..keyspace.bloom import Bloom
from ..keyspace.db import estimate_key
from ..keyspace.events import EXPIRED, GENERIC, KEY_MISS, NEW
from ..keyspace.glob import compile_glob
from ..keyspace.jsondoc import JsonDoc
from ..keyspace.scan import parse_cursor, scan_reply
from ..keyspace.stream import Stream
from ..protocol.resp import OK
from .args import ArgCursor
from .base import INT64_MAX, parse_int, syntax_error
from .registry import command
from .scanning import parse_scan_options

_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
# C's LLONG_MAX / 1000 and LLONG_MIN / 1000 (division truncates toward zero).
_SECONDS_MAX = INT64_MAX // 1000
_SECONDS_MIN = -(INT64_MAX // 1000)

_EXPIRE_NX, _EXPIRE_XX, _EXPIRE_GT, _EXPIRE_LT = 1, 2, 4, 8
_EXPIRE_FLAGS = {b"nx": _EXPIRE_NX, b"xx": _EXPIRE_XX, b"gt": _EXPIRE_GT, b"lt": _EXPIRE_LT}


def _peek(ctx, key, read=False):
    """The live value of key without touching its LRU/LFU data (Valkey's LOOKUP_NOTOUCH). read: the lookup of
    a read (EXISTS, TYPE, TTL: lookupKeyReadWithFlags), whose miss raises "keymiss"."""
    db = ctx.db
    value = db.data.get(key)
    if value is None:
        if read:
            ctx.notify(KEY_MISS, b"keymiss", key)
        return None
    expires = db.expires
    if expires and key in expires:
        ks = ctx.keyspace
        if ks.is_expired(db, key):
            ks.server_delete(db, key, "expired")
            if read:
                ctx.notify(KEY_MISS, b"keymiss", key)
            return None
    return value


def _duplicate(value):
    t = type(value)
    if t is bytes:
        return value
    if t is dict:
        return value.copy()
    if t is deque:
        return deque(value)
    if t is set:
        return value.copy()
    if t is ZSet or t is Stream or t is JsonDoc or t is Bloom:
        return value.copy()   # a Bloom: the module's copy callback (create_copy_from)
    raise TypeError(f"cannot copy a {t.__name__}")


def _parse_db(ctx, raw):
    """A database number (getIntFromObjectOrReply + selectDb's range check)."""
    n = parse_int(raw)
    if not (_INT32_MIN <= n <= _INT32_MAX):
        raise CommandError(messages.NOT_INTEGER)
    dbs = ctx.keyspace.dbs
    if not (0 <= n < len(dbs)):
        raise CommandError(messages.DB_INDEX_OUT_OF_RANGE)
    return dbs[n]


# -- existence and deletion ----------------------------------------------------------------------

@command("del", core=True)
def del_(ctx, args):
    return _delete_keys(ctx, args)


@command("unlink", core=True)
def unlink(ctx, args):
    return _delete_keys(ctx, args)


def _delete_keys(ctx, args):
    removed = []
    for key in args[1:]:
        if _peek(ctx, key) is not None:
            ctx.delete(key)
            removed.append(key)
            ctx.notify(GENERIC, b"del", key)
    if removed:
        ctx.propagate(b"DEL", *removed)
    return len(removed)


@command("exists", core=True)
def exists(ctx, args):
    count = 0
    for key in args[1:]:
        if _peek(ctx, key, True) is not None:
            count += 1
    return count


@command("touch")
def touch(ctx, args):
    lookup = ctx.lookup
    count = 0
    for key in args[1:]:
        if lookup(key) is not None:
            count += 1
    return count


@command("type")
def type_(ctx, args):
    return type_name(_peek(ctx, args[1], True))


# -- renaming, copying, moving -----------------------------------------------------------------

@command("rename")
def rename(ctx, args):
    return _rename(ctx, args[1], args[2], False)


@command("renamenx")
def renamenx(ctx, args):
    return _rename(ctx, args[1], args[2], True)


def _rename(ctx, src, dst, nx):
    value = ctx.lookup(src)
    if value is None:
        raise CommandError(messages.NO_SUCH_KEY)
    if src == dst:
        return 0 if nx else OK
    if ctx.lookup(dst) is not None:
        if nx:
            return 0
        ctx.delete(dst)
    expire = ctx.ttl_ms(src)
    enc = ctx.db.enc.get(src)  # the value keeps its encoding under its new name
    field_ttls = ctx.db.hexpires.get(src)   # and a hash its field TTLs
    ctx.delete(src)
    ctx.store(dst, value)
    if enc is not None:
        ctx.db.enc[dst] = enc
    if field_ttls is not None:
        ctx.db.field_ttls_into(dst, field_ttls)
    if expire is not None:
        ctx.set_expire(dst, expire)
    ctx.propagate(b"RENAME", src, dst)
    ctx.notify(GENERIC, b"rename_from", src)
    ctx.notify(GENERIC, b"rename_to", dst)
    return 1 if nx else OK


@command("copy")
def copy(ctx, args):
    ks = ctx.keyspace
    src_db = dst_db = ctx.db
    replace = False
    c = ArgCursor(args, 3)
    while c:
        opt = c.next_lower()
        if opt == b"replace":
            replace = True
        elif opt == b"db" and c.left():
            dst_db = _parse_db(ctx, c.next())
        else:
            raise syntax_error()
    key, newkey = args[1], args[2]
    if dst_db is src_db and key == newkey:
        raise CommandError(messages.SAME_OBJECT)
    value = ctx.lookup_read(key)   # lookupKeyRead: "keymiss" for a missing source
    if value is None:
        return 0
    expire = src_db.expires.get(key)
    existing = ks.lookup(dst_db, newkey)
    if existing is not None:
        if not replace:
            return 0
        ks.delete(dst_db, newkey)
    new = _duplicate(value)
    if dst_db.slots is not None:
        dst_db.slots.add(newkey)
    dst_db.data[newkey] = new
    ks.created(dst_db, newkey)
    ctx.notify_in(dst_db.id, NEW, b"new", newkey)   # dbAdd, after the one it replaces went
    enc = src_db.enc.get(key)  # Valkey's COPY duplicates the object, encoding included
    if enc is not None:
        dst_db.enc[newkey] = enc
    field_ttls = src_db.hexpires.get(key)   # and a hash's field TTLs (hashTypeDup)
    if field_ttls is not None:
        dst_db.field_ttls_into(newkey, field_ttls)
    if expire is not None:
        dst_db.set_expire(newkey, expire)
    if dst_db is not src_db:
        # The pipeline measures a write's keys in the current db only.
        ks.used_bytes += estimate_key(newkey, new) - (
            estimate_key(newkey, existing) if existing is not None else 0)
    ctx.touch(dst_db.id, newkey, exact=True)  # the source is only read
    ctx.propagate_args(args)
    ctx.notify_in(dst_db.id, GENERIC, b"copy_to", newkey)
    return 1


@command("move")
def move(ctx, args):
    ks = ctx.keyspace
    key = args[1]
    src_db = ctx.db
    dst_db = _parse_db(ctx, args[2])
    if dst_db is src_db:
        raise CommandError(messages.SAME_OBJECT)
    value = ctx.lookup(key)
    if value is None:
        return 0
    if ks.lookup(dst_db, key) is not None:
        return 0
    expire = src_db.expires.get(key)
    enc = src_db.enc.get(key)
    field_ttls = src_db.hexpires.get(key)
    ctx.delete(key)
    if dst_db.slots is not None:
        dst_db.slots.add(key)
    dst_db.data[key] = value
    ks.created(dst_db, key)
    ctx.notify_in(dst_db.id, NEW, b"new", key)   # dbAdd
    if enc is not None:
        dst_db.enc[key] = enc
    if field_ttls is not None:
        dst_db.field_ttls_into(key, field_ttls)
    if expire is not None:
        dst_db.set_expire(key, expire)
    ks.used_bytes += estimate_key(key, value)  # the pipeline saw it leave the source db
    ctx.touch(dst_db.id, key)
    ctx.propagate_args(args)
    ctx.notify(GENERIC, b"move_from", key)
    ctx.notify_in(dst_db.id, GENERIC, b"move_to", key)
    return 1


# -- enumeration --------------------------------------------------------------------------------

@command("keys")
def keys(ctx, args):
    pattern = args[1]
    db = ctx.db
    data = db.data
    if pattern == b"*":
        found = list(data)
    else:
        match = compile_glob(pattern)
        found = [k for k in data if match(k)]
    expires = db.expires
    if expires and found and ctx.keyspace.expire_enabled:
        now = ctx.now_ms()
        get = expires.get
        found = [k for k in found if get(k, now + 1) > now]
    return found


@command("scan")
def scan(ctx, args):
    cursor = parse_cursor(args[1])
    opts = parse_scan_options(args, 2, "db")
    db = ctx.db
    data = db.data
    cursor, found = data.scan(cursor, opts.count)   # the key table's own cursor (keyspace/keytable.py)
    if opts.type is not None:
        wanted = opts.type
        found = [k for k in found if type_name(data[k]) == wanted]
    match = opts.match
    if match is not None:
        found = [k for k in found if match(k)]
    expires = db.expires
    if expires and found:
        ks = ctx.keyspace
        live = []
        for k in found:
            if k in expires and ks.is_expired(db, k):
                ks.server_delete(db, k, "expired")
            else:
                live.append(k)
        found = live
    return scan_reply(cursor, found)


@command("randomkey")
def randomkey(ctx, args):
    db = ctx.db
    ks = ctx.keyspace
    rng = ks.rng
    for _ in range(1000):
        if not db.data:
            return None
        picked = db.random_keys(1, rng)
        if not picked:
            continue
        key = picked[0]
        if db.expires and key in db.expires and ks.is_expired(db, key):
            ks.server_delete(db, key, "expired")
            continue
        return key
    # Pathological sampling luck: fall back to the first live key.
    for key in list(db.data):
        if _peek(ctx, key) is not None:
            return key
    return None


# -- expiry ---------------------------------------------------------------------------------------

@command("expire")
def expire(ctx, args):
    return _expire(ctx, args, ctx.now_ms(), 1000, "expire")


@command("pexpire")
def pexpire(ctx, args):
    return _expire(ctx, args, ctx.now_ms(), 1, "pexpire")


@command("expireat")
def expireat(ctx, args):
    return _expire(ctx, args, 0, 1000, "expireat")


@command("pexpireat")
def pexpireat(ctx, args):
    return _expire(ctx, args, 0, 1, "pexpireat")


def _expire(ctx, args, basetime, unit, name):
    flags = 0
    for raw in args[3:]:
        bit = _EXPIRE_FLAGS.get(raw.lower())
        if bit is None:
            raise CommandError(messages.UNSUPPORTED_OPTION.format(raw.decode("utf-8", "replace")))
        flags |= bit
    if flags & _EXPIRE_NX and flags & (_EXPIRE_XX | _EXPIRE_GT | _EXPIRE_LT):
        raise CommandError(messages.NX_XX_GT_LT_INCOMPATIBLE)
    if flags & _EXPIRE_GT and flags & _EXPIRE_LT:
        raise CommandError(messages.GT_LT_INCOMPATIBLE)
    when = parse_int(args[2])
    if unit == 1000:
        if when > _SECONDS_MAX or when < _SECONDS_MIN:
            raise CommandError(messages.INVALID_EXPIRE.format(name))
        when *= 1000
    if when > INT64_MAX - basetime:
        raise CommandError(messages.INVALID_EXPIRE.format(name))
    when += basetime
    key = args[1]
    if ctx.lookup(key) is None:
        return 0
    if flags:
        current = ctx.ttl_ms(key)
        if flags & _EXPIRE_NX and current is not None:
            return 0
        if flags & _EXPIRE_XX and current is None:
            return 0
        if flags & _EXPIRE_GT and (current is None or when <= current):
            return 0
        if flags & _EXPIRE_LT and current is not None and when >= current:
            return 0
    ks = ctx.keyspace
    if ks.expire_enabled and when <= ctx.now_ms():
        ctx.delete(key)
        ks.expired_keys += 1
        ctx.propagate(b"UNLINK" if ks.unlink_expired else b"DEL", key)   # lazyfree-lazy-expire, as Valkey
        ctx.notify(EXPIRED, b"expired", key)   # deleteExpiredKeyFromOverwriteAndPropagate
    else:
        ctx.set_expire(key, when)
        ctx.propagate(b"PEXPIREAT", key, b"%d" % when)
        ctx.notify(GENERIC, b"expire", key)
    return 1


def _ttl(ctx, key, in_ms, absolute):
    if _peek(ctx, key, True) is None:
        return -2
    at = ctx.db.expires.get(key)
    if at is None:
        return -1
    ttl = at if absolute else at - ctx.now_ms()
    if ttl < 0:
        ttl = 0
    return ttl if in_ms else (ttl + 500) // 1000


@command("ttl", core=True)
def ttl(ctx, args):
    return _ttl(ctx, args[1], False, False)


@command("pttl", core=True)
def pttl(ctx, args):
    return _ttl(ctx, args[1], True, False)


@command("expiretime")
def expiretime(ctx, args):
    return _ttl(ctx, args[1], False, True)


@command("pexpiretime")
def pexpiretime(ctx, args):
    return _ttl(ctx, args[1], True, True)


@command("persist")
def persist(ctx, args):
    key = args[1]
    if ctx.lookup(key) is None or not ctx.persist(key):
        return 0
    ctx.propagate(b"PERSIST", key)
    ctx.notify(GENERIC, b"persist", key)
    return 1
