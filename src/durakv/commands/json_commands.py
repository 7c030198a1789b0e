"""JSON documents: the 23 commands of valkey-json 1.0.2 (module "json", type "ReJSON-RL").

Replies, errors, the legacy-vs-JSONPath reply shapes and the limits follow valkey-json's json.cc and dom.cc;
paths are evaluated by keyspace/jsonpath.py, documents are keyspace/jsondoc.py's JsonDoc.

Effects: a write propagates itself (valkey-json's ValkeyModule_ReplicateVerbatim): every JSON write is a
deterministic function of the document and its arguments, so replaying the command rebuilds the same
document, and the journal holds a small command however large the document. JSON.FORGET is journaled as
JSON.DEL (the same command). What could make a replay differ is kept out of it: the limits
(json.max-document-size, json.max-path-limit) are not checked while replaying (valkey-json skips the size
limit on replicated commands too), and a command that fails changes nothing (valkey-json can leave a
document partly changed when ARRINSERT, NUMINCRBY or NUMMULTBY fail on the second of several selected values,
without replicating it; here every value is checked before any is changed). Keyspace events follow from the
effects: class generic ("g"), named after the command (json.set, json.del, json.numincrby, ...), as
valkey-json notifies VALKEYMODULE_NOTIFY_GENERIC.
"""

import math
from decimal import Decimal

from .. import messages
from ..errors import CommandError
from ..keyspace.events import GENERIC
from ..keyspace.jsondoc import (DOC_HEADER_BYTES, INT64_MAX, INT64_MIN, NESTING_CEILING, VALUE_BYTES, Format,
                                JFloat, JsonDoc, JsonError, count_fields, dumps, element_size, encode_string,
                                equal, format_double, is_number, jsize, make_double, member_size, number_value,
                                parse, path_depth, to_bytes, type_name, utf8_len, value_depth, write)
from ..keyspace.jsonpath import (NONODE, SYNTAX_ERRORS, Selector, delete_order, get_at, has_v2_path,
                                 is_root_path, parent_of, shared_get)
from ..protocol.numbers import strtol_whole
from ..protocol.resp import OK, Raw
from .args import ArgCursor
from .base import parse_int
from .registry import command

_ERR = messages.JSON_ERRORS
_INF = float("inf")


class _Fail(Exception):
    """A valkey-json error code raised inside a handler (turned into its reply by _run)."""

    def __init__(self, code):
        super().__init__(code)
        self.code = code


def _error(code):
    return CommandError(_ERR[code])


def _wrong_arity(args):
    # ValkeyModule_WrongArity names the command as the client typed it
    return CommandError(messages.WRONG_ARITY.format(args[0].decode("utf-8", "replace")))


def _path(arg: bytes) -> str:
    """A path argument as valkey-json reads it: a C string (up to a NUL byte)."""
    nul = arg.find(b"\x00")
    if nul >= 0:
        arg = arg[:nul]
    return arg.decode("utf-8", "surrogateescape")


class _Limits:
    __slots__ = ("max_size", "max_depth")

    def __init__(self, max_size, max_depth):
        self.max_size = max_size
        self.max_depth = max_depth


_NO_LIMITS = _Limits(0, NESTING_CEILING)


def _limits(ctx):
    """json.max-document-size and json.max-path-limit, or none while replaying the journal (what was accepted
    once is applied again whatever the configuration says now)."""
    if ctx.replaying:
        return _NO_LIMITS
    services = ctx.services
    config = services.config if services is not None else None
    if config is None:
        return _Limits(0, 128)
    return _Limits(config["json.max-document-size"], config["json.max-path-limit"])


def _parse_value(data: bytes, limits):
    try:
        return parse(data, limits.max_depth)
    except JsonError as exc:
        raise _error(exc.code) from None


def _check_size(limits, current, added):
    if limits.max_size and current + added > limits.max_size:
        raise _error("LIMIT_SIZE")


def _check_path_depth(limits, selector, value):
    if selector.max_path_depth + value_depth(value) > limits.max_depth:
        raise _error("LIMIT_DEPTH")


def _read_doc(ctx, key):
    """The document at key, None if there is none; WRONGTYPE for another type."""
    value = ctx.lookup(key)
    if value is None:
        return None
    if type(value) is not JsonDoc:
        raise _error("NOT_A_DOCUMENT")
    return value


def _write_doc(ctx, key):
    """The document at key for a write that needs one: NONEXISTENT when there is none."""
    doc = _read_doc(ctx, key)
    if doc is None:
        raise _error("DOC_KEY_NOT_FOUND")
    return doc


class _Whole:
    """What a Selector selects for the root paths "." and "$" (the whole document), without running one."""
    __slots__ = ("is_v2", "result")
    max_path_depth = 0          # the root is no level down (the path limit counts the value's own nesting)

    def __init__(self, root, is_v2):
        self.is_v2 = is_v2
        self.result = [(root, ())]

    def values(self):
        return [self.result[0][0]]

    def unique(self):
        return self.result


def _select(doc, path, syntax_only=True):
    """A READ selector over the document; the error it met raised when it fails the command: always for a
    legacy path, only syntax errors for JSONPath (syntax_only) or any error (syntax_only False)."""
    if path == "." or path == "$":
        return _Whole(doc.root, path == "$")
    sel = Selector()
    rc = sel.get_values(doc.root, path)
    if rc is not None and (not sel.is_v2 or not syntax_only or rc in SYNTAX_ERRORS):
        raise _error(rc)
    return sel


def _legacy_require(sel, values, wanted):
    """A legacy path must select something, and something of the wanted kind."""
    if not sel.is_v2:
        if not values:
            raise _error("PATH_NOT_EXIST")
        if not any(wanted(v) for v in values):
            raise _error(_WANTED_ERRORS[wanted])


def _is_str(v):
    return type(v) is str


def _is_dict(v):
    return type(v) is dict


def _is_list(v):
    return type(v) is list


def _is_bool(v):
    return type(v) is bool


_WANTED_ERRORS = {is_number: "NOT_NUMBER", _is_str: "NOT_STRING", _is_dict: "NOT_OBJECT", _is_list: "NOT_ARRAY",
                  _is_bool: "NOT_BOOL"}


def _replace_at(doc, path, new):
    """Puts new at path (which exists) and keeps the document's size; path () is the root."""
    if not path:
        old = doc.root
        doc.root = new
    else:
        parent, k = parent_of(doc.root, path)
        old = parent[k]
        parent[k] = new
    doc.size += jsize(new) - jsize(old)


def _propagate(ctx, args):
    """The write journals itself (ReplicateVerbatim) and names its keyspace event as valkey-json does
    (ValkeyModule_NotifyKeyspaceEvent, class generic): json.<command> on its key."""
    ctx.propagate_args(args)
    ctx.notify(GENERIC, b"json." + args[0].lower()[5:], args[1])


# -- JSON.SET / JSON.MSET ---------------------------------------------------------------------------------

@command("json.set")
def json_set(ctx, args):
    n = len(args)
    if n not in (4, 5):
        raise _wrong_arity(args)
    nx = xx = False
    if n == 5:
        cond = args[4].lower()
        if cond == b"nx":
            nx = True
        elif cond == b"xx":
            xx = True
        else:
            raise _error("SYNTAX")
    key = args[1]
    path = _path(args[2])
    limits = _limits(ctx)
    doc = _read_doc(ctx, key)
    root = is_root_path(path)
    if doc is None:
        if not root:
            raise CommandError(messages.JSON_NEW_KEY_PATH_NOT_ROOT)
        if xx:
            return None
    elif root and nx:
        return None
    if root:
        value = _parse_value(args[3], limits)
        new = JsonDoc(value)
        _check_size(limits, 0, new.size - DOC_HEADER_BYTES + VALUE_BYTES)
        ctx.store(key, new)          # ModuleTypeSetValue deletes the old value, TTL included
    else:
        outcome = _set_value(ctx, doc, path, args[3], nx, xx, limits)
        if outcome is None:
            return None
    _propagate(ctx, args)
    return OK


def _set_value(ctx, doc, path, text, nx, xx, limits, commit=True):
    """dom_set_value: prepares the write (raising its errors), then commits it unless commit is False.
    None when NX/XX says not to write."""
    sel = Selector()
    rc = sel.prepare_set(doc.root, path)
    if rc is not None:
        raise _error(rc)
    if nx and sel.result:
        return None
    if xx and sel.inserts:
        return None
    value = _parse_value(text, limits)
    _check_path_depth(limits, sel, value)
    _check_size(limits, doc.size, VALUE_BYTES + jsize(value))
    if not commit:
        return True
    # valkey-json's dom_set_value ignores what Selector::commit returns (a branch's "path does not exist", an
    # insert path that is not a valid JSON Pointer): the command answers OK whatever was written
    updates = sel.unique()
    if len(updates) == 1:
        p = updates[0][1]
        old = get_at(doc.root, p)
        _replace_at(doc, p, value)
        # valkey-json swaps the new value into a single update's place (JPointer::Swap), so the value it then
        # inserts at the paths that did not exist is the one it replaced
        value = old
    else:
        for _v, p in updates:
            if get_at(doc.root, p) is NONODE:
                continue        # an earlier update replaced what held it
            # a copy each time: the value must stay as given while later updates write into the tree
            _replace_at(doc, p, _copy(value))
    copies = False
    for p in sel.inserts:
        name = p[-1]
        new = _copy(value) if copies else value
        copies = True
        if "/" in name or "~" in name:
            # valkey-json appends the member name to the insert path's JSON Pointer unescaped, so a name with
            # "/" or "~" is read as pointer syntax ("b~1c" names "b/c", "x/y" is y inside x); the first that
            # does not parse ends the inserts
            tokens = _pointer_tokens(name)
            if tokens is None:
                break
            _pointer_set(doc, p[:-1] + tokens, new)
            continue
        parent = get_at(doc.root, p[:-1])
        if type(parent) is not dict:
            continue
        parent[name] = new
        doc.size += member_size(name, new)
    return True


def _pointer_tokens(text):
    """The reference tokens of a JSON Pointer's tail ("a~1b/c" -> ["a/b", "c"]); None when a "~" escape is
    invalid (RapidJSON's kPointerParseErrorInvalidEscape)."""
    tokens = []
    for part in text.split("/"):
        out = []
        i, n = 0, len(part)
        while i < n:
            c = part[i]
            if c == "~":
                if i + 1 >= n or part[i + 1] not in "01":
                    return None
                out.append("~" if part[i + 1] == "0" else "/")
                i += 2
                continue
            out.append(c)
            i += 1
        tokens.append("".join(out))
    return tuple(tokens)


def _pointer_index(token):
    if type(token) is int:
        return token
    if token.isascii() and token.isdigit() and (len(token) == 1 or token[0] != "0"):
        return strtol_whole(token.encode())
    return None


def _pointer_set(doc, tokens, value):
    """RapidJSON's GenericPointer::Set: walks the tokens from the root creating what is missing (an object
    for a name, an array for an index, nulls to pad an array, a scalar or array turned into an object where a
    name must go) and assigns the value at the end. The size is measured again afterwards."""
    holder = [doc.root]
    container, key = holder, 0
    for token in tokens:
        v = container[key]
        index = _pointer_index(token)
        if type(v) is list and token == "-":
            v.append(None)
            container, key = v, len(v) - 1
            continue
        if index is None:
            if type(v) is not dict:
                v = container[key] = {}
        elif type(v) is not list and type(v) is not dict:
            v = container[key] = []
        if type(v) is list:
            while index >= len(v):
                v.append(None)
            container, key = v, index
        else:
            name = token if type(token) is str else str(token)
            if name not in v:
                v[name] = None
            container, key = v, name
    container[key] = value
    doc.root = holder[0]
    doc.size = doc.measure()


def _copy(v):
    from ..keyspace.jsondoc import copy_value
    return copy_value(v)


@command("json.mset")
def json_mset(ctx, args):
    n = len(args)
    if (n - 1) % 3:
        raise _wrong_arity(args)
    limits = _limits(ctx)
    ops = []
    for i in range(1, n, 3):
        key, path, text = args[i], _path(args[i + 1]), args[i + 2]
        doc = _read_doc(ctx, key)
        root = is_root_path(path)
        if doc is None and not root:
            raise _error("SYNTAX")
        if root:
            value = _parse_value(text, limits)
            _check_size(limits, 0, VALUE_BYTES + jsize(value))
        else:
            _set_value(ctx, doc, path, text, False, False, limits, commit=False)
        ops.append((key, path, text, root))
    # applied one by one, each against the key as the ones before it left it; an op that no longer applies
    # (an earlier one changed the document's shape) is skipped (valkey-json after its fix #112)
    for key, path, text, root in ops:
        if root:
            try:
                value = parse(text, limits.max_depth)
            except JsonError:
                continue
            ctx.store(key, JsonDoc(value))
        else:
            doc = ctx.lookup(key)
            if type(doc) is not JsonDoc:
                continue
            try:
                _set_value(ctx, doc, path, text, False, False, limits)
            except CommandError:
                continue
        ctx.notify(GENERIC, b"json.mset", key)
    ctx.propagate_args(args)
    return OK


# -- JSON.GET / JSON.MGET ----------------------------------------------------------------------------------

_FORMAT_OPTIONS = {b"newline": "newline", b"space": "space", b"indent": "indent"}


@command("json.get")
def json_get(ctx, args):
    fmt = Format()
    paths = []
    c = ArgCursor(args, 2)
    while c:
        arg = c.next()
        token = arg.lower()
        option = _FORMAT_OPTIONS.get(token)
        if option is not None:
            if not c:
                raise _error("SYNTAX")
            setattr(fmt, option, _path(c.next()))
        elif token == b"noescape":
            pass        # legacy, a no-op in valkey-json
        else:
            paths.append(_path(arg))
    doc = _read_doc(ctx, args[1])
    if doc is None:
        return None
    out = []
    if len(paths) <= 1:
        _get_one(doc, paths[0] if paths else ".", fmt, out.append)
    else:
        _get_many(doc, paths, fmt, out.append)
    return to_bytes("".join(out))


def _get_one(doc, path, fmt, out):
    """dom_get_value_as_str: a legacy path's first value, or a JSONPath's values as an array."""
    sel = _select(doc, path)
    values = sel.values()
    if not sel.is_v2:
        if not values:
            raise _error("PATH_NOT_EXIST")
        write(values[0], fmt, out)
        return
    if not values:
        out("[]")
        return
    _array_text(values, fmt, out)


def _array_text(values, fmt, out):
    custom = fmt is not None and fmt.custom()
    out("[")
    if custom and fmt.newline:
        out(fmt.newline)
    last = len(values) - 1
    for i, v in enumerate(values):
        if custom and fmt.indent:
            out(fmt.indent)
        write(v, fmt, out, 1)
        if i < last:
            out(",")
        if custom and fmt.newline:
            out(fmt.newline)
    out("]")


def _get_many(doc, paths, fmt, out):
    """dom_get_values_as_str: an object with one member per path; JSONPath replies when any path is one."""
    v2 = has_v2_path(paths)
    custom = fmt.custom()
    nl, ind, sp = (fmt.newline or ""), (fmt.indent or ""), (fmt.space or "")
    out("{")
    if custom:
        out(nl)
    last = len(paths) - 1
    for i, path in enumerate(paths):
        sel = Selector(force_v2=v2)
        rc = sel.get_values(doc.root, path)
        if rc is not None and (not v2 or rc in SYNTAX_ERRORS):
            raise _error(rc)
        values = sel.values()
        if custom:
            out(ind)
        out(encode_string(path))
        out(":")
        if custom:
            out(sp)
        if not v2:
            if not values:
                raise _error("PATH_NOT_EXIST")
            write(values[0], fmt, out, 1)
        else:
            out("[")
            if custom:
                out(nl)
            vlast = len(values) - 1
            for j, v in enumerate(values):
                if custom:
                    out(ind)
                    out(ind)
                write(v, fmt, out, 2)
                if j < vlast:
                    out(",")
                if custom:
                    out(nl)
            if custom:
                out(ind)
            out("]")
        if i < last:
            out(",")
        if custom:
            out(nl)
    out("}")


@command("json.mget")
def json_mget(ctx, args):
    path = _path(args[-1])
    replies = []
    for key in args[1:-1]:
        doc = _read_doc(ctx, key)
        if doc is None:
            replies.append(None)
            continue
        out = []
        try:
            _get_one(doc, path, None, out.append)
        except CommandError as exc:
            # a missing key or path is a null; any other failure fails the command
            if exc.text not in (_ERR["INVALID_PATH"], _ERR["PATH_NOT_EXIST"]):
                raise
            replies.append(None)
            continue
        text = "".join(out)
        replies.append(to_bytes(text) if text else None)
    return replies


# -- JSON.DEL / JSON.FORGET ---------------------------------------------------------------------------------

@command("json.del")
def json_del(ctx, args):
    if len(args) not in (2, 3):
        raise _wrong_arity(args)
    key = args[1]
    path = _path(args[2]) if len(args) == 3 else "."
    doc = _read_doc(ctx, key)
    if doc is None:
        return 0
    effect = (b"JSON.DEL",) + tuple(args[1:])
    if is_root_path(path):
        ctx.delete(key)
        ctx.propagate(*effect)
        ctx.notify(GENERIC, b"json.del", key)
        return 1
    sel = Selector()
    rc = sel.delete_values(doc.root, path)
    if rc is not None:
        if rc in ("INVALID_PATH", "PATH_NOT_EXIST"):
            return 0
        raise _error(rc)
    if not sel.result:
        # a JSONPath that selected nothing: nothing deleted, but the command ran (and is replicated)
        ctx.propagate(*effect)
        ctx.notify(GENERIC, b"json.del", key)
        return 0
    deleted = 0
    paths = [p for _v, p in sel.result]
    if len(paths) > 1:
        paths = delete_order(set(paths))
    for p in paths:
        if not p:
            continue        # the root is not deleted through a path (JSON Pointer "" cannot be erased)
        found = parent_of(doc.root, p)
        if found is None:
            continue
        parent, k = found
        old = parent[k]
        if type(parent) is dict:
            del parent[k]
            doc.size -= member_size(k, old)
        else:
            del parent[k]
            doc.size -= element_size(old)
        deleted += 1
    ctx.propagate(*effect)
    ctx.notify(GENERIC, b"json.del", key)
    return deleted


@command("json.forget")
def json_forget(ctx, args):
    return json_del(ctx, args)


# -- numbers ---------------------------------------------------------------------------------------------------

def _number_arg(args):
    try:
        value = parse(args[3], NESTING_CEILING)
    except JsonError:
        raise _error("VALUE_NOT_NUMBER") from None
    if not is_number(value):
        raise _error("VALUE_NOT_NUMBER")
    return value


def _num_op(ctx, args, multiply):
    if len(args) != 4:
        raise _wrong_arity(args)
    operand = _number_arg(args)
    doc = _write_doc(ctx, args[1])
    sel = _select(doc, _path(args[2]), syntax_only=False)
    values = sel.values()
    _legacy_require(sel, values, is_number)
    results = []
    changes = []
    for v, p in sel.unique():
        if not is_number(v):
            results.append(None)
            continue
        if multiply:
            res = number_value(v) * number_value(operand)
            if res in (_INF, -_INF):
                raise _error("MULT_OVERFLOW")
            if res == res and res == math.trunc(res) and INT64_MIN <= res < 2.0 ** 63:
                new = math.trunc(res)
            else:
                new = make_double(res, format_double(res))
        else:
            new = None
            if type(v) is int and type(operand) is int:
                total = v + operand
                if INT64_MIN <= total <= INT64_MAX:
                    new = res = total
            if new is None:
                res = number_value(v) + number_value(operand)
                if res in (_INF, -_INF):
                    raise _error("ADD_OVERFLOW")
                new = make_double(res, format_double(res))
        results.append(res)
        changes.append((p, new))
    # every value computed before any is written: an overflow changes nothing
    for p, new in changes:
        _replace_at(doc, p, new)
    _propagate(ctx, args)
    if not sel.is_v2:
        for res in reversed(results):
            if res is not None:
                return to_bytes(format_double(float(res)))
    return to_bytes("[" + ",".join("null" if r is None else format_double(float(r)) for r in results) + "]")


@command("json.numincrby")
def json_numincrby(ctx, args):
    return _num_op(ctx, args, multiply=False)


@command("json.nummultby")
def json_nummultby(ctx, args):
    return _num_op(ctx, args, multiply=True)


# -- strings ------------------------------------------------------------------------------------------------------

def _simple_args(args):
    """parseSimpleCmdArgs: key and an optional path (the root by default)."""
    if len(args) not in (2, 3):
        raise _wrong_arity(args)
    return args[1], (_path(args[2]) if len(args) == 3 else ".")


def _lengths_reply(sel, lengths, first=True):
    """reply_strlen_objlen / reply_array_command: a legacy path's first (or last) length, else the array."""
    if not sel.is_v2:
        seq = lengths if first else reversed(lengths)
        for n in seq:
            if n is not None:
                return n
    return lengths


@command("json.strlen")
def json_strlen(ctx, args):
    key, path = _simple_args(args)
    doc = _read_doc(ctx, key)
    if doc is None:
        return None
    sel = _select(doc, path)
    values = sel.values()
    _legacy_require(sel, values, _is_str)
    return _lengths_reply(sel, [utf8_len(v) if type(v) is str else None for v in values])


@command("json.strappend")
def json_strappend(ctx, args):
    n = len(args)
    if n not in (3, 4):
        raise _wrong_arity(args)
    path = _path(args[2]) if n == 4 else "."
    text = args[3] if n == 4 else args[2]
    doc = _write_doc(ctx, args[1])
    limits = _limits(ctx)
    _check_size(limits, doc.size, len(text))
    sel = _select(doc, path, syntax_only=False)
    values = sel.values()
    _legacy_require(sel, values, _is_str)
    try:
        suffix = parse(text, NESTING_CEILING)
    except JsonError as exc:
        raise _error(exc.code) from None
    if type(suffix) is not str:
        raise _error("VALUE_NOT_STRING")
    lengths = []
    for v, p in sel.unique():
        if type(v) is str:
            new = v + suffix
            _replace_at(doc, p, new)
            lengths.append(utf8_len(new))
        else:
            lengths.append(None)
    _propagate(ctx, args)
    return _lengths_reply(sel, lengths, first=False)


# -- booleans -------------------------------------------------------------------------------------------------------

@command("json.toggle")
def json_toggle(ctx, args):
    key, path = _simple_args(args)
    doc = _write_doc(ctx, key)
    sel = _select(doc, path)
    values = sel.values()
    _legacy_require(sel, values, _is_bool)
    out = []
    for v, p in sel.unique():
        if type(v) is bool:
            _replace_at(doc, p, not v)
            out.append(0 if v else 1)
        else:
            out.append(None)
    _propagate(ctx, args)
    if not sel.is_v2:
        for r in out:
            if r is not None:
                return b"true" if r else b"false"
    return out


# -- objects -----------------------------------------------------------------------------------------------------------

@command("json.objlen")
def json_objlen(ctx, args):
    key, path = _simple_args(args)
    doc = _read_doc(ctx, key)
    if doc is None:
        return None
    sel = _select(doc, path)
    values = sel.values()
    _legacy_require(sel, values, _is_dict)
    return _lengths_reply(sel, [len(v) if type(v) is dict else None for v in values])


@command("json.objkeys")
def json_objkeys(ctx, args):
    key, path = _simple_args(args)
    doc = _read_doc(ctx, key)
    if doc is None:
        return None
    sel = Selector()
    rc = sel.get_values(doc.root, path)
    if rc is not None and (not sel.is_v2 or rc in SYNTAX_ERRORS):
        if rc in ("INVALID_PATH", "PATH_NOT_EXIST"):
            return None
        raise _error(rc)
    values = sel.values()
    if not sel.is_v2:
        if not values:
            return None
        if not any(type(v) is dict for v in values):
            raise _error("NOT_OBJECT")
    key_lists = [[to_bytes(k) for k in v] if type(v) is dict else [] for v in values]
    if not sel.is_v2:
        for keys in key_lists:
            if keys:
                return keys
        return []
    return key_lists


# -- arrays ------------------------------------------------------------------------------------------------------------

@command("json.arrlen")
def json_arrlen(ctx, args):
    key, path = _simple_args(args)
    doc = _read_doc(ctx, key)
    if doc is None:
        return None
    sel = _select(doc, path)
    values = sel.values()
    _legacy_require(sel, values, _is_list)
    return _lengths_reply(sel, [len(v) if type(v) is list else None for v in values])


def _parse_values(texts, limits, sel, doc):
    """The values ARRAPPEND/ARRINSERT add, with the path and size limits checked for them."""
    values = []
    total = 0
    for text in texts:
        value = _parse_value(text, limits)
        _check_path_depth(limits, sel, value)
        total += VALUE_BYTES + jsize(value)
        values.append(value)
    _check_size(limits, doc.size, total)
    return values


@command("json.arrappend")
def json_arrappend(ctx, args):
    doc = _write_doc(ctx, args[1])
    limits = _limits(ctx)
    sel = _select(doc, _path(args[2]), syntax_only=False)
    values = sel.values()
    _legacy_require(sel, values, _is_list)
    new_values = _parse_values(args[3:], limits, sel, doc)
    lengths = []
    first = True
    for v, _p in sel.unique():
        if type(v) is list:
            for x in new_values:
                x = x if first else _copy(x)
                v.append(x)
                doc.size += element_size(x)
            first = False
            lengths.append(len(v))
        else:
            lengths.append(None)
    _propagate(ctx, args)
    return _lengths_reply(sel, lengths)


@command("json.arrinsert")
def json_arrinsert(ctx, args):
    index = parse_int(args[3], _ERR["VALUE_NOT_INTEGER"])
    doc = _write_doc(ctx, args[1])
    limits = _limits(ctx)
    sel = _select(doc, _path(args[2]), syntax_only=False)
    values = sel.values()
    _legacy_require(sel, values, _is_list)
    new_values = _parse_values(args[4:], limits, sel, doc)
    targets = sel.unique()
    positions = []
    for v, _p in targets:
        if type(v) is list:
            size = len(v)
            at = (0 if size == 0 else size + index) if index < 0 else index
            if at < 0 or at > size:
                raise _error("OUT_OF_BOUNDS")      # checked for every array before any is changed
            positions.append(at)
        else:
            positions.append(None)
    lengths = []
    first = True
    for (v, _p), at in zip(targets, positions):
        if at is None:
            lengths.append(None)
            continue
        items = new_values if first else [_copy(x) for x in new_values]
        first = False
        v[at:at] = items
        doc.size += sum(element_size(x) for x in items)
        lengths.append(len(v))
    _propagate(ctx, args)
    return _lengths_reply(sel, lengths)


@command("json.arrpop")
def json_arrpop(ctx, args):
    n = len(args)
    if n not in (2, 3, 4):
        raise _wrong_arity(args)
    path = _path(args[2]) if n > 2 else "."
    index = parse_int(args[3], _ERR["VALUE_NOT_INTEGER"]) if n > 3 else -1
    doc = _write_doc(ctx, args[1])
    sel = _select(doc, path, syntax_only=False)
    values = sel.values()
    _legacy_require(sel, values, _is_list)
    popped = []
    for v, _p in sel.unique():
        if type(v) is not list or not v:
            popped.append(None)
            continue
        size = len(v)
        at = (size + index) if index < 0 else index
        if at >= size:
            at = size - 1
        if at < 0:
            at = 0
        item = v.pop(at)
        doc.size -= element_size(item)
        popped.append(dumps(item))
    _propagate(ctx, args)
    if not sel.is_v2:
        for p in popped:
            if p is not None:
                return p
        return None
    return popped


@command("json.arrtrim")
def json_arrtrim(ctx, args):
    start = parse_int(args[3], _ERR["VALUE_NOT_INTEGER"])
    stop = parse_int(args[4], _ERR["VALUE_NOT_INTEGER"])
    doc = _write_doc(ctx, args[1])
    sel = _select(doc, _path(args[2]), syntax_only=False)
    values = sel.values()
    _legacy_require(sel, values, _is_list)
    lengths = []
    for v, _p in sel.unique():
        if type(v) is not list:
            lengths.append(None)
            continue
        size = len(v)
        if size:
            lo = max(start, 0)
            hi = min(stop, size - 1)
            if lo >= size or lo > hi:
                removed = v[:]
                del v[:]
            else:
                removed = v[hi + 1:] + v[:lo]
                del v[hi + 1:]
                del v[:lo]
            doc.size -= sum(element_size(x) for x in removed)
        lengths.append(len(v))
    _propagate(ctx, args)
    return _lengths_reply(sel, lengths)


@command("json.arrindex")
def json_arrindex(ctx, args):
    n = len(args)
    if n not in (4, 5, 6):
        raise _wrong_arity(args)
    start = parse_int(args[4], _ERR["VALUE_NOT_INTEGER"]) if n > 4 else 0
    stop = parse_int(args[5], _ERR["VALUE_NOT_INTEGER"]) if n > 5 else 0
    doc = _write_doc(ctx, args[1])
    sel = _select(doc, _path(args[2]))
    values = sel.values()
    _legacy_require(sel, values, _is_list)
    if start < 0:
        start = 0
    try:
        wanted = parse(args[3], NESTING_CEILING)
    except JsonError as exc:
        raise _error(exc.code) from None
    out = []
    for v in values:
        if type(v) is not list:
            out.append(None)
            continue
        size = len(v)
        if size == 0:
            out.append(-1)
            continue
        end = size if stop in (0, -1) else min(stop, size)
        found = -1
        if start <= end:
            for i in range(start, end):
                if equal(v[i], wanted):
                    found = i
                    break
        out.append(found)
    return _lengths_reply(sel, out)


# -- any value ---------------------------------------------------------------------------------------------------------------

_CLEARED = {bool: False, str: "", int: 0}


@command("json.clear")
def json_clear(ctx, args):
    key, path = _simple_args(args)
    doc = _write_doc(ctx, key)
    sel = Selector()
    rc = sel.get_values(doc.root, path)
    if rc is not None:
        raise _error(rc)
    cleared = 0
    for v, p in sel.unique():
        t = type(v)
        if t is list or t is dict:
            if v:
                doc.size -= jsize(v)
                v.clear()
                cleared += 1
        elif t is bool:
            if v:
                _replace_at(doc, p, False)
                cleared += 1
        elif t is str:
            if v:
                _replace_at(doc, p, "")
                cleared += 1
        elif t is int:
            if v != 0:
                _replace_at(doc, p, 0)
                cleared += 1
        elif t is float or t is JFloat:
            if number_value(v) != 0.0:
                _replace_at(doc, p, 0.0)          # SetDouble("0.0")
                cleared += 1
    _propagate(ctx, args)
    return cleared


@command("json.type")
def json_type(ctx, args):
    key, path = _simple_args(args)
    doc = _read_doc(ctx, key)
    if doc is None:
        return None
    sel = Selector()
    rc = sel.get_values(doc.root, path)
    if rc is not None and (not sel.is_v2 or rc in SYNTAX_ERRORS):
        if rc in ("INVALID_PATH", "PATH_NOT_EXIST"):
            return None
        raise _error(rc)
    values = sel.values()
    if not sel.is_v2:
        if not values:
            return None
        return type_name(values[0])
    return [type_name(v) for v in values]


@command("json.resp")
def json_resp(ctx, args):
    key, path = _simple_args(args)
    doc = _read_doc(ctx, key)
    if doc is None:
        return None
    sel = _select(doc, path)
    values = sel.values()
    if not values:
        if not sel.is_v2:
            raise _error("PATH_NOT_EXIST")
        return []
    if not sel.is_v2:
        values = values[:1]
    if max(path_depth(v) for v in values) > _RESP_NESTED_REPLY_MAX:
        # a reply nested as deep as the document: encoded here, level by level, since the generic reply
        # encoder recurses once per level of a reply and an object's member adds two
        out = [b"*%d\r\n" % len(values)] if sel.is_v2 else []
        for v in values:
            _resp_bytes(v, ctx.resp3, out)
        return Raw(b"".join(out))
    if sel.is_v2:
        return [_resp(v) for v in values]
    return _resp(values[0])


_RESP_NESTED_REPLY_MAX = 100


def _resp_bytes(v, resp3, out):
    """_resp's reply as RESP bytes (Valkey's encoding: simple strings for "{", "[", true and false)."""
    stack = [v]
    pop, push, w = stack.pop, stack.append, out.append
    while stack:
        x = pop()
        t = type(x)
        if t is dict:
            w(b"*%d\r\n+{\r\n" % (len(x) + 1))
            for k, y in reversed(list(x.items())):
                push(y)
                push(_Key(k))
        elif t is list:
            w(b"*%d\r\n+[\r\n" % (len(x) + 1))
            for y in reversed(x):
                push(y)
        elif t is _Key:
            k = to_bytes(x.name)
            w(b"*2\r\n$%d\r\n%s\r\n" % (len(k), k))
        elif t is str:
            b = to_bytes(x)
            w(b"$%d\r\n%s\r\n" % (len(b), b))
        elif t is bool:
            w(b"+true\r\n" if x else b"+false\r\n")
        elif t is int:
            w(b":%d\r\n" % x)
        elif t is float or t is JFloat:
            b = _rapidjson_dtoa(number_value(x))
            w(b"$%d\r\n%s\r\n" % (len(b), b))
        else:
            w(b"_\r\n" if resp3 else b"$-1\r\n")


class _Key:
    """A member name on _resp_bytes' stack (it opens the member's [key, value] pair)."""
    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name


def _resp(v):
    """dom_reply_with_resp: objects as ["{", [key, value] ...], arrays as ["[", ...], true/false as simple
    strings, integers as integers, doubles as bulk strings (RapidJSON's shortest text), strings as bulk."""
    t = type(v)
    if t is dict:
        out = ["{"]
        for k, x in v.items():          # loops, not comprehensions: one frame per level of a deep document
            out.append([to_bytes(k), _resp(x)])
        return out
    if t is list:
        out = ["["]
        for x in v:
            out.append(_resp(x))
        return out
    if t is str:
        return to_bytes(v)
    if t is bool:
        return "true" if v else "false"
    if t is int:
        return v
    if t is float or t is JFloat:
        return _rapidjson_dtoa(number_value(v))
    return None


def _rapidjson_dtoa(value: float) -> bytes:
    """RapidJSON's Writer::WriteDouble text (internal::dtoa with 324 decimal places, Grisu2 + Prettify): the
    shortest digits that read back as the value, decimal notation while the exponent allows (1.0, 0.001,
    12340000000.0), else d.ddde<exp> with no "+" (1e30, 1.5e-7)."""
    if value == 0:
        return b"-0.0" if math.copysign(1.0, value) < 0 else b"0.0"
    sign, digit_tuple, k = Decimal(repr(value)).normalize().as_tuple()
    digits = "".join(map(str, digit_tuple))
    length = len(digits)
    kk = length + k                  # 10^(kk-1) <= |value| < 10^kk
    if 0 <= k and kk <= 21:
        out = digits + "0" * k + ".0"
    elif 0 < kk <= 21:
        out = digits[:kk] + "." + digits[kk:]
    elif -6 < kk <= 0:
        out = "0." + "0" * (-kk) + digits
    elif kk < -324:
        out = "0.0"
    elif length == 1:
        out = digits + "e" + str(kk - 1)
    else:
        out = digits[0] + "." + digits[1:] + "e" + str(kk - 1)
    return (("-" if sign else "") + out).encode()


# -- JSON.DEBUG --------------------------------------------------------------------------------------------------------------

def _debug_doc(ctx, args):
    doc = _read_doc(ctx, args[2])
    return doc


def _debug_path(args):
    if len(args) not in (3, 4):
        raise _wrong_arity(args)
    return (_path(args[3]), False) if len(args) == 4 else (".", True)


def _debug_values_reply(sel, numbers):
    if not sel.is_v2:
        return numbers[0]
    return numbers


@command("json.debug|memory")
def json_debug_memory(ctx, args):
    path, default_path = _debug_path(args)
    doc = _debug_doc(ctx, args)
    if doc is None:
        return None
    if default_path:
        return doc.size
    sel = _select(doc, path)
    values = sel.values()
    if not sel.is_v2 and not values:
        raise _error("PATH_NOT_EXIST")
    root_path = is_root_path(path)
    return _debug_values_reply(sel, [DOC_HEADER_BYTES + jsize(v) if root_path else VALUE_BYTES + jsize(v)
                                     for v in values])


@command("json.debug|fields")
def json_debug_fields(ctx, args):
    path, _default = _debug_path(args)
    doc = _debug_doc(ctx, args)
    if doc is None:
        return None
    sel = _select(doc, path)
    values = sel.values()
    if not sel.is_v2 and not values:
        raise _error("PATH_NOT_EXIST")
    counts = []
    for v in values:
        count = count_fields(v)
        if type(v) in (dict, list):
            count -= 1
        counts.append(count)
    return _debug_values_reply(sel, counts)


@command("json.debug|depth")
def json_debug_depth(ctx, args):
    doc = _debug_doc(ctx, args)
    if doc is None:
        return None
    return path_depth(doc.root)


def _json_docs(ctx):
    for db in ctx.keyspace.dbs:
        for key, value in list(db.data.items()):
            if type(value) is JsonDoc and not ctx.keyspace.is_expired(db, key):
                yield db, key, value


def _largest(ctx, measure):
    best, name = 0, b""
    db = ctx.db
    for key, value in list(db.data.items()):
        if type(value) is JsonDoc and not ctx.keyspace.is_expired(db, key):
            m = measure(value)
            if m > best:
                best, name = m, key
    return [best, name.decode("utf-8", "surrogateescape")]


@command("json.debug|max-depth-key")
def json_debug_max_depth_key(ctx, args):
    return _largest(ctx, lambda doc: path_depth(doc.root))


@command("json.debug|max-size-key")
def json_debug_max_size_key(ctx, args):
    return _largest(ctx, lambda doc: doc.size)


def _member_names(v, counts):
    t = type(v)
    if t is dict:
        for k, x in v.items():
            counts[k] = counts.get(k, 0) + 1
            _member_names(x, counts)
    elif t is list:
        for x in v:
            _member_names(x, counts)


@command("json.debug|keytable-check")
def json_debug_keytable_check(ctx, args):
    """valkey-json counts the member-name handles of every document against its shared key table; durakv keeps
    names in each document (no shared table to drift), so the check is the walk: [handles, distinct names]."""
    counts = {}
    for _db, _key, doc in _json_docs(ctx):
        _member_names(doc.root, counts)
    return [sum(counts.values()), len(counts)]


@command("json.debug|test-shared-api")
def json_debug_test_shared_api(ctx, args):
    """valkey-json's test of SharedJSON_Get (jsonpath.shared_get, the interface valkey-search reads documents
    through): the compact JSON at a path of a document key."""
    if len(args) != 4:
        raise _wrong_arity(args)
    value = ctx.lookup(args[2])
    if value is None:
        raise CommandError(messages.JSON_TEST_SHARED_API_UNKNOWN_KEY)
    text = shared_get(value.root, _path(args[3])) if type(value) is JsonDoc else None
    if text is None:
        raise CommandError(messages.JSON_TEST_SHARED_API_INVALID_PATH)
    return text


_DEBUG_HELP = [
    "JSON.DEBUG MEMORY <key> [path] - report memory size (bytes). Without path reports document size without "
    "keys. With path reports size including keys",
    "JSON.DEBUG DEPTH <key> - report the maximum path depth of the JSON document.",
    "JSON.DEBUG FIELDS <key> [path] - report number of fields in the JSON element. Path defaults to root if not "
    "provided.",
    "JSON.DEBUG HELP - print help message.",
    "------- DANGER, LONG RUNNING COMMANDS, DON'T USE ON PRODUCTION SYSTEM --------",
    "JSON.DEBUG MAX-DEPTH-KEY - Find JSON key with maximum depth",
    "JSON.DEBUG MAX-SIZE-KEY  - Find JSON key with largest memory size",
    "JSON.DEBUG KEYTABLE-CHECK - Extended KeyTable integrity check",
    "JSON.DEBUG KEYTABLE-CORRUPT <name> - Intentionally corrupt KeyTable handle counts",
    "JSON.DEBUG KEYTABLE-DISTRIBUTION <topN> - Find and count topN longest runs in KeyTable",
    "JSON.DEBUG TEST-SHARED-API <key> <path> - Provide testing for Shared api interface for search",
]


@command("json.debug|help")
def json_debug_help(ctx, args):
    return list(_DEBUG_HELP)


# -- sizes for the rest of the server --------------------------------------------------------------------------------------

def json_memory_bytes(keyspace) -> int:
    """INFO json_core_metrics' total: the bytes of every document."""
    return sum(v.size for db in keyspace.dbs for v in db.data.values() if type(v) is JsonDoc)
