"""The hash slot of a key, exactly as Valkey's keyHashSlot (cluster.c).

CRC16/XMODEM (polynomial 0x1021, initial value 0) of the key, or of its hash tag, masked to 14 bits. The hash tag
is what lies between the first '{' and the first '}' after it; when there is no such '}' or nothing between the
two, the whole key is hashed ("foo{}{bar}" hashes all of it, "foo{{bar}}zap" hashes "{bar").
"""

from binascii import crc_hqx as _crc

SLOTS = 16384
_MASK = SLOTS - 1
# ord("{"): `int in bytes` is a plain byte scan, several times faster than `b"{" in bytes` (which goes through
# the buffer protocol) or bytes.find.
LBRACE = 123


def key_slot(key: bytes) -> int:
    """The slot of `key` (bytes or bytearray)."""
    if LBRACE not in key:
        # The common case: no tag. binascii.crc_hqx is CRC16/XMODEM in C.
        return _crc(key, 0) & _MASK
    s = key.find(b"{")
    e = key.find(b"}", s + 1)
    if e < 0 or e == s + 1:
        return _crc(key, 0) & _MASK
    return _crc(key[s + 1:e], 0) & _MASK
