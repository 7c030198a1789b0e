"""Bloom filter commands, as valkey-bloom 1.0.1 answers them (src/bloom/command_handler.rs): BF.ADD BF.MADD
BF.EXISTS BF.MEXISTS BF.CARD BF.RESERVE BF.INFO BF.INSERT BF.LOAD. The value type is keyspace/bloom.py.

Arguments are checked by the handlers, with the module's texts: Valkey gives a module command arity -1, and the
module parses its numbers with Rust's `str::parse` (so "+100" and "007" are capacities, "1e-3" an error rate,
" 5" and "1_0" nothing), which is why its integers are not read with string2ll.

Effects are deterministic, whatever the primary's configs and random seeds:
  - a filter's creation (BF.ADD, BF.MADD or BF.INSERT on a missing key, BF.RESERVE) is journaled as the module
    replicates it: `BF.INSERT key CAPACITY c ERROR e TIGHTENING t SEED <its 32 bytes> (NONSCALING | EXPANSION
    x) [ITEMS item ...]`, so a replica and a recovery build the same bits from the same seed;
  - items added to an existing filter under the command's own name, as the module replicates them:
    `BF.ADD key item`, `BF.MADD key item ...`, `BF.INSERT key ITEMS item ...` (a BF.INSERT's options apply to a
    creation only).
Only the items that were added (answered 1) are journaled: an item answered 0 changed nothing, and one refused
(a full NONSCALING filter, the memory limit) ends the list, so replaying never meets an error and never adds what
the primary refused. (The module replicates BF.MADD verbatim; a replica whose memory check is skipped would add
the items its primary refused.) Replay skips bf.bloom-memory-usage-limit, as the module does for replicated
commands: a replica takes what its primary accepted. BF.LOAD journals itself (its payload is the whole filter).

Keyspace events are the module's: "bloom.add" when an item was added, "bloom.reserve" when a filter was created,
in that order, in class g (the module notifies with VALKEYMODULE_NOTIFY_GENERIC).
"""

import os
import re

from .. import messages
from ..errors import CommandError, WrongType
from ..keyspace.bloom import (CAPACITY_MAX, CAPACITY_MIN, EXPANSION_MAX, EXPANSION_MIN, FIXED_SEED, SEED_BYTES,
                              Bloom, BloomError, max_scaled_capacity)
from ..keyspace.events import GENERIC
from ..protocol.numbers import strtol_whole, valkey_strtod
from ..protocol.resp import OK, ErrorReply
from .args import ArgCursor
from .registry import command

ADD_EVENT = b"bloom.add"
RESERVE_EVENT = b"bloom.reserve"
_EVENT_CLASS = GENERIC

# Rust's integer grammar for str::parse::<i64>/<u32>: an optional sign, ASCII digits, nothing else.
_RUST_INT = re.compile(rb"[+-]?[0-9]+\Z")


def _rust_int(text: bytes):
    """str::parse::<i64> of the argument: the value, or None (not a number, or past i64)."""
    if _RUST_INT.match(text) is None:
        return None
    n = strtol_whole(text)   # the regex admitted only a sign and ASCII digits: no blanks, as Rust
    return n if -(1 << 63) <= n < 1 << 63 else None


def _rust_u32(text: bytes):
    """str::parse::<u32>: a '+' but no '-' sign, within 32 bits; None otherwise."""
    if text[:1] == b"-" or _RUST_INT.match(text) is None:
        return None
    n = strtol_whole(text)
    return n if n <= EXPANSION_MAX else None


def _rust_f64(text: bytes):
    """str::parse::<f64>: Rust's float grammar, which is valkey_strtod's (decimal, exponent, inf, nan)."""
    return valkey_strtod(text)


def _arity(name):
    return CommandError(messages.BF_WRONG_ARITY.format(name))


def _error_rate(text):
    rate = _rust_f64(text)
    if rate is None:
        raise CommandError(messages.BF_BAD_ERROR_RATE)
    if not 0.0 < rate < 1.0:
        raise CommandError(messages.BF_ERROR_RATE_RANGE)
    return rate


def _tightening(text):
    ratio = _rust_f64(text)
    if ratio is None:
        raise CommandError(messages.BF_BAD_TIGHTENING_RATIO)
    if not 0.0 < ratio < 1.0:
        raise CommandError(messages.BF_TIGHTENING_RATIO_RANGE)
    return ratio


def _capacity(text):
    n = _rust_int(text)
    if n is not None and CAPACITY_MIN <= n <= CAPACITY_MAX:
        return n
    if n == 0:
        raise CommandError(messages.BF_CAPACITY_LARGER_THAN_0)
    raise CommandError(messages.BF_BAD_CAPACITY)


def _expansion(text):
    n = _rust_u32(text)
    if n is None or not EXPANSION_MIN <= n <= EXPANSION_MAX:
        raise CommandError(messages.BF_BAD_EXPANSION)
    return n


def _lookup(ctx, key):
    value = ctx.lookup(key)
    if value is not None and type(value) is not Bloom:
        raise WrongType()
    return value


def _memory_limit(ctx):
    """bf.bloom-memory-usage-limit, or None while replaying a journal or following one (the module skips its
    size checks for commands its primary replicated)."""
    return None if ctx.replaying else ctx.keyspace.bloom_defaults.memory_limit


def _new_seed(ctx):
    """(seed, is_seed_random) for a filter created from the configs: a random seed is drawn here, on the
    primary, and travels in the creation's effect."""
    if ctx.keyspace.bloom_defaults.use_random_seed:
        return os.urandom(SEED_BYTES), True
    return FIXED_SEED, False


def _add_items(bloom, items, memory_limit, multi):
    """handle_bloom_add: (reply, the items added, in order). multi: an array with one answer per item, an error
    in place of the first refused item and nothing after it; otherwise the one answer (an error raised)."""
    added = []
    if not multi:
        try:
            result = bloom.add(items[0], memory_limit)
        except BloomError as exc:
            raise CommandError(exc.text) from None
        if result:
            added.append(items[0])
        return result, added
    reply = []
    for item in items:
        try:
            result = bloom.add(item, memory_limit)
        except BloomError as exc:
            reply.append(ErrorReply(exc.text))
            break
        if result:
            added.append(item)
        reply.append(result)
    return reply, added


def _creation_effect(key, bloom, items):
    """The module's replication of a creation (replicate_and_notify_events' BF.INSERT), with the properties the
    filter was created with: its first sub-filter's capacity (the module takes them before adding the items,
    which may have scaled it out already)."""
    argv = [b"BF.INSERT", key, b"CAPACITY", b"%d" % bloom.starting_capacity(),
            b"ERROR", repr(bloom.fp_rate).encode(), b"TIGHTENING", repr(bloom.tightening_ratio).encode(),
            b"SEED", bloom.seed]
    if bloom.expansion == 0:
        argv.append(b"NONSCALING")
    else:
        argv += [b"EXPANSION", b"%d" % bloom.expansion]
    if items:
        argv.append(b"ITEMS")
        argv += items
    return argv


def _created(ctx, key, bloom, added):
    ctx.store(key, bloom)
    ctx.propagate_args(_creation_effect(key, bloom, added))
    if added:
        ctx.notify(_EVENT_CLASS, ADD_EVENT, key)
    ctx.notify(_EVENT_CLASS, RESERVE_EVENT, key)


def _added(ctx, key, added, name):
    """Additions to an existing filter, journaled under the command's own name as the module replicates them
    (verbatim), but with the added items only: BF.ADD / BF.MADD key item ..., BF.INSERT key ITEMS item ...
    (its options apply to a creation only, and this filter exists wherever the effect is replayed)."""
    if added:
        if name == b"BF.INSERT":
            ctx.propagate_args([name, key, b"ITEMS", *added])
        else:
            ctx.propagate_args([name, key, *added])
        ctx.notify(_EVENT_CLASS, ADD_EVENT, key)


def _add(ctx, args, multi, name):
    if (not multi and len(args) != 3) or len(args) < 3:
        raise _arity(name)
    key = args[1]
    items = args[2:]
    bloom = _lookup(ctx, key)
    limit = _memory_limit(ctx)
    if bloom is not None:
        reply, added = _add_items(bloom, items, limit, multi)
        _added(ctx, key, added, b"BF.MADD" if multi else b"BF.ADD")
        return reply
    d = ctx.keyspace.bloom_defaults
    seed, is_random = _new_seed(ctx)
    try:
        bloom = Bloom.reserve(d.fp_rate, d.tightening_ratio, d.capacity, d.expansion, seed, is_random, limit)
    except BloomError as exc:
        raise CommandError(exc.text) from None
    reply, added = _add_items(bloom, items, limit, multi)
    _created(ctx, key, bloom, added)
    return reply


@command("bf.add")
def bf_add(ctx, args):
    return _add(ctx, args, False, "BF.ADD")


@command("bf.madd")
def bf_madd(ctx, args):
    return _add(ctx, args, True, "BF.MADD")


def _exists(ctx, args, multi, name):
    if (not multi and len(args) != 3) or len(args) < 3:
        raise _arity(name)
    bloom = _lookup(ctx, args[1])
    if not multi:
        return 1 if bloom is not None and bloom.exists(args[2]) else 0
    if bloom is None:
        return [0] * (len(args) - 2)
    return [1 if bloom.exists(item) else 0 for item in args[2:]]


@command("bf.exists")
def bf_exists(ctx, args):
    return _exists(ctx, args, False, "BF.EXISTS")


@command("bf.mexists")
def bf_mexists(ctx, args):
    return _exists(ctx, args, True, "BF.MEXISTS")


@command("bf.card")
def bf_card(ctx, args):
    if len(args) != 2:
        raise _arity("BF.CARD")
    bloom = _lookup(ctx, args[1])
    return bloom.cardinality() if bloom is not None else 0


@command("bf.reserve")
def bf_reserve(ctx, args):
    """BF.RESERVE key error_rate capacity [EXPANSION expansion | NONSCALING]"""
    if not 4 <= len(args) <= 6:
        raise _arity("BF.RESERVE")
    key = args[1]
    fp_rate = _error_rate(args[2])
    capacity = _capacity(args[3])
    d = ctx.keyspace.bloom_defaults
    expansion = d.expansion
    if len(args) > 4:
        opt = args[4].upper()
        if opt == b"NONSCALING" and len(args) == 5:
            expansion = 0
        elif opt == b"EXPANSION" and len(args) == 6:
            expansion = _expansion(args[5])
        else:
            raise CommandError(messages.BF_ERROR)
    if _lookup(ctx, key) is not None:
        raise CommandError(messages.BF_ITEM_EXISTS)
    seed, is_random = _new_seed(ctx)
    try:
        bloom = Bloom.reserve(fp_rate, d.tightening_ratio, capacity, expansion, seed, is_random,
                              _memory_limit(ctx))
    except BloomError as exc:
        raise CommandError(exc.text) from None
    _created(ctx, key, bloom, [])
    return OK


@command("bf.insert")
def bf_insert(ctx, args):
    """BF.INSERT key [CAPACITY c] [ERROR e] [EXPANSION x] [NOCREATE] [NONSCALING] [TIGHTENING t] [SEED s]
    [VALIDATESCALETO n] [ITEMS item ...]: TIGHTENING and SEED are what the module's own replication of a
    creation carries (and what durakv's journal does)."""
    argc = len(args)
    if argc < 2:
        raise _arity("BF.INSERT")
    key = args[1]
    d = ctx.keyspace.bloom_defaults
    fp_rate, tightening, capacity, expansion = d.fp_rate, d.tightening_ratio, d.capacity, d.expansion
    seed = None
    nocreate = items_given = False
    scale_to = None
    c = ArgCursor(args, 2)
    while c:
        opt = c.next_upper()
        if opt in (b"ERROR", b"TIGHTENING", b"CAPACITY", b"SEED", b"EXPANSION", b"VALIDATESCALETO"):
            if not c:
                raise _arity("BF.INSERT")
            value = c.next()
            if opt == b"ERROR":
                fp_rate = _error_rate(value)
            elif opt == b"TIGHTENING":
                tightening = _tightening(value)
            elif opt == b"CAPACITY":
                capacity = _capacity(value)
            elif opt == b"SEED":
                if len(value) != SEED_BYTES:
                    raise CommandError(messages.BF_INVALID_SEED)
                seed = bytes(value)
            elif opt == b"EXPANSION":
                expansion = _expansion(value)
            else:
                scale_to = _capacity(value)
        elif opt == b"NOCREATE":
            nocreate = True
        elif opt == b"NONSCALING":
            expansion = 0
        elif opt == b"ITEMS":
            items_given = True
            break
        else:
            raise CommandError(messages.BF_UNKNOWN_ARGUMENT)
    if not c and items_given:
        raise _arity("BF.INSERT")   # ITEMS with no item after it
    if scale_to is not None:
        if expansion == 0:
            raise CommandError(messages.BF_NONSCALING_AND_VALIDATE_SCALE_TO)
        try:
            max_scaled_capacity(capacity, fp_rate, scale_to, tightening, expansion, d.memory_limit)
        except BloomError as exc:
            raise CommandError(exc.text) from None
    items = args[c.pos:]
    bloom = _lookup(ctx, key)
    limit = _memory_limit(ctx)
    if bloom is not None:
        reply, added = _add_items(bloom, items, limit, True)
        _added(ctx, key, added, b"BF.INSERT")
        return reply
    if nocreate:
        raise CommandError(messages.BF_NOT_FOUND)
    if seed is None:
        seed, is_random = _new_seed(ctx)
    else:
        is_random = seed != FIXED_SEED
    try:
        bloom = Bloom.reserve(fp_rate, tightening, capacity, expansion, seed, is_random, limit)
    except BloomError as exc:
        raise CommandError(exc.text) from None
    reply, added = _add_items(bloom, items, limit, True)
    _created(ctx, key, bloom, added)
    return reply


def _max_scaled(ctx, bloom):
    try:
        return bloom.max_scaled_capacity(ctx.keyspace.bloom_defaults.memory_limit)
    except BloomError as exc:
        raise CommandError(exc.text) from None


@command("bf.info")
def bf_info(ctx, args):
    """BF.INFO key [CAPACITY | SIZE | FILTERS | ITEMS | ERROR | EXPANSION | TIGHTENING | MAXSCALEDCAPACITY]"""
    if not 2 <= len(args) <= 3:
        raise _arity("BF.INFO")
    bloom = _lookup(ctx, args[1])
    if bloom is None:
        raise CommandError(messages.BF_NOT_FOUND)
    scaling = bloom.expansion != 0
    if len(args) == 3:
        field = args[2].upper()
        if field == b"CAPACITY":
            return bloom.capacity()
        if field == b"SIZE":
            return bloom.memory_usage()
        if field == b"FILTERS":
            return len(bloom.filters)
        if field == b"ITEMS":
            return bloom.cardinality()
        if field == b"ERROR":
            return bloom.fp_rate
        if field == b"EXPANSION":
            return bloom.expansion if scaling else None
        if field == b"TIGHTENING" and scaling:
            return bloom.tightening_ratio
        if field == b"MAXSCALEDCAPACITY" and scaling:
            return _max_scaled(ctx, bloom)
        raise CommandError(messages.BF_INVALID_INFO_VALUE)
    reply = ["Capacity", bloom.capacity(), "Size", bloom.memory_usage(), "Number of filters", len(bloom.filters),
             "Number of items inserted", bloom.cardinality(), "Error rate", bloom.fp_rate,
             "Expansion rate", bloom.expansion if scaling else None]
    if scaling:
        reply += ["Tightening ratio", bloom.tightening_ratio, "Max scaled capacity", _max_scaled(ctx, bloom)]
    return reply


@command("bf.load")
def bf_load(ctx, args):
    """BF.LOAD key data: the module's AOF rewrite form (data: BloomObject's bincode serialization)."""
    if len(args) != 3:
        raise _arity("BF.LOAD")
    key = args[1]
    if _lookup(ctx, key) is not None:
        raise CommandError(messages.BF_KEY_EXISTS)
    try:
        bloom = Bloom.from_bincode(args[2], _memory_limit(ctx))
    except BloomError as exc:
        raise CommandError(exc.text) from None
    ctx.store(key, bloom)
    ctx.propagate_args(args)
    ctx.notify(_EVENT_CLASS, RESERVE_EVENT, key)
    return OK
