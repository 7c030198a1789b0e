"""The command table and its families. Importing this package registers every family module."""

from . import registry  # noqa: F401

FAMILIES = ("strings", "keys", "hashes", "lists", "sets", "zsets", "transactions",
            "connection", "server", "bitmaps", "hyperloglog", "streams", "blocking", "pubsub",
            "scripting", "generic", "introspection", "hash_ttl", "cluster", "cluster_admin", "geo", "acl.handlers", "debugging", "lolwut",
            "membership", "json_commands", "bloom", "search", "backup")


def load_all():
    import importlib
    for name in FAMILIES:
        try:
            importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
