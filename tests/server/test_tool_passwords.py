"""The tools' passwords. `durakv import`/`migrate`/`verify`/`bench` took a password only on their command line,
where `ps` shows it to every user of the machine (the operator's own `durakv cluster` and `backup` already read
--pass-file and DURAKV_AUTH); now each takes --pass-file (and the target's from DURAKV_AUTH). A password that
starts with '-' works: CI of stop 44 failed when a locked cluster's random password (token_urlsafe: one in 64
starts with '-') was passed as `durakv migrate --password PW`, and argparse stopped with "argument --password:
expected one argument". Passwords durakv makes no longer start with '-'. Real servers, real tool processes."""

import os

import valkey

from conftest import durakv_cli

TARGET_PW = "-target-pass-starts-with-a-dash"
SOURCE_PW = "-source-pass-starts-with-a-dash"


def _private(path, text):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text + "\n")
    return str(path)


def test_import_and_migrate_take_passwords_from_files_and_the_environment(server_factory, redis_server, tmp_path):
    srv = server_factory("--requirepass", TARGET_PW, password=TARGET_PW)
    target_file = _private(tmp_path / "target.pass", TARGET_PW)
    source_file = _private(tmp_path / "source.pass", SOURCE_PW)
    port, src = redis_server()
    src.mset({f"k{i}": f"v{i}" for i in range(50)})
    src.save()
    src.config_set("requirepass", SOURCE_PW)
    with valkey.Valkey(host="127.0.0.1", port=port, password=SOURCE_PW) as s:
        rdb = os.path.join(s.config_get("dir")["dir"], s.config_get("dbfilename")["dbfilename"])

    r = durakv_cli("import", rdb, "--target", f"127.0.0.1:{srv.port}", "--pass-file", target_file, "--quiet")
    assert r.returncode == 0, r.stderr + r.stdout
    assert TARGET_PW not in r.stdout + r.stderr
    with srv.client(password=TARGET_PW) as c:
        assert c.dbsize() == 50 and c.get("k7") == b"v7"
        c.flushall()

    # the target's password from DURAKV_AUTH, the source's from its file; a streamed write arrives too
    with valkey.Valkey(host="127.0.0.1", port=port, password=SOURCE_PW) as s:
        s.set("after-save", "streamed")
    r = durakv_cli("migrate", "--source", f"127.0.0.1:{port}", "--source-pass-file", source_file,
                   "--target", f"127.0.0.1:{srv.port}", "--cutover", "--verify", "--quiet",
                   env={"DURAKV_AUTH": TARGET_PW}, timeout_s=120)
    assert r.returncode == 0, r.stderr + r.stdout
    assert SOURCE_PW not in r.stdout + r.stderr and TARGET_PW not in r.stdout + r.stderr
    with srv.client(password=TARGET_PW) as c:
        assert c.dbsize() == 51 and c.get("after-save") == b"streamed"

    # on the command line a password that starts with '-' is still one (as `--pass=PW` always was)
    with srv.client(password=TARGET_PW) as c:
        c.flushall()
    r = durakv_cli("import", rdb, "--target", f"127.0.0.1:{srv.port}", "--pass", TARGET_PW, "--quiet")
    assert r.returncode != 0 and "expected one argument" in r.stderr, "argparse: a leading '-' is an option"
    r = durakv_cli("import", rdb, "--target", f"127.0.0.1:{srv.port}", f"--pass={TARGET_PW}", "--quiet")
    assert r.returncode == 0, r.stderr + r.stdout

    # a file that cannot be read, or holds nothing, is a clear error, not a traceback or an unauthenticated try
    for bad in (tmp_path / "missing.pass", _private(tmp_path / "empty.pass", "")):
        r = durakv_cli("import", rdb, "--target", f"127.0.0.1:{srv.port}", "--pass-file", bad, "--quiet")
        assert r.returncode == 2, r.stderr + r.stdout
        assert "password file" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_bench_reads_its_password_file(server_factory, tmp_path):
    srv = server_factory("--requirepass", TARGET_PW, password=TARGET_PW)
    pw_file = _private(tmp_path / "target.pass", TARGET_PW)
    r = durakv_cli("bench", "-p", srv.port, "--pass-file", pw_file, "--duration", 1, "--clients", 2,
                   "--key-maximum", 10, "--ratio", "1:0", "--json", "-q", timeout_s=60)
    assert r.returncode == 0, r.stderr + r.stdout
    with srv.client(password=TARGET_PW) as c:
        assert c.dbsize() > 0, "the bench's SETs were accepted"
