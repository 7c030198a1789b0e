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
    """

    __slots__ = ("may_run", "blocked", "gate", "slot_codes", "lru_stamp", "clock", "watchers", "moving", "deleted",
                 "own_feed")

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
