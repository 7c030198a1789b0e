"""`durakv import FILE --target HOST:PORT [--tls ...] [--user U --password P] [--batch N]`."""

import argparse
import ssl
import sys

from ...keyspace.rdbvalue import RdbError
from .importer import import_rdb, progress_line
from .target import BATCH_WRITES, Target, TargetError


def _address(text):
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def _ssl_context(args):
    if not args.tls:
        return None
    ctx = ssl.create_default_context(cafile=args.tls_cacert or None)
    if args.tls_skip_verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if args.tls_cert:
        ctx.load_cert_chain(args.tls_cert, args.tls_key or None)
    return ctx


def import_main(argv):
    p = argparse.ArgumentParser(prog="durakv import", description=(
        "Streams a Valkey/Redis RDB file (dump.rdb, a snapshot export) into a running durakv server or cluster: "
        "every key restored on the primary owning its slot, acknowledged (in sync mode: committed), with its "
        "TTL; function libraries loaded on every primary."))
    p.add_argument("file")
    p.add_argument("--target", required=True, type=_address, help="any node of the durakv cluster, or a server")
    p.add_argument("--tls", action="store_true")
    p.add_argument("--tls-cacert", default="")
    p.add_argument("--tls-cert", default="")
    p.add_argument("--tls-key", default="")
    p.add_argument("--tls-skip-verify", action="store_true")
    p.add_argument("--user", default=None)
    p.add_argument("--password", default=None)
    p.add_argument("--batch", type=int, default=BATCH_WRITES, help="writes per node per round trip")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    args = p.parse_args(argv)
    try:
        target = Target(args.target[0], args.target[1], ssl_context=_ssl_context(args), user=args.user,
                        password=args.password, batch_writes=max(1, args.batch))
    except (OSError, TargetError) as exc:
        print(f"durakv import: cannot reach the target {args.target[0]}:{args.target[1]}: {exc}", file=sys.stderr)
        return 1
    try:
        counts = import_rdb(args.file, target, None if args.quiet else progress_line)
    except (RdbError, TargetError, OSError) as exc:
        print(f"\ndurakv import: stopped: {exc} ({target.acknowledged:,} writes acknowledged before)",
              file=sys.stderr)
        return 1
    finally:
        target.close()
    if not args.quiet:
        sys.stderr.write("\n")
    print(f"imported {counts.keys:,} keys in {len(counts.databases)} database(s) and {counts.functions} function "
          f"librar{'y' if counts.functions == 1 else 'ies'} from {args.file} into {args.target[0]}:{args.target[1]} "
          f"({'cluster, %d primaries' % len(target.primaries()) if target.cluster else 'standalone'}) in "
          f"{counts.seconds:.2f} s: {counts.keys_per_s():,.0f} keys/s; {target.acknowledged:,} writes "
          f"acknowledged, {target.redirects} redirected, {target.retries} retries")
    return 0
