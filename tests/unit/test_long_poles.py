"""The long poles start first on xdist's workers (tests/helpers/ordering.py, docs/testing.md "Long poles").

The order is a model of xdist's schedulers (`load`, and `worksteal`, which scripts/test.sh runs), so besides the
model the behaviour is checked on the real ones: a child pytest with two xdist workers runs a generated file whose
long poles come last in it, and each worker must have started with its share of them."""

import os
import subprocess
import sys

import pytest

from helpers.ordering import first_chunk_size, long_poles_first
from helpers.waiting import scaled

TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_each_worker_chunk_starts_with_its_share_heaviest_first():
    items = [f"t{i}" for i in range(40)]
    weights = {"t33": 30, "t35": 100, "t37": 50, "t39": 40}
    order = long_poles_first(items, lambda it: weights.get(it, 0), workers=2)
    assert sorted(order) == sorted(items)               # every test once, none added
    chunk = first_chunk_size(40, 2)
    assert chunk == 5
    # longest-processing-time-first: 100 to one worker; 50, 40, then 30 (90 < 100) to the other
    assert order[:chunk][:1] == ["t35"]
    assert order[chunk:2 * chunk][:3] == ["t37", "t39", "t33"]
    light = [it for it in order if it not in weights]
    assert light == [it for it in items if it not in weights]      # the rest keeps its order


def test_worksteal_shares_are_whole_thirds_each_starting_with_its_long_poles():
    items = [f"t{i}" for i in range(31)]
    weights = {"t28": 30, "t29": 100, "t30": 50}
    order = long_poles_first(items, lambda it: weights.get(it, 0), workers=3, dist="worksteal")
    assert sorted(order) == sorted(items)
    chunk = first_chunk_size(31, 3, dist="worksteal")
    assert chunk == 10                  # xdist sends 10, 10 and the last 11
    assert [order[0], order[chunk], order[2 * chunk]] == ["t29", "t30", "t28"]
    light = [it for it in order if it not in weights]
    assert light == [it for it in items if it not in weights]
    # fewer tests than workers: nothing to share out, the long poles first
    assert long_poles_first(["a", "b"], lambda it: 1 if it == "b" else 0, workers=3, dist="worksteal") == ["b", "a"]


def test_one_worker_or_no_long_pole_keeps_the_order():
    items = [f"t{i}" for i in range(10)]
    assert long_poles_first(items, lambda it: 5 if it == "t9" else 0, workers=1) == items
    assert long_poles_first(items, lambda it: 0, workers=3) == items


def test_a_small_collection_is_dealt_round_robin():
    items = ["a", "b", "c", "heavy1", "heavy2"]                 # 5 < 2 * 3 workers: dealt one at a time
    weights = {"heavy1": 10, "heavy2": 20}
    order = long_poles_first(items, lambda it: weights.get(it, 0), workers=3)
    assert first_chunk_size(5, 3) == 0
    assert order[:2] == ["heavy2", "heavy1"]            # positions 0 and 1: the first test of two workers
    assert sorted(order) == sorted(items)


GENERATED = '''
import os
import pytest

def record(name):
    with open(os.path.join(os.environ["ORDER_LOG"], os.environ["PYTEST_XDIST_WORKER"]), "a") as f:
        f.write(name + "\\n")

@pytest.mark.parametrize("i", range(36))
def test_light(i):
    record(f"light{i}")

@pytest.mark.long_pole(30)
def test_heavy30():
    record("heavy30")

@pytest.mark.long_pole(100)
def test_heavy100():
    record("heavy100")

@pytest.mark.long_pole(50)
def test_heavy50():
    record("heavy50")

@pytest.mark.long_pole(40)
def test_heavy40():
    record("heavy40")
'''


@pytest.mark.parametrize("dist", ["load", "worksteal"])
def test_xdist_workers_start_with_the_long_poles(tmp_path, dist):
    (tmp_path / "test_generated.py").write_text(GENERATED)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    long_pole(seconds): a long test\n")
    log_dir = tmp_path / "log"
    log_dir.mkdir()
    # the child is pytest with xdist and the ordering plugin only (no other installed plugin: each worker would
    # import them all), two workers
    env = dict(os.environ, ORDER_LOG=str(log_dir), PYTHONPATH=TESTS_DIR, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", dist, "-p", "xdist.plugin",
                          "-p", "helpers.ordering", "-p", "no:cacheprovider", str(tmp_path)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=scaled(120))
    assert run.returncode == 0, run.stdout + run.stderr
    starts = {}
    for worker in os.listdir(log_dir):
        first = open(log_dir / worker).read().split()[:3]
        starts[first[0]] = first
    # 40 tests, 2 workers: each is sent a first chunk (5 with load, 20 with worksteal); one starts with heavy100,
    # the other with the rest
    assert sorted(starts) == ["heavy100", "heavy50"]
    assert starts["heavy50"] == ["heavy50", "heavy40", "heavy30"]
