"""`durakv backup create|list|verify|delete|expire` and `durakv restore` (the library: durakv/backup/).

    durakv backup create --to DIR|s3://BUCKET/PREFIX  (--host H --port P | --secrets DIR [--nats URLS] | --dir D)
    durakv backup list   --from DEST [--json]
    durakv backup verify --from DEST [ID ...]          (default: every complete backup)
    durakv backup delete --from DEST ID [ID ...]
    durakv backup expire --from DEST --retention-days N
    durakv restore --from DEST [--backup ID] [--at TIME] (--to DATADIR | --rdb FILE | --cluster HOST:PORT)

S3: --s3-endpoint-url, --s3-region, --s3-access-key-id and --s3-secret-access-key-file, or boto3's standard
environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL, ~/.aws). The secret is never taken on
the command line (it would show in `ps`).
"""

import argparse
import asyncio
import json
import ssl
import sys
import time

from ...backup.format import BackupError, iso_ms, parse_time
from ...backup.storage import open_storage
from ...cluster.passwords import SecretsError, add_password_options, password_from


def _s3_options(p):
    g = p.add_argument_group("S3-compatible storage (default: boto3's standard environment)")
    g.add_argument("--s3-endpoint-url", default=None, help="e.g. http://127.0.0.1:9000 for a local S3 server")
    g.add_argument("--s3-region", default=None)
    g.add_argument("--s3-access-key-id", default=None)
    g.add_argument("--s3-secret-access-key-file", default=None, help="a file holding the secret key")


def _storage(args, url):
    opts = {}
    if url.startswith("s3://"):
        secret = None
        if args.s3_secret_access_key_file:
            with open(args.s3_secret_access_key_file, encoding="utf-8") as f:
                secret = f.read().strip()
        opts = {"endpoint_url": args.s3_endpoint_url, "region": args.s3_region,
                "access_key_id": args.s3_access_key_id, "secret_access_key": secret}
    return open_storage(url, opts)


def _resp_options(p, who):
    g = p.add_argument_group(who)
    g.add_argument("--user", default=None, help="ACL user (an admin: DURAKV BACKUP is @admin)")
    add_password_options(g)
    g.add_argument("--tls", action="store_true")
    g.add_argument("--tls-cacert", default=None)


def _ssl(args):
    if not args.tls:
        return None
    return ssl.create_default_context(cafile=args.tls_cacert or None)


def _connect(args, host, port):
    from ...protocol.client import RespClient
    conn = RespClient(host, port, timeout_s=120.0, ssl_context=_ssl(args))
    password = password_from(args)
    if password:
        conn.execute(*(("AUTH", args.user, password) if args.user else ("AUTH", password)))
    return conn


def _say(quiet):
    return (lambda *a: None) if quiet else (lambda *a: print(*a, file=sys.stderr, flush=True))


def _cluster_admin(args):
    if args.secrets:
        from ...cluster.admin import ClusterAdmin
        nats = [u for u in (args.nats or "").split(",") if u] or None
        return ClusterAdmin(args.secrets, nats=nats)
    from ...cluster.local import LocalCluster
    return LocalCluster.load(args.dir).admin()


async def _create_cluster(args, storage, say):
    from ...backup.create import create_from_cluster
    from ...cluster.store import NatsStore
    admin = _cluster_admin(args)
    nc = await admin.connect_nats()
    try:
        store = await NatsStore(nc).open()

        def progress(what, a, b):
            if what == "shard":
                say("shard %s: copied up to entry %s" % (a, b))
        return await create_from_cluster(storage, store, nc, admin.secrets.cluster_id,
                                         retention_days=args.retention_days, progress=progress)
    finally:
        await nc.close()


def _cmd_create(args):
    say = _say(args.quiet)
    storage = _storage(args, args.to)
    t0 = time.monotonic()
    if args.host is not None or args.port is not None:
        from ...backup.create import create_from_server
        from ...backup.sources import RespSessions
        host, port = args.host or "127.0.0.1", args.port or 6379
        conn = _connect(args, host, port)
        try:
            manifest = create_from_server(storage, RespSessions(conn), "%s:%d" % (host, port),
                                          retention_days=args.retention_days)
        finally:
            conn.close()
    elif args.secrets or args.dir:
        manifest = asyncio.run(_create_cluster(args, storage, say))
    else:
        raise BackupError("name what to back up: --host/--port (a server), --secrets DIR (a cluster) or --dir D "
                          "(a local cluster)")
    elapsed = time.monotonic() - t0
    size = sum(s for _k, s in storage.list(manifest["id"]))
    if args.json:
        print(json.dumps({"id": manifest["id"], "seconds": round(elapsed, 3), "bytes": size,
                          "shards": [e["name"] for e in manifest["shards"]]}))
    else:
        print("backup %s: %d shard(s), %d bytes, in %.2f s -> %s" % (manifest["id"], len(manifest["shards"]), size,
                                                                   elapsed, storage.describe(manifest["id"])))
    return 0


def _table(headers, rows):
    cells = [[("-" if v is None else str(v)) for v in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    fmt = "  ".join("{:<%d}" % w for w in widths)
    return "\n".join([fmt.format(*headers).rstrip()] + [fmt.format(*r).rstrip() for r in cells])


def _cmd_list(args):
    from ...backup.create import list_backups
    rows = list_backups(_storage(args, args.source))
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(_table(["ID", "STATE", "KIND", "SHARDS", "BYTES", "RESTORES FROM", "RESTORES TO", "NOTE"],
                 [[r["id"], "complete" if r["complete"] else ("DAMAGED" if r["error"] else "incomplete"),
                   ("scheduled " if r.get("scheduled") else "") + (r["kind"] or ""), r["shards"], r["bytes"],
                   iso_ms(r["start_ms"]) if r["start_ms"] else ("(no snapshot)" if r["complete"] else None),
                   iso_ms(r["end_ms"]) if r["end_ms"] else None, r["error"] or ""] for r in rows]))
    return 0


def _cmd_verify(args):
    from ...backup.create import list_backups
    from ...backup.restore import verify
    storage = _storage(args, args.source)
    ids = args.ids or [r["id"] for r in list_backups(storage) if r["complete"] or r["error"]]
    if not ids:
        print("no backup in %s" % storage.url)
        return 1
    failed = 0
    for backup_id in ids:
        t0 = time.monotonic()
        try:
            results = verify(storage, backup_id)
        except BackupError as exc:
            failed += 1
            print("backup %s: FAILED: %s" % (backup_id, exc))
            continue
        print("backup %s: ok in %.2f s (%s)" % (backup_id, time.monotonic() - t0, "; ".join(
            "shard %s: snapshot %d + entries to %d, %d keys" % (r.name, r.snapshot_index, r.last_index, r.keys)
            for r in results)))
    return 1 if failed else 0


def _cmd_delete(args):
    from ...backup.create import delete_backup
    storage = _storage(args, args.source)
    for backup_id in args.ids:
        delete_backup(storage, backup_id)
        print("deleted %s" % backup_id)
    return 0


def _cmd_expire(args):
    from ...backup.create import expire_backups
    gone = expire_backups(_storage(args, args.source), args.retention_days)
    for backup_id in gone:
        print("expired %s" % backup_id)
    print("%d backup(s) expired" % len(gone))
    return 0


def _address(text):
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError("expected HOST:PORT, got %r" % text)
    return host.strip("[]"), int(port)


def build_parser():
    parser = argparse.ArgumentParser(prog="durakv backup", description=(
        "Backups of a running server or cluster: its newest snapshot plus the journal after it, copied to a "
        "directory or S3 without pausing the primaries."))
    sub = parser.add_subparsers(dest="action", required=True)
    cr = sub.add_parser("create", help="take a backup of a server (--host/--port) or a cluster (--secrets / --dir)")
    cr.add_argument("--to", required=True, help="DIR or s3://BUCKET/PREFIX")
    cr.add_argument("--host", default=None)
    cr.add_argument("--port", type=int, default=None)
    _resp_options(cr, "a single server")
    g = cr.add_argument_group("a cluster (its NATS, with the operator's identity)")
    g.add_argument("--secrets", default=None, help="the cluster's secrets directory")
    g.add_argument("--nats", default=None, help="NATS server URLs, comma-separated (default: the secrets' own)")
    g.add_argument("--dir", default=None, help="a local cluster's directory (`durakv cluster up`)")
    cr.add_argument("--retention-days", type=int, default=0,
                    help="how long the journal is kept for the next backup to continue from (0: 7 days)")
    cr.add_argument("--json", action="store_true")
    cr.add_argument("--quiet", action="store_true")
    _s3_options(cr)
    cr.set_defaults(func=_cmd_create)
    ls = sub.add_parser("list", help="the backups of a destination")
    ls.add_argument("--from", dest="source", required=True)
    ls.add_argument("--json", action="store_true")
    _s3_options(ls)
    ls.set_defaults(func=_cmd_list)
    vf = sub.add_parser("verify", help="check every checksum and replay each shard to its recorded end")
    vf.add_argument("--from", dest="source", required=True)
    vf.add_argument("ids", nargs="*", metavar="ID")
    _s3_options(vf)
    vf.set_defaults(func=_cmd_verify)
    dl = sub.add_parser("delete", help="delete backups")
    dl.add_argument("--from", dest="source", required=True)
    dl.add_argument("ids", nargs="+", metavar="ID")
    _s3_options(dl)
    dl.set_defaults(func=_cmd_delete)
    ex = sub.add_parser("expire", help="delete complete backups older than the retention (never the newest) and "
                                       "incomplete ones older than a day")
    ex.add_argument("--from", dest="source", required=True)
    ex.add_argument("--retention-days", type=int, required=True)
    _s3_options(ex)
    ex.set_defaults(func=_cmd_expire)
    return parser


def main(argv) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except BackupError as exc:
        print("durakv backup %s: %s" % (args.action, exc), file=sys.stderr)
        return 1
    except (OSError, ConnectionError) as exc:
        print("durakv backup %s: %s" % (args.action, exc), file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - RespError from the server, NATS errors: one line, not a traceback
        print("durakv backup %s: %s: %s" % (args.action, type(exc).__name__, exc), file=sys.stderr)
        return 1


# -- restore ---------------------------------------------------------------------------------------------------

def restore_parser():
    p = argparse.ArgumentParser(prog="durakv restore", description=(
        "Restore a backup, or the state at an instant within the kept backups (point-in-time restore), into a "
        "data directory, an RDB file, or a running cluster of any shard count."))
    p.add_argument("--from", dest="source", required=True, help="the backups' destination: DIR or s3://...")
    p.add_argument("--backup", default=None, help="a backup id (default: the newest complete one, or, with --at, "
                                                   "the ones the instant needs)")
    p.add_argument("--at", default=None, help="an instant: ISO-8601 (2026-12-06T05:00:00.250Z) or @unix-seconds")
    out = p.add_mutually_exclusive_group(required=True)
    out.add_argument("--to", default=None, help="an empty data directory: a server started on it serves the data")
    out.add_argument("--rdb", default=None, help="an RDB file (valkey-server loads it)")
    out.add_argument("--cluster", type=_address, default=None, help="HOST:PORT of a running durakv cluster (or "
                                                                  "server): keys restored on the primary of their slot")
    p.add_argument("--databases", type=int, default=None, help="--to: the server's databases (refuse keys beyond)")
    _resp_options(p, "--cluster: the target's credentials")
    p.add_argument("--json", action="store_true")
    _s3_options(p)
    return p


def restore_main(argv) -> int:
    args = restore_parser().parse_args(argv)
    try:
        return _restore(args)
    except (BackupError, SecretsError) as exc:
        print("durakv restore: %s" % exc, file=sys.stderr)
        return 1
    except (OSError, ConnectionError) as exc:
        print("durakv restore: %s" % exc, file=sys.stderr)
        return 1


def _restore(args):
    from ...backup import restore as rs
    storage = _storage(args, args.source)
    at_ms = parse_time(args.at) if args.at else None
    t0 = time.monotonic()
    p = rs.plan(storage, args.backup, at_ms)

    def progress(res, seconds):
        print("shard %s: snapshot %d + %d entries (to %d, committed %s) in %.2f s, %d keys" % (
            res.name, res.snapshot_index, res.entries, res.last_index,
            iso_ms(res.last_time_ms) if res.last_time_ms else "-", seconds, res.keys), file=sys.stderr, flush=True)
    keyspace, results = rs.materialize(storage, p, progress=None if args.json else progress)
    keys = sum(len(db.data) for db in keyspace.dbs)
    replayed = time.monotonic() - t0
    if args.to:
        index = max(r.last_index for r in results) if len(results) == 1 else 0
        rs.write_datadir(keyspace, args.to, index, args.databases)
        where = args.to
    elif args.rdb:
        rs.write_rdb(keyspace, args.rdb)
        where = args.rdb
    else:
        where = "%s:%d" % args.cluster
        _restore_cluster(args, keyspace)
    elapsed = time.monotonic() - t0
    doc = {"keys": keys, "seconds": round(elapsed, 3), "replay_seconds": round(replayed, 3), "backups": p.backups,
           "at": iso_ms(at_ms) if at_ms else None, "to": where,
           "shards": [r._asdict() for r in results]}
    if args.json:
        print(json.dumps(doc))
    else:
        print("restored %d keys from %s%s into %s in %.2f s" % (keys, ", ".join(p.backups),
                                                               " at %s" % iso_ms(at_ms) if at_ms else "", where,
                                                               elapsed))
    return 0


def _restore_cluster(args, keyspace):
    from ...backup.restore import key_records
    from ..migrate.target import Target
    host, port = args.cluster
    target = Target(host, port, ssl_context=_ssl(args), user=args.user, password=password_from(args))
    try:
        for rec in key_records(keyspace):
            if rec[0] == "function":
                target.write(0, ("FUNCTION", "LOAD", "REPLACE", rec[1]))
                continue
            db, key, payload, at = rec
            target.check_db(db)
            target.write(db, ("RESTORE", key, str(at), payload, "REPLACE", "ABSTTL"), key)
        target.flush()
    finally:
        target.close()
