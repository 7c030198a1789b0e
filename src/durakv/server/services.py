"""The server's services: commands/services.Services and its groups implemented against the running process.

Every service a handler uses of the server is one method of a group here; nothing else of the server is
reachable from commands/. The methods that touch connections take the client's Session and find its connection.
"""

import logging

from .. import __version__, messages
from ..commands.services import (Admin, Clients, Cluster, Faults, OffLoop, Persistence, PubSub, Replication,
                                 Services)
from ..durability.tracker import failure_reason
from ..errors import CommandError
from ..protocol.resp import OK, Deferred, ErrorReply, Raw
from . import allocator
from .migrate import MigrateError
from .search_fanout import SearchFanout

log = logging.getLogger("durakv.server")


class _Served:
    """What every group of the server's services shares: the server, and finding a client's connection."""

    def __init__(self, server):
        self.server = server

    def _conn(self, session):
        return self.server.clients.get(session.id)

    def _deferred_with_timeout(self, timeout_ms, reply_fn):
        d = Deferred()
        if timeout_ms:
            handle = self.server.loop.call_later(timeout_ms / 1000.0, lambda: d.resolve(reply_fn()))
            d.listen(handle.cancel)
        return d


class ServerClients(_Served, Clients):
    """The connected clients, found by their sessions' ids in the server's client table."""

    def sessions(self) -> list:
        return [c.session for c in self.server.clients.values()]

    def kind(self, session) -> bytes:
        """getClientType: replica (a SYNC connection), pubsub, normal."""
        conn = self._conn(session)
        if conn is not None and conn.replica_feed is not None and not session.monitor:
            return b"replica"
        return b"pubsub" if session.subscribed else b"normal"

    def line(self, session) -> str:
        conn = self._conn(session)
        return client_line(conn, self.server.clock_ms()) if conn is not None else ""

    def flags(self, session) -> str:
        conn = self._conn(session)
        if conn is None:
            return "N"
        flags = client_flags(conn)
        return flags + "S" if session.monitor else flags

    def exists(self, client_id) -> bool:
        return client_id in self.server.clients

    def kill(self, session):
        conn = self._conn(session)
        if conn is not None:
            self.server.kill_client(conn)

    def set_no_evict(self, session, on):
        conn = self._conn(session)
        if conn is not None:
            conn.no_evict = on  # maxmemory-clients never closes it (server/clientevict.py)

    def set_no_touch(self, session, on):
        conn = self._conn(session)
        if conn is not None:
            self.server.hooks.set_no_touch(conn, on)
        else:
            session.no_touch = on

    def monitor(self, session) -> bool:
        conn = self._conn(session)
        if conn is None:
            raise CommandError(messages.MONITOR_NEEDS_CONNECTION)
        return self.server.hooks.add_monitor(conn)

    def reset(self, session):
        conn = self._conn(session)
        if conn is not None:
            self.server.hooks.reset_client(conn)

    def pause(self, end_ms, all_commands):
        self.server.blocking.pause(end_ms, all_commands)

    def unpause(self):
        self.server.blocking.unpause()

    def unblock(self, client_id, error) -> bool:
        return self.server.blocking.unblock(client_id, error)

    def tracking_state(self, session):
        conn = self._conn(session)
        return conn.tracking if conn is not None else None

    def tracking_enable(self, session, redirect, bcast, optin, optout, noloop, prefixes):
        conn = self._conn(session)
        if conn is None:
            raise CommandError(messages.TRACKING_NEEDS_CONNECTION)
        hooks = self.server.hooks
        hooks.tracking.enable(conn, redirect, bcast, optin, optout, noloop, prefixes)
        session.tracking = True
        hooks.refresh()

    def tracking_disable(self, session):
        conn = self._conn(session)
        if conn is not None and conn.tracking is not None:
            self.server.hooks.tracking.disable(conn)
            session.tracking = False
            self.server.hooks.refresh()


class ServerPubSub(_Served, PubSub):
    """Pub/sub on this node's subscriptions, PUBLISH handed to the other nodes of a cluster."""

    def _sub_conn(self, session):
        conn = self._conn(session)
        if conn is None:
            raise CommandError(messages.PUBSUB_NEEDS_CONNECTION)
        return conn

    def subscribe(self, session, names, kind):
        conn = self._sub_conn(session)
        return self._confirmations(session, conn, self.server.pubsub.subscribe(conn, names, kind))

    def unsubscribe(self, session, names, kind):
        conn = self._sub_conn(session)
        return self._confirmations(session, conn, self.server.pubsub.unsubscribe(conn, names, kind))

    @staticmethod
    def _confirmations(session, conn, raw):
        """Subscribe/unsubscribe confirmations are pushes in Valkey (CLIENT_PUSHING, in RESP2 too), so CLIENT
        REPLY OFF / SKIP does not silence them: under it they go out as pushes and the command's own (empty)
        reply is what gets dropped."""
        if session.reply_off or session.reply_skip:
            conn.push(raw)
            return Raw(b"")
        return raw

    def publish(self, channel, message, shard=False) -> int:
        server = self.server
        # Not before the writes it follows in its transaction or script have committed (pipeline.py), on
        # this node and on the others alike.
        ticket = server.pipeline.publish_ticket()
        node = server.cluster_node
        if node is not None and node.routing is not None:
            # the other nodes deliver to their subscribers
            if ticket:
                server.durability.when_committed(ticket, lambda: node.bus.publish_remote(channel, message, shard))
            else:
                node.bus.publish_remote(channel, message, shard)
        return server.pubsub.publish(channel, message, shard=shard, ticket=ticket)

    def channels(self, pattern, shard=False) -> list:
        return self.server.pubsub.channel_list(pattern, shard=shard)

    def numsub(self, channel, shard=False) -> int:
        return self.server.pubsub.numsub(channel, shard=shard)

    def numpat(self) -> int:
        return len(self.server.pubsub.patterns)


class ServerAdmin(_Served, Admin):
    """The server's config, INFO, stats, shutdown and memory figures."""

    def info(self, sections) -> str:
        return self.server.info(sections)

    def validate_config_set(self, name, value):
        return self.server.validate_config_set(name, value)

    def config_set(self, name, value):
        return self.server.config_set(name, value)

    def rewrite_config(self):
        self.server.config.rewrite()

    def reset_stats(self):
        srv = self.server
        srv.total_connections = srv.rejected_connections = 0
        srv.net_input_bytes = srv.net_output_bytes = srv.reads_processed = srv.writes_processed = 0
        srv.ops_samples.clear()  # instantaneous_ops_per_sec restarts from the reset counter
        srv.sync_full = srv.sync_partial_err = srv.total_forks = 0
        srv.loop_stats.reset()
        # the acl_access_denied_* counters stay: Valkey sets them once at start (initServer), not in
        # resetServerStats

    def shutdown(self):
        self.server.request_shutdown()

    def memory_rss(self) -> int:
        return self.server.memory_rss()

    def purge_memory(self) -> bool:
        return allocator.purge()

    def note_peak_memory(self, used) -> int:
        srv = self.server
        srv.peak_memory = max(getattr(srv, "peak_memory", 0), used)
        return srv.peak_memory


class ServerPersistence(_Served, Persistence):
    """The server's snapshots and its journal's commits."""

    def last_save(self) -> int:
        return self.server.lastsave

    def snapshot_in_progress(self) -> bool:
        return self.server.snapshot_in_progress is not None

    def start_snapshot(self):
        return self.server.start_snapshot()

    def schedule_snapshot(self):
        self.server.schedule_snapshot()

    def debug_reload(self, save=True, flush=True, merge=False):
        return self.server.debug_reload(save, flush, merge)

    def journaled(self) -> bool:
        return self.server.durability.tracker is not None

    def committed_index(self) -> int:
        return self.server.durability.committed

    def wait_local_commit(self, index, timeout_ms, reply_fn):
        d = self._deferred_with_timeout(timeout_ms, reply_fn)
        self.server.durability.when_committed(index, lambda: d.resolve(reply_fn()))
        return d

    def backups(self):
        return self.server.backups


class ServerReplication(_Served, Replication):
    """The node's replication: its link or shard, SYNC's feed, the replicas' offsets."""

    def status(self) -> dict:
        return self.server.replication_info()

    def streaming(self) -> bool:
        return bool(self.server.durability.feeds)

    def replicaof(self, host, port) -> bool:
        srv = self.server
        if srv.cluster_routing is not None:
            raise CommandError(messages.REPLICAOF_IN_CLUSTER_MODE)
        if srv.cluster_node is not None:
            raise CommandError(messages.REPLICAOF_ON_SHARD_MEMBER)
        return srv.replicaof(host, port)

    def full_resync_id(self):
        """(replid, offset) a PSYNC replica is told to start from: the id INFO replication shows as master_replid
        and the stream's own byte offset, which starts at 0 for each replica (ReplicaFeed.offset)."""
        srv = self.server
        node = srv.cluster_node
        replid = node.replication_id if node is not None else srv.run_id
        return replid.encode(), 0

    def attach_stream(self, session, preamble=b"", partial_asked=False):
        from .replfeed import FORK_MIN_KEYS, ReplicaFeed, dataset_rdb, export_rdb_forked
        conn = self._conn(session)
        if conn is None:
            raise CommandError(messages.SYNC_NEEDS_CONNECTION)
        server = self.server
        server.sync_full += 1                 # every SYNC / PSYNC is answered with the whole dataset
        server.sync_partial_err += partial_asked
        ks = server.keyspace
        data, functions = session.repl_rdb_data, session.repl_rdb_functions
        key_delay_us = server.config["rdb-key-save-delay"]
        # a delay per key (rdb-key-save-delay, tests that need a long transfer) is waited in a child, never on the
        # loop: it always forks
        if data and (key_delay_us or sum(len(db.data) for db in ks.dbs) >= FORK_MIN_KEYS):
            # Built off the loop (a forked child); it holds everything issued so far, so it leaves once that
            # commits, and not at all if the journal failed before (the file would hold lost writes).
            durability = server.durability
            tracker = durability.tracker
            failures = tracker.failed_batches if tracker is not None else 0

            def still_valid():
                t = durability.tracker
                if t is not None and (t is not tracker or t.failed_batches != failures):
                    return failure_reason(t.failed) if t.failed is not None else "the journal failed meanwhile"
                return None
            reply = export_rdb_forked(server.loop, ks, server.dir, data=data, functions=functions,
                                      ticket=durability.export_ticket(), still_valid=still_valid,
                                      preamble=preamble, forked=server.note_fork, key_delay_us=key_delay_us)

            def exported(d=reply):
                if type(d.reply) is ErrorReply and conn.replica_feed is not None:
                    # no file, no stream: the client gets the error and then the end of the connection
                    durability.remove_feed(conn.replica_feed)
                    conn.replica_feed = None
                    session.close_after_reply = True
            reply.listen(exported)
        else:
            rdb = dataset_rdb(ks, data=data, functions=functions)
            reply = Raw(preamble + b"$%d\r\n" % len(rdb) + rdb)
        if session.repl_rdb_only:
            session.close_after_reply = True     # an RDB-only client is done once it has the file
        elif conn.replica_feed is None:
            conn.replica_feed = ReplicaFeed(conn)
            server.durability.add_feed(conn.replica_feed)   # removed in Hooks.drop_client
            search = server.hooks.search
            if search:
                # valkey-search keeps its index definitions in the RDB's aux fields; durakv's file has none, so
                # the stream opens with them (a replica applies them as the FT.CREATE effects they are)
                defs = conn.replica_feed.encode(search.definitions())
                server.hooks.push_after_reply(Raw(defs), server.durability.export_ticket())
        return reply

    def replication_index(self, index) -> int:
        """The journal position replicas report for the client's write `index` (a tracker index), or 0 while
        it is not committed (no replica can be known to hold it). They differ once a JetStream writer stepped
        over a deposed primary's entries (WriteTracker.journal_index)."""
        tracker = self.server.durability.tracker
        if tracker is None:
            return index
        if index > tracker.committed:
            return 0
        return tracker.journal_index(index)

    def wait_replicas(self, index, numreplicas, timeout_ms, reply_fn):
        # A shard's replicas report the journal index they applied (replication/members.py heartbeats); without
        # a shard there are none, and WAIT answers at its timeout (0 = until the client disconnects, as Valkey).
        d = self._deferred_with_timeout(timeout_ms, reply_fn)
        node = self.server.cluster_node
        if node is not None and node.role == "primary":
            def watch_replicas():
                # Once the write is committed its journal position is known: replicas are compared with that.
                if not d.done:
                    position = self.replication_index(index)
                    d.listen(node.members.when_replicas(position, numreplicas, lambda: d.resolve(reply_fn())))
            self.server.durability.when_committed(index, watch_replicas)
        return d

    def good_replicas(self, max_lag_ms) -> int:
        node = self.server.cluster_node
        if node is None or node.role != "primary":
            return 0
        return node.members.replicas_heard_within(max_lag_ms)


class ServerCluster(_Served, Cluster):
    """The cluster routing and the shard member (replication/node.py) of this node."""

    def routing(self):
        return self.server.cluster_routing

    def search_fanout(self, ctx, remote_args, finish):
        """FT.* in cluster mode: remote_args to every other shard's primary, then finish(ctx, results) on the
        loop (server/search_fanout.py); None when there is no other shard to ask."""
        if self.server.cluster_routing is None:
            return None
        return SearchFanout(self.server)(ctx, remote_args, finish)

    def node_id(self):
        node = self.server.cluster_node
        return node.node_id if node is not None else None

    def request_failover(self):
        node = self.server.cluster_node
        if node is None:
            raise CommandError(messages.CLUSTER_SUPPORT_DISABLED)
        if node.role == "primary":
            raise CommandError(messages.FAILOVER_TO_PRIMARY)
        d = Deferred()
        task = self.server.loop.create_task(node.store.request_failover(node.shard, node.node_id))

        def done(t):
            exc = t.exception()
            d.resolve(ErrorReply(messages.FAILOVER_REQUEST_FAILED % exc) if exc is not None else "OK")
        task.add_done_callback(done)
        return d

    def identity(self):
        srv = self.server
        membership = getattr(srv, "membership", None)
        if membership is None:
            raise CommandError(messages.JOIN_NEEDS_JETSTREAM)
        from ..cluster.secrets import FORMAT
        cfg = srv.config
        ip, port, tls_port = cfg.announced()
        return {b"node-id": membership.node_id.encode(), b"availability-zone": cfg["availability-zone"].encode(),
                b"ip": ip.encode(), b"port": port, b"tls-port": tls_port,
                b"cluster-enabled": 1 if cfg["cluster-enabled"] else 0,
                b"nkey": membership.public_key.encode(), b"format": FORMAT, b"version": __version__.encode(),
                b"state": b"member" if membership.joined else b"unassigned",
                b"cluster-id": (membership.cluster_id or "").encode(), b"shard": (membership.shard or "").encode()}

    def join(self, doc):
        from ..cluster.membership import MembershipError
        if getattr(self.server, "membership", None) is None:
            raise CommandError(messages.JOIN_NEEDS_JETSTREAM)
        try:
            return self.server.join_cluster(doc)
        except MembershipError as exc:
            raise CommandError(messages.JOIN_REFUSED.format(exc)) from None

    # -- slot words on the stored topology -------------------------------------------------------------------
    def _store_node(self, name):
        node = self.server.cluster_node
        if node is None or node.store is None or self.server.cluster_routing is None:
            raise CommandError(messages.CLUSTER_TOPOLOGY_UNSUPPORTED.format(name, messages.CLUSTER_TOPOLOGY_FIXED))
        return node

    def _run_change(self, coro, done=None):
        """A Deferred resolved when `coro` ends: by done(result, deferred) (which resolves it), or with +OK once
        the topology revision it returns is installed here; a failure is answered as its error."""
        d = Deferred()
        routing = self.server.cluster_routing

        def finished(task):
            exc = task.exception()
            if isinstance(exc, CommandError):
                d.resolve(ErrorReply(exc.text))     # the command's own refusal, decided on the store's copy
            elif exc is not None:
                d.resolve(ErrorReply(messages.CLUSTER_CHANGE_FAILED.format(exc)))
            elif done is not None:
                done(task.result(), d)
            else:
                routing.when_installed(task.result() or 0, lambda: d.resolve(OK))
        self.server.loop.create_task(coro).add_done_callback(finished)
        return d

    def _mine(self):
        return self.server.cluster_routing.router.my_shard

    def migrate_slots(self, moves):
        from ..cluster.reshard import node_mark_migrations
        node = self._store_node("MIGRATESLOTS")
        routing = self.server.cluster_routing
        return self._run_change(node_mark_migrations(node.store, routing.topology, self._mine(), moves))

    def cancel_slot_migrations(self):
        node = self._store_node("CANCELSLOTMIGRATIONS")
        routing = self.server.cluster_routing
        mine = routing.router.my_shard.id
        slots = [s for s, (src, _dst) in routing.topology.migrating.items() if src == mine]
        watcher = node.topology_watcher
        watcher.migrate_if_needed()
        if watcher.migrator is None:
            raise CommandError(messages.NO_SLOT_MIGRATIONS)

        async def cancel():
            kept, finishing, revision = await watcher.migrator.cancel(slots)
            log.info("slot migrations cancelled: %d slot(s) stay, %d had started to move and finish moving",
                     len(kept), len(finishing))
            return revision
        return self._run_change(cancel())

    def assign_slots(self, name, slots, shard_id, check=None):
        from ..cluster.reshard import assign_slots
        return self._change_slots(name, slots, shard_id, check, assign_slots)

    def unassign_slots(self, name, slots, shard_id, check=None):
        from ..cluster.reshard import unassign_slots
        return self._change_slots(name, slots, shard_id, check, unassign_slots)

    def _change_slots(self, name, slots, shard_id, check, change):
        node = self.server.cluster_node
        if check is not None and (node is None or node.store is None) and self.server.cluster_routing is not None:
            # no store: this node's topology is the only one, and its refusal stands
            check(self.server.cluster_routing.view())
        node = self._store_node(name)
        if shard_id != self._mine().id:
            raise CommandError(messages.CLUSTER_OTHER_SHARD.format(name))

        async def checked():
            chosen = slots
            if check is not None:
                topology, _revision = await node.store.get_topology()
                chosen = check(topology)     # CommandError: Valkey's refusal by the store's owners
            return await change(node.store, chosen, shard_id, shard_name=node.shard)
        return self._run_change(checked())

    def hand_over_slot(self, slot, shard_id):
        from ..cluster.reshard import node_mark_migrations
        node = self._store_node("SETSLOT")
        routing = self.server.cluster_routing

        def owned(_revision, d):
            routing.when(lambda t: t.shard_by_slot[slot] is not None and t.shard_by_slot[slot].id == shard_id,
                         lambda: d.resolve(OK))
        topology = routing.topology
        if topology.migrating.get(slot, (None, None))[1] == shard_id:
            d = Deferred()
            owned(0, d)
            return d
        mine = self._mine()
        if topology.shard_by_slot[slot] is None or topology.shard_by_slot[slot].id != mine.id:
            # A node changes only its own shard (cluster/natsauth.py): the slot's owner starts the move.
            raise CommandError(messages.CLUSTER_OTHER_SHARD.format("SETSLOT"))
        return self._run_change(node_mark_migrations(node.store, topology, mine, [([slot], shard_id)]), owned)

    def migrate_exchange(self, host, port, timeout_ms, dbid, auth, commands):
        try:
            return self.server.migrate_sockets.exchange(host, port, timeout_ms, dbid, auth, commands)
        except MigrateError as exc:
            raise CommandError(str(exc)) from None


class ServerFaults(_Served, Faults):
    """DEBUG's switches on the server and its shard member."""

    def set_active_expire(self, on):
        self.server.active_expire_enabled = on

    def pause_cron(self, on):
        self.server.cron_paused = on

    def journal_stall(self, stall_ms) -> bool:
        return self.server.set_journal_stall(stall_ms)

    def journal_follow_stall(self, stall_ms) -> bool:
        node = self.server.cluster_node
        return node is not None and node.follower.stall_following(stall_ms)


class ServerOffLoop(_Served, OffLoop):
    """Work off the loop: the client parked, the server's worker pool, the client resumed."""

    def start(self, session):
        loop = self.server.loop
        if loop is None or not loop.is_running():
            return None
        conn = self._conn(session)
        if conn is not None and conn.blocked is None:
            conn.blocked = OFF_LOOP_PARKED
        return Deferred()

    def run(self, work, done):
        loop = self.server.loop

        def job():
            try:
                result = work()
            except Exception as exc:  # noqa: BLE001 - handed to the command's finish, on the loop
                result = exc
            try:
                loop.call_soon_threadsafe(done, result)
            except RuntimeError:
                pass  # the loop is closed: the server is shutting down
        self.server.off_loop_pool().submit(job)

    def end(self, session, retry_blocked):
        server = self.server
        conn = self._conn(session)
        if conn is not None and conn.blocked is OFF_LOOP_PARKED:
            conn.blocked = None
            server.loop.call_soon(conn.resume)
        blocking = server.blocking
        if retry_blocked and blocking.waiting:
            blocking.signal_all()
            blocking.serve()
        if blocking.postponed:
            blocking.resume_postponed()


class ServerServices(Services):
    """The services of the running process: its groups, and the clock, log, ACL users and script host."""

    def __init__(self, server):
        self.server = server
        self.config = server.config
        self._script_host = ScriptHost(server)
        self.clients = ServerClients(server)
        self.pubsub = ServerPubSub(server)
        self.admin = ServerAdmin(server)
        self.persistence = ServerPersistence(server)
        self.replication = ServerReplication(server)
        self.cluster = ServerCluster(server)
        self.faults = ServerFaults(server)
        self.off_loop = ServerOffLoop(server)

    def clock_ms(self) -> int:
        return self.server.clock_ms()

    def log_exception(self, where, exc):
        self.server.log_exception(where, exc)

    def acl_users(self):
        return self.server.acl

    def script_host(self):
        return self._script_host


class ScriptParked:
    """conn.blocked of the client whose script runs past busy-reply-threshold."""
    __slots__ = ()


SCRIPT_PARKED = ScriptParked()


class OffLoopParked:
    """conn.blocked of the client whose command works off the loop (MIGRATE, a large DUMP or RESTORE)."""
    __slots__ = ()


OFF_LOOP_PARKED = OffLoopParked()


class ScriptHost:
    """scripting/runner's host: the loop, busy-reply-threshold, parking the caller, active expiry."""

    def __init__(self, server):
        self.server = server
        self._saved_expire = None

    @property
    def loop(self):
        return self.server.loop

    def threshold_ms(self) -> int:
        return self.server.config["busy-reply-threshold"] if self.server.loop is not None else 0

    def park(self, session):
        conn = self.server.clients.get(session.id)
        if conn is not None and conn.blocked is None:
            conn.blocked = SCRIPT_PARKED

    def unpark(self, session):
        conn = self.server.clients.get(session.id)
        if conn is not None and conn.blocked is SCRIPT_PARKED:
            conn.blocked = None
            self.server.loop.call_soon(conn.resume)

    def suspend_active_expire(self):
        srv = self.server
        self._saved_expire = srv.active_expire_enabled
        srv.active_expire_enabled = False

    def resume_active_expire(self):
        if self._saved_expire is not None:
            self.server.active_expire_enabled = self._saved_expire
            self._saved_expire = None


def client_flags(conn) -> str:
    """The `flags=` field of a CLIENT LIST line: Valkey's letters in Valkey's order, "N" for none."""
    s = conn.session
    tracking = conn.tracking
    return "".join((
        "S" if conn.replica_feed is not None and not s.monitor else "",
        "O" if s.monitor else "",
        "P" if s.subscribed else "",
        "x" if s.in_multi else "",
        "b" if conn.blocked is not None else "",
        "t" if tracking is not None else "",
        "R" if tracking is not None and tracking.broken else "",
        "B" if tracking is not None and tracking.bcast else "",
        "d" if s.watch_broken else "",
        "c" if s.close_after_reply else "",
        "r" if s.readonly_mode else "",
        "e" if conn.no_evict else "",
        "T" if s.no_touch else "",
        "I" if s.import_source else "")) or "N"


def client_line(conn, now_ms, current=None) -> str:
    """One CLIENT LIST line, Valkey's fields in Valkey's order (`current`: the command name to show instead of
    the last one, as ACL LOG shows the command being refused)."""
    s = conn.session
    if current is None:
        current = s.last_cmd.fullname if s.last_cmd is not None else "NULL"
    age = (now_ms - s.created_ms) // 1000
    idle = (now_ms - s.last_interaction_ms) // 1000
    subs = conn.subs
    tracking = conn.tracking
    flags = client_flags(conn)
    nsub, npsub, nssub = (len(subs.channels), len(subs.patterns), len(subs.shard)) if subs is not None else (0, 0, 0)
    redir = tracking.redirect if tracking is not None else -1
    held = len(conn.outbox.held) if conn.outbox is not None else 0
    omem = conn.output_memory()
    return ("id=%d addr=%s laddr=%s fd=%d name=%s age=%d idle=%d flags=%s capa=%s db=%d sub=%d psub=%d ssub=%d "
            "multi=%d watch=%d qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=%d rbs=16384 rbp=0 obl=0 oll=%d omem=%d "
            "tot-mem=%d events=r cmd=%s user=%s redir=%d resp=%d lib-name=%s lib-ver=%s tot-net-in=%d "
            "tot-net-out=%d tot-cmds=%d" % (
                s.id, s.addr, s.laddr, s.fd, s.name.decode("utf-8", "replace"), age, idle, flags,
                "r" if s.capa_redirect else "", s.db_id,
                nsub, npsub, nssub, len(s.multi_queue) if s.in_multi else -1, len(s.watched), s.multi_bytes, held,
                omem, omem + s.multi_bytes,
                current, s.user, redir, s.resp, s.lib_name.decode("utf-8", "replace"),
                s.lib_ver.decode("utf-8", "replace"), s.net_in, s.net_out, s.commands_processed))

