"""Server commands: CONFIG INFO DBSIZE FLUSHDB FLUSHALL TIME SAVE BGSAVE LASTSAVE SHUTDOWN DEBUG COMMAND."""

import time

from .. import messages
from ..errors import CommandError, ConfigError
from ..keyspace.db import estimate_key
from ..protocol.resp import OK, Raw, RespSet
from . import registry
from .base import parse_int, syntax_error
from .registry import command

NO_REPLY = Raw(b"")


# -- CONFIG -------------------------------------------------------------------------------------

@command("config|get")
def config_get(ctx, args):
    out = {}
    for pattern in args[2:]:
        for name, value in ctx.server.config.matching(pattern.decode("utf-8", "replace")).items():
            out[name.encode()] = value.encode()
    return out


@command("config|set")
def config_set(ctx, args):
    if len(args) % 2 != 0:
        raise CommandError(messages.WRONG_ARITY.format("config|set"))
    cfg = ctx.server.config
    from ..config import BY_NAME
    pairs = []
    for i in range(2, len(args), 2):
        name = args[i].decode("utf-8", "replace").lower()
        opt = BY_NAME.get(name)
        if opt is None:
            raise CommandError(messages.CONFIG_UNKNOWN.format(name))
        if not opt.mutable:
            raise CommandError(messages.CONFIG_IMMUTABLE.format(name))
        value = args[i + 1].decode("utf-8", "replace")
        try:
            opt.parse(value)
        except ValueError as exc:
            raise CommandError(messages.CONFIG_BAD_VALUE.format(name, exc)) from None
        problem = ctx.server.validate_config_set(opt.name, opt.parse(value))
        if problem:
            raise CommandError(messages.CONFIG_BAD_VALUE.format(name, problem))
        pairs.append((name, value))
    for name, value in pairs:
        try:
            cfg.set(name, value)
        except (ConfigError, ValueError) as exc:
            raise CommandError(messages.CONFIG_BAD_VALUE.format(name, exc)) from None
    return OK


@command("config|resetstat")
def config_resetstat(ctx, args):
    d = ctx.dispatcher
    d.total_errors = 0
    d.error_counts.clear()
    d.keyspace_hits = d.keyspace_misses = 0
    for cmd in registry.TABLE.values():
        for c in [cmd] + list(cmd.subcommands.values()):
            c.calls = c.usec = c.rejected_calls = c.failed_calls = 0
    srv = ctx.server
    srv.total_connections = srv.rejected_connections = 0
    ctx.keyspace.expired_keys = ctx.keyspace.evicted_keys = 0
    return OK


@command("config|rewrite")
def config_rewrite(ctx, args):
    try:
        ctx.server.config.rewrite()
    except ConfigError as exc:
        raise CommandError("ERR " + str(exc)) from None
    except OSError as exc:
        raise CommandError("ERR Rewriting config file: %s" % exc.strerror) from None
    return OK


@command("config|help")
def config_help(ctx, args):
    return [b"CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            b"GET <pattern>", b"    Return parameters matching the glob-like <pattern> and their values.",
            b"SET <directive> <value>", b"    Set the configuration <directive> to <value>.",
            b"RESETSTAT", b"    Reset statistics reported by the INFO command.",
            b"REWRITE", b"    Rewrite the configuration file.", b"HELP", b"    Print this help."]


# -- INFO, DBSIZE, TIME -------------------------------------------------------------------------

@command("info")
def info(ctx, args):
    return ctx.server.info([a.decode("utf-8", "replace") for a in args[1:]])


@command("dbsize")
def dbsize(ctx, args):
    return len(ctx.db.data)


@command("time")
def time_(ctx, args):
    now = time.time()
    secs = int(now)
    return [b"%d" % secs, b"%d" % int((now - secs) * 1e6)]


@command("lastsave")
def lastsave(ctx, args):
    return ctx.server.lastsave


# -- FLUSHDB / FLUSHALL -------------------------------------------------------------------------

def _flush_mode(args):
    if len(args) > 2:
        raise syntax_error()
    if len(args) == 2 and args[1].upper() not in (b"ASYNC", b"SYNC"):
        raise syntax_error()


def _flush_db(ctx, db):
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
    ctx.keyspace.used_bytes = 0
    ctx.propagate(b"FLUSHALL")
    return OK


# -- SAVE / BGSAVE / SHUTDOWN -------------------------------------------------------------------

@command("save")
def save(ctx, args):
    return ctx.server.start_snapshot()


@command("bgsave")
def bgsave(ctx, args):
    srv = ctx.server
    if len(args) > 2 or (len(args) == 2 and args[1].upper() != b"SCHEDULE"):
        raise syntax_error()
    if srv.snapshot_in_progress is not None:
        if len(args) == 2:
            return "Background saving scheduled"
        raise CommandError(messages.SAVE_IN_PROGRESS)
    srv.start_snapshot()
    return "Background saving started"


@command("shutdown")
def shutdown(ctx, args):
    for a in args[1:]:
        if a.upper() not in (b"NOSAVE", b"SAVE", b"NOW", b"FORCE", b"ABORT"):
            raise syntax_error()
    if any(a.upper() == b"ABORT" for a in args[1:]):
        raise CommandError("ERR No shutdown in progress.")
    ctx.server.request_shutdown()
    ctx.client.close_after_reply = True
    return NO_REPLY


# -- COMMAND ------------------------------------------------------------------------------------

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
    return {b"flags": RespSet(f.upper() for f in spec["flags"]), b"begin_search": bsr,
            b"find_keys": fkr}


def _legacy_range(cmd):
    """first, last, step as COMMAND reports them (from the key specs)."""
    if not cmd.key_specs:
        return 0, 0, 0
    s = cmd.simple_keys
    if s is not None:
        first, last, step = s
        return first, last, step
    first = None
    for spec in cmd.key_specs:
        if "index" in spec["begin_search"]:
            first = spec["begin_search"]["index"]["pos"] if first is None else first
    return (first or 0), -1, 1


def command_info(cmd):
    first, last, step = _legacy_range(cmd)
    # Flags and categories are status replies in Valkey (redis-cli asserts on that).
    return [cmd.fullname.encode(), cmd.arity, RespSet(sorted(cmd.flags)), first, last, step,
            RespSet("@" + a for a in cmd.acl), RespSet(),
            [_key_spec_reply(s) for s in cmd.key_specs],
            [command_info(s) for s in cmd.subcommands.values() if s.handler is not None]]


def _args_doc(arguments):
    out = []
    for a in arguments:
        d = {b"name": a["name"].encode(), b"type": a["type"].encode()}
        if "display_text" in a:
            d[b"display_text"] = a["display_text"].encode()
        if "key_spec_index" in a:
            d[b"key_spec_index"] = a["key_spec_index"]
        if "token" in a:
            d[b"token"] = a["token"].encode()
        flags = [f for f in ("optional", "multiple", "multiple_token") if a.get(f)]
        if flags:
            d[b"flags"] = RespSet(flags)
        if "arguments" in a:
            d[b"arguments"] = _args_doc(a["arguments"])
        out.append(d)
    return out


def command_doc(cmd):
    spec = cmd.spec
    d = {b"summary": b"", b"since": spec.get("since", "").encode(), b"group": spec.get("group", "").encode()}
    if spec.get("doc_flags"):
        d[b"doc_flags"] = RespSet(spec["doc_flags"])
    if spec.get("arguments"):
        d[b"arguments"] = _args_doc(spec["arguments"])
    subs = {s.fullname.encode(): command_doc(s) for s in cmd.subcommands.values() if s.handler is not None}
    if subs:
        d[b"subcommands"] = subs
    return d


def _find(name: bytes):
    parts = name.lower().split(b"|")
    cmd = registry.TABLE.get(parts[0])
    if cmd is None or (cmd.handler is None and not cmd.subcommands):
        return None
    if len(parts) == 2:
        sub = cmd.subcommands.get(parts[1])
        return sub if sub is not None and sub.handler is not None else None
    return cmd


@command("command")
def command_(ctx, args):
    return [command_info(c) for c in registry.implemented().values()]


@command("command|count")
def command_count(ctx, args):
    return len(registry.implemented())


@command("command|info")
def command_info_cmd(ctx, args):
    if len(args) == 2:
        return [command_info(c) for c in registry.implemented().values()]
    out = []
    for name in args[2:]:
        cmd = _find(name)
        out.append(command_info(cmd) if cmd is not None else None)
    return out


@command("command|docs")
def command_docs(ctx, args):
    names = args[2:] or [c.name.encode() for c in registry.implemented().values()]
    out = {}
    for name in names:
        cmd = _find(name)
        if cmd is not None:
            out[cmd.fullname.encode()] = command_doc(cmd)
    return out


@command("command|list")
def command_list(ctx, args):
    cmds = list(registry.implemented().values())
    if len(args) > 2:
        if len(args) != 5 or args[2].upper() != b"FILTERBY":
            raise syntax_error()
        kind, value = args[3].upper(), args[4]
        if kind == b"ACLCAT":
            cat = value.lower().lstrip(b"@").decode()
            cmds = [c for c in cmds if cat in c.acl]
        elif kind == b"PATTERN":
            from ..keyspace.glob import glob_match
            cmds = [c for c in cmds if glob_match(value.lower(), c.name.encode(), nocase=True)]
        elif kind == b"MODULE":
            cmds = []
        else:
            raise syntax_error()
    return [c.name.encode() for c in cmds]


def _getkeys(args):
    if len(args) < 3:
        raise CommandError(messages.WRONG_ARITY.format("command|getkeys"))
    target = args[2:]
    cmd = registry.TABLE.get(target[0].lower())
    if cmd is None or (cmd.handler is None and not cmd.subcommands):
        raise CommandError("ERR Invalid command specified")
    if cmd.subcommands and len(target) > 1:
        cmd = cmd.subcommands.get(target[1].lower(), cmd)
    n = len(target)
    if (cmd.arity > 0 and n != cmd.arity) or n < -cmd.arity:
        raise CommandError("ERR Invalid number of arguments specified for command")
    idx = cmd.key_indexes(target)
    if not idx:
        raise CommandError("ERR The command has no key arguments")
    return cmd, target, idx


@command("command|getkeys")
def command_getkeys(ctx, args):
    _cmd, target, idx = _getkeys(args)
    return [target[i] for i in idx]


@command("command|getkeysandflags")
def command_getkeysandflags(ctx, args):
    cmd, target, idx = _getkeys(args)
    flags = RespSet(f.upper() for f in cmd.key_specs[0]["flags"]) if cmd.key_specs else RespSet()
    return [[target[i], flags] for i in idx]


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
    dbs = ctx.keyspace.dbs
    try:
        a = parse_int(args[1], "ERR invalid first DB index")
        b = parse_int(args[2], "ERR invalid second DB index")
    except CommandError:
        raise
    if not (0 <= a < len(dbs)) or not (0 <= b < len(dbs)):
        raise CommandError(messages.DB_INDEX_OUT_OF_RANGE)
    if a != b:
        # Swap the contents, not the Db objects: every client context keeps pointing at "db a".
        da, db_ = dbs[a], dbs[b]
        for field in ("data", "expires", "access", "expiry_heap", "_sample", "_sample_misses", "enc"):
            va, vb = getattr(da, field), getattr(db_, field)
            setattr(da, field, vb)
            setattr(db_, field, va)
    ctx.propagate(b"SWAPDB", b"%d" % a, b"%d" % b)
    return OK


@command("role")
def role(ctx, args):
    srv = ctx.server
    node = getattr(srv, "cluster_node", None) if srv is not None else None
    if node is not None and node.role == "replica":
        c = node.controller
        host, _, port = ((c.primary_addr if c else None) or ":0").rpartition(":")
        return [b"slave", host.encode(), int(port or 0), b"connected", node.applied_index]
    offset = node.applied_index if node is not None else (srv.tracker.committed if srv and srv.tracker else 0)
    return [b"master", offset, []]
