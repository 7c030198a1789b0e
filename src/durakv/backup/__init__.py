"""Backups, point-in-time restore: a shard's snapshot plus its journal after it, copied off the server or cluster.

A backup is a directory (on a file system, or a prefix of an S3-compatible bucket) holding, per shard, the
newest snapshot the shard had already built (never one built for the backup: snapshots are made off the serving
loop, by the snapshot builder process of a single server or by a shard's replicas) and the journal entries after
it up to the moment the backup was taken, each entry with its commit time. Restoring replays that journal on
that snapshot, up to its end or up to the last entry committed at or before an instant (point-in-time restore).

    format.py    the backup's files: manifest, shard pieces, journal chunks, their checksums
    storage.py   where backups live: a directory, or S3 (boto3)
    sources.py   what a backup is copied from: a single server (DURAKV BACKUP over RESP) or a cluster's NATS
    create.py    taking a backup; list, delete, retention
    restore.py   choosing the backups for an instant, replaying them, and the outputs (a data directory, an RDB
                 file, a running cluster); verify
    schedule.py  backup-schedule: the slot times, the per-shard election, the run on a node

It sits above recovery/ (it replays through the same pipeline) and cluster/ (a cluster's coordination store and
NATS), below server/ and tools/ (a node runs its scheduled backups; `durakv backup` and `durakv restore`).
"""
