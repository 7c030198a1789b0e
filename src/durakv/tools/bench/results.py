"""`durakv bench --results DIR`: a run's figures written down with what they depend on: the command line, the
commit of the code that produced them, the date and the machine's load around the run (a shared machine's other
work moves every figure), the text report and the JSON report."""

import datetime
import json
import os
import shlex
import subprocess
import sys


def _commit() -> str:
    """The git commit of durakv's source tree, with '+changes' when its files differ from it; 'unknown' when the
    package is not in a git work tree."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        head = subprocess.run(["git", "-C", here, "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", here, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+changes" if dirty else "")


def machine_load() -> dict:
    one, five, fifteen = os.getloadavg()
    return {"loadavg_1m": round(one, 2), "loadavg_5m": round(five, 2), "loadavg_15m": round(fifteen, 2),
            "cpus": os.cpu_count()}


def write_results(directory, name, report, text, load_before, argv=None, tool="durakv bench", command=None,
                  title=None) -> str:
    """Writes <directory>/<name>-<UTC date and time>.md (and .json beside it); returns the .md path. `tool`: the
    command line's program (a script under scripts/ names itself); `command`: the whole command line, when it is
    not the tool and argv; `title`: the page's heading (default: the tool and the name)."""
    os.makedirs(directory, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    stamp = now.strftime("%Y%m%d-%H%M%S")
    base = os.path.join(directory, f"{name}-{stamp}")
    if command is None:
        command = tool + " " + " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    meta = {"command": command, "commit": _commit(), "date": now.isoformat(timespec="seconds"),
            "load_before": load_before, "load_after": machine_load()}
    with open(base + ".json", "w") as f:
        json.dump({"meta": meta, "report": report}, f, indent=2, default=str)
        f.write("\n")
    with open(base + ".md", "w") as f:
        f.write(f"# {title or tool + ': ' + name}, {meta['date']}\n\n")
        f.write(f"- command: `{command}`\n- commit: {meta['commit']}\n- date: {meta['date']}\n")
        f.write(f"- machine: {meta['load_before']['cpus']} CPUs; load average (1 min) "
                f"{meta['load_before']['loadavg_1m']} before the run, {meta['load_after']['loadavg_1m']} after\n\n")
        f.write("```\n" + text + "\n```\n")
    return base + ".md"
