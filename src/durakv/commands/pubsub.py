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


def _unsubscribe(ctx, args, kind):
    # Outside subscribed mode this answers as Valkey 7.2 and 8.0.2+ do (a confirmation with count 0):
    # 8.0.0-8.0.1's -NOSUB broke Celery and other clients and was reverted.
    return ctx.services.pubsub.unsubscribe(ctx.client, args[1:], kind)


@command("subscribe")
def subscribe(ctx, args):
    return ctx.services.pubsub.subscribe(ctx.client, args[1:], "channel")


@command("psubscribe")
def psubscribe(ctx, args):
    return ctx.services.pubsub.subscribe(ctx.client, args[1:], "pattern")


@command("ssubscribe")
def ssubscribe(ctx, args):
    if not ctx.may_block:
        raise CommandError(messages.DENY_BLOCKING.format("SSUBSCRIBE"))
    return ctx.services.pubsub.subscribe(ctx.client, args[1:], "shard")


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
    if ctx.services.replication.streaming():
        ctx.propagate_feed(b"PUBLISH", args[1], args[2])   # Valkey's replicas deliver it to their subscribers
    return ctx.services.pubsub.publish(args[1], args[2])


@command("spublish")
def spublish(ctx, args):
    if ctx.services.replication.streaming():
        ctx.propagate_feed(b"SPUBLISH", args[1], args[2])
    return ctx.services.pubsub.publish(args[1], args[2], shard=True)


# -- PUBSUB ---------------------------------------------------------------------------------------

def _syntax(args):
    return CommandError(messages.SUBCOMMAND_SYNTAX.format(args[1].decode("utf-8", "replace"), "PUBSUB"))


@command("pubsub|channels")
def pubsub_channels(ctx, args):
    if len(args) > 3:
        raise _syntax(args)
    return ctx.services.pubsub.channels(args[2] if len(args) == 3 else None)


@command("pubsub|shardchannels")
def pubsub_shardchannels(ctx, args):
    if len(args) > 3:
        raise _syntax(args)
    return ctx.services.pubsub.channels(args[2] if len(args) == 3 else None, shard=True)


@command("pubsub|numsub")
def pubsub_numsub(ctx, args):
    services = ctx.services
    out = []
    for ch in args[2:]:
        out.append(ch)
        out.append(services.pubsub.numsub(ch))
    return out


@command("pubsub|shardnumsub")
def pubsub_shardnumsub(ctx, args):
    services = ctx.services
    out = []
    for ch in args[2:]:
        out.append(ch)
        out.append(services.pubsub.numsub(ch, shard=True))
    return out


@command("pubsub|numpat")
def pubsub_numpat(ctx, args):
    return ctx.services.pubsub.numpat()


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
