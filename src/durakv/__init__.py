"""durakv: a Valkey/Redis-compatible, memory-first, durable data store."""

__version__ = "0.1.0"
# The Valkey release whose command semantics durakv implements; clients gate features on it.
VALKEY_VERSION = "9.1.2"
# Clients (and their test suites) read redis_version; Valkey 8 reports 7.2.4 there.
REDIS_COMPAT_VERSION = "7.2.4"
