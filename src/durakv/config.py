r"""One Config object with valkey.conf-style names (plus durakv's own), as the server and CONFIG see them.

Sources, later wins: built-in defaults, a config file (valkey.conf syntax: `name value ...` per line,
`#` comments, quoted arguments), then `--name value` command-line arguments. CONFIG GET/SET use the same names.

The file is read as Valkey reads it (config.c loadServerConfigFromString + sds.c sdssplitargs): lines split
on LF and trimmed, arguments split on blanks, "double quotes" with \n \r \t \b \a \\ \" and \xHH escapes,
'single quotes' with \' only; a closing quote must be followed by a blank; a single-valued option takes
exactly one argument. CONFIG REWRITE writes every string value the way Valkey's rewriteConfigStringOption
does (sdscatrepr: double-quoted, non-printable bytes escaped), so every value CONFIG SET accepts reads back
identically after a restart. Like Valkey, string options take any bytes (a newline in requirepass is a
valid password; it is escaped when written); what Valkey refuses, durakv refuses with Valkey's text: `save`
must be pairs of integers (seconds >= 1, changes >= 0), split on single spaces as CONFIG SET does.
"""

import fnmatch
import os

from .errors import ConfigError, with_path

_UNITS = {"b": 1, "k": 1000, "kb": 1024, "m": 1000**2, "mb": 1024**2, "g": 1000**3, "gb": 1024**3}


def parse_memory(text: str) -> int:
    t = text.strip().lower()
    for suffix in ("kb", "mb", "gb", "k", "m", "g", "b"):  # memtoull's units
        if t.endswith(suffix):
            num = t[: -len(suffix)]
            if not num.lstrip("-").isdigit():
                raise ValueError("argument must be a memory value")
            return int(num) * _UNITS[suffix]
    if not t.lstrip("-").isdigit():
        raise ValueError("argument must be a memory value")
    return int(t)


def _bool(text: str) -> bool:
    t = text.lower()
    if t in ("yes", "true", "1"):
        return True
    if t in ("no", "false", "0"):
        return False
    raise ValueError("argument must be 'yes' or 'no'")


UNSAFE_ENV = "DURAKV_TEST_UNSAFE"


def _unsafe_bool(text: str) -> bool:
    """A test-only switch that breaks a guarantee: refused unless the environment says this is a test."""
    value = _bool(text)
    if value and os.environ.get(UNSAFE_ENV) != "1":
        raise ValueError(f"it acknowledges writes that can be lost; it is for tests of the checkers only and is "
                         f"refused unless the environment has {UNSAFE_ENV}=1")
    return value


def _int_range(lo, hi):
    def parse(text):
        try:
            n = int(text)
            if not -(1 << 63) <= n < 1 << 63:
                raise ValueError     # Valkey's string2ll fails past a long long: not a range error
        except ValueError:
            raise ValueError("argument couldn't be parsed into an integer") from None
        if not lo <= n <= hi:
            raise ValueError(f"argument must be between {lo} and {hi} inclusive")
        return n
    return parse


def _memory(text):
    return parse_memory(text)


def _memory_nonnegative(text):
    n = parse_memory(text)
    if n < 0:
        raise ValueError("argument must be a memory value")
    return n


def _memory_range(lo, hi):
    def parse(text):
        n = parse_memory(text)
        if not lo <= n <= hi:
            raise ValueError(f"argument must be between {lo} and {hi} inclusive")
        return n
    return parse


def _enum(*choices):
    def parse(text):
        t = text.lower()
        if t not in choices:
            raise ValueError("argument(s) must be one of the following: " + ", ".join(choices))
        return t
    return parse


def _string(text):
    return text


_C_SPACE = " \t\n\v\f\r"
_DIGITS = "0123456789"
_LLONG_MAX = 2**63 - 1


def _strtoll(text):
    """C strtoll(text, &end, 10) with the check `*end == '\\0'`: the value, or None when text has anything
    after the number. Like C, leading blanks and a sign are allowed and an empty string is 0."""
    n = len(text)
    i = 0
    while i < n and text[i] in _C_SPACE:
        i += 1
    j = i + 1 if i < n and text[i] in "+-" else i
    k = j
    while k < n and text[k] in _DIGITS:
        k += 1
    if k == j:
        return 0 if n == 0 else None
    if k != n:
        return None
    value = int(text[j:k])
    value = -value if text[i] == "-" else value
    return max(-_LLONG_MAX - 1, min(_LLONG_MAX, value))


def _save_args(args):
    """Valkey's setConfigSaveOption: pairs of `seconds changes`; a single "" means no save points."""
    if len(args) == 1 and args[0] == "":
        args = []
    if len(args) % 2:
        raise ValueError("Invalid save parameters")
    values = []
    for j, arg in enumerate(args):
        v = _strtoll(arg)
        if v is None or (j % 2 == 0 and v < 1) or (j % 2 == 1 and v < 0):
            raise ValueError("Invalid save parameters")
        values.append(v)
    return " ".join(str(v) for v in values)


def _save(text):
    # CONFIG SET splits a multi-argument value on single spaces (config.c performInterfaceSet)
    return _save_args(text.split(" ") if text else [])


_OBUF_CLASSES = {"normal": "normal", "slave": "slave", "replica": "slave", "pubsub": "pubsub"}
OBUF_DEFAULT = "normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60"


def _obuf_args(args):
    """updateClientOutputBufferLimit: groups of `<class> <hard> <soft> <soft_seconds>`; the classes given are
    replaced, the others keep their values (merged in Config._store). Stored as CONFIG GET shows it."""
    if len(args) == 1 and args[0] == "":
        args = []
    if len(args) % 4:
        raise ValueError("Wrong number of arguments in buffer limit configuration.")
    given = {}
    for j in range(0, len(args), 4):
        cls = _OBUF_CLASSES.get(args[j].lower())
        if cls is None:
            raise ValueError("Invalid client class specified in buffer limit configuration.")
        try:
            hard, soft = parse_memory(args[j + 1]), parse_memory(args[j + 2])
        except ValueError:
            raise ValueError("Error in hard, soft or soft_seconds setting in buffer limit configuration.") from None
        seconds = _strtoll(args[j + 3])
        if seconds is None or seconds < 0:
            raise ValueError("Error in hard, soft or soft_seconds setting in buffer limit configuration.")
        given[cls] = (hard, soft, seconds)
    return " ".join("%s %d %d %d" % ((cls,) + limits) for cls, limits in given.items())


def _obuf(text):
    return _obuf_args(text.split(" ") if text else [])


def obuf_limits(value) -> dict:
    """{class: (hard_bytes, soft_bytes, soft_seconds)} of a client-output-buffer-limit value."""
    parts = value.split()
    return {parts[j]: (int(parts[j + 1]), int(parts[j + 2]), int(parts[j + 3])) for j in range(0, len(parts), 4)}


def _obuf_merge(current, given):
    limits = obuf_limits(current or OBUF_DEFAULT)
    limits.update(obuf_limits(given))
    return " ".join("%s %d %d %d" % ((cls,) + limits[cls]) for cls in ("normal", "slave", "pubsub"))


def _words(text):
    return " ".join(a for a in text.split(" ") if a) if text else ""


def _fmt_bool(v):
    return "yes" if v else "no"


def _fmt(v):
    if isinstance(v, bool):
        return _fmt_bool(v)
    if v is None:
        return ""
    return str(v)


# Options Valkey changes at runtime that durakv fixes at start-up (its listeners, data directory, TLS files and
# AZ), and durakv's own start-up options (its journal and shard): CONFIG SET to the value they have is accepted
# as the no-op it is; another value is refused as immutable. (Valkey's own immutable options stay refused.)
FIXED_AT_START = frozenset({"port", "bind", "dir", "tls-port", "tls-cert-file", "tls-key-file", "tls-ca-cert-file",
                            "tls-ca-cert-dir", "tls-auth-clients", "availability-zone",
                            "journal-nats-tls-ca-file", "journal-backend", "journal-nats-servers",
                            "journal-max-appends-in-flight", "shard", "node-id", "announce-ip",
                            "journal-segment-bytes", "journal-fsync", "debug-ack-before-commit"})


class Option:
    """One config name. `multi`: takes several arguments (Valkey's MULTI_ARG_CONFIG); then `parse_args`
    turns the argument list into the value, and `parse` a CONFIG SET string (split on spaces)."""

    __slots__ = ("name", "default", "parse", "mutable", "aliases", "sensitive", "multi", "parse_args", "help",
                 "merge")

    def __init__(self, name, default, parse, mutable=True, aliases=(), sensitive=False, multi=False,
                 parse_args=None, help="", merge=None):
        self.name = name
        self.default = default
        self.parse = parse
        self.mutable = mutable
        self.aliases = aliases
        self.sensitive = sensitive
        self.multi = multi
        self.parse_args = parse_args or (lambda args: parse(" ".join(args)))
        self.help = help
        self.merge = merge          # (current value, parsed value) -> value stored, for partial settings

    def config_text(self, value) -> str:
        """The value as CONFIG REWRITE writes it after the name."""
        if self.multi:
            return " ".join(_repr_if_needed(a) for a in value.split(" ")) if value else '""'
        if self.parse is _string:
            return quote_config_value(value)
        return _fmt(value)


OPTIONS = [
    Option("port", 6379, _int_range(0, 65535), mutable=False),
    Option("bind", "127.0.0.1 -::1", _words, mutable=False, multi=True),
    Option("dir", "./durakv-data", _string, mutable=False),
    Option("requirepass", "", _string, sensitive=True),
    Option("aclfile", "", _string, mutable=False),
    Option("acllog-max-len", 128, _int_range(0, 2**63 - 1)),
    Option("acl-pubsub-default", "resetchannels", _enum("allchannels", "resetchannels")),
    Option("maxmemory", 0, _memory),
    Option("maxmemory-policy", "noeviction", _enum("noeviction", "allkeys-lru", "allkeys-lfu", "allkeys-random",
                                                   "volatile-lru", "volatile-lfu", "volatile-random",
                                                   "volatile-ttl")),
    Option("maxmemory-samples", 5, _int_range(1, 64)),
    Option("lfu-log-factor", 10, _int_range(0, 2**31 - 1)),
    Option("lfu-decay-time", 1, _int_range(0, 2**31 - 1)),
    Option("maxclients", 10000, _int_range(1, 2**31 - 1)),
    Option("timeout", 0, _int_range(0, 2**31 - 1)),
    Option("tcp-keepalive", 300, _int_range(0, 2**31 - 1)),
    Option("tcp-backlog", 511, _int_range(0, 2**31 - 1), mutable=False),
    Option("databases", 16, _int_range(1, 2**31 - 1), mutable=False),
    Option("hz", 10, _int_range(1, 500)),
    # Accepted for tools that set it around SYNC (Valkey's test suite); durakv's replicas follow the journal
    Option("repl-ping-replica-period", 10, _int_range(1, 2**31 - 1), aliases=("repl-ping-slave-period",)),
    Option("proto-max-bulk-len", 512 * 1024 * 1024, _memory),
    Option("client-query-buffer-limit", 1024 * 1024 * 1024, _memory),
    Option("client-output-buffer-limit", OBUF_DEFAULT, _obuf, multi=True, parse_args=_obuf_args, merge=_obuf_merge),
    Option("client-held-replies-limit", 32 * 1024 * 1024, _memory,
           help="durakv: bytes of replies one client may have waiting for their journal commit (sync); past "
                "it the server stops reading that client's requests until commits catch up"),
    Option("metrics-port", 0, _int_range(0, 65535), mutable=False,
           help="durakv: serve durakv's own metrics in Prometheus text format on this port (HTTP /metrics, on "
                "the first bind address); 0: off"),
    Option("tls-port", 0, _int_range(0, 65535), mutable=False),
    Option("tls-cert-file", "", _string, mutable=False),
    Option("tls-key-file", "", _string, mutable=False),
    Option("tls-ca-cert-file", "", _string, mutable=False),
    Option("tls-ca-cert-dir", "", _string, mutable=False),
    Option("tls-auth-clients", "yes", _enum("yes", "no", "optional"), mutable=False),
    Option("loglevel", "notice", _enum("debug", "verbose", "notice", "warning", "nothing")),
    Option("logfile", "", _string, mutable=False),
    Option("daemonize", False, _bool, mutable=False),
    Option("pidfile", "", _string, mutable=False),
    Option("save", "", _save, multi=True, parse_args=_save_args),
    Option("appendonly", False, _bool),
    # Accepted, no effect: durakv has no AOF (its journal is the log) and no Valkey-protocol replicas
    Option("aof-use-rdb-preamble", True, _bool),
    Option("rdb-key-save-delay", 0, _int_range(-(2**31), 2**31 - 1)),
    Option("appendfsync", "everysec", _enum("always", "everysec", "no")),
    Option("repl-diskless-sync", True, _bool),
    Option("repl-diskless-sync-delay", 5, _int_range(0, 2**31 - 1)),
    Option("repl-backlog-size", 1024 * 1024, _memory_range(1, 2**63 - 1)),   # no PSYNC: SYNC streams live
    Option("repl-backlog-ttl", 3600, _int_range(0, 2**31 - 1)),
    Option("tls-client-key-file-pass", "", _string, sensitive=True),
    # Valkey 8.0: HELLO and INFO identify the server as Redis 7.2 for clients that check (deprecated in 9)
    Option("extended-redis-compatibility", False, _bool),
    Option("tracking-table-max-keys", 1_000_000, _int_range(0, 2**63 - 1)),
    Option("tls-key-file-pass", "", _string, sensitive=True),
    Option("primaryuser", "", _string, aliases=("masteruser",), sensitive=True),
    Option("primaryauth", "", _string, aliases=("masterauth",), sensitive=True),
    # Valkey's safe defaults: with no password for the default user, only loopback clients are served; DEBUG and
    # MODULE LOAD/UNLOAD are refused (`local`: from loopback connections only), and those two options are
    # immutable, as in Valkey (CONFIG SET refuses them even to the value they have)
    Option("protected-mode", True, _bool),
    Option("enable-debug-command", "no", _enum("no", "yes", "local"), mutable=False),
    Option("enable-module-command", "no", _enum("no", "yes", "local"), mutable=False),
    # Valkey 9's command logs; the slow one keeps its SLOWLOG names as aliases, as 9.x does
    Option("commandlog-execution-slower-than", 10000, _int_range(-1, 2**63 - 1), aliases=("slowlog-log-slower-than",)),
    Option("commandlog-slow-execution-max-len", 128, _int_range(0, 2**63 - 1), aliases=("slowlog-max-len",)),
    Option("commandlog-request-larger-than", 1024 * 1024, _int_range(-1, 2**63 - 1)),
    Option("commandlog-large-request-max-len", 128, _int_range(0, 2**63 - 1)),
    Option("commandlog-reply-larger-than", 1024 * 1024, _int_range(-1, 2**63 - 1)),
    Option("commandlog-large-reply-max-len", 128, _int_range(0, 2**63 - 1)),
    Option("latency-monitor-threshold", 0, _int_range(0, 2**63 - 1)),
    Option("notify-keyspace-events", "", _string),
    Option("busy-reply-threshold", 5000, _int_range(0, 2**62), aliases=("lua-time-limit",)),
    Option("cluster-enabled", False, _bool, mutable=False),
    # Valkey 9's numbered databases in cluster mode: a cluster node has this many (SELECT 0..n-1) and ignores
    # `databases`; see Config.database_count
    Option("cluster-databases", 1, _int_range(1, 2**31 - 1), mutable=False),
    Option("journal-nats-tls-ca-file", "", _string, mutable=False,
           help="durakv: the CA that NATS servers' certificates are verified with (tls:// servers)"),
    Option("cluster-require-full-coverage", True, _bool),
    Option("cluster-allow-reads-when-down", False, _bool),
    Option("cluster-allow-pubsubshard-when-down", True, _bool),
    Option("cluster-preferred-endpoint-type", "ip", _enum("ip", "hostname", "unknown-endpoint")),
    Option("cluster-announce-hostname", "", _string),
    # A primary refuses writes (NOREPLICAS) while fewer replicas than this were heard from within the lag.
    Option("min-replicas-to-write", 0, _int_range(0, 2**31 - 1), aliases=("min-slaves-to-write",)),
    Option("min-replicas-max-lag", 10, _int_range(0, 2**31 - 1), aliases=("min-slaves-max-lag",)),
    # A node not heard from for this long is shown failed (CLUSTER SLOTS leaves it out), as Valkey marks it FAIL.
    Option("cluster-node-timeout", 15000, _int_range(0, 2**63 - 1)),
    Option("replica-read-only", True, _bool, aliases=("slave-read-only",)),
    Option("replica-serve-stale-data", True, _bool, aliases=("slave-serve-stale-data",)),
    Option("io-threads", 1, _int_range(1, 128), mutable=False),
    # Encoding thresholds: they decide what OBJECT ENCODING answers (keyspace/encoding.py), as in Valkey;
    # the `ziplist` names are Valkey's aliases from before listpacks.
    Option("list-max-listpack-size", -2, _int_range(-(2**31), 2**31 - 1), aliases=("list-max-ziplist-size",)),
    Option("hash-max-listpack-entries", 512, _int_range(0, 2**63 - 1), aliases=("hash-max-ziplist-entries",)),
    Option("hash-max-listpack-value", 64, _memory_range(0, 2**63 - 1), aliases=("hash-max-ziplist-value",)),
    Option("set-max-intset-entries", 512, _int_range(0, 2**63 - 1)),
    Option("set-max-listpack-entries", 128, _int_range(0, 2**63 - 1)),
    Option("set-max-listpack-value", 64, _int_range(0, 2**63 - 1)),
    Option("zset-max-listpack-entries", 128, _int_range(0, 2**63 - 1), aliases=("zset-max-ziplist-entries",)),
    Option("zset-max-listpack-value", 64, _memory_range(0, 2**63 - 1), aliases=("zset-max-ziplist-value",)),
    # Quicklist node compression: a layout knob with no effect on any reply but DEBUG OBJECT's.
    Option("list-compress-depth", 0, _int_range(0, 2**31 - 1)),
    # Stream node limits: durakv models Valkey's stream nodes (keyspace/stream.py), which approximate
    # trimming (MAXLEN ~) and XINFO STREAM's radix-tree counts follow.
    Option("stream-node-max-entries", 100, _int_range(0, 2**63 - 1)),
    Option("stream-node-max-bytes", 4096, _memory_range(0, 2**63 - 1)),
    # Valkey 8.0 frees big values in a background thread (these default to yes); durakv frees at once, which no
    # reply can tell apart, so they are accepted and kept for CONFIG GET only.
    Option("lazyfree-lazy-eviction", True, _bool),
    Option("lazyfree-lazy-expire", True, _bool),
    Option("lazyfree-lazy-server-del", True, _bool),
    Option("lazyfree-lazy-user-del", True, _bool),
    Option("lazyfree-lazy-user-flush", True, _bool),
    # HyperLogLog sparse -> dense promotion (keyspace/hll.py), as in Valkey.
    Option("hll-sparse-max-bytes", 3000, _memory_range(0, 2**63 - 1)),
    # valkey-json 1.0.2's module configs (json.cc registerModuleConfigs): bytes a document may grow to (0: no
    # limit; a memory value) and how deep a document and a path may nest
    Option("json.max-document-size", 0, _memory_range(0, 2**63 - 1)),
    Option("json.max-path-limit", 128, _int_range(0, 2**31 - 1)),
    # durakv's own
    Option("durability", "sync", _enum("none", "async", "sync")),
    Option("durability-buffer-ms", 10000, _int_range(1, 2**31 - 1)),
    Option("journal-backend", "local", _enum("local", "jetstream"), mutable=False),
    Option("journal-nats-servers", "nats://127.0.0.1:4222", _string, mutable=False),
    Option("journal-max-appends-in-flight", 8, _int_range(1, 32), mutable=False,
           help="durakv: JetStream journal appends sent before the first is acknowledged (each conditional on "
                "the sequence the one before takes; 1 = one at a time). 32 is the bound fencing relies on "
                "(journal/jetstream.py MAX_APPENDS_IN_FLIGHT)"),
    Option("journal-append-stall-ms", 20000, _int_range(0, 2**31 - 1),
           help="durakv: a shard primary whose oldest journal append is unacknowledged this long steps down (gives "
                "up its lease and restarts as a replica) instead of keeping a lease while nothing commits. Longer "
                "than a NATS stream leader election (up to ~9 s), which deposes nobody. 0 = never"),
    Option("shard", "0", _string, mutable=False),
    Option("availability-zone", "az1", _string, mutable=False),
    Option("node-id", "", _string, mutable=False),
    Option("lease-ttl-ms", 2000, _int_range(200, 600000),
           help="durakv: the primary's lease, one value per shard (a shard setting: CONFIG SET on any node of the "
                "shard changes it for all; the first node's flag is the shard's until then)"),
    Option("lease-renew-max-loop-stall-ms", 30000, _int_range(1000, 2**31 - 1),
           help="durakv: the lease is renewed on a thread of its own while the event loop is busy, but not for a "
                "loop that has shown no sign of life for longer than this (a hung process must fail over); never "
                "less than busy-reply-threshold + lease-ttl-ms"),
    Option("replica-snapshot-interval-ms", 60000, _int_range(0, 2**31 - 1)),
    Option("replica-max-lag-ms", 5000, _int_range(0, 2**31 - 1),
           help="durakv: a replica that has known for longer than this of journal entries it has not applied "
                "answers reads with -MASTERDOWN until it catches up (0: never)"),
    Option("announce-ip", "127.0.0.1", _string, mutable=False),
    Option("journal-segment-bytes", 64 * 1024 * 1024, _memory, mutable=False),
    Option("journal-fsync", True, _bool, mutable=False),
    Option("auto-snapshot-journal-bytes", 256 * 1024 * 1024, _memory),
    Option("journal-load-truncated", False, _bool,
           help="Like Valkey's aof-load-truncated, for the local journal (default no, unlike Valkey's: an "
                "acknowledged write must not vanish quietly). no: start-up stops when the journal is damaged "
                "beyond its last append (a damaged record followed by valid ones, records ending before what "
                "the segment state says was committed, a missing or emptied segment); the message names the "
                "file, the byte offset and the entries missing. yes: start anyway, cutting the journal at the "
                "first damage; every dropped entry range is logged and the dropped bytes are kept aside as "
                "*.dropped files. A torn last append is always cut (it was never acknowledged)."),
    # the most one Lua VM (EVAL's, FUNCTION's) may allocate before a script gets Lua's "not enough memory"
    # (Valkey has no such bound: its allocator aborts the process); 0 = no bound
    Option("lua-memory-limit", 1024 * 1024 * 1024, _memory_nonnegative),
    # A deliberately broken mode for `durakv verify`'s tests: sync replies leave before the journal commits
    Option("debug-ack-before-commit", False, _unsafe_bool, mutable=False,
           help="TESTS ONLY: acknowledge sync writes before the journal commits them (a crash then loses "
                "acknowledged writes, which the verify checkers must catch); refused unless "
                "DURAKV_TEST_UNSAFE=1 is in the environment"),
]

BY_NAME = {}
for _opt in OPTIONS:
    BY_NAME[_opt.name] = _opt
    for _alias in _opt.aliases:
        BY_NAME[_alias] = _opt


class Config:
    def __init__(self):
        self.values = {o.name: o.default for o in OPTIONS}
        self.listeners = []   # callables(name, value) run after a successful set
        self.config_file = None
        # `user <name> <rules...>` directives, as token lists without the 'user' word. Not an option (CONFIG
        # GET/SET do not know it, as in Valkey): the ACL users are built from these at start-up.
        self.user_lines = []
        # () -> lines CONFIG REWRITE appends after the options (the ACL users, when there is no aclfile).
        self.rewrite_extra_lines = None
        self._save_loaded = False  # Valkey: save lines of one start-up add up (an empty one clears)

    def __getitem__(self, name):
        return self.values[BY_NAME[name].name]

    def get(self, name, default=None):
        opt = BY_NAME.get(name)
        return self.values[opt.name] if opt else default

    def tls_needs_ca(self) -> bool:
        """Valkey's tlsConfigure refusal: TLS is on and something must verify a peer's certificate (client
        certificates, `tls-auth-clients yes` or `optional`; or TLS between cluster nodes, which durakv uses
        whenever a cluster node serves TLS: Valkey's tls-cluster), but no CA is configured to verify it with."""
        v = self.values
        if not v["tls-port"] or v["tls-ca-cert-file"] or v["tls-ca-cert-dir"]:
            return False
        return v["tls-auth-clients"] != "no" or v["cluster-enabled"]

    def database_count(self) -> int:
        """How many numbered databases this node has: `cluster-databases` in cluster mode (Valkey 9 ignores
        `databases` there), `databases` otherwise."""
        return self.values["cluster-databases" if self.values["cluster-enabled"] else "databases"]

    def _lookup(self, name: str, startup: bool, text=None):
        opt = BY_NAME.get(name.lower())
        if opt is None:
            raise ConfigError(f"Bad directive or wrong number of arguments: '{name}'")
        if not startup and self.immutable(opt, text):
            raise ConfigError("can't set immutable config")
        return opt

    def immutable(self, opt, text=None) -> bool:
        """Whether CONFIG SET opt `text` is refused as immutable (FIXED_AT_START ones: unless `text` is the
        value they have)."""
        return not opt.mutable and not (opt.name in FIXED_AT_START and text is not None and self._holds(opt, text))

    def _holds(self, opt, text) -> bool:
        try:
            return opt.parse(text) == self.values[opt.name]
        except ValueError:
            return False

    def _store(self, opt, value, startup):
        if opt.merge is not None:
            value = opt.merge(self.values[opt.name], value)
        self.values[opt.name] = value
        if not startup:
            for fn in self.listeners:
                fn(opt.name, value)
        return opt.name

    def parse(self, name: str, text: str):
        """The value `text` would give option `name` (raises ConfigError as set() does), without setting it."""
        opt = self._lookup(name, False, text)
        try:
            return opt.parse(text)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None

    def set(self, name: str, text: str, startup=False):
        """Parses and sets one option from one string, as CONFIG SET does. Raises ConfigError with Valkey's
        wording on a bad value."""
        opt = self._lookup(name, startup, text)
        try:
            value = opt.parse(text)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if not startup and not opt.mutable:
            return opt.name             # FIXED_AT_START set to the value it has: nothing changes
        return self._store(opt, value, startup)

    def set_args(self, name: str, args, startup=True):
        """Sets one option from its arguments as a config file line gives them (config.c): a single-valued
        option takes exactly one; a multi-valued one given a single non-empty argument splits it again."""
        opt = self._lookup(name, startup)
        args = list(args)
        try:
            if opt.multi:
                if len(args) == 1 and args[0]:
                    split = split_args(args[0].encode("utf-8", "surrogateescape"))
                    if split is None:
                        raise ConfigError("Unbalanced quotes in configuration line")
                    args = [_decode(a) for a in split]
                value = opt.parse_args(args)
                if opt.name == "save" and startup:
                    if self._save_loaded and value and self.values["save"]:
                        value = self.values["save"] + " " + value
                    self._save_loaded = True
            else:
                if len(args) != 1:
                    raise ConfigError("wrong number of arguments")
                value = opt.parse(args[0])
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        return self._store(opt, value, startup)

    def matching(self, pattern: str):
        """(name, formatted value) pairs for CONFIG GET, aliases included when they match."""
        pat = pattern.lower()
        out = {}
        for name, opt in BY_NAME.items():
            if fnmatch.fnmatchcase(name, pat):
                out[name] = _fmt(self.values[opt.name])
        return out

    def formatted(self, name):
        return _fmt(self.values[BY_NAME[name].name])

    # -- loading ------------------------------------------------------------------------------
    def load_file(self, path: str):
        self.config_file = os.path.abspath(path)
        with open(path, "rb") as f:
            self.load_text(f.read(), path)

    def load_text(self, data: bytes, path="(config)"):
        """Valkey's loadServerConfigFromString over the bytes of a config file."""
        for lineno, raw in enumerate(data.split(b"\n"), 1):
            line = raw.strip(b" \t\r\n")
            if not line or line.startswith(b"#"):
                continue
            shown = _decode(line)
            parts = split_args(line)
            if parts is None:
                raise ConfigError(f"{path}:{lineno}: '{shown}': Unbalanced quotes in configuration line")
            if not parts:
                continue
            name, args = _decode(parts[0]).lower(), [_decode(a) for a in parts[1:]]
            if name == "user":
                # `user <name> <rules...>`: not an option (CONFIG GET/SET do not know it, as in Valkey); the ACL
                # users are built from these lines at start-up.
                self.user_lines.append(list(parts[1:]))
                continue
            if name == "include" and len(args) == 1:
                self.load_file(args[0])
                continue
            try:
                self.set_args(name, args, startup=True)
            except ConfigError as exc:
                raise ConfigError(f"{path}:{lineno}: '{shown}': {exc}") from None

    def load_args(self, argv):
        """`--name value [value...]` pairs, as valkey-server accepts them (each one a line of the config)."""
        i = 0
        while i < len(argv):
            arg = argv[i]
            if not arg.startswith("--"):
                raise ConfigError(f"unexpected argument '{arg}' (options are --name value)")
            name = arg[2:]
            j = i + 1
            vals = []
            while j < len(argv) and not argv[j].startswith("--"):
                vals.append(argv[j])
                j += 1
            if name.lower() == "user":
                # Each argument is one token, as valkey-server quotes each of them: `--user alice on >pw`.
                self.user_lines.append([v.encode("utf-8", "surrogateescape") for v in vals])
                i = j
                continue
            opt = BY_NAME.get(name.lower())
            if not vals and opt is not None and isinstance(opt.default, bool):
                vals = ["yes"]
            try:
                self.set_args(name, vals, startup=True)
            except ConfigError as exc:
                raise ConfigError(f"--{name}: {exc}") from None
            i = j

    def rewrite(self):
        """CONFIG REWRITE: writes every non-default option back to the config file, string values quoted
        as Valkey quotes them, so that the file reads back to the same values."""
        if not self.config_file:
            raise ConfigError("The server is running without a config file")
        lines = [f"{o.name} {o.config_text(self.values[o.name])}" for o in OPTIONS
                 if self.values[o.name] != o.default]
        if self.rewrite_extra_lines is not None:
            lines.extend(self.rewrite_extra_lines())
        tmp = self.config_file + ".tmp"
        try:
            with open(tmp, "w", encoding="ascii") as f:
                f.write("# written by durakv CONFIG REWRITE\n" + "\n".join(lines) + "\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.config_file)
        except OSError as exc:
            named = with_path(exc, tmp)       # a full disk's message names the file
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise named from exc


def _decode(data: bytes) -> str:
    # CONFIG SET decodes values the same way, so a value survives a rewrite whatever bytes it held
    return data.decode("utf-8", "replace")




_SPLIT_BLANK = frozenset(b" \t\n\v\f\r")      # isspace(): skipped between arguments
_SPLIT_ARG_END = frozenset(b" \n\r\t")        # what ends an unquoted argument
_SPLIT_HEX = frozenset(b"0123456789abcdefABCDEF")
_SPLIT_ESCAPES = {ord("n"): 10, ord("r"): 13, ord("t"): 9, ord("b"): 8, ord("a"): 7}


def split_args(line: bytes):
    """sds.c sdssplitargs, the one copy (inline requests, config lines, ACL rules, a function's shebang): the
    arguments of line, with "double" (\\n \\xHH ... escapes) and 'single' quotes, or None when quotes are
    unbalanced or a closing quote is followed by something other than a blank. Like C, line ends at a NUL."""
    nul = line.find(b"\0")
    if nul >= 0:
        line = line[:nul]
    args = []
    n = len(line)
    p = 0
    while True:
        while p < n and line[p] in _SPLIT_BLANK:
            p += 1
        if p >= n:
            return args
        cur = bytearray()
        inq = insq = False
        while True:
            c = line[p] if p < n else 0
            if inq:
                if c == 92 and p + 3 < n and line[p + 1] == 120 and line[p + 2] in _SPLIT_HEX and line[p + 3] in _SPLIT_HEX:
                    cur.append(int(line[p + 2:p + 4], 16))   # \xHH
                    p += 3
                elif c == 92 and p + 1 < n:
                    p += 1
                    cur.append(_SPLIT_ESCAPES.get(line[p], line[p]))
                elif c == 34:  # '"'
                    if p + 1 < n and line[p + 1] not in _SPLIT_BLANK:
                        return None
                    p += 1
                    break
                elif p >= n:
                    return None
                else:
                    cur.append(c)
            elif insq:
                if c == 92 and p + 1 < n and line[p + 1] == 39:
                    p += 1
                    cur.append(39)
                elif c == 39:
                    if p + 1 < n and line[p + 1] not in _SPLIT_BLANK:
                        return None
                    p += 1
                    break
                elif p >= n:
                    return None
                else:
                    cur.append(c)
            else:
                if p >= n:
                    break
                if c in _SPLIT_ARG_END:
                    p += 1
                    break
                if c == 34:
                    inq = True
                elif c == 39:
                    insq = True
                else:
                    cur.append(c)
            p += 1
        args.append(bytes(cur))


_REPR = {0x5C: "\\\\", 0x22: '\\"', 10: "\\n", 13: "\\r", 9: "\\t", 7: "\\a", 8: "\\b"}


def repr_bytes(data: bytes) -> str:
    r"""sds.c sdscatrepr: double-quoted, with \\ \" \n \r \t \a \b escaped, other bytes outside
    0x20..0x7e as \xHH (C isprint in the C locale)."""
    out = ['"']
    for c in data:
        esc = _REPR.get(c)
        if esc is not None:
            out.append(esc)
        elif 0x20 <= c <= 0x7E:
            out.append(chr(c))
        else:
            out.append("\\x%02x" % c)
    out.append('"')
    return "".join(out)


def quote_config_value(text: str) -> str:
    """A string option's value as CONFIG REWRITE writes it (Valkey's rewriteConfigStringOption)."""
    return repr_bytes(text.encode("utf-8", "surrogateescape"))


def _repr_if_needed(word: str) -> str:
    data = word.encode("utf-8", "surrogateescape")
    if data and all(0x21 <= c <= 0x7E and c not in (0x22, 0x27, 0x5C) for c in data):
        return word
    return repr_bytes(data)
