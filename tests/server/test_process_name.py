"""durakv's processes carry their own name (top, ps -o comm, pidstat, process accounting), as valkey-server's do:
`durakv-server` rather than `python`, in every thread; the command line stays what it was."""

import os

import pytest

pytestmark = pytest.mark.server


def test_a_server_and_its_threads_are_named_durakv_server(server_factory):
    srv = server_factory("--durability", "sync")
    with srv.client() as c:
        c.set("k", "v")                     # the journal's writer thread has started
    with open(f"/proc/{srv.proc.pid}/comm") as f:
        assert f.read().strip() == "durakv-server"
    threads = os.listdir(f"/proc/{srv.proc.pid}/task")
    assert len(threads) > 1
    names = set()
    for tid in threads:
        with open(f"/proc/{srv.proc.pid}/task/{tid}/comm") as f:
            names.add(f.read().strip())
    # libuv names the threads of its own pool (uvloop's getaddrinfo and file work) itself
    assert names - {"libuv-worker"} == {"durakv-server"}, names
    with open(f"/proc/{srv.proc.pid}/cmdline", "rb") as f:
        argv = f.read().split(b"\0")
    assert b"durakv" in argv and b"server" in argv and b"--dir" in argv
