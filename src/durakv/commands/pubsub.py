"""Pub/sub commands: SUBSCRIBE PSUBSCRIBE SSUBSCRIBE, their UNSUBSCRIBEs, PUBLISH SPUBLISH and PUBSUB.

The registry and delivery live in server/pubsub.py. Confirmations are pushes: one array (RESP2) or push
(RESP3) per channel, returned together as already-encoded bytes. PUBLISH changes no data: no effects, it is
not journaled. A client with subscriptions is in "subscribed mode"; in RESP2 it may then only run the
commands server/notify.py allows (checked before dispatch, as Valkey's processCommand does).
"""

from .. import messages
from ..errors import CommandError
from ..protocol.resp import Raw
from .registry import command


def _conn(ctx):
    server = ctx.server
    conn = server.clients.get(ctx.client.id) if server is not None else None
    if conn is None:
        raise CommandError("ERR pub/sub needs a client connection")
    return conn


def _subscribed(conn) -> bool:
    return conn.subs is not None and conn.subs.total() > 0


def _confirmations(ctx, conn, raw):
    """Subscribe/unsubscribe confirmations are pushes in Valkey (CLIENT_PUSHING, in RESP2 too), so
    CLIENT REPLY OFF / SKIP does not silence them: under it they go out as pushes and the command's
    own (empty) reply is what gets dropped."""
    s = ctx.client
    if s.reply_off or s.reply_skip:
        conn.push(raw)
        return Raw(b"")
    return raw


def _unsubscribe(ctx, args, kind):
    # Outside subscribed mode too: one confirmation per channel with a count of 0 (or one with a null
    # channel), as Valkey 7.2 and 8.0.2+; 8.0.0-8.0.1's -NOSUB broke Celery and was reverted.
    conn = _conn(ctx)
    return _confirmations(ctx, conn, ctx.server.pubsub.unsubscribe(conn, args[1:], kind))


def _subscribe(ctx, args, kind):
    conn = _conn(ctx)
    return _confirmations(ctx, conn, ctx.server.pubsub.subscribe(conn, args[1:], kind))


@command("subscribe")
def subscribe(ctx, args):
    return _subscribe(ctx, args, "channel")


@command("psubscribe")
def psubscribe(ctx, args):
    return _subscribe(ctx, args, "pattern")


@command("ssubscribe")
def ssubscribe(ctx, args):
    if not ctx.may_block:
        raise CommandError(messages.DENY_BLOCKING.format("SSUBSCRIBE"))
    return _subscribe(ctx, args, "shard")


@command("unsubscribe")
def unsubscribe(ctx, args):
    return _unsubscribe(ctx, args, "channel")


@command("punsubscribe")
def punsubscribe(ctx, args):
    return _unsubscribe(ctx, args, "pattern")


@command("sunsubscribe")
def sunsubscribe(ctx, args):
    return _unsubscribe(ctx, args, "shard")


@command("publish")
def publish(ctx, args):
    server = ctx.server
    if server is None:
        return 0
    return server.pubsub.publish(args[1], args[2])


@command("spublish")
def spublish(ctx, args):
    server = ctx.server
    if server is None:
        return 0
    return server.pubsub.publish(args[1], args[2], shard=True)


# -- PUBSUB ---------------------------------------------------------------------------------------

def _syntax(args):
    return CommandError(messages.SUBCOMMAND_SYNTAX.format(args[1].decode("utf-8", "replace"), "PUBSUB"))


@command("pubsub|channels")
def pubsub_channels(ctx, args):
    if len(args) > 3:
        raise _syntax(args)
    return ctx.server.pubsub.channel_list(args[2] if len(args) == 3 else None)


@command("pubsub|shardchannels")
def pubsub_shardchannels(ctx, args):
    if len(args) > 3:
        raise _syntax(args)
    return ctx.server.pubsub.channel_list(args[2] if len(args) == 3 else None, shard=True)


@command("pubsub|numsub")
def pubsub_numsub(ctx, args):
    ps = ctx.server.pubsub
    out = []
    for ch in args[2:]:
        out.append(ch)
        out.append(ps.numsub(ch))
    return out


@command("pubsub|shardnumsub")
def pubsub_shardnumsub(ctx, args):
    ps = ctx.server.pubsub
    out = []
    for ch in args[2:]:
        out.append(ch)
        out.append(ps.numsub(ch, shard=True))
    return out


@command("pubsub|numpat")
def pubsub_numpat(ctx, args):
    return len(ctx.server.pubsub.patterns)


@command("pubsub|help")
def pubsub_help(ctx, args):
    return [b"PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            b"CHANNELS [<pattern>]",
            b"    Return the currently active channels matching a <pattern> (default: '*').",
            b"NUMPAT",
            b"    Return number of subscriptions to patterns.",
            b"NUMSUB [<channel> ...]",
            b"    Return the number of subscribers for the specified channels, excluding",
            b"    pattern subscriptions(default: no channels).",
            b"SHARDCHANNELS [<pattern>]",
            b"    Return the currently active shard level channels matching a <pattern> (default: '*').",
            b"SHARDNUMSUB [<shardchannel> ...]",
            b"    Return the number of subscribers for the specified shard level channel(s)",
            b"HELP",
            b"    Print this help."]
