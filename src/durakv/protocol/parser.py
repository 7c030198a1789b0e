"""Sans-IO request parser: bytes in, commands (lists of bytes) out.

Multibulk requests are parsed by hiredis.Reader; inline requests (a line not starting with '*') are split
here, with Valkey's quoting rules. Limits are checked the way Valkey does and reported with its texts:
`proto-max-bulk-len`, at most 1024*1024 arguments, the client query buffer limit, and the tighter limits
for clients that have not authenticated. A ProtocolError ends the connection after its reply.
"""

import hiredis

from ..errors import ProtocolError

MAX_MULTIBULK = 1024 * 1024
MAX_INLINE = 64 * 1024
UNAUTH_MAX_MULTIBULK = 10
UNAUTH_MAX_BULK = 16384
# Partial requests smaller than this are not worth scanning: hiredis holds them until complete.
_SCAN_THRESHOLD = 16384


_BULK_OVERHEAD = [len(b"$%d\r\n" % i) + 2 for i in range(10000)]


def request_len(cmd) -> int:
    """Bytes of a canonically encoded multibulk request (hiredis does not say how much it consumed)."""
    n = len(b"*%d\r\n" % len(cmd))
    for a in cmd:
        size = len(a)
        n += size + (_BULK_OVERHEAD[size] if size < 10000 else len(b"$%d\r\n" % size) + 2)
    return n


class RequestParser:
    __slots__ = ("_reader", "_inline", "_held", "_head", "_checked",
                 "max_bulk_len", "query_buffer_limit", "authenticated")

    def __init__(self, max_bulk_len=512 * 1024 * 1024, query_buffer_limit=1024 * 1024 * 1024):
        self._reader = hiredis.Reader()
        self._inline = None
        self._held = 0          # bytes given to hiredis that it has not returned as requests yet
        self._head = b""        # first bytes of the request still arriving, for limit checks
        self._checked = False
        self.max_bulk_len = max_bulk_len
        self.query_buffer_limit = query_buffer_limit
        self.authenticated = True

    @property
    def pending_bytes(self) -> int:
        return self._held + (len(self._inline) if self._inline else 0)

    def feed(self, data: bytes):
        """Returns (commands, error_text). On error, the commands before it are still returned."""
        commands = []
        try:
            self._feed(data, commands)
        except ProtocolError as exc:
            return commands, str(exc)
        if not self.authenticated:
            for i, args in enumerate(commands):
                limit = unauthenticated_limit(args)
                if limit is not None:
                    return commands[:i], limit
        return commands, None

    def _feed(self, data, commands):
        while data:
            reader = self._reader
            if self._inline is not None or (self._held == 0 and data[0] != 42):  # 42 == '*'
                data = self._feed_inline(data, commands)
                continue
            held_before = self._held
            chunk = data
            reader.feed(data)
            self._held += len(data)
            completed = 0
            while True:
                try:
                    cmd = reader.gets()
                except hiredis.ProtocolError as exc:
                    text = str(exc)
                    if "reply type byte" in text and 0 < self._held <= len(data):
                        # An inline request follows multibulk ones in the same chunk: re-split there.
                        data = data[len(data) - self._held:]
                        self._reset_reader()
                        break
                    raise ProtocolError(_translate(text)) from None
                if cmd is False:
                    data = b""
                    break
                completed += 1
                if type(cmd) is not list:
                    if cmd is None:
                        self._held -= 5  # '*-1\r\n' is ignored, as Valkey does
                        continue
                    raise ProtocolError("Protocol error: expected '$', got something else")
                if not cmd:
                    self._held -= 4
                    continue
                self._held -= request_len(cmd)
                if len(chunk) > self.max_bulk_len:
                    for a in cmd:
                        if len(a) > self.max_bulk_len:
                            raise ProtocolError("Protocol error: invalid bulk length")
                for a in cmd:
                    if type(a) is not bytes:
                        raise ProtocolError("Protocol error: expected '$', got '%s'" % _type_char(a))
                commands.append(cmd)
            if self._held < 0:
                self._held = 0  # a non-canonical encoding; accounting is best effort then
            if self._held and not data:
                self._check_partial(chunk, completed or held_before == 0)

    def _reset_reader(self):
        self._reader = hiredis.Reader()
        self._held = 0
        self._head = b""
        self._checked = False

    def _check_partial(self, chunk, new_request):
        """Checks the limits of a request still arriving (hiredis only reports complete ones)."""
        held = self._held
        if held > self.query_buffer_limit:
            raise ProtocolError("Protocol error: client query buffer limit reached")
        if new_request:
            # A request that began in this chunk: its first bytes are the chunk's last `held` ones.
            self._head = chunk[len(chunk) - held:][:MAX_INLINE]
            self._checked = False
        elif not self._checked and len(self._head) < MAX_INLINE:
            self._head += chunk[:MAX_INLINE - len(self._head)]
        if not self._checked and held >= _SCAN_THRESHOLD:
            self._checked = check_partial(self._head, self.max_bulk_len)

    def _feed_inline(self, data, commands):
        nl = data.find(b"\n")
        if nl < 0:
            self._inline = (self._inline or b"") + data
            if len(self._inline) > MAX_INLINE:
                raise ProtocolError("Protocol error: too big inline request")
            return b""
        line = data[:nl] if self._inline is None else self._inline + data[:nl]
        self._inline = None
        if len(line) > MAX_INLINE:
            raise ProtocolError("Protocol error: too big inline request")
        args = split_inline(line.rstrip(b"\r"))
        if args:
            commands.append(args)
        return data[nl + 1:]


def unauthenticated_limit(args):
    """Valkey's protocol error for a request from a client that has not authenticated yet, or None."""
    if len(args) > UNAUTH_MAX_MULTIBULK:
        return "Protocol error: unauthenticated multibulk length"
    for a in args:
        if len(a) > UNAUTH_MAX_BULK:
            return "Protocol error: unauthenticated bulk length"
    return None


def _type_char(value):
    if isinstance(value, list):
        return "*"
    if isinstance(value, int):
        return ":"
    return "?"


def _translate(text):
    low = text.lower()
    if "multi-bulk" in low or "multibulk" in low:
        return "Protocol error: invalid multibulk length"
    if "bulk" in low:
        return "Protocol error: invalid bulk length"
    if "reply type byte" in text:
        return "Protocol error: expected '$', got '%s'" % (text.split('"')[1] if '"' in text else "?")
    return "Protocol error: " + text


def skip_complete(buf: bytes) -> int:
    """Offset of the first incomplete multibulk request in buf (which starts at a request boundary)."""
    pos = 0
    n = len(buf)
    while pos < n:
        start = pos
        if buf[pos] != 42:
            nl = buf.find(b"\n", pos)
            if nl < 0:
                return start
            pos = nl + 1
            continue
        nl = buf.find(b"\r\n", pos)
        if nl < 0:
            return start
        try:
            count = int(buf[pos + 1:nl])
        except ValueError:
            return start
        pos = nl + 2
        for _ in range(max(count, 0)):
            nl = buf.find(b"\r\n", pos)
            if nl < 0 or buf[pos] != 36:
                return start
            try:
                size = int(buf[pos + 1:nl])
            except ValueError:
                return start
            pos = nl + 2 + size + 2
            if pos > n:
                return start
    return pos


def check_partial(head: bytes, max_bulk_len: int) -> bool:
    """Validates the headers visible in an incomplete request. Returns True once every header up to
    the one still arriving has been checked (nothing more to learn), raises ProtocolError on a limit."""
    if not head or head[0] != 42:
        return True
    nl = head.find(b"\r\n")
    if nl < 0:
        if len(head) > MAX_INLINE:
            raise ProtocolError("Protocol error: too big mbulk count string")
        return False
    try:
        count = int(head[1:nl])
    except ValueError:
        raise ProtocolError("Protocol error: invalid multibulk length") from None
    if count > MAX_MULTIBULK:
        raise ProtocolError("Protocol error: invalid multibulk length")
    pos = nl + 2
    for _ in range(count):
        if pos >= len(head):
            return False
        if head[pos] != 36:
            raise ProtocolError("Protocol error: expected '$', got '%s'" % chr(head[pos]))
        nl = head.find(b"\r\n", pos)
        if nl < 0:
            if len(head) - pos > MAX_INLINE:
                raise ProtocolError("Protocol error: too big bulk count string")
            return False
        try:
            size = int(head[pos + 1:nl])
        except ValueError:
            raise ProtocolError("Protocol error: invalid bulk length") from None
        if size < 0 or size > max_bulk_len:
            raise ProtocolError("Protocol error: invalid bulk length")
        pos = nl + 2 + size + 2
        if pos > len(head):
            return True  # the big argument is arriving; its declared size was within limits
    return True


def split_inline(line: bytes):
    """Splits an inline request like Valkey's sdssplitargs (quotes, escapes)."""
    if b'"' not in line and b"'" not in line:
        return line.split()
    args = []
    i, n = 0, len(line)
    while True:
        while i < n and line[i:i + 1].isspace():
            i += 1
        if i >= n:
            return args
        cur = bytearray()
        inq = insq = False
        while True:
            if inq:
                if i >= n:
                    raise ProtocolError("Protocol error: unbalanced quotes in request")
                c = line[i:i + 1]
                if c == b"\\" and i + 3 < n and line[i + 1:i + 2] == b"x" and _ishex(line[i + 2:i + 4]):
                    cur.append(int(line[i + 2:i + 4], 16))
                    i += 3
                elif c == b"\\" and i + 1 < n:
                    i += 1
                    cur += {b"n": b"\n", b"r": b"\r", b"t": b"\t", b"b": b"\b", b"a": b"\a"}.get(
                        line[i:i + 1], line[i:i + 1])
                elif c == b'"':
                    if i + 1 < n and not line[i + 1:i + 2].isspace():
                        raise ProtocolError("Protocol error: unbalanced quotes in request")
                    inq = False
                else:
                    cur += c
            elif insq:
                if i >= n:
                    raise ProtocolError("Protocol error: unbalanced quotes in request")
                c = line[i:i + 1]
                if c == b"\\" and i + 1 < n and line[i + 1:i + 2] == b"'":
                    i += 1
                    cur += b"'"
                elif c == b"'":
                    if i + 1 < n and not line[i + 1:i + 2].isspace():
                        raise ProtocolError("Protocol error: unbalanced quotes in request")
                    insq = False
                else:
                    cur += c
            else:
                if i >= n:
                    break
                c = line[i:i + 1]
                if c.isspace():
                    break
                if c == b'"':
                    inq = True
                elif c == b"'":
                    insq = True
                else:
                    cur += c
            i += 1
        args.append(bytes(cur))


def _ishex(b):
    try:
        int(b, 16)
        return len(b) == 2
    except ValueError:
        return False
