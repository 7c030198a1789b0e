"""The pub/sub bus between nodes: PUBLISH reaches every node and SPUBLISH the nodes of the channel's shard, over
NATS core (at most once, as Valkey's cluster bus). The node's heartbeats (members.py) go out through it too."""

import logging

from ..cluster import natsnames as nn

log = logging.getLogger("durakv.replication")


class NodeBus:
    """One node's messages to and from the other nodes over NATS core.

    Owns its NATS connection (given at `start`) and its subscriptions. Interface: `start(nc)`, `subscribe(subject,
    cb)`, `send(subject, payload)` (fire and forget), `publish_remote(channel, message, shard)`, `connected`.
    Messages for this node's subscribers are delivered to `server.pubsub`."""

    def __init__(self, server, node_id, shard):
        self.server = server
        self.node_id = node_id
        self.shard = shard
        self.nc = None
        self.subscriptions = []

    @property
    def connected(self) -> bool:
        return self.nc is not None and not self.nc.is_closed

    def start(self, nc):
        """Takes the node's NATS connection; nothing is sent before."""
        self.nc = nc

    async def subscribe(self, subject, cb):
        self.subscriptions.append(await self.nc.subscribe(subject, cb=cb))

    async def subscribe_pubsub(self):
        """PUBLISH from any node and SPUBLISH from the nodes of this node's shard (cluster mode)."""
        await self.subscribe(nn.PUBSUB, self._on_message)
        await self.subscribe(nn.PUBSUB_SHARD % self.shard, self._on_message)

    def send(self, subject, payload):
        """Publishes without waiting (at most once: a message lost on the way is not an error)."""
        if self.connected:
            self.server.loop.create_task(self._send(subject, payload))

    def publish_remote(self, channel: bytes, message: bytes, shard: bool):
        """Hands a PUBLISH/SPUBLISH to the other nodes (NATS core: at most once, as Valkey's cluster bus)."""
        subject = nn.PUBSUB_SHARD % self.shard if shard else nn.PUBSUB
        header = b"%s %d %d\n" % (self.node_id.encode(), 1 if shard else 0, len(channel))
        self.send(subject, header + channel + message)

    async def _send(self, subject, payload):
        try:
            await self.nc.publish(subject, payload)
        except Exception as exc:  # noqa: BLE001 - pub/sub is at most once: a lost message is not an error
            log.debug("pub/sub message to %s not sent: %r", subject, exc)

    async def _on_message(self, msg):
        data = msg.data
        nl = data.find(b"\n")
        try:
            origin, shard, length = data[:nl].split(b" ")
            length = int(length)
        except ValueError:
            return
        if origin.decode() == self.node_id:
            return
        body = data[nl + 1:]
        self.server.pubsub.publish(body[:length], body[length:], shard=shard == b"1")
