"""scripts/count_opcodes.py counts a write's whole path. It fed requests without running the loop, so in sync mode
it saw only the read path: "SET: 0.0 opcodes/command" while a sync SET runs ~20 Python functions (the batch's
close, the journal's completion, the commit, the release), the map docs/commit-path.md reads from it. Now each
request is followed until its reply is written."""

import os
import re
import subprocess
import sys

from conftest import ROOT
from helpers.waiting import scaled


def _count(durability):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"))
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "count_opcodes.py"), "--durability", durability,
                        "--requests", "200", "--top", "40"], capture_output=True, text=True, env=env,
                       timeout=scaled(120))
    assert r.returncode == 0, r.stderr
    m = re.search(r"SET: ([\d.]+) opcodes and ([\d.]+) Python calls per command", r.stdout)
    assert m, r.stdout
    return float(m.group(1)), float(m.group(2)), r.stdout


def test_a_sync_set_is_counted_to_its_commit():
    opcodes, calls, out = _count("sync")
    assert opcodes > 100 and calls >= 5, out
    for part in ("WriteTracker.close_batch", "WriteTracker._on_appended", "Durability.on_commit"):
        assert part in out, out
    # the measurement's own frames are not the server's work
    assert "count_opcodes" not in out.split("\n", 1)[1] and "wrapper" not in out, out
