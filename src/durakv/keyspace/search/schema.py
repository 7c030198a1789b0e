"""FT.CREATE's grammar and the index definition it makes (valkey-search 1.2's ft_create_parser.cc, its texts).

    FT.CREATE name [ON HASH|JSON] [PREFIX n p ...] [SCORE 1.0] [LANGUAGE ENGLISH] [SKIPINITIALSCAN]
        SCHEMA identifier [AS alias] VECTOR HNSW|FLAT n k v ... | TAG [SEPARATOR c] [CASESENSITIVE] | NUMERIC
               [SORTABLE] ...

A definition is pure data (`IndexDef`); `parse_create` raises CommandError with valkey-search's texts, which
carry no "ERR " (its module replies an error as it is written). Bounds are the module's defaults (its
`max-*` configs): 8 prefixes, 1000 attributes, 32768 dimensions, tag identifiers of 256 bytes, numeric ones
of 128. The definition keeps the arguments it was made from: they are its journal effect and its snapshot
form, so a replica and a restarted node make the same index.
"""

from ... import messages
from ...errors import CommandError
from ...protocol.numbers import string2ll, valkey_strtod

MAX_PREFIXES = 8
MAX_ATTRIBUTES = 1000
MAX_DIMENSIONS = 32768
MAX_M = 2000000
MAX_EF_CONSTRUCTION = 1000000
MAX_EF_RUNTIME = 1000000
MAX_TAG_IDENTIFIER = 256
MAX_NUMERIC_IDENTIFIER = 128
DEFAULT_INITIAL_CAP = 10 * 1024
DEFAULT_BLOCK_SIZE = 1024
DEFAULT_M = 16
DEFAULT_EF_CONSTRUCTION = 200
DEFAULT_EF_RUNTIME = 10
# ft_create_parser.h kDefaultPunctuation: an alias may not contain any of these
_PUNCTUATION = ",.<>{}[]\"':;!@#$%^&*()-+=~/\\|?"

DISTANCE_METRICS = ("L2", "IP", "COSINE")
VECTOR_TYPES = ("FLOAT32",)
ALGORITHMS = ("HNSW", "FLAT")
FIELD_TYPES = ("VECTOR", "TAG", "NUMERIC")   # valkey-search 1.0's; 1.2's TEXT is not served (docs/modules.md)


def _err(text):
    return CommandError(text)


class Args:
    """vmsdk's ArgsIterator over bytes arguments."""
    __slots__ = ("args", "pos", "end")

    def __init__(self, args, pos=0, end=None):
        self.args = args
        self.pos = pos
        self.end = len(args) if end is None else end

    def left(self):
        return max(0, self.end - self.pos)

    def get(self) -> bytes:
        if self.pos >= self.end:
            raise _err(messages.SEARCH_MISSING_ARGUMENT)
        return self.args[self.pos]

    def pop(self) -> bytes:
        v = self.get()
        self.pos += 1
        return v

    def match(self, word: bytes) -> bool:
        """IsParamKeyMatch (not mandatory): takes the next argument when it is `word` in any case."""
        if self.pos < self.end and self.args[self.pos].upper() == word:
            self.pos += 1
            return True
        return False


def text(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")


def to_int(value: bytes, lo=-(1 << 31), hi=(1 << 31) - 1) -> int:
    """vmsdk's ToNumeric<int>: the integer's text, or "not a valid numeric value" / "outside acceptable
    bounds" (digits and '-' only) as its from_chars reports them."""
    n = string2ll(value)
    if n is not None and lo <= n <= hi:
        return n
    s = text(value)
    if s and all(c == "-" or c.isdigit() for c in s) and s.lstrip("-").isdigit():
        raise _err(messages.SEARCH_OUT_OF_BOUNDS.format(s))
    raise _err(messages.SEARCH_NOT_NUMERIC.format(s))


def to_uint(value: bytes, bits=32) -> int:
    return to_int(value, 0, (1 << bits) - 1)


def to_double(value: bytes):
    """absl::SimpleAtod: surrounding spaces allowed, 'nan' refused. None when it is not a number."""
    stripped = value.strip(b" \t\n\v\f\r")
    if stripped.lower() == b"nan":
        return None
    f = valkey_strtod(stripped) if stripped else None
    return f


def verify_range(n, lo, hi):
    if lo is not None and n < lo:
        return messages.SEARCH_RANGE_BELOW
    if hi is not None and n > hi:
        return messages.SEARCH_RANGE_ABOVE
    return None


def hash_tag(name: bytes):
    """vmsdk::ParseHashTag: the `{tag}` of a name, or None."""
    s = name.find(b"{")
    if s < 0:
        return None
    e = name.find(b"}", s + 1)
    if e < 0 or e == s + 1:
        return None
    return name[s + 1:e]


class Attribute:
    """One SCHEMA field: identifier (hash field or JSON path), alias, and its index's parameters."""
    __slots__ = ("identifier", "alias", "type", "algorithm", "dim", "metric", "data_type", "initial_cap", "m",
                 "ef_construction", "ef_runtime", "block_size", "separator", "case_sensitive")

    def __init__(self, identifier, alias, kind):
        self.identifier = identifier
        self.alias = alias
        self.type = kind
        self.algorithm = None
        self.dim = None
        self.metric = None
        self.data_type = None
        self.initial_cap = DEFAULT_INITIAL_CAP
        self.m = DEFAULT_M
        self.ef_construction = DEFAULT_EF_CONSTRUCTION
        self.ef_runtime = DEFAULT_EF_RUNTIME
        self.block_size = DEFAULT_BLOCK_SIZE
        self.separator = b","
        self.case_sensitive = False

    @property
    def is_vector(self):
        return self.type == "VECTOR"

    def vector_bytes(self) -> int:
        return self.dim * 4


class IndexDef:
    """A parsed FT.CREATE: what an index is, not what it holds."""
    __slots__ = ("name", "on", "prefixes", "attributes", "skip_initial_scan", "argv", "language", "score")

    def __init__(self, name):
        self.name = name
        self.on = "HASH"
        self.prefixes = []
        self.attributes = []
        self.skip_initial_scan = False
        self.argv = ()
        self.language = "english"
        self.score = 1.0

    def attribute(self, alias_or_identifier: bytes):
        for a in self.attributes:
            if a.alias == alias_or_identifier:
                return a
        for a in self.attributes:
            if a.identifier == alias_or_identifier:
                return a
        return None

    def by_alias(self, alias: bytes):
        for a in self.attributes:
            if a.alias == alias:
                return a
        return None

    def matches(self, key: bytes) -> bool:
        prefixes = self.prefixes
        if not prefixes:
            return True
        for p in prefixes:
            if key.startswith(p):
                return True
        return False


def _parse_enum(value: bytes, choices):
    if not value:
        raise _err(messages.SEARCH_ARGUMENT_EMPTY)
    up = text(value).upper()
    if up not in choices:
        raise _err(messages.SEARCH_UNKNOWN_ARGUMENT.format(text(value)))
    return up


def _parse_prefixes(it, d, index_tag, max_prefixes):
    if not it.match(b"PREFIX"):
        if index_tag is not None:
            raise _err(messages.SEARCH_PREFIX_REQUIRED_HASHTAG)
        return
    try:
        count = to_uint(it.pop())
    except CommandError as exc:
        raise _err(messages.SEARCH_BAD_ARGUMENTS_FOR.format("PREFIX", exc.text))
    if count > it.left():
        raise _err(messages.SEARCH_PREFIX_COUNT_BOUNDS.format(count))
    if count > max_prefixes:
        raise _err(messages.SEARCH_PREFIX_TOO_MANY.format(count, max_prefixes))
    for _ in range(count):
        p = it.pop()
        tag = hash_tag(p)
        if index_tag is not None:
            if tag is None or tag != index_tag:
                raise _err(messages.SEARCH_PREFIX_SAME_TAG)
        elif tag is not None:
            raise _err(messages.SEARCH_PREFIX_HAS_TAG)
        d.prefixes.append(p)


def _parse_vector(it, attr):
    algo = _parse_enum(it.pop(), ALGORITHMS)
    count = to_uint(it.pop())
    if count > it.left() + 1:
        raise _err(messages.SEARCH_VECTOR_PARAMS_COUNT.format(count, algo, it.left()))
    if count > it.left():
        raise _err(messages.SEARCH_MISSING_ARGUMENT)
    sub = Args(it.args, it.pos, it.pos + count)
    attr.algorithm = algo
    params = {b"DIM", b"TYPE", b"DISTANCE_METRIC", b"INITIAL_CAP"}
    params |= {b"M", b"EF_CONSTRUCTION", b"EF_RUNTIME"} if algo == "HNSW" else {b"BLOCK_SIZE"}
    while sub.left():
        key = sub.pop()
        name = key.upper()
        if name not in params:
            raise _err(messages.SEARCH_UNEXPECTED_ARGUMENT.format(text(key)))
        try:
            if name == b"DIM":
                attr.dim = to_int(sub.pop())
            elif name == b"TYPE":
                attr.data_type = _parse_enum(sub.pop(), VECTOR_TYPES)
            elif name == b"DISTANCE_METRIC":
                attr.metric = _parse_enum(sub.pop(), DISTANCE_METRICS)
            elif name == b"INITIAL_CAP":
                attr.initial_cap = to_int(sub.pop())
            elif name == b"M":
                attr.m = to_int(sub.pop())
            elif name == b"EF_CONSTRUCTION":
                attr.ef_construction = to_int(sub.pop())
            elif name == b"EF_RUNTIME":
                attr.ef_runtime = to_uint(sub.pop(), 64)
            elif name == b"BLOCK_SIZE":
                attr.block_size = to_uint(sub.pop())
        except CommandError as exc:
            raise _err(messages.SEARCH_PARSING_VALUE.format(text(key), exc.text))
    if attr.dim is None:
        raise _err(messages.SEARCH_MISSING_DIM)
    bad = verify_range(attr.dim, 1, MAX_DIMENSIONS)
    if bad:
        raise _err(messages.SEARCH_DIM_RANGE.format(bad, MAX_DIMENSIONS))
    if attr.initial_cap <= 0:
        raise _err(messages.SEARCH_INITIAL_CAP)
    if attr.data_type is None:
        raise _err(messages.SEARCH_MISSING_TYPE)
    if attr.metric is None:
        raise _err(messages.SEARCH_MISSING_METRIC)
    if algo == "HNSW":
        bad = verify_range(attr.m, 2, MAX_M)
        if bad:
            raise _err(messages.SEARCH_M_RANGE.format(bad, MAX_M))
        bad = verify_range(attr.ef_construction, 1, MAX_EF_CONSTRUCTION)
        if bad:
            raise _err(messages.SEARCH_EF_CONSTRUCTION_RANGE.format(bad, MAX_EF_CONSTRUCTION))
        bad = verify_range(attr.ef_runtime, 1, MAX_EF_RUNTIME)
        if bad:
            raise _err(messages.SEARCH_EF_RUNTIME_RANGE.format(bad, MAX_EF_RUNTIME))
    it.pos += count


def _parse_tag(it, attr):
    if len(attr.identifier) > MAX_TAG_IDENTIFIER:
        raise _err(messages.SEARCH_TAG_IDENTIFIER_LEN.format(MAX_TAG_IDENTIFIER))
    # KeyValueParser without error_on_unknown_param: stops at the first word it does not know
    while it.left():
        key = it.get()
        name = key.upper()
        if name == b"SEPARATOR":
            it.pop()
            try:
                sep = it.pop()
            except CommandError as exc:
                raise _err(messages.SEARCH_PARSING_VALUE.format(text(key), exc.text))
            attr.separator = sep
        elif name == b"CASESENSITIVE":
            it.pop()
            attr.case_sensitive = True
        else:
            break
    if len(attr.separator) != 1:
        raise _err(messages.SEARCH_SEPARATOR.format(text(attr.separator)))


def _parse_attribute(it, identifier, d):
    alias = identifier
    if it.match(b"AS"):
        try:
            alias = it.pop()
        except CommandError as exc:
            raise _err(messages.SEARCH_BAD_ARGUMENTS_FOR.format("AS", exc.text))
    s = text(alias)
    for ch in s:
        if ch in _PUNCTUATION:
            raise _err(messages.SEARCH_ALIAS_CHAR.format(s, ch))
    kind = _parse_enum(it.pop(), FIELD_TYPES)
    attr = Attribute(identifier, alias, kind)
    if kind == "VECTOR":
        _parse_vector(it, attr)
    elif kind == "TAG":
        _parse_tag(it, attr)
    elif len(identifier) > MAX_NUMERIC_IDENTIFIER:
        raise _err(messages.SEARCH_NUMERIC_IDENTIFIER_LEN.format(MAX_NUMERIC_IDENTIFIER))
    if it.left() and it.get().upper() == b"SORTABLE":
        it.pop()
    return attr


def parse_create(args, json_available=False, max_prefixes=MAX_PREFIXES, max_attributes=MAX_ATTRIBUTES) -> IndexDef:
    """args: FT.CREATE's arguments after the command name."""
    it = Args(args)
    d = IndexDef(it.pop())
    if it.match(b"ON"):
        try:
            d.on = _parse_enum(it.pop(), ("HASH", "JSON"))
        except CommandError as exc:
            raise _err(messages.SEARCH_BAD_ARGUMENTS_FOR.format("ON", exc.text))
        if d.on == "JSON" and not json_available:
            raise _err(messages.SEARCH_JSON_NOT_LOADED)
    _parse_prefixes(it, d, hash_tag(d.name), max_prefixes)
    if it.match(b"FILTER"):
        raise _err(messages.SEARCH_NOT_SUPPORTED_PARAM.format("FILTER"))
    while it.left():
        word = it.get().upper()
        if word == b"SCHEMA":
            break
        if word == b"SCORE":
            it.pop()
            try:
                score = to_double(it.pop())
                if score is None:
                    raise _err(messages.SEARCH_NOT_FLOAT.format(text(it.args[it.pos - 1])))
            except CommandError as exc:
                raise _err(messages.SEARCH_BAD_ARGUMENTS_FOR.format("SCORE", exc.text))
            if score != 1.0:
                raise _err(messages.SEARCH_SCORE_NOT_SUPPORTED.format("%g" % score))
        elif word == b"SCORE_FIELD":
            raise _err(messages.SEARCH_NOT_SUPPORTED_PARAM.format("SCORE_FIELD"))
        elif word == b"LANGUAGE":
            it.pop()
            try:
                _parse_enum(it.pop(), ("ENGLISH",))
            except CommandError as exc:
                raise _err(messages.SEARCH_BAD_ARGUMENTS_FOR.format("LANGUAGE", exc.text))
        elif word == b"LANGUAGE_FIELD":
            raise _err(messages.SEARCH_NOT_SUPPORTED_PARAM.format("LANGUAGE_FIELD"))
        elif word == b"SKIPINITIALSCAN":
            it.pop()
            d.skip_initial_scan = True
        elif word == b"PAYLOAD_FIELD":
            raise _err(messages.SEARCH_NOT_SUPPORTED_PARAM.format("PAYLOAD_FIELD"))
        else:
            break
    schema = it.pop()
    if schema.upper() != b"SCHEMA":
        raise _err(messages.SEARCH_EXPECTING_SCHEMA.format(text(schema)))
    if not it.left():
        raise _err(messages.SEARCH_NO_ATTRIBUTES)
    seen = set()
    while it.left():
        identifier = it.pop()
        try:
            attr = _parse_attribute(it, identifier, d)
        except CommandError as exc:
            raise _err(messages.SEARCH_FIELD_TYPE.format(text(identifier), exc.text))
        if identifier in seen:
            raise _err(messages.SEARCH_DUPLICATE_FIELD.format(text(identifier)))
        if len(seen) + 1 > max_attributes:
            raise _err(messages.SEARCH_TOO_MANY_ATTRIBUTES.format(max_attributes))
        seen.add(identifier)
        d.attributes.append(attr)
    aliases = set()
    for a in d.attributes:
        if a.alias in aliases:
            raise _err(messages.SEARCH_DUPLICATE_FIELD.format(text(a.alias)))
        aliases.add(a.alias)
    d.argv = tuple(args)
    return d
