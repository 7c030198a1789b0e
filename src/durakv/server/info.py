"""INFO: Valkey's section layout ('# Section' then 'field:value' lines), filled from live state."""

import os
import platform
import resource
import sys
import threading
import time

from .. import fastpath
from ..commands.specs import MODULES
from ..keyspace import bloom as _bloom
from ..keyspace.jsondoc import JsonDoc
from ..scripting import runner as _scripting

# Valkey's default sections, in its order, then durakv's own.
# (Valkey's default_sections has module_list, shown as "# Modules".)
DEFAULT_SECTIONS = ["server", "clients", "memory", "persistence", "stats", "replication", "cpu", "modules",
                    "errorstats", "cluster", "keyspace", "durability"]
# Valkey's INFO ALL order: ... cpu, modules, commandstats, errorstats, latencystats, cluster, keyspace
ALL_SECTIONS = DEFAULT_SECTIONS[:8] + ["commandstats", "errorstats", "latencystats"] + DEFAULT_SECTIONS[9:]
# latency-tracking-info-percentiles' default
LATENCY_PERCENTILES = (50.0, 99.0, 99.9)


def _section_server(srv):
    cfg = srv.config
    uptime = int(time.monotonic() - srv.started_monotonic)
    f = dict(srv.version_fields())
    f.update({
        "redis_git_sha1": "00000000", "redis_git_dirty": 0, "redis_build_id": "0",
        # extended-redis-compatibility names the mode field as Redis did, else as Valkey 8 does
        ("redis_mode" if cfg["extended-redis-compatibility"] else "server_mode"):
            "cluster" if cfg["cluster-enabled"] or srv.cluster_routing is not None else "standalone",
        "os": f"{platform.system()} {platform.release()} {platform.machine()}",
        "arch_bits": 64, "multiplexing_api": "epoll", "atomicvar_api": "python",
        "gcc_version": "0.0.0", "python_version": platform.python_version(),
        "process_id": os.getpid(), "process_supervised": "no", "run_id": srv.run_id,
        "tcp_port": cfg["port"], "server_time_usec": int(time.time() * 1e6),
        "uptime_in_seconds": uptime, "uptime_in_days": uptime // 86400, "hz": cfg["hz"],
        "configured_hz": cfg["hz"], "lru_clock": int(time.time()) & 0xFFFFFF,
        "executable": os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else "",
        "config_file": cfg.config_file or "", "io_threads_active": 0,
        # which core runs the per-read batch loop (fastpath/): compiled, or python (not built, or
        # DURAKV_PURE_PYTHON=1), and how many commands the compiled one ran
        "durakv_core": fastpath.NAME,
        "durakv_core_commands": srv.batch_core.stats()["fast_commands"] if srv.batch_core is not None else 0,
        # why the compiled core runs no command now (commands/corestate.py's reasons and non-empty containers,
        # comma-separated; empty while it may)
        "durakv_core_blocked": ",".join(srv.pipeline.core_state.reasons() + srv.pipeline.core_state.waiting_on()),
    })
    return f


def _section_clients(srv):
    blocking = srv.blocking
    return {"connected_clients": len(srv.clients), "cluster_connections": 0,
            "maxclients": srv.config["maxclients"],
            "client_recent_max_input_buffer": 0, "client_recent_max_output_buffer": 0,
            "blocked_clients": blocking.blocked_clients(), "tracking_clients": srv.hooks.tracking.clients,
            "pubsub_clients": srv.pubsub.clients,
            "watching_clients": sum(1 for c in srv.clients.values() if c.session.watched),
            "clients_in_timeout_table": blocking.timed, "total_watched_keys": len(srv.pipeline.watchers),
            "total_blocking_keys": blocking.blocking_keys(), "total_blocking_keys_on_nokey": blocking.blocking_keys_on_nokey(),
            **_paused(srv)}


def _paused(srv):
    """paused_reason / paused_actions / paused_timeout_milliseconds (Valkey 8.1+): the strictest pause in force
    (all over write), and of those pausing it the one that ends last, with its reason: CLIENT PAUSE, or a
    planned failover's hand-over holding commands (Valkey's manual failover pause)."""
    pauses = []
    blocking = srv.blocking
    now_ms = srv.clock_ms()
    if blocking.pause_mode is not None and blocking.pause_end_ms > now_ms:
        pauses.append((blocking.pause_mode, blocking.pause_end_ms - now_ms, "client_pause"))
    handover = getattr(srv.pipeline.gate, "handover", None)   # a cluster node's (replication/handover.py)
    hold = handover.hold_state() if handover is not None else None
    if hold is not None:
        pauses.append(hold + ("failover_in_progress",))
    if not pauses:
        return {"paused_reason": "none", "paused_actions": "none", "paused_timeout_milliseconds": 0}
    actions = "all" if any(p[0] == "all" for p in pauses) else "write"
    _a, left_ms, reason = max((p for p in pauses if actions == "write" or p[0] == "all"), key=lambda p: p[1])
    return {"paused_reason": reason, "paused_actions": actions, "paused_timeout_milliseconds": left_ms}


def _human(n):
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= size:
            return "%.2f%s" % (n / size, unit)
    return "%dB" % n


def _section_memory(srv):
    used = srv.pipeline.used_memory_fn()
    rss = srv.memory_rss()
    peak = max(getattr(srv, "peak_memory", 0), used)
    srv.peak_memory = peak
    maxmem = srv.config["maxmemory"]
    clients_normal = sum(c.output_memory() for c in srv.clients.values())
    dataset = srv.keyspace.used_bytes - srv.keyspace.baseline_bytes
    scripting = _scripting.info_memory(srv)
    # CPython's allocators (pymalloc, glibc malloc) report no active / resident figures, so these follow
    # Valkey's own rule for an allocator without them (its libc build, server.c cronUpdateMemoryStats):
    # allocated is used_memory, resident is the RSS less the Lua VM's memory, active is resident.
    allocated = used
    resident = max(0, rss - scripting["used_memory_vm_eval"])
    active = resident
    return {"used_memory": used, "used_memory_human": _human(used), "used_memory_rss": rss,
            "used_memory_rss_human": _human(rss), "used_memory_peak": peak, "used_memory_peak_human": _human(peak),
            # used_memory is the baseline plus the dataset's estimate (keyspace/db.py): the rest is overhead
            "used_memory_overhead": used - dataset,
            "used_memory_startup": srv.keyspace.baseline_bytes,
            "used_memory_dataset": dataset,
            "allocator_allocated": allocated, "allocator_active": active, "allocator_resident": resident,
            "allocator_frag_ratio": "%.2f" % (active / allocated if allocated else 0),
            "allocator_frag_bytes": active - allocated,
            "allocator_rss_ratio": "%.2f" % (resident / active if active else 0),
            "allocator_rss_bytes": resident - active,
            "rss_overhead_ratio": "%.2f" % (rss / resident if resident else 0), "rss_overhead_bytes": rss - resident,
            "maxmemory": maxmem, "maxmemory_human": _human(maxmem), "maxmemory_policy": srv.config["maxmemory-policy"],
            "mem_fragmentation_ratio": round(rss / used, 2) if used else 0,
            "mem_fragmentation_bytes": rss - used,
            # eviction weighs used_memory itself (commands/pipeline.py), and client buffers are outside it
            "mem_not_counted_for_evict": 0,
            "mem_allocator": "pymalloc",
            "mem_clients_slaves": 0, "mem_clients_normal": clients_normal,
            "total_system_memory": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
            **scripting,
            # The section's last two, as in Valkey. durakv has no lazy-free thread: UNLINK, FLUSHALL ASYNC and
            # the lazyfree-lazy-* deletions free their values at once (Python's reference counting), so nothing
            # is ever pending and no object is freed in the background.
            "lazyfree_pending_objects": 0, "lazyfreed_objects": 0}


def _section_persistence(srv):
    t = srv.durability.tracker
    building = srv.snapshot_in_progress is not None
    current = int(time.monotonic() - srv.snapshot_started) if building and srv.snapshot_started else -1
    node = getattr(srv, "cluster_node", None)
    if node is not None and node.snapshotter.started_s is not None:
        # a shard replica writing its snapshot (a forked child) and storing it in the object store
        building = True
        current = int(time.monotonic() - node.snapshotter.started_s)
    # A snapshot is both durakv's BGSAVE and its BGREWRITEAOF (it compacts the journal), so the rdb_ and aof_
    # fields describe the same builds. A standalone server's is built by a separate process that reads the
    # snapshot and journal files (snapshot/adopt.py), not by a fork of this one: nothing is copied on write
    # (aof_last_cow_size). A shard replica's is written by a forked child (replication/snapshots.py).
    fields = {"loading": int(srv.loading), "async_loading": 0, "current_cow_peak": 0,
            "rdb_changes_since_last_save": srv.keyspace.changes - srv.keyspace.changes_saved,
            "rdb_bgsave_in_progress": int(building),
            "rdb_last_save_time": srv.lastsave, "rdb_last_bgsave_status": srv.last_bgsave_status,
            "rdb_last_bgsave_time_sec": srv.last_snapshot_seconds, "rdb_current_bgsave_time_sec": current,
            "aof_enabled": int(t is not None and t.mode != "none"), "aof_rewrite_in_progress": int(building),
            "aof_rewrite_scheduled": int(srv.snapshot_scheduled),
            "aof_last_rewrite_time_sec": srv.last_snapshot_seconds, "aof_current_rewrite_time_sec": current,
            "aof_last_bgrewrite_status": srv.last_bgsave_status,
            "aof_last_write_status": "ok" if t is None or t.failed is None else "err",
            "aof_last_cow_size": 0,
            # durakv loads no modules (MODULE LOAD is refused), so no module child ever runs
            "module_fork_in_progress": 0, "module_fork_last_cow_size": 0}
    # While loading, Valkey ends the section with the load's progress (bytes of the snapshot and the journal,
    # or of a REPLICAOF sync's RDB: recovery/loading.py)
    progress = getattr(srv, "load_progress", None)
    if srv.loading and progress is not None:
        fields.update(progress.info_fields())
    return fields


def _section_stats(srv):
    d = srv.pipeline
    ks = srv.keyspace
    return {"total_connections_received": srv.total_connections, "total_commands_processed": d.total_commands,
            "instantaneous_ops_per_sec": srv.instantaneous_ops(), "total_net_input_bytes": srv.net_input_bytes,
            "total_net_output_bytes": srv.net_output_bytes, "rejected_connections": srv.rejected_connections,
            "sync_full": srv.sync_full,
            "sync_partial_ok": 0,    # no backlog: a PSYNC that asks to continue always gets a full resync
            "sync_partial_err": srv.sync_partial_err,
            "expired_keys": ks.expired_keys, "expired_fields": ks.expired_fields,
            "expired_time_cap_reached_count": ks.expired_time_cap_reached, "evicted_keys": ks.evicted_keys,
            "evicted_clients": srv.client_eviction.evicted,    # maxmemory-clients (server/clientevict.py)
            "evicted_scripts": _scripting.evicted_scripts(srv),
            "keyspace_hits": ks.hits, "keyspace_misses": ks.misses,
            "latest_fork_usec": srv.latest_fork_usec, "total_forks": srv.total_forks,
            "pubsub_channels": len(srv.pubsub.channels), "pubsub_patterns": len(srv.pubsub.patterns),
            "pubsubshard_channels": len(srv.pubsub.shard),
            "migrate_cached_sockets": len(srv.migrate_sockets.cache),
            "tracking_total_keys": len(srv.hooks.tracking.table),
            "tracking_total_items": sum(len(v) for v in srv.hooks.tracking.table.values()),
            "tracking_total_prefixes": len(srv.hooks.tracking.prefixes),
            # a replica never takes a write of its own (it applies its primary's), so it tracks no expiry of one
            "slave_expires_tracked_keys": 0,
            "dump_payload_sanitizations": ks.dump_payload_sanitizations,
            "total_error_replies": d.total_errors,
            "unexpected_error_replies": 0,      # Valkey: errors replaying an AOF or a primary's stream
            "total_reads_processed": srv.reads_processed, "total_writes_processed": srv.writes_processed,
            # every socket read and write happens on the event loop's thread: none on an I/O thread
            "io_threaded_reads_processed": 0, "io_threaded_writes_processed": 0,
            "client_query_buffer_limit_disconnections": d.qbuf_limit_disconnections, "protocol_errors": srv.protocol_errors,
            **srv.loop_stats.info_fields(_commands_usec()),
            **srv.acl.info_fields()}


def _commands_usec() -> int:
    """Time spent running commands (Valkey's eventloop_duration_cmd_sum): commandstats' usec, summed here rather
    than counted again on every call."""
    from ..commands import registry
    return sum(c.usec for c in registry.every_command())


def _section_replication(srv):
    offset = srv.durability.committed
    link = getattr(srv, "valkey_link", None)
    if link is not None:
        fields = {"role": "slave"}
        fields.update(link.info_fields())
        fields.update({"connected_slaves": 0, "master_failover_state": "no-failover", "master_replid": link.replid,
                       "master_replid2": "0" * 40, "master_repl_offset": link.offset, "second_repl_offset": -1,
                       **_no_backlog(srv)})
        return fields
    node = getattr(srv, "cluster_node", None)
    if node is not None:
        r = srv.replication_info()
        fields = {"role": "master" if node.role == "primary" else "slave"}
        if node.role == "replica":
            fields.update(node.info_fields())
        fields["connected_slaves"] = len(r["replicas"])
        for i, (host, port, applied) in enumerate(r["replicas"]):
            fields["slave%d" % i] = "ip=%s,port=%d,state=online,offset=%d,lag=%d" % (
                host, port, applied, _peer_lag_s(node, host, port))
        fields.update({"master_failover_state": "no-failover", "master_replid": node.replication_id,
                       "master_replid2": "0" * 40, "master_repl_offset": r["offset"], "second_repl_offset": -1,
                       "repl_backlog_active": 1,
                       # the shard's journal is the backlog a replica catches up from: what it holds now
                       "repl_backlog_size": node.journal.bytes_size if node.journal is not None else 0,
                       "repl_backlog_first_byte_offset": node.journal.first_index if node.journal is not None else 0,
                       "repl_backlog_histlen": node.journal.bytes_size if node.journal is not None else 0})
        if node.role != "replica":
            fields.update(node.info_fields())
        return fields
    # SYNC connections are this server's replicas as Valkey lists them (tools: redis-cli --replica)
    feeds = [c for c in srv.clients.values() if c.replica_feed is not None and not c.closing]
    fields = {"role": "master", "connected_slaves": len(feeds)}
    for i, conn in enumerate(feeds):
        ip = conn.session.addr.rsplit(":", 1)[0]
        fields["slave%d" % i] = "ip=%s,port=%d,state=online,offset=%d,lag=0" % (
            ip, conn.session.repl_listening_port, conn.replica_feed.offset)
    fields.update({"master_failover_state": "no-failover", "master_replid": srv.run_id,
                   "master_repl_offset": offset, "second_repl_offset": -1, **_no_backlog(srv)})
    return fields


def _no_backlog(srv):
    """No backlog is kept (a SYNC/PSYNC gets the whole dataset): Valkey's fields before its first replica."""
    return {"repl_backlog_active": 0, "repl_backlog_size": srv.config["repl-backlog-size"],
            "repl_backlog_first_byte_offset": 0, "repl_backlog_histlen": 0}


def _peer_lag_s(node, host, port) -> int:
    """Seconds since that replica's last heartbeat (Valkey's lag: since its last REPLCONF ACK)."""
    import time
    now_ms = int(time.monotonic() * 1000)
    for p in node.members.replica_statuses():
        if (p.ip, p.port) == (host, port):
            return max(0, (now_ms - p.seen_ms) // 1000)
    return 0


def _section_cpu(srv):
    ru = resource.getrusage(resource.RUSAGE_SELF)
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    fields = {"used_cpu_sys": "%.6f" % ru.ru_stime, "used_cpu_user": "%.6f" % ru.ru_utime,
              "used_cpu_sys_children": "%.6f" % ch.ru_stime, "used_cpu_user_children": "%.6f" % ch.ru_utime}
    if threading.current_thread() is threading.main_thread():   # the event loop's thread: INFO runs on it
        th = resource.getrusage(resource.RUSAGE_THREAD)
        fields.update(used_cpu_sys_main_thread="%.6f" % th.ru_stime, used_cpu_user_main_thread="%.6f" % th.ru_utime)
    return fields


def _section_keyspace(srv):
    out = {}
    for db in srv.keyspace.dbs:
        if db.data:
            out["db%d" % db.id] = "keys=%d,expires=%d,avg_ttl=0,keys_with_volatile_items=%d" % (
                len(db.data), len(db.expires), len(db.hexpires))
    return out


def _section_cluster(srv):
    fields = {"cluster_enabled": int(srv.cluster_routing is not None or bool(srv.config["cluster-enabled"]))}
    node = srv.cluster_node
    watcher = getattr(node, "topology_watcher", None) if node is not None else None
    migrator = watcher.migrator if watcher is not None else None
    if migrator is not None:   # durakv's own: online resharding seen from a source primary
        fields.update(durakv_migrated_keys=migrator.moved_keys, durakv_migrated_slots=migrator.moved_slots,
                      durakv_keys_moving=len(srv.cluster_routing.moving),
                      durakv_migration_batches=migrator.batches, durakv_migration_skipped_gone=migrator.skipped_gone)
    return fields


def _section_durability(srv):
    t = srv.durability.tracker
    j = srv.journal
    node = getattr(srv, "cluster_node", None)
    if node is not None and node.journal is not None:
        j = node.journal
    mode = t.mode if t else srv.config["durability"]
    if node is not None and node.role == "replica":
        mode = srv.config["durability"]  # the shard's mode; this replica applies what the primary commits
    return {"durability_mode": srv.config["durability"] if t is None else mode,
            "effective_durability": mode if (t is None or t.failed is None) else "failed",
            # ElastiCache's DurabilityLag: how far acknowledged writes run ahead of the journal. In sync nothing
            # is acknowledged before it commits, so it is 0 by definition; in async, the oldest uncommitted batch.
            "durability_lag_ms": t.lag_ms() if t is not None and t.mode == "async" else 0,
            "journal_backend": srv.config["journal-backend"] if (j is not None or srv.cluster_node) else "none",
            "journal_commit_index": (j.commit_index if node is not None and j is not None
                                     else (t.committed if t else 0)),
            "journal_applied_index": node.applied_index if node is not None else (t.assigned if t else 0),
            "journal_bytes": j.bytes_size if j is not None else 0,
            "last_snapshot_index": srv.last_snapshot_index,
            "traffic_management_active": int(bool(t and t.traffic_management_active)),
            "durability_buffer_ms": srv.config["durability-buffer-ms"],
            "durability_buffer_exceeded_errors": t.buffer_exceeded_errors if t else 0,
            "held_replies_clients": len(srv.durability.waiting),
            "journal_failed": int(bool(t and t.failed is not None)),
            "journal_failed_batches": t.failed_batches if t else 0,
            # Probes of a failed journal, plus the JetStream writer's sends again after a rejection or an unknown
            # outcome (each one a retry the operator should see).
            "journal_retries": (t.retries if t else 0) + (getattr(j, "retries", 0) if j is not None else 0),
            "journal_oldest_append_age_ms": t.oldest_append_age_ms() if t else 0,
            "journal_append_stall_ms": t.stall_ms if t else 0,
            "journal_append_stalls": t.stalls if t else 0,
            "journal_max_entry_bytes": (getattr(j, "max_entry_bytes", 0) or 0) if j is not None else 0,
            "journal_sealed_batches": t.sealed_batches if t else 0,
            "journal_coalesced_batches": t.coalesced_batches if t else 0,
            "journal_part_entries": t.part_entries if t else 0,
            "journal_appends_in_flight": t.in_flight if t else 0,
            "journal_max_appends_in_flight": t.max_in_flight if t else 0,
            "journal_append_window": t.window if t else 0,
            "journal_append_window_shrinks": t.window_shrinks if t else 0,
            "journal_append_window_grows": t.window_grows if t else 0,
            "durability_read_waits": t.read_waits if t else 0,
            "journal_reloads": srv.journal_reloads,
            **({"shard_settings_revision": node.shard_settings.revision} if node is not None else {})}


def _shown(cmd) -> str:
    """A command's name in INFO: its fullname, a module command's as the module declared it (cmdstat_BF.ADD)."""
    return cmd.display


def _section_commandstats(srv):
    from ..commands import registry
    out = {}
    for c in registry.every_command():
        if c.calls or c.rejected_calls or c.failed_calls:
            per = c.usec / c.calls if c.calls else 0
            out["cmdstat_" + _shown(c)] = ("calls=%d,usec=%d,usec_per_call=%.2f,rejected_calls=%d,"
                                            "failed_calls=%d" % (c.calls, c.usec, per, c.rejected_calls,
                                                                 c.failed_calls))
    return out




def _percentile_usec(buckets, total, pct) -> int:
    """The upper bound (µs) of the LATENCY HISTOGRAM bucket (powers of two, which the compiled core fills
    too) that holds the pct-th percentile call: Valkey's hdr_value_at_percentile at that resolution."""
    want = max(1, int(pct / 100 * total + 0.5))      # hdr_value_at_percentile's count
    seen = 0
    for b, n in enumerate(buckets):
        seen += n
        if seen >= want:
            return 1 << b
    return 1 << (len(buckets) - 1)


def _section_latencystats(srv):
    from ..commands import registry
    out = {}
    for c in registry.every_command():
        buckets = c.latency
        total = sum(buckets)
        if total:
            out["latency_percentiles_usec_" + _shown(c)] = ",".join(
                "p%s=%.3f" % (("%g" % p), _percentile_usec(buckets, total, p)) for p in LATENCY_PERCENTILES)
    return out


def _section_errorstats(srv):
    return {"errorstat_" + k: "count=%d" % v for k, v in srv.pipeline.error_counts.items()}


def _section_modules(srv):
    """genModulesInfoString: one `module:` line per module durakv serves natively (commands/specs.py MODULES)."""
    return [("module", "name=%s,ver=%d,api=1,filters=0,usedby=[],using=[],options=[%s]"
             % (m["name"], m["ver"], "|".join(m.get("options", ())))) for m in MODULES]


def _json_sections(srv):
    """valkey-json's Module_Info: json_core_metrics, the bytes and the number of documents (counted when
    asked: a walk of the keyspace)."""
    total = count = 0
    for db in srv.keyspace.dbs:
        for value in db.data.values():
            if type(value) is JsonDoc:
                total += value.size
                count += 1
    return [("json_core_metrics", {"json_total_memory_bytes": total, "json_num_documents": count})]


def _bf_sections(srv):
    """valkey-bloom's INFO handler (metrics.rs): its sections and fields, prefixed with the module's name as
    ValkeyModule_InfoAddSection / InfoAddField* do. The totals are over every live Bloom filter."""
    objects, filters, items, capacity, memory = _bloom.totals()
    return [("bf_bloom_core_metrics", {"bf_bloom_total_memory_bytes": memory, "bf_bloom_num_objects": objects,
                                       "bf_bloom_num_filters_across_objects": filters,
                                       "bf_bloom_num_items_across_objects": items,
                                       "bf_bloom_capacity_across_objects": capacity}),
            ("bf_bloom_defrag_metrics", {"bf_bloom_defrag_hits": 0, "bf_bloom_defrag_misses": 0})]


# module name -> its info callback: [(section name, fields)], shown for INFO everything, modules, the module's
# name or one of its sections' names (modulesCollectInfo)
_MODULE_INFO = {"json": _json_sections, "bf": _bf_sections}


_SECTIONS = {"server": _section_server, "clients": _section_clients, "memory": _section_memory,
             "persistence": _section_persistence, "stats": _section_stats, "replication": _section_replication,
             "cpu": _section_cpu, "keyspace": _section_keyspace, "durability": _section_durability,
             "commandstats": _section_commandstats, "errorstats": _section_errorstats,
             "cluster": _section_cluster, "latencystats": _section_latencystats, "modules": _section_modules}


def render_info(srv, requested):
    names = [s.lower() for s in requested] or ["default"]
    wanted = []
    for n in names:
        if n == "default":
            wanted += DEFAULT_SECTIONS
        elif n in ("all", "everything"):
            wanted += ALL_SECTIONS
        elif n == "module_list":
            wanted.append("modules")
        elif n in _SECTIONS:
            wanted.append(n)
    seen = set()
    parts = []
    for n in wanted:
        if n in seen:
            continue
        seen.add(n)
        parts.append(_render("# " + n.capitalize(), _SECTIONS[n](srv)))
    every_module = "everything" in names or "modules" in names
    other = [n for n in names if n not in _SECTIONS and n not in ("default", "all", "everything", "module_list")]
    for module, sections in _MODULE_INFO.items():
        if every_module or module in names:
            parts += [_render("# " + title, fields) for title, fields in sections(srv)]
        elif other:
            parts += [_render("# " + title, fields) for title, fields in sections(srv) if title in other]
    return ("\r\n\r\n".join(parts) + "\r\n").encode() if parts else b""


def _render(header, fields):
    """A section: its header, then `field:value` lines (fields: a dict, or (field, value) pairs when a field
    repeats, as `module:` does)."""
    pairs = fields.items() if isinstance(fields, dict) else fields
    return "\r\n".join([header] + ["%s:%s" % (k, v) for k, v in pairs])
