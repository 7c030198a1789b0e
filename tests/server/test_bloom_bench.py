"""`durakv bench --workload bloom` against a real durakv: BF.ADD and BF.EXISTS requests (item <prefix>N into filter
bf:(N mod --bloom-filters)), the prefill adding every item, a report naming the BF commands, and --results writing
the figures with the command, the commit, the date and the machine's load. No speed is asserted here: the figures
are docs/results/' (a benchmark's, with its command)."""

import json

from test_bench import bench_cli


def test_bloom_workload_and_results_file(server_factory, tmp_path):
    srv = server_factory("--durability", "sync")
    out = tmp_path / "r.json"
    res = bench_cli("-p", str(srv.port), "--workload", "bloom", "--bloom-filters", "7", "--rate", "400",
                    "--duration", "2", "--clients", "4", "--key-maximum", "300", "--prefill", "--ratio", "1:3",
                    "--json", str(out), "--results", str(tmp_path / "results"), "-q")
    assert "BF.ADD" in res.stdout and "BF.EXISTS" in res.stdout and "over 7 filters" in res.stdout
    rep = json.loads(out.read_text())
    assert set(rep["commands"]) == {"BF.ADD", "BF.EXISTS"} and rep["errors"] == {}
    assert rep["config"]["workload"] == "bloom" and rep["prefill"]["keys"] == 300 and not rep["prefill"]["errors"]
    c = srv.client()
    assert sorted(c.keys("bf:*")) == [b"bf:%d" % i for i in range(7)]
    assert all(c.type(b"bf:%d" % i) == b"bloomfltr" for i in range(7))
    # every prefilled item is in its filter: a read of it says 1
    assert all(c.execute_command("BF.EXISTS", b"bf:%d" % (n % 7), b"key:%d" % n) == 1 for n in range(1, 301))
    md = list((tmp_path / "results").glob("bloom-*.md"))
    assert len(md) == 1
    text = md[0].read_text()
    assert "- command: `durakv bench " in text and "--workload bloom" in text
    assert "- commit: " in text and "- date: " in text and "load average" in text and "BF.EXISTS" in text
    meta = json.loads(md[0].with_suffix(".json").read_text())["meta"]
    assert set(meta) == {"command", "commit", "date", "load_before", "load_after"}
