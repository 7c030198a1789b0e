"""String commands.

Effects: relative expiry becomes absolute (SET/SETEX/PSETEX -> SET k v PXAT ms, GETEX -> PEXPIREAT),
an expiry already in the past becomes DEL, INCRBYFLOAT -> SET k <result> KEEPTTL (replicas and
recovery never redo float arithmetic), SETNX/GETSET -> SET, MSETNX -> MSET, GETDEL/DELIFEQ -> DEL, MSETEX ->
one SET k v PXAT ms (or KEEPTTL) per key, or MSET without an expiry; the other writes are deterministic and
propagate themselves.
"""

from .. import messages
from ..errors import CommandError, WrongType
from ..keyspace import encoding
from ..keyspace.events import EXPIRED, GENERIC, STRING
from ..protocol.resp import OK
from .args import ArgCursor
from .base import INT64_MAX, INT64_MIN, parse_int, syntax_error, wrong_arity
from .numeric import format_long_double_human, parse_long_double, round_long_double
from .registry import command

PROTO_MAX_BULK_LEN = 512 * 1024 * 1024  # Valkey's default proto-max-bulk-len
_INT_MAX = (1 << 31) - 1                # MSETEX's numkeys is a C int

# Option flags of SET / GETEX (parseExtendedStringArgumentsOrReply).
_NX, _XX, _GET, _KEEPTTL, _PERSIST = 1, 2, 4, 8, 16
_EX, _PX, _EXAT, _PXAT = 32, 64, 128, 256
_IFEQ = 512
_ANY_EXPIRE = _EX | _PX | _EXAT | _PXAT
_EXPIRE_OPTS = {b"EX": _EX, b"PX": _PX, b"EXAT": _EXAT, b"PXAT": _PXAT}


def _parse_string_options(args, start, is_set, ifeq=False):
    """(flags, expire_flag, expire_arg, IFEQ's comparison value) as Valkey's parser: options may repeat (the
    last expire value wins) but conflicting ones are a syntax error; values are validated later. `ifeq`: SET,
    whose IFEQ (Valkey 8.1) excludes NX, XX and a second IFEQ."""
    if len(args) <= start:
        return 0, 0, None, None   # the commonest SET of all has no options: no cursor to build
    flags = 0
    expire_arg = None
    expire_flag = 0
    compare = None
    c = ArgCursor(args, start)
    while c:
        opt = c.next_upper()
        if opt == b"NX" and is_set and not flags & (_XX | _IFEQ):
            flags |= _NX
        elif opt == b"XX" and is_set and not flags & (_NX | _IFEQ):
            flags |= _XX
        elif opt == b"IFEQ" and ifeq and c.left() and not flags & (_NX | _XX | _IFEQ):
            flags |= _IFEQ
            compare = c.next()
        elif opt == b"GET" and is_set:
            flags |= _GET
        elif opt == b"KEEPTTL" and is_set and not flags & (_PERSIST | _ANY_EXPIRE):
            flags |= _KEEPTTL
        elif opt == b"PERSIST" and not is_set and not flags & (_ANY_EXPIRE | _KEEPTTL):
            flags |= _PERSIST
        else:
            bit = _EXPIRE_OPTS.get(opt)
            if (bit is None or not c.left() or flags & (_KEEPTTL | _PERSIST)
                    or flags & (_ANY_EXPIRE & ~bit)):
                raise syntax_error()
            flags |= bit
            expire_flag = bit
            expire_arg = c.next()
    return flags, expire_flag, expire_arg, compare


def _expire_at_ms(ctx, raw, expire_flag, name):
    """(absolute expire time in ms, already expired?) for an EX/PX/EXAT/PXAT argument, as
    getExpireMillisecondsOrReply + checkAlreadyExpired (which never holds while replaying or
    following a primary: there the time is stored and an explicit DEL follows)."""
    ms = parse_int(raw)
    seconds = expire_flag & (_EX | _EXAT)
    if ms <= 0 or (seconds and ms > INT64_MAX // 1000):
        raise CommandError(messages.INVALID_EXPIRE.format(name))
    if seconds:
        ms *= 1000
    if expire_flag & (_EX | _PX):
        ms += ctx.now_ms()
        if ms > INT64_MAX:
            raise CommandError(messages.INVALID_EXPIRE.format(name))
        return ms, False  # a positive relative time is always in the future
    return ms, ctx.keyspace.expire_enabled and ms <= ctx.now_ms()


def _delete_expired(ctx, key):
    """An explicit expiry in the past deletes the key; the effect is UNLINK or DEL (lazyfree-lazy-expire), as
    Valkey's deleteExpiredKeyFromOverwriteAndPropagate."""
    ctx.delete(key)
    ctx.keyspace.expired_keys += 1
    ctx.propagate(b"UNLINK" if ctx.keyspace.unlink_expired else b"DEL", key)
    ctx.notify(EXPIRED, b"expired", key)


def _check_length(size, append):
    if size + append > PROTO_MAX_BULK_LEN:
        raise CommandError(messages.STRING_TOO_LONG)


@command("get", core=True)
def get(ctx, args):
    value = ctx.keyspace.lookup(ctx.db, args[1])   # ctx.lookup_string, inlined: GET carries most traffic
    if value is None or type(value) is bytes:
        return value
    raise WrongType()


@command("set", core=True)
def set_(ctx, args):
    flags, expire_flag, expire_arg, compare = _parse_string_options(args, 3, True, ifeq=True)
    # an absolute time in ms already: Valkey propagates the command as it came (its spelling, its options),
    # but for IFEQ, a condition decided here (the effect is the plain SET it came to)
    verbatim = args if expire_flag == _PXAT and not flags & _IFEQ else None
    return _set(ctx, args[1], args[2], flags, expire_flag, expire_arg, "set", verbatim, compare)


def _set(ctx, key, value, flags, expire_flag, expire_arg, name, verbatim=None, compare=None):
    """setGenericCommand: returns OK / None (NX|XX|IFEQ not met), or the old value with GET."""
    expire_at = None
    if expire_arg is not None:
        expire_at, expired = _expire_at_ms(ctx, expire_arg, expire_flag, name)
    get_old = flags & _GET
    if get_old:
        old = ctx.read_type(key, bytes)   # getGenericCommand: a read
        found = old is not None
    else:
        found = ctx.lookup(key) is not None
    if (flags & _NX and found) or (flags & _XX and not found):
        return old if get_old else None
    if flags & _IFEQ and (old if get_old else ctx.lookup_string(key)) != compare:   # WRONGTYPE, then equal?
        return old if get_old else None
    if expire_at is not None and expired:
        if found:
            _delete_expired(ctx, key)
        return old if get_old else OK
    ctx.store(key, value, keep_ttl=bool(flags & _KEEPTTL))
    ctx.notify(STRING, b"set", key)
    if expire_at is not None:
        ctx.set_expire(key, expire_at)
        if verbatim is not None:
            ctx.propagate_args(verbatim)
        else:
            ctx.propagate(b"SET", key, value, b"PXAT", b"%d" % expire_at)
        ctx.notify(GENERIC, b"expire", key)
    elif flags & _KEEPTTL:
        ctx.propagate(b"SET", key, value, b"KEEPTTL")
    else:
        ctx.propagate(b"SET", key, value)
    return old if get_old else OK


@command("setnx")
def setnx(ctx, args):
    key = args[1]
    if ctx.lookup(key) is not None:
        return 0
    ctx.store(key, args[2])
    ctx.propagate(b"SET", key, args[2])
    ctx.notify(STRING, b"set", key)
    return 1


@command("setex")
def setex(ctx, args):
    return _set(ctx, args[1], args[3], 0, _EX, args[2], "setex")


@command("psetex")
def psetex(ctx, args):
    return _set(ctx, args[1], args[3], 0, _PX, args[2], "psetex")


@command("getset")
def getset(ctx, args):
    key = args[1]
    old = ctx.read_type(key, bytes)   # getGenericCommand: a read
    ctx.store(key, args[2])
    ctx.propagate(b"SET", key, args[2])
    ctx.notify(STRING, b"set", key)
    return old


@command("getdel")
def getdel(ctx, args):
    key = args[1]
    old = ctx.read_type(key, bytes)   # getGenericCommand: a read
    if old is not None:
        ctx.delete(key)
        ctx.propagate(b"DEL", key)
        ctx.notify(GENERIC, b"del", key)
    return old


@command("delifeq")
def delifeq(ctx, args):
    """DELIFEQ key value (Valkey 9.0): 1 if the key held exactly value and is gone, else 0; WRONGTYPE for a key
    that is not a string."""
    key = args[1]
    value = ctx.lookup_string(key)
    if value is None or value != args[2]:
        return 0
    ctx.delete(key)
    ctx.propagate(b"DEL", key)
    ctx.notify(GENERIC, b"del", key)
    return 1


@command("getex")
def getex(ctx, args):
    flags, expire_flag, expire_arg, _ = _parse_string_options(args, 2, False)
    if expire_arg is not None:   # Valkey 9 checks the time before it looks the key up (or at its type)
        when, expired = _expire_at_ms(ctx, expire_arg, expire_flag, "getex")
    key = args[1]
    value = ctx.read_type(key, bytes)
    if value is None:
        return None
    if expire_arg is not None:
        if expired:
            _delete_expired(ctx, key)
        else:
            ctx.set_expire(key, when)
            ctx.propagate(b"PEXPIREAT", key, b"%d" % when)
            ctx.notify(GENERIC, b"expire", key)
    elif flags & _PERSIST and ctx.persist(key):
        ctx.propagate(b"PERSIST", key)
        ctx.notify(GENERIC, b"persist", key)
    return value


@command("mget", core=True)
def mget(ctx, args):
    lookup = ctx.lookup
    out = []
    for key in args[1:]:
        value = lookup(key)
        out.append(value if type(value) is bytes else None)
    return out


@command("mset", core=True)
def mset(ctx, args):
    if len(args) % 2 == 0:
        raise wrong_arity("mset")
    store = ctx.store
    notify = ctx.notify
    for i in range(1, len(args), 2):
        store(args[i], args[i + 1])
        notify(STRING, b"set", args[i])
    ctx.propagate_args(args)
    return OK


@command("msetnx")
def msetnx(ctx, args):
    if len(args) % 2 == 0:
        raise wrong_arity("msetnx")
    lookup = ctx.lookup
    for i in range(1, len(args), 2):
        if lookup(args[i]) is not None:
            return 0
    store = ctx.store
    notify = ctx.notify
    for i in range(1, len(args), 2):
        store(args[i], args[i + 1])
        notify(STRING, b"set", args[i])
    ctx.propagate(b"MSET", *args[1:])
    return 1


@command("msetex")
def msetex(ctx, args):
    """MSETEX numkeys key value [key value ...] [NX | XX] [EX s | PX ms | EXAT s | PXAT ms | KEEPTTL]
    (Valkey 9.1): sets every pair or none; 1 if set, 0 if NX/XX was not met by every key. Checks in Valkey's
    order: numkeys, the pairs it names, the options, the expire value, then the keys."""
    try:
        numkeys = parse_int(args[1])
    except CommandError:
        numkeys = 0
    if not 1 <= numkeys <= _INT_MAX:
        raise CommandError(messages.MSETEX_BAD_NUMKEYS)
    end = 2 + 2 * numkeys
    if end > len(args):
        raise syntax_error()
    flags, expire_flag, expire_arg, _ = _parse_string_options(args, end, True)
    if flags & _GET:
        raise syntax_error()   # SET's GET is not one of MSETEX's options
    expire_at = None
    if expire_arg is not None:
        # a time already past is stored as it is (Valkey 9.1 has no checkAlreadyExpired here): the keys then
        # expire as any key does, lazily or actively, with their "expired" events and DEL effects
        expire_at = _expire_at_ms(ctx, expire_arg, expire_flag, "msetex")[0]
    if flags & (_NX | _XX):
        want = not flags & _NX
        lookup = ctx.lookup
        for i in range(2, end, 2):
            if (lookup(args[i]) is not None) is not want:
                return 0
    keep_ttl = bool(flags & _KEEPTTL)
    store = ctx.store
    for i in range(2, end, 2):
        key, value = args[i], args[i + 1]
        store(key, value, keep_ttl=keep_ttl)
        ctx.notify(STRING, b"set", key)
        if expire_at is not None:
            ctx.set_expire(key, expire_at)
            # the absolute time, as SET's EX/PX: a replay or a replica gets the same deadline
            ctx.propagate(b"SET", key, value, b"PXAT", b"%d" % expire_at)
            ctx.notify(GENERIC, b"expire", key)
        elif keep_ttl:
            ctx.propagate(b"SET", key, value, b"KEEPTTL")
    if expire_at is None and not keep_ttl:
        ctx.propagate(b"MSET", *args[2:end])
    return 1


@command("incrby", core=True)
def incrby(ctx, args):
    return _incr(ctx, args, parse_int(args[2]))


@command("incr", core=True)
def incr(ctx, args):
    return _incr(ctx, args, 1)


@command("decr", core=True)
def decr(ctx, args):
    return _incr(ctx, args, -1)


@command("decrby", core=True)
def decrby(ctx, args):
    delta = parse_int(args[2])
    if delta == INT64_MIN:
        raise CommandError(messages.DECREMENT_OVERFLOW)
    return _incr(ctx, args, -delta)


def _incr(ctx, args, delta):
    key = args[1]
    old = ctx.lookup_string(key)
    current = 0 if old is None else parse_int(old)
    result = current + delta
    if not (INT64_MIN <= result <= INT64_MAX):
        raise CommandError(messages.OVERFLOW)
    ctx.store(key, b"%d" % result, keep_ttl=True)
    ctx.propagate_args(args)        # deterministic on the same state: propagated as it came, as in Valkey
    ctx.notify(STRING, b"incrby", key)
    return result


@command("incrbyfloat")
def incrbyfloat(ctx, args):
    # Valkey computes in C long double and prints "%.17Lf" without trailing zeros; the helpers
    # shared with HINCRBYFLOAT reproduce that exactly ("0.1" + "0.2" -> "0.3", 1e20 in full).
    key = args[1]
    old = ctx.lookup_string(key)
    if old is None:
        current = 0
    else:
        current = parse_long_double(old)
        if current is None:
            raise CommandError(messages.NOT_FLOAT)
    incr = parse_long_double(args[2])
    if incr is None:
        raise CommandError(messages.NOT_FLOAT)
    if type(current) is float or type(incr) is float:  # +-inf: the sum is infinite or NaN
        raise CommandError(messages.INCR_NAN)
    value = round_long_double(current + incr)
    if value is None:
        raise CommandError(messages.INCR_NAN)
    text = format_long_double_human(value)
    ctx.store(key, text, keep_ttl=True)
    ctx.propagate(b"SET", key, text, b"KEEPTTL")
    ctx.notify(STRING, b"incrbyfloat", key)
    return text


@command("append")
def append(ctx, args):
    key, tail = args[1], args[2]
    old = ctx.lookup_string(key)
    if old is None:
        ctx.store(key, tail)
        ctx.propagate_args(args)
        ctx.notify(STRING, b"append", key)
        return len(tail)
    _check_length(len(old), len(tail))
    value = old + tail
    ctx.store(key, value, keep_ttl=True)
    encoding.string_modified_in_place(ctx.db, key)
    ctx.propagate_args(args)
    ctx.notify(STRING, b"append", key)
    return len(value)


@command("strlen")
def strlen(ctx, args):
    value = ctx.lookup_string(args[1])
    return 0 if value is None else len(value)


@command("getrange")
def getrange(ctx, args):
    start = parse_int(args[2])
    end = parse_int(args[3])
    value = ctx.lookup_string(args[1])
    if value is None:
        return b""
    n = len(value)
    if start < 0 and end < 0 and start > end:
        return b""
    if start < 0:
        start += n
    if end < 0:
        end += n
    if start < 0:
        start = 0
    if end < 0:
        end = 0
    if end >= n:
        end = n - 1
    if start > end or n == 0:
        return b""
    return value[start:end + 1]


command("substr")(getrange)


@command("setrange")
def setrange(ctx, args):
    key, chunk = args[1], args[3]
    offset = parse_int(args[2])
    if offset < 0:
        raise CommandError(messages.OFFSET_OUT_OF_RANGE)
    old = ctx.lookup(key)
    if old is None:
        if not chunk:
            return 0
        _check_length(offset, len(chunk))
        value = bytes(offset) + chunk
        ctx.store(key, value)
    else:
        if type(old) is not bytes:
            raise WrongType()
        if not chunk:
            return len(old)
        _check_length(offset, len(chunk))
        n = len(old)
        end = offset + len(chunk)
        if offset > n:
            value = old + bytes(offset - n) + chunk
        else:
            value = old[:offset] + chunk + old[end:]
        ctx.store(key, value, keep_ttl=True)
    encoding.string_modified_in_place(ctx.db, key)
    ctx.propagate_args(args)
    ctx.notify(STRING, b"setrange", key)
    return len(value)
