"""ACL's command universe: the categories and every command and subcommand of Valkey's table (src/acl.c).

The universe is Valkey's table (spec.py), not only the commands durakv implements, so that a rule written for
Valkey (`+debug|segfault`, `-migrate`) is accepted here and round-trips through ACL SAVE unchanged. Categories
are the declared ones plus the implicit ones server.c's setImplicitACLCategories() derives from the command
flags. Pure: computed once from the table at import.
"""

from ..specs import MODULE_CATEGORIES, SPEC


CATEGORIES = ("keyspace", "read", "write", "set", "sortedset", "list", "hash", "string", "bitmap",
              "hyperloglog", "geo", "stream", "pubsub", "admin", "fast", "slow", "blocking", "dangerous",
              "connection", "transaction", "scripting") + MODULE_CATEGORIES
CATEGORY_SET = frozenset(CATEGORIES)


def effective_categories(spec) -> frozenset:
    """The declared ACL categories of a command plus the implicit ones (server.c setImplicitACLCategories)."""
    cats = set(spec.get("acl", ()))
    flags = spec.get("flags", ())
    if "module" in flags:
        return frozenset(cats)   # a module's are its own (VM_SetCommandACLCategories): none implied
    if "write" in flags:
        cats.add("write")
    if "readonly" in flags and "scripting" not in cats:
        cats.add("read")  # scripting commands are kept out of @read
    if "admin" in flags:
        cats.update(("admin", "dangerous"))
    if "pubsub" in flags:
        cats.add("pubsub")
    if "fast" in flags:
        cats.add("fast")
    if "blocking" in flags:
        cats.add("blocking")
    if "fast" not in cats:
        cats.add("slow")
    return frozenset(cats)


class AclCommand:
    """One entry of the ACL command universe (a command or a subcommand)."""
    __slots__ = ("fullname", "categories", "subs", "parent")

    def __init__(self, fullname, categories, parent=None):
        self.fullname = fullname
        self.categories = categories
        self.subs = []
        self.parent = parent


def _build_universe():
    cmds = {}
    for name, spec in SPEC.items():
        top = cmds[name] = AclCommand(name, effective_categories(spec))
        for sub_name, sub_spec in spec.get("subcommands", {}).items():
            full = name + "|" + sub_name
            cmds[full] = AclCommand(full, effective_categories(sub_spec), parent=name)
            top.subs.append(full)
    return cmds


COMMANDS = _build_universe()
ALL_COMMANDS = frozenset(COMMANDS)
CATEGORY_MEMBERS = {cat: tuple(n for n, c in COMMANDS.items() if cat in c.categories) for cat in CATEGORIES}


def lookup_rule_command(name: str):
    """ACLLookupCommand: 'cmd' or 'container|sub' (strictly: 'get|x' and 'a|b|c' are unknown)."""
    parts = name.lower().split("|")
    if len(parts) > 2:
        return None
    base = COMMANDS.get(parts[0])
    if base is None or base.parent is not None:
        return None
    if len(parts) == 1:
        return base
    if not base.subs:
        return None
    return COMMANDS.get(parts[0] + "|" + parts[1])
