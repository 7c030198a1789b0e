"""Per-client state that commands read and change (the socket side lives in server/)."""

import itertools
from operator import attrgetter

_ids = itertools.count(1)

# The session's flags the compiled core reads, folded into one int by their setters (`core_block`;
# fastpath/_core.c defines the same bits): ALWAYS, the client's requests go through the pipeline (not
# authenticated, MULTI, subscribed or MONITOR, CLIENT REPLY OFF/SKIP, ASKING, a decoded RESTORE payload, closing
# after the reply); GATED, they do under a role gate (CLIENT CAPA redirect, the REPLICAOF link's session: the
# gate's rules in admission); UNAUTHENTICATED and SPECIAL say which, for the parser's fast path (an
# unauthenticated client's limits) and the flush (a subscriber's output limit class).
CORE_BLOCK_ALWAYS = 1
CORE_BLOCK_GATED = 2
CORE_BLOCK_UNAUTHENTICATED = 4
CORE_BLOCK_SPECIAL = 8


def _core_flag(name):
    """A session attribute the compiled core's per-session decision depends on: read from its slot through a C
    getter (no Python frame on the hot path), written through a setter that refreshes `core_block`."""
    private = "_" + name

    def set(self, value):
        setattr(self, private, value)
        self._refresh_core_block()
    return property(attrgetter(private), set)


class Session:
    __slots__ = ("id", "db_id", "resp", "_authenticated", "user", "name", "lib_name", "lib_ver",
                 "_in_multi", "multi_queue", "multi_bytes", "multi_error", "watched", "watch_broken", "ctx",
                 "created_ms", "last_cmd", "last_interaction_ms", "flags", "readonly_mode",
                 "_close_after_reply", "addr", "laddr", "fd", "tracking", "last_write_index",
                 "multi_write", "multi_denyoom", "multi_may_replicate", "multi_touches_data",
                 "subscribed", "monitor", "_special", "no_touch", "_asking", "acl_user", "tls",
                 "_reply_off", "_reply_skip", "commands_processed", "net_in", "net_out", "repl_rdb_only",
                 "repl_rdb_data", "repl_rdb_functions", "_from_primary", "repl_listening_port", "_decoded",
                 "_capa_redirect", "local", "import_source", "core_block")

    authenticated = _core_flag("authenticated")
    in_multi = _core_flag("in_multi")
    special = _core_flag("special")
    reply_off = _core_flag("reply_off")
    reply_skip = _core_flag("reply_skip")
    asking = _core_flag("asking")
    decoded = _core_flag("decoded")
    close_after_reply = _core_flag("close_after_reply")
    capa_redirect = _core_flag("capa_redirect")
    from_primary = _core_flag("from_primary")

    def _refresh_core_block(self):
        """core_block: 0 when the compiled core may run this client's requests, else the CORE_BLOCK_ bits that
        hold."""
        s = self
        block = CORE_BLOCK_GATED if s._capa_redirect or s._from_primary else 0
        if not s._authenticated:
            block |= CORE_BLOCK_ALWAYS | CORE_BLOCK_UNAUTHENTICATED
        if s._special:
            block |= CORE_BLOCK_ALWAYS | CORE_BLOCK_SPECIAL
        if (s._in_multi or s._reply_off or s._reply_skip or s._asking or s._decoded is not None
                or s._close_after_reply):
            block |= CORE_BLOCK_ALWAYS
        self.core_block = block

    def __init__(self, created_ms=0, authenticated=True):
        self.id = next(_ids)
        self.db_id = 0
        self.resp = 2
        # (the core's flags are set in their slots here, and core_block once from them at the end)
        self._authenticated = authenticated
        self.user = "default"
        self.name = b""
        self.lib_name = b""
        self.lib_ver = b""
        self._in_multi = False
        self.multi_queue = []
        self.multi_bytes = 0       # the queued commands' arguments as Valkey counts them (mstate.argv_len_sums)
        self.multi_error = False
        self.watched = {}          # (db_id, key) -> the key was already expired when WATCHed
        self.watch_broken = False
        self.ctx = None
        self.created_ms = created_ms
        self.last_interaction_ms = created_ms
        self.last_cmd = None       # the Command of the client's latest request (CLIENT LIST cmd=)
        self.flags = "N"
        self.readonly_mode = False
        self._close_after_reply = False
        self.addr = "?"
        self.laddr = "?"
        self.fd = -1
        self.tracking = False
        self.last_write_index = 0  # journal entry holding this client's newest write (WAITAOF)
        # Flags of the commands queued in MULTI, as processCommand aggregates them for EXEC.
        self.multi_write = self.multi_denyoom = self.multi_may_replicate = self.multi_touches_data = False
        # Subscribed / MONITOR state the admission checks read; `special` is true while either is set, so
        # the common path tests one attribute.
        self.subscribed = 0
        self.monitor = False
        self._special = False
        self.no_touch = False
        self._capa_redirect = False  # CLIENT CAPA redirect: a replica answers -REDIRECT to its primary
        self.import_source = False  # CLIENT IMPORT-SOURCE ON: in import-mode, expired keys are live to it
        self._asking = False        # ASKING: the next command may touch a slot this node is importing
        self.tls = False           # the connection is TLS: cluster redirections name tls-ports
        # The client comes from the loopback interface (Valkey's connIsLocal): what protected mode and
        # `enable-debug-command local` accept. False for the server's own sessions, which never send DEBUG.
        self.local = False
        # The ACL user (acl_user.User) the client runs as; None is the default user (`user` is its name).
        self.acl_user = None
        self._reply_off = False     # CLIENT REPLY OFF: no replies until CLIENT REPLY ON
        self._reply_skip = 0        # CLIENT REPLY SKIP: replies still to drop (its own, then the next)
        # CLIENT LIST tot-cmds / tot-net-in / tot-net-out: commands run for this client (a script's own
        # commands too; a blocked one once it is served), bytes read from and written to its socket
        self.commands_processed = 0
        self.net_in = 0
        self.net_out = 0
        # REPLCONF rdb-only / rdb-filter-only: what SYNC sends this client (an RDB alone; data, functions)
        self.repl_rdb_only = False
        self.repl_rdb_data = True
        self.repl_rdb_functions = True
        self.repl_listening_port = 0   # REPLCONF listening-port (INFO replication of a SYNC client)
        # (payload, value or CommandError): a large RESTORE payload a worker decoded before the command ran
        self._decoded = None
        self._from_primary = False  # the REPLICAOF link's session: a replica obeys it (server/valkeyreplica.py)
        self._refresh_core_block()

    def refresh_special(self):
        self.special = bool(self.subscribed or self.monitor)

    def mute_reply(self, data: bytes) -> bytes:
        """The bytes to send for one command's reply under CLIENT REPLY OFF / SKIP."""
        if self.reply_skip:
            self.reply_skip -= 1
            return b""
        return b"" if self.reply_off else data
