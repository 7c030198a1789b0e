"""The command table: one entry per command, built from declarations plus Valkey's facts (spec.py).

A family module declares a handler with `@command("name")` (or "container|sub" for a subcommand).
Arity, flags, ACL categories and key specs come from the generated Valkey facts unless the
declaration overrides them, so COMMAND INFO/DOCS and key extraction always agree with dispatch.
"""

from .spec import SPEC


class Command:
    __slots__ = ("name", "fullname", "handler", "arity", "flags", "acl", "key_specs", "spec",
                 "subcommands", "parent", "write", "readonly", "denyoom", "admin", "noscript",
                 "no_auth", "no_multi", "loading", "stale", "pubsub", "blocking", "simple_keys",
                 "calls", "usec", "rejected_calls", "failed_calls", "id", "keyless", "fixed_keys", "latency")

    def __init__(self, fullname, spec, handler=None, parent=None):
        self.fullname = fullname
        self.name = fullname.split("|")[-1]
        self.spec = spec
        self.handler = handler
        self.parent = parent
        self.arity = spec["arity"]
        self.flags = frozenset(spec["flags"])
        self.acl = spec.get("acl", [])
        self.key_specs = spec.get("key_specs", [])
        self.subcommands = {}
        self._set_flags()
        self.calls = self.usec = self.rejected_calls = self.failed_calls = 0
        # LATENCY HISTOGRAM: calls per power-of-two microsecond bucket (index = usec.bit_length()).
        self.latency = [0] * 64

    def _set_flags(self):
        f = self.flags
        self.write = "write" in f
        self.readonly = "readonly" in f
        self.denyoom = "denyoom" in f
        self.admin = "admin" in f
        self.noscript = "noscript" in f
        self.no_auth = "no_auth" in f
        self.no_multi = "no_multi" in f
        self.loading = "loading" in f
        self.stale = "stale" in f
        self.pubsub = "pubsub" in f
        self.blocking = "blocking" in f
        # Fast path for the common shape: keys at fixed positions first..last step.
        self.simple_keys = _simple_range(self.key_specs)
        self.keyless = not self.key_specs
        # The commonest shape of all (GET, SET, HSET, ...): keys at positions known in advance.
        self.fixed_keys = None
        if self.simple_keys is not None and self.simple_keys[1] >= 0:
            first, last, step = self.simple_keys
            self.fixed_keys = tuple(range(first, last + 1, step))

    def key_indexes(self, args):
        """Positions of the keys in args (args[0] is the command name), per the key specs."""
        fixed = self.fixed_keys
        if fixed is not None and len(args) > fixed[-1]:
            return fixed
        simple = self.simple_keys
        if simple is not None:
            first, last, step = simple
            n = len(args)
            if last < 0:
                last = n + last
            return list(range(first, min(last, n - 1) + 1, step)) if first < n else []
        return _indexes_from_specs(self.key_specs, args)

    def keys(self, args):
        return [args[i] for i in self.key_indexes(args)]


def _simple_range(specs):
    if not specs:
        return (0, -1 - 10**9, 1)  # no keys at all: empty range
    first = last = step = None
    for s in specs:
        bs, fk = s["begin_search"], s["find_keys"]
        if "index" not in bs or "range" not in fk or fk["range"]["limit"] not in (0, 1):
            return None
        pos = bs["index"]["pos"]
        lk = fk["range"]["lastkey"]
        st = fk["range"]["step"]
        if lk >= 0:
            s_first, s_last = pos, pos + lk
        else:
            s_first, s_last = pos, lk
        if first is None:
            first, last, step = s_first, s_last, st
        elif s_first == last + step and s_last >= 0 and st == step:
            last = s_last
        else:
            return None
    return first, last, step


def _indexes_from_specs(specs, args):
    out = []
    n = len(args)
    for s in specs:
        bs, fk = s["begin_search"], s["find_keys"]
        if "index" in bs:
            start = bs["index"]["pos"]
        elif "keyword" in bs:
            kw = bs["keyword"]["keyword"].lower().encode()
            startfrom = bs["keyword"]["startfrom"]
            rng = range(startfrom, n) if startfrom > 0 else range(n + startfrom, 0, -1)
            start = None
            for i in rng:
                if args[i].lower() == kw:
                    start = i + 1
                    break
            if start is None:
                continue
        else:
            continue
        if "range" in fk:
            lk, step, limit = fk["range"]["lastkey"], fk["range"]["step"], fk["range"]["limit"]
            if lk >= 0:
                last = start + lk
            elif lk == -1 and limit > 1:
                last = start + (n - 1 - start) // limit
            else:
                last = n + lk
            out.extend(range(start, min(last, n - 1) + 1, step))
        elif "keynum" in fk:
            kn = fk["keynum"]
            idx = start + kn["keynumidx"]
            if idx >= n:
                continue
            try:
                numkeys = int(args[idx])
            except ValueError:
                continue
            first = start + kn["firstkey"]
            step = kn["step"]
            if numkeys > 0:
                out.extend(range(first, min(first + numkeys * step, n), step))
    return out


TABLE = {}  # lowercase bytes name -> Command


def _entry(fullname):
    parts = fullname.split("|")
    top = parts[0]
    spec = SPEC.get(top)
    if spec is None:
        raise KeyError(f"no Valkey spec for {top}")
    key = top.encode()
    cmd = TABLE.get(key)
    if cmd is None:
        cmd = TABLE[key] = Command(top, spec)
    if len(parts) == 1:
        return cmd
    sub_spec = spec.get("subcommands", {}).get(parts[1])
    if sub_spec is None:
        raise KeyError(f"no Valkey spec for {fullname}")
    sub = cmd.subcommands.get(parts[1].encode())
    if sub is None:
        sub = cmd.subcommands[parts[1].encode()] = Command(fullname, sub_spec, parent=cmd)
    return sub


def command(fullname: str, *, flags=None, arity=None, extra_flags=()):
    """Declare `fn(ctx, args) -> reply` as the handler of a command (or 'container|sub')."""
    def register(fn):
        cmd = _entry(fullname.lower())
        cmd.handler = fn
        if flags is not None or extra_flags:
            cmd.flags = frozenset(flags if flags is not None else cmd.flags) | frozenset(extra_flags)
            cmd._set_flags()
        if arity is not None:
            cmd.arity = arity
        return fn
    return register


def lookup(args):
    """The Command for args (descending into a subcommand), or None if unknown."""
    cmd = TABLE.get(args[0].lower())
    if cmd is None or cmd.handler is None and not cmd.subcommands:
        return None
    return cmd


def implemented():
    """Commands (top-level) that have a handler or at least one implemented subcommand."""
    return {name: cmd for name, cmd in TABLE.items()
            if cmd.handler is not None or any(s.handler for s in cmd.subcommands.values())}
