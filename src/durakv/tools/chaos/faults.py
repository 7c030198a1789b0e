"""Faults on a local cluster (`durakv cluster up`), each with an automatic heal, read from and written to its
manifest. The nemesis is apart from the clients (Jepsen): it knows processes and the network, never a key.

    nem = Nemesis(LocalCluster.load(dir))
    nem.az_power("az1", duration_s=30)      # SIGKILL every process of az1 at once, keep it down, restart it
    nem.kill("0-0", restart_after_s=5)      # SIGKILL one process; restart it from the manifest after 5 s
    nem.pause("0-0", duration_s=5)          # SIGSTOP, SIGCONT after 5 s
    nem.partition("az1", duration_s=20)     # cut az1 off the other AZs both ways (partitionable clusters)
    nem.failover(shard=0)                   # planned: CLUSTER FAILOVER on the most caught-up replica

Names may be `primary` (the primary of --shard), `replica` (its most caught-up replica) or `stream-leader`
(the NATS server leading the shard's journal stream); an AZ may be `primary` (the AZ of the primary) or
`stream-leader`. Every step is an event (tools/chaos/events.py): printed with a timestamp and appended to
DIR/chaos/events.jsonl.
"""

import json
import signal
import sys
import time

from ...cluster.local import LocalCluster
from ...cluster.manifest import ClusterError
from ...cluster.nats_procs import http_json
from ...cluster.processes import wait_for
from ...cluster.respclient import APPLIED_FIELDS, MASTER_ROLES, RespError, first_field
from .events import ERROR, RECOVERED, START, STEP, STOP, EventLog, events_path

FAULTS = ("az-power", "kill", "pause", "partition", "failover")


class FaultError(RuntimeError):
    pass


def stream_of(shard) -> str:
    return f"DURAKV_SHARD_{shard}"


class Nemesis:
    def __init__(self, cluster: LocalCluster, out=sys.stdout, log_path=None, sleep=time.sleep):
        self.cluster = cluster
        self.out = out
        self.log_path = log_path if log_path is not None else events_path(cluster.dir)
        self.sleep = sleep

    def _log(self, fault) -> EventLog:
        return EventLog(self.log_path, fault, out=self.out)

    # -- naming ------------------------------------------------------------------------------------------------
    def resolve_node(self, name, shard=0) -> str:
        c = self.cluster.reload()
        if name == "primary":
            p = c.primary(shard)
            if p is None:
                raise FaultError(f"shard {shard} has no primary now")
            return p.name
        if name == "replica":
            best = None
            for p in c.replicas(shard):
                try:
                    info = p.info("replication", timeout_s=1.0).get("replication", {})
                except (OSError, RespError):
                    continue
                applied = first_field(info, APPLIED_FIELDS, 0) or 0
                if best is None or applied > best[0]:
                    best = (applied, p.name)
            if best is None:
                raise FaultError(f"shard {shard} has no live replica")
            return best[1]
        if name == "stream-leader":
            leader = c.nats_view.leader_of_stream(stream_of(shard))
            if leader is None:
                raise FaultError(f"the journal stream of shard {shard} has no leader now")
            return leader
        c.get(name)   # KeyError with the manifest's path when unknown
        return name

    def resolve_az(self, az, shard=0) -> str:
        if az in ("primary", "stream-leader"):
            return self.cluster.get(self.resolve_node(az, shard)).az
        if not self.cluster.az_processes(az):
            raise FaultError(f"no process in AZ {az!r}")
        return az

    # -- the faults --------------------------------------------------------------------------------------------
    def az_power(self, az, duration_s=30.0, shard=0, recover_timeout_s=120.0) -> dict:
        """SIGKILL every process of the AZ (durakv and NATS) at once, keep them down for duration_s, then
        start them again from the manifest and wait until they serve (the durakv nodes rejoin as replicas)."""
        az = self.resolve_az(az, shard)
        log = self._log("az-power")
        procs = self.cluster.select(az=az)
        names = [p.name for p in procs]
        roles = {p.name: p.role(timeout_s=0.5) for p in procs if p.kind == "durakv"}
        t0 = time.monotonic()
        at = log.now()     # the fault's time is when the signals go out, not when the deaths are confirmed
        out = self.cluster.stop_nodes(names, sig=signal.SIGKILL)
        log.emit(START, f"{az}: power cut, SIGKILL "
                        f"{', '.join(f'{n} ({roles.get(n) or p.kind})' for n, p in zip(names, procs))}",
                 at=at, az=az, processes=names, roles=roles, outcome=out)
        try:
            self._hold(log, duration_s, f"{az} stays down")
        finally:
            log.emit(STOP, f"{az}: power back after {time.monotonic() - t0:.1f}s; starting {', '.join(names)} "
                           f"from the manifest", az=az)
            result = self._restart(log, names, recover_timeout_s)
        return {"fault": "az-power", "az": az, "processes": names, "roles_before": roles,
                "down_s": round(time.monotonic() - t0, 3), **result}

    def kill(self, node, restart_after_s=None, shard=0, recover_timeout_s=120.0) -> dict:
        """SIGKILL one process. With restart_after_s, start it again from the manifest after that long (the heal);
        without, it stays down (`durakv cluster start-node` brings it back)."""
        name = self.resolve_node(node, shard)
        log = self._log("kill")
        p = self.cluster.get(name)
        role = p.role(timeout_s=0.5) if p.kind == "durakv" else p.kind
        t0 = time.monotonic()
        at = log.now()
        self.cluster.stop_nodes([name], sig=signal.SIGKILL)
        log.emit(START, f"SIGKILL {name} ({role}, {p.az})", at=at, node=name, role=role, az=p.az)
        result = {"fault": "kill", "node": name, "role_before": role, "az": p.az}
        if restart_after_s is None:
            log.emit(STOP, f"{name} stays down (no --restart-after)", node=name, restarted=False)
            return result
        try:
            self._hold(log, restart_after_s, f"{name} stays down")
        finally:
            log.emit(STOP, f"restarting {name} from the manifest after {time.monotonic() - t0:.1f}s", node=name)
            result.update(self._restart(log, [name], recover_timeout_s))
        result["down_s"] = round(time.monotonic() - t0, 3)
        return result

    def pause(self, node, duration_s=5.0, shard=0) -> dict:
        """SIGSTOP one process for duration_s, then SIGCONT (a paused primary past its lease must stop serving,
        and when it wakes up it must learn it was replaced)."""
        name = self.resolve_node(node, shard)
        log = self._log("pause")
        p = self.cluster.get(name)
        role = p.role(timeout_s=0.5) if p.kind == "durakv" else p.kind
        at = log.now()
        if not self.cluster.pause(name):
            raise FaultError(f"{name} is not running")
        log.emit(START, f"SIGSTOP {name} ({role}, {p.az}) for {duration_s:g}s", at=at, node=name, role=role,
                 az=p.az)
        t0 = time.monotonic()
        try:
            self._hold(log, duration_s, f"{name} stays paused")
        finally:
            self.cluster.resume(name)
            log.emit(STOP, f"SIGCONT {name} after {time.monotonic() - t0:.1f}s", node=name)
        role_after = self._wait_role(name) if p.kind == "durakv" else p.kind
        log.emit(RECOVERED, f"{name} answers again as {role_after}", node=name, role=role_after)
        return {"fault": "pause", "node": name, "role_before": role, "role_after": role_after, "az": p.az,
                "paused_s": round(time.monotonic() - t0, 3)}

    def partition(self, az, duration_s=20.0, shard=0, heal_after_failover_s=None) -> dict:
        """Cut the AZ off the other AZs both ways for duration_s (NATS routes, durakv-to-NATS connections), then
        heal. Needs a cluster started with --partitionable (the partition proxy). Clients outside the AZs still
        reach every node, as Jepsen's control node does. heal_after_failover_s: heal that many seconds after
        another node of `shard` serves as its primary (a lease of its own), duration_s being then the longest
        cut: the fault lasts as long as the failover takes on this machine, not a guess of it."""
        az = self.resolve_az(az, shard)
        log = self._log("partition")
        before = {p.name: p.role(timeout_s=0.5) for p in self.cluster.nodes}
        until = None
        if heal_after_failover_s is not None:
            old = {n for n, r in before.items() if r in MASTER_ROLES}
            others = [p for p in self.cluster.shard_nodes(shard) if p.name not in old]
            until = (lambda: self._serving_primary(others), heal_after_failover_s)
        at = log.now()
        groups = self.cluster.proxy_control(f"CUT {az}")
        t0 = time.monotonic()
        log.emit(START, f"{az} cut off the other AZs ({' | '.join(','.join(g) for g in json.loads(groups))}); "
                        f"before: {_roles(before)}", at=at, az=az,
                 groups=groups, roles=before)
        try:
            self._hold(log, duration_s, f"{az} stays cut off", roles=True, until=until)
        finally:
            self.cluster.proxy_control("HEAL")
            log.emit(STOP, f"network healed after {time.monotonic() - t0:.1f}s", az=az)
        return {"fault": "partition", "az": az, "cut_s": round(time.monotonic() - t0, 3), "roles_before": before}

    def failover(self, shard=0, to=None, timeout_s=30.0) -> dict:
        """Planned failover: CLUSTER FAILOVER on a replica (the most caught-up one unless `to`)."""
        log = self._log("failover")
        old = self.cluster.primary(shard)
        log.emit(START, f"shard {shard}: planned failover from {old.name if old else '-'}", shard=shard,
                 old=old.name if old else None)
        try:
            node, seconds = self.cluster.failover(shard=shard, to=to, timeout_s=timeout_s)
        except (RespError, TimeoutError, ClusterError) as exc:
            log.emit(ERROR, f"shard {shard}: failover not completed: {exc}", shard=shard)
            log.emit(STOP, f"shard {shard}: failover abandoned", shard=shard)
            raise FaultError(str(exc)) from exc
        log.emit(STOP, f"shard {shard}: {node.name} ({node.az}) is the primary after {seconds * 1000:.0f} ms",
                 shard=shard, new=node.name, seconds=round(seconds, 4))
        return {"fault": "failover", "shard": shard, "old": old.name if old else None, "new": node.name,
                "seconds": round(seconds, 4)}

    def heal(self, timeout_s=120.0) -> dict:
        """Undo whatever a fault left behind: heal the network, SIGCONT paused processes, start stopped ones."""
        log = self._log("heal")
        c = self.cluster.reload()
        done = {}
        if c.proxy is not None and c.live_pid(c.proxy):
            c.proxy_control("HEAL")
            done["network"] = "healed"
        for p in c.processes:
            if p.state == "paused":
                c.resume(p.name)
                done[p.name] = "resumed"
        stopped = [p.name for p in c.processes if not c.live_pid(p)]
        if stopped:
            done.update(c.start_nodes(stopped, wait=True, timeout_s=timeout_s))
        log.emit(STOP, "healed: " + (", ".join(f"{k} {v}" for k, v in done.items()) or "nothing to do"), **done)
        return done

    # -- helpers -----------------------------------------------------------------------------------------------
    def _hold(self, log, duration_s, what, roles=False, until=None):
        """Waits out a fault, with a progress line every few seconds (the primary of each shard, if asked).
        until: (condition, after_s): the fault ends after_s seconds after condition() first names something
        (polled every 0.2 s), or at duration_s, whichever comes first."""
        now = time.monotonic()
        end = now + max(0.0, duration_s)
        step = 5.0
        next_line = now + step
        while True:
            now = time.monotonic()
            if now >= end:
                return
            if until is not None:
                seen = until[0]()
                if seen:
                    end = min(end, now + max(0.0, until[1]))
                    log.emit(STEP, f"{seen}; healing in {end - now:.1f}s")
                    until = None
                    continue
            self.sleep(min(0.2 if until is not None else step, end - now, max(0.01, next_line - now)))
            now = time.monotonic()
            left = end - now
            if now >= next_line and left > 0.5:
                next_line = now + step
                extra = ""
                if roles:
                    extra = "; " + self._primaries_line()
                log.emit(STEP, f"{what}, {left:.0f}s left{extra}")

    def _serving_primary(self, candidates) -> str:
        """'NAME serves as primary' for the first of candidates that reports master with a valid lease, else ''."""
        for p in candidates:
            try:
                info = p.info("replication", timeout_s=0.3).get("replication", {})
            except (OSError, RespError):
                continue
            if info.get("role") in MASTER_ROLES and info.get("lease_valid_ms", 1):
                return f"{p.name} serves as primary"
        return ""

    def _primaries_line(self) -> str:
        """Which nodes say they are primary, and whether their lease is valid (an isolated one keeps saying so)."""
        out = []
        for p in self.cluster.nodes:
            try:
                info = p.info("replication", timeout_s=0.3).get("replication", {})
            except (OSError, RespError):
                continue
            if info.get("role") in MASTER_ROLES:
                out.append(p.name + ("" if info.get("lease_valid_ms", 1) else " (lease expired)"))
        return "reporting master: " + (", ".join(out) or "none")

    def _restart(self, log, names, timeout_s) -> dict:
        t0 = time.monotonic()
        try:
            self.cluster.start_nodes(names, wait=True, timeout_s=timeout_s)
        except Exception as exc:  # noqa: BLE001 - reported, and the caller's error
            log.emit(ERROR, f"restart of {', '.join(names)} failed: {exc}", processes=names)
            raise
        roles = {}
        for n in names:
            p = self.cluster.get(n)
            if p.kind == "durakv":
                roles[n] = self._wait_role(n)
        seconds = time.monotonic() - t0
        log.emit(RECOVERED, f"{', '.join(names)} serve again after {seconds:.2f}s"
                 + (f" ({_roles(roles)})" if roles else ""), processes=names, roles=roles,
                 seconds=round(seconds, 3))
        return {"restart_s": round(seconds, 3), "roles_after": roles}

    def _wait_role(self, name, timeout_s=30.0):
        """The node's role once it is settled: a replica, or a primary holding a valid lease (a primary woken
        from a pause first says master with an expired lease, until it learns it was replaced)."""
        p = self.cluster.get(name)

        def settled():
            try:
                info = p.info("replication", timeout_s=0.5).get("replication", {})
            except (OSError, RespError):
                return None
            role = info.get("role")
            if role in MASTER_ROLES and not info.get("lease_valid_ms", 1):
                return None
            return role
        try:
            return wait_for(settled, timeout_s, f"{name} to answer", interval_s=0.05)
        except TimeoutError:
            return None


def _roles(roles) -> str:
    return ", ".join(f"{n} {r or 'not answering'}" for n, r in roles.items())


def wait_healthy(cluster: LocalCluster, timeout_s=60.0, say=None) -> float:
    """Polls until the cluster is whole again: every process of the manifest running, every NATS server healthy
    (/healthz), one primary per shard with a valid lease, every replica linked and caught up with what its
    primary had applied when the check began. Returns the seconds it took; TimeoutError says what is missing."""
    t0 = time.monotonic()
    state = {"missing": "?"}
    targets = {}

    def healthy():
        c = cluster.reload()
        for p in c.processes:
            live = c.live_pid(p)
            if not live:
                state["missing"] = f"{p.name} is not running"
                return False
        for p in c.nats:
            status, _ = http_json(p.ports["monitor"], "/healthz")
            if status != 200:
                state["missing"] = f"{p.name} is not healthy (/healthz {status})"
                return False
        for shard in c.shards:
            infos = {}
            for p in c.shard_nodes(shard):
                try:
                    infos[p.name] = p.info("replication", timeout_s=1.0).get("replication", {})
                except (OSError, RespError) as exc:
                    state["missing"] = f"{p.name}: {exc}"
                    return False
            masters = [n for n, i in infos.items() if i.get("role") in MASTER_ROLES]
            if len(masters) != 1 or not infos[masters[0]].get("lease_valid_ms", 1):
                state["missing"] = f"shard {shard}: primaries {masters}"
                return False
            target = targets.setdefault(shard, first_field(infos[masters[0]], APPLIED_FIELDS, 0) or 0)
            for n, i in infos.items():
                if n in masters:
                    continue
                applied = first_field(i, APPLIED_FIELDS, 0) or 0
                if i.get("master_link_status", "up") != "up" or applied < target:
                    state["missing"] = f"{n} is behind ({applied} < {target}, link {i.get('master_link_status')})"
                    return False
        return True
    try:
        wait_for(healthy, timeout_s, "the cluster to be healthy", interval_s=0.1)
    except TimeoutError as exc:
        raise TimeoutError(f"{exc}: {state['missing']}") from None
    seconds = time.monotonic() - t0
    if say:
        say(f"cluster healthy ({seconds:.2f}s)")
    return seconds
