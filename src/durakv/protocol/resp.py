"""Reply values and their RESP2/RESP3 encodings.

Handlers return plain Python values; the connection encodes them for the client's protocol:

    bytes        bulk string              int          integer
    str          simple string (status)   None         null ($-1 in RESP2, _ in RESP3)
    float        double (bulk in RESP2)   bool         boolean (integer in RESP2)
    list/tuple   array                    dict         map (flat array in RESP2)
    RespSet      set (array in RESP2)     Push         push (array in RESP2)
    NullArray    *-1 in RESP2, _ in RESP3 ErrorReply   error
    Raw          bytes sent as they are
    RawView      bytes sent as they are from a buffer, not copied (an mmap'd file: SYNC's RDB)
"""

import math


class RespSet(list):
    """A set reply: RESP3 '~', RESP2 array."""
    __slots__ = ()


class Push(list):
    """An out-of-band push: RESP3 '>', RESP2 array."""
    __slots__ = ()


class Raw(bytes):
    """Already-encoded reply bytes."""
    __slots__ = ()


class RawView:
    """Already-encoded reply bytes in a buffer (a memoryview of an mmap'd file): the connection hands the view
    to the transport as it is, so a reply of a hundred megabytes costs the event loop no copy of it."""
    __slots__ = ("view",)

    def __init__(self, view):
        self.view = view

    def __len__(self):
        return len(self.view)


class _NullArray:
    __slots__ = ()

    def __repr__(self):
        return "NullArray"


NullArray = _NullArray()


class ErrorReply:
    """An error reply; `text` has Valkey's prefix (e.g. 'ERR ...', 'WRONGTYPE ...'). `counted`: already in
    the error statistics (a script returning the error of a command it called, which counted it then)."""
    __slots__ = ("text", "counted")

    def __init__(self, text: str, counted: bool = False):
        self.text = text
        self.counted = counted

    def __repr__(self):
        return f"ErrorReply({self.text!r})"

    def __eq__(self, other):
        return isinstance(other, ErrorReply) and other.text == self.text

    def __hash__(self):
        return hash(self.text)


class Deferred:
    """A reply not known yet: WAIT, WAITAOF, BGSAVE/SAVE, CLUSTER FAILOVER, a blocked command once served, a
    script past busy-reply-threshold. Its producer calls resolve(reply, index) exactly once (later calls
    are ignored); the durability layer releases it in request order once it is resolved and journal entry
    `index` (0: none) is committed. resolve() may be called before anyone listens."""

    __slots__ = ("reply", "index", "done", "_listener")

    def __init__(self):
        self.reply = None
        self.index = 0
        self.done = False
        self._listener = None

    def resolve(self, reply, index=0):
        if self.done:
            return
        self.reply = reply
        self.index = index
        self.done = True
        listener = self._listener
        if listener is not None:
            self._listener = None
            if type(listener) is list:
                for fn in listener:
                    fn()
            else:
                listener()

    def listen(self, fn):
        """fn() once resolved (at once if already). Several listeners run in the order they were added."""
        if self.done:
            fn()
        elif self._listener is None:
            self._listener = fn
        elif type(self._listener) is list:
            self._listener.append(fn)
        else:
            self._listener = [self._listener, fn]


OK = Raw(b"+OK\r\n")
QUEUED = Raw(b"+QUEUED\r\n")
PONG = Raw(b"+PONG\r\n")
NULL_BULK = Raw(b"$-1\r\n")


def format_double(value: float) -> bytes:
    """Valkey 8's double text (d2string): integers up to 2^62 as plain digits, otherwise the shortest
    round-trip digits laid out as fpconv_dtoa does ('0.00001', '1.5e-7', '1e+20'), 'inf', '-inf', '-0'."""
    if value != value:
        return b"nan"
    if value == math.inf:
        return b"inf"
    if value == -math.inf:
        return b"-inf"
    if value == 0:
        return b"-0" if math.copysign(1.0, value) < 0 else b"0"
    if value.is_integer() and -4611686018427387903 <= value <= 4611686018427387903:
        return b"%d" % int(value)
    neg = value < 0
    digits, k = _shortest_digits(-value if neg else value)
    return (b"-" if neg else b"") + _emit_digits(digits, k, neg).encode()


def fpconv_dtoa(value: float) -> bytes:
    """Valkey's fpconv_dtoa: the shortest round-trip digits, laid out as format_double does but with no
    plain-integer shortcut (1e18 is '1e+18'). DEBUG DIGEST hashes scores in this form."""
    if value != value:
        return b"nan"
    if value in (math.inf, -math.inf):
        return b"inf" if value > 0 else b"-inf"
    if value == 0:
        return b"-0" if math.copysign(1.0, value) < 0 else b"0"
    neg = value < 0
    digits, k = _shortest_digits(-value if neg else value)
    return (b"-" if neg else b"") + _emit_digits(digits, k, neg).encode()


def _shortest_digits(a: float):
    """(digits, K) with a == int(digits) * 10**K, digits the shortest round-trip ones (no trailing 0)."""
    text = repr(a)
    if "e" in text:
        mant, exp = text.split("e")
        exp = int(exp)
    else:
        mant, exp = text, 0
    ip, _, fp = mant.partition(".")
    if fp == "0":
        fp = ""
    digits = (ip + fp).lstrip("0")
    k = exp - len(fp)
    stripped = digits.rstrip("0")
    k += len(digits) - len(stripped)
    return stripped, k


def _emit_digits(digits: str, k: int, neg: bool) -> str:
    n = len(digits)
    exp = abs(k + n - 1)
    if k >= 0 and exp < n + 7:
        return digits + "0" * k
    if k < 0 and (k > -7 or exp < 4):
        offset = n - abs(k)
        if offset <= 0:
            return "0." + "0" * (-offset) + digits
        return digits[:offset] + "." + digits[offset:]
    sign = "-" if k + n - 1 < 0 else "+"
    n = min(n, 18 - neg)
    out = digits[0]
    if n > 1:
        out += "." + digits[1:n]
    return out + "e" + sign + str(exp)


_INT_CACHE = [b":%d\r\n" % i for i in range(1024)]


def encode(value, resp3: bool = False) -> bytes:
    out = []
    _encode(value, resp3, out.append)
    return b"".join(out)


def _encode(value, resp3, w):
    t = type(value)
    if t is bytes:
        w(b"$%d\r\n%s\r\n" % (len(value), value))
    elif t is Raw:
        w(value)
    elif t is int:
        if 0 <= value < 1024:
            w(_INT_CACHE[value])
        else:
            w(b":%d\r\n" % value)
    elif value is None:
        w(b"_\r\n" if resp3 else b"$-1\r\n")
    elif t is list or t is tuple:
        w(b"*%d\r\n" % len(value))
        for item in value:
            _encode(item, resp3, w)
    elif t is str:
        w(b"+%s\r\n" % value.encode())
    elif t is ErrorReply:
        # surrogateescape: the bytes of a client's argument quoted in an error text, as it sent them
        w(b"-%s\r\n" % value.text.encode("utf-8", "surrogateescape").replace(b"\r", b" ").replace(b"\n", b" "))
    elif t is float:
        text = format_double(value)
        if resp3:
            w(b",%s\r\n" % text)
        else:
            w(b"$%d\r\n%s\r\n" % (len(text), text))
    elif t is dict:
        if resp3:
            w(b"%%%d\r\n" % len(value))
        else:
            w(b"*%d\r\n" % (2 * len(value)))
        for k, v in value.items():
            _encode(k, resp3, w)
            _encode(v, resp3, w)
    elif t is RespSet:
        w((b"~%d\r\n" if resp3 else b"*%d\r\n") % len(value))
        for item in value:
            _encode(item, resp3, w)
    elif t is Push:
        w((b">%d\r\n" if resp3 else b"*%d\r\n") % len(value))
        for item in value:
            _encode(item, resp3, w)
    elif t is bool:
        if resp3:
            w(b"#t\r\n" if value else b"#f\r\n")
        else:
            w(b":1\r\n" if value else b":0\r\n")
    elif value is NullArray:
        w(b"_\r\n" if resp3 else b"*-1\r\n")
    elif t is RawView:
        w(value.view)
    elif isinstance(value, bytearray) or isinstance(value, memoryview):
        data = bytes(value)
        w(b"$%d\r\n%s\r\n" % (len(data), data))
    else:
        raise TypeError(f"cannot encode reply of type {t.__name__}")


def encode_command(args) -> bytes:
    """A command as a RESP array of bulk strings: the one command encoder (effects, the journal, snapshots, the
    replication stream, MIGRATE, the clients). An argument that is not bytes is written as str(a)."""
    parts = [b"*%d\r\n" % len(args)]
    for a in args:
        if type(a) is not bytes:
            a = a if isinstance(a, (bytes, bytearray)) else str(a).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(parts)


def extend_command(parts, argv):
    """encode_command(argv) as pieces appended to `parts`: a large argument is not copied into a formatted
    string (b"%s" % value of 70 MB takes 0.7 s; one join at the end copies it once)."""
    parts.append(b"*%d\r\n" % len(argv))
    for a in argv:
        if type(a) is not bytes and not isinstance(a, (bytearray, memoryview)):
            a = str(a).encode()
        parts.append(b"$%d\r\n" % len(a))
        parts.append(a)
        parts.append(b"\r\n")
