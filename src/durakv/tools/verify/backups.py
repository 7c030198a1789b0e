"""`durakv verify backup-restore`: write, back up, write more, back up, restore at an instant between, and check
that exactly the writes acknowledged by that instant are there (issue 31).

Writers write unique keys through a cluster client; the history records each write's invocation and
acknowledgement on the wall clock (the clock the journal stamps entries with). The instant T falls in the
middle of the second stretch of writes. The restored keyspace (`durakv restore --at T` into an RDB file, read
back) must hold every write acknowledged before T with its value, none invoked after T; a write in flight at T
may be either way (it was not acknowledged by T, and may have committed before it).
"""

import os
import shutil
import tempfile
import threading
import time

from .history import OK, Recorder
from .acked import write_ops
from .report import Report, Table
from .scenarios import FAILED, PASS, Result, _tag
from .workload import start_writers, stop_all


def backup_restore(env, writers=4, phase_s=5.0, dest=None, keep=False) -> Result:
    import asyncio
    from ...backup.create import create_from_cluster
    from ...backup.format import iso_ms
    from ...backup.restore import materialize, plan, write_rdb
    from ...backup.storage import open_storage
    from ...cluster.store import NatsStore
    from ...keyspace import rdbvalue
    say = env.say
    if env.cluster is None:
        raise ValueError("backup-restore backs up a cluster through its NATS: give --dir (or no target)")
    own = dest is None
    dest = dest or tempfile.mkdtemp(prefix="durakv-verify-backups-")
    storage = open_storage(dest)
    admin = env.cluster.admin()
    tag = _tag()
    rec = Recorder(clock_ns=time.time_ns, meta={"scenario": "backup-restore"})
    stop = threading.Event()
    env.healthy()
    ws = start_writers(env.target, rec, writers, stop, prefix="br:%s" % tag)
    backups = []

    async def backup():
        nc = await admin.connect_nats()
        try:
            store = await NatsStore(nc).open()
            t0 = time.monotonic()
            manifest = await create_from_cluster(storage, store, nc, admin.secrets.cluster_id)
            return manifest["id"], time.monotonic() - t0
        finally:
            await nc.close()
    reasons = []
    try:
        time.sleep(phase_s)
        say("backup 1 while %d writers write" % writers)
        backups.append(asyncio.run(backup()))
        time.sleep(phase_s / 2)
        t_ms = int(time.time() * 1000)
        time.sleep(phase_s / 2)
        say("backup 2; the instant restored is %s" % iso_ms(t_ms))
        backups.append(asyncio.run(backup()))
    finally:
        alive = stop_all(ws, stop)
    if alive:
        reasons.append("writers still blocked at the end: %s" % ", ".join(alive))
    sizes = [sum(s for _k, s in storage.list(b)) for b, _s in backups]
    workdir = tempfile.mkdtemp(prefix="durakv-verify-restore-")
    try:
        t0 = time.monotonic()
        p = plan(storage, None, t_ms)
        keyspace, results = materialize(storage, p)
        rdb = os.path.join(workdir, "restored.rdb")
        write_rdb(keyspace, rdb)
        restore_s = time.monotonic() - t0
        restored = {rec_[2].decode(): rdbvalue.load(rec_[3]) for rec_ in rdbvalue.iter_rdb_file(rdb)
                    if rec_[0] == "key"}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    # The instant is a millisecond: the restore keeps every entry committed during it (restore.replay_shard
    # compares commit times in ms), so a write is "after T" once it was invoked after that millisecond ended.
    t_ns = t_ms * 1_000_000
    t_end_ns = t_ns + 1_000_000
    acked_before = missing = after_present = inflight = inflight_present = 0
    lost_examples = []
    for o in write_ops(rec.history()):
        key = o.key.decode() if isinstance(o.key, bytes) else o.key
        value = o.value.encode() if isinstance(o.value, str) else o.value
        found = restored.get(key)
        if o.type == OK and o.complete_ns <= t_ns:
            acked_before += 1
            if found != value:
                missing += 1
                if len(lost_examples) < 5:
                    lost_examples.append(key)
        elif o.invoke_ns >= t_end_ns:
            if found is not None:
                after_present += 1
        else:
            inflight += 1
            inflight_present += found is not None
    if missing:
        reasons.append("%d write(s) acknowledged before the instant are missing (e.g. %s)"
                       % (missing, ", ".join(lost_examples)))
    if after_present:
        reasons.append("%d write(s) invoked after the instant are in the restore" % after_present)
    rows = [[b, round(s, 3), size] for (b, s), size in zip(backups, sizes)]
    rep = Report(title="durakv verify backup-restore", text=[
        "Writers write unique keys through a cluster client; two backups are taken while they write; the state at "
        "an instant between the two backups is restored (point-in-time restore) and compared with the history."])
    rep.tables.append(Table("Backups taken during the writes", ["Backup", "Seconds", "Bytes"], rows))
    rep.tables.append(Table("Restore at %s" % iso_ms(t_ms),
                            ["Restore s", "Keys restored", "Acked before T", "Missing", "Invoked after T present",
                             "In flight at T", "of them present"],
                            [[round(restore_s, 3), len(restored), acked_before, missing, after_present, inflight,
                              inflight_present]],
                            notes=["per shard: " + "; ".join("shard %s: snapshot %d + %d entries to %d"
                                                             % (r.name, r.snapshot_index, r.entries, r.last_index)
                                                             for r in results)]))
    rep.data.update({"instant_ms": t_ms, "backups": [b for b, _s in backups], "destination": dest})
    if own and not keep:
        shutil.rmtree(dest, ignore_errors=True)
    return Result(rep, FAILED if reasons else PASS, reasons)
