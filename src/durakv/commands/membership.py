"""DURAKV IDENTITY and DURAKV JOIN: what the operator's tools (`durakv cluster create`, `add-node`; cluster/admin.py)
ask a node before placing it in a shard, and how they hand it its shard and its NATS identity
(cluster/membership.py). Both are admin commands (ACL @admin @dangerous), behind the node's password."""

import json

from .. import messages
from ..errors import CommandError
from ..protocol.resp import OK
from .registry import command

MAX_JOIN_BYTES = 64 * 1024


@command("durakv|identity")
def durakv_identity(ctx, args):
    return ctx.services.cluster.identity()


@command("durakv|join")
def durakv_join(ctx, args):
    raw = args[2]
    if len(raw) > MAX_JOIN_BYTES:
        raise CommandError(messages.JOIN_REFUSED.format("the document exceeds %d bytes" % MAX_JOIN_BYTES))
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise CommandError(messages.JOIN_REFUSED.format("the document is not JSON: %s" % exc)) from None
    ctx.services.cluster.join(doc)
    return OK


@command("durakv|help")
def durakv_help(ctx, args):
    return ["DURAKV <subcommand> [<arg> ...]. Subcommands are:",
            "IDENTITY",
            "    This node's id, availability zone, addresses, NATS public key and cluster membership.",
            "JOIN <document>",
            "    Join a cluster (sent by `durakv cluster create` / `add-node`).",
            "BACKUP BEGIN [AFTER <index>] | READ <token> SNAPSHOT|JOURNAL <from> <count> | END <token>",
            "    Copy this server's newest snapshot and the journal after it (sent by `durakv backup create`).",
            "HELP",
            "    Print this help."]
