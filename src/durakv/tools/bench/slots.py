"""Cluster slot math for the load generator: CRC16 hash slots with {hash tags}, CLUSTER SLOTS maps, redirects.

Same algorithm as Valkey's keyHashSlot (cluster.c): CRC16/XMODEM of the key, or of the part between the first
'{' and the next '}' when that part is non-empty, modulo 16384.
"""

SLOTS = 16384


def _make_table():
    table = []
    for byte in range(256):
        crc = byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else (crc << 1)
        table.append(crc & 0xFFFF)
    return tuple(table)


_TABLE = _make_table()


def crc16(data: bytes) -> int:
    """CRC16/XMODEM (polynomial 0x1021, initial value 0), as Valkey's crc16.c."""
    crc = 0
    table = _TABLE
    for b in data:
        crc = ((crc << 8) & 0xFF00) ^ table[(crc >> 8) ^ b]
    return crc


def key_hash_slot(key) -> int:
    """The cluster hash slot of a key (bytes or str), honouring {hash tags} like CLUSTER KEYSLOT."""
    if isinstance(key, str):
        key = key.encode()
    start = key.find(b"{")
    if start != -1:
        end = key.find(b"}", start + 1)
        if end != -1 and end != start + 1:
            key = key[start + 1:end]
    return crc16(key) & (SLOTS - 1)


def _text(value):
    return value.decode("utf-8", "replace") if isinstance(value, (bytes, bytearray)) else str(value)


def parse_cluster_slots(reply, default_host):
    """CLUSTER SLOTS reply -> list of (first_slot, last_slot, (host, port)) for the masters.

    An empty or "?" host means "the host you asked" (Valkey's cluster-preferred-endpoint-type unknown-endpoint).
    """
    ranges = []
    for entry in reply or ():
        first, last, master = int(entry[0]), int(entry[1]), entry[2]
        host = _text(master[0]) if master and master[0] is not None else ""
        if host in ("", "?"):
            host = default_host
        ranges.append((first, last, (host, int(master[1]))))
    return ranges


class SlotMap:
    """slot -> node address, filled from CLUSTER SLOTS and corrected by MOVED redirects."""

    __slots__ = ("nodes",)

    def __init__(self, ranges=(), default=None):
        self.nodes = [default] * SLOTS
        for first, last, addr in ranges:
            for slot in range(first, last + 1):
                self.nodes[slot] = addr

    def addresses(self):
        return sorted({a for a in self.nodes if a is not None})

    def node_for(self, slot):
        return self.nodes[slot]

    def update(self, slot, addr):
        self.nodes[slot] = addr

    def covered(self) -> bool:
        return all(a is not None for a in self.nodes)


def parse_redirect(message, default_host):
    """'MOVED 3999 127.0.0.1:6381' / 'ASK 3999 :6381' -> ('MOVED'|'ASK', slot, (host, port)); else None."""
    parts = message.split(" ")
    if len(parts) != 3 or parts[0] not in ("MOVED", "ASK"):
        return None
    host, _, port = parts[2].rpartition(":")
    if not port.isdigit():
        return None
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return parts[0], int(parts[1]), (host or default_host, int(port))
