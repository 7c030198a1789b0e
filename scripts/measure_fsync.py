"""What one durable commit costs the disk, by how the journal's file is written: appending a record and syncing
(what the local journal does, and redis-server's AOF with appendfsync always: write + fdatasync), against
overwriting a record in a file whose blocks were written with zeros beforehand (PostgreSQL's WAL segments,
etcd's preallocated WAL). An append grows the file, so each sync must also commit its size and new blocks
through the filesystem's journal; an overwrite in place changes no metadata. A closed loop of sync writers
waits for these commits (docs/commit-path.md, "The closed loop and the fsync").

    python scripts/measure_fsync.py [--dir DIR] [--commits 2000] [--record-bytes 300] [--rounds 2]

DIR must be on the disk being measured (default: the current directory; /tmp may be a tmpfs). Prints the
latency per commit (mean, p50, p99) of each pattern and the ratio of each p50 to append + fdatasync's.
"""

import argparse
import os
import statistics
import tempfile
import time


def commits(dir, count, record, preallocate, sync):
    """Latencies (us) of `count` commits of one record each."""
    fd, path = tempfile.mkstemp(dir=dir, prefix="durakv-fsync-")
    try:
        if preallocate:
            os.write(fd, b"\0" * (count * len(record) + 4096))
            os.fsync(fd)
        latencies = []
        offset = 0
        for _ in range(count):
            start = time.perf_counter()
            if preallocate:
                os.pwrite(fd, record, offset)
            else:
                os.write(fd, record)
            sync(fd)
            latencies.append((time.perf_counter() - start) * 1e6)
            offset += len(record)
        return sorted(latencies)
    finally:
        os.close(fd)
        os.unlink(path)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", default=".")
    p.add_argument("--commits", type=int, default=2000)
    p.add_argument("--record-bytes", type=int, default=300)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    record = b"x" * args.record_bytes
    patterns = [("append + fsync (durakv's journal)", False, os.fsync),
                ("append + fdatasync (redis-server's AOF)", False, os.fdatasync),
                ("overwrite preallocated + fdatasync", True, os.fdatasync),
                ("overwrite preallocated + fsync", True, os.fsync)]
    for rnd in range(args.rounds):
        results = [(name, commits(args.dir, args.commits, record, pre, sync)) for name, pre, sync in patterns]
        reference = results[1][1][len(results[1][1]) // 2]
        print("round %d: %d commits of %d B in %s"
              % (rnd + 1, args.commits, args.record_bytes, os.path.abspath(args.dir)))
        for name, lat in results:
            p50 = lat[len(lat) // 2]
            print("  %-42s mean %7.1f  p50 %7.1f  p99 %7.1f us   p50 %.2fx" % (
                name, statistics.mean(lat), p50, lat[int(len(lat) * 0.99)], p50 / reference))


if __name__ == "__main__":
    main()
