"""Snapshots: a point-in-time image of a Keyspace (as the commands that rebuild it) and its restore.
The builder (`python -m durakv.recovery.builder`) writes them in a separate process."""

from .format import (SnapshotCorrupt, list_snapshots, load_newest_snapshot, load_snapshot,  # noqa: F401
                     newest_valid_snapshot, read_header, snapshot_path, verify_snapshot, write_snapshot)
