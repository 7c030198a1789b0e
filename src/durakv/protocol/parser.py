"""Sans-IO request parser: bytes in, commands (lists of bytes) out, with Valkey 8.0's rules and texts.

Two parsers share one byte stream:

- The exact parser (`_slow`) is a transcription of networking.c's processInlineBuffer and
  processMultibulkBuffer: it checks every header the moment its line is complete (multibulk count, bulk
  length, their unauthenticated limits, the 64 KiB line cap), keeps the partial request between reads, and
  is the only code that decides an error. Unauthenticated clients, inline requests, and anything the fast
  path cannot vouch for go through it.
- The fast path (`_fast`) hands a run of authenticated multibulk requests to hiredis and then proves that
  hiredis read exactly what Valkey would: every request starts with '*', every element with '$', and the
  canonical lengths of what hiredis returned add up to the bytes it was given. hiredis accepts more than a
  request (':5', '+x', '$-1', nested arrays, RESP3 types), does not check proto-max-bulk-len, and allocates an
  aggregate's element array when it reads the header, so it is never shown an aggregate header with a count
  of seven digits or more, and it never keeps state across reads: the request left incomplete at the end
  of a read is parsed (and its headers checked) by the exact parser.

A ProtocolError ends the connection after its reply. One departure from Valkey 8.0 (which accepts up to
INT_MAX arguments): a multibulk count above 1024*1024 is refused, as Redis before 7.0 did.
"""

import re

import hiredis

from .. import messages
from ..errors import ProtocolError

MAX_MULTIBULK = 1024 * 1024
MAX_INLINE = 64 * 1024          # PROTO_INLINE_MAX_SIZE: an inline request or a header line
UNAUTH_MAX_MULTIBULK = 10
UNAUTH_MAX_BULK = 16384
_LL_MAX = (1 << 63) - 1
_AUTH_COMMANDS = (b"auth", b"hello")

# The most bytes one fast-path attempt copies into hiredis. It shrinks after an attempt that hiredis or
# the verification cut short (a stream mixing inline and multibulk requests would otherwise copy the rest
# of the read once per request) and grows back after clean ones.
_WINDOW_MAX = 1 << 20
_WINDOW_MIN = 1024

# An aggregate header hiredis would preallocate for: '*' (and the RESP3 '~', '>', '|') and 7+ digits.
_BIG_ARRAY = re.compile(rb"\*[0-9]{7}").search
_BIG_RESP3 = [(ch, re.compile(re.escape(ch) + rb"[0-9]{7}").search) for ch in (b"~", b">", b"|")]

# Canonical sizes: "*N\r\n", and "$L\r\n" + L bytes + "\r\n" for an element of L bytes.
_ARRAY_HEAD = [len(b"*%d\r\n" % n) for n in range(10000)]
_BULK_STEP = [n + len(b"$%d\r\n" % n) + 2 for n in range(10000)]
_BULK_OVERHEAD = [len(b"$%d\r\n" % i) + 2 for i in range(10000)]


def request_len(cmd) -> int:
    """Bytes of a canonically encoded multibulk request (a list of bytes)."""
    n = len(b"*%d\r\n" % len(cmd))
    for a in cmd:
        size = len(a)
        n += size + (_BULK_OVERHEAD[size] if size < 10000 else len(b"$%d\r\n" % size) + 2)
    return n


class RequestParser:
    """feed(bytes) -> (commands, error_text). `authenticated` selects Valkey's tighter header limits for a
    client that has not authenticated; given `auth` (any object with an `authenticated` attribute, the
    connection's session), it is read from there at every feed.

    Before AUTH, the requests that follow an AUTH or HELLO in the same read are parsed with the
    authenticated limits, as Valkey parses each request after running the one before it; if that AUTH
    fails, the caller applies `unauthenticated_limit` to each of those complete requests, and a partial one
    is checked again at the next feed."""

    __slots__ = ("_auth", "authenticated", "max_bulk_len", "query_buffer_limit", "_reader", "_window",
                 "_buf", "_args", "_args_bytes", "_mbulk", "_bulklen", "_scanned", "_blocked")

    def __init__(self, max_bulk_len=512 * 1024 * 1024, query_buffer_limit=1024 * 1024 * 1024, auth=None):
        self._auth = auth
        self.authenticated = True
        self.max_bulk_len = max_bulk_len
        self.query_buffer_limit = query_buffer_limit
        self._reader = None      # a hiredis reader known to hold no partial reply, or None
        self._window = _WINDOW_MAX
        # Exact parser state, kept only while a request or line is incomplete at the end of a read.
        self._buf = None         # bytearray from the first unparsed byte, or None
        self._args = None        # arguments of the multibulk request being read, or None at a boundary
        self._args_bytes = 0
        self._mbulk = 0          # its arguments still to come
        self._bulklen = -1       # the declared length of the argument being read, -1 before its header
        self._scanned = 0        # bytes of the pending line known to hold neither its terminator nor NUL
        self._blocked = False    # a NUL came before the terminator: Valkey's strchr never finds it

    @property
    def pending_bytes(self) -> int:
        return (len(self._buf) if self._buf is not None else 0) + self._args_bytes

    def feed(self, data):
        """Returns (commands, error_text). On error, the commands before it are still returned and the
        parser must not be fed again."""
        commands = []
        try:
            self._parse(data, commands)
        except ProtocolError as exc:
            self._buf = self._args = None
            self._scanned, self._blocked = 0, False
            return commands, str(exc)
        return commands, None

    # -- the stream ------------------------------------------------------------------------------------
    def _parse(self, data, commands):
        auth = self.authenticated if self._auth is None else self._auth.authenticated
        self.authenticated = auth
        buf = self._buf
        resume = buf is not None
        if resume:
            if not auth and self._args is not None:
                self._check_unauth_partial()
            buf += data
        else:
            buf = data
        pos = 0
        end = len(buf)
        pending = False
        while pos < end:
            if not resume and auth and buf[pos] == 42:  # '*'
                pos = self._fast(buf, pos, end, commands)
                if pos >= end:
                    break
            resume = False
            pos, auth, pending = self._slow(buf, pos, end, commands, auth)
            if pending:
                break
        if not pending:
            self._buf = None
            return
        if buf is self._buf:
            if pos:
                del buf[:pos]
        else:
            self._buf = bytearray(memoryview(buf)[pos:])
        if len(self._buf) + self._args_bytes > self.query_buffer_limit:
            raise ProtocolError(messages.PROTO_QUERY_BUFFER_LIMIT)

    def _fast(self, buf, pos, end, commands):
        """Parses the complete requests of buf[pos:end] it can verify with hiredis; returns the offset of
        the first byte it did not vouch for (the exact parser continues there)."""
        stop = min(end, pos + self._window)
        m = _BIG_ARRAY(buf, pos, stop)
        if m is not None:
            stop = m.start()
        for ch, search in _BIG_RESP3:
            if buf.find(ch, pos, stop) >= 0:
                m = search(buf, pos, stop)
                if m is not None:
                    stop = m.start()
        if stop - pos < 4:
            return pos
        reader = self._reader
        if reader is None:
            reader = hiredis.Reader()
        self._reader = None
        reader.feed(buf, pos, stop - pos)
        clean = True
        got = []
        try:
            got.extend(iter(reader.gets, False))  # keeps the replies before an error
        except Exception:  # noqa: BLE001 - whatever hiredis objects to, the exact parser explains
            clean = False
        # Where each request hiredis returned starts, if it read only canonical '*' and '$' headers
        # (its integer parsing is as strict as Valkey's string2ll, so a header's length follows from it).
        p = pos
        ok = 0
        head = _ARRAY_HEAD
        step = _BULK_STEP
        try:
            for cmd in got:
                if buf[p] != 42 or not cmd:   # '*0' and '*-1' are skipped by the exact parser
                    break
                n = len(cmd)
                q = p + (head[n] if n < 10000 else len(b"*%d\r\n" % n))
                for a in cmd:
                    if buf[q] != 36:  # '$'
                        break
                    size = len(a)       # TypeError for $-1 (None)
                    q += step[size] if size < 10000 else size + len(b"$%d\r\n" % size) + 2
                else:
                    p = q
                    ok += 1
                    continue
                break
        except (TypeError, IndexError):
            pass
        if ok < len(got):
            clean = False
            del got[ok:]
        if p - pos > self.max_bulk_len:
            limit = self.max_bulk_len
            p = pos
            for i, cmd in enumerate(got):
                if any(len(a) > limit for a in cmd):
                    del got[i:]  # the exact parser rejects it at the header
                    clean = False
                    break
                p += request_len(cmd)
        commands += got
        if clean and p == stop:
            self._reader = reader  # consumed exactly: no partial reply inside
        if clean:
            self._window = min(self._window * 2, _WINDOW_MAX)
        else:
            self._window = max(2 * (p - pos), _WINDOW_MIN)
        return p

    def _slow(self, buf, pos, end, commands, auth):
        """Valkey's processInputBuffer loop over buf[pos:end]. Returns (pos, auth, pending): pending when
        it stopped in an incomplete request or line (its state is kept), else at `end` or at a request
        boundary where the fast path may take over."""
        start = pos
        args = self._args
        max_bulk = self.max_bulk_len
        while pos < end:
            if args is None:
                c = buf[pos]
                if c != 42:  # inline
                    nl = self._line_end(buf, pos, end, b"\n", messages.PROTO_BIG_INLINE)
                    if nl < 0:
                        return pos, auth, True
                    line = bytes(buf[pos:nl])
                    pos = nl + 1
                    if line.endswith(b"\r"):
                        line = line[:-1]
                    if line:
                        argv = split_inline(line)
                        if argv:
                            commands.append(argv)
                            if not auth and argv[0].lower() in _AUTH_COMMANDS:
                                auth = True
                    continue
                if pos > start and auth:
                    return pos, auth, False  # a multibulk request at a boundary: the fast path's
                cr = self._line_end(buf, pos, end, b"\r", messages.PROTO_BIG_MBULK_COUNT)
                if cr < 0 or cr + 1 >= end:
                    return pos, auth, True
                ll = _string2ll(buf[pos + 1:cr])
                if ll is None or ll > MAX_MULTIBULK:
                    raise ProtocolError(messages.PROTO_INVALID_MULTIBULK)
                if ll > UNAUTH_MAX_MULTIBULK and not auth:
                    raise ProtocolError(messages.PROTO_UNAUTH_MULTIBULK)
                pos = cr + 2
                if ll <= 0:
                    continue  # Valkey skips '*0', '*-1', '*-5'
                args = self._args = []
                self._args_bytes = 0
                self._mbulk = ll
                self._bulklen = -1
            while self._mbulk:
                bulklen = self._bulklen
                if bulklen < 0:
                    cr = self._line_end(buf, pos, end, b"\r", messages.PROTO_BIG_BULK_COUNT)
                    if cr < 0 or cr + 1 >= end:
                        return pos, auth, True
                    c = buf[pos]
                    if c != 36:  # '$'
                        raise ProtocolError(messages.PROTO_EXPECTED_DOLLAR.format(_reply_char(c)))
                    ll = _string2ll(buf[pos + 1:cr])
                    if ll is None or ll < 0 or ll > max_bulk:
                        raise ProtocolError(messages.PROTO_INVALID_BULK)
                    if ll > UNAUTH_MAX_BULK and not auth:
                        raise ProtocolError(messages.PROTO_UNAUTH_BULK)
                    pos = cr + 2
                    bulklen = self._bulklen = ll
                if end - pos < bulklen + 2:
                    return pos, auth, True
                if type(buf) is bytes:
                    args.append(buf[pos:pos + bulklen])
                else:
                    with memoryview(buf) as view:
                        args.append(bytes(view[pos:pos + bulklen]))
                self._args_bytes += bulklen
                pos += bulklen + 2  # the two bytes after the payload are not checked, as in Valkey
                self._bulklen = -1
                self._mbulk -= 1
            commands.append(args)
            if not auth and args[0].lower() in _AUTH_COMMANDS:
                auth = True
            args = self._args = None
            self._args_bytes = 0
        return pos, auth, False

    def _line_end(self, buf, pos, end, term, too_big):
        """Offset of the terminator of the line at pos, or -1 while it has not arrived. As Valkey's strchr,
        a NUL before the terminator hides it; a line longer than PROTO_INLINE_MAX_SIZE is refused."""
        t = -1
        if not self._blocked:
            s = pos + self._scanned
            t = buf.find(term, s, end)
            if buf.find(b"\0", s, t if t >= 0 else end) >= 0:
                self._blocked = True
                t = -1
        if t < 0:
            if end - pos > MAX_INLINE:
                raise ProtocolError(too_big)
            self._scanned = end - pos
            return -1
        if t - pos > MAX_INLINE:
            raise ProtocolError(too_big)
        self._scanned = 0
        return t

    def _check_unauth_partial(self):
        """The request still arriving had its headers checked while the client counted as authenticated
        (an AUTH earlier in that read); it did not stay so: apply the limits Valkey would have."""
        if len(self._args) + self._mbulk > UNAUTH_MAX_MULTIBULK:
            raise ProtocolError(messages.PROTO_UNAUTH_MULTIBULK)
        if self._bulklen > UNAUTH_MAX_BULK or any(len(a) > UNAUTH_MAX_BULK for a in self._args):
            raise ProtocolError(messages.PROTO_UNAUTH_BULK)


def unauthenticated_limit(args):
    """Valkey's protocol error for a request from a client that has not authenticated yet, or None."""
    if len(args) > UNAUTH_MAX_MULTIBULK:
        return messages.PROTO_UNAUTH_MULTIBULK
    for a in args:
        if len(a) > UNAUTH_MAX_BULK:
            return messages.PROTO_UNAUTH_BULK
    return None


def _string2ll(s):
    """Valkey's string2ll: an optional '-', no leading zeros, no '+', no spaces, within a long long."""
    n = len(s)
    if n == 0 or n >= 21:
        return None
    if s[0] == 45:  # '-'
        digits = s[1:]
        if not digits or not 49 <= digits[0] <= 57 or not digits.isdigit():
            return None
        v = -int(digits)
        return v if v >= -_LL_MAX - 1 else None
    if n == 1 and s[0] == 48:
        return 0
    if not 49 <= s[0] <= 57 or not s.isdigit():
        return None
    v = int(s)
    return v if v <= _LL_MAX else None


def _reply_char(c):
    """The offending byte as Valkey's "%c" puts it in the reply (CR and LF become spaces)."""
    return " " if c in (10, 13) else chr(c)


_BLANK = frozenset(b" \t\n\v\f\r")      # isspace(): skipped between arguments
_ARG_END = frozenset(b" \n\r\t")        # what ends an unquoted argument
_HEX = frozenset(b"0123456789abcdefABCDEF")
_ESCAPES = {ord("n"): 10, ord("r"): 13, ord("t"): 9, ord("b"): 8, ord("a"): 7}


def split_inline(line: bytes):
    """Splits an inline request like Valkey's sdssplitargs (quotes, escapes). `line` holds no NUL."""
    if b'"' not in line and b"'" not in line and b"\v" not in line and b"\f" not in line:
        return line.split()  # the same split when neither quotes nor \v, \f (blanks, not separators) occur
    args = []
    n = len(line)
    p = 0
    while True:
        while p < n and line[p] in _BLANK:
            p += 1
        if p >= n:
            return args
        cur = bytearray()
        inq = insq = False
        while True:
            c = line[p] if p < n else 0
            if inq:
                if c == 92 and p + 3 < n and line[p + 1] == 120 and line[p + 2] in _HEX and line[p + 3] in _HEX:
                    cur.append(int(line[p + 2:p + 4], 16))   # \xHH
                    p += 3
                elif c == 92 and p + 1 < n:
                    p += 1
                    cur.append(_ESCAPES.get(line[p], line[p]))
                elif c == 34:  # '"'
                    if p + 1 < n and line[p + 1] not in _BLANK:
                        raise ProtocolError(messages.PROTO_UNBALANCED_QUOTES)
                    p += 1
                    break
                elif p >= n:
                    raise ProtocolError(messages.PROTO_UNBALANCED_QUOTES)
                else:
                    cur.append(c)
            elif insq:
                if c == 92 and p + 1 < n and line[p + 1] == 39:
                    p += 1
                    cur.append(39)
                elif c == 39:
                    if p + 1 < n and line[p + 1] not in _BLANK:
                        raise ProtocolError(messages.PROTO_UNBALANCED_QUOTES)
                    p += 1
                    break
                elif p >= n:
                    raise ProtocolError(messages.PROTO_UNBALANCED_QUOTES)
                else:
                    cur.append(c)
            else:
                if p >= n:
                    break
                if c in _ARG_END:
                    p += 1
                    break
                if c == 34:
                    inq = True
                elif c == 39:
                    insq = True
                else:
                    cur.append(c)
            p += 1
        args.append(bytes(cur))
