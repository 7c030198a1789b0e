"""Generic leftovers: SORT SORT_RO DUMP RESTORE WAIT WAITAOF.

Effects: SORT .. STORE -> DEL dst (when it existed) + RPUSH dst <result> in chunks, or DEL dst for an
empty result (the result may depend on set iteration order and on the BY/GET keys, so it is recorded, not
recomputed); RESTORE propagates itself with the TTL made absolute (ABSTTL), or DEL when REPLACE met a TTL
already in the past. SORT without STORE, SORT_RO, DUMP, WAIT and WAITAOF change nothing.

DUMP payloads are Valkey's (keyspace/rdbvalue.py): the value in RDB object serialization, RDB version 10
and CRC-64, so Valkey and Redis 7+ RESTORE what durakv dumps (and MIGRATE between them works) and durakv
RESTOREs what they dump (RDB versions up to 11, every encoding). RESTORE also reads the format durakv
wrote before (journals may hold RESTORE effects with it):

    type tag (1 byte) | body | version 0x4B44 (u16) | CRC32C of everything before it (u32)  little-endian

    string  the bytes
    list    u32 count | u32 length * count | elements                   (set: the same, tag 2)
    hash    u32 count | u32 length * 2 * count | field, value, field, value ...
    zset    u32 count | u32 length * count | f64 score * count | members (rank order)
    stream  u32 commands | u32 argc * commands | u32 length * args | args: the commands that rebuild it
            (Stream.rebuild_commands) on the placeholder key "k"; RESTORE runs them on a scratch keyspace
            (only XADD XGROUP XCLAIM XTRIM XDEL XSETID on that key are accepted)
"""

import struct
from collections import deque
from itertools import islice

from ..checksum import crc32c

from .. import messages
from ..errors import CommandError, WrongType
from ..keyspace import Keyspace, ZSet, encoding
from ..keyspace.db import estimate_key
from ..keyspace.events import GENERIC, LIST
from ..keyspace import rdbvalue
from ..keyspace.bloom import Bloom
from ..keyspace.jsondoc import JsonDoc
from ..keyspace.stream import Stream
from ..protocol.numbers import string2d
from ..protocol.resp import OK, ErrorReply, Raw
from . import registry
from .acl import check as acl_check, keys as acl_keys
from .acl.handlers import users_of
from .args import ArgCursor
from .base import INT64_MAX, atoi, parse_int, syntax_error
from .blocking import parse_timeout_ms
from .registry import command
from .session import Session

RPUSH_CHUNK = 512

# -- SORT ---------------------------------------------------------------------------------------------


_ELEMENT = object()  # the pattern "#": the element itself


def _compile_pattern(pattern: bytes):
    """(prefix, suffix, field) for lookupKeyByPattern; '#' -> _ELEMENT; no '*' -> None (never found)."""
    if pattern == b"#":
        return _ELEMENT
    star = pattern.find(b"*")
    if star < 0:
        return None
    arrow = pattern.find(b"->", star + 1)
    if arrow >= 0 and arrow + 2 < len(pattern):
        return pattern[:star], pattern[star + 1:arrow], pattern[arrow + 2:]
    return pattern[:star], pattern[star + 1:], None


def _lookup_by_pattern(ctx, compiled, element):
    """The string (or hash field) a compiled BY/GET pattern names for element, or None."""
    if compiled is None:
        return None
    if compiled is _ELEMENT:
        return element
    prefix, suffix, field = compiled
    key = prefix + element + suffix
    value = ctx.lookup_read(key)   # lookupKeyRead: "keymiss" for each missing one
    if value is None:
        return None
    if field is not None:
        if type(value) is not dict or (ctx.db.hexpires and ctx.keyspace.field_expired(ctx.db, key, field)):
            return None
        return value.get(field)
    return value if type(value) is bytes else None


def sort_score(text: bytes):
    """A SORT weight as Valkey 9 reads it (valkey_strtod consuming the whole string, then errno and NaN
    checked): string2d's rules, so no leading space, no hex float, an empty string refused. None when it
    cannot be converted."""
    return string2d(text)


def _full_key_access(ctx, args) -> bool:
    """BY and GET read keys no key spec names: Valkey allows them only to a user who may read every key."""
    acl = users_of(ctx)
    if acl is None:
        return True
    return acl_check.unrestricted_key_access(acl.user_of(ctx.client), registry.TABLE[args[0].lower()], args,
                                             acl_keys.READ)


def _sort(ctx, args, readonly):
    desc = alpha = dontsort = False
    limit_start, limit_count = 0, -1
    sortby = store = None
    gets = []
    c = ArgCursor(args, 2)
    while c:
        opt = c.next_lower()
        left = c.left()
        if opt == b"asc":
            desc = False
        elif opt == b"desc":
            desc = True
        elif opt == b"alpha":
            alpha = True
        elif opt == b"limit" and left >= 2:
            limit_start = c.int()
            limit_count = c.int()
        elif opt == b"store" and left >= 1 and not readonly:
            store = c.next()
        elif opt == b"by" and left >= 1:
            sortby = c.next()
            if b"*" not in sortby:
                dontsort = True  # a constant pattern: nothing to sort by (and it stays so, as Valkey)
            elif not _full_key_access(ctx, args):
                raise CommandError(messages.SORT_BY_ACL)
        elif opt == b"get" and left >= 1:
            if not _full_key_access(ctx, args):
                raise CommandError(messages.SORT_GET_ACL)
            gets.append(_compile_pattern(c.next()))
        else:
            raise syntax_error()

    key = args[1]
    value = ctx.lookup_read(key)
    t = type(value)
    if value is not None and t is not set and t is not deque and t is not ZSet:
        raise WrongType()
    if value is None:
        value, t = deque(), deque
    state = ctx.scripting
    in_script = state is not None and state.calls is not None and ctx.client is state.calls.session
    if dontsort and t is set and (store is not None or in_script):
        # A set has no order of its own: a stored result, or what a script sees (its effects must not
        # depend on it), must not depend on iteration order (sortCommandGeneric's rule).
        dontsort, alpha, sortby = False, True, None

    vectorlen = len(value)
    start = min(max(limit_start, 0), vectorlen)
    limit_count = min(max(limit_count, -1), vectorlen)
    end = vectorlen - 1 if limit_count < 0 else start + limit_count - 1
    if start >= vectorlen:
        start, end = vectorlen - 1, vectorlen - 2
    if end >= vectorlen:
        end = vectorlen - 1
    if (t is ZSet or t is deque) and dontsort and (start != 0 or end != vectorlen - 1):
        vectorlen = end - start + 1

    if t is deque and dontsort:
        if end >= start:
            source = reversed(value) if desc else value
            vector = list(islice(source, start, start + vectorlen))
            end -= start
            start = 0
        else:
            vector = []
    elif t is ZSet and dontsort:
        order = value.order
        if desc:
            top = len(order) - start
            vector = [m for _s, m in reversed(order[max(0, top - vectorlen):top])]
        else:
            vector = [m for _s, m in order[start:start + max(0, vectorlen)]]
        end -= start
        start = 0
    elif t is ZSet:
        vector = list(value.scores)
    else:
        vector = list(value)

    if not dontsort:
        by = _compile_pattern(sortby) if sortby is not None else None
        if alpha:
            if sortby is not None:
                weights = [_lookup_by_pattern(ctx, by, e) for e in vector]
                keyed = sorted(zip(((w is not None, w or b"") for w in weights), vector),
                               key=_first, reverse=desc)
                vector = [e for _k, e in keyed]
            else:
                vector.sort(reverse=desc)
        else:
            scored = []
            for e in vector:
                if sortby is not None:
                    w = _lookup_by_pattern(ctx, by, e)
                    score = 0.0 if w is None else sort_score(w)
                else:
                    score = sort_score(e)
                if score is None:
                    raise CommandError(messages.SORT_SCORE_NOT_DOUBLE)
                scored.append((score, e))
            scored.sort(reverse=desc)
            vector = [e for _s, e in scored]

    selected = vector[start:end + 1] if end >= start else []
    if not gets:
        result = selected
    else:
        result = []
        missing = b"" if store is not None else None
        for e in selected:
            for compiled in gets:
                v = _lookup_by_pattern(ctx, compiled, e)
                result.append(missing if v is None else v)
    if store is None:
        return result
    _store_result(ctx, key, store, result)
    return len(result)


def _first(pair):
    return pair[0]


def _store_result(ctx, src, dst, result):
    """setKey(dst, list) for a non-empty result, else delete dst; memory accounted here when dst is not
    the sorted key (the dispatcher measures only the keys the command's key specs name)."""
    ks = ctx.keyspace
    old = ctx.lookup(dst)
    account = dst != src
    if result:
        new = deque(result)
        if old is not None:
            ctx.propagate(b"DEL", dst)   # replaced whole (setKey overwrites: no "new" for it)
        ctx.store(dst, new)
        encoding.list_stored(ctx.keyspace.encoding_rules, ctx.db, dst, new)
        for i in range(0, len(result), RPUSH_CHUNK):
            ctx.propagate(b"RPUSH", dst, *result[i:i + RPUSH_CHUNK])
        ctx.notify(LIST, b"sortstore", dst)
        if account:
            ks.used_bytes += estimate_key(dst, new) - (estimate_key(dst, old) if old is not None else 0)
    elif old is not None:
        ctx.delete(dst)
        ctx.propagate(b"DEL", dst)
        ctx.notify(GENERIC, b"del", dst)
        if account:
            ks.used_bytes -= estimate_key(dst, old)


@command("sort")
def sort(ctx, args):
    return _sort(ctx, args, False)


@command("sort_ro")
def sort_ro(ctx, args):
    return _sort(ctx, args, True)


# -- DUMP / RESTORE -----------------------------------------------------------------------------------
# DUMP writes Valkey's payload (keyspace/rdbvalue.py: RDB object serialization + RDB version + CRC-64), so
# payloads move between durakv, Valkey and Redis (RESTORE, MIGRATE, tools). RESTORE also reads the payload
# format durakv wrote before (a tag, lengths, LEGACY_DUMP_VERSION, CRC-32C): journals hold RESTORE effects.

LEGACY_DUMP_VERSION = 0x4B44
_TAG_STRING, _TAG_LIST, _TAG_SET, _TAG_ZSET, _TAG_HASH, _TAG_STREAM = 0, 1, 2, 3, 4, 15
_STREAM_KEY = b"k"
_STREAM_REBUILD = {b"xadd": 1, b"xgroup": 2, b"xclaim": 1, b"xtrim": 1, b"xdel": 1, b"xsetid": 1}  # key position
_U32 = struct.Struct("<I")
_FOOTER = struct.Struct("<HI")


class _BadData(Exception):
    pass


class WithFieldTTLs:
    """A decoded hash payload that carries field TTLs (RDB_TYPE_HASH_2): the value and {field: expire_at_ms}."""
    __slots__ = ("value", "field_ttls")

    def __init__(self, value, field_ttls):
        self.value = value
        self.field_ttls = field_ttls


def dump_payload(value, field_ttls=None) -> bytes:
    try:
        return rdbvalue.dump(value, field_ttls)
    except rdbvalue.RdbError as exc:       # an empty collection: Valkey never stores one either
        raise TypeError(str(exc)) from None


def _legacy_payload(payload: bytes) -> bool:
    if len(payload) < 1 + _FOOTER.size:
        return False
    version, crc = _FOOTER.unpack_from(payload, len(payload) - _FOOTER.size)
    return version == LEGACY_DUMP_VERSION and crc32c(memoryview(payload)[:-4]) == crc


def verify_payload(payload: bytes) -> bool:
    return rdbvalue.verify(payload) or _legacy_payload(payload)


def _split(buf, pos, end, count, lengths):
    out = []
    for ln in lengths:
        nxt = pos + ln
        if nxt > end:
            raise _BadData()
        out.append(bytes(buf[pos:nxt]))
        pos = nxt
    if pos != end:
        raise _BadData()
    return out


def load_payload(payload: bytes, clock_ms=None):
    """The value a verified payload holds (clock_ms: "now" for a stream's consumers), a WithFieldTTLs for a
    hash with field TTLs. Raises _BadData when its body is malformed."""
    if not _legacy_payload(payload):
        try:
            value, field_ttls = rdbvalue.load_with_field_ttls(payload, clock_ms)
        except rdbvalue.RdbError:
            raise _BadData() from None
        return WithFieldTTLs(value, field_ttls) if field_ttls else value
    end = len(payload) - _FOOTER.size
    tag = payload[0]
    if tag == _TAG_STRING:
        return payload[1:end]
    buf = memoryview(payload)
    try:
        (count,) = _U32.unpack_from(payload, 1)
        if count == 0:
            raise _BadData()  # Valkey never stores an empty collection
        pos = 5
        if tag in (_TAG_LIST, _TAG_SET):
            if pos + 4 * count > end:
                raise _BadData()
            lengths = struct.unpack_from("<%dI" % count, payload, pos)
            items = _split(buf, pos + 4 * count, end, count, lengths)
            if tag == _TAG_LIST:
                return deque(items)
            value = set(items)
            if len(value) != count:
                raise _BadData()
            return value
        if tag == _TAG_HASH:
            if pos + 8 * count > end:
                raise _BadData()
            lengths = struct.unpack_from("<%dI" % (2 * count), payload, pos)
            flat = _split(buf, pos + 8 * count, end, 2 * count, lengths)
            value = dict(zip(flat[0::2], flat[1::2]))
            if len(value) != count:
                raise _BadData()
            return value
        if tag == _TAG_ZSET:
            if pos + 12 * count > end:
                raise _BadData()
            lengths = struct.unpack_from("<%dI" % count, payload, pos)
            scores = struct.unpack_from("<%dd" % count, payload, pos + 4 * count)
            members = _split(buf, pos + 12 * count, end, count, lengths)
            mapping = dict(zip(members, scores))
            if len(mapping) != count or any(s != s for s in scores):
                raise _BadData()
            return ZSet.from_scores(mapping)
        if tag == _TAG_STREAM:
            if pos + 4 * count > end:
                raise _BadData()
            argcs = struct.unpack_from("<%dI" % count, payload, pos)
            pos += 4 * count
            nargs = sum(argcs)
            if pos + 4 * nargs > end:
                raise _BadData()
            lengths = struct.unpack_from("<%dI" % nargs, payload, pos)
            flat = _split(buf, pos + 4 * nargs, end, nargs, lengths)
            commands = []
            i = 0
            for argc in argcs:
                commands.append(flat[i:i + argc])
                i += argc
            return _rebuild_stream(commands, clock_ms)
    except struct.error:
        raise _BadData() from None
    raise _BadData()


def _rebuild_stream(commands, clock_ms):
    """Runs a stream payload's commands on a scratch keyspace; the stream they build, or _BadData."""
    scratch = Keyspace(num_dbs=1, clock_ms=clock_ms)
    scratch.expire_enabled = False
    from .pipeline import Pipeline  # the command table is complete by the time RESTORE runs
    pipeline = Pipeline(scratch)
    pipeline.stats_enabled = False
    session = Session()
    for argv in commands:
        pos = _STREAM_REBUILD.get(argv[0].lower()) if argv else None
        if pos is None or len(argv) <= pos or argv[pos] != _STREAM_KEY:
            raise _BadData()
        reply = pipeline.apply(session, 0, argv)
        if type(reply) is ErrorReply:
            raise _BadData()
    value = scratch.dbs[0].data.get(_STREAM_KEY)
    if type(value) is not Stream:
        raise _BadData()
    return value


# Off the loop (pipeline.off_loop, measured 2026-12-02 on this 2-core machine): the RDB encoding of a 1M-field
# hash takes 1.05 s, a 1M-element list 0.86 s, a 100 MB string 0.46 s (the copy and its CRC-64); decoding
# the hash's 25 MB payload 1.94 s (its CRC-64 0.03 s). A value of at least DUMP_OFF_LOOP_ELEMENTS elements or
# DUMP_OFF_LOOP_BYTES bytes (about 10 ms of encoding) is encoded on a worker thread while writes to its key
# wait, and a RESTORE payload of at least RESTORE_OFF_LOOP_BYTES (about 80 ms of decoding) is decoded on one
# before the command runs (its declared prepare_off_loop), so the loop keeps answering other clients meanwhile.
DUMP_OFF_LOOP_ELEMENTS = 10000
DUMP_OFF_LOOP_BYTES = 2 << 20
RESTORE_OFF_LOOP_BYTES = 1 << 20


def dump_off_loop(value) -> bool:
    """Whether encoding this value is long enough to be done off the loop."""
    t = type(value)
    if t is bytes:
        return len(value) >= DUMP_OFF_LOOP_BYTES
    if type(value) is JsonDoc:
        return value.size >= DUMP_OFF_LOOP_BYTES      # its bytes, written as one string
    if type(value) is Bloom:
        return value.memory_usage() >= DUMP_OFF_LOOP_BYTES   # its bitmaps, copied and checksummed
    return len(value) >= DUMP_OFF_LOOP_ELEMENTS


def _result(ctx, result):
    """What a worker returned, or the exception it raised, raised again in the handler's place."""
    if isinstance(result, Exception):
        raise result
    return result


@command("dump")
def dump(ctx, args):
    value = ctx.lookup(args[1])
    if value is None:
        return None
    key = args[1]
    field_ttls = ctx.db.hexpires.get(key) if ctx.db.hexpires else None
    if field_ttls is not None:
        field_ttls = dict(field_ttls)
    if dump_off_loop(value):
        # the key stays locked (its value unchanged) while a worker encodes it; the reply is a Deferred

        def dumped(fctx, result):
            if isinstance(result, RuntimeError):
                # the value changed while the worker iterated it ("changed size during iteration"): only a
                # path past admission could do that (the lock holds every client's write back); encoded here
                # as it is now
                now = fctx.lookup(key)
                return dump_payload(now, fctx.db.hexpires.get(key)) if now is not None else None
            return _result(fctx, result)
        deferred = ctx.pipeline.off_loop(ctx, args, (key,), lambda: dump_payload(value, field_ttls), dumped)
        if deferred is not None:
            return deferred
    return dump_payload(value, field_ttls)


def decode_payload(payload, clock_ms):
    """RESTORE's check and decoding of a payload: the value, or the CommandError RESTORE answers for it
    (returned, not raised: a worker decodes it ahead of the command, which raises it in its turn)."""
    if not verify_payload(payload):
        return CommandError(messages.DUMP_PAYLOAD_INVALID)
    try:
        return load_payload(payload, clock_ms)
    except _BadData:
        return CommandError(messages.DUMP_BAD_DATA)


@command("restore", prepare_off_loop=(3, RESTORE_OFF_LOOP_BYTES, decode_payload))
def restore(ctx, args):
    replace = absttl = False
    idletime = freq = None
    c = ArgCursor(args, 4)
    while c:
        opt = c.next_lower()
        more = c.left()
        if opt == b"replace":
            replace = True
        elif opt == b"absttl":
            absttl = True
        elif opt == b"idletime" and more >= 1 and freq is None:
            idletime = c.int()
            if idletime < 0:
                raise CommandError(messages.RESTORE_BAD_IDLETIME)
        elif opt == b"freq" and more >= 1 and idletime is None:
            freq = c.int()
            if not 0 <= freq <= 255:
                raise CommandError(messages.RESTORE_BAD_FREQ)
        else:
            raise syntax_error()
    key = args[1]
    if not replace and ctx.lookup(key) is not None:
        raise CommandError(messages.BUSYKEY)
    ttl = parse_int(args[2])
    if ttl < 0:
        raise CommandError(messages.RESTORE_BAD_TTL)
    payload = args[3]
    decoded = ctx.client.decoded if ctx.client is not None else None
    if decoded is not None and decoded[0] is payload:
        value = decoded[1]          # decoded by a worker before the command ran (server/connection.py)
        ctx.client.decoded = None
    else:
        value = decode_payload(payload, ctx.keyspace.clock_ms)
    # A payload past its version and CRC check is decoded whole: the deep check Valkey's sanitize-dump-payload
    # yes gives it, counted as Valkey counts it
    if not (isinstance(value, CommandError) and value.text == messages.DUMP_PAYLOAD_INVALID):
        ctx.keyspace.dump_payload_sanitizations += 1
    if isinstance(value, Exception):
        raise value
    field_ttls = None
    if type(value) is WithFieldTTLs:
        value, field_ttls = value.value, value.field_ttls
    if type(value) is Bloom and not ctx.replaying \
            and value.memory_usage() > ctx.keyspace.bloom_defaults.memory_limit:
        # valkey-bloom's rdb_load refuses an object past bf.bloom-memory-usage-limit (a primary's check: a replay
        # takes what its primary accepted)
        raise CommandError(messages.DUMP_BAD_DATA)

    deleted = ctx.delete(key) if replace else False
    now = ctx.now_ms()
    if ttl and not absttl:
        ttl += now
    if ttl and ctx.keyspace.expire_enabled and (ttl <= now or ttl > INT64_MAX):
        # Already expired (or past the clock's range, which wraps negative in Valkey): nothing is created.
        if deleted:
            ctx.propagate(b"UNLINK" if ctx.keyspace.unlink_server_del else b"DEL", key)   # lazyfree-lazy-server-del
            ctx.notify(GENERIC, b"del", key)
        return OK
    ctx.store(key, value)   # dbAdd: "new", the one it replaced deleted first
    if field_ttls:
        ctx.db.field_ttls_into(key, field_ttls)
        ctx.db.enc[key] = encoding.HASHTABLE   # RDB_TYPE_HASH_2 loads as a hashtable
    if ttl:
        ctx.set_expire(key, ttl)
        if not absttl:
            argv = list(args)
            argv[2] = b"%d" % ttl
            argv.append(b"ABSTTL")
            ctx.propagate_args(argv)
            _set_lru_lfu(ctx, key, idletime, freq)
            ctx.notify(GENERIC, b"restore", key)
            return OK
    ctx.propagate_args(args)
    _set_lru_lfu(ctx, key, idletime, freq)
    ctx.notify(GENERIC, b"restore", key)
    return OK


@command("restore-asking", prepare_off_loop=(3, RESTORE_OFF_LOOP_BYTES, decode_payload))
def restore_asking(ctx, args):
    """RESTORE as MIGRATE sends it in cluster mode: flagged "asking", so a slot being imported accepts it."""
    return restore(ctx, args)


_NOKEY = Raw(b"+NOKEY\r\n")


@command("migrate")
def migrate(ctx, args):
    """MIGRATE host port key|"" db timeout [COPY] [REPLACE] [AUTH pw | AUTH2 user pw] [KEYS key ...]
    (Valkey's migrateCommand): the keys present are sent as RESTORE commands with their DUMP payload and
    remaining TTL; those the target acknowledged are deleted here (unless COPY), propagated as one DEL.

    Valkey blocks the whole server for the exchange (up to the timeout per step), which makes it atomic.
    durakv locks the keys instead (pipeline.off_loop: any write to them, or to keys unknown, waits and runs
    afterwards; reads go on), encodes the values and talks to the target on a worker thread, and deletes the
    acknowledged keys back on the loop, the reply leaving once that DEL commits. Inside MULTI/EXEC or a script
    (both allowed in Valkey 8: MIGRATE is not flagged noscript) the command cannot wait: there it encodes and
    exchanges on the loop thread, blocking it as Valkey does."""
    copy = replace = False
    auth = None
    first_key, num_keys = 3, 1
    c = ArgCursor(args, 6)
    while c:
        opt = c.next_lower()
        if opt == b"copy":
            copy = True
        elif opt == b"replace":
            replace = True
        elif opt == b"auth":
            auth = (c.next(),)          # a missing password: "ERR syntax error"
        elif opt == b"auth2":
            auth = tuple(c.take(2))     # a missing user or password: the same
        elif opt == b"keys":
            if args[3]:
                raise CommandError(messages.MIGRATE_KEYS_NEED_EMPTY_KEY)
            first_key, num_keys = c.pos, c.left()
            break
        else:
            raise syntax_error()
    timeout_ms = parse_int(args[5])
    dbid = parse_int(args[4])
    if timeout_ms <= 0:
        timeout_ms = 1000
    port = atoi(args[2])
    now = ctx.now_ms()
    entries = []                        # (key, ttl_ms, value, field TTLs) of the keys present
    for key in dict.fromkeys(args[first_key:first_key + num_keys]):
        value = ctx.lookup(key)
        if value is None:
            continue
        expire_at_ms = ctx.ttl_ms(key)
        ttl_ms = 0
        if expire_at_ms is not None:
            ttl_ms = max(expire_at_ms - now, 1)
        field_ttls = ctx.db.hexpires.get(key)
        entries.append((key, ttl_ms, value, dict(field_ttls) if field_ttls else None))
    if not entries:
        return _NOKEY
    name = b"RESTORE-ASKING" if ctx.services.cluster.routing() is not None else b"RESTORE"
    host = args[1].decode("utf-8", "surrogateescape")
    exchange = ctx.services.cluster.migrate_exchange
    keys = [e[0] for e in entries]

    def work():
        # the values are those of the keys now: the keys stay locked until finish
        commands = []
        for key, ttl_ms, value, field_ttls in entries:
            cmd = [name, key, b"%d" % ttl_ms, dump_payload(value, field_ttls)]
            if replace:
                cmd.append(b"REPLACE")
            commands.append(cmd)
        return exchange(host, port, timeout_ms, dbid, auth, commands)

    def finish(fctx, result):
        return _migrate_finish(fctx, keys, copy, _result(fctx, result))

    deferred = ctx.pipeline.off_loop(ctx, args, keys, work, finish)
    if deferred is not None:
        return deferred
    return _migrate_finish(ctx, keys, copy, work())


def _migrate_finish(ctx, keys, copy, exchanged):
    """The keys the target acknowledged are deleted (unless COPY), as one DEL; the reply."""
    first_error, replies, socket_error = exchanged
    error = first_error
    deleted = []
    for key, line in zip(keys, replies):
        if first_error is not None or line[:1] == b"-":
            if error is None:
                error = line
        elif not copy and ctx.delete(key):   # (one that expired meanwhile is gone already)
            deleted.append(key)
            ctx.notify(GENERIC, b"del", key)
    if deleted:
        ctx.propagate(b"DEL", *deleted)
    if error is not None:
        return ErrorReply(messages.MIGRATE_TARGET_ERROR.format(error[1:].decode("utf-8", "replace")))
    if socket_error:
        return ErrorReply(messages.MIGRATE_IOERR_READING)
    return OK


def _set_lru_lfu(ctx, key, idletime, freq):
    """objectSetLRUOrLFU: FREQ under an LFU policy, IDLETIME under any other; otherwise ignored."""
    ks = ctx.keyspace
    if ks.track_access == "lfu" and freq is not None:
        minutes = (ks.clock_ms() // 60000) & 0xFFFF
        ctx.db.data.set_access(key, (minutes << 8) | freq)
    elif ks.track_access == "lru" and idletime is not None:
        # on the LRU clock idle times are read against (objectSetLRUOrLFU: LRU_CLOCK() - idle): the exact
        # time runs up to a cron tick ahead of it and would make IDLETIME 1000 read 999
        ctx.db.data.set_access(key, max(0, ks.lru_now_s() - idletime))


# -- WAIT / WAITAOF -----------------------------------------------------------------------------------

def _is_replica(ctx) -> bool:
    return ctx.services.replication.status()["role"] == "replica"


def _acked_replicas(ctx, index) -> int:
    """Replicas known to have applied the journal up to the client's write `index` (the offsets they last
    reported are journal positions: the write's own position, known once it is committed, is compared)."""
    if index <= 0:
        return len(ctx.services.replication.status()["replicas"])
    position = ctx.services.replication.replication_index(index)
    if not position:
        return 0
    return sum(1 for _host, _port, offset in ctx.services.replication.status()["replicas"] if offset >= position)


@command("wait")
def wait(ctx, args):
    if _is_replica(ctx):
        raise CommandError(messages.WAIT_REPLICA)
    numreplicas = parse_int(args[1])
    timeout_ms = parse_timeout_ms(ctx, args[2])
    index = ctx.client.last_write_index
    acked = _acked_replicas(ctx, index)
    if acked >= numreplicas or not ctx.may_block:
        return acked
    return ctx.services.replication.wait_replicas(index, numreplicas, timeout_ms, lambda: _acked_replicas(ctx, index))


@command("waitaof")
def waitaof(ctx, args):
    numlocal = parse_int(args[1])
    if not 0 <= numlocal <= 1:
        raise CommandError(messages.VALUE_MUST_BETWEEN.format(0, 1))
    numreplicas = parse_int(args[2])
    if numreplicas < 0:
        raise CommandError(messages.VALUE_OUT_OF_RANGE_POSITIVE)
    timeout_ms = parse_timeout_ms(ctx, args[3])
    if _is_replica(ctx):
        raise CommandError(messages.WAITAOF_REPLICA)
    services = ctx.services
    journaled = services.persistence.journaled()
    if numlocal and not journaled:
        raise CommandError(messages.WAITAOF_NO_AOF)
    index = ctx.client.last_write_index

    def reply():
        # Valkey's fsynced_reploff is -1 without an AOF: then nothing is acknowledged locally.
        local = 1 if journaled and services.persistence.committed_index() >= index else 0
        return [local, _acked_replicas(ctx, index)]

    now = reply()
    if (now[0] >= numlocal and now[1] >= numreplicas) or not ctx.may_block:
        return now
    if numreplicas <= now[1]:
        # Only the local commit is missing: answered as soon as the journal commits the client's write.
        return services.persistence.wait_local_commit(index, timeout_ms, reply)
    return services.replication.wait_replicas(index, numreplicas, timeout_ms, reply)

