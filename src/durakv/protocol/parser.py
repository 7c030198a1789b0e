"""Sans-IO request parser: bytes in, commands (lists of bytes) out, with Valkey 8.0's rules and texts.

Two parsers share one byte stream:

- The exact parser (`_slow`) is a transcription of networking.c's processInlineBuffer and
  processMultibulkBuffer: it checks every header the moment its line is complete (multibulk count, bulk
  length, their unauthenticated limits, the 64 KiB line cap), keeps the partial request between reads, and
  is the only code that decides an error. Unauthenticated clients, inline requests, the request left
  incomplete at the end of a read, and anything the hiredis path cannot vouch for go through it.
- The hiredis path (`_hiredis_run`) hands a run of authenticated multibulk requests to hiredis and then proves that
  hiredis read exactly what Valkey would: at the offsets the canonical encoding of what it returned gives,
  every request starts with '*' and every element with '$' (hiredis's integers are as strict as Valkey's
  string2ll). hiredis accepts more than a request (':5', '+x', '$-1', nested arrays, RESP3 types), does not
  check proto-max-bulk-len, and allocates an aggregate's element array when it reads the header, so it is
  never shown an aggregate header with a count of seven digits or more. It keeps a request across reads
  only when the exact parser has checked all its headers, found them canonical, and the request waits for
  nothing but the rest of its last payload, which hiredis reads as data.

A ProtocolError ends the connection after its reply. As Valkey, an authenticated request may announce up to
INT_MAX arguments (an unauthenticated one 10); what bounds it is client-query-buffer-limit: the arguments a
request has brought so far count toward it, each with ARG_COST bytes for what holding it costs besides its
payload, and the connection is refused once they pass it, whether or not a partial line is kept.
"""

import re

import hiredis

from .. import messages
from ..config import split_args
from ..errors import ProtocolError
from .numbers import string2ll

MAX_MULTIBULK = 2 ** 31 - 1     # INT_MAX: processMultibulkBuffer's "invalid multibulk length" above it
ARG_COST = 48                   # a parsed argument besides its payload (a bytes object and its list slot)
MAX_INLINE = 64 * 1024          # PROTO_INLINE_MAX_SIZE: an inline request or a header line
UNAUTH_MAX_MULTIBULK = 10
UNAUTH_MAX_BULK = 16384
_AUTH_COMMANDS = (b"auth", b"hello")

# The most bytes one hiredis-path attempt copies into hiredis. It shrinks after an attempt that hiredis or
# the verification cut short (a stream mixing inline and multibulk requests would otherwise copy the rest
# of the read once per request) and grows back after clean ones.
_WINDOW_MAX = 1 << 20
_WINDOW_MIN = 1024
_TAIL_MAX = 16 * 1024

# An aggregate header hiredis would preallocate for: '*' (and the RESP3 '~', '>', '|') and 7+ digits.
# On a long run, a pattern starting with a literal (plus a search for the rarer bytes) is quickest; on a
# few requests, one translate() that folds them all into "*0000000" is.
_BIG_ARRAY = re.compile(rb"\*[0-9]{7}").search
_BIG_RESP3 = [(ch, re.compile(re.escape(ch) + rb"[0-9]{7}").search) for ch in (b"~", b">", b"|")]
_AGGREGATE_DIGITS = bytes(48 if 48 <= c <= 57 else 42 if c in b"~>|" else c for c in range(256))
_SMALL = 512

# Canonical sizes: "*N\r\n", and "$L\r\n" + L bytes + "\r\n" for an element of L bytes. Built from the
# decimal lengths (1 digit for 0-9, 2 for 10-99, ...) rather than formatting 30,000 numbers: every server process
# builds them at import, and formatting took 7 ms of its start.
_DIGITS = [1] * 10 + [2] * 90 + [3] * 900 + [4] * 9000
_ARRAY_HEAD = [3 + d for d in _DIGITS]
_BULK_OVERHEAD = [5 + d for d in _DIGITS]
_BULK_STEP = [n + o for n, o in zip(range(10000), _BULK_OVERHEAD)]


_compiled_parse = None


def use_compiled(parse):
    """Installs the compiled core's parse(buf, pos, end, commands, max_bulk_len) -> pos (fastpath.install): the
    complete canonical multibulk requests of buf[pos:end]; None goes back to hiredis alone."""
    global _compiled_parse
    _compiled_parse = parse


def request_len(cmd) -> int:
    """Bytes of a canonically encoded multibulk request (a list of bytes)."""
    n = len(b"*%d\r\n" % len(cmd))
    for a in cmd:
        size = len(a)
        n += size + (_BULK_OVERHEAD[size] if size < 10000 else len(b"$%d\r\n" % size) + 2)
    return n


class RequestParser:
    """feed(bytes) -> (commands, error_text). `authenticated` selects Valkey's tighter header limits for a
    client that has not authenticated; given `auth` (any object with an `authenticated` attribute: the
    connection's session), it is that object's, read at every feed.

    Before AUTH, the requests that follow an AUTH or HELLO in the same read are parsed with the
    authenticated limits, as Valkey parses each request after running the one before it; if that AUTH
    fails, the caller applies `unauthenticated_limit` to each of those complete requests, and a partial one
    is checked again at the next feed.

    The compiled core's contract (fastpath/_core.c `received`): `boundary_for` is the one thing it reads of the
    parser's state before it parses a read itself. It is the session this parser follows (`auth`) while the
    parser stands at a request boundary with nothing pending from earlier reads (no partial request, tail,
    carried payload or buffered line), else None; the parser keeps it current at the end of every feed. The
    core parses such a read with the same compiled parse `feed` uses and, for what it leaves, calls `feed_rest`;
    a read it parses completely leaves the state as it was (at the boundary). `max_bulk_len` bounds the
    compiled parse's bulk lengths."""

    __slots__ = ("_auth", "boundary_for", "_authenticated", "max_bulk_len", "query_buffer_limit", "_reader", "_window",
                 "_partial", "_carry_args", "_carry_len", "_carry_have", "_tail",
                 "_buf", "_args", "_args_bytes", "_mbulk", "_bulklen", "_scanned", "_blocked", "_req_start")

    def __init__(self, max_bulk_len=512 * 1024 * 1024, query_buffer_limit=1024 * 1024 * 1024, auth=None):
        self._auth = auth
        self.boundary_for = auth   # at a request boundary, following `auth`: the core's contract (see above)
        self._authenticated = True
        self.max_bulk_len = max_bulk_len
        self.query_buffer_limit = query_buffer_limit
        self._reader = None      # a hiredis reader known to hold no partial reply, or None
        self._window = _WINDOW_MAX
        self._partial = None     # (reader, offset) after a hiredis run that ended in an incomplete request
        # A request whose headers all passed the exact parser's checks, in canonical form, and that waits
        # only for the rest of its last payload stays in its hiredis reader (as most large values arrive).
        self._carry_args = None  # its arguments before the last one
        self._carry_len = 0      # the last one's declared length
        self._carry_have = 0     # the bytes of it (and of its CRLF) the reader holds
        # A small incomplete multibulk request whose headers so far passed the exact parser's checks, kept
        # as bytes to be read again with the next read (finishing it in the exact parser costs more).
        self._tail = None
        # Exact parser state, kept only while a request or line is incomplete at the end of a read.
        self._buf = None         # bytearray from the first unparsed byte, or None
        self._args = None        # arguments of the multibulk request being read, or None at a boundary
        self._args_bytes = 0
        self._mbulk = 0          # its arguments still to come
        self._bulklen = -1       # the declared length of the argument being read, -1 before its header
        self._scanned = 0        # bytes of the pending line known to hold neither its terminator nor NUL
        self._blocked = False    # a NUL came before the terminator: Valkey's strchr never finds it
        self._req_start = -1     # where the exact parser began the multibulk request it is reading

    @property
    def authenticated(self):
        return self._authenticated if self._auth is None else self._auth.authenticated

    @authenticated.setter
    def authenticated(self, value):
        if self._auth is not None:
            raise AttributeError("this parser follows its session's authentication")
        self._authenticated = value

    @property
    def pending_bytes(self) -> int:
        return ((len(self._buf) if self._buf is not None else 0) + self._args_bytes
                + (len(self._tail) if self._tail is not None else 0)
                + (self._carry_have if self._carry_args is not None else 0))

    def feed(self, data):
        """Returns (commands, error_text). On error, the commands before it are still returned and the
        parser must not be fed again."""
        commands = []
        cparse = _compiled_parse
        if (cparse is not None and self._carry_args is None and self._tail is None and self._buf is None
                and self._args is None and data[:1] == b"*"
                and (self._authenticated if self._auth is None else self._auth.authenticated)):
            # At a request boundary with nothing pending: the compiled parse takes the read's complete canonical
            # requests; whatever it leaves goes on below as if it were the whole read (the state is the same)
            end = len(data)
            pos = cparse(data, 0, end, commands, self.max_bulk_len)
            if pos == end:
                self._partial = None
                return commands, None
            if pos:
                data = data[pos:]
        return self._feed(data, commands)

    def feed_rest(self, data, pos, commands):
        """feed() after the compiled read callback parsed data[:pos] into commands itself (fastpath/_core.c
        received: the same test of the state, the same compiled parse)."""
        return self._feed(data[pos:] if pos else data, commands)

    def _feed(self, data, commands):
        try:
            source = self._auth
            auth = self._authenticated if source is None else source.authenticated
            self._partial = None
            if self._carry_args is not None:
                pos = self._finish_carried(data, commands, auth)
                if pos < len(data):
                    self._parse(data, pos, commands, auth, True, False)
            else:
                tail = self._tail
                if tail is not None:
                    self._tail = None
                    data = tail + data
                if self._buf is None and self._args is None and auth and data and data[0] == 42:  # the common case
                    end = len(data)
                    pos = self._hiredis_run(data, 0, end, commands)
                    if pos < end:
                        self._parse(data, pos, commands, auth, False, tail is not None)
                else:
                    self._parse(data, 0, commands, auth, True, tail is not None)
        except ProtocolError as exc:
            self._buf = self._args = self._tail = self._carry_args = self._reader = self._partial = None
            self._scanned, self._blocked = 0, False
            self.boundary_for = None   # (not fed again after an error)
            return commands, str(exc)
        if self._carry_args is None and self._tail is None and self._buf is None and self._args is None:
            # at a boundary: no hiredis run is left incomplete either, so the compiled parse may take the next read
            self._partial = None
            self.boundary_for = self._auth
        else:
            self.boundary_for = None
        return commands, None

    # -- the stream ------------------------------------------------------------------------------------
    def _parse(self, data, pos, commands, auth, hiredis_ok, carried):
        """Parses data[pos:], first finishing what is pending from earlier reads, alternating between the
        two paths (the hiredis path only at a request boundary, and not again where it just stopped).
        `carried`: data begins with the tail kept from the last read."""
        self._req_start = -1
        if self._buf is not None or self._args is not None:
            if not auth and self._args is not None:
                _check_unauth(self._args, self._mbulk, self._bulklen)
            buf = self._buf
            if buf is not None:
                # Only the bytes that finish the pending line or payload join the kept ones; the rest of
                # the read is parsed where it is.
                need = self._need(buf, data)
                if need:
                    buf += memoryview(data)[:need]
                p, auth, pending = self._slow(buf, 0, len(buf), commands, auth)
                if p < len(buf) and need < len(data):
                    # A NUL hid the terminator: all that follows belongs to the line, as in Valkey.
                    buf += memoryview(data)[need:]
                    need = len(data)
                    p, auth, pending = self._slow(buf, p, len(buf), commands, auth)
                if p < len(buf):   # still incomplete: then it took all of data
                    if p:
                        del buf[:p]
                    self._check_buffered()
                    return
                self._buf = None
                pos = need
                self._req_start = -1   # a request begun in buf, not in data
            hiredis_ok = self._args is None
        end = len(data)
        pending = False
        while pos < end:
            if hiredis_ok and auth and data[pos] == 42:  # '*'
                pos = self._hiredis_run(data, pos, end, commands)
                if pos >= end:
                    break
            pos, auth, pending = self._slow(data, pos, end, commands, auth)
            if pending:
                break
            hiredis_ok = True
        if not pending:
            return
        start = self._req_start
        in_last_payload = self._mbulk == 1 and self._bulklen >= 0
        partial = self._partial
        if auth and in_last_payload and partial is not None and partial[1] == start:
            head = _canonical_head(self._args, self._bulklen)
            if start + len(head) != pos or not data.startswith(head, start):
                partial = None
        else:
            partial = None
        if partial is not None:
            # hiredis read the same bytes as the exact parser (canonical headers): it keeps the request.
            self._reader = partial[0]
            self._carry_args, self._carry_len, self._carry_have = self._args, self._bulklen, end - pos
            self._args = None
            self._args_bytes = self._mbulk = self._scanned = 0
            self._bulklen = -1
            return
        # A request waiting only for the rest of its last payload is finished in place; other small ones
        # are read again with the next read (once: not at every read).
        if (auth and start >= 0 and end - start <= _TAIL_MAX and not self._blocked
                and not (carried and start == 0) and not in_last_payload):
            self._tail = bytes(data[start:end])
            self._args = None
            self._args_bytes = self._mbulk = self._scanned = 0
            self._bulklen = -1
        elif pos < end:
            self._buf = bytearray(memoryview(data)[pos:])
            self._check_buffered()

    def _finish_carried(self, data, commands, auth):
        """Feeds the carried request's reader the rest of its last payload; returns where data goes on."""
        if not auth:
            _check_unauth(self._carry_args, 1, self._carry_len)
        need = self._carry_len + 2 - self._carry_have
        n = len(data)
        if n < need:
            self._reader.feed(data)
            self._carry_have += n
            if self._carry_have > self.query_buffer_limit:
                raise ProtocolError(messages.PROTO_QUERY_BUFFER_LIMIT)
            return n
        self._reader.feed(data, 0, need)
        commands.append(self._reader.gets())   # complete now, and the reader holds nothing else
        self._carry_args = None
        return need

    def _need(self, buf, data):
        """How many bytes of data finish the line or the payload kept in buf (all of data if they do not)."""
        n = len(data)
        if self._args is not None and self._bulklen >= 0:
            return min(n, self._bulklen + 2 - len(buf))
        if self._blocked:
            return n
        if self._args is None and buf[0] != 42:
            t = data.find(b"\n")
            return n if t < 0 else t + 1
        if buf[-1] == 13:   # the CR is here, the byte after it is not
            return 1
        t = data.find(b"\r")
        return n if t < 0 else min(n, t + 2)

    def _check_buffered(self):
        held = len(self._buf) + self._args_bytes
        if self._args is not None:
            held += ARG_COST * len(self._args)
        if held > self.query_buffer_limit:
            raise ProtocolError(messages.PROTO_QUERY_BUFFER_LIMIT)

    def _hiredis_run(self, buf, pos, end, commands):
        """Parses the complete requests of buf[pos:end] it can verify with hiredis; returns the offset of
        the first byte it did not vouch for (the exact parser continues there). The compiled core's parse
        takes the complete canonical requests first; what it leaves (an incomplete request at the end of the
        read, anything it cannot vouch for) goes on here as before."""
        cparse = _compiled_parse
        if cparse is not None:
            pos = cparse(buf, pos, end, commands, self.max_bulk_len)
            if pos >= end:
                return pos
        stop = end if end - pos <= self._window else pos + self._window
        if stop - pos <= _SMALL:
            i = buf[pos:stop].translate(_AGGREGATE_DIGITS).find(b"*0000000")
            if i >= 0:
                stop = pos + i
        else:
            stop = _first_big_array(buf, pos, stop)
            for ch, search in _BIG_RESP3:
                if buf.find(ch, pos, stop) >= 0:
                    m = search(buf, pos, stop)
                    if m is not None:
                        stop = m.start()
        if stop - pos < 4:
            return pos
        reader = self._reader or hiredis.Reader()
        self._reader = None
        reader.feed(buf, pos, stop - pos)
        gets = reader.gets
        clean = True
        got = []
        try:
            cmd = gets()
            if cmd is not False:
                got.append(cmd)
                cmd = gets()
                if cmd is not False:
                    got.append(cmd)
                    got.extend(iter(gets, False))  # keeps the replies before an error
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
        if not clean:
            self._window = max(2 * (p - pos), _WINDOW_MIN)
        else:
            if p == stop:
                self._reader = reader  # consumed exactly: no partial reply inside
            elif stop == end:
                self._partial = (reader, p)
            if self._window < _WINDOW_MAX:
                self._window = min(self._window * 2, _WINDOW_MAX)
        return p

    def _slow(self, buf, pos, end, commands, auth):
        """Valkey's processInputBuffer loop over buf[pos:end]. Returns (pos, auth, pending): pending when
        it stopped in an incomplete request or line (its state is kept), else at `end` or at a request
        boundary where the hiredis path may take over."""
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
                    return pos, auth, False  # a multibulk request at a boundary: the hiredis path's
                self._req_start = pos
                cr = buf.find(b"\r", pos, end)   # the usual short, complete line without a detour
                if not (0 < cr - pos <= 20 and cr + 1 < end and not self._scanned and not self._blocked
                        and buf.find(b"\0", pos, cr) < 0):
                    cr = self._line_end(buf, pos, end, b"\r", messages.PROTO_BIG_MBULK_COUNT)
                    if cr < 0 or cr + 1 >= end:
                        return pos, auth, True
                digits = buf[pos + 1:cr]
                ll = int(digits) if digits.isdigit() and digits[0] != 48 else string2ll(digits)
                if ll is None or ll > MAX_MULTIBULK:
                    raise ProtocolError(messages.PROTO_INVALID_MULTIBULK)
                if ll > UNAUTH_MAX_MULTIBULK and not auth:
                    raise ProtocolError(messages.PROTO_UNAUTH_MULTIBULK)
                pos = cr + 2
                if ll <= 0:
                    self._req_start = -1
                    continue  # Valkey skips '*0', '*-1', '*-5'
                args = self._args = []
                self._args_bytes = 0
                self._mbulk = ll
                self._bulklen = -1
            while self._mbulk:
                bulklen = self._bulklen
                if bulklen < 0:
                    cr = buf.find(b"\r", pos, end)
                    if not (0 < cr - pos <= 20 and cr + 1 < end and not self._scanned and not self._blocked
                            and buf.find(b"\0", pos, cr) < 0):
                        cr = self._line_end(buf, pos, end, b"\r", messages.PROTO_BIG_BULK_COUNT)
                        if cr < 0 or cr + 1 >= end:
                            return pos, auth, True
                    c = buf[pos]
                    if c != 36:  # '$'
                        raise ProtocolError(messages.PROTO_EXPECTED_DOLLAR.format(_reply_char(c)))
                    digits = buf[pos + 1:cr]
                    ll = int(digits) if digits.isdigit() and digits[0] != 48 else string2ll(digits)
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
                if self._args_bytes + ARG_COST * len(args) > self.query_buffer_limit:
                    raise ProtocolError(messages.PROTO_QUERY_BUFFER_LIMIT)
                pos += bulklen + 2  # the two bytes after the payload are not checked, as in Valkey
                self._bulklen = -1
                self._mbulk -= 1
            commands.append(args)
            if not auth and args[0].lower() in _AUTH_COMMANDS:
                auth = True
            args = self._args = None
            self._args_bytes = 0
            self._req_start = -1
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


def _first_big_array(buf, pos, stop):
    """Where the first '*' with 7 digits after it is in buf[pos:stop] (stop if none). Requests of a few
    hundred bytes or more leave few '*' to look at (the byte 7 after one is seldom a digit); a run of many
    small ones is left to the regex."""
    find = buf.find
    i = find(b"*", pos, stop)
    for _ in range(64):
        if i < 0:
            return stop
        j = i + 7
        if j < stop and 48 <= buf[j] <= 57 and buf[i + 1:j + 1].isdigit():
            return i
        i = find(b"*", i + 1, stop)
    if i < 0:
        return stop
    m = _BIG_ARRAY(buf, i, stop)
    return stop if m is None else m.start()


def _check_unauth(args, remaining, bulklen):
    """A request still arriving had its headers checked while the client counted as authenticated (an
    AUTH earlier in that read); it did not stay so: the limits Valkey would have applied at the header."""
    if len(args) + remaining > UNAUTH_MAX_MULTIBULK:
        raise ProtocolError(messages.PROTO_UNAUTH_MULTIBULK)
    if bulklen > UNAUTH_MAX_BULK or any(len(a) > UNAUTH_MAX_BULK for a in args):
        raise ProtocolError(messages.PROTO_UNAUTH_BULK)


def _canonical_head(args, bulklen):
    """The bytes of a canonical request up to its last payload: *N, the arguments before, $bulklen."""
    parts = [b"*%d\r\n" % (len(args) + 1)]
    for a in args:
        parts.append(b"$%d\r\n%s\r\n" % (len(a), a))
    parts.append(b"$%d\r\n" % bulklen)
    return b"".join(parts)


def unauthenticated_limit(args):
    """Valkey's protocol error for a request from a client that has not authenticated yet, or None."""
    if len(args) > UNAUTH_MAX_MULTIBULK:
        return messages.PROTO_UNAUTH_MULTIBULK
    for a in args:
        if len(a) > UNAUTH_MAX_BULK:
            return messages.PROTO_UNAUTH_BULK
    return None


def _reply_char(c):
    """The offending byte as Valkey's "%c" puts it in the reply (CR and LF become spaces)."""
    return " " if c in (10, 13) else chr(c)


def split_inline(line: bytes):
    """Splits an inline request like Valkey's sdssplitargs (quotes, escapes). `line` holds no NUL."""
    if b'"' not in line and b"'" not in line and b"\v" not in line and b"\f" not in line:
        return line.split()  # the same split when neither quotes nor \v, \f (blanks, not separators) occur
    args = split_args(line)
    if args is None:
        raise ProtocolError(messages.PROTO_UNBALANCED_QUOTES)
    return args


