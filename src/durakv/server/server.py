"""The durakv server process: keyspace + dispatcher + durability + listeners + housekeeping timers."""

import asyncio
import logging
import os
import resource
import signal
import ssl
import sys
import time

from .. import REDIS_COMPAT_VERSION, VALKEY_VERSION, __version__
from ..commands import load_all, registry
from ..commands.dispatch import Dispatcher, apply_effect
from ..commands.session import Session
from ..durability import WriteTracker
from ..keyspace import Keyspace
from .blocking import Blocking
from .connection import Connection
from .notify import Hooks, parse_notify_flags
from .pubsub import PubSub

log = logging.getLogger("durakv.server")


class Server:
    """Everything one node holds. Command handlers reach it as ctx.server (never the sockets)."""

    def __init__(self, config, clock_ms=None):
        load_all()
        self.config = config
        self.clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self.keyspace = Keyspace(config["databases"], clock_ms=self.clock_ms)
        self.dispatcher = Dispatcher(self.keyspace, server=self)
        self.journal = None
        self.tracker = None
        self.loop = None
        self.clients = {}
        self.listeners = []
        self.started_at = time.time()
        self.started_monotonic = time.monotonic()
        self.total_connections = 0
        self.rejected_connections = 0
        self.protocol_errors = 0
        self.net_input_bytes = 0
        self.last_snapshot_index = 0
        self.lastsave = int(time.time())
        self.last_bgsave_status = "ok"
        self.snapshot_in_progress = None   # Future while a snapshot is being built
        self.snapshot_journal_bytes = 0    # journal bytes at the last snapshot
        self.loading = False
        self.shutdown_event = None
        self.ops_samples = []              # (monotonic_s, total_commands) for instantaneous ops/sec
        self.replica_of = None             # set by replication (later); None = primary
        self.active_expire_enabled = True
        self.now_ms = self.clock_ms()         # refreshed per batch of requests (CLIENT LIST idle)
        self.cluster_node = None           # set when the journal is JetStream (multi-AZ shard member)
        self.writes_paused = False
        self._apply_session = Session(authenticated=True)
        self.pubsub = PubSub(self)         # channels and patterns (server/pubsub.py)
        self.blocking = Blocking(self)     # clients blocked on keys or paused (server/blocking.py)
        self.hooks = Hooks(self)           # notifications, tracking, MONITOR, ... (server/notify.py)
        self.run_id = os.urandom(20).hex()
        self.dir = os.path.abspath(config["dir"])
        self._apply_config_all()
        config.listeners.append(self._on_config_set)

    # -- configuration --------------------------------------------------------------------------
    @property
    def requirepass(self):
        return self.config["requirepass"]

    def _apply_config_all(self):
        for name in ("requirepass", "maxmemory", "maxmemory-policy", "maxmemory-samples", "lfu-log-factor",
                     "lfu-decay-time", "notify-keyspace-events"):
            self._on_config_set(name, self.config[name])

    def _on_config_set(self, name, value):
        d = self.dispatcher
        if name == "requirepass":
            d.requirepass = value or None
        elif name == "maxmemory":
            d.maxmemory = value
        elif name == "maxmemory-policy":
            d.maxmemory_policy = value
            self.keyspace.track_access = "lru" if value.endswith("lru") else (
                "lfu" if value.endswith("lfu") else None)
        elif name == "maxmemory-samples":
            d.maxmemory_samples = value
        elif name == "lfu-log-factor":
            self.keyspace.lfu_log_factor = value
        elif name == "lfu-decay-time":
            self.keyspace.lfu_decay_time_min = value
        elif name == "durability" and self.tracker is not None:
            self.tracker.set_mode(value)
        elif name == "durability-buffer-ms" and self.tracker is not None:
            self.tracker.buffer_ms = value
        elif name == "notify-keyspace-events":
            self.hooks.set_notify_flags(value)

    def validate_config_set(self, name, value):
        """Extra checks CONFIG SET needs beyond parsing; returns an error reason or None."""
        if name == "notify-keyspace-events" and parse_notify_flags(value) < 0:
            return "Invalid event class character. Use 'Ag$lshzxeKEtmdn'."
        if name == "durability":
            current = self.tracker.mode if self.tracker else "none"
            if (value == "none") != (current == "none"):
                return "durability can switch live only between async and sync; none is chosen at start-up"
        return None

    # -- start-up -------------------------------------------------------------------------------
    async def start(self):
        # The journal thread needs the GIL back the moment its fsync returns, or every sync reply waits
        # for the interpreter's 5 ms switch interval while the event loop serves other clients.
        sys.setswitchinterval(0.0002)
        self.loop = asyncio.get_running_loop()
        self.shutdown_event = asyncio.Event()
        os.makedirs(self.dir, exist_ok=True)
        mode = self.config["durability"]
        if self.config["journal-backend"] == "jetstream":
            await self._start_cluster_node()
            return
        self.loading = True
        started = time.monotonic()
        from ..recovery import recover
        self.keyspace.expire_enabled = False
        try:
            snap_index, last_index = recover(self.dir, self.keyspace, self.apply_effect)
        finally:
            self.keyspace.expire_enabled = True
        self.last_snapshot_index = snap_index
        self.recovered_index = last_index
        log.info("loaded snapshot index %d and journal up to %d in %.3fs (%d keys)", snap_index, last_index,
                 time.monotonic() - started, sum(len(db) for db in self.keyspace.dbs))
        if mode != "none":
            from ..journal.local import LocalJournal
            self.journal = LocalJournal(os.path.join(self.dir), segment_bytes=self.config["journal-segment-bytes"],
                                        fsync=self.config["journal-fsync"], group_per_iteration=False)
            await self.journal.open(base_index=last_index)
            self.snapshot_journal_bytes = self.journal.bytes_size
        self.tracker = WriteTracker(self.journal, mode=mode, buffer_ms=self.config["durability-buffer-ms"],
                                    loop=self.loop)
        self.tracker.commit_listeners.append(self._maybe_auto_snapshot)
        self.dispatcher.refuse_writes_fn = self.tracker.refuse_writes
        self.dispatcher.is_replica_fn = lambda: self.replica_of is not None
        self.loading = False
        await self._listen()
        self._timer = self.loop.create_task(self._cron())
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                self.loop.add_signal_handler(sig, self.request_shutdown)
            except (NotImplementedError, RuntimeError):
                pass

    async def _start_cluster_node(self):
        """A shard member on the JetStream journal (replication/node.py decides primary or replica)."""
        from ..replication.node import ClusterNode
        self.loading = True
        self.cluster_node = ClusterNode(self)
        await self.cluster_node.start()
        self.journal = None  # the shard's journal belongs to the node; INFO reads it from there
        self.dispatcher.is_replica_fn = lambda: self.replica_of is not None
        self.dispatcher.refuse_writes_fn = self.tracker.refuse_writes
        self.dispatcher.serving_fn = self._serving_error
        self.loading = False
        await self._listen()
        self._timer = self.loop.create_task(self._cron())
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                self.loop.add_signal_handler(sig, self.request_shutdown)
            except (NotImplementedError, RuntimeError):
                pass

    def _serving_error(self, cmd):
        node = self.cluster_node
        if node is None:
            return None
        if self.writes_paused and cmd.write:
            return "READONLY You can't write against a read only replica."
        return node.serving_error()

    def apply_effect(self, db_id, argv):
        reply = apply_effect(self.dispatcher, self._apply_session, db_id, argv)
        if hasattr(reply, "text"):
            raise RuntimeError(f"replaying {argv[:3]!r} in db {db_id} failed: {reply.text}")
        if self.hooks.active:  # a replica's clients: keyspace notifications, tracking invalidation
            self.hooks.after_effects(None, None, ((db_id, argv),))

    async def _listen(self):
        cfg = self.config
        hosts = [h for h in cfg["bind"].split() if h]
        hosts = [h.lstrip("-") for h in hosts]
        port = cfg["port"]
        if port:
            for host in hosts:
                try:
                    srv = await self.loop.create_server(lambda: Connection(self), host, port,
                                                        backlog=cfg["tcp-backlog"], reuse_address=True)
                except OSError as exc:
                    if len(hosts) > 1 and host in ("::1", "::"):
                        log.warning("could not bind %s:%d: %s", host, port, exc)
                        continue
                    raise
                self.listeners.append(srv)
        if cfg["tls-port"]:
            ctx = self._tls_context()
            for host in hosts:
                try:
                    srv = await self.loop.create_server(lambda: Connection(self, tls=True), host, cfg["tls-port"],
                                                        ssl=ctx, backlog=cfg["tcp-backlog"], reuse_address=True)
                except OSError:
                    if len(hosts) > 1 and host in ("::1", "::"):
                        continue
                    raise
                self.listeners.append(srv)
        log.info("durakv %s ready: port %s, tls-port %s, durability %s, dir %s", __version__, port,
                 cfg["tls-port"], self.tracker.mode, self.dir)

    def _tls_context(self):
        cfg = self.config
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cfg["tls-cert-file"], cfg["tls-key-file"])
        if cfg["tls-ca-cert-file"]:
            ctx.load_verify_locations(cfg["tls-ca-cert-file"])
        mode = cfg["tls-auth-clients"]
        ctx.verify_mode = {"yes": ssl.CERT_REQUIRED, "optional": ssl.CERT_OPTIONAL,
                           "no": ssl.CERT_NONE}[mode] if cfg["tls-ca-cert-file"] else ssl.CERT_NONE
        return ctx

    # -- housekeeping ---------------------------------------------------------------------------
    async def _cron(self):
        """Active expiry and stats, `hz` times a second (Valkey's serverCron)."""
        while True:
            await asyncio.sleep(1.0 / self.config["hz"])
            try:
                self.cron_tick()
            except Exception:  # noqa: BLE001 - housekeeping must never stop
                log.exception("cron tick failed")

    def cron_tick(self):
        ks = self.keyspace
        if self.active_expire_enabled:
            ks.active_expire_cycle(25.0, time.perf_counter)
        if ks.deleted_by_server:
            self.submit_server_deletes()
        now = time.monotonic()
        self.ops_samples.append((now, self.dispatcher.total_commands))
        while len(self.ops_samples) > 16:
            self.ops_samples.pop(0)
        timeout = self.config["timeout"]
        if timeout:
            limit = self.clock_ms() - timeout * 1000
            for conn in list(self.clients.values()):
                s = conn.session
                if s.last_interaction_ms < limit and not conn.pending and conn.blocked is None \
                        and not (conn.subs is not None and conn.subs.total()):
                    conn.close()

    def submit_server_deletes(self):
        """DEL effects for keys the server removed on its own (active expiry, eviction)."""
        deleted = self.keyspace.deleted_by_server
        effects = [(db_id, (b"DEL", key)) for db_id, key, _reason in deleted]
        deleted.clear()
        self.dispatcher.touch_watched(effects)
        self.tracker.submit(effects, self.keys_of_effect)
        if effects:
            self.hooks.after_effects(None, None, effects)

    def keys_of_effect(self, argv):
        cmd = registry.TABLE.get(argv[0].lower())
        if cmd is not None and cmd.subcommands and len(argv) > 1:  # XGROUP SETID key ...
            cmd = cmd.subcommands.get(argv[1].lower(), cmd)
        if cmd is None or cmd.keyless:
            return ()
        return cmd.keys(argv)

    def instantaneous_ops(self):
        s = self.ops_samples
        if len(s) < 2 or s[-1][0] == s[0][0]:
            return 0
        return int((s[-1][1] - s[0][1]) / (s[-1][0] - s[0][0]))

    # -- snapshots ------------------------------------------------------------------------------
    def _maybe_auto_snapshot(self, index):
        threshold = self.config["auto-snapshot-journal-bytes"]
        if (threshold and self.snapshot_in_progress is None and self.journal is not None
                and self.journal.bytes_size - self.snapshot_journal_bytes > threshold):
            self.start_snapshot()

    def start_snapshot(self):
        """Builds a snapshot without pausing: returns a Future resolved with 'OK' or an exception."""
        if self.cluster_node is not None:
            return self.loop.create_task(self._cluster_snapshot())
        if self.snapshot_in_progress is not None:
            return self.snapshot_in_progress
        fut = self.loop.create_future()
        self.snapshot_in_progress = fut
        self.loop.create_task(self._snapshot(fut))
        return fut

    async def _snapshot(self, fut):
        dirty_before = self.keyspace.dirty  # what this snapshot will hold (rdb_changes_since_last_save)
        try:
            if self.journal is None:
                await self._snapshot_in_process()
            else:
                await self.tracker.drain()
                await self.journal.rotate()
                upto = self.journal.commit_index
                if upto > self.last_snapshot_index:
                    proc = await asyncio.create_subprocess_exec(
                        sys.executable, "-m", "durakv.snapshot.builder", "--dir", self.dir, "--upto", str(upto),
                        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
                    out, err = await proc.communicate()
                    if proc.returncode != 0:
                        raise RuntimeError("snapshot builder failed: " + err.decode(errors="replace")[-500:])
                    await self.journal.truncate_before(upto + 1)
                    self.last_snapshot_index = upto
                self.snapshot_journal_bytes = self.journal.bytes_size
            self.lastsave = int(time.time())
            self.last_bgsave_status = "ok"
            self.keyspace.dirty_saved = dirty_before
            fut.set_result("OK")
        except Exception as exc:  # noqa: BLE001
            log.error("snapshot failed: %s", exc)
            self.last_bgsave_status = "err"
            fut.set_exception(exc)
            fut.exception()  # mark retrieved when nobody waits
        finally:
            self.snapshot_in_progress = None

    async def _cluster_snapshot(self):
        """On a JetStream shard, snapshots are made by replicas into the object store."""
        node = self.cluster_node
        if node.role != "replica":
            from ..errors import CommandError
            raise CommandError("ERR snapshots of a JetStream shard are taken on its replicas")
        index = await node.snapshot_now()
        self.last_snapshot_index = index
        self.lastsave = int(time.time())
        return "OK"

    async def _snapshot_in_process(self):
        """durability none: no journal to replay, so the image is written from memory in a thread."""
        from ..snapshot.format import write_snapshot
        path = os.path.join(self.dir, "snapshots")
        os.makedirs(path, exist_ok=True)
        # The image covers everything recovered at start-up plus all writes since; the journal left
        # from an earlier durable run is then redundant and is dropped so it is never replayed over it.
        index = self.recovered_index
        write_snapshot(os.path.join(path, "snapshot-%020d.dks" % index), self.keyspace, index)
        self.last_snapshot_index = index
        from ..journal.local import journal_dir, list_segments
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
        if not conn.pending:
            conn.close()

    # -- shutdown -------------------------------------------------------------------------------
    def request_shutdown(self):
        if self.shutdown_event is not None:
            self.shutdown_event.set()

    async def serve_until_shutdown(self):
        await self.shutdown_event.wait()
        await self.close()

    async def close(self):
        for srv in self.listeners:
            srv.close()
        if self.tracker is not None and self.tracker.mode != "none":
            await self.tracker.drain(timeout_s=10)
        for conn in list(self.clients.values()):
            conn.close()
        if self.journal is not None:
            await self.journal.close()
        log.info("durakv stopped")

    # -- logging --------------------------------------------------------------------------------
    def log_exception(self, where, exc):
        log.error("unexpected error in %s: %r", where, exc, exc_info=exc)

    def log_protocol_error(self, session, text):
        self.protocol_errors += 1
        log.info("protocol error from client id=%d addr=%s: %s", session.id, session.addr, text)

    # -- INFO -----------------------------------------------------------------------------------
    def info(self, sections):
        from .info import render_info
        return render_info(self, sections)

    def memory_rss(self):
        try:
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def version_fields(self):
        return {"redis_version": REDIS_COMPAT_VERSION, "valkey_version": VALKEY_VERSION,
                "server_name": "durakv", "durakv_version": __version__}
