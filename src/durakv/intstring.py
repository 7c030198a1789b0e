"""Valkey's util.c `string2ll`: the one copy of the rule for an integer written as a string.

A leaf module (it imports nothing of durakv) so that every layer can use the same rule: protocol/numbers.py
re-exports it for the request parser, the keyspace and the commands, and config.py (which sits below
protocol/ in the layer map) parses integer config values with it."""

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1


def string2ll(s: bytes):
    """The int64 whose canonical decimal form is exactly `s`, else None: an optional '-', then digits with no
    leading zero ('0' alone is 0; '-0', '+1', ' 1', '01' are refused), within a long long."""
    n = len(s)
    if n == 0 or n > 20:
        return None
    if s.isdigit():            # bytes.isdigit is ASCII-only
        if s[0] == 48 and n > 1:
            return None
        v = int(s)
        return v if v <= INT64_MAX else None
    if s[0] != 45 or n == 1:   # '-'
        return None
    digits = s[1:]
    if not digits.isdigit() or digits[0] == 48:
        return None
    v = -int(digits)
    return v if v >= INT64_MIN else None


UINT64_MAX = (1 << 64) - 1
_C_SPACE = b" \t\n\v\f\r"   # C's isspace(), which strtoull skips


def strtol_whole(s: bytes):
    """The base-10 integer C's strtol / strtoll / strtoull read when they consume all of `s` (leading blanks, an
    optional sign, at least one ASCII digit, leading zeros allowed, nothing after), unbounded: the caller applies
    its type's range. None when they would stop early or read no digit."""
    text = s.lstrip(_C_SPACE)
    sign = text[:1]
    if sign == b"-" or sign == b"+":
        text = text[1:]
    if not text.isdigit():    # bytes.isdigit is ASCII-only; b"" is not digits
        return None
    v = int(text)
    return -v if sign == b"-" else v


def string2ull(s: bytes):
    """Valkey's util.c `string2ull`: string2ll's value when `s` is one (a negative one is out of range: None),
    else what C's strtoull takes whole (leading blanks, a sign, leading zeros; '-n' wraps modulo 2**64);
    None when that fails (no digits, trailing bytes, past 2**64-1)."""
    ll = string2ll(s)
    if ll is not None:
        return ll if ll >= 0 else None
    v = strtol_whole(s)
    if v is None or abs(v) > UINT64_MAX:
        return None
    return v & UINT64_MAX     # strtoull negates a '-n' in unsigned arithmetic

