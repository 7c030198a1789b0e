"""The verify workloads' clients back off while errors keep coming (tools/verify/workload.py _Client): a cluster
client's rebuild costs 20-50 ms of CPU, and rebuilding every 20 ms through a failover kept each writer thread busy
doing only that. The pause doubles from REBUILD_PAUSE_MIN_S to REBUILD_PAUSE_MAX_S while errors follow each other,
and starts at the minimum again after a calm spell."""

import threading

from durakv.tools.verify.workload import REBUILD_CALM_S, REBUILD_PAUSE_MAX_S, REBUILD_PAUSE_MIN_S, _Client


class _Target:
    nodes = [("127.0.0.1", 1)]


class _Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


class _Stop:
    """The workload's stop event: never set; a wait moves the clock on and is recorded."""

    def __init__(self, clock):
        self.clock, self.waits = clock, []

    def wait(self, seconds):
        self.waits.append(seconds)
        self.clock.now += seconds

    def is_set(self):
        return False


def test_pauses_double_while_errors_follow_each_other_and_reset_after_a_calm_spell():
    clock = _Clock()
    client = _Client(_Target(), 1.0, threading.Event(), clock=clock)
    pauses = []
    for _ in range(6):
        pauses.append(client.pause_s())
        clock.now += pauses[-1] + 0.03          # the rebuild, then the next error soon after
    assert pauses == [0.02, 0.04, 0.08, 0.16, 0.2, 0.2]
    assert pauses[0] == REBUILD_PAUSE_MIN_S and max(pauses) == REBUILD_PAUSE_MAX_S
    clock.now += REBUILD_CALM_S + 0.01          # it served for a while: the next error starts over
    assert client.pause_s() == REBUILD_PAUSE_MIN_S


def test_broken_waits_the_grown_pause_and_counts_the_rebuild():
    clock = _Clock()
    stop = _Stop(clock)
    client = _Client(_Target(), 1.0, stop, clock=clock)
    for _ in range(4):
        client.broken()
    assert stop.waits == [0.02, 0.04, 0.08, 0.16]
    assert client.rebuilds == 4


def test_a_failed_build_backs_off_too():
    clock = _Clock()
    stop = _Stop(clock)
    built = []

    class Target(_Target):
        def client(self, timeout_s, rotation):
            built.append(rotation)
            if len(built) < 5:
                raise ConnectionRefusedError("no node yet")
            return "a client"
    client = _Client(Target(), 1.0, stop, clock=clock)
    assert client.get() == "a client"
    assert stop.waits == [0.05, 0.05, 0.08, 0.16]           # never under the build's own 50 ms
    assert built == [built[0] + i for i in range(5)]   # each attempt bootstraps from the next node
