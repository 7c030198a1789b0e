"""A tiny PNG plotting helper with no dependencies: an RGB canvas, a 3x5 pixel font, and a chart frame (axes,
grid, ticks, lines, bars, shaded spans, legend). PNG is written by hand (zlib + CRC32), as bench/plot.py
started doing, so reports draw the same on every machine without matplotlib.
"""

import math
import struct
import zlib

FONT = {  # 3x5 glyphs, rows top to bottom
    "0": "111101101101111", "1": "010110010010111", "2": "111001111100111", "3": "111001111001111",
    "4": "101101111001001", "5": "111100111001111", "6": "111100111101111", "7": "111001001001001",
    "8": "111101111101111", "9": "111101111001111", ".": "000000000000010", "/": "001001010100100",
    ":": "000010000010000", "-": "000000111000000", "(": "010100100100010", ")": "010001001001010",
    "A": "010101111101101", "B": "110101110101110", "C": "011100100100011", "D": "110101101101110",
    "E": "111100110100111", "F": "111100110100100", "G": "011100101101011", "H": "101101111101101",
    "I": "111010010010111", "J": "001001001101010", "K": "101101110101101", "L": "100100100100111",
    "M": "101111111101101", "N": "110101101101101", "O": "010101101101010", "P": "110101110100100",
    "Q": "010101101110011", "R": "110101110101101", "S": "011100010001110", "T": "111010010010010",
    "U": "101101101101111", "V": "101101101101010", "W": "101101111111101", "X": "101101010101101",
    "Y": "101101010010010", "Z": "111001010100111",
    "%": "101001010100101", "_": "000000000000111", "=": "000111000111000", "+": "000010111010000",
    ",": "000000000010100", ">": "100010001010100", "<": "001010100010001", "#": "101111101111101",
    "'": "010010000000000", "[": "110100100100110", "]": "011001001001011", "!": "010010010000010",
    "?": "111001010000010", "*": "000101010101000",
}

PALETTE = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189), (140, 86, 75),
           (227, 119, 194), (127, 127, 127)]
BLACK, GREY, LIGHT = (0, 0, 0), (200, 200, 200), (235, 235, 235)


class Canvas:
    def __init__(self, width, height):
        self.w, self.h = width, height
        self.px = bytearray(b"\xff" * (width * height * 3))

    def dot(self, x, y, color):
        if 0 <= x < self.w and 0 <= y < self.h:
            i = (y * self.w + x) * 3
            self.px[i:i + 3] = bytes(color)

    def get(self, x, y):
        i = (y * self.w + x) * 3
        return tuple(self.px[i:i + 3])

    def rect(self, x0, y0, x1, y1, color):
        """Fills [x0, x1] x [y0, y1] (inclusive, clipped)."""
        x0, x1 = max(0, min(x0, x1)), min(self.w - 1, max(x0, x1))
        y0, y1 = max(0, min(y0, y1)), min(self.h - 1, max(y0, y1))
        if x1 < x0 or y1 < y0:
            return
        row = bytes(color) * (x1 - x0 + 1)
        for y in range(y0, y1 + 1):
            i = (y * self.w + x0) * 3
            self.px[i:i + len(row)] = row

    def line(self, x0, y0, x1, y1, color, thick=1):
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
        err = dx + dy
        while True:
            for o in range(thick):
                self.dot(x0, y0 + o, color)
            if x0 == x1 and y0 == y1:
                return
            e2 = 2 * err
            if e2 >= dy:
                err += dy
                x0 += sx
            if e2 <= dx:
                err += dx
                y0 += sy

    def dashed_hline(self, x0, x1, y, color, dash=6):
        for x in range(min(x0, x1), max(x0, x1) + 1):
            if (x // dash) % 2 == 0:
                self.dot(x, y, color)

    def text(self, x, y, s, color=BLACK, scale=2):
        for ch in str(s).upper():
            glyph = FONT.get(ch)
            if glyph:
                for i, bit in enumerate(glyph):
                    if bit == "1":
                        for a in range(scale):
                            for b in range(scale):
                                self.dot(x + (i % 3) * scale + a, y + (i // 3) * scale + b, color)
            x += 4 * scale

    @staticmethod
    def text_width(s, scale=2):
        return max(0, len(str(s)) * 4 * scale - scale)

    def png(self) -> bytes:
        raw = b"".join(b"\x00" + bytes(self.px[y * self.w * 3:(y + 1) * self.w * 3]) for y in range(self.h))

        def chunk(tag, data):
            return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)
        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))

    def save(self, path):
        with open(path, "wb") as f:
            f.write(self.png())


def tint(color, amount=0.75):
    """The colour mixed with white (amount 1: white)."""
    return tuple(int(c + (255 - c) * amount) for c in color)


def num(v) -> str:
    """A short axis label for v."""
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 10000:
        return f"{v / 1000:.0f}K"
    if a >= 100 or float(v).is_integer():
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}".rstrip("0").rstrip(".")
    return f"{v:.3g}"


def nice_ticks(lo, hi, count=5) -> list:
    """Round tick values covering [lo, hi] (1, 2, 5 times a power of ten)."""
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / max(1, count)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    first = math.floor(lo / step) * step
    ticks, t = [], first
    for _ in range(count + 3):
        if t > hi + step * 1e-9:
            break
        ticks.append(round(t, 12))
        t += step
    return ticks


class Chart:
    """A frame with data coordinates. Draw with the methods, then save()."""

    def __init__(self, width=900, height=470, title="", x_label="", y_label="", left=80, right=24, top=72,
                 bottom=56):
        self.cv = Canvas(width, height)
        self.x0, self.x1 = left, width - right
        self.y0, self.y1 = top, height - bottom
        self.title, self.x_label, self.y_label = title, x_label, y_label
        self.xmin, self.xmax, self.ymin, self.ymax = 0.0, 1.0, 0.0, 1.0
        self.log_y = False

    def ranges(self, xmin, xmax, ymin, ymax, log_y=False):
        self.xmin, self.xmax = xmin, (xmax if xmax > xmin else xmin + 1)
        self.log_y = log_y
        if log_y:
            ymin = max(ymin, 1e-6)
            ymax = max(ymax, ymin * 10)
        self.ymin, self.ymax = ymin, (ymax if ymax > ymin else ymin + 1)
        return self

    def px(self, x) -> int:
        return self.x0 + int(round((x - self.xmin) / (self.xmax - self.xmin) * (self.x1 - self.x0)))

    def py(self, y) -> int:
        if self.log_y:
            y = max(y, self.ymin)
            frac = (math.log10(y) - math.log10(self.ymin)) / (math.log10(self.ymax) - math.log10(self.ymin))
        else:
            frac = (min(max(y, self.ymin), self.ymax) - self.ymin) / (self.ymax - self.ymin)
        return self.y1 - int(round(frac * (self.y1 - self.y0)))

    def frame(self, x_ticks=None, x_labels=None):
        """Grid, axes, tick labels, title. x_labels: [(x, text)] instead of numeric ticks."""
        cv = self.cv
        if self.log_y:
            ys = [10 ** e for e in range(math.floor(math.log10(self.ymin)), math.ceil(math.log10(self.ymax)) + 1)
                  if self.ymin <= 10 ** e <= self.ymax * 1.0001]
        else:
            ys = [t for t in nice_ticks(self.ymin, self.ymax) if self.ymin <= t <= self.ymax * 1.0001]
        for y in ys:
            yy = self.py(y)
            cv.line(self.x0, yy, self.x1, yy, LIGHT)
            label = num(y)
            cv.text(self.x0 - 6 - Canvas.text_width(label), yy - 5, label)
        if x_labels is None:
            ticks = x_ticks if x_ticks is not None else nice_ticks(self.xmin, self.xmax, 8)
            x_labels = [(t, num(t)) for t in ticks if self.xmin <= t <= self.xmax * 1.0001]
        for x, label in x_labels:
            xx = self.px(x)
            cv.line(xx, self.y1, xx, self.y1 + 4, BLACK)
            cv.text(xx - Canvas.text_width(label) // 2, self.y1 + 8, label)
        cv.line(self.x0, self.y0, self.x0, self.y1, BLACK)
        cv.line(self.x0, self.y1, self.x1, self.y1, BLACK)
        cv.text(self.x0, 10, self.title[:100], scale=3)
        if self.y_label:
            cv.text(self.x0, self.y0 - 16, self.y_label)
        if self.x_label:
            cv.text((self.x0 + self.x1 - Canvas.text_width(self.x_label)) // 2, self.y1 + 28, self.x_label)
        return self

    def shade_x(self, xa, xb, color, label=None, label_color=(120, 40, 40)):
        """A vertical band from xa to xb over the whole plot area (drawn before the data)."""
        xa, xb = max(xa, self.xmin), min(xb, self.xmax)
        if xb < xa:
            return
        self.cv.rect(self.px(xa), self.y0, max(self.px(xa), self.px(xb)), self.y1 - 1, color)
        if label:
            self.cv.text(self.px(xa) + 3, self.y0 + 3, label, label_color)

    def polyline(self, points, color, thick=2):
        prev = None
        for x, y in points:
            if y is None:
                prev = None
                continue
            xy = (self.px(x), self.py(y))
            if prev is not None:
                self.cv.line(prev[0], prev[1], xy[0], xy[1], color, thick)
            else:
                self.cv.dot(xy[0], xy[1], color)
            prev = xy

    def bar(self, xa, xb, y, color, label=None):
        """A bar from the baseline to y between data x positions xa and xb."""
        top = self.py(y)
        base = self.py(self.ymin)
        self.cv.rect(self.px(xa), top, self.px(xb) - 1, base - 1, color)
        if label is not None:
            w = Canvas.text_width(label)
            self.cv.text((self.px(xa) + self.px(xb) - w) // 2, top - 12, label)

    def bracket(self, xa, xb, y, color, label):
        """A horizontal double-ended marker from xa to xb at height y, labelled above its middle."""
        a, b, yy = self.px(xa), self.px(xb), self.py(y)
        self.cv.line(a, yy, b, yy, color, thick=2)
        self.cv.line(a, yy - 6, a, yy + 6, color, thick=1)
        self.cv.line(b, yy - 6, b, yy + 6, color, thick=1)
        w = Canvas.text_width(label)
        self.cv.text(max(self.x0, min((a + b - w) // 2, self.x1 - w)), yy - 16, label, color)

    def legend(self, items, x=None, y=None):
        """items: [(text, colour)] in a row under the title."""
        x = self.x0 + 4 if x is None else x
        y = 34 if y is None else y
        for text, color in items:
            self.cv.rect(x, y, x + 14, y + 9, color)
            self.cv.text(x + 20, y, text)
            x += 20 + Canvas.text_width(text) + 24

    def save(self, path):
        self.cv.save(path)
