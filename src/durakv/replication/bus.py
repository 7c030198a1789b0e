"""The pub/sub bus between nodes: PUBLISH reaches every node and SPUBLISH the nodes of the channel's shard, over
NATS core (at most once, as Valkey's cluster bus)."""

import logging

from ..cluster import natsnames as nn

log = logging.getLogger("durakv.replication")


class BusMixin:
    """PUBLISH/SPUBLISH handed to and received from the other nodes.

    Mixed into ClusterNode (replication/node.py), whose __init__ holds the state these methods share."""

    async def _subscribe_pubsub(self):
        self._pubsub_subs.append(await self.nc.subscribe(nn.PUBSUB, cb=self._on_bus_message))
        self._pubsub_subs.append(await self.nc.subscribe(nn.PUBSUB_SHARD % self.shard, cb=self._on_bus_message))

    def publish_remote(self, channel: bytes, message: bytes, shard: bool):
        """Hands a PUBLISH/SPUBLISH to the other nodes (NATS core: at most once, as Valkey's cluster bus)."""
        if self.nc is None or self.nc.is_closed:
            return
        subject = nn.PUBSUB_SHARD % self.shard if shard else nn.PUBSUB
        header = b"%s %d %d\n" % (self.node_id.encode(), 1 if shard else 0, len(channel))
        self.server.loop.create_task(self._publish_bus(subject, header + channel + message))

    async def _publish_bus(self, subject, payload):
        try:
            await self.nc.publish(subject, payload)
        except Exception as exc:  # noqa: BLE001 - pub/sub is at most once: a lost message is not an error
            log.debug("pub/sub message to %s not sent: %r", subject, exc)

    async def _on_bus_message(self, msg):
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
