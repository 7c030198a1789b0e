"""MULTI EXEC DISCARD WATCH UNWATCH. EXEC's effects leave as one batch (one journal entry)."""

from .. import messages
from ..errors import CommandError
from ..protocol.resp import OK
from .registry import command


@command("multi")
def multi(ctx, args):
    s = ctx.client
    if s.in_multi:
        raise CommandError(messages.MULTI_NESTED)
    s.in_multi = True
    s.multi_queue = []
    s.multi_error = False
    return OK


@command("exec")
def exec_(ctx, args):
    s = ctx.client
    if not s.in_multi:
        raise CommandError(messages.EXEC_WITHOUT_MULTI)
    reply, effects = ctx.dispatcher.exec_transaction(s)
    if effects:
        ctx.effects.extend(effects)
    return reply


@command("discard")
def discard(ctx, args):
    s = ctx.client
    if not s.in_multi:
        raise CommandError(messages.DISCARD_WITHOUT_MULTI)
    s.in_multi = False
    s.multi_queue = []
    s.multi_error = False
    ctx.dispatcher.unwatch_all(s)
    return OK


@command("watch")
def watch(ctx, args):
    s = ctx.client
    if s.in_multi:
        raise CommandError(messages.WATCH_IN_MULTI)
    for key in args[1:]:
        ctx.dispatcher.watch(s, ctx.db.id, key)
    return OK


@command("unwatch")
def unwatch(ctx, args):
    ctx.dispatcher.unwatch_all(ctx.client)
    return OK
