"""Valkey's rules for numbers written as strings: integers (util.c `string2ll`: the one copy the request
parser, the keyspace (encodings, RDB payloads, SCAN cursors) and the commands (argument parsing, ACL key
extraction) use) and doubles (`string2d`, and C's `strtod` consuming a whole string, as zslParseRange and SORT
call it). Long doubles (`string2ld`: INCRBYFLOAT, timeouts) are commands/numeric.py's parse_long_double."""

import math

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


_SPACE = b" \t\n\v\f\r"
_NONZERO_DIGITS = frozenset(b"123456789")


def strtod(text: bytes):
    """What C strtod makes of text if it consumes all of it (leading spaces allowed, trailing ones not; hex
    floats, 'inf', 'infinity' and 'nan' as strtod reads them), else None. No range check: callers that care
    about ERANGE (SORT) check it themselves."""
    t = text.lstrip(_SPACE)
    if not t or b"_" in t or t[-1] in _SPACE:
        return None
    try:
        return float(t)
    except ValueError:
        pass
    body = t[1:] if t[:1] in (b"+", b"-") else t
    if body[:2].lower() == b"0x":
        try:
            return float.fromhex(t.decode("ascii"))
        except (ValueError, OverflowError, UnicodeDecodeError):
            return None
    return None


def string2d(value: bytes):
    """Valkey's string2d: the double `value` spells (no leading or trailing space, the whole string, no NaN,
    no overflow to infinity or underflow to zero: ERANGE), else None."""
    if not value or value[0] in _SPACE or value[-1] in _SPACE or b"_" in value:
        return None
    try:
        f = float(value)
    except ValueError:
        f = strtod(value)  # hex floats
        if f is None:
            return None
    if f - f == 0.0 and f != 0.0:
        return f  # finite, non-zero: the common case
    if f != f:
        return None
    if f == math.inf or f == -math.inf:
        if value.lstrip(b"+-").lower() not in (b"inf", b"infinity"):
            return None  # ERANGE overflow
    else:  # zero
        mantissa = value.lower()
        if not mantissa.lstrip(b"+-").startswith(b"0x"):
            mantissa = mantissa.split(b"e", 1)[0]
            if any(c in _NONZERO_DIGITS for c in mantissa):
                return None  # ERANGE underflow to zero
    return f
