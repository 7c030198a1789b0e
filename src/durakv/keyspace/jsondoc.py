"""JSON documents (valkey-json's module type "ReJSON-RL"): the value, its text form and its RDB form.

A document is a JsonDoc holding a tree of Python values:

    null -> None       true/false -> True/False      string -> str (UTF-8, invalid bytes kept by surrogateescape)
    object -> dict     array -> list                 integer (int64) -> int
    other number -> float when its text is repr(float) (the commonest case), else JFloat (value + the text)

Numbers are kept as written, as valkey-json's RapidJSON does: an integer that fits in int64 is an integer, any
other number (a fraction, an exponent, an integer beyond int64) is a double that remembers its text and is
written back exactly so ("1.50" stays "1.50", "1E3" stays "1E3"). A double whose text is what Python's repr
gives (most of them: "1.5", "0.1", "1e+16") is a plain float, so that the C json encoder can write whole
documents; the rest are JFloat, which the encoder refuses and the Python writer below handles.

Text: parsing goes through Python's json scanner with hooks for numbers and with valkey-json's rules added
around it (no NaN/Infinity, lone surrogate escapes refused, nesting bounded before anything is parsed);
writing is compact (valkey-json's FastWrite) or formatted (RapidJSON's PrettyWriter with INDENT / NEWLINE /
SPACE), escaping what RapidJSON escapes (", \\, control characters, the latter as \\u00XX in capitals).

Size: `jsize(v)` is the heap bytes a value holds in RapidJSON's layout (16-byte values, strings and double
texts of more than 13 bytes allocated with their NUL, arrays 16 bytes per element, objects 24 bytes per member
plus the key's bytes). A document's `size` is kept up to date by every write (the deltas of what changed), so
JSON.DEBUG MEMORY and MEMORY USAGE cost nothing; `measure()` walks the tree and must agree with it.

RDB (the module type's payload, valkey-json's dom_save / dom_load) is keyspace/rdbvalue.py's, with the other
module types'.
"""

import json
import re

TYPE_NAME = "ReJSON-RL"

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1

# Nesting that the Python json scanner and the recursive walkers here handle within Python's recursion limit
# whatever json.max-path-limit says (valkey-json's own recursion is bounded by the C stack only): a document,
# a value or an RDB load nested deeper is refused as over the path limit. Documented in docs/modules.md.
NESTING_CEILING = 512

DOC_HEADER_BYTES = 24     # sizeof(JDocument): the root value and the size/bucket word
VALUE_BYTES = 16          # sizeof(JValue)
MEMBER_BYTES = 24         # an object member: the key's handle and the value
SHORT_STRING_MAX = 13     # RapidJSON keeps strings up to this many bytes inside the value itself


class JsonError(Exception):
    """A failure with valkey-json's error code name (messages.JSON_ERRORS has the reply text)."""

    def __init__(self, code):
        super().__init__(code)
        self.code = code


class JFloat:
    """A double whose text is not repr(value): the value and the text it is written as."""

    __slots__ = ("value", "text")

    def __init__(self, value, text):
        self.value = value
        self.text = text

    def __repr__(self):
        return "JFloat(%s)" % self.text


def make_double(value: float, text: str):
    """A double written as `text`: a plain float when repr gives that text, else a JFloat."""
    return value if repr(value) == text else JFloat(value, text)


def format_double(value: float) -> str:
    """jsonutil_double_to_string: "%.17g" (how valkey-json writes a computed double)."""
    return "%.17g" % value


def number_value(v):
    """The float value of a number (int, float or JFloat), as RapidJSON's GetDouble."""
    return v.value if type(v) is JFloat else float(v)


def is_number(v) -> bool:
    t = type(v)
    return t is int or t is float or t is JFloat


def is_double(v) -> bool:
    t = type(v)
    return t is float or t is JFloat


# -- parsing --------------------------------------------------------------------------------------------

class _Reject(Exception):
    pass


def _parse_float(text):
    value = float(text)
    if value != value or value in (_INF, -_INF):
        raise _Reject()     # RapidJSON: kParseErrorNumberTooBig
    return make_double(value, text)


def _parse_int(text):
    if len(text) < 19:
        return int(text)
    if len(text) <= 20:
        n = int(text)
        if INT64_MIN <= n <= INT64_MAX:
            return n
    # beyond int64: RapidJSON keeps it as a double with its text
    value = float(text)
    if value in (_INF, -_INF):
        raise _Reject()
    return make_double(value, text)


def _parse_constant(_name):
    raise _Reject()          # NaN, Infinity, -Infinity are not JSON


_INF = float("inf")
_DECODER = json.JSONDecoder(parse_float=_parse_float, parse_int=_parse_int, parse_constant=_parse_constant)
_decode = _DECODER.decode

_STRING_RE = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_BRACKET_RE = re.compile(rb"[\[\]{}]")
_ESCAPE_RE = re.compile(rb"\\(?:u([0-9a-fA-F]{4})|.)", re.S)


def nesting_depth(data: bytes, stop_above: int) -> int:
    """The deepest container nesting in JSON text (strings stepped over), counting no further than
    stop_above + 1. An upper bound is the count of opening brackets, so most texts are settled without a scan."""
    opens = data.count(b"[") + data.count(b"{")
    if opens <= stop_above:
        return opens
    if b'"' in data:
        data = _STRING_RE.sub(b'""', data)
    depth = deepest = 0
    for m in _BRACKET_RE.finditer(data):
        c = m.group()
        if c == b"[" or c == b"{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > stop_above:
                    return deepest
        else:
            depth -= 1
    return deepest


def _surrogates_ok(data: bytes) -> bool:
    """RapidJSON refuses a \\u escape of a lone surrogate (a high one not followed by a low one, or a low one
    alone); Python's json would take it."""
    expect_low_at = -1
    for m in _ESCAPE_RE.finditer(data):
        hexdigits = m.group(1)
        start = m.start()
        if expect_low_at >= 0:
            if start != expect_low_at or hexdigits is None or not 0xDC00 <= int(hexdigits, 16) <= 0xDFFF:
                return False
            expect_low_at = -1
            continue
        if hexdigits is None:
            continue
        cp = int(hexdigits, 16)
        if 0xD800 <= cp <= 0xDBFF:
            expect_low_at = m.end()
        elif 0xDC00 <= cp <= 0xDFFF:
            return False
    return expect_low_at < 0


def parse(data: bytes, max_depth: int):
    """The value a JSON text holds. Raises JsonError("LIMIT_DEPTH") when containers nest deeper than
    max_depth (RapidJSON's parser stops there: json.max-path-limit) and JsonError("PARSE") on anything that
    is not one JSON value (RapidJSON's kParseNoFlags grammar)."""
    limit = min(max_depth, NESTING_CEILING)
    if nesting_depth(data, limit) > limit:
        raise JsonError("LIMIT_DEPTH")
    if b"\\u" in data and not _surrogates_ok(data):
        raise JsonError("PARSE")
    nul = data.find(b"\x00")
    if nul >= 0:
        # RapidJSON reads a NUL byte as the end of its input: one inside a string is an unterminated string,
        # one after the value ends the text
        data = data[:nul]
    try:
        return _decode(data.decode("utf-8", "surrogateescape"))
    except (ValueError, _Reject, RecursionError):
        raise JsonError("PARSE") from None


def _depths(v):
    """(deepest value, deepest container) as edge counts from v (-1: no container): one loop over the
    containers, not a recursion, since documents nest up to NESTING_CEILING."""
    deepest_value, deepest_container = 0, -1
    stack = [(v, 0)]
    pop, push = stack.pop, stack.append
    while stack:
        x, level = pop()
        if level > deepest_value:
            deepest_value = level
        t = type(x)
        if t is dict:
            children = x.values()
        elif t is list:
            children = x
        else:
            continue
        if level > deepest_container:
            deepest_container = level
        child_level = level + 1
        for y in children:
            ty = type(y)
            if ty is dict or ty is list:
                push((y, child_level))
            elif child_level > deepest_value:
                deepest_value = child_level
    return deepest_value, deepest_container


def value_depth(v) -> int:
    """Container nesting of a value (RapidJSON's GetMaxDepth of a parsed text): 0 for a scalar, 1 for [] ..."""
    return _depths(v)[1] + 1


def path_depth(v) -> int:
    """JSON.DEBUG DEPTH: the longest path from the root to any value (0 for a scalar or an empty container)."""
    return _depths(v)[0]


# -- writing ---------------------------------------------------------------------------------------------

class _Exotic(Exception):
    pass


def _refuse(_obj):
    raise _Exotic()


_encode_basestring = json.encoder.encode_basestring
# json's C encoder, made once (JSONEncoder.encode makes one per call): compact separators, no circularity
# markers, NaN refused (never stored), anything else (JFloat) refused so that the Python writer takes over
_C_ENCODE = json.encoder.c_make_encoder(None, _refuse, _encode_basestring, None, ":", ",", False, False, False) \
    if json.encoder.c_make_encoder is not None else None
_LOWER_ESCAPE_RE = re.compile(r"\\u00([0-9a-f]{2})")


def _upper_escape(m):
    return "\\u00" + m.group(1).upper()


def encode_string(s: str) -> str:
    """A JSON string as RapidJSON writes it: ", \\ and control characters escaped (\\b \\t \\n \\f \\r, else
    \\u00XX in capitals), everything else as it is."""
    out = _encode_basestring(s)
    if "\\u00" in out:
        out = _LOWER_ESCAPE_RE.sub(_upper_escape, out)
    return out


def _write_compact(v, out):
    t = type(v)
    if t is str:
        out(encode_string(v))
    elif t is dict:
        if not v:
            out("{}")
            return
        sep = "{"
        for k, x in v.items():
            out(sep)
            out(encode_string(k))
            out(":")
            _write_compact(x, out)
            sep = ","
        out("}")
    elif t is list:
        if not v:
            out("[]")
            return
        sep = "["
        for x in v:
            out(sep)
            _write_compact(x, out)
            sep = ","
        out("]")
    elif t is JFloat:
        out(v.text)
    elif v is None:
        out("null")
    elif v is True:
        out("true")
    elif v is False:
        out("false")
    else:                       # int, float
        out(repr(v))


def dumps_compact(v) -> str:
    """The compact text of a value (no spaces), as a str (encode with surrogateescape)."""
    out = None
    if _C_ENCODE is not None:
        try:
            out = "".join(_C_ENCODE(v, 0))
        except _Exotic:
            out = None
    if out is not None and "\\u00" not in out:
        return out
    parts = []
    _write_compact(v, parts.append)
    return "".join(parts)


def to_bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def dumps(v) -> bytes:
    return to_bytes(dumps_compact(v))


class Format:
    """JSON.GET's INDENT / NEWLINE / SPACE (PrintFormat); None fields are empty."""

    __slots__ = ("indent", "newline", "space")

    def __init__(self, indent=None, newline=None, space=None):
        self.indent = indent
        self.newline = newline
        self.space = space

    def custom(self) -> bool:
        return self.indent is not None or self.newline is not None or self.space is not None


def _write_pretty(v, level, fmt, out):
    """RapidJSON's PrettyWriter: `level` is the number of enclosing containers plus the initial level."""
    t = type(v)
    if t is dict:
        if not v:
            out("{}")
            return
        nl, ind, sp = fmt
        out("{")
        first = True
        for k, x in v.items():
            if not first:
                out(",")
            first = False
            out(nl)
            out(ind * (level + 1))
            out(encode_string(k))
            out(":")
            out(sp)
            _write_pretty(x, level + 1, fmt, out)
        out(nl)
        out(ind * level)
        out("}")
    elif t is list:
        if not v:
            out("[]")
            return
        nl, ind, _sp = fmt
        out("[")
        first = True
        for x in v:
            if not first:
                out(",")
            first = False
            out(nl)
            out(ind * (level + 1))
            _write_pretty(x, level + 1, fmt, out)
        out(nl)
        out(ind * level)
        out("]")
    else:
        _write_compact(v, out)


def write(v, fmt, out, initial_level=0):
    """Appends the text of v (str pieces) to out: compact without a custom format, else formatted starting at
    initial_level (serialize_value)."""
    if fmt is None or not fmt.custom():
        out(dumps_compact(v))
        return
    _write_pretty(v, initial_level, (fmt.newline or "", fmt.indent or "", fmt.space or ""), out)


# -- type names, equality --------------------------------------------------------------------------------

def type_name(v) -> str:
    """JSON.TYPE's name of a value."""
    t = type(v)
    if t is str:
        return "string"
    if t is int:
        return "integer"
    if t is float or t is JFloat:
        return "number"
    if t is dict:
        return "object"
    if t is list:
        return "array"
    if t is bool:
        return "boolean"
    return "null"


def _scalar_equal(a, b) -> bool:
    ta, tb = type(a), type(b)
    if ta is str:
        return tb is str and a == b
    if ta is int:
        if tb is int:
            return a == b
        return (tb is float or tb is JFloat) and float(a) == number_value(b)
    if ta is float or ta is JFloat:
        return is_number(b) and number_value(a) == number_value(b)
    if ta is bool:
        return tb is bool and a is b
    return a is None and b is None


def equal(a, b) -> bool:
    """RapidJSON's GenericValue == : deep, objects by members whatever their order, numbers by value (a
    double against anything numerically, integers exactly), true only equals true."""
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        tx, ty = type(x), type(y)
        if tx is dict:
            if ty is not dict or len(x) != len(y):
                return False
            for k, v in x.items():
                if k not in y:
                    return False
                stack.append((v, y[k]))
        elif tx is list:
            if ty is not list or len(x) != len(y):
                return False
            stack.extend(zip(x, y))
        elif ty is dict or ty is list or not _scalar_equal(x, y):
            return False
    return True


def copy_value(v):
    """A deep copy (COPY, values set at several paths): the value's text read back, which keeps every number's
    text and every string's bytes, at the C scanner's speed and without a Python recursion."""
    t = type(v)
    if t is not dict and t is not list:
        return v                # scalars are immutable (JFloat is never changed in place)
    return _decode(dumps_compact(v))


# -- sizes ------------------------------------------------------------------------------------------------

def utf8_len(s: str) -> int:
    return len(s) if s.isascii() else len(s.encode("utf-8", "surrogateescape"))


def _text_bytes(n: int) -> int:
    return 0 if n <= SHORT_STRING_MAX else n + 1


def _str_bytes(s: str) -> int:
    """What a string (or a double's text) costs outside its value: nothing up to 13 bytes, else its bytes and
    a NUL."""
    n = len(s)
    if n > SHORT_STRING_MAX:
        return (n if s.isascii() else len(s.encode("utf-8", "surrogateescape"))) + 1
    if n * 4 <= SHORT_STRING_MAX or s.isascii():
        return 0
    n = len(s.encode("utf-8", "surrogateescape"))
    return n + 1 if n > SHORT_STRING_MAX else 0


def jsize(v) -> int:
    """Heap bytes v owns beyond its own 16-byte value (RapidJSON's ComputeMallocedSize): a loop over the
    containers, scalars sized where they are met (this runs on every JSON.SET of a whole document)."""
    t = type(v)
    if t is str:
        return _str_bytes(v)
    if t is float:
        return _str_bytes(repr(v))
    if t is JFloat:
        return _str_bytes(v.text)
    if t is not dict and t is not list:
        return 0
    total = 0
    stack = [v]
    pop, push = stack.pop, stack.append
    while stack:
        x = pop()
        if type(x) is dict:
            total += MEMBER_BYTES * len(x)
            items = x.items()
            for k, y in items:
                total += len(k) if k.isascii() else len(k.encode("utf-8", "surrogateescape"))
                ty = type(y)
                if ty is str:
                    if len(y) > 3:
                        total += _str_bytes(y)
                elif ty is dict or ty is list:
                    push(y)
                elif ty is float:
                    total += _str_bytes(repr(y))
                elif ty is JFloat:
                    total += _str_bytes(y.text)
        else:
            total += VALUE_BYTES * len(x)
            for y in x:
                ty = type(y)
                if ty is str:
                    if len(y) > 3:
                        total += _str_bytes(y)
                elif ty is dict or ty is list:
                    push(y)
                elif ty is float:
                    total += _str_bytes(repr(y))
                elif ty is JFloat:
                    total += _str_bytes(y.text)
    return total


def member_size(key: str, v) -> int:
    return MEMBER_BYTES + utf8_len(key) + jsize(v)


def element_size(v) -> int:
    return VALUE_BYTES + jsize(v)


def count_fields(v) -> int:
    """JSON.DEBUG FIELDS: values in v, v itself included."""
    count = 0
    stack = [v]
    while stack:
        x = stack.pop()
        count += 1
        t = type(x)
        if t is dict:
            stack.extend(x.values())
        elif t is list:
            stack.extend(x)
    return count


class JsonDoc:
    """One document key's value: the root and its size in bytes (kept by every write)."""

    __slots__ = ("root", "size")

    def __init__(self, root, size=None):
        self.root = root
        self.size = DOC_HEADER_BYTES + jsize(root) if size is None else size

    def measure(self) -> int:
        """The size computed by walking the tree (what `size` must equal)."""
        return DOC_HEADER_BYTES + jsize(self.root)

    def copy(self):
        return JsonDoc(copy_value(self.root), self.size)

    def __len__(self):
        # generic code sizes values with len(): a document counts as one element
        return 1

    def __repr__(self):
        return "JsonDoc(%s)" % dumps_compact(self.root)[:80]
