"""Running a script: server.call with script rules, the worker thread, BUSY and SCRIPT/FUNCTION KILL.

This package never imports commands/: the pipeline hands it a ScriptCalls object (the script client's
session, `call(run, argv)` = the pipeline's script_call, `exists(argv)`, `set_busy`, `finish`), and the
port a ScriptHost (the event loop, busy-reply-threshold, parking the calling client, active expiry).

Threading (see the package docstring for the why):

* Inline: no host (start-up replay, the snapshot builder, tests on a bare pipeline), inside MULTI/EXEC
  (ctx.may_block is False) or with busy-reply-threshold 0, Lua runs on the calling thread.
* Otherwise Lua runs on the server's one script worker thread while the event-loop thread waits for it,
  up to busy-reply-threshold. Meanwhile the loop is parked inside the EVAL handler, so the worker may run
  server.call commands itself: nothing else touches the keyspace (phase 1, Valkey's "blocked" time).
* Past the threshold the handler returns a Deferred and the loop runs again (phase 2). From then on the
  worker never touches server state: each server.call is handed to the loop thread
  (call_soon_threadsafe) and the worker waits for its reply. The pipeline answers every other client
  -BUSY (pipeline.busy, except allow_busy commands such as SCRIPT KILL), the calling client is parked (its
  later commands wait behind the script, as behind a blocked BLPOP) and active expiry pauses. SCRIPT KILL
  sets a flag that the Lua count hook (every 100000 instructions) polls.

The switch from phase 1 to 2 is made under ScriptRun.lock, which the worker holds while it executes a
command directly, so a command never straddles it. The script's effects are collected in order and
leave as the EVAL's own effects (one journal batch); in phase 2 they are submitted when the script ends,
and the Deferred resolves with the reply and the ticket durability gave them.
"""

import collections
import logging
import queue
import threading
import time

from .. import messages
from ..protocol.resp import Deferred, ErrorReply
from .lua import bare_vm_bytes

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


class ScriptCalls:
    """What the pipeline gives scripting (duck-typed: commands/scripting.py builds it).

    session           the script client's Session (its ctx has may_block False)
    call(run, argv)   server.call: script rules, admission and the command; the reply value
    exists(argv)      whether argv names a command (redis.acl_check_cmd / pcall lookups)
    set_busy(b)       installs (or clears, b=None) the object that answers -BUSY while a script runs long
    finish(run)       a long script ended: submit run.effects / run.touched; returns the reply's ticket
    acl_allowed(run, argv)  server.acl_check_cmd: whether the script's user may run argv
    """

    __slots__ = ("session", "call", "exists", "set_busy", "finish", "acl_allowed")

    def __init__(self, session, call, exists, set_busy, finish, acl_allowed):
        self.session = session
        self.call = call
        self.exists = exists
        self.set_busy = set_busy
        self.finish = finish
        self.acl_allowed = acl_allowed


# The host (made by the server's services, duck-typed here): `loop`, `threshold_ms()` (busy-reply-threshold; 0:
# run inline), `park(session)` / `unpark(session)` (the calling client's later commands wait behind a long
# script), `suspend_active_expire()` / `resume_active_expire()` (no expiry cycle while the loop answers -BUSY).


class ScriptRun:
    """One execution of a script or function: what server.call needs and what the hook polls."""

    __slots__ = ("state", "kind", "funcname", "readonly", "allow_oom", "pre_oom", "hook", "session",
                 "resp", "caller_resp3", "effects", "touched", "wrote", "killed", "lock", "detached",
                 "finished", "reply", "started", "loading", "load_deadline", "library", "caller", "command",
                 "deferred", "loop", "saved_clock", "host", "flags", "declared_keys", "cluster_slot", "time_us",
                 "counted_errors")

    def __init__(self, state, kind, funcname, caller_ctx=None, command=(), readonly=False, allow_oom=False,
                 pre_oom=False, flags=0):
        self.state = state
        self.kind = kind                  # "eval" | "function"
        self.funcname = funcname          # sha (eval) or function name, bytes
        self.readonly = readonly
        self.allow_oom = allow_oom
        self.pre_oom = pre_oom
        self.flags = flags
        self.declared_keys = ()           # the keys the script was given (KEYS): its cluster slot
        self.cluster_slot = None          # the slot its commands are bound to in cluster mode (-1: none yet)
        self.hook = False
        self.resp = 2
        self.caller_resp3 = caller_ctx.resp3 if caller_ctx is not None else False
        self.effects = []
        self.touched = []                  # (db_id, key) the effects touched; None: unknown
        self.wrote = False                 # a write ran (Valkey's SCRIPT_WRITE_DIRTY)
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
        self.deferred = None
        self.loop = None
        self.saved_clock = None
        self.time_us = 0                  # TIME inside the script: the time it started (Valkey caches it too)
        self.counted_errors = []          # errors of its commands already in errorstats (not counted twice)
        self.host = None
        session = self.session = state.calls.session if state.calls is not None else None
        if caller_ctx is not None and session is not None:
            session.db_id = caller_ctx.db.id
            session.ctx.db = caller_ctx.db
        if session is not None:
            session.resp = 2

    # -- asked by the Lua engine -------------------------------------------------------------------
    def set_resp(self, resp):
        self.resp = resp
        self.session.resp = resp

    def lookup(self, argv):
        return self.state.calls.exists(argv) or None

    def acl_allowed(self, argv) -> bool:
        return self.state.calls.acl_allowed(self, argv)

    def interrupt(self):
        if self.killed:
            return (messages.SCRIPT_KILLED.encode() if self.kind == "eval"
                    else messages.FUNCTION_KILLED.encode())
        if self.load_deadline is not None and time.monotonic() > self.load_deadline:
            return messages.FUNCTION_LOAD_TIMEOUT.encode()
        return None

    def execute(self, argv):
        """server.call: runs argv with script rules; the reply value (ErrorReply for errors)."""
        with self.lock:
            if not self.detached:
                return self.state.calls.call(self, argv)
        return self._execute_on_loop(argv)

    def _execute_on_loop(self, argv):
        done = threading.Event()
        box = []
        calls = self.state.calls

        def job():
            try:
                box.append(calls.call(self, argv))
            except Exception as exc:  # noqa: BLE001
                log.exception("server.call(%r) failed", argv[:3])
                box.append(ErrorReply(messages.SCRIPT_INTERNAL_ERROR % exc))
            finally:
                done.set()

        try:
            self.loop.call_soon_threadsafe(job)
        except RuntimeError:
            return ErrorReply(messages.SCRIPT_SERVER_SHUTTING_DOWN)
        done.wait()
        return box[0]


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


class BusyScript:
    """pipeline.busy while a script runs past busy-reply-threshold."""

    def __init__(self, run):
        self.run = run
        self.text = BUSY_EVAL if run.kind == "eval" else BUSY_FUNCTION

    def refuse(self, session, cmd, args):
        """The error text for a command arriving meanwhile, or None to run it."""
        if cmd.allow_busy and session is not self.run.caller:
            if cmd.name == "shutdown" and not any(a.upper() == b"NOSAVE" for a in args[1:]):
                return self.text
            return None
        return self.text


class ScriptingState:
    """Per pipeline: the EVAL engine and script cache, the worker, the running script."""

    LRU_LIMIT = 500

    def __init__(self, calls):
        self.calls = calls
        self.engine = None
        self.scripts = {}                          # sha (lowercase hex bytes) -> Script
        self.lru = collections.OrderedDict()       # shas added by EVAL (evictable), oldest first
        self.evicted = 0
        self._worker = None
        self.current = None                        # the ScriptRun running right now (any phase)
        self.busy = None                           # the BusyScript while one runs long

    # -- running -------------------------------------------------------------------------------------
    def run(self, ctx, run, call, host=None):
        """Runs call() (which runs the Lua code with `run`) per the threading rules above.
        Returns the reply, or a Deferred when the script went past busy-reply-threshold."""
        threshold = host.threshold_ms() if host is not None else 0
        loop = host.loop if host is not None else None
        run.hook = threshold > 0
        ks = ctx.keyspace
        saved_clock = ks.clock_ms
        frozen = saved_clock()
        ks.clock_ms = lambda: frozen       # time stands still for the script (Valkey's command time snapshot)
        run.time_us = int(time.time() * 1e6)
        self.current = run
        if threshold <= 0 or loop is None or not ctx.may_block or not loop.is_running():
            try:
                reply = call()
            finally:
                ks.clock_ms = saved_clock
                self.current = None
            self._hand_over(ctx, run)
            return reply
        run.loop = loop
        run.host = host
        done = threading.Event()

        def job():
            try:
                reply = call()
            except Exception as exc:  # noqa: BLE001
                log.exception("script %s failed", run.funcname)
                reply = ErrorReply(messages.SCRIPT_RUN_ERROR % (run.funcname.decode(), exc))
            with run.lock:
                run.reply = reply
                run.finished = True
                detached = run.detached
            if detached:
                try:
                    loop.call_soon_threadsafe(self._finish_detached, run, ks)
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
            self._hand_over(ctx, run)
            return run.reply
        # phase 2: the loop serves again; everything else gets -BUSY until the script ends
        log.warning("Slow script detected: still in execution after %d milliseconds. You can try killing "
                    "the script using the %s command. Script name is: %s.",
                    int((time.monotonic() - run.started) * 1000),
                    "SCRIPT KILL" if run.kind == "eval" else "FUNCTION KILL",
                    run.funcname.decode("utf-8", "replace"))
        run.deferred = Deferred()
        run.saved_clock = saved_clock
        host.suspend_active_expire()
        self.busy = BusyScript(run)
        self.calls.set_busy(self.busy)
        if run.caller is not None:
            host.park(run.caller)     # its next commands wait behind the script, in order
        return run.deferred

    @staticmethod
    def _hand_over(ctx, run):
        """A script that ended inside its handler: its effects leave as the handler's own."""
        if run.effects:
            ctx.effects.extend(run.effects)
            if ctx.touched is not None:
                if run.touched is None:
                    ctx.touched = None
                else:
                    ctx.touched.extend(run.touched)

    def _finish_detached(self, run, ks):
        """On the loop thread once a script that went past the threshold has ended: its effects go to
        durability, its reply waits for their commit, and the parked client resumes."""
        self.busy = None
        self.calls.set_busy(None)
        self.current = None
        host = run.host
        host.resume_active_expire()
        ks.clock_ms = run.saved_clock
        ticket = self.calls.finish(run)
        run.deferred.resolve(run.reply, ticket)
        if run.caller is not None:
            host.unpark(run.caller)

    # -- killing -------------------------------------------------------------------------------------
    def kill(self, is_eval):
        """scriptKill for SCRIPT KILL (is_eval) / FUNCTION KILL: None when killed, else the error text."""
        busy = self.busy
        if busy is None:
            return messages.NOTBUSY
        run = busy.run
        if run.wrote:
            return messages.UNKILLABLE
        if is_eval and run.kind != "eval":
            return BUSY_FUNCTION
        if not is_eval and run.kind == "eval":
            return BUSY_EVAL
        run.killed = True
        return None


# -- INFO ------------------------------------------------------------------------------------------------

def _human(n):
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= size:
            return "%.2f%s" % (n / size, unit)
    return "%dB" % n


def _vm_memory(engine, idle) -> int:
    """A VM's figure (LuaEngine.own_memory), a fresh one's before it exists; while a script runs, the last one
    measured (a Lua state is never entered from outside a running script)."""
    if engine is None:
        return bare_vm_bytes()
    return engine.own_memory() if idle else engine.last_own_memory


def info_memory(server) -> dict:
    """The scripting fields of INFO memory (Lua VM and script cache sizes, script/function counts)."""
    state = getattr(server.pipeline, "scripting", None)
    funcs = getattr(server.keyspace, "functions", None)
    idle = state is None or state.current is None     # never enter a Lua state a script is running in
    vm_eval = _vm_memory(state.engine if state is not None else None, idle)
    vm_functions = _vm_memory(funcs._engine if funcs is not None else None, idle)
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
    state = getattr(server.pipeline, "scripting", None)
    return state.evicted if state is not None else 0
