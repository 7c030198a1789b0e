"""Serve, or refuse with a redirection: Valkey 8.0's getNodeByQuery + clusterRedirectClient (cluster.c) as a pure
function of a topology snapshot, this node, the command's keys and the connection's ASKING/READONLY state.

`Router(topology, myself_id)` is built once per topology (and settings) change; `route()` runs per keyed command
and returns None (serve here) or a Refusal whose `.text` is the error reply (no leading '-').
"""

from binascii import crc_hqx as _crc

from .. import messages
from .slots import LBRACE, SLOTS, key_slot

# Refusal codes (Valkey's CLUSTER_REDIR_*).
MOVED = "MOVED"
ASK = "ASK"
CROSSSLOT = "CROSSSLOT"
TRYAGAIN = "TRYAGAIN"              # CLUSTER_REDIR_UNSTABLE
DOWN_UNBOUND = "DOWN_UNBOUND"      # CLUSTERDOWN Hash slot not served
DOWN_STATE = "DOWN_STATE"          # CLUSTERDOWN The cluster is down
DOWN_RO_STATE = "DOWN_RO_STATE"    # CLUSTERDOWN The cluster is down and only accepts read commands

ENDPOINTS = ("ip", "hostname", "unknown-endpoint")   # cluster-preferred-endpoint-type

# Per-slot fast-path codes.
_SLOW, _SERVE, _SERVE_READS = 0, 1, 2


class Refusal:
    """Why a command is not served here. `node` is the Node to redirect to (MOVED/ASK), else None."""
    __slots__ = ("code", "slot", "node", "text")

    def __init__(self, code, slot, node, text):
        self.code = code
        self.slot = slot
        self.node = node
        self.text = text

    def __repr__(self):
        return "Refusal(%r)" % self.text

    def __eq__(self, other):
        return isinstance(other, Refusal) and (self.code, self.slot, self.text) == (other.code, other.slot, other.text)

    __hash__ = None


_CROSSSLOT = Refusal(CROSSSLOT, -1, None, messages.CROSSSLOT)
_TRYAGAIN = Refusal(TRYAGAIN, -1, None, messages.TRYAGAIN)
_DOWN_UNBOUND = Refusal(DOWN_UNBOUND, -1, None, messages.CLUSTERDOWN_UNBOUND)
_DOWN_STATE = Refusal(DOWN_STATE, -1, None, messages.CLUSTERDOWN_STATE)
_DOWN_RO_STATE = Refusal(DOWN_RO_STATE, -1, None, messages.CLUSTERDOWN_RO_STATE)


def endpoint_of(node, endpoint: str) -> str:
    """clusterNodePreferredEndpoint: the host clients are told to use."""
    if endpoint == "ip":
        return node.ip
    if endpoint == "hostname":
        return node.hostname or "?"
    return ""


class Router:
    """An immutable routing table for one node under one topology.

    Settings, as Valkey's configs of the same names: `require_full_coverage` (cluster-require-full-coverage),
    `allow_reads_when_down`, `allow_pubsubshard_when_down`, `endpoint` (cluster-preferred-endpoint-type).
    `healthy=False` forces the cluster-down state (e.g. this node lost the coordination store: Valkey's
    minority-partition rule); otherwise health comes from the topology (`Topology.state_ok`).
    """

    __slots__ = ("topology", "myself_id", "myself", "my_shard", "is_primary", "healthy", "endpoint",
                 "allow_reads_when_down", "allow_pubsubshard_when_down", "slot_codes", "_owner", "_moving_out",
                 "_moving_in")

    def __init__(self, topology, myself_id: str, *, require_full_coverage=True, allow_reads_when_down=False,
                 allow_pubsubshard_when_down=True, endpoint="ip", healthy=True):
        if endpoint not in ENDPOINTS:
            raise ValueError("endpoint must be one of %s" % ", ".join(ENDPOINTS))
        self.topology = topology
        self.myself_id = myself_id
        self.myself = topology.nodes.get(myself_id)
        self.my_shard = topology.shard_by_id[self.myself.shard_id] if self.myself is not None else None
        # A node the topology does not list yet is an empty primary in Valkey's terms: it owns nothing.
        self.is_primary = self.myself is None or self.myself.role == "primary"
        self.healthy = bool(healthy) and topology.state_ok(require_full_coverage)
        self.endpoint = endpoint
        self.allow_reads_when_down = allow_reads_when_down
        self.allow_pubsubshard_when_down = allow_pubsubshard_when_down
        self._owner = topology.shard_by_slot
        mine = self.my_shard
        # Slots whose migration this node's shard takes part in: out of it (source) or into it (target).
        self._moving_out = {}
        self._moving_in = {}
        for slot, (src, dst) in topology.migrating.items():
            if mine is not None and src == mine.id:
                self._moving_out[slot] = topology.shard_by_id[dst].primary
            elif mine is not None and dst == mine.id:
                self._moving_in[slot] = topology.shard_by_id[src].primary
        fast = bytearray(SLOTS)
        if self.healthy and mine is not None:
            code = _SERVE if self.is_primary else _SERVE_READS
            for a, b in mine.slots:
                fast[a:b + 1] = bytes([code]) * (b - a + 1)
            for slot in self._moving_out:
                fast[slot] = _SLOW
        # slot -> _SERVE / _SERVE_READS / _SLOW: route()'s first answer, and the compiled core's slot check
        # (through the pipeline's core state)
        self.slot_codes = bytes(fast)

    def route(self, keys, write=False, readonly=False, asking=False, exists=None, tls=False, pubsub=False):
        """None to serve the command here, else a Refusal.

        keys: the command's keys (for EXEC: every key of every queued command), as bytes; may be empty.
        write: the command (for EXEC: any queued command) has the write flag.
        readonly / asking: the connection sent READONLY / ASKING (pass asking=True also for commands flagged
        "asking"). The caller clears ASKING after each command outside MULTI, as Valkey's resetClient.
        exists(key) -> bool: whether the key exists locally (logically expired counts as missing); consulted only
        for a slot being migrated or imported, where it decides ASK / TRYAGAIN.
        tls: the client's connection is TLS, so MOVED/ASK name the tls-port (Valkey 8.0 answers each client
        with the port of its own connection type).
        pubsub: a sharded pub/sub command (its keys are channels): never counts keys, may read on replicas.
        """
        n = len(keys)
        if n == 0:
            return None
        key = keys[0]
        slot = _crc(key, 0) & 16383 if LBRACE not in key else key_slot(key)
        code = self.slot_codes[slot]
        if n == 1:
            if code == _SERVE or (code == _SERVE_READS and readonly and not write):
                return None
        else:
            for other in keys[1:]:
                if (_crc(other, 0) & 16383 if LBRACE not in other else key_slot(other)) != slot:
                    return _DOWN_UNBOUND if self._owner[slot] is None else _CROSSSLOT
            if code == _SERVE or (code == _SERVE_READS and readonly and not write):
                return None
        return self._decide(slot, keys, write, readonly, asking, exists, tls, pubsub)

    def _decide(self, slot, keys, write, readonly, asking, exists, tls, pubsub):
        owner = self._owner[slot]
        if owner is None:
            return _DOWN_UNBOUND
        migrating_to = importing_from = None
        if self.is_primary or readonly:
            migrating_to = self._moving_out.get(slot)
            if migrating_to is None:
                importing_from = self._moving_in.get(slot)
        missing = existing = 0
        if (migrating_to is not None or importing_from is not None) and not pubsub:
            if exists is None:
                raise TypeError("route() needs exists(key) for a slot that is being migrated")
            for key in keys:
                if exists(key):
                    existing += 1
                else:
                    missing += 1
        if not self.healthy:
            if pubsub:
                if not self.allow_pubsubshard_when_down:
                    return _DOWN_STATE
            elif not self.allow_reads_when_down:
                return _DOWN_STATE
            elif write:
                return _DOWN_RO_STATE
        if migrating_to is not None and missing:
            if existing:
                return _TRYAGAIN
            return self._redirect(ASK, slot, migrating_to, tls)
        if importing_from is not None and asking:
            first = keys[0]
            if missing and any(k != first for k in keys):
                return _TRYAGAIN
            return None
        mine = self.my_shard is not None and owner is self.my_shard
        if (readonly or pubsub) and not write and not self.is_primary and mine:
            return None
        if mine and self.is_primary:
            return None
        return self._redirect(MOVED, slot, owner.primary, tls)

    def _redirect(self, code, slot, node, tls):
        host = endpoint_of(node, self.endpoint)
        port = node.tls_port if tls else node.port
        fmt = messages.ASK if code == ASK else messages.MOVED
        return Refusal(code, slot, node, fmt.format(slot, host, port))

    def route_script_call(self, keys, command_name, script_slot, write=False, readonly=False, asking=False,
                          exists=None, tls=False, pubsub=False, allow_cross_slot=False):
        """A command called from a script (Valkey's scriptVerifyClusterState): (error text or None, script slot).

        script_slot is the slot the script is bound to so far: the slot of EVAL/FCALL's declared keys, or -1.
        The first keyed call binds it; a later call on another slot is refused unless the script has the
        allow-cross-slot-keys flag. Readonly/asking are the calling client's.
        """
        refusal = self.route(keys, write, readonly, asking, exists, tls, pubsub)
        if refusal is not None:
            code = refusal.code
            if code == DOWN_RO_STATE:
                text = messages.SCRIPT_CLUSTERDOWN_RO
            elif code == DOWN_STATE:
                text = messages.SCRIPT_CLUSTERDOWN
            elif code == CROSSSLOT:
                text = messages.SCRIPT_CROSSSLOT_CALL.format(command_name)
            elif code == TRYAGAIN:
                text = messages.SCRIPT_TRYAGAIN.format(command_name)
            elif code == DOWN_UNBOUND:
                text = messages.SCRIPT_UNBOUND
            else:
                text = messages.SCRIPT_NON_LOCAL_KEY
            return text, script_slot
        if not keys or allow_cross_slot:
            return None, script_slot
        slot = key_slot(keys[0])
        if script_slot == -1:
            return None, slot
        if script_slot != slot:
            return messages.SCRIPT_CROSSSLOT, script_slot
        return None, script_slot

    def redirect_blocked(self, key: bytes, write=False, readonly=False, tls=False):
        """For a client blocked on `key` after a topology change (clusterRedirectBlockedClientIfNeeded): None to
        keep it blocked, else the Refusal to unblock it with."""
        if not self.healthy:
            return _DOWN_STATE
        slot = key_slot(key)
        owner = self._owner[slot]
        mine = owner is not None and owner is self.my_shard
        if mine and (self.is_primary or (readonly and not write)):
            return None
        if slot in self._moving_in:
            return None
        if owner is None:
            return _DOWN_UNBOUND
        return self._redirect(MOVED, slot, owner.primary, tls)
