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

Every value is bounded the way Valkey 9.1.2 bounds its own (config.c's standardConfig table: the C type of
the setting, its min and max, memory units, percent values, enums, validity checks), at CONFIG SET and at
start-up alike, with Valkey's error texts; durakv's own names get bounds of the same kind, each with its
reason beside it. `Numeric`, `Enum`, `_bool` and `Text` are those parsers; each also describes its bounds
for the generated reference (scripts/gen_config_doc.py -> docs/configuration.md).
"""

import fnmatch
import os
import re

from . import messages
from .errors import ConfigError, with_path
from .intstring import string2ll

# C limits Valkey declares its numeric configs with (LP64: long and ssize_t are 64 bits)
INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
UINT_MAX = (1 << 32) - 1
LLONG_MIN, LLONG_MAX = -(1 << 63), (1 << 63) - 1
LONG_MAX = SSIZE_MAX = LLONG_MAX
ULLONG_MAX = (1 << 64) - 1
MB = 1024 * 1024

_UNITS = {"b": 1, "k": 1000, "kb": 1024, "m": 1000**2, "mb": 1024**2, "g": 1000**3, "gb": 1024**3}
_ASCII_DIGITS = frozenset("0123456789")


def memtoull(text: str):
    """util.c memtoull: digits then an optional unit (b k kb m mb g gb, any case), as an unsigned 64-bit
    number, else None. Like Valkey 9.1.2: no sign, no blank, an empty number is 0 ("" and "gb" are 0), more
    than 127 digits or a number past 2^64-1 is refused. Where Valkey lets `number * unit` wrap around 2^64
    (17179869184gb is 0 there), durakv refuses it: a wrapped limit is never what was meant."""
    i = 0
    n = len(text)
    while i < n and text[i] in _ASCII_DIGITS:
        i += 1
    unit = text[i:]
    mul = _UNITS.get(unit.lower()) if unit.isascii() else None
    if unit and mul is None:
        return None
    if i >= 128:
        return None
    value = int(text[:i]) if i else 0
    value *= mul or 1
    return value if value <= ULLONG_MAX else None


def parse_memory(text: str) -> int:
    """A memory value (memtoull) or ValueError: for options and arguments that take one outside OPTIONS."""
    value = memtoull(text)
    if value is None:
        raise ValueError("argument must be a memory value")
    return value


class Numeric:
    """A numeric setting as Valkey's numericConfigSet parses and bounds it: the text is a memory value
    (memory=True), a percent "N%" (percent=True, stored negative as Valkey stores it), or a plain string2ll
    integer; the result is bounded as the C type holds it (unsigned: compared as unsigned 64-bit, so -1 is
    2^64-1 and out of range), then `check(value)` may refuse it with its own reason, then `clamp` narrows
    what is stored (hz). Raises ValueError with Valkey's text."""

    __slots__ = ("lo", "hi", "unsigned", "memory", "percent", "check", "clamp", "check_doc")

    def __init__(self, lo, hi, unsigned=False, memory=False, percent=False, check=None, clamp=None, check_doc=""):
        self.lo, self.hi = lo, hi
        self.unsigned, self.memory, self.percent = unsigned, memory, percent
        self.check, self.clamp, self.check_doc = check, clamp, check_doc

    @property
    def __name__(self):
        return "numeric"

    def __call__(self, text):
        ll = self._parse(text)
        if self.unsigned:
            ull = ll & ULLONG_MAX
            if not self.lo <= ull <= self.hi:
                raise ValueError(f"argument must be between {self.lo} and {self.hi} inclusive")
            value = ull
        else:
            if self.percent and ll < 0:
                if ll < self.lo:
                    raise ValueError(f"percentage argument must be less or equal to {-self.lo}")
            elif not self.lo <= ll <= self.hi:
                raise ValueError(f"argument must be between {self.lo} and {self.hi} inclusive")
            value = ll
        if self.check is not None:
            problem = self.check(value)
            if problem:
                raise ValueError(problem)
        if self.clamp is not None:
            value = min(max(value, self.clamp[0]), self.clamp[1])
        return value

    def _parse(self, text):
        if self.memory:
            v = memtoull(text)
            if v is not None:
                return v - (1 << 64) if v > LLONG_MAX else v    # stored in a long long, as numericParseString
        if self.percent and len(text) > 1 and text.endswith("%"):
            v = string2ll(text[:-1].encode("utf-8", "surrogateescape"))
            if v is not None and v >= 0:
                return -v
        if not (self.memory or self.percent):
            v = string2ll(text.encode("utf-8", "surrogateescape"))
            if v is not None:
                return v
        if self.memory and self.percent:
            raise ValueError("argument must be a memory or percent value")
        if self.memory:
            raise ValueError("argument must be a memory value")
        raise ValueError("argument couldn't be parsed into an integer")

    def format(self, value):
        if self.percent and value < 0:
            return "%d%%" % -value
        return str(value)

    def describe(self):
        kind = "memory or percent of maxmemory" if self.percent else ("memory" if self.memory else "integer")
        hi = {INT_MAX: "INT_MAX", UINT_MAX: "UINT_MAX", LLONG_MAX: "LLONG_MAX", ULLONG_MAX: "ULLONG_MAX"}
        lo = {INT_MIN: "INT_MIN", LLONG_MIN: "LLONG_MIN"}
        if self.percent:
            text = f"{kind}: 0 .. {hi.get(self.hi, self.hi)} bytes or 0% .. {-self.lo}%"
        else:
            text = f"{kind}: {lo.get(self.lo, self.lo)} .. {hi.get(self.hi, self.hi)}"
        if self.clamp:
            text += f" (stored clamped to {self.clamp[0]} .. {self.clamp[1]})"
        if self.check_doc:
            text += f"; {self.check_doc}"
        return text


def _int(lo, hi, **kw):
    return Numeric(lo, hi, **kw)


def _uint(lo, hi, **kw):
    return Numeric(lo, hi, unsigned=True, **kw)


def _mem(lo, hi, unsigned=False, **kw):
    return Numeric(lo, hi, unsigned=unsigned, memory=True, **kw)


class Enum:
    """One of fixed names, matched without case (strcasecmp: ASCII only); the error lists them in Valkey's
    table order."""

    __slots__ = ("choices",)

    def __init__(self, *choices):
        self.choices = choices

    @property
    def __name__(self):
        return "enum"

    def __call__(self, text):
        folded = text.encode("utf-8", "surrogateescape").lower()
        for choice in self.choices:
            if folded == choice.encode():
                return choice
        raise ValueError("argument(s) must be one of the following: " + ", ".join(self.choices))

    def describe(self):
        return "one of: " + ", ".join(self.choices)


def _bool(text: str) -> bool:
    # yesnotoi: "yes" or "no" in any case, nothing else (not 1/0, not true/false)
    folded = text.encode("utf-8", "surrogateescape").lower()
    if folded == b"yes":
        return True
    if folded == b"no":
        return False
    raise ValueError("argument must be 'yes' or 'no'")


_bool.describe = lambda: "yes or no"


UNSAFE_ENV = "DURAKV_TEST_UNSAFE"


def _unsafe_bool(text: str) -> bool:
    """A test-only switch that breaks a guarantee: refused unless the environment says this is a test."""
    value = _bool(text)
    if value and os.environ.get(UNSAFE_ENV) != "1":
        raise ValueError(f"it acknowledges writes that can be lost; it is for tests of the checkers only and is "
                         f"refused unless the environment has {UNSAFE_ENV}=1")
    return value


_unsafe_bool.describe = lambda: f"yes or no (yes only with {UNSAFE_ENV}=1 in the environment)"


def _string(text):
    return text


_string.describe = lambda: "string"


class Text:
    """A string setting with a validity check (Valkey's is_valid_fn of a string config): check(text) returns
    the reason it is refused, or None."""

    __slots__ = ("check", "doc")
    string = True

    def __init__(self, check, doc):
        self.check, self.doc = check, doc

    @property
    def __name__(self):
        return "text"

    def __call__(self, text):
        problem = self.check(text)
        if problem:
            raise ValueError(problem)
        return text

    def describe(self):
        return "string: " + self.doc


NET_HOST_STR_LEN = 256
_HOSTNAME_CHARS = re.compile(r"[A-Za-z0-9.\-]*\Z")


def _hostname_problem(text):
    """isValidAnnouncedHostname: shorter than NET_HOST_STR_LEN, letters, digits, '-' and '.' only."""
    if len(text.encode("utf-8", "surrogateescape")) >= NET_HOST_STR_LEN:
        return "Hostnames must be less than %d characters" % NET_HOST_STR_LEN
    if not _HOSTNAME_CHARS.match(text):
        return "Hostnames may only contain alphanumeric characters, hyphens or dots"
    return None


# durakv's names that become parts of NATS stream names, subjects and KV keys (journal/jetstream.py
# stream_name, the coordination store's members and leases): NATS refuses '.', '*', '>' and blanks in a
# stream name and reads '.' as a subject separator, so a shard is letters, digits, '-' and '_'; a node id and
# an AZ may also hold '.', which the KV keys take. 64 characters keep every derived name within NATS's limits.
_SHARD_NAME = re.compile(r"[A-Za-z0-9_\-]{1,64}\Z")
_NODE_LABEL = re.compile(r"[A-Za-z0-9_.\-]{0,64}\Z")


_BACKUP_EVERY = re.compile(r"^every\s+(\d{1,9})\s*(s|m|h|d)$")
_BACKUP_DAILY = re.compile(r"^(\d{1,2}):(\d{2})$")
_BACKUP_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_backup_schedule(text):
    """backup-schedule as (every_ms, daily_ms): an interval, or the time of day (ms after 00:00 UTC) when
    every_ms is 0; None for "" (none). ValueError with the reason otherwise."""
    t = text.strip().lower()
    if not t:
        return None
    m = _BACKUP_EVERY.match(t)
    if m:
        every = int(m.group(1)) * _BACKUP_UNIT_MS[m.group(2)]
        if every < 10_000:
            raise ValueError("a backup interval is at least 10s")
        return every, 0
    m = _BACKUP_DAILY.match(t)
    if m and int(m.group(1)) < 24 and int(m.group(2)) < 60:
        return 0, (int(m.group(1)) * 60 + int(m.group(2))) * 60_000
    raise ValueError("a daily UTC time HH:MM (05:30), or an interval 'every N' with s, m, h or d (every 6h)")


def backup_schedule_problem(text):
    try:
        parse_backup_schedule(text)
    except ValueError as exc:
        return str(exc)
    return None


def _backup_destination_problem(text):
    if not text or text.startswith("s3://") and len(text) > 5 and not text[5:].startswith("/"):
        return None
    if "://" in text:
        return "a directory or s3://BUCKET/PREFIX"
    return None if os.path.isabs(text) else "an absolute directory (or s3://BUCKET/PREFIX)"


def _shard_problem(text):
    if not _SHARD_NAME.match(text):
        return "a shard name is 1 to 64 letters, digits, '-' or '_' (it names the shard's NATS stream)"
    return None


def _label_problem(text):
    if not _NODE_LABEL.match(text):
        return "at most 64 letters, digits, '.', '-' or '_' (it is part of NATS KV keys)"
    return None


def _az_problem(text):
    return "an availability zone must not be empty" if text == "" else _label_problem(text)


# Rust's str::parse::<f64> grammar: decimal with an optional exponent, or inf / infinity / nan in any case. The
# commands read it with protocol/numbers.valkey_strtod (the same grammar); config/ sits below protocol/.
_RUST_F64 = re.compile(r"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|(?i:inf|infinity|nan))\Z")


def _bf_rate(range_error):
    """valkey-bloom's string configs bf.bloom-fp-rate and bf.bloom-tightening-ratio (configs.rs
    on_string_config_set): a float in Rust's syntax, strictly between 0 and 1; kept as the text given."""
    def problem(text):
        if _RUST_F64.match(text) is None:
            return messages.BF_CONFIG_NOT_FLOAT
        if not 0.0 < float(text) < 1.0:   # the grammar above admits nothing float() reads otherwise; NaN too
            return range_error
        return None
    return Text(problem, "a decimal number strictly between 0 and 1")


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


_save.describe = lambda: "pairs of `seconds changes` (seconds >= 1, changes >= 0), or \"\" for none"


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
        hard, soft = memtoull(args[j + 1]), memtoull(args[j + 2])
        seconds = _strtoll(args[j + 3])
        if hard is None or soft is None or seconds is None or seconds < 0:
            raise ValueError("Error in hard, soft or soft_seconds setting in buffer limit configuration.")
        given[cls] = (hard, soft, seconds)
    return " ".join("%s %d %d %d" % ((cls,) + limits) for cls, limits in given.items())


def _obuf(text):
    return _obuf_args(text.split(" ") if text else [])


_obuf.describe = lambda: ("groups of `class hard soft soft-seconds` (class normal, replica or pubsub; hard and "
                          "soft memory values, 0 no limit; soft-seconds >= 0)")


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


_words.describe = lambda: "addresses separated by spaces (a leading '-': optional, skipped if unavailable)"


def _replicaof_args(args):
    """setConfigReplicaOfOption: `host port` or `no one` (stored as "", as CONFIG GET shows no primary)."""
    if len(args) != 2:
        raise ValueError("wrong number of arguments")
    if args[0].lower() == "no" and args[1].lower() == "one":
        return ""
    port = _strtol_port(args[1])
    if port is None:
        raise ValueError("Invalid primary port")
    return "%s %d" % (args[0], port)


def _strtol_port(text):
    """strtol(text, &ptr, 10) with `*ptr == '\\0'` and 0 <= port <= 65535 (what setConfigReplicaOfOption
    accepts: leading blanks and a sign too, as C's strtol takes them)."""
    v = _strtoll(text)
    return v if v is not None and 0 <= v <= 65535 else None


def _replicaof(text):
    return _replicaof_args(text.split(" "))


_replicaof.describe = lambda: "`host port`, or `no one` (start-up only)"


def debug_delay(usec):
    """What key-load-delay and rdb-key-save-delay mean (debug.c debugDelay): sleep `usec` microseconds; a
    negative -N sleeps 1 microsecond with probability 1/N (a delay shorter than a sleep can be)."""
    import random
    import time
    if usec < 0:
        usec = 1 if random.randrange(-usec) == 0 else 0
    if usec:
        time.sleep(usec / 1e6)


def delay_hook(usec):
    """A no-argument callable that waits debug_delay(usec) (a writer's on_key), or None when usec is 0."""
    return (lambda: debug_delay(usec)) if usec else None


def _fmt(v):
    if isinstance(v, bool):
        return "yes" if v else "no"
    if v is None:
        return ""
    return str(v)


# Options Valkey changes at runtime that durakv fixes at start-up (its listeners, data directory, TLS files and
# AZ), and durakv's own start-up options (its journal and shard): CONFIG SET to the value they have is accepted
# as the no-op it is; another value is refused as immutable. (Valkey's own immutable options stay refused.)
FIXED_AT_START = frozenset({"bind", "dir", "tls-port", "tls-cert-file", "tls-key-file", "tls-ca-cert-file",
                            "tls-ca-cert-dir", "tls-auth-clients", "availability-zone",
                            "journal-nats-tls-ca-file", "journal-backend", "journal-nats-servers",
                            "journal-max-appends-in-flight", "shard", "node-id", "cluster-announce-ip",
                            "cluster-announce-port", "cluster-announce-tls-port", "journal-nats-creds",
                            "journal-nats-tls-cert-file", "journal-nats-tls-key-file",
                            "journal-segment-bytes", "journal-fsync", "debug-ack-before-commit"})

# Valkey 9.1.2 configs durakv knows and refuses, with the reason CONFIG SET and start-up give: their effect
# is on a mechanism durakv does not have. CONFIG GET does not list them (durakv has no value to show).
REFUSED = {
    "loading-process-events-interval-bytes":
        "durakv does not pace its loading by bytes read (a snapshot loads as the loader decides; see "
        "docs/compatibility.md)",
    "use-exit-on-panic": "durakv has no panic path that aborts the process (DEBUG PANIC and DEBUG ASSERT are "
                         "not commands of durakv)",
    "enable-debug-assert": "durakv has no debug-only assertions to enable",
    "cluster-ping-interval": "durakv has no cluster bus: nodes share the topology through the coordination store",
    "cluster-message-gossip-perc": "durakv has no cluster bus and no gossip",
    "aof-disable-auto-gc": "durakv has no AOF: its journal is compacted by snapshots",
    "io-threads-always-active": "durakv has no I/O threads",
    "min-io-threads-avoid-copy-reply": "durakv has no I/O threads",
    "min-string-size-avoid-copy-reply": "durakv has no reply buffers of its own to avoid copying into",
    "min-string-size-avoid-copy-reply-threaded": "durakv has no I/O threads",
    "lua-enable-insecure-api": "durakv's Lua sandbox is fixed: the APIs Valkey calls insecure are never loaded",
    "lua-enable-deprecated-api": "durakv's Lua sandbox is fixed: the deprecated APIs are never loaded",
}


class Option:
    """One config name. `multi`: takes several arguments (Valkey's MULTI_ARG_CONFIG); then `parse_args`
    turns the argument list into the value, and `parse` a CONFIG SET string (split on spaces). `hidden`: a
    pattern in CONFIG GET never lists it (Valkey's HIDDEN_CONFIG debug settings); its exact name does.
    `help`: what it does, one line (the configuration reference is generated from it). `late`: see below."""

    __slots__ = ("name", "default", "parse", "mutable", "aliases", "sensitive", "multi", "parse_args", "help",
                 "merge", "hidden", "late")

    def __init__(self, name, default, parse, mutable=True, aliases=(), sensitive=False, multi=False,
                 parse_args=None, help="", merge=None, hidden=False, late=False):
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
        self.hidden = hidden
        # applied after the other options of a CONFIG SET: it may take effect later (a shard setting stored in
        # the coordination store, a switch of durability), so it must not start before the others hold
        self.late = late

    def format(self, value) -> str:
        """The value as CONFIG GET shows it."""
        fmt = getattr(self.parse, "format", None)
        return fmt(value) if fmt is not None else _fmt(value)

    def config_text(self, value) -> str:
        """The value as CONFIG REWRITE writes it after the name."""
        if self.multi:
            return " ".join(_repr_if_needed(a) for a in value.split(" ")) if value else '""'
        if self.parse is _string or getattr(self.parse, "string", False):
            return quote_config_value(value)
        return self.format(value)

    def describe(self) -> str:
        """Its type and bounds, for the configuration reference."""
        return self.parse.describe()


_POLICIES = Enum("volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl", "allkeys-lru", "allkeys-lfu",
                 "allkeys-random", "noeviction")
_NO_EFFECT = "Accepted for compatibility; no effect in durakv"

OPTIONS = [
    Option("port", 6379, _int(0, 65535),
           help="TCP port for clients (0: none). CONFIG SET listens on the new port before it closes the old one "
                "(clients stay connected); refused on a JetStream shard member, whose address is in its shard's "
                "topology"),
    Option("bind", "127.0.0.1 -::1", _words, mutable=False, multi=True,
           help="Addresses the client, TLS and metrics ports listen on ('-' before one: skipped if unavailable)"),
    Option("dir", "./durakv-data", _string, mutable=False,
           help="The data directory: journal segments, snapshots, the lock file, node id (one server per "
                "directory)"),
    Option("requirepass", "", _string, sensitive=True, help="Password of the default user (empty: none)"),
    Option("aclfile", "", _string, mutable=False, help="File ACL LOAD and ACL SAVE read and write the users from"),
    Option("acllog-max-len", 128, _uint(0, LONG_MAX), help="Entries the ACL LOG keeps"),
    Option("acl-pubsub-default", "resetchannels", Enum("allchannels", "resetchannels"),
           help="Pub/sub channel permissions of a new ACL user"),
    Option("maxmemory", 0, _mem(0, ULLONG_MAX, unsigned=True),
           help="Dataset memory limit in bytes (0: none); past it writes evict keys by maxmemory-policy or get "
                "-OOM"),
    Option("maxmemory-policy", "noeviction", _POLICIES, help="What a write past maxmemory evicts"),
    Option("maxmemory-samples", 5, _int(1, 64), help="Keys sampled per eviction (LRU/LFU/TTL approximation)"),
    Option("maxmemory-clients", 0, _mem(-100, SSIZE_MAX, percent=True),
           help="Memory all clients together may use (query buffers, replies waiting to be sent or committed); "
                "past it the clients using the most are disconnected (client eviction). N% is N percent of "
                "maxmemory; 0: no limit"),
    Option("lfu-log-factor", 10, _int(0, INT_MAX), help="LFU counter logarithm factor"),
    Option("lfu-decay-time", 1, _int(0, INT_MAX), help="Minutes after which an LFU counter is halved"),
    Option("maxclients", 10000, _uint(1, UINT_MAX),
           help="Connected clients allowed at once (lowered at start-up to what the open-files limit allows)"),
    Option("timeout", 0, _int(0, INT_MAX), help="Seconds of idleness after which a client is closed (0: never)"),
    Option("tcp-keepalive", 300, _int(0, INT_MAX), help=_NO_EFFECT + " (the OS's TCP keepalive applies)"),
    Option("tcp-backlog", 511, _int(0, INT_MAX), mutable=False, help="Listen backlog of the client ports"),
    Option("databases", 16, _int(1, INT_MAX), mutable=False, help="Numbered databases (SELECT 0..n-1)"),
    Option("hz", 10, _int(0, INT_MAX, clamp=(1, 500)),
           help="Background task frequency (active expiry, client timeouts, stats), per second"),
    # Valkey's replicationCron PING on SYNC/PSYNC streams; durakv's own replicas follow the journal instead
    Option("repl-ping-replica-period", 10, _int(1, INT_MAX), aliases=("repl-ping-slave-period",),
           help="Seconds between the PINGs a SYNC/PSYNC stream (a Valkey replica) gets, counted in runs of the "
                "once-a-second replication cron since start; durakv's own replicas follow the journal"),
    Option("proto-max-bulk-len", 512 * MB, _mem(MB, LONG_MAX),
           help="Largest bulk string a request may carry; applies to every connection at once"),
    Option("client-query-buffer-limit", 1024 * MB, _mem(MB, LONG_MAX, unsigned=True),
           help="Largest unparsed request data one client may have buffered; past it the client is closed"),
    Option("client-output-buffer-limit", OBUF_DEFAULT, _obuf, multi=True, parse_args=_obuf_args, merge=_obuf_merge,
           help="Per class (normal, replica, pubsub): hard limit, soft limit and its seconds of a client's "
                "unsent replies; past them the client is closed"),
    # 0 is no limit; any positive value makes progress (a client is read again once its held bytes fall to
    # half), so only the C-type bound applies, as to Valkey's memory settings
    Option("client-held-replies-limit", 32 * MB, _mem(0, LLONG_MAX),
           help="durakv: bytes of replies one client may have waiting for their journal commit (sync); past "
                "it the server stops reading that client's requests until commits catch up (0: no limit)"),
    Option("metrics-port", 0, _int(0, 65535),
           help="durakv: serve durakv's own metrics in Prometheus text format on this port (HTTP /metrics, on "
                "the first bind address); 0: off. CONFIG SET starts, moves or stops it"),
    Option("tls-port", 0, _int(0, 65535), mutable=False, help="TLS port for clients (0: none)"),
    Option("tls-cert-file", "", _string, mutable=False, help="The server's TLS certificate (PEM)"),
    Option("tls-key-file", "", _string, mutable=False, help="The private key of tls-cert-file (PEM)"),
    Option("tls-ca-cert-file", "", _string, mutable=False,
           help="CA certificates client certificates are verified with"),
    Option("tls-ca-cert-dir", "", _string, mutable=False,
           help="A directory of CA certificates (c_rehash layout) client certificates are verified with"),
    Option("tls-auth-clients", "yes", Enum("no", "yes", "optional"), mutable=False,
           help="Whether TLS clients must present a certificate (with tls-ca-cert-file)"),
    Option("loglevel", "notice", Enum("debug", "verbose", "notice", "warning", "nothing"),
           help="Least severe log messages written"),
    Option("logfile", "", _string, mutable=False, help="Log file (empty: standard error)"),
    Option("daemonize", False, _bool, mutable=False, help=_NO_EFFECT + " (durakv runs in the foreground)"),
    Option("pidfile", "", _string, mutable=False, help=_NO_EFFECT + " (no pid file is written)"),
    Option("save", "", _save, multi=True, parse_args=_save_args,
           help="Snapshot points as `seconds changes` pairs (kept for CONFIG GET/REWRITE; durakv snapshots by "
                "journal size: auto-snapshot-journal-bytes)"),
    Option("appendonly", False, _bool, help=_NO_EFFECT + " (the journal is always on unless durability is none)"),
    # Accepted, no effect: durakv has no AOF (its journal is the log) and no Valkey-protocol replicas
    Option("aof-use-rdb-preamble", True, _bool, help=_NO_EFFECT + " (no AOF)"),
    Option("rdb-key-save-delay", 0, _int(INT_MIN, INT_MAX), hidden=True,
           help="Debug: delay per key while an RDB export for SYNC or a BGSAVE snapshot is written, in "
                "microseconds (negative -N: 1 us with probability 1/N); runs in the exporting child only"),
    Option("key-load-delay", 0, _int(INT_MIN, INT_MAX), hidden=True,
           help="Debug: delay per entry while a dataset loads (start-up's snapshot and journal replay, a shard "
                "member's snapshot, a REPLICAOF sync's RDB), in microseconds (negative -N: 1 us with probability "
                "1/N)"),
    Option("watchdog-period", 0, _int(0, INT_MAX), hidden=True,
           help="Debug: when the event loop is stuck longer than this many milliseconds, log WATCHDOG TIMER "
                "EXPIRED with the main thread's stack (0: off)"),
    Option("debug-context", "", _string, hidden=True,
           help="Debug: free text written into every crash and watchdog report of the log"),
    Option("appendfsync", "everysec", Enum("everysec", "always", "no"),
           help=_NO_EFFECT + " (the local journal fsyncs every batch: journal-fsync)"),
    Option("repl-diskless-sync", True, _bool, help=_NO_EFFECT + " (RDB exports for SYNC are always diskless)"),
    Option("repl-diskless-sync-delay", 5, _int(0, INT_MAX), help=_NO_EFFECT),
    # resizeReplicationBacklog: never under CONFIG_REPL_BACKLOG_MIN_SIZE (16 KiB)
    Option("repl-backlog-size", 10 * MB, _mem(1, LLONG_MAX, clamp=(16 * 1024, LLONG_MAX)),
           help="Shown in INFO replication; durakv keeps no PSYNC backlog (a SYNC client streams live)"),
    Option("repl-backlog-ttl", 3600, _int(0, LONG_MAX), help=_NO_EFFECT + " (no PSYNC backlog)"),
    Option("tls-client-key-file-pass", "", _string, sensitive=True, help=_NO_EFFECT),
    # Valkey 8.0: HELLO and INFO identify the server as Redis 7.2 for clients that check (deprecated in 9)
    Option("extended-redis-compatibility", False, _bool,
           help="HELLO, INFO and LOLWUT identify the server as Redis 7.2 for clients that check"),
    Option("tracking-table-max-keys", 1_000_000, _uint(0, LONG_MAX),
           help="Keys client tracking remembers; past it keys are evicted from the table and invalidated"),
    Option("tls-key-file-pass", "", _string, sensitive=True, help="Password of an encrypted tls-key-file"),
    Option("primaryuser", "", _string, aliases=("masteruser",), sensitive=True,
           help="User REPLICAOF authenticates to its Valkey primary with"),
    Option("primaryauth", "", _string, aliases=("masterauth",), sensitive=True,
           help="Password REPLICAOF authenticates to its Valkey primary with"),
    Option("replicaof", "", _replicaof, mutable=False, aliases=("slaveof",), multi=True,
           parse_args=_replicaof_args,
           help="At start-up, follow this Valkey/Redis primary (`host port`) as REPLICAOF does; not with "
                "cluster-enabled or the JetStream journal. CONFIG GET shows the primary followed"),
    # Valkey's safe defaults: with no password for the default user, only loopback clients are served; DEBUG and
    # MODULE LOAD/UNLOAD are refused (`local`: from loopback connections only), and those two options are
    # immutable, as in Valkey (CONFIG SET refuses them even to the value they have)
    Option("protected-mode", True, _bool,
           help="With no password for the default user, only loopback clients are served (others get -DENIED)"),
    Option("enable-debug-command", "no", Enum("no", "yes", "local"), mutable=False,
           help="Whether DEBUG is allowed (local: from loopback connections only)"),
    Option("enable-module-command", "no", Enum("no", "yes", "local"), mutable=False,
           help="Whether MODULE LOAD / LOADEX / UNLOAD are allowed (local: from loopback connections only)"),
    # Valkey 9's command logs; the slow one keeps its SLOWLOG names as aliases, as 9.x does
    Option("commandlog-execution-slower-than", 10000, _int(-1, LLONG_MAX), aliases=("slowlog-log-slower-than",),
           help="Microseconds after which a command enters the slow log (-1: none, 0: all)"),
    Option("commandlog-slow-execution-max-len", 128, _uint(0, LONG_MAX), aliases=("slowlog-max-len",),
           help="Entries the slow log keeps"),
    Option("commandlog-request-larger-than", 1024 * 1024, _int(-1, LLONG_MAX),
           help="Bytes after which a request enters the large-request log (-1: none)"),
    Option("commandlog-large-request-max-len", 128, _uint(0, LONG_MAX), help="Entries the large-request log keeps"),
    Option("commandlog-reply-larger-than", 1024 * 1024, _int(-1, LLONG_MAX),
           help="Bytes after which a reply enters the large-reply log (-1: none)"),
    Option("commandlog-large-reply-max-len", 128, _uint(0, LONG_MAX), help="Entries the large-reply log keeps"),
    Option("latency-monitor-threshold", 0, _int(0, LLONG_MAX),
           help="Milliseconds after which an event is sampled by LATENCY (0: off)"),
    Option("notify-keyspace-events", "", _string,
           help="Keyspace notification classes (K E g $ l s h z x e t m d n A), empty: none"),
    Option("busy-reply-threshold", 5000, _int(0, LONG_MAX), aliases=("lua-time-limit",),
           help="Milliseconds a script or function runs before other clients get -BUSY"),
    Option("cluster-enabled", False, _bool, mutable=False,
           help="Cluster mode: 16384 slots, MOVED/ASK, CLUSTER commands"),
    # Valkey 9's numbered databases in cluster mode: a cluster node has this many (SELECT 0..n-1) and ignores
    # `databases`; see Config.database_count
    Option("cluster-databases", 1, _int(1, INT_MAX), mutable=False,
           help="Numbered databases of a cluster node (databases is ignored in cluster mode)"),
    Option("journal-nats-tls-ca-file", "", _string, mutable=False,
           help="durakv: the CA that NATS servers' certificates are verified with (tls:// servers)"),
    Option("cluster-require-full-coverage", True, _bool,
           help="Whether the cluster refuses every key while a slot is not served"),
    Option("cluster-allow-reads-when-down", False, _bool, help="Whether reads are served while the cluster is down"),
    Option("cluster-allow-pubsubshard-when-down", True, _bool,
           help="Whether shard pub/sub works while the cluster is down"),
    Option("cluster-preferred-endpoint-type", "ip", Enum("ip", "hostname", "unknown-endpoint"),
           help="Which endpoint MOVED, ASK and CLUSTER SLOTS give clients"),
    Option("cluster-announce-hostname", "", Text(_hostname_problem, "a hostname (letters, digits, '-', '.'; "
                                                                     "under 256 bytes) or empty"),
           help=_NO_EFFECT + " (nodes announce announce-ip)"),
    # A primary refuses writes (NOREPLICAS) while fewer replicas than this were heard from within the lag.
    Option("min-replicas-to-write", 0, _int(0, INT_MAX), aliases=("min-slaves-to-write",),
           help="Replicas heard from within min-replicas-max-lag a primary needs to accept writes (0: none)"),
    Option("min-replicas-max-lag", 10, _int(0, INT_MAX), aliases=("min-slaves-max-lag",),
           help="Seconds within which a replica must have been heard from to count for min-replicas-to-write"),
    # A node not heard from for this long is shown failed (CLUSTER SLOTS leaves it out), as Valkey marks it FAIL.
    Option("cluster-node-timeout", 15000, _int(0, LLONG_MAX),
           help="Milliseconds after which a silent node is shown failed"),
    Option("replica-read-only", True, _bool, aliases=("slave-read-only",),
           help=_NO_EFFECT + " (replicas are always read-only)"),
    Option("replica-serve-stale-data", True, _bool, aliases=("slave-serve-stale-data",),
           help="Whether a replica out of touch with its primary still answers reads"),
    Option("io-threads", 1, _int(1, 256), help=_NO_EFFECT + " (one event loop)"),
    # Encoding thresholds: they decide what OBJECT ENCODING answers (keyspace/encoding.py), as in Valkey;
    # the `ziplist` names are Valkey's aliases from before listpacks.
    Option("list-max-listpack-size", -2, _int(INT_MIN, INT_MAX), aliases=("list-max-ziplist-size",),
           help="Largest list node kept as a listpack (negative: -1..-5 for 4..64 KiB; positive: entries)"),
    Option("hash-max-listpack-entries", 512, _uint(0, LONG_MAX), aliases=("hash-max-ziplist-entries",),
           help="Most fields of a hash encoded as a listpack"),
    Option("hash-max-listpack-value", 64, _mem(0, LONG_MAX, unsigned=True), aliases=("hash-max-ziplist-value",),
           help="Longest field or value of a hash encoded as a listpack"),
    Option("set-max-intset-entries", 512, _uint(0, LONG_MAX), help="Most members of a set encoded as an intset"),
    Option("set-max-listpack-entries", 128, _uint(0, LONG_MAX), help="Most members of a set encoded as a listpack"),
    Option("set-max-listpack-value", 64, _uint(0, LONG_MAX), help="Longest member of a set encoded as a listpack"),
    Option("zset-max-listpack-entries", 128, _uint(0, LONG_MAX), aliases=("zset-max-ziplist-entries",),
           help="Most members of a sorted set encoded as a listpack"),
    Option("zset-max-listpack-value", 64, _mem(0, LONG_MAX, unsigned=True), aliases=("zset-max-ziplist-value",),
           help="Longest member of a sorted set encoded as a listpack"),
    # Quicklist node compression: a layout knob with no effect on any reply but DEBUG OBJECT's.
    Option("list-compress-depth", 0, _int(0, INT_MAX), help="List nodes left uncompressed at each end (DEBUG OBJECT)"),
    # Stream node limits: durakv models Valkey's stream nodes (keyspace/stream.py), which approximate
    # trimming (MAXLEN ~) and XINFO STREAM's radix-tree counts follow.
    Option("stream-node-max-entries", 100, _int(0, LLONG_MAX), help="Most entries of one stream node"),
    Option("stream-node-max-bytes", 4096, _mem(0, LONG_MAX, unsigned=True), help="Most bytes of one stream node"),
    # Valkey 8.0 frees big values in a background thread (these default to yes); durakv frees at once, which no
    # reply can tell apart: the three below decide whether the server's own deletions are journaled (and
    # propagated) as UNLINK or DEL, the user ones are kept for CONFIG GET only.
    Option("lazyfree-lazy-eviction", True, _bool, help="Whether evictions are journaled as UNLINK (else DEL)"),
    Option("lazyfree-lazy-expire", True, _bool, help="Whether expirations are journaled as UNLINK (else DEL)"),
    Option("lazyfree-lazy-server-del", True, _bool,
           help="Whether the server's own deletions (RESTORE of an expired key, ...) are journaled as UNLINK"),
    Option("lazyfree-lazy-user-del", True, _bool, help=_NO_EFFECT + " (values are freed at once)"),
    Option("lazyfree-lazy-user-flush", True, _bool, help=_NO_EFFECT + " (values are freed at once)"),
    # HyperLogLog sparse -> dense promotion (keyspace/hll.py), as in Valkey.
    Option("hll-sparse-max-bytes", 3000, _mem(0, LONG_MAX, unsigned=True),
           help="Largest HyperLogLog kept in the sparse encoding"),
    # valkey-json 1.0.2's module configs (json.cc registerModuleConfigs): bytes a document may grow to (0: no
    # limit; a memory value) and how deep a document and a path may nest
    Option("json.max-document-size", 0, _mem(0, LLONG_MAX),
           help="valkey-json: the most bytes one JSON document may grow to (0: no limit)"),
    Option("json.max-path-limit", 128, _int(0, INT_MAX),
           help="valkey-json: how deep a JSON document and a path may nest"),
    Option("import-mode", False, _bool,
           help="Import mode (Valkey 9.1): keys are never expired or evicted by the server; clients marked with "
                "CLIENT IMPORT-SOURCE ON see and write keys whose TTL passed, others do not see them"),
    # valkey-bloom 1.0.1's module configs, with its defaults and bounds (lib.rs, configs.rs)
    Option("bf.bloom-capacity", 100, _int(1, LLONG_MAX),
           help="valkey-bloom: the capacity of a filter BF.ADD / BF.MADD / BF.INSERT create"),
    Option("bf.bloom-expansion", 2, _int(0, UINT_MAX),
           help="valkey-bloom: how many times larger each new sub-filter of a new filter is (0: NONSCALING)"),
    Option("bf.bloom-fp-rate", "0.01", _bf_rate(messages.BF_ERROR_RATE_RANGE),
           help="valkey-bloom: the false positive rate of a new filter"),
    Option("bf.bloom-tightening-ratio", "0.5", _bf_rate(messages.BF_TIGHTENING_RATIO_RANGE),
           help="valkey-bloom: the factor each new sub-filter's false positive rate is multiplied by"),
    Option("bf.bloom-memory-usage-limit", 128 * MB, _int(0, LLONG_MAX),
           help="valkey-bloom: the most bytes one filter may use (writes that would pass it are refused)"),
    Option("bf.bloom-use-random-seed", True, _bool,
           help="valkey-bloom: whether a new filter hashes with a random seed (else the module's fixed seed)"),
    Option("bf.bloom-defrag-enabled", True, _bool,
           help="valkey-bloom: " + _NO_EFFECT + " (durakv has no active defragmentation)"),
    # durakv's own
    Option("durability", "sync", Enum("none", "async", "sync"), late=True,
           help="durakv: none (no journal), async (reply at once, journal behind) or sync (reply after the "
                "journal commit); switchable live, a shard setting on JetStream"),
    Option("durability-buffer-ms", 10000, _int(1, INT_MAX), late=True,
           help="durakv: async mode's bound on how far acknowledged writes may run ahead of the journal; past "
                "it writes are refused until the journal catches up"),
    Option("journal-backend", "local", Enum("local", "jetstream"), mutable=False,
           help="durakv: local (segmented WAL in dir) or jetstream (a NATS JetStream stream per shard)"),
    Option("journal-nats-servers", "", _string, mutable=False,
           help="durakv: comma-separated NATS server URLs of the JetStream journal and coordination store; empty: "
                "the ones `durakv cluster create` gave the node when it joined"),
    Option("journal-nats-creds", "", _string, mutable=False,
           help="durakv: a NATS credentials file the operator issued for this node ahead of time (`durakv cluster "
                "issue-node`), with --shard; without it a node waits for `durakv cluster create` to assign it and "
                "keeps the identity it was given in DIR/cluster"),
    Option("journal-nats-tls-cert-file", "", _string, mutable=False,
           help="durakv: the client certificate presented to NATS servers that verify clients (mutual TLS)"),
    Option("journal-nats-tls-key-file", "", _string, mutable=False,
           help="durakv: the key of journal-nats-tls-cert-file"),
    Option("journal-max-appends-in-flight", 8, _int(1, 32), mutable=False,
           help="durakv: JetStream journal appends sent before the first is acknowledged (each conditional on "
                "the sequence the one before takes; 1 = one at a time). 32 is the bound fencing relies on "
                "(journal/jetstream.py MAX_APPENDS_IN_FLIGHT)"),
    Option("journal-append-stall-ms", 20000, _int(0, INT_MAX),
           help="durakv: a shard primary whose oldest journal append is unacknowledged this long steps down (gives "
                "up its lease and restarts as a replica) instead of keeping a lease while nothing commits. Longer "
                "than a NATS stream leader election (up to ~9 s), which deposes nobody. 0 = never"),
    Option("shard", "0", Text(_shard_problem, "1 to 64 letters, digits, '-' or '_'"), mutable=False,
           help="durakv: the shard this node belongs to (names its JetStream stream and lease)"),
    Option("availability-zone", "az1", Text(_az_problem, "1 to 64 letters, digits, '.', '-' or '_'"),
           mutable=False, help="durakv: the failure domain this node runs in (placement, status, INFO)"),
    Option("node-id", "", Text(_label_problem, "up to 64 letters, digits, '.', '-' or '_'"), mutable=False,
           help="durakv: this node's name in its shard (empty: shard-az-port); a cluster node id is derived "
                "from it"),
    Option("lease-ttl-ms", 2000, _int(200, 600000), late=True,
           help="durakv: the primary's lease, one value per shard (a shard setting: CONFIG SET on any node of the "
                "shard changes it for all; the first node's flag is the shard's until then)"),
    Option("lease-renew-max-loop-stall-ms", 30000, _int(1000, INT_MAX),
           help="durakv: the lease is renewed on a thread of its own while the event loop is busy, but not for a "
                "loop that has shown no sign of life for longer than this (a hung process must fail over); never "
                "less than busy-reply-threshold + lease-ttl-ms"),
    Option("replica-snapshot-interval-ms", 60000, _int(0, INT_MAX),
           help="durakv: how often a shard replica stores a snapshot in the object store (0: never)"),
    Option("replica-max-lag-ms", 5000, _int(0, INT_MAX),
           help="durakv: a replica that has known for longer than this of journal entries it has not applied "
                "answers reads with -MASTERDOWN until it catches up (0: never)"),
    # Valkey's names for what a node tells clients and other nodes about itself (announce-ip is durakv's older
    # name). Empty ip: the bind address if it is one, else 127.0.0.1; 0 ports: the ones it listens on.
    Option("cluster-announce-ip", "", _string, mutable=False, aliases=("announce-ip",),
           help="the address this node gives clients and the other nodes (topology, MOVED, CLUSTER SLOTS); empty: "
                "its bind address if that is one host's, else 127.0.0.1"),
    Option("cluster-announce-port", 0, _int(0, 65535), mutable=False,
           help="the client port this node announces; 0: the one it listens on"),
    Option("cluster-announce-tls-port", 0, _int(0, 65535), mutable=False,
           help="the TLS client port this node announces; 0: the one it listens on"),
    # under 1 KiB every record would take a segment file of its own (a file per write)
    Option("journal-segment-bytes", 64 * MB, _mem(1024, LLONG_MAX), mutable=False,
           help="durakv: size at which the local journal starts a new segment file"),
    Option("journal-fsync", True, _bool, mutable=False,
           help="durakv: fsync every local journal batch (no: the OS decides; a power loss can lose commits)"),
    # the same kind as Valkey's auto-aof-rewrite-min-size (0 .. LLONG_MAX), whose role it plays
    Option("auto-snapshot-journal-bytes", 256 * MB, _mem(0, LLONG_MAX),
           help="durakv: journal bytes written since the last snapshot after which a snapshot is built (and the "
                "journal before it dropped; looked at hz times a second, a failed one tried again after 5 s); "
                "0: never"),
    # Scheduled backups (durakv/backup/schedule.py; docs/multi-az.md "Backups and restore"). MemoryDB keeps
    # automatic snapshots 0..35 days: the same bounds.
    Option("backup-schedule", "", Text(lambda t: backup_schedule_problem(t),
                                       "a daily UTC time HH:MM, or 'every N' with s, m, h or d (at least 10s); "
                                       "empty: none"),
           help="durakv: when backups are taken (a daily UTC time 05:30, or an interval every 6h); in a cluster one "
                "node per shard (a replica first) takes each; empty: no scheduled backups"),
    Option("backup-destination", "", Text(_backup_destination_problem, "an absolute directory or s3://BUCKET/PREFIX"),
           help="durakv: where scheduled backups go: an absolute directory (shared by the nodes of a cluster) or "
                "s3://BUCKET/PREFIX"),
    Option("backup-retention-days", 0, _int(0, 35),
           help="durakv: scheduled backups older than this many days are deleted (never the newest), and the journal "
                "is kept that long for the next backup to continue from; 0: keep every backup (the journal 7 days)"),
    Option("backup-s3-endpoint-url", "", _string,
           help="durakv: the S3 endpoint of backup-destination (empty: AWS, or AWS_ENDPOINT_URL)"),
    Option("backup-s3-region", "", _string, help="durakv: the S3 region of backup-destination (empty: boto3's default)"),
    Option("backup-s3-access-key-id", "", _string, sensitive=True,
           help="durakv: the S3 access key id (empty: boto3's standard environment and files)"),
    Option("backup-s3-secret-access-key", "", _string, sensitive=True,
           help="durakv: the S3 secret key (never logged or shown in INFO; keep it in the config file, not argv)"),
    Option("journal-load-truncated", False, _bool,
           help="Like Valkey's aof-load-truncated, for the local journal (default no, unlike Valkey's: an "
                "acknowledged write must not vanish quietly). no: start-up stops when the journal is damaged "
                "beyond its last append (a damaged record followed by valid ones, records ending before what "
                "the segment state says was committed, a missing or emptied segment); the message names the "
                "file, the byte offset and the entries missing. yes: start anyway, cutting the journal at the "
                "first damage; every dropped entry range is logged and the dropped bytes are kept aside as "
                "*.dropped files. A torn last append is always cut (it was never acknowledged)."),
    # the most one Lua VM (EVAL's, FUNCTION's) may allocate before a script gets Lua's "not enough memory"
    # (Valkey has no such bound: its allocator aborts the process); 0 = no bound. Under 1 MB a fresh VM with its
    # libraries cannot run `return 1` (measured: 300 KB fails, 1 MB runs), so such a limit would refuse every
    # script; above LLONG_MAX lupa's size_t cannot take it.
    Option("lua-memory-limit", 1024 * MB, _mem(0, LLONG_MAX, check=lambda v: (
        "argument must be 0 (no limit) or at least 1048576" if 0 < v < MB else None),
        check_doc="0 (no limit) or at least 1048576"),
        help="durakv: the most one Lua VM may allocate before a script gets \"not enough memory\" (0: no bound)"),
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


def fatal_config_text(exc, version) -> str:
    """What start-up prints on stderr for a ConfigError before it exits 1: Valkey's block (config.c
    loadServerConfigFromString's loaderr), with the line when the error has one."""
    out = ["", "*** FATAL CONFIG FILE ERROR (Version %s) ***" % version]
    if getattr(exc, "lineno", None) is not None:
        out.append("Reading the configuration file, at line %d" % exc.lineno)
        out.append(">>> '%s'" % exc.line)
    out.append(getattr(exc, "reason", None) or str(exc))
    return "\n".join(out) + "\n"


def _line_error(path, lineno, line, reason):
    exc = ConfigError(f"{path}:{lineno}: '{line}': {reason}")
    exc.lineno, exc.line, exc.reason = lineno, line, reason
    return exc


def argv_to_config(argv) -> bytes:
    """valkey-server's main(): `--name value ...` arguments as the config lines Valkey appends to the file
    ("--port 6380" gives `port "6380"`, each value quoted by sdscatrepr), so that start-up reads them with the
    file's parser and reports an error with its line. An option given no value takes the next `--word` as its
    value (`--port --loglevel verbose` is `port "--loglevel" "verbose"`), except `--save` followed by an
    option, which is `save ""`."""
    lines = []
    handled_last = True
    for j, arg in enumerate(argv):
        raw = arg.encode("utf-8", "surrogateescape")
        if handled_last and raw.startswith(b"--"):
            lines.append(bytearray(raw[2:] + b" "))
            parts = split_args(raw)
            handled_last = parts is None or len(parts) != 1
            if not handled_last and raw.lower() == b"--save":
                last = j == len(argv) - 1
                if last or argv[j + 1].startswith("--"):
                    lines[-1] += b'""'
                    handled_last = not last
        else:
            if not lines:
                lines.append(bytearray())
            lines[-1] += repr_bytes(raw).encode("ascii") + b" "
            handled_last = True
    return b"\n".join(bytes(line) for line in lines)


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

    def announced(self):
        """(ip, port, tls_port) this node tells clients and other nodes (Valkey's cluster-announce-*): the
        announce ip, else the first bind address that is one host's, else 127.0.0.1; the announce ports, else
        the ones it listens on."""
        ip = self.values["cluster-announce-ip"]
        if not ip:
            binds = [b.lstrip("-") for b in self.values["bind"]] if isinstance(self.values["bind"], (list, tuple)) \
                else str(self.values["bind"]).split()
            ip = next((b for b in binds if b not in ("*", "0.0.0.0", "::", "::*", "")), "127.0.0.1")
        return (ip, self.values["cluster-announce-port"] or self.values["port"],
                self.values["cluster-announce-tls-port"] or self.values["tls-port"])

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
        lowered = name.lower()
        opt = BY_NAME.get(lowered)
        if opt is None:
            if lowered in REFUSED:
                raise ConfigError(REFUSED[lowered])
            raise ConfigError("Bad directive or wrong number of arguments")
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
        """(name, formatted value) pairs for CONFIG GET. As configGetCommand: a name without glob characters
        is looked up exactly and answered under the name given (a hidden option too); a pattern matches
        every name and alias, hidden options left out."""
        if not any(c in pattern for c in "[*?"):
            opt = BY_NAME.get(pattern.lower())
            return {pattern: opt.format(self.values[opt.name])} if opt is not None else {}
        pat = pattern.lower()
        out = {}
        for name, opt in BY_NAME.items():
            if not opt.hidden and fnmatch.fnmatchcase(name, pat):
                out[name] = opt.format(self.values[opt.name])
        return out

    def formatted(self, name):
        opt = BY_NAME[name]
        return opt.format(self.values[opt.name])

    # -- loading ------------------------------------------------------------------------------
    def load_file(self, path: str):
        self.config_file = os.path.abspath(path)
        with open(path, "rb") as f:
            self.load_text(f.read(), path)

    def load_text(self, data: bytes, path="(config)"):
        """Valkey's loadServerConfigFromString over the bytes of a config file. A ConfigError names the line:
        str() as `path:line: 'text': reason`, and .lineno, .line, .reason for fatal_config_text."""
        for lineno, raw in enumerate(data.split(b"\n"), 1):
            line = raw.strip(b" \t\r\n")
            if not line or line.startswith(b"#"):
                continue
            shown = _decode(line)
            parts = split_args(line)
            if parts is None:
                raise _line_error(path, lineno, shown, "Unbalanced quotes in configuration line")
            if not parts:
                continue
            name, args = _decode(parts[0]).lower(), [_decode(a) for a in parts[1:]]
            if name == "user" and args:
                # `user <name> <rules...>`: not an option (CONFIG GET/SET do not know it, as in Valkey); the ACL
                # users are built from these lines at start-up.
                self.user_lines.append(list(parts[1:]))
                continue
            if name == "include" and len(args) == 1:
                with open(args[0], "rb") as f:     # its lines, read here; CONFIG REWRITE still writes the main file
                    self.load_text(f.read(), args[0])
                continue
            try:
                self.set_args(name, args, startup=True)
            except ConfigError as exc:
                raise _line_error(path, lineno, shown, str(exc)) from None

    def load_args(self, argv):
        """`--name value [value...]` arguments, read as valkey-server reads them: the config lines they make
        (argv_to_config), parsed as a file's are."""
        self.load_text(argv_to_config(argv), "(command line)")

    def check(self):
        """The start-up checks across options that follow loading (Valkey's sanity checks after
        loadServerConfigFromString). Raises ConfigError."""
        if self.values["replicaof"]:
            if self.values["cluster-enabled"]:
                raise ConfigError("replicaof directive not allowed in cluster mode")
            if self.values["journal-backend"] == "jetstream":
                raise ConfigError("replicaof directive not allowed with journal-backend jetstream: a shard "
                                  "member follows its shard's journal, not a Valkey primary")

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
    unbalanced. As in Valkey 9, quoted and unquoted parts next to each other make one argument, as a shell
    joins them (`"a"b'c'` is `abc`; Valkey 8 refused a closing quote not followed by a blank). Like C, line
    ends at a NUL."""
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
                elif c == 34:  # '"': the argument goes on until a blank
                    inq = False
                elif p >= n:
                    return None
                else:
                    cur.append(c)
            elif insq:
                if c == 92 and p + 1 < n and line[p + 1] == 39:
                    p += 1
                    cur.append(39)
                elif c == 39:
                    insq = False
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
