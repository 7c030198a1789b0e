"""The sans-IO protocol layer: the request parser (bytes in, commands or a protocol error out) and the
encoder's shapes. Expected texts are Valkey 8.0's (networking.c), written out literally."""

import math
import re

import hiredis
import pytest
from hypothesis import given, settings, strategies as st

from durakv.errors import ProtocolError
from durakv.protocol import parser as parser_mod
from durakv.protocol.parser import RequestParser, split_inline
from durakv.protocol.resp import ErrorReply, NullArray, Push, RespSet, encode, encode_command, format_double

# scripts/test.sh runs these once more with the pure-Python core (DURAKV_PURE_PYTHON=1).
pytestmark = pytest.mark.both_cores

VALKEY_PROTOCOL_ERRORS = {
    "Protocol error: too big inline request",
    "Protocol error: too big mbulk count string",
    "Protocol error: invalid multibulk length",
    "Protocol error: unauthenticated multibulk length",
    "Protocol error: unauthenticated bulk length",
    "Protocol error: too big bulk count string",
    "Protocol error: invalid bulk length",
    "Protocol error: unbalanced quotes in request",
}
EXPECTED_DOLLAR = re.compile(r"Protocol error: expected '\$', got '.'\Z", re.S)


def is_valkey_protocol_error(text):
    return text in VALKEY_PROTOCOL_ERRORS or EXPECTED_DOLLAR.match(text) is not None


def feed_all(data, cuts=(), authenticated=True, max_bulk_len=512 * 1024 * 1024):
    """Feeds `data` cut at `cuts`; returns (commands, error) as a connection would see them."""
    p = RequestParser(max_bulk_len=max_bulk_len)
    p.authenticated = authenticated
    got = []
    prev = 0
    for cut in sorted(set(cuts)) + [len(data)]:
        if cut <= prev and cut != len(data):
            continue
        cmds, err = p.feed(data[prev:cut])
        prev = cut
        got.extend(cmds)
        if err is not None:
            return got, err
    return got, None


# -- requests, valid and not -------------------------------------------------------------------------
args_st = st.lists(st.binary(min_size=0, max_size=40), min_size=1, max_size=6)
word_st = st.binary(min_size=1, max_size=8).filter(
    lambda w: not any(c in w for c in b" \t\r\n\v\f\0\"'"))


@st.composite
def request_st(draw):
    """(wire bytes, the commands Valkey reads from them)."""
    kind = draw(st.sampled_from(["multibulk", "multibulk", "multibulk", "inline", "quoted", "skipped"]))
    if kind == "multibulk":
        args = draw(args_st)
        return encode_command(args), [args]
    if kind == "inline":
        words = draw(st.lists(word_st, min_size=1, max_size=4).filter(lambda ws: ws[0][:1] != b"*"))
        sep = draw(st.sampled_from([b" ", b"  ", b"\t"]))
        end = draw(st.sampled_from([b"\r\n", b"\n"]))
        return sep.join(words) + end, [words]
    if kind == "quoted":
        word = draw(word_st.filter(lambda w: w[:1] != b"*"))
        return b'SET "a b\\n\\x41" \'it\\\'s\' ' + word + b"\r\n", [[b"SET", b"a b\nA", b"it's", word]]
    return draw(st.sampled_from([b"*0\r\n", b"*-1\r\n", b"*-5\r\n", b"\r\n", b"\n", b"   \r\n"])), []


@settings(max_examples=300, deadline=None)
@given(st.lists(request_st(), min_size=1, max_size=12), st.data())
def test_any_chunk_split_yields_the_same_commands(requests, data):
    stream = b"".join(r[0] for r in requests)
    expected = [c for r in requests for c in r[1]]
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=10))
    assert feed_all(stream) == (expected, None)
    assert feed_all(stream, cuts) == (expected, None)
    assert feed_all(stream, cuts, authenticated=False) == (expected, None)


def test_split_at_every_byte():
    stream = (encode_command([b"SET", b"k", b"v\r\n*1\r\n$3"]) + b"GET k\r\n" + b"*0\r\n" + b"*-1\r\n"
              + encode_command([b"PING"]) + b"\n" + b'ECHO "x y"\n' + encode_command([b"x" * 70000, b""]))
    expected = [[b"SET", b"k", b"v\r\n*1\r\n$3"], [b"GET", b"k"], [b"PING"], [b"ECHO", b"x y"],
                [b"x" * 70000, b""]]
    assert feed_all(stream) == (expected, None)
    for cut in range(len(stream) - 70010):
        assert feed_all(stream, [cut]) == (expected, None), cut
    assert feed_all(stream, range(len(stream))) == (expected, None)   # one byte per feed
    p = RequestParser()
    p.feed(stream)
    assert p.pending_bytes == 0


def _mutate(data, stream):
    blob = bytearray(stream)
    for _ in range(data.draw(st.integers(0, 3))):
        if not blob:
            break
        i = data.draw(st.integers(0, len(blob) - 1))
        op = data.draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        if op == "flip":
            blob[i] = data.draw(st.integers(0, 255))
        elif op == "insert":
            blob[i:i] = data.draw(st.sampled_from(
                [b"*", b"$", b"+", b":", b"-1", b"\r\n", b"\r", b"\n", b"\0", b"2147483647", b"~1000000",
                 b'"', b"'", b"*1\r\n", b"$-1\r\n", b":5\r\n", b"+x\r\n"]))
        elif op == "delete":
            del blob[i]
        else:
            del blob[i:]
    return bytes(blob)


@settings(max_examples=400, deadline=None)
@given(st.lists(request_st(), min_size=1, max_size=8), st.data())
def test_fast_path_and_exact_parser_agree_on_damaged_streams(requests, data):
    """Fed whole, an authenticated stream mostly goes through hiredis; fed a byte at a time, only through
    the exact parser. Any damage must give the same commands and the same error either way."""
    stream = _mutate(data, b"".join(r[0] for r in requests))
    authenticated = data.draw(st.booleans())
    whole = feed_all(stream, authenticated=authenticated, max_bulk_len=1000)
    bytewise = feed_all(stream, range(len(stream)), authenticated=authenticated, max_bulk_len=1000)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=6))
    assert whole == bytewise == feed_all(stream, cuts, authenticated=authenticated, max_bulk_len=1000)
    if whole[1] is not None:
        assert is_valkey_protocol_error(whole[1]), whole[1]
    assert all(type(a) is bytes for cmd in whole[0] for a in cmd)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.booleans())
def test_garbage_makes_progress_or_errors(blob, authenticated):
    p = RequestParser(max_bulk_len=1000)
    p.authenticated = authenticated
    cmds, err = p.feed(blob)
    assert err is None or is_valkey_protocol_error(err), err
    assert all(type(a) is bytes for cmd in cmds for a in cmd)
    if err is None:
        assert p.pending_bytes <= len(blob)


# -- Valkey's answers, case by case -------------------------------------------------------------------
@pytest.mark.parametrize("data, commands, error", [
    # A wrong type byte where an argument's '$' belongs (it hung the server before AUTH).
    (b"*1\r\nX\r\n", [], "Protocol error: expected '$', got 'X'"),
    (b"*1\r\n+x\r\n", [], "Protocol error: expected '$', got '+'"),
    (b"*1\r\n:5\r\n", [], "Protocol error: expected '$', got ':'"),
    (b"*2\r\n$3\r\nGET\r\n$-1\r\n", [], "Protocol error: invalid bulk length"),
    (b"*1\r\n$-1\r\n", [], "Protocol error: invalid bulk length"),
    (b"*1\r\n*1\r\n$1\r\na\r\n", [], "Protocol error: expected '$', got '*'"),
    (b"*1\r\n~1\r\n$1\r\na\r\n", [], "Protocol error: expected '$', got '~'"),
    (b"*1\r\n\r\n", [], "Protocol error: expected '$', got ' '"),
    (b"*1\r\nX", [], None),                     # the '$' is checked only once the line is complete
    (b"*1\r\n$4\r\nPING\r\n*1\r\nX\r\n", [[b"PING"]], "Protocol error: expected '$', got 'X'"),
    # Counts <= 0 are skipped.
    (b"*0\r\n*-1\r\n*-5\r\n*1\r\n$4\r\nPING\r\n", [[b"PING"]], None),
    (b"*-0\r\n", [], "Protocol error: invalid multibulk length"),
    (b"*01\r\n", [], "Protocol error: invalid multibulk length"),
    (b"*+1\r\n", [], "Protocol error: invalid multibulk length"),
    (b"*\r\n", [], "Protocol error: invalid multibulk length"),
    (b"*1048577\r\n", [], None),              # up to INT_MAX arguments, as Valkey (the request waits for them)
    (b"*2147483647\r\n", [], None),
    (b"*2147483648\r\n", [], "Protocol error: invalid multibulk length"),
    (b"*4294967295\r\n", [], "Protocol error: invalid multibulk length"),
    (b"*99999999999999999999\r\n", [], "Protocol error: invalid multibulk length"),
    (b"*1\r\n$01\r\na\r\n", [], "Protocol error: invalid bulk length"),
    (b"*1\r\n$536870913\r\n", [], "Protocol error: invalid bulk length"),
    # Valkey assumes the byte after a header's CR is LF and never checks the CRLF after a payload.
    (b"*1\rX$4\rXPINGxy", [[b"PING"]], None),
    # Inline requests: sdssplitargs, one trailing CR stripped, empty lines skipped.
    (b"SET k \"a\\x41\\n\" 'it\\'s'\r\n", [[b"SET", b"k", b"aA\n", b"it's"]], None),
    (b"a\"b c\" d\n", [[b"ab c", b"d"]], None),
    (b'"\\x4g"\n', [[b"x4g"]], None),
    (b"a\vb\r\n", [[b"a\vb"]], None),
    (b"\r\n\n   \r\nPING\r\r\n", [[b"PING"]], None),
    (b'SET a "unbalanced\r\n', [], "Protocol error: unbalanced quotes in request"),
    (b'"a"b "c"\'d\' """e""" f"g\r\n', [], "Protocol error: unbalanced quotes in request"),
    (b'"a"b "c"\'d\' """e"""\r\n', [[b"ab", b"cd", b"e"]], None),   # parts join, as Valkey 9's sdssplitargs
    # A NUL hides the terminator after it, as Valkey's strchr: the line never completes.
    (b"GET a\x00b\r\n", [], None),
    (b"*1\x00\r\n", [], None),
    (b"*1\r\n\x00\r\n", [], None),
    (b"PING\r\n$5\r\nhello\r\n", [[b"PING"], [b"$5"], [b"hello"]], None),
])
def test_valkey_answers(data, commands, error):
    assert feed_all(data) == (commands, error)
    assert feed_all(data, range(len(data))) == (commands, error)


def test_a_nul_blocks_a_line_across_reads():
    stream = b"GET a\x00b\r\nPING\r\n" + b"x" * 70000
    for cut in (0, 3, 5, 6, 9, 11, 17):
        assert feed_all(stream[:17], [cut]) == ([], None)
        assert feed_all(stream, [cut]) == ([], "Protocol error: too big inline request")
    assert feed_all(b"*1\r\n$1\x00\r\n" + b"x" * 70000, [5, 9]) == (
        [], "Protocol error: too big bulk count string")


@pytest.mark.parametrize("chunk", [1, 7, 1000, 4096, 16384, 65536])
def test_large_values_in_any_read_size(chunk):
    """Large arguments arrive over many reads: in the exact parser's buffer or left in hiredis's reader."""
    commands = [[b"SET", b"k%d" % i, bytes([65 + i % 26]) * size]
                for i, size in enumerate([0, 1, 15, 16384, 16385, 20000, 70000, 200000, 5])]
    commands += [[b"MSET", b"a", b"x" * 30000, b"b", b"y" * 30000], [b"GET", b"k1"]]
    stream = b"".join(encode_command(c) for c in commands)
    p = RequestParser()
    got = []
    for i in range(0, len(stream), chunk):
        cmds, err = p.feed(stream[i:i + chunk])
        assert err is None
        got += cmds
    assert got == commands
    assert p.pending_bytes == 0


def test_a_request_left_in_hiredis_is_still_held_to_the_limits():
    class Session:
        authenticated = True
    s = Session()
    head = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$20000\r\n"
    p = RequestParser(auth=s)
    assert p.feed(encode_command([b"PING"]) + head + b"x" * 100) == ([[b"PING"]], None)
    assert p.pending_bytes == 100
    s.authenticated = False   # RESET ran before the rest arrived
    assert p.feed(b"x" * 100) == ([], "Protocol error: unauthenticated bulk length")
    p = RequestParser(query_buffer_limit=1024 * 1024)
    assert p.feed(b"*1\r\n$1\r\nx\r\n*2\r\n$3\r\nGET\r\n$2000000\r\n" + b"x" * 1000)[1] is None
    assert p.feed(b"x" * 1024 * 1024) == ([], "Protocol error: client query buffer limit reached")


def test_non_ascii_type_byte_is_named():
    cmds, err = RequestParser().feed(b"*1\r\n\xe3\r\n")
    assert err == "Protocol error: expected '$', got '\xe3'"


def test_long_lines_are_refused_before_they_are_buffered():
    for prefix, error in [(b"", "Protocol error: too big inline request"),
                          (b"*", "Protocol error: too big mbulk count string"),
                          (b"*1\r\n$", "Protocol error: too big bulk count string")]:
        p = RequestParser()
        err = None
        fed = 0
        while err is None and fed < 200 * 1024:
            _, err = p.feed(prefix + b"9" * 4096 if fed == 0 else b"9" * 4096)
            fed += 4096
        assert err == error
        assert fed <= 64 * 1024 + 4096 + len(prefix)
    # What precedes the line's terminator may be 64 KiB (whatever the reads: an inline line's CR counts);
    # a NUL does not let a line grow without bound either.
    line = b"ECHO " + b"x" * (64 * 1024 - 6)
    assert feed_all(line + b"\r\n") == ([[b"ECHO", b"x" * (64 * 1024 - 6)]], None)
    assert feed_all(line + b"x\r\n")[1] == "Protocol error: too big inline request"
    assert feed_all(line + b"x\r\n", [len(line) + 1]) == ([], "Protocol error: too big inline request")
    assert feed_all(b"*1\x00" + b"9" * 70000) == ([], "Protocol error: too big mbulk count string")


def test_limits_are_checked_at_the_header():
    # Nothing after the header has to arrive for the answer.
    assert feed_all(b"*3000000000\r\n") == ([], "Protocol error: invalid multibulk length")
    assert feed_all(b"*2\r\n$3\r\nSET\r\n$1000\r\n", max_bulk_len=100) == (
        [], "Protocol error: invalid bulk length")
    assert feed_all(b"*11\r\n", authenticated=False) == ([], "Protocol error: unauthenticated multibulk length")
    assert feed_all(b"*10\r\n", authenticated=False) == ([], None)
    assert feed_all(b"*1\r\n$16385\r\n", authenticated=False) == (
        [], "Protocol error: unauthenticated bulk length")
    assert feed_all(b"*1\r\n$16384\r\n", authenticated=False) == ([], None)
    assert feed_all(b"*1\r\n$16385\r\n") == ([], None)
    assert feed_all(encode_command([b"x"] * 11), authenticated=False) == (
        [], "Protocol error: unauthenticated multibulk length")
    # The invalid length is named before the unauthenticated one, as Valkey orders its checks.
    assert feed_all(b"*2147483648\r\n", authenticated=False) == ([], "Protocol error: invalid multibulk length")
    assert feed_all(b"*2000000\r\n", authenticated=False) == ([], "Protocol error: unauthenticated multibulk length")


def test_requests_after_auth_in_the_same_read_get_the_authenticated_limits():
    big = encode_command([b"SET", b"k", b"v" * 20000])
    p = RequestParser()
    p.authenticated = False
    cmds, err = p.feed(encode_command([b"AUTH", b"pw"]) + big + b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$20000\r\nvv")
    assert err is None
    assert cmds == [[b"AUTH", b"pw"], [b"SET", b"k", b"v" * 20000]]
    # That AUTH failed: the request still arriving is held to the unauthenticated limits.
    cmds, err = p.feed(b"v")
    assert (cmds, err) == ([], "Protocol error: unauthenticated bulk length")
    # HELLO ... AUTH authenticates too; when it worked, the partial request completes.
    p = RequestParser()
    p.authenticated = False
    cmds, err = p.feed(encode_command([b"hello", b"3", b"AUTH", b"default", b"pw"]) + big[:-7])
    assert err is None and cmds == [[b"hello", b"3", b"AUTH", b"default", b"pw"]]
    p.authenticated = True
    assert p.feed(big[-7:]) == ([[b"SET", b"k", b"v" * 20000]], None)


def test_authentication_is_read_from_the_session():
    class Session:
        authenticated = False
    s = Session()
    p = RequestParser(auth=s)
    assert p.feed(b"*11\r\n") == ([], "Protocol error: unauthenticated multibulk length")
    p = RequestParser(auth=s)
    assert p.feed(b"*12\r\n") == ([], "Protocol error: unauthenticated multibulk length")
    s.authenticated = True
    p = RequestParser(auth=s)
    assert p.feed(b"*12\r\n") == ([], None)
    s.authenticated = False   # RESET before the rest arrived
    assert p.feed(b"$1\r\n") == ([], "Protocol error: unauthenticated multibulk length")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(args_st, st.integers(0, 3000)), min_size=1, max_size=8), st.data())
def test_boundary_for_says_when_the_parser_stands_between_requests(requests, data):
    """The compiled core's one question to the parser (fastpath/_core.c received): boundary_for is the session
    exactly when everything fed so far ends at a request's end, whatever the reads' cuts; None after an error."""
    class Session:
        authenticated = True
    s = Session()
    stream, ends = b"", {0}
    for args, pad in requests:
        stream += encode_command(args + [b"v" * pad])    # (large last payloads stay in hiredis: carried)
        ends.add(len(stream))
    cuts = sorted(set(data.draw(st.lists(st.integers(0, len(stream)), max_size=12)))) + [len(stream)]
    p = RequestParser(auth=s)
    assert p.boundary_for is s
    fed = 0
    for cut in cuts:
        if cut < fed:
            continue
        assert p.feed(stream[fed:cut])[1] is None
        fed = cut
        assert (p.boundary_for is s) == (fed in ends), fed
    assert p.feed(b"*1\r\n$x\r\n")[1] is not None
    assert p.boundary_for is None


def test_query_buffer_limit():
    p = RequestParser(query_buffer_limit=100000)
    cmds, err = p.feed(b"*1\r\n$500000\r\n" + b"x" * 50000)
    assert err is None
    cmds, err = p.feed(b"x" * 60000)
    assert err == "Protocol error: client query buffer limit reached"


class _RecordingReader:
    """Stands in for hiredis.Reader and keeps every byte string it was fed."""
    fed = []

    def __init__(self):
        self._r = hiredis.Reader()

    def feed(self, buf, off=0, length=None):
        length = len(buf) - off if length is None else length
        _RecordingReader.fed.append(bytes(buf[off:off + length]))
        self._r.feed(buf, off, length)

    def gets(self):
        return self._r.gets()


def test_hiredis_never_sees_a_header_it_would_preallocate_for(monkeypatch):
    """hiredis allocates an aggregate's element array when it reads the header (*2147483647 froze the
    server for seconds while it was freed); such headers must reach only the exact parser."""
    import types
    fake = types.SimpleNamespace(Reader=_RecordingReader, ProtocolError=hiredis.ProtocolError)
    monkeypatch.setattr(parser_mod, "hiredis", fake)
    _RecordingReader.fed = []
    ok = encode_command([b"SET", b"k", b"*1234567 ~7654321"])
    for tail, error in [(b"*2147483648\r\n", "Protocol error: invalid multibulk length"),
                        (b"*2147483647\r\n", None),
                        (b"*1\r\n*2147483647\r\n", "Protocol error: expected '$', got '*'"),
                        (b"*2\r\n$1\r\na\r\n~4294967295\r\n", "Protocol error: expected '$', got '~'"),
                        (b"*1\r\n>2147483647\r\n", "Protocol error: expected '$', got '>'"),
                        (b"*1\r\n|2147483647\r\n", "Protocol error: expected '$', got '|'"),
                        (b"*1999999\r\n", None)]:
        assert feed_all(ok * 50 + tail) == ([[b"SET", b"k", b"*1234567 ~7654321"]] * 50, error)
        assert feed_all(ok + tail) == ([[b"SET", b"k", b"*1234567 ~7654321"]], error)   # a short read
        assert feed_all(b"*1\r\n$4\r\nPING\r\n" + tail) == ([[b"PING"]], error)
    assert _RecordingReader.fed, "the hiredis path was not used"
    for chunk in _RecordingReader.fed:
        assert re.search(rb"[*~>|][0-9]{7}", chunk) is None, chunk


def test_inline_quotes_and_escapes():
    assert split_inline(b'set k "a b\\n\\x41"') == [b"set", b"k", b"a b\nA"]
    assert split_inline(b"set k 'it\\'s'") == [b"set", b"k", b"it's"]
    assert split_inline(b'"\\x 1"') == [b"x 1"]
    assert split_inline(b'"\\x+1"') == [b"x+1"]
    assert split_inline(b"  a\tb  ") == [b"a", b"b"]
    with pytest.raises(ProtocolError) as exc:
        split_inline(b'set k "unterminated')
    assert str(exc.value) == "Protocol error: unbalanced quotes in request"


# -- the encoder --------------------------------------------------------------------------------------
def test_encoder_resp2_resp3_shapes():
    assert encode(b"x") == b"$1\r\nx\r\n"
    assert encode(None) == b"$-1\r\n" and encode(None, True) == b"_\r\n"
    assert encode(NullArray) == b"*-1\r\n" and encode(NullArray, True) == b"_\r\n"
    assert encode({b"a": 1}) == b"*2\r\n$1\r\na\r\n:1\r\n"
    assert encode({b"a": 1}, True) == b"%1\r\n$1\r\na\r\n:1\r\n"
    assert encode(RespSet([b"a"]), True) == b"~1\r\n$1\r\na\r\n"
    assert encode(1.5) == b"$3\r\n1.5\r\n" and encode(1.5, True) == b",1.5\r\n"
    assert encode(True, True) == b"#t\r\n" and encode(True) == b":1\r\n"
    assert encode(Push([b"message"]), True) == b">1\r\n$7\r\nmessage\r\n"
    assert encode(ErrorReply("ERR x")) == b"-ERR x\r\n"
    assert encode("OK") == b"+OK\r\n"


def test_format_double_round_trips():
    for v in (0.0, 1.0, -2.5, 1e20, 1e-300, 3.0000000000000004, 1 / 3, 123456789.125):
        assert float(format_double(v)) == v
    assert format_double(math.inf) == b"inf" and format_double(-math.inf) == b"-inf"
    assert format_double(3.0) == b"3"


def test_string2d_and_valkey_strtod_follow_valkeys_rules():
    from durakv.protocol.numbers import string2d, valkey_strtod
    assert string2d(b"1.5") == 1.5 and string2d(b"+1.5") == 1.5 and string2d(b"inf") == math.inf
    for bad in (b"", b" 1", b"1 ", b"1_0", b"nan", b"1e400", b"1e-400", b"abc", b"0x1p99999", b"-0x1p3", b"1e"):
        assert string2d(bad) is None, bad
    assert string2d(b"0") == 0.0 and string2d(b"0e5") == 0.0 and string2d(b"1e-310") == 1e-310
    # Valkey 9's fast_float reader: decimal only, the whole string, overflow to inf (callers check ERANGE)
    assert valkey_strtod(b"1.5") == 1.5 and valkey_strtod(b"1e400") == math.inf and valkey_strtod(b"5.") == 5.0
    assert valkey_strtod(b"-Infinity") == -math.inf and valkey_strtod(b".5") == 0.5
    assert valkey_strtod(b"nan") != valkey_strtod(b"nan")
    for bad in (b"", b"   ", b"  1.5", b"1.5 ", b"1_0", b"x", b"0x1p3", b".", b"1e", b"+-1", b"infx"):
        assert valkey_strtod(bad) is None, bad
