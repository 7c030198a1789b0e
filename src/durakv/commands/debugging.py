"""DEBUG: the subcommands that make sense for durakv.

DIGEST and DIGEST-VALUE are computed exactly as Valkey's debug.c does (xorDigest / mixDigest over SHA1 of
each key, value and expire), so durakv and a Valkey server holding the same data give the same digest: a
replica-consistency check can compare them. OBJECT describes the value as Valkey would (its encoding from
keyspace/encoding.py); its address and serializedlength are durakv's own (the Python object, the length
of durakv's DUMP serialization). QUICKLIST-PACKED-THRESHOLD, DICT-RESIZING and LOG exist for Valkey's test
suite and are harmless, as are DICT-RESIZING and REPLYBUFFER (accepted, no effect). RELOAD loads what a restart
would load (snapshot + journal; in `none` the snapshot written from memory first) in place of the dataset: a
real durability check. What pokes at Valkey internals durakv does not have (HTSTATS, LISTPACK, MALLCTL,
SEGFAULT, ...) answers the unknown-subcommand error.
"""

import hashlib
import logging
import struct
import time
from collections import deque

from .. import messages
from ..config import parse_memory
from ..errors import CommandError
from ..keyspace import ZSet, encoding
from ..keyspace.bloom import Bloom
from ..keyspace.db import estimate_key
from ..keyspace.jsondoc import JFloat, JsonDoc
from ..keyspace.stream import MASK64, Stream
from ..protocol.numbers import string2ll
from ..protocol.resp import OK, Raw, fpconv_dtoa
from .base import atoi, parse_int
from .generic import dump_payload
from .registry import READS_ALL, command

log = logging.getLogger("durakv.debug")

# OBJ_STRING, OBJ_LIST, OBJ_SET, OBJ_ZSET, OBJ_HASH, OBJ_STREAM (server.h)
_TYPE_CODES = {bytes: 0, deque: 1, set: 2, ZSet: 3, dict: 4, JsonDoc: 5, Bloom: 5, Stream: 6}   # 5: OBJ_MODULE
_ZERO = bytes(20)


# -- DIGEST -----------------------------------------------------------------------------------------

def _sha1(data) -> bytes:
    return hashlib.sha1(data).digest()


def _xor(a: bytes, b: bytes) -> bytes:
    return (int.from_bytes(a, "big") ^ int.from_bytes(b, "big")).to_bytes(20, "big")


def xor_digest(digest: bytes, data) -> bytes:
    """xorDigest: digest ^= SHA1(data)."""
    return _xor(digest, _sha1(data))


def mix_digest(digest: bytes, data) -> bytes:
    """mixDigest: digest = SHA1(digest ^ SHA1(data)), which keeps the order of what is mixed."""
    return _sha1(_xor(digest, _sha1(data)))


def object_digest(digest: bytes, value, has_expire: bool) -> bytes:
    """xorObjectDigest: mixes the type, the value and the expire flag of one key into digest."""
    t = type(value)
    digest = mix_digest(digest, struct.pack(">I", _TYPE_CODES[t]))
    if t is bytes:
        digest = mix_digest(digest, value)
    elif t is deque:
        for item in value:
            digest = mix_digest(digest, item)
    elif t is set:
        acc = int.from_bytes(digest, "big")
        for m in value:
            acc ^= int.from_bytes(_sha1(m), "big")
        digest = acc.to_bytes(20, "big")
    elif t is ZSet:
        acc = int.from_bytes(digest, "big")
        for member, score in value.scores.items():
            ele = mix_digest(mix_digest(_ZERO, member), fpconv_dtoa(score))
            acc ^= int.from_bytes(_sha1(ele), "big")  # xorDigest(digest, eledigest): the SHA1 of it
        digest = acc.to_bytes(20, "big")
    elif t is dict:
        acc = int.from_bytes(digest, "big")
        for field, v in value.items():
            ele = mix_digest(mix_digest(_ZERO, field), v)
            acc ^= int.from_bytes(_sha1(ele), "big")
        digest = acc.to_bytes(20, "big")
    elif t is Bloom:
        digest = xor_digest(digest, bloom_digest(value))
    elif t is Stream:
        entries = value.entries
        for i in value.ids:
            digest = mix_digest(digest, b"%d.%d" % (i >> 64, i & MASK64))
            for x in entries[i]:
                digest = mix_digest(digest, x)
    elif t is JsonDoc:
        digest = xor_digest(digest, _json_digest(value.root))
    if has_expire:
        digest = xor_digest(digest, b"!!expire!!")
    return digest


class _ModuleDigest:
    """ValkeyModuleDigest: `o` mixes the current sequence, EndSequence folds it into `x` (module.c)."""
    __slots__ = ("o", "x")

    def __init__(self):
        self.o = self.x = _ZERO

    def add(self, data: bytes):
        self.o = mix_digest(self.o, data)

    def end(self):
        self.x = _xor(self.x, _sha1(self.o))
        self.o = _ZERO


def _json_digest(root) -> bytes:
    """valkey-json's DocumentType_Digest (dom.cc compute_digest) through the module digest calls."""
    md = _ModuleDigest()
    stack = [root]
    while stack:
        v = stack.pop()
        if type(v) is tuple:                 # (member name, value): the name joins the value's sequence
            md.add(v[0])
            stack.append(v[1])
            continue
        t = type(v)
        if v is None:
            md.add(b"-1")
            md.end()
        elif t is bool:
            md.add(b"1" if v else b"0")
            md.end()
        elif t is list:
            md.add(b"%d" % len(v))
            md.end()
            stack.extend(reversed(v))
        elif t is dict:
            md.add(b"%d" % len(v))
            md.end()
            stack.extend(reversed([(k.encode("utf-8", "surrogateescape"), x) for k, x in v.items()]))
        elif t is int:
            md.add(b"%d" % v)
            md.end()
        elif t is float or t is JFloat:
            d = v.value if t is JFloat else v
            md.add(b"%d" % struct.unpack("<q", struct.pack("<d", d))[0])
            md.end()
        else:
            md.add(v.encode("utf-8", "surrogateescape"))
            md.end()
    return md.x


def bloom_digest(bloom) -> bytes:
    """valkey-bloom's debug_digest through the module digest calls: one sequence of its values (a number as its
    decimal text), then each filter's bytes, items and capacity."""
    md = _ModuleDigest()
    md.add(b"%d" % bloom.expansion)
    md.add(struct.pack("<d", bloom.fp_rate))
    md.add(struct.pack("<d", bloom.tightening_ratio))
    md.add(b"%d" % (1 if bloom.is_seed_random else 0))
    for f in bloom.filters:
        md.add(bytes(f.data))
        md.add(b"%d" % f.num_items)
        md.add(b"%d" % f.capacity)
    md.end()
    return md.x


def key_digest(db, key, value) -> bytes:
    return object_digest(mix_digest(_ZERO, key), value, key in db.expires)


def dataset_digest(keyspace) -> bytes:
    """computeDatasetDigest: per db (its id mixed in first), the xor of every key-value digest."""
    final = _ZERO
    for db in keyspace.dbs:
        if not db.data:
            continue
        final = mix_digest(final, struct.pack(">I", db.id))
        acc = int.from_bytes(final, "big")
        for key, value in db.data.items():
            acc ^= int.from_bytes(_sha1(key_digest(db, key, value)), "big")
        final = acc.to_bytes(20, "big")
    return final


# -- DEBUG ------------------------------------------------------------------------------------------

def _debug_object(ctx, args):
    fast = len(args) == 4 and args[3].lower() == b"fast"
    db = ctx.db
    value = db.data.get(args[2])  # dbFind: no expiry check, as Valkey's DEBUG OBJECT
    if value is None:
        raise CommandError(messages.NO_SUCH_KEY)
    key = args[2]
    ks = ctx.keyspace
    rules = ks.encoding_rules
    enc = encoding.encoding_of(rules, db, key, value)
    refcount = 1
    if type(value) is bytes and enc == encoding.INT:
        n = string2ll(value)
        if 0 <= n < 10000 and ctx.shared_integers_allowed():
            refcount = 2147483647  # a shared integer
    parts = ["Value at:0x%x refcount:%d encoding:%s" % (id(value), refcount, enc.decode())]
    if not fast:
        parts.append(" serializedlength:%d" % (len(dump_payload(value)) - 11))   # no type byte, no footer
    access = db.data.get_access(key) or 0
    if ks.track_access == "lfu":
        lru = access & 0xFFFFFF
        idle = 0
        freq, minutes = access & 0xFF, access >> 8
    else:
        lru = access & 0xFFFFFF
        idle = ks.idle_ms(db, key) // 1000
        freq, minutes = 0, lru >> 8
    parts.append(" lru:%d lru_seconds_idle:%d" % (lru, idle))
    parts.append(" lfu_freq:%d lfu_access_time_minutes:%d" % (freq, minutes))
    if enc == encoding.QUICKLIST:
        size_limit, count_limit = rules.list_limits()
        n = len(value)
        total = encoding.listpack_bytes(value)
        per_node = count_limit or max(1, n * size_limit // max(total, 1))
        nodes = max(1, -(-n // per_node))
        compressed = 1 if rules.list_compress_depth else 0
        parts.append(" ql_nodes:%d ql_avg_node:%.2f ql_listpack_max:%d ql_compressed:%d"
                     % (nodes, n / nodes, rules.list_fill, compressed))
        if not fast:
            parts.append(" ql_uncompressed_size:%d" % total)
    return "".join(parts)  # a status reply, as Valkey's


def _populate(ctx, args):
    count = parse_int(args[2], messages.VALUE_OUT_OF_RANGE_POSITIVE)
    if count < 0:
        raise CommandError(messages.VALUE_OUT_OF_RANGE_POSITIVE)
    prefix = args[3] if len(args) >= 4 else b"key"
    size = 0
    if len(args) == 5:
        size = parse_int(args[4], messages.VALUE_OUT_OF_RANGE_POSITIVE)
        if size < 0:
            raise CommandError(messages.VALUE_OUT_OF_RANGE_POSITIVE)
    ks = ctx.keyspace
    db = ctx.db
    # Every key and value the journal's SETs need is made before the first store: the key table copies a string
    # into its entry, and entries made in between would share the allocator's pools with these objects, which
    # stay resident, half empty, once the command's effects are freed (docs/memory.md: a million keys of 100 B
    # kept about 260 B per key that way). Made first, they fill pools of their own, given back whole.
    created = []
    for j in range(count):
        key = b"%s:%d" % (prefix, j)
        if ks.lookup(db, key) is not None:
            continue
        value = b"value:%d" % j
        if size:
            value = value[:size] + bytes(max(0, size - len(value)))
        created.append((key, value))
    # Valkey does not propagate these; durakv journals them so that what a client sees survives a restart.
    for key, value in created:
        ctx.propagate(b"SET", key, value)
    for key, value in created:
        ctx.store(key, value)
        ks.used_bytes += estimate_key(key, value)  # DEBUG names no keys: the dispatcher cannot measure them
    return OK


def _protocol(ctx, args):
    name = args[2].lower()
    resp3 = ctx.resp3
    if name == b"string":
        return b"Hello World"
    if name == b"integer":
        return 12345
    if name == b"double":
        return 3.141
    if name == b"bignum":
        big = b"1234567999999999999999999999999999999"
        return Raw(b"(%s\r\n" % big) if resp3 else big
    if name == b"null":
        return None
    if name == b"array":
        return [0, 1, 2]
    if name == b"set":
        return Raw(b"~3\r\n:0\r\n:1\r\n:2\r\n") if resp3 else [0, 1, 2]
    if name == b"map":
        return {0: False, 1: True, 2: False}
    if name == b"attrib":
        tail = b"$39\r\nSome real reply following the attribute\r\n"
        if resp3:
            return Raw(b"|1\r\n$14\r\nkey-popularity\r\n*2\r\n$7\r\nkey:123\r\n:90\r\n" + tail)
        return Raw(tail)
    if name == b"push":
        if not resp3:
            raise CommandError(messages.DEBUG_PROTOCOL_RESP2)
        return Raw(b">2\r\n$16\r\nserver-cpu-usage\r\n:42\r\n$40\r\nSome real reply following the push reply\r\n")
    if name == b"true":
        return True
    if name == b"false":
        return False
    if name == b"verbatim":
        text = b"This is a verbatim\nstring"
        return Raw(b"=%d\r\ntxt:%s\r\n" % (len(text) + 4, text)) if resp3 else text
    raise CommandError(messages.DEBUG_PROTOCOL_TYPE)


LRU_CLOCK_MAX_S = (1 << 24) - 1     # Valkey's LRU_CLOCK_MAX: the LRU clock's 24 bits of seconds

_HELP = [
    "DEBUG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DICT-RESIZING <0|1>",
    "    Accepted for compatibility (durakv's hash tables resize on their own).",
    "REPLYBUFFER PEAK-RESET-TIME <NEVER||RESET|time> | RESIZING <0|1>",
    "    Accepted for compatibility (durakv has no reply buffers to resize).",
    "DIGEST",
    "    Output a hex signature representing the current DB content.",
    "DIGEST-VALUE <key> [<key> ...]",
    "    Output a hex signature of the values of all the specified keys.",
    "JOURNAL-STALL <ms>",
    "    Delay every journal fsync by <ms> (durakv fault injection).",
    "JOURNAL-FOLLOW-STALL <ms>",
    "    A replica holds the journal entries it receives for <ms> (durakv fault injection).",
    "LRU-CLOCK-ADVANCE <seconds>",
    "    Move the LRU clock (OBJECT IDLETIME, LRU eviction) <seconds> ahead of the real one (durakv: tests of",
    "    idle times advance it instead of sleeping).",
    "LOG <message>",
    "    Write <message> to the server log.",
    "OBJECT <key> [fast]",
    "    Show low level info about `key` and associated value.",
    "POPULATE <count> [<prefix>] [<size>]",
    "    Create <count> string keys named key:<num>. If <prefix> is specified then",
    "    it is used instead of the 'key' prefix.",
    "PROTOCOL <type>",
    "    Reply with a test value of the specified type. <type> can be: string,",
    "    integer, double, bignum, null, array, set, map, attrib, push, verbatim,",
    "    true, false.",
    "QUICKLIST-PACKED-THRESHOLD <size>",
    "    Sets the threshold for elements to be inserted as plain vs packed nodes",
    "    Default value is 1GB, allows values up to 4GB. Setting to 0 restores to default.",
    "SET-ACTIVE-EXPIRE <0|1>",
    "    Setting it to 0 disables expiring keys in background when they are not",
    "    accessed (otherwise the behavior). Setting it to 1 reenables back the",
    "    default.",
    "SLEEP <seconds>",
    "    Stop the server for <seconds>. Decimals allowed.",
    "HELP",
    "    Print this help.",
]


def _hex(digest: bytes) -> str:
    return digest.hex()


# DEBUG's subcommands that describe data (durakv implements OBJECT, DIGEST and DIGEST-VALUE; Valkey's other
# readers are listed so that one implemented later is covered from the start)
_DEBUG_KEY_READS = {b"OBJECT", b"DIGEST-VALUE", b"LISTPACK", b"SDSLEN", b"HTSTATS-KEY"}
_DEBUG_ALL_READS = {b"DIGEST", b"HTSTATS"}


def _debug_reads(args):
    """What a DEBUG subcommand reads (Command.reads_data): its reply waits for those writes' commit."""
    if len(args) < 2:
        return None
    sub = args[1].upper()
    if sub in _DEBUG_ALL_READS:
        return READS_ALL
    if sub in _DEBUG_KEY_READS:
        return list(args[2:]) if sub == b"DIGEST-VALUE" else args[2:3]
    return None


@command("debug", reads_data=_debug_reads)
def debug(ctx, args):
    sub = args[1].upper()
    n = len(args)
    services = ctx.services
    if sub == b"HELP" and n == 2:
        return _HELP
    if sub == b"DIGEST" and n == 2:
        return _hex(dataset_digest(ctx.keyspace))
    if sub == b"DIGEST-VALUE":
        db = ctx.db
        out = []
        for key in args[2:]:
            value = db.data.get(key)  # dbFind: logically expired keys count too
            out.append(_hex(object_digest(_ZERO, value, key in db.expires) if value is not None else _ZERO))
        return out
    if sub == b"OBJECT" and n in (3, 4):
        return _debug_object(ctx, args)
    if sub == b"SLEEP" and n == 3:
        # Like Valkey: blocks the whole server, which is what tests of timeouts want.
        try:
            seconds = float(args[2])
        except ValueError:
            seconds = 0.0  # strtod: no number is 0
        time.sleep(max(0.0, seconds))
        return OK
    if sub == b"SET-ACTIVE-EXPIRE" and n == 3:
        services.faults.set_active_expire(args[2] != b"0")
        return OK
    if sub == b"JOURNAL-STALL" and n == 3:
        # durakv's fault hook: delay every journal fsync by N ms (0 to stop), to test async backpressure.
        if not services.faults.journal_stall(parse_int(args[2])):
            raise CommandError(messages.DEBUG_NO_JOURNAL)
        return OK
    if sub == b"JOURNAL-FOLLOW-STALL" and n == 3:
        # durakv's fault hook: a replica holds the journal entries it receives for N ms, then applies them.
        if not services.faults.journal_follow_stall(parse_int(args[2])):
            raise CommandError(messages.DEBUG_NOT_SHARD_REPLICA)
        return OK
    if sub in (b"RELOAD", b"LOADAOF", b"POPULATE") and ctx.pipeline.loading:
        # DEBUG may run while loading (Valkey's `loading` flag), but these change or reload the dataset: a key
        # written before the journal is open would be acknowledged and lost, a reload would race the load
        raise CommandError(messages.BUSY_LOADING)
    if sub == b"RELOAD":
        opts = {a.upper() for a in args[2:]}
        if opts - {b"NOSAVE", b"NOFLUSH", b"MERGE"}:
            raise CommandError(messages.DEBUG_RELOAD_OPTIONS)
        return services.persistence.debug_reload(save=b"NOSAVE" not in opts, flush=b"NOFLUSH" not in opts,
                                             merge=b"MERGE" in opts)
    if sub == b"SET-DISABLE-DENY-SCRIPTS" and n == 3:
        # scripts may call commands flagged noscript (Valkey's test hook; `atoi`: anything not a number is 0)
        ctx.pipeline.script_disable_deny = atoi(args[2]) != 0
        return OK
    if sub == b"PAUSE-CRON" and n == 3:
        services.faults.pause_cron(parse_int(args[2]) != 0)
        return OK
    if sub == b"LOADAOF" and n == 2:
        # Valkey reloads its AOF; durakv's log is its journal: what a restart would load, loaded in place
        # (as RELOAD; in `none` memory is written to a snapshot first, so nothing is lost).
        return services.persistence.debug_reload(save=True)
    if sub == b"LOG" and n == 3:
        log.warning("DEBUG LOG: %s", args[2].decode("utf-8", "replace"))
        return OK
    if sub == b"POPULATE" and 3 <= n <= 5:
        return _populate(ctx, args)
    if sub == b"PROTOCOL" and n == 3:
        return _protocol(ctx, args)
    if sub == b"QUICKLIST-PACKED-THRESHOLD" and n == 3:
        try:
            size = parse_memory(args[2].decode("utf-8", "replace"))
        except ValueError:
            size = -1
        if not 0 <= size < 1 << 32:
            raise CommandError(messages.DEBUG_MEMORY_VALUE)
        ctx.keyspace.encoding_rules.list_packed_threshold = size
        return OK
    if sub == b"LRU-CLOCK-ADVANCE" and n == 3:
        # durakv's test hook: every access time is stamped from, and every idle time read against, the cron's
        # LRU clock (Keyspace.lru_tick), so moving that clock ages every key at once, as waiting would
        seconds = parse_int(args[2])
        if not 0 <= seconds <= LRU_CLOCK_MAX_S:
            raise CommandError(messages.DEBUG_LRU_CLOCK_SECONDS)
        ctx.keyspace.advance_lru_clock(seconds)
        return OK
    if sub == b"DICT-RESIZING" and n == 3:
        return OK
    if sub == b"REPLYBUFFER" and n == 4 and args[2].lower() in (b"peak-reset-time", b"resizing"):
        return OK  # durakv has no per-client reply buffers to resize: accepted, no effect
    raise CommandError(messages.DEBUG_UNKNOWN_SUBCOMMAND
                       % args[1].decode("utf-8", "replace"))
