"""`durakv verify` removes what it made for a run (issue 29: 8-178 MB left behind per run): the directory of
the cluster or standalone server it started (data, journals, NATS streams, logs, certificates, the chaos
event log), when the run passes, fails, cannot start, or is interrupted (Ctrl-C, SIGTERM); `--keep` keeps it.
Real `durakv verify` processes, real clusters; every process a run started must be gone afterwards."""

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import pytest

from conftest import ROOT, wait_until
from helpers.servers import processes_on
from helpers.waiting import default_sigint
from durakv.cluster.processes import pid_alive


def verify_cmd(*args):
    return [sys.executable, "-m", "durakv", "verify", *map(str, args)]


def run_verify(*args, timeout_s=300, env=None):
    full = dict(os.environ, PYTHONPATH=f"{ROOT}/src", **(env or {}))
    return subprocess.run(verify_cmd(*args), capture_output=True, text=True, env=full, timeout=timeout_s)


def left_in(workdir):
    """What a run left under its --workdir: every file, with its size."""
    out = []
    for root, _dirs, files in os.walk(workdir):
        for name in files:
            path = os.path.join(root, name)
            out.append((os.path.relpath(path, workdir), os.path.getsize(path)))
    return out


def test_bench_removes_its_standalone_server_and_keep_keeps_it(tmp_path):
    """verify bench's `none` row runs on a standalone server of its own: stopped and its directory removed at
    the end; with --keep, the directory stays (the server is stopped either way)."""
    work = tmp_path / "work"
    work.mkdir()
    args = ("bench", "--modes", "none", "--no-tls", "--rate", "200", "--duration", "1", "--clients", "2",
            "--key-maximum", "200", "--workdir", work)
    r = run_verify(*args)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "standalone server (pid" in r.stdout and "removed " in r.stdout, r.stdout
    assert left_in(work) == [] and os.listdir(work) == []

    r = run_verify(*args, "--keep")
    assert r.returncode == 0, r.stdout + r.stderr
    kept = os.listdir(work)
    assert len(kept) == 1 and kept[0].startswith("durakv-verify-")
    assert any(name.endswith("server.log") for name, _ in left_in(work)), left_in(work)
    assert "removed " not in r.stdout


def test_a_cluster_that_cannot_start_is_stopped_and_removed(tmp_path):
    """A node argument the server refuses: the nodes exit, the start fails (exit 2), NATS is stopped and the
    directory removed."""
    work = tmp_path / "work"
    work.mkdir()
    r = run_verify("acked-writes", "--no-tls", "--workdir", work, "--server-arg=--no-such-option",
                   "--server-arg=1", timeout_s=300)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "removed " in r.stdout, r.stdout
    assert os.listdir(work) == []


def _manifest_pids(work):
    """{name: (pid, start_time)} of every process in the run's cluster manifest (None until it has them)."""
    dirs = [d for d in os.listdir(work) if d.startswith("durakv-verify-")]
    if len(dirs) != 1:
        return None
    path = os.path.join(work, dirs[0], "cluster", "manifest.json")
    try:
        with open(path) as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        return None
    procs = {p["name"]: (p["pid"], p["start_time"]) for p in manifest["processes"]}
    if len(procs) < 6 or not all(pid for pid, _ in procs.values()):
        return None
    return procs


@pytest.mark.parametrize("sig,when", [(signal.SIGINT, "fault"), (signal.SIGTERM, "warmup")])
def test_an_interrupted_run_stops_its_cluster_and_removes_it(tmp_path, sig, when):
    """Ctrl-C while the nemesis holds a node down (it heals first), or SIGTERM while the writers run: the run
    ends, every process of its cluster is gone, and so is the directory."""
    work = tmp_path / "work"
    work.mkdir()
    warmup = "1" if when == "fault" else "120"
    proc = subprocess.Popen(verify_cmd("acked-writes", "--no-tls", "--workdir", work, "--fault", "kill",
                                       "--fault-duration", "120", "--warmup", warmup, "--writers", "2"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, PYTHONPATH=f"{ROOT}/src"), start_new_session=True,
                            preexec_fn=default_sigint)
    lines = queue.Queue()
    seen = []
    pump = threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True)
    pump.start()

    def printed(text):
        while True:
            try:
                seen.append(lines.get_nowait())
            except queue.Empty:
                break
        return any(text in line for line in seen)
    try:
        wait_until(lambda: printed("writers, fault kill after") or proc.poll() is not None, 240, interval_s=0.1,
                   what="the writers to start")
        assert proc.poll() is None, "".join(seen)
        pids = _manifest_pids(work)
        assert pids, "".join(seen)
        if when == "fault":
            wait_until(lambda: printed("start: SIGKILL"), 60, interval_s=0.1, what="the nemesis to kill the node")
        proc.send_signal(sig)
        proc.wait(180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        stop_clusters_under(work)      # this test failing must not leave the run's cluster running
    pump.join(10)
    printed("")
    out = "".join(seen)
    assert proc.returncode in (130, 128 + signal.SIGTERM), out
    assert "removed " in out, out
    alive = [name for name, (pid, start) in pids.items() if pid_alive(pid, start)]
    assert not alive, f"left running: {alive}\n{out}"
    # (a node the nemesis restarted while healing has a pid the manifest got later: none may run on the dir)
    assert not processes_on(work), processes_on(work)
    assert os.listdir(work) == [], left_in(work)


def stop_clusters_under(path):
    from durakv.cluster.local import LocalCluster
    for root, _dirs, files in os.walk(path):
        if "manifest.json" in files:
            LocalCluster.load(root).down()


