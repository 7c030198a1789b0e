"""Secrets out of the process's command line, as valkey-server keeps them out of its own.

valkey-server rewrites its argv with setproctitle(3) (server.c serverSetProcTitle: "{title} {listen-addr}
{server-mode}"), so `ps` and /proc/PID/cmdline stop showing `--requirepass secret` once it is up. durakv's
cluster tooling recognises its nodes by their command line (`--dir`, cluster/procs.py), so durakv keeps the
command line and blanks only the secrets in it: the value of every sensitive option (config.py `sensitive`:
requirepass, primaryauth/masterauth, primaryuser, the TLS key passwords) and the password rules (`>pw`, `<pw`,
`#hash`, `!hash`) of `--user` lines, each replaced by `(redacted)`.

The kernel reads /proc/PID/cmdline from the process's own memory, between the `arg_start` and `arg_end` addresses
it reports in /proc/self/stat (fields 48 and 49, Linux 3.5+); those bytes are the original argv strings, which
CPython copied when it started and never reads again. They are rewritten in place (same length, NUL padded, the
last byte kept NUL so the kernel still reads exactly that range). Nothing is written unless the range holds
exactly what /proc/self/cmdline showed. What this cannot hide: the command line as it was before start-up got
here (a few hundred milliseconds after exec), audit logs of the execve, and the parent's copy of the argv (a
shell history, a supervisor's unit file). A config file (`durakv server /etc/durakv.conf`) or stdin (`-`) never
puts the secret on a command line at all.
"""

import ctypes
import logging

from ..config import BY_NAME

log = logging.getLogger("durakv.server")

REDACTED = b"(redacted)"
_PASSWORD_RULE_MARKS = (b">", b"<", b"#", b"!")


def redacted_words(words):
    """The argv words with every secret replaced by REDACTED; None when there is no secret among them."""
    out = list(words)
    found = False
    option = None
    for i, word in enumerate(out):
        if word.startswith(b"--"):
            option = word[2:].decode("utf-8", "replace").lower()
            continue
        if option is None:
            continue
        if option == "user":
            # `--user alice on >pw ~*`: each word is one ACL rule; a password rule anywhere in a word hides it
            secret = any(mark in word for mark in _PASSWORD_RULE_MARKS)
        else:
            opt = BY_NAME.get(option)
            secret = opt is not None and opt.sensitive
        if secret and word:
            out[i] = REDACTED
            found = True
    return out if found else None


def _fit(words, new_words, size) -> bytes:
    """The new argument area (NUL-separated words) in at most `size` bytes: a secret shorter than REDACTED
    leaves room for it only if longer ones freed enough; where there is none it is left empty (the option
    stays, with an empty value)."""
    out = [b"" if n != o else n for n, o in zip(new_words, words)]
    room = size - (sum(map(len, out)) + len(out))
    for i, (n, o) in enumerate(zip(new_words, words)):
        if n != o and room >= len(REDACTED):
            out[i] = REDACTED
            room -= len(REDACTED)
    return b"\0".join(out) + b"\0"


def _arg_range():
    """(arg_start, arg_end) of this process, from /proc/self/stat."""
    with open("/proc/self/stat", "rb") as f:
        stat = f.read()
    # comm (field 2) may hold spaces and parentheses: the fields after it start after its last ')'
    rest = stat[stat.rindex(b")") + 2:].split()
    return int(rest[48 - 3]), int(rest[49 - 3])


def redact_process_secrets() -> int:
    """Blanks the secrets in this process's command line; returns how many arguments were hidden (0: none
    were there, or the command line could not be rewritten, which is logged)."""
    try:
        with open("/proc/self/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return 0          # not Linux: nothing this module knows how to rewrite
    words = raw.split(b"\0")
    if words and words[-1] == b"":
        words.pop()
    new_words = redacted_words(words)
    if new_words is None:
        return 0
    hidden = sum(1 for a, b in zip(words, new_words) if a != b)
    try:
        start, end = _arg_range()
        size = end - start
        if size != len(raw) or size <= 0 or ctypes.string_at(start, size) != raw:
            raise OSError("the argument area does not hold the command line")
        new = _fit(words, new_words, size)
        ctypes.memmove(start, new.ljust(size, b"\0"), size)
    except (OSError, ValueError, IndexError) as exc:
        log.warning("could not hide %d secret argument(s) from the process's command line (%s): pass them in a "
                    "config file or on stdin instead", hidden, exc)
        return 0
    return hidden
