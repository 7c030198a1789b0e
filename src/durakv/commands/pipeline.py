"""The command pipeline: Valkey's processCommand + call(), one copy for every caller.

Every command that reaches the keyspace goes through one Pipeline object:

    process(session, args)      a client's request (connections): resolve, admit, queue (MULTI), call
    exec_queued(session)        EXEC: all-or-nothing admission of the queue, then call() per command
    script_call(run, argv)      server.call from Lua / FCALL: scriptCall's checks, admission, call()
    retry_blocked(...)          a blocked command retried when its keys change: admission, call()
    apply(session, db_id, argv) a replica applying the journal and start-up replay: call() only

Resolution happens once per request (exact bytes of the name first, then lowercased), admission checks in
Valkey's order (arity, authentication, MULTI rules, ACL, cluster slot, OOM, journal failures and
backpressure, read-only replica, pub/sub context, lease, loading, busy script, CLIENT PAUSE) and call()
does the accounting (calls, usec, slowlog, memory estimate) and collects the command's deterministic
effects with the keys they touch. The pipeline never touches a socket, a file or the journal: process()
hands effects to the durability object it was given (`submit(effects, touched) -> ticket`) and returns the
ticket with the reply; only durability decides when that reply may leave.

What the pipeline does not own is plugged in as narrow objects, each None when unused (so the common
path checks one attribute):
    durability  submit/read_ticket/barrier_ticket/push_ticket/export_ticket/refuse_writes/pending (durability/)
    gate        the node's role: is_replica(), serving_error(write) (lease, replica lag), holding /
                holds(may_replicate, touches_data) (a planned failover's hand-over: the command waits)
    router      cluster mode: check(session, cmd, args, queue, run) -> error text or None (routing/)
    acl         check(session, cmd, args, context, run) -> error text or None (context: toplevel, multi, exec,
                lua; run: the ScriptRun for a script's command), allowed(caller, cmd, args) -> bool
    observer    before_call/after_call/after_top (notifications, tracking, MONITOR, blocked wake-ups)
    pause       CLIENT PAUSE state: must_postpone(may_replicate) -> bool
    busy        a script running past busy-reply-threshold: error text for a command arriving meanwhile

Work off the loop (`off_loop`: MIGRATE's exchange, the encoding of a large DUMP): the command's keys are
locked while a worker thread does the slow part, and the command finishes on the loop afterwards (`complete`:
its deletes are effects, its reply a Deferred resolved with their ticket). While a key is locked, admission
postpones (as CLIENT PAUSE does: the command runs again from scratch afterwards) every write that names it
(a plain command, each command EXEC queued, a blocked client's retry), every write whose keys cannot be known
(FLUSHALL, FLUSHDB, SWAPDB, ...) and every script that may write (a script may write keys it did not declare);
reads go on. Locks are by key name across databases (MOVE and COPY ... DB name a key of another database by
the same name): a write to the same name in another database waits too, which costs little and is simple.

Dirty keys: call() returns the (db_id, key) pairs its effects touched (the command's own keys from its key
specs, plus what the handler reported with ctx.touch, plus keys the server deleted meanwhile), or None when
they are not known (FLUSHALL, SWAPDB, SORT ... STORE): then every later read waits for that write's commit.
"""

import logging
import time
from operator import attrgetter

from .. import messages
from ..errors import CommandError
from ..keyspace.db import FeedOnly, estimate_key, estimate_key_overhead
from ..protocol.resp import QUEUED, ErrorReply, NullArray
from . import registry
from .base import Blocked, Context
from .corestate import CoreState
from .introspection import Monitors

log = logging.getLogger("durakv.commands")

# estimate_key(k, v) for a string value, inlined on the write path: this constant + len(k) + len(v).
STRING_KEY_COST = _STRING_KEY_COST = estimate_key_overhead(b"")
MULTI_ARG_COST = 8        # a queued argument besides its payload, as Valkey counts it (sizeof(robj *))
_EXACT_CACHE_MAX = 4096   # distinct spellings of command names remembered (an attacker can send many)


class Postponed:
    """The reply of a command that must wait for CLIENT PAUSE to end: the caller parks the client and
    runs the command again from scratch afterwards (Valkey's blockPostponeClient)."""
    __slots__ = ()


POSTPONE = Postponed()


def _c_string(arg: bytes, limit: int) -> bytes:
    """`%.*s` of an argument in Valkey's error texts: up to its first NUL byte, at most limit bytes."""
    nul = arg.find(b"\0")
    return arg[:limit if nul < 0 else min(nul, limit)]


def _unknown_command(args) -> str:
    """processCommand's text for an unknown command: its name, then each argument quoted and followed by a
    space, cut once the preview reaches 128 bytes (the last one cut to fit). The bytes are kept as sent
    (surrogateescape; the encoder writes them back)."""
    preview = b""
    for a in args[1:]:
        if len(preview) >= 128:
            break
        preview += b"'%s' " % _c_string(a, 128 - len(preview))
    return messages.UNKNOWN_COMMAND.format(_c_string(args[0], 128).decode("utf-8", "surrogateescape"),
                                           preview.decode("utf-8", "surrogateescape"))


def _merge_touched(into, more):
    """Dirty lists of nested calls: None (unknown keys) absorbs everything."""
    if into is None or more is None:
        return None
    into.extend(more)
    return into


def _admission_input(name):
    """A pipeline attribute that admission reads: setting it recomputes `_admit_always`, so a client's
    request checks one flag to know whether it needs admission at all."""
    private = "_" + name

    def get(self):
        return getattr(self, private)

    def set(self, value):
        setattr(self, private, value)
        # _admit_rest: what admission checks besides the cluster router and the role gate (the compiled core
        # does those two itself for a primary serving its own slots: fastpath/_core.c, cluster_admits)
        self._admit_rest = bool(self._acl is not None or self._maxmemory or self._busy is not None
                                or self._pause is not None or self._loading or self._min_replicas_to_write
                                or self._locks)
        self._admit_always = self._admit_rest or self._router is not None or self._gate is not None
        self.core_state.set("admission", self._admit_rest)
        if name in ("gate", "router"):
            self.routing_changed()
    return property(get, set)


def _core_input(name, reason, blocks):
    """A pipeline attribute the compiled core's decision depends on: setting it writes `reason` into the core's
    state (commands/corestate.py), `blocks(value)` saying whether the value keeps the core from running. Read
    through a C getter: no Python frame where the pipeline reads it per command."""
    private = "_" + name

    def set(self, value):
        setattr(self, private, value)
        self.core_state.set(reason, blocks(value))
    return property(attrgetter(private), set)


class Redirection(str):
    """An admission refusal from the cluster router (MOVED, ASK, CROSSSLOT, TRYAGAIN, CLUSTERDOWN): EXEC refused
    this way answers the redirection itself, not EXECABORT (Valkey's clusterRedirectClient)."""
    __slots__ = ()


class NoDurability:
    """The durability of a pipeline with nothing behind it (start-up replay, a scratch keyspace): effects go
    nowhere and every reply may leave at once."""
    pending = refusing = needs_touched = False
    assigned = committed = 0

    def submit(self, effects, touched):
        return 0

    def read_ticket(self, db_id, keys):
        return 0

    def barrier_ticket(self):
        return 0

    def push_ticket(self):
        return 0

    def export_ticket(self):
        return 0

    def refuse_writes(self):
        return None

    def bind_core_state(self, state):
        state.set("refusing", False)    # (never refuses)


class Pipeline:
    # What the compiled core counts per batch (mark_s, total_commands: fastpath/_core.c writes a slot at its
    # offset), the object it reads its decision to run from (core_state), and what admission reads per command;
    # everything else stays in the instance dict.
    __slots__ = ("_admit_rest", "_admit_always", "_observer", "watchers", "_stats_enabled", "_perf_counter",
                 "mark_s", "total_commands", "_gate", "_router", "core_state",
                 "__dict__", "__weakref__")

    gate = _admission_input("gate")
    router = _admission_input("router")
    acl = _admission_input("acl")
    busy = _admission_input("busy")
    pause = _admission_input("pause")
    loading = _admission_input("loading")
    maxmemory = _admission_input("maxmemory")
    min_replicas_to_write = _admission_input("min_replicas_to_write")
    locks = _admission_input("locks")
    observer = _core_input("observer", "observer", lambda obs: obs is not None)
    stats_enabled = _core_input("stats_enabled", "stats_off", lambda on: not on)

    def _set_perf_counter(self, clock):
        # the compiled core times calls with CLOCK_MONOTONIC, which time.perf_counter reads: another clock is the
        # Python path's (and the core marks a read's start on this clock itself when it is the real one)
        self._perf_counter = self.core_state.clock = clock
        self.core_state.set("clock", clock is not time.perf_counter)
    perf_counter = property(attrgetter("_perf_counter"), _set_perf_counter)

    def __init__(self, keyspace, services=None, perf_counter=time.perf_counter, config=None):
        from .services import Services
        self.keyspace = keyspace
        self.services = services if services is not None else Services()
        # what the compiled core reads (commands/corestate.py): first, so every input's setter can write to it
        self.core_state = CoreState()
        self.perf_counter = perf_counter
        self.durability = NoDurability()
        self.observer = None
        self._gate = self._router = self._acl = self._busy = self._pause = None
        self._loading = False
        self._maxmemory = 0
        self._admit_always = self._admit_rest = False
        self._min_replicas_to_write = 0
        self._locks = 0              # commands working off the loop with their keys locked (off_loop)
        self.key_locks = {}          # key -> how many of them lock it
        self.lock_retries = False    # a blocked client's retry was postponed by a lock: retried at unlock
        self.watchers = {}           # (db_id, key) -> set of sessions (never rebound: the core's state holds it)
        self.core_state.watchers = self.watchers
        self.script_disable_deny = False  # DEBUG SET-DISABLE-DENY-SCRIPTS: scripts may call noscript commands
        self.min_replicas_max_lag = 10   # seconds (min-replicas-to-write is an admission input above)
        self.total_commands = 0
        self.total_errors = 0
        self.error_counts = {}       # error prefix -> count (at most ERRORSTATS_MAX prefixes, as Valkey)
        self.qbuf_limit_disconnections = 0   # clients closed past client-query-buffer-limit (INFO stats)
        self.errorstats_disabled = False
        # While EXEC or a script runs one of its commands: whether it wrote before it (None outside them);
        # a message it publishes after writing waits for those writes (publish_ticket)
        self.nested_effects = None
        self.requirepass = None
        self.maxmemory_policy = "noeviction"
        self.maxmemory_samples = 5
        self.import_mode = False     # import-mode: a primary evicts nothing (the import source owns the data)
        self.used_memory_fn = lambda: keyspace.used_bytes
        self.monitors = Monitors(keyspace, config)
        self.monitors.bind_core_state(self.core_state)
        self._config = config        # read where a setting is needed rarely (client-query-buffer-limit in MULTI)
        self.scripting = None        # scripting.runner.ScriptingState, made on first use
        self._exact = {}             # command name exactly as received -> Command
        self._plain = {}             # ... for commands without subcommands (the hot path's table)
        self.mark_s = perf_counter()  # end of the previous call: the start of the next (one clock read per call)
        self.stats_enabled = True
        # enable-debug-command / enable-module-command (immutable): "no", "yes" or "local" per option
        self.protected_allowed = {name: config[name] if config is not None else "no"
                                  for name in ("enable-debug-command", "enable-module-command")}

    def routing_changed(self):
        """The role gate, the cluster router or the router's topology changed: the core's state takes the gate it
        asks per keyed command and the slot codes it checks (ClusterRouting.install calls this)."""
        st = self.core_state
        gate = self._gate
        # a shard member's gate answers fast_serving() (the lease rule, replication/lease.py); any other (a
        # REPLICAOF link's) sends every command to admission
        st.gate = gate if gate is not None and hasattr(type(gate), "fast_serving") else None
        st.set("gate", gate is not None and st.gate is None)
        routing = self._router
        if routing is None:
            st.slot_codes = st.moving = None
            st.set("routing", False)
            return
        st.moving = routing.moving
        router = routing.router     # None: CLUSTERDOWN, the pipeline answers
        codes = router.slot_codes if router is not None else None
        st.slot_codes = codes
        st.set("routing", codes is None)

    def bind_core_state(self, durability, hooks):
        """The server builds its core over this pipeline: the keyspace, `durability` and `hooks` write their
        inputs to this pipeline's core state from now on (a keyspace or durability layer serves one core)."""
        st = self.core_state
        self.keyspace.bind_core_state(st)
        durability.bind_core_state(st)
        # pushes queued behind the current client's reply (server/notify.py Hooks; never rebound)
        st.own_feed = hooks.own_feed if hooks is not None else None
        st.set("unbound", False)

    def new_context(self, session):
        ctx = Context(self.keyspace, self.services, session, self)
        ctx.db = self.keyspace.dbs[session.db_id]
        session.ctx = ctx
        return ctx

    def mark(self):
        """Entry points outside a connection's batch (timers, another thread's script) start the clock."""
        self.mark_s = self.perf_counter()

    # -- resolution -----------------------------------------------------------------------------------
    def resolve(self, args):
        """(Command, None) for args, descending into subcommands, or (Command or None, error text)."""
        name = args[0]
        cmd = self._exact.get(name)
        if cmd is None:
            cmd = registry.lookup((name,))
            if cmd is None:
                return None, _unknown_command(args)
            if len(self._exact) < _EXACT_CACHE_MAX:
                self._exact[name] = cmd
                if not cmd.subcommands:
                    self._plain[name] = cmd
        if cmd.subcommands and (cmd.handler is None or len(args) > 1):
            if len(args) < 2:
                return cmd, messages.WRONG_ARITY.format(cmd.display)
            sub = registry.lookup(args)
            if sub is None:
                sub_name = _c_string(args[1], 128).decode("utf-8", "surrogateescape")
                return cmd, messages.UNKNOWN_SUBCOMMAND.format(sub_name, cmd.display.upper())
            cmd = sub
        arity = cmd.arity
        n = len(args)
        if (arity > 0 and n != arity) or n < -arity:
            return cmd, messages.WRONG_ARITY.format(cmd.display)
        return cmd, None

    # -- processCommand -----------------------------------------------------------------------------
    def process(self, session, args):
        """A client's request. Returns (reply, ticket, cmd): ticket 0 means the reply may leave now, else
        the durability ticket it waits for. reply may be Blocked, POSTPONE or a Deferred."""
        cmd = self._plain.get(args[0])
        if cmd is None or not cmd.argc_min <= len(args) <= cmd.argc_max:
            cmd, text = self.resolve(args)
            if text is not None:
                session.last_cmd = cmd
                return self._rejected(session, cmd, text), 0, cmd
        session.last_cmd = cmd
        if not session.authenticated and not cmd.no_auth:
            return self._rejected(session, cmd, messages.NOAUTH), 0, cmd
        if cmd.protected is not None:
            text = self._protected_refusal(session, cmd)
            if text is not None:
                return self._rejected(session, cmd, text), 0, cmd
        if session.in_multi:
            answer = self._in_multi(session, cmd, args)
            if answer is not None:
                return answer, 0, cmd
        elif self._admit_always or session.special or cmd.queue_flags_fn is not None or self.durability.refusing:
            write, denyoom, may_replicate = self._flags(cmd, args, session)
            text = self.admit(session, cmd, args, write, denyoom, may_replicate)
            if text is not None:
                # a postponed command runs again from scratch later, ASKING still in force (Valkey resets a
                # client only once its command is processed, and a postponed client is blocked)
                return (POSTPONE if text is POSTPONE else self._rejected(session, cmd, text)), 0, cmd
        reply, effects, touched = self.call(session, cmd, args)
        # COMMANDLOG large-request: a client's own commands only (not those EXEC or a script runs), as Valkey.
        # The bound: the arguments plus the longest headers RESP can give them ("$N\r\n...\r\n", "*N\r\n").
        if self.stats_enabled and sum(map(len, args)) + 15 * len(args) + 13 > self.monitors.request_limit:
            self.monitors.record_request(session, cmd, args)
        ticket = 0
        dur = self.durability
        if effects:
            ticket = dur.submit(effects, touched)
            session.last_write_index = dur.assigned
        elif dur.assigned > dur.committed and type(reply) is not ErrorReply:
            # A read (or a write that changed nothing) must not reveal an uncommitted write.
            ticket = self._read_ticket(session, cmd, args)
        if session.asking and not session.in_multi and cmd.name != "asking":
            session.asking = False   # ASKING covers one command (Valkey's resetClient)
        obs = self.observer
        if obs is not None:
            obs.after_top(session)
        return reply, ticket, cmd

    def _protected_refusal(self, session, cmd):
        """Valkey's CMD_PROTECTED check (after authentication, before MULTI queuing and the ACL check, as
        9.1.2 orders them): DEBUG or MODULE LOAD refused unless its option is `yes`, or `local` and the
        client comes from the loopback interface. Only a client's own request is checked (scripts are not,
        as in Valkey: DEBUG is noscript unless DEBUG itself lifted that)."""
        name, option = cmd.protected
        allowed = self.protected_allowed[option]
        if allowed == "yes" or (allowed == "local" and session.local):
            return None
        return messages.PROTECTED_COMMAND.format(name, option)

    def _read_ticket(self, session, cmd, args):
        """The ticket of a reply that changed nothing while writes are uncommitted: what it was derived from
        must commit first. Reads and writes wait for their keys (sync mode); commands with neither flag that
        still look at the data (DEBUG DIGEST, INFO keyspace, CLUSTER COUNTKEYSINSLOT, ...: Command.reads_data) wait
        likewise; an export of the dataset (SYNC's RDB) waits for everything issued, in either mode."""
        dur = self.durability
        if cmd.readonly or cmd.write or cmd.calls_commands:
            if not dur.pending:
                return 0
            # (keys_incomplete: key specs that do not name every key read, SORT's BY and GET patterns; such a
            # command waits for everything issued, as reads of the whole keyspace do)
            if cmd.sees_all or cmd.keys_incomplete:
                return dur.barrier_ticket()
            return dur.read_ticket(session.db_id, cmd.keys(args))
        reads = cmd.reads_data
        if reads is None:
            return 0
        if type(reads) is not str:
            reads = reads(args)
        if reads is registry.READS_EXPORT:
            return dur.export_ticket()
        if not dur.pending or reads is None:
            return 0
        if reads is registry.READS_ALL:
            return dur.barrier_ticket()
        return dur.read_ticket(session.db_id, reads)

    def publish_ticket(self) -> int:
        """The ticket of a PUBLISH's message. A plain PUBLISH is derived from no write: it leaves at once, as
        in Valkey. One that a transaction or script sends after it wrote leaves with those writes' batch (the
        effects are submitted when EXEC or the script ends); one sent by a script that only read waits for
        what it may have read (sync mode)."""
        nested = self.nested_effects
        if nested is None:
            return 0
        dur = self.durability
        if nested:
            return dur.push_ticket()
        return dur.barrier_ticket() if dur.pending else 0

    def _rejected(self, session, cmd, text):
        """reject() for a client's request, which also ends ASKING: it covers the next command whatever that
        command's outcome (Valkey's resetClient after a rejected command too), but for ASKING itself and
        inside MULTI."""
        reply = self.reject(session, cmd, text)
        if session.asking and not session.in_multi and (cmd is None or cmd.name != "asking"):
            session.asking = False
        return reply

    def _in_multi(self, session, cmd, args):
        """A command while a transaction is being queued: the answer (QUEUED or an error), or None when it
        runs now (EXEC, DISCARD, MULTI's own family). Queued commands pass admission now, as in Valkey, and
        EXEC passes it again with the flags of everything it queued."""
        cost = sum(map(len, args)) + MULTI_ARG_COST * len(args)
        limit = self._config["client-query-buffer-limit"] if self._config is not None else 1 << 30
        if session.multi_bytes + cost > limit:
            # Valkey counts the queued commands as part of the client's query buffer (readToQueryBuf): a
            # client whose queue and request pass client-query-buffer-limit is closed, its transaction gone
            self.discard(session)
            session.close_after_reply = True
            self.query_buffer_limit_reached(session)
            return ErrorReply("ERR " + messages.PROTO_QUERY_BUFFER_LIMIT)
        if cmd.no_multi:
            return self._rejected(session, cmd, messages.NOT_ALLOWED_IN_MULTI.format(cmd.fullname))
        queue = None
        if cmd.fullname == "exec":
            write, denyoom, may_replicate = session.multi_write, session.multi_denyoom, session.multi_may_replicate
            queue = session.multi_queue
        else:
            write, denyoom, may_replicate = self._flags(cmd, args, session)
        text = self.admit(session, cmd, args, write, denyoom, may_replicate, queueing=not cmd.multi_immediate,
                          queue=queue)
        if text is not None:
            return POSTPONE if text is POSTPONE else self._rejected(session, cmd, text)
        if cmd.multi_immediate:
            return None
        session.multi_queue.append((cmd, args))
        session.multi_bytes += cost
        session.multi_write |= write
        session.multi_denyoom |= denyoom
        session.multi_may_replicate |= may_replicate
        session.multi_touches_data |= cmd.touches_data
        return QUEUED

    def _flags(self, cmd, args, session):
        """(write, denyoom, may_replicate) of a command as admission sees it (getCommandFlags: a script's
        own flags decide for EVAL/FCALL)."""
        fn = cmd.queue_flags_fn
        if fn is not None:
            flags = fn(self, args)
            if flags is not None:
                return flags
        return cmd.write, cmd.denyoom, cmd.may_replicate

    def admit(self, session, cmd, args, write, denyoom, may_replicate, queueing=False, queue=None, run=None):
        """The checks after lookup and authentication, in processCommand's order (scriptCall's for a
        command a script runs: `run` is that script's ScriptRun). Error text, POSTPONE, or None to run.
        `queue` is EXEC's queued commands (the slot check covers all of them)."""
        acl = self._acl
        if acl is not None and not session.from_primary:    # a replica obeys its primary (mustObeyClient)
            text = acl.check(session, cmd, args, "lua" if run is not None else (
                "multi" if session.in_multi else "toplevel"), run)
            if text is not None:
                return text
        router = self._router
        if router is not None and (not cmd.keyless or cmd.calls_commands or queue is not None):
            text = router.check(session, cmd, args, queue, run)
            if text is not None:
                return Redirection(text)
        if session.capa_redirect and run is None and self._gate is not None and not session.from_primary:
            # CLIENT CAPA redirect on a REPLICAOF replica: its data commands go to the primary, as Valkey's
            # processCommand answers them right after the cluster redirection (a shard member's gate names no
            # primary address: it answers as before)
            target = getattr(self._gate, "redirect_to", None)
            if target is not None:
                reads = (queue is not None and any(c.readonly for c, _ in queue)) if cmd.fullname == "exec" \
                    else cmd.readonly
                if write or (reads and not session.readonly_mode):
                    return messages.REDIRECT.format(target)
        # A script that already wrote cannot be failed halfway by server state (SCRIPT_WRITE_DIRTY).
        wrote = run is not None and run.wrote
        if self._maxmemory and not wrote and not session.from_primary:
            if run is not None:
                if denyoom and run.pre_oom and not run.allow_oom:
                    return messages.OOM
            else:
                # Valkey 9.1 queues a command that would not be refused for memory on its own (reads, PING,
                # CLIENT PAUSE) even while out of memory; only what may grow memory is refused, queued or not
                if self.used_memory_fn() > self._maxmemory:
                    # processCommand evicts before every command, a read too (a client tracking an evicted key
                    # hears of it before this command's reply); only a command that may grow memory is refused
                    fits = self.evict()
                    if self.keyspace.deleted_by_server:
                        self.server_deletes()
                    if denyoom and not fits:
                        return messages.OOM
        if write and self._min_replicas_to_write and not wrote and not self.enough_good_replicas():
            return messages.NOREPLICAS
        dur = self.durability
        if write and dur.refusing and not wrote:
            text = dur.refuse_writes()
            if text is not None:
                return text
        gate = self._gate
        if gate is not None and not session.from_primary:
            # A planned failover's hand-over holds writes (and, once the lease is handed over, every command
            # touching data) as CLIENT PAUSE does: the command waits unanswered and runs again from scratch
            # afterwards, when this node, a replica by then, answers -MOVED to the new primary. Checked before
            # -READONLY: a client must never see the moment this node is a replica that its topology lags.
            # (getattr: a gate that never hands over, a REPLICAOF link, has no hold)
            handover = getattr(gate, "handover", None)
            if run is None and handover is not None and handover.holding and handover.holds(
                    may_replicate, cmd.touches_data or (queue is not None and session.multi_touches_data)):
                return POSTPONE
            if write and not wrote and gate.is_replica():
                # (a replica of a fenced old primary region names the fence: replication/region_role.py)
                role = getattr(gate, "region_role", None)
                fence = role.fence if role is not None else None
                return messages.REGION_FENCED.format(fence) if fence else messages.READONLY
            # a Valkey-protocol replica (REPLICAOF) refuses every command without the `stale` flag while its
            # link is down and replica-serve-stale-data is no; a shard member checks commands touching data
            if cmd.touches_data or write or (gate.checks_stale and not cmd.stale):
                text = gate.serving_error(write)
                if text is not None:
                    return text
        if run is not None:
            return None   # what follows is about the client connection, not the script's own commands
        if session.special:
            if session.subscribed and session.resp == 2 and not cmd.subscribed_ok:
                return messages.PUBSUB_CONTEXT.format(cmd.fullname)
        # (the REPLICAOF link's session is what loads the primary's dataset: server/valkeyreplica.py)
        if self._loading and not cmd.loading and not session.from_primary:
            return messages.BUSY_LOADING
        busy = self._busy
        if busy is not None:
            text = busy.refuse(session, cmd, args)
            if text is not None:
                return text
        if session.special and session.monitor and (may_replicate or write or cmd.readonly):
            return messages.REPLICA_KEYSPACE
        pause = self._pause
        if pause is not None and pause.must_postpone(may_replicate):
            return POSTPONE
        # (a command being queued in MULTI is not held: EXEC is, for everything it queued)
        # (nor is a primary's write on a REPLICAOF link: its caller cannot wait, and a replica takes no lock)
        if (self._locks and not queueing and not session.from_primary and (write or may_replicate)
                and self._meets_lock(session, cmd, args, queue)):
            return POSTPONE
        return None

    def _meets_lock(self, session, cmd, args, queue) -> bool:
        """Whether a command that may write must wait for a key lock (off_loop). A script's own commands are
        not checked here: a script that may write waits before it starts, so none runs while a lock is held."""
        if queue is not None:
            for qcmd, qargs in queue:
                write, _denyoom, may_replicate = self._flags(qcmd, qargs, session)
                if (write or may_replicate) and self._meets_lock(session, qcmd, qargs, None):
                    return True
            return False
        if cmd.calls_commands:
            return True           # EVAL / FCALL that may write: its keys are not all known
        if not cmd.write:
            return False          # PUBLISH and the like: may replicate, write no key
        if cmd.keyless or cmd.keys_incomplete:
            return True           # FLUSHALL, SWAPDB, SORT ... STORE: which keys, unknown
        locked = self.key_locks
        return any(k in locked for k in cmd.keys(args))

    # -- work off the loop --------------------------------------------------------------------------
    def off_loop(self, ctx, args, keys, work, finish):
        """Runs work() (no keyspace access but to the values of `keys`, which stay as they are) on a worker
        thread while writes to `keys` wait, once every write to `keys` is committed (sync mode), then
        finish(ctx, result) on the loop as the command's handler
        (result: what work returned, or the exception it raised, re-raised in finish by the caller's choice).
        Returns the Deferred the client's reply is, or None when there is no worker (no server loop, MULTI,
        a script): then the caller does the work itself, synchronously."""
        session = ctx.client
        cmd = session.last_cmd if session is not None else None
        if not ctx.may_block or cmd is None or ctx.replaying:
            return None
        gate = self._gate
        if keys and gate is not None and gate.is_replica():
            # a replica applies its primary's writes without admission (the journal, a REPLICAOF link): a
            # lock would not hold them back, so the value could change under the worker (work that reads no
            # key, a search's fan-out to the other shards, runs off the loop on a replica too)
            return None
        deferred = self.services.off_loop.start(session)
        if deferred is None:
            return None
        locked = self.key_locks
        for k in keys:
            locked[k] = locked.get(k, 0) + 1
        self.locks = self._locks + 1

        def unlock():
            for k in keys:
                n = locked[k] - 1
                if n:
                    locked[k] = n
                else:
                    del locked[k]
            self.locks = self._locks - 1

        def resume():
            retries = self.lock_retries and not self._locks   # (else kept for the last lock's end)
            if retries:
                self.lock_retries = False
            self.services.off_loop.end(session, retries)

        def done(result):
            unlock()
            try:
                reply, ticket = self.complete(session, cmd, args, lambda c: finish(c, result))
            except Exception as exc:  # noqa: BLE001 - the client must get an answer and resume
                self.services.log_exception(cmd.fullname, exc)
                reply, ticket = ErrorReply(messages.INTERNAL_ERROR_IN % (cmd.fullname, exc)), 0
            deferred.resolve(reply, ticket)
            resume()

        def failed(reason):
            # the writes it waited for were not persisted: the values it holds may never have existed
            unlock()
            deferred.resolve(ErrorReply(messages.JOURNAL_FAILED_WRITE.format(reason)), 0)
            resume()

        dur = self.durability
        ticket = dur.read_ticket(session.db_id, keys) if dur.pending else 0
        if ticket:
            # What work() sends away (MIGRATE's RESTOREs to another server) must be committed here first: a
            # crash of this node would otherwise leave the target holding a write that was never acknowledged.
            # The keys are locked already, so no newer write to them can slip in meanwhile.
            dur.when_committed(ticket, lambda: self.services.off_loop.run(work, done), failed)
        else:
            self.services.off_loop.run(work, done)
        return deferred

    def complete(self, session, cmd, args, handler):
        """The loop's end of a command that worked off the loop: handler(ctx) runs through call() in the
        command's place (its deletes are effects, handed to durability here), not accounted a second time.
        Returns (reply, ticket): the ticket of its effects, or of what it read while writes are uncommitted."""
        self.mark()
        reply, effects, touched = self.call(session, cmd, args, handler=handler, count_call=False)
        dur = self.durability
        ticket = 0
        if effects:
            ticket = dur.submit(effects, touched)
            session.last_write_index = dur.assigned
        elif dur.assigned > dur.committed and type(reply) is not ErrorReply:
            ticket = self._read_ticket(session, cmd, args)
        obs = self.observer
        if obs is not None:
            obs.after_top(session)
        return reply, ticket

    def enough_good_replicas(self) -> bool:
        """checkGoodReplicasStatus: a replica, or min-replicas-max-lag 0, always passes; a primary needs
        min-replicas-to-write replicas heard from within min-replicas-max-lag seconds."""
        if not self._min_replicas_to_write or not self.min_replicas_max_lag:
            return True
        gate = self._gate
        if gate is not None and gate.is_replica():
            return True
        return self.services.replication.good_replicas(self.min_replicas_max_lag * 1000) >= self._min_replicas_to_write

    def reject(self, session, cmd, text):
        """rejectCommand: flags a transaction being queued, counts, and answers the error. EXEC itself rejected
        answers EXECABORT with the reason, inside MULTI or not (execCommandAbort); a reason Valkey composes
        without a code (arity, pubsub context) carries none there, where a reply gets its `ERR `."""
        if session.in_multi:
            session.multi_error = True
        if cmd is not None:
            cmd.rejected_calls += 1
        if cmd is not None and cmd.fullname == "exec":
            self.discard(session)
            # clusterRedirectClient answers EXEC with the redirection itself
            if type(text) is not Redirection:
                text = messages.EXECABORT_BECAUSE.format(text[4:] if text.startswith("ERR ") else text)
        self.count_error(text)
        return ErrorReply(text)

    def count_error(self, text):
        """afterErrorReply + incrementErrorCount: total_error_replies always; errorstats by the error's code
        (its first word when a space ends it within 32 bytes of the reply, else ERR), at most
        ERRORSTATS_MAX codes: one more (a script inventing codes) replaces them all with
        ERRORSTATS_DISABLED, logs the list once, and nothing is counted by code until CONFIG RESETSTAT."""
        self.total_errors += 1
        counts = self.error_counts
        if self.errorstats_disabled:
            if counts:
                return
            self.errorstats_disabled = False   # CONFIG RESETSTAT emptied the table: counting starts again
        space = text.find(" ", 0, 31)      # the reply is "-" + text: Valkey looks at its first 32 bytes
        prefix = text[:space] if space > 0 else "ERR"
        n = counts.get(prefix)
        if n is not None:
            counts[prefix] = n + 1
        elif len(counts) < ERRORSTATS_MAX:
            counts[prefix] = 1
        else:
            log.warning("Errorstats stopped adding new errors because the number of errors reached the limit, "
                        "may be misuse of lua error.")
            log.warning("Current errors code list: %s", "".join(k + ", " for k in sorted(counts)))
            counts.clear()
            counts["ERRORSTATS_DISABLED"] = 1
            self.errorstats_disabled = True

    def evict(self) -> bool:
        """Evicts until under maxmemory. False if the policy forbids it or nothing is left."""
        if self.pause is not None:
            return True   # CLIENT PAUSE pauses eviction too (PAUSE_ACTION_EVICT): nothing is written meanwhile
        if self.maxmemory_policy == "noeviction" or self.import_mode:
            return False
        used, limit = self.used_memory_fn, self.maxmemory
        for _ in range(100000):
            if used() <= limit:
                return True
            if self.keyspace.evict_one(self.maxmemory_policy, self.maxmemory_samples) is None:
                return False
        return used() <= limit

    def out_of_memory(self) -> bool:
        return bool(self.maxmemory) and self.used_memory_fn() > self.maxmemory and not self.evict()

    def reset_stats(self):
        """CONFIG RESETSTAT's part here: the command count and the error-reply counters."""
        self.total_commands = 0
        self.total_errors = 0
        self.error_counts.clear()
        self.qbuf_limit_disconnections = 0

    def query_buffer_limit_reached(self, session):
        """handleQbLimitReached: the client is closed (after durakv's error reply), counted in INFO's
        client_query_buffer_limit_disconnections and logged as a warning, not as a protocol error."""
        self.qbuf_limit_disconnections += 1
        log.warning("Closing client that reached max query buffer length: id=%d addr=%s name=%s", session.id,
                    session.addr, session.name.decode("utf-8", "replace"))

    # -- call() ---------------------------------------------------------------------------------------
    def call(self, session, cmd, args, handler=None, caller=None, count_call=True):
        """Runs one admitted command (or `handler(ctx)` for a blocked retry) with its accounting.
        `caller`: the client a script runs for (its command is logged and counted as that client's, as Valkey
        does for server.current_client); count_call False: the call was accounted when it started (complete).
        Returns (reply, effects, touched)."""
        ctx = session.ctx
        if ctx is None:
            ctx = self.new_context(session)
        keyspace = self.keyspace
        obs = self.observer
        pre = obs.before_call(session, cmd, args) if obs is not None else None
        db = ctx.db
        write = cmd.write
        if write:
            key_idx = cmd.fixed_keys
            if key_idx is None or len(args) <= key_idx[-1]:
                key_idx = cmd.key_indexes(args)
            before = 0
            # lazy expiry first, so the handler sees live keys; not for a blocked retry, which looks with no
            # effect first (a key expired meanwhile keeps it blocked and stays for the next reader to delete)
            look = keyspace.lookup if handler is None else keyspace.peek
            for i in key_idx:
                k = args[i]
                v = look(db, k)
                if v is not None:
                    before += (_STRING_KEY_COST + len(k) + len(v)) if type(v) is bytes else estimate_key(k, v)
        elif cmd.readonly:
            keyspace.reading = True   # keyspace_hits / keyspace_misses count read lookups only
        start = self.mark_s
        try:
            reply = cmd.handler(ctx, args) if handler is None else handler(ctx)
        except CommandError as exc:
            reply = ErrorReply(exc.text)
        except Exception as exc:  # a handler bug must not take the server down
            reply = ErrorReply(messages.INTERNAL_ERROR_IN % (cmd.fullname, exc))
            self.services.log_exception(cmd.fullname, exc)
        end = self.mark_s = self.perf_counter()
        keyspace.reading = False
        if type(reply) is ErrorReply and self.stats_enabled:
            # a failed call, raised or answered (a script's error, MIGRATE's after its DELs); counted in
            # errorstats unless counted where it arose
            cmd.failed_calls += 1
            if not reply.counted:
                self.count_error(reply.text)
        if (self.stats_enabled and count_call and type(reply) is not Blocked
                and (handler is None or reply is not None)):
            # a command that blocks is accounted once, when it is served (or times out, or is unblocked)
            self.account(caller or session, cmd, args, int((end - start) * 1e6))
        if write:
            after = 0
            data = db.data
            for i in key_idx:
                k = args[i]
                v = data.get(k)
                if v is not None:
                    after += (_STRING_KEY_COST + len(k) + len(v)) if type(v) is bytes else estimate_key(k, v)
            keyspace.used_bytes += after - before
        effects = ctx.effects
        if keyspace.deleted_by_server:
            ctx.take_server_deletes()
        elif not effects:
            if obs is not None:
                obs.after_call(session, cmd, args, reply, (), (), pre, handler is not None)
            return reply, (), ()
        ctx.effects = []
        keyspace.changes += len(effects)   # Valkey's server.dirty: changes since the last snapshot
        touched = ctx.touched
        if ctx.touched_exact:
            ctx.touched_exact = False
        elif touched is not None and not cmd.calls_commands and (
                obs is not None or self.durability.needs_touched or self.watchers):
            if cmd.keys_incomplete:
                touched = self._effect_keys(effects, touched)   # SORT ... STORE: its effects name the keys
            elif cmd.keyless:
                if write:
                    touched = None                # FLUSHALL, SWAPDB, FUNCTION LOAD: no key list
            elif write:
                db_id = db.id
                for i in key_idx:
                    touched.append((db_id, args[i]))
            # a read's effects are the keys it expired, already listed: its other keys did not change
            # (MGET of a live key and an expired one invalidates only the expired one, as Valkey)
        if touched is None or touched:
            ctx.touched = []     # the list leaves with the effects; the next command starts a new one
        if self.watchers and not cmd.calls_commands:
            self.touch_watched(touched)  # EXEC's and scripts' own commands touched theirs already
        if obs is not None:
            obs.after_call(session, cmd, args, reply, effects, touched, pre, handler is not None)
        return reply, effects, touched

    def account(self, session, cmd, args, usec):
        """One command's call counts: commandstats, latency histogram, slow log, the client's tot-cmds."""
        cmd.calls += 1
        cmd.usec += usec
        cmd.latency[usec.bit_length()] += 1   # LATENCY HISTOGRAM (commands/introspection.py)
        if usec >= self.monitors.threshold_us and not cmd.skip_slowlog:
            self.monitors.record(session, cmd, args, usec)
        self.total_commands += 1
        session.commands_processed += 1

    def _effect_keys(self, effects, touched):
        """The keys effects touch, from their own key specs (for commands whose specs cannot name them)."""
        for db_id, argv in effects:
            ecmd, text = self.resolve(argv)
            if text is not None or ecmd.keyless or ecmd.keys_incomplete:
                return None
            touched.extend([(db_id, argv[i]) for i in ecmd.key_indexes(argv)])
        return touched

    def submit(self, effects, touched):
        """Effects produced outside a client's command (server-side expiry/eviction, a script that ran past
        busy-reply-threshold): to durability, WATCH and the observer. Returns the ticket."""
        if not effects:
            return 0
        if self.watchers:
            self.touch_watched(touched)
        ticket = self.durability.submit(effects, touched)
        obs = self.observer
        if obs is not None:
            obs.effects_outside_call(effects, touched)
            obs.after_top(None)
        return ticket

    def submit_collected(self, effects, touched):
        """Effects whose commands already went through call() (a long script's, collected while it ran):
        only durability and the blocked-client wake-ups are left to do."""
        if not self.durability.feeds:
            # the SYNC connection that wanted its PUBLISHes went away while the script ran: never journaled
            effects = [e for e in effects if type(e[1]) is not FeedOnly]
        ticket = self.durability.submit(effects, touched)
        obs = self.observer
        if obs is not None:
            obs.after_top(None)
        return ticket

    def server_deletes(self):
        """DEL effects for keys the server removed on its own (active expiry, eviction), submitted."""
        deleted = self.keyspace.deleted_by_server
        if not deleted:
            return 0
        effect = self.keyspace.deletion_effect
        effects = [(db_id, effect(key, reason)) for db_id, key, reason in deleted]
        touched = [(db_id, key) for db_id, key, _reason in deleted]
        deleted.clear()
        self.keyspace.changes += len(effects)
        return self.submit(effects, touched)

    # -- blocked commands ---------------------------------------------------------------------------
    def retry_blocked(self, session, cmd, args, retry):
        """A blocked command retried because one of its keys changed (Valkey re-processes it through
        processCommand). Returns (reply, ticket): reply None or Blocked keeps it waiting."""
        if cmd is not None:
            # (denyoom is not checked again: the command was admitted, OOM included, when it first ran)
            text = self.admit(session, cmd, args, cmd.write, False, cmd.may_replicate)
            if text is POSTPONE:
                if self._locks:
                    self.lock_retries = True   # retried when the locks are gone (off_loop)
                return None, 0
            if text is not None:
                return self.reject(session, cmd, text), 0
        self.mark()
        reply, effects, touched = self.call(session, cmd, args, handler=retry)
        ticket = 0
        dur = self.durability
        if effects:
            ticket = dur.submit(effects, touched)
            if reply is not None and type(reply) is not Blocked:
                session.last_write_index = dur.assigned
        elif (reply is not None and type(reply) is not Blocked and type(reply) is not ErrorReply
              and cmd is not None and dur.assigned > dur.committed):
            # Served by a write that is not committed yet (XREAD BLOCK woken by an XADD): the reply is what
            # that write made, so it waits for it like any read of its keys.
            ticket = self._read_ticket(session, cmd, args)
        return reply, ticket

    # -- replicas and recovery ----------------------------------------------------------------------
    def apply(self, session, db_id, argv):
        """Applies one journaled effect (start-up replay, a replica following the journal): no admission,
        nothing journaled again. Returns the reply (an ErrorReply means the journal and this code disagree)."""
        cmd, text = self.resolve(argv)
        if text is not None:
            return ErrorReply(text)
        ctx = session.ctx or self.new_context(session)
        if session.db_id != db_id:
            session.db_id = db_id
            ctx.db = self.keyspace.dbs[db_id]
        reply, effects, touched = self.call(session, cmd, argv)
        obs = self.observer
        if obs is not None and effects:
            obs.after_top(None)
        return reply

    # -- WATCH --------------------------------------------------------------------------------------
    def watch(self, session, db_id, key):
        dk = (db_id, key)
        if dk in session.watched:
            return
        db = self.keyspace.dbs[db_id]
        session.watched[dk] = key in db.data and self.keyspace.is_expired(db, key)
        self.watchers.setdefault(dk, set()).add(session)

    def unwatch_all(self, session, keep_broken=False):
        for wk in session.watched:
            s = self.watchers.get(wk)
            if s is not None:
                s.discard(session)
                if not s:
                    del self.watchers[wk]
        session.watched.clear()
        if not keep_broken:
            session.watch_broken = False

    def touch_watched(self, touched):
        """touchWatchedKey for every key an effect changed (None: unknown keys; the handlers of FLUSHDB,
        FLUSHALL and SWAPDB call touch_db_watched themselves, before the data is gone)."""
        if touched is None:
            return
        watchers = self.watchers
        # once per key: a read that expired a key lists it twice (the deletion and the command's own key), and
        # a second touch would break a transaction the first one rightly left alone (the key was expired)
        for dk in dict.fromkeys(touched):
            sessions = watchers.get(dk)
            if sessions:
                self._touch_sessions(dk, sessions)

    def _touch_sessions(self, dk, sessions):
        dbs = self.keyspace.dbs
        for s in list(sessions):
            if s.watched.get(dk):
                # Watched while already expired: deleting it changes nothing logically (the flag clears);
                # anything else leaves the transaction alone, as Valkey's touchWatchedKey.
                if dk[1] not in dbs[dk[0]].data:
                    s.watched[dk] = False
                continue
            s.watch_broken = True
            self.unwatch_all(s, keep_broken=True)

    def touch_db_watched(self, emptied_db, replaced_with=None):
        """touchAllWatchedKeysInDb: FLUSHDB/FLUSHALL (replaced_with None) and SWAPDB (both ways), called by
        the handler before it changes the databases."""
        ks = self.keyspace
        emptied_id = emptied_db.id
        for (db_id, key), sessions in list(self.watchers.items()):
            if db_id != emptied_id:
                continue
            in_emptied = key in emptied_db.data
            in_replaced = replaced_with is not None and key in replaced_with.data
            if not (in_emptied or in_replaced):
                continue
            for s in list(sessions):
                dk = (db_id, key)
                if s.watched.get(dk):
                    if not in_replaced:
                        s.watched[dk] = False   # an expired key now deleted: no logical change
                        continue
                    if ks.is_expired(replaced_with, key):
                        continue                # an expired key stays expired
                elif not in_emptied and ks.is_expired(replaced_with, key):
                    s.watched[dk] = True        # a missing key replaced by an expired one
                    continue
                s.watch_broken = True

    # -- MULTI / EXEC -------------------------------------------------------------------------------
    def discard(self, session):
        session.in_multi = False
        session.multi_queue = []
        session.multi_bytes = 0
        session.multi_error = False
        session.multi_write = session.multi_denyoom = session.multi_may_replicate = False
        session.multi_touches_data = False
        self.unwatch_all(session)

    def exec_queued(self, session, ctx):
        """execCommand: runs the queued commands atomically. Returns the reply; the effects and touched keys of
        the whole transaction are added to ctx (they leave as one journal batch)."""
        queue = session.multi_queue
        if session.multi_error:
            self.discard(session)
            return ErrorReply(messages.EXECABORT)
        if session.watch_broken or self._watched_expired(session):
            self.discard(session)
            return NullArray
        self.discard(session)   # out of MULTI and unwatched before running, as Valkey does
        replies = []
        effects = ctx.effects
        touched = ctx.touched
        ctx.may_block = False  # blocking commands inside a transaction answer as if timed out
        acl = self.acl
        try:
            for cmd, args in queue:
                if acl is not None:
                    text = acl.check(session, cmd, args, "exec", None)  # rules may have changed since queueing
                    if text is not None:
                        replies.append(ErrorReply(text))
                        continue
                saved_effects = ctx.effects
                ctx.effects = []
                saved_touched = ctx.touched
                ctx.touched = []
                outer = self.nested_effects
                self.nested_effects = bool(effects) or bool(outer)
                try:
                    reply, eff, d = self.call(session, cmd, args)
                finally:
                    self.nested_effects = outer
                    ctx.effects = saved_effects
                    ctx.touched = saved_touched
                replies.append(reply)
                if eff:
                    effects.extend(eff)
                    touched = _merge_touched(touched, d)
        finally:
            ctx.may_block = True
        ctx.touched = touched
        return replies

    def _watched_expired(self, session):
        ks = self.keyspace
        for (db_id, key), expired_when_watched in session.watched.items():
            if expired_when_watched:
                continue
            db = ks.dbs[db_id]
            if key in db.data and ks.is_expired(db, key):
                return True
        return False

    # -- scripts ------------------------------------------------------------------------------------
    def script_call(self, run, argv):
        """server.call / server.pcall from a script: scriptCall's own checks (arity, noscript, read-only
        script), then admit() in its script form, then call(). Returns the reply value."""
        cmd, text = self.resolve(argv)
        if cmd is None or (text is not None and text.startswith(messages.UNKNOWN_PREFIX)):
            return self._script_refusal(run, None, messages.SCRIPT_UNKNOWN_COMMAND)
        if text is not None:
            return self._script_refusal(run, cmd, messages.SCRIPT_WRONG_ARITY)
        if cmd.noscript and not self.script_disable_deny:
            return self._script_refusal(run, cmd, messages.SCRIPT_NOT_ALLOWED)
        if run.readonly and cmd.may_replicate:
            return self._script_refusal(run, cmd, messages.SCRIPT_WRITE_IN_RO)
        session = run.session
        text = self.admit(session, cmd, argv, cmd.write, cmd.denyoom, cmd.may_replicate, run=run)
        if text is not None:
            return self._script_refusal(run, cmd, text)
        if cmd.write:
            run.wrote = True
        outer = self.nested_effects
        self.nested_effects = bool(run.effects) or bool(outer)   # EVAL in a transaction that wrote
        try:
            reply, effects, touched = self.call(session, cmd, argv, caller=run.caller)
        finally:
            self.nested_effects = outer
        if type(reply) is ErrorReply:
            run.counted_errors.append(reply.text)
        if effects:
            run.effects.extend(effects)
            run.touched = _merge_touched(run.touched, touched)
        if type(reply) is Blocked or hasattr(reply, "resolve"):
            return ErrorReply(messages.SCRIPT_COMMAND_NOT_CALLABLE % cmd.fullname)
        return reply

    def _script_refusal(self, run, cmd, text):
        """scriptCall's error path: the command (when there is one) is counted as rejected and the error in
        errorstats, once (the script's reply of it is not counted again)."""
        if cmd is not None:
            cmd.rejected_calls += 1
        self.count_error(text)
        run.counted_errors.append(text)
        return ErrorReply(text)

    def script_acl_allowed(self, run, argv) -> bool:
        """server.acl_check_cmd: the ACL check alone for the script's caller, nothing logged."""
        acl = self._acl
        if acl is None:
            return True
        cmd, text = self.resolve(argv)
        return cmd is not None and text is None and acl.allowed(run.caller, cmd, argv)

    def script_exists(self, argv) -> bool:
        cmd, text = self.resolve(argv)
        return cmd is not None and (text is None or not text.startswith(messages.UNKNOWN_PREFIX))


ERRORSTATS_MAX = 128   # Valkey's ERROR_STATS_NUMBER: distinct error codes errorstats keeps



