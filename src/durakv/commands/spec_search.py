"""valkey-search 1.2's command facts, from its own command table (src/module_loader.cc and
src/commands/commands.h): each command is registered with ValkeyModule_CreateCommand(name, flags, 0, 0, 0), so
its arity is -1 (the module checks its arguments itself) and it declares no keys; its ACL categories are set
with ValkeyModule_SetCommandACLCategories and the module adds the category `search`.

durakv serves FT.CREATE, FT.DROPINDEX, FT.INFO, FT._LIST and FT.SEARCH (valkey-search 1.0's surface).
FT.AGGREGATE, FT._DEBUG and FT.INTERNAL_UPDATE (1.2) are not served, so they are not in the table: a client gets
`unknown command` for them, as from a server without them.
"""

MODULE = {"name": "search", "ver": (1 << 16) | (2 << 8) | 0,   # vmsdk::ValkeyVersion(1, 2, 0)
          "path": "/usr/lib/valkey/libsearch.so", "args": [],   # where valkey-bundle's image keeps it
          # INFO modules' options: valkey_search.cc's ValkeyModule_SetModuleOptions (HANDLE_IO_ERRORS,
          # HANDLE_REPL_ASYNC_LOAD, NO_IMPLICIT_SIGNAL_MODIFIED), in Valkey's order
          "options": ["handle-io-errors", "handle-repl-async-load", "no-implicit-signal-modified"]}
CATEGORIES = ("search",)


def _cmd(name, flags, acl):
    return {"name": name, "arity": -1, "flags": list(flags) + ["module"], "acl": list(acl), "key_specs": [],
            "group": "module", "since": "1.0.0", "doc_flags": [], "arguments": [], "complexity": ""}


SPEC = {
    "ft.create": _cmd("ft.create", ("write", "denyoom", "fast"), ("search", "write", "fast")),
    "ft.dropindex": _cmd("ft.dropindex", ("write", "fast"), ("search", "write", "fast")),
    "ft.info": _cmd("ft.info", ("readonly", "fast"), ("search", "read", "fast")),
    "ft._list": _cmd("ft._list", ("readonly", "admin"), ("search", "read", "slow", "admin")),
    "ft.search": _cmd("ft.search", ("readonly", "denyoom"), ("search", "read", "slow")),
}
