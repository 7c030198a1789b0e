"""The config file parser and CONFIG REWRITE: Valkey's quoting (sdssplitargs / sdscatrepr), values CONFIG SET
refuses as Valkey does, and every accepted value round-tripping through rewrite + the real file parser."""

import os
import sys

import pytest
import valkey
from hypothesis import HealthCheck, given, settings, strategies as st

from durakv.config import OPTIONS, Config, repr_bytes, split_args
from durakv.errors import ConfigError
from conftest import ServerProcess
from helpers.wire import error_of

STRING_OPTIONS = [o.name for o in OPTIONS if o.parse.__name__ == "_string"]


# -- the parser and the quoting, as sds.c has them ------------------------------------------------------------

@pytest.mark.parametrize("line,args", [
    (b'foo bar "newline are supported\\n" and "\\xff\\x00otherstuff"',
     [b"foo", b"bar", b"newline are supported\n", b"and", b"\xff\x00otherstuff"]),
    (b"save '900 1' ''", [b"save", b"900 1", b""]),
    (b"a 'it\\'s' \"q\\\"x\\\\\"", [b"a", b"it's", b'q"x\\']),
    (b'k "\\a\\b\\t\\r\\z"', [b"k", b"\a\b\t\rz"]),
    (b'k "\\x4g"', [b"k", b"x4g"]),                    # not two hex digits: a plain escaped 'x'
    (b"  spaced\t\targs  ", [b"spaced", b"args"]),
    (b'un"quoted mid" x', [b"unquoted mid", b"x"]),
    # Valkey 9: parts next to each other join (8.0 refused a closing quote followed by a non-blank)
    (b'a "closed"x \'single\'"double" """t"""', [b"a", b"closedx", b"singledouble", b"t"]),
])
def test_split_args_as_sdssplitargs(line, args):
    assert split_args(line) == args


@pytest.mark.parametrize("line", [b'a "open', b"a 'open", b'a "closed"x"', b"a 'closed'x'", b'"\\"'])
def test_split_args_refuses_unbalanced_quotes(line):
    assert split_args(line) is None


def test_repr_bytes_as_sdscatrepr():
    assert repr_bytes(b'a\nb"c\x01\xff\\ \t\r\a\b~') == '"a\\nb\\"c\\x01\\xff\\\\ \\t\\r\\a\\b~"'
    assert repr_bytes(b"") == '""'


def test_config_file_reads_valkey_quoted_strings(tmp_path):
    path = tmp_path / "d.conf"
    path.write_bytes(b'# comment\n\n  requirepass "p\\x41ss\\n\\"w\\""  \r\n'
                     b"notify-keyspace-events 'Ex'\nsave \"900 1\"\nsave 300 10\nbind 127.0.0.1 ::1\n")
    c = Config()
    c.load_file(str(path))
    assert c["requirepass"] == 'pAss\n"w"' and c["notify-keyspace-events"] == "Ex"
    assert c["save"] == "900 1 300 10"      # save lines of one start-up add up, as in Valkey
    assert c["bind"] == "127.0.0.1 ::1"


@pytest.mark.parametrize("text,error", [
    (b'requirepass "never closed\n', "Unbalanced quotes in configuration line"),
    (b"requirepass two words\n", "wrong number of arguments"),
    (b"save 900\n", "Invalid save parameters"),
    (b"no-such-option 1\n", "Bad directive or wrong number of arguments"),
])
def test_config_file_errors_name_line_and_reason(tmp_path, text, error):
    path = tmp_path / "bad.conf"
    path.write_bytes(b"port 7000\n" + text)
    with pytest.raises(ConfigError) as info:
        Config().load_file(str(path))
    assert "%s:2:" % path in str(info.value) and error in str(info.value)


@pytest.mark.parametrize("value", ["900 1\nrequirepass x", "900", "0 10", "60 -1", "60  10", " 60 10", "60 10 ",
                                   "sixty 10", "60 1x"])
def test_save_refuses_what_valkey_refuses(value):
    with pytest.raises(ConfigError, match="^Invalid save parameters$"):
        Config().set("save", value)


@pytest.mark.parametrize("value,stored", [("", ""), ("900 1", "900 1"), ("3600 1 300 100 60 10000",
                                                                             "3600 1 300 100 60 10000"),
                                          ("+60 010", "60 10"), ("60 \n10", "60 10")])
def test_save_accepts_what_valkey_accepts_in_canonical_form(value, stored):
    c = Config()
    c.set("save", value)
    assert c["save"] == stored


# -- every accepted value reads back identically after CONFIG REWRITE -----------------------------------------

def _round_trip(tmp_path, name, value):
    path = tmp_path / "rw.conf"
    path.write_text("port 7001\n")
    c = Config()
    c.load_file(str(path))
    try:
        c.set(name, value, startup=True)
    except ConfigError:
        return None  # refused: nothing to round-trip
    c.rewrite()
    again = Config()
    again.load_file(str(path))
    return c[name], again[name]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(STRING_OPTIONS),
       value=st.one_of(st.text(max_size=40),
                       st.binary(max_size=40).map(lambda b: b.decode("utf-8", "replace")),
                       st.text(alphabet=' "\'\\\n\r\t\x00\x01\x7f#x0aé', max_size=20)))
def test_every_string_value_round_trips_through_rewrite(tmp_path, name, value):
    got = _round_trip(tmp_path, name, value)
    assert got is not None and got[0] == got[1] == value


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=st.one_of(st.lists(st.integers(0, 10**12), max_size=8).map(lambda xs: " ".join(map(str, xs))),
                       st.text(alphabet="0123456789 +-\n\tx", max_size=16)))
def test_every_accepted_save_value_round_trips_through_rewrite(tmp_path, value):
    got = _round_trip(tmp_path, "save", value)
    if got is not None:
        assert got[0] == got[1]


# -- through a real server -----------------------------------------------------------------------------------

def test_config_set_save_with_a_newline_is_refused_with_valkeys_text(r):
    assert error_of(r, "CONFIG", "SET", "save", "900 1\nrequirepass x") == \
        "ERR CONFIG SET failed (possibly related to argument 'save') - Invalid save parameters"
    assert r.config_get("save") == {"save": ""}
    assert r.config_set("save", "900 1 300 10")
    assert r.config_get("save") == {"save": "900 1 300 10"}
    assert r.config_set("save", "")


class ConfServer(ServerProcess):
    """A server started as `durakv server CONFIG_FILE --port ... --dir ...`."""

    def __init__(self, conf, data_dir):
        super().__init__(data_dir)
        self.conf = str(conf)

    def start(self, wait=True, password=None):
        import subprocess
        os.makedirs(self.data_dir, exist_ok=True)
        cmd = [sys.executable, "-m", "durakv", "server", self.conf, "--port", str(self.port), "--bind",
               "127.0.0.1", "--dir", self.data_dir]
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        if wait:
            self.wait_ready(password=password)
        return self


def test_config_rewrite_round_trips_control_characters_through_a_restart(tmp_path):
    conf = tmp_path / "durakv.conf"
    conf.write_text("# written by the test\n")
    srv = ConfServer(conf, tmp_path / "data")
    password = 'pa ss\nrequirepass x\r\t"q"\\ \x01 end \u00e9'
    try:
        srv.start()
        with srv.client() as c:
            assert c.config_set("save", "900 1")
            assert c.config_set("requirepass", password)
        with srv.client(password=password) as c:
            assert c.config_rewrite()
        lines = conf.read_text(encoding="ascii").splitlines()
        assert 'requirepass "pa ss\\nrequirepass x\\r\\t\\"q\\"\\\\ \\x01 end \\xc3\\xa9"' in lines
        assert "save 900 1" in lines
        srv.stop()
        srv.start(password=password)
        with srv.client(password=password) as c:
            assert c.config_get("requirepass")["requirepass"] == password
            assert c.config_get("save") == {"save": "900 1"}
        with srv.client() as c:
            with pytest.raises(valkey.AuthenticationError):
                c.ping()
    finally:
        srv.stop()


def test_config_set_duplicate_parameter_and_replication_names(shared_server):
    c = shared_server.client()
    with pytest.raises(valkey.ResponseError) as e:
        c.execute_command("CONFIG", "SET", "maxmemory", "10000001", "maxmemory", "10000002")
    assert str(e.value) == "CONFIG SET failed (possibly related to argument 'maxmemory') - duplicate parameter"
    with pytest.raises(valkey.ResponseError) as e:
        c.execute_command("CONFIG", "SET", "min-replicas-to-write", "0", "min-slaves-to-write", "0")
    assert str(e.value) == ("CONFIG SET failed (possibly related to argument 'min-slaves-to-write') - "
                            "duplicate parameter")
    # Valkey's "CONFIG SET with multiple args" sets repl-backlog-size (accepted: durakv has no PSYNC backlog)
    assert c.execute_command("CONFIG", "SET", "maxmemory", "0", "repl-backlog-size", "10000002") == b"OK"
    assert c.config_get("repl-backlog-size") == {"repl-backlog-size": "10000002"}
