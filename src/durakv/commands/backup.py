"""DURAKV BACKUP: a single server's newest snapshot and the journal after it, copied by `durakv backup create
--host/--port` (server/backup.py says why over RESP and what a session pins). Admin-only (ACL @admin
@dangerous). The reads run on the off-loop workers (Pipeline.off_loop): the event loop never reads a file."""

from .. import messages
from ..errors import CommandError
from ..protocol.resp import OK
from .args import ArgCursor
from .base import parse_nonneg_int
from .registry import command

MAX_COUNT = 64 * 1024 * 1024          # bytes one READ may ask for (server/backup.MAX_READ_BYTES)


def _reraise(result):
    if isinstance(result, Exception):
        if isinstance(result, CommandError):
            raise result
        raise CommandError(messages.BACKUP_READ_FAILED.format(result))
    return result


def _flat(doc: dict) -> list:
    out = []
    for k, v in doc.items():
        out.append(k.encode())
        out.append(v if isinstance(v, int) else str(v).encode())
    return out


@command("durakv|backup")
def durakv_backup(ctx, args):
    backups = ctx.services.persistence.backups()
    c = ArgCursor(args, 2)
    op = c.next_lower()
    if op == b"begin":
        after = None
        while c:
            opt = c.next_lower()
            if opt == b"after":
                after = parse_nonneg_int(c.next())
            else:
                raise CommandError(messages.SYNTAX)
        return _flat(backups.begin(after))
    if op == b"read":
        session = backups.session(c.next().decode("ascii", "replace"))
        what = c.next_lower()
        start = parse_nonneg_int(c.next())
        count = parse_nonneg_int(c.next())
        if c:
            raise CommandError(messages.SYNTAX)
        count = min(count, MAX_COUNT)
        if what == b"snapshot":
            work = lambda: backups.read_snapshot(session, start, count)  # noqa: E731
            finish = lambda _ctx, result: _reraise(result)  # noqa: E731
        elif what == b"journal":
            work = lambda: backups.read_journal(session, start, max(1, count))  # noqa: E731

            def finish(_ctx, result):
                return [[i, e, t, p] for i, e, t, p in _reraise(result)]
        else:
            raise CommandError(messages.SYNTAX)
        deferred = ctx.pipeline.off_loop(ctx, args, (), work, finish)
        if deferred is None:        # MULTI or a script: no worker to hand it to
            try:
                result = work()
            except Exception as exc:  # noqa: BLE001 - handed to finish as off_loop would
                result = exc
            return finish(ctx, result)
        return deferred
    if op == b"end":
        token = c.next().decode("ascii", "replace")
        keep_from = keep_until = None
        while c:
            opt = c.next_lower()
            if opt == b"keep-journal-from":
                keep_from = parse_nonneg_int(c.next())
                keep_until = parse_nonneg_int(c.next())
            else:
                raise CommandError(messages.SYNTAX)
        backups.end(token, keep_from, keep_until)
        return OK
    raise CommandError(messages.SYNTAX)
