"""The data: databases of keys, value types, expiry, eviction and memory accounting.

Pure Python, no I/O, no asyncio. Time comes from an injected clock (milliseconds since the epoch).
Value types: bytes (string), dict (hash), deque (list), set (set), ZSet (sorted set).
"""

from .db import Db, Keyspace, type_name  # noqa: F401
from .zset import ZSet  # noqa: F401
