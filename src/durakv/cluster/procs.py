"""Process control of a local cluster: spawn, signal, stop, restart and adopt its processes by pid and port.

A process is known by its manifest pid (+ start time) and, when that is dead, by the owner of its port that
runs its program (a node restarted by hand): `live_pid`, `orphan`. A LocalCluster holds one as
`cluster.launcher` (cluster/local.py).
"""

import os
import signal
import time

from .manifest import ClusterError, Proc
from .nats_procs import http_json, nats_env
from .processes import ProcessError, pid_alive, pid_state, process_start_time, signal_pid, spawn, stop_many, wait_for
from .portowner import cmdline, port_owners, ports_owners


def package_env():
    """The environment for child `python -m durakv`: this durakv importable even when not pip-installed."""
    env = dict(os.environ)
    src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if src not in parts:
        env["PYTHONPATH"] = os.pathsep.join([src] + parts)
    return env


class ProcessControl:
    """The process launcher of a LocalCluster: `cluster.launcher`. Signals, stops, starts, restarts, adoption of
    hand-started ones.

    Owns no state of its own: every process's pid, start time and stop time are in the cluster's manifest, which
    it writes under the manifest's lock. Handed the cluster (its manifest, views, lock, save and reload) and its
    Readiness (a start waits until the started nodes serve). Offers `spawn(p)`, `kill`, `pause`, `resume`,
    `stop`, `restart`, `down`, `live_pid`, `orphan`, `is_this_process`, `select`, `stop_nodes`, `start_nodes`,
    `restart_nodes`."""

    def __init__(self, cluster, readiness):
        self.cluster = cluster
        self.readiness = readiness

    def spawn(self, p):
        """Starts p from its manifest argv, detached, and records its pid (the caller saves the manifest)."""
        env = None
        if p.kind in ("durakv", "proxy"):
            env = package_env()
            env.update(self.cluster.manifest.get("env") or {})
        elif p.kind == "nats":
            env = nats_env(p.entry.get("go_procs"))     # (absent from a manifest written before it: None)
        p.entry["pid"], p.entry["start_time"] = spawn(p.argv, p.log, env=env)
        p.entry.pop("stopped_at", None)

    def kill(self, name, sig=signal.SIGKILL) -> bool:
        p = self.cluster.reload().get(name)
        return signal_pid(p.pid, sig, p.start_time)

    def pause(self, name, wait=True) -> bool:
        """SIGSTOP; with wait, returns once the kernel shows the process stopped."""
        return self._signal_and_wait(name, signal.SIGSTOP, "paused" if wait else None)

    def resume(self, name, wait=True) -> bool:
        return self._signal_and_wait(name, signal.SIGCONT, "running" if wait else None)

    def _signal_and_wait(self, name, sig, state):
        if not self.kill(name, sig):
            return False
        if state:
            p = self.cluster.get(name)
            wait_for(lambda: p.state in (state, "dead"), 5.0, f"{name} to be {state}", interval_s=0.005)
        return True

    def stop(self, name, timeout_s=10.0) -> str:
        p = self.cluster.reload().get(name)
        return stop_many({name: (p.pid, p.start_time)}, timeout_s)[name]

    def restart(self, name, wait=True, timeout_s=30.0) -> Proc:
        """Start the process again with its recorded argv (stopping it first if it still runs)."""
        self.restart_nodes([name], wait=wait, timeout_s=timeout_s)
        return self.cluster.reload().get(name)

    def _wait_nats_node(self, p, timeout_s):
        def ready():
            if not p.alive:
                raise ProcessError(f"{p.name} exited:\n{p.log_tail()}")
            status, _ = http_json(p.ports["monitor"], "/healthz")
            return status == 200
        wait_for(ready, timeout_s, f"{p.name} to be healthy")

    def down(self, timeout_s=10.0) -> dict:
        """Stop every process of the manifest, by its pid and by the owner of its ports (a node restarted by
        hand has another pid): durakv nodes first, then NATS, then the partition proxy; already-dead ones are
        fine. The manifest then shows every process stopped."""
        with self.cluster.locked() as c:
            out = {}
            for group in (c.nodes, c.nats, [p for p in c.processes if p.kind == "proxy"]):
                out.update(self._stop_procs(group, timeout_s))
            c.save()
        return out

    def is_this_process(self, p, pid) -> bool:
        """Whether pid runs p's program: a durakv node on p's data directory, NATS with p's config file, the
        proxy with its config (so that a port taken by some other program is never mistaken for p)."""
        argv = cmdline(pid)
        if not argv:
            return False
        if p.kind == "durakv":
            return "durakv" in " ".join(argv) and any(a == "--dir" and b == p.dir for a, b in zip(argv, argv[1:]))
        mark = p.entry.get("config")
        return bool(mark) and mark in argv

    def orphan(self, p):
        """(pid, start_time) of a live process that serves p's ports and runs p's program although it is not
        the manifest's pid (restarted by hand from its argv), else None."""
        return self._orphans([p]).get(p.name)

    def _orphans(self, procs) -> dict:
        """orphan() of several processes with one pass over /proc: {name: (pid, start_time)}."""
        first = {}
        for p in procs:
            ports = [v for v in p.ports.values() if isinstance(v, int)]
            if ports:
                first[p.name] = ports[0]   # the client port (the proxy: its control port)
        owners = ports_owners(set(first.values()), expected=[p.pid for p in procs]) if first else {}
        out = {}
        for p in procs:
            for pid in owners.get(first.get(p.name), []):
                if pid != p.pid and self.is_this_process(p, pid):
                    st = process_start_time(pid)
                    if pid_state(pid, st) != "dead":
                        out[p.name] = (pid, st)
                        break
        return out

    def live_pid(self, p):
        """(pid, start_time, adopted) of the live process that is p: the manifest's pid, else a process
        serving p's port as p (adopted True); None when p is not running at all."""
        if p.pid and pid_state(p.pid, p.start_time) != "dead":
            return p.pid, p.start_time, False
        found = self.orphan(p)
        return (found[0], found[1], True) if found else None

    def _stop_procs(self, procs, timeout_s, sig=None) -> dict:
        """Stops procs by manifest pid and by port owner (SIGTERM then SIGKILL, or `sig` at once); marks them
        stopped in the (already locked and reloaded) manifest. Returns {name: outcome}."""
        targets = {p.name: (p.pid, p.start_time) for p in procs if p.pid}
        out = {}
        if sig is not None:
            # A power cut: the manifest's processes get the signal before anything else is looked up.
            for key, (pid, st) in targets.items():
                out[key] = "killed" if signal_pid(pid, sig, st) else "already-dead"
        orphans = {f"{name} (pid {found[0]}, not in the manifest)": found
                   for name, found in self._orphans(procs).items()}
        if sig is None:
            targets.update(orphans)
            out = stop_many(targets, timeout_s)
        else:
            for key, (pid, st) in orphans.items():
                out[key] = "killed" if signal_pid(pid, sig, st) else "already-dead"
            targets.update(orphans)
            for key, (pid, st) in targets.items():
                if out[key] == "killed":
                    wait_for(lambda pid=pid, st=st: not pid_alive(pid, st), 10.0, f"pid {pid} to die")
        for p in procs:
            if p.name not in out and not any(k.startswith(p.name + " (pid") for k in out):
                out[p.name] = "already-dead"
        now = time.time()
        for p in procs:
            if p.pid:
                p.entry["stopped_at"] = now
            p.entry["pid"], p.entry["start_time"] = None, None
        return out

    def select(self, node=None, az=None) -> list:
        """The processes `--node NAME` (a durakv node or a NATS server) or `--az AZ` (every process of it)
        names, NATS first."""
        if (node is None) == (az is None):
            raise ClusterError("name either a node (--node NAME) or an availability zone (--az AZ)")
        c = self.cluster
        if node is not None:
            names = [n for n in str(node).split(",") if n]
            procs = [c.get(n) for n in names]
        else:
            procs = c.az_processes(az)
            if not procs:
                raise ClusterError(f"no process in AZ {az!r} (AZs: {', '.join(sorted({str(p.az) for p in c.processes if p.az}))})")
        order = {"proxy": 0, "nats": 1, "durakv": 2}
        return sorted(procs, key=lambda p: (order.get(p.kind, 3), p.name))

    def stop_nodes(self, names, timeout_s=10.0, sig=None) -> dict:
        """Stops the named processes (durakv nodes first, then NATS) by pid and by port owner, and records them
        stopped. sig: send that signal instead of SIGTERM-then-SIGKILL (SIGKILL for a power cut)."""
        with self.cluster.locked() as c:
            procs = [c.get(n) for n in names]
            ordered = [p for p in procs if p.kind == "durakv"] + [p for p in procs if p.kind != "durakv"]
            if sig is not None:
                out = self._stop_procs(ordered, timeout_s, sig)   # all at once: a power cut has no order
            else:
                out = {}
                for kind in ("durakv", "nats", "proxy"):
                    group = [p for p in ordered if p.kind == kind]
                    if group:
                        out.update(self._stop_procs(group, timeout_s))
            c.save()
        return out

    def start_nodes(self, names, wait=True, timeout_s=60.0) -> dict:
        """Starts the named processes from their manifest argv (NATS before durakv), unless they run: a node
        restarted by hand that serves its port is adopted (its pid goes into the manifest). With wait, returns
        once every started NATS server is healthy and every durakv node answers (a node whose shard has a
        primary rejoins as a replica). Returns {name: 'started' | 'running' | 'adopted'}."""
        out = {}
        started = []
        with self.cluster.locked() as c:
            procs = [c.get(n) for n in names]
            order = {"proxy": 0, "nats": 1, "durakv": 2}
            for p in sorted(procs, key=lambda p: order.get(p.kind, 3)):
                live = self.live_pid(p)
                if live and not live[2]:
                    out[p.name] = "running"
                    continue
                if live:
                    p.entry["pid"], p.entry["start_time"] = live[0], live[1]
                    p.entry.pop("stopped_at", None)
                    out[p.name] = "adopted"
                    continue
                for port in [v for v in p.ports.values() if isinstance(v, int)][:1]:
                    holders = [pid for pid in port_owners(port)]
                    if holders:
                        raise ClusterError(f"{p.name}: port {port} is held by pid {holders[0]} "
                                           f"({' '.join(cmdline(holders[0]))[:120]}), which is not this node")
                self.spawn(p)
                started.append(p)
                out[p.name] = "started"
            c.save()
        if wait:
            for p in started:
                if p.kind == "nats":
                    self._wait_nats_node(p, timeout_s)
            nodes = [p for p in started if p.kind == "durakv"]
            if nodes:
                self.readiness.wait_ready(timeout_s, procs=nodes, single_master=False)
        return out

    def restart_nodes(self, names, wait=True, timeout_s=60.0) -> dict:
        """stop_nodes then start_nodes."""
        self.stop_nodes(names)
        return self.start_nodes(names, wait=wait, timeout_s=timeout_s)
