"""The hash slot of a key, exactly as Valkey's keyHashSlot (cluster.c).

CRC16/XMODEM (polynomial 0x1021, initial value 0) of the key, or of its hash tag, masked to 14 bits. The hash tag
is what lies between the first '{' and the first '}' after it; when there is no such '}' or nothing between the
two, the whole key is hashed ("foo{}{bar}" hashes all of it, "foo{{bar}}zap" hashes "{bar").
"""

from binascii import crc_hqx as _crc

SLOTS = 16384
_MASK = SLOTS - 1


def key_slot(key: bytes) -> int:
    """The slot of `key` (bytes, bytearray or memoryview-compatible bytes)."""
    s = key.find(b"{")
    if s < 0:
        # The common case: no tag. binascii.crc_hqx is CRC16/XMODEM in C.
        return _crc(key, 0) & _MASK
    e = key.find(b"}", s + 1)
    if e < 0 or e == s + 1:
        return _crc(key, 0) & _MASK
    return _crc(key[s + 1:e], 0) & _MASK
