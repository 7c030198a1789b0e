"""durakv command line: `durakv server [CONFIG_FILE] [--name value ...]` and the tools."""

import argparse
import logging
import os
import sys

from .config import Config, argv_to_config, fatal_config_text
from .errors import ConfigError, DataDirInUse, JournalCorrupt

_LEVELS = {"debug": logging.DEBUG, "verbose": logging.INFO, "notice": logging.INFO, "warning": logging.WARNING,
           "nothing": logging.CRITICAL + 10}


def _setup_logging(config):
    handler = logging.FileHandler(config["logfile"]) if config["logfile"] else logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(process)d:M %(asctime)s %(levelname).1s %(name)s: %(message)s",
                                           "%d %b %Y %H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(_LEVELS.get(config["loglevel"], logging.INFO))


USAGE = """Usage: durakv server [/path/to/valkey.conf] [options] [-]
       durakv server - (read config from stdin)
       durakv server -v or --version
       durakv server -h or --help

Examples:
       durakv server (run the server with default conf)
       echo 'maxmemory 128mb' | durakv server -
       durakv server /etc/valkey/6379.conf
       durakv server --port 7777
       durakv server --port 7777 --durability async
       durakv server /etc/myvalkey.conf --loglevel verbose -
       durakv server /etc/myvalkey.conf --loglevel verbose
"""


def load_config(argv, stdin=None):
    """valkey-server's command line: an optional config file first, then `--name value` options; a
    lone `-` (first or last) reads more config lines from stdin. As valkey-server does, the file, then stdin,
    then the options (argv_to_config) are read as one text, so an error names its line in that text."""
    config = Config()
    args = list(argv)
    path = None
    if args and not args[0].startswith("-"):
        path = args.pop(0)
    from_stdin = False
    for j in (0, len(args) - 1):
        if args and args[j] == "-":
            from_stdin = True
            args.pop(j)
            break
    text = b""
    if path is not None:
        config.config_file = os.path.abspath(path)
        with open(path, "rb") as f:
            text = f.read()
    if from_stdin:
        data = (stdin or sys.stdin).read()
        text += data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data
    text += b"\n" + argv_to_config(args)
    config.load_text(text, path or "(command line)")
    config.check()
    return config


def run_server(argv):
    # Valkey rewrites its process title; durakv keeps its command line but blanks the secrets in it, so that
    # `ps` and /proc/PID/cmdline stop showing a --requirepass given there (server/proctitle.py). First thing:
    # the window in which they show is the interpreter's start-up and this module's imports (asyncio is
    # imported below, once they are hidden).
    from .server.proctitle import redact_process_secrets
    redact_process_secrets()
    if argv and argv[0] in ("-h", "--help"):
        sys.stderr.write(USAGE)
        return 1  # as valkey-server's usage()
    if argv and argv[0] in ("-v", "--version"):
        from . import VALKEY_VERSION, __version__
        print(f"durakv server v={__version__} valkey={VALKEY_VERSION} python={sys.version.split()[0]}")
        return 0
    from . import __version__
    try:
        config = load_config(argv)
    except ConfigError as exc:
        sys.stderr.write(fatal_config_text(exc, __version__))
        return 1
    except OSError as exc:
        # loadServerConfig: "Fatal error, can't open config file '%s': %s" and exit 1
        print("Fatal error, can't open config file '%s': %s" % (exc.filename, exc.strerror), file=sys.stderr)
        return 1
    _setup_logging(config)
    import asyncio
    if config.tls_needs_ca():
        # as valkey-server: two log lines and exit code 1 (tls.c tlsConfigure, server.c initListeners)
        from . import messages
        log = logging.getLogger("durakv.server")
        log.warning(messages.TLS_NO_CA)
        log.warning(messages.TLS_CONFIGURE_FAILED)
        return 1
    try:
        import uvloop
        uvloop.install() if hasattr(uvloop, "install") else None
    except ImportError:
        pass
    from .server.server import Server

    async def main():
        server = Server(config)
        await server.start()
        await server.serve_until_shutdown()
        # Ends here, not by returning: asyncio.run would cancel every task left on the loop and wait for each to
        # finish, and one that swallowed its cancellation (a retry loop catching the wrong exception) kept a
        # cluster node serving its slot migration 10 s past "durakv stopped", until the launcher killed it.
        _exit_without_joining_workers(0)

    try:
        if "uvloop" in sys.modules:
            import uvloop
            uvloop.run(main()) if hasattr(uvloop, "run") else asyncio.run(main())
        else:
            asyncio.run(main())
    except DataDirInUse as exc:
        # A fatal configuration error in Valkey's terms: exit 1, and say so on stderr even with a logfile.
        logging.getLogger("durakv").critical("cannot start: %s", exc)
        if config["logfile"]:
            print(f"*** FATAL CONFIG ERROR *** {exc}", file=sys.stderr)
        return 1
    except ConfigError as exc:  # found once the server is built (the ACL users: `user` lines, the aclfile)
        sys.stderr.write(fatal_config_text(exc, __version__))
        return 1
    except JournalCorrupt as exc:
        logging.getLogger("durakv").critical("start-up stopped: %s", exc)
        return 2
    except OSError as exc:
        logging.getLogger("durakv").critical("cannot start: %s", exc)
        return 1
    except KeyboardInterrupt:
        pass
    _exit_without_joining_workers(0)


def _exit_without_joining_workers(code):
    """The server's last step after a graceful shutdown: Server.close() has run (the journal is closed, everything
    acknowledged is on disk, the data directory's lock released), so the process ends here, from the loop itself
    (no task left on it can hold the end up). Not by returning:
    the interpreter would join every worker thread at exit (concurrent.futures does), and a worker of the
    off-loop pool in a MIGRATE exchange with a silent target holds on until the command's timeout, so a SIGTERM
    left the server running long after "durakv stopped" (and `durakv cluster down` killed it 10 s later).
    Valkey's shutdown does not wait for a MIGRATE either."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


COMMANDS = ("server", "cluster", "bench", "chaos", "verify", "import", "migrate", "backup", "restore")


def name_process(command):
    """The process's name as top, ps -o comm, pidstat and process accounting show it: `durakv-server`,
    `durakv-cluster`, ... instead of `python` (valkey-server's processes are `valkey-server`). It tells durakv's
    processes apart from each other and from other Python programs on a machine; the command line is unchanged.
    Linux only (the main thread's /proc/self/comm, at most 15 bytes; threads started after it inherit it)."""
    try:
        with open("/proc/self/comm", "w") as f:
            f.write(("durakv-" + command)[:15])
    except OSError:
        pass


def main(argv=None):
    from .logs import quiet_asyncio_ssl_notice
    quiet_asyncio_ssl_notice()
    if argv is None:
        argv = sys.argv[1:]
        name_process(argv[0] if argv and argv[0] in COMMANDS else "server")
    argv = list(argv)
    parser = argparse.ArgumentParser(prog="durakv", description="A durable Valkey-compatible data store.")
    parser.add_argument("command", nargs="?", default="server",
                        choices=COMMANDS,
                        help="server: start a node (default); cluster: a local multi-AZ cluster; "
                             "bench: load generator (bench compare: durakv vs redis/valkey); "
                             "chaos: faults on a local cluster; verify: the seed's verification scenarios; "
                             "import: an RDB file into a running server or cluster; migrate: a running "
                             "Valkey/Redis (or cluster) into durakv, online; backup: backups of a server or "
                             "cluster (create, list, verify, delete, expire); restore: a backup, or an instant "
                             "(--at), into a data directory, an RDB file or a cluster")
    if not argv or argv[0] in ("-h", "--help"):
        parser.print_help()
        return 0 if argv else run_server([])
    cmd, rest = argv[0], argv[1:]
    if cmd == "server":
        return run_server(rest)
    if cmd == "cluster":
        from .cluster.cli import main as cluster_main
        return cluster_main(rest)
    if cmd == "bench":
        from .tools.bench.cli import main as bench_main
        return bench_main(rest)
    if cmd == "chaos":
        from .tools.chaos.cli import main as chaos_main
        return chaos_main(rest)
    if cmd == "verify":
        from .tools.verify.cli import main as verify_main
        return verify_main(rest)
    if cmd == "import":
        from .tools.migrate.cli import import_main
        return import_main(rest)
    if cmd == "migrate":
        from .tools.migrate.cli import migrate_main
        return migrate_main(rest)
    if cmd == "backup":
        from .tools.backup.cli import main as backup_main
        return backup_main(rest)
    if cmd == "restore":
        from .tools.backup.cli import restore_main
        return restore_main(rest)
    parser.error(f"unknown command {cmd!r}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
