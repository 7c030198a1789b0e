"""Valkey's rules for numbers written as strings: integers (util.c `string2ll` and `string2ull`, kept in intstring.py: the one
copy the request parser, the keyspace (encodings, RDB payloads, SCAN cursors) and the commands (argument
parsing, ACL key extraction) use) and doubles (`string2d`, and Valkey 9's `valkey_strtod` consuming a whole
string, as zslParseRange calls it). Long doubles (`string2ld`: INCRBYFLOAT, timeouts) are commands/numeric.py's
parse_long_double."""

import math
import re

# The one copy lives in a leaf module so that config.py (below protocol/) can use it too; re-exported here.
from ..intstring import INT64_MAX, INT64_MIN, UINT64_MAX, string2ll, string2ull, strtol_whole  # noqa: F401


_NONZERO_DIGITS = frozenset(b"123456789")
_DECIMAL = re.compile(rb"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")
_WORDS = (b"inf", b"infinity", b"nan")


def valkey_strtod(text: bytes):
    """What Valkey 9's valkey_strtod (ffc.h, the C port of fast_float, general format with a leading '+'
    allowed) makes of text if it consumes all of it, else None: decimal only (no hex floats, unlike C's
    strtod), no leading or trailing space, 'inf', 'infinity' and 'nan' in any case. Overflow gives +-inf and
    underflow 0 (callers that care about ERANGE check the text, as string2d does)."""
    if _DECIMAL.match(text) is None:
        body = text[1:] if text[:1] in (b"+", b"-") else text
        if body.lower() not in _WORDS:
            return None
    return float(text)


def string2d(value: bytes):
    """Valkey's string2d: the double `value` spells through valkey_strtod (the whole string, no NaN, no
    overflow to infinity or underflow to zero: ERANGE), else None."""
    f = valkey_strtod(value)
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
        mantissa = value.lower().split(b"e", 1)[0]
        if any(c in _NONZERO_DIGITS for c in mantissa):
            return None  # ERANGE underflow to zero
    return f
