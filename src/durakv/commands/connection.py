"""Connection commands: PING ECHO HELLO AUTH SELECT QUIT RESET CLIENT ..."""

from .. import REDIS_COMPAT_VERSION, VALKEY_VERSION, messages
from ..errors import CommandError
from ..protocol.numbers import string2ll
from ..protocol.resp import OK, PONG, ErrorReply, Raw, RespSet
from .acl.handlers import users_of
from .args import ArgCursor
from .base import parse_int, syntax_error
from .blocking import parse_timeout_ms
from . import registry
from .registry import command


_CLIENT_TYPE_ALIASES = {b"slave": b"replica", b"master": b"primary"}   # getClientTypeByName


@command("ping", core=True)
def ping(ctx, args):
    if len(args) > 2:
        raise CommandError(messages.WRONG_ARITY.format("ping"))
    if ctx.client.resp == 2 and ctx.client.subscribed:
        return [b"pong", args[1] if len(args) == 2 else b""]  # subscribed mode in RESP2
    return PONG if len(args) == 1 else args[1]


@command("echo", core=True)
def echo(ctx, args):
    return args[1]


def _authenticate(ctx, username, password, argv0) -> bool:
    """ACLAuthenticateUser through the server's users; without a server only default (nopass) exists."""
    acl = users_of(ctx)
    if acl is None:
        return username == b"default"
    return acl.authenticate(ctx.client, username, password, argv0)


@command("auth")
def auth(ctx, args):
    if len(args) > 3:
        raise syntax_error()
    if len(args) == 2:
        acl = users_of(ctx)
        if acl is None or acl.users.default.nopass:
            raise CommandError(messages.AUTH_NO_PASSWORD)
        username, password = b"default", args[1]
    else:
        username, password = args[1], args[2]
    if not _authenticate(ctx, username, password, args[0]):
        raise CommandError(messages.WRONGPASS)
    return OK


@command("hello")
def hello(ctx, args):
    s = ctx.client
    proto = None
    c = ArgCursor(args, 1)
    if c:
        proto = c.int(messages.HELLO_PROTO_NOT_INTEGER)   # string2ll: '03', '+3', ' 3' are refused
        if proto not in (2, 3):
            raise CommandError(messages.NOPROTO)
    name = None
    username = password = None
    while c:  # every option is parsed first: the last AUTH and the last SETNAME count
        raw = c.next()
        opt = raw.upper()
        if opt == b"AUTH" and c.left() >= 2:
            username, password = c.take(2)
        elif opt == b"SETNAME" and c.left():
            name = c.next()
            _validate_name(name)
        else:
            raise CommandError(messages.HELLO_BAD_OPTION.format(raw.decode("utf-8", "replace")))
    if username is not None:
        if not _authenticate(ctx, username, password, args[0]):
            raise CommandError(messages.WRONGPASS)
    if not s.authenticated:
        raise CommandError(messages.HELLO_NOAUTH)
    if proto is not None:
        s.resp = proto
    if name is not None:
        s.name = name
    role = "replica" if ctx.services.replication.status()["role"] == "replica" else "master"
    cfg = ctx.services.config
    if cfg is not None and cfg["extended-redis-compatibility"]:
        server, version = b"redis", REDIS_COMPAT_VERSION.encode()
    else:
        server, version = b"valkey", VALKEY_VERSION.encode()
    return {b"server": server, b"version": version, b"proto": s.resp, b"id": s.id,
            b"mode": b"standalone", b"role": role.encode(), b"modules": []}


@command("select")
def select(ctx, args):
    n = parse_int(args[1])
    dbs = ctx.keyspace.dbs   # a cluster node has cluster-databases of them (Valkey 9), any other `databases`
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
    ctx.pipeline.discard(s)
    s.db_id = 0
    ctx.db = ctx.keyspace.dbs[0]
    s.resp = 2
    s.name = b""
    s.readonly_mode = False
    ctx.services.clients.reset(s)  # subscriptions, tracking, MONITOR, NO-EVICT, NO-TOUCH
    acl = users_of(ctx)
    if acl is not None:
        acl.reset_session(s)  # back to the default user, authenticated only if it needs no password
    elif ctx.pipeline.requirepass:
        s.authenticated = False
    return "RESET"


@command("monitor")
def monitor(ctx, args):
    if not ctx.may_block:
        raise CommandError(messages.MONITOR_DENY_BLOCKING)
    if not ctx.services.clients.monitor(ctx.client):
        return Raw(b"")  # already monitoring: Valkey ignores it without a reply
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
        raise CommandError(messages.CLIENT_SETINFO_UNKNOWN_OPTION % args[2].decode("utf-8", "replace"))
    for b in value:
        if b < 33 or b > 126:
            # validateClientAttr; the attribute is named as the client wrote it.
            raise CommandError(messages.CLIENT_SETINFO_BAD_VALUE
                               % args[2].decode("utf-8", "replace"))
    if attr == b"lib-name":
        ctx.client.lib_name = value
    else:
        ctx.client.lib_ver = value
    return OK


# Valkey 9's client filters (parseClientFiltersOrReply), shared by CLIENT LIST and CLIENT KILL: each option
# narrows the list; a repeated option replaces the one before, except ID and NOT-ID, which add client ids.
_FILTER_FLAGS = frozenset("OSMPxbtRBdcuAUreTIN")   # validateClientFlagFilter
_FILTER_CAPA = frozenset("r")
_NEGATABLE = frozenset((b"ID", b"TYPE", b"ADDR", b"LADDR", b"USER", b"FLAGS", b"NAME", b"LIB-NAME", b"LIB-VER",
                        b"DB", b"CAPA", b"IP"))


def _flags_match(have: str, wanted: str) -> bool:
    """clientMatchesFlagFilter: every letter of the filter is one of the client's flags; N only matches a
    client that has none."""
    return all(f in have for f in wanted)


def _ip_match(addr: str, ip: str) -> bool:
    """clientMatchesIpFilter: addr ("ip:port" or "[ipv6]:port") is ip followed by its port."""
    rest = addr[1:] if addr.startswith("[") else addr
    if not rest.startswith(ip):
        return False
    rest = rest[len(ip):]
    if rest.startswith("]"):
        rest = rest[1:]
    return rest.startswith(":") and not rest.startswith(":0")


def _text(value: bytes) -> str:
    return value.decode("utf-8", "replace")


def _client_filter(ctx, args, start, skipme):
    """The clients CLIENT LIST / KILL args[start:] select, as a predicate on a session. Raises CommandError
    with Valkey's text for a bad filter. `skipme`: the default of SKIPME (KILL yes, LIST no)."""
    services = ctx.services
    me = ctx.client.id
    tests = {}       # filter name -> predicate of the session (the last of each name counts)
    ids = {}         # ID / NOT-ID -> set of client ids (they accumulate)
    c = ArgCursor(args, start)
    while c:
        raw = c.next()
        opt = raw.upper()
        negate = opt.startswith(b"NOT-") and opt[4:] in _NEGATABLE
        name = opt[4:] if negate else opt
        if name == b"ID":
            found = ids.setdefault(opt, set())
            n = 0
            while c:   # the client ids after ID, up to the first argument that is not one (string2ll)
                cid = string2ll(c.peek())
                if cid is None:
                    break
                c.next()
                if cid < 1:
                    raise CommandError(messages.CLIENT_ID_POSITIVE)
                found.add(cid)
                n += 1
            if not n:
                raise syntax_error()
            continue
        if not c:
            raise syntax_error()   # every other filter takes a value
        val = c.next()
        if not negate and name in (b"MAXAGE", b"IDLE"):
            limit = parse_int(val, messages.MAXAGE_NOT_INTEGER if name == b"MAXAGE"
                              else messages.CLIENT_IDLE_NOT_INTEGER)
            if limit <= 0:
                raise CommandError(messages.MAXAGE_POSITIVE if name == b"MAXAGE" else messages.CLIENT_IDLE_POSITIVE)
            now = ctx.now_ms()
            if name == b"MAXAGE":
                tests[name] = lambda s, a=limit: (now - s.created_ms) // 1000 >= a
            else:
                tests[name] = lambda s, a=limit: (now - s.last_interaction_ms) // 1000 >= a
            continue
        if not negate and name == b"SKIPME":
            v = val.lower()
            if v not in (b"yes", b"no"):
                raise syntax_error()
            skipme = v == b"yes"
            continue
        if name == b"TYPE":
            kind = val.lower()
            if kind not in (b"normal", b"master", b"primary", b"replica", b"slave", b"pubsub"):
                raise CommandError(messages.CLIENT_UNKNOWN_TYPE.format(_text(val)))
            kind = _CLIENT_TYPE_ALIASES.get(kind, kind)
            test = lambda s, k=kind: services.clients.kind(s) == k
        elif name == b"ADDR":
            test = lambda s, v=_text(val): s.addr == v
        elif name == b"LADDR":
            test = lambda s, v=_text(val): s.laddr == v
        elif name == b"USER":
            acl = users_of(ctx)
            user = acl.users.get(val) if acl is not None else None
            if user is None:
                raise CommandError(messages.NO_SUCH_USER.format(_text(val)))
            test = lambda s, u=user: acl.user_of(s) is u
        elif name == b"FLAGS":
            wanted = _text(val)
            if any(f not in _FILTER_FLAGS for f in wanted):
                raise CommandError((messages.CLIENT_UNKNOWN_NOT_FLAGS if negate
                                    else messages.CLIENT_UNKNOWN_FLAGS).format(wanted))
            test = lambda s, w=wanted: _flags_match(services.clients.flags(s), w)
        elif name == b"NAME":
            test = lambda s, v=val: bool(s.name) and s.name == v
        elif name == b"LIB-NAME":
            test = lambda s, v=val: bool(s.lib_name) and s.lib_name == v
        elif name == b"LIB-VER":
            test = lambda s, v=val: bool(s.lib_ver) and s.lib_ver == v
        elif name == b"DB":
            label = "NOT-DB" if negate else "DB"
            db = parse_int(val, messages.CLIENT_DB_NOT_INTEGER.format(label))
            if not -2 ** 31 <= db < 2 ** 31:   # getIntFromObjectOrReply
                raise CommandError(messages.CLIENT_DB_NOT_INTEGER.format(label))
            ndb = len(ctx.keyspace.dbs)
            if not 0 <= db < ndb:
                raise CommandError(messages.CLIENT_DB_RANGE.format(label, ndb - 1))
            test = lambda s, d=db: s.db_id == d
        elif name == b"CAPA":
            wanted = _text(val)
            if any(f not in _FILTER_CAPA for f in wanted):
                raise CommandError((messages.CLIENT_UNKNOWN_NOT_CAPA if negate
                                    else messages.CLIENT_UNKNOWN_CAPA).format(wanted))
            test = lambda s, w=wanted: not w or s.capa_redirect
        elif name == b"IP":
            test = lambda s, v=_text(val): _ip_match(s.addr, v)
        else:
            raise syntax_error()
        tests[opt] = (lambda s, t=test: not t(s)) if negate else test
    preds = list(tests.values())
    if b"ID" in ids:
        preds.append(lambda s, found=ids[b"ID"]: s.id in found)
    if b"NOT-ID" in ids:
        preds.append(lambda s, found=ids[b"NOT-ID"]: s.id not in found)
    if skipme:
        preds.append(lambda s: s.id != me)
    return lambda s: all(p(s) for p in preds)


@command("client|list")
def client_list(ctx, args):
    services = ctx.services
    sessions = services.clients.sessions()
    if len(args) > 2:
        wanted = _client_filter(ctx, args, 2, skipme=False)
        sessions = [s for s in sessions if wanted(s)]
    return "".join(services.clients.line(s) + "\n" for s in sessions).encode()


@command("client|info")
def client_info(ctx, args):
    line = ctx.services.clients.line(ctx.client)
    return (line + "\n").encode() if line else b""


@command("client|kill")
def client_kill(ctx, args):
    services = ctx.services
    sessions = services.clients.sessions()
    me = ctx.client.id
    if len(args) == 3:  # old form: CLIENT KILL addr:port, which may kill the caller itself
        addr = args[2].decode("utf-8", "replace")
        for s in sessions:
            if s.addr == addr:
                _kill(ctx, services, s, me)
                return OK
        raise CommandError(messages.NO_SUCH_CLIENT)
    if len(args) < 3:
        raise syntax_error()
    wanted = _client_filter(ctx, args, 2, skipme=True)
    killed = 0
    for s in sessions:
        if wanted(s):
            _kill(ctx, services, s, me)
            killed += 1
    return killed


def _kill(ctx, services, session, me):
    if session.id == me:
        ctx.client.close_after_reply = True  # the caller still gets its reply first
    else:
        services.clients.kill(session)


@command("client|reply")
def client_reply(ctx, args):
    """CLIENT REPLY ON|OFF|SKIP: the connection drops the replies the session says to (Session.mute_reply)."""
    mode = args[2].lower()
    s = ctx.client
    if mode == b"on":
        s.reply_off = False
        s.reply_skip = 0
        return OK
    if mode == b"off":
        s.reply_off = True  # this reply too
        return OK
    if mode == b"skip":
        if not s.reply_off:
            s.reply_skip = 2  # this command's reply (there is none) and the next one
        return OK
    raise syntax_error()


def _on_off(arg) -> bool:
    v = arg.lower()
    if v == b"on":
        return True
    if v == b"off":
        return False
    raise syntax_error()


@command("client|no-evict")
def client_no_evict(ctx, args):
    ctx.services.clients.set_no_evict(ctx.client, _on_off(args[2]))
    return OK


@command("client|capa")
def client_capa(ctx, args):
    """CLIENT CAPA capability [...]: `redirect` is the one Valkey knows (a replica then answers -REDIRECT
    host:port to its primary); others are accepted and ignored, as Valkey does."""
    for capability in args[2:]:
        if capability.lower() == b"redirect":
            ctx.client.capa_redirect = True
    return OK


@command("client|import-source")
def client_import_source(ctx, args):
    """Valkey 9.1: in import-mode a client marked as an import source reads and writes keys whose TTL passed
    as live (a migration tool copying data in, with the source's own DELs expiring them); ON outside
    import-mode is refused, OFF always answers OK (clientImportSourceCommand)."""
    mode = args[2].lower()
    if mode == b"off":
        ctx.client.import_source = False
    elif not ctx.services.config["import-mode"]:
        raise CommandError(messages.NOT_IMPORT_MODE)      # checked before the word, as 9.1.2 answers "x"
    elif mode == b"on":
        ctx.client.import_source = True
    else:
        raise syntax_error()
    return OK


@command("client|no-touch")
def client_no_touch(ctx, args):
    # reads by this client leave LRU/LFU access untouched (except TOUCH)
    ctx.services.clients.set_no_touch(ctx.client, _on_off(args[2]))
    return OK


def _subcommand_syntax(args):
    return CommandError(messages.SUBCOMMAND_SYNTAX.format(args[1].decode("utf-8", "replace"), "CLIENT"))


def _ms_timeout_end(ctx, arg) -> int:
    """getTimeoutFromObjectOrReply(UNIT_MILLISECONDS) -> absolute end in ms (0 for 0), by the pause's clock."""
    now = ctx.services.clock_ms()
    tval = parse_timeout_ms(ctx, arg, now)
    return tval + now if tval > 0 else 0


@command("client|pause")
def client_pause(ctx, args):
    if len(args) > 4:
        raise _subcommand_syntax(args)
    all_commands = True
    if len(args) == 4:
        mode = args[3].lower()
        if mode == b"write":
            all_commands = False
        elif mode != b"all":
            raise CommandError(messages.PAUSE_MODE)
    end = _ms_timeout_end(ctx, args[2])
    ctx.services.clients.pause(end, all_commands)
    return OK


@command("client|unpause")
def client_unpause(ctx, args):
    ctx.services.clients.unpause()
    return OK


@command("client|unblock")
def client_unblock(ctx, args):
    if len(args) > 4:
        raise _subcommand_syntax(args)
    error = False
    if len(args) == 4:
        reason = args[3].lower()
        if reason == b"error":
            error = True
        elif reason != b"timeout":
            raise CommandError(messages.UNBLOCK_REASON)
    client_id = parse_int(args[2])
    return 1 if ctx.services.clients.unblock(client_id, error) else 0


def _prefix_overlap(a: bytes, b: bytes) -> bool:
    n = min(len(a), len(b))
    return a[:n] == b[:n]


@command("client|tracking")
def client_tracking(ctx, args):
    redirect = 0
    bcast = optin = optout = noloop = False
    prefixes = []
    services = ctx.services
    c = ArgCursor(args, 3)
    while c:
        opt = c.next_lower()
        more = c.left() > 0
        if opt == b"redirect" and more:
            if redirect:
                raise CommandError(messages.TRACKING_ONE_REDIRECT)
            redirect = c.int()
            if not services.clients.exists(redirect):
                raise CommandError(messages.TRACKING_REDIRECT_MISSING)
        elif opt == b"bcast":
            bcast = True
        elif opt == b"optin":
            optin = True
        elif opt == b"optout":
            optout = True
        elif opt == b"noloop":
            noloop = True
        elif opt == b"prefix" and more:
            prefixes.append(c.next())
        else:
            raise syntax_error()
    state = args[2].lower()
    if state == b"on":
        current = services.clients.tracking_state(ctx.client)
        if not bcast and prefixes:
            raise CommandError(messages.TRACKING_PREFIX_NEEDS_BCAST)
        if current is not None and current.bcast != bcast:
            raise CommandError(messages.TRACKING_SWITCH_BCAST)
        if bcast and (optin or optout):
            raise CommandError(messages.TRACKING_OPTIN_BCAST)
        if optin and optout:
            raise CommandError(messages.TRACKING_OPTIN_OPTOUT)
        if current is not None and (optin and current.optout or optout and current.optin):
            raise CommandError(messages.TRACKING_SWITCH_OPTIN)
        if bcast:
            existing = current.prefixes if current is not None else []
            for i, p in enumerate(prefixes):
                for e in existing:
                    if _prefix_overlap(e, p):
                        raise CommandError(messages.TRACKING_PREFIX_OVERLAP.format(
                            p.decode("utf-8", "replace"), e.decode("utf-8", "replace")))
                for q in prefixes[i + 1:]:
                    if _prefix_overlap(p, q):
                        raise CommandError(messages.TRACKING_PREFIX_OVERLAP_ARGS.format(
                            p.decode("utf-8", "replace"), q.decode("utf-8", "replace")))
        services.clients.tracking_enable(ctx.client, redirect, bcast, optin, optout, noloop, prefixes)
    elif state == b"off":
        services.clients.tracking_disable(ctx.client)
    else:
        raise syntax_error()
    return OK


@command("client|caching")
def client_caching(ctx, args):
    t = ctx.services.clients.tracking_state(ctx.client)
    if t is None:
        raise CommandError(messages.CACHING_NOT_TRACKING)
    opt = args[2].lower()
    if opt == b"yes":
        if not t.optin:
            raise CommandError(messages.CACHING_YES_OPTIN)
    elif opt == b"no":
        if not t.optout:
            raise CommandError(messages.CACHING_NO_OPTOUT)
    else:
        raise syntax_error()
    t.caching = True
    return OK


@command("client|getredir")
def client_getredir(ctx, args):
    t = ctx.services.clients.tracking_state(ctx.client)
    return t.redirect if t is not None else -1


@command("client|trackinginfo")
def client_trackinginfo(ctx, args):
    t = ctx.services.clients.tracking_state(ctx.client)
    flags = RespSet()
    if t is None:
        flags.append(b"off")
        return {b"flags": flags, b"redirect": -1, b"prefixes": []}
    flags.append(b"on")
    if t.bcast:
        flags.append(b"bcast")
    if t.optin:
        flags.append(b"optin")
        if t.caching:
            flags.append(b"caching-yes")
    if t.optout:
        flags.append(b"optout")
        if t.caching:
            flags.append(b"caching-no")
    if t.noloop:
        flags.append(b"noloop")
    if t.broken:
        flags.append(b"broken_redirect")
    return {b"flags": flags, b"redirect": t.redirect, b"prefixes": sorted(t.prefixes)}


_CLIENT_HELP = (  # Valkey's text, per subcommand; only the implemented ones are listed
    (b"caching", (b"CACHING (YES|NO)",
                  b"    Enable/disable tracking of the keys for next command in OPTIN/OPTOUT modes.")),
    (b"capa", (b"CAPA <option> [options...]", b"    The client claims its some capability options. Options are:",
               b"    * REDIRECT",
               b"      The client can handle redirection during primary and replica failover in standalone mode.")),
    (b"getredir", (b"GETREDIR", b"    Return the client ID we are redirecting to when tracking is enabled.")),
    (b"getname", (b"GETNAME", b"    Return the name of the current connection.")),
    (b"id", (b"ID", b"    Return the ID of the current connection.")),
    (b"info", (b"INFO", b"    Return information about the current client connection.")),
    (b"kill", (b"KILL <ip:port>", b"    Kill connection made from <ip:port>.",
               b"KILL <option> <value> [<option> <value> [...]]", b"    Kill connections. Options are:",
               b"    * ADDR (<ip:port>|<unixsocket>:0)", b"      Kill connections made from the specified address",
               b"    * LADDR (<ip:port>|<unixsocket>:0)", b"      Kill connections made to specified local address",
               b"    * TYPE (NORMAL|PRIMARY|REPLICA|PUBSUB)", b"      Kill connections by type.",
               b"    * USER <username>", b"      Kill connections authenticated by <username>.",
               b"    * SKIPME (YES|NO)", b"      Skip killing current connection (default: yes).",
               b"    * ID <client-id>", b"      Kill connections by client id.",
               b"    * MAXAGE <maxage>", b"      Kill connections older than the specified age.")),
    (b"list", (b"LIST [options ...]", b"    Return information about client connections. Options:",
               b"    * TYPE (NORMAL|PRIMARY|REPLICA|PUBSUB)", b"      Return clients of specified type.")),
    (b"unpause", (b"UNPAUSE", b"    Stop the current client pause, resuming traffic.")),
    (b"pause", (b"PAUSE <timeout> [WRITE|ALL]",
                b"    Suspend all, or just write, clients for <timeout> milliseconds.")),
    (b"reply", (b"REPLY (ON|OFF|SKIP)", b"    Control the replies sent to the current connection.")),
    (b"setname", (b"SETNAME <name>", b"    Assign the name <name> to the current connection.")),
    (b"setinfo", (b"SETINFO <option> <value>", b"    Set client meta attr. Options are:",
                  b"    * LIB-NAME: the client lib name.", b"    * LIB-VER: the client lib version.")),
    (b"unblock", (b"UNBLOCK <clientid> [TIMEOUT|ERROR]", b"    Unblock the specified blocked client.")),
    (b"tracking", (b"TRACKING (ON|OFF) [REDIRECT <id>] [BCAST] [PREFIX <prefix> [...]]",
                   b"         [OPTIN] [OPTOUT] [NOLOOP]", b"    Control server assisted client side caching.")),
    (b"trackinginfo", (b"TRACKINGINFO", b"    Report tracking status for the current connection.")),
    (b"no-evict", (b"NO-EVICT (ON|OFF)", b"    Protect current client connection from eviction.")),
    (b"no-touch", (b"NO-TOUCH (ON|OFF)", b"    Will not touch LRU/LFU stats when this mode is on.")),
)


@command("client|help")
def client_help(ctx, args):
    subs = registry.TABLE[b"client"].subcommands
    out = [b"CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"]
    for name, lines in _CLIENT_HELP:
        sub = subs.get(name)
        if sub is not None and sub.handler is not None:
            out.extend(lines)
    out += [b"HELP", b"    Print this help."]
    return out


__all__ = ["ErrorReply"]
