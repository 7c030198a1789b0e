"""docs/configuration.md is generated from config.OPTIONS (scripts/gen_config_doc.py): every name it lists is an
option (or a refused Valkey name) and every option is in it, each with a meaning, and the file is current."""

import os
import re
import subprocess
import sys

from durakv.config import OPTIONS, REFUSED

from conftest import ROOT  # noqa: E402 - the repository, wherever this file sits under tests/
DOC = os.path.join(ROOT, "docs", "configuration.md")


def _rows(text, heading):
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    return [line for line in section.splitlines() if line.startswith("| `")]


def test_every_option_is_documented_and_every_documented_name_exists():
    with open(DOC, encoding="utf-8") as f:
        text = f.read()
    rows = _rows(text, "## Options")
    documented = {re.match(r"\| `([^`]+)`", row).group(1) for row in rows}
    assert documented == {o.name for o in OPTIONS}
    for row in rows:
        aliases = set(re.findall(r"`([^`]+)`", row.split("|")[1])[1:])
        name = re.match(r"\| `([^`]+)`", row).group(1)
        assert aliases == set(next(o for o in OPTIONS if o.name == name).aliases), row
        meaning = row.rstrip(" |").rsplit(" | ", 1)[1]
        assert meaning.strip(), row
    refused = {re.match(r"\| `([^`]+)`", row).group(1) for row in _rows(text, "## Valkey names durakv refuses")}
    assert refused == set(REFUSED)
    assert all(o.help for o in OPTIONS)


def test_the_generated_reference_is_current():
    out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gen_config_doc.py"), "--check"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
