"""Bringing data in from Valkey/Redis: `durakv import` (an RDB file) and the target writer it shares.

target.py writes keys to a durakv server or cluster as acknowledged RESTOREs, each to the primary that owns
its slot; importer.py streams an RDB file into it with keyspace/rdbvalue.iter_rdb_file (one value's bytes in
memory at a time, each key's payload restored as the file holds it)."""
