"""`durakv import FILE --target HOST:PORT [...]` and `durakv migrate --source HOST:PORT --target HOST:PORT [...]`."""

import argparse
import ssl
import sys
import time

from ...cluster.passwords import SecretsError, add_password_options, password_from
from ...keyspace.rdbvalue import RdbError
from ...protocol.client import RespError
from .importer import import_rdb, progress_line
from .target import BATCH_WRITES, Target, TargetError

CUTOVER_WAIT_MAX_S = 7 * 24 * 3600.0    # --cutover-after/-lag/-stable: a week is beyond any migration's window


def _address(text):
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def _ssl_context(args, prefix=""):
    get = lambda name: getattr(args, prefix + name)   # noqa: E731
    if not get("tls"):
        return None
    ctx = ssl.create_default_context(cafile=get("tls_cacert") or None)
    if get("tls_skip_verify"):
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if get("tls_cert"):
        ctx.load_cert_chain(get("tls_cert"), get("tls_key") or None)
    return ctx


def _connection_options(p, prefix="", who="the target"):
    dash = prefix.replace("_", "-")
    p.add_argument(f"--{dash}tls", action="store_true", help=f"TLS to {who}")
    p.add_argument(f"--{dash}tls-cacert", default="")
    p.add_argument(f"--{dash}tls-cert", default="")
    p.add_argument(f"--{dash}tls-key", default="")
    p.add_argument(f"--{dash}tls-skip-verify", action="store_true")
    p.add_argument(f"--{dash}user", default=None)
    add_password_options(p, prefix, who=f"{who}'s")


def _passwords(p, args, *prefixes):
    """Each prefix's password (--pass, --pass-file, DURAKV_AUTH for the target) into args.PREFIXpassword."""
    for prefix in prefixes:
        try:
            setattr(args, prefix + "password", password_from(args, prefix))
        except SecretsError as exc:
            p.error(str(exc))


def import_main(argv):
    p = argparse.ArgumentParser(prog="durakv import", description=(
        "Streams a Valkey/Redis RDB file (dump.rdb, a snapshot export) into a running durakv server or cluster: "
        "every key restored on the primary owning its slot, acknowledged (in sync mode: committed), with its "
        "TTL; function libraries loaded on every primary."))
    p.add_argument("file")
    p.add_argument("--target", required=True, type=_address, help="any node of the durakv cluster, or a server")
    _connection_options(p)
    p.add_argument("--batch", type=int, default=BATCH_WRITES, help="writes per node per round trip")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    args = p.parse_args(argv)
    _passwords(p, args, "")
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
    if target.last_retry:
        print(f"last retried reply: {target.last_retry}")
    return 0


def migrate_main(argv):
    from .migrate import (CutoverTrigger, MigrateError, OffsetPoller, SourceLink, catch_up, cutover,
                          progress_line, source_primaries, verify)
    p = argparse.ArgumentParser(prog="durakv migrate", description=(
        "Moves a running Valkey/Redis (a standalone server, or every primary of a cluster) into a running durakv "
        "server or cluster online: a replica's full sync per source primary (the RDB streamed to a temporary "
        "file and restored on the owning durakv primaries), then the replication stream forwarded write by "
        "write, with REPLCONF ACK of what durakv acknowledged."))
    p.add_argument("--source", required=True, type=_address, help="the Valkey/Redis server, or any cluster node")
    p.add_argument("--target", required=True, type=_address, help="any node of the durakv cluster, or a server")
    _connection_options(p, "source_", "the source")
    _connection_options(p)
    p.add_argument("--verify", action="store_true", help="compare per-slot key counts and every key's value")
    p.add_argument("--verify-sample", type=int, default=None, metavar="N", help="compare N sampled keys' values")
    p.add_argument("--cutover", action="store_true",
                   help="after the full sync: pause the sources' writes, wait until the target has all, exit 0")
    p.add_argument("--cutover-after", type=float, default=None, metavar="S",
                   help="with --cutover: stream for S seconds after the full sync before cutting over (default 0); "
                        "with --cutover-lag: the longest to wait for the lag to settle (default: no limit)")
    p.add_argument("--cutover-lag", type=float, default=None, metavar="S",
                   help="with --cutover: cut over once every source streams and the target has stayed within S "
                        "seconds of each for --cutover-stable seconds")
    p.add_argument("--cutover-stable", type=float, default=2.0, metavar="S",
                   help="with --cutover-lag: how long the lag must stay within its bound (default 2)")
    p.add_argument("--cutover-hold-file", default=None, metavar="PATH",
                   help="with --cutover: no cut-over while PATH exists; delete it to let the cut-over go")
    p.add_argument("--duration", type=float, default=None,
                   help="without --cutover: stream for this many seconds, then stop (default: until Ctrl-C)")
    p.add_argument("--tmp-dir", default=None, help="where the full syncs' RDB files are written while loaded")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    _passwords(p, args, "source_", "")
    for name in ("cutover_after", "cutover_lag", "cutover_stable"):
        value = getattr(args, name)
        if value is not None and not 0 <= value <= CUTOVER_WAIT_MAX_S:
            p.error(f"--{name.replace('_', '-')} must be between 0 and {CUTOVER_WAIT_MAX_S:g} seconds")
    given = [name for name in ("cutover_after", "cutover_lag", "cutover_hold_file")
             if getattr(args, name) is not None]
    if given and not args.cutover:
        p.error(f"--{given[0].replace('_', '-')} is an option of --cutover")
    source_auth = (_ssl_context(args, "source_"), args.source_user, args.source_password)
    target_kw = dict(ssl_context=_ssl_context(args), user=args.user, password=args.password)
    started = time.monotonic()
    try:
        sources = source_primaries(args.source[0], args.source[1], *source_auth)
        seeds = [args.source] + [addr for addr, _slots in sources]
        links = [SourceLink(addr, source_auth, (args.target[0], args.target[1], target_kw), args.tmp_dir,
                            slots=slots, seeds=seeds)
                 for addr, slots in sources]
    except (OSError, RespError) as exc:
        print(f"durakv migrate: cannot reach the source {args.source[0]}:{args.source[1]}: {exc}", file=sys.stderr)
        return 1
    for link in links:
        link.start()

    def check():
        for link in links:
            if link.error is not None:
                raise MigrateError(f"{link.name}: {link.error}")

    poller = OffsetPoller(source_auth)
    last_poll = [0.0]
    # the lag trigger measures the lag in seconds from these polls: 4 a second make it a quarter second's
    poll_every_s = 1.0 if args.cutover_lag is None else 0.25

    def report():
        # polled with --quiet too: the lag in seconds at the cut-over is measured from these samples
        if time.monotonic() - last_poll[0] >= poll_every_s:
            poller.poll(links)
            last_poll[0] = time.monotonic()
        if not args.quiet:
            progress_line(links)

    lags = None
    try:
        report()
        while not all(link.loaded_event.wait(0.5) for link in links):
            report()
        check()
        loaded_s = time.monotonic() - started
        keys = sum(link.loaded.keys for link in links)
        report()
        if not args.quiet:
            sys.stderr.write("\n")
        print(f"full sync: {keys:,} keys from {len(links)} source primar{'y' if len(links) == 1 else 'ies'} in "
              f"{loaded_s:.2f} s ({keys / loaded_s if loaded_s else 0:,.0f} keys/s)", flush=True)
        if args.cutover:
            trigger = CutoverTrigger(args.cutover_lag, args.cutover_stable, args.cutover_after,
                                     args.cutover_hold_file)
            held = False
            while True:
                check()
                report()
                why = trigger.ready(links)
                if why is not None:
                    break
                if trigger.held and not held:
                    # said once per hold: an operator (or a test) sees the cut-over waits on the file alone
                    print(f"cut-over: ready, held while {args.cutover_hold_file} exists", flush=True)
                held = trigger.held
                time.sleep(0.1)
            check()
            print(f"cut-over: begins: {why}", flush=True)
            catch_up(links, poller, report=report)
            cut_started = time.monotonic()
            lags = cutover(links, source_auth)
            lag_bytes = sum(b for b, _s in lags.values())
            lag_s = max(s for _b, s in lags.values())
            print(f"cut-over: source writes paused, lag at the pause {lag_bytes:,} bytes ({lag_s:.3f} s), every "
                  f"source offset acknowledged by the target after {time.monotonic() - cut_started:.3f} s "
                  f"({time.monotonic() - started:.2f} s since the start); clients may switch to "
                  f"{args.target[0]}:{args.target[1]}", flush=True)
        else:
            until = None if args.duration is None else time.monotonic() + args.duration
            while until is None or time.monotonic() < until:
                check()
                report()
                time.sleep(0.5)
        for link in links:
            link.stop_event.set()
        for link in links:
            link.join(30)
        check()
    except KeyboardInterrupt:
        for link in links:
            link.stop_event.set()
        print("\ndurakv migrate: interrupted", file=sys.stderr)
        return 130
    except (MigrateError, TargetError, RdbError, OSError, RespError) as exc:
        print(f"\ndurakv migrate: stopped: {exc}", file=sys.stderr)
        return 1
    finally:
        poller.close()
    forwarded = sum(link.forwarded for link in links)
    redirects = sum(link.redirects for link in links)
    retries = sum(link.retries for link in links)
    resyncs = sum(link.resyncs for link in links)
    stale = sum(link.stale_deleted for link in links)
    split = sum(link.split_transactions for link in links)
    print(f"forwarded {forwarded:,} write(s) from the replication stream(s); {redirects} redirected, "
          f"{retries} retries; {resyncs} resynchronization(s) after a dropped source link, {stale} stale key(s) "
          f"removed; {split} transaction(s) split over target slots")
    for link in links:
        if link.target is not None and link.target.last_retry:
            print(f"{link.label}: last retried reply: {link.target.last_retry}")
    for link in links:
        if link.full_syncs > 1:
            print(f"{link.label}: resumed {link.full_syncs - 1} time(s) with a full sync after: "
                  + "; ".join(link.resync_reasons))
    if args.verify or args.verify_sample is not None:
        # the node named on the command line may have failed over meanwhile: the links know the primaries now
        known = [addr for link in links if link.target is not None for addr in link.target.primaries()]
        target = Target(args.target[0], args.target[1], seeds=known, **target_kw)
        try:
            dbs = sorted({db for link in links for db in link.databases})
            cluster_source = all(link.slots is not None for link in links)
            source_slots = {link.addr: link.slots for link in links} if cluster_source else None
            problems = verify([link.addr for link in links], source_auth, target, dbs, args.verify_sample,
                              source_slots=source_slots)
        finally:
            target.close()
        if problems:
            print("verify: %d difference(s): %s" % (len(problems), "; ".join(problems[:10])))
            if not args.cutover:
                print("verify: (without --cutover the sources kept taking writes after the streams stopped)")
            return 1
        what = f"{args.verify_sample} sampled keys" if args.verify_sample is not None else "every key"
        how = ("CLUSTER COUNTKEYSINSLOT on both" if cluster_source and target.cluster else "counted from SCAN of both")
        print(f"verify: per-slot key counts equal, {what} equal (per-slot counts: {how})")
    return 0
