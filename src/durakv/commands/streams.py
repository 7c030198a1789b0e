"""Stream commands (t_stream.c): XADD XRANGE XREVRANGE XLEN XDEL XTRIM XREAD XREADGROUP XGROUP XACK
XPENDING XCLAIM XAUTOCLAIM XINFO XSETID.

Effects, so that replaying them rebuilds the stream and its consumer groups exactly:
- XADD propagates the concrete ID it added ("*" and "ms-*" resolved) and, when it trimmed anything, the
  trim as exact (MAXLEN|MINID = value; an approximate "~" trim is rewritten to the resulting length /
  first ID, like Valkey). XTRIM the same way. XDEL / XACK name only what they removed.
- XREADGROUP: a new consumer -> XGROUP CREATECONSUMER; each delivered entry -> XCLAIM key group consumer
  0 id TIME <ms> RETRYCOUNT <n> FORCE JUSTID LASTID <group last id>; a moved last-delivered ID ->
  XGROUP SETID key group id ENTRIESREAD n (streamPropagateXCLAIM / streamPropagateGroupID). A history
  read (explicit ID) updates delivery time and count: also an XCLAIM (Valkey does not replicate it).
- XCLAIM / XAUTOCLAIM: one such XCLAIM per claimed entry (absolute TIME, RETRYCOUNT), and for a pending
  entry whose stream entry is gone one that removes it on replay; new consumers -> CREATECONSUMER.
- XGROUP CREATE / SETID propagate with the explicit ID and ENTRIESREAD.
Consumer seen/active times are soft state (set from the clock of whoever applies the effect).
"""

from .. import messages
from ..errors import CommandError, WrongType
from ..keyspace.events import STREAM
from ..keyspace.stream import (INVALID_ENTRIES_READ, MASK64, MAX_ID, TRIM_MAXLEN, TRIM_MINID, Nack, Stream,
                               id_bytes)
from ..protocol.numbers import string2ull
from ..protocol.resp import OK, NullArray
from .args import ArgCursor
from .base import INT64_MAX, Blocked, parse_int, syntax_error, wrong_arity
from .blocking import parse_timeout_ms
from .registry import command

_APPROX_LIMIT = 10000  # the default trim limit when 100 * stream-node-max-entries is out of bounds
_AUTOCLAIM_MAX_COUNT = INT64_MAX // 16


# -- IDs -------------------------------------------------------------------------------------------

def _invalid_id():
    return CommandError(messages.STREAM_INVALID_ID)


def _ull(s: bytes) -> int:
    """One part of a stream ID: Valkey's string2ull, or "Invalid stream ID"."""
    v = string2ull(s)
    if v is None:
        raise _invalid_id()
    return v


def parse_id(raw: bytes, missing_seq: int = 0, strict: bool = False) -> int:
    """streamGenericParseIDOrReply: '<ms>-<seq>', '<ms>' (seq = missing_seq), '-' and '+' unless strict."""
    if len(raw) > 127:
        raise _invalid_id()
    if raw == b"-" or raw == b"+":
        if strict:
            raise _invalid_id()
        return 0 if raw == b"-" else MAX_ID
    ms, sep, seq = raw.partition(b"-")
    return (_ull(ms) << 64) | (_ull(seq) if sep else missing_seq)


def _parse_xadd_id(raw: bytes):
    """(id, seq_given) for XADD's explicit ID, which may be '<ms>-*'."""
    if len(raw) > 127 or raw == b"-" or raw == b"+":
        raise _invalid_id()
    ms, sep, seq = raw.partition(b"-")
    if sep and seq == b"*":
        return _ull(ms) << 64, False
    return (_ull(ms) << 64) | (_ull(seq) if sep else 0), True


def _parse_interval(raw: bytes, missing_seq: int):
    """(id, exclusive) for a range bound; '(' makes it exclusive (then '-'/'+' are invalid)."""
    if len(raw) > 1 and raw[0] == 40:  # '('
        return parse_id(raw[1:], missing_seq, True), True
    return parse_id(raw, missing_seq), False


def _range_start(raw: bytes) -> int:
    start, ex = _parse_interval(raw, 0)
    if ex:
        if start == MAX_ID:
            raise CommandError(messages.STREAM_INVALID_START)
        start += 1
    return start


def _range_end(raw: bytes) -> int:
    end, ex = _parse_interval(raw, MASK64)
    if ex:
        if end == 0:
            raise CommandError(messages.STREAM_INVALID_END)
        end -= 1
    return end


def _text(b: bytes) -> str:
    return b.decode("utf-8", "replace")


def _subcommand_error(args):
    return CommandError(messages.SUBCOMMAND_SYNTAX.format(_text(args[1]), _text(args[0]).upper()))


def _lookup(ctx, key):
    return ctx.lookup_type(key, Stream)


def _entry(s, i):
    return [id_bytes(i), s.entries[i]]


# -- XADD / XTRIM ------------------------------------------------------------------------------------

class _TrimArgs:
    __slots__ = ("id", "id_given", "seq_given", "nomkstream", "strategy", "approx", "limit", "maxlen",
                 "minid", "idpos")

    def __init__(self):
        self.id = 0
        self.id_given = self.seq_given = self.nomkstream = self.approx = False
        self.strategy = self.limit = self.maxlen = self.minid = 0
        self.idpos = 0


def _parse_add_trim(ctx, args, xadd):
    """streamParseAddOrTrimArgsOrReply."""
    t = _TrimArgs()
    c = ArgCursor(args, 2)
    limit_given = False
    while c:
        if xadd and c.peek() == b"*":
            t.idpos = c.pos
            break
        opt = c.next()
        moreargs = c.left()
        lo = opt.lower()
        if (lo == b"maxlen" or lo == b"minid") and moreargs:
            if t.strategy:
                raise CommandError(messages.STREAM_MAXLEN_MINID)
            t.approx = False
            nxt = c.peek()
            if moreargs >= 2 and nxt == b"~":
                t.approx = True
                c.skip()
            elif moreargs >= 2 and nxt == b"=":
                c.skip()
            if lo == b"maxlen":
                t.maxlen = c.int()
                if t.maxlen < 0:
                    raise CommandError(messages.STREAM_MAXLEN_NEGATIVE)
                t.strategy = TRIM_MAXLEN
            else:
                t.minid = parse_id(c.next(), 0, True)
                t.strategy = TRIM_MINID
        elif lo == b"limit" and moreargs:
            t.limit = c.int()
            if t.limit < 0:
                raise CommandError(messages.STREAM_LIMIT_NEGATIVE)
            limit_given = True
        elif xadd and lo == b"nomkstream":
            t.nomkstream = True
        elif xadd:
            t.id, t.seq_given = _parse_xadd_id(opt)
            t.id_given = True
            t.idpos = c.pos - 1   # the ID's own position: the fields follow it
            break
        else:
            raise syntax_error()
    else:
        t.idpos = c.pos
    if t.limit and not t.strategy:
        raise CommandError(messages.STREAM_LIMIT_NO_STRATEGY)
    if not xadd and not t.strategy:
        raise CommandError(messages.XTRIM_NO_STRATEGY)
    if ctx.replaying:
        t.limit = 0  # mustObeyClient: the trim argument was already made exact
    elif limit_given:
        if not t.approx:
            raise CommandError(messages.STREAM_LIMIT_NO_APPROX)
    elif t.approx:
        # 100 nodes' worth of entries, kept within Valkey's bounds (a 0 or huge node size gives 10000).
        t.limit = 100 * ctx.keyspace.encoding_rules.stream_node_max_entries
        if t.limit <= 0 or t.limit > 1000000:
            t.limit = _APPROX_LIMIT
    else:
        t.limit = 0
    return t


def _trim(s, t):
    return s.trim(t.strategy, t.maxlen, t.minid, t.approx, t.limit)


def _exact_trim_args(s, t):
    """The trim as an exact option triple for the effect (streamRewriteTrimArgument when approximate)."""
    if t.strategy == TRIM_MAXLEN:
        return (b"MAXLEN", b"=", b"%d" % (len(s) if t.approx else t.maxlen))
    return (b"MINID", b"=", id_bytes(s.first_id_with_tombstones() if t.approx else t.minid))


@command("xadd")
def xadd(ctx, args):
    t = _parse_add_trim(ctx, args, True)
    field_pos = t.idpos + 1
    nfields = len(args) - field_pos
    if nfields < 2 or nfields % 2:
        raise wrong_arity("xadd")
    if t.id_given and t.seq_given and t.id == 0:
        raise CommandError(messages.XADD_ID_ZERO)
    key = args[1]
    s = _lookup(ctx, key)
    if s is None:
        if t.nomkstream:
            return None
        s = Stream()
        ctx.store(key, s)
    last = s.last_id
    if last == MAX_ID:
        raise CommandError(messages.STREAM_EXHAUSTED)
    if not t.id_given:
        now = ctx.now_ms()
        new = now << 64 if now > last >> 64 else last + 1
    elif t.seq_given:
        new = t.id
    elif last >> 64 == t.id >> 64:
        if last & MASK64 == MASK64:
            raise CommandError(messages.XADD_ID_TOO_SMALL)
        new = last + 1
    else:
        new = t.id
    if new <= last:
        raise CommandError(messages.XADD_ID_TOO_SMALL)
    fields = tuple(args[field_pos:])
    rules = ctx.keyspace.encoding_rules
    s.append(new, fields, rules.stream_node_max_bytes, rules.stream_node_max_entries)
    idb = id_bytes(new)
    ctx.notify(STREAM, b"xadd", key)
    if t.strategy and _trim(s, t):
        ctx.propagate(b"XADD", args[1], *_exact_trim_args(s, t), idb, *fields)
        ctx.notify(STREAM, b"xtrim", key)
    else:
        ctx.propagate(b"XADD", args[1], idb, *fields)
    return idb


@command("xtrim")
def xtrim(ctx, args):
    t = _parse_add_trim(ctx, args, False)
    s = _lookup(ctx, args[1])
    if s is None:
        return 0
    deleted = _trim(s, t)
    if deleted:
        ctx.propagate(b"XTRIM", args[1], *_exact_trim_args(s, t))
        ctx.notify(STREAM, b"xtrim", args[1])
    return deleted


@command("xdel")
def xdel(ctx, args):
    s = _lookup(ctx, args[1])
    if s is None:
        return 0
    ids = [parse_id(a, 0, True) for a in args[2:]]
    deleted = [i for i in ids if s.delete(i)]
    if deleted:
        ctx.propagate(b"XDEL", args[1], *[id_bytes(i) for i in deleted])
        ctx.notify(STREAM, b"xdel", args[1])
    return len(deleted)


@command("xlen")
def xlen(ctx, args):
    s = _lookup(ctx, args[1])
    return 0 if s is None else len(s)


@command("xsetid")
def xsetid(ctx, args):
    new = parse_id(args[2], 0, True)
    entries_added = -1
    max_xdel = 0
    c = ArgCursor(args, 3)
    while c:
        opt = c.next_lower()
        if opt == b"entriesadded" and c.left():
            entries_added = c.int()
            if entries_added < 0:
                raise CommandError(messages.XSETID_ENTRIES_ADDED_NEGATIVE)
        elif opt == b"maxdeletedid" and c.left():
            max_xdel = parse_id(c.next(), 0, True)
            if new < max_xdel:
                raise CommandError(messages.XSETID_BELOW_GIVEN_MAXDELETED)
        else:
            raise syntax_error()
    s = _lookup(ctx, args[1])
    if s is None:
        raise CommandError(messages.NO_SUCH_KEY)
    if new < s.max_deleted_id:
        raise CommandError(messages.XSETID_BELOW_MAXDELETED)
    if s.ids:
        if new < s.last_entry_id():
            raise CommandError(messages.XSETID_BELOW_TOP)
        if entries_added != -1 and len(s) > entries_added:
            raise CommandError(messages.XSETID_ENTRIES_ADDED_SMALL)
    s.last_id = new
    if entries_added != -1:
        s.entries_added = entries_added
    if max_xdel:
        s.max_deleted_id = max_xdel
    ctx.propagate_args(args)
    ctx.notify(STREAM, b"xsetid", args[1])
    return OK


# -- XRANGE / XREVRANGE ------------------------------------------------------------------------------

def _xrange(ctx, args, rev):
    start = _range_start(args[3] if rev else args[2])
    end = _range_end(args[2] if rev else args[3])
    count = -1
    c = ArgCursor(args, 4)
    while c:
        if c.next_lower() == b"count" and c.left():
            count = c.int()
            if count < 0:
                count = 0
        else:
            raise syntax_error()
    s = _lookup(ctx, args[1])
    if s is None:
        return []
    if count == 0:
        return NullArray
    entries = s.entries
    return [[id_bytes(i), entries[i]] for i in s.range(start, end, max(count, 0), rev)]


@command("xrange")
def xrange_(ctx, args):
    return _xrange(ctx, args, False)


@command("xrevrange")
def xrevrange(ctx, args):
    return _xrange(ctx, args, True)


# -- XREAD / XREADGROUP ------------------------------------------------------------------------------

class _ReadArgs:
    __slots__ = ("timeout", "count", "keys", "ids", "streams", "groups", "group", "consumer", "noack",
                 "id_args_at")


def _parse_read(ctx, args, group_mode):
    """XREAD / XREADGROUP arguments, with keys, groups and IDs resolved (xreadCommand's first half)."""
    p = _ReadArgs()
    p.timeout = -1
    p.count = 0
    p.group = p.consumer = None
    p.noack = False
    n = len(args)
    streams_arg = 0
    c = ArgCursor(args, 1)
    while c:
        o = c.next_lower()
        moreargs = c.left()
        if o == b"block" and moreargs:
            p.timeout = parse_timeout_ms(ctx, c.next())
        elif o == b"count" and moreargs:
            p.count = max(c.int(), 0)
        elif o == b"streams" and moreargs:
            streams_arg = c.pos
            if (n - streams_arg) % 2:
                raise CommandError(messages.XREAD_UNBALANCED.format(
                    "xreadgroup" if group_mode else "xread", ">" if group_mode else "$"))
            break
        elif o == b"group" and moreargs >= 2:
            if not group_mode:
                raise CommandError(messages.XREAD_GROUP_ONLY)
            p.group, p.consumer = c.take(2)
        elif o == b"noack":
            if not group_mode:
                raise CommandError(messages.XREAD_NOACK_ONLY)
            p.noack = True
        else:
            raise syntax_error()
    if not streams_arg:
        raise syntax_error()
    if group_mode and p.group is None:
        raise CommandError(messages.XREADGROUP_MISSING_GROUP)
    nkeys = (n - streams_arg) // 2
    p.keys = keys = args[streams_arg:streams_arg + nkeys]
    p.id_args_at = streams_arg + nkeys
    p.ids = ids = []
    p.streams = streams = []
    p.groups = groups = []
    group = p.group
    for idx in range(nkeys):
        key = keys[idx]
        s = ctx.read_type(key, Stream)   # lookupKeyRead, XREADGROUP's too
        streams.append(s)
        if group is not None:
            g = s.get_group(group) if s is not None else None
            if g is None:
                raise CommandError(messages.XREADGROUP_NOGROUP.format(_text(key), _text(group)))
            groups.append(g)
        raw = args[p.id_args_at + idx]
        if raw == b"$":
            if group_mode:
                raise CommandError(messages.XREADGROUP_SPECIAL_ID.format("$"))
            ids.append(s.last_id if s is not None else 0)
        elif raw == b"+":
            if group_mode:
                raise CommandError(messages.XREADGROUP_SPECIAL_ID.format("+"))
            if s is not None:
                if s.last_id == 0:
                    raise CommandError(messages.XREAD_LAST_ID_ZERO)
                ids.append(s.last_id - 1)
            else:
                ids.append(0)
        elif raw == b">":
            if not group_mode:
                raise CommandError(messages.XREAD_GT_ID)
            ids.append(MAX_ID)
        else:
            ids.append(parse_id(raw, 0, True))
    return p


def _serve_read(ctx, p):
    """Serves what can be served now: the reply, or None when no stream had anything."""
    out = []
    group = p.group
    now = ctx.now_ms() if group is not None else 0
    count = p.count
    lookup_read = ctx.lookup_read
    for idx, key in enumerate(p.keys):
        # xreadCommand looks every key up a second time to serve it (a second "keymiss" for a missing one)
        if lookup_read(key) is None:
            continue
        s = p.streams[idx]
        gt = p.ids[idx]
        if group is not None:
            g = p.groups[idx]
            history = gt != MAX_ID
            serve = history
            if not history and s.ids and s.last_entry_id() > g.last_id:
                serve = True
                gt = g.last_id
            consumer = g.consumers.get(p.consumer)
            if consumer is None:
                consumer = g.create_consumer(p.consumer, now)
                ctx.propagate(b"XGROUP", b"CREATECONSUMER", key, group, p.consumer)
                ctx.notify(STREAM, b"xgroup-createconsumer", key)
            consumer.seen_time = now
            if not serve:
                continue
            start = (gt + 1) & MAX_ID
            if history:
                entries = _serve_history(ctx, s, key, g, group, consumer, start, count, now)
            else:
                entries = _serve_group(ctx, s, key, g, group, consumer, start, count, now, p.noack)
        else:
            if not s.ids or s.last_entry_id() <= gt:
                continue
            data = s.entries
            entries = [[id_bytes(i), data[i]] for i in s.range((gt + 1) & MAX_ID, MAX_ID, count)]
        out.append((key, entries))
    if not out:
        return None
    if ctx.resp3:
        return dict(out)
    return [[k, e] for k, e in out]


def _propagate_xclaim(ctx, key, group_name, consumer_name, idb, nack, g):
    ctx.propagate(b"XCLAIM", key, group_name, consumer_name, b"0", idb, b"TIME", b"%d" % nack.delivery_time,
                  b"RETRYCOUNT", b"%d" % nack.delivery_count, b"FORCE", b"JUSTID", b"LASTID", id_bytes(g.last_id))


def _propagate_group_id(ctx, key, group_name, g):
    ctx.propagate(b"XGROUP", b"SETID", key, group_name, id_bytes(g.last_id), b"ENTRIESREAD",
                  b"%d" % g.entries_read)


def _serve_group(ctx, s, key, g, group_name, consumer, start, count, now, noack):
    """New entries for a consumer (">"): moves the group's last ID, fills the PELs (streamReplyWithRange)."""
    out = []
    moved = False
    data = s.entries
    cname = consumer.name
    for i in s.range(start, MAX_ID, count):
        if i > g.last_id:
            if g.entries_read != INVALID_ENTRIES_READ and not s.range_has_tombstones(i):
                g.entries_read += 1
            elif s.entries_added:
                g.entries_read = s.estimate_distance(i)
            g.last_id = i
            moved = True
        idb = id_bytes(i)
        out.append([idb, data[i]])
        if noack:
            continue
        nack = g.pel.get(i)
        if nack is None:
            nack = Nack(consumer, now)
            g.pel.add(i, nack)
            consumer.pel.add(i, nack)
        else:
            nack.consumer.pel.remove(i)
            nack.consumer = consumer
            nack.delivery_time = now
            nack.delivery_count = 1
            consumer.pel.add(i, nack)
        consumer.active_time = now
        _propagate_xclaim(ctx, key, group_name, cname, idb, nack, g)
    if moved:
        _propagate_group_id(ctx, key, group_name, g)
    return out


def _serve_history(ctx, s, key, g, group_name, consumer, start, count, now):
    """A consumer's own pending entries from `start` (streamReplyWithRangeFromConsumerPEL)."""
    ids = consumer.pel.ids_from(start, MAX_ID, count)
    out = []
    data = s.entries
    pel = consumer.pel.map
    for i in ids:
        idb = id_bytes(i)
        fields = data.get(i)
        if fields is None:
            out.append([idb, NullArray])
            continue
        out.append([idb, fields])
        nack = pel[i]
        nack.delivery_time = now
        nack.delivery_count += 1
        _propagate_xclaim(ctx, key, group_name, consumer.name, idb, nack, g)
    return out


def _read_command(ctx, args, group_mode):
    p = _parse_read(ctx, args, group_mode)
    reply = _serve_read(ctx, p)
    if reply is not None:
        return reply
    if p.timeout == -1 or not ctx.may_block:
        return NullArray
    retry_args = list(args)
    if not group_mode:
        # '$' means "after the last ID when the command blocked": freeze it for the retries.
        for idx in range(len(p.keys)):
            if retry_args[p.id_args_at + idx] == b"$":
                retry_args[p.id_args_at + idx] = id_bytes(p.ids[idx])

    def retry(rctx):
        # Valkey re-runs the command: errors (NOGROUP after XGROUP DESTROY or DEL, WRONGTYPE) are raised
        # as from a handler, except that XREAD is only woken by stream keys (looked at with no effect: an
        # expired one stays until a command reads it), so a retyped or expired key keeps it waiting.
        if not group_mode and not any(type(rctx.peek(k)) is Stream for k in p.keys):
            return None
        try:
            return _serve_read(rctx, _parse_read(rctx, retry_args, group_mode))
        except WrongType:
            if group_mode:
                raise
            return None

    return Blocked(list(p.keys), p.timeout, retry, NullArray, unblock_on_nokey=group_mode)


@command("xread")
def xread(ctx, args):
    return _read_command(ctx, args, False)


@command("xreadgroup")
def xreadgroup(ctx, args):
    return _read_command(ctx, args, True)


# -- XGROUP ------------------------------------------------------------------------------------------

def _xgroup_prelude(ctx, args, sub):
    """The checks xgroupCommand makes before dispatching: options, key and group."""
    create = sub == b"create"
    setid = sub == b"setid"
    mkstream = False
    entries_read = INVALID_ENTRIES_READ
    c = ArgCursor(args, 5)
    while c:
        opt = c.next_lower()
        if create and opt == b"mkstream":
            mkstream = True
        elif (create or setid) and opt == b"entriesread" and c.left():
            entries_read = c.int()
            if entries_read < 0 and entries_read != INVALID_ENTRIES_READ:
                raise CommandError(messages.XGROUP_ENTRIESREAD_INVALID)
        else:
            raise _subcommand_error(args)
    s = _lookup(ctx, args[2])
    g = None
    if not mkstream:
        if s is None:
            raise CommandError(messages.XGROUP_KEY_REQUIRED)
        g = s.get_group(args[3])
        if g is None and sub in (b"setid", b"createconsumer", b"delconsumer"):
            raise CommandError(messages.STREAM_NOGROUP_FOR_KEY.format(_text(args[3]), _text(args[2])))
    return s, g, mkstream, entries_read


@command("xgroup|create")
def xgroup_create(ctx, args):
    s, _g, _mkstream, entries_read = _xgroup_prelude(ctx, args, b"create")
    if len(args) > 8:
        raise _subcommand_error(args)
    key, name = args[2], args[3]
    if args[4] == b"$":
        last = s.last_id if s is not None else 0
    else:
        last = parse_id(args[4], 0, True)
    created = s is None
    if created:
        s = Stream()
        ctx.store(key, s)
    if s.create_group(name, last, entries_read) is None:
        raise CommandError(messages.STREAM_BUSYGROUP)
    effect = [b"XGROUP", b"CREATE", key, name, id_bytes(last)]
    if created:
        effect.append(b"MKSTREAM")
    effect += [b"ENTRIESREAD", b"%d" % entries_read]
    ctx.propagate(*effect)
    ctx.notify(STREAM, b"xgroup-create", key)
    return OK


@command("xgroup|setid")
def xgroup_setid(ctx, args):
    s, g, _mkstream, entries_read = _xgroup_prelude(ctx, args, b"setid")
    if len(args) not in (5, 7):
        raise _subcommand_error(args)
    last = s.last_id if args[4] == b"$" else parse_id(args[4])
    g.last_id = last
    g.entries_read = entries_read
    _propagate_group_id(ctx, args[2], args[3], g)
    ctx.notify(STREAM, b"xgroup-setid", args[2])
    return OK


@command("xgroup|destroy")
def xgroup_destroy(ctx, args):
    s, g, _mkstream, _er = _xgroup_prelude(ctx, args, b"destroy")
    if g is None:
        return 0
    del s.groups[args[3]]
    ctx.propagate_args(args)
    ctx.notify(STREAM, b"xgroup-destroy", args[2])
    return 1


@command("xgroup|createconsumer")
def xgroup_createconsumer(ctx, args):
    _s, g, _mkstream, _er = _xgroup_prelude(ctx, args, b"createconsumer")
    if g.create_consumer(args[4], ctx.now_ms()) is None:
        return 0
    ctx.propagate_args(args)
    ctx.notify(STREAM, b"xgroup-createconsumer", args[2])
    return 1


@command("xgroup|delconsumer")
def xgroup_delconsumer(ctx, args):
    _s, g, _mkstream, _er = _xgroup_prelude(ctx, args, b"delconsumer")
    consumer = g.consumers.get(args[4])
    if consumer is None:
        return 0
    pending = len(consumer.pel)
    g.delete_consumer(consumer)
    ctx.propagate_args(args)
    ctx.notify(STREAM, b"xgroup-delconsumer", args[2])
    return pending


def _help(name, lines):
    return ["%s <subcommand> [<arg> [value] [opt] ...]. Subcommands are:" % name] + lines + [
        "HELP", "    Print this help."]


@command("xgroup|help")
def xgroup_help(ctx, args):
    return _help("XGROUP", [
        "CREATE <key> <groupname> <id|$> [option]",
        "    Create a new consumer group. Options are:",
        "    * MKSTREAM",
        "      Create the empty stream if it does not exist.",
        "    * ENTRIESREAD entries_read",
        "      Set the group's entries_read counter (internal use).",
        "CREATECONSUMER <key> <groupname> <consumer>",
        "    Create a new consumer in the specified group.",
        "DELCONSUMER <key> <groupname> <consumer>",
        "    Remove the specified consumer.",
        "DESTROY <key> <groupname>",
        "    Remove the specified group.",
        "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
        "    Set the current group ID and entries_read counter."])


# -- XACK / XPENDING / XCLAIM / XAUTOCLAIM ------------------------------------------------------------

@command("xack")
def xack(ctx, args):
    s = ctx.read_type(args[1], Stream)   # lookupKeyRead
    g = s.get_group(args[2]) if s is not None else None
    if g is None:
        return 0
    ids = [parse_id(a, 0, True) for a in args[3:]]
    acked = [i for i in ids if g.remove_nack(i) is not None]
    if acked:
        ctx.propagate(b"XACK", args[1], args[2], *[id_bytes(i) for i in acked])
    return len(acked)


@command("xpending")
def xpending(ctx, args):
    n = len(args)
    if n != 3 and (n < 6 or n > 9):
        raise syntax_error()
    consumer_name = None
    minidle = 0
    if n >= 6:
        startidx = 3
        if args[3].lower() == b"idle":
            minidle = parse_int(args[4])
            if n < 8:
                raise syntax_error()
            startidx += 2
        count = max(parse_int(args[startidx + 2]), 0)
        start = _range_start(args[startidx])
        end = _range_end(args[startidx + 1])
        if startidx + 3 < n:
            consumer_name = args[startidx + 3]
    s = _lookup(ctx, args[1])
    g = s.get_group(args[2]) if s is not None else None
    if g is None:
        raise CommandError(messages.STREAM_NOGROUP.format(_text(args[1]), _text(args[2])))
    if n == 3:
        pel = g.pel
        if not pel:
            return [0, None, None, NullArray]
        owners = sorted((c.name, len(c.pel)) for c in g.consumers.values() if c.pel)
        return [len(pel), id_bytes(pel.keys.first()), id_bytes(pel.keys.last()),
                [[name, b"%d" % k] for name, k in owners]]
    if consumer_name is not None:
        consumer = g.consumers.get(consumer_name)
        if consumer is None:
            return []
        pel = consumer.pel
    else:
        pel = g.pel
    now = ctx.now_ms()
    out = []
    if not count:
        return out
    nacks = pel.map
    for i in pel.ids_from(start, end):
        nack = nacks[i]
        idle = now - nack.delivery_time
        if minidle and idle < minidle:
            continue
        out.append([id_bytes(i), nack.consumer.name, idle if idle > 0 else 0, nack.delivery_count])
        count -= 1
        if not count:
            break
    return out


def _claim_consumer(ctx, key, group_name, g, name, now):
    consumer = g.consumers.get(name)
    if consumer is None:
        consumer = g.create_consumer(name, now)
        ctx.propagate(b"XGROUP", b"CREATECONSUMER", key, group_name, name)
        ctx.notify(STREAM, b"xgroup-createconsumer", key)
    consumer.seen_time = now
    return consumer


@command("xclaim")
def xclaim(ctx, args):
    key, group_name = args[1], args[2]
    s = ctx.read_type(key, Stream)   # lookupKeyRead
    g = s.get_group(group_name) if s is not None else None
    if g is None:
        raise CommandError(messages.STREAM_NOGROUP.format(_text(key), _text(group_name)))
    minidle = max(parse_int(args[4], messages.XCLAIM_MIN_IDLE), 0)
    ids = []
    c = ArgCursor(args, 5)
    while c:   # the IDs, up to the first argument that is not one (the options start there)
        try:
            ids.append(parse_id(c.peek(), 0, True))
        except CommandError:
            break
        c.skip()
    now = ctx.now_ms()
    retrycount = -1
    deliverytime = -1
    force = justid = False
    last_id = 0
    while c:
        arg = c.next()
        opt = arg.lower()
        moreargs = c.left()
        if opt == b"force":
            force = True
        elif opt == b"justid":
            justid = True
        elif opt == b"idle" and moreargs:
            deliverytime = now - c.int(messages.XCLAIM_IDLE)
        elif opt == b"time" and moreargs:
            deliverytime = c.int(messages.XCLAIM_TIME)
        elif opt == b"retrycount" and moreargs:
            retrycount = c.int(messages.XCLAIM_RETRYCOUNT)
        elif opt == b"lastid" and moreargs:
            last_id = parse_id(c.next(), 0, True)
        else:
            raise CommandError(messages.XCLAIM_UNRECOGNIZED.format(_text(arg)))
    propagate_last_id = False
    if last_id > g.last_id:
        g.last_id = last_id
        propagate_last_id = True
    if deliverytime == -1 or deliverytime < 0 or deliverytime > now:
        deliverytime = now
    consumer = _claim_consumer(ctx, key, group_name, g, args[3], now)
    out = []
    data = s.entries
    for i in ids:
        nack = g.pel.get(i)
        if i not in data:
            if nack is not None:
                _propagate_xclaim(ctx, key, group_name, nack.consumer.name, id_bytes(i), nack, g)
                propagate_last_id = False
                g.remove_nack(i)
            continue
        if force and nack is None:
            nack = Nack(None, now)
            g.pel.add(i, nack)
        if nack is None:
            continue
        owner = nack.consumer
        if owner is not None and minidle and now - nack.delivery_time < minidle:
            continue
        if owner is not consumer and owner is not None:
            owner.pel.remove(i)
        nack.delivery_time = deliverytime
        if retrycount >= 0:
            nack.delivery_count = retrycount
        elif not justid:
            nack.delivery_count += 1
        if owner is not consumer:
            consumer.pel.add(i, nack)
            nack.consumer = consumer
        idb = id_bytes(i)
        out.append(idb if justid else [idb, data[i]])
        consumer.active_time = now
        _propagate_xclaim(ctx, key, group_name, consumer.name, idb, nack, g)
        propagate_last_id = False
    if propagate_last_id:
        _propagate_group_id(ctx, key, group_name, g)
    return out


@command("xautoclaim")
def xautoclaim(ctx, args):
    key, group_name = args[1], args[2]
    minidle = max(parse_int(args[4], messages.XAUTOCLAIM_MIN_IDLE), 0)
    start = _range_start(args[5])
    count = 100
    justid = False
    c = ArgCursor(args, 6)
    while c:
        opt = c.next_lower()
        if opt == b"count" and c.left():
            count = c.int(messages.XAUTOCLAIM_COUNT)
            if count < 1 or count > _AUTOCLAIM_MAX_COUNT:
                raise CommandError(messages.XAUTOCLAIM_COUNT)
        elif opt == b"justid":
            justid = True
        else:
            raise syntax_error()
    s = ctx.read_type(key, Stream)   # lookupKeyRead
    g = s.get_group(group_name) if s is not None else None
    if g is None:
        raise CommandError(messages.STREAM_NOGROUP.format(_text(key), _text(group_name)))
    now = ctx.now_ms()
    consumer = _claim_consumer(ctx, key, group_name, g, args[3], now)
    attempts = count * 10
    # The PEL entries this call may look at (it examines at most `attempts`), plus the next for the cursor.
    candidates = g.pel.ids_from(start, MAX_ID, attempts + 1)
    data = s.entries
    claimed = []
    deleted = []
    examined = 0
    for i in candidates:
        if examined == attempts or not count:
            break
        examined += 1
        nack = g.pel.map[i]
        idb = id_bytes(i)
        if i not in data:
            _propagate_xclaim(ctx, key, group_name, nack.consumer.name, idb, nack, g)
            g.remove_nack(i)
            deleted.append(idb)
            count -= 1
            continue
        if minidle and now - nack.delivery_time < minidle:
            continue
        owner = nack.consumer
        if owner is not consumer:
            owner.pel.remove(i)
        nack.delivery_time = now
        if not justid:
            nack.delivery_count += 1
        if owner is not consumer:
            consumer.pel.add(i, nack)
            nack.consumer = consumer
        claimed.append(idb if justid else [idb, data[i]])
        count -= 1
        consumer.active_time = now
        _propagate_xclaim(ctx, key, group_name, consumer.name, idb, nack, g)
    cursor = candidates[examined] if examined < len(candidates) else 0
    return [id_bytes(cursor), claimed, deleted]


# -- XINFO -------------------------------------------------------------------------------------------

def _info_lookup(ctx, args):
    s = _lookup(ctx, args[2])
    if s is None:
        raise CommandError(messages.NO_SUCH_KEY)
    return s


def _entries_read_reply(g):
    return g.entries_read if g.entries_read != INVALID_ENTRIES_READ else None


@command("xinfo|stream")
def xinfo_stream(ctx, args):
    s = _info_lookup(ctx, args)
    opts = args[3:]
    full = bool(opts)
    count = 10
    if opts:
        if len(opts) not in (1, 3) or opts[0].lower() != b"full":
            raise _subcommand_error(args)
        if len(opts) == 3:
            if opts[1].lower() != b"count":
                raise _subcommand_error(args)
            count = parse_int(opts[2])
            if count < 0:
                count = 10
    nodes = len(s.nodes)
    info = {
        b"length": len(s),
        b"radix-tree-keys": nodes,
        b"radix-tree-nodes": 2 * nodes if nodes else 1,
        b"last-generated-id": id_bytes(s.last_id),
        b"max-deleted-entry-id": id_bytes(s.max_deleted_id),
        b"entries-added": s.entries_added,
        b"recorded-first-entry-id": id_bytes(s.first_id),
    }
    groups = s.groups or {}
    if not full:
        info[b"groups"] = len(groups)
        info[b"first-entry"] = _entry(s, s.ids.first()) if s.ids else None
        info[b"last-entry"] = _entry(s, s.ids.last()) if s.ids else None
        return info
    info[b"entries"] = [_entry(s, i) for i in s.range(0, MAX_ID, count)]
    out_groups = []
    for name in sorted(groups):
        g = groups[name]
        pel_ids = g.pel.keys.head_ids(count)
        consumers = []
        for cname in sorted(g.consumers):
            c = g.consumers[cname]
            c_ids = c.pel.keys.head_ids(count)
            consumers.append({
                b"name": cname,
                b"seen-time": c.seen_time,
                b"active-time": c.active_time,
                b"pel-count": len(c.pel),
                b"pending": [[id_bytes(i), c.pel.map[i].delivery_time, c.pel.map[i].delivery_count]
                             for i in c_ids],
            })
        out_groups.append({
            b"name": name,
            b"last-delivered-id": id_bytes(g.last_id),
            b"entries-read": _entries_read_reply(g),
            b"lag": s.group_lag(g),
            b"pel-count": len(g.pel),
            b"pending": [[id_bytes(i), g.pel.map[i].consumer.name, g.pel.map[i].delivery_time,
                          g.pel.map[i].delivery_count] for i in pel_ids],
            b"consumers": consumers,
        })
    info[b"groups"] = out_groups
    return info


@command("xinfo|groups")
def xinfo_groups(ctx, args):
    s = _info_lookup(ctx, args)
    groups = s.groups or {}
    out = []
    for name in sorted(groups):
        g = groups[name]
        out.append({
            b"name": name,
            b"consumers": len(g.consumers),
            b"pending": len(g.pel),
            b"last-delivered-id": id_bytes(g.last_id),
            b"entries-read": _entries_read_reply(g),
            b"lag": s.group_lag(g),
        })
    return out


@command("xinfo|consumers")
def xinfo_consumers(ctx, args):
    s = _info_lookup(ctx, args)
    g = s.get_group(args[3])
    if g is None:
        raise CommandError(messages.STREAM_NOGROUP_FOR_KEY.format(_text(args[3]), _text(args[2])))
    now = ctx.now_ms()
    out = []
    for name in sorted(g.consumers):
        c = g.consumers[name]
        idle = now - c.seen_time
        out.append({
            b"name": name,
            b"pending": len(c.pel),
            b"idle": idle if idle > 0 else 0,
            b"inactive": now - c.active_time if c.active_time != -1 else -1,
        })
    return out


@command("xinfo|help")
def xinfo_help(ctx, args):
    return _help("XINFO", [
        "CONSUMERS <key> <groupname>",
        "    Show consumers of <groupname>.",
        "GROUPS <key>",
        "    Show the stream consumer groups.",
        "STREAM <key> [FULL [COUNT <count>]",
        "    Show information about the stream."])
