"""Server commands: CONFIG INFO DBSIZE FLUSHDB FLUSHALL TIME SAVE BGSAVE LASTSAVE SHUTDOWN DEBUG COMMAND."""

import logging
import re
import time

from .. import messages
from ..config import split_args
from ..errors import CommandError, ConfigError
from ..keyspace.db import estimate_key
from ..protocol.resp import OK, Deferred, ErrorReply, Raw, RespSet, encode
from . import registry
from . import keyspecs
from .acl.universe import CATEGORIES, effective_categories
from .specs import MODULES
from .args import ArgCursor
from .base import parse_int, syntax_error
from .registry import READS_ALL, READS_EXPORT, command

NO_REPLY = Raw(b"")
log = logging.getLogger("durakv.commands")


# -- CONFIG -------------------------------------------------------------------------------------

@command("config|get")
def config_get(ctx, args):
    out = {}
    for pattern in args[2:]:
        for name, value in ctx.services.config.matching(pattern.decode("utf-8", "replace")).items():
            out[name.encode()] = value.encode()
    return out


@command("config|set")
def config_set(ctx, args):
    """configSetCommand: all or nothing. Every name is looked up first (unknown, immutable, refused, given twice:
    the first such error answers), then every value is parsed and checked in order (the first refusal answers
    under the name given), then the values are applied in order; if one fails to apply (a port that cannot be
    bound), those applied before it get their old values back and the error answers. Settings that take effect
    later (a shard setting stored for the whole shard, a switch of durability: Option.late) are applied after
    all the others, and their failure too restores the others."""
    if len(args) % 2:
        raise syntax_error()
    services = ctx.services
    config = services.config
    from ..config import BY_NAME, REFUSED
    chosen = []
    for i in range(2, len(args), 2):
        name = args[i].decode("utf-8", "replace").lower()
        value = args[i + 1].decode("utf-8", "replace")
        opt = BY_NAME.get(name)
        if opt is None:
            if name in REFUSED:
                raise CommandError(messages.CONFIG_BAD_VALUE.format(name, REFUSED[name]))
            raise CommandError(messages.CONFIG_UNKNOWN.format(name))
        if config.immutable(opt, value) if config is not None else not opt.mutable:
            raise CommandError(messages.CONFIG_IMMUTABLE.format(name))
        if any(seen is opt for _n, seen, _v in chosen):    # an alias counts as the same parameter
            raise CommandError(messages.CONFIG_BAD_VALUE.format(name, "duplicate parameter"))
        chosen.append((name, opt, value))
    for name, opt, value in chosen:
        try:
            parsed = opt.parse(value)
        except ValueError as exc:
            raise CommandError(messages.CONFIG_BAD_VALUE.format(name, exc)) from None
        problem = services.admin.validate_config_set(opt.name, parsed)
        if problem:
            raise CommandError(messages.CONFIG_BAD_VALUE.format(name, problem))
    # the values as CONFIG GET shows them now: what a failed apply puts back (restoreBackupConfig)
    old = {opt.name: config.formatted(opt.name) for _n, opt, _v in chosen} if config is not None else {}
    applied = []

    def restore():
        for opt_name in reversed(applied):
            if opt_name not in old:
                continue
            try:
                services.admin.config_set(opt_name, old[opt_name])
            except (ConfigError, ValueError) as exc:
                log.warning("Failed restoring failed CONFIG SET command. Error setting %s to '%s': %s",
                            opt_name, old[opt_name], exc)
        applied.clear()

    later = []
    for name, opt, value in sorted(chosen, key=lambda c: c[1].late):
        try:
            pending = services.admin.config_set(opt.name, value)
        except (ConfigError, ValueError) as exc:
            applied.append(opt.name)      # it may have stored its value before its effect failed
            restore()
            raise CommandError(messages.CONFIG_BAD_VALUE.format(name, exc)) from None
        if pending is None:
            applied.append(opt.name)
        else:
            later.append(pending)
    if not later:
        return OK
    # Shard settings and durability switches answer once they hold (on a primary: for every later write).
    done = Deferred()
    remaining = [len(later)]
    errors = []

    def one_done(d):
        if isinstance(d.reply, ErrorReply):
            errors.append(d.reply)
        remaining[0] -= 1
        if not remaining[0]:
            if errors:
                restore()
            done.resolve(errors[0] if errors else OK)
    for d in later:
        d.listen(lambda d=d: one_done(d))
    return done


@command("config|resetstat")
def config_resetstat(ctx, args):
    ctx.pipeline.reset_stats()
    ctx.keyspace.hits = ctx.keyspace.misses = 0
    for c in registry.every_command():
        c.calls = c.usec = c.rejected_calls = c.failed_calls = 0
        c.latency = [0] * 64
    ctx.services.admin.reset_stats()
    ctx.keyspace.expired_keys = ctx.keyspace.evicted_keys = 0
    ctx.keyspace.expired_time_cap_reached = ctx.keyspace.dump_payload_sanitizations = 0
    return OK


@command("config|rewrite")
def config_rewrite(ctx, args):
    try:
        ctx.services.admin.rewrite_config()
    except ConfigError as exc:
        raise CommandError("ERR " + str(exc)) from None
    except OSError as exc:
        where = " (%s)" % exc.filename if exc.filename else ""    # which file the disk refused
        raise CommandError(messages.CONFIG_REWRITE_FAILED.format("%s%s" % (exc.strerror, where))) from None
    return OK


@command("config|help")
def config_help(ctx, args):
    return [b"CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            b"GET <pattern>", b"    Return parameters matching the glob-like <pattern> and their values.",
            b"SET <directive> <value>", b"    Set the configuration <directive> to <value>.",
            b"RESETSTAT", b"    Reset statistics reported by the INFO command.",
            b"REWRITE", b"    Rewrite the configuration file.", b"HELP", b"    Print this help."]


# -- INFO, DBSIZE, TIME -------------------------------------------------------------------------

_KEYSPACE_SECTIONS = {b"keyspace", b"default", b"all", b"everything",
                      # the module sections that count data (INFO json: valkey-json's documents and their bytes)
                      b"modules", b"json", b"json_core_metrics"}


def _info_reads(args):
    """INFO's keyspace section counts keys; the other sections are about the process (INFO durability must
    answer while a commit is stalled: it is how an operator sees the stall)."""
    if len(args) < 2:
        return READS_ALL
    return READS_ALL if any(a.lower() in _KEYSPACE_SECTIONS for a in args[1:]) else None


@command("info", reads_data=_info_reads)
def info(ctx, args):
    return ctx.services.admin.info([a.decode("utf-8", "replace") for a in args[1:]])


@command("dbsize")
def dbsize(ctx, args):
    return len(ctx.db.data)


@command("time")
def time_(ctx, args):
    state = ctx.scripting
    run = state.current if state is not None else None
    if run is not None and run.session is ctx.client:
        now_us = run.time_us            # a script sees the time it started at (server.ustime is cached)
    else:
        now_us = int(time.time() * 1e6)
    secs, usecs = divmod(now_us, 1_000_000)
    return [b"%d" % secs, b"%d" % usecs]


@command("sync", reads_data=READS_EXPORT)
def sync(ctx, args):
    # Valkey's replication stream, for tools and tests that read what commands propagate (server/replfeed.py)
    return ctx.services.replication.attach_stream(ctx.client)


@command("psync", reads_data=READS_EXPORT)
def psync(ctx, args):
    """A replica that asks to continue (PSYNC replid offset) gets what Valkey's primary gives one that cannot:
    +FULLRESYNC <replid> <offset>, then the RDB file and the stream SYNC gives (durakv keeps no backlog)."""
    parse_int(args[2])      # Valkey reads the offset as a long long first
    replid, offset = ctx.services.replication.full_resync_id()
    return ctx.services.replication.attach_stream(ctx.client, preamble=b"+FULLRESYNC %s %d\r\n" % (replid, offset),
                                              partial_asked=not args[1].startswith(b"?"))


@command("failover")
def failover(ctx, args):
    """failoverCommand's grammar and checks. A standalone durakv has no replica it could hand the primary role
    to (SYNC clients follow a stream; they do not take over), so past the argument checks the answer is the one
    Valkey gives with no replica connected; a JetStream shard's failover is `CLUSTER FAILOVER` on a replica."""
    if ctx.services.cluster.routing() is not None:
        raise CommandError(messages.FAILOVER_IN_CLUSTER)
    n = len(args)
    if n == 2 and args[1].lower() == b"abort":
        raise CommandError(messages.FAILOVER_NOT_IN_PROGRESS)
    timeout_ms, force, host = 0, False, None
    c = ArgCursor(args, 1)
    while c:
        opt = c.next_lower()
        if opt == b"timeout" and c.left() >= 1 and timeout_ms == 0:
            timeout_ms = c.int()
            if timeout_ms <= 0:
                raise CommandError(messages.FAILOVER_BAD_TIMEOUT)
        elif opt == b"to" and c.left() >= 2 and host is None:
            host = c.next()
            c.int()                       # the port: an integer, as Valkey checks it
        elif opt == b"force" and not force:
            force = True
        else:
            raise syntax_error()
    if ctx.services.replication.status()["role"] == "replica":
        raise CommandError(messages.FAILOVER_ON_REPLICA)
    raise CommandError(messages.FAILOVER_NO_REPLICAS)


@command("replconf")
def replconf(ctx, args):
    """replconfCommand's options for what a SYNC client gets (redis-cli --rdb / --functions-rdb use them). As
    Valkey: the arguments come in option/value pairs (an even count is a syntax error, checked first), and
    ACK / GETACK end the command with no reply at all: a replica's offset report (a Valkey replica of durakv
    sends one a second) and a primary's request for one, which durakv's replicas (they follow the journal)
    never send. rdb-channel is dual-channel replication's, which durakv does not offer (its capa is ignored)."""
    n = len(args)
    if n % 2 == 0:
        raise syntax_error()
    s = ctx.client
    for j in range(1, n, 2):
        opt, value = args[j].lower(), args[j + 1]
        if opt in (b"ack", b"getack"):
            return NO_REPLY
        if opt == b"listening-port":
            s.repl_listening_port = parse_int(value)
        elif opt == b"ip-address":
            if len(value) >= 46:
                raise CommandError(messages.REPLCONF_IP_TOO_LONG
                                   % len(value))
        elif opt == b"capa":
            pass                                 # capabilities this server does not use are ignored
        elif opt == b"rdb-only":
            flag = parse_int(value)
            if not 0 <= flag <= 1:
                raise CommandError(messages.VALUE_MUST_BETWEEN.format(0, 1))
            s.repl_rdb_only = flag == 1
        elif opt == b"rdb-filter-only":
            filters = split_args(value)
            if filters is None:
                raise CommandError(messages.REPLCONF_FILTER_MISSING)
            s.repl_rdb_data = s.repl_rdb_functions = False
            for f in filters:
                if f.lower() != b"functions":
                    raise CommandError(messages.REPLCONF_FILTER_UNSUPPORTED % f.decode("utf-8", "replace"))
                s.repl_rdb_functions = True
        elif opt == b"version":
            if not re.fullmatch(rb"\d+\.\d+\.\d+", value):
                raise CommandError(messages.REPLCONF_VERSION_FORMAT % value.decode("utf-8", "replace"))
        elif opt == b"set-rdb-client-id":
            # the main channel of a dual-channel replica naming its RDB channel: durakv has none to find
            raise CommandError(messages.REPLCONF_UNKNOWN_RDB_CLIENT.format(parse_int(value)))
        else:
            raise CommandError(messages.REPLCONF_UNKNOWN_OPTION % args[j].decode("utf-8", "replace"))
    return OK


@command("lastsave")
def lastsave(ctx, args):
    return ctx.services.persistence.last_save()


# -- FLUSHDB / FLUSHALL -------------------------------------------------------------------------

def _flush_mode(args):
    if len(args) > 2:
        raise syntax_error()
    if len(args) == 2 and args[1].upper() not in (b"ASYNC", b"SYNC"):
        raise syntax_error()


def _flush_db(ctx, db):
    ctx.pipeline.touch_db_watched(db)       # before the keys are gone (touchAllWatchedKeysInDb)
    ks = ctx.keyspace
    if db.data:
        ks.used_bytes -= sum(estimate_key(k, v) for k, v in db.data.items())
    db.clear()


@command("flushdb")
def flushdb(ctx, args):
    _flush_mode(args)
    _flush_db(ctx, ctx.db)
    ctx.propagate(b"FLUSHDB")
    return OK


@command("flushall")
def flushall(ctx, args):
    _flush_mode(args)
    for db in ctx.keyspace.dbs:
        _flush_db(ctx, db)
    ctx.keyspace.used_bytes = ctx.keyspace.baseline_bytes
    ctx.propagate(b"FLUSHALL")
    return OK


# -- SAVE / BGSAVE / SHUTDOWN -------------------------------------------------------------------

@command("save")
def save(ctx, args):
    return ctx.services.persistence.start_snapshot()


@command("bgsave")
def bgsave(ctx, args):
    services = ctx.services
    if len(args) > 2 or (len(args) == 2 and args[1].upper() != b"SCHEDULE"):
        raise syntax_error()
    if services.persistence.snapshot_in_progress():
        if len(args) == 2:
            services.persistence.schedule_snapshot()
            return "Background saving scheduled"
        raise CommandError(messages.SAVE_IN_PROGRESS)
    services.persistence.start_snapshot()
    return "Background saving started"


@command("bgrewriteaof")
def bgrewriteaof(ctx, args):
    # Valkey compacts its AOF; durakv's journal is compacted by a snapshot (the journal before it is dropped)
    services = ctx.services
    if services.persistence.snapshot_in_progress():
        services.persistence.schedule_snapshot()    # the build under way holds less than what was asked for
        return "Background append only file rewriting scheduled"
    services.persistence.start_snapshot()
    return "Background append only file rewriting started"


@command("shutdown")
def shutdown(ctx, args):
    flags = set()
    for a in args[1:]:
        flag = a.upper()
        if flag not in (b"NOSAVE", b"SAVE", b"NOW", b"FORCE", b"ABORT"):
            raise syntax_error()
        flags.add(flag)
    # shutdownCommand's illegal combinations: SAVE with NOSAVE, ABORT with anything
    if {b"SAVE", b"NOSAVE"} <= flags or (b"ABORT" in flags and len(flags) > 1):
        raise syntax_error()
    if b"ABORT" in flags:
        raise CommandError(messages.SHUTDOWN_NONE_IN_PROGRESS)
    ctx.services.admin.shutdown()
    ctx.client.close_after_reply = True
    return NO_REPLY


# -- COMMAND ------------------------------------------------------------------------------------

_UPPER_KEY_FLAGS = {"ro", "rw", "ow", "rm"}


def key_flags_reply(flags):
    """addReplyFlagsForKeyArgs: the access kind upper-case (RO RW OW RM), the rest lower-case."""
    return RespSet(f.upper() if f in _UPPER_KEY_FLAGS else f for f in flags)


def _key_spec_reply(spec):
    bs, fk = spec["begin_search"], spec["find_keys"]
    if "index" in bs:
        bsr = {b"type": b"index", b"spec": {b"index": bs["index"]["pos"]}}
    elif "keyword" in bs:
        bsr = {b"type": b"keyword", b"spec": {b"keyword": bs["keyword"]["keyword"].encode(),
                                              b"startfrom": bs["keyword"]["startfrom"]}}
    else:
        bsr = {b"type": b"unknown", b"spec": {}}
    if "range" in fk:
        r = fk["range"]
        fkr = {b"type": b"range", b"spec": {b"lastkey": r["lastkey"], b"keystep": r["step"], b"limit": r["limit"]}}
    elif "keynum" in fk:
        k = fk["keynum"]
        fkr = {b"type": b"keynum", b"spec": {b"keynumidx": k["keynumidx"], b"firstkey": k["firstkey"],
                                             b"keystep": k["step"]}}
    else:
        fkr = {b"type": b"unknown", b"spec": {}}
    out = {b"notes": b""} if "notes" in spec else {}   # Valkey's note is prose: its place, not its text
    out.update({b"flags": key_flags_reply(spec["flags"]), b"begin_search": bsr, b"find_keys": fkr})
    return out


def legacy_range(cmd):
    """populateCommandLegacyRangeSpec: (first, last, step) as COMMAND reports them, and whether the
    command has keys that range cannot describe (the movablekeys flag)."""
    specs = cmd.key_specs
    if not specs:
        return (0, 0, 0), False

    def plain(sp):
        return "index" in sp["begin_search"] and "range" in sp["find_keys"]

    if len(specs) == 1 and plain(specs[0]):
        sp = specs[0]
        pos, lk = sp["begin_search"]["index"]["pos"], sp["find_keys"]["range"]["lastkey"]
        return (pos, lk + pos if lk >= 0 else lk, sp["find_keys"]["range"]["step"]), "incomplete" in sp["flags"]
    movable = False
    first, last, prev_last = None, 0, 0
    for sp in specs:
        if not plain(sp):
            movable = True
            continue
        pos = sp["begin_search"]["index"]["pos"]
        rng = sp["find_keys"]["range"]
        if rng["step"] != 1 or (prev_last and prev_last != pos - 1):
            movable = True
            continue
        if "incomplete" in sp["flags"]:
            movable = True
        first = pos if first is None else min(first, pos)
        lk = rng["lastkey"] + pos if rng["lastkey"] >= 0 else rng["lastkey"]
        # Valkey compares as unsigned: a negative (count from the end) lastkey wins.
        last = lk if (lk & 0xFFFFFFFF) > (last & 0xFFFFFFFF) else last
        prev_last = last
    if first is None:
        return (0, 0, 0), True
    return (first, last, 1), movable


def command_info(cmd):
    (first, last, step), movable = legacy_range(cmd)
    flags = [f for f in _FLAG_ORDER if f in cmd.flags or (f == "movablekeys" and movable)]
    # Flags and categories are status replies in Valkey (redis-cli asserts on that). The categories are the
    # declared ones plus those the flags imply (@write, @fast or @slow, ...), in the order of Valkey's category
    # table, as addReplyCommandCategories lists them.
    cats = effective_categories({"acl": cmd.acl, "flags": cmd.flags})
    return [cmd.display.encode(), cmd.arity, RespSet(flags), first, last, step,
            RespSet("@" + c for c in CATEGORIES if c in cats),
            RespSet(t.encode() for t in cmd.spec.get("tips", ())),
            RespSet(_key_spec_reply(s) for s in cmd.key_specs),   # a set in RESP3, as addReplyCommandKeySpecs
            [command_info(s) for s in cmd.subcommands.values() if s.handler is not None]]


# addReplyFlagsForCommand's table (Valkey 9), in its order; the flags it hides on purpose (may_replicate, sentinel,
# only_sentinel, protected, touches_arbitrary_keys) are not in it.
_FLAG_ORDER = ("write", "readonly", "denyoom", "module", "admin", "pubsub", "noscript", "blocking", "loading",
               "stale", "skip_monitor", "skip_commandlog", "asking", "fast", "no_auth", "no_mandatory_keys",
               "no_async_loading", "no_multi", "movablekeys", "allow_busy")


def _args_doc(arguments):
    """addReplyCommandArgList: each argument's fields in Valkey's order; free text (an argument's summary) is
    carried as an empty string where Valkey has one."""
    out = []
    for a in arguments:
        d = {b"name": a["name"].encode(), b"type": a["type"].encode()}
        if a["type"] not in ("oneof", "block"):
            d[b"display_text"] = a.get("display_text", a["name"]).encode()  # the name when not given
        if "key_spec_index" in a:
            d[b"key_spec_index"] = a["key_spec_index"]
        if "token" in a:
            d[b"token"] = a["token"].upper().encode()  # Valkey's generator upper-cases tokens
        if "summary" in a:
            d[b"summary"] = a["summary"].encode()
        if "since" in a:
            d[b"since"] = a["since"].encode()          # the release that added the argument (commandAddReplyArg)
        if "deprecated_since" in a:
            d[b"deprecated_since"] = a["deprecated_since"].encode()
        flags = [f for f in ("optional", "multiple", "multiple_token") if a.get(f)]
        if flags:
            d[b"flags"] = RespSet(flags)
        if "arguments" in a:
            d[b"arguments"] = _args_doc(a["arguments"])
        out.append(d)
    return out


def command_doc(cmd):
    """addReplyCommandDocs: Valkey's fields in its order. durakv carries facts, not Valkey's texts: the summary,
    the complexity and each history entry's change are empty strings (present where Valkey's are)."""
    spec = cmd.spec
    module = spec.get("module")
    if module is not None:
        # a module command: what its module told Valkey (valkey-json: nothing but arity and key specs)
        d = {b"group": b"module"}
    else:
        d = {b"summary": b"", b"since": spec.get("since", "").encode(), b"group": spec.get("group", "").encode()}
    if "complexity" in spec:
        d[b"complexity"] = spec["complexity"].encode()
    if module is not None:
        d[b"module"] = module.encode()
    if spec.get("doc_flags"):
        d[b"doc_flags"] = RespSet(spec["doc_flags"])
    for field in ("deprecated_since", "replaced_by"):
        if field in spec:
            d[field.encode()] = spec[field].encode()
    if "history" in spec:
        # a set of [version, change] in RESP3, as addReplyCommandHistory
        d[b"history"] = RespSet([version.encode(), change.encode()] for version, change in spec["history"])
    if spec.get("arguments"):
        d[b"arguments"] = _args_doc(spec["arguments"])
    subs = {s.display.encode(): command_doc(s) for s in cmd.subcommands.values() if s.handler is not None}
    if subs:
        d[b"subcommands"] = subs
    return d


# The whole-table replies (COMMAND, COMMAND INFO and COMMAND DOCS without names), encoded once per protocol: the
# command table does not change once the server runs, and building and encoding COMMAND's 295 entries took 5.6 ms
# of the loop per call (INFO commandstats), which every cluster client pays as it starts (valkey-py's
# ValkeyCluster, redis-py's RedisCluster) and a fleet of them pays at once after a failover. Keyed by the
# registry's generation too: a table that changed (a registration after the first call) is never answered from an
# old copy.
_WHOLE_TABLE = {}


def _whole_table(ctx, kind, build):
    key = (kind, ctx.resp3, registry.GENERATION)
    reply = _WHOLE_TABLE.get(key)
    if reply is None:
        reply = _WHOLE_TABLE[key] = Raw(encode(build(), ctx.resp3))
    return reply


def _all_info():
    return [command_info(c) for c in registry.implemented().values()]


@command("command")
def command_(ctx, args):
    return _whole_table(ctx, "info", _all_info)


@command("command|count")
def command_count(ctx, args):
    return len(registry.implemented())


@command("command|info")
def command_info_cmd(ctx, args):
    if len(args) == 2:
        return _whole_table(ctx, "info", _all_info)
    out = []
    for name in args[2:]:
        cmd = registry.find(name)
        out.append(command_info(cmd) if cmd is not None else None)
    return out


@command("command|docs")
def command_docs(ctx, args):
    if len(args) == 2:
        return _whole_table(ctx, "docs", lambda: _docs([c.name.encode() for c in registry.implemented().values()]))
    return _docs(args[2:])


def _docs(names):
    out = {}
    for name in names:
        cmd = registry.find(name)
        if cmd is not None:
            out[cmd.display.encode()] = command_doc(cmd)
    return out


def _all_commands():
    """Every implemented command, each followed by its implemented subcommands (Valkey's COMMAND LIST)."""
    for cmd in registry.implemented().values():
        if cmd.handler is not None or cmd.subcommands:
            yield cmd
        for sub in cmd.subcommands.values():
            if sub.handler is not None:
                yield sub


@command("command|list")
def command_list(ctx, args):
    kind = value = None
    c = ArgCursor(args, 2)
    while c:
        if c.next_lower() == b"filterby" and c.left() == 2:
            kind = c.next_lower()
            if kind not in (b"module", b"aclcat", b"pattern"):
                raise syntax_error()
            value = c.next()
        else:
            raise syntax_error()
    out = []
    for cmd in _all_commands():
        if kind == b"module":
            # the valkey-bundle modules durakv serves natively (commands/specs.py)
            if cmd.spec.get("module", "").encode().lower() != value.lower():
                continue
        if kind == b"aclcat" and value.lower().decode("utf-8", "replace") not in cmd.acl:
            continue
        if kind == b"pattern":
            from ..keyspace.glob import glob_match
            if not glob_match(value, cmd.display.encode(), nocase=True):
                continue
        out.append(cmd.display.encode())
    return out


# -- COMMAND GETKEYS: getKeysFromCommandWithSpecs (commands/keyspecs.py, the walker everything else uses)

def _getkeys(args):
    target = args[2:]
    cmd = registry.lookup(target)
    if cmd is None:
        raise CommandError(messages.GETKEYS_INVALID_COMMAND)
    if not keyspecs.has_keys(cmd):
        raise CommandError(messages.GETKEYS_NO_KEYS)
    n = len(target)
    if (cmd.arity > 0 and n != cmd.arity) or n < -cmd.arity:
        raise CommandError(messages.GETKEYS_BAD_ARITY)
    found = keyspecs.keys_with_flags(cmd, target)
    if not found and "no_mandatory_keys" not in cmd.flags:
        raise CommandError(messages.GETKEYS_BAD_ARGUMENTS)
    return target, found


@command("command|getkeys")
def command_getkeys(ctx, args):
    target, found = _getkeys(args)
    return [target[i] for i, _flags in found]


@command("command|getkeysandflags")
def command_getkeysandflags(ctx, args):
    target, found = _getkeys(args)
    return [[target[i], key_flags_reply(flags)] for i, flags in found]


@command("command|help")
def command_help(ctx, args):
    return [b"COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            b"(no subcommand)", b"    Return details about all commands.",
            b"COUNT", b"    Return the total number of commands in this server.",
            b"LIST", b"    Return a list of all commands in this server.",
            b"INFO [<command-name> ...]", b"    Return details about multiple commands.",
            b"DOCS [<command-name> ...]", b"    Return documentation details about multiple commands.",
            b"GETKEYS <full-command>", b"    Return the keys from a full command.",
            b"GETKEYSANDFLAGS <full-command>", b"    Return the keys and the access flags from a full command.",
            b"HELP", b"    Print this help."]


# -- SWAPDB / ROLE ------------------------------------------------------------------------------

@command("swapdb")
def swapdb(ctx, args):
    if ctx.services.cluster.routing() is not None:
        raise CommandError(messages.SWAPDB_IN_CLUSTER)
    dbs = ctx.keyspace.dbs
    try:
        a = parse_int(args[1], messages.SWAPDB_FIRST_INDEX)
        b = parse_int(args[2], messages.SWAPDB_SECOND_INDEX)
    except CommandError:
        raise
    if not (0 <= a < len(dbs)) or not (0 <= b < len(dbs)):
        raise CommandError(messages.DB_INDEX_OUT_OF_RANGE)
    if a != b:
        # Swap the contents, not the Db objects: every client context keeps pointing at "db a".
        da, db_ = dbs[a], dbs[b]
        ctx.pipeline.touch_db_watched(da, db_)
        ctx.pipeline.touch_db_watched(db_, da)
        for field in ("data", "expires", "expiry_heap", "enc", "slots", "hexpires", "hexpiry_heap", "hexpiry_mark"):
            va, vb = getattr(da, field), getattr(db_, field)
            setattr(da, field, vb)
            setattr(db_, field, va)
    ctx.propagate(b"SWAPDB", b"%d" % a, b"%d" % b)
    return OK


@command("replicaof")
def replicaof(ctx, args):
    if args[1].lower() == b"no" and args[2].lower() == b"one":
        ctx.services.replication.replicaof(None, 0)
        return OK
    if ctx.client.from_primary:
        raise CommandError(messages.NOT_VALID_FOR_REPLICA_CLIENT)
    port = parse_int(args[2], messages.REPLICAOF_INVALID_PORT)
    if not 0 <= port <= 65535:
        raise CommandError(messages.REPLICAOF_INVALID_PORT)
    if not ctx.services.replication.replicaof(args[1].decode("utf-8", "replace"), port):
        return Raw(b"+OK Already connected to specified master\r\n")
    return OK


@command("slaveof")
def slaveof(ctx, args):
    return replicaof(ctx, args)


@command("role")
def role(ctx, args):
    r = ctx.services.replication.status()
    if r["role"] == "replica":
        return [b"slave", r["primary_host"].encode(), r["primary_port"], r.get("state", "connected").encode(),
                r["offset"]]
    return [b"master", r["offset"], [[h.encode(), b"%d" % p, b"%d" % o] for h, p, o in r["replicas"]]]


# -- MODULE ---------------------------------------------------------------------------------------
# durakv loads no Valkey modules (they are C extensions of Valkey's own process): LIST shows the valkey-bundle
# modules durakv serves natively (commands/specs.py MODULES, as Valkey lists them), and LOAD fails the way a
# Valkey that cannot load the library does, with the reason in the server log.

@command("module|help")
def module_help(ctx, args):
    return ["MODULE <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "LIST", "    Return a list of loaded modules.",
            "LOAD <path> [<arg> ...]",
            "    Load a module library from <path>, passing to it any optional arguments.",
            "LOADEX <path> [[CONFIG NAME VALUE] [CONFIG NAME VALUE]] [ARGS ...]",
            "    Load a module library from <path>, while passing it module configurations and optional arguments.",
            "UNLOAD <name>", "    Unload a module.",
            "HELP", "    Print this help."]


@command("module|list")
def module_list(ctx, args):
    return [{b"name": m["name"].encode(), b"ver": m["ver"], b"path": m["path"].encode(),
             b"args": [a.encode() for a in m["args"]]} for m in MODULES]


def _module_load(ctx, args):
    import logging
    logging.getLogger("durakv.server").warning(
        "Module %s failed to load: durakv does not load Valkey modules", args[2].decode("utf-8", "replace"))
    raise CommandError(messages.MODULE_LOAD_FAILED)


command("module|load")(_module_load)
command("module|loadex")(_module_load)


@command("module|unload")
def module_unload(ctx, args):
    raise CommandError(messages.MODULE_UNLOAD_NO_SUCH)
