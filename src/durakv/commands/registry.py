"""The command table: one entry per command, built from declarations plus Valkey's facts (spec.py).

A family module declares a handler with `@command("name")` (or "container|sub" for a subcommand).
Arity, flags, ACL categories and key specs come from the generated Valkey facts unless the
declaration overrides them, so COMMAND INFO/DOCS and key extraction always agree with dispatch.
"""

from . import keyspecs
from .specs import SPEC


class Command:
    __slots__ = ("name", "fullname", "display", "handler", "arity", "flags", "acl", "key_specs", "spec",
                 "subcommands", "parent", "write", "readonly", "denyoom", "admin", "noscript",
                 "no_auth", "no_multi", "loading", "stale", "pubsub", "blocking",
                 "calls", "usec", "rejected_calls", "failed_calls", "id", "keyless", "fixed_keys", "key_finder",
                 "may_replicate", "allow_busy", "skip_monitor", "skip_slowlog", "calls_commands",
                 "touches_data", "sees_all", "multi_immediate", "queue_flags_fn", "keys_incomplete",
                 "argc_min", "argc_max", "changes_protocol", "latency", "protected", "prepare_off_loop", "core",
                 "subscribed_ok", "sharded_pubsub", "keeps_caching", "reads_data",
                 "changes_keys")

    def __init__(self, fullname, spec, handler=None, parent=None):
        self.fullname = fullname
        self.name = fullname.split("|")[-1]
        # The name replies show: a module command's as its module declares it ("JSON.SET"), else fullname
        self.display = spec.get("display", fullname)
        self.spec = spec
        self.handler = handler
        self.parent = parent
        self.arity = spec["arity"]
        self.flags = frozenset(spec["flags"])
        self.acl = spec.get("acl", [])
        self.key_specs = spec.get("key_specs", [])
        self.subcommands = {}
        # Scripts: (pipeline, args) -> (write, may_replicate, denyoom) from the script's own flags
        # (Valkey's getCommandFlags for EVAL/FCALL), or None to use the static flags.
        self.queue_flags_fn = None
        # (argument index, min bytes, fn(argument, clock_ms)): an argument that long is prepared (RESTORE's
        # payload decoded) on a worker thread before the command runs (`command(prepare_off_loop=...)`)
        self.prepare_off_loop = None
        # The compiled core (fastpath/_core.c) may run it: @command(..., core=True). The core takes these, with
        # their names and arities, from this table (fastpath.batch_core) and refuses one it does not implement.
        self.core = False
        # A command with neither the readonly nor the write flag whose reply is still derived from the data
        # (INFO keyspace, DEBUG DIGEST, SYNC's RDB): what it reads, so that the reply waits for those writes'
        # commit. READS_ALL (the whole keyspace), READS_EXPORT (the whole dataset leaves the process), or
        # fn(args) answering one of those, a list of keys, or None when these args read nothing.
        self.reads_data = None
        self._set_flags()
        self.calls = self.usec = self.rejected_calls = self.failed_calls = 0
        # LATENCY HISTOGRAM: calls per power-of-two microsecond bucket (index = usec.bit_length()).
        self.latency = [0] * 64

    def _set_flags(self):
        f = self.flags
        # Arity as a range, so the hot path checks it with one chained comparison.
        self.argc_min = self.arity if self.arity > 0 else -self.arity
        self.argc_max = self.arity if self.arity > 0 else 1 << 30
        self.write = "write" in f
        self.readonly = "readonly" in f
        self.denyoom = "denyoom" in f
        self.admin = "admin" in f
        self.noscript = "noscript" in f
        self.no_auth = "no_auth" in f
        self.no_multi = "no_multi" in f
        self.loading = "loading" in f
        self.stale = "stale" in f
        self.pubsub = "pubsub" in f
        self.blocking = "blocking" in f
        self.may_replicate = self.write or "may_replicate" in f
        self.allow_busy = "allow_busy" in f
        self.skip_monitor = "skip_monitor" in f or self.admin
        # Valkey 9's CMD_SKIP_COMMANDLOG (8.0's skip_slowlog): kept out of every command log. The attribute keeps
        # its old name, which the compiled core (fastpath/_core.c) reads.
        self.skip_slowlog = "skip_commandlog" in f
        top = self.fullname.split("|")[0]
        # EXEC and scripts run other commands through the pipeline: their keys, effects and checks are
        # those of the commands they run.
        self.calls_commands = top in _CALLS_COMMANDS
        # What a primary must not answer without a valid lease: anything that reads or writes data.
        self.touches_data = self.write or self.readonly or self.calls_commands
        # Runs immediately even inside MULTI (processCommand's list).
        self.multi_immediate = top in _MULTI_IMMEDIATE
        # Valkey's CMD_PROTECTED commands it gates by a config (processCommand): DEBUG by enable-debug-command,
        # MODULE LOAD/LOADEX/UNLOAD by enable-module-command. (name in the refusal, option) or None.
        self.protected = _PROTECTED_BY.get(top) if "protected" in f else None
        # The reply protocol may differ after it: the connection re-reads the session's RESP version.
        self.changes_protocol = top in ("hello", "reset")
        # Allowed to a RESP2 client in subscribed mode (processCommand's list); any other gets PUBSUB_CONTEXT.
        self.subscribed_ok = top in _SUBSCRIBED_CONTEXT
        # Sharded pub/sub: its channels route by slot as keys do (cluster mode's redirections).
        self.sharded_pubsub = top in _SHARDED_PUBSUB
        # CLIENT CACHING yes applies to the next command that is not a CLIENT command (Valkey's call()).
        self.keeps_caching = top == "client"
        # The commonest shape of all (GET, SET, HSET, ...): keys at positions known in advance, taken as they
        # are once args reach the last of them; every other shape is walked by commands/keyspecs.py.
        self.key_finder = keyspecs.finder(self, not_keys=True)
        self.fixed_keys = self.key_finder.fixed_positions
        self.keyless = not self.key_specs
        # A write may change keys: one with keys, or a keyless one that changes many at once (FLUSHALL,
        # SWAPDB, CLUSTER FLUSHSLOT). FT.CREATE, FUNCTION LOAD, PUBLISH, CLUSTER SETSLOT change none: search
        # indexes need not re-read the keyspace after them.
        self.changes_keys = not self.keyless or self.fullname in _CHANGES_MANY_KEYS
        # Key specs that cannot name every key (SORT ... STORE, MIGRATE ... KEYS).
        self.keys_incomplete = any("unknown" in s["begin_search"] or "unknown" in s["find_keys"]
                                   or "incomplete" in s.get("flags", ()) for s in self.key_specs)
        # A read that sees the whole keyspace (KEYS, SCAN, DBSIZE, EXEC, scripts): in sync mode it waits for
        # every write issued before it, not only for writes of its keys.
        self.sees_all = self.calls_commands or (self.keyless and (self.readonly or self.write))

    def key_indexes(self, args):
        """Positions of the keys in args (args[0] is the command name): Valkey's getKeysFromCommandWithSpecs,
        counting sharded channels (not_key specs) as keys, since they route by slot as keys do."""
        fixed = self.fixed_keys
        if fixed is not None and len(args) > fixed[-1]:
            return fixed
        return self.key_finder.positions(args)

    def keys(self, args):
        return [args[i] for i in self.key_indexes(args)]


_CALLS_COMMANDS = {"exec", "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"}
_MULTI_IMMEDIATE = {"exec", "discard", "multi", "watch", "quit", "reset"}
_SUBSCRIBED_CONTEXT = {"ping", "subscribe", "ssubscribe", "unsubscribe", "sunsubscribe", "psubscribe",
                       "punsubscribe", "quit", "reset"}
_SHARDED_PUBSUB = {"spublish", "ssubscribe", "sunsubscribe"}
_CHANGES_MANY_KEYS = {"flushall", "flushdb", "swapdb", "cluster|flushslot"}
_PROTECTED_BY = {"debug": ("DEBUG", "enable-debug-command"), "module": ("MODULE", "enable-module-command")}

READS_ALL = "all"
READS_EXPORT = "export"

TABLE = {}  # lowercase bytes name -> Command
GENERATION = 0  # bumped by every registration: what a reply computed from the whole table is valid for


def _entry(fullname):
    parts = fullname.split("|")
    top = parts[0]
    spec = SPEC.get(top)
    if spec is None:
        raise KeyError(f"no Valkey spec for {top}")
    key = top.encode()
    cmd = TABLE.get(key)
    if cmd is None:
        cmd = TABLE[key] = Command(top, spec)
    if len(parts) == 1:
        return cmd
    sub_spec = spec.get("subcommands", {}).get(parts[1])
    if sub_spec is None:
        raise KeyError(f"no Valkey spec for {fullname}")
    sub = cmd.subcommands.get(parts[1].encode())
    if sub is None:
        sub = cmd.subcommands[parts[1].encode()] = Command(fullname, sub_spec, parent=cmd)
    return sub


# The commands that declare prepare_off_loop, and the one argument position and the least length that the read
# path tests before it looks any of them up (server/connection.py): a request whose argument there is shorter
# costs two length tests, whatever its command.
OFF_LOOP = {}                 # lowercase bytes name -> Command
OFF_LOOP_ARG = 0
OFF_LOOP_MIN_BYTES = 1 << 62


def command(fullname: str, *, flags=None, arity=None, extra_flags=(), prepare_off_loop=None, core=False,
            reads_data=None):
    """Declare `fn(ctx, args) -> reply` as the handler of a command (or 'container|sub'). prepare_off_loop:
    (argument index, min bytes, fn(argument, clock_ms)) -> what the handler finds in ctx.client.decoded, a
    value or an exception: a long argument the connection has a worker thread prepare while it waits, so that
    the loop keeps serving others (RESTORE's payload). Every declaration names the same argument index.
    core=True: the compiled core may run it too (its implementation is proven equal to fn by
    tests/server/test_fastpath_differential.py). reads_data: what a command with neither the readonly nor the write
    flag reads (Command.reads_data)."""
    def register(fn):
        global OFF_LOOP_ARG, OFF_LOOP_MIN_BYTES, GENERATION
        GENERATION += 1
        cmd = _entry(fullname.lower())
        cmd.handler = fn
        if prepare_off_loop is not None:
            index, min_bytes, _prepare = prepare_off_loop
            if OFF_LOOP and index != OFF_LOOP_ARG:
                raise ValueError(f"{fullname}: prepare_off_loop names argument {index}, others {OFF_LOOP_ARG}")
            cmd.prepare_off_loop = prepare_off_loop
            OFF_LOOP[cmd.name.encode()] = cmd
            OFF_LOOP_ARG = index
            OFF_LOOP_MIN_BYTES = min(OFF_LOOP_MIN_BYTES, min_bytes)
        cmd.core = core
        cmd.reads_data = reads_data
        if flags is not None or extra_flags:
            cmd.flags = frozenset(flags if flags is not None else cmd.flags) | frozenset(extra_flags)
            cmd._set_flags()
        if arity is not None:
            cmd.arity = arity
            cmd._set_flags()
        return fn
    return register


def lookup(args):
    """lookupCommand: the implemented Command args name, descending into a subcommand when the command has
    subcommands and args a second argument; None if unknown (a container named alone is itself)."""
    cmd = TABLE.get(args[0].lower())
    if cmd is None or cmd.handler is None and not cmd.subcommands:
        return None
    if cmd.subcommands and len(args) > 1:
        sub = cmd.subcommands.get(args[1].lower())
        return sub if sub is not None and sub.handler is not None else None
    return cmd


def find(name: bytes):
    """lookupCommandBySds: the implemented Command named 'name' or 'container|sub' (any case), or None; one
    level of subcommands only, so 'a|b|c' is unknown."""
    parts = name.lower().split(b"|")
    if len(parts) > 2:
        return None
    cmd = TABLE.get(parts[0])
    if cmd is None or cmd.handler is None and not cmd.subcommands:
        return None
    if len(parts) == 2:
        sub = cmd.subcommands.get(parts[1])
        return sub if sub is not None and sub.handler is not None else None
    return cmd


_FLAT = (None, ())


def every_command() -> tuple:
    """Every command of the table, each followed by its subcommands (the order INFO commandstats lists them in),
    made once per registry generation: INFO sums and lists the counters of all of them on every call."""
    global _FLAT
    generation, flat = _FLAT
    if generation != GENERATION:
        flat = tuple(c for cmd in TABLE.values() for c in (cmd, *cmd.subcommands.values()))
        _FLAT = (GENERATION, flat)
    return flat


def implemented():
    """Commands (top-level) that have a handler or at least one implemented subcommand."""
    return {name: cmd for name, cmd in TABLE.items()
            if cmd.handler is not None or any(s.handler for s in cmd.subcommands.values())}
