"""One Config object with valkey.conf-style names (plus durakv's own), as the server and CONFIG see them.

Sources, later wins: built-in defaults, a config file (valkey.conf syntax: `name value ...` per line,
`#` comments, quoted arguments), then `--name value` command-line arguments. CONFIG GET/SET use the same names.
"""

import fnmatch
import os
import shlex

from .errors import ConfigError

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


def _int_range(lo, hi):
    def parse(text):
        try:
            n = int(text)
        except ValueError:
            raise ValueError("argument couldn't be parsed into an integer") from None
        if not lo <= n <= hi:
            raise ValueError(f"argument must be between {lo} and {hi} inclusive")
        return n
    return parse


def _memory(text):
    return parse_memory(text)


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


def _fmt_bool(v):
    return "yes" if v else "no"


def _fmt(v):
    if isinstance(v, bool):
        return _fmt_bool(v)
    if v is None:
        return ""
    return str(v)


class Option:
    __slots__ = ("name", "default", "parse", "mutable", "aliases", "sensitive")

    def __init__(self, name, default, parse, mutable=True, aliases=(), sensitive=False):
        self.name = name
        self.default = default
        self.parse = parse
        self.mutable = mutable
        self.aliases = aliases
        self.sensitive = sensitive


OPTIONS = [
    Option("port", 6379, _int_range(0, 65535), mutable=False),
    Option("bind", "127.0.0.1 -::1", _string, mutable=False),
    Option("dir", "./durakv-data", _string, mutable=False),
    Option("requirepass", "", _string, sensitive=True),
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
    Option("proto-max-bulk-len", 512 * 1024 * 1024, _memory),
    Option("client-query-buffer-limit", 1024 * 1024 * 1024, _memory),
    Option("tls-port", 0, _int_range(0, 65535), mutable=False),
    Option("tls-cert-file", "", _string, mutable=False),
    Option("tls-key-file", "", _string, mutable=False),
    Option("tls-ca-cert-file", "", _string, mutable=False),
    Option("tls-auth-clients", "yes", _enum("yes", "no", "optional"), mutable=False),
    Option("loglevel", "notice", _enum("debug", "verbose", "notice", "warning", "nothing")),
    Option("logfile", "", _string, mutable=False),
    Option("daemonize", False, _bool, mutable=False),
    Option("pidfile", "", _string, mutable=False),
    Option("save", "", _string),
    Option("appendonly", False, _bool),
    Option("protected-mode", False, _bool),
    Option("slowlog-log-slower-than", 10000, _int_range(-1, 2**62)),
    Option("slowlog-max-len", 128, _int_range(0, 2**31 - 1)),
    Option("latency-monitor-threshold", 0, _int_range(0, 2**63 - 1)),
    Option("notify-keyspace-events", "", _string),
    Option("busy-reply-threshold", 5000, _int_range(0, 2**62), aliases=("lua-time-limit",)),
    Option("cluster-enabled", False, _bool, mutable=False),
    Option("replica-read-only", True, _bool, aliases=("slave-read-only",)),
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
    # durakv's own
    Option("durability", "sync", _enum("none", "async", "sync")),
    Option("durability-buffer-ms", 10000, _int_range(1, 2**31 - 1)),
    Option("journal-backend", "local", _enum("local", "jetstream"), mutable=False),
    Option("journal-nats-servers", "nats://127.0.0.1:4222", _string, mutable=False),
    Option("shard", "0", _string, mutable=False),
    Option("availability-zone", "az1", _string, mutable=False),
    Option("node-id", "", _string, mutable=False),
    Option("lease-ttl-ms", 2000, _int_range(200, 600000)),
    Option("replica-snapshot-interval-ms", 60000, _int_range(0, 2**31 - 1)),
    Option("announce-ip", "127.0.0.1", _string, mutable=False),
    Option("journal-segment-bytes", 64 * 1024 * 1024, _memory, mutable=False),
    Option("journal-fsync", True, _bool, mutable=False),
    Option("auto-snapshot-journal-bytes", 256 * 1024 * 1024, _memory),
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

    def __getitem__(self, name):
        return self.values[BY_NAME[name].name]

    def get(self, name, default=None):
        opt = BY_NAME.get(name)
        return self.values[opt.name] if opt else default

    def set(self, name: str, text: str, startup=False):
        """Parses and sets one option. Raises ConfigError with Valkey's wording on a bad value."""
        opt = BY_NAME.get(name.lower())
        if opt is None:
            raise ConfigError(f"Bad directive or wrong number of arguments: '{name}'")
        if not startup and not opt.mutable:
            raise ConfigError("can't set immutable config")
        try:
            value = opt.parse(text)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        self.values[opt.name] = value
        if not startup:
            for fn in self.listeners:
                fn(opt.name, value)
        return opt.name

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
        with open(path, encoding="utf-8") as f:
            self.load_lines(f, path)

    def load_lines(self, lines, source: str):
        """valkey.conf lines (from a file or stdin); errors name the source and line."""
        for lineno, raw in enumerate(lines, 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            try:
                parts = shlex.split(line)
            except ValueError as exc:
                raise ConfigError(f"{source}:{lineno}: {exc}") from None
            name, args = parts[0], parts[1:]
            if name.lower() == "include":
                for inc in args:
                    self.load_file(inc)
                continue
            try:
                self.set(name, " ".join(args), startup=True)
            except ConfigError as exc:
                raise ConfigError(f"{source}:{lineno}: '{line}': {exc}") from None

    def load_args(self, argv):
        """`--name value [value...]` pairs, as valkey-server accepts them."""
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
            if not vals and BY_NAME.get(name.lower()) and isinstance(BY_NAME[name.lower()].default, bool):
                vals = ["yes"]
            self.set(name, " ".join(vals), startup=True)
            i = j

    def rewrite(self):
        """CONFIG REWRITE: writes every non-default option back to the config file."""
        if not self.config_file:
            raise ConfigError("The server is running without a config file")
        lines = [f"{o.name} {_quote(_fmt(self.values[o.name]))}" for o in OPTIONS
                 if self.values[o.name] != o.default]
        tmp = self.config_file + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write("# written by durakv CONFIG REWRITE\n" + "\n".join(lines) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.config_file)


def _quote(text):
    return '""' if text == "" else (shlex.quote(text) if any(c.isspace() for c in text) else text)
