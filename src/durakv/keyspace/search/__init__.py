"""Vector search (valkey-search's FT.* commands) as derived state of a keyspace: index definitions (schema.py),
the per-attribute structures (vectors.py), the indexes and their upkeep (index.py) and FT.SEARCH's grammar
(query.py). Pure data: no I/O, no event loop; the server drives the backfill and the commands read and write
through `get_search(keyspace)`."""

from .index import Index, Search, get_search  # noqa: F401
