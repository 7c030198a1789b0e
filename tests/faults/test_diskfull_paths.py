"""A full disk's messages name the file (issue 29: "a node restarted on a full data directory exits with 'No
space left on device' and names no path"): start-up (the lock file, a node id), a journal append (the client's
MISCONF and the log), a snapshot write, CONFIG REWRITE. Each runs on a small tmpfs in a mount namespace of its
own (diskfull_util)."""

import json

from helpers.diskfull import run_in_private_tmpfs

# The child: starts servers on the tmpfs, fills it, and prints what each step answered as one JSON object.
CHILD = r'''
import json, signal, socket, time
import valkey

out = {}
data = os.path.join(MNT, "data")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def fill():
    """Takes every free byte of the tmpfs."""
    n = 0
    while True:
        try:
            with open(os.path.join(MNT, "filler%d" % n), "wb") as f:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
        except OSError:
            n += 1
            try:
                with open(os.path.join(MNT, "filler%d" % n), "wb") as f:
                    f.write(b"\0" * 4096)
                    f.flush()
            except OSError:
                return


def unfill():
    for name in os.listdir(MNT):
        if name.startswith("filler"):
            os.unlink(os.path.join(MNT, name))


def start(*args, wait=True, conf=()):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "durakv", "server", *conf, "--port", str(port), "--bind",
                             "127.0.0.1", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if not wait:
        text, _ = proc.communicate(timeout=60)
        return proc.returncode, text
    c = valkey.Valkey(port=port, socket_timeout=20)
    deadline = time.monotonic() + 30
    while True:
        try:
            c.ping()
            return proc, c
        except valkey.ConnectionError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(proc.communicate()[0])
            time.sleep(0.05)


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    return proc.communicate(timeout=60)[0]


# 1. first start on a full disk: the lock file
fill()
out["first_start"] = start("--dir", data, wait=False)
unfill()

# 2. a restart on a full data directory that must write something new there (the node id of cluster mode)
proc, c = start("--dir", data, "--durability", "sync")
c.set("k", "v")
stop(proc)
fill()
out["restart"] = start("--dir", data, "--durability", "sync", "--cluster-enabled", "yes", wait=False)
unfill()

# 3. a journal append: the client's MISCONF and the log
proc, c = start("--dir", data, "--durability", "sync", "--journal-segment-bytes", "64kb")
fill()
error = None
for i in range(100000):
    try:
        c.set("k%d" % i, "v" * 500)
    except valkey.ResponseError as exc:
        error = str(exc)
        break
out["append_error"] = error
unfill()
out["append_log"] = stop(proc)

# 4. a snapshot write (durability none: SAVE writes memory to a snapshot file) and 5. CONFIG REWRITE
conf = os.path.join(MNT, "durakv.conf")
with open(conf, "w") as f:
    f.write("# config\n")
proc, c = start("--dir", os.path.join(MNT, "none"), "--durability", "none", conf=[conf])
for i in range(200):
    c.set("s%d" % i, "v" * 1000)
c.config_set("maxmemory", "100mb")
fill()
for name, call in (("save_error", c.save), ("rewrite_error", c.config_rewrite)):
    try:
        out[name] = "OK %r" % call()
    except valkey.ResponseError as exc:
        out[name] = str(exc)
unfill()
out["none_log"] = stop(proc)
print(json.dumps(out))
'''


def test_every_disk_full_message_names_its_file(tmp_path):
    done = run_in_private_tmpfs(tmp_path, CHILD)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    mnt = str(tmp_path / "mnt")
    data = mnt + "/data"

    code, text = out["first_start"]
    assert code == 1
    assert "No space left on device: '%s/durakv.lock'" % data in text, text

    code, text = out["restart"]
    assert code == 1
    assert "No space left on device: '%s/node-id.tmp'" % data in text, text

    error = out["append_error"]
    assert error and error.startswith("MISCONF Errors writing to the journal: No space left on device (%s/journal/"
                                      % data), error
    assert "journal write of entry" in out["append_log"] and "No space left on device (%s/journal/" % data in \
        out["append_log"]

    assert out["save_error"].startswith("snapshot failed: [Errno 28] No space left on device: '%s/none/snapshots/"
                                        % mnt), out["save_error"]
    assert out["rewrite_error"] == "Rewriting config file: No space left on device (%s/durakv.conf.tmp)" % mnt, \
        out["rewrite_error"]
