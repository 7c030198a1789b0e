"""MULTI EXEC DISCARD WATCH UNWATCH. EXEC's effects leave as one batch (one journal entry).

Queueing, the checks at EXEC time and running the queue are the pipeline's (commands/pipeline.py)."""

from .. import messages
from ..errors import CommandError
from ..protocol.resp import OK
from .registry import command


@command("multi")
def multi(ctx, args):
    s = ctx.client
    s.in_multi = True   # MULTI inside MULTI never gets here: it is flagged no-multi (the pipeline refuses it)
    s.multi_queue = []
    s.multi_bytes = 0
    s.multi_error = False
    return OK


@command("exec")
def exec_(ctx, args):
    s = ctx.client
    if not s.in_multi:
        raise CommandError(messages.EXEC_WITHOUT_MULTI)
    return ctx.pipeline.exec_queued(s, ctx)


@command("discard")
def discard(ctx, args):
    s = ctx.client
    if not s.in_multi:
        raise CommandError(messages.DISCARD_WITHOUT_MULTI)
    ctx.pipeline.discard(s)
    return OK


@command("watch")
def watch(ctx, args):
    s = ctx.client
    for key in args[1:]:
        ctx.pipeline.watch(s, ctx.db.id, key)
    return OK


@command("unwatch")
def unwatch(ctx, args):
    ctx.pipeline.unwatch_all(ctx.client)
    return OK
