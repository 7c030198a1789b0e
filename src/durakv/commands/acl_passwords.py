"""ACL passwords: the SHA-256 digests users store, the '#<hash>' form's check, and ACL GENPASS.

Pure: GENPASS takes its random bytes from the caller.
"""

import hashlib


def hash_password(password: bytes) -> str:
    return hashlib.sha256(password).hexdigest()


def valid_hash(h: bytes) -> bool:
    return len(h) == 64 and all(c in b"0123456789abcdef" for c in h)


GENPASS_MAX_BITS = 4096


def genpass(bits: int, random_bytes) -> bytes:
    """ACL GENPASS: `bits` of randomness as lowercase hex (rounded up to whole hex digits)."""
    chars = (bits + 3) // 4
    return random_bytes((chars + 1) // 2).hex()[:chars].encode()
