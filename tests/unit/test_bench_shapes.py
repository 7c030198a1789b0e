"""`durakv bench compare --cluster-shape`: the memtier command each shape runs and how its targets are judged
(the runs themselves start clusters and memtier_benchmark: a measurement, written to docs/results/, not a
test)."""

from durakv.tools.bench.cli import compare_parser
from durakv.tools.bench.clusters import SHAPES, _shown, format_shape, memtier_cluster_argv, shape_targets


def test_the_seed_shapes_run_the_seeds_memtier_commands():
    argv = memtier_cluster_argv("/x/memtier_benchmark", 7000, SHAPES["seed-002"], 30, "/tmp/o.json",
                                password="pw")
    for a in ("--cluster-mode", "--ratio=1:1", "--data-size=32", "--threads=2", "--clients=20", "--test-time=30"):
        assert a in argv
    assert argv[argv.index("-a") + 1] == "pw" and "pw" not in _shown(argv).split()
    tls = memtier_cluster_argv("m", 7000, SHAPES["seed-000"], 10, "/tmp/o.json", password="pw", cacert="/c/ca.crt",
                               rate=5000)
    assert "--tls" in tls and tls[tls.index("--cacert") + 1] == "/c/ca.crt"
    # 5000 ops/s over 2 threads x 10 connections
    assert "--rate-limiting=250" in tls and "--data-size=256" in tls


def _row(target, ops, set_p50=1.0, set_p99=2.0):
    return {"target": target, "ops_per_sec": ops, "ops": ops * 10, "load": 1.0, "command": "memtier ...",
            "cpu_us_per_op": {"primaries": 10.0}, "commands": {"SET": {"p50": set_p50, "p99": set_p99},
                                                              "GET": {"p50": 0.5, "p99": 1.0}}}


def test_targets_are_judged_as_the_issue_sets_them():
    t = shape_targets("seed-002", [_row("durakv-sync", 30_000), _row("redis-cluster", 100_000)], 0)
    assert [(x["value"], x["met"]) for x in t] == [(0.3, False)]
    t = shape_targets("seed-002", [_row("durakv-sync", 60_000), _row("redis-cluster", 100_000)], 0)
    assert t[0]["met"]
    t = shape_targets("seed-000", [_row("durakv-sync", 4990, 1.9, 4.9)], 5000)
    assert all(x["met"] for x in t)
    t = shape_targets("seed-000", [_row("durakv-sync", 3000, 1.9, 4.9)], 5000)   # the rate was not reached
    assert not any(x["met"] for x in t)
    t = shape_targets("one-shard", [_row("durakv-sync", 79_999)], 0)
    assert not t[0]["met"]
    report = {"shape": "one-shard", "about": SHAPES["one-shard"]["about"], "duration_s": 10, "rate": 0,
              "rows": [_row("durakv-sync", 79_999)], "targets": t, "load_before": 9.0, "load_after": 9.0}
    text = format_shape(report)
    assert "MISS  one-shard" in text and "busy" in text


def test_compare_takes_a_cluster_shape_and_a_results_directory():
    args = compare_parser().parse_args(["--cluster-shape", "seed-000", "--results", "docs/results", "--rate", "4000"])
    assert args.cluster_shape == "seed-000" and args.results == "docs/results" and args.rate == 4000
