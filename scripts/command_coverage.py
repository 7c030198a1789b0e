"""Lists, per Valkey 8 command group, which commands durakv implements (from the live command table).

    python scripts/command_coverage.py [GROUP ...]      e.g. string list set sorted_set hash stream ...
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from durakv.commands import load_all, registry  # noqa: E402
from durakv.commands.spec import SPEC  # noqa: E402

DATA_AND_SCRIPTING = ["string", "list", "set", "sorted_set", "hash", "stream", "bitmap", "hyperloglog", "geo",
                      "scripting", "pubsub", "transactions", "generic"]


def coverage():
    load_all()
    groups = {}
    for name, spec in SPEC.items():
        entry = registry.TABLE.get(name.encode())
        subs = spec.get("subcommands", {})
        if subs:
            for sub in subs:
                impl = entry is not None and sub.encode() in entry.subcommands \
                    and entry.subcommands[sub.encode()].handler is not None
                groups.setdefault(spec.get("group", ""), []).append((f"{name.upper()} {sub.upper()}", impl))
        else:
            groups.setdefault(spec.get("group", ""), []).append(
                (name.upper(), entry is not None and entry.handler is not None))
    return groups


def main(argv):
    groups = coverage()
    for g in argv or DATA_AND_SCRIPTING:
        items = sorted(groups.get(g, []))
        done = [n for n, ok in items if ok]
        missing = [n for n, ok in items if not ok]
        line = f"- {g} ({len(done)}/{len(items)}): implemented: {', '.join(done)}"
        if missing:
            line += f"; NOT implemented: {', '.join(missing)}"
        print(line)


if __name__ == "__main__":
    main(sys.argv[1:])
