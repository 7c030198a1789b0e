"""scripts/valkey_suite.py's pure parts: reading runtest's output and tallying units (the TCL suite itself
is never run in CI)."""

import importlib.util
import json
import os

from conftest import ROOT

_spec = importlib.util.spec_from_file_location("valkey_suite", os.path.join(ROOT, "scripts", "valkey_suite.py"))
suite = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(suite)

OUTPUT = """Cleanup: may take some time... OK
Starting test server at port 21079
[ready]: 1234
Testing unit/type/incr
[ok]: INCR against non existing key (1 ms)
[ok]: \x1b[0;32;49mINCR against key created by incr itself\x1b[0m (0 ms)
[skip]: Only on a real server
[ignore]: Not supported on external server: Tag: external:skip denied
[err]: INCR fails against a key holding a list in tests/unit/type/incr.tcl
Expected 'WRONGTYPE*' to match 'ERR nope' (context: type eval line 3 cmd {assert_error})

[ok]: DECR against key created by incr (0 ms)
[exception]: Executing test client: ERR unknown subcommand 'x'. Try OBJECT HELP..
ERR unknown subcommand 'x'. Try OBJECT HELP.
    while executing
"[srv $level "client"] {*}$args"
[1/1 done]: unit/type/incr (0 seconds)
"""


def test_parse_output_counts_and_failures():
    res = suite.parse_output(OUTPUT)
    assert (res["ok"], res["err"], res["exception"], res["skip"], res["ignore"]) == (3, 1, 1, 1, 1)
    assert res["passed"][1] == "INCR against key created by incr itself"  # colours stripped
    assert res["failures"] == [{"test": "INCR fails against a key holding a list",
                                "error": "Expected 'WRONGTYPE*' to match 'ERR nope' (context: type eval line 3 "
                                         "cmd {assert_error})"}]
    exc = res["exceptions"][0]
    assert exc["error"] == "Executing test client: ERR unknown subcommand 'x'. Try OBJECT HELP.."
    assert exc["context"][0] == "ERR unknown subcommand 'x'. Try OBJECT HELP."
    assert res["last_ok"] == "DECR against key created by incr"


def test_unit_names_and_summary(tmp_path):
    assert suite.normalize_unit("type/list") == "unit/type/list"
    assert suite.normalize_unit("tests/unit/sort.tcl") == "unit/sort"
    assert suite.normalize_unit("integration/valkey-cli") == "integration/valkey-cli"
    units = [
        {"unit": "unit/a", "ok": 3, "err": 1, "exception": 0, "skip": 0, "ignore": 0, "timeout": False},
        {"unit": "unit/b", "ok": 0, "err": 0, "exception": 1, "skip": 0, "ignore": 2, "timeout": False},
        {"unit": "unit/c", "ok": 2, "err": 0, "exception": 0, "skip": 0, "ignore": 0, "timeout": True},
    ]
    total = suite.summarize(units)
    assert (total["ok"], total["err"], total["exception"], total["timeout"]) == (5, 1, 1, 1)
    assert (total["units_stopped"], total["units_zero_ok_stopped"]) == (2, 1)
    before, after = tmp_path / "before.json", tmp_path / "after.json"
    before.write_text(json.dumps({"units": units}))
    after.write_text(json.dumps({"units": [dict(u, ok=u["ok"] + 1) for u in units]}))
    import io
    out = io.StringIO()
    suite.compare([str(before), str(after)], out)
    lines = out.getvalue().splitlines()
    assert lines[-1].startswith("TOTAL") and "5 ok 1 err 1 exc 1 T" in lines[-1] and "8 ok" in lines[-1]
