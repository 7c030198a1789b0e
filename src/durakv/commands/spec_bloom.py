"""valkey-bloom 1.0.1's command facts, as Valkey shows the module `bf` once valkey-bundle 9.1 loads it.

Written from the module's own registration (src/lib.rs `valkey_module!`): each command is created with
ValkeyModule_CreateCommand(name, flags, 1, 1, 1) and its ACL categories, and no command info, so Valkey gives it
arity -1 (the module checks its own arguments and answers "wrong number of arguments for 'BF.ADD' command" with
the name as it was declared, upper case), the flags it declared plus `module`, group "module", and one key spec
(CMD_KEY_FULL_ACCESS: RW ACCESS UPDATE, index 1, range 0/1/0). The argument lists are the module's command
documentation (src/commands/bf.*.json), kept under "module_arguments": Valkey knows none for the module, and
COMMAND DOCS shows what it shows (group "module", module "bf"). The module registers itself as
"bf", version 10001 (1.0.1), and adds the ACL category "bloom".
"""

MODULE = {"name": "bf", "ver": 10001, "path": "/usr/lib/valkey/libvalkey_bloom.so", "args": [],
          "options": ["handle-io-errors"]}   # INFO modules' options= (the module sets HANDLE_IO_ERRORS)
CATEGORIES = ("bloom",)

_KEY_SPEC = [{"flags": ["rw", "access", "update"], "begin_search": {"index": {"pos": 1}},
              "find_keys": {"range": {"lastkey": 0, "step": 1, "limit": 0}}}]
_KEY = {"name": "key", "type": "key", "key_spec_index": 0}


def _cmd(name, flags, acl, arguments):
    # "display": the name as the module declared it; "module_arguments": its documentation's grammar, kept for
    # reference (COMMAND DOCS shows a Valkey's: group and module only, the module registers no command info)
    return {"name": name.lower(), "display": name, "module": MODULE["name"], "arity": -1,
            "flags": flags + ["module"], "acl": acl, "key_specs": _KEY_SPEC, "group": "module",
            "doc_flags": [], "module_arguments": [_KEY] + arguments}


_WRITE = ["write", "denyoom", "fast"]
_WRITE_ACL = ["fast", "write", "bloom"]
_READ = ["readonly", "fast"]
_READ_ACL = ["fast", "read", "bloom"]
_ITEM = {"name": "item", "type": "string"}
_ITEMS = {"name": "item", "type": "string", "multiple": True}

SPEC = {
    "bf.add": _cmd("BF.ADD", _WRITE, _WRITE_ACL, [_ITEM]),
    "bf.madd": _cmd("BF.MADD", _WRITE, _WRITE_ACL, [_ITEMS]),
    "bf.exists": _cmd("BF.EXISTS", _READ, _READ_ACL, [_ITEM]),
    "bf.mexists": _cmd("BF.MEXISTS", _READ, _READ_ACL, [_ITEMS]),
    "bf.card": _cmd("BF.CARD", _READ, _READ_ACL, []),
    "bf.reserve": _cmd("BF.RESERVE", _WRITE, _WRITE_ACL, [
        {"name": "error_rate", "type": "double"},
        {"name": "capacity", "type": "integer"},
        {"name": "scaling", "type": "oneof", "optional": True, "arguments": [
            {"name": "expansion", "type": "integer", "token": "EXPANSION"},
            {"name": "nonscaling", "type": "pure-token", "token": "NONSCALING"}]}]),
    "bf.info": _cmd("BF.INFO", _READ, _READ_ACL, [
        {"name": "field", "type": "oneof", "optional": True, "arguments": [
            {"name": name.lower(), "type": "pure-token", "token": name}
            for name in ("CAPACITY", "SIZE", "FILTERS", "ITEMS", "EXPANSION", "ERROR", "TIGHTENING",
                         "MAXSCALEDCAPACITY")]}]),
    "bf.insert": _cmd("BF.INSERT", _WRITE, _WRITE_ACL, [
        {"name": "capacity", "type": "integer", "token": "CAPACITY", "optional": True},
        {"name": "error", "type": "double", "token": "ERROR", "optional": True},
        {"name": "expansion", "type": "integer", "token": "EXPANSION", "optional": True},
        {"name": "seed", "type": "string", "token": "SEED", "optional": True},
        {"name": "tightening", "type": "double", "token": "TIGHTENING", "optional": True},
        {"name": "validatescaleto", "type": "integer", "token": "VALIDATESCALETO", "optional": True},
        {"name": "nonscaling", "type": "pure-token", "token": "NONSCALING", "optional": True},
        {"name": "nocreate", "type": "pure-token", "token": "NOCREATE", "optional": True},
        {"name": "item", "type": "string", "token": "ITEMS", "optional": True, "multiple": True}]),
    # the module's AOF rewrite form: BF.LOAD key <its bincode serialization>; "write deny-oom", not fast
    "bf.load": _cmd("BF.LOAD", ["write", "denyoom"], ["write", "bloom"], [{"name": "data", "type": "string"}]),
}
