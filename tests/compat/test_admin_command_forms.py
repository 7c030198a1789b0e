"""REPLCONF in every form and SHUTDOWN's flag combinations answer as Valkey 9.1.2 (issue 29: `REPLCONF` with an
odd number of arguments raised IndexError in commands/server.py, answered nothing and left a traceback;
`SHUTDOWN NOSAVE SAVE` shut the server down where Valkey answers a syntax error)."""

import socket

from helpers.wire import _encode, error_of


REPLCONF_FORMS = [
    ["REPLCONF"], ["REPLCONF", "ACK"], ["REPLCONF", "ACK", "1", "2"], ["REPLCONF", "GETACK"],
    ["REPLCONF", "listening-port"], ["REPLCONF", "ack", "1", "fack"], ["REPLCONF", "fack"], ["REPLCONF", "fack", "1"],
    ["REPLCONF", "capa", "eof"], ["REPLCONF", "listening-port", "1", "ack"], ["REPLCONF", "ip-address", "x"],
    ["REPLCONF", "rdb-only", "2"], ["REPLCONF", "rdb-only", "x"], ["REPLCONF", "listening-port", "x"],
    ["REPLCONF", "version", "1.2"], ["REPLCONF", "set-rdb-client-id", "5"], ["REPLCONF", "bogus", "1"],
    ["REPLCONF", "capa", "psync2", "capa", "eof"], ["REPLCONF", "rdb-filter-only", "functions"],
]


def _replies(port, argv):
    """Whatever argv answers, then PONG: (reply bytes before the PONG, whether PONG came)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        s.sendall(_encode(argv) + _encode(["PING"]))
        data = b""
        while b"+PONG\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        return data.split(b"+PONG\r\n")[0], b"+PONG\r\n" in data
    finally:
        s.close()


def test_every_replconf_form_answers_as_valkey_9_1_2_and_nothing_crashes(shared_server, valkey91):
    for argv in REPLCONF_FORMS:
        mine, pong = _replies(shared_server.port, argv)
        theirs, _ = _replies(valkey91.port, argv)
        assert pong, argv
        assert mine == theirs, (argv, mine, theirs)
    log = shared_server.read_log()
    assert "internal error" not in log and "IndexError" not in log


def test_shutdown_with_save_and_nosave_is_a_syntax_error_and_the_server_stays(server_factory):
    srv = server_factory("--durability", "none")
    with srv.client() as c:
        assert error_of(c, "SHUTDOWN", "NOSAVE", "SAVE") == "ERR syntax error"
        assert error_of(c, "SHUTDOWN", "ABORT", "NOW") == "ERR syntax error"
        assert error_of(c, "SHUTDOWN", "ABORT") == "ERR No shutdown in progress."
    with srv.client() as c:
        assert c.ping()
    assert srv.proc.poll() is None
