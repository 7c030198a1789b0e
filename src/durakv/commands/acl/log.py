"""The ACL LOG: recent denials grouped as Valkey groups them (addACLLogEntry), and INFO's
acl_access_denied_* counters.

Pure: the caller passes the time.
"""

from .check import DENIED_AUTH, DENIED_CHANNEL, DENIED_CMD, DENIED_DB, DENIED_KEY, REASONS


CTX_TOPLEVEL, CTX_LUA, CTX_MULTI, CTX_MODULE = "toplevel", "lua", "multi", "module"
_GROUPING_MAX_MS = 60000
_GROUPING_SCAN = 10


class LogEntry:
    __slots__ = ("count", "reason", "context", "object", "username", "ctime_ms", "client_info", "entry_id",
                 "created_ms")


class AclLog:
    """The ACL LOG (newest first) and the INFO acl_access_denied_* counters."""

    def __init__(self, max_len=128):
        self.max_len = max_len
        self.entries = []
        self.next_id = 0
        self.denied = {DENIED_AUTH: 0, DENIED_CMD: 0, DENIED_KEY: 0, DENIED_CHANNEL: 0, DENIED_DB: 0}

    def add(self, reason, context, obj: bytes, username: bytes, client_info: bytes, now_ms: int):
        """addACLLogEntry: a denial like a recent one (same reason, context, object and user within 60 s,
        among the newest 10) bumps that entry's count and moves it to the top."""
        self.denied[reason] += 1
        if self.max_len == 0:
            self._trim()
            return
        for i, e in enumerate(self.entries[:_GROUPING_SCAN]):
            if (e.reason == reason and e.context == context and abs(e.ctime_ms - now_ms) <= _GROUPING_MAX_MS
                    and e.object == obj and e.username == username):
                e.count += 1
                e.ctime_ms = now_ms
                e.client_info = client_info
                if i:
                    del self.entries[i]
                    self.entries.insert(0, e)
                return
        e = LogEntry()
        e.count = 1
        e.reason = reason
        e.context = context
        e.object = obj
        e.username = username
        e.ctime_ms = e.created_ms = now_ms
        e.client_info = client_info
        e.entry_id = self.next_id
        self.next_id += 1
        self.entries.insert(0, e)
        self._trim()

    def _trim(self):
        del self.entries[self.max_len:]

    def reset(self):
        self.entries = []

    def reply(self, count, now_ms):
        out = []
        for e in self.entries[:max(count, 0)]:
            out.append({b"count": e.count, b"reason": REASONS[e.reason].encode(), b"context": e.context.encode(),
                        b"object": e.object, b"username": e.username,
                        b"age-seconds": (now_ms - e.ctime_ms) / 1000.0, b"client-info": e.client_info,
                        b"entry-id": e.entry_id, b"timestamp-created": e.created_ms,
                        b"timestamp-last-updated": e.ctime_ms})
        return out

    def info_fields(self):
        d = self.denied
        # tls_cert: durakv has no users named by a client certificate, so none is ever refused that way
        return {"acl_access_denied_auth": d[DENIED_AUTH], "acl_access_denied_cmd": d[DENIED_CMD],
                "acl_access_denied_key": d[DENIED_KEY], "acl_access_denied_channel": d[DENIED_CHANNEL],
                "acl_access_denied_tls_cert": 0, "acl_access_denied_db": d[DENIED_DB]}
