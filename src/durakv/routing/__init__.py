"""Cluster routing, pure: no sockets, no asyncio, no I/O; imports only messages/errors.

API (everything a caller needs):

* `key_slot(key: bytes) -> int` (slots.py): Valkey's keyHashSlot (CRC16/XMODEM of the key or its {hash tag}).
* `Topology` (topology.py): an immutable snapshot of shards (slot ranges, primary, replicas, config epoch),
  nodes (id, ip, port, tls_port, bus_port, hostname, az, health, repl_offset) and migrating slots;
  `Topology.from_json(raw)` / `.to_json()` is the document the coordination store keeps (TopologyError when
  invalid); `shard_by_slot[slot]` is the O(1) owner lookup; `uncovered()` lists unowned slots; `promote`,
  `with_node`, `with_migration`, `without_migration`, `with_slots_assigned` derive the next snapshot.
* `Router(topology, myself_id, ...)` (decide.py): built once per topology, then
  `route(keys, write, readonly, asking, exists, tls, pubsub) -> None | Refusal` per keyed command
  (Valkey's getNodeByQuery: serve, MOVED, ASK, CROSSSLOT, TRYAGAIN, CLUSTERDOWN; `Refusal.text` is the reply),
  `route_script_call(...)` for commands run by a script, `redirect_blocked(key, ...)` for blocked clients after
  a topology change.
* views.py: the CLUSTER SLOTS / SHARDS / NODES / REPLICAS / INFO / LINKS / MYID / MYSHARDID replies, and the argument
  checks and scan helper of COUNTKEYSINSLOT / GETKEYSINSLOT (keyspace.slotindex.SlotIndex is the index form).

The caller skips routing for commands from its primary or the journal (Valkey's mustObeyClient) and for
commands without keys (other than EXEC), as processCommand does.
"""

from .decide import Refusal, Router
from .slots import SLOTS, key_slot
from .topology import Node, Shard, Topology, TopologyError

__all__ = ["SLOTS", "key_slot", "Node", "Shard", "Topology", "TopologyError", "Router", "Refusal"]
