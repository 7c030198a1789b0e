"""docs/results/README.md, the one table of measured results, lists every report in docs/results/ (it is generated
from them: scripts/gen_results_index.py), and every report says its command, commit and date."""

import os
import subprocess
import sys

from conftest import ROOT  # noqa: E402 - the repository, wherever this file sits under tests/
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import gen_results_index  # noqa: E402


def test_the_index_is_current():
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gen_results_index.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


def test_every_report_names_its_command_commit_and_date():
    d = gen_results_index.DIR
    for name in os.listdir(d):
        if name.endswith(".md") and name not in gen_results_index.SKIP:
            f = gen_results_index.report_fields(os.path.join(d, name))
            assert f["command"] and f["commit"] and f["date"], (name, f)
