"""The durakv server process: keyspace + pipeline + durability + listeners + housekeeping timers."""

import asyncio
import concurrent.futures
import logging
import os
import resource
import signal
import ssl
import sys
import time

from .. import REDIS_COMPAT_VERSION, VALKEY_VERSION, __version__, messages
from ..commands import load_all
from .. import fastpath
from ..commands.corestate import OUTPUT_LIMITS_ALL, OUTPUT_LIMITS_NONE, OUTPUT_LIMITS_SPECIAL
from ..commands.pipeline import Pipeline
from ..commands.session import Session
from ..durability import Durability
from ..config import debug_delay, obuf_limits
from ..errors import ConfigError
from ..keyspace import Keyspace
from ..protocol.resp import OK, Deferred, ErrorReply
from ..recovery import planned_bytes, recover, recover_steps
from ..recovery.loading import LoadProgress, LoadStopped, Slicer
from ..snapshot.adopt import build_snapshot
from ..journal.lock import lock_data_dir
from ..snapshot.datadir import check_data_dir, open_data_dir
from . import allocator
from .acl import ServerAcl
from ..scripting.lua import set_memory_limit as set_lua_memory_limit
from .blocking import Blocking
from .backup import BackupScheduler, BackupSessions
from .clientevict import ClientEviction
from ..cluster.identity import persistent_node_id
from ..cluster.tls import node_client_context
from ..cluster.settings import CONFIG_FIELDS as SHARD_SETTINGS, NONE_REFUSED
from .cluster import ClusterRouting, single_node_topology, unassigned_topology
from ..routing import key_slot
from .connection import Connection
# imported with the server, not at the first INFO: a node answers INFO while it loads, and an import then is a
# stall of its own
from .info import render_info
from .loopstats import LoopStats
from .migrate import MigrateSockets
from ..keyspace.events import flags_to_string as notify_flags_to_string, parse_flags as parse_notify_flags
from .notify import Hooks
from .services import ServerServices
from .pubsub import PubSub
from .watchdog import Watchdog

log = logging.getLogger("durakv.server")

# Descriptors kept for the server's own files beyond its clients (Valkey's CONFIG_MIN_RESERVED_FDS): listeners,
# journal segments, the data-directory lock, snapshot builder pipes, NATS connections, logs.
RESERVED_FDS = 32
# After a snapshot failed, the automatic one is not tried again for this long (Valkey's CONFIG_BGSAVE_RETRY_DELAY):
# the cron looks 10 times a second, and a disk that refuses would otherwise be asked, and logged, at that rate.
SNAPSHOT_RETRY_DELAY_S = 5.0


def adjust_open_files_limit(config):
    """Valkey's adjustOpenFilesLimit: raise RLIMIT_NOFILE to maxclients + RESERVED_FDS if allowed, else lower
    maxclients to what the limit allows (so extra clients get -ERR max number of clients, not a reset, and the
    journal always finds a descriptor). Raises ConfigError when not even one client would fit."""
    maxclients = config["maxclients"]
    maxfiles = maxclients + RESERVED_FDS
    try:
        oldlimit, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError) as exc:
        log.warning("Unable to obtain the current NOFILE limit (%s), assuming 1024 and setting the max clients "
                    "configuration accordingly.", exc)
        config.values["maxclients"] = 1024 - RESERVED_FDS
        return
    if oldlimit == resource.RLIM_INFINITY or oldlimit >= maxfiles:
        return
    bestlimit = maxfiles
    error = ""
    while bestlimit > oldlimit:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (bestlimit, max(bestlimit, hard) if hard != resource.RLIM_INFINITY
                                                        else hard))
            break
        except (OSError, ValueError) as exc:
            error = getattr(exc, "strerror", None) or str(exc)
            if bestlimit < 16:
                bestlimit = oldlimit
                break
            bestlimit -= 16
    bestlimit = max(bestlimit, oldlimit)
    if bestlimit >= maxfiles:
        log.info("Increased maximum number of open files to %d (it was originally set to %d).", maxfiles, oldlimit)
        return
    if bestlimit <= RESERVED_FDS:
        raise ConfigError("Your current 'ulimit -n' of %d is not enough for the server to start. Please increase "
                          "your open file limit to at least %d. Exiting." % (oldlimit, maxfiles))
    config.values["maxclients"] = bestlimit - RESERVED_FDS
    log.warning("You requested maxclients of %d requiring at least %d max file descriptors.", maxclients, maxfiles)
    log.warning("Server can't set maximum open files to %d because of OS error: %s.", maxfiles, error)
    log.warning("Current maximum open files is %d. maxclients has been reduced to %d to compensate for low "
                "ulimit. If you need higher maxclients increase 'ulimit -n'.", bestlimit, bestlimit - RESERVED_FDS)


def open_files_room(maxclients) -> int:
    """updateMaxclients: raises the open-files limit for `maxclients` clients if it can; returns how many
    clients the limit allows now (maxclients itself when it was raised enough)."""
    want = maxclients + RESERVED_FDS
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return maxclients
    if soft == resource.RLIM_INFINITY or soft >= want:
        return maxclients
    if hard == resource.RLIM_INFINITY or want <= hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            return maxclients
        except (OSError, ValueError):
            pass
    return max(soft - RESERVED_FDS, 1)


class Server:
    """Everything one node holds: the keyspace, the pipeline commands run through, durability, the
    listeners and timers. Command handlers reach it only through its services (server/services.py)."""

    # read or counted per socket read by the compiled read callback at their offsets (fastpath/_core.c)
    __slots__ = ("net_input_bytes", "reads_processed", "net_output_bytes", "writes_processed", "loop_stats",
                 "clock_ms", "wall_clock_ms", "now_ms", "obuf_limited", "obuf_normal_limited", "batch_core",
                 "__dict__", "__weakref__")

    @property
    def loading(self) -> bool:
        """Loading the dataset (start-up, a journal reload): INFO says so and data commands answer -LOADING."""
        return self._loading

    @loading.setter
    def loading(self, value):
        self._loading = value
        self.pipeline.loading = value

    def __init__(self, config, clock_ms=None):
        load_all()
        self.config = config
        # the wall clock unless one is injected: the compiled read callback reads it itself while
        # clock_ms is this one
        self.wall_clock_ms = lambda: int(time.time() * 1000)
        self.clock_ms = clock_ms or self.wall_clock_ms
        self.keyspace = Keyspace(config.database_count(), clock_ms=self.clock_ms)
        self.services = ServerServices(self)
        self.pipeline = Pipeline(self.keyspace, services=self.services, config=config)
        self.durability = Durability()
        self.durability.ack_before_commit = config["debug-ack-before-commit"]   # tests of the checkers only
        self.pipeline.durability = self.durability
        self.journal = None
        self.loop = None
        self.clients = {}
        self.listeners = []
        self.started_at = time.time()
        self.started_monotonic = time.monotonic()
        self.total_connections = 0
        self.rejected_connections = 0
        self.protocol_errors = 0
        self.net_input_bytes = 0           # INFO total_net_input_bytes / total_net_output_bytes
        self.net_output_bytes = 0
        self.reads_processed = 0           # INFO total_reads_processed / total_writes_processed: socket reads
        self.writes_processed = 0          # and writes (the event loop's, one per data_received / write)
        self.last_snapshot_index = 0
        self.lastsave = int(time.time())
        self.last_bgsave_status = "ok"
        self.snapshot_in_progress = None   # Future while a snapshot is being built
        self.snapshot_journal_bytes = 0    # journal bytes at the last snapshot
        self.auto_snapshot = False         # the journal's growth is watched (a local journal's server, once started)
        self.snapshot_failed_at = None     # monotonic s of the last failed snapshot (SNAPSHOT_RETRY_DELAY_S)
        # INFO persistence's rdb_/aof_ timings: a snapshot is durakv's BGSAVE and its BGREWRITEAOF (the journal
        # before it is dropped), so both report the same builds
        self.snapshot_started = None       # monotonic s of the build under way
        self.last_snapshot_seconds = -1    # how long the last one took (-1: none yet, as Valkey)
        self.snapshot_scheduled = False    # BGREWRITEAOF / BGSAVE SCHEDULE during a build: one more after it
        # INFO stats: SYNC / PSYNC answers (every one is a full resync: durakv keeps no backlog) and the forks
        # of large SYNC exports (server/replfeed.py)
        self.sync_full = 0
        self.sync_partial_err = 0
        self.total_forks = 0
        self.latest_fork_usec = 0
        self.loading = False
        self.load_progress = None          # recovery/loading.LoadProgress while loading (INFO's loading_* fields)
        self.shutdown_event = None
        self.ops_samples = []              # (monotonic_s, total_commands) for instantaneous ops/sec
        self.heap_decay = allocator.Decay()  # free heap given back once a second when there is much of it
        self.loop_stats = LoopStats()      # INFO's eventloop_* figures and the loop's heartbeat (loopstats.py)
        self.active_expire_enabled = True
        self.cron_paused = False
        self._repl_cron_loops = 0          # replicationCron runs since start (repl-ping-replica-period)
        self._repl_cron_next = 0.0         # monotonic s of its next run
        self.now_ms = self.clock_ms()         # refreshed per batch of requests (CLIENT LIST idle)
        self._durability_switch = None        # the mode a live none <-> journal switch is going to
        self.cluster_node = None           # set when the journal is JetStream (multi-AZ shard member)
        self.journal_reloads = 0           # datasets rebuilt from disk after a journal failure
        self.expiry_held = False           # expiry suspended while the journal cannot persist its DELs
        self.cluster_routing = None        # cluster mode: the slot check and the topology (server/cluster.py)
        self._apply_session = Session(authenticated=True)
        self.pipeline.new_context(self._apply_session).replaying = True
        self.pubsub = PubSub(self)         # channels and patterns (server/pubsub.py)
        self.blocking = Blocking(self)     # clients blocked on keys or paused (server/blocking.py)
        # MIGRATE's cached connections to target instances; over TLS from a cluster node that serves TLS
        self.migrate_sockets = MigrateSockets(
            (lambda: node_client_context(config)) if config["cluster-enabled"] and config["tls-port"] else None)
        self._off_loop_pool = None         # worker threads of MIGRATE and large DUMP/RESTORE (off_loop_pool)
        self.valkey_link = None            # REPLICAOF: the replication link with a Valkey primary
        self.hooks = Hooks(self)           # notifications, tracking, MONITOR, ... (server/notify.py)
        # search indexes (keyspace/search) are rebuilt from the keyspace in slices between commands
        self._backfill_scheduled = False
        self.hooks.search.wakeup = self._schedule_backfill
        # The compiled batch loop (fastpath/_core.c) or None: connections run the commands it can through it
        self.batch_core = fastpath.batch_core(self.pipeline, self.durability, self.hooks)
        self.run_id = os.urandom(20).hex()
        self.dir = os.path.abspath(config["dir"])
        self.acl = ServerAcl(self)         # ACL users, the ACL LOG, the aclfile (server/acl.py)
        self.metrics = None                # --metrics-port: durakv's own Prometheus metrics (server/metrics.py)
        self.plain_listeners = []          # the client port's listeners (CONFIG SET port replaces them)
        self.client_eviction = ClientEviction(self)   # maxmemory-clients (server/clientevict.py)
        self.watchdog = Watchdog(self)     # watchdog-period (server/watchdog.py)
        self.backups = BackupSessions(self)   # DURAKV BACKUP: what `durakv backup create` copies (server/backup.py)
        self.backup_scheduler = BackupScheduler(self)   # backup-schedule
        self._apply_config_all()
        config.listeners.append(self._on_config_set)

    # -- configuration --------------------------------------------------------------------------
    @property
    def requirepass(self):
        return self.config["requirepass"]

    def _apply_config_all(self):
        for name in ("client-output-buffer-limit", "requirepass", "maxmemory", "maxmemory-policy",
                     "maxmemory-samples", "lfu-log-factor", "lfu-decay-time", "notify-keyspace-events",
                     "lua-memory-limit", "lazyfree-lazy-expire", "lazyfree-lazy-eviction", "lazyfree-lazy-server-del", "tracking-table-max-keys",
                     "min-replicas-to-write", "min-replicas-max-lag", "import-mode", "bf.bloom-capacity",
                     "bf.bloom-expansion", "bf.bloom-fp-rate", "bf.bloom-tightening-ratio",
                     "bf.bloom-memory-usage-limit", "bf.bloom-use-random-seed"):
            self._on_config_set(name, self.config[name])

    def _on_config_set(self, name, value):
        d = self.pipeline
        if name.startswith("bf.") and self.keyspace.bloom_defaults.set(name, value):
            return   # the defaults a new Bloom filter takes (keyspace/bloom.py)
        if name == "client-output-buffer-limit":
            self.obuf_limits = obuf_limits(value)
            self.obuf_limited = any(hard or soft for hard, soft, _s in self.obuf_limits.values())
            # A plain client is checked only when its own class has a limit (the defaults limit only replicas
            # and pubsub): the check on every reply cost the unpipelined path a call per command (issue 18)
            hard, soft, _s = self.obuf_limits["normal"]
            self.obuf_normal_limited = bool(hard or soft)
            d.core_state.output_limits = (OUTPUT_LIMITS_ALL if self.obuf_normal_limited else
                                          OUTPUT_LIMITS_SPECIAL if self.obuf_limited else OUTPUT_LIMITS_NONE)
        elif name == "client-held-replies-limit":
            for conn in self.clients.values():
                conn.outbox.limit_bytes = value
        elif name == "proto-max-bulk-len":
            for conn in self.clients.values():   # every client at once, as Valkey reads server.proto_max_bulk_len
                conn.parser.max_bulk_len = value
        elif name == "client-query-buffer-limit":
            for conn in self.clients.values():
                conn.parser.query_buffer_limit = value
        elif name in ("maxmemory-clients", "maxmemory"):
            self.client_eviction.configure()
        elif name == "watchdog-period":
            self.watchdog.configure()
        elif name == "import-mode":
            self._set_import_mode(value)
        if name == "requirepass":
            d.requirepass = value or None
        elif name == "maxmemory":
            d.maxmemory = value
            self.evict_soon()
        elif name == "maxmemory-policy":
            d.maxmemory_policy = value
            # Valkey keeps every object's LRU clock unless the policy is LFU (OBJECT IDLETIME answers from it)
            self.keyspace.track_access = "lfu" if value.endswith("lfu") else "lru"
            self.evict_soon()
        elif name == "maxmemory-samples":
            d.maxmemory_samples = value
        elif name == "min-replicas-to-write":
            d.min_replicas_to_write = value
        elif name == "min-replicas-max-lag":
            d.min_replicas_max_lag = value
        elif name == "tracking-table-max-keys":
            self.hooks.tracking.max_keys = value
            self.hooks.tracking.limit()
        elif name == "lazyfree-lazy-expire":
            self.keyspace.unlink_expired = value
        elif name == "lazyfree-lazy-eviction":
            self.keyspace.unlink_evicted = value
        elif name == "lazyfree-lazy-server-del":
            self.keyspace.unlink_server_del = value
        elif name == "lfu-log-factor":
            self.keyspace.lfu_log_factor = value
        elif name == "lfu-decay-time":
            self.keyspace.lfu_decay_time_min = value
        elif name == "durability" and self.durability.tracker is not None:
            self.durability.set_mode(value)
        elif name == "durability-buffer-ms" and self.durability.tracker is not None:
            self.durability.tracker.buffer_ms = value
        elif name == "journal-append-stall-ms" and self.durability.tracker is not None and self.cluster_node:
            self.durability.tracker.stall_ms = value
        elif name == "notify-keyspace-events":
            self.hooks.set_notify_flags(value)
            # CONFIG GET answers the flags as Valkey writes them back (keyspaceEventsFlagsToString: KA -> AK)
            self.config.values["notify-keyspace-events"] = notify_flags_to_string(self.hooks.notify_flags)
        elif name == "lua-memory-limit":
            set_lua_memory_limit(value)

    def evict_soon(self):
        """Valkey's startEvictionTimeProc: evict down to maxmemory on the next loop iteration, not inside the
        command that lowered the limit (CONFIG SET in a MULTI evicts after EXEC), the evicted keys journaled
        and notified as usual; skipped while CLIENT PAUSE holds writes (evictions then wait for its end)."""
        if self.loop is not None and self.pipeline.maxmemory:
            self.loop.call_soon(self._evict_now)

    def _evict_now(self):
        d = self.pipeline
        if d.pause is None and d.maxmemory and d.used_memory_fn() > d.maxmemory:
            d.mark()
            d.evict()
            d.server_deletes()

    def validate_config_set(self, name, value):
        """Extra checks CONFIG SET needs beyond parsing; returns an error reason or None."""
        if name == "notify-keyspace-events" and parse_notify_flags(value) < 0:
            return "Invalid event class character. Use 'Ag$lshzxeKEtmdn'."
        if name == "port" and self.cluster_node is not None and value != self.config["port"]:
            return messages.PORT_IN_SHARD_TOPOLOGY
        if name == "durability":
            if self.cluster_node is not None and value == "none":
                return NONE_REFUSED
            if self.loading and self.cluster_node is None:
                return messages.DURABILITY_WHILE_LOADING
            if self._durability_switch is not None:
                return "a switch of durability (to %s) is in progress" % self._durability_switch
        return None

    def config_set(self, name, value):
        """CONFIG SET of one option (value: its text): None when it holds already, else a Deferred resolved
        once it holds (see commands/services.Admin.config_set)."""
        node = self.cluster_node
        if node is not None and name in SHARD_SETTINGS:
            d = Deferred()
            self.loop.create_task(self._change_shard_setting(d, node, name, self.config.parse(name, value)))
            return d
        if name == "durability":
            value = self.config.parse(name, value)     # the mode's own name: CONFIG SET durability NONE is none
            if (value == "none") != (self.durability.mode == "none"):
                d = Deferred()
                self._durability_switch = value
                self.loop.create_task(self._switch_durability(d, value))
                return d
        if name == "maxclients":
            new = self.config.parse(name, value)
            if new > self.config["maxclients"]:
                room = open_files_room(new)
                if room < new:
                    raise ConfigError(messages.MAXCLIENTS_OS_LIMIT.format(room))
        elif name == "port" and self.loop is not None:
            new = self.config.parse(name, value)
            if new != self.config["port"]:
                self._rebind_port(new)
        elif name == "metrics-port" and self.loop is not None:
            new = self.config.parse(name, value)
            if new != self.config["metrics-port"]:
                self._move_metrics(new)
        self.config.set(name, value)
        return None

    # -- CONFIG SET port / metrics-port: listen on the new port first, then close the old --------------------
    def _bind_hosts(self):
        hosts = [h for h in self.config["bind"].split() if h]
        return [h.lstrip("-") for h in hosts]

    def _rebind_port(self, port):
        """Valkey's changeListener: the new port's sockets are bound and listening before the old listeners
        close (connected clients stay); if one cannot be bound, nothing changes and CONFIG SET fails with
        Valkey's text (the reason in the log). Port 0: no client port."""
        import socket
        hosts = self._bind_hosts()
        socks = []
        if port:
            for host in hosts:
                host_socks = []
                try:
                    for family, _t, _p, _c, addr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                                        flags=socket.AI_PASSIVE):
                        sock = socket.socket(family, socket.SOCK_STREAM)
                        host_socks.append(sock)
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                        if family == socket.AF_INET6:
                            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                        sock.bind(addr)
                        sock.listen(self.config["tcp-backlog"])
                        sock.setblocking(False)
                except OSError as exc:
                    for sock in host_socks:
                        sock.close()
                    if len(hosts) > 1 and host in ("::1", "::"):   # optional, as _listen treats it
                        log.warning("could not bind %s:%d: %s", host, port, exc)
                        continue
                    for sock in socks:
                        sock.close()
                    log.warning("CONFIG SET port %d: could not listen on %s:%d: %s", port, host, port, exc)
                    raise ConfigError(messages.CONFIG_LISTEN_FAILED) from None
                socks.extend(host_socks)
        old = self.plain_listeners
        self.plain_listeners = []
        for srv in old:
            srv.close()
            if srv in self.listeners:
                self.listeners.remove(srv)
        for sock in socks:
            self.loop.create_task(self._serve_socket(sock))
        if self.cluster_routing is not None and self.cluster_node is None:
            # a cluster of one on the local journal: CLUSTER SLOTS / NODES and MOVED name the new port
            cfg = self.config
            self.cluster_routing.install(single_node_topology(self.cluster_routing.myself_id, cfg["announce-ip"],
                                                              port, cfg["tls-port"]))
        log.info("CONFIG SET port: listening on port %d (was %d)", port, self.config["port"])

    async def _serve_socket(self, sock):
        srv = await self.loop.create_server(lambda: Connection(self), sock=sock, backlog=self.config["tcp-backlog"])
        self.listeners.append(srv)
        self.plain_listeners.append(srv)

    def _move_metrics(self, port):
        """CONFIG SET metrics-port: the metrics server on the new port starts first (a port it cannot bind
        fails the CONFIG SET and keeps the old one), then the old one stops; 0 stops it."""
        from .metrics import Metrics
        hosts = self._bind_hosts()
        if port:
            if self.metrics is None:
                self.metrics = Metrics(self)
            try:
                self.metrics.move(hosts[0] if hosts else "127.0.0.1", port)
            except OSError as exc:
                log.warning("CONFIG SET metrics-port %d: could not listen: %s", port, exc)
                raise ConfigError(messages.CONFIG_LISTEN_FAILED) from None
        elif self.metrics is not None:
            self.metrics.stop()
            self.metrics = None

    # -- import-mode ---------------------------------------------------------------------------------------
    def primary_expiry(self):
        """(expire_enabled, hide_expired) of a primary running as usual now: in import mode an expired key
        is hidden from readers but never deleted by the server (Valkey 9.1's KEY_EXPIRED without delete on a
        primary in import mode); otherwise lazy expiry deletes it."""
        return (False, True) if self.config["import-mode"] else (True, False)

    def _set_import_mode(self, on):
        """import-mode: no active or lazy expiry and no eviction on this primary; CLIENT IMPORT-SOURCE ON
        clients see expired keys as live (Connection.run_batch). A replica, a paused server or one whose
        journal failed keep their own expiry state and return to this one when they end."""
        self.pipeline.import_mode = on
        ks = self.keyspace
        state = (ks.expire_enabled, ks.hide_expired)
        held = self.expiry_held or self.valkey_link is not None or self.cluster_node is not None \
            and self.cluster_node.role != "primary"
        pause = self.blocking
        if pause._saved_active_expire is not None:
            pause._saved_lazy_expire = self.primary_expiry()   # what unpause puts back
        elif not held and state in ((True, False), (False, True)):
            ks.expire_enabled, ks.hide_expired = self.primary_expiry()

    async def _change_shard_setting(self, d, node, name, value):
        try:
            await node.shard_settings.change(name, value)
        except Exception as exc:  # noqa: BLE001 - the store unreachable, a lost race: the client is told
            log.warning("CONFIG SET %s %s for shard %s failed: %r", name, value, node.shard, exc)
            d.resolve(ErrorReply(messages.SHARD_SETTINGS_NOT_STORED % (exc or type(exc).__name__)))
            return
        d.resolve(None)

    async def _switch_durability(self, d, mode):
        """durability none <-> async/sync on a single node, live. To a journal: open it, then -- with no await
        between, so no command runs in the gap -- write a snapshot of memory at the journal's last index and
        journal every later write: snapshot plus journal hold everything, with no gap. To none: commit what is
        in flight, then stop journaling (later writes live in memory only, as none promises)."""
        started = time.monotonic()
        previous = self.durability.mode
        try:
            if mode == "none":
                if not await self.durability.drain(timeout_s=30):
                    raise RuntimeError("the journal did not commit what was in flight within 30 s")
                journal = self.journal
                self.recovered_index = journal.commit_index   # what the in-memory image covers from now on
                self.durability.detach()
                self.journal = None
                self.config.set("durability", "none")
                await journal.close()
            else:
                from ..journal.local import LocalJournal
                from ..snapshot.format import write_snapshot
                journal = LocalJournal(self.dir, segment_bytes=self.config["journal-segment-bytes"],
                                       fsync=self.config["journal-fsync"], group_per_iteration=False)
                await journal.open(base_index=max(self.recovered_index, self.last_snapshot_index))
                index = journal.commit_index
                try:
                    write_snapshot(os.path.join(self.dir, "snapshots", "snapshot-%020d.dks" % index), self.keyspace,
                                   index, journal_follows=True)
                except BaseException:
                    await journal.close()
                    raise
                self.last_snapshot_index = index
                self.journal = journal
                self.snapshot_journal_bytes = journal.bytes_size
                self.durability.attach(journal, mode, self.config["durability-buffer-ms"])
                self.config.set("durability", mode)
        except Exception as exc:  # noqa: BLE001 - the mode stays what it was; the client is told why
            log.error("switching durability %s -> %s failed: %s", previous, mode, exc)
            d.resolve(ErrorReply(messages.DURABILITY_SWITCH_FAILED % (mode, exc)))
            return
        finally:
            self._durability_switch = None
        log.info("durability switched live: %s -> %s in %.3fs", previous, mode, time.monotonic() - started)
        d.resolve(None)

    # -- start-up -------------------------------------------------------------------------------
    async def start(self):
        adjust_open_files_limit(self.config)
        # The journal thread needs the GIL back the moment its fsync returns, or every sync reply waits
        # for the interpreter's 5 ms switch interval while the event loop serves other clients.
        sys.setswitchinterval(0.0002)
        self.loop = asyncio.get_running_loop()
        self.loop_stats.start(self.loop)
        self.durability.loop = self.loop
        self.shutdown_event = asyncio.Event()
        mode = self.config["durability"]
        if self.config["journal-backend"] == "jetstream":
            # Lock --dir (one server per data directory) and check it first.
            self.data_dir_lock = open_data_dir(self.dir, self.config)
            os.makedirs(self.dir, exist_ok=True)
            await self._start_cluster_node()
            return
        # Lock --dir first (one server per data directory), then listen, as Valkey listens before it loads:
        # from here on clients are answered (-LOADING to data commands, INFO with the load's progress) while
        # the journal is checked and the dataset is loaded in slices of the loop (recovery/loading.py).
        self.data_dir_lock = lock_data_dir(self.dir)
        self.load_progress = LoadProgress(planned_bytes(self.dir))
        self.loading = True
        try:
            await self._listen(ready=False)
            # reading and checking every segment of a large journal takes a while: on a worker thread
            await self.loop.run_in_executor(None, check_data_dir, self.dir, self.config)
        except BaseException:
            self.data_dir_lock.release()
            raise
        started = time.monotonic()
        slicer = Slicer(stop=self.shutdown_event.is_set)
        self.keyspace.expire_enabled = False
        apply = self.delayed_load(self._replay_effect)
        self.hooks.search.pause()             # indexes are built once the data is in, in the background
        try:
            snap_index, last_index = await slicer.run(recover_steps(self.dir, self.keyspace, apply,
                                                                    progress=self.load_progress))
        except LoadStopped:
            log.warning("shutdown requested while loading: the load stops here (nothing was written)")
            return
        finally:
            self.keyspace.expire_enabled = True
            self.hooks.search.resume()
        self.last_snapshot_index = snap_index
        self.recovered_index = last_index
        log.info("loaded snapshot index %d and journal up to %d in %.3fs (%d keys; %s)", snap_index, last_index,
                 time.monotonic() - started, sum(len(db) for db in self.keyspace.dbs), slicer.summary())
        # the load freed its buffers (journal segments, batches, outgrown tables) inside the heap, where they stay
        # resident until trimmed: a journal replay of 950,000 keys kept 40 B per key (docs/memory.md)
        allocator.purge()
        if mode != "none":
            from ..journal.local import LocalJournal
            self.journal = LocalJournal(os.path.join(self.dir), segment_bytes=self.config["journal-segment-bytes"],
                                        fsync=self.config["journal-fsync"], group_per_iteration=False)
            await self.journal.open(base_index=last_index)
            self.snapshot_journal_bytes = self.journal.bytes_size
            self.durability.attach(self.journal, mode, self.config["durability-buffer-ms"])
        self.auto_snapshot = True          # cron_tick: a snapshot once the journal grew auto-snapshot-journal-bytes
        self.durability.failure_listeners.append(self._journal_failed)
        # _journal_healed listens only while expiry is held (_journal_failed adds it): a frame less per commit
        if self.config["cluster-enabled"]:
            # A cluster of one on the local journal: this node owns all 16384 slots.
            cfg = self.config
            routing = ClusterRouting(self, persistent_node_id(self.dir, cfg["node-id"]))
            ip, port, tls_port = cfg.announced()
            routing.install(single_node_topology(routing.myself_id, ip, port, tls_port))
            self.cluster_routing = self.pipeline.router = routing
        self.loading = False
        self.load_progress = None
        self._log_ready()
        self.watchdog.configure()
        primary = self.config["replicaof"]
        if primary:   # `replicaof host port` in the config (Config.check refused it with a cluster or JetStream)
            host, _sep, port = primary.rpartition(" ")
            self.replicaof(host, int(port))
        self._start_cron_and_signals()

    def _schedule_backfill(self):
        """A search index has keys to (re)index: slices of at most 5 ms run between the loop's other work
        until every backfill is done (FT.INFO shows the progress)."""
        if self._backfill_scheduled or self.loop is None:
            return
        self._backfill_scheduled = True
        self.loop.call_soon(self._backfill_tick)

    def _backfill_tick(self):
        self._backfill_scheduled = False
        try:
            more = self.hooks.search.backfill_step(0.005)
        except Exception:   # noqa: BLE001 - an index bug must not stop the server; the index says so in FT.INFO
            log.exception("search index backfill failed")
            return
        if more:
            self._backfill_scheduled = True
            self.loop.call_soon(self._backfill_tick)

    def delayed_load(self, apply):
        """apply, preceded by key-load-delay's pause when it is set: every load of a dataset (start-up's snapshot
        and journal, a shard member's snapshot, a REPLICAOF sync's RDB) pauses per entry, as Valkey's rdbLoad
        does per key, so that a test can watch a load in progress without loading a large dataset."""
        delay_us = self.config["key-load-delay"]
        if not delay_us:
            return apply

        def delayed(*args):
            debug_delay(delay_us)
            return apply(*args)
        return delayed

    def _replay_effect(self, db_id, argv):
        """One effect of start-up's snapshot or journal, uncounted: replayed commands are not client commands
        (the clients answered meanwhile, INFO and the like, are counted)."""
        pipeline = self.pipeline
        pipeline.stats_enabled = False
        try:
            self.apply_effect(db_id, argv)
        finally:
            pipeline.stats_enabled = True

    def _start_cron_and_signals(self):
        """The last step of either start-up: serverCron on its timer, SIGTERM/SIGINT a graceful shutdown."""
        if self.metrics is not None:
            self.metrics.publish()   # what the load changed (the journal, the role), before the first cron tick
        # the LRU clock is set before the first tick (initServer's server.lruclock = getLRUClock()): until it is,
        # access times are the Python path's and the compiled core runs no command (up to 1/hz s after start)
        self.keyspace.lru_tick()
        self._timer = self.loop.create_task(self._cron())
        self._backup_task = self.loop.create_task(self.backup_scheduler.run())
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                self.loop.add_signal_handler(sig, self.request_shutdown)
            except (NotImplementedError, RuntimeError):
                pass   # not the main thread, or a loop without signals: the owner stops the server

    async def _start_cluster_node(self):
        """A shard member on the JetStream journal (replication/node.py decides primary or replica), or, before
        it has joined a cluster, a node that serves and waits for `durakv cluster create` to assign it
        (cluster/membership.py): as a fresh Valkey cluster node, it owns no slot and says cluster_state:fail."""
        from ..cluster.membership import Membership
        cfg = self.config
        self.membership = membership = Membership(self.dir, cfg["node-id"])
        if not membership.joined and cfg["journal-nats-creds"]:
            servers = [u.strip() for u in cfg["journal-nats-servers"].split(",") if u.strip()]
            membership.adopt_creds(cfg["journal-nats-creds"], cfg["shard"], servers)
        if cfg["cluster-enabled"]:
            # Slots come from the coordination store's topology, which the node watches and installs here.
            self.cluster_routing = self.pipeline.router = ClusterRouting(self, membership.node_id)
            # Slot migration lists a slot's keys from this index (replication/migration.py), not a scan;
            # on before the snapshot loads, so every key enters it the way a write does
            self.keyspace.index_slots(key_slot)
        if not membership.joined:
            if self.cluster_routing is not None:
                ip, port, tls_port = cfg.announced()
                self.cluster_routing.install(unassigned_topology(membership.node_id, ip, port, tls_port))
            self.loading = False
            await self._listen(ready=False)
            log.info("durakv %s waiting to be assigned to a shard (`durakv cluster create` or `add-node` with this "
                     "node's address): node id %s, az %s, port %s, tls-port %s, dir %s", __version__,
                     membership.node_id, cfg["availability-zone"], cfg["port"], cfg["tls-port"], self.dir)
            self._start_cron_and_signals()
            return
        await self._listen(ready=False)
        if await self._become_member():
            self._start_cron_and_signals()

    def join_cluster(self, doc):
        """DURAKV JOIN: keeps what the operator's tool sent (cluster/membership.py validates it and fsyncs it)
        and starts serving the shard; raises MembershipError with the reason it cannot."""
        if self.cluster_node is not None:
            if self.membership.joined:
                self.membership.check_join(doc)   # the same cluster and shard again: nothing to do
                return "already"
        self.membership.join(doc)
        log.info("joined cluster %s as a node of shard %s", self.membership.cluster_id, self.membership.shard)
        self.loop.create_task(self._become_member())
        return "joined"

    async def _become_member(self):
        """Starts serving the shard this node is a member of: loads and follows its journal, takes part in
        failover. A start that fails logs why and leaves the node up (INFO and the log say it), instead of
        exiting into a restart loop. False if SHUTDOWN stopped the load."""
        from ..replication.node import ClusterNode
        self.load_progress = LoadProgress()
        self.loading = True
        self.cluster_node = ClusterNode(self, self.membership)
        self.journal = None  # the shard's journal belongs to the node; INFO reads it from there
        self.pipeline.gate = self.cluster_node.lease   # role and lease checks in admission
        # Answer at once while the snapshot and the journal load: -LOADING to data commands (as Valkey), INFO
        # with the progress, so a restarted node is visibly catching up rather than silent.
        try:
            await self.cluster_node.start()
        except LoadStopped:
            log.warning("shutdown requested while loading: the load stops here")
            return False
        self.loading = False
        self.load_progress = None
        self.watchdog.configure()
        log.info("durakv %s ready: port %s, tls-port %s, durability %s (%s), dir %s, core %s", __version__,
                 self.config["port"], self.config["tls-port"], self.effective_durability(),
                 "primary" if self.cluster_node.role == "primary" else "replica", self.dir, fastpath.NAME)
        fastpath.warn_if_missing()
        return True

    def _journal_failed(self, first, exc):
        """The journal could not persist entries from `first` on. Their effects are in memory but not on disk,
        and memory must never serve what a restart would not find: rebuild it from the snapshot and the
        journal, as start-up does. Clients see the rebuild as a FLUSHALL followed by the data coming back
        (WATCHes are touched, tracking caches invalidated)."""
        started = time.monotonic()
        keys = self._reload_from_disk()
        self.journal_reloads += 1
        # Expiring a key is a write (its DEL is journaled): while the journal cannot persist, each expiry would
        # fail again and reload the dataset again (every cron tick), and a read of an expired key would be
        # refused like a write. So expiry waits, as on a replica: expired keys are hidden from readers, not
        # deleted, until the journal persists again (_journal_healed).
        ks = self.keyspace
        ks.expire_enabled, ks.hide_expired = False, True
        self.expiry_held = True
        if self._journal_healed not in self.durability.commit_listeners:
            self.durability.commit_listeners.append(self._journal_healed)
        log.error("rebuilt the dataset from the snapshot and the journal after the failed append of entry %d "
                  "in %.3fs (%d keys); writes resume once the journal persists again", first,
                  time.monotonic() - started, keys)

    def _journal_healed(self, _index):
        """A commit after a journal failure: expiry (suspended by _journal_failed) runs again."""
        if self.expiry_held and self.durability.tracker is not None and self.durability.tracker.failed is None:
            self.expiry_held = False
            self.durability.commit_listeners.remove(self._journal_healed)
            ks = self.keyspace
            ks.expire_enabled, ks.hide_expired = self.primary_expiry()
            log.info("the journal persists again: key expiry resumes")

    def _reload_from_disk(self) -> int:
        """Replaces the dataset with what a restart would load (newest snapshot + journal); returns the keys."""
        ks = self.keyspace
        pipeline = self.pipeline
        for db in ks.dbs:
            pipeline.touch_db_watched(db)
        tracking = self.hooks.tracking
        if tracking.clients:
            tracking.flush(None, None)
        search = self.hooks.search
        search.clear_definitions()            # the reload makes them again from the snapshot and the journal
        for db in ks.dbs:
            db.clear()
        ks.used_bytes = ks.baseline_bytes
        ks.deleted_by_server.clear()
        if getattr(ks, "functions", None) is not None:
            ks.functions.flush()
        ks.expire_enabled = False
        pipeline.stats_enabled = False
        search.pause()
        try:
            recover(self.dir, ks, self.apply_effect)
        finally:
            ks.expire_enabled = True
            pipeline.stats_enabled = True
            search.resume()
        self.blocking.signal_all()
        self.blocking.serve()
        return sum(len(db) for db in ks.dbs)

    def debug_reload(self, save=True, flush=True, merge=False):
        """DEBUG RELOAD: what a restart would load, loaded in place (Valkey saves its RDB, flushes, loads it).
        With a journal, what was acknowledged is on disk already: commit what is in flight and load snapshot +
        journal; in `none`, write the snapshot from memory first (unless NOSAVE). A Deferred: 'OK' or an error.
        NOFLUSH (flush False) loads over the dataset: a key or library already there is an error, as Valkey's
        duplicate-key refusal, unless MERGE, where what was loaded replaces what is there."""
        d = Deferred()
        if self.cluster_node is not None:
            d.resolve(ErrorReply(messages.DEBUG_RELOAD_ON_SHARD_MEMBER))
            return d

        async def run():
            try:
                if self.journal is not None:
                    if not await self.durability.drain(timeout_s=30):
                        raise RuntimeError("the journal did not commit what was in flight within 30 s")
                elif save:
                    await self._snapshot_in_process()
                started = time.monotonic()
                if flush:
                    keys = self._reload_from_disk()
                elif merge:
                    keys = self._merge_from_disk(saved=save)
                elif any(db.data for db in self.keyspace.dbs) or getattr(self.keyspace, "functions", None):
                    raise RuntimeError("NOFLUSH: the dataset is not empty (duplicate keys or libraries)")
                else:
                    keys = self._reload_from_disk()
                log.info("DEBUG RELOAD: %d keys loaded from disk in %.3fs", keys, time.monotonic() - started)
            except Exception as exc:  # noqa: BLE001 - the client is told; the dataset is what it was or reloaded
                log.error("DEBUG RELOAD failed: %s", exc)
                d.resolve(ErrorReply(messages.DEBUG_RELOAD_LOAD_FAILED))
                return
            d.resolve(OK)
        self.loop.create_task(run())
        return d

    def _merge_from_disk(self, saved) -> int:
        """DEBUG RELOAD NOFLUSH MERGE: what a restart would load, over the dataset. With a journal, or just
        saved, that is the dataset itself (nothing changes); otherwise the newest snapshot's keys and libraries
        replace those of the same name (each key of it deleted before its first command is applied)."""
        ks = self.keyspace
        if self.journal is None and not saved:
            from ..recovery import load_newest_snapshot
            seen = set()

            def apply(db_id, argv):
                name = argv[0].upper()
                if name == b"FUNCTION" and len(argv) == 3 and argv[1].upper() == b"LOAD":
                    argv = (argv[0], argv[1], b"REPLACE", argv[2])
                elif name != b"XGROUP" and len(argv) > 1 and (db_id, argv[1]) not in seen:
                    seen.add((db_id, argv[1]))
                    self.apply_effect(db_id, (b"DEL", argv[1]))
                self.apply_effect(db_id, argv)
            saved_expire = ks.expire_enabled
            ks.expire_enabled = False
            try:
                load_newest_snapshot(self.dir, ks, apply)
            finally:
                ks.expire_enabled = saved_expire
        return sum(len(db) for db in ks.dbs)

    def apply_effect(self, db_id, argv):
        """One journaled effect (start-up replay, a replica following), through the pipeline."""
        reply = self.pipeline.apply(self._apply_session, db_id, argv)
        if type(reply) is ErrorReply:
            raise RuntimeError(f"replaying {argv[:3]!r} in db {db_id} failed: {reply.text}")

    async def _listen(self, ready=True):
        cfg = self.config
        hosts = [h for h in cfg["bind"].split() if h]
        hosts = [h.lstrip("-") for h in hosts]
        port = cfg["port"]
        if port:
            for host in hosts:
                try:
                    srv = await self.loop.create_server(lambda: Connection(self), host, port,
                                                        backlog=cfg["tcp-backlog"], reuse_address=True,
                                                        start_serving=False)
                except (OSError, UnicodeError) as exc:    # UnicodeError: a bind address that is no hostname
                    if len(hosts) > 1 and host in ("::1", "::"):
                        log.warning("could not bind %s:%d: %s", host, port, exc)
                        continue
                    raise OSError("Could not create server TCP listening socket %s:%d: %s" % (host, port, exc)) \
                        from exc
                self.listeners.append(srv)
                self.plain_listeners.append(srv)
        if cfg["tls-port"]:
            ctx = self._tls_context()
            for host in hosts:
                try:
                    srv = await self.loop.create_server(lambda: Connection(self, tls=True), host, cfg["tls-port"],
                                                        ssl=ctx, backlog=cfg["tcp-backlog"], reuse_address=True,
                                                        start_serving=False)
                except OSError:
                    if len(hosts) > 1 and host in ("::1", "::"):
                        continue
                    raise
                self.listeners.append(srv)
        # the metrics port first: importing prometheus_client takes a while, which a client already connected
        # (a restarted node answers while it loads) would wait out
        if cfg["metrics-port"] and self.metrics is None:
            from .metrics import Metrics
            self.metrics = Metrics(self)
            self.metrics.start(hosts[0] if hosts else "127.0.0.1", cfg["metrics-port"])
        # every port serves only once all listen: a client that reached the plain port (a readiness check)
        # must find the TLS port there too, not refused while its certificate loads
        for srv in self.listeners:
            if not srv.is_serving():
                await srv.start_serving()
        if ready:
            self._log_ready()

    def _log_ready(self):
        cfg = self.config
        log.info("durakv %s ready: port %s, tls-port %s, durability %s, dir %s, core %s", __version__, cfg["port"],
                 cfg["tls-port"], self.effective_durability(), self.dir, fastpath.NAME)
        fastpath.warn_if_missing()

    def _tls_context(self):
        cfg = self.config
        if cfg.tls_needs_ca():
            # the command line refuses to start like this (cli.py); a server built in-process must not
            # quietly ask no client for a certificate either
            raise ConfigError(messages.TLS_NO_CA)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cfg["tls-cert-file"], cfg["tls-key-file"], password=cfg["tls-key-file-pass"] or None)
        if cfg["tls-ca-cert-file"] or cfg["tls-ca-cert-dir"]:
            ctx.load_verify_locations(cafile=cfg["tls-ca-cert-file"] or None, capath=cfg["tls-ca-cert-dir"] or None)
        ctx.verify_mode = {"yes": ssl.CERT_REQUIRED, "optional": ssl.CERT_OPTIONAL,
                           "no": ssl.CERT_NONE}[cfg["tls-auth-clients"]]
        return ctx

    # -- housekeeping ---------------------------------------------------------------------------
    async def _cron(self):
        """Active expiry and stats, `hz` times a second (Valkey's serverCron)."""
        while True:
            await asyncio.sleep(1.0 / self.config["hz"])
            if self.cron_paused:
                continue    # DEBUG PAUSE-CRON 1
            if not self.loop_stats.open:
                self.loop_stats.begin()
            try:
                self.cron_tick()
            except Exception:  # noqa: BLE001 - housekeeping must never stop
                log.exception("cron tick failed")

    def cron_tick(self):
        ks = self.keyspace
        ks.lru_tick()
        if time.monotonic() >= self._repl_cron_next:
            self._replication_cron()
        if self.active_expire_enabled:
            ks.active_expire_cycle(25.0, time.perf_counter)
        if ks.deleted_by_server:
            self.pipeline.mark()
            self.pipeline.server_deletes()
        now = time.monotonic()
        self.ops_samples.append((now, self.pipeline.total_commands))
        while len(self.ops_samples) > 16:
            self.ops_samples.pop(0)
        self.loop_stats.sample()
        if self.metrics is not None:
            self.metrics.publish()
        if self.migrate_sockets.cache:
            self.migrate_sockets.close_idle()
        if self.client_eviction.limit:
            self.client_eviction.sweep()
        self.heap_decay.tick()
        if self.auto_snapshot:
            self._maybe_auto_snapshot()
        timeout = self.config["timeout"]
        if timeout:
            limit = self.clock_ms() - timeout * 1000
            for conn in list(self.clients.values()):
                s = conn.session
                if s.last_interaction_ms < limit and not conn.outbox.held and conn.blocked is None \
                        and not (conn.subs is not None and conn.subs.total()):
                    conn.close()

    def _replication_cron(self):
        """Valkey's replicationCron, once a second: a PING on every SYNC/PSYNC stream when the count of its
        runs since start is a multiple of repl-ping-replica-period (so a stream attached to a fresh server
        may start with one, as Valkey's does)."""
        self._repl_cron_next = time.monotonic() + 1.0
        if self._repl_cron_loops % self.config["repl-ping-replica-period"] == 0:
            for feed in list(self.durability.feeds):
                ping = getattr(feed, "ping", None)
                if ping is not None:
                    ping()
        self._repl_cron_loops += 1

    def instantaneous_ops(self):
        s = self.ops_samples
        if len(s) < 2 or s[-1][0] == s[0][0]:
            return 0
        return int((s[-1][1] - s[0][1]) / (s[-1][0] - s[0][0]))

    # -- snapshots ------------------------------------------------------------------------------
    def _maybe_auto_snapshot(self):
        """A snapshot once the journal grew auto-snapshot-journal-bytes since the last one: looked at by the cron,
        as Valkey's serverCron looks at the AOF's growth for auto-aof-rewrite-percentage (a commit listener cost
        every commit a config read and a sum over the segments: ~5% of an unpipelined sync SET's instructions)."""
        threshold = self.config["auto-snapshot-journal-bytes"]
        if self.snapshot_failed_at is not None and self.last_bgsave_status == "err" \
                and time.monotonic() - self.snapshot_failed_at < SNAPSHOT_RETRY_DELAY_S:
            return
        if (threshold and self.snapshot_in_progress is None and self.journal is not None
                and self.journal.bytes_size - self.snapshot_journal_bytes > threshold):
            self.start_snapshot()

    def off_loop_pool(self):
        """The worker threads of commands that work off the loop (pipeline.off_loop): MIGRATE's exchanges,
        large DUMP encodings and RESTORE decodings. Two, so that one MIGRATE waiting on a silent target
        does not hold a DUMP back; MIGRATE's connection cache serializes exchanges itself."""
        if self._off_loop_pool is None:
            self._off_loop_pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=2, thread_name_prefix="durakv-offloop")
        return self._off_loop_pool

    def start_snapshot(self):
        """Builds a snapshot without pausing: a Deferred resolved with 'OK' or an ErrorReply."""
        if self.cluster_node is not None:
            d = Deferred()
            self.loop.create_task(self._cluster_snapshot(d))
            return d
        if self.snapshot_in_progress is not None:
            return self.snapshot_in_progress
        d = self.snapshot_in_progress = Deferred()
        self.snapshot_started = time.monotonic()
        self.loop.create_task(self._snapshot(d))
        return d

    def schedule_snapshot(self):
        """BGREWRITEAOF (or BGSAVE SCHEDULE) while a snapshot is being built: another starts when it ends, so
        the journal written meanwhile is compacted too (Valkey's aof_rewrite_scheduled)."""
        self.snapshot_scheduled = True

    def note_fork(self, usec):
        self.total_forks += 1
        self.latest_fork_usec = usec

    def _snapshot_done(self):
        self.last_snapshot_seconds = int(time.monotonic() - self.snapshot_started)
        self.snapshot_started = None
        self.snapshot_in_progress = None
        if self.snapshot_scheduled:
            self.snapshot_scheduled = False
            self.start_snapshot()

    async def _snapshot(self, fut):
        changes_before = self.keyspace.changes  # what this snapshot will hold (rdb_changes_since_last_save)
        try:
            if self.journal is None:
                await self._snapshot_in_process()
            else:
                await self.durability.drain()
                await self.journal.rotate()
                upto = self.journal.commit_index
                if upto > self.last_snapshot_index:
                    adopted = await build_snapshot(self.dir, upto, databases=self.config.database_count(),
                                                   key_save_delay_us=self.config["rdb-key-save-delay"])
                    # keep what the older snapshot needs, what a backup copies and what the last one asked to keep
                    await self.journal.truncate_before(self.backups.journal_keep_from(adopted.journal_from))
                    self.last_snapshot_index = upto
                self.snapshot_journal_bytes = self.journal.bytes_size
            self.lastsave = int(time.time())
            self.last_bgsave_status = "ok"
            self.keyspace.changes_saved = changes_before
            self._snapshot_done()
            fut.resolve("OK")
        except Exception as exc:  # noqa: BLE001
            log.error("snapshot failed: %s", exc)
            self.snapshot_failed_at = time.monotonic()
            self.last_bgsave_status = "err"
            self._snapshot_done()
            fut.resolve(ErrorReply(messages.SNAPSHOT_FAILED % exc))

    async def _cluster_snapshot(self, d):
        """On a JetStream shard, snapshots are made by replicas into the object store."""
        node = self.cluster_node
        if node.role != "replica":
            d.resolve(ErrorReply(messages.SNAPSHOT_ON_JETSTREAM_PRIMARY))
            return
        try:
            index = await node.snapshotter.snapshot_now()
        except Exception as exc:  # noqa: BLE001
            d.resolve(ErrorReply(messages.SNAPSHOT_FAILED % exc))
            return
        self.last_snapshot_index = index
        self.lastsave = int(time.time())
        d.resolve("OK")

    async def _snapshot_in_process(self):
        """durability none: no journal to replay, so the image is written from memory, on the event loop (as
        Valkey's SAVE: clients wait while it is written)."""
        from ..snapshot.format import write_snapshot
        path = os.path.join(self.dir, "snapshots")
        os.makedirs(path, exist_ok=True)
        # The image covers everything recovered at start-up plus all writes since; the journal left
        # from an earlier durable run is then redundant and is dropped so it is never replayed over it.
        index = self.recovered_index
        write_snapshot(os.path.join(path, "snapshot-%020d.dks" % index), self.keyspace, index)
        self.last_snapshot_index = index
        from ..journal.walformat import journal_dir, list_segments
        for _first, seg_path in list_segments(journal_dir(self.dir)):
            os.unlink(seg_path)

    def set_journal_stall(self, stall_ms) -> bool:
        """Fault injection (DEBUG JOURNAL-STALL): delay every local journal fsync. False without one."""
        if self.journal is None or not hasattr(self.journal, "stall_ms"):
            return False
        self.journal.stall_ms = stall_ms
        return True

    # -- clients ----------------------------------------------------------------------------------
    def client_connections(self):
        return list(self.clients.values())

    def kill_client(self, conn):
        conn.session.close_after_reply = True
        if conn.outbox is None or not conn.outbox.held:
            conn.close()

    # -- shutdown -------------------------------------------------------------------------------
    def request_shutdown(self):
        if self.shutdown_event is not None:
            self.shutdown_event.set()

    async def serve_until_shutdown(self):
        await self.shutdown_event.wait()
        await self.close()

    async def close(self):
        timer = getattr(self, "_timer", None)
        if timer is not None:
            timer.cancel()
        task = getattr(self, "_backup_task", None)
        if task is not None:
            task.cancel()
        self.backups.close()
        for srv in self.listeners:
            srv.close()
        if self.metrics is not None:
            self.metrics.stop()
        self.watchdog.stop()
        await self.durability.drain(timeout_s=10)
        for conn in list(self.clients.values()):
            conn.close()
        self.migrate_sockets.close_all()
        if self._off_loop_pool is not None:
            # a worker in a MIGRATE exchange ends by its own timeout; nothing waits for it
            self._off_loop_pool.shutdown(wait=False, cancel_futures=True)
        if self.valkey_link is not None:
            self.valkey_link.stop()
        if self.journal is not None:
            await self.journal.close()
        lock = getattr(self, "data_dir_lock", None)
        if lock is not None:
            lock.release()
            self.data_dir_lock = None
        log.info("durakv stopped")

    # -- logging --------------------------------------------------------------------------------
    def log_exception(self, where, exc):
        context = self.config["debug-context"]
        log.error("unexpected error in %s: %r%s", where, exc, " (debug-context: %s)" % context if context else "",
                  exc_info=exc)

    def log_protocol_error(self, session, text):
        # Every one is counted (INFO protocol_errors). Valkey logs them at verbose level; here at DEBUG, once
        # per client (it is closed after its first), and at most one line a second server-wide with the
        # number left out before it, so that a stream of junk connections cannot flood the log.
        self.protocol_errors += 1
        now_s = time.monotonic()
        last_s, suppressed = getattr(self, "_protocol_log_state", (None, 0))
        if last_s is not None and now_s - last_s < 1.0:
            self._protocol_log_state = (last_s, suppressed + 1)
            return
        self._protocol_log_state = (now_s, 0)
        log.debug("Protocol error (%s) from client: id=%d addr=%s%s", text, session.id, session.addr,
                  f" ({suppressed} more since the last such line, not logged)" if suppressed else "")

    # -- INFO -----------------------------------------------------------------------------------
    def info(self, sections):
        return render_info(self, sections)

    def memory_rss(self):
        try:
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def effective_durability(self) -> str:
        node = self.cluster_node
        if node is not None and node.role == "replica":
            return self.config["durability"]
        return self.durability.mode

    def replicaof(self, host, port):
        """REPLICAOF host port on a standalone server: follow that primary (server/valkeyreplica.py); host None:
        REPLICAOF NO ONE. Returns False when already a replica of that primary."""
        link = self.valkey_link
        if host is not None and link is not None and (link.host.lower(), link.port) == (host.lower(), port):
            return False
        if link is not None:
            link.stop()
            self.valkey_link = None
            self.pipeline.gate = None
            ks = self.keyspace
            ks.expire_enabled, ks.hide_expired = self.primary_expiry()
            log.info("REPLICAOF NO ONE: a primary again (replication link with %s:%d stopped)", link.host, link.port)
        # CONFIG GET replicaof shows the primary followed now, as getConfigReplicaOfOption reads primary_host
        self.config.values["replicaof"] = "%s %d" % (host, port) if host is not None else ""
        if host is not None:
            from .valkeyreplica import ValkeyReplicaLink
            ks = self.keyspace
            ks.expire_enabled, ks.hide_expired = False, True   # the primary's DELs expire keys here
            self.valkey_link = ValkeyReplicaLink(self, host, port)
            self.pipeline.gate = self.valkey_link
            log.info("REPLICAOF %s:%d enabled", host, port)
        return True

    def replication_info(self) -> dict:
        """What ROLE, HELLO and INFO replication say about this node's place in its shard."""
        link = self.valkey_link
        if link is not None:
            return {"role": "replica", "primary_host": link.host, "primary_port": link.port, "offset": link.offset,
                    "replicas": [], "state": link.state}
        node = self.cluster_node
        if node is not None and node.role == "replica":
            c = node.controller
            host, _, port = ((c.primary_addr if c else None) or ":0").rpartition(":")
            return {"role": "replica", "primary_host": host, "primary_port": int(port or 0),
                    "offset": node.applied_index, "replicas": []}
        if node is None:
            return {"role": "master", "primary_host": "", "primary_port": 0, "offset": self.durability.committed,
                    "replicas": []}
        offset = max(node.applied_index, node.journal.commit_index if node.journal is not None else 0)
        return {"role": "master", "primary_host": "", "primary_port": 0, "offset": offset,
                "replicas": [(p.ip, p.port, p.applied) for p in node.members.replica_statuses()]}

    def version_fields(self):
        return {"redis_version": REDIS_COMPAT_VERSION, "valkey_version": VALKEY_VERSION,
                "server_name": "durakv", "durakv_version": __version__}
