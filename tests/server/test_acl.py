"""ACL users against a real server (valkey-py and raw sockets, RESP2 and RESP3): the cases of Valkey 8.0's
tests/unit/acl.tcl and acl-v2.tcl that need no replication, plus AUTH / HELLO AUTH hardening, EXEC and EVAL
denials, CLIENT KILL USER, ACL LOG, the aclfile (SAVE/LOAD round trip, restart with --aclfile) and `user` lines.
Error texts are Valkey's, written out literally."""

import os
import socket
import subprocess
import sys
import time

import pytest
import valkey

from conftest import ServerProcess, wait_until
from durakv.commands.specs import MODULE_CATEGORIES
from test_blocking import Err, RawClient, raw_clients

ADMIN = ("acladmin", "adminpw")   # a user of the module's server that the cleanup logs in as


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    s = ServerProcess(tmp_path_factory.mktemp("acl"))
    s.start()
    with s.client() as c:
        c.execute_command("ACL", "SETUSER", ADMIN[0], "on", ">" + ADMIN[1], "~*", "&*", "+@all")
    yield s
    s.stop()


@pytest.fixture
def raw(srv):
    """raw(resp=2) -> a RawClient on the module's server; every one is closed after the test, and the ACL
    state is put back (users, default, log, config) so that tests do not see each other's users."""
    yield from raw_clients(srv.port)
    admin = RawClient(srv.port)
    try:
        assert admin.call("AUTH", *ADMIN) == "OK"
        for name in admin.call("ACL", "USERS"):
            if name not in (b"default", ADMIN[0].encode()):
                admin.call("ACL", "DELUSER", name)
        assert admin.call("ACL", "SETUSER", "default", "reset", "on", "nopass", "~*", "&*", "+@all") == "OK"
        admin.call("CONFIG", "SET", "requirepass", "")
        admin.call("CONFIG", "SET", "acllog-max-len", "128")
        admin.call("CONFIG", "SET", "acl-pubsub-default", "resetchannels")
        admin.call("ACL", "LOG", "RESET")
    finally:
        admin.close()


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def resp(request):
    return request.param


def err(reply) -> str:
    assert isinstance(reply, Err), reply
    return str(reply)


def info_stats(c):
    text = c.call("INFO", "stats").decode()
    return {k: int(v) for k, v in (line.split(":", 1) for line in text.split("\r\n") if ":" in line)
            if k.startswith("acl_access_denied")}


def log_entries(c, count=None):
    """ACL LOG as a list of {field: value} (RESP2 flat arrays or RESP3 maps)."""
    reply = c.call("ACL", "LOG") if count is None else c.call("ACL", "LOG", count)
    out = []
    for e in reply:
        if isinstance(e, dict):
            out.append({k.decode(): v for k, v in e.items()})
        else:
            out.append({e[i].decode(): e[i + 1] for i in range(0, len(e), 2)})
    return out


# -- users, passwords, AUTH ---------------------------------------------------------------------------

def test_users_and_whoami(raw, resp):
    c = raw(resp)
    assert c.call("ACL", "WHOAMI") == b"default"
    assert c.call("ACL", "SETUSER", "newuser") == "OK"
    assert c.call("ACL", "USERS") == [ADMIN[0].encode(), b"default", b"newuser"]
    assert err(c.call("ACL", "SETUSER", "a a")) == "ERR Usernames can't contain spaces or null characters"


def test_passwords_and_login(raw, resp):
    c = raw(resp)
    c.call("ACL", "SETUSER", "newuser", ">passwd1")
    assert err(c.call("AUTH", "newuser", "passwd1")) == "WRONGPASS invalid username-password pair or user is disabled."
    c.call("ACL", "SETUSER", "newuser", "on", "+acl")
    assert c.call("AUTH", "newuser", "passwd1") == "OK"
    assert c.call("ACL", "WHOAMI") == b"newuser"
    c.call("ACL", "SETUSER", "newuser", ">passwd2")
    assert c.call("AUTH", "newuser", "passwd1") == "OK" and c.call("AUTH", "newuser", "passwd2") == "OK"
    assert err(c.call("AUTH", "newuser", "passwd3")).startswith("WRONGPASS")
    c.call("ACL", "SETUSER", "newuser", "<passwd1")
    assert err(c.call("AUTH", "newuser", "passwd1")).startswith("WRONGPASS")
    c.call("ACL", "SETUSER", "newuser", "#34344e4d60c2b6d639b7bd22e18f2b0b91bc34bf0ac5f9952744435093cfb4e6")
    assert c.call("AUTH", "newuser", "passwd4") == "OK"
    assert err(c.call("ACL", "SETUSER", "newuser", "#34344e4d60c2b6d639b7bd22e18f2b0b91bc34bf0ac5f9952744435093cfb4eq")
               ) == ("ERR Error in ACL SETUSER modifier '#34344e4d60c2b6d639b7bd22e18f2b0b91bc34bf0ac5f9952744435093cf"
                     "b4eq': The password hash must be exactly 64 characters and contain only lowercase hexadecimal "
                     "characters")
    passwords = c.call("ACL", "GETUSER", "newuser")
    passwords = passwords[b"passwords"] if isinstance(passwords, dict) else passwords[3]
    assert b"34344e4d60c2b6d639b7bd22e18f2b0b91bc34bf0ac5f9952744435093cfb4e6" in passwords
    assert all(b"passwd" not in p for p in passwords)
    c.call("ACL", "SETUSER", "newuser", "nopass")
    assert c.call("AUTH", "newuser", "zipzapblabla") == "OK"


def test_auth_forms_and_valkey_py_login(raw, srv):
    c = raw()
    assert err(c.call("AUTH", "pw")) == ("ERR AUTH <password> called without any password configured for the "
                                         "default user. Are you sure your configuration is correct?")
    assert err(c.call("AUTH", "a", "b", "c")) == "ERR syntax error"
    c.call("ACL", "SETUSER", "alice", "on", ">pw", "~*", "+@all")
    for protocol in (2, 3):
        with srv.client(protocol=protocol, username="alice", password="pw") as v:
            assert v.execute_command("ACL", "WHOAMI") in (b"alice", "alice")
        with pytest.raises(valkey.AuthenticationError):
            srv.client(protocol=protocol, username="alice", password="bad").ping()


def test_hello_auth(raw, resp):
    c = raw()
    c.call("ACL", "SETUSER", "secure-user", ">supass", "on", "+@all")
    c.call("ACL", "SETUSER", "secure-user1", ">supass", "on", "+@all")
    c.call("ACL", "SETUSER", "secure-user2", ">supass", "on", "+@all")
    reply = c.call("HELLO", str(resp), "AUTH", "secure-user", "pass", "AUTH", "secure-user2", "supass",
                   "AUTH", "secure-user1", "supass")
    assert (reply[b"proto"] if isinstance(reply, dict) else reply[reply.index(b"proto") + 1]) == resp
    assert c.call("ACL", "WHOAMI") == b"secure-user1"
    assert err(c.call("HELLO", "2", "AUTH", "secure-user", "supass", "AUTH", "secure-user2", "supass",
                      "AUTH", "secure-user", "pass")) == "WRONGPASS invalid username-password pair or user is disabled."
    assert c.call("ACL", "WHOAMI") == b"secure-user1"
    c.call("CLIENT", "SETNAME", "client0")
    assert err(c.call("HELLO", "2", "AUTH", "user", "pass", "SETNAME", "client1")).startswith("WRONGPASS")
    assert c.call("CLIENT", "GETNAME") == b"client0"
    # default without command permission: HELLO still authenticates another user
    c.call("ACL", "SETUSER", "default", "-@all")
    fresh = raw()
    assert isinstance(fresh.call("HELLO", "3", "AUTH", "secure-user", "supass"), dict)
    assert fresh.call("ACL", "WHOAMI") == b"secure-user"


def test_requirepass_is_the_default_users_password(raw, srv):
    c = raw()
    assert c.call("CONFIG", "SET", "requirepass", "s3cret") == "OK"
    assert c.call("ACL", "LIST")[1] == (b"user default on "
                                        b"#" + __import__("hashlib").sha256(b"s3cret").hexdigest().encode()
                                        + b" ~* &* +@all")
    fresh = raw()
    assert err(fresh.call("GET", "x")) == "NOAUTH Authentication required."
    assert fresh.call("AUTH", "s3cret") == "OK" and fresh.call("GET", "x") is None
    assert fresh.call("RESET") == "RESET"
    assert err(fresh.call("GET", "x")) == "NOAUTH Authentication required."  # RESET drops the authentication
    assert err(fresh.call("AUTH", "default", "nope")).startswith("WRONGPASS")
    assert c.call("CONFIG", "SET", "requirepass", "") == "OK"
    assert raw().call("GET", "x") is None


def test_default_user_off_means_new_connections_must_auth(raw):
    c = raw()
    c.call("ACL", "SETUSER", "default", "off")
    assert err(raw().call("PING")) == "NOAUTH Authentication required."
    c.call("ACL", "SETUSER", "default", "on")
    assert raw().call("PING") == "PONG"


def test_auth_failures_counted_logged_and_rate_limited(raw, srv):
    c = raw()
    before = info_stats(c)["acl_access_denied_auth"]
    c.call("ACL", "SETUSER", "victim", "on", ">right")
    log_start = len(srv.read_log().splitlines())
    started = time.monotonic()
    attacker = raw()
    for i in range(200):
        attacker.send("AUTH", "victim", "guess%d" % i)
    replies = [attacker.read() for _ in range(200)]
    assert all(isinstance(r, Err) and str(r).startswith("WRONGPASS") for r in replies)
    assert info_stats(c)["acl_access_denied_auth"] == before + 200
    assert err(c.call("HELLO", "3", "AUTH", "notrealuser", "1233456")).startswith("WRONGPASS")
    assert info_stats(c)["acl_access_denied_auth"] == before + 201
    [entry] = [e for e in log_entries(c) if e["username"] == b"victim"]
    assert entry["reason"] == b"auth" and entry["object"] == b"AUTH" and entry["count"] == 200

    def summary():
        # one more failure once the interval has passed carries the count of those not logged
        attacker.call("AUTH", "victim", "late")
        lines = srv.read_log().splitlines()[log_start:]
        return [ln for ln in lines if "AUTH failed for user 'victim'" in ln and "more failed attempts" in ln]
    wait_until(summary, 10, interval_s=0.2, what="the rate-limited summary line")
    elapsed = time.monotonic() - started
    lines = [ln for ln in srv.read_log().splitlines()[log_start:] if "AUTH failed for user" in ln]
    assert len(lines) <= int(elapsed) + 2                       # at most one line a second
    suppressed = int(summary()[0].split("(")[1].split()[0])
    assert suppressed >= 199                                    # the burst is counted, not dropped


# -- command, key and channel permissions -------------------------------------------------------------

def test_default_new_user_denials(raw):
    admin, c = raw(), raw()
    admin.call("ACL", "SETUSER", "newuser", "on", "nopass")
    c.call("AUTH", "newuser", "x")
    assert err(c.call("SET", "foo", "bar")) == "NOPERM User newuser has no permissions to run the 'set' command"
    admin.call("ACL", "SETUSER", "newuser", "+set")
    assert err(c.call("SET", "foo", "bar")) == "NOPERM No permissions to access a key"
    admin.call("ACL", "SETUSER", "newuser", "allcommands", "~foo:*", "~bar:*")
    assert c.call("SET", "foo:1", "a") == "OK" and c.call("SET", "bar:2", "b") == "OK"
    assert err(c.call("SET", "zap:3", "c")) == "NOPERM No permissions to access a key"
    admin.call("ACL", "SETUSER", "newuser", "allkeys", "-ping")
    assert err(c.call("PING")) == "NOPERM User newuser has no permissions to run the 'ping' command"
    admin.call("ACL", "SETUSER", "newuser", "-@all", "+@set", "+acl")
    assert c.call("SADD", "myset", "a", "b") == 2
    admin.call("ACL", "SETUSER", "newuser", "+@all", "-@string")
    assert err(c.call("SET", "foo:1", "b")) == "NOPERM User newuser has no permissions to run the 'set' command"


def test_subcommand_and_first_arg_permissions(raw):
    admin, c = raw(), raw()
    admin.call("ACL", "SETUSER", "newuser", "on", "nopass", "~*", "+@all", "-client", "+client|id",
               "+client|setname")
    c.call("AUTH", "newuser", "x")
    assert isinstance(c.call("CLIENT", "ID"), int) and c.call("CLIENT", "SETNAME", "foo") == "OK"
    assert err(c.call("CLIENT", "KILL", "TYPE", "master")) == \
        "NOPERM User newuser has no permissions to run the 'client|kill' command"
    admin.call("ACL", "SETUSER", "newuser", "-@all", "+acl", "+config", "-config|set")
    assert c.call("CONFIG", "GET", "loglevel") == [b"loglevel", b"notice"]
    assert err(c.call("CONFIG", "SET", "loglevel", "debug")) == \
        "NOPERM User newuser has no permissions to run the 'config|set' command"
    admin.call("ACL", "SETUSER", "newuser", "-@all", "+acl", "+select|0", "+debug|help")
    assert c.call("SELECT", "0") == "OK"
    assert err(c.call("SELECT", "1")) == "NOPERM User newuser has no permissions to run the 'select' command"
    assert isinstance(c.call("DEBUG", "HELP"), list)
    assert err(c.call("DEBUG", "SLEEP", "0")) == "NOPERM User newuser has no permissions to run the 'debug' command"
    admin.call("ACL", "SETUSER", "newuser", "-@all", "+del", "+acl", "+@stream")
    assert c.call("DEL", "key") == 0 and isinstance(c.call("XADD", "key", "*", "field", "value"), bytes)
    assert isinstance(c.call("XINFO", "STREAM", "key"), (list, dict))
    admin.call("ACL", "SETUSER", "alice", "on", ">passwd1", "+@all", "-memory|doctor")
    c.call("AUTH", "alice", "passwd1")
    assert err(c.call("MEMORY", "DOCTOR")) == "NOPERM User alice has no permissions to run the 'memory|doctor' command"
    assert isinstance(c.call("MEMORY", "STATS"), (list, dict))
    admin.call("ACL", "SETUSER", "alice", "-memory")
    assert err(c.call("MEMORY", "STATS")) == "NOPERM User alice has no permissions to run the 'memory|stats' command"


def test_getuser_and_list_rendering(raw, resp):
    c = raw(resp)
    c.call("ACL", "SETUSER", "selector-info", "-@all", "+get", "resetchannels", "&channel1", "%R~foo1", "%W~bar1",
           "~baz1")
    c.call("ACL", "SETUSER", "selector-info", "(-@all +set resetchannels &channel2 %R~foo2 %W~bar2 ~baz2)")
    reply = c.call("ACL", "GETUSER", "selector-info")
    if resp == 2:
        reply = {reply[i]: reply[i + 1] for i in range(0, len(reply), 2)}
        sel = reply[b"selectors"][0]
        sel = {sel[i]: sel[i + 1] for i in range(0, len(sel), 2)}
    else:
        sel = reply[b"selectors"][0]
    assert reply[b"flags"] == [b"off"]   # Valkey 9.1 shows no sanitize-payload flag
    assert reply[b"passwords"] == []
    assert reply[b"keys"] == b"%R~foo1 %W~bar1 ~baz1" and reply[b"channels"] == b"&channel1"
    assert reply[b"commands"] == b"-@all +get"
    assert sel == {b"commands": b"-@all +set", b"keys": b"%R~foo2 %W~bar2 ~baz2", b"channels": b"&channel2",
                   b"databases": b"alldbs"}
    assert b"user selector-info off %R~foo1 %W~bar1 ~baz1 resetchannels &channel1 -@all +get " \
           b"(%R~foo2 %W~bar2 ~baz2 resetchannels &channel2 -@all +set)" in c.call("ACL", "LIST")
    assert c.call("ACL", "GETUSER", "nosuchuser") is None
    c.call("ACL", "SETUSER", "hpuser", "on", "nopass", "resetchannels", "&foo", "+@all")
    assert b"user hpuser on nopass resetchannels &foo +@all" in c.call("ACL", "LIST")


def test_setuser_errors(raw):
    c = raw()
    assert err(c.call("ACL", "SETUSER", "newuser", "+@all", "+config|get|appendonly")) == (
        "ERR Error in ACL SETUSER modifier '+config|get|appendonly': Allowing first-arg of a subcommand is not "
        "supported")
    assert err(c.call("ACL", "SETUSER", "newuser", "+@all", "+config|asdf")) == \
        "ERR Error in ACL SETUSER modifier '+config|asdf': Unknown command or category name in ACL"
    assert err(c.call("ACL", "SETUSER", "key-permission-RW", "%~")) == \
        "ERR Error in ACL SETUSER modifier '%~': Syntax error"
    assert err(c.call("ACL", "SETUSER", "selector-syntax", "on", "(+PING", "(+SELECT", "(+DEL")) == \
        "ERR Unmatched parenthesis in acl selector starting at '(+PING'."
    assert err(c.call("ACL", "SETUSER", "selector-syntax", "on", "(&*", "&fail)")).startswith(
        "ERR Error in ACL SETUSER modifier '(&* &fail)': Adding a pattern after the * pattern")
    assert c.call("ACL", "GETUSER", "selector-syntax") is None
    assert c.call("ACL", "GETUSER", "newuser") is None


def test_channel_permissions(raw):
    admin, c = raw(), raw()
    admin.call("ACL", "SETUSER", "psuser", "on", ">pspass", "+acl", "+client", "+@pubsub", "+multi", "+discard")
    c.call("AUTH", "psuser", "pspass")
    assert err(c.call("PUBLISH", "foo", "bar")) == "NOPERM No permissions to access a channel"
    assert err(c.call("SPUBLISH", "foo", "bar")) == "NOPERM No permissions to access a channel"
    assert err(c.call("SUBSCRIBE", "foo")) == "NOPERM No permissions to access a channel"
    assert err(c.call("PSUBSCRIBE", "bar*")) == "NOPERM No permissions to access a channel"
    admin.call("ACL", "SETUSER", "psuser", "resetchannels", "&foo:1", "&bar:*")
    assert c.call("PUBLISH", "foo:1", "m") == 0 and c.call("PUBLISH", "bar:2", "m") == 0
    assert err(c.call("PUBLISH", "zap:3", "m")) == "NOPERM No permissions to access a channel"
    assert c.call("MULTI") == "OK"
    assert err(c.call("PUBLISH", "notexits", "helloworld")) == "NOPERM No permissions to access a channel"
    assert c.call("DISCARD") == "OK"
    sub = raw()
    sub.call("AUTH", "psuser", "pspass")
    assert sub.call("SUBSCRIBE", "foo:1") == [b"subscribe", b"foo:1", 1]
    assert sub.call("PSUBSCRIBE", "bar:*") == [b"psubscribe", b"bar:*", 2]
    assert err(sub.call("PSUBSCRIBE", "bar:baz")) == "NOPERM No permissions to access a channel"


def _client_names(admin):
    return admin.call("CLIENT", "LIST").decode()


def test_subscribers_killed_when_channels_revoked_and_pardoned_otherwise(raw):
    admin = raw()
    for kind, channel in (("SUBSCRIBE", "foo:1"), ("SSUBSCRIBE", "foo:1"), ("PSUBSCRIBE", "bar:*")):
        admin.call("ACL", "SETUSER", "psuser", "on", ">pspass", "+@all", "resetchannels", "&foo:1", "&bar:*")
        sub = raw()
        sub.call("AUTH", "psuser", "pspass")
        sub.call("CLIENT", "SETNAME", "deathrow")
        sub.call(kind, channel)
        admin.call("ACL", "SETUSER", "psuser", "resetchannels")
        wait_until(lambda: "deathrow" not in _client_names(admin), 10, what="revoked subscriber gone")
    admin.call("ACL", "SETUSER", "psuser", "resetchannels", "&foo:1", "&bar:*", "&orders")
    sub = raw()
    sub.call("AUTH", "psuser", "pspass")
    sub.call("CLIENT", "SETNAME", "pardoned")
    sub.call("SUBSCRIBE", "foo:1")
    sub.call("SSUBSCRIBE", "orders")
    sub.call("PSUBSCRIBE", "bar:*")
    admin.call("ACL", "SETUSER", "psuser", "resetchannels", "&foo:1", "&bar:*", "&orders", "&baz:qaz", "&zoo:*")
    admin.call("ACL", "SETUSER", "psuser", "allchannels")
    assert "pardoned" in _client_names(admin)
    assert sub.call("PING") == [b"pong", b""]


def test_blocked_command_rejected_when_rules_change(raw):
    admin, c = raw(), raw()
    admin.call("ACL", "SETUSER", "psuser", "reset", "on", "nopass", "+@all", "allkeys")
    c.call("AUTH", "psuser", "x")
    c.send("BLPOP", "list1", "0")
    wait_until(lambda: admin.call("INFO", "clients").find(b"blocked_clients:1") >= 0, 10, what="blocked")
    admin.call("ACL", "SETUSER", "psuser", "resetkeys")
    admin.call("LPUSH", "list1", "foo")
    assert err(c.read()) == "NOPERM No permissions to access a key"
    assert c.call("PING") == "PONG"
    assert admin.call("LLEN", "list1") == 1  # the element stayed: the refused BLPOP took nothing


# -- selectors (acl-v2.tcl) -----------------------------------------------------------------------------

def test_multiple_selectors(raw):
    admin, c = raw(), raw()
    admin.call("ACL", "SETUSER", "selector-1", "on", "-@all", "resetkeys", "nopass")
    c.call("AUTH", "selector-1", "password")
    assert err(c.call("PING")) == "NOPERM User selector-1 has no permissions to run the 'ping' command"
    admin.call("ACL", "SETUSER", "selector-1", "(+@write ~write::*)", "(+@read ~read::*)")
    assert c.call("SET", "write::foo", "bar") == "OK"
    assert c.call("GET", "read::foo") is None
    assert err(c.call("GET", "write::foo")) == "NOPERM No permissions to access a key"
    assert err(c.call("SET", "read::foo", "bar")) == "NOPERM No permissions to access a key"


def test_read_and_write_key_permissions(raw):
    admin, c = raw(), raw()
    admin.call("SET", "readstr", "bar")
    admin.call("ACL", "SETUSER", "kp", "on", "nopass", "%R~read*", "%W~write*", "+@all")
    c.call("AUTH", "kp", "x")
    assert c.call("GET", "readstr") == b"bar"
    assert err(c.call("SET", "readstr", "bar")) == "NOPERM No permissions to access a key"
    assert err(c.call("GET", "notread")) == "NOPERM No permissions to access a key"
    assert c.call("LPUSH", "writelist", "10") == 1
    assert err(c.call("GET", "writestr")) == "NOPERM No permissions to access a key"
    assert c.call("SET", "writestr", "get") == "OK"
    for argv in (("SET", "writestr", "bar", "GET"), ("SET", "writestr", "bar", "ex", "get"),
                 ("BITFIELD", "writestr", "get", "u4", "0")):
        assert err(c.call(*argv)) == "NOPERM No permissions to access a key"
    assert c.call("COPY", "readstr", "writecopy") == 1
    assert err(c.call("COPY", "writecopy", "readstr")) == "NOPERM No permissions to access a key"
    assert c.call("BITFIELD", "readstr", "get", "u4", "0") == [6]
    assert err(c.call("BITFIELD", "readstr", "set", "u4", "0", "1")) == "NOPERM No permissions to access a key"
    admin.call("ACL", "SETUSER", "kp2", "on", "nopass", "%RW~readwrite*", "+@all")
    c.call("AUTH", "kp2", "x")
    assert err(c.call("SET", "readwrite_str", "bar", "ex", "get")) == "ERR value is not an integer or out of range"
    assert c.call("SET", "readwrite_str", "bar") == "OK"
    assert c.call("SET", "readwrite_str", "bar2", "get") == b"bar"


def test_sort_by_and_get_need_unrestricted_read_access(raw):
    admin, c = raw(), raw()
    admin.call("SET", "v1", "1")
    admin.call("LPUSH", "mylist", "1")
    admin.call("ACL", "SETUSER", "test-sort-acl", "on", "nopass", "(+sort ~mylist)")
    c.call("AUTH", "test-sort-acl", "nopass")
    assert err(c.call("SORT", "mylist", "BY", "v*")) == \
        "ERR BY option of SORT denied due to insufficient ACL permissions."
    assert err(c.call("SORT", "mylist", "GET", "v*")) == \
        "ERR GET option of SORT denied due to insufficient ACL permissions."
    assert c.call("SORT", "mylist", "BY", "nosort") == [b"1"]  # a constant BY reads no other key
    admin.call("ACL", "SETUSER", "test-sort-acl", "(+sort ~mylist %W~*)")
    assert err(c.call("SORT", "mylist", "BY", "v*")).startswith("ERR BY option of SORT denied")
    admin.call("ACL", "SETUSER", "test-sort-acl", "(+sort ~mylist %R~*)")
    assert c.call("SORT", "mylist", "BY", "v*") == [b"1"]


def test_dryrun(raw, resp):
    c = raw(resp)
    c.call("ACL", "SETUSER", "command-test", "+@all", "%R~read*", "%W~write*", "%RW~rw*")
    assert c.call("ACL", "DRYRUN", "command-test", "GET", "read") == "OK"
    assert err(c.call("ACL", "DRYRUN", "not-a-user", "GET", "read")) == "ERR User 'not-a-user' not found"
    assert err(c.call("ACL", "DRYRUN", "command-test", "not-a-command", "read")) == \
        "ERR Command 'not-a-command' not found"
    assert c.call("ACL", "DRYRUN", "command-test", "GET", "write") == \
        b"User command-test has no permissions to access the 'write' key"
    assert c.call("ACL", "DRYRUN", "command-test", "MIGRATE", "whatever", "whatever", "rw", "0", "500") == "OK"
    assert c.call("ACL", "DRYRUN", "command-test", "MIGRATE", "whatever", "whatever", "", "0", "5000", "AUTH2",
                  "USER", "KEYS", "KEYS", "read") == b"User command-test has no permissions to access the 'read' key"
    c.call("ACL", "SETUSER", "command-test", "-@all")
    assert c.call("ACL", "DRYRUN", "command-test", "set", "somekey", "somevalue") == \
        b"User command-test has no permissions to run the 'set' command"
    c.call("ACL", "SETUSER", "test-channels", "+@all", "resetchannels", "&channel")
    assert c.call("ACL", "DRYRUN", "test-channels", "ssubscribe", "channel") == "OK"
    assert c.call("ACL", "DRYRUN", "test-channels", "sunsubscribe", "otherchannel") == "OK"
    assert c.call("ACL", "DRYRUN", "test-channels", "spublish", "otherchannel", "foo") == \
        b"User test-channels has no permissions to access the 'otherchannel' channel"
    c.call("ACL", "SETUSER", "test-dry-run", "+@all", "~v*")
    assert err(c.call("ACL", "DRYRUN", "test-dry-run", "SET", "v")) == "ERR wrong number of arguments for 'set' command"
    c.call("ACL", "SETUSER", "scripter", "on", "nopass", "+readonly")
    assert c.call("ACL", "DRYRUN", "scripter", "EVAL_RO", "", "0") == \
        b"User scripter has no permissions to run the 'eval_ro' command"


def test_cat_genpass_help(raw, resp):
    c = raw(resp)
    cats = c.call("ACL", "CAT")
    # Valkey's 21, then the categories of the modules durakv serves natively, as a Valkey loading them lists them
    assert cats[0] == b"keyspace" and b"connection" in cats and len(cats) == 21 + len(MODULE_CATEGORIES)
    assert cats[21:] == [c.encode() for c in MODULE_CATEGORIES]
    assert b"multi" in c.call("ACL", "CAT", "transaction")
    assert b"function|list" in c.call("ACL", "CAT", "scripting")
    assert b"set" not in c.call("ACL", "CAT", "keyspace")
    assert err(c.call("ACL", "CAT", "NON_EXISTS")) == "ERR Unknown category 'NON_EXISTS'"
    assert err(c.call("ACL", "CAT", "NON_EXISTS", "NON_EXISTS2")) == \
        "ERR unknown subcommand or wrong number of arguments for 'CAT'. Try ACL HELP."
    p = c.call("ACL", "GENPASS")
    assert len(p) == 64 and int(p, 16) >= 0 and p != c.call("ACL", "GENPASS")
    assert len(c.call("ACL", "GENPASS", "5")) == 2
    for bad in ("-236", "5000"):
        assert err(c.call("ACL", "GENPASS", bad)) == ("ERR ACL GENPASS argument must be the number of bits for the "
                                                      "output password, a positive number up to 4096")
    assert err(c.call("ACL", "help", "xxx")) == "ERR wrong number of arguments for 'acl|help' command"
    assert c.call("ACL", "HELP")[0] == b"ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"


# -- transactions and scripts -----------------------------------------------------------------------------

def test_multi_queue_denial_aborts_exec(raw):
    admin, c = raw(), raw()
    admin.call("ACL", "SETUSER", "antirez", "on", ">foo", "+set", "~object:1234", "+multi", "+exec", "+incr")
    c.call("AUTH", "antirez", "foo")
    assert c.call("MULTI") == "OK"
    assert err(c.call("GET", "foo")) == "NOPERM User antirez has no permissions to run the 'get' command"
    assert err(c.call("EXEC")) == "EXECABORT Transaction discarded because of previous errors."
    [entry] = log_entries(admin, 1)
    assert entry["context"] == b"multi" and entry["object"] == b"get" and entry["reason"] == b"command"


def test_exec_rechecks_rules_changed_after_queueing(raw, resp):
    admin, c = raw(), raw(resp)
    admin.call("ACL", "SETUSER", "antirez", "on", ">foo", "+set", "~object:1234", "+multi", "+exec", "+incr")
    c.call("AUTH", "antirez", "foo")
    assert c.call("MULTI") == "OK"
    assert c.call("INCR", "object:1234") == "QUEUED"
    assert c.call("SET", "object:1234", "5") == "QUEUED"
    admin.call("ACL", "SETUSER", "antirez", "-incr")
    reply = c.call("EXEC")
    assert err(reply[0]) == ("NOPERM ACLs rules changed between the moment the transaction was accumulated and the "
                             "EXEC call. This command is no longer allowed for the following reason: no permission "
                             "to execute the command or subcommand")
    assert reply[1] == "OK"  # the other commands still run
    [entry] = log_entries(admin, 1)
    assert entry["context"] == b"multi" and entry["object"] == b"incr"
    assert b"cmd=exec" in entry["client-info"] and b"user=antirez" in entry["client-info"]


def test_script_calls_are_checked_as_the_caller(raw):
    admin, c = raw(), raw()
    admin.call("ACL", "SETUSER", "antirez", "on", ">foo", "+set", "~object:1234", "+eval", "+evalsha", "+fcall")
    c.call("AUTH", "antirez", "foo")
    text = err(c.call("EVAL", "redis.call('incr','foo')", "0"))
    assert text.startswith("ERR ACL failure in script: User antirez has no permissions to run the 'incr' command "
                           "script: ")
    [entry] = log_entries(admin, 1)
    assert entry["context"] == b"lua" and entry["object"] == b"incr" and b"cmd=eval" in entry["client-info"]
    text = err(c.call("EVAL", "return redis.call('set', KEYS[1], 'x')", "1", "object:1234x"))
    assert text.startswith("NOPERM No permissions to access a key")  # the key itself is checked before the script
    text = err(c.call("EVAL", "return redis.call('set', 'elsewhere', 'x')", "0"))
    assert text.startswith("ERR ACL failure in script: No permissions to access a key script: ")
    assert c.call("EVAL", "return redis.pcall('set', 'elsewhere', 'x')['err']", "0") == \
        b"ERR ACL failure in script: No permissions to access a key"
    assert c.call("EVAL", "return redis.call('set', KEYS[1], 'x')", "1", "object:1234") == "OK"
    admin.call("ACL", "SETUSER", "bob", "on", ">123", "+@scripting", "+set", "~x*")
    c.call("AUTH", "bob", "123")
    assert c.call("EVAL", "return redis.acl_check_cmd('set','xx',1)", "1", "xx") == 1
    assert c.call("EVAL", "return redis.acl_check_cmd('hset','xx','f',1)", "1", "xx") is None
    assert c.call("EVAL", "return redis.acl_check_cmd('set','yy',1)", "0") is None
    assert err(c.call("EVAL", "return redis.acl_check_cmd('invalid-cmd','arg')", "0")).startswith(
        "ERR Invalid command passed to server.acl_check_cmd()")


# -- ACL LOG ------------------------------------------------------------------------------------------------

def test_acl_log_fields_grouping_and_ids(raw, resp):
    admin, c = raw(resp), raw()
    admin.call("ACL", "SETUSER", "user1", ">foo")
    assert err(c.call("AUTH", "user1", "doo")).startswith("WRONGPASS")
    [first] = log_entries(admin)
    assert list(first) == ["count", "reason", "context", "object", "username", "age-seconds", "client-info",
                           "entry-id", "timestamp-created", "timestamp-last-updated"]
    assert isinstance(first["age-seconds"], (bytes, float))  # a double: bulk in RESP2, ',' in RESP3
    assert first["username"] == b"user1" and first["context"] == b"toplevel" and first["reason"] == b"auth"
    wait_until(lambda: time.time() * 1000 > first["timestamp-last-updated"] + 1, 5, what="a millisecond")
    for _ in range(10):
        c.call("AUTH", "user1", "doo")
    [again] = log_entries(admin)
    assert again["entry-id"] == first["entry-id"] and again["count"] == 11
    assert again["timestamp-created"] == first["timestamp-created"]
    assert again["timestamp-last-updated"] > first["timestamp-last-updated"]
    admin.call("ACL", "SETUSER", "user2", ">doo")
    c.call("AUTH", "user2", "foo")
    assert log_entries(admin)[0]["entry-id"] == first["entry-id"] + 1
    admin.call("ACL", "SETUSER", "antirez", "on", ">foo", "+set", "~object:1234", "resetchannels", "+publish")
    c.call("AUTH", "antirez", "foo")
    for argv in (("GET", "foo"), ("GET", "foo"), ("GET", "foo")):
        c.call(*argv)
    top = log_entries(admin, 1)[0]
    assert (top["reason"], top["object"], top["count"], top["username"]) == (b"command", b"get", 3, b"antirez")
    assert b"cmd=get" in top["client-info"]
    c.call("SET", "somekeynotallowed", "1234")
    top = log_entries(admin, 1)[0]
    assert (top["reason"], top["object"]) == (b"key", b"somekeynotallowed")
    c.call("PUBLISH", "somechannelnotallowed", "nullmsg")
    top = log_entries(admin, 1)[0]
    assert (top["reason"], top["object"]) == (b"channel", b"somechannelnotallowed")
    assert len(log_entries(admin, 2)) == 2
    assert admin.call("ACL", "LOG", "RESET") == "OK" and log_entries(admin) == []
    admin.call("CONFIG", "SET", "acllog-max-len", "0")
    for j in range(10):
        c.call("SET", "obj:%d" % j, "123")
    assert log_entries(admin) == []
    admin.call("CONFIG", "SET", "acllog-max-len", "5")
    for j in range(10):
        c.call("SET", "obj:%d" % j, "123")
    assert len(log_entries(admin)) == 5
    admin.call("CONFIG", "SET", "acllog-max-len", "0")
    assert len(log_entries(admin)) == 5
    assert err(admin.call("ACL", "LOG", "notanumber")) == "ERR value is not an integer or out of range"


def test_info_counters_by_reason(raw):
    admin, c = raw(), raw()
    before = info_stats(admin)
    admin.call("ACL", "SETUSER", "invalidcmduser", "on", ">passwd", "nocommands")
    admin.call("ACL", "SETUSER", "invalidkeyuser", "on", ">passwd", "resetkeys", "allcommands")
    c.call("AUTH", "invalidcmduser", "passwd")
    assert err(c.call("ACL", "LIST")) == "NOPERM User invalidcmduser has no permissions to run the 'acl|list' command"
    c.call("AUTH", "invalidkeyuser", "passwd")
    assert err(c.call("GET", "x")) == "NOPERM No permissions to access a key"
    assert err(c.call("SUBSCRIBE", "x")) == "NOPERM No permissions to access a channel"
    after = info_stats(admin)
    assert {k: after[k] - before[k] for k in after} == {"acl_access_denied_auth": 0, "acl_access_denied_cmd": 1,
                                                       "acl_access_denied_key": 1, "acl_access_denied_channel": 1,
                                                       "acl_access_denied_tls_cert": 0, "acl_access_denied_db": 0}
    admin.call("CONFIG", "RESETSTAT")
    assert info_stats(admin) == after       # as Valkey: set at start only, not by RESETSTAT


# -- DELUSER, CLIENT KILL USER ------------------------------------------------------------------------------

def test_deluser(raw):
    admin, c = raw(), raw()
    assert err(admin.call("ACL", "DELUSER", "default")) == "ERR The 'default' user cannot be removed"
    admin.call("ACL", "SETUSER", "not_used", "on", ">passwd")
    assert admin.call("ACL", "DELUSER", "not_used", "nobody") == 1
    assert admin.call("PING") == "PONG"
    admin.call("ACL", "SETUSER", "using", "on", "+acl", ">passwd")
    other = raw()
    other.call("AUTH", "using", "passwd")
    c.call("AUTH", "using", "passwd")
    assert c.call("ACL", "DELUSER", "using") == 1   # the reply still arrives...
    with pytest.raises((ConnectionError, OSError)):
        c.call("PING")                              # ...then the connection is closed
    with pytest.raises((ConnectionError, OSError)):
        other.call("PING")


def test_client_kill_user(raw):
    admin = raw()
    admin.call("ACL", "SETUSER", "killme", "on", "nopass", "+@all")
    victims = [raw() for _ in range(2)]
    for v in victims:
        v.call("AUTH", "killme", "x")
    bystander = raw()
    assert admin.call("CLIENT", "KILL", "USER", "killme") == 2
    for v in victims:
        with pytest.raises((ConnectionError, OSError)):
            v.call("PING")
    assert bystander.call("PING") == "PONG"
    assert err(admin.call("CLIENT", "KILL", "USER", "nosuch")) == "ERR No such user 'nosuch'"


def test_load_and_save_need_an_aclfile(raw):
    text = ("ERR This instance is not configured to use an ACL file. You may want to specify users via the ACL "
            "SETUSER command and then issue a CONFIG REWRITE (assuming you have a configuration file set) in order "
            "to store users in the configuration.")
    assert err(raw().call("ACL", "LOAD")) == text
    assert err(raw().call("ACL", "SAVE")) == text


# -- the aclfile, `user` lines, restarts ------------------------------------------------------------------

USER_ACL = (b"user alice on allcommands allkeys &* >alice\n"
            b"user bob on -@all +@set +acl ~set* &* >bob\n"
            b"user doug on resetchannels &test +@all ~* >doug\n"
            b"user default on nopass ~* &* +@all\n")


def test_aclfile_load_save_and_restart(server_factory, tmp_path):
    data = tmp_path / "d"
    data.mkdir()
    (data / "user.acl").write_bytes(USER_ACL)
    srv = server_factory("--aclfile", "user.acl", "--acl-pubsub-default", "allchannels", data_dir=data)
    c = RawClient(srv.port)
    try:
        assert c.call("PUBLISH", "hello", "world") == 0
        assert c.call("AUTH", "alice", "alice") == "OK" and c.call("SET", "key", "value") == "OK"
        assert c.call("AUTH", "bob", "bob") == "OK" and c.call("SADD", "set", "1", "2", "3") == 3
        assert err(c.call("SET", "key", "value")) == "NOPERM User bob has no permissions to run the 'set' command"
        assert c.call("AUTH", "alice", "alice") == "OK"
        c.call("ACL", "SETUSER", "doug", "on", "nopass", "resetchannels", "&test*", "+@all", "~*")
        c.call("ACL", "SETUSER", "mortimer", "on", ">mortimer", "~*", "&*", "+@all")
        keeps, drops, gone = RawClient(srv.port), RawClient(srv.port), RawClient(srv.port)
        keeps.call("AUTH", "alice", "alice")
        keeps.call("SUBSCRIBE", "test1")
        drops.call("AUTH", "doug", "doug")
        drops.call("SUBSCRIBE", "test1")     # allowed by &test* now, not by the file's &test
        gone.call("AUTH", "mortimer", "mortimer")
        assert c.call("ACL", "LOAD") == "OK"
        c.call("PUBLISH", "test1", "test-message")
        assert keeps.read() == [b"message", b"test1", b"test-message"]
        for lost in (drops, gone):
            with pytest.raises((ConnectionError, OSError)):
                lost.call("PING")
        for x in (keeps, drops, gone):
            x.close()
        assert c.call("ACL", "SETUSER", "eve", "+get", "allkeys", ">eve", "on") == "OK"
        assert c.call("ACL", "SETUSER", "harry", "on", "nopass", "resetchannels", "&test", "+@all", "~*",
                      "(+set %W~w*)") == "OK"
        assert c.call("ACL", "SAVE") == "OK"
        saved = (data / "user.acl").read_bytes()
        assert saved == b"".join(line + b"\n" for line in c.call("ACL", "LIST"))
        assert c.call("ACL", "LOAD") == "OK"
        assert c.call("AUTH", "eve", "eve") == "OK" and c.call("GET", "key") == b"value"
        assert err(c.call("SET", "key", "value")) == "NOPERM User eve has no permissions to run the 'set' command"
        c.call("AUTH", "harry", "anything")
        assert c.call("PUBLISH", "test", "bar") == 0
        assert err(c.call("PUBLISH", "test1", "bar")) == "NOPERM No permissions to access a channel"
        before = c.call("ACL", "LIST")
    finally:
        c.close()
    srv.stop()
    srv.start()
    c = RawClient(srv.port)
    try:
        assert c.call("ACL", "LIST") == before
        assert c.call("AUTH", "eve", "eve") == "OK"
        (data / "user.acl").write_bytes(saved + b"user alice on nopass ~* -@all\n")
        c.call("AUTH", "alice", "alice")
        assert err(c.call("ACL", "LOAD")) == (
            "ERR WARNING: Duplicate user 'alice' found on line %d. WARNING: ACL errors detected, no change to the "
            "previously active ACL rules was performed" % (saved.count(b"\n") + 1))
        assert c.call("ACL", "LIST") == before
    finally:
        c.close()


def test_bad_aclfile_stops_start_up(server_factory, tmp_path):
    data = tmp_path / "d"
    data.mkdir()
    (data / "bad.acl").write_bytes(b"user alice on +nosuchcommand\n")
    srv = server_factory("--aclfile", "bad.acl", data_dir=data, start=False)
    srv.start(wait=False)
    assert srv.proc.wait(timeout=30) != 0
    wait_until(lambda: "Aborting durakv startup because of ACL errors" in srv.read_log(), 10, what="the reason")
    assert ("bad.acl:1: Error in applying operation '+nosuchcommand': Unknown command or category name in ACL"
            in srv.read_log())


def _start_with_config_file(srv, conf):
    """Starts srv with `conf` as its config file (the first argument, as valkey-server takes it)."""
    os.makedirs(srv.data_dir, exist_ok=True)
    srv.log = open(srv.log_path, "ab")
    srv.proc = subprocess.Popen([sys.executable, "-m", "durakv", "server", str(conf), "--port", str(srv.port),
                                 "--bind", "127.0.0.1", "--dir", srv.data_dir], stdout=srv.log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    srv.wait_ready()


def test_user_lines_from_config_and_rewrite(tmp_path):
    conf = tmp_path / "durakv.conf"
    conf.write_text("user default on nopass ~* +@all -flushdb\nuser alice on >pw ~app:* +@read\n")
    srv = ServerProcess(tmp_path / "d")
    try:
        _start_with_config_file(srv, conf)
        c = RawClient(srv.port)
        assert err(c.call("FLUSHDB")) == "NOPERM User default has no permissions to run the 'flushdb' command"
        assert err(c.call("SUBSCRIBE", "foo")) == "NOPERM No permissions to access a channel"  # no &*: none
        assert c.call("CONFIG", "SET", "maxmemory-samples", "7") == "OK"
        assert c.call("CONFIG", "REWRITE") == "OK"
        c.close()
        srv.stop()
        _start_with_config_file(srv, conf)
        c = RawClient(srv.port)
        assert err(c.call("FLUSHDB")) == "NOPERM User default has no permissions to run the 'flushdb' command"
        assert c.call("AUTH", "alice", "pw") == "OK" and c.call("GET", "app:x") is None
        assert err(c.call("GET", "other")) == "NOPERM No permissions to access a key"
        c.close()
    finally:
        srv.stop()
    text = conf.read_text()
    assert "maxmemory-samples 7" in text and "user alice on " in text


def test_duplicate_user_lines_stop_start_up(server_factory):
    srv = server_factory("--user", "foo", "--user", "foo", start=False)
    srv.start(wait=False)
    assert srv.proc.wait(timeout=30) != 0
    wait_until(lambda: "Duplicate user found" in srv.read_log(), 10, what="the reason")


def test_restart_keeps_requirepass_users_apart_from_the_data(server_factory, tmp_path):
    """Users are configuration, not data: a restart without the aclfile starts from the default user, and the
    data written by an ACL user is still there (journal replay needs no permission)."""
    data = tmp_path / "d"
    data.mkdir()
    (data / "u.acl").write_bytes(b"user writer on >w ~w:* +@write +@read\nuser default off\n")
    srv = server_factory("--aclfile", "u.acl", data_dir=data, start=False)
    srv.start(wait=False)
    wait_until(lambda: _answers(srv.port), 20, what="server up")
    c = RawClient(srv.port)
    assert err(c.call("PING")) == "NOAUTH Authentication required."
    assert c.call("AUTH", "writer", "w") == "OK" and _once_loaded(c, "SET", "w:1", "v") == "OK"
    c.close()
    srv.stop()
    srv.start(wait=False)
    wait_until(lambda: _answers(srv.port), 20, what="server up again")
    c = RawClient(srv.port)
    assert c.call("AUTH", "writer", "w") == "OK" and _once_loaded(c, "GET", "w:1") == b"v"
    c.close()


def _once_loaded(c, *args):
    """c.call(*args) once the server has loaded its data: _answers sees it up as soon as PING is answered or
    refused (NOAUTH), which it is while it loads, and a data command meanwhile gets -LOADING, as from Valkey."""
    def reply():
        r = c.call(*args)
        return None if isinstance(r, Err) and str(r).startswith("LOADING") else (r,)
    return wait_until(reply, 20, interval_s=0.05, what="the server to load its data")[0]


def _answers(port) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith((b"+PONG", b"-NOAUTH"))
    except OSError:
        return False


def test_acl_pubsub_default_applies_to_new_selectors_only(raw):
    c = raw()
    getuser = lambda name: dict(zip(*[iter(c.call("ACL", "GETUSER", name))] * 2))  # noqa: E731 (RESP2 pairs)
    assert getuser("default")[b"channels"] == b"&*"
    assert c.call("CONFIG", "GET", "acl-pubsub-default") == [b"acl-pubsub-default", b"resetchannels"]
    assert c.call("CONFIG", "SET", "acl-pubsub-default", "allchannels") == "OK"
    c.call("ACL", "SETUSER", "mydefault")
    assert getuser("mydefault")[b"channels"] == b"&*"
    assert err(c.call("ACL", "SETUSER", "onechannel", "&test")).endswith(
        "Try 'resetchannels' to start with an empty list of channels")
    c.call("CONFIG", "SET", "acl-pubsub-default", "resetchannels")
    assert getuser("mydefault")[b"channels"] == b"&*"
    c.call("ACL", "SETUSER", "onechannel", "&test")
    assert getuser("onechannel")[b"channels"] == b"&test"
    c.call("ACL", "SETUSER", "default", "reset", "on", "nopass", "~*", "+@all")
    assert err(c.call("SUBSCRIBE", "foo")) == "NOPERM No permissions to access a channel"
    assert err(c.call("PUBLISH", "hello", "world")) == "NOPERM No permissions to access a channel"
    c.call("CONFIG", "SET", "acl-pubsub-default", "allchannels")
    c.call("ACL", "SETUSER", "default", "reset", "on", "nopass", "~*", "+@all")
    assert c.call("PUBLISH", "hello", "world") == 0


def test_password_guesses_against_requirepass_are_counted_and_logged(server_factory):
    """Issue 9 item 12 without any ACL command: a requirepass server under a guessing client."""
    srv = server_factory("--requirepass", "right", password="right")
    attacker = RawClient(srv.port)
    for i in range(300):
        attacker.send("AUTH", "guess%d" % i)
    replies = [attacker.read() for _ in range(300)]
    assert {str(r) for r in replies} == {"WRONGPASS invalid username-password pair or user is disabled."}
    assert attacker.call("AUTH", "right") == "OK"
    assert info_stats(attacker)["acl_access_denied_auth"] == 300
    wait_until(lambda: "AUTH failed for user 'default'" in srv.read_log(), 10, what="the AUTH failure line")
    attacker.close()
