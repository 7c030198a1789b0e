"""Connection commands: PING ECHO HELLO AUTH SELECT QUIT RESET CLIENT ..."""

from .. import VALKEY_VERSION, messages
from ..errors import CommandError
from ..protocol.resp import OK, PONG, ErrorReply
from .base import parse_int, syntax_error
from .registry import command


@command("ping")
def ping(ctx, args):
    if len(args) > 2:
        raise CommandError(messages.WRONG_ARITY.format("ping"))
    return PONG if len(args) == 1 else args[1]


@command("echo")
def echo(ctx, args):
    return args[1]


def _check_password(ctx, username, password):
    required = ctx.server.requirepass if ctx.server is not None else ctx.dispatcher.requirepass
    if username.lower() != b"default":
        return False
    if not required:
        return True
    return password == required.encode()


@command("auth")
def auth(ctx, args):
    if len(args) > 3:
        raise syntax_error()
    required = ctx.dispatcher.requirepass
    if len(args) == 2:
        if not required:
            raise CommandError(messages.AUTH_NO_PASSWORD)
        username, password = b"default", args[1]
    else:
        username, password = args[1], args[2]
    if not _check_password(ctx, username, password):
        raise CommandError(messages.WRONGPASS)
    ctx.client.authenticated = True
    ctx.client.user = username.decode("utf-8", "replace")
    return OK


@command("hello")
def hello(ctx, args):
    s = ctx.client
    proto = None
    i = 1
    if len(args) > 1:
        try:
            proto = int(args[1])
        except ValueError:
            raise CommandError("ERR Protocol version is not an integer or out of range") from None
        if proto not in (2, 3):
            raise CommandError(messages.NOPROTO)
        i = 2
    name = None
    while i < len(args):
        opt = args[i].upper()
        if opt == b"AUTH" and i + 2 < len(args):
            if not _check_password(ctx, args[i + 1], args[i + 2]):
                raise CommandError(messages.WRONGPASS)
            s.authenticated = True
            s.user = args[i + 1].decode("utf-8", "replace")
            i += 3
        elif opt == b"SETNAME" and i + 1 < len(args):
            name = args[i + 1]
            _validate_name(name)
            i += 2
        else:
            raise CommandError("ERR Syntax error in HELLO option '%s'" % args[i].decode("utf-8", "replace"))
    if not s.authenticated:
        raise CommandError("NOAUTH HELLO must be called with the client already authenticated, otherwise the "
                           "HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and "
                           "select the RESP protocol version at the same time")
    if proto is not None:
        s.resp = proto
    if name is not None:
        s.name = name
    role = "replica" if ctx.server is not None and ctx.server.replica_of is not None else "master"
    return {b"server": b"valkey", b"version": VALKEY_VERSION.encode(), b"proto": s.resp, b"id": s.id,
            b"mode": b"standalone", b"role": role.encode(), b"modules": []}


@command("select")
def select(ctx, args):
    n = parse_int(args[1])
    dbs = ctx.keyspace.dbs
    if not 0 <= n < len(dbs):
        raise CommandError(messages.DB_INDEX_OUT_OF_RANGE)
    ctx.client.db_id = n
    ctx.db = dbs[n]
    return OK


@command("quit")
def quit_(ctx, args):
    ctx.client.close_after_reply = True
    return OK


@command("reset")
def reset(ctx, args):
    s = ctx.client
    s.in_multi = False
    s.multi_queue = []
    s.multi_error = False
    ctx.dispatcher.unwatch_all(s)
    s.db_id = 0
    ctx.db = ctx.keyspace.dbs[0]
    s.resp = 2
    s.name = b""
    s.readonly_mode = False
    if ctx.dispatcher.requirepass:
        s.authenticated = False
    return "RESET"


@command("readonly")
def readonly(ctx, args):
    ctx.client.readonly_mode = True
    return OK


@command("readwrite")
def readwrite(ctx, args):
    ctx.client.readonly_mode = False
    return OK


# -- CLIENT -------------------------------------------------------------------------------------

def _validate_name(name):
    for b in name:
        if b < 33 or b > 126:
            raise CommandError(messages.CLIENT_NAME_SPACES)


@command("client|id")
def client_id(ctx, args):
    return ctx.client.id


@command("client|setname")
def client_setname(ctx, args):
    _validate_name(args[2])
    ctx.client.name = args[2]
    return OK


@command("client|getname")
def client_getname(ctx, args):
    return ctx.client.name or None


@command("client|setinfo")
def client_setinfo(ctx, args):
    attr = args[2].lower()
    value = args[3]
    if attr not in (b"lib-name", b"lib-ver"):
        raise CommandError("ERR Unrecognized option '%s'" % args[2].decode("utf-8", "replace"))
    for b in value:
        if b < 33 or b > 126:
            raise CommandError("ERR %s cannot contain spaces, newlines or special characters."
                               % attr.decode().upper().replace("-", "-"))
    if attr == b"lib-name":
        ctx.client.lib_name = value
    else:
        ctx.client.lib_ver = value
    return OK


def client_line(srv, conn, now_ms):
    s = conn.session
    age = (now_ms - s.created_ms) // 1000
    idle = (now_ms - s.last_interaction_ms) // 1000
    flags = "x" if s.in_multi else "N"
    return ("id=%d addr=%s laddr=%s fd=%d name=%s age=%d idle=%d flags=%s db=%d sub=0 psub=0 ssub=0 "
            "multi=%d watch=%d qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=16384 rbp=0 obl=0 oll=%d omem=0 "
            "tot-mem=0 events=r cmd=%s user=%s redir=-1 resp=%d lib-name=%s lib-ver=%s" % (
                s.id, s.addr, s.laddr, s.fd, s.name.decode("utf-8", "replace"), age, idle, flags, s.db_id,
                len(s.multi_queue) if s.in_multi else -1, len(s.watched), len(conn.pending), s.last_cmd,
                s.user, s.resp, s.lib_name.decode("utf-8", "replace"), s.lib_ver.decode("utf-8", "replace")))


@command("client|list")
def client_list(ctx, args):
    srv = ctx.server
    conns = srv.client_connections()
    i = 2
    while i < len(args):
        opt = args[i].upper()
        if opt == b"TYPE" and i + 1 < len(args):
            kind = args[i + 1].lower()
            if kind not in (b"normal", b"master", b"primary", b"replica", b"slave", b"pubsub"):
                raise CommandError("ERR Unknown client type '%s'" % args[i + 1].decode("utf-8", "replace"))
            if kind != b"normal":
                conns = []
            i += 2
        elif opt == b"ID" and i + 1 < len(args):
            ids = set()
            for a in args[i + 1:]:
                try:
                    n = int(a)
                except ValueError:
                    raise CommandError("ERR Invalid client ID") from None
                if n <= 0:
                    raise CommandError("ERR Invalid client ID")
                ids.add(n)
            conns = [c for c in conns if c.session.id in ids]
            break
        else:
            raise syntax_error()
    now = ctx.now_ms()
    return "".join(client_line(srv, c, now) + "\n" for c in conns).encode()


@command("client|info")
def client_info(ctx, args):
    srv = ctx.server
    conn = srv.clients.get(ctx.client.id)
    if conn is None:
        return b""
    return (client_line(srv, conn, ctx.now_ms()) + "\n").encode()


@command("client|kill")
def client_kill(ctx, args):
    srv = ctx.server
    conns = srv.client_connections()
    if len(args) == 3:  # old form: CLIENT KILL addr:port
        addr = args[2].decode("utf-8", "replace")
        for c in conns:
            if c.session.addr == addr:
                srv.kill_client(c)
                return OK
        raise CommandError(messages.NO_SUCH_CLIENT)
    filters = []
    skipme = True
    i = 2
    while i < len(args):
        if i + 1 >= len(args):
            raise syntax_error()
        opt, val = args[i].upper(), args[i + 1]
        if opt == b"ID":
            try:
                n = int(val)
            except ValueError:
                raise CommandError("ERR client-id should be greater than 0") from None
            if n <= 0:
                raise CommandError("ERR client-id should be greater than 0")
            filters.append(lambda c, n=n: c.session.id == n)
        elif opt == b"ADDR":
            filters.append(lambda c, v=val.decode(): c.session.addr == v)
        elif opt == b"LADDR":
            filters.append(lambda c, v=val.decode(): c.session.laddr == v)
        elif opt == b"USER":
            filters.append(lambda c, v=val.decode(): c.session.user == v)
        elif opt == b"TYPE":
            kind = val.lower()
            if kind not in (b"normal", b"master", b"primary", b"replica", b"slave", b"pubsub"):
                raise CommandError("ERR Unknown client type '%s'" % val.decode("utf-8", "replace"))
            filters.append(lambda c, k=kind: k == b"normal")
        elif opt == b"SKIPME":
            v = val.lower()
            if v not in (b"yes", b"no"):
                raise syntax_error()
            skipme = v == b"yes"
        elif opt == b"MAXAGE":
            age = parse_int(val)
            now = ctx.now_ms()
            filters.append(lambda c, a=age: (now - c.session.created_ms) // 1000 >= a)
        else:
            raise syntax_error()
        i += 2
    killed = 0
    for c in conns:
        if skipme and c.session.id == ctx.client.id:
            continue
        if all(f(c) for f in filters):
            srv.kill_client(c)
            killed += 1
    return killed


@command("client|no-evict")
def client_no_evict(ctx, args):
    if args[2].lower() not in (b"on", b"off"):
        raise syntax_error()
    return OK


@command("client|no-touch")
def client_no_touch(ctx, args):
    if args[2].lower() not in (b"on", b"off"):
        raise syntax_error()
    return OK


@command("client|help")
def client_help(ctx, args):
    return [b"CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            b"ID", b"    Return the ID of the current connection.",
            b"GETNAME", b"    Return the name of the current connection.",
            b"SETNAME <name>", b"    Assign the name <name> to the current connection.",
            b"SETINFO <LIB-NAME|LIB-VER> <value>", b"    Set client library name or version.",
            b"LIST [TYPE <type>] [ID <id> [<id> ...]]", b"    Return information about client connections.",
            b"INFO", b"    Return information about the current client connection.",
            b"KILL <ip:port> | <option> <value> [...]", b"    Kill connections.",
            b"HELP", b"    Print this help."]


__all__ = ["ErrorReply"]
