"""The sans-IO protocol layer: parser fuzzing (hypothesis) and encoder shapes."""

import math

from hypothesis import given, settings, strategies as st

from durakv.protocol.parser import RequestParser, split_inline
from durakv.protocol.resp import ErrorReply, NullArray, Push, RespSet, encode, encode_command, format_double

args_st = st.lists(st.binary(min_size=0, max_size=40), min_size=1, max_size=6)


@settings(max_examples=300, deadline=None)
@given(st.lists(args_st, min_size=1, max_size=12), st.data())
def test_multibulk_split_anywhere(commands, data):
    stream = b"".join(encode_command(c) for c in commands)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    parser = RequestParser()
    got = []
    prev = 0
    for cut in cuts + [len(stream)]:
        chunk = stream[prev:cut]
        prev = cut
        if chunk:
            cmds, err = parser.feed(chunk)
            assert err is None
            got.extend(cmds)
    assert got == commands
    assert parser.pending_bytes == 0


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_never_raises(blob):
    parser = RequestParser(max_bulk_len=1000)
    cmds, err = parser.feed(blob)
    assert isinstance(cmds, list)
    assert err is None or err.startswith("Protocol error")


def test_inline_and_multibulk_mixed_in_one_chunk():
    p = RequestParser()
    cmds, err = p.feed(b"*1\r\n$4\r\nPING\r\nECHO hi\r\n*2\r\n$3\r\nGET\r\n$1\r\na\r\n")
    assert err is None
    assert cmds == [[b"PING"], [b"ECHO", b"hi"], [b"GET", b"a"]]


def test_inline_quotes_and_escapes():
    assert split_inline(b'set k "a b\\n\\x41"') == [b"set", b"k", b"a b\nA"]
    assert split_inline(b"set k 'it\\'s'") == [b"set", b"k", b"it's"]
    try:
        split_inline(b'set k "unterminated')
    except Exception as exc:  # noqa: BLE001
        assert "unbalanced quotes" in str(exc)
    else:
        raise AssertionError("unbalanced quotes accepted")


def test_limits():
    cmds, err = RequestParser().feed(b"*3000000\r\n" + b"$1\r\na\r\n" * 3000)
    assert err == "Protocol error: invalid multibulk length"
    cmds, err = RequestParser(max_bulk_len=100).feed(b"*2\r\n$3\r\nSET\r\n$1000\r\n" + b"x" * 20000)
    assert err == "Protocol error: invalid bulk length"
    p = RequestParser()
    p.authenticated = False
    cmds, err = p.feed(encode_command([b"x"] * 11))
    assert err == "Protocol error: unauthenticated multibulk length"
    cmds, err = RequestParser().feed(b"*1\r\n$-5\r\n")
    assert err is not None and err.startswith("Protocol error")
    cmds, err = RequestParser().feed(b"a" * (70 * 1024))
    assert err == "Protocol error: too big inline request"


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
