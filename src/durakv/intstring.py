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
