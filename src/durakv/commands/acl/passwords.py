"""ACL passwords: the SHA-256 digests users store, the digest a password rule names, and ACL GENPASS.

Pure: GENPASS takes its random bytes from the caller.
"""

import hashlib

from .rules import EBADMSG, RuleError


def hash_password(password: bytes) -> str:
    return hashlib.sha256(password).hexdigest()


def _valid_hash(h: bytes) -> bool:
    return len(h) == 64 and all(c in b"0123456789abcdef" for c in h)


def rule_digest(op: bytes, hashed: bool) -> str:
    """The digest a password rule names: of the password after '>' or '<' (hashed), or the one given after
    '#' or '!', which must be 64 lowercase hex digits (else RuleError EBADMSG)."""
    if hashed:
        return hash_password(op[1:])
    if not _valid_hash(op[1:]):
        raise RuleError(EBADMSG)
    return op[1:].decode()


GENPASS_MAX_BITS = 4096


def genpass(bits: int, random_bytes) -> bytes:
    """ACL GENPASS: `bits` of randomness as lowercase hex (rounded up to whole hex digits)."""
    chars = (bits + 3) // 4
    return random_bytes((chars + 1) // 2).hex()[:chars].encode()
