"""LOLWUT [VERSION v] [args]: Valkey 9.1's lolwut.c, lolwut5.c, lolwut6.c and lolwut9.c.

Valkey 9.1.2 itself (and every VERSION whose first digit is 9) draws a Julia set in ASCII characters, in C
floats (emulated here: each operation rounded to binary32, as gcc computes them without FMA contraction);
VERSION 5 draws Georg Nees' Schotter in Braille characters, VERSION 6 a skyline in terminal colours, both with
random jitter (Python's random here, C's rand() there) and with the same limits, layout and trailing text;
any other version answers "Valkey ver.<version>". With extended-redis-compatibility the texts say Redis and
its compatibility version.
"""

import math
import struct

from .. import REDIS_COMPAT_VERSION, VALKEY_VERSION, messages
from ..errors import CommandError
from .numeric import parse_long_double
from .base import parse_int
from .introspection import _verbatim
from .registry import command


class _Canvas:
    __slots__ = ("width", "height", "pixels")

    def __init__(self, width, height, bgcolor=0):
        self.width = width
        self.height = height
        self.pixels = bytearray([bgcolor]) * (width * height)

    def draw(self, x, y, color):
        if 0 <= x < self.width and 0 <= y < self.height:
            self.pixels[x + y * self.width] = color

    def get(self, x, y):
        if 0 <= x < self.width and 0 <= y < self.height:
            return self.pixels[x + y * self.width]
        return 0

    def line(self, x1, y1, x2, y2, color):
        """Bresenham, as lwDrawLine."""
        dx, dy = abs(x2 - x1), abs(y2 - y1)
        sx = 1 if x1 < x2 else -1
        sy = 1 if y1 < y2 else -1
        err = dx - dy
        while True:
            self.draw(x1, y1, color)
            if x1 == x2 and y1 == y2:
                break
            e2 = err * 2
            if e2 > -dy:
                err -= dy
                x1 += sx
            if e2 < dx:
                err += dx
                y1 += sy

    def square(self, x, y, size, angle, color):
        """lwDrawSquare: the square inscribed in a circle, rotated by angle."""
        size = _c_round(size / 1.4142135623)
        k = math.pi / 4 + angle
        px, py = [], []
        for _ in range(4):
            px.append(_c_round(math.sin(k) * size + x))
            py.append(_c_round(math.cos(k) * size + y))
            k += math.pi / 2
        for j in range(4):
            self.line(px[j], py[j], px[(j + 1) % 4], py[(j + 1) % 4], color)


def _c_round(v):
    """C's round(): halves away from zero."""
    return int(math.floor(v + 0.5)) if v >= 0 else -int(math.floor(-v + 0.5))


def _clamp(v, lo, hi):
    return lo if v < lo else hi if v > hi else v


_RAND_MAX = 2147483647


def _rand(rng):
    return rng.randrange(_RAND_MAX + 1)


def _schotter(rng, console_cols, per_row, per_col):
    canvas_width = console_cols * 2
    padding = 2 if canvas_width > 4 else 0
    side = (canvas_width - padding * 2) / per_row
    canvas = _Canvas(canvas_width, int(side * per_col + padding * 2))
    for y in range(per_col):
        for x in range(per_row):
            sx = int(x * side + side / 2 + padding)
            sy = int(y * side + side / 2 + padding)
            angle = 0.0
            if y > 1:
                r1 = _rand(rng) / _RAND_MAX / per_col * y
                r2 = _rand(rng) / _RAND_MAX / per_col * y
                r3 = _rand(rng) / _RAND_MAX / per_col * y
                if _rand(rng) % 2:
                    r1 = -r1
                if _rand(rng) % 2:
                    r2 = -r2
                if _rand(rng) % 2:
                    r3 = -r3
                angle = r1
                sx = int(sx + r2 * side / 3)
                sy = int(sy + r3 * side / 3)
            canvas.square(sx, sy, side, angle, 1)
    return canvas


def _braille(canvas):
    """lolwut5's renderCanvas: 2x4 pixels per Braille character (U+2800 + the 8 dot bits), rows joined by
    newlines except after a row starting at the last pixel line. Whole rows at a time: every pixel is 0 or
    1, so shifting a row's bytes by up to 7 bits as one big integer never carries into the next byte."""
    w, h = canvas.width, canvas.height
    px = canvas.pixels
    cols = (w + 1) // 2
    blank = bytes(w + 1)
    out = []
    for y in range(0, h, 4):
        rows = [(px[(y + k) * w:(y + k + 1) * w] if y + k < h else blank[:w]) + b"\x00" for k in range(4)]
        bits = 0
        for k, (even_shift, odd_shift) in enumerate(((0, 3), (1, 4), (2, 5), (6, 7))):
            bits |= int.from_bytes(rows[k][0:2 * cols:2], "big") << even_shift
            bits |= int.from_bytes(rows[k][1:2 * cols + 1:2], "big") << odd_shift
        codes = bits.to_bytes(cols, "big")
        utf8 = bytearray(3 * cols)
        utf8[0::3] = b"\xe2" * cols
        utf8[1::3] = codes.translate(_BRAILLE_MID)
        utf8[2::3] = codes.translate(_BRAILLE_LOW)
        out.append(bytes(utf8))
        if y != h - 1:
            out.append(b"\n")
    return b"".join(out)


# U+2800 + b in UTF-8: E2, A0 | b >> 6, 80 | b & 3F
_BRAILLE_MID = bytes(0xA0 | (b >> 6) for b in range(256))
_BRAILLE_LOW = bytes(0x80 | (b & 0x3F) for b in range(256))


def lolwut5(rng, args, signature):
    cols = parse_int(args[0]) if len(args) > 0 else 66
    per_row = parse_int(args[1]) if len(args) > 1 else 8
    per_col = parse_int(args[2]) if len(args) > 2 else 12
    canvas = _schotter(rng, _clamp(cols, 1, 1000), _clamp(per_row, 1, 200), _clamp(per_col, 1, 200))
    return _braille(canvas) + b"\nGeorg Nees - schotter, plotter on paper, 1968. " + signature + b"\n"


def _skyscraper(canvas, rng, xoff, width, height, windows, color):
    starty = canvas.height - 1
    endy = starty - height + 1
    for y in range(starty, endy - 1, -1):
        for x in range(xoff, xoff + width):
            if y == endy and (x <= xoff + 1 or x >= xoff + width - 2):
                continue  # the roof is four pixels less wide
            c = color
            if windows and xoff + 1 < x < xoff + width - 2 and endy + 1 < y < starty - 1:
                relx = x - (xoff + 1)
                rely = y - (endy + 1)
                if (relx // 2) % 2 and rely % 2:
                    while True:
                        c = 1 + _rand(rng) % 2
                        if c != color:
                            break
                    if relx % 2:
                        c = canvas.get(x - 1, y)
            canvas.draw(x, y, c)


def _skyline(canvas, rng):
    h = canvas.height
    for color in (2, 1):
        offset = -10
        while offset < canvas.width:
            offset += _rand(rng) % 8
            width = 10 + _rand(rng) % 9
            if color == 2:
                height = h // 2 + (_rand(rng) % h) // 2
            else:
                height = h // 2 + (_rand(rng) % h) // 3
            _skyscraper(canvas, rng, offset, width, height, False, color)
            offset += width // 2 if color == 2 else width + 1
    offset = -10
    while offset < canvas.width:
        offset += _rand(rng) % 8
        width = 5 + _rand(rng) % 14
        if width % 4:
            width += width % 3
        height = h // 3 + (_rand(rng) % h) // 2
        _skyscraper(canvas, rng, offset, width, height, True, 0)
        offset += width + 5


_COLOURS = {0: "0;30;40m", 1: "0;90;100m", 2: "0;37;47m", 3: "0;97;107m"}


def lolwut6(rng, args, signature):
    cols = parse_int(args[0]) if len(args) > 0 else 80
    rows = parse_int(args[1]) if len(args) > 1 else 20
    canvas = _Canvas(_clamp(cols, 1, 1000), _clamp(rows, 1, 1000), 3)
    _skyline(canvas, rng)
    lines = []
    for y in range(canvas.height):
        lines.append("".join("\033[%s \033[0m" % _COLOURS.get(canvas.get(x, y), "0;30;40m")
                             for x in range(canvas.width)))
    return ("\n".join(lines) + "\nDedicated to the 8 bit game developers of past and present.\n"
            "Original 8 bit image from Plaguemon by hikikomori. ").encode() + signature + b"\n"


_F32 = struct.Struct("f")
_JULIA_CHARS = b" .:-=+*%#&@"
_JULIA_MAX_ITER = len(_JULIA_CHARS)            # sizeof(ascii_array) - 1: the C array's NUL is not drawn


def _f32(v: float) -> float:
    """v rounded to a C float (binary32; out of its range: +-inf)."""
    return _F32.unpack(_F32.pack(v))[0]


def _julia_iterations(x, y, julia_r, julia_i):
    """lolwut9's juliaSetIteration, every operation in binary32 (a double holds a binary32 product or sum
    exactly or rounds it once, so rounding each double result gives the float result)."""
    f = _f32
    for i in range(_JULIA_MAX_ITER):
        x, y = f(f(f(x * x) - f(y * y)) + julia_r), f(f(f(2 * x) * y) + julia_i)
        if f(f(x * x) + f(y * y)) > 4:
            return i
    return _JULIA_MAX_ITER - 1


def _long_double_to_float(text: bytes) -> float:
    value = parse_long_double(text)
    if value is None:
        raise CommandError(messages.NOT_FLOAT)
    try:
        return _f32(float(value))
    except OverflowError:                      # a long double past a double's range: a float's inf too
        return math.inf if value > 0 else -math.inf


def lolwut9(rng, args, signature):
    """LOLWUT [columns rows] [real imaginary]: the Julia set of the constant (random without one)."""
    if len(args) in (1, 3) or len(args) > 4:
        raise CommandError(messages.LOLWUT_SYNTAX)
    cols = parse_int(args[0]) if args else 80
    rows = parse_int(args[1]) if len(args) > 1 else 40
    cols, rows = _clamp(cols, 1, 160), _clamp(rows, 1, 80)
    if len(args) == 4:
        julia_r, julia_i = _long_double_to_float(args[2]), _long_double_to_float(args[3])
    else:
        julia_r = _f32(_f32(_f32(_f32(_rand(rng)) / _f32(_RAND_MAX)) * 2) - 1)
        julia_i = _f32(_f32(_f32(_f32(_rand(rng)) / _f32(_RAND_MAX)) * 2) - 1)
    out = bytearray()
    # each character is the centre of its cell of the square [-2, 2] x [-2, 2], the first row at the top
    # (imaginary part 2): the mapping Valkey 9.1.2 draws (compared with the binary in the tests)
    for i in range(rows):
        y = _f32(2.0 - _f32(_f32(4.0 * (2 * i + 1)) / (2 * rows)))
        for j in range(cols):
            x = _f32(_f32(_f32(4.0 * (2 * j + 1)) / (2 * cols)) - 2.0)
            out.append(_JULIA_CHARS[_julia_iterations(x, y, julia_r, julia_i)])
        out.append(10)
    out += b"Ascii representation of Julia set with constant %.2f + %.2fi\n" % (julia_r, julia_i)
    return bytes(out) + b"Don't forget to have fun! " + signature + b"\n"


@command("lolwut")
def lolwut(ctx, args):
    version = VALKEY_VERSION
    rest = args[1:]
    if len(args) >= 3 and args[1].lower() == b"version":
        version = "%d.0.0" % (parse_int(args[2]) & 0xFFFFFFFF)
        rest = args[3:]
    cfg = ctx.services.config
    redis = cfg is not None and cfg["extended-redis-compatibility"]
    name, number = ("Redis", REDIS_COMPAT_VERSION) if redis else ("Valkey", VALKEY_VERSION)
    signature = ("%s ver. %s" % (name, number)).encode()
    major, _, minor = version.partition(".")
    rng = ctx.keyspace.rng
    if (major == "5" and not minor.startswith("9")) or (major == "4" and minor.startswith("9")):
        text = lolwut5(rng, rest, signature)
    elif (major == "6" and not minor.startswith("9")) or (major == "5" and minor.startswith("9")):
        text = lolwut6(rng, rest, signature)
    elif version[0] == "9":
        text = lolwut9(rng, rest, signature)
    else:
        text = ("%s ver.%s\n" % (name, number)).encode()    # the unstable version's art: no space
    return _verbatim(ctx, text)
