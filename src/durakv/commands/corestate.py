"""The one object the compiled core (fastpath/_core.c) reads its server-wide decisions from.

The pipeline owns it (`Pipeline.core_state`). Every input of the decision "may the core run commands now?" has
an owner that writes its part here where the input changes: the pipeline (admission, the observer, statistics,
its clock, the role gate, the cluster router), the keyspace (expiry, access times), the durability layer (write
refusal), the hooks (pushes queued behind the current reply). The core reads this object's slots at fixed
offsets, once per batch, and nothing of theirs by name.

A stale decision here would let the core serve what the pipeline refuses, so:
- a flag goes through `set(reason, on)` from the setter of the input it mirrors (a property, or the one method
  that changes it), never from a copy computed elsewhere;
- a container that many places fill and drain in place (WATCH's keys, keys moving to another shard, the server's
  own deletions, pushes for the current client) is held by reference: the core declines while it is not empty,
  so no place that changes it can leave this object behind;
- until the keyspace, the durability layer and the hooks are bound (`Pipeline.bind_core_state`, when the server
  builds its core) the state says "unbound" and the core runs nothing.

The owners live in lower layers than this module and never import it: they write the fields and call `set`.
"""

SLOT_COUNT = 16384

# Which clients' output the flush must check against client-output-buffer-limit (CoreState.output_limits): the
# core writes a batch's replies itself only where no limit applies; otherwise the connection's Python flush runs.
OUTPUT_LIMITS_NONE = 0      # no class has a limit
OUTPUT_LIMITS_SPECIAL = 1   # only the replica / pubsub classes: a session whose core_block says SPECIAL
OUTPUT_LIMITS_ALL = 2       # the normal class has one: every client

# Why the core may not run commands now, one bit each (`blocked`; `reasons()` names them for INFO and tests).
REASONS = (
    "unbound",        # the keyspace / durability / hooks have not published their inputs yet
    "admission",      # admission checks something (ACL, maxmemory, BUSY, CLIENT PAUSE, loading, ... ): Pipeline
    "observer",       # keyspace events, tracking, MONITOR, blocked clients, NO-TOUCH: Pipeline.observer
    "stats_off",      # statistics off (replay, a scratch pipeline): Pipeline.stats_enabled
    "clock",          # an injected clock: the pipeline times calls with it, the core with CLOCK_MONOTONIC
    "refusing",       # writes must ask refuse_writes() (failed journal, async buffer full): Durability
    "access",         # LFU counters, or the LRU clock not ticked yet: Keyspace.track_access / lru_stamp
    "no_expire",      # time does not delete keys (replay, a replica): Keyspace.expire_enabled
    "hide_expired",   # expired keys hidden without being deleted (a replica): Keyspace.hide_expired
    "gate",           # a role gate that cannot answer fast_serving() (a REPLICAOF link's): Pipeline.gate
    "routing",        # cluster mode without a router (CLUSTERDOWN) or its slot codes: Pipeline.router
)
_BIT = {name: 1 << i for i, name in enumerate(REASONS)}

# The limits the core checks per batch (CoreState's fields of those names; their owners write them).
LIMITS = ("threshold_us", "request_limit", "reply_limit", "output_limits")


class CoreState:
    """What the compiled core reads before it runs a batch (fastpath/_core.c reads these slots at their offsets):

    may_run     True while `blocked` is 0 (the core's one test)
    blocked     the REASONS bits that hold now
    gate        the role gate the core asks fast_serving() per keyed command (a shard member's), or None
    slot_codes  the router's per-slot answer (routing/decide.py Router.slot_codes, 16384 bytes), or None outside
                cluster mode
    lru_stamp   the LRU clock a lookup stamps on the key (Keyspace.lru_stamp), or None: no access times kept
    clock       the pipeline's clock (Pipeline.perf_counter): where it is time.perf_counter, the core reads
                CLOCK_MONOTONIC itself
    watchers    WATCHed keys (Pipeline.watchers); moving: keys on their way to another shard
                (ClusterRouting.moving) or None; deleted: the server's own deletions not yet propagated
                (Keyspace.deleted_by_server); own_feed: pushes queued behind the current reply (Hooks.own_feed)
                or None. The core declines while any of them is not empty.

    The limits the core checks per batch, written by their owners where they change (never a copy computed
    elsewhere; tests/server/test_fastpath_state.py flips each on a live server):
    threshold_us   a command that took at least this long goes to the slow log / latency monitor
                   (Monitors.threshold_us: slowlog-log-slower-than, slowlog-max-len, latency-monitor-threshold)
    request_limit  a request larger than this goes to COMMANDLOG large-request (Monitors.request_limit)
    reply_limit    a reply larger than this goes to COMMANDLOG large-reply (Monitors.reply_limit)
    output_limits  OUTPUT_LIMITS_*: whose replies the flush checks against client-output-buffer-limit (the
                   server's, where that option is set)
    """

    __slots__ = ("may_run", "blocked", "gate", "slot_codes", "lru_stamp", "clock", "watchers", "moving", "deleted",
                 "own_feed", "threshold_us", "request_limit", "reply_limit", "output_limits")

    def __init__(self):
        self.blocked = _BIT["unbound"]
        self.may_run = False
        self.gate = None
        self.slot_codes = None
        self.lru_stamp = None
        self.clock = None
        self.watchers = None
        self.moving = None
        self.deleted = None
        self.own_feed = None
        # (the monitors write their thresholds as the pipeline makes them; until then nothing is exempt)
        self.threshold_us = self.request_limit = self.reply_limit = 0
        self.output_limits = OUTPUT_LIMITS_ALL   # (until the server reads client-output-buffer-limit)

    def set(self, reason: str, on) -> None:
        """Sets (on) or clears the bit of `reason`, an input's owner telling the core where it changed."""
        bit = _BIT[reason]
        blocked = self.blocked | bit if on else self.blocked & ~bit
        self.blocked = blocked
        self.may_run = blocked == 0

    def reasons(self) -> list:
        """The names of the reasons that hold now (empty: the core may run commands)."""
        return [name for name in REASONS if self.blocked & _BIT[name]]

    def waiting_on(self) -> list:
        """The containers that hold something now: the core declines while this is not empty."""
        return [name for name in ("watchers", "moving", "deleted", "own_feed") if getattr(self, name)]
