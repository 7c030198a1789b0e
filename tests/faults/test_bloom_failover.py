"""A Bloom filter survives the loss of its primary on a real three-AZ NATS JetStream cluster (sync durability):
writers add items with BF.ADD / BF.MADD / BF.INSERT (filters created on the primary with random seeds, several
scaling out), the primary is killed with SIGKILL, and on the new primary BF.EXISTS answers 1 for every item whose
addition was acknowledged; every surviving replica holds the same bytes (DUMP) as the new primary, and the filters
keep scaling there. A failover may never turn a "probably yes" into a "no": the seed and every added item are in
the journal (commands/bloom.py)."""

import signal
import threading
import time

import pytest
import valkey

from conftest import wait_new_primary, wait_until
from helpers.clusters import local_cluster  # noqa: F401

KEYS = [b"{bf}a", b"{bf}b", b"{bf}c"]


class BloomWriter(threading.Thread):
    """Adds unique items to the filters until stopped or its connection fails; `acked` holds (key, item) pairs
    whose command was answered (1 or 0: either way the item is in the filter from then on)."""

    def __init__(self, port, wid, stop, max_s=120.0):
        super().__init__(daemon=True)
        self.port, self.wid, self.stop, self.max_s = port, wid, stop, max_s
        self.acked = []
        self.errors = []

    def run(self):
        client = valkey.Valkey(host="127.0.0.1", port=self.port, socket_timeout=5)
        deadline = time.monotonic() + self.max_s
        n = 0
        turn = 0
        try:
            while not self.stop.is_set() and time.monotonic() < deadline:
                key = KEYS[turn % len(KEYS)]
                items = [b"w%d-%d" % (self.wid, n + j) for j in range(1 + turn % 3)]
                if len(items) == 1:
                    reply = [client.execute_command("BF.ADD", key, items[0])]
                elif n % 2:
                    reply = client.execute_command("BF.MADD", key, *items)
                else:
                    reply = client.execute_command("BF.INSERT", key, "ITEMS", *items)
                assert all(x in (0, 1) for x in reply), reply
                self.acked += [(key, item) for item in items]
                n += len(items)
                turn += 1
        except (valkey.exceptions.ConnectionError, valkey.exceptions.TimeoutError,
                valkey.exceptions.ResponseError) as exc:
            self.errors.append(str(exc))   # the primary died or stopped serving: this writer is done
        finally:
            client.close()


def _dumps(port, readonly=False):
    with valkey.Valkey(host="127.0.0.1", port=port, socket_timeout=10) as c:
        if readonly:
            c.execute_command("READONLY")
        return {k: c.dump(k) for k in KEYS + [b"{bf}new"]}


@pytest.mark.timeout(600)
def test_acknowledged_bloom_adds_survive_kill9_of_the_primary(local_cluster):  # noqa: F811
    cluster = local_cluster(durability="sync")
    old = cluster.primary(0)
    stop = threading.Event()
    writers = [BloomWriter(old.port, i, stop) for i in range(4)]
    for w in writers:
        w.start()
    # enough that each filter (capacity 100 by default) has scaled out a few times
    wait_until(lambda: sum(len(w.acked) for w in writers) >= 3000, 90, what="3000 acknowledged additions")
    cluster.kill(old.name, signal.SIGKILL)
    killed_at = time.monotonic()
    for w in writers:
        w.join(timeout=30)
        assert not w.is_alive()
    stop.set()
    new, seconds = wait_new_primary(cluster, old.name)
    print(f"failover {old.name} -> {new.name} in {seconds:.2f}s (kill at +0, {time.monotonic() - killed_at:.2f}s)")
    acked = [pair for w in writers for pair in w.acked]
    assert len(acked) >= 3000
    with valkey.Valkey(host="127.0.0.1", port=new.port, socket_timeout=10) as c:
        by_key = {}
        for key, item in acked:
            by_key.setdefault(key, []).append(item)
        for key, items in by_key.items():
            answers = []
            for i in range(0, len(items), 500):
                answers += c.execute_command("BF.MEXISTS", key, *items[i:i + 500])
            missing = [item for item, a in zip(items, answers) if a != 1]
            assert missing == [], f"{len(missing)} acknowledged items of {key!r} answer 0 on the new primary"
            info = dict(zip(*[iter(c.execute_command("BF.INFO", key))] * 2))
            assert info[b"Number of filters"] >= 3 and info[b"Number of items inserted"] <= info[b"Capacity"]
        # the new primary goes on scaling the same filters, and creates one that scales out as it is created
        for key in KEYS:
            assert c.execute_command("BF.MADD", key, *[b"after-%d" % i for i in range(300)]).count(1) > 250
        assert c.execute_command("BF.MADD", b"{bf}new", *[b"n-%d" % i for i in range(300)]).count(1) > 250
    # every surviving replica holds exactly the primary's bytes once it has applied the journal
    primary_dumps = _dumps(new.port)
    survivors = [p for p in cluster.shard_nodes(0) if p.name not in (old.name, new.name)]
    assert survivors
    for node in survivors:
        wait_until(lambda: _dumps(node.port, readonly=True) == primary_dumps, 30,
                   what=f"replica {node.name} to hold the primary's filters")
