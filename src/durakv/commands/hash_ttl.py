"""Hash field expiration (Valkey 9.0): HEXPIRE HPEXPIRE HEXPIREAT HPEXPIREAT, HTTL HPTTL HEXPIRETIME
HPEXPIRETIME, HPERSIST, HGETEX, HSETEX, HGETDEL. Replies, errors and their order are Valkey 9.1.2's (t_hash.c).

Field TTLs live beside the hash (Db.hexpires: key -> {field: expire_at_ms}); a field whose TTL passed stays
stored, unseen by readers, until active expiry removes it with an HDEL effect (keyspace/db.py).

Effects are absolute and name only what changed, so replay and replicas (where no field expires by itself)
reach the same state: a TTL set -> `HPEXPIREAT key ms FIELDS n field ...`, a TTL in the past (the fields
deleted at once) -> `HDEL key field ...`, HPERSIST/HGETEX PERSIST -> `HPERSIST key FIELDS n field ...`,
HSETEX -> `HSETEX key [PXAT ms | KEEPTTL] FIELDS n field value ...` without its NX/XX/FNX/FXX conditions,
HGETDEL -> `HDEL key field ...`.
"""

from .. import messages
from ..errors import CommandError
from ..keyspace import encoding
from ..keyspace.events import GENERIC, HASH, NEW
from .args import ArgCursor
from .base import INT64_MAX, parse_int, syntax_error
from .hashes import written
from .registry import command

_NX, _XX, _GT, _LT = 1, 2, 4, 8
_EXPIRE_FLAGS = {b"nx": _NX, b"xx": _XX, b"gt": _GT, b"lt": _LT}

# hexpireGenericCommand's results per field
_NOT_EXIST, _FAILED_CONDITION, _FAILED, _SUCCESSFUL, _EXPIRE_ASAP = -2, 0, -1, 1, 2


def _numfields_error():
    return CommandError(messages.NUMFIELDS_MISMATCH)


def _find_fields(args, start):
    """The index of the first FIELDS token at or after start that has an argument after it, or None
    (Valkey scans `fields_index < argc - 1` from there, so a key named "fields" is taken for the token)."""
    for i in range(start, len(args) - 1):
        if args[i].lower() == b"fields":
            return i
    return None


def _unix_time_ms(value: bytes, basetime: int, unit: int, name: str) -> int:
    """convertExpireArgumentToUnixTime: value (seconds or ms, relative to basetime or absolute) as absolute
    ms; negative values and overflow are an invalid expire time."""
    when = parse_int(value)
    if when < 0:
        raise CommandError(messages.INVALID_EXPIRE.format(name))
    if unit == 1000:
        if when > INT64_MAX // 1000:
            raise CommandError(messages.INVALID_EXPIRE.format(name))
        when *= 1000
    if when > INT64_MAX - basetime:
        raise CommandError(messages.INVALID_EXPIRE.format(name))
    return when + basetime


def _already_expired(ctx, when: int, now_ms: int) -> bool:
    """checkAlreadyExpired: never while replaying or following a primary (time does not pass there). now_ms:
    the time a relative TTL was counted from (Valkey's command time snapshot): read again, a 1 ms TTL could
    be past already when a millisecond ticks during the command."""
    return ctx.keyspace.expire_enabled and when <= now_ms


def _live(ctx, key, h, field) -> bool:
    """field is in hash h (at key) and its TTL has not passed."""
    if h is None or field not in h:
        return False
    db = ctx.db
    return not (db.hexpires and ctx.keyspace.field_expired(db, key, field))


def _ttl_of(ctx, key, field):
    ttls = ctx.db.hexpires.get(key)
    return None if ttls is None else ttls.get(field)


def _set_field_ttl(ctx, key, field, when):
    db = ctx.db
    db.set_field_expire(key, field, when)
    db.enc[key] = encoding.HASHTABLE   # a field with a TTL converts a listpack hash (hashTypeSetExpire)


def _delete_fields(ctx, key, h, fields):
    """Deletes the given fields (present ones) of h; the key too when it is left empty. Returns the deleted."""
    db = ctx.db
    deleted = []
    for f in fields:
        if f in h:
            del h[f]
            db.clear_field_expire(key, f)
            deleted.append(f)
    if deleted and not h:
        ctx.delete(key)
    return deleted


# -- HEXPIRE HPEXPIRE HEXPIREAT HPEXPIREAT ----------------------------------------------------------

def _hexpire(ctx, args, relative: bool, unit: int, name: str):
    fi = _find_fields(args, 3)
    flags = 0
    num = 0
    if fi is not None:
        for raw in args[3:fi]:
            bit = _EXPIRE_FLAGS.get(raw.lower())
            if bit is None:
                raise CommandError(messages.UNSUPPORTED_OPTION.format(raw.decode("utf-8", "replace")))
            flags |= bit
        if flags & _NX and flags & (_XX | _GT | _LT):
            raise CommandError(messages.NX_XX_GT_LT_INCOMPATIBLE)
        if flags & _GT and flags & _LT:
            raise CommandError(messages.GT_LT_INCOMPATIBLE)
        num = parse_int(args[fi + 1])
    start = fi + 2 if fi is not None else len(args)
    if num == 0 or num != len(args) - start:
        raise _numfields_error()
    now_ms = ctx.now_ms()
    when = _unix_time_ms(args[2], now_ms if relative else 0, unit, name)
    key = args[1]
    h = ctx.lookup_hash(key)
    fields = args[start:]
    out = []
    expired = _already_expired(ctx, when, now_ms)
    updated = []
    deleted = []
    for f in fields:
        if h is None or not _live(ctx, key, h, f):
            out.append(_NOT_EXIST)
            continue
        if flags:   # the condition first, even for a time already past (Valkey 9's hashTypeSetExpire)
            current = _ttl_of(ctx, key, f)
            if (flags & _NX and current is not None) or (flags & _XX and current is None) \
                    or (flags & _GT and (current is None or when <= current)) \
                    or (flags & _LT and current is not None and when >= current):
                out.append(_FAILED_CONDITION)
                continue
        if expired:
            del h[f]
            ctx.db.clear_field_expire(key, f)
            deleted.append(f)
            out.append(_EXPIRE_ASAP)
        else:
            _set_field_ttl(ctx, key, f, when)
            updated.append(f)
            out.append(_SUCCESSFUL)
    if deleted:
        ctx.keyspace.expired_fields += len(deleted)   # counted as active expiry counts them
        ctx.propagate(b"HDEL", key, *deleted)
        ctx.notify(HASH, b"hexpired", key)
        ctx.remove_if_empty(key, h)
    if updated:
        ctx.propagate(b"HPEXPIREAT", key, b"%d" % when, b"FIELDS", b"%d" % len(updated), *updated)
        ctx.notify(HASH, b"hexpire", key)
    return out


@command("hexpire")
def hexpire(ctx, args):
    return _hexpire(ctx, args, True, 1000, "hexpire")


@command("hpexpire")
def hpexpire(ctx, args):
    return _hexpire(ctx, args, True, 1, "hpexpire")


@command("hexpireat")
def hexpireat(ctx, args):
    return _hexpire(ctx, args, False, 1000, "hexpireat")


@command("hpexpireat")
def hpexpireat(ctx, args):
    return _hexpire(ctx, args, False, 1, "hpexpireat")


# -- HTTL HPTTL HEXPIRETIME HPEXPIRETIME, HPERSIST ---------------------------------------------------

def _fixed_fields(args, mismatch):
    """`key FIELDS numfields field ...` at args[1:]: the fields. A missing FIELDS token is a syntax error,
    a numfields that does not match raises mismatch()."""
    if args[2].lower() != b"fields":
        raise syntax_error()
    num = parse_int(args[3])
    if num <= 0 or num != len(args) - 4:
        raise mismatch()
    return args[4:]


def _httl(ctx, args, relative: bool, in_ms: bool):
    fields = _fixed_fields(args, syntax_error)
    key = args[1]
    h = ctx.lookup_hash(key)
    base = ctx.now_ms() if relative else 0
    out = []
    for f in fields:
        if not _live(ctx, key, h, f):
            out.append(-2)
            continue
        at = _ttl_of(ctx, key, f)
        if at is None:
            out.append(-1)
            continue
        result = at - base
        if result < 0:
            result = 0
        out.append(result if in_ms else (result + 500) // 1000)
    return out


@command("httl")
def httl(ctx, args):
    return _httl(ctx, args, True, False)


@command("hpttl")
def hpttl(ctx, args):
    return _httl(ctx, args, True, True)


@command("hexpiretime")
def hexpiretime(ctx, args):
    return _httl(ctx, args, False, False)


@command("hpexpiretime")
def hpexpiretime(ctx, args):
    return _httl(ctx, args, False, True)


@command("hpersist")
def hpersist(ctx, args):
    fields = _fixed_fields(args, _numfields_error)
    key = args[1]
    h = ctx.lookup_hash(key)
    out = []
    persisted = []
    for f in fields:
        if not _live(ctx, key, h, f):
            out.append(_NOT_EXIST)
        elif ctx.db.clear_field_expire(key, f):
            persisted.append(f)
            out.append(_SUCCESSFUL)
        else:
            out.append(_FAILED)
    if persisted:
        ctx.propagate(b"HPERSIST", key, b"FIELDS", b"%d" % len(persisted), *persisted)
        ctx.notify(HASH, b"hpersist", key)
    return out


# -- HGETDEL ----------------------------------------------------------------------------------------

@command("hgetdel")
def hgetdel(ctx, args):
    fields = _fixed_fields(args, _numfields_error)
    key = args[1]
    h = ctx.lookup_hash(key)
    if h is None:
        return [None] * len(fields)
    out = []
    deleted = []
    db = ctx.db
    for f in fields:
        if h is not None and _live(ctx, key, h, f):
            out.append(h.pop(f))
            db.clear_field_expire(key, f)
            deleted.append(f)
            if not h:
                break
        else:
            out.append(None)
    out.extend([None] * (len(fields) - len(out)))   # the hash went with its last field
    if deleted:
        ctx.propagate(b"HDEL", key, *deleted)
        ctx.notify(HASH, b"hdel", key)
        ctx.remove_if_empty(key, h)
    return out


# -- HGETEX HSETEX ----------------------------------------------------------------------------------

# parseExtendedStringArgumentsOrReply's tokens for the two commands: token -> (flag, takes a value)
_EX, _PX, _EXAT, _PXAT, _PERSIST, _KEEPTTL, _KNX, _KXX, _FNX, _FXX = (1 << i for i in range(10))
_UNITS = {_EX: (True, 1000), _PX: (True, 1), _EXAT: (False, 1000), _PXAT: (False, 1)}
_TIME = _EX | _PX | _EXAT | _PXAT
_GETEX_TOKENS = {b"ex": _EX, b"px": _PX, b"exat": _EXAT, b"pxat": _PXAT, b"persist": _PERSIST}
_SETEX_TOKENS = {b"ex": _EX, b"px": _PX, b"exat": _EXAT, b"pxat": _PXAT, b"keepttl": _KEEPTTL,
                 b"nx": _KNX, b"xx": _KXX, b"fnx": _FNX, b"fxx": _FXX}
# a token may repeat itself but not join one of these
_CONFLICTS = {_EX: _TIME | _PERSIST | _KEEPTTL, _PX: _TIME | _PERSIST | _KEEPTTL,
              _EXAT: _TIME | _PERSIST | _KEEPTTL, _PXAT: _TIME | _PERSIST | _KEEPTTL,
              _PERSIST: _TIME, _KEEPTTL: _TIME, _KNX: _KXX, _KXX: _KNX, _FNX: _FXX, _FXX: _FNX}


def _parse_ex_options(args, end, tokens):
    """The options in args[2:end]: (flags, the time flag or 0, its value argument or None)."""
    flags = 0
    unit_flag = 0
    value = None
    c = ArgCursor(args, 2, end)
    while c:
        flag = tokens.get(c.next_lower())
        if flag is None or flags & (_CONFLICTS[flag] & ~flag):
            raise syntax_error()
        if flag & _TIME:
            unit_flag = flag
            value = c.next()          # a missing value: "ERR syntax error"
        flags |= flag
    return flags, unit_flag, value


def _ex_fields(args, tokens, pairs: bool):
    """(flags, time flag, time value, index of the first field) of an HGETEX / HSETEX."""
    fi = _find_fields(args, 1)
    flags, unit_flag, value, num = 0, 0, None, 0
    if fi is not None:
        flags, unit_flag, value = _parse_ex_options(args, fi, tokens)
        num = parse_int(args[fi + 1])
    start = fi + 2 if fi is not None else len(args)
    given = len(args) - start
    if num == 0 or (num * 2 != given if pairs else num != given) or num > INT64_MAX // 2:
        raise _numfields_error()
    return flags, unit_flag, value, start


def _when(ctx, unit_flag, value, name, now_ms):
    relative, unit = _UNITS[unit_flag]
    return _unix_time_ms(value, now_ms if relative else 0, unit, name)


@command("hgetex")
def hgetex(ctx, args):
    flags, unit_flag, value, start = _ex_fields(args, _GETEX_TOKENS, False)
    key = args[1]
    h = ctx.read_type(key, dict)   # a read's lookup (lookupKeyRead), as HGET's
    fields = args[start:]
    when = None
    expire_now = False
    if unit_flag:
        now_ms = ctx.now_ms()
        when = _when(ctx, unit_flag, value, "hgetex", now_ms)
        expire_now = _already_expired(ctx, when, now_ms)
    out = []
    changed = []
    db = ctx.db
    for f in fields:
        live = _live(ctx, key, h, f)
        out.append(h[f] if live else None)
        if not live:
            continue
        if expire_now:
            del h[f]
            db.clear_field_expire(key, f)
            changed.append(f)
        elif when is not None:
            _set_field_ttl(ctx, key, f, when)
            changed.append(f)
        elif flags & _PERSIST and db.clear_field_expire(key, f):
            changed.append(f)
    if changed:
        if expire_now:
            ctx.keyspace.expired_fields += len(changed)
            ctx.propagate(b"HDEL", key, *changed)
            ctx.notify(HASH, b"hexpired", key)
            ctx.remove_if_empty(key, h)
        elif when is not None:
            ctx.propagate(b"HPEXPIREAT", key, b"%d" % when, b"FIELDS", b"%d" % len(changed), *changed)
            ctx.notify(HASH, b"hexpire", key)
        else:
            ctx.propagate(b"HPERSIST", key, b"FIELDS", b"%d" % len(changed), *changed)
            ctx.notify(HASH, b"hpersist", key)
    return out


@command("hsetex")
def hsetex(ctx, args):
    flags, unit_flag, value, start = _ex_fields(args, _SETEX_TOKENS, True)
    key = args[1]
    h = ctx.lookup_hash(key)
    if (flags & _KNX and h is not None) or (flags & _KXX and h is None):
        return 0
    when = None
    now_ms = ctx.now_ms()
    if unit_flag and not flags & _KEEPTTL:
        when = _when(ctx, unit_flag, value, "hsetex", now_ms)
    pairs = args[start:]
    fields = pairs[0::2]
    if flags & (_FNX | _FXX):
        if h is not None:
            for f in fields:
                live = _live(ctx, key, h, f)
                if (flags & _FNX and live) or (flags & _FXX and not live):
                    return 0
        elif flags & _FXX:
            return 0
    db = ctx.db
    ks = ctx.keyspace
    if when is not None and _already_expired(ctx, when, now_ms):
        # Valkey 9.1 sets the fields with that TTL and expires them at once ("hset", "hexpire", "hexpired",
        # "del" when the hash is gone, even one made for this): none of them is left, whatever they were
        named = list(dict.fromkeys(fields))
        if h is not None:
            _delete_fields(ctx, key, h, named)
            gone = key not in db.data
        else:
            ctx.notify(NEW, b"new", key)   # the hash made for them (dbAdd), gone with them
            gone = True
        ks.expired_fields += len(named)
        ctx.propagate(b"HDEL", key, *named)
        ctx.notify(HASH, b"hset", key)
        ctx.notify(HASH, b"hexpire", key)
        ctx.notify(HASH, b"hexpired", key)
        if gone:
            ctx.notify(GENERIC, b"del", key)
        return 1
    new_key = h is None
    if new_key:
        h = {}
        ctx.store(key, h)
    elif flags & _KEEPTTL and db.hexpires and key in db.hexpires:
        # An expired field is replaced as a new one, without its old TTL: its removal is journaled first
        # (silently, as Valkey overwrites it in place), or replay, where it has not expired, would keep it.
        gone = [f for f in set(fields) if ks.field_expired(db, key, f)]
        if gone:
            ks.expire_fields(db, key, gone, silent=True)
    it = iter(pairs)
    for f, v in zip(it, it):
        h[f] = v
        if when is not None:
            db.set_field_expire(key, f, when)
        elif not flags & _KEEPTTL and db.hexpires:
            db.clear_field_expire(key, f)
    written(ctx, key, h, pairs, new_key)
    if when is not None:
        db.enc[key] = encoding.HASHTABLE
        ctx.propagate(b"HSETEX", key, b"PXAT", b"%d" % when, b"FIELDS", args[start - 1], *pairs)
        ctx.notify(HASH, b"hset", key)
        ctx.notify(HASH, b"hexpire", key)
    elif flags & _KEEPTTL:
        ctx.propagate(b"HSETEX", key, b"KEEPTTL", b"FIELDS", args[start - 1], *pairs)
        ctx.notify(HASH, b"hset", key)
    else:
        ctx.propagate(b"HSETEX", key, b"FIELDS", args[start - 1], *pairs)
        ctx.notify(HASH, b"hset", key)
    return 1
