"""FT.SEARCH's grammar: the options after the query, the pre-filter expression and the KNN clause
(valkey-search 1.2's ft_search_parser.cc, query/search.cc and commands/filter_parser.cc, with their texts).

    FT.SEARCH index query [NOCONTENT] [RETURN n field [AS name] ...] [LIMIT offset num] [PARAMS n k v ...]
        [DIALECT 2..4] [TIMEOUT ms] [LOCALONLY] [SORTBY field [ASC|DESC]] [WITHSORTKEYS] ...
    query:   filter [=> [KNN k @field $blob [EF_RUNTIME ef] [AS name]]]
    filter:  * | predicates: @tag:{a|b*} @num:[lo hi] with ( exclusive, -inf/inf, space = AND, | = OR, - = NOT,
             parentheses for groups (OR binds tighter than AND, left to right)
"""

from ... import messages
from ...errors import CommandError
from .schema import Args, text, to_double, to_int, to_uint, verify_range

MAX_KNN = 10000
MAX_QUERY_BYTES = 10240
MAX_TIMEOUT_MS = 60000
MAX_DEPTH = 1000
TAG_MIN_PREFIX = 2


def _err(t):
    return CommandError(t)


# -- predicates ---------------------------------------------------------------------------------

class Tag:
    __slots__ = ("attr", "tags")

    def __init__(self, attr, tags):
        self.attr, self.tags = attr, tags


class Numeric:
    __slots__ = ("attr", "lo", "lo_incl", "hi", "hi_incl")

    def __init__(self, attr, lo, lo_incl, hi, hi_incl):
        self.attr, self.lo, self.lo_incl, self.hi, self.hi_incl = attr, lo, lo_incl, hi, hi_incl


class Not:
    __slots__ = ("inner",)

    def __init__(self, inner):
        self.inner = inner


class And:
    __slots__ = ("a", "b")

    def __init__(self, a, b):
        self.a, self.b = a, b


class Or:
    __slots__ = ("a", "b")

    def __init__(self, a, b):
        self.a, self.b = a, b


class FilterParser:
    """filter_parser.cc: one pass over the expression; positions in errors are its."""

    def __init__(self, index_def, expression: str):
        self.d = index_def
        self.e = expression.strip(" \t\n\v\f\r")
        self.pos = 0
        self.depth = 0

    def end(self):
        return self.pos >= len(self.e)

    def peek(self):
        return self.e[self.pos]

    def skip_ws(self):
        e = self.e
        while self.pos < len(e) and e[self.pos].isspace():
            self.pos += 1

    def match(self, ch, skip_ws=True):
        if skip_ws:
            self.skip_ws()
        if self.pos < len(self.e) and self.e[self.pos] == ch:
            self.pos += 1
            return True
        return False

    def match_word(self, word):
        if self.e[self.pos:self.pos + len(word)].lower() == word:
            self.pos += len(word)
            return True
        return False

    def unexpected(self, pos):
        return _err(messages.SEARCH_UNEXPECTED_CHAR.format(pos + 1, self.e[pos:pos + 1]))

    def is_match_all(self):
        self.pos = 0
        open_b = close_b = star = False
        while not self.end():
            self.skip_ws()
            if self.match("*"):
                if star or close_b:
                    raise self.unexpected(self.pos - 1)
                star = True
            elif self.match("("):
                if star or close_b:
                    raise self.unexpected(self.pos - 1)
                if open_b:
                    return False
                open_b = True
            elif self.match(")"):
                if not close_b and star and open_b:
                    close_b = True
                else:
                    raise self.unexpected(self.pos - 1)
            else:
                break
        if not star:
            return False
        if self.end():
            if open_b == close_b:
                return True
            raise _err(messages.SEARCH_MISSING_PAREN)
        raise self.unexpected(self.pos)

    def parse(self):
        """The root predicate, or None for match-all ('*')."""
        if self.is_match_all():
            return None
        self.pos = 0
        pred = self.expression()
        if not self.end():
            raise self.unexpected(self.pos)
        return pred

    def expression(self):
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise _err(messages.SEARCH_QUERY_TOO_COMPLEX)
        prev = None
        self.skip_ws()
        while not self.end():
            if self.peek() == ")":
                break
            negate = self.match("-")
            if self.match("("):
                pred = self.expression()
                if not self.match(")"):
                    raise _err(messages.SEARCH_EXPECTED_PAREN.format(self.e[self.pos:self.pos + 1], self.pos))
                prev = self._wrap(prev, pred, negate, And)
            elif self.match("|"):
                if negate:
                    raise self.unexpected(self.pos - 1)
                pred = self.expression()
                if pred is None:
                    raise _err("Missing OR term")
                prev = self._wrap(prev, pred, False, Or)
            else:
                field = self.field_name()
                if self.match("["):
                    pred = self.numeric(field)
                elif self.match("{"):
                    pred = self.tag(field)
                else:
                    raise _err(messages.SEARCH_EXPECTED_FIELD_OPEN.format(self.e[self.pos:self.pos + 1], self.pos))
                prev = self._wrap(prev, pred, negate, And)
            self.skip_ws()
        self.depth -= 1
        return prev

    @staticmethod
    def _wrap(prev, pred, negate, op):
        if negate:
            pred = Not(pred)
        if prev is None:
            return pred
        return op(prev, pred)

    def field_name(self):
        if not self.match("@"):
            raise _err(messages.SEARCH_UNEXPECTED_CHAR_EXPECTING.format(self.pos + 1, self.e[self.pos:self.pos + 1],
                                                                        "@"))
        start = self.pos
        e = self.e
        while self.pos < len(e) and e[self.pos] != ":" and not e[self.pos].isspace():
            self.pos += 1
        name = e[start:self.pos]
        self.skip_ws()
        if self.end() or self.peek() != ":":
            raise _err(messages.SEARCH_UNEXPECTED_CHAR_EXPECTING.format(self.pos + 1, self.e[self.pos:self.pos + 1],
                                                                        ":"))
        self.pos += 1
        return name

    def _attr(self, name, kind, message):
        attr = self.d.by_alias(name.encode("utf-8", "surrogateescape"))
        if attr is None or attr.type != kind:
            raise _err(message.format(name))
        return attr

    def number(self):
        self.skip_ws()
        if self.match_word("-inf"):
            return float("-inf")
        if self.match_word("+inf") or self.match_word("inf"):
            return float("inf")
        neg = self.match("-", False)
        start = self.pos
        e = self.e
        while self.pos < len(e) and (e[self.pos].isdigit() or e[self.pos] == "."):
            self.pos += 1
        s = e[start:self.pos]
        v = to_double(s.encode()) if s else None
        if v is None:
            raise _err(messages.SEARCH_INVALID_NUMBER.format(s))
        return -v if neg else v

    def numeric(self, name):
        attr = self._attr(name, "NUMERIC", messages.SEARCH_NOT_NUMERIC_FIELD)
        lo_incl = not self.match("(")
        lo = self.number()
        if not self.match(" ", False) and not self.match(","):
            raise _err(messages.SEARCH_NUMERIC_SEPARATOR.format(self.pos))
        hi_incl = not self.match("(")
        hi = self.number()
        if not self.match("]"):
            raise _err(messages.SEARCH_EXPECTED_BRACKET.format(self.e[self.pos:self.pos + 1], self.pos))
        if lo > hi or (lo == hi and not (lo_incl and hi_incl)):
            raise _err(messages.SEARCH_EMPTY_RANGE.format(self.pos))
        return Numeric(attr, lo, lo_incl, hi, hi_incl)

    def tag(self, name):
        attr = self._attr(name, "TAG", messages.SEARCH_NOT_TAG_FIELD)
        self.skip_ws()
        stop = self.e.find("}", self.pos)
        if stop < 0:
            raise _err(messages.SEARCH_MISSING_TAG_BRACKET)
        body = self.e[self.pos:stop]
        self.pos = stop + 1
        tags = set()
        for part in body.split("|"):
            t = part.strip(" \t\n\v\f\r")
            if not t:
                continue
            if t.endswith("*"):
                if t.endswith("**"):
                    raise _err(messages.SEARCH_TAG_MULTIPLE_STARS.format(t))
                if len(t) <= TAG_MIN_PREFIX:
                    raise _err(messages.SEARCH_TAG_PREFIX_SHORT.format(t))
            tags.add(t)
        return Tag(attr, tags)


# -- FT.SEARCH's arguments --------------------------------------------------------------------------

class SearchQuery:
    """What one FT.SEARCH asks."""

    def __init__(self, index_def):
        self.d = index_def
        self.query = ""
        self.filter = None          # predicate or None (all)
        self.knn = None             # (attr, k, blob, ef, score_as)
        self.score_as = None
        self.no_content = False
        self.returns = None         # [(identifier, alias)] or None
        self.offset = 0
        self.limit = 10
        self.params = {}
        self.used = set()
        self.dialect = 2
        self.timeout_ms = 50000
        self.local_only = False
        self.sortby = None          # (field, ascending)
        self.with_sort_keys = False


def _split_query(q: str):
    pos = q.find("=>")
    if pos < 0:
        return q.strip(" \t\n\v\f\r"), ""
    return q[:pos].strip(" \t\n\v\f\r"), q[pos + 2:].strip(" \t\n\v\f\r")


def _substitute(sq, source: str):
    if not source or source[0] != "$":
        return source.encode("utf-8", "surrogateescape")
    name = source[1:]
    key = name.encode("utf-8", "surrogateescape")
    if key not in sq.params:
        raise _err(messages.SEARCH_PARAM_NOT_FOUND.format(name))
    sq.used.add(key)
    return sq.params[key]


def _parse_knn(sq, vector_filter: str):
    if not vector_filter:
        raise _err(messages.SEARCH_VECTOR_CLAUSE_MISSING)
    close = None
    for p in range(len(vector_filter), 0, -1):
        if vector_filter[p - 1] == "]":
            close = p - 1
            break
        if not vector_filter[p - 1].isspace():
            raise _err(messages.SEARCH_EXPECT_CLOSE.format(vector_filter[p - 1]))
    if close is None:
        raise _err(messages.SEARCH_MISSING_CLOSE)
    opened = None
    for p in range(close):
        if vector_filter[p] == "[":
            opened = p
            break
        if not vector_filter[p].isspace():
            raise _err(messages.SEARCH_EXPECT_OPEN.format(vector_filter[p]))
    if opened is None:
        raise _err(messages.SEARCH_MISSING_OPEN)
    params = [p for p in vector_filter[opened + 1:close].split(" ") if p]
    if not params:
        raise _err(messages.SEARCH_KNN_MISSING_PARAMETERS)
    if params[0].upper() != "KNN":
        raise _err(messages.SEARCH_EXPECTING_KNN.format(params[0]))
    if len(params) == 1:
        raise _err(messages.SEARCH_KNN_ARG_MISSING)
    k_string = params[1]
    if len(params) == 2:
        raise _err(messages.SEARCH_VECTOR_FIELD_MISSING)
    if not params[2].startswith("@") or len(params[2]) == 1:
        raise _err(messages.SEARCH_VECTOR_FIELD_NAME.format(params[2]))
    alias = params[2][1:]
    if len(params) == 3:
        raise _err(messages.SEARCH_BLOB_MISSING)
    blob_string = params[3]
    ef_string = score_string = None
    i = 4
    while i < len(params):
        word = params[i].upper()
        if word == "EF_RUNTIME":
            i += 1
            if i == len(params):
                raise _err(messages.SEARCH_EF_ARG_MISSING)
            ef_string = params[i]
            i += 1
        elif word == "AS":
            i += 1
            if i == len(params):
                raise _err(messages.SEARCH_AS_ARG_MISSING)
            score_string = params[i]
            i += 1
        else:
            raise _err(messages.SEARCH_UNEXPECTED_ARGUMENT.format(params[i]))
    return k_string, alias, blob_string, ef_string, score_string


def parse_search(index_def, args):
    """args: FT.SEARCH's arguments after the index name: query, then options."""
    sq = SearchQuery(index_def)
    it = Args(args)
    sq.query = text(it.pop())
    while it.left():
        key = it.get()
        name = key.upper()
        it.pop()
        try:
            if name == b"NOCONTENT":
                sq.no_content = True
            elif name == b"DIALECT":
                sq.dialect = to_int(it.pop())
            elif name == b"LOCALONLY":
                sq.local_only = True
            elif name in (b"ALLSHARDS", b"SOMESHARDS", b"CONSISTENT", b"INCONSISTENT", b"INORDER", b"VERBATIM"):
                pass
            elif name == b"SLOP":
                to_int(it.pop())
            elif name == b"TIMEOUT":
                sq.timeout_ms = to_uint(it.pop())
            elif name == b"LIMIT":
                sq.offset = to_uint(it.pop(), 64)
                sq.limit = to_uint(it.pop(), 64)
            elif name == b"WITHSORTKEYS":
                sq.with_sort_keys = True
            elif name == b"RETURN":
                _parse_return(sq, it)
            elif name == b"SORTBY":
                field = it.pop()
                asc = True
                if it.left() and it.get().upper() in (b"ASC", b"DESC"):
                    asc = it.pop().upper() == b"ASC"
                sq.sortby = (field, asc)
            elif name == b"PARAMS":
                _parse_params(sq, it)
            else:
                raise _err(messages.SEARCH_UNEXPECTED_ARGUMENT.format(text(key)))
        except CommandError as exc:
            if exc.text.startswith("Unexpected argument"):
                raise
            raise _err(messages.SEARCH_PARSING_VALUE.format(text(key), exc.text))
    if len(sq.query.encode("utf-8", "surrogateescape")) > MAX_QUERY_BYTES:
        raise _err(messages.SEARCH_QUERY_TOO_LONG.format(MAX_QUERY_BYTES))
    pre, vec = _split_query(sq.query)
    try:
        sq.filter = FilterParser(index_def, pre).parse()
        all_docs = sq.filter is None and _is_star(pre)
    except CommandError as exc:
        raise _err(messages.SEARCH_FILTER_PREFIX.format(pre, exc.text))
    if sq.filter is None and not all_docs and not vec:
        raise _err(messages.SEARCH_INVALID_QUERY_STRING)
    if vec:
        try:
            k_string, alias, blob_string, ef_string, score_string = _parse_knn(sq, vec)
        except CommandError as exc:
            raise _err(messages.SEARCH_VECTOR_PREFIX.format(vec, exc.text))
        attr = index_def.by_alias(alias.encode("utf-8", "surrogateescape"))
        if attr is None:
            raise _err(messages.SEARCH_FIELD_MISSING.format(alias))
        if not attr.is_vector:
            raise _err(messages.SEARCH_FIELD_NOT_VECTOR.format(alias))
        try:
            k = to_uint(_substitute(sq, k_string))
            blob = _substitute(sq, blob_string)
            ef = to_uint(_substitute(sq, ef_string)) if ef_string is not None else None
            score_as = _substitute(sq, score_string) if score_string is not None else None
        except CommandError as exc:
            raise _err(messages.SEARCH_VECTOR_POST_PREFIX.format(exc.text))
        if score_as is None:
            score_as = b"__" + attr.alias + b"_score"
        sq.score_as = score_as
        if not blob:
            raise _err(messages.SEARCH_INVALID_QUERY_SYNTAX)
        if ef is not None:
            bad = verify_range(ef, 1, 1000000)
            if bad:
                raise _err(messages.SEARCH_EF_QUERY_RANGE.format(bad, 1000000))
        bad = verify_range(k, 1, MAX_KNN)
        if bad:
            raise _err(messages.SEARCH_KNN_RANGE.format(bad, MAX_KNN))
        sq.knn = (attr, k, blob, ef)
    if sq.timeout_ms > MAX_TIMEOUT_MS:
        raise _err(messages.SEARCH_TIMEOUT_RANGE)
    if sq.dialect < 2 or sq.dialect > 4:
        raise _err(messages.SEARCH_DIALECT)
    for name in sq.params:
        if name not in sq.used:
            raise _err(messages.SEARCH_PARAM_NOT_USED.format(text(name)))
    if sq.sortby is not None and index_def.attribute(sq.sortby[0]) is None:
        raise _err(messages.SEARCH_SORTBY_FIELD.format(text(sq.sortby[0])))
    if sq.returns is not None:
        sq.returns = [(_resolve(index_def, ident), alias) for ident, alias in sq.returns]
    return sq


def _is_star(pre: str) -> bool:
    return pre.replace("(", "").replace(")", "").strip() == "*"


def _resolve(index_def, ident: bytes):
    """A RETURN field named by an alias stands for its identifier."""
    attr = index_def.by_alias(ident)
    return attr.identifier if attr is not None else ident


def _parse_return(sq, it):
    count = to_uint(it.pop())
    if count == 0:
        sq.no_content = True
        return
    out = []
    i = 0
    while i < count:
        ident = it.pop()
        alias = ident
        if it.match(b"AS"):
            alias = it.pop()
            i += 2
            if i > count:
                raise _err(messages.SEARCH_UNEXPECTED_AS)
        out.append((ident, alias))
        i += 1
    sq.returns = out


def _parse_params(sq, it):
    count = to_uint(it.pop())
    if count & 1:
        raise _err(messages.SEARCH_PARAM_COUNT_ODD)
    while count > 0:
        k = it.pop()
        v = it.pop()
        if k in sq.params:
            raise _err(messages.SEARCH_PARAM_DEFINED.format(text(k)))
        sq.params[k] = v
        count -= 2
