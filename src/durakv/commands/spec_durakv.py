"""durakv's own commands (not Valkey's, not a module's), in commands/spec.py's shape: the cluster membership
words the operator's tools send a node (`durakv cluster create`, `add-node`; cluster/admin.py), and DURAKV BACKUP
(`durakv backup create --host/--port`; server/backup.py)."""

_ADMIN = {"flags": ["admin", "noscript", "loading", "stale"], "acl": ["admin", "slow", "dangerous"],
          "key_specs": [], "group": "server", "since": "0.1.0", "doc_flags": [], "complexity": ""}

SPEC = {
    "durakv": {
        "name": "durakv", "arity": -2, "flags": [], "acl": ["slow"], "key_specs": [], "group": "server",
        "since": "0.1.0", "doc_flags": [], "arguments": [], "complexity": "",
        "subcommands": {
            "identity": {**_ADMIN, "name": "durakv|identity", "arity": 2, "arguments": []},
            "join": {**_ADMIN, "name": "durakv|join", "arity": 3,
                     "arguments": [{"name": "document", "type": "string"}]},
            "backup": {**_ADMIN, "name": "durakv|backup", "arity": -3,
                       "arguments": [{"name": "subcommand", "type": "string"}]},
            "help": {"name": "durakv|help", "arity": 2, "flags": ["loading", "stale"], "acl": ["slow"],
                     "key_specs": [], "group": "server", "since": "0.1.0", "doc_flags": [], "complexity": "",
                     "arguments": []},
        },
    },
}
