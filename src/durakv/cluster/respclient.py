"""The control plane's RESP client (protocol/client.py with TLS from a CA file and INFO parsed), and how the
tooling reads a node's INFO.

INFO field names differ across builds (EPOCH_FIELDS, APPLIED_FIELDS, LAG_FIELDS: newest first); first_field
picks the first a node reports. MASTER_ROLES are the names INFO replication gives a primary.
"""

from ..protocol import client as protocol_client
from ..protocol.client import RespError  # noqa: F401 - the control plane's callers catch it from here
from .tls import client_context

MASTER_ROLES = ("master", "primary")

# INFO field names, newest first: the jetstream/replication work names them durakv_epoch, journal_applied_index
# and replica_lag_ms; older builds may only have some of them.
EPOCH_FIELDS = ("durakv_epoch", "epoch")
APPLIED_FIELDS = ("journal_applied_index", "applied_index")
LAG_FIELDS = ("replica_lag_ms", "lag_ms")


class RespClient(protocol_client.RespClient):
    """One blocking connection (protocol/client.py) with the control plane's conveniences: INFO parsed.
    `tls_ca`: connect over TLS, verifying the server against that CA file; password (and user): AUTH first."""

    def __init__(self, host="127.0.0.1", port=6379, timeout_s=2.0, tls_ca=None, password=None, user=None):
        super().__init__(host, port, timeout_s, ssl_context=client_context(tls_ca) if tls_ca else None)
        if password:
            try:
                self.execute(*(("AUTH", user, password) if user else ("AUTH", password)))
            except BaseException:
                self.close()
                raise

    def info(self, *sections) -> dict:
        return parse_info(self.execute("INFO", *sections))


def _value(text):
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def parse_info(raw) -> dict:
    """INFO text -> {section (lower case): {field: value}}; numbers become int/float."""
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    sections = {}
    current = sections.setdefault("", {})
    for line in raw.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith("#"):
            current = sections.setdefault(line[1:].strip().lower(), {})
            continue
        key, sep, val = line.partition(":")
        if sep:
            current[key] = _value(val)
    if not sections[""]:
        del sections[""]
    return sections


def first_field(fields, names, default=None):
    for n in names:
        if n in fields:
            return fields[n]
    return default
