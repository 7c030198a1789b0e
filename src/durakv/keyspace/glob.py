"""Glob patterns with Valkey's stringmatchlen() semantics (KEYS, SCAN MATCH, CONFIG GET, ...).

    *        any run of bytes            ?        any one byte
    [abc]    one of the listed bytes     [^abc]   one byte not listed
    [a-z]    a range (ends swapped if reversed, compared as C signed chars)
    \\x       the byte x literally (inside brackets too)

Quirks kept from the C code: an unterminated '[' class runs to the end of the pattern; inside a
class a trailing '\\' is literal and "a-]" is a range ending at ']'; an escaped byte inside a class
is compared case-sensitively even with nocase; an empty subject matches only an empty pattern
(so "*" does not match the empty key; callers special-case a bare "*" as Valkey does).

Every pattern token except '*' consumes exactly one byte, so a pattern is compiled once into a
regular expression whose tokens are explicit byte classes and whose stars are atomic lazy groups:
the leftmost match of each middle segment is always the best one, which keeps matching linear in
the subject (the same guarantee Valkey's skipLongerMatches gives against abusive patterns).
Its recursion cap is kept too: with more than 1000 stars before the last token nothing matches.
"""

import re
from functools import lru_cache

_ALL = frozenset(range(256))


def _lower(c: int) -> int:
    return c + 32 if 65 <= c <= 90 else c


def _signed(c: int) -> int:
    return c - 256 if c >= 128 else c


_LOWER = [_lower(c) for c in range(256)]
_SIGNED_LOWER = [_signed(_lower(c)) for c in range(256)]
_SIGNED = [_signed(c) for c in range(256)]


def _literal(c: int, nocase: bool) -> frozenset:
    if nocase:
        lc = _LOWER[c]
        return frozenset(b for b in range(256) if _LOWER[b] == lc)
    return frozenset((c,))


def _tokens(pattern: bytes, nocase: bool):
    """The pattern as a list of tokens: None for a star, else the frozenset of bytes it matches."""
    out = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == 42:  # '*'
            while i + 1 < n and pattern[i + 1] == 42:
                i += 1
            out.append(None)
        elif c == 63:  # '?'
            out.append(_ALL)
        elif c == 91:  # '['
            i += 1
            negate = i < n and pattern[i] == 94  # '^'
            if negate:
                i += 1
            members = set()
            while True:
                if i < n and pattern[i] == 92 and n - i >= 2:  # '\\' escapes, case-sensitively
                    i += 1
                    members.add(pattern[i])
                elif i < n and pattern[i] == 93:  # ']'
                    break
                elif i >= n:  # unterminated: the class takes the rest of the pattern
                    break
                elif n - i >= 3 and pattern[i + 1] == 45:  # 'x-y'
                    start, end = _SIGNED[pattern[i]], _SIGNED[pattern[i + 2]]
                    if start > end:
                        start, end = end, start
                    if nocase:
                        start = _signed(_lower(start & 0xFF))
                        end = _signed(_lower(end & 0xFF))
                        members.update(b for b in range(256) if start <= _SIGNED_LOWER[b] <= end)
                    else:
                        members.update(b for b in range(256) if start <= _SIGNED[b] <= end)
                    i += 2
                else:
                    members.update(_literal(pattern[i], nocase))
                i += 1
            out.append(_ALL - members if negate else frozenset(members))
        else:
            if c == 92 and n - i >= 2:  # '\\'
                i += 1
                c = pattern[i]
            out.append(_literal(c, nocase))
        i += 1
    return out


def _class(members: frozenset) -> bytes:
    if len(members) == 1:
        return re.escape(bytes(members))
    parts = []
    run_start = prev = None
    for b in sorted(members):
        if prev is not None and b == prev + 1:
            prev = b
            continue
        if run_start is not None:
            parts.append(_range(run_start, prev))
        run_start = prev = b
    parts.append(_range(run_start, prev))
    return b"[" + b"".join(parts) + b"]"


def _range(a: int, b: int) -> bytes:
    if a == b:
        return b"\\x%02x" % a
    return b"\\x%02x-\\x%02x" % (a, b)


def _never(_subject) -> bool:
    return False


def compile_glob(pattern: bytes, nocase: bool = False):
    """A function subject -> bool equivalent to glob_match(pattern, subject, nocase).
    Compiled patterns are cached, except long ones (a client must not pin big patterns)."""
    if len(pattern) > _CACHE_MAX_PATTERN:
        return _compile(pattern, nocase)
    return _compile_cached(pattern, nocase)


def _compile(pattern: bytes, nocase: bool):
    if not pattern:
        return lambda subject: not subject
    tokens = _tokens(pattern, nocase)
    if any(t is not None and not t for t in tokens):
        return _never  # an empty class can never match a byte
    stars = tokens.count(None)
    if stars - (tokens[-1] is None) > _MAX_NESTING:
        # stringmatchlen's guard against abusive patterns: the star after the 1000th recurses with a
        # nesting over 1000, which answers "no match"; only a final star never recurses.
        return _never
    if stars <= 1 and all(t is None or len(t) == 1 for t in tokens):
        literal = bytes(next(iter(t)) for t in tokens if t is not None)
        if not stars:
            return lambda subject: subject == literal
        if tokens[-1] is None:  # "prefix*", the most common shape
            if not literal:
                return bool
            return lambda subject: subject.startswith(literal)
    segments = [[]]
    for t in tokens:
        if t is None:
            segments.append([])
        else:
            segments[-1].append(_class(t))
    parts = [b"".join(segments[0])]
    for middle in segments[1:-1]:
        parts.append(b"(?>.*?" + b"".join(middle) + b")")
    if len(segments) > 1:
        parts.append(b".*" + b"".join(segments[-1]))
    fullmatch = re.compile(b"".join(parts), re.DOTALL).fullmatch

    def match(subject) -> bool:
        return bool(subject) and fullmatch(subject) is not None
    return match


_CACHE_MAX_PATTERN = 256
_MAX_NESTING = 1000
_compile_cached = lru_cache(maxsize=512)(_compile)


def glob_match(pattern: bytes, subject: bytes, nocase: bool = False) -> bool:
    """True if subject matches the glob pattern as Valkey's stringmatchlen() decides."""
    return compile_glob(pattern, nocase)(subject)
