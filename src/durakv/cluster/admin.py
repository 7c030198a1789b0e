"""The operator's operations on a running cluster, on any hosts: `durakv cluster create`, `status`, `failover`,
`reshard`, `rebalance`, `spread-primaries`, `add-node`, `del-node`, `replace-node`, `remove-shard`.

Each talks to the cluster through its NATS servers, with the operator's identity from the cluster's secrets
directory (cluster/secrets.py), and to its nodes over RESP with the cluster's password; none reads a local
manifest (`durakv cluster up`, cluster/local.py, is a launcher of local processes on top of these).

How `create` places nodes (`plan_layout`): the nodes given are grouped into shards of 1 + replicas nodes, one
node of a shard per availability zone (the AZ each node reports in DURAKV IDENTITY), and shard i's primary in
AZ i mod (number of AZs), as the managed services spread primaries; the 16384 slots are split as `valkey-cli
--cluster create` splits them. It refuses, with the reason, when the nodes cannot make that layout: a count
that does not divide, too few AZs, a node already in a cluster, a node it cannot reach or that is of another
format.
"""

import asyncio
import json
import logging
import time

from ..journal.jetstream import connect, stream_copies
from ..routing import Node, Shard, Topology
from ..routing.topology import bus_port_of, node_id_for
from . import natsnames as nn
from .reshard import ReshardError, change_topology, rebalance, reshard, wait_moved
from .respclient import RespClient, RespError
from .passwords import new_password
from .secrets import FORMAT, ClusterSecrets
from .settings import AuthSettings, ClusterDocument, ShardSettings
from .store import NatsStore, StaleRevision

log = logging.getLogger("durakv.cluster")

INTERNAL_USER = "durakv-internal"     # what nodes present to each other's RESP ports (slot migration)


class AdminError(Exception):
    pass


def slot_ranges(shards: int):
    """16384 slots split into `shards` contiguous ranges, as `valkey-cli --cluster create` splits them."""
    per = 16384 / shards
    return [(int(round(i * per)), int(round((i + 1) * per)) - 1) for i in range(shards)]


def parse_addr(text: str):
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise AdminError("%r is not HOST:PORT" % text)
    return host.strip("[]"), int(port)


def plan_layout(identities, replicas):
    """[[primary, replica, ...] per shard] of identities (dicts with "availability-zone"), or AdminError with
    the reason. One node of a shard per AZ; shard i's primary in AZ i mod (number of AZs)."""
    per_shard = 1 + replicas
    if replicas < 0:
        raise AdminError("--replicas must be >= 0")
    if not identities:
        raise AdminError("no nodes given")
    if len(identities) % per_shard:
        raise AdminError("%d nodes do not make shards of %d (1 primary + %d replicas)"
                         % (len(identities), per_shard, replicas))
    by_az = {}
    for ident in identities:
        by_az.setdefault(ident["availability-zone"], []).append(ident)
    azs = sorted(by_az)
    if len(azs) < per_shard:
        raise AdminError("too few availability zones: a shard of %d nodes needs %d AZs (one node each), the nodes "
                         "report %s" % (per_shard, per_shard, ", ".join("%s: %d" % (a, len(by_az[a])) for a in azs)))
    shards = []
    for i in range(len(identities) // per_shard):
        preferred = home_az(i, azs)
        used, members = set(), []
        for k in range(per_shard):
            if k == 0 and by_az[preferred]:
                az = preferred
            else:
                candidates = [a for a in azs if a not in used and by_az[a]]
                if not candidates:
                    raise AdminError("the nodes cannot make %d shards with one node per AZ each (the nodes report "
                                     "%s)" % (len(identities) // per_shard, ", ".join(
                                         "%s: %d" % (a, sum(1 for x in identities if x["availability-zone"] == a))
                                         for a in azs)))
                az = max(candidates, key=lambda a: (len(by_az[a]), -azs.index(a)))
            used.add(az)
            members.append(by_az[az].pop(0))
        shards.append(members)
    return shards


def home_az(shard_index, azs):
    """Shard i's home AZ: AZ i mod (number of AZs), AZs sorted by name (plan_layout's placement)."""
    return azs[shard_index % len(azs)] if azs else ""


def plan_spread(topology, leases) -> list:
    """[(shard name, its primary's AZ, its home AZ, the shard's node in the home AZ or None)] for every shard
    whose lease holder is away from home. Pure: `spread_primaries` acts on it. A shard's index is its name when
    the name is a number (create and add-shard name them 0, 1, ...), else its place in the topology."""
    azs = sorted({n.az for sh in topology.shards for n in sh.nodes if n.az})
    out = []
    for place, sh in enumerate(topology.shards):
        index = int(sh.name) if sh.name.isdigit() else place
        home = home_az(index, azs)
        lease = leases.get(sh.name)
        holder = next((n for n in sh.nodes if lease is not None and n.id == lease.holder), sh.primary)
        if not home or holder.az == home:
            continue
        out.append((sh.name, holder.az, home, next((n for n in sh.nodes if n.az == home), None)))
    return out


def _decode_map(reply) -> dict:
    """A RESP2 flat map (DURAKV IDENTITY) as {str: str | int}."""
    out = {}
    for k, v in zip(reply[::2], reply[1::2]):
        out[k.decode()] = v.decode() if isinstance(v, bytes) else v
    return out


class ClusterAdmin:
    """Operations against one running cluster. secrets: its ClusterSecrets (or directory); nats: the NATS URLs
    (default: the ones the secrets directory records); user/password: what to present to the nodes (default:
    the cluster's password, user `default`); say: where progress lines go."""

    def __init__(self, secrets, nats=None, user=None, password=None, say=None, resp_timeout_s=5.0):
        self.secrets = secrets if isinstance(secrets, ClusterSecrets) else ClusterSecrets(secrets)
        self.nats = list(nats or self.secrets.nats_urls)
        if not self.nats:
            raise AdminError("no NATS servers: give --nats URLS (or record them with `durakv cluster init --nats`)")
        self.user = user
        self.password = self.secrets.resp_password if password is None else password
        self.say = say or (lambda msg: None)
        self.resp_timeout_s = resp_timeout_s

    # -- connections ---------------------------------------------------------------------------------------
    def _tls(self):
        if not self.secrets.tls:
            return None
        from .tls import client_context
        cert = self.secrets.operator_cert()
        return client_context(cert["ca"], cert["cert"], cert["key"])

    async def connect_nats(self, system=False):
        """A NATS connection of the operator's identity (system=True: its SYS account identity)."""
        return await connect(self.nats, name="durakv-operator%s" % ("-sys" if system else ""), tls=self._tls(),
                             creds=self.secrets.system_creds if system else self.secrets.operator_creds)

    UNANSWERED_RETRY_S = 30.0    # an operation's KV requests the bucket did not take are sent again this long

    async def store(self, create=False):
        """The coordination store, with the operator's identity (create: make its bucket if it is not there)."""
        nc = await self.connect_nats()
        try:
            store = NatsStore(nc)
            store.unanswered_retry_s = self.UNANSWERED_RETRY_S
            return await (store.create_cluster() if create else store.open())
        except BaseException:
            await nc.close()
            raise

    def resp(self, host, port, timeout_s=None) -> RespClient:
        """A connection to a node, authenticated, over TLS when the cluster is."""
        return RespClient(host, port, timeout_s or self.resp_timeout_s, tls_ca=self.secrets.ca_file,
                          password=self.password, user=self.user)

    def node_addr(self, node):
        """(host, port) to reach a topology Node (its TLS port on a TLS cluster)."""
        return node.ip, (node.tls_port if self.secrets.tls and node.tls_port else node.port or node.tls_port)

    def identity(self, host, port) -> dict:
        try:
            with self.resp(host, port) as c:
                ident = _decode_map(c.execute("DURAKV", "IDENTITY"))
        except (OSError, RespError) as exc:
            raise AdminError("node %s:%d cannot be reached or refused DURAKV IDENTITY: %s" % (host, port, exc)) \
                from None
        ident["host"], ident["addr_port"] = host, port
        if ident.get("format") != FORMAT:
            raise AdminError("node %s:%d is of format %r, this tool of format %d" % (host, port, ident.get("format"),
                                                                                    FORMAT))
        return ident

    # -- create ----------------------------------------------------------------------------------------------
    async def create(self, addrs, replicas=1, durability="sync", lease_ttl_ms=2000, durability_buffer_ms=10000,
                     timeout_s=120.0, layout_given=False, follow=None):
        """Groups the unassigned nodes at addrs (["host:port", ...]) into shards and starts the cluster.
        layout_given: addrs is [[primary, replica, ...] per shard] already (the local launcher's, which names
        its processes by shard); it is still checked: one node of a shard per AZ.
        follow: make this cluster a follower region (cluster/region.py) of another: {"domain": this region's
        JetStream domain, "peer_domain": the source region's, "source_layout": its shard_layout}; its shards must
        own the same slots (refused with the difference otherwise), their journals are mirrors of the source's
        and its nodes stay replicas."""
        loop = asyncio.get_running_loop()
        groups = addrs if layout_given else None
        if layout_given:
            addrs = [a for g in groups for a in g]
        points = [parse_addr(a) for a in addrs]
        idents = []
        for host, port in points:
            ident = await loop.run_in_executor(None, self.identity, host, port)
            if ident.get("state") != "unassigned":
                raise AdminError("node %s:%d is already in cluster %s (shard %s)" % (host, port, ident.get("cluster-id"),
                                                                                     ident.get("shard")))
            idents.append(ident)
        if len({i["node-id"] for i in idents}) != len(idents):
            raise AdminError("two of the addresses are the same node")
        if layout_given:
            by_addr = {"%s:%d" % (i["host"], i["addr_port"]): i for i in idents}
            layout = [[by_addr["%s:%d" % parse_addr(a)] for a in g] for g in groups]
            for members in layout:
                azs = [m["availability-zone"] for m in members]
                if len(set(azs)) != len(azs):
                    raise AdminError("a shard's nodes must be in distinct AZs, not %s" % ", ".join(azs))
        else:
            layout = plan_layout(idents, replicas)
        secrets = self.secrets
        shards = []
        for n, (members, (a, b)) in enumerate(zip(layout, slot_ranges(len(layout)))):
            nodes = [self._node(i) for i in members]
            shards.append(Shard(id=node_id_for("%s:shard:%d" % (secrets.cluster_id, n)), name=str(n), config_epoch=1,
                                slots=((a, b),), primary=nodes[0], replicas=tuple(nodes[1:])))
        topology = Topology(shards, current_epoch=1)
        if follow is not None:
            from .region import check_same_layout, shard_layout
            try:
                check_same_layout(follow["source_layout"], shard_layout(topology))
            except ValueError as exc:
                raise AdminError(str(exc)) from None
        store = await self.store(create=True)
        try:
            await self._claim_store(store)
            if follow is not None:
                await self._follow_region(store, follow, [sh.name for sh in shards])
            existing, _rev = await store.get_base_topology()
            if existing is not None:
                raise AdminError("the cluster already has a topology (%d shards); add nodes with `durakv cluster "
                                 "add-node`" % len(existing.shards))
            for sh in shards:
                await store.create_shard(sh.name)
                await self._seed_settings(store, sh.name, durability, lease_ttl_ms, durability_buffer_ms)
            await self._seed_auth(store, points[0])
            await store.put_topology(topology, 0)
            self.say("topology stored: %d shard(s) over 16384 slots" % len(shards))
            for k, sh in enumerate(shards):
                self.say("shard %s: slots %d-%d, primary %s (%s) at %s:%d, replicas %s" % (
                    sh.name, sh.slots[0][0], sh.slots[0][1], sh.primary.id[:8], sh.primary.az, sh.primary.ip,
                    self.node_addr(sh.primary)[1],
                    ", ".join("%s (%s)" % (r.id[:8], r.az) for r in sh.replicas) or "none"))
            # primaries first, so that each takes its shard's first lease: a predictable layout
            by_id = {i["node-id"]: i for i in idents}
            await self._join(store, [(sh.primary, sh.name) for sh in shards], by_id)
            if follow is not None:
                # a follower region has no primary: every node follows its shard's mirror
                await self._join(store, [(r, sh.name) for sh in shards for r in sh.replicas], by_id)
                await self.wait_roles(store, [sh.name for sh in shards], timeout_s, replicas=True, follower=True)
                return topology
            await self.wait_roles(store, [sh.name for sh in shards], timeout_s)
            await self._join(store, [(r, sh.name) for sh in shards for r in sh.replicas], by_id)
            await self.wait_roles(store, [sh.name for sh in shards], timeout_s, replicas=True)
            return topology
        finally:
            await store.nc.close()

    async def source_layout(self):
        """This cluster's shard layout (region.shard_layout), what a follower region must match."""
        from .region import shard_layout
        store = await self.store()
        try:
            topology, _rev = await store.get_topology()
        finally:
            await store.nc.close()
        if topology is None:
            raise AdminError("the source cluster has no topology yet")
        return shard_layout(topology)

    async def create_follower(self, addrs, source, domain, source_domain, source_layout=None, **create_kw):
        """`create` for a follower region on any hosts: source is the primary region's ClusterAdmin (same
        secrets, its NATS), domain/source_domain the two regions' JetStream domains; the source region's record
        names its follower once this one serves. create_kw: create's own options."""
        from .region import mark_primary
        follow = {"domain": domain, "peer_domain": source_domain,
                  "source_layout": source_layout or await source.source_layout()}
        topology = await self.create(addrs, follow=follow, **create_kw)
        src = await source.store()
        try:
            await mark_primary(src, source_domain, domain)
        finally:
            await src.nc.close()
        return topology

    async def promote_region(self, source=None, timeout_s=120.0):
        """Makes this follower region (cluster/region.py) the primary region. source: the old primary region's
        ClusterAdmin when it is reachable (planned switchover: fence it, wait until every entry of its journals
        is mirrored here, then promote: nothing acknowledged is lost), else None (disaster: promote at once; the
        report names each shard's mirror lag as last measured, the acknowledged data the cut may have cost).
        Promotion: each mirror stops mirroring (NATS 2.12+ lets a stream drop its mirror configuration) and
        takes its shard's subject; the region record becomes primary with a higher region epoch (an old primary
        region whose nodes read it refuses writes); this region's nodes then take leases. Returns the report."""
        from .region import RegionError, RegionRecord, check_same_layout, mirror_lag, shard_layout
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        store = await self.store()
        try:
            record, rev = await store.get_region()
            if record is None or not record.follower:
                raise AdminError("this cluster is not a follower region (its region record: %s)"
                                 % ("none" if record is None else "%s %s" % (record.role, record.domain)))
            topology, _rev = await store.get_topology()
            names = [sh.name for sh in topology.shards]
            report = {"mode": "planned" if source is not None else "disaster", "region": record.domain,
                      "old_region": record.peer_domain, "shards": {}}
            epoch = record.epoch
            if source is not None:
                src = await source.store()
                try:
                    src_topology, _r = await src.get_topology()
                    try:
                        check_same_layout(shard_layout(src_topology), shard_layout(topology))
                    except RegionError as exc:
                        raise AdminError(str(exc)) from None
                    src_record, src_rev = await src.get_region()
                    epoch = max(epoch, src_record.epoch if src_record is not None else 1)
                    await src.put_region(RegionRecord("fenced", record.peer_domain, record.domain, epoch), src_rev)
                    self.say("region %s fenced: its primaries refuse writes" % record.peer_domain)
                    await source.wait_fenced(src, deadline - loop.time())
                    for name in names:
                        last = await self._wait_mirrored(store, src, name, deadline)
                        report["shards"][name] = {"source_last_index": last, "mirror_last_index": last,
                                                  "lag_entries_at_cut": 0}
                finally:
                    await src.nc.close()
            else:
                for name in names:
                    info = await store.js.stream_info(nn.journal_stream(name))
                    lag, active_ms = mirror_lag(info)
                    report["shards"][name] = {"mirror_last_index": info.state.last_seq, "lag_entries_at_cut": lag,
                                              "source_last_heard_ms_ago": active_ms}
            cut = {}
            for name in names:
                info = await store.js.stream_info(nn.journal_stream(name))
                cfg = info.config
                if cfg.mirror is not None:
                    cfg.mirror = None
                    cfg.subjects = [nn.journal_subject(name)]
                    info = await store.js.update_stream(cfg)
                cut[name] = info.state.last_seq
                report["shards"][name]["cut_index"] = info.state.last_seq
            await store.put_region(RegionRecord("primary", record.domain, record.peer_domain, epoch + 1, cut), rev)
            report["region_epoch"] = epoch + 1
            self.say("region %s is primary (region epoch %d); waiting for its shards' primaries" % (record.domain,
                                                                                                   epoch + 1))
            await self.wait_roles(store, names, max(1.0, deadline - loop.time()))
            return report
        finally:
            await store.nc.close()

    async def _wait_mirrored(self, store, src, name, deadline):
        """Until this region's mirror of shard `name` holds the source's last entry, and the source's end did not
        move meanwhile (its primaries are fenced and drained). Returns that index."""
        loop = asyncio.get_running_loop()
        stream = nn.journal_stream(name)
        while True:
            last = (await src.js.stream_info(stream)).state.last_seq
            while (await store.js.stream_info(stream)).state.last_seq < last:
                if loop.time() > deadline:
                    raise AdminError("shard %s's mirror did not reach index %d in time" % (name, last))
                await asyncio.sleep(0.05)
            if (await src.js.stream_info(stream)).state.last_seq == last:
                return last

    async def wait_fenced(self, store, timeout_s):
        """Until every primary of this (fenced) region says so and has committed every write it took."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s

        def fenced(node):
            try:
                with self.resp(*self.node_addr(node), timeout_s=2.0) as c:
                    info = c.info("replication").get("replication", {})
            except (OSError, RespError):
                return None
            return info.get("role") != "master" or (info.get("region_fenced") == 1
                                                    and info.get("region_fenced_drained") == 1)
        while True:
            topology, _rev = await store.get_topology()
            pending = [n.id[:8] for sh in topology.shards for n in sh.nodes
                       if not await loop.run_in_executor(None, fenced, n)]
            if not pending:
                return
            if loop.time() > deadline:
                raise AdminError("nodes %s did not report the fence in time" % ", ".join(pending))
            await asyncio.sleep(0.05)

    async def unpair_region(self):
        """The operator's override of the fence's restart rule: this region forgets its peer (its record keeps
        its role, domain and epoch, without a peer), so its nodes stop waiting to read the peer's record. For a
        peer region that is gone for good; a peer that was promoted meanwhile is no longer checked either."""
        from .region import RegionRecord
        store = await self.store()
        try:
            record, rev = await store.get_region()
            if record is None or not record.peer_domain:
                raise AdminError("this region has no peer region")
            if record.follower:
                raise AdminError("a follower region is unpaired by promoting it (`promote-region`)")
            role = "primary" if record.role == "fenced" else record.role
            await store.put_region(RegionRecord(role, record.domain, "", record.epoch, record.cut), rev)
            return record.peer_domain
        finally:
            await store.nc.close()

    async def region_gap(self, promoted, timeout_s=30.0):
        """After a disaster promotion, once the old primary region (this admin's) is back: per shard, the entries
        its journal has beyond the promoted region's cut (`promoted`: the promoted region's record), which the
        promoted region never took."""
        store = await self.store()
        try:
            out = {}
            for name, cut in sorted(promoted.cut.items()):
                last = (await store.js.stream_info(nn.journal_stream(name))).state.last_seq
                out[name] = {"old_region_last_index": last, "cut_index": cut, "entries_not_taken": max(0, last - cut)}
            return out
        finally:
            await store.nc.close()

    async def _follow_region(self, store, follow, shard_names):
        """The region record (role follower) and the shard journals as mirrors of the source region's."""
        from .region import RegionRecord, make_mirrors
        record = RegionRecord("follower", follow["domain"], follow["peer_domain"])
        current, rev = await store.get_region()
        if current is None:
            await store.put_region(record, rev)
        elif not current.follower or current.peer_domain != record.peer_domain:
            raise AdminError("this region is already %s (domain %s%s)" % (
                current.role, current.domain, ", following " + current.peer_domain if current.peer_domain else ""))
        await make_mirrors(store.js, shard_names, follow["peer_domain"], store.replicas)
        self.say("region %s follows region %s: %d shard journal(s) mirrored" % (record.domain, record.peer_domain,
                                                                              len(shard_names)))

    def _node(self, ident):
        tls = self.secrets.tls
        port = int(ident.get("port") or 0)
        tls_port = int(ident.get("tls-port") or 0)
        if tls and not tls_port:
            raise AdminError("node %s has no TLS port but the cluster is TLS" % ident["node-id"])
        return Node(id=ident["node-id"], ip=ident["ip"], port=0 if tls else port, tls_port=tls_port if tls else 0,
                    bus_port=bus_port_of(tls_port if tls else port), az=ident["availability-zone"], repl_offset=1)

    async def _claim_store(self, store):
        """The cluster document: written by the first create; a store of another cluster is refused."""
        doc, _rev = await store.get_cluster()
        if doc is None:
            try:
                await store.put_cluster(ClusterDocument(self.secrets.cluster_id, FORMAT), 0)
            except StaleRevision:
                doc, _rev = await store.get_cluster()
        if doc is not None and (doc.cluster_id != self.secrets.cluster_id or doc.format != FORMAT):
            raise AdminError("these NATS servers hold cluster %s (format %d), not this secrets directory's %s"
                             % (doc.cluster_id, doc.format, self.secrets.cluster_id))

    async def _seed_settings(self, store, shard, durability, lease_ttl_ms, durability_buffer_ms=10000):
        settings, revision = await store.get_shard_settings(shard)
        if settings is None:
            try:
                await store.put_shard_settings(shard, ShardSettings(durability=durability, lease_ttl_ms=lease_ttl_ms,
                                                                    durability_buffer_ms=durability_buffer_ms), 0)
            except StaleRevision:
                pass

    async def _seed_auth(self, store, point):
        """The cluster's users: the first node's (what its requirepass / users say), plus the internal user
        the nodes present to each other, with a password of its own."""
        current, _rev = await store.get_auth()
        if current is not None:
            return
        loop = asyncio.get_running_loop()

        def read_users():
            with self.resp(*point) as c:
                return [line.decode("utf-8", "surrogateescape") for line in c.execute("ACL", "LIST")]
        users = []
        for line in await loop.run_in_executor(None, read_users):
            _user, name, rules = (line.split(" ", 2) + [""])[:3]
            if name != INTERNAL_USER:
                users.append({"name": name, "rules": rules})
        password = new_password(32)
        import hashlib
        users.append({"name": INTERNAL_USER,
                      "rules": "on #%s ~* &* +@all" % hashlib.sha256(password.encode()).hexdigest()})
        auth = AuthSettings(acl={"version": 1, "users": users}, internal_user=INTERNAL_USER,
                            internal_password=password)
        try:
            await store.put_auth(auth, 0)
        except StaleRevision:
            pass

    async def _join(self, store, members, idents):
        """DURAKV JOIN to each (Node, shard name): its shard, the NATS servers and a JWT for its own key."""
        loop = asyncio.get_running_loop()
        for node, shard in members:
            ident = idents[node.id]
            doc = {"format": FORMAT, "cluster_id": self.secrets.cluster_id, "shard": shard, "nats": self.nats,
                   "jwt": self.secrets.node_jwt(ident["nkey"], node.id, shard)}

            def send(host=ident["host"], port=ident["addr_port"], doc=doc):
                with self.resp(host, port) as c:
                    return c.execute("DURAKV", "JOIN", json.dumps(doc))
            try:
                await loop.run_in_executor(None, send)
            except (OSError, RespError) as exc:
                raise AdminError("node %s (%s:%d) refused to join: %s" % (node.id[:8], ident["host"],
                                                                          ident["addr_port"], exc)) from None
            self.say("node %s (%s) joined shard %s" % (node.id[:8], node.az, shard))

    def _role(self, node):
        try:
            with self.resp(*self.node_addr(node), timeout_s=2.0) as c:
                info = c.info("replication", "persistence")
        except (OSError, RespError):
            return None
        if info.get("persistence", {}).get("loading") or "durakv_shard" not in info.get("replication", {}):
            return None         # loading, or not a member yet (an unassigned node calls itself master)
        return info.get("replication", {}).get("role")

    async def wait_roles(self, store, shard_names, timeout_s, replicas=False, only=None, follower=False):
        """Until each shard has exactly one node reporting role:master (and with replicas, every node answers
        with a role; with `only`, a set of node ids, every one of those). follower: a follower region's shards,
        where no node is master."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        last = None
        while True:
            topology, _rev = await store.get_topology()
            pending = []
            for sh in topology.shards:
                if sh.name not in shard_names:
                    continue
                roles = {}
                for n in sh.nodes:
                    roles[n.id] = await loop.run_in_executor(None, self._role, n)
                masters = [i for i, r in roles.items() if r == "master"]
                waited = [r for i, r in roles.items() if only is None or i in only]
                if len(masters) != (0 if follower else 1) or (replicas and any(r is None for r in waited)):
                    pending.append("shard %s: %s" % (sh.name, ", ".join("%s %s" % (i[:8], r) for i, r in roles.items())))
            if not pending:
                return
            if pending != last:
                last = pending
            if loop.time() > deadline:
                raise AdminError("not serving after %.0fs: %s" % (timeout_s, "; ".join(pending)))
            await asyncio.sleep(0.2)

    # -- status ----------------------------------------------------------------------------------------------
    async def status(self) -> dict:
        """The cluster as its coordination store, its NATS servers and its nodes report it."""
        store = await self.store()
        loop = asyncio.get_running_loop()
        try:
            topology, revision = await store.get_topology()
            doc, _rev = await store.get_cluster()
            out = {"cluster_id": doc.cluster_id if doc else None, "format": doc.format if doc else None,
                   "revision": revision, "nats": self.nats, "shards": [], "streams": {}, "servers": {}}
            if topology is None:
                return out
            # every node is asked at once: one after the other, a status took a TLS handshake and an INFO per
            # node, and a node that does not answer held the rest back for its whole timeout
            infos = asyncio.gather(*(loop.run_in_executor(None, self._node_info, n)
                                     for sh in topology.shards for n in sh.nodes))
            shards = []
            for sh in topology.shards:
                lease, _lrev = await store.get_lease(sh.name)
                shard = {"name": sh.name, "id": sh.id, "slots": [list(r) for r in sh.slots],
                         "migrating_out": sorted(s for s, (src, _d) in topology.migrating.items() if src == sh.id),
                         "lease_holder": lease.holder if lease else None, "epoch": lease.epoch if lease else None,
                         "nodes": []}
                for n in sh.nodes:
                    shard["nodes"].append({"node_id": n.id, "az": n.az, "addr": "%s:%d" % self.node_addr(n),
                                           "role": n.role, "health": n.health})
                shards.append(shard)
                out["streams"][nn.journal_stream(sh.name)] = await self._stream(store, nn.journal_stream(sh.name))
            for entry, info in zip((e for shard in shards for e in shard["nodes"]), await infos):
                entry.update(info)
            out["shards"] = shards
            out["streams"][nn.LEASES_BUCKET] = await self._stream(store, "KV_%s" % nn.LEASES_BUCKET)
            out["servers"] = await self._servers()
            return out
        finally:
            await store.nc.close()

    def _node_info(self, node) -> dict:
        try:
            with self.resp(*self.node_addr(node), timeout_s=2.0) as c:
                info = c.info("replication", "durability", "persistence")
        except (OSError, RespError) as exc:
            return {"reported_role": None, "error": str(exc) or type(exc).__name__}
        repl = info.get("replication", {})
        dur = info.get("durability", {})
        return {"reported_role": repl.get("role"), "phase": repl.get("durakv_phase"),
                "applied": repl.get("journal_applied_index"), "lag_ms": repl.get("replica_lag_ms"),
                "durability": dur.get("effective_durability") or dur.get("durability_mode"),
                "loading": info.get("persistence", {}).get("loading"),
                "apply_stopped": repl.get("replica_apply_stopped")}

    async def _stream(self, store, name) -> dict:
        try:
            info = await store.js.stream_info(name)
        except Exception as exc:  # noqa: BLE001 - no leader now: shown as such
            return {"error": str(exc) or type(exc).__name__}
        return stream_copies(info)

    async def _servers(self, answer_window_s=1.0) -> dict:
        """Every NATS server that answers the system account's JSZ ping within answer_window_s: its JetStream
        state (enabled or not, meta leader). The ping has one answer per server and no end marker; each answer
        with JetStream on says how many servers the JetStream meta group has, so once that many answered the
        window closes (it stayed open a whole second on a healthy cluster: every `durakv cluster status` took
        1.2 s for 0.2 s of work), and only a server that does not answer makes the status wait it out."""
        nc = await self.connect_nats(system=True)
        out = {}
        expected = 0
        try:
            inbox = nc.new_inbox()
            sub = await nc.subscribe(inbox)
            await nc.publish("$SYS.REQ.SERVER.PING.JSZ", b"{}", reply=inbox)
            deadline = time.monotonic() + answer_window_s
            while time.monotonic() < deadline and not (expected and len(out) >= expected):
                try:
                    msg = await sub.next_msg(timeout=max(0.05, deadline - time.monotonic()))
                except Exception:  # noqa: BLE001 - no more answers
                    break
                try:
                    doc = json.loads(msg.data)
                except ValueError:
                    continue
                if not isinstance(doc, dict):
                    continue
                server, data = doc.get("server") or {}, doc.get("data") or {}
                meta = data.get("meta_cluster") or {} if isinstance(data, dict) else None
                if not (isinstance(server, dict) and isinstance(meta, dict)):
                    continue    # (an answer of another shape: not a server's JSZ)
                size = meta.get("cluster_size")
                if isinstance(size, int) and not isinstance(size, bool):
                    expected = max(expected, size)
                name = server.get("name") or server.get("id")
                out[name] = {"jetstream": not data.get("disabled", False) and bool(data.get("config")),
                             "meta_leader": meta.get("leader"),
                             "streams": data.get("streams"), "error": (doc.get("error") or {}).get("description")}
            await sub.unsubscribe()
        finally:
            await nc.close()
        return out

    # -- planned failover -------------------------------------------------------------------------------------
    async def failover(self, shard, to=None, timeout_s=30.0):
        """CLUSTER FAILOVER on a replica of `shard` (default: the one with the highest applied index), then waits
        until it holds the lease and reports role:master. Returns (node id, seconds)."""
        store = await self.store()
        loop = asyncio.get_running_loop()
        try:
            topology, _rev = await store.get_topology()
            sh = next((s for s in topology.shards if s.name == str(shard)), None)
            if sh is None:
                raise AdminError("no shard %s" % shard)
            lease, _r = await store.get_lease(sh.name)
            candidates = [n for n in sh.nodes if lease is None or n.id != lease.holder]
            if to:
                candidates = [n for n in candidates if n.id.startswith(to)]
                if not candidates:
                    raise AdminError("node %s is not a replica of shard %s" % (to, sh.name))
            infos = [(await loop.run_in_executor(None, self._node_info, n), n) for n in candidates]
            live = [(i.get("applied") or 0, n) for i, n in infos if i.get("reported_role") == "slave"]
            if not live:
                raise AdminError("shard %s has no live replica to fail over to" % sh.name)
            target = max(live, key=lambda t: t[0])[1]
            started = time.monotonic()

            def send():
                with self.resp(*self.node_addr(target)) as c:
                    c.execute("CLUSTER", "FAILOVER")
            await loop.run_in_executor(None, send)
            deadline = loop.time() + timeout_s
            while loop.time() < deadline:
                lease, _r = await store.get_lease(sh.name)
                if lease is not None and lease.holder == target.id and \
                        await loop.run_in_executor(None, self._role, target) == "master":
                    return target.id, time.monotonic() - started
                await asyncio.sleep(0.05)
            raise AdminError("node %s did not become primary within %.0fs" % (target.id[:8], timeout_s))
        finally:
            await store.nc.close()

    async def spread_primaries(self, timeout_s=30.0):
        """Hands each shard's primary back to its home AZ where a failover moved it away: shard i's home is
        AZ i mod (the cluster's AZs), as `create` placed it, so one AZ's power cut takes at most a third of the
        primaries again. Each move is a planned failover (the lease handed over, nothing lost), to the node of
        the shard in its home AZ, only when that node is a live replica; run it when the operator chooses a
        quiet moment. Returns [(shard, from AZ, to AZ, node id or None, what happened)]."""
        store = await self.store()
        try:
            topology, _rev = await store.get_topology()
            leases = {sh.name: (await store.get_lease(sh.name))[0] for sh in topology.shards}
        finally:
            await store.nc.close()
        plan = plan_spread(topology, leases)
        out = []
        for shard, from_az, to_az, node in plan:
            if node is None:
                out.append((shard, from_az, to_az, None, "no node of the shard in its home AZ"))
                continue
            try:
                moved, seconds = await self.failover(shard, to=node.id, timeout_s=timeout_s)
                out.append((shard, from_az, to_az, moved, "moved in %.0f ms" % (seconds * 1000)))
            except AdminError as exc:
                out.append((shard, from_az, to_az, node.id, "not moved: %s" % exc))
        return out

    # -- slots -----------------------------------------------------------------------------------------------
    async def reshard(self, count, source, target, timeout_s=600.0, progress=None):
        store = await self.store()
        try:
            return await reshard(store, count, source, target, timeout_s=timeout_s, progress=progress,
                                 client=self._migrated_keys)
        finally:
            await store.nc.close()

    async def rebalance(self, timeout_s=600.0, progress=None):
        store = await self.store()
        try:
            return await rebalance(store, timeout_s=timeout_s, progress=progress, client=self._migrated_keys)
        finally:
            await store.nc.close()

    def _migrated_keys(self, node) -> int:
        with self.resp(*self.node_addr(node), timeout_s=2.0) as c:
            return int(c.info("cluster").get("cluster", {}).get("durakv_migrated_keys", 0))

    # -- membership ------------------------------------------------------------------------------------------
    async def add_nodes(self, addrs, shard=None, timeout_s=120.0, replacing=None):
        """Adds unassigned nodes: with `shard`, as replicas of that shard; without, as a new shard (the first of
        them its primary) that owns no slot until a rebalance. Returns the shard's name."""
        loop = asyncio.get_running_loop()
        idents = []
        for a in addrs:
            host, port = parse_addr(a)
            ident = await loop.run_in_executor(None, self.identity, host, port)
            if ident.get("state") != "unassigned":
                raise AdminError("node %s is already in cluster %s (shard %s)" % (a, ident.get("cluster-id"),
                                                                                 ident.get("shard")))
            idents.append(ident)
        nodes = [self._node(i) for i in idents]
        store = await self.store()
        try:
            await self._claim_store(store)
            name = [None]

            def change(topology):
                if shard is not None:
                    sh = next((s for s in topology.shards if s.name == str(shard)), None)
                    if sh is None:
                        raise ReshardError("no shard %s" % shard)
                    taken = {n.az for n in sh.nodes if n.id != replacing}
                    for n in nodes:
                        if n.az in taken:
                            log.warning("node %s joins shard %s in AZ %s, which already has one of its nodes",
                                        n.id[:8], sh.name, n.az)
                    name[0] = sh.name
                    return topology.with_replicas(sh.id, nodes)
                names = {s.name for s in topology.shards}
                k = 0
                while str(k) in names:
                    k += 1
                name[0] = str(k)
                new = Shard(id=node_id_for("%s:shard:%d" % (self.secrets.cluster_id, k)), name=str(k),
                            config_epoch=0, slots=(), primary=nodes[0], replicas=tuple(nodes[1:]))
                return topology.with_shard(new)
            if shard is None:
                # the shard's stream and bucket before anyone can be told about it
                topology, _rev = await store.get_topology()
                names = {s.name for s in topology.shards}
                k = 0
                while str(k) in names:
                    k += 1
                await store.create_shard(str(k))
                base_settings, _r = await store.get_shard_settings(topology.shards[0].name)
                await self._seed_settings(store, str(k), base_settings.durability if base_settings else "sync",
                                          base_settings.lease_ttl_ms if base_settings else 2000,
                                          base_settings.durability_buffer_ms if base_settings else 10000)
            await change_topology(store, change)
            by_id = {i["node-id"]: i for i in idents}
            await self._join(store, [(n, name[0]) for n in nodes], by_id)
            # the new nodes serving, and the shard one primary (a dead node of it, being replaced, answers nothing)
            await self.wait_roles(store, [name[0]], timeout_s, replicas=True, only={n.id for n in nodes})
            return name[0]
        finally:
            await store.nc.close()

    async def del_node(self, node_id, revoke=True):
        """Removes a replica from the topology and revokes its NATS identity (pushed to every NATS server), so
        a machine that is gone, or given away, cannot use it again. The primary is refused: fail over first."""
        store = await self.store()
        try:
            topology, _rev = await store.get_topology()
            node = next((n for n in topology.nodes.values() if n.id.startswith(node_id)), None)
            if node is None:
                raise AdminError("no node %s in the topology" % node_id)
            sh = topology.shard_by_id[node.shard_id]
            lease, _r = await store.get_lease(sh.name)
            if (lease is not None and lease.holder == node.id) or sh.primary.id == node.id:
                raise AdminError("node %s is the primary of shard %s: fail over first (`durakv cluster failover "
                                 "--shard %s`)" % (node.id[:8], sh.name, sh.name))
            await change_topology(store, lambda t: t.without_node(node.id))
            self.say("node %s removed from shard %s" % (node.id[:8], sh.name))
        finally:
            await store.nc.close()
        if revoke:
            await self.revoke_node(node.id)
        return node

    async def revoke_node(self, node_id):
        """Revokes every JWT issued to node_id's key so far: the DURAKV account's JWT gains a revocation and is
        pushed to the servers. The node's public key is in the JWTs the secrets directory issued (recorded at
        issue time)."""
        keys = self.secrets.issued_keys(node_id)
        if not keys:
            self.say("no NATS identity was issued to node %s by this secrets directory" % node_id[:8])
            return
        jwt = None
        for key in keys:
            jwt = self.secrets.revoke(key)
        await self.push_account(jwt)
        self.say("NATS identity of node %s revoked" % node_id[:8])

    async def push_account(self, jwt):
        """Sends an account JWT to every NATS server (the full resolver keeps it): $SYS.REQ.CLAIMS.UPDATE."""
        nc = await self.connect_nats(system=True)
        try:
            inbox = nc.new_inbox()
            sub = await nc.subscribe(inbox)
            await nc.publish("$SYS.REQ.CLAIMS.UPDATE", jwt.encode(), reply=inbox)
            answers, errors = 0, []
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline:
                try:
                    msg = await sub.next_msg(timeout=max(0.05, deadline - time.monotonic()))
                except Exception:  # noqa: BLE001 - no more answers
                    break
                answers += 1
                try:
                    doc = json.loads(msg.data)
                except ValueError:
                    continue
                if doc.get("error"):
                    errors.append(str(doc["error"]))
            await sub.unsubscribe()
        finally:
            await nc.close()
        if not answers or errors:
            raise AdminError("the account update reached %d server(s)%s" % (answers, ": " + "; ".join(errors)
                                                                            if errors else ""))
        return answers

    async def replace_node(self, dead_id, addr, timeout_s=120.0):
        """A dead machine's node replaced by a new one on another host: the new node joins the dead one's
        shard, then the dead one is removed and its identity revoked. Returns the new node's id."""
        store = await self.store()
        try:
            topology, _rev = await store.get_topology()
            dead = next((n for n in topology.nodes.values() if n.id.startswith(dead_id)), None)
            if dead is None:
                raise AdminError("no node %s in the topology" % dead_id)
            shard = topology.shard_by_id[dead.shard_id].name
        finally:
            await store.nc.close()
        await self.add_nodes([addr], shard=shard, timeout_s=timeout_s, replacing=dead.id)
        await self.del_node(dead.id)
        host, port = parse_addr(addr)
        return (await asyncio.get_running_loop().run_in_executor(None, self.identity, host, port))["node-id"]

    async def remove_shard(self, shard, timeout_s=600.0, progress=None):
        """Moves every slot of `shard` to the other shards (online), removes it from the topology and revokes
        its nodes' identities. Its nodes keep running, unassigned to anything, until the operator stops them."""
        store = await self.store()
        try:
            topology, _rev = await store.get_topology()
            victim = next((sh for sh in topology.shards if sh.name == str(shard)), None)
            if victim is None:
                raise AdminError("no shard %s" % shard)
            others = sorted((sh for sh in topology.shards if sh.id != victim.id), key=lambda sh: sh.name)
            if not others:
                raise AdminError("cannot remove the last shard")
            slots = [s for a, b in victim.slots for s in range(a, b + 1)]
            moves = [(slots[i::len(others)], victim.id, o.id) for i, o in enumerate(others) if slots[i::len(others)]]
            if moves:
                from .reshard import mark_migrations
                await mark_migrations(store, moves)
                await wait_moved(store, moves, timeout_s, progress, client=self._migrated_keys)
            await change_topology(store, lambda t: t.without_shard(victim.id))
        finally:
            await store.nc.close()
        for n in victim.nodes:
            await self.revoke_node(n.id)
        return victim


def run(coro):
    return asyncio.run(coro)
