"""Each xdist worker's free_port slice (tests/helpers/servers.py) is its own for any worker count: scripts/test.sh
runs more workers than it used to (docs/testing.md, "Workers"), and worker gw8 of a 9-worker run took gw0's
slice when there were 8 slices whatever the count. Each worker's slice is read from a fresh interpreter started
with the environment xdist gives that worker; so are the test clusters' port ranges (cluster_port_range)."""

import os
import subprocess
import sys

import pytest

from helpers.waiting import scaled

TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBE = ("import sys; sys.path.insert(0, %r); from helpers import servers as s; "
         "base = s._PORT_FIRST + s._WORKER * s._PORT_SLICE; port = s.free_port(); "
         "assert base <= port < base + s._PORT_SLICE, (base, port); print(base, base + s._PORT_SLICE - 1, "
         "*s.cluster_port_range())")


def _probe(workers) -> str:
    """One line per worker: its free_port slice's first and last port, then its cluster_port_range (if any)."""
    script = "; ".join(["import os"] + [
        f"os.environ.update(PYTEST_XDIST_WORKER='gw{w}', PYTEST_XDIST_WORKER_COUNT='{workers}'); "
        f"exec(compile({PROBE % TESTS_DIR!r}, 'probe', 'exec'), {{}}); "
        "import sys; [sys.modules.pop(m) for m in list(sys.modules) if m.startswith('helpers')]"
        for w in range(workers)])
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=scaled(60),
                         env={k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")})
    assert out.returncode == 0, out.stderr
    return out.stdout


def _slices(workers):
    """[(first, last)] of each worker's slice, as that worker computes it."""
    return [tuple(map(int, line.split()[:2])) for line in _probe(workers).split("\n") if line]


def _ranges(workers):
    """[(low, high)] of each worker's cluster_port_range, as that worker computes it."""
    return [tuple(map(int, line.split()[2:])) for line in _probe(workers).split("\n") if line]


@pytest.mark.parametrize("workers", [1, 3, 6, 8, 9, 16])
def test_every_worker_has_a_slice_of_its_own(workers):
    slices = _slices(workers)
    assert len(slices) == workers
    ordered = sorted(slices)
    assert all(a_last < b_first for (_a, a_last), (b_first, _b) in zip(ordered, ordered[1:])), ordered
    # below 20000, where helpers/clusters.py free_port_range begins, and at least 600 ports each
    assert ordered[0][0] >= 10000 and ordered[-1][1] <= 19999, ordered
    assert min(last - first + 1 for first, last in slices) >= 600, slices


@pytest.mark.parametrize("workers", [1, 3, 8, 9, 16])
def test_every_worker_has_a_slice_of_the_cluster_ports_outside_the_ephemeral_range(workers):
    """helpers/servers.py cluster_port_range: the test clusters' ports (tests/unit/test_port_range.py says why)."""
    ordered = sorted(_ranges(workers))
    assert len(ordered) == workers and all(len(r) == 2 for r in ordered), ordered
    assert all(a_last < b_first for (_a, a_last), (b_first, _b) in zip(ordered, ordered[1:])), ordered
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        ephemeral_low, ephemeral_high = map(int, f.read().split()[:2])
    # above the free_port slices' cluster bus ports (+10000), and none in the ephemeral range
    assert ordered[0][0] >= 30000, ordered
    assert all(last < ephemeral_low or first > ephemeral_high for first, last in ordered), ordered
    assert min(last - first + 1 for first, last in ordered) >= 100, ordered
