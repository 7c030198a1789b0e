"""Valkey's long double arithmetic for INCRBYFLOAT and HINCRBYFLOAT."""

import math
from decimal import Decimal, InvalidOperation
from fractions import Fraction

# -- long double arithmetic ---------------------------------------------------------------------
#
# Valkey computes HINCRBYFLOAT (and INCRBYFLOAT) in C `long double` -- the x87 80-bit format on
# x86-64: a 64-bit mantissa and a 15-bit exponent -- and prints the result with "%.17Lf" minus the
# trailing zeros. Python has no long double, so the arithmetic is done exactly on Fractions and
# rounded to that format, which reproduces Valkey's text ("0.1" + "0.2" -> "0.3", "1e20" ->
# "100000000000000000000") instead of a double's ("0.30000000000000004", "1e+20").

_LD_MANT_BITS = 64
_LD_MIN_QUANTUM = -16445      # exponent of the smallest subnormal: 2**(-16382 - 63)
_LD_MAX_EXP = 16384           # |x| >= 2**16384 overflows
_LD_MAX_CHARS = 5 * 1024      # MAX_LONG_DOUBLE_CHARS: longer inputs are rejected
_DEC10_MAX = 4933             # decimal exponents beyond these certainly over/underflow
_DEC10_MIN = -4953
_SCALE17 = 10 ** 17


def round_long_double(q):
    """q (a Fraction) rounded to the nearest x87 long double, ties to even; None on overflow."""
    num, den = q.numerator, q.denominator
    if not num:
        return q
    neg = num < 0
    a = -num if neg else num
    e = a.bit_length() - den.bit_length()  # floor(log2|q|) is e or e - 1
    if (a >= den << e) if e >= 0 else ((a << -e) >= den):
        pass
    else:
        e -= 1
    qe = max(e - (_LD_MANT_BITS - 1), _LD_MIN_QUANTUM)
    if qe >= 0:
        m, r = divmod(a, den << qe)
        half = den << qe
    else:
        m, r = divmod(a << -qe, den)
        half = den
    r2 = r << 1
    if r2 > half or (r2 == half and m & 1):
        m += 1
    if m.bit_length() + qe > _LD_MAX_EXP:
        return None
    if neg:
        m = -m
    return Fraction(m << qe) if qe >= 0 else Fraction(m, 1 << -qe)


def parse_long_double(value: bytes):
    """Valkey's string2ld (strtold, strictly): a Fraction holding the long double value, a float
    for +-inf, or None if the text is not a valid float (NaN, spaces, junk, out of range)."""
    if not value or len(value) >= _LD_MAX_CHARS or value[:1].isspace() or value[-1:].isspace():
        return None
    try:
        text = value.decode("ascii")
    except UnicodeDecodeError:
        return None
    if "_" in text:
        return None
    body = text[1:] if text[0] in "+-" else text
    if body[:2] in ("0x", "0X"):
        try:
            f = float.fromhex(text)
        except (ValueError, OverflowError):
            return None
        return f if math.isinf(f) else Fraction(f)
    try:
        d = Decimal(text)
    except InvalidOperation:
        return None
    if d.is_nan():
        return None
    if d.is_infinite():
        return -math.inf if d < 0 else math.inf
    if d.is_zero():
        return Fraction(0)
    exp = d.adjusted()
    if exp > _DEC10_MAX or exp < _DEC10_MIN:
        return None  # strtold: ERANGE with HUGE_VAL or zero
    rounded = round_long_double(Fraction(d))
    if not rounded:  # None (overflow) or underflow to zero
        return None
    return rounded


def format_long_double_human(q) -> bytes:
    """snprintf("%.17Lf") with the trailing zeros (and a bare '.') removed; '-0' becomes '0'."""
    n = round(q * _SCALE17)
    if not n:
        return b"0"
    # Via Decimal: str(int) refuses more than 4300 digits, and a long double can reach 4950.
    digits = str(Decimal(abs(n))).encode().rjust(18, b"0")
    int_part, frac = digits[:-17], digits[-17:].rstrip(b"0")
    out = int_part + b"." + frac if frac else int_part
    return b"-" + out if n < 0 else out
