"""`durakv cluster status` asks every NATS server for its JetStream state with one system-account ping, which has
an answer per server and no end marker. It waited out its whole 1 s window on a healthy cluster, so every status
took 1.2 s for 0.2 s of work (tests poll it; the operators' guide on five machines called it 30 times). It stops
asking once as many servers answered as the JetStream meta group has, and waits only for one that is missing.
A fake connection stands in for NATS here: what is checked is how many answers the admin asks for. The last test
checks that the status asks its nodes together."""

import asyncio
import json

from nats.errors import TimeoutError as NatsTimeout

from durakv.cluster.admin import ClusterAdmin


class FakeSub:
    def __init__(self, answers):
        self.answers = list(answers)
        self.asked = 0

    async def next_msg(self, timeout):
        self.asked += 1
        if not self.answers:
            raise NatsTimeout    # the window ran out: nobody else answered
        return type("Msg", (), {"data": self.answers.pop(0)})()

    async def unsubscribe(self):
        pass


class FakeNats:
    def __init__(self, answers):
        self.sub = FakeSub(answers)
        self.published = []

    def new_inbox(self):
        return "_INBOX.x"

    async def subscribe(self, subject):
        return self.sub

    async def publish(self, subject, data, reply=None):
        self.published.append(subject)

    async def close(self):
        pass


def jsz(name, size=3, leader="nats-az1", disabled=False):
    data = {"disabled": True} if disabled else {"config": {"max_memory": 1}, "streams": 2,
                                                "meta_cluster": {"leader": leader, "cluster_size": size}}
    return json.dumps({"server": {"name": name}, "data": data}).encode()


def servers(answers):
    nc = FakeNats(answers)
    admin = object.__new__(ClusterAdmin)

    async def connect_nats(system=False):
        assert system
        return nc
    admin.connect_nats = connect_nats
    return asyncio.run(admin._servers(answer_window_s=3600.0)), nc


def test_it_stops_asking_once_every_server_answered():
    out, nc = servers([jsz("nats-az1"), jsz("nats-az2"), jsz("nats-az3")])
    assert nc.published == ["$SYS.REQ.SERVER.PING.JSZ"]
    assert nc.sub.asked == 3
    assert out == {n: {"jetstream": True, "meta_leader": "nats-az1", "streams": 2, "error": None}
                   for n in ("nats-az1", "nats-az2", "nats-az3")}


def test_a_server_with_jetstream_off_counts_and_a_missing_one_is_waited_for():
    out, nc = servers([jsz("nats-az1", disabled=True), jsz("nats-az2"), jsz("nats-az3")])
    assert nc.sub.asked == 3 and out["nats-az1"]["jetstream"] is False
    out, nc = servers([jsz("nats-az1"), jsz("nats-az3")])
    assert nc.sub.asked == 3 and sorted(out) == ["nats-az1", "nats-az3"]    # the third ask ran out the window


def test_answers_of_another_shape_are_skipped():
    odd = [b"not json", b"[1, 2]", json.dumps({"server": "x", "data": {}}).encode(),
           json.dumps({"server": {"name": "s"}, "data": "text"}).encode(),
           json.dumps({"server": {"name": "b"}, "data": {"meta_cluster": {"cluster_size": True}}}).encode()]
    out, nc = servers(odd + [jsz("nats-az1", size=1)])
    # `True` is no size: only the last answer closes the window
    assert nc.sub.asked == len(odd) + 1
    assert sorted(out) == ["b", "nats-az1"]


# -- the nodes: asked at once ----------------------------------------------------------------------------------
def test_every_node_is_asked_at_once_and_each_answer_lands_on_its_node():
    """`durakv cluster status` asked the nodes one after another: a TLS handshake and an INFO each, and a node
    that did not answer held the rest back for its whole timeout (two stopped nodes: 4.4 s instead of 2.4). Here
    each node's answer waits until every node has been asked, which only a status that asks them together sees
    through (asked one after another, the first one's wait breaks)."""
    import threading
    from types import SimpleNamespace as NS

    nodes = {sh: [NS(id="%s-%d" % (sh, k), az="az%d" % k, role="primary" if k == 0 else "replica",
                     health="online", ip="10.0.0.%d" % k, port=7000 + k, tls_port=0) for k in range(2)]
             for sh in ("a", "b")}
    topology = NS(shards=[NS(name=sh, id="id-" + sh, slots=[(0, 1)], nodes=nodes[sh]) for sh in ("a", "b")],
                  migrating={})
    every_node_asked = threading.Barrier(4, timeout=30)

    def node_info(node):
        every_node_asked.wait()
        return {"reported_role": "answer of " + node.id}

    async def nothing(*_args):
        return None, 0

    async def no_stream(_name):
        raise RuntimeError("no leader")

    async def closed():
        pass

    async def get_topology():
        return topology, 7

    store = NS(get_topology=get_topology, get_cluster=nothing, get_lease=nothing,
               js=NS(stream_info=no_stream), nc=NS(close=closed))
    admin = object.__new__(ClusterAdmin)
    admin.nats, admin.secrets, admin._node_info = [], NS(tls=False), node_info

    async def get_store(create=False):
        return store

    async def no_servers():
        return {}
    admin.store, admin._servers = get_store, no_servers
    out = asyncio.run(admin.status())
    assert [[(n["node_id"], n["reported_role"], n["addr"]) for n in sh["nodes"]] for sh in out["shards"]] == [
        [("a-0", "answer of a-0", "10.0.0.0:7000"), ("a-1", "answer of a-1", "10.0.0.1:7001")],
        [("b-0", "answer of b-0", "10.0.0.0:7000"), ("b-1", "answer of b-1", "10.0.0.1:7001")]]
