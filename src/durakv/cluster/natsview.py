"""The NATS side of a local cluster as its monitoring endpoints show it: meta leader, streams, stream leaders.

Also moving a stream's leader (JetStream's leader step-down with a preferred server). A LocalCluster holds one
as `cluster.nats_view` (cluster/local.py).
"""

import asyncio
import json

from .manifest import ClusterError
from .nats_procs import http_json


class NatsView:
    """A local cluster's NATS servers, read through their monitoring port.

    Owns nothing but what it is given: `servers()`, the cluster's NATS processes (manifest.Proc, read afresh on
    each call), and `connect()`, an awaitable NATS connection with the operator's identity."""

    def __init__(self, servers, connect):
        self.servers = servers
        self.connect = connect

    def _views(self, path):
        views = {}
        for p in self.servers():
            if p.state != "running":
                continue
            try:
                status, body = http_json(p.ports["monitor"], path, timeout_s=1.0)
            except OSError:
                continue
            if status == 200 and body:
                views[p.name] = body
        return views

    def meta_leader(self):
        """The JetStream meta leader most running NATS servers name, or None while they elect one. A server
        the manifest knows to be dead is never shown as leader (the survivors keep naming it until they elect)."""
        running = {p.name for p in self.servers() if p.state == "running"}
        leaders = [((v.get("meta_cluster") or {}).get("leader")) for v in self._views("/jsz").values()]
        leaders = [x for x in leaders if x and x in running]
        return max(set(leaders), key=leaders.count) if leaders else None

    def streams(self) -> dict:
        """{stream name: {"leader", "replicas" (server names), "messages", "last_seq"}} as the NATS nodes see
        them (the leader's own view wins)."""
        seen = {}
        for server, view in self._views("/jsz?accounts=true&streams=true").items():
            for acct in view.get("account_details") or []:
                for st in acct.get("stream_detail") or []:
                    cl = st.get("cluster") or {}
                    info = {"leader": cl.get("leader"),
                            "replicas": sorted(([cl["leader"]] if cl.get("leader") else [])
                                               + [r["name"] for r in cl.get("replicas") or []]),
                            "messages": (st.get("state") or {}).get("messages"),
                            "last_seq": (st.get("state") or {}).get("last_seq"),
                            "account": acct.get("name")}
                    name = st.get("name")
                    if name not in seen or (info["leader"] and info["leader"] == server):
                        seen[name] = info
        return seen

    def leader_of_stream(self, stream_name):
        """The server name (= manifest name, e.g. 'nats-az2') leading the stream's Raft group, or None."""
        return (self.streams().get(stream_name) or {}).get("leader")

    def move_stream_leader(self, stream_name, server_name, timeout_s=30.0):
        """Makes `server_name` (e.g. 'nats-az2') the leader of the stream's Raft group (JetStream's leader
        step-down with a preferred server, repeated until it holds); returns the leader."""
        async def go():
            nc = await self.connect()
            try:
                loop = asyncio.get_running_loop()
                deadline = loop.time() + timeout_s
                body = json.dumps({"placement": {"preferred": server_name}}).encode()
                while loop.time() < deadline:
                    leader = await loop.run_in_executor(None, self.leader_of_stream, stream_name)
                    if leader == server_name:
                        return leader
                    if leader is not None:
                        try:
                            await nc.request("$JS.API.STREAM.LEADER.STEPDOWN.%s" % stream_name, body, timeout=5)
                        except Exception:  # noqa: BLE001 - an election in progress: look again
                            pass
                    await asyncio.sleep(0.5)
                raise ClusterError("%s did not become the leader of %s in %.0fs" % (server_name, stream_name,
                                                                                 timeout_s))
            finally:
                await nc.close()
        return asyncio.run(go())
