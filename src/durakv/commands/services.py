"""Services: everything a command handler may ask of the process around the keyspace, in named groups by concern.

Handlers reach `ctx.services` and nothing else of the server. Its groups are the whole list of services commands
use: `clients`, `pubsub`, `admin` (config, INFO, shutdown), `persistence` (snapshots, the local journal),
`replication`, `cluster`, `faults` (DEBUG's switches), `off_loop` (the pipeline's work on a worker thread); and a
few methods of its own (the clock, the ACL users, the script host, logging). These base classes are the services of
a pipeline with no process around it (unit tests on an in-process pipeline, start-up replay, the snapshot
builder): no clients, no journal, no listeners, and a clear error for what needs a server. The server's services
(server/services.py) implement the same groups against the running process; a test may pass its own Services whose
groups see or fake what handlers ask.

Methods that answer later return a protocol.resp.Deferred, which durability releases in request order.
"""

import logging
import time

from .. import messages
from ..errors import CommandError

log = logging.getLogger("durakv.commands")


def needs_server(what):
    raise CommandError(messages.NEEDS_RUNNING_SERVER % what)


class Clients:
    """The connected clients: listing, killing, flags, MONITOR, CLIENT PAUSE/UNBLOCK and CLIENT TRACKING."""

    def sessions(self) -> list:
        """The sessions of the connected clients, oldest first."""
        return []

    def kind(self, session) -> bytes:
        """getClientType: b'pubsub' for a subscribed client, else b'normal'."""
        return b"pubsub" if session.subscribed else b"normal"

    def line(self, session) -> str:
        """One CLIENT LIST / CLIENT INFO line (without the newline)."""
        needs_server("CLIENT LIST")

    def flags(self, session) -> str:
        """The client's flags as CLIENT LIST's FLAGS filter matches them: the letters of its `flags=` field
        ("N" when it has none), plus "S" for a MONITOR (Valkey marks one a replica too)."""
        return "N"

    def exists(self, client_id) -> bool:
        return False

    def kill(self, session):
        """Closes the client's connection once its pending replies are written."""

    def set_no_evict(self, session, on):
        pass

    def set_no_touch(self, session, on):
        session.no_touch = on

    def monitor(self, session) -> bool:
        """Turns the client into a MONITOR; False if it already is one."""
        needs_server("MONITOR")

    def reset(self, session):
        """RESET's server side: out of subscribed mode, tracking, MONITOR; NO-EVICT and NO-TOUCH off."""
        session.no_touch = False

    def pause(self, end_ms, all_commands):
        needs_server("CLIENT PAUSE")

    def unpause(self):
        pass

    def unblock(self, client_id, error) -> bool:
        return False

    def tracking_state(self, session):
        """The client's CLIENT TRACKING state (server/notify.TrackingState) or None."""
        return None

    def tracking_enable(self, session, redirect, bcast, optin, optout, noloop, prefixes):
        needs_server("CLIENT TRACKING")

    def tracking_disable(self, session):
        pass


class PubSub:
    """Pub/sub: a client's subscriptions, PUBLISH (to the other nodes too) and PUBSUB's introspection."""

    def subscribe(self, session, names, kind):
        """SUBSCRIBE ('channel'), PSUBSCRIBE ('pattern'), SSUBSCRIBE ('shard'): the confirmations (Raw)."""
        raise CommandError(messages.PUBSUB_NEEDS_CONNECTION)

    def unsubscribe(self, session, names, kind):
        raise CommandError(messages.PUBSUB_NEEDS_CONNECTION)

    def publish(self, channel, message, shard=False) -> int:
        return 0

    def channels(self, pattern, shard=False) -> list:
        return []

    def numsub(self, channel, shard=False) -> int:
        return 0

    def numpat(self) -> int:
        return 0


class Admin:
    """The process's configuration and lifecycle: INFO, CONFIG SET/REWRITE/RESETSTAT, SHUTDOWN, its memory."""

    def info(self, sections) -> str:
        needs_server("INFO")

    def validate_config_set(self, name, value):
        """A reason CONFIG SET must refuse this value beyond parsing it, or None."""
        return None

    def config_set(self, name, value):
        """Sets one option (value: its text). Returns None when it holds from now on, or a Deferred resolved
        with None (or an ErrorReply) once it holds: a shard setting stored for the whole shard, a switch of
        durability that must first write a snapshot or commit what is in flight."""
        needs_server("CONFIG SET")

    def rewrite_config(self):
        needs_server("CONFIG REWRITE")

    def reset_stats(self):
        """CONFIG RESETSTAT's server counters (connections, ...)."""

    def shutdown(self):
        needs_server("SHUTDOWN")

    def memory_rss(self) -> int:
        return 0

    def purge_memory(self) -> bool:
        """MEMORY PURGE: the allocator's free pages back to the system."""
        return False

    def note_peak_memory(self, used) -> int:
        return used


class Persistence:
    """Snapshots and the local journal: SAVE/BGSAVE/LASTSAVE, DEBUG RELOAD, WAITAOF's local commit."""

    def last_save(self) -> int:
        return 0

    def snapshot_in_progress(self) -> bool:
        return False

    def start_snapshot(self):
        """A Deferred resolved with 'OK' (or an ErrorReply) once the snapshot is written."""
        needs_server("SAVE")

    def schedule_snapshot(self):
        """BGREWRITEAOF / BGSAVE SCHEDULE while one is being built: one more snapshot once it ends."""
        needs_server("BGREWRITEAOF")

    def debug_reload(self, save=True, flush=True, merge=False):
        """DEBUG RELOAD: a Deferred resolved with OK once the dataset is what a restart would load."""
        needs_server("DEBUG RELOAD")

    def journaled(self) -> bool:
        return False

    def committed_index(self) -> int:
        return 0

    def wait_local_commit(self, index, timeout_ms, reply_fn):
        """WAITAOF's local part: a Deferred resolved with reply_fn() once entry `index` commits or the
        timeout passes (0: no timeout)."""
        return reply_fn()

    def backups(self):
        """DURAKV BACKUP's sessions (server/backup.BackupSessions: begin, session, read_snapshot, read_journal,
        end); raises CommandError without a server."""
        needs_server("DURAKV BACKUP")


class Replication:
    """Replication: the node's role and replicas, REPLICAOF, SYNC's stream, WAIT and min-replicas-to-write."""

    def status(self) -> dict:
        """role ('master'|'replica'), primary_host, primary_port, offset, replicas [(host, port, offset)],
        state (a replica's link: connect, connecting, sync, connected)."""
        return {"role": "master", "primary_host": "", "primary_port": 0, "offset": 0, "replicas": []}

    def streaming(self) -> bool:
        """Whether a SYNC/PSYNC connection takes Valkey's replication stream now (PUBLISH then joins it)."""
        return False

    def replicaof(self, host, port) -> bool:
        """REPLICAOF host port (host None: NO ONE); False when already a replica of that primary."""
        raise CommandError(messages.REPLICAOF_NEEDS_SERVER)

    def attach_stream(self, session, preamble=b"", partial_asked=False):
        """SYNC: from now on this client receives every write's effects as commands (Valkey's replication
        stream); returns the payload to answer with (`preamble`, then the RDB). `partial_asked`: a PSYNC that
        asked to continue from an offset (INFO stats sync_partial_err: it gets a full resync)."""
        needs_server("SYNC")

    def full_resync_id(self):
        """PSYNC: (replid, offset) of the +FULLRESYNC answer."""
        needs_server("PSYNC")

    def replication_index(self, index) -> int:
        """The journal position replicas report for the client's write `index`, or 0 while it is not committed.
        Without a process there is no journal writer that could step over entries: the same index."""
        return index

    def wait_replicas(self, index, numreplicas, timeout_ms, reply_fn):
        """WAIT: a Deferred resolved with reply_fn() when enough replicas applied `index` or at the timeout."""
        return reply_fn()

    def good_replicas(self, max_lag_ms) -> int:
        """Replicas of this primary's shard heard from within max_lag_ms (min-replicas-to-write)."""
        return 0


class Cluster:
    """Cluster mode: the routing snapshot, this node's id, CLUSTER FAILOVER and MIGRATE's exchange."""

    def routing(self):
        """In cluster mode the server's routing (server/cluster.ClusterRouting: `topology`, `myself_id`, `router`,
        `offsets()`), else None."""
        return None

    def node_id(self):
        return None

    def search_fanout(self, ctx, remote_args, finish):
        """FT.* in cluster mode: sends remote_args to every other shard's primary off the loop, then runs
        finish(ctx, [(shard name, reply or exception)]) on the loop as the command's handler; returns the Deferred
        the reply is, or None when there is no other shard (the command answers for this node)."""
        return None

    def request_failover(self):
        raise CommandError(messages.CLUSTER_SUPPORT_DISABLED)

    def identity(self) -> dict:
        """DURAKV IDENTITY: what the operator's tools need to place this node in a shard."""
        raise CommandError(messages.CLUSTER_SUPPORT_DISABLED)

    def join(self, doc: dict):
        """DURAKV JOIN: become a member of a cluster's shard (raises CommandError with the reason it cannot)."""
        raise CommandError(messages.CLUSTER_SUPPORT_DISABLED)

    # The slot words carried out on the coordination store's topology (compare-and-set, cluster/reshard.py).
    # Each answers a Deferred: +OK once the change is stored and installed on this node, or the error.
    def migrate_slots(self, moves):
        """CLUSTER MIGRATESLOTS: moves = [(slots, target shard id)] out of this node's shard."""
        raise CommandError(messages.CLUSTER_SUPPORT_DISABLED)

    def cancel_slot_migrations(self):
        """CLUSTER CANCELSLOTMIGRATIONS: every move out of this node's shard, slot by slot."""
        raise CommandError(messages.CLUSTER_SUPPORT_DISABLED)

    def assign_slots(self, name, slots, shard_id, check=None):
        """CLUSTER ADDSLOTS(RANGE) / SETSLOT NODE of unowned slots: they become shard_id's. With check (slots
        None), the slots are check(the store's topology), which raises the command's refusal."""
        raise CommandError(messages.CLUSTER_SUPPORT_DISABLED)

    def unassign_slots(self, name, slots, shard_id, check=None):
        """CLUSTER DELSLOTS(RANGE) / FLUSHSLOTS: shard_id's slots become nobody's (check: as assign_slots)."""
        raise CommandError(messages.CLUSTER_SUPPORT_DISABLED)

    def hand_over_slot(self, slot, shard_id):
        """CLUSTER SETSLOT slot NODE id of a slot another shard owns: its keys move there (a reshard of one
        slot); answered once the slot is shard_id's."""
        raise CommandError(messages.CLUSTER_SUPPORT_DISABLED)

    def migrate_exchange(self, host, port, timeout_ms, dbid, auth, commands):
        """Blocks the calling thread (a worker's, or the loop's in MULTI and scripts) sending AUTH (auth: its
        arguments, or None), SELECT dbid (unless the cached connection to host:port has it selected) and
        `commands` to the target, reading one reply line each (up to timeout_ms per read or write). Returns
        (AUTH/SELECT error line or None, [reply line per command read], socket error after some replies);
        raises CommandError (-IOERR) when nothing could be exchanged."""
        raise CommandError(messages.MIGRATE_IOERR_CONNECTING)


class Faults:
    """DEBUG's switches: active expiry and the housekeeping cron off, journal and replica stalls injected."""

    def set_active_expire(self, on):
        pass

    def pause_cron(self, on):
        """DEBUG PAUSE-CRON: stop (or restart) the periodic housekeeping (active expiry, timeouts, stats)."""
        needs_server("DEBUG PAUSE-CRON")

    def journal_stall(self, stall_ms) -> bool:
        return False

    def journal_follow_stall(self, stall_ms) -> bool:
        """A replica holds the journal entries it receives for stall_ms (fault injection). False if not one."""
        return False


class OffLoop:
    """Work off the loop (Pipeline.off_loop): the client parked, the work on a worker thread, the client resumed."""

    def start(self, session):
        """A command of `session` is about to work off the loop: its connection is parked (its later
        commands wait, as behind a blocked command) and the Deferred its reply will be is returned; None when
        there is no loop to come back to (the work is then done synchronously)."""
        return None

    def run(self, work, done):
        """work() on a worker thread, then done(its result, or the exception it raised) on the loop."""
        raise NotImplementedError("off_loop_start returned None: there is no worker")

    def end(self, session, retry_blocked):
        """The work is finished and its reply resolved: the client's connection resumes, commands postponed
        by the locks run again (retry_blocked: blocked clients' retries were postponed too)."""


class Services:
    """The services: its groups (one object each) and the services every handler may use."""
    config = None          # the process's Config (read by CONFIG GET, INFO, ...), None without a process

    def __init__(self):
        self.clients = Clients()
        self.pubsub = PubSub()
        self.admin = Admin()
        self.persistence = Persistence()
        self.replication = Replication()
        self.cluster = Cluster()
        self.faults = Faults()
        self.off_loop = OffLoop()

    def clock_ms(self) -> int:
        return int(time.time() * 1000)

    def log_exception(self, where, exc):
        log.error("unexpected error in %s: %r", where, exc, exc_info=exc)

    def acl_users(self):
        """The process's ACL users and log (server/acl.ServerAcl), or None: only the default user exists."""
        return None

    def script_host(self):
        """What a long script needs of the process (scripting/runner.ScriptHost), or None: scripts then run
        on the calling thread with no busy-reply-threshold."""
        return None
