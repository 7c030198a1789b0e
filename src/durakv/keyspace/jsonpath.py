"""valkey-json's path language: the legacy dialect (`.a.b`, `a["b"]`, `.[0]`) and JSONPath (`$..a[?(@.x>1)]`).

valkey-json (selector.cc) parses and evaluates a path in one pass, as a recursive-descent parser that walks
the document while it reads the path and forks at every wildcard, slice, union, filter and recursive descent.
What a path selects, in which order, which errors are syntax errors (they fail the whole command) and which
only end one branch of the walk (a missing member, an index out of bounds, a wildcard on a scalar), all follow
from that interleaving, so this module is written the same way rather than as a separate parser and
evaluator. No JSONPath library reproduces this dialect (filters with `@.a[?(@ > 1)]`, `$`-paths as
comparison values, unquoted member names with any character but `.[]()<>=!'" |&`, legacy vs v2 replies), so
none is used.

The grammar (selector.cc's EBNF, summarized):

    SupportedPath  ::= ["$" | "."] RelativePath
    RelativePath   ::= empty | ".." SupportedPath | "." QualifiedPath | BracketPath | QualifiedPath
    QualifiedPath  ::= (Key | BracketPathElement) RelativePath
    Key            ::= "*" [ ["."] "[?(" FilterExpr ")]" ] | UnquotedMemberName
    BracketElement ::= "[" ( "*" "]" ["[?(" FilterExpr ")]"] | QuotedName {"," QuotedName} "]"
                            | "?(" FilterExpr ")" "]" | Slice "]" | Integer {"," Integer} "]" )
    FilterExpr     ::= Term {"||" Term}        Term ::= Factor {"&&" Factor}
    Factor         ::= "@" MemberName [Op Value] | "@" Op Value | Value Op "@" [MemberName]
                       | "@" MemberName "[?(" "@" Op Value ")]" | "@" MemberName "[" Integer "]" Op Value
                       | "(" FilterExpr ")"
    Value          ::= null | true | false | Number | "string" | 'string' | "$" path

A path is JSONPath (v2) when it starts with "$"; the selection then is a list (possibly empty) and only
syntax errors are errors. A legacy path selects one value and a missing one is an error.

Bounds (valkey-json's): the path is at most 128 KB (MAX_QUERY_STRING_BYTES), parsing recursion at most 200
deep (MAX_PARSER_RECURSION), at most 20 recursive-descent tokens ("..").

Selections are (value, path) pairs; a path is a tuple of member names (str) and array indexes (int) from the
root, which is what writes follow (valkey-json uses JSON Pointers the same way).
"""

from .jsondoc import (INT64_MAX, INT64_MIN, JFloat, JsonError, NESTING_CEILING, dumps, is_number, number_value,
                      parse as parse_json, to_bytes)

MAX_QUERY_STRING_BYTES = 128 * 1024
MAX_PARSER_RECURSION = 200
MAX_RECURSIVE_DESCENT_TOKENS = 20

# valkey-json's error codes (util.h JSONUTIL_*) are names here; messages.JSON_ERRORS has their reply texts.

# Errors that end the whole selection (isSyntaxError); the others end only the branch that met them.
SYNTAX_ERRORS = frozenset(("INVALID_PATH", "INVALID_MEMBER_NAME", "INVALID_NUMBER", "INVALID_IDENTIFIER",
                           "EMPTY_EXPR_TOKEN", "INDEX_NOT_NUMBER", "STEP_ZERO", "PARENT_NOT_EXIST",
                           "LIMIT_RECURSION", "LIMIT_DESCENT", "LIMIT_QUERY"))

# token types
(UNKNOWN, DOLLAR, DOT, DOTDOT, WILDCARD, COLON, COMMA, AT, QUESTION_MARK, LBRACKET, RBRACKET, LPAREN, RPAREN,
 SINGLE_QUOTE, DOUBLE_QUOTE, PLUS, MINUS, DIV, PCT, EQ, NE, GT, LT, GE, LE, NOT, ASSIGN, ALPHA, DIGIT, SPACE,
 SPECIAL_CHAR, AND, OR, END) = range(34)

_SINGLE = {"$": DOLLAR, "*": WILDCARD, ":": COLON, ",": COMMA, "?": QUESTION_MARK, "@": AT, "[": LBRACKET,
           "]": RBRACKET, "(": LPAREN, ")": RPAREN, "'": SINGLE_QUOTE, '"': DOUBLE_QUOTE, "+": PLUS, "-": MINUS,
           "/": DIV, "%": PCT, " ": SPACE}
_PAIRS = {"&": ("&", AND, SPECIAL_CHAR), "|": ("|", OR, SPECIAL_CHAR), "=": ("=", EQ, ASSIGN),
          "!": ("=", NE, NOT), ">": ("=", GE, GT), "<": ("=", LE, LT)}
_TWO_CHAR = frozenset((DOTDOT, NE, GE, LE, EQ, AND, OR))
_COMPARISONS = frozenset((EQ, NE, LT, LE, GT, GE))
_SWAPPED = {EQ: EQ, NE: NE, GT: LT, LT: GT, GE: LE, LE: GE}

_MEMBER_TERMINATORS = frozenset(".[]()<>=!'\" |&")
_PATH_VALUE_TERMINATORS = frozenset("]()<>=!'\" |&")
_NUMBER_CHARS = frozenset("+-0123456789.Ee")
_SIGNED_DIGITS = frozenset("-+0123456789")
_UNESCAPE = {"\\": "\\", "t": "\t", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "'": "'"}

NONODE = object()   # "no current node": the walk of this branch ended (C's node == nullptr)


def _isdigit(c):
    return "0" <= c <= "9"


def _isalpha(c):
    return "a" <= c <= "z" or "A" <= c <= "Z"


def _wrap64(n):
    """C's int64 arithmetic on an overflowing index."""
    n &= (1 << 64) - 1
    return n - (1 << 64) if n >> 63 else n


class _Depth:
    """The parser's recursion counter (selector.cc's thread_local current_depth), shared by nested selectors."""
    current = 0


class _Lexer:
    __slots__ = ("s", "n", "p", "tok", "tok_pos", "rd_tokens")

    def __init__(self, path: str):
        self.s = path
        self.n = len(path)
        self.p = 0
        self.tok = UNKNOWN
        self.tok_pos = 0
        self.rd_tokens = 0

    def peek(self):
        p = self.p
        if p >= self.n:
            return END
        c = self.s[p]
        t = _SINGLE.get(c)
        if t is not None:
            return t
        if c == ".":
            return DOTDOT if p + 1 < self.n and self.s[p + 1] == "." else DOT
        pair = _PAIRS.get(c)
        if pair is not None:
            second, both, alone = pair
            return both if p + 1 < self.n and self.s[p + 1] == second else alone
        if _isdigit(c):
            return DIGIT
        if _isalpha(c):
            return ALPHA
        return SPECIAL_CHAR

    def next(self, skip_space=False):
        t = self.peek()
        self.tok = t
        if t == END:
            return t            # the token's text stays the previous one's, as in selector.cc
        self.tok_pos = self.p
        if t == SPACE and skip_space:
            s, n = self.s, self.n
            p = self.p
            while p < n and s[p] == " ":
                p += 1
            self.p = p
            return self.next()
        if t == DOTDOT:
            self.rd_tokens += 1
            self.p += 2
        elif t in _TWO_CHAR:
            self.p += 2
        else:
            self.p += 1
        return t

    def match(self, t, skip_space=False):
        if skip_space and self.tok == SPACE:
            self._skip_blank()
            self.next()
            return self.match(t)
        if self.tok == t:
            self.next(skip_space)
            return True
        return False

    def _skip_blank(self):
        s, n, p = self.s, self.n, self.p
        while p < n and s[p] == " ":
            p += 1
        self.p = p

    def skip_spaces(self):
        if self.tok == SPACE:
            self.next(True)
        else:
            self._skip_blank()

    def char_at(self, pos):
        return self.s[pos] if pos < self.n else "\0"

    def scan_integer(self):
        """(code, value): an optionally signed integer."""
        t = self.tok
        if t not in (DIGIT, PLUS, MINUS):
            return "VALUE_NOT_NUMBER", 0
        if t == DIGIT:
            val = self._scan_unsigned()
        else:
            sign = 1 if t == PLUS else -1
            self.next()
            if self.tok != DIGIT:
                return "VALUE_NOT_NUMBER", 0
            val = _wrap64(sign * self._scan_unsigned())
        self.next()
        return None, val

    def _scan_unsigned(self):
        s, n = self.s, self.n
        val = ord(s[self.tok_pos]) - 48
        p = self.p
        while p < n and _isdigit(s[p]):
            val = val * 10 + ord(s[p]) - 48
            p += 1
        self.p = p
        return _wrap64(val)

    def scan_unquoted_member_name(self):
        start = self.tok_pos
        if self.char_at(start) in _MEMBER_TERMINATORS or start >= self.n:
            return "INVALID_MEMBER_NAME", None
        # the name is the token's character and the run after it, read from the token on (selector.cc's
        # string_view(p_start, 1 + run)), even when the token is a stale one
        run = self._run_length(lambda c: c not in _MEMBER_TERMINATORS)
        name = s_slice(self.s, start, 1 + run)
        self.p += run
        self.next()
        return None, name

    def scan_number_in_filter(self):
        start = self.tok_pos
        if self.char_at(start) not in _NUMBER_CHARS and start < self.n:
            return "INVALID_NUMBER", None
        run = self._run_length(lambda c: c in _NUMBER_CHARS)
        text = s_slice(self.s, start, 1 + run)
        self.p += run
        self.next()
        return None, text

    def scan_identifier(self):
        start = self.tok_pos
        c = self.char_at(start)
        if not (_isdigit(c) or _isalpha(c)):
            return "INVALID_IDENTIFIER", None
        run = self._run_length(lambda c: _isdigit(c) or _isalpha(c))
        text = s_slice(self.s, start, 1 + run)
        self.p += run
        self.next()
        return None, text

    def _run_length(self, accept):
        """How many characters from the current position on `accept` takes (strspn / strcspn)."""
        s, n, p = self.s, self.n, self.p
        q = p
        while q < n and accept(s[q]):
            q += 1
        return q - p

    def scan_path_value(self):
        """A "$..." path used as a filter's comparison value: up to a terminator outside brackets."""
        start = self.tok_pos
        s, n, p = self.s, self.n, self.p
        in_brackets = in_quotes = False
        quote = '"'
        while p < n:
            c = s[p]
            if not in_brackets:
                if c == "[":
                    in_brackets = True
                elif c in _PATH_VALUE_TERMINATORS:
                    break
                p += 1
            elif not in_quotes:
                if c == '"' or c == "'":
                    in_quotes = True
                    quote = c
                elif c in _SIGNED_DIGITS:
                    pass
                elif c == "]":
                    in_brackets = False
                else:
                    self.p = p
                    return "INVALID_PATH", None
                p += 1
            else:
                if c == "\\" and p + 1 < n and s[p + 1] == quote:
                    p += 1
                elif c == quote:
                    in_quotes = False
                p += 1
        self.p = p
        text = s[start:p]
        self.next()
        return None, text

    def _scan_to_quote(self, quote, start):
        """Index of the closing quote (one not right after a backslash) at or after start, or n."""
        s, n = self.s, self.n
        p = start
        prev = None
        while p < n:
            if s[p] == quote and (prev is None or s[prev] != "\\"):
                return p
            prev = p
            p += 1
        return n

    def scan_double_quoted(self):
        """(code, str): a double-quoted string, unescaped by the JSON parser."""
        start = self.tok_pos
        end = self._scan_to_quote('"', self.p)
        self.p = end + 1 if end < self.n else end
        text = self.s[start:self.p]
        try:
            value = parse_json(to_bytes(text), NESTING_CEILING)
        except JsonError as exc:
            return exc.code, None
        if type(value) is not str:
            return "PARSE", None
        self.next()
        return None, value

    def scan_single_quoted(self):
        start = self.p
        end = self._scan_to_quote("'", start)
        raw = self.s[start:end]
        self.p = end + 1 if end < self.n else end
        if "\\" in self.s[start:self.p]:
            raw = _unescape_single(raw)
        self.next()
        return None, raw

    def scan_single_quoted_as_json(self):
        """A single-quoted comparison value rewritten as a double-quoted JSON string (then parsed)."""
        start = self.p
        end = self._scan_to_quote("'", start)
        raw = self.s[start:end]
        self.p = end + 1 if end < self.n else end
        out = ['"']
        for i, c in enumerate(raw):
            if c == '"':
                out.append('\\"')
            elif c == "\\":
                following = raw[i + 1] if i + 1 < len(raw) else self.char_at(end)
                if following != "'":
                    out.append(c)
            else:
                out.append(c)
        out.append('"')
        self.next()
        return None, "".join(out)


def s_slice(s, start, length):
    return s[start:start + length]


def _unescape_single(raw):
    out = []
    i, n = 0, len(raw)
    while i < n:
        c = raw[i]
        if c == "\\" and i + 1 < n and raw[i + 1] in _UNESCAPE:
            out.append(_UNESCAPE[raw[i + 1]])
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


class _TooDeep(Exception):
    pass


class Selector:
    """One evaluation of one path against a root value. Entry points: get_values (READ), prepare_set
    (INSERT_OR_UPDATE: updates in `result`, inserts in `inserts`) and delete_values (DELETE); each returns an
    error code or None. `is_v2` says whether the path was JSONPath."""

    READ, INSERT_OR_UPDATE, DELETE = 0, 1, 2

    def __init__(self, force_v2=False):
        self.is_v2 = force_v2
        self.root = None
        self.node = NONODE
        self.node_path = ()
        self.lex = None
        self.max_path_depth = 0
        self.cur_path_depth = 0
        self.result = []          # [(value, path)]
        self.inserts = {}         # path -> None, in order
        self.mode = self.READ
        self.recursive_search = False
        self.error = None

    # -- entry points ------------------------------------------------------------------------------------
    def get_values(self, root, path: str):
        rc = self._init(root, path, self.READ)
        return rc if rc is not None else self._run(self._eval)

    def prepare_set(self, root, path: str):
        rc = self._init(root, path, self.INSERT_OR_UPDATE)
        return rc if rc is not None else self._run(self._eval)

    def delete_values(self, root, path: str):
        """Code, and the selected paths to delete (deepest first, then last index first, as the C code
        orders them so that no deletion moves another one's target)."""
        rc = self._init(root, path, self.DELETE)
        if rc is None:
            rc = self._run(self._eval)
        if rc is not None:
            return rc
        if not self.is_v2 and not self.result:
            return "PATH_NOT_EXIST"
        if not self.result:
            return self.error
        return None

    def _run(self, fn):
        try:
            return fn()
        except (_TooDeep, RecursionError):
            return "LIMIT_RECURSION"

    def _init(self, root, path, mode):
        if len(path) > MAX_QUERY_STRING_BYTES and len(to_bytes(path)) > MAX_QUERY_STRING_BYTES:
            return "LIMIT_QUERY"
        self.mode = mode
        self.root = root
        self.node = root
        self.node_path = ()
        self.lex = _Lexer(path)
        self.result = []
        self.inserts = {}
        self.max_path_depth = 0
        self.cur_path_depth = 0
        self.error = None
        self.lex.next()
        return None

    # -- results -------------------------------------------------------------------------------------------
    def values(self):
        return [v for v, _ in self.result]

    def unique(self):
        """The selections without repeats, in order (getUniqueResultSet)."""
        if len(self.result) <= 1:
            return self.result
        seen = set()
        out = []
        for v, path in self.result:
            if path not in seen:
                seen.add(path)
                out.append((v, path))
        return out

    def _dedupe(self):
        self.result = self.unique()

    # -- helpers -------------------------------------------------------------------------------------------
    def _incr_depth(self):
        self.cur_path_depth += 1
        if self.cur_path_depth > self.max_path_depth:
            self.max_path_depth = self.cur_path_depth

    def _snapshot(self):
        lex = self.lex
        return (self.node, self.node_path, lex.p, lex.tok, lex.tok_pos, self.cur_path_depth)

    def _restore(self, state):
        lex = self.lex
        self.node, self.node_path, lex.p, lex.tok, lex.tok_pos, self.cur_path_depth = state

    # -- the walk --------------------------------------------------------------------------------------------
    def _eval(self):
        _Depth.current += 1
        try:
            if _Depth.current > MAX_PARSER_RECURSION:
                return "LIMIT_RECURSION"
            rc = self._parse_supported_path()
            if rc is None and self.node is not NONODE:
                self.result.append((self.node, self.node_path))
            return rc
        finally:
            _Depth.current -= 1

    def _parse_supported_path(self):
        lex = self.lex
        if self.node is NONODE or lex.match(END):
            return None
        if lex.match(DOLLAR):
            if self.node is not self.root:
                return "DOLLAR_NOT_ROOT"
            self.is_v2 = True
        elif lex.match(DOT):
            pass
        return self._parse_relative_path()

    def _parse_relative_path(self):
        # RelativePath ::= empty | RecursivePath | DotPath | BracketPath | QualifiedPath; the tail recursion of
        # QualifiedPath and BracketPath into RelativePath is this loop
        lex = self.lex
        while True:
            if self.node is NONODE or lex.match(END):
                return None
            t = lex.tok
            if t == END:
                return None
            if t == DOTDOT:
                return self._parse_recursive_path()
            if t == DOT:
                lex.match(DOT)
                rc = self._parse_qualified_element()
            elif t == LBRACKET:
                rc = self._parse_bracket_element()
                if rc is None and lex.tok == END:
                    return None
            else:
                rc = self._parse_qualified_element()
            if rc is not None:
                return rc

    def _parse_recursive_path(self):
        self.recursive_search = True
        lex = self.lex
        lex.match(DOTDOT)
        if lex.rd_tokens > MAX_RECURSIVE_DESCENT_TOKENS:
            return "LIMIT_DESCENT"
        rc = self._recursive_search(self.node)
        if rc is not None:
            return rc
        self._dedupe()
        return None

    def _recursive_search(self, v):
        lex = self.lex
        if lex.tok == DOTDOT or lex.tok == DOT:
            return "INVALID_DOT_SEQUENCE"
        t = type(v)
        if t is not dict and t is not list:
            self.node = NONODE
            return None
        state = self._snapshot()
        self.node = v
        rc = self._eval()
        self._restore(state)
        if rc in SYNTAX_ERRORS:
            return rc
        base = self.node_path
        if t is dict:
            for k, x in list(v.items()):
                self.node_path = base + (k,)
                self._incr_depth()
                rc = self._recursive_search(x)
                self.cur_path_depth -= 1
                if rc in SYNTAX_ERRORS:
                    return rc
                self.node_path = base
        else:
            for i in range(len(v)):
                self.node_path = base + (i,)
                self._incr_depth()
                rc = self._recursive_search(v[i])
                self.cur_path_depth -= 1
                if rc in SYNTAX_ERRORS:
                    return rc
                self.node_path = base
        self.node = NONODE
        return None

    def _parse_qualified_element(self):
        if self.lex.tok == LBRACKET:
            return self._parse_bracket_element()
        return self._parse_key()

    def _parse_bracket_element(self):
        lex = self.lex
        if not lex.match(LBRACKET, True):
            return "INVALID_PATH"
        t = lex.tok
        if t == WILDCARD:
            rc = self._parse_wildcard_in_brackets()
        elif t == SINGLE_QUOTE or t == DOUBLE_QUOTE:
            rc = self._parse_names_in_brackets()
        else:
            rc = self._parse_index_expr()
        if rc is not None:
            return rc
        lex.skip_spaces()
        return None

    def _parse_wildcard_in_brackets(self):
        lex = self.lex
        if not lex.match(WILDCARD, True):
            return "INVALID_PATH"
        if not lex.match(RBRACKET, True):
            return "INVALID_PATH"
        if lex.tok == LBRACKET and lex.peek() == QUESTION_MARK:
            if not lex.match(LBRACKET, True):
                return "INVALID_PATH"
            lex.skip_spaces()
            if not lex.match(QUESTION_MARK):
                return "INVALID_PATH"
            if not lex.match(LPAREN):
                return "INVALID_PATH"
            result = []
            rc = self._parse_filter_expr(result)
            if rc is not None:
                return rc
            if not lex.match(RPAREN, True) or not lex.match(RBRACKET, True):
                return "INVALID_PATH"
            return self._process_filter_result(result)
        return self._process_wildcard()

    def _parse_names_in_brackets(self):
        lex = self.lex
        names = []
        rc, name = self._parse_quoted_name()
        if rc is not None:
            return rc
        names.append(name)
        while lex.match(COMMA, True):
            lex.skip_spaces()
            rc, name = self._parse_quoted_name()
            if rc is not None:
                return rc
            names.append(name)
        if not lex.match(RBRACKET, True):
            return "INVALID_PATH"
        return self._process_member_union(names)

    def _process_member_union(self, names):
        if len(names) == 1:
            return self._traverse_to_member(names[0])
        node = self.node
        if type(node) is not dict:
            if self.mode != self.READ:
                return "NOT_OBJECT_INSERT"
            self.node = NONODE
            return None
        for name in names:
            if name in node:
                rc = self._eval_object_member(name, node[name])
                if rc in SYNTAX_ERRORS:
                    return rc
        self.node = NONODE
        return None

    def _parse_quoted_name(self):
        lex = self.lex
        t = lex.tok
        if t == DOUBLE_QUOTE:
            return lex.scan_double_quoted()
        if t == SINGLE_QUOTE:
            return lex.scan_single_quoted()
        return "INVALID_PATH", None

    def _parse_key(self):
        lex = self.lex
        if lex.match(WILDCARD):
            if lex.tok == DOT:
                lex.next()
            if lex.tok == LBRACKET and lex.peek() == QUESTION_MARK:
                return self._parse_wildcard_filter()
            return self._process_wildcard()
        rc, name = lex.scan_unquoted_member_name()
        if rc is not None:
            return rc
        return self._traverse_to_member(name)

    def _parse_wildcard_filter(self):
        lex = self.lex
        if type(self.node) is not list:
            return "INVALID_PATH"
        if not lex.match(LBRACKET) or not lex.match(QUESTION_MARK) or not lex.match(LPAREN, True):
            return "INVALID_PATH"
        result = []
        rc = self._parse_filter_expr(result)
        if rc is not None:
            return rc
        if not lex.match(RPAREN, True) or not lex.match(RBRACKET):
            return "INVALID_PATH"
        return self._process_filter_result(result)

    def _process_wildcard(self):
        node = self.node
        t = type(node)
        if t is dict:
            for k, x in list(node.items()):
                state = self._snapshot()
                rc = self._eval_object_member(k, x)
                self._restore(state)
                if rc in SYNTAX_ERRORS:
                    return rc
            self.node = NONODE
            return None
        if t is list:
            for i in range(len(node)):
                rc = self._eval_array_member(i)
                if rc in SYNTAX_ERRORS:
                    return rc
            self.node = NONODE
            return None
        return "INVALID_WILDCARD" if self.is_v2 else "INVALID_PATH"

    def _eval_member(self, value, path_pos):
        _Depth.current += 1
        try:
            if _Depth.current > MAX_PARSER_RECURSION:
                return "LIMIT_RECURSION"
            self._incr_depth()
            self.node = value
            self.lex.p = path_pos
            return self._eval()
        finally:
            _Depth.current -= 1

    def _eval_object_member(self, name, value):
        if type(self.node) is not dict:
            return "NOT_OBJECT"
        state = self._snapshot()
        self.node_path = self.node_path + (name,)
        rc = self._eval_member(value, self.lex.p)
        self._restore(state)
        return rc

    def _eval_array_member(self, idx):
        node = self.node
        if type(node) is not list:
            return "NOT_ARRAY"
        if idx < 0 or idx >= len(node):
            return "OUT_OF_BOUNDS"
        state = self._snapshot()
        self.node_path = self.node_path + (idx,)
        rc = self._eval_member(node[idx], self.lex.p)
        self._restore(state)
        return rc

    def _traverse_to_member(self, name):
        node = self.node
        if type(node) is not dict:
            if self.mode != self.READ:
                return "NOT_OBJECT_INSERT"
            self.node = NONODE
            return None
        if name not in node:
            if self.mode == self.INSERT_OR_UPDATE and not self.recursive_search:
                # a member can be added only as the last element of the path
                if self.lex.peek() == END:
                    self.inserts[self.node_path + (name,)] = None
                    self._incr_depth()
                else:
                    self.error = "PATH_NOT_EXIST"
                    return "PATH_NOT_EXIST"
            self.node = NONODE
            return None
        self.node_path = self.node_path + (name,)
        self.node = node[name]
        self._incr_depth()
        return None

    def _traverse_to_index(self, idx):
        node = self.node
        if type(node) is not list:
            self.node = NONODE
            return None
        if idx < 0:
            idx += len(node)
        if idx >= len(node) or idx < 0:
            return "OUT_OF_BOUNDS"
        self.node_path = self.node_path + (idx,)
        self.node = node[idx]
        self._incr_depth()
        return None

    # -- indexes, slices, unions -------------------------------------------------------------------------
    def _parse_index_expr(self):
        t = self.lex.tok
        if t == END:
            return "EMPTY_EXPR_TOKEN"
        if t == QUESTION_MARK:
            return self._parse_filter()
        if t == COLON:
            return self._parse_slice_from_colon()
        if t == COMMA:
            return "INVALID_PATH"
        return self._parse_slice_union_or_index()

    def _parse_index(self):
        rc, val = self.lex.scan_integer()
        if rc == "VALUE_NOT_NUMBER":
            rc = "INDEX_NOT_NUMBER"
        return rc, val

    def _parse_slice_from_colon(self):
        node = self.node
        if type(node) is not list:
            return "NOT_ARRAY"
        lex = self.lex
        lex.next(True)
        t = lex.tok
        if t == RBRACKET:
            return self._process_slice(0, len(node))
        if t == COLON:
            lex.next(True)
            return self._parse_step(0, len(node))
        return self._parse_end_and_step(0)

    def _parse_slice_union_or_index(self):
        rc, start = self._parse_index()
        if rc is not None:
            return rc
        lex = self.lex
        lex.skip_spaces()
        t = lex.tok
        if t == COLON:
            return self._parse_slice_from_integer(start)
        if t == COMMA:
            return self._parse_index_union(start)
        return self._process_subscript(start)

    def _parse_slice_from_integer(self, start):
        node = self.node
        if type(node) is not list:
            return "NOT_ARRAY"
        lex = self.lex
        lex.next(True)
        lex.skip_spaces()
        t = lex.tok
        if t == RBRACKET:
            return self._process_slice(start, len(node))
        if t == COLON:
            lex.next()
            return self._parse_step(start, len(node))
        return self._parse_end_and_step(start)

    def _parse_end_and_step(self, start):
        rc, end = self._parse_index()
        if rc is not None:
            return rc
        lex = self.lex
        lex.skip_spaces()
        if lex.tok == COLON:
            lex.next()
            return self._parse_step(start, end)
        return self._process_slice(start, end)

    def _parse_step(self, start, end):
        lex = self.lex
        lex.skip_spaces()
        if lex.tok == RBRACKET:
            return self._process_slice(start, end)
        rc, step = self._parse_index()
        if rc is not None:
            return rc
        return self._process_slice(start, end, step)

    def _process_subscript(self, idx):
        if not self.lex.match(RBRACKET, True):
            return "INVALID_PATH"
        if type(self.node) is not list:
            return "NOT_ARRAY"
        return self._traverse_to_index(idx)

    def _process_slice(self, start, end, step=1):
        node = self.node
        if type(node) is not list:
            return "NOT_ARRAY"
        if not self.lex.match(RBRACKET, True):
            return "INVALID_PATH"
        size = len(node)
        if start < 0:
            start += size
        if end < 0:
            end += size
        if step == 0:
            return "STEP_ZERO"
        start = 0 if start < 0 else min(start, size)
        end = 0 if end < 0 else min(end, size)
        for i in range(start, end, step):
            rc = self._eval_array_member(i)
            if rc in SYNTAX_ERRORS:
                return rc
        self.node = NONODE
        return None

    def _parse_index_union(self, first):
        if type(self.node) is not list:
            return "NOT_ARRAY"
        lex = self.lex
        indices = [first]
        comma = False
        lex.skip_spaces()
        while lex.tok != RBRACKET:
            if lex.tok == COMMA:
                if comma:
                    return "INVALID_PATH"
                comma = True
                lex.next(True)
            else:
                if not comma:
                    return "INVALID_PATH"
                comma = False
                lex.skip_spaces()
                rc, idx = self._parse_index()
                if rc is not None:
                    return rc
                indices.append(idx)
            lex.skip_spaces()
        if comma:
            return "INVALID_PATH"
        if not lex.match(RBRACKET, True):
            return "INVALID_PATH"
        node = self.node
        size = len(node)
        for i in indices:
            if i < 0:
                i += size
            if i < 0 or i > size - 1:
                continue
            rc = self._eval_array_member(i)
            if rc is not None:
                return rc
        self.node = NONODE
        return None

    # -- filters ---------------------------------------------------------------------------------------------
    def _parse_filter(self):
        lex = self.lex
        lex.next()
        if not lex.match(LPAREN):
            return "INVALID_PATH"
        result = []
        rc = self._parse_filter_expr(result)
        if rc is not None:
            return rc
        if not lex.match(RPAREN):
            return "INVALID_PATH"
        if not lex.match(RBRACKET, True):
            return "INVALID_PATH"
        return self._process_filter_result(result)

    def _process_filter_result(self, result):
        node = self.node
        t = type(node)
        if t is list:
            for idx in result:
                rc = self._eval_array_member(idx)
                if rc in SYNTAX_ERRORS:
                    return rc
            self.node = NONODE
            return None
        if t is dict:
            if not result:
                self.node = NONODE
            return None
        if result:
            rc = self._eval_member(node, self.lex.p)
            if rc in SYNTAX_ERRORS:
                return rc
        self.node = NONODE
        return None

    def _enter(self):
        _Depth.current += 1
        if _Depth.current > MAX_PARSER_RECURSION:
            _Depth.current -= 1
            return False
        return True

    def _parse_filter_expr(self, result):
        if not self._enter():
            return "LIMIT_RECURSION"
        try:
            lex = self.lex
            lex.skip_spaces()
            rc = self._parse_term(result)
            if rc is not None:
                return rc
            seen = None
            while lex.match(OR, True):
                v = []
                rc = self._parse_term(v)
                if rc is not None:
                    return rc
                if seen is None:
                    seen = set(result)
                for e in v:
                    if e not in seen:
                        seen.add(e)
                        result.append(e)
            lex.skip_spaces()
            return None
        finally:
            _Depth.current -= 1

    def _parse_term(self, result):
        if not self._enter():
            return "LIMIT_RECURSION"
        try:
            rc = self._parse_factor(result)
            if rc is not None:
                return rc
            lex = self.lex
            while lex.match(AND, True):
                left = list(result)
                result.clear()
                right = []
                rc = self._parse_factor(right)
                if rc is not None:
                    return rc
                keep = set(right)
                result.extend(e for e in left if e in keep)
            return None
        finally:
            _Depth.current -= 1

    def _parse_factor(self, result):
        if not self._enter():
            return "LIMIT_RECURSION"
        try:
            return self._factor(result)
        finally:
            _Depth.current -= 1

    def _factor(self, result):
        lex = self.lex
        lex.skip_spaces()
        if lex.tok == LPAREN:
            lex.next(True)
            rc = self._parse_filter_expr(result)
            if rc is not None:
                return rc
            if not lex.match(RPAREN, True):
                return "INVALID_PATH"
            return None
        if lex.match(AT):
            if lex.tok == DOT or lex.tok == LBRACKET:
                rc, name = self._parse_member_name()
                if rc is not None:
                    return rc
                lex.skip_spaces()
                t = lex.tok
                if t in _COMPARISONS:
                    rc, op = self._parse_comparison_op()
                    if rc is not None:
                        return rc
                    rc, value = self._parse_comparison_value()
                    if rc is not None:
                        return rc
                    return self._compare(False, name, op, value, result)
                if t == LBRACKET:
                    lex.next(True)
                    if lex.tok == QUESTION_MARK:
                        lex.next(True)
                        if not lex.match(LPAREN):
                            return "INVALID_PATH"
                        if lex.tok == AT:
                            lex.next(True)
                            rc, op = self._parse_comparison_op()
                            if rc is not None:
                                return rc
                            rc, value = self._parse_comparison_value()
                            if rc is not None:
                                return rc
                        else:
                            rc, value = self._parse_comparison_value()
                            if rc is not None:
                                return rc
                            rc, op = self._parse_comparison_op()
                            if rc is not None:
                                return rc
                            op = _SWAPPED.get(op)
                            if op is None:
                                return "INVALID_PATH"
                            if not lex.match(AT):
                                return "INVALID_PATH"
                        return self._array_contains(name, op, value, result)
                    rc, index = self._parse_index()
                    if rc is not None:
                        return rc
                    if not lex.match(RBRACKET):
                        return "INVALID_PATH"
                    rc, op = self._parse_comparison_op()
                    if rc is not None:
                        return rc
                    rc, value = self._parse_comparison_value()
                    if rc is not None:
                        return rc
                    return self._compare_at_index(index, name, op, value, result)
                return self._has_attribute(name, result)
            rc, op = self._parse_comparison_op()
            if rc is not None:
                return rc
            rc, value = self._parse_comparison_value()
            if rc is not None:
                return rc
            return self._compare(True, None, op, value, result)
        # the value first: @ on the right, the comparison reversed
        rc, value = self._parse_comparison_value()
        if rc is not None:
            return rc
        lex.skip_spaces()
        rc, op = self._parse_comparison_op()
        if rc is not None:
            return rc
        op = _SWAPPED.get(op)
        if op is None:
            return "INVALID_PATH"
        if not lex.match(AT):
            return "INVALID_PATH"
        lex.skip_spaces()
        if lex.tok in (RPAREN, AND, OR):
            return self._compare(True, None, op, value, result)
        rc, name = self._parse_member_name()
        if rc is not None:
            return rc
        if lex.tok == LBRACKET:
            lex.next(True)
            rc, index = self._parse_index()
            if rc is not None:
                return rc
            if not lex.match(RBRACKET):
                return "INVALID_PATH"
            return self._compare_at_index(index, name, op, value, result)
        return self._compare(False, name, op, value, result)

    def _parse_member_name(self):
        lex = self.lex
        if lex.match(DOT):
            if lex.match(LBRACKET):
                return self._parse_bracketed_name()
            return lex.scan_unquoted_member_name()
        if lex.match(LBRACKET):
            return self._parse_bracketed_name()
        return "INVALID_PATH", None

    def _parse_bracketed_name(self):
        lex = self.lex
        lex.skip_spaces()
        rc, name = self._parse_quoted_name()
        if rc is not None:
            return rc, None
        if not lex.match(RBRACKET, True):
            return "INVALID_PATH", None
        return None, name

    def _parse_comparison_value(self):
        if not self._enter():
            return "LIMIT_RECURSION", None
        try:
            return self._comparison_value()
        finally:
            _Depth.current -= 1

    def _comparison_value(self):
        lex = self.lex
        t = lex.tok
        if t == DOLLAR:
            rc, path = lex.scan_path_value()
            if rc is not None:
                return rc, None
            sub = Selector()
            rc = sub._init(self.root, path, self.READ)
            if rc is None:
                rc = sub._eval()
            if rc is not None:
                return rc, None
            if len(sub.result) != 1 or type(sub.result[0][0]) in (dict, list):
                return "INVALID_PATH", None
            return None, sub.result[0][0]
        if t == DOUBLE_QUOTE:
            return lex.scan_double_quoted()
        if t == SINGLE_QUOTE:
            rc, text = lex.scan_single_quoted_as_json()
        elif t == ALPHA and lex.char_at(lex.tok_pos) == "n":
            rc, text = lex.scan_identifier()
            if rc is None and text != "null":
                rc = "INVALID_IDENTIFIER"
        elif t == ALPHA and lex.char_at(lex.tok_pos) in ("t", "f"):
            rc, text = lex.scan_identifier()
            if rc is None and text not in ("true", "false"):
                rc = "INVALID_IDENTIFIER"
        else:
            rc, text = lex.scan_number_in_filter()
        if rc is not None:
            return rc, None
        try:
            return None, parse_json(to_bytes(text), NESTING_CEILING)
        except JsonError as exc:
            return exc.code, None

    def _parse_comparison_op(self):
        lex = self.lex
        lex.skip_spaces()
        t = lex.tok
        if t not in _COMPARISONS:
            return "INVALID_PATH", None
        lex.skip_spaces()
        lex.next(True)
        return None, t

    def _array_contains(self, name, op, value, result):
        node = self.node
        if type(node) is list:
            for i, m in enumerate(node):
                if type(m) is not dict or name not in m:
                    continue
                v = m[name]
                if type(v) is list:
                    for w in v:
                        if _eval_op(w, op, value):
                            result.append(i)
                            break
        lex = self.lex
        if not lex.match(RPAREN, True) or not lex.match(RBRACKET):
            return "INVALID_PATH"
        return None

    def _compare_at_index(self, idx, name, op, value, result):
        node = self.node
        if type(node) is list:
            for i, m in enumerate(node):
                if type(m) is not dict or name not in m:
                    continue
                v = m[name]
                if type(v) is list:
                    j = idx + len(v) if idx < 0 else idx
                    if 0 <= j < len(v) and _eval_op(v[j], op, value):
                        result.append(i)
        return None

    def _compare(self, is_self, name, op, value, result):
        node = self.node
        t = type(node)
        if t is list:
            for i, m in enumerate(node):
                if is_self:
                    v = m
                else:
                    if type(m) is not dict or name not in m:
                        continue
                    v = m[name]
                if _eval_op(v, op, value):
                    result.append(i)
        elif t is dict:
            # valkey-json looks the member up with the name it has, an empty one for "@ op value"
            key = name if name is not None else ""
            if key in node and _eval_op(node[key], op, value):
                result.append(0)
        elif is_self:
            if _eval_op(node, op, value):
                result.append(0)
        return None

    def _has_attribute(self, name, result):
        node = self.node
        t = type(node)
        if t is list:
            for i, m in enumerate(node):
                if type(m) is dict and name in m:
                    result.append(i)
        elif t is dict:
            if name in node:
                result.append(0)
        else:
            return "INVALID_PATH"
        return None


def _kind(v):
    """RapidJSON's type of a value for comparisons: true and false are one kind here."""
    t = type(v)
    if t is bool:
        return 1
    if t is int or t is float or t is JFloat:
        return 2
    if t is str:
        return 3
    if t is dict:
        return 4
    if t is list:
        return 5
    return 0


def _eval_op(v, op, w):
    """Selector::evalOp: false when the kinds differ; numbers by value (doubles as doubles), strings by bytes."""
    k = _kind(v)
    if k != _kind(w):
        return False
    if k == 0:
        return op == EQ
    if k == 2:
        if type(v) is int and type(w) is int:
            a, b = v, w
        else:
            a, b = number_value(v), number_value(w)
    elif k == 3:
        a, b = to_bytes(v), to_bytes(w)
    elif k == 1:
        a, b = int(v), int(w)
    else:
        return False
    if op == EQ:
        return a == b
    if op == NE:
        return a != b
    if op == LT:
        return a < b
    if op == LE:
        return a <= b
    if op == GT:
        return a > b
    if op == GE:
        return a >= b
    return False


# -- writes along selections ---------------------------------------------------------------------------------

def parent_of(root, path):
    """(container, last key) of a path that exists, or None when it no longer does."""
    node = root
    for k in path[:-1]:
        if type(k) is int:
            if type(node) is not list or not 0 <= k < len(node):
                return None
        elif type(node) is not dict or k not in node:
            return None
        node = node[k]
    k = path[-1]
    if type(k) is int:
        if type(node) is not list or not 0 <= k < len(node):
            return None
    elif type(node) is not dict or k not in node:
        return None
    return node, k


def get_at(root, path):
    """The value at a path, or NONODE."""
    node = root
    for k in path:
        if type(k) is int:
            if type(node) is not list or not 0 <= k < len(node):
                return NONODE
        elif type(node) is not dict or k not in node:
            return NONODE
        node = node[k]
    return node


def delete_order(paths):
    """The paths to delete, deepest first and, among siblings, the highest index first (pathCompare)."""
    def key(path):
        return (len(path), tuple((0, k, "") if type(k) is int else (1, len(k), k) for k in path))
    return sorted(paths, key=key, reverse=True)


def has_v2_path(paths) -> bool:
    return any(p[:1] == "$" for p in paths)


def is_root_path(path: str) -> bool:
    return path == "." or path == "$"


def check_int64(n):
    return INT64_MIN <= n <= INT64_MAX


# -- what other modules read (valkey-json's shared API) ------------------------------------------------------

def select(root, path: str):
    """(values, is_v2): what JSON.GET's path selects in a document's root, in order (a legacy path: at most one,
    the first). Raises JsonError with the code JSON.GET fails with (any error for a legacy path, a syntax error
    for JSONPath). The values are the document's own: read them, do not change them."""
    if path == "." or path == "$":
        return [root], path == "$"
    sel = Selector()
    rc = sel.get_values(root, path)
    if rc is not None and (not sel.is_v2 or rc in SYNTAX_ERRORS):
        raise JsonError(rc)
    values = sel.values()
    return (values[:1] if not sel.is_v2 else values), sel.is_v2


def shared_get(root, path: str):
    """valkey-json's SharedJSON_Get (the "JSON_GetValue" API valkey-search reads documents through): the compact
    JSON text at path (JSONPath: an array of the values), or None when the path fails or selects nothing with a
    legacy path."""
    try:
        values, is_v2 = select(root, path)
    except JsonError:
        return None
    if not is_v2:
        return dumps(values[0]) if values else None
    return b"[" + b",".join(dumps(v) for v in values) + b"]"
