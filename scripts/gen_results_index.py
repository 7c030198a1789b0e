#!/usr/bin/env python3
"""Writes docs/results/README.md: one table of every report the tools wrote into docs/results/ (each report's
title, date, commit, machine load and command, read from the report itself), newest first.

    python scripts/gen_results_index.py          # writes docs/results/README.md
    python scripts/gen_results_index.py --check  # exit 1 when the file is not current (tests/unit/test_results_index.py)
"""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIR = os.path.join(ROOT, "docs", "results")
INDEX = os.path.join(DIR, "README.md")
SKIP = {"README.md", "history.md"}


def report_fields(path):
    """{title, date, commit, machine, command} of one report (what the tools write at its top)."""
    out = {"title": "", "date": "", "commit": "", "machine": "", "command": ""}
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f):
            if i > 40:
                break
            if line.startswith("# ") and not out["title"]:
                out["title"] = line[2:].strip()
            m = re.match(r"- (command|commit|date|machine|load): (.*)", line.strip())
            if m:
                key = "machine" if m.group(1) == "load" else m.group(1)
                out[key] = out[key] or m.group(2).strip()
    return out


def render():
    rows = []
    for name in sorted(os.listdir(DIR)):
        if not name.endswith(".md") or name in SKIP:
            continue
        f = report_fields(os.path.join(DIR, name))
        rows.append((f["date"], name, f))
    rows.sort(key=lambda r: (r[0], r[1]), reverse=True)
    lines = ["# Measured results", "",
             "Every report here was written by the tool that measured it (`durakv bench ... --results docs/results`,",
             "`durakv verify ... --report`, the `scripts/measure_*.py` scripts), with its command, the commit it ran,",
             "the date and the machine's load; this index is generated from them (`python scripts/gen_results_index.py`).",
             "The figures typed into earlier READMEs are kept, as written, in [history.md](history.md).", "",
             "| date | report | commit | machine | command |", "|---|---|---|---|---|"]
    for date, name, f in rows:
        command = f["command"].replace("|", "\\|")
        lines.append("| %s | [%s](%s) | %s | %s | %s |" % (date[:16], f["title"] or name, name, f["commit"][:10],
                                                            f["machine"].replace("|", "\\|"), command))
    return "\n".join(lines) + "\n"


def main(argv):
    text = render()
    if "--check" in argv:
        try:
            current = open(INDEX, encoding="utf-8").read()
        except FileNotFoundError:
            current = ""
        if current != text:
            print("docs/results/README.md is not current: run python scripts/gen_results_index.py")
            return 1
        return 0
    with open(INDEX, "w", encoding="utf-8") as f:
        f.write(text)
    print("wrote %s (%d reports)" % (os.path.relpath(INDEX, ROOT), text.count("\n| ") - 1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
