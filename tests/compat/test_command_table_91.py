"""durakv's whole command table against Valkey 9.1.2's (the `valkey91` oracle): for every entry of 9.1.2's COMMAND
LIST, COMMAND INFO and COMMAND DOCS, and COMMAND COUNT / LIST / the full COMMAND, in RESP2 and RESP3, compared on
their RESP types too (a status is not a bulk string, a set not an array: wire_util.TypedConnection); and COMMAND
GETKEYS / GETKEYSANDFLAGS for argument lists of every key-spec kind (index, keyword, unknown; range, keynum) and
their errors.

What is normalized, and why (nothing else is):
- Free text. durakv carries Valkey's facts, never its prose (scripts/gen_command_spec.py): where Valkey answers a
  summary, a complexity, an argument's summary, a key spec's notes or a history entry's change, durakv answers the
  same field with an empty string. The oracle's text is blanked before comparing; durakv's must already be empty,
  and every such field must be where Valkey has it.
- The order of subcommands (COMMAND INFO's 10th element, COMMAND DOCS' `subcommands` map) and of the entries of a
  reply about the whole table (COMMAND, COMMAND INFO / DOCS / LIST with no names): Valkey lists them in the order
  of its hash tables, which is no fact of the table. They are compared sorted by name.
"""

import pytest

from durakv.commands.spec import SPEC as VALKEY_SPEC
from durakv.commands.specs import SPEC
from helpers.wire import TypedConnection

PROSE = (b"summary", b"complexity", b"notes")
# The commands that are not Valkey 9.1.2's own: the valkey-bundle modules' durakv serves natively (flagged
# `module`, as Valkey's COMMAND INFO shows a module's) and durakv's own DURAKV (the operator tools' membership
# words). The oracle is a Valkey 9.1.2 that loads no module, so the whole-table answers are compared without them
# (each is tested on its own).
MODULE_COMMANDS = {name.encode() for name in SPEC if name not in VALKEY_SPEC}
MODULE_COMMANDS |= {("%s|%s" % (name, sub)).encode() for name, spec in SPEC.items() if name not in VALKEY_SPEC
                    for sub in spec.get("subcommands", ())}       # JSON.DEBUG|MEMORY ... (COMMAND LIST shows them)


def _no_modules(names):
    return [n for n in names if n.lower() not in MODULE_COMMANDS]


def _no_module_entries(entries):
    return [e for e in entries if e[0].lower() not in MODULE_COMMANDS]


def _blank(x):
    """The reply with Valkey's free text replaced by empty strings (see the module docstring)."""
    if isinstance(x, tuple) and x[0] == "%":
        return ("%", [[k, _blank_value(k, v)] for k, v in x[1]])
    if isinstance(x, tuple) and len(x) == 2 and isinstance(x[1], list):
        return (x[0], [_blank(e) for e in x[1]])
    if isinstance(x, list):   # in RESP2 a map is a flat list of keys and values
        out = [_blank(e) for e in x]
        for i in range(0, len(x) - 1, 2):
            if x[i] in PROSE or x[i] == b"history":
                out[i + 1] = _blank_value(x[i], x[i + 1])
        return out
    return x


def _blank_value(key, value):
    if key in PROSE and isinstance(value, bytes):
        return b""
    if key == b"history":     # [version, change] pairs (a set of them in RESP3): the version is a fact
        if isinstance(value, tuple):
            return (value[0], [[entry[0], b""] for entry in value[1]])
        return [[entry[0], b""] for entry in value]
    return _blank(value)


def _by_name(items):
    return sorted(items, key=lambda e: e[0] if isinstance(e, list) else e)


def _canon(x):
    """Subcommands in name order (see the module docstring)."""
    if isinstance(x, list):
        if len(x) == 10 and isinstance(x[0], bytes) and isinstance(x[1], int):    # a COMMAND INFO entry
            return [_canon(e) for e in x[:9]] + [_by_name(_canon(e) for e in x[9])]
        out = [_canon(e) for e in x]
        for i in range(0, len(out) - 1, 2):
            if out[i] == b"subcommands":     # RESP2: a flat map
                pairs = _by_name([k, v] for k, v in zip(out[i + 1][::2], out[i + 1][1::2]))
                out[i + 1] = [e for pair in pairs for e in pair]
        return out
    if isinstance(x, tuple) and x[0] == "%":
        pairs = [[_canon(k), _canon(v)] for k, v in x[1]]
        for pair in pairs:
            if pair[0] == b"subcommands":
                pair[1] = ("%", _by_name(pair[1][1]))
        return ("%", pairs)
    if isinstance(x, tuple) and len(x) == 2 and isinstance(x[1], list):
        return (x[0], [_canon(e) for e in x[1]])
    return x


def _flat_pairs(reply):
    """A whole-table map reply's [name, value] pairs, in either protocol."""
    if isinstance(reply, tuple):
        return reply[1]
    return [[k, v] for k, v in zip(reply[::2], reply[1::2])]


@pytest.fixture(scope="module", params=[2, 3], ids=["resp2", "resp3"])
def conns(request, shared_server, valkey91):
    """(durakv, Valkey 9.1.2) typed connections in one protocol."""
    ours = TypedConnection(shared_server.port, request.param)
    theirs = TypedConnection(valkey91.port, request.param)
    yield ours, theirs
    ours.close()
    theirs.close()


@pytest.fixture(scope="module")
def valkey_names(valkey91):
    """Every entry of 9.1.2's COMMAND LIST (commands and subcommands)."""
    with TypedConnection(valkey91.port) as c:
        names = c.call("COMMAND", "LIST")
    assert len(names) > 390
    return sorted(names)


def test_command_count_and_list_are_valkey_91s(conns, valkey_names):
    ours, theirs = conns
    assert ours.call("COMMAND", "COUNT") - len([n for n in MODULE_COMMANDS if b"|" not in n]) == \
        theirs.call("COMMAND", "COUNT")
    assert sorted(_no_modules(ours.call("COMMAND", "LIST"))) == valkey_names
    categories = theirs.call("ACL", "CAT")
    assert len(categories) == 21
    for cat in categories:
        assert sorted(_no_modules(ours.call("COMMAND", "LIST", "FILTERBY", "ACLCAT", cat))) == \
            sorted(theirs.call("COMMAND", "LIST", "FILTERBY", "ACLCAT", cat)), cat
    for pattern in ("*", "cluster|*", "h*", "*ex*", "COMMAND*"):
        assert sorted(_no_modules(ours.call("COMMAND", "LIST", "FILTERBY", "PATTERN", pattern))) == \
            sorted(theirs.call("COMMAND", "LIST", "FILTERBY", "PATTERN", pattern)), pattern


def test_command_info_of_every_command(conns, valkey_names):
    ours, theirs = conns
    for name in valkey_names:
        assert _canon(ours.call("COMMAND", "INFO", name)) == _canon(_blank(theirs.call("COMMAND", "INFO", name))), \
            name
    # several names at once, in request order, an unknown one and a container's unknown subcommand as nulls
    args = ("COMMAND", "INFO", "get", "nosuch", "config|get", "config|nosuch", "get|x", "a|b|c", "SET")
    assert _canon(ours.call(*args)) == _canon(_blank(theirs.call(*args)))


def test_command_and_command_info_of_the_whole_table(conns):
    ours, theirs = conns
    for args in (("COMMAND",), ("COMMAND", "INFO")):
        mine = _by_name(_no_module_entries(_canon(ours.call(*args))))
        valkey = _by_name(_canon(_blank(theirs.call(*args))))
        assert [e[0] for e in mine] == [e[0] for e in valkey]
        assert mine == valkey


def test_command_docs_of_every_command(conns, valkey_names):
    ours, theirs = conns
    for name in valkey_names:
        assert _canon(ours.call("COMMAND", "DOCS", name)) == _canon(_blank(theirs.call("COMMAND", "DOCS", name))), \
            name
    args = ("COMMAND", "DOCS", "set", "nosuch", "client|kill", "get|x", "GEORADIUS")
    assert _canon(ours.call(*args)) == _canon(_blank(theirs.call(*args)))


def test_command_docs_of_the_whole_table(conns):
    ours, theirs = conns
    mine = _by_name(_no_module_entries(_flat_pairs(_canon(ours.call("COMMAND", "DOCS")))))
    valkey = _by_name(_flat_pairs(_canon(_blank(theirs.call("COMMAND", "DOCS")))))
    assert [k for k, _ in mine] == [k for k, _ in valkey]
    assert mine == valkey


# COMMAND GETKEYS / GETKEYSANDFLAGS: an argument list for every key-spec kind and the commands whose keys need more
# than their specs (getkeys_proc: SORT, MIGRATE, EVAL/FCALL, GEORADIUS STORE, ...), and the errors.
GETKEYS_CASES = [
    "GET k", "SET k v", "SET k v GET", "SET k v EX 10 NX", "MSET a 1 b 2 c 3", "MSETEX 2 a 1 b 2 EX 10",
    "DEL a b c", "RENAME a b", "COPY a b", "LMOVE a b LEFT RIGHT", "OBJECT ENCODING k", "MEMORY USAGE k",
    "XINFO STREAM s", "BITFIELD k GET u8 0", "BITFIELD k SET u8 0 1", "BITFIELD_RO k GET u8 0", "PFCOUNT a b",
    "HSETEX h FIELDS 1 f v", "HGETEX h FIELDS 1 f", "HEXPIRE h 10 FIELDS 1 f", "DELIFEQ k v", "GETEX k EX 5",
    "XADD s * f v", "BLPOP a b 0",
    # keynum
    "ZUNIONSTORE dst 2 a b WEIGHTS 1 2", "ZUNION 2 a b", "ZINTERCARD 2 a b LIMIT 1", "SINTERCARD 3 a b c",
    "LMPOP 2 a b LEFT", "BLMPOP 0 2 a b RIGHT COUNT 2", "ZMPOP 1 z MIN", "BZMPOP 1 2 a b MAX",
    "EVAL return 2 k1 k2 a1", "EVAL return 0", "EVAL_RO return 1 k", "EVALSHA abc 1 k", "FCALL f 1 k a",
    "FCALL_RO f 2 a b", "ZDIFFSTORE d 2 a b",
    # keyword
    "XREAD COUNT 2 STREAMS s1 s2 0 0", "XREAD STREAMS s 0", "XREADGROUP GROUP g c COUNT 1 STREAMS s1 s2 > >",
    "XREADGROUP GROUP g c STREAMS s >", "GEORADIUS k 0 0 1 km STORE dst", "GEORADIUS k 0 0 1 km STOREDIST dd",
    "GEORADIUS k 0 0 1 km", "GEORADIUSBYMEMBER k m 1 km STORE dst", "GEOSEARCHSTORE d s FROMMEMBER m BYRADIUS 1 km",
    # unknown specs: SORT's BY/GET, MIGRATE's KEYS
    "SORT k", "SORT k BY w STORE dst", "SORT k STORE dst LIMIT 0 1", "SORT_RO k BY w", "SORT k GET # STORE d",
    "MIGRATE h 6379 k 0 5000", "MIGRATE h 6379 \"\" 0 5000 KEYS a b", "MIGRATE h 6379 \"\" 0 5000 COPY KEYS a",
    # not_key specs (sharded channels) and no mandatory keys
    "SPUBLISH ch msg", "SSUBSCRIBE a b", "SUNSUBSCRIBE", "CLUSTERSCAN 0",
    # errors: no key arguments, unknown command, wrong arity, numkeys past the end or negative
    "PING", "CLUSTER INFO", "NOSUCH k", "CONFIG NOSUCH", "SET k", "GET", "EVAL s 5 a", "EVAL s -1 a",
    "ZUNIONSTORE d 3 a b", "LMPOP 0 a LEFT", "XREAD STREAMS", "MIGRATE h 6379 k 0", "OBJECT",
]


def _split(case):
    return [b"" if w == '""' else w.encode() for w in case.split()]


@pytest.mark.parametrize("sub", ["GETKEYS", "GETKEYSANDFLAGS"])
def test_command_getkeys_of_every_key_spec_kind(conns, sub):
    ours, theirs = conns
    for case in GETKEYS_CASES:
        args = ("COMMAND", sub, *_split(case))
        assert ours.call(*args) == theirs.call(*args), case
    # the texts of the errors, literally
    assert ours.call("COMMAND", sub, "PING") == ("-", b"ERR The command has no key arguments")
    assert ours.call("COMMAND", sub, "NOSUCH", "k") == ("-", b"ERR Invalid command specified")
    # GETKEYS with nothing to look at is its own arity error
    assert ours.call("COMMAND", sub) == theirs.call("COMMAND", sub) == \
        ("-", b"ERR wrong number of arguments for 'command|%s' command" % sub.lower().encode())


# What the 9.1 facts changed in behaviour, against the oracle: CLIENT REPLY became no_multi (and every no_multi
# refusal names the command), SCRIPT DEBUG took an optional engine (arity -3).
FALLOUT_CASES = [
    ("MULTI",), ("MULTI",), ("SHUTDOWN",), ("WATCH", "x"), ("Client", "REPLY", "on"), ("DISCARD",),
    ("SCRIPT", "DEBUG", "NO"), ("SCRIPT", "DEBUG", "no", "Lua"), ("SCRIPT", "DEBUG", "NO", "x"),
    ("SCRIPT", "DEBUG", "NO", ""), ("SCRIPT", "DEBUG", "maybe", "x"), ("SCRIPT", "DEBUG", "maybe", "lua"),
    ("SCRIPT", "DEBUG", "YES", "x"), ("SCRIPT", "DEBUG", "no", "x", "y"), ("SCRIPT", "DEBUG"), ("SCRIPT", "HELP"),
]


def test_behaviour_the_91_facts_changed(conns):
    ours, theirs = conns
    for args in FALLOUT_CASES:
        assert ours.call(*args) == theirs.call(*args), args
