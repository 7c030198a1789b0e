"""Introspection: OBJECT, MEMORY, SLOWLOG, COMMANDLOG, LATENCY, and the command logs / latency monitor behind
them (COMMANDLOG's slow log is the one SLOWLOG serves, as in Valkey 9; its large-request and large-reply logs
are fed by the pipeline and by the connection, which alone knows a reply's encoded size).

The pipeline times every command; when one takes at least `Monitors.threshold_us` (the smaller of
`slowlog-log-slower-than` and `latency-monitor-threshold`, both followed live through CONFIG SET) it
calls Monitors.record, which adds a slow log entry and/or a "command" / "fast-command" latency sample
as Valkey's call() does. The keyspace reports each active expire cycle as "expire-cycle".

None of these commands writes the dataset, so none propagates anything.

OBJECT ENCODING reports the encoding Valkey would use for the value as it is now, from its content and
Valkey's default thresholds (Valkey's encodings also depend on history: an APPENDed string is always
raw, a list that grew past the listpack limit stays a quicklist until it halves; durakv keeps no such
history). OBJECT IDLETIME answers from the key's access time, kept (as Valkey keeps every object's LRU clock,
to the second) under any maxmemory policy but an LFU one, where it is an error.
"""

import sys
import time
from collections import deque
from itertools import islice

from .. import messages
from ..errors import CommandError
from ..keyspace import encoding
from ..keyspace.db import _BYTES_HEADER, _ELEMENT_OVERHEAD, _KEY_OVERHEAD, estimate_key
from ..protocol.numbers import string2ll
from ..protocol.resp import OK, Raw
from .args import ArgCursor
from .base import parse_int, syntax_error
from .registry import command

# -- the slow log and the latency monitor ---------------------------------------------------------

SLOWLOG_ENTRY_MAX_ARGC = 32
SLOWLOG_ENTRY_MAX_STRING = 128
LATENCY_TS_LEN = 160
_NEVER = 1 << 62
_REDACTED = b"(redacted)"
# Valkey 9's commandlog-* options (the slow ones answer to their slowlog-* names too) -> Monitors attribute
_LOG_CONFIGS = {"commandlog-execution-slower-than": "slowlog_slower_than",
                "commandlog-slow-execution-max-len": "slowlog_max_len",
                "commandlog-request-larger-than": "request_larger_than",
                "commandlog-large-request-max-len": "large_request_max_len",
                "commandlog-reply-larger-than": "reply_larger_than",
                "commandlog-large-reply-max-len": "large_reply_max_len"}


class Monitors:
    """The command logs (slow, large-request, large-reply: Valkey 9's COMMANDLOG, whose slow log SLOWLOG also
    serves) and the latency time series of one server (held by its pipeline)."""

    __slots__ = ("slowlog", "slowlog_next_id", "slowlog_slower_than", "slowlog_max_len",
                 "large_request", "large_request_next_id", "request_larger_than", "large_request_max_len",
                 "large_reply", "large_reply_next_id", "reply_larger_than", "large_reply_max_len", "reply_limit",
                 "request_limit",
                 "latency_threshold_ms", "latency_events", "threshold_us", "config", "encoding_rules", "core_state")

    def __init__(self, keyspace=None, config=None):
        # each log newest first: (id, unix_s, value, argv, addr, name), value in usec or bytes by log
        self.slowlog = deque()
        self.slowlog_next_id = 0
        self.slowlog_slower_than = 10000
        self.slowlog_max_len = 128
        self.large_request = deque()
        self.large_request_next_id = 0
        self.request_larger_than = 1024 * 1024
        self.large_request_max_len = 128
        self.large_reply = deque()
        self.large_reply_next_id = 0
        self.reply_larger_than = 1024 * 1024
        self.large_reply_max_len = 128
        self.latency_threshold_ms = 0
        self.latency_events = {}        # event -> LatencySeries
        self.config = config
        self.encoding_rules = None
        self.core_state = None          # the compiled core's state (bind_core_state): the thresholds go there too
        if config is not None:
            for name in _LOG_CONFIGS:
                self._on_config_set(name, config[name], startup=True)
            self.latency_threshold_ms = config.get("latency-monitor-threshold", 0)
            config.listeners.append(self._on_config_set)
        if keyspace is not None:
            keyspace.latency_monitor = self
            # OBJECT ENCODING's thresholds follow the same config (keyspace/encoding.py).
            self.encoding_rules = keyspace.encoding_rules
            if config is not None:
                self.encoding_rules.load(config.__getitem__)
        self._recompute()

    def _on_config_set(self, name, value, startup=False):
        if self.encoding_rules is not None and self.encoding_rules.set(name, value):
            return
        attr = _LOG_CONFIGS.get(name)
        if attr is not None:
            setattr(self, attr, value)
            if attr.endswith("max_len"):
                self._trim()
        elif name == "latency-monitor-threshold":
            self.latency_threshold_ms = value
        else:
            return
        if not startup:
            self._recompute()

    def _recompute(self):
        t = _NEVER
        if self.slowlog_slower_than >= 0 and self.slowlog_max_len > 0:
            t = self.slowlog_slower_than
        if self.latency_threshold_ms > 0:
            t = min(t, self.latency_threshold_ms * 1000)
        self.threshold_us = t
        # the reply size past which the connection reports a reply to record_reply (never while it is off)
        self.reply_limit = (self.reply_larger_than if self.reply_larger_than >= 0 and self.large_reply_max_len > 0
                            else _NEVER)
        # likewise the request size past which the pipeline calls record_request
        self.request_limit = (self.request_larger_than if self.request_larger_than >= 0
                              and self.large_request_max_len > 0 else _NEVER)
        st = self.core_state
        if st is not None:   # the compiled core reads them there (commands/corestate.py)
            st.threshold_us, st.request_limit, st.reply_limit = self.threshold_us, self.request_limit, self.reply_limit

    def bind_core_state(self, state):
        """The thresholds are written to `state` (commands/corestate.py) from now on, where they change."""
        self.core_state = state
        self._recompute()

    def _trim(self):
        for log, max_len in ((self.slowlog, self.slowlog_max_len), (self.large_request, self.large_request_max_len),
                             (self.large_reply, self.large_reply_max_len)):
            while len(log) > max_len:
                log.pop()

    def record(self, session, cmd, args, usec):
        """A command took usec >= threshold_us: the slow log and latency monitor decide what to keep."""
        threshold = self.latency_threshold_ms
        if threshold and usec // 1000 >= threshold:
            self.add_sample("fast-command" if "fast" in cmd.flags else "command", usec // 1000)
        if (self.slowlog_slower_than < 0 or self.slowlog_max_len == 0 or usec < self.slowlog_slower_than
                or cmd.skip_slowlog):
            return
        self.slowlog.appendleft((self.slowlog_next_id, int(time.time()), usec, _slowlog_argv(cmd, args),
                                 _addr(session), getattr(session, "name", b"") or b""))
        self.slowlog_next_id += 1
        self._trim()

    def record_request(self, session, cmd, args):
        """The large-request log: a command whose request, as RESP, is larger than commandlog-request-larger-than
        bytes (Valkey counts the bytes it read for the command; a client sends commands as RESP arrays). The
        pipeline calls it only for a request that may be (request_limit), so the common one costs no call."""
        if cmd.skip_slowlog:
            return
        size = sum(map(len, args)) + len(b"*%d\r\n" % len(args)) + sum(len(b"$%d\r\n\r\n" % len(a)) for a in args)
        if size > self.request_limit:
            self.large_request.appendleft((self.large_request_next_id, int(time.time()), size,
                                           _slowlog_argv(cmd, args), _addr(session),
                                           getattr(session, "name", b"") or b""))
            self.large_request_next_id += 1
            self._trim()

    def record_reply(self, session, cmd, args, size):
        """The large-reply log: the connection calls this for a reply of more than commandlog-reply-larger-than
        bytes, once it is encoded."""
        if self.large_reply_max_len == 0 or cmd.skip_slowlog:
            return
        self.large_reply.appendleft((self.large_reply_next_id, int(time.time()), size, _slowlog_argv(cmd, args),
                                     _addr(session), getattr(session, "name", b"") or b""))
        self.large_reply_next_id += 1
        self._trim()

    def add_sample_if_needed(self, event, ms):
        threshold = self.latency_threshold_ms
        if threshold and ms >= threshold:
            self.add_sample(event, ms)

    def add_sample(self, event, ms):
        series = self.latency_events.get(event)
        if series is None:
            series = self.latency_events[event] = LatencySeries()
        series.add(int(time.time()), ms)


class LatencySeries:
    """Valkey's latencyTimeSeries: the last 160 (unix second, max ms in that second) and the all-time max."""

    __slots__ = ("samples", "max")

    def __init__(self):
        self.samples = deque(maxlen=LATENCY_TS_LEN)  # [time, latency] oldest first
        self.max = 0

    def add(self, now, ms):
        if ms > self.max:
            self.max = ms
        samples = self.samples
        if samples and samples[-1][0] == now:
            if ms > samples[-1][1]:
                samples[-1][1] = ms
            return
        samples.append([now, ms])


def _addr(session):
    addr = getattr(session, "addr", "?")
    return addr.encode() if isinstance(addr, str) else addr


def redacted_positions(cmd, args):
    """Argument positions Valkey replaces with '(redacted)' in the slow log and MONITOR
    (redactClientCommandArgument)."""
    name = cmd.fullname
    n = len(args)
    if name == "auth":
        return range(1, n) if n <= 3 else ()
    if name == "hello":
        for j in range(2, n):
            if args[j].lower() == b"auth" and j + 2 < n:
                return (j + 1, j + 2)
        return ()
    if name == "config|set":
        from ..config import BY_NAME
        out = []
        for j in range(2, n - 1, 2):
            opt = BY_NAME.get(args[j].decode("utf-8", "replace").lower())
            if opt is not None and opt.sensitive:
                out.append(j + 1)
        return out
    if name in ("acl|setuser", "acl|deluser"):
        return range(2, n)
    if name == "acl|getuser":
        return (2,)
    if name == "migrate":
        out = []
        for j in range(6, n):
            a = args[j].lower()
            if a == b"auth" and j + 1 < n:
                out.append(j + 1)
            elif a == b"auth2" and j + 2 < n:
                out.extend((j + 1, j + 2))
        return out
    return ()


def _slowlog_argv(cmd, args):
    argc = len(args)
    redact = redacted_positions(cmd, args)
    shown = min(argc, SLOWLOG_ENTRY_MAX_ARGC)
    out = []
    for j in range(shown):
        if shown != argc and j == shown - 1:
            out.append(b"... (%d more arguments)" % (argc - shown + 1))
        elif j in redact:
            out.append(_REDACTED)
        else:
            a = args[j]
            if len(a) > SLOWLOG_ENTRY_MAX_STRING:
                a = a[:SLOWLOG_ENTRY_MAX_STRING] + b"... (%d more bytes)" % (len(a) - SLOWLOG_ENTRY_MAX_STRING)
            out.append(a)
    return out


def _help(args, lines):
    """addReplyHelp: status replies, a heading naming the command as typed (upper-cased) and a HELP footer."""
    head = "%s <subcommand> [<arg> [value] [opt] ...]. Subcommands are:" % args[0].decode(
        "utf-8", "replace").upper()
    return [head] + list(lines) + ["HELP", "    Print this help."]


def subcommand_syntax_error(args):
    return CommandError(messages.SUBCOMMAND_SYNTAX.format(args[1][:128].decode("utf-8", "replace"),
                                                         args[0].decode("utf-8", "replace").upper()))


def _verbatim(ctx, text: bytes):
    """addReplyVerbatim: a RESP3 verbatim string ('txt'), a bulk string in RESP2."""
    if ctx.resp3:
        return Raw(b"=%d\r\ntxt:%s\r\n" % (len(text) + 4, text))
    return text


# -- SLOWLOG --------------------------------------------------------------------------------------

def _monitors(ctx):
    return ctx.pipeline.monitors


@command("slowlog|get")
def slowlog_get(ctx, args):
    if len(args) > 3:
        raise subcommand_syntax_error(args)
    log = _monitors(ctx).slowlog
    count = 10
    if len(args) == 3:
        count = parse_int(args[2], messages.SLOWLOG_COUNT)
        if count < -1:
            raise CommandError(messages.SLOWLOG_COUNT)
        if count == -1:
            count = len(log)
    count = min(count, len(log))
    out = []
    for i in range(count):
        eid, at, usec, argv, addr, name = log[i]
        out.append([eid, at, usec, list(argv), addr, name])
    return out


@command("slowlog|len")
def slowlog_len(ctx, args):
    return len(_monitors(ctx).slowlog)


@command("slowlog|reset")
def slowlog_reset(ctx, args):
    _monitors(ctx).slowlog.clear()
    return OK


@command("slowlog|help")
def slowlog_help(ctx, args):
    return _help(args, [
        "GET [<count>]",
        "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
        "    Entries are made of:",
        "    id, timestamp, time in microseconds, arguments array, client IP and port,",
        "    client name",
        "LEN",
        "    Return the length of the slowlog.",
        "RESET",
        "    Reset the slowlog.",
    ])


# -- COMMANDLOG (Valkey 9) -------------------------------------------------------------------------

_COMMANDLOG_TYPES = {b"slow": "slowlog", b"large-request": "large_request", b"large-reply": "large_reply"}


def _commandlog(ctx, raw_type):
    attr = _COMMANDLOG_TYPES.get(raw_type.lower())
    if attr is None:
        raise CommandError(messages.COMMANDLOG_TYPE)
    return getattr(_monitors(ctx), attr)


@command("commandlog|get")
def commandlog_get(ctx, args):
    count = parse_int(args[2], messages.SLOWLOG_COUNT)   # the count is checked before the type, as Valkey
    if count < -1:
        raise CommandError(messages.SLOWLOG_COUNT)
    log = _commandlog(ctx, args[3])
    if count == -1 or count > len(log):
        count = len(log)
    return [[eid, at, value, list(argv), addr, name] for eid, at, value, argv, addr, name in islice(log, count)]


@command("commandlog|len")
def commandlog_len(ctx, args):
    return len(_commandlog(ctx, args[2]))


@command("commandlog|reset")
def commandlog_reset(ctx, args):
    _commandlog(ctx, args[2]).clear()   # the ids go on from where they were, as SLOWLOG RESET's
    return OK


@command("commandlog|help")
def commandlog_help(ctx, args):
    return _help(args, [
        "GET <count> <type>",
        "    Return top <count> entries of the specified <type> from the commandlog (-1 mean all).",
        "    Entries are made of:",
        "    id, timestamp,",
        "        time in microseconds for type of slow,",
        "        or size in bytes for type of large-request,",
        "        or size in bytes for type of large-reply",
        "    arguments array, client IP and port,",
        "    client name",
        "LEN <type>",
        "    Return the length of the specified type of commandlog.",
        "RESET <type>",
        "    Reset the specified type of commandlog.",
    ])


# -- LATENCY --------------------------------------------------------------------------------------

@command("latency|latest")
def latency_latest(ctx, args):
    out = []
    for event, series in _monitors(ctx).latency_events.items():
        t, ms = series.samples[-1] if series.samples else (0, 0)
        out.append([event.encode(), t, ms, series.max])
    return out


@command("latency|history")
def latency_history(ctx, args):
    series = _monitors(ctx).latency_events.get(args[2].decode("utf-8", "replace"))
    if series is None:
        return []
    return [[t, ms] for t, ms in series.samples]


@command("latency|reset")
def latency_reset(ctx, args):
    events = _monitors(ctx).latency_events
    if len(args) == 2:
        n = len(events)
        events.clear()
        return n
    resets = 0
    for raw in args[2:]:
        wanted = raw.decode("utf-8", "replace").lower()
        for name in [e for e in events if e.lower() == wanted]:
            del events[name]
            resets += 1
    return resets


@command("latency|graph")
def latency_graph(ctx, args):
    name = args[2].decode("utf-8", "replace")
    series = _monitors(ctx).latency_events.get(name)
    if series is None:
        raise CommandError(messages.LATENCY_NO_SAMPLES.format(name))
    return _verbatim(ctx, latency_graph_text(name, series, int(time.time())).encode())


LATENCY_GRAPH_COLS = 80
_CHARSET_FILL = "_o#"


def latency_graph_text(name, series, now):
    """latencyCommandGenSparkeline + sparklineRender(80 columns, 4 rows, SPARKLINE_FILL)."""
    seq = []
    for t, ms in series.samples:
        elapsed = now - t
        if elapsed < 60:
            label = "%ds" % elapsed
        elif elapsed < 3600:
            label = "%dm" % (elapsed // 60)
        elif elapsed < 86400:
            label = "%dh" % (elapsed // 3600)
        else:
            label = "%dd" % (elapsed // 86400)
        seq.append((ms, label))
    lo = min(ms for ms, _ in seq)
    hi = max(ms for ms, _ in seq)
    out = ["%s - high %d ms, low %d ms (all time high %d ms)\n" % (name, hi, lo, series.max),
           "-" * LATENCY_GRAPH_COLS + "\n"]
    for j in range(0, len(seq), LATENCY_GRAPH_COLS):
        if j:
            out.append("\n")
        out.append(_sparkline_range(seq, lo, hi, 4, j, min(LATENCY_GRAPH_COLS, len(seq) - j)))
    return "".join(out)


def _sparkline_range(seq, lo, hi, rows, offset, length):
    relmax = (hi - lo) or 1
    steps = len(_CHARSET_FILL) * rows
    has_labels = any(label for _v, label in seq)
    lines = []
    row = 0
    loop = True
    while loop:
        loop = False
        chars = [" "] * length
        for j in range(length):
            value, label = seq[j + offset]
            step = int(int((value - lo) * steps) / relmax)
            step = min(max(step, 0), steps - 1)
            if row < rows:
                charidx = step - (rows - row - 1) * len(_CHARSET_FILL)
                loop = True
                if 0 <= charidx < len(_CHARSET_FILL):
                    chars[j] = _CHARSET_FILL[charidx]
                elif charidx >= len(_CHARSET_FILL):
                    chars[j] = "|"
            else:
                if has_labels and row - rows < 1:
                    loop = True
                    break
                label_char = row - rows - 1
                if label and len(label) > label_char:
                    loop = True
                    chars[j] = label[label_char]
        if loop:
            row += 1
            lines.append("".join(chars) + "\n")
    return "".join(lines)


_ADVICE = {
    "slowlog_enabled": ("- There are latency issues with potentially slow commands you are using. Try to enable "
                        "the Slow Log Valkey feature using the command 'CONFIG SET slowlog-log-slower-than %d'. "
                        "If the Slow log is disabled Valkey is not able to log slow commands execution for you.\n"),
    "slowlog_tuning": ("- Your current Slow Log configuration only logs events that are slower than your configured "
                       "latency monitor threshold. Please use 'CONFIG SET slowlog-log-slower-than %d'.\n"),
    "slowlog_inspect": ("- Check your Slow Log to understand what are the commands you are running which are too "
                        "slow to execute. Please check https://valkey.io/commands/slowlog for more information.\n"),
    "scheduler": ("- The system is slow to execute Valkey code paths not containing system calls. This usually means "
                  "the system does not provide Valkey CPU time to run for long periods. You should try to:\n"
                  "  1) Lower the system load.\n"
                  "  2) Use a computer / VM just for Valkey if you are running other software in the same system.\n"
                  "  3) Check if you have a \"noisy neighbour\" problem.\n"
                  "  4) Check with 'valkey-cli --intrinsic-latency 100' what is the intrinsic latency in your "
                  "system.\n"
                  "  5) Check if the problem is allocator-related by recompiling Valkey with MALLOC=libc, if you are "
                  "using Jemalloc. However this may create fragmentation problems.\n"),
    "hz": ("- In order to make the Valkey keys expiring process more incremental, try to set the 'hz' configuration "
           "parameter to 100 using 'CONFIG SET hz 100'.\n"),
    "large_objects": ("- Deleting, expiring or evicting (because of maxmemory policy) large objects is a blocking "
                      "operation. If you have very large objects that are often deleted, expired, or evicted, try to "
                      "fragment those objects into multiple smaller objects.\n"),
}


def latency_report(mon, hz, now):
    """createLatencyReport, for the events durakv records."""
    if not mon.latency_events and mon.latency_threshold_ms == 0:
        return ("I'm sorry, Dave, I can't do that. Latency monitoring is disabled in this Valkey instance. You may "
                "use \"CONFIG SET latency-monitor-threshold <milliseconds>.\" in order to enable it.\n")
    out = []
    advise = set()
    for num, (event, series) in enumerate(mon.latency_events.items(), 1):
        if num == 1:
            out.append("Latency spikes are observed in this Valkey instance.\n\n")
        lat = [ms for _t, ms in series.samples]
        n = len(lat)
        avg = sum(lat) // n if n else 0
        mad = sum(abs(avg - ms) for ms in lat) // n if n else 0
        period = max(1, now - min(t for t, _ms in series.samples)) if n else 0
        out.append("%d. %s: %d latency spikes (average %dms, mean deviation %dms, period %.2f sec). Worst all time "
                   "event %dms." % (num, event, n, avg, mad, period / n if n else 0.0, series.max))
        ev = event.lower()
        if ev == "command":
            if mon.slowlog_slower_than < 0 or mon.slowlog_max_len == 0:
                advise.add("slowlog_enabled")
            elif mon.slowlog_slower_than // 1000 > mon.latency_threshold_ms:
                advise.add("slowlog_tuning")
            advise.update(("slowlog_inspect", "large_objects"))
        elif ev == "fast-command":
            advise.add("scheduler")
        elif ev == "expire-cycle":
            advise.update(("hz", "large_objects"))
        out.append("\n")
    if not mon.latency_events and not advise:
        out.append("No latency spike was observed during the lifetime of this Valkey instance, not in the slightest "
                   "bit.\n")
    elif not advise:
        out.append("\nThere are latency events logged that are not easy to fix. Please get some help from Valkey "
                   "community, providing this report in your help request.\n")
    else:
        out.append("\nHere is some advice for you:\n\n")
        threshold_us = mon.latency_threshold_ms * 1000
        for name in ("slowlog_enabled", "slowlog_tuning"):
            if name in advise:
                out.append(_ADVICE[name] % threshold_us)
        for name in ("slowlog_inspect", "scheduler"):
            if name in advise:
                out.append(_ADVICE[name])
        if "hz" in advise and hz < 100:
            out.append(_ADVICE["hz"])
        if "large_objects" in advise:
            out.append(_ADVICE["large_objects"])
    return "".join(out)


@command("latency|doctor")
def latency_doctor(ctx, args):
    hz = ctx.services.config["hz"] if ctx.services.config is not None else 10
    return _verbatim(ctx, latency_report(_monitors(ctx), hz, int(time.time())).encode())


def _latency_cdf(cmd):
    """fillCommandCDF: calls, and per latency bucket (its upper bound in microseconds, powers of two) the
    calls at or below it, listing only the buckets where the count grows."""
    cdf = {}
    total = 0
    for b, n in enumerate(cmd.latency):
        if n:
            total += n
            cdf[1 << b] = total
    return {b"calls": total, b"histogram_usec": cdf}


def _with_latency(cmds):
    for cmd in cmds:
        if any(cmd.latency):
            yield cmd


@command("latency|histogram")
def latency_histogram(ctx, args):
    from . import registry
    if len(args) == 2:
        picked = []
        for cmd in registry.implemented().values():
            picked.append(cmd)
            picked.extend(cmd.subcommands.values())
    else:
        picked = []
        for raw in args[2:]:
            cmd = registry.find(raw)
            if cmd is None:
                continue  # an unknown command is skipped, as Valkey does
            picked.append(cmd)
            picked.extend(cmd.subcommands.values())
    return {cmd.fullname.encode(): _latency_cdf(cmd) for cmd in _with_latency(picked)}


@command("latency|help")
def latency_help(ctx, args):
    return _help(args, [
        "DOCTOR",
        "    Return a human readable latency analysis report.",
        "GRAPH <event>",
        "    Return an ASCII latency graph for the <event> class.",
        "HISTORY <event>",
        "    Return time-latency samples for the <event> class.",
        "LATEST",
        "    Return the latest latency samples for all events.",
        "RESET [<event> ...]",
        "    Reset latency data of one or more <event> classes.",
        "    (default: reset all data for all event classes)",
        "HISTOGRAM [COMMAND ...]",
        "    Return a cumulative distribution of latencies in the format of a histogram for the specified "
        "command names.",
        "    If no commands are specified then all histograms are replied.",
    ])


# -- OBJECT ---------------------------------------------------------------------------------------

SHARED_INTEGERS = 10000
SHARED_REFCOUNT = 2147483647


def encoding_of(ctx, key, value) -> bytes:
    return encoding.encoding_of(ctx.keyspace.encoding_rules, ctx.db, key, value)


def _peek(ctx, key):
    """objectCommandLookup: lazy expiry, but no LRU/LFU touch."""
    db = ctx.db
    value = db.data.get(key)
    if value is None:
        return None
    if db.expires and key in db.expires and ctx.keyspace.is_expired(db, key):
        ctx.keyspace.server_delete(db, key, "expired")
        return None
    return value


def _policy(ctx):
    return ctx.pipeline.maxmemory_policy


@command("object|encoding")
def object_encoding(ctx, args):
    value = _peek(ctx, args[2])
    return None if value is None else encoding_of(ctx, args[2], value)


@command("object|refcount")
def object_refcount(ctx, args):
    value = _peek(ctx, args[2])
    if value is None:
        return None
    if type(value) is bytes and ctx.shared_integers_allowed():
        n = string2ll(value)
        if n is not None and 0 <= n < SHARED_INTEGERS:
            return SHARED_REFCOUNT
    return 1


@command("object|idletime")
def object_idletime(ctx, args):
    value = _peek(ctx, args[2])
    if value is None:
        return None
    if _policy(ctx).endswith("lfu"):
        raise CommandError(messages.OBJECT_IDLETIME_LFU)
    return ctx.keyspace.idle_ms(ctx.db, args[2]) // 1000


def lfu_decayed_counter(ks, db, key) -> int:
    """LFUDecrAndReturn: the key's LFU counter after the decay due since its last access."""
    packed = db.data.get_access(key)
    if packed is None:
        return 5  # LFU_INIT_VAL
    counter = packed & 0xFF
    if ks.lfu_decay_time_min:
        minutes = (ks.clock_ms() // 60000) & 0xFFFF
        periods = ((minutes - (packed >> 8)) & 0xFFFF) // ks.lfu_decay_time_min
        counter = max(0, counter - periods)
    return counter


@command("object|freq")
def object_freq(ctx, args):
    value = _peek(ctx, args[2])
    if value is None:
        return None
    if not _policy(ctx).endswith("lfu"):
        raise CommandError(messages.OBJECT_FREQ_NOT_LFU)
    return lfu_decayed_counter(ctx.keyspace, ctx.db, args[2])


@command("object|help")
def object_help(ctx, args):
    return _help(args, [
        "ENCODING <key>",
        "    Return the kind of internal representation used in order to store the value",
        "    associated with a <key>.",
        "FREQ <key>",
        "    Return the access frequency index of the <key>. The returned integer is",
        "    proportional to the logarithm of the recent access frequency of the key.",
        "IDLETIME <key>",
        "    Return the idle time of the <key>, that is the approximated number of",
        "    seconds elapsed since the last access to the key.",
        "REFCOUNT <key>",
        "    Return the number of references of the value associated with the specified",
        "    <key>.",
    ])


# -- MEMORY ---------------------------------------------------------------------------------------

def memory_usage(key, value, samples) -> int:
    """The key's estimated bytes by the server's own accounting (keyspace.db.estimate_key), with the average
    element size taken over `samples` elements (None = all) instead of the accounting's fixed sample."""
    t = type(value)
    if samples == 5 or t not in _ELEMENT_OVERHEAD or not value:
        return estimate_key(key, value)  # strings, streams (their own estimate), the default sample
    n = len(value)
    take = n if samples is None else min(samples, n)
    if t is dict:
        avg = sum(len(f) + len(v) for f, v in islice(value.items(), take)) / take + 2 * _BYTES_HEADER
    elif t is deque:
        if take == n or take > 64:
            picked = islice(value, take)
        else:
            step = n / take
            picked = (value[int(i * step)] for i in range(take))
        avg = sum(map(len, picked)) / take + _BYTES_HEADER
    elif t is set:
        avg = sum(map(len, islice(value, take))) / take + _BYTES_HEADER
    else:
        avg = sum(map(len, islice(value.scores, take))) / take + _BYTES_HEADER + 24
    return _KEY_OVERHEAD + _BYTES_HEADER + len(key) + int(64 + n * (avg + _ELEMENT_OVERHEAD[t]))


@command("memory|usage")
def memory_usage_cmd(ctx, args):
    samples = 5
    c = ArgCursor(args, 3)
    while c:
        if c.next_lower() == b"samples" and c.left():
            samples = c.int()
            if samples < 0:
                raise syntax_error()
            if samples == 0:
                samples = None
        else:
            raise syntax_error()
    # dbFind, as Valkey: no expiry check (a key still in memory still uses memory).
    value = ctx.db.data.get(args[2])
    if value is None:
        return None
    return memory_usage(args[2], value, samples)


def _memory_overview(ctx):
    """(used, peak, rss): used is INFO's used_memory (the dataset estimate the maxmemory check uses)."""
    services = ctx.services
    used = ctx.pipeline.used_memory_fn()
    return used, services.admin.note_peak_memory(used), services.admin.memory_rss() or used


@command("memory|stats")
def memory_stats(ctx, args):
    """MEMORY STATS with Valkey's fields. durakv measures: the dataset estimate (total.allocated, the same
    number as INFO used_memory), each db's hash tables (sys.getsizeof of its dicts), the process RSS.
    What it does not have (replication backlog, client buffers, scripts caches) is 0."""
    used, peak, rss = _memory_overview(ctx)
    out = {b"peak.allocated": peak, b"total.allocated": used, b"startup.allocated": ctx.keyspace.baseline_bytes,
           b"replication.backlog": 0, b"clients.slaves": 0, b"clients.normal": 0, b"cluster.links": 0,
           b"aof.buffer": 0, b"lua.caches": 0, b"functions.caches": 0}
    overhead = 0
    keys = 0
    for db in ctx.keyspace.dbs:
        if not db.data:
            continue
        main = sys.getsizeof(db.data)
        exp = sys.getsizeof(db.expires) if db.expires else 0
        overhead += main + exp
        keys += len(db.data)
        out[b"db.%d" % db.id] = {b"overhead.hashtable.main": main, b"overhead.hashtable.expires": exp}
    dataset = max(0, used - overhead - ctx.keyspace.baseline_bytes)
    out.update({
        b"overhead.db.hashtable.lut": 0, b"overhead.db.hashtable.rehashing": 0,
        b"overhead.total": overhead, b"db.dict.rehashing.count": 0, b"keys.count": keys,
        b"keys.bytes-per-key": (used // keys) if keys else 0, b"dataset.bytes": dataset,
        b"dataset.percentage": dataset * 100.0 / used if used else 0.0,
        b"peak.percentage": used * 100.0 / peak if peak else 0.0,
        b"allocator.allocated": used, b"allocator.active": used, b"allocator.resident": rss,
        b"allocator.muzzy": 0,
        b"allocator-fragmentation.ratio": 1.0, b"allocator-fragmentation.bytes": 0,
        b"allocator-rss.ratio": rss / used if used else 0.0, b"allocator-rss.bytes": rss - used,
        b"rss-overhead.ratio": 1.0, b"rss-overhead.bytes": 0,
        b"fragmentation": rss / used if used else 0.0, b"fragmentation.bytes": rss - used,
    })
    return out


@command("memory|doctor")
def memory_doctor(ctx, args):
    used, peak, _rss = _memory_overview(ctx)
    if used < 5 * 1024 * 1024:
        text = ("Hi Sam, this instance is empty or is using very little memory, my issues detector can't be "
                "used in these conditions. Please, leave for your mission on Earth and fill it with some data. "
                "The new Sam and I will be back to our programming as soon as I finished rebooting.\n")
    elif peak / used > 1.5:
        text = ("Sam, I detected a few issues in this Valkey instance memory implants:\n\n"
                " * Peak memory: In the past this instance used more than 150% the memory that is currently "
                "using. The allocator is normally not able to release memory after a peak, so you can expect to "
                "see a big fragmentation ratio, however this is actually harmless and is only due to the memory "
                "peak, and if the Valkey instance Resident Set Size (RSS) is currently bigger than expected, "
                "the memory will be used as soon as you fill the Valkey instance with more data. If the memory "
                "peak was only occasional and you want to try to reclaim memory, please try the MEMORY PURGE "
                "command, otherwise the only other option is to shutdown and restart the instance.\n\n"
                "I'm here to keep you safe, Sam. I want to help you.\n")
    else:
        text = ("Hi Sam, I can't find any memory issue in your instance. "
                "I can only account for what occurs on this base.\n")
    return _verbatim(ctx, text.encode())


@command("memory|malloc-stats")
def memory_malloc_stats(ctx, args):
    return b"Stats not supported for the current allocator"


@command("memory|purge")
def memory_purge(ctx, args):
    ctx.services.admin.purge_memory()   # (Valkey answers OK whatever its allocator could give back)
    return OK


@command("memory|help")
def memory_help(ctx, args):
    return _help(args, [
        "DOCTOR",
        "    Return memory problems reports.",
        "MALLOC-STATS",
        "    Return internal statistics report from the memory allocator.",
        "PURGE",
        "    Attempt to purge dirty pages for reclamation by the allocator.",
        "STATS",
        "    Return information about the memory usage of the server.",
        "USAGE <key> [SAMPLES <count>]",
        "    Return memory in bytes used by <key> and its value. Nested values are",
        "    sampled up to <count> times (default: 5, 0 means sample all).",
    ])
