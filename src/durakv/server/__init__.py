"""The network server: asyncio (uvloop) TCP/TLS listeners, connections, pipelining, reply ordering."""
