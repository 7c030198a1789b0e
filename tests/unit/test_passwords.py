"""Passwords durakv makes never start with '-' (operators pass them after an option, and argparse takes a leading
'-' for the next option: CI of stop 44 failed on one), and the one reader of --pass/--pass-file/DURAKV_AUTH."""

import argparse
import os
import stat

import pytest

from durakv.cluster import secrets
from durakv.cluster.passwords import (PASS_FILE_MAX_BYTES, SecretsError, add_password_options, new_password,
                                      password_from)
from durakv.cluster.secrets import ClusterSecrets


def _tokens(*values):
    queue = list(values)
    return lambda nbytes: queue.pop(0)


def test_new_password_draws_again_when_one_starts_with_a_dash():
    assert new_password(24, token=_tokens("-abc", "--x", "ok-then")) == "ok-then"


def test_a_cluster_secrets_directory_never_holds_a_password_that_starts_with_a_dash(tmp_path, monkeypatch):
    drawn = iter(["-route", "route-ok", "-resp", "resp-ok"])
    monkeypatch.setattr(secrets._random, "token_urlsafe", lambda nbytes=None: next(drawn))
    s = ClusterSecrets.init(tmp_path / "secrets")
    with open(os.path.join(s.dir, "route.pass")) as f:
        assert f.read() == "route-ok\n"
    assert s.resp_password == "resp-ok"
    assert stat.S_IMODE(os.stat(os.path.join(s.dir, "resp.pass")).st_mode) == 0o600


def _parse(argv, prefix=""):
    p = argparse.ArgumentParser()
    add_password_options(p, prefix, aliases=() if prefix else ("-a",))
    return p.parse_args(argv)


def test_password_from_the_option_the_file_then_the_environment(tmp_path, monkeypatch):
    f = tmp_path / "pw"
    f.write_text("from-file\nsecond line ignored\n")
    monkeypatch.setenv("DURAKV_AUTH", "from-env")
    assert password_from(_parse(["--pass=-dash", "--pass-file", str(f)])) == "-dash"
    assert password_from(_parse(["-a", "short"])) == "short"
    assert password_from(_parse(["--password", "long-name"])) == "long-name"
    assert password_from(_parse(["--pass-file", str(f)])) == "from-file"
    assert password_from(_parse([])) == "from-env"
    # a prefixed password (migrate's --source-*) never falls back to the target's environment variable
    assert password_from(_parse([], "source_"), "source_") is None
    assert password_from(_parse(["--source-pass-file", str(f)], "source_"), "source_") == "from-file"
    monkeypatch.delenv("DURAKV_AUTH")
    assert password_from(_parse([])) is None


def test_a_bad_password_file_is_a_clear_error(tmp_path):
    big = tmp_path / "big"
    big.write_bytes(b"x" * (PASS_FILE_MAX_BYTES + 1))
    empty = tmp_path / "empty"
    empty.write_text("\n")
    for path, words in ((tmp_path / "missing", "cannot read"), (big, "over"), (empty, "holds no password")):
        with pytest.raises(SecretsError, match=words):
            password_from(_parse(["--pass-file", str(path)]))
