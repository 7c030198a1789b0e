"""The slot migrations a node has seen, as CLUSTER GETSLOTMIGRATIONS lists them (Valkey 9.1's job log).

Pure: fed every topology the node installs (with its revision and the wall clock in seconds); no I/O.

A job is one (source shard, target shard) move: the slots a topology revision newly marks as migrating between
the two (`durakv cluster reshard`, CLUSTER MIGRATESLOTS, a rebalance), on every node of either shard, so the
source's EXPORT and the target's IMPORT carry the same name (a hash of the pair, the slots and the revision
that marked them; a node that starts while a move runs names it from the first revision it sees). Its state
follows the stored topology: running while any of its slots still migrates, `success` once every slot is the
target's, `cancelled` when marks were removed with the source still owning those slots (CANCELSLOTMIGRATIONS),
`failed` when a slot ended with a third shard. Finished jobs stay listed, newest first, up to LOG_MAX (Valkey's
cluster-slot-migration-log-max-len default), as Valkey keeps them.
"""

import hashlib

from .topology import ranges_of

LOG_MAX = 1000

EXPORT = "EXPORT"
IMPORT = "IMPORT"
# Valkey 9.1's nearest states while keys move: durakv copies a slot's keys through the target's journal, which
# is what Valkey's snapshot phase does (export "snapshotting", import "receiving-snapshot").
RUNNING_STATE = {EXPORT: "snapshotting", IMPORT: "receiving-snapshot"}
FINISHED = ("success", "cancelled", "failed")


def ranges_text(slots) -> str:
    """'0-100 200-200': Valkey's slot_ranges field."""
    return " ".join("%d-%d" % r for r in ranges_of(slots))


class MigrationJob:
    __slots__ = ("name", "operation", "slots", "source", "target", "source_node", "target_node", "create_time",
                 "last_update_time", "last_ack_time", "state", "message", "moved")

    def __init__(self, name, operation, slots, source, target, source_node, target_node, now):
        self.name = name
        self.operation = operation
        self.slots = frozenset(slots)
        self.source = source              # shard ids
        self.target = target
        self.source_node = source_node    # their primaries' node ids (kept current while the job runs)
        self.target_node = target_node
        self.create_time = self.last_update_time = self.last_ack_time = now
        self.state = RUNNING_STATE[operation]
        self.message = ""
        self.moved = 0

    @property
    def finished(self) -> bool:
        return self.state in FINISHED

    def entry(self) -> dict:
        """The reply's map, field for field Valkey 9.1.2's."""
        return {b"name": self.name.encode(), b"operation": self.operation.encode(),
                b"slot_ranges": ranges_text(self.slots).encode(), b"target_node": self.target_node.encode(),
                b"source_node": self.source_node.encode(), b"create_time": self.create_time,
                b"last_update_time": self.last_update_time, b"last_ack_time": self.last_ack_time,
                b"state": self.state.encode(), b"message": self.message.encode(), b"cow_size": 0,
                b"remaining_repl_size": 0}


class MigrationLog:
    def __init__(self, max_len=LOG_MAX):
        self.jobs = []          # newest first
        self.max_len = max_len
        self._topology = None

    # -- fed by the node ------------------------------------------------------------------------------------
    def observe(self, topology, revision, now, my_shard_id):
        """A newly installed topology: progress of the running jobs, and the jobs it starts."""
        self._topology = topology
        if my_shard_id is None:
            return
        covered = set()
        for job in self.jobs:
            if not job.finished:
                self._progress(job, topology, now)
                if not job.finished:
                    covered.update((s, job.source, job.target) for s in job.slots)
        fresh = {}
        for slot, (src, dst) in topology.migrating.items():
            if my_shard_id in (src, dst) and (slot, src, dst) not in covered:
                fresh.setdefault((src, dst), []).append(slot)
        for (src, dst), slots in sorted(fresh.items()):
            text = ranges_text(slots)
            name = hashlib.sha1(("%s %s %s %d" % (src, dst, text, revision)).encode()).hexdigest()
            op = EXPORT if src == my_shard_id else IMPORT
            job = MigrationJob(name, op, slots, src, dst, _primary(topology, src), _primary(topology, dst), now)
            job.message = _progress_text(0, len(job.slots))
            self.jobs.insert(0, job)
        self._trim()

    def _progress(self, job, topology, now):
        owner = topology.shard_by_slot
        moved = [s for s in job.slots if owner[s] is not None and owner[s].id == job.target]
        pending = [s for s in job.slots if topology.migrating.get(s) == (job.source, job.target)]
        job.source_node = _primary(topology, job.source) or job.source_node
        job.target_node = _primary(topology, job.target) or job.target_node
        if len(moved) != job.moved:
            job.moved = len(moved)
            job.last_update_time = now
            job.message = _progress_text(job.moved, len(job.slots))
        if pending:
            return
        moved_set = set(moved)     # once: built per slot it made this check quadratic in the job's slots
        left = [s for s in job.slots if s not in moved_set]
        job.last_update_time = now
        if not left:
            job.state, job.message = "success", ""
        elif all(owner[s] is not None and owner[s].id == job.source for s in left):
            job.state = "cancelled"
            job.message = ("" if not moved else "slot(s) %s had started to move and moved; slot(s) %s stayed"
                           % (ranges_text(moved), ranges_text(left)))
        else:
            job.state = "failed"
            job.message = "slot(s) %s ended owned by neither the source nor the target" % ranges_text(
                s for s in left if owner[s] is None or owner[s].id != job.source)

    def acked(self, target_shard, now):
        """The source's mover heard the target commit a batch (Valkey's last_ack_time)."""
        for job in self.jobs:
            if not job.finished and job.operation == EXPORT and job.target == target_shard:
                job.last_ack_time = now

    def _trim(self):
        extra = len(self.jobs) - self.max_len
        if extra <= 0:
            return
        for job in reversed(list(self.jobs)):
            if extra <= 0:
                break
            if job.finished:
                self.jobs.remove(job)
                extra -= 1

    # -- read by CLUSTER commands ---------------------------------------------------------------------------
    def running_exports(self):
        return [j for j in self.jobs if j.operation == EXPORT and not j.finished]

    def entries(self):
        return [j.entry() for j in self.jobs]


def _primary(topology, shard_id):
    shard = topology.shard_by_id.get(shard_id)
    return shard.primary.id if shard is not None else ""


def _progress_text(moved, total):
    return "%d of %d slot(s) moved" % (moved, total)
