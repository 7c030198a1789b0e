"""Running a script: server.call with script rules, the worker thread, BUSY and SCRIPT/FUNCTION KILL.

Threading (see the package docstring for the why):

* Inline: no event loop (recovery, the snapshot builder, tests on a bare Dispatcher), inside MULTI/EXEC
  (ctx.may_block is False) or with busy-reply-threshold 0, Lua runs on the calling thread.
* Otherwise Lua runs on the server's one script worker thread while the event-loop thread waits for it,
  up to busy-reply-threshold. Meanwhile the loop is parked inside the EVAL handler, so the worker may run
  server.call commands itself: nothing else touches the keyspace (phase 1, Valkey's "blocked" time).
* Past the threshold the handler returns a Future and the loop runs again (phase 2). From then on the
  worker never touches server state: each server.call is handed to the loop thread
  (call_soon_threadsafe) and the worker waits for its reply. The dispatcher answers every other client
  -BUSY (Dispatcher.busy, except allow_busy commands such as SCRIPT KILL), the calling connection is
  parked (conn.blocked: its later commands wait in its backlog, as behind a blocked BLPOP) and active
  expiry pauses. SCRIPT KILL sets a flag that the Lua count hook (every 100000 instructions) polls.

The switch from phase 1 to 2 is made under ScriptRun.lock, which the worker holds while it executes a
command directly, so a command never straddles it. The script's effects are collected in order and
leave as the EVAL's own effects (one journal batch); in phase 2 they are submitted when the script ends,
and the reply waits for their commit like any reply.
"""

import asyncio
import collections
import logging
import queue
import threading
import time

from .. import messages
from ..commands import registry
from ..commands.session import Session
from ..protocol.resp import ErrorReply

log = logging.getLogger("durakv.script")

# script flags (scripts_flags_def), in FUNCTION LIST order
NO_WRITES = 1
ALLOW_OOM = 2
ALLOW_STALE = 4
NO_CLUSTER = 8
ALLOW_CROSS_SLOT = 16
EVAL_COMPAT = 32
FLAG_NAMES = ((NO_WRITES, b"no-writes"), (ALLOW_OOM, b"allow-oom"), (ALLOW_STALE, b"allow-stale"),
              (NO_CLUSTER, b"no-cluster"), (ALLOW_CROSS_SLOT, b"allow-cross-slot-keys"))

BUSY_EVAL = messages.BUSY_SCRIPT
BUSY_FUNCTION = messages.BUSY_FUNCTION


def lookup_command(argv):
    """lookupCommand: the Command for argv (a container with one argument is itself), else None."""
    cmd = registry.TABLE.get(argv[0].lower())
    if cmd is None:
        return None
    if cmd.subcommands and len(argv) > 1:
        sub = cmd.subcommands.get(argv[1].lower())
        if sub is None or sub.handler is None:
            return None
        return sub
    if cmd.handler is None and not cmd.subcommands:
        return None
    return cmd


class ScriptRun:
    """One execution of a script or function: what server.call needs and what the hook polls."""

    __slots__ = ("state", "kind", "funcname", "readonly", "allow_oom", "pre_oom", "hook", "session",
                 "resp", "caller_resp3", "effects", "dirty", "killed", "lock", "detached", "finished",
                 "reply", "started", "loading", "load_deadline", "library", "caller", "command", "future",
                 "loop", "saved_clock", "saved_expire", "conn", "cmd")

    def __init__(self, state, kind, funcname, caller_ctx=None, command=(), readonly=False, allow_oom=False,
                 pre_oom=False):
        self.state = state
        self.kind = kind                  # "eval" | "function"
        self.funcname = funcname          # sha (eval) or function name, bytes
        self.readonly = readonly
        self.allow_oom = allow_oom
        self.pre_oom = pre_oom
        self.hook = False
        self.resp = 2
        self.caller_resp3 = caller_ctx.resp3 if caller_ctx is not None else False
        self.effects = []
        self.dirty = False
        self.killed = False
        self.lock = threading.Lock()
        self.detached = False
        self.finished = False
        self.reply = None
        self.started = time.monotonic()
        self.loading = False
        self.load_deadline = None
        self.library = None
        self.caller = caller_ctx.client if caller_ctx is not None else None
        self.command = command
        self.future = None
        self.loop = None
        self.saved_clock = None
        self.saved_expire = None
        self.conn = None
        self.cmd = None
        session = self.session = state.session
        if caller_ctx is not None:
            session.db_id = caller_ctx.db.id
            session.ctx.db = caller_ctx.db
        session.resp = 2

    # -- asked by the Lua engine -------------------------------------------------------------------
    def set_resp(self, resp):
        self.resp = resp
        self.session.resp = resp

    def lookup(self, argv):
        return lookup_command(argv)

    def interrupt(self):
        if self.killed:
            return (b"ERR Script killed by user with SCRIPT KILL." if self.kind == "eval"
                    else b"ERR Script killed by user with FUNCTION KILL.")
        if self.load_deadline is not None and time.monotonic() > self.load_deadline:
            return b"ERR FUNCTION LOAD timeout"
        return None

    def execute(self, argv):
        """server.call: runs argv with script rules; the reply value (ErrorReply for errors)."""
        with self.lock:
            if not self.detached:
                return self._execute(argv)
        return self._execute_on_loop(argv)

    def _execute_on_loop(self, argv):
        done = threading.Event()
        box = []

        def job():
            try:
                box.append(self._execute(argv))
            except Exception as exc:  # noqa: BLE001
                log.exception("server.call(%r) failed", argv[:3])
                box.append(ErrorReply("ERR internal error: %s" % exc))
            finally:
                done.set()

        try:
            self.loop.call_soon_threadsafe(job)
        except RuntimeError:
            return ErrorReply("ERR the server is shutting down")
        done.wait()
        return box[0]

    def _execute(self, argv):
        """scriptCall: the checks Valkey makes for a command called from a script, then the command."""
        cmd = lookup_command(argv)
        if cmd is None:
            return ErrorReply("ERR Unknown command called from script")
        n = len(argv)
        arity = cmd.arity
        if (arity > 0 and n != arity) or n < -arity:
            return ErrorReply("ERR Wrong number of args calling command from script")
        if cmd.noscript:
            return ErrorReply("ERR This Redis command is not allowed from script")
        d = self.state.dispatcher
        # ACL (Valkey's scriptVerifyACL): the script runs as its caller's user; to move into the pipeline.
        if d.acl is not None:
            text = d.acl.script_denied(self.session, self.caller, self.command, cmd, argv)
            if text is not None:
                return ErrorReply(text)
        write = cmd.write
        if self.readonly and (write or "may_replicate" in cmd.flags):
            return ErrorReply("ERR Write commands are not allowed from read-only scripts.")
        if write and not self.dirty:
            if d.is_replica_fn is not None and d.is_replica_fn():
                return ErrorReply(messages.READONLY)
            if d.refuse_writes_fn is not None:
                text = d.refuse_writes_fn()
                if text:
                    return ErrorReply(text)
        if (not self.allow_oom and d.maxmemory and not self.dirty and self.pre_oom and cmd.denyoom):
            return ErrorReply(messages.OOM)
        if write:
            self.dirty = True
        reply, effects, _cmd = d._run(self.session, cmd, argv, in_exec=True)
        if effects:
            self.effects.extend(effects)
        if isinstance(reply, asyncio.Future):
            reply.cancel()
            return ErrorReply("ERR '%s' cannot be called from a script" % cmd.fullname)
        return reply


class _Worker:
    """The thread scripts run on (one per server: scripts never run concurrently)."""

    def __init__(self):
        self.jobs = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._main, name="durakv-script", daemon=True)
        self.thread.start()

    def _main(self):
        while True:
            job = self.jobs.get()
            try:
                job()
            except Exception:  # noqa: BLE001 - a job reports its own failures; the worker must live on
                log.exception("script worker job failed")


class ScriptParked:
    """conn.blocked of the client whose script runs past busy-reply-threshold."""
    __slots__ = ()


SCRIPT_PARKED = ScriptParked()


class BusyScript:
    """Dispatcher.busy while a script runs past busy-reply-threshold."""

    def __init__(self, state, run):
        self.state = state
        self.run = run
        self.text = BUSY_EVAL if run.kind == "eval" else BUSY_FUNCTION

    def intercept(self, session, cmd, args):
        """(reply, effects, cmd) for a command arriving meanwhile, or None to run it normally."""
        if "allow_busy" in cmd.flags and session is not self.run.caller:
            if cmd.name == "shutdown" and not any(a.upper() == b"NOSAVE" for a in args[1:]):
                return self.state.dispatcher._reject(session, cmd, self.text)
            return None
        return self.state.dispatcher._reject(session, cmd, self.text)


class ScriptingState:
    """Per dispatcher (server): the EVAL engine and script cache, the worker, the running script."""

    LRU_LIMIT = 500

    def __init__(self, dispatcher):
        self.dispatcher = dispatcher
        self.engine = None
        self.scripts = {}                          # sha (lowercase hex bytes) -> Script
        self.lru = collections.OrderedDict()       # shas added by EVAL (evictable), oldest first
        self.evicted = 0
        self.session = Session(authenticated=True)
        ctx = dispatcher.new_context(self.session)
        ctx.may_block = False
        self._worker = None
        self._pending = []                         # (index, future, reply) waiting for a commit
        self._listening = None                     # the tracker our commit listener is on
        self.current = None                        # the ScriptRun running right now (any phase)

    # -- running -------------------------------------------------------------------------------------
    def run(self, ctx, run, call):
        """Runs call() (which runs the Lua code with `run`) per the threading rules above.
        Returns the reply, or a Future when the script went past busy-reply-threshold."""
        server = ctx.server
        loop = getattr(server, "loop", None) if server is not None else None
        threshold = server.config["busy-reply-threshold"] if server is not None else 0
        run.hook = threshold > 0
        ks = ctx.keyspace
        saved_clock = ks.clock_ms
        frozen = saved_clock()
        ks.clock_ms = lambda: frozen       # time stands still for the script (Valkey's command time snapshot)
        self.current = run
        if threshold <= 0 or loop is None or not ctx.may_block or not loop.is_running():
            try:
                reply = call()
            finally:
                ks.clock_ms = saved_clock
                self.current = None
            ctx.effects.extend(run.effects)
            return reply
        run.loop = loop
        done = threading.Event()

        def job():
            try:
                reply = call()
            except Exception as exc:  # noqa: BLE001
                log.exception("script %s failed", run.funcname)
                reply = ErrorReply("ERR Error running script %s, %s" % (run.funcname.decode(), exc))
            with run.lock:
                run.reply = reply
                run.finished = True
                detached = run.detached
            if detached:
                try:
                    loop.call_soon_threadsafe(self._finish_detached, run)
                except RuntimeError:
                    pass  # the loop is closed: the server is shutting down
            else:
                done.set()

        if self._worker is None:
            self._worker = _Worker()
        self._worker.jobs.put(job)
        finished = done.wait(threshold / 1000.0)
        if not finished:
            with run.lock:
                finished = run.finished
                if not finished:
                    run.detached = True
        if finished:
            ks.clock_ms = saved_clock
            self.current = None
            ctx.effects.extend(run.effects)
            return run.reply
        # phase 2: the loop serves again; everything else gets -BUSY until the script ends
        log.warning("Slow script detected: still in execution after %d milliseconds. You can try killing "
                    "the script using the %s command. Script name is: %s.",
                    int((time.monotonic() - run.started) * 1000),
                    "SCRIPT KILL" if run.kind == "eval" else "FUNCTION KILL",
                    run.funcname.decode("utf-8", "replace"))
        run.future = loop.create_future()
        run.saved_clock = saved_clock
        run.saved_expire = server.active_expire_enabled
        run.cmd = lookup_command(run.command) if run.command else None
        server.active_expire_enabled = False
        self.dispatcher.busy = BusyScript(self, run)
        conn = server.clients.get(run.caller.id) if run.caller is not None else None
        if conn is not None and conn.blocked is None:
            conn.blocked = SCRIPT_PARKED     # its next commands wait behind the script, in order
            run.conn = conn
        return run.future

    def _finish_detached(self, run):
        """On the loop thread once a script that went past the threshold has ended: its effects go to
        durability (and wake blocked clients, notify, ...), its reply waits for their commit, and the
        parked connection resumes."""
        self.dispatcher.busy = None
        self.current = None
        server = self.dispatcher.server
        server.active_expire_enabled = run.saved_expire
        self.dispatcher.keyspace.clock_ms = run.saved_clock
        effects = run.effects
        tracker = server.tracker
        if effects:
            index = tracker.submit(effects, server.keys_of_effect)
            if run.caller is not None:
                run.caller.last_write_index = tracker.assigned
            hooks = getattr(server, "hooks", None)
            if hooks is not None:
                hooks.after_effects(run.conn, run.cmd, effects, args=run.command, served=True)
        else:
            index = tracker.barrier_index()
        self._resolve(run.future, run.reply, index)
        conn = run.conn
        if conn is not None and conn.blocked is SCRIPT_PARKED:
            conn.blocked = None
            run.loop.call_soon(conn.resume)

    def _resolve(self, fut, reply, index):
        """Resolves fut with reply once journal entry `index` is committed."""
        if fut.done():
            return
        tracker = self.dispatcher.server.tracker
        if not index or tracker.committed >= index:
            fut.set_result(reply)
            return
        self._pending.append((index, fut, reply))
        if self._listening is not tracker:
            tracker.commit_listeners.append(self._on_commit)
            self._listening = tracker

    def _on_commit(self, committed):
        if not self._pending:
            return
        keep = []
        for index, fut, reply in self._pending:
            if index <= committed:
                if not fut.done():
                    fut.set_result(reply)
            else:
                keep.append((index, fut, reply))
        self._pending = keep

    # -- killing -------------------------------------------------------------------------------------
    def kill(self, is_eval):
        """scriptKill for SCRIPT KILL (is_eval) / FUNCTION KILL: None when killed, else the error text."""
        busy = self.dispatcher.busy
        if busy is None:
            return messages.NOTBUSY
        run = busy.run
        if run.dirty:
            return messages.UNKILLABLE
        if is_eval and run.kind != "eval":
            return BUSY_FUNCTION
        if not is_eval and run.kind == "eval":
            return BUSY_EVAL
        run.killed = True
        return None


def get_state(dispatcher) -> ScriptingState:
    state = getattr(dispatcher, "scripting", None)
    if state is None:
        state = dispatcher.scripting = ScriptingState(dispatcher)
    return state


# -- INFO ------------------------------------------------------------------------------------------------

def _human(n):
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= size:
            return "%.2f%s" % (n / size, unit)
    return "%dB" % n


def info_memory(server) -> dict:
    """The scripting fields of INFO memory (Lua VM and script cache sizes, script/function counts)."""
    state = getattr(server.dispatcher, "scripting", None)
    funcs = getattr(server.keyspace, "functions", None)
    idle = state is None or state.current is None     # never enter a Lua state a script is running in
    vm_eval = state.engine.memory() if (state is not None and state.engine is not None and idle) else 0
    vm_functions = funcs._engine.memory() if (funcs is not None and funcs._engine is not None and idle) else 0
    scripts = state.scripts if state is not None else {}
    scripts_eval = sum(len(s.body) + 40 for s in scripts.values())
    libs = funcs.ctx.libraries if funcs is not None else {}
    functions_mem = sum(len(lib.code) + len(lib.name) for lib in libs.values())
    return {"used_memory_lua": vm_eval, "used_memory_vm_eval": vm_eval, "used_memory_lua_human": _human(vm_eval),
            "used_memory_scripts_eval": scripts_eval, "number_of_cached_scripts": len(scripts),
            "number_of_functions": funcs.ctx.function_count() if funcs is not None else 0,
            "number_of_libraries": len(libs), "used_memory_vm_functions": vm_functions,
            "used_memory_vm_total": vm_eval + vm_functions, "used_memory_vm_total_human": _human(vm_eval + vm_functions),
            "used_memory_functions": functions_mem, "used_memory_scripts": scripts_eval + functions_mem,
            "used_memory_scripts_human": _human(scripts_eval + functions_mem)}


def evicted_scripts(server) -> int:
    state = getattr(server.dispatcher, "scripting", None)
    return state.evicted if state is not None else 0
