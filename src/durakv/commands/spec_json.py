"""valkey-json 1.0.2's command facts, from its ValkeyModule_OnLoad (src/json/json.cc): the module's MODULE LIST
entry, its ACL category and its 23 commands with the flags, ACL categories, arities and key specs it registers
(ValkeyModule_CreateCommand, SetCommandACLCategories, SetCommandInfo), JSON.DEBUG's subcommands included.

valkey-json gives Valkey no summaries, no "since" and no argument lists (it sets only arity and key specs), so
COMMAND DOCS shows a json command's group ("module") and module ("json") only; the argument grammar of its
src/commands/*.json files is kept under "module_arguments" for reference. Command names are shown as the
module declares them ("JSON.SET"), under "display".

KEYTABLE-CORRUPT and KEYTABLE-DISTRIBUTION (undocumented, for valkey-json's developers: they corrupt and
measure its shared key table, which durakv does not have) are not served: they answer "unknown subcommand", as
valkey-json since its #98 answers them unless json.debug-mode is on.

One departure: valkey-json registers JSON.DEBUG's subcommands with no flags; here those that read a key or the
keyspace (MEMORY, DEPTH, FIELDS, MAX-DEPTH-KEY, MAX-SIZE-KEY, KEYTABLE-CHECK, TEST-SHARED-API) are
"readonly", because durakv's pipeline holds a read's reply until the writes it reads are committed, and
decides that from this flag.
"""

MODULE = {"name": "json", "ver": 10002, "path": "/usr/lib/valkey/libjson.so", "args": [],
          # INFO modules' options: the module handles its own RDB I/O errors (VALKEYMODULE_OPTIONS_HANDLE_IO_ERRORS)
          "options": ["handle-io-errors"]}
CATEGORIES = ("json",)

# json.cc's flag strings and categories
_READONLY = (["readonly", "fast"], ["json", "read", "fast"])
_SLOW_WRITE_DENY = (["write", "denyoom"], ["json", "write", "slow"])
_FAST_WRITE = (["write", "fast"], ["json", "write", "fast"])
_FAST_WRITE_DENY = (["write", "denyoom", "fast"], ["json", "write", "fast"])

# key spec flags (json.cc ks_*)
_RW_UPDATE = ["rw", "update"]
_RW_INSERT = ["rw", "insert"]
_RW_DELETE = ["rw", "delete"]
_RW_ACCESS_UPDATE = ["rw", "access", "update"]
_RW_ACCESS_DELETE = ["rw", "access", "delete"]
_RO = ["ro"]
_RO_ACCESS = ["ro", "access"]
_FULL_ACCESS = ["rw", "access", "update", "delete"]   # CMD_KEY_FULL_ACCESS: CreateSubcommand's own key spec


def _key_spec(flags, pos=1, lastkey=0, step=1):
    return {"begin_search": {"index": {"pos": pos}},
            "find_keys": {"range": {"lastkey": lastkey, "limit": 0, "step": step}},
            "flags": list(flags)}


def _arg(name, typ, **kw):
    a = {"name": name, "type": typ}
    a.update(kw)
    return a


_KEY = _arg("key", "key", key_spec_index=0)
_PATH_OPT = _arg("path", "string", optional=True)
_PATH = _arg("path", "string")


def _command(display, arity, kind, key_specs, arguments, subcommands=None):
    flags, acl = kind
    spec = {"name": display.lower(), "display": display, "arity": arity, "flags": flags + ["module"],
            "acl": list(acl), "key_specs": key_specs, "group": "module", "module": "json", "doc_flags": [],
            "arguments": [], "module_arguments": arguments}
    if subcommands:
        spec["subcommands"] = subcommands
    return spec


def _debug_sub(name, arity, key_specs, flags=("readonly",)):
    display = "JSON.DEBUG|" + name
    return name.lower(), {"name": display.lower(), "display": display, "arity": arity,
                          "flags": list(flags) + ["module"], "acl": [], "key_specs": key_specs,
                          "group": "module", "module": "json", "doc_flags": [], "arguments": []}


_DEBUG_SUBS = dict((
    _debug_sub("MEMORY", -3, [_key_spec(_RO_ACCESS, pos=2)]),
    _debug_sub("DEPTH", 3, [_key_spec(_RO_ACCESS, pos=2)]),
    _debug_sub("FIELDS", -3, [_key_spec(_RO_ACCESS, pos=2)]),
    _debug_sub("HELP", 2, [], flags=()),
    _debug_sub("MAX-DEPTH-KEY", 2, []),
    _debug_sub("MAX-SIZE-KEY", 2, []),
    _debug_sub("KEYTABLE-CHECK", 2, []),
    _debug_sub("TEST-SHARED-API", 0, [_key_spec(_FULL_ACCESS, pos=2)]),
))

SPEC = {s["name"]: s for s in (
    _command("JSON.SET", -4, _SLOW_WRITE_DENY, [_key_spec(_RW_UPDATE)],
             [_KEY, _PATH, _arg("json", "string"), _arg("options", "string", optional=True)]),
    _command("JSON.MSET", -4, _SLOW_WRITE_DENY, [_key_spec(_RW_UPDATE, lastkey=-3, step=3)],
             [_arg("data", "block", multiple=True, arguments=[_KEY, _PATH, _arg("json", "string")])]),
    _command("JSON.GET", -2, _READONLY, [_key_spec(_RO_ACCESS)],
             [_KEY, _arg("INDENT/NEWLINE/SPACE", "string", optional=True),
              _arg("NOESCAPE", "string", optional=True), _arg("path", "string", optional=True, multiple=True)]),
    _command("JSON.MGET", -3, _READONLY, [_key_spec(_RO_ACCESS, lastkey=-2)],
             [_arg("key", "key", key_spec_index=0, multiple=True), _PATH]),
    _command("JSON.DEL", -2, _FAST_WRITE, [_key_spec(_RW_DELETE)], [_KEY, _PATH_OPT]),
    _command("JSON.FORGET", -2, _FAST_WRITE, [_key_spec(_RW_DELETE)], [_KEY, _PATH_OPT]),
    _command("JSON.NUMINCRBY", 4, _FAST_WRITE, [_key_spec(_RW_ACCESS_UPDATE)],
             [_KEY, _PATH, _arg("number", "integer")]),
    _command("JSON.NUMMULTBY", 4, _FAST_WRITE, [_key_spec(_RW_ACCESS_UPDATE)],
             [_KEY, _PATH, _arg("number", "integer")]),
    _command("JSON.STRLEN", -2, _READONLY, [_key_spec(_RO)], [_KEY, _PATH_OPT]),
    _command("JSON.STRAPPEND", -3, _FAST_WRITE_DENY, [_key_spec(_RW_INSERT)],
             [_KEY, _PATH_OPT, _arg("json_string", "string")]),
    _command("JSON.TOGGLE", -2, _FAST_WRITE_DENY, [_key_spec(_RW_ACCESS_UPDATE)], [_KEY, _PATH_OPT]),
    _command("JSON.OBJLEN", -2, _READONLY, [_key_spec(_RO)], [_KEY, _PATH_OPT]),
    _command("JSON.OBJKEYS", -2, _READONLY, [_key_spec(_RO_ACCESS)], [_KEY, _PATH_OPT]),
    _command("JSON.ARRLEN", -2, _READONLY, [_key_spec(_RO)], [_KEY, _PATH_OPT]),
    _command("JSON.ARRAPPEND", -4, _FAST_WRITE_DENY, [_key_spec(_RW_INSERT)],
             [_KEY, _PATH, _arg("json", "string", multiple=True)]),
    _command("JSON.ARRPOP", -2, _FAST_WRITE, [_key_spec(_RW_ACCESS_DELETE)],
             [_KEY, _PATH_OPT, _arg("index", "integer", optional=True)]),
    _command("JSON.ARRINSERT", -5, _FAST_WRITE_DENY, [_key_spec(_RW_INSERT)],
             [_KEY, _PATH, _arg("index", "integer"), _arg("json", "string", multiple=True)]),
    _command("JSON.ARRTRIM", 5, _FAST_WRITE, [_key_spec(_RW_DELETE)],
             [_KEY, _PATH, _arg("start", "integer"), _arg("end", "integer")]),
    _command("JSON.CLEAR", -2, _FAST_WRITE, [_key_spec(_RW_DELETE)], [_KEY, _PATH_OPT]),
    _command("JSON.ARRINDEX", -4, _READONLY, [_key_spec(_RO_ACCESS)],
             [_KEY, _PATH, _arg("json-scalar", "string"), _arg("start", "integer", optional=True),
              _arg("end", "integer", optional=True)]),
    _command("JSON.TYPE", -2, _READONLY, [_key_spec(_RO_ACCESS)], [_KEY, _PATH_OPT]),
    _command("JSON.RESP", -2, _READONLY, [_key_spec(_RO_ACCESS)], [_KEY, _PATH_OPT]),
    # "readonly getkeys-api": the subcommands name the keys
    _command("JSON.DEBUG", -2, (["readonly"], ["json", "read", "slow"]), [],
             [_arg("subcommand & arguments", "string")], subcommands=_DEBUG_SUBS),
)}
