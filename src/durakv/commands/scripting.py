"""EVAL EVALSHA EVAL_RO EVALSHA_RO SCRIPT FCALL FCALL_RO FUNCTION: Lua scripts and function libraries.

The Lua runtime, the script rules for server.call and the threading for long scripts live in
durakv/scripting (see its docstring). A script's effects are the effects of the commands it ran, in
order, leaving as this command's effects; FUNCTION LOAD/DELETE/FLUSH/RESTORE propagate themselves.
"""

import time

from .. import messages
from ..errors import CommandError
from ..keyspace.glob import compile_glob
from ..protocol.resp import OK, ErrorReply, RespSet
from ..config import split_args
from ..scripting.functions import LOAD_TIMEOUT_MS, FunctionError, get_functions
from ..scripting.lua import LuaEngine, sha1hex
from ..scripting.runner import (ALLOW_OOM, EVAL_COMPAT, FLAG_NAMES, NO_CLUSTER, NO_WRITES, ScriptCalls,
                                ScriptingState, ScriptRun)
from . import registry
from .args import ArgCursor
from .base import parse_int
from .introspection import subcommand_syntax_error
from .registry import READS_ALL, command
from .session import Session

_SHEBANG_FLAGS = {name: flag for flag, name in FLAG_NAMES}


class Script:
    __slots__ = ("body", "flags", "fn")

    def __init__(self, body, flags, fn):
        self.body = body
        self.flags = flags
        self.fn = fn


def _shebang_flags(body: bytes):
    """evalExtractShebangFlags: (flags, shebang length). Raises CommandError."""
    if not body.startswith(b"#!"):
        return EVAL_COMPAT, 0
    nl = body.find(b"\n")
    if nl < 0:
        raise CommandError(messages.SHEBANG_INVALID)
    parts = split_args(body[:nl])
    if not parts:
        raise CommandError(messages.SHEBANG_INVALID_ENGINE)
    engine = parts[0][2:]
    if engine.lower() != b"lua":   # Valkey 9 looks the engine up by name, case-insensitively
        raise CommandError(messages.SCRIPT_ENGINE_NOT_FOUND.format(engine.decode("utf-8", "replace")))
    flags = 0
    for part in parts[1:]:
        if not part.startswith(b"flags="):
            raise CommandError(messages.SHEBANG_UNKNOWN_OPTION % part.decode("utf-8", "replace"))
        names = part[6:]
        for name in (names.split(b",") if names else ()):
            bit = _SHEBANG_FLAGS.get(name)
            if bit is None:
                raise CommandError(messages.SHEBANG_UNEXPECTED_FLAG % name.decode("utf-8", "replace"))
            flags |= bit
    return flags, nl


def _engine(state) -> LuaEngine:
    if state.engine is None:
        state.engine = LuaEngine("eval")
    return state.engine


def _create_script(state, body: bytes, from_eval: bool) -> bytes:
    """luaCreateFunction: compiles body into the script cache (EVAL-added scripts are LRU-evicted)."""
    sha = sha1hex(body)
    script = state.scripts.get(sha)
    if script is not None:
        if not from_eval:
            state.lru.pop(sha, None)   # SCRIPT LOAD promotes it: never evicted
        return sha
    flags, shebang_len = _shebang_flags(body)
    fn, err = _engine(state).compile(body[shebang_len:], b"@user_script")
    if fn is None:
        raise CommandError(messages.SCRIPT_COMPILE_ERROR % err.decode("utf-8", "replace"))
    if from_eval:
        lru = state.lru
        while len(lru) >= state.LRU_LIMIT:
            oldest, _ = lru.popitem(last=False)
            state.scripts.pop(oldest, None)
            state.evicted += 1
        lru[sha] = None
    state.scripts[sha] = Script(body, flags, fn)
    return sha


def _numkeys(args, message=None):
    if message is None:
        n = parse_int(args[2])
    else:
        n = parse_int(args[2], message)
    if n > len(args) - 3:
        raise CommandError(messages.NUMKEYS_GT_ARGS)
    if n < 0:
        raise CommandError(messages.NUMKEYS_NEGATIVE)
    return n


def get_state(pipeline) -> ScriptingState:
    """The pipeline's scripting state, made on first use with the calls scripting may make into it."""
    state = pipeline.scripting
    if state is None:
        session = Session(authenticated=True)
        session.addr = "lua"   # how MONITOR shows a script's commands
        pipeline.new_context(session).may_block = False

        def set_busy(busy):
            pipeline.busy = busy

        def finish(run):
            # A script that ran past busy-reply-threshold ended: its effects leave now, as one batch.
            dur = pipeline.durability
            if run.effects:
                ticket = pipeline.submit_collected(run.effects, run.touched)
                if run.caller is not None:
                    run.caller.last_write_index = dur.assigned
                return ticket
            return dur.barrier_ticket()

        calls = ScriptCalls(session, pipeline.script_call, pipeline.script_exists, set_busy, finish,
                            pipeline.script_acl_allowed)
        state = pipeline.scripting = ScriptingState(calls)
    return state


def _prepare(ctx, flags, ro):
    """scriptPrepareForRun's checks before a script runs. Returns (read_only, allow_oom, out_of_memory_at_start)."""
    p = ctx.pipeline
    oom = p.out_of_memory()
    if not flags & EVAL_COMPAT:
        writes = not flags & NO_WRITES
        if writes:
            # a script that may write is a write command (evalGetCommandFlags / fcallGetCommandFlags)
            if oom and not flags & ALLOW_OOM:
                raise CommandError(messages.OOM)
            dur = p.durability
            if dur.refusing:
                text = dur.refuse_writes()
                if text:
                    raise CommandError(text)
            if p.gate is not None and p.gate.is_replica():
                raise CommandError(messages.READONLY)
        if flags & NO_CLUSTER and p.router is not None:
            raise CommandError(messages.SCRIPT_NO_CLUSTER)
        if writes and ro:
            raise CommandError(messages.SCRIPT_RO_WRITE_FLAG)
        if writes and not p.enough_good_replicas():
            raise CommandError(messages.NOREPLICAS)
        return not writes or ro, bool(flags & ALLOW_OOM), oom
    return ro, False, oom


def _flags_to_command(flags):
    """scriptFlagsToCmdFlags: (write, denyoom, may_replicate) of a script that declared its flags."""
    write = not flags & NO_WRITES
    return write, write and not flags & ALLOW_OOM, write


def _eval_flags(pipeline, args):
    """evalGetCommandFlags: the script's declared flags decide what kind of command EVAL is."""
    evalsha = args[0].lower().startswith(b"evalsha")
    state = pipeline.scripting
    if evalsha:
        if len(args[1]) != 40 or state is None:
            return None
        script = state.scripts.get(args[1].lower())
        if script is None:
            return None
        flags = script.flags
    else:
        script = state.scripts.get(sha1hex(args[1])) if state is not None else None
        if script is not None:
            flags = script.flags
        else:
            try:
                flags, _ = _shebang_flags(args[1])
            except CommandError:
                return None
    if flags & EVAL_COMPAT:
        return None
    return _flags_to_command(flags)


def _fcall_flags(pipeline, args):
    fi = get_functions(pipeline.keyspace).lookup(args[1])
    return None if fi is None else _flags_to_command(fi.flags)


def _run(ctx, run, call):
    reply = get_state(ctx.pipeline).run(ctx, run, call, ctx.services.script_host())
    if type(reply) is ErrorReply and any(reply.text.startswith(t) for t in run.counted_errors):
        reply.counted = True    # the error of a command the script called: errorstats has it already
    return reply


# -- EVAL family ----------------------------------------------------------------------------------------

def _eval(ctx, args, evalsha, ro):
    state = get_state(ctx.pipeline)
    if evalsha and len(args[1]) != 40:
        raise CommandError(messages.NOSCRIPT)
    numkeys = _numkeys(args)
    if evalsha:
        sha = args[1].lower()
        script = state.scripts.get(sha)
        if script is None:
            raise CommandError(messages.NOSCRIPT)
    else:
        sha = _create_script(state, args[1], True)
        script = state.scripts[sha]
    if sha in state.lru:
        state.lru.move_to_end(sha)
    read_only, allow_oom, oom = _prepare(ctx, script.flags, ro)
    run = ScriptRun(state, "eval", sha, ctx, args, read_only, allow_oom, oom, script.flags)
    engine = state.engine
    keys = run.declared_keys = args[3:3 + numkeys]
    argv = args[3 + numkeys:]
    fn = script.fn
    return _run(ctx, run, lambda: engine.call(run, fn, keys, argv))


@command("eval")
def eval_(ctx, args):
    return _eval(ctx, args, False, False)


@command("evalsha")
def evalsha(ctx, args):
    return _eval(ctx, args, True, False)


@command("eval_ro")
def eval_ro(ctx, args):
    return _eval(ctx, args, False, True)


@command("evalsha_ro")
def evalsha_ro(ctx, args):
    return _eval(ctx, args, True, True)


# -- SCRIPT ------------------------------------------------------------------------------------------------

@command("script|load")
def script_load(ctx, args):
    return _create_script(get_state(ctx.pipeline), args[2], False)


@command("script|exists")
def script_exists(ctx, args):
    scripts = get_state(ctx.pipeline).scripts
    return [1 if sha.lower() in scripts else 0 for sha in args[2:]]


@command("script|flush")
def script_flush(ctx, args):
    if len(args) > 3 or (len(args) == 3 and args[2].upper() not in (b"SYNC", b"ASYNC")):
        raise CommandError(messages.SCRIPT_FLUSH_OPTION)
    state = get_state(ctx.pipeline)
    state.scripts = {}
    state.lru.clear()
    state.engine = None        # a fresh Lua state, as scriptingReset
    return OK


@command("script|show")
def script_show(ctx, args):
    script = get_state(ctx.pipeline).scripts.get(args[2].lower()) if len(args[2]) == 40 else None
    if script is None:
        raise CommandError(messages.NOSCRIPT)
    return script.body


@command("script|kill")
def script_kill(ctx, args):
    err = get_state(ctx.pipeline).kill(True)
    if err is not None:
        raise CommandError(err)
    return OK


@command("script|debug")
def script_debug(ctx, args):
    """SCRIPT DEBUG mode [engine] (Valkey 9.1: the engine, 'lua' by default, is looked up before the mode)."""
    if len(args) > 4:
        raise subcommand_syntax_error(args)
    if len(args) == 4 and args[3].lower() != b"lua":
        raise CommandError(messages.SCRIPT_DEBUG_NO_ENGINE.format(args[3].decode("utf-8", "replace")))
    mode = args[2].upper()
    if mode == b"NO":
        return OK
    if mode in (b"YES", b"SYNC"):
        raise CommandError(messages.SCRIPT_DEBUG_UNSUPPORTED)
    raise CommandError(messages.SCRIPT_DEBUG_USAGE)


_SCRIPT_HELP = [
    "DEBUG (YES|SYNC|NO) [<engine_name>]",
    "    Set the debug mode for subsequent scripts executed of the specified engine.",
    "    Default engine name: 'lua'",
    "EXISTS <sha1> [<sha1> ...]",
    "    Return information about the existence of the scripts in the script cache.",
    "FLUSH [ASYNC|SYNC]",
    "    Flush the Lua scripts cache. Very dangerous on replicas.",
    "    When called without the optional mode argument, the behavior is determined",
    "     by the lazyfree-lazy-user-flush configuration directive. Valid modes are:",
    "    * ASYNC: Asynchronously flush the scripts cache.",
    "    * SYNC: Synchronously flush the scripts cache.",
    "KILL",
    "    Kill the currently executing Lua script.",
    "LOAD <script>",
    "    Load a script into the scripts cache without executing it.",
    "SHOW <sha1>",
    "    Show a script from the scripts cache.",
]


def _help(name, lines):
    return (["%s <subcommand> [<arg> [value] [opt] ...]. Subcommands are:" % name] + lines
            + ["HELP", "    Print this help."])


@command("script|help")
def script_help(ctx, args):
    return _help("SCRIPT", _SCRIPT_HELP)


# -- FCALL -------------------------------------------------------------------------------------------------

def _fcall(ctx, args, ro):
    funcs = get_functions(ctx.keyspace)
    fi = funcs.lookup(args[1])
    if fi is None:
        raise CommandError(messages.FUNCTION_NOT_FOUND)
    numkeys = _numkeys(args, messages.FCALL_BAD_NUMKEYS)
    read_only, allow_oom, oom = _prepare(ctx, fi.flags, ro)
    state = get_state(ctx.pipeline)
    run = ScriptRun(state, "function", fi.name, ctx, args, read_only, allow_oom, oom, fi.flags)
    engine = funcs.engine
    keys = run.declared_keys = args[3:3 + numkeys]
    argv = args[3 + numkeys:]
    fn = fi.fn
    return _run(ctx, run, lambda: engine.call(run, fn, keys, argv))


@command("fcall")
def fcall(ctx, args):
    return _fcall(ctx, args, False)


@command("fcall_ro")
def fcall_ro(ctx, args):
    return _fcall(ctx, args, True)


# -- FUNCTION ----------------------------------------------------------------------------------------------

def _obeys(ctx) -> bool:
    """Replaying the journal or a snapshot (mustObeyClient): no FUNCTION LOAD timeout."""
    return ctx.replaying or ctx.services.script_host() is None


def _function_error(exc: FunctionError):
    return CommandError("ERR " + exc.args[0])


@command("function|load")
def function_load(ctx, args):
    replace = False
    c = ArgCursor(args, 2, len(args) - 1)   # the last argument is the library's code
    while c:
        opt = c.next()
        if opt.upper() == b"REPLACE":
            replace = True
            continue
        raise CommandError(messages.FUNCTION_LOAD_UNKNOWN_OPTION.format(opt.decode("utf-8", "replace")))
    funcs = get_functions(ctx.keyspace)
    try:
        name = funcs.create(args[c.pos], replace, 0 if _obeys(ctx) else LOAD_TIMEOUT_MS)
    except FunctionError as exc:
        raise _function_error(exc) from None
    ctx.propagate_args(args)
    return name


@command("function|delete")
def function_delete(ctx, args):
    if not get_functions(ctx.keyspace).delete(args[2]):
        raise CommandError(messages.LIBRARY_NOT_FOUND)
    ctx.propagate_args(args)
    return OK


@command("function|flush")
def function_flush(ctx, args):
    if len(args) > 3:
        raise CommandError(messages.SUBCOMMAND_SYNTAX.format("flush", "FUNCTION"))
    if len(args) == 3 and args[2].upper() not in (b"SYNC", b"ASYNC"):
        raise CommandError(messages.FUNCTION_FLUSH_OPTION)
    funcs = get_functions(ctx.keyspace)
    if funcs:
        funcs.flush()
        ctx.propagate(b"FUNCTION", b"FLUSH")
    return OK


@command("function|list", reads_data=READS_ALL)
def function_list(ctx, args):
    with_code = False
    pattern = None
    c = ArgCursor(args, 2)
    while c:
        arg = c.next()
        upper = arg.upper()
        if not with_code and upper == b"WITHCODE":
            with_code = True
        elif pattern is None and upper == b"LIBRARYNAME":
            if not c.left():
                raise CommandError(messages.FUNCTION_LIST_NO_LIBRARY_NAME)
            pattern = c.next()
        else:
            raise CommandError(messages.FUNCTION_LIST_UNKNOWN_ARGUMENT.format(arg.decode("utf-8", "replace")))
    match = compile_glob(pattern, True) if pattern is not None else None
    out = []
    for lib in get_functions(ctx.keyspace).ctx.libraries.values():
        if match is not None and not match(lib.name):
            continue
        entry = {b"library_name": lib.name, b"engine": b"LUA", b"functions": [
            {b"name": fi.name, b"description": fi.desc,
             b"flags": RespSet([name.decode() for flag, name in FLAG_NAMES if fi.flags & flag])}
            for fi in lib.functions.values()]}
        if with_code:
            entry[b"library_code"] = lib.code
        out.append(entry)
    return out


@command("function|dump", reads_data=READS_ALL)
def function_dump(ctx, args):
    return get_functions(ctx.keyspace).dump()


@command("function|restore")
def function_restore(ctx, args):
    if len(args) > 4:
        raise CommandError(messages.SUBCOMMAND_SYNTAX.format("restore", "FUNCTION"))
    policy = b"APPEND"
    if len(args) == 4:
        policy = args[3].upper()
        if policy not in (b"APPEND", b"REPLACE", b"FLUSH"):
            raise CommandError(messages.FUNCTION_RESTORE_POLICY)
    try:
        get_functions(ctx.keyspace).restore(args[2], policy)
    except FunctionError as exc:
        raise _function_error(exc) from None
    ctx.propagate_args(args)
    return OK


@command("function|stats", reads_data=READS_ALL)
def function_stats(ctx, args):
    busy = get_state(ctx.pipeline).busy
    running = None
    if busy is not None:
        run = busy.run
        if run.kind == "eval":
            raise CommandError(messages.BUSY_SCRIPT)
        running = {b"name": run.funcname, b"command": list(run.command),
                   b"duration_ms": int((time.monotonic() - run.started) * 1000)}
    funcs = get_functions(ctx.keyspace)
    return {b"running_script": running,
            b"engines": {b"LUA": {b"libraries_count": len(funcs.ctx.libraries),
                                  b"functions_count": funcs.ctx.function_count()}}}


@command("function|kill")
def function_kill(ctx, args):
    err = get_state(ctx.pipeline).kill(False)
    if err is not None:
        raise CommandError(err)
    return OK


_FUNCTION_HELP = [
    "LOAD [REPLACE] <FUNCTION CODE>",
    "    Create a new library with the given library name and code.",
    "DELETE <LIBRARY NAME>",
    "    Delete the given library.",
    "LIST [LIBRARYNAME PATTERN] [WITHCODE]",
    "    Return general information on all the libraries:",
    "    * Library name",
    "    * The engine used to run the Library",
    "    * Functions list",
    "    * Library code (if WITHCODE is given)",
    "    It also possible to get only function that matches a pattern using LIBRARYNAME argument.",
    "STATS",
    "    Return information about the current function running:",
    "    * Function name",
    "    * Command used to run the function",
    "    * Duration in MS that the function is running",
    "    If no function is running, return nil",
    "    In addition, returns a list of available engines.",
    "KILL",
    "    Kill the current running function.",
    "FLUSH [ASYNC|SYNC]",
    "    Delete all the libraries.",
    "    When called without the optional mode argument, the behavior is determined by the",
    "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
    "    * ASYNC: Asynchronously flush the libraries.",
    "    * SYNC: Synchronously flush the libraries.",
    "DUMP",
    "    Return a serialized payload representing the current libraries, can be restored using FUNCTION "
    "RESTORE command",
    "RESTORE <PAYLOAD> [FLUSH|APPEND|REPLACE]",
    "    Restore the libraries represented by the given payload, it is possible to give a restore policy to",
    "    control how to handle existing libraries (default APPEND):",
    "    * FLUSH: delete all existing libraries.",
    "    * APPEND: appends the restored libraries to the existing libraries. On collision, abort.",
    "    * REPLACE: appends the restored libraries to the existing libraries, On collision, replace the old",
    "      libraries with the new libraries (notice that even on this option there is a chance of failure",
    "      in case of functions name collision with another library).",
]


@command("function|help")
def function_help(ctx, args):
    return _help("FUNCTION", _FUNCTION_HELP)


for _name in ("eval", "evalsha", "eval_ro", "evalsha_ro"):
    registry.TABLE[_name.encode()].queue_flags_fn = _eval_flags
for _name in ("fcall", "fcall_ro"):
    registry.TABLE[_name.encode()].queue_flags_fn = _fcall_flags
